//! The pinned wheels (pins.toml, embedded at compile time).

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

const PINS_TOML: &str = include_str!("../pins.toml");

/// Bump when the install layout changes (e.g. files added after unpacking), so existing
/// installs are redone.
const INSTALL_LAYOUT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    pub cuda: Component,
    pub cutlass: Component,
}

/// One installable component: a set of wheels unpacked on top of each other.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Component {
    pub version: String,
    /// `<os>-<arch>` the wheels run on (as in [`host_platform`]); `None` for portable ones.
    pub platform: Option<String>,
    /// Only entries under this prefix are unpacked, with the prefix removed.
    pub strip_prefix: String,
    pub wheels: Vec<Wheel>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wheel {
    /// File name, also the name looked up in BOLT_WHEEL_DIR and the download cache.
    pub file: String,
    pub url: String,
    /// Lower-case hex.
    pub sha256: String,
}

impl Pins {
    /// The pins this crate was built with.
    pub fn embedded() -> Result<Pins> {
        Pins::parse(PINS_TOML)
    }

    pub fn parse(text: &str) -> Result<Pins> {
        let pins: Pins = toml::from_str(text).map_err(|e| Error::Pins(e.to_string()))?;
        pins.cuda.validate("cuda")?;
        pins.cutlass.validate("cutlass")?;
        Ok(pins)
    }
}

impl Component {
    fn validate(&self, name: &str) -> Result<()> {
        if self.wheels.is_empty() {
            return Err(Error::Pins(format!("[{name}] lists no wheels")));
        }
        for w in &self.wheels {
            let hex_ok =
                w.sha256.len() == 64 && w.sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !hex_ok {
                return Err(Error::Pins(format!("[{name}] {}: sha256 must be 64 lower-case hex digits", w.file)));
            }
            // The file name becomes a path component: keep it a plain name.
            if w.file.is_empty() || w.file.contains(['/', '\\']) || w.file.starts_with('.') {
                return Err(Error::Pins(format!("[{name}] invalid wheel file name `{}`", w.file)));
            }
            if !w.url.starts_with("https://") {
                return Err(Error::Pins(format!("[{name}] {}: url must be https", w.file)));
            }
        }
        Ok(())
    }

    /// Identifies exactly what gets installed; stored in the install marker so that a pin
    /// change (or a change in how this crate lays installs out) makes an existing install stale.
    pub fn pin_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(format!("layout {INSTALL_LAYOUT}\n{}\n{}\n", self.version, self.strip_prefix));
        for w in &self.wheels {
            h.update(format!("{} {}\n", w.file, w.sha256));
        }
        hex(&h.finalize())
    }
}

/// `<os>-<arch>` of this machine, in the form pins.toml uses.
pub fn host_platform() -> String {
    format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_pins_parse() {
        let pins = Pins::embedded().unwrap();
        assert_eq!(pins.cuda.version, "13.5.37");
        assert_eq!(pins.cuda.wheels.len(), 5);
        assert_eq!(pins.cuda.platform.as_deref(), Some("linux-x86_64"));
        assert_eq!(pins.cutlass.version, "4.2.0");
        assert_eq!(pins.cutlass.platform, None);
        assert_eq!(pins.cutlass.wheels[0].sha256, "f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6");
        assert!(pins.cuda.wheels.iter().any(|w| w.file.starts_with("nvidia_cuda_nvcc-13.5.37")));
    }

    const MINIMAL: &str = r#"
        [cuda]
        version = "1.0"
        strip_prefix = "a/"
        [[cuda.wheels]]
        file = "a.whl"
        url = "https://example.com/a.whl"
        sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
        [cutlass]
        version = "2.0"
        strip_prefix = "b/"
        [[cutlass.wheels]]
        file = "b.whl"
        url = "https://example.com/b.whl"
        sha256 = "1111111111111111111111111111111111111111111111111111111111111111"
    "#;

    #[test]
    fn rejects_bad_pins() {
        assert!(Pins::parse(MINIMAL).is_ok());
        let bad_hash = MINIMAL.replace("\"1111111111111111", "\"X111111111111111");
        assert!(matches!(Pins::parse(&bad_hash), Err(Error::Pins(m)) if m.contains("sha256")));
        let bad_name = MINIMAL.replace("file = \"a.whl\"", "file = \"../a.whl\"");
        assert!(matches!(Pins::parse(&bad_name), Err(Error::Pins(_))));
        let http = MINIMAL.replace("https://example.com/b", "http://example.com/b");
        assert!(matches!(Pins::parse(&http), Err(Error::Pins(m)) if m.contains("https")));
        let unknown = MINIMAL.replace("version = \"2.0\"", "version = \"2.0\"\nextra = 1");
        assert!(matches!(Pins::parse(&unknown), Err(Error::Pins(_))));
        assert!(matches!(Pins::parse("not toml ["), Err(Error::Pins(_))));
    }

    #[test]
    fn pin_hash_tracks_wheels() {
        let pins = Pins::parse(MINIMAL).unwrap();
        let mut moved = pins.cuda.clone();
        moved.wheels[0].sha256 = "2".repeat(64);
        assert_ne!(pins.cuda.pin_hash(), moved.pin_hash());
        assert_eq!(pins.cuda.pin_hash(), pins.cuda.clone().pin_hash());
        assert_eq!(pins.cuda.pin_hash().len(), 64);
    }
}
