//! An artifact as one byte string, for hosts that carry it inside a file of their own (TVM's
//! exported library): a zip of the artifact's files, stored uncompressed (the weights do not
//! compress, and a load should cost a copy, not an inflate). Integrity is the manifest's
//! business: [`Artifact::open`] checks every unpacked file's size and blake3.

use super::read::{Artifact, ArtifactError};
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};

fn err(file: &Path, reason: impl Into<String>) -> ArtifactError {
    ArtifactError { file: file.to_path_buf(), field: "-".into(), reason: reason.into() }
}

/// The artifact in `dir` as one byte string: every file under it except build leftovers (top-level
/// entries whose names start with '.', e.g. `.build`).
pub fn pack(dir: &Path) -> Result<Vec<u8>, ArtifactError> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files)?;
    files.sort();
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true)
        .unix_permissions(0o644);
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for rel in files {
        let path = dir.join(&rel);
        let bytes = std::fs::read(&path).map_err(|e| err(&path, format!("cannot read: {e}")))?;
        let name = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
        w.start_file(name, options).map_err(|e| err(&path, format!("cannot pack: {e}")))?;
        w.write_all(&bytes).map_err(|e| err(&path, format!("cannot pack: {e}")))?;
    }
    Ok(w.finish().map_err(|e| err(dir, format!("cannot pack: {e}")))?.into_inner())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ArtifactError> {
    let entries = std::fs::read_dir(dir).map_err(|e| err(dir, format!("cannot list: {e}")))?;
    for e in entries {
        let e = e.map_err(|e| err(dir, format!("cannot list: {e}")))?;
        let path = e.path();
        let rel = path.strip_prefix(root).expect("under the root").to_path_buf();
        if dir == root && e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = e.file_type().map_err(|x| err(&path, format!("cannot stat: {x}")))?;
        if kind.is_dir() {
            collect(root, &path, out)?;
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

/// Writes a packed artifact's files into `dir` (created; must not hold another artifact).
/// Entries that would land outside `dir` are refused.
pub fn unpack(bytes: &[u8], dir: &Path) -> Result<(), ArtifactError> {
    let what = Path::new("<packed artifact>");
    let mut z =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| err(what, format!("not a packed Bolt artifact: {e}")))?;
    std::fs::create_dir_all(dir).map_err(|e| err(dir, format!("cannot create: {e}")))?;
    for i in 0..z.len() {
        let mut f = z.by_index(i).map_err(|e| err(what, format!("entry {i}: {e}")))?;
        let rel = f.enclosed_name().ok_or_else(|| {
            let name = f.name().map(|n| n.to_string()).unwrap_or_else(|_| format!("#{i}"));
            err(what, format!("entry '{name}' lies outside the artifact"))
        })?;
        let path = dir.join(rel);
        if f.is_dir() {
            std::fs::create_dir_all(&path).map_err(|e| err(&path, format!("cannot create: {e}")))?;
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, format!("cannot create: {e}")))?;
        }
        let mut data = Vec::with_capacity(f.size() as usize);
        f.read_to_end(&mut data).map_err(|e| err(&path, format!("cannot unpack: {e}")))?;
        std::fs::write(&path, data).map_err(|e| err(&path, format!("cannot write: {e}")))?;
    }
    Ok(())
}

/// Opens a packed artifact: unpacked into a fresh directory under `scratch` (its kernel
/// library must be a file to be loaded), opened and checked; the caller removes the
/// directory once the library is loaded.
pub fn open_packed(bytes: &[u8], scratch: &Path) -> Result<Artifact, ArtifactError> {
    unpack(bytes, scratch)?;
    Artifact::open(scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_and_build_leftovers_stay_out() {
        let src = std::env::temp_dir().join(format!("bolt-bundle-src-{}", std::process::id()));
        let dst = std::env::temp_dir().join(format!("bolt-bundle-dst-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&dst);
        std::fs::create_dir_all(src.join("kernels")).unwrap();
        std::fs::create_dir_all(src.join(".build")).unwrap();
        std::fs::write(src.join("manifest.json"), b"{}").unwrap();
        std::fs::write(src.join("kernels/lib.so"), vec![7u8; 3000]).unwrap();
        std::fs::write(src.join(".build/log.txt"), b"nvcc said").unwrap();
        let packed = pack(&src).unwrap();
        unpack(&packed, &dst).unwrap();
        assert_eq!(std::fs::read(dst.join("manifest.json")).unwrap(), b"{}");
        assert_eq!(std::fs::read(dst.join("kernels/lib.so")).unwrap(), vec![7u8; 3000]);
        assert!(!dst.join(".build").exists());
        let e = unpack(b"PK not really", &dst.join("x")).unwrap_err();
        assert!(e.to_string().contains("not a packed Bolt artifact"), "{e}");
        let _ = std::fs::remove_dir_all(&src);
        let _ = std::fs::remove_dir_all(&dst);
    }
}
