//! What device code a binary carries: the entries of the CUDA fat binaries nvcc embeds in
//! objects and shared libraries (one per translation unit), read without cuobjdump (the pinned
//! toolchain does not ship it). Used to check that a library loads on the GPUs it is meant for:
//! sm_80 SASS for an A100, compute_80 PTX for the driver to JIT-compile on an H100.
//!
//! Layout (as cuobjdump reads it; stable since CUDA 4): a fat binary is a 16-byte header
//! (`u32` magic 0xBA55ED50, `u16` version 1, `u16` header size 16, `u64` size of the entries)
//! followed by entries, each with its own header: `u16` kind (1 PTX, 2 ELF/SASS), `u16`
//! version, `u32` header size, `u64` payload size, ..., `u32` SM version at byte 28. The
//! payload (possibly compressed) follows the entry header.

use std::fmt;

const MAGIC: u32 = 0xBA55_ED50;
const HEADER_BYTES: usize = 16;
const ENTRY_MIN_BYTES: usize = 32;

/// One piece of device code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Image {
    /// Machine code for exactly `sm_<n>` (e.g. 80, 90).
    Sass(u32),
    /// PTX for `compute_<n>`, JIT-compiled by the driver for that GPU and newer ones.
    Ptx(u32),
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Image::Sass(n) => write!(f, "sm_{n} SASS"),
            Image::Ptx(n) => write!(f, "compute_{n} PTX"),
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Every fat binary found in `bytes` (an object, a shared library), each as its images in
/// order. Bytes that look like a header but do not parse are skipped.
pub fn fat_binaries(bytes: &[u8]) -> Vec<Vec<Image>> {
    let magic = MAGIC.to_le_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(offset) = bytes[at..].windows(4).position(|w| w == magic) {
        let start = at + offset;
        match parse(bytes, start) {
            Some((images, end)) => {
                found.push(images);
                at = end;
            }
            None => at = start + 4,
        }
    }
    found
}

/// The images of the fat binary at `start`, and where it ends.
fn parse(bytes: &[u8], start: usize) -> Option<(Vec<Image>, usize)> {
    if u16_at(bytes, start + 4)? != 1 || u16_at(bytes, start + 6)? as usize != HEADER_BYTES {
        return None;
    }
    let size = usize::try_from(u64_at(bytes, start + 8)?).ok()?;
    let end = (start + HEADER_BYTES).checked_add(size)?;
    if end > bytes.len() {
        return None;
    }
    let mut images = Vec::new();
    let mut entry = start + HEADER_BYTES;
    while entry < end {
        let kind = u16_at(bytes, entry)?;
        let header = u32_at(bytes, entry + 4)? as usize;
        let payload = usize::try_from(u64_at(bytes, entry + 8)?).ok()?;
        if header < ENTRY_MIN_BYTES {
            return None;
        }
        let sm = u32_at(bytes, entry + 28)?;
        images.push(match kind {
            1 => Image::Ptx(sm),
            2 => Image::Sass(sm),
            _ => return None,
        });
        entry = entry.checked_add(header)?.checked_add(payload)?;
    }
    (entry == end && !images.is_empty()).then_some((images, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: u16, sm: u32, payload: &[u8]) -> Vec<u8> {
        let mut e = vec![0u8; 64];
        e[0..2].copy_from_slice(&kind.to_le_bytes());
        e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
        e[4..8].copy_from_slice(&64u32.to_le_bytes());
        e[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        e[28..32].copy_from_slice(&sm.to_le_bytes());
        e.extend_from_slice(payload);
        e
    }

    fn fatbin(entries: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = entries.concat();
        let mut b = MAGIC.to_le_bytes().to_vec();
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(&(body.len() as u64).to_le_bytes());
        b.extend(body);
        b
    }

    #[test]
    fn finds_every_fat_binary_and_its_images() {
        let mut file = b"ELF junk".to_vec();
        file.extend(fatbin(&[entry(2, 80, &[7; 40]), entry(1, 80, b"ptx text")]));
        file.extend(b"between");
        file.extend(MAGIC.to_le_bytes()); // a stray magic that does not parse
        file.extend(fatbin(&[entry(2, 90, &[1; 8])]));
        let found = fat_binaries(&file);
        assert_eq!(found, vec![vec![Image::Sass(80), Image::Ptx(80)], vec![Image::Sass(90)]]);
        assert_eq!(Image::Ptx(80).to_string(), "compute_80 PTX");
    }

    #[test]
    fn truncated_or_inconsistent_headers_are_skipped() {
        let good = fatbin(&[entry(2, 80, &[0; 16])]);
        assert!(fat_binaries(&good[..good.len() - 1]).is_empty(), "size beyond the file");
        let mut bad_kind = good.clone();
        bad_kind[16] = 9;
        assert!(fat_binaries(&bad_kind).is_empty());
        let mut bad_size = good.clone();
        bad_size[8] = bad_size[8].wrapping_sub(1); // entries no longer end where the header says
        assert!(fat_binaries(&bad_size).is_empty());
    }
}
