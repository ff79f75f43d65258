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
//! Running a kernel follows the ABI's split between set-up and launch: [`Kernel::initialize`]
//! checks the problem and arguments and builds the kernel's state (CUTLASS Params) once per
//! shape into a [`Params`]; [`Params::update`] swaps device pointers; [`Params::launch`]
//! enqueues the kernel with no allocation and no synchronisation (capturable in a CUDA graph).
//! This crate has no CUDA driver binding (it builds and tests without a GPU); with cudarc, pass
//! `CudaSlice::device_ptr()` values in [`BoltArgs`], a device buffer of
//! [`Kernel::workspace_size`] bytes as the workspace, and `CudaStream::cu_stream()` as the stream.

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::abi::{
    BoltArgs, BoltAttentionArgs, BoltAttentionProblem, BoltGlueArgs, BoltGlueProblem, BoltRecurrentArgs,
    BoltRecurrentProblem, BoltStitchArgs, BoltStitchProblem, CanImplementFn, InitializeFn, KernelArgs, LaunchFn,
    ParamsSizeFn, Problem, ProblemKind, Status, UpdateFn, WorkspaceSizeFn, ABI_VERSION, PARAMS_ALIGNMENT,
};
use crate::attention::AttentionSpec;
use crate::glue::GlueSpec;
use crate::manifest::{AttentionEntry, GlueEntry, KernelEntry, Manifest, ManifestError, RecurrentEntry, StitchEntry};
use crate::spec::KernelSpec;

/// A loaded library: every kernel of its manifest, resolved.
pub struct KernelLibrary {
    path: PathBuf,
    manifest: Manifest,
    kernels: Vec<Kernel>,
    by_symbol: HashMap<String, usize>,
    b2b: Vec<crate::b2b::B2bKernel>,
    glue: Vec<GlueKernel>,
    stitch: Vec<StitchKernel>,
    attention: Vec<AttentionKernel>,
    recurrent: Vec<RecurrentKernel>,
}

/// One recurrent scan kernel of a loaded library; holds the library open.
#[derive(Clone)]
pub struct RecurrentKernel {
    entry: Arc<RecurrentEntry>,
    functions: Functions<BoltRecurrentArgs>,
}

/// One fused attention kernel of a loaded library; holds the library open.
#[derive(Clone)]
pub struct AttentionKernel {
    entry: Arc<AttentionEntry>,
    functions: Functions<BoltAttentionArgs>,
}

/// One stitched kernel of a loaded library; holds the library open.
#[derive(Clone)]
pub struct StitchKernel {
    entry: Arc<StitchEntry>,
    functions: Functions<BoltStitchArgs>,
}

/// One glue kernel of a loaded library (transpose, padding, cast); holds the library open.
#[derive(Clone)]
pub struct GlueKernel {
    entry: Arc<GlueEntry>,
    functions: Functions<BoltGlueArgs>,
}

/// One kernel of a loaded library. Holds the library open: a `Kernel` stays valid after its
/// [`KernelLibrary`] is dropped.
#[derive(Clone)]
pub struct Kernel {
    entry: Arc<KernelEntry>,
    functions: Functions<BoltArgs>,
}

/// The six functions of one kernel of a loaded library (plain or chain kernel, by its argument
/// struct `A`), resolved; holds the library open.
pub struct Functions<A: KernelArgs> {
    symbol: Arc<str>,
    can_implement: CanImplementFn,
    workspace_size: WorkspaceSizeFn,
    params_size: ParamsSizeFn,
    initialize: InitializeFn<A>,
    update: UpdateFn<A>,
    launch: LaunchFn,
    _library: Arc<libloading::Library>,
}

impl<A: KernelArgs> Clone for Functions<A> {
    fn clone(&self) -> Self {
        Functions { symbol: self.symbol.clone(), _library: self._library.clone(), ..*self }
    }
}

/// A kernel function's failure: which function of which kernel, and the status it returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{symbol}{function}: {status}")]
pub struct CallError {
    pub symbol: String,
    /// The function's suffix (`_initialize`, `_update`, `_launch`).
    pub function: &'static str,
    pub status: Status,
}

/// One aligned block of a params buffer.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct ParamsBlock([u8; PARAMS_ALIGNMENT]);
const _: () = assert!(std::mem::align_of::<ParamsBlock>() == PARAMS_ALIGNMENT);

/// A kernel's state for one problem, built by `initialize` in a host buffer this value owns:
/// CUTLASS's Params and the workspace pointer. Keeps the library loaded. The workspace given
/// to `initialize` must stay allocated while the params are used.
pub struct Params<A: KernelArgs> {
    buffer: Box<[ParamsBlock]>,
    functions: Functions<A>,
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
    /// blake3), loads the library and resolves the six functions of every kernel. Fails
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
            let functions = unsafe { Functions::resolve(&lib, &entry.symbol) }.map_err(|(s, e)| missing(s, e))?;
            kernels.push(Kernel { entry: Arc::new(entry.clone()), functions });
        }
        let mut glue = Vec::with_capacity(manifest.glue.len());
        for entry in &manifest.glue {
            // SAFETY: as above, with the glue kernels' BoltGlueArgs.
            let functions = unsafe { Functions::resolve(&lib, &entry.symbol) }
                .map_err(|(symbol, source)| LoadError::MissingSymbol { library: library.into(), symbol, source })?;
            glue.push(GlueKernel { entry: Arc::new(entry.clone()), functions });
        }
        let mut stitch = Vec::with_capacity(manifest.stitch.len());
        for entry in &manifest.stitch {
            // SAFETY: as above, with the stitched kernels' BoltStitchArgs.
            let functions = unsafe { Functions::resolve(&lib, &entry.symbol) }
                .map_err(|(symbol, source)| LoadError::MissingSymbol { library: library.into(), symbol, source })?;
            stitch.push(StitchKernel { entry: Arc::new(entry.clone()), functions });
        }
        let mut attention = Vec::with_capacity(manifest.attention.len());
        for entry in &manifest.attention {
            // SAFETY: as above, with the attention kernels' BoltAttentionArgs.
            let functions = unsafe { Functions::resolve(&lib, &entry.symbol) }
                .map_err(|(symbol, source)| LoadError::MissingSymbol { library: library.into(), symbol, source })?;
            attention.push(AttentionKernel { entry: Arc::new(entry.clone()), functions });
        }
        let mut recurrent = Vec::with_capacity(manifest.recurrent.len());
        for entry in &manifest.recurrent {
            // SAFETY: as above, with the recurrent kernels' BoltRecurrentArgs.
            let functions = unsafe { Functions::resolve(&lib, &entry.symbol) }
                .map_err(|(symbol, source)| LoadError::MissingSymbol { library: library.into(), symbol, source })?;
            recurrent.push(RecurrentKernel { entry: Arc::new(entry.clone()), functions });
        }
        let mut b2b = Vec::with_capacity(manifest.b2b.len());
        for entry in &manifest.b2b {
            // SAFETY: as above, with the chain kernels' BoltB2bArgs.
            let functions = unsafe { Functions::resolve(&lib, &entry.symbol) }
                .map_err(|(symbol, source)| LoadError::MissingSymbol { library: library.into(), symbol, source })?;
            b2b.push(crate::b2b::B2bKernel { symbol: entry.symbol.clone(), spec: entry.spec.clone(), functions });
        }
        let by_symbol = kernels.iter().enumerate().map(|(i, k)| (k.symbol().to_string(), i)).collect();
        tracing::debug!("loaded {} kernels from {}", kernels.len(), library.display());
        Ok(KernelLibrary {
            path: library.into(),
            manifest,
            kernels,
            by_symbol,
            b2b,
            glue,
            stitch,
            attention,
            recurrent,
        })
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

    pub fn b2b_kernels(&self) -> &[crate::b2b::B2bKernel] {
        &self.b2b
    }

    /// The back-to-back chain kernel `symbol`, if the library has it.
    pub fn b2b(&self, symbol: &str) -> Option<&crate::b2b::B2bKernel> {
        self.b2b.iter().find(|k| k.symbol == symbol)
    }

    pub fn glue_kernels(&self) -> &[GlueKernel] {
        &self.glue
    }

    /// The glue kernel built for `spec`, if the library has it.
    pub fn glue(&self, spec: &GlueSpec) -> Option<&GlueKernel> {
        self.glue.iter().find(|g| g.entry.spec == *spec)
    }

    pub fn stitch_kernels(&self) -> &[StitchKernel] {
        &self.stitch
    }

    /// The stitched kernel `symbol`, if the library has it.
    pub fn stitch(&self, symbol: &str) -> Option<&StitchKernel> {
        self.stitch.iter().find(|k| k.entry.symbol == symbol)
    }

    pub fn attention_kernels(&self) -> &[AttentionKernel] {
        &self.attention
    }

    /// The recurrent scan kernel built for `spec`, if the library has it.
    pub fn recurrent(&self, spec: &crate::recurrent::RecurrentSpec) -> Option<&RecurrentKernel> {
        self.recurrent.iter().find(|k| k.entry.spec == *spec)
    }

    /// The attention kernel built for `spec`, if the library has it.
    pub fn attention(&self, spec: &AttentionSpec) -> Option<&AttentionKernel> {
        self.attention.iter().find(|k| k.entry.spec == *spec)
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

impl<A: KernelArgs> Functions<A> {
    /// Resolves the six functions of `symbol`; the error names the first one missing.
    ///
    /// # Safety
    /// `lib` must export them with the signatures of bolt_kernel.h, with `A` the kernel's
    /// argument struct.
    pub(crate) unsafe fn resolve(
        lib: &Arc<libloading::Library>,
        symbol: &str,
    ) -> Result<Functions<A>, (String, libloading::Error)> {
        Ok(Functions {
            symbol: symbol.into(),
            can_implement: resolve(lib, symbol, "_can_implement")?,
            workspace_size: resolve(lib, symbol, "_workspace_size")?,
            params_size: resolve(lib, symbol, "_params_size")?,
            initialize: resolve(lib, symbol, "_initialize")?,
            update: resolve(lib, symbol, "_update")?,
            launch: resolve(lib, symbol, "_launch")?,
            _library: lib.clone(),
        })
    }

    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    fn error(&self, function: &'static str, status: Status) -> CallError {
        CallError { symbol: self.symbol.to_string(), function, status }
    }

    /// # Safety
    /// `problem` is null or points to the kernel's problem struct.
    pub(crate) unsafe fn can_implement(&self, problem: *const c_void) -> Status {
        (self.can_implement)(problem).status()
    }

    /// # Safety
    /// As [`Functions::can_implement`].
    pub(crate) unsafe fn workspace_size(&self, problem: *const c_void) -> usize {
        (self.workspace_size)(problem)
    }

    /// Host bytes of the kernel's params.
    pub fn params_size(&self) -> usize {
        // SAFETY: takes nothing, returns a size.
        unsafe { (self.params_size)() }
    }

    /// `<symbol>_initialize` into a fresh buffer of [`Functions::params_size`] bytes.
    ///
    /// # Safety
    /// `problem` points to the kernel's problem struct; `args` holds device pointers to
    /// buffers of the sizes the problem implies (or pointers the kernel refuses before any CUDA
    /// call: null, misaligned); `workspace` is a device buffer of `workspace_bytes` bytes (or
    /// null) and `stream` a live stream of the current device (or null).
    pub(crate) unsafe fn initialize(
        &self,
        problem: *const c_void,
        args: &A,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<Params<A>, CallError> {
        let bytes = self.params_size();
        let blocks = bytes.div_ceil(PARAMS_ALIGNMENT).max(1);
        let mut buffer = vec![ParamsBlock([0; PARAMS_ALIGNMENT]); blocks].into_boxed_slice();
        let status = (self.initialize)(
            problem,
            args,
            workspace,
            workspace_bytes,
            buffer.as_mut_ptr() as *mut c_void,
            blocks * PARAMS_ALIGNMENT,
            stream,
        )
        .status();
        if status != Status::Ok {
            return Err(self.error("_initialize", status));
        }
        Ok(Params { buffer, functions: self.clone() })
    }
}

impl<A: KernelArgs> Params<A> {
    /// The kernel these params belong to.
    pub fn symbol(&self) -> &str {
        self.functions.symbol()
    }

    /// Host bytes held.
    pub fn bytes(&self) -> usize {
        self.buffer.len() * PARAMS_ALIGNMENT
    }

    fn ptr(&mut self) -> *mut c_void {
        self.buffer.as_mut_ptr() as *mut c_void
    }

    /// `<symbol>_update`: new device pointers and scalars for the same problem and workspace.
    /// Host-only. On failure the params keep their previous arguments.
    ///
    /// # Safety
    /// As for `initialize`: `args` must hold device buffers of the sizes the problem implies.
    pub unsafe fn update(&mut self, args: &A) -> Result<(), CallError> {
        let status = (self.functions.update)(self.ptr(), args).status();
        match status {
            Status::Ok => Ok(()),
            s => Err(self.functions.error("_update", s)),
        }
    }

    /// `<symbol>_launch` on `stream` (a `cudaStream_t`; null is the legacy default stream):
    /// no allocation, no synchronisation.
    ///
    /// # Safety
    /// The buffers and workspace the params point to must be alive until the stream has run
    /// the kernel, and `stream` must be a live stream of the device current at `initialize`.
    pub unsafe fn launch(&mut self, stream: *mut c_void) -> Result<(), CallError> {
        let status = (self.functions.launch)(self.ptr(), stream).status();
        match status {
            Status::Ok => Ok(()),
            s => Err(self.functions.error("_launch", s)),
        }
    }
}

impl<A: KernelArgs> fmt::Debug for Params<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Params").field("symbol", &self.symbol()).field("bytes", &self.bytes()).finish()
    }
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
        self.functions.can_implement(problem)
    }

    /// Bytes of device workspace `problem` needs (0 for a problem of the wrong kind). Depends
    /// on the problem: size it per problem.
    pub fn workspace_size<P: Problem>(&self, problem: &P) -> usize {
        if P::KIND != self.entry.problem {
            return 0;
        }
        // SAFETY: a valid pointer to the problem struct the function expects.
        unsafe { self.functions.workspace_size(problem.as_ptr()) }
    }

    /// Host bytes of the kernel's [`Params`].
    pub fn params_size(&self) -> usize {
        self.functions.params_size()
    }

    /// Checks `problem` and `args` and builds the kernel's state for them (once per shape).
    /// May set kernel attributes and enqueue the workspace's first initialisation on `stream`;
    /// needs the device current. A problem of the wrong kind is refused without calling in.
    ///
    /// # Safety
    /// `args` holds device pointers to buffers of the sizes `problem` implies, of the spec's
    /// element types and layouts (pointers the kernel refuses before any CUDA call, null or
    /// misaligned, are fine); `workspace` is a device buffer of `workspace_bytes` bytes, at
    /// least [`Kernel::workspace_size`] (or null when that is 0), alive while the params are
    /// used; `stream` is a live stream of the current device (or null).
    pub unsafe fn initialize<P: Problem>(
        &self,
        problem: &P,
        args: &BoltArgs,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<Params<BoltArgs>, CallError> {
        if P::KIND != self.entry.problem {
            return Err(self.functions.error("_initialize", Status::UnsupportedProblem));
        }
        self.functions.initialize(problem.as_ptr(), args, workspace, workspace_bytes, stream)
    }
}

impl GlueKernel {
    pub fn symbol(&self) -> &str {
        &self.entry.symbol
    }

    pub fn spec(&self) -> &GlueSpec {
        &self.entry.spec
    }

    /// Whether the kernel takes `problem` (positive extents; `c_padded` as its spec needs).
    pub fn can_implement(&self, problem: &BoltGlueProblem) -> Status {
        // SAFETY: a valid pointer to the problem struct glue kernels take.
        unsafe { self.functions.can_implement(problem as *const BoltGlueProblem as *const c_void) }
    }

    pub fn params_size(&self) -> usize {
        self.functions.params_size()
    }

    /// Checks and records `problem` and `args` (glue kernels need no workspace).
    ///
    /// # Safety
    /// `args` holds device pointers to the input and output of the sizes `problem` implies
    /// (or pointers the kernel refuses: null, misaligned).
    pub unsafe fn initialize(
        &self,
        problem: &BoltGlueProblem,
        args: &BoltGlueArgs,
        stream: *mut c_void,
    ) -> Result<Params<BoltGlueArgs>, CallError> {
        self.functions.initialize(
            problem as *const BoltGlueProblem as *const c_void,
            args,
            std::ptr::null_mut(),
            0,
            stream,
        )
    }
}

impl StitchKernel {
    pub fn symbol(&self) -> &str {
        &self.entry.symbol
    }

    pub fn spec(&self) -> &crate::stitch::StitchSpec {
        &self.entry.spec
    }

    /// Whether the kernel takes `problem` (a consistent iteration space, strides >= 0).
    pub fn can_implement(&self, problem: &BoltStitchProblem) -> Status {
        // SAFETY: a valid pointer to the problem struct stitched kernels take.
        unsafe { self.functions.can_implement(problem as *const BoltStitchProblem as *const c_void) }
    }

    pub fn params_size(&self) -> usize {
        self.functions.params_size()
    }

    /// Checks and records `problem` and `args` (stitched kernels need no workspace).
    ///
    /// # Safety
    /// `args` holds device pointers to the inputs and outputs of the sizes `problem` implies
    /// (or pointers the kernel refuses: null, misaligned).
    pub unsafe fn initialize(
        &self,
        problem: &BoltStitchProblem,
        args: &BoltStitchArgs,
        stream: *mut c_void,
    ) -> Result<Params<BoltStitchArgs>, CallError> {
        self.functions.initialize(
            problem as *const BoltStitchProblem as *const c_void,
            args,
            std::ptr::null_mut(),
            0,
            stream,
        )
    }
}

impl AttentionKernel {
    pub fn symbol(&self) -> &str {
        &self.entry.symbol
    }

    pub fn spec(&self) -> &AttentionSpec {
        &self.entry.spec
    }

    /// Whether the kernel takes `problem`: what [`AttentionSpec::check`] checks, answered by the
    /// library (host-only, no GPU needed).
    pub fn can_implement(&self, problem: &BoltAttentionProblem) -> Status {
        // SAFETY: a valid pointer to the problem struct attention kernels take.
        unsafe { self.functions.can_implement(problem as *const BoltAttentionProblem as *const c_void) }
    }

    pub fn params_size(&self) -> usize {
        self.functions.params_size()
    }

    /// Bytes of device workspace the kernel needs for `problem` (0 for sm80 kernels; the sm90
    /// kernel's rows' log-sum-exp; 0 for a problem it refuses).
    pub fn workspace_size(&self, problem: &BoltAttentionProblem) -> usize {
        // SAFETY: a valid pointer to the problem struct attention kernels take.
        unsafe { self.functions.workspace_size(problem as *const BoltAttentionProblem as *const c_void) }
    }

    /// Checks `problem` and `args` and builds the kernel's Params in `workspace`
    /// ([`AttentionKernel::workspace_size`] bytes; null when that is 0). Sets the kernel's
    /// shared-memory attribute when it needs more than 48 KiB, and (sm90) encodes its TMA
    /// descriptors, so it needs the device current.
    ///
    /// # Safety
    /// `args` holds device pointers to Q, K, V, the bias (when the spec reads one) and the
    /// output, of the sizes and strides `problem` implies (or pointers the kernel refuses before
    /// any CUDA call: null, misaligned); `workspace` is device memory of `workspace_bytes`;
    /// `stream` is a live stream of the current device (or null).
    pub unsafe fn initialize(
        &self,
        problem: &BoltAttentionProblem,
        args: &BoltAttentionArgs,
        workspace: *mut c_void,
        workspace_bytes: usize,
        stream: *mut c_void,
    ) -> Result<Params<BoltAttentionArgs>, CallError> {
        self.functions.initialize(
            problem as *const BoltAttentionProblem as *const c_void,
            args,
            workspace,
            workspace_bytes,
            stream,
        )
    }
}

impl RecurrentKernel {
    pub fn symbol(&self) -> &str {
        &self.entry.symbol
    }

    pub fn spec(&self) -> &crate::recurrent::RecurrentSpec {
        &self.entry.spec
    }

    /// Whether the kernel takes `problem` (what [`crate::recurrent::check`] checks), answered
    /// by the library (host-only, no GPU needed).
    pub fn can_implement(&self, problem: &BoltRecurrentProblem) -> Status {
        // SAFETY: a valid pointer to the problem struct recurrent kernels take.
        unsafe { self.functions.can_implement(problem as *const BoltRecurrentProblem as *const c_void) }
    }

    /// Checks `problem` and `args` and builds the kernel's Params (no workspace). Sets the
    /// kernel's shared-memory attribute when it needs more than 48 KiB, so it needs the device
    /// current.
    ///
    /// # Safety
    /// `args` holds device pointers of the sizes `problem` implies (optional ones null), or
    /// pointers the kernel refuses before any CUDA call; `stream` is a live stream of the
    /// current device (or null).
    pub unsafe fn initialize(
        &self,
        problem: &BoltRecurrentProblem,
        args: &BoltRecurrentArgs,
        stream: *mut c_void,
    ) -> Result<Params<BoltRecurrentArgs>, CallError> {
        self.functions.initialize(
            problem as *const BoltRecurrentProblem as *const c_void,
            args,
            std::ptr::null_mut(),
            0,
            stream,
        )
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel").field("symbol", &self.entry.symbol).field("problem", &self.entry.problem).finish()
    }
}
