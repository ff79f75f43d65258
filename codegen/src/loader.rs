//! Loads a built kernel library and its manifest, and resolves every kernel's functions.
//!
//! ```no_run
//! use bolt_codegen::abi::{BoltGemmProblem, Status};
//! use bolt_codegen::loader::KernelLibrary;
//!
//! let lib = KernelLibrary::open("build/libbolt_kernels.so".as_ref())?;
//! for kernel in lib.kernels() {
//!     let problem = BoltGemmProblem::packed(1024, 1024, 1024, kernel.spec().layouts);
//!     if kernel.can_implement(&problem) == Status::Ok {
//!         println!("{} needs {} bytes of workspace", kernel.symbol(), kernel.workspace_size(&problem));
//!     }
//! }
//! # Ok::<(), bolt_codegen::loader::LoadError>(())
//! ```
//!
//! Running a kernel needs device memory and a stream. This crate has no CUDA driver binding
//! (it builds and tests without a GPU); with cudarc, pass `CudaSlice::device_ptr()` values in
//! [`BoltArgs`], a device buffer of [`Kernel::workspace_size`] bytes as the workspace, and
//! `CudaStream::cu_stream()` as the stream to [`Kernel::run`].

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::abi::{BoltArgs, CanImplementFn, Problem, ProblemKind, RunFn, Status, WorkspaceSizeFn, ABI_VERSION};
use crate::manifest::{KernelEntry, Manifest, ManifestError};
use crate::spec::KernelSpec;

/// A loaded library: every kernel of its manifest, resolved.
pub struct KernelLibrary {
    path: PathBuf,
    manifest: Manifest,
    kernels: Vec<Kernel>,
    by_symbol: HashMap<String, usize>,
}

/// One kernel of a loaded library. Holds the library open: a `Kernel` stays valid after its
/// [`KernelLibrary`] is dropped.
#[derive(Clone)]
pub struct Kernel {
    entry: Arc<KernelEntry>,
    can_implement: CanImplementFn,
    workspace_size: WorkspaceSizeFn,
    run: RunFn,
    _library: Arc<libloading::Library>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{} was generated for kernel ABI {found}, this Bolt speaks ABI {ABI_VERSION}: rebuild it", manifest.display())]
    AbiMismatch { manifest: PathBuf, found: u32 },
    #[error(
        "{} does not match its manifest {} ({reason}): the library was rebuilt or replaced without its manifest",
        library.display(),
        manifest.display()
    )]
    Stale { library: PathBuf, manifest: PathBuf, reason: String },
    #[error("cannot load {}: {source}", path.display())]
    Open { path: PathBuf, source: libloading::Error },
    #[error("{} lacks symbol `{symbol}` listed in its manifest ({source})", library.display())]
    MissingSymbol { library: PathBuf, symbol: String, source: libloading::Error },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

impl KernelLibrary {
    /// Opens `library` with the manifest next to it ([`Manifest::path_for`]).
    pub fn open(library: &Path) -> Result<KernelLibrary, LoadError> {
        KernelLibrary::open_with_manifest(library, &Manifest::path_for(library))
    }

    /// Reads the manifest, checks the library file is the one it describes (size and
    /// blake3), loads the library and resolves the three functions of every kernel. Fails
    /// naming the first symbol that does not resolve.
    ///
    /// Loading runs the library's initialisers; the hash check above makes sure they are
    /// the ones of the library Bolt built. glibc hands back an already loaded library for a
    /// path it has loaded before, so rebuild into a new path (or a new process) to pick up a
    /// library rebuilt in place.
    pub fn open_with_manifest(library: &Path, manifest_path: &Path) -> Result<KernelLibrary, LoadError> {
        let manifest = Manifest::read(manifest_path)?;
        if manifest.abi_version != ABI_VERSION {
            return Err(LoadError::AbiMismatch { manifest: manifest_path.into(), found: manifest.abi_version });
        }
        let stale =
            |reason: String| LoadError::Stale { library: library.into(), manifest: manifest_path.into(), reason };
        let (size, hash) =
            crate::cache::hash_file(library).map_err(|source| LoadError::Io { path: library.into(), source })?;
        if size != manifest.library_size {
            return Err(stale(format!("{size} bytes, manifest says {}", manifest.library_size)));
        }
        if hash != manifest.library_blake3 {
            return Err(stale("content hash differs".into()));
        }

        // SAFETY: the file is the library whose manifest we hold (hash checked above); its
        // initialisers are CUDA runtime registration code.
        let lib = unsafe { libloading::Library::new(library) }
            .map_err(|source| LoadError::Open { path: library.into(), source })?;
        let lib = Arc::new(lib);
        let mut kernels = Vec::with_capacity(manifest.kernels.len());
        for entry in &manifest.kernels {
            let missing = |symbol: String, source| LoadError::MissingSymbol { library: library.into(), symbol, source };
            // SAFETY: the signatures are those of bolt_kernel.h, which the manifest's ABI
            // version vouches for; the Arc keeps the library mapped while pointers live.
            unsafe {
                let can_implement =
                    resolve::<CanImplementFn>(&lib, &entry.symbol, "_can_implement").map_err(|(s, e)| missing(s, e))?;
                let workspace_size = resolve::<WorkspaceSizeFn>(&lib, &entry.symbol, "_workspace_size")
                    .map_err(|(s, e)| missing(s, e))?;
                let run = resolve::<RunFn>(&lib, &entry.symbol, "_run").map_err(|(s, e)| missing(s, e))?;
                kernels.push(Kernel {
                    entry: Arc::new(entry.clone()),
                    can_implement,
                    workspace_size,
                    run,
                    _library: lib.clone(),
                });
            }
        }
        let by_symbol = kernels.iter().enumerate().map(|(i, k)| (k.symbol().to_string(), i)).collect();
        tracing::debug!("loaded {} kernels from {}", kernels.len(), library.display());
        Ok(KernelLibrary { path: library.into(), manifest, kernels, by_symbol })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    pub fn get(&self, symbol: &str) -> Option<&Kernel> {
        self.by_symbol.get(symbol).map(|&i| &self.kernels[i])
    }
}

impl fmt::Debug for KernelLibrary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelLibrary").field("path", &self.path).field("kernels", &self.kernels.len()).finish()
    }
}

/// Looks up `<symbol><suffix>`; the error carries the full symbol name.
unsafe fn resolve<T: Copy>(
    lib: &libloading::Library,
    symbol: &str,
    suffix: &str,
) -> Result<T, (String, libloading::Error)> {
    let name = format!("{symbol}{suffix}");
    lib.get::<T>(name.as_bytes()).map(|s| *s).map_err(|e| (name, e))
}

impl Kernel {
    pub fn symbol(&self) -> &str {
        &self.entry.symbol
    }

    pub fn spec(&self) -> &KernelSpec {
        &self.entry.spec
    }

    pub fn problem_kind(&self) -> ProblemKind {
        self.entry.problem
    }

    /// Its manifest entry.
    pub fn entry(&self) -> &KernelEntry {
        &self.entry
    }

    /// Whether the kernel can run `problem` (sizes, strides, alignment). Host-only: needs no
    /// GPU. A problem of the other kind (GEMM for a conv kernel, or the reverse) is
    /// [`Status::UnsupportedProblem`] without calling into the library.
    pub fn can_implement<P: Problem>(&self, problem: &P) -> Status {
        if P::KIND != self.entry.problem {
            return Status::UnsupportedProblem;
        }
        // SAFETY: a valid pointer to the problem struct the function expects.
        unsafe { self.can_implement_raw(problem.as_ptr()) }
    }

    /// Calls `<symbol>_can_implement` with a raw pointer.
    ///
    /// # Safety
    /// `problem` must be null or point to the struct of [`Kernel::problem_kind`]. Null is
    /// allowed by the ABI (the answer is [`Status::NullArgument`]).
    pub unsafe fn can_implement_raw(&self, problem: *const c_void) -> Status {
        (self.can_implement)(problem).status()
    }

    /// Bytes of device workspace `problem` needs (0 for a problem of the wrong kind).
    pub fn workspace_size<P: Problem>(&self, problem: &P) -> usize {
        if P::KIND != self.entry.problem {
            return 0;
        }
        // SAFETY: a valid pointer to the problem struct the function expects.
        unsafe { (self.workspace_size)(problem.as_ptr()) }
    }

    /// Launches the kernel on `stream` (a `cudaStream_t`; null is the default stream).
    ///
    /// # Safety
    /// `args` must hold device pointers to buffers of the sizes `problem` implies (and of
    /// the spec's element types and layouts), `workspace` a device buffer of at least
    /// [`Kernel::workspace_size`] bytes (or null when that is 0), and `stream` a live stream
    /// of the current device. The launch is asynchronous: buffers must stay alive until the
    /// stream has finished.
    pub unsafe fn run<P: Problem>(
        &self,
        problem: &P,
        args: &BoltArgs,
        workspace: *mut c_void,
        stream: *mut c_void,
    ) -> Status {
        if P::KIND != self.entry.problem {
            return Status::UnsupportedProblem;
        }
        (self.run)(problem.as_ptr(), args, workspace, stream).status()
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel").field("symbol", &self.entry.symbol).field("problem", &self.entry.problem).finish()
    }
}
