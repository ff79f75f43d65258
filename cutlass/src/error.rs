use std::path::PathBuf;

/// How to get the toolchain when something is missing; appended to the "not found" errors.
pub const INSTALL_HINT: &str =
    "run `bolt toolchain install` (or `cargo run --release -p bolt-cutlass --bin bolt-toolchain -- install`)";

/// Everything that can go wrong. Each message says what is wrong and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "nvcc not found: set CUDA_HOME to a CUDA 12.x/13.x install or {INSTALL_HINT} (tried: {})",
        tried.join("; ")
    )]
    NvccNotFound { tried: Vec<String> },

    #[error("CUTLASS not found: {reason}; {INSTALL_HINT} or set CUTLASS_DIR to a CUTLASS tree")]
    CutlassNotFound { reason: String },

    #[error("CUTLASS tree at {} {problem}: {fix}", path.display())]
    BadCutlassDir { path: PathBuf, problem: String, fix: &'static str },

    #[error("nvcc at {} is unusable: {reason}", path.display())]
    BadNvcc { path: PathBuf, reason: String },

    #[error(
        "sha256 mismatch for {}: expected {expected}, got {actual}; delete the file and retry",
        path.display()
    )]
    ShaMismatch { path: PathBuf, expected: String, actual: String },

    #[error(
        "download of {url} failed: {source}; check the network, HTTPS_PROXY and SSL_CERT_FILE, \
         or download the file yourself into BOLT_WHEEL_DIR"
    )]
    Download { url: String, source: Box<ureq::Error> },

    #[error("{} is not a valid wheel (zip): {source}; delete it and retry", path.display())]
    BadWheel { path: PathBuf, source: zip::result::ZipError },

    #[error("{} contains an unsafe path `{entry}`; refusing to unpack it", path.display())]
    UnsafeWheelEntry { path: PathBuf, entry: String },

    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },

    #[error("invalid pins file: {0}")]
    Pins(String),

    #[error("no pinned CUDA wheels for {platform} (pins cover {pinned}): install CUDA 12.x/13.x and set CUDA_HOME")]
    UnsupportedPlatform { platform: String, pinned: String },

    #[error("no cache directory: set BOLT_CACHE_DIR (neither XDG_CACHE_HOME nor HOME is set)")]
    NoCacheDir,

    #[error(
        "unknown GPU architecture `{0}`: expected one of sm_75, sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100a, sm_120a"
    )]
    UnknownArch(String),

    #[error("invalid nvcc invocation: {0}")]
    InvalidCompile(String),

    #[error("nvcc failed ({status}) compiling {}:\n  command: {command}\n{stderr}", source_file.display())]
    CompileFailed { source_file: PathBuf, status: String, command: String, stderr: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches the path to an I/O error, so messages say which file failed.
pub(crate) trait IoContext<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl Into<PathBuf>) -> Result<T> {
        self.map_err(|source| Error::Io { path: path.into(), source })
    }
}
