use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where to look for and install the toolchain. [`Config::from_env`] is what the CLI and tests
/// use; the fields are public so callers (and unit tests) can build one without touching the
/// process environment.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Pinned CUDA install (`<cache>/cuda-<version>/`) and downloaded wheels (`<cache>/wheels/`).
    /// `$BOLT_CACHE_DIR`, else `$XDG_CACHE_HOME/bolt`, else `$HOME/.cache/bolt`.
    pub cache_dir: Option<PathBuf>,
    /// Where the pinned CUTLASS tree is installed: `cutlass/source/` in the Bolt checkout
    /// this crate was built from, or `<cache>/cutlass/` when that checkout no longer exists.
    pub cutlass_install_dir: Option<PathBuf>,
    /// `$CUTLASS_DIR`: use this CUTLASS tree instead of the pinned one (never written to).
    pub cutlass_dir: Option<PathBuf>,
    /// `$CUDA_HOME`: first place to look for nvcc (`$CUDA_HOME/bin/nvcc`).
    pub cuda_home: Option<PathBuf>,
    /// `$PATH`, searched for nvcc after CUDA_HOME.
    pub path: Option<OsString>,
    /// Conventional system install, searched after PATH (`/usr/local/cuda`).
    pub system_cuda: Option<PathBuf>,
    /// `$BOLT_WHEEL_DIR`: directory checked for the pinned wheels before downloading.
    pub wheel_dir: Option<PathBuf>,
}

impl Config {
    pub fn from_env() -> Config {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let cache_dir = var("BOLT_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| Path::new(&d).join("bolt")))
            .or_else(|| var("HOME").map(|d| Path::new(&d).join(".cache").join("bolt")));
        // The checkout's cutlass/ directory, so every build of Bolt from it shares one CUTLASS.
        let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let cutlass_install_dir = if manifest_dir.is_dir() {
            Some(manifest_dir.join("source"))
        } else {
            cache_dir.as_ref().map(|c| c.join("cutlass"))
        };
        Config {
            cache_dir,
            cutlass_install_dir,
            cutlass_dir: var("CUTLASS_DIR").map(PathBuf::from),
            cuda_home: var("CUDA_HOME").map(PathBuf::from),
            path: var("PATH"),
            system_cuda: Some(PathBuf::from("/usr/local/cuda")),
            wheel_dir: var("BOLT_WHEEL_DIR").map(PathBuf::from),
        }
    }
}
