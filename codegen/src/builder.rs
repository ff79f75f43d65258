//! From kernel specs to one loadable shared library.
//!
//! [`Builder::build`] takes a list of [`KernelSpec`]s and a [`KernelSource`] ([`Templates`] for
//! Bolt's CUTLASS kernels) and:
//!
//! 1. names each kernel ([`KernelSource::symbol`]), drops duplicates and specs for archs not
//!    asked for, and validates each one before nvcc ever sees it ([`KernelSource::validate`];
//!    rejected specs are listed in the report, not built);
//! 2. groups kernels into translation units per arch — several per unit for sm80 (the
//!    CUTLASS headers are parsed once per unit: measured on 2 cores, one sm80 GEMM alone
//!    takes 13-24 s of nvcc, seven in one unit 39 s), one or two for sm90 (≈3.3 GB of nvcc
//!    memory and ≈50 s for either).
//!    Unit boundaries are content-defined (a hash of the symbol), so adding or removing one
//!    kernel changes only the unit around it and the rest stay cached;
//! 3. renders each unit ([`KernelSource::render_unit`]) into `<out>/src/*.cu`;
//! 4. compiles the units in parallel on a rayon pool of at most `jobs` threads, admitting
//!    each nvcc only while the estimated memory of those running ([`unit_memory_estimate`])
//!    fits the budget (`MemAvailable` by default). Objects go to the
//!    content-hash [`Cache`]: a unit whose source, header, toolchain versions and flags are
//!    unchanged is not recompiled;
//! 5. links all objects with `nvcc -shared` (static cudart, so the library needs no CUDA
//!    install at run time beyond the driver) into `<out>/lib<name>.so` — also cached, keyed
//!    by the objects — and writes `<out>/lib<name>.manifest.json` ([`Manifest`]).
//!
//! A warm build therefore runs nvcc zero times; [`BuildReport::nvcc_invocations`] counts.
//! nvcc's output for every unit is saved in `<out>/logs/`; a failed unit is reported with its
//! kernels' symbols and specs (JSON) and the path of its log.
//!
//! [`Builder::build_all`] adds the other kernel families to the same library, each in units of
//! its own: back-to-back chains ([`crate::b2b`]), glue ([`crate::glue`]), stitched
//! ([`crate::stitch`]) and fused attention kernels ([`crate::attention`]), listed in the
//! manifest's `b2b`, `glue`, `stitch` and `attention`.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use bolt_cutlass::{Compile, KernelResources, Toolchain};
use rayon::prelude::*;

use crate::abi::{self, ProblemKind};
use crate::cache::{self, Cache, CacheError, CacheKey, EntryKind, KeyHasher, Outcome};
use crate::manifest::{
    family_name, AttentionEntry, B2bEntry, GlueEntry, KernelEntry, Manifest, RecurrentEntry, StitchEntry, UnitEntry,
    MANIFEST_FORMAT,
};
use crate::spec::{Arch, Family, KernelSpec};

/// Turns specs into C++: names kernels, rejects invalid ones, renders translation units.
/// [`Templates`] is Bolt's (Tera templates over CUTLASS); tests and tools may bring their own.
pub trait KernelSource: Sync {
    /// The kernel's C symbol prefix: it exports bolt_kernel.h's functions
    /// (`<symbol>_can_implement`, `<symbol>_initialize`, ...). Must be a pure function of the spec.
    fn symbol(&self, spec: &KernelSpec) -> String;

    /// Rejects specs that would not compile (or not work) before nvcc is run.
    fn validate(&self, spec: &KernelSpec) -> Result<(), String> {
        let _ = spec;
        Ok(())
    }

    /// One translation unit defining every `(spec, symbol)` given, `#include`-ing
    /// `bolt_kernel.h` (and any [`KernelSource::support_files`]).
    fn render_unit(&self, kernels: &[(&KernelSpec, &str)]) -> Result<String, String>;

    /// Extra headers (file name, content) the rendered units include; written next to
    /// `bolt_kernel.h` and part of every object's cache key.
    fn support_files(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// Bolt's kernel source: symbols from [`crate::render::symbol_for`], checks from
/// [`crate::validate::validate`], units from [`crate::render::render_unit`] (Tera templates
/// over CUTLASS).
#[derive(Clone, Copy, Debug, Default)]
pub struct Templates;

impl KernelSource for Templates {
    fn symbol(&self, spec: &KernelSpec) -> String {
        crate::render::symbol_for(spec)
    }

    fn validate(&self, spec: &KernelSpec) -> Result<(), String> {
        crate::validate::validate(spec).map_err(|r| r.to_string())
    }

    fn render_unit(&self, kernels: &[(&KernelSpec, &str)]) -> Result<String, String> {
        crate::render::render_unit(kernels).map_err(|e| e.to_string())
    }
}

/// Builds `specs` with Bolt's templates and the discovered toolchain: the short form of
/// `Builder::discover(options)?.build(&Templates, specs)`.
pub fn build_library(specs: &[KernelSpec], options: BuildOptions) -> Result<BuildReport, BuildError> {
    Builder::discover(options)?.build(&Templates, specs)
}

/// The pre-generated candidate library (Bolt paper §3.2.2): for each arch, every hardware-
/// native candidate ([`crate::candidates::candidates`]) of an f16 GEMM (A row-major, B
/// column-major, f32 accumulation) and an f16 strided Conv2d fprop, 8-element aligned, with
/// the plain `alpha * acc` epilogue the profiler times mainloops with.
pub fn candidate_library_specs(archs: &[Arch]) -> Vec<KernelSpec> {
    use crate::spec::{Alignment, ConvFeatures, Element, Family, GroupMode, Layout, Types};
    let types = Types { input: Element::F16, accumulator: Element::F32, output: Element::F16 };
    let alignment = Alignment { a: 8, b: 8, c: 8 };
    let layouts = [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor];
    let families = [Family::Gemm, Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups: GroupMode::None, analytic: false })];
    let mut specs = Vec::new();
    for &arch in archs {
        for family in families {
            for candidate in crate::candidates::candidates(arch, family, types, alignment) {
                specs.push(candidate.spec(family, types, layouts, alignment, crate::epilogue::Epilogue::plain()));
            }
        }
    }
    specs
}

/// How the CUDA runtime is linked into the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cudart {
    /// `-cudart static`: self-contained, needs only the driver (`libcuda.so`) at run time.
    Static,
    /// `-cudart shared` with an rpath to the toolkit's `lib/`.
    Shared,
}

/// What to build and how.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Build directory: `src/`, `include/`, `logs/`, the library and its manifest. One build
    /// at a time per directory (a lock file makes a second one wait).
    pub out_dir: PathBuf,
    /// The library is `lib<name>.so`.
    pub name: String,
    /// Only specs for these archs are built (others are counted as skipped); `None`: all.
    pub archs: Option<Vec<Arch>>,
    /// Cache root; `None`: [`Cache::default_dir`].
    pub cache_dir: Option<PathBuf>,
    /// Most nvcc processes at once; `None`: the number of CPUs.
    pub jobs: Option<usize>,
    /// Bytes of memory the running nvcc processes may use together; `None`: `MemAvailable`
    /// from /proc/meminfo less 1 GiB.
    pub memory_budget: Option<u64>,
    /// Most kernels in one sm80 translation unit (default 8: nvcc time per unit is mostly
    /// fixed, ≈15 s + 3.5 s per kernel on 2 cores, and peak memory stays ≈0.8 GB).
    pub sm80_kernels_per_unit: usize,
    /// Most kernels in one sm90 translation unit (default 2: two TMA warp-specialized GEMMs
    /// took 50 s and 3.3 GB in one unit, 48 s + 54 s and 3.3 GB each apart).
    pub sm90_kernels_per_unit: usize,
    /// The GPUs the library will run on (default: sm80): sm80 units carry SASS for each
    /// ([`Arch::targets_for`]), so an H100 runs them without JIT-compiling their PTX.
    pub run_on: Vec<Arch>,
    /// Extra nvcc arguments for every compile (part of the cache key).
    pub nvcc_flags: Vec<String>,
    /// Ask ptxas for register/spill/shared-memory usage; parsed into [`UnitReport::resources`].
    /// Not part of the cache key (it does not change the object): the report of a cached
    /// object is read from the log saved with it, so it is empty for an object first built
    /// without this flag.
    pub ptxas_verbose: bool,
    pub cudart: Cudart,
}

impl BuildOptions {
    pub fn new(out_dir: impl Into<PathBuf>) -> BuildOptions {
        BuildOptions {
            out_dir: out_dir.into(),
            name: "bolt_kernels".into(),
            archs: None,
            cache_dir: None,
            jobs: None,
            memory_budget: None,
            sm80_kernels_per_unit: 8,
            sm90_kernels_per_unit: 2,
            run_on: vec![Arch::Sm80],
            nvcc_flags: Vec::new(),
            ptxas_verbose: false,
            cudart: Cudart::Static,
        }
    }

    fn kernels_per_unit(&self, arch: Arch) -> usize {
        match arch {
            Arch::Sm80 => self.sm80_kernels_per_unit,
            Arch::Sm90 => self.sm90_kernels_per_unit,
        }
        .max(1)
    }
}

/// Estimated peak memory of one nvcc compiling a unit of `kernels` kernels. nvcc runs its
/// stages one after another, so the peak is that of its largest stage, mostly fixed by the
/// CUTLASS headers: measured with GNU time on 2 cores, an sm80 unit peaks at 0.76 GB with one
/// GEMM and 0.77 GB with four or seven; sm90 TMA warp-specialized GEMMs at 3.29 GB alone and
/// 3.34 GB two to a unit (units of 2-3 heavier kernels reach 4.5-5 GB).
pub fn unit_memory_estimate(arch: Arch, kernels: usize) -> u64 {
    let n = kernels.max(1) as u64;
    match arch {
        Arch::Sm80 => (800 << 20) + n * (100 << 20),
        Arch::Sm90 => (2500 << 20) + n * (900 << 20),
    }
}

/// A spec [`KernelSource::validate`] turned down.
#[derive(Clone, Debug)]
pub struct Rejected {
    pub symbol: String,
    pub spec: KernelSpec,
    pub reason: String,
}

/// One translation unit of a build.
#[derive(Clone, Debug)]
pub struct UnitReport {
    /// The rendered source, `<out>/src/<name>_<arch>_<n>.cu`.
    pub source: PathBuf,
    pub arch: Arch,
    pub symbols: Vec<String>,
    /// The object in the cache.
    pub object: PathBuf,
    pub object_key: CacheKey,
    /// Whether nvcc ran for it in this build (false: cache hit).
    pub compiled: bool,
    /// nvcc's wall time when it ran.
    pub nvcc_seconds: Option<f64>,
    /// `<out>/logs/<unit>.log`: the nvcc command and its output.
    pub log: PathBuf,
    /// ptxas report per device function (with [`BuildOptions::ptxas_verbose`]).
    pub resources: Vec<KernelResources>,
}

/// What [`Builder::build`] did.
#[derive(Clone, Debug)]
pub struct BuildReport {
    pub library: PathBuf,
    pub manifest: PathBuf,
    /// Symbols in the library, sorted.
    pub symbols: Vec<String>,
    pub units: Vec<UnitReport>,
    pub rejected: Vec<Rejected>,
    /// Specs left out because their arch was not in [`BuildOptions::archs`].
    pub skipped_other_arch: usize,
    /// nvcc processes run: compiles plus links. 0 for a build whose inputs were all cached.
    pub nvcc_invocations: usize,
    pub nvcc_compiles: usize,
    pub nvcc_links: usize,
    /// Sum of nvcc compile wall times (CPU-parallel compiles overlap).
    pub compile_seconds: f64,
    /// Link wall time, when it ran.
    pub link_seconds: Option<f64>,
    pub total_seconds: f64,
    pub jobs: usize,
    pub memory_budget: u64,
}

/// One unit nvcc could not compile.
#[derive(Clone, Debug)]
pub struct UnitFailure {
    pub source: PathBuf,
    /// The saved nvcc command and output.
    pub log: PathBuf,
    /// (symbol, spec as JSON) of every kernel in the unit.
    pub kernels: Vec<(String, String)>,
    /// nvcc's error lines (the whole output is in `log`).
    pub errors: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Toolchain(#[from] bolt_cutlass::Error),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("no kernels to build ({} given, {} rejected, {} for other archs){}", given, rejected.len(), skipped, first_rejection(rejected))]
    NoKernels { given: usize, rejected: Vec<Rejected>, skipped: usize },
    #[error("glue kernel {symbol}: {reason}")]
    Glue { symbol: String, reason: String },
    #[error("stitched kernel {symbol}: {reason}")]
    Stitch { symbol: String, reason: String },
    #[error("b2b kernel {symbol}: {reason}")]
    B2b { symbol: String, reason: String },
    #[error("attention kernel {symbol}: {reason}")]
    Attention { symbol: String, reason: String },
    #[error("recurrent kernel {symbol}: {reason}")]
    Recurrent { symbol: String, reason: String },
    #[error("two different specs render to symbol `{symbol}`:\n  {first}\n  {second}")]
    SymbolClash { symbol: String, first: String, second: String },
    #[error("rendering failed for {}: {message}\n{}", symbols.join(", "), specs.join("\n"))]
    Render { symbols: Vec<String>, specs: Vec<String>, message: String },
    #[error("{}", compile_failures(failures, *units))]
    Compile { failures: Vec<UnitFailure>, units: usize },
    #[error("linking {} failed:\n  command: {command}\n  log: {}\n{errors}", library.display(), log.display())]
    Link { library: PathBuf, command: String, log: PathBuf, errors: String },
}

fn first_rejection(rejected: &[Rejected]) -> String {
    rejected.first().map(|r| format!("; e.g. {}: {}", r.symbol, r.reason)).unwrap_or_default()
}

fn compile_failures(failures: &[UnitFailure], units: usize) -> String {
    let mut s = format!("nvcc failed on {} of {units} translation units", failures.len());
    for f in failures {
        let _ = write!(s, "\n  unit {}\n  log {}", f.source.display(), f.log.display());
        for (symbol, spec) in &f.kernels {
            let _ = write!(s, "\n    kernel {symbol}: {spec}");
        }
        for line in f.errors.lines() {
            let _ = write!(s, "\n    | {line}");
        }
    }
    s
}

/// Builds kernel libraries with one toolchain and one set of options.
pub struct Builder {
    toolchain: Toolchain,
    options: BuildOptions,
}

/// What decides a unit's nvcc flags: its arch, and whether it holds chain or attention kernels
/// (which see a CUTLASS example's headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct UnitClass {
    arch: Arch,
    example: ExampleHeaders,
}

/// The CUTLASS example headers a unit compiles against, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ExampleHeaders {
    None,
    /// [`crate::b2b::include_dir`].
    B2b,
    /// [`crate::attention::include_dir`] and the attention support headers.
    Attention,
    /// [`crate::sm80::GEMM_SOFTMAX_EXAMPLE_DIR`]: CUTLASS's GemmSoftmax.
    GemmSoftmax,
}

impl UnitClass {
    fn of(arch: Arch, kernels: &UnitKernels) -> UnitClass {
        let example = match kernels {
            UnitKernels::B2b(_) => ExampleHeaders::B2b,
            UnitKernels::Attention(_) => ExampleHeaders::Attention,
            UnitKernels::Cutlass(k) if k.iter().any(|(_, s)| s.family == Family::GemmSoftmax) => {
                ExampleHeaders::GemmSoftmax
            }
            _ => ExampleHeaders::None,
        };
        UnitClass { arch, example }
    }

    /// The manifest's key for the class's flags: `sm_80`, `sm_90a`, `sm_80 b2b`,
    /// `sm_80 attention`.
    fn name(&self) -> String {
        let arch = self.arch.nvcc_arch().to_string();
        match self.example {
            ExampleHeaders::None => arch,
            ExampleHeaders::B2b => format!("{arch} b2b"),
            ExampleHeaders::Attention => format!("{arch} attention"),
            ExampleHeaders::GemmSoftmax => format!("{arch} gemm_softmax"),
        }
    }
}

/// One translation unit being built.
struct Unit {
    class: UnitClass,
    /// `<name>_<arch>_<n>`
    stem: String,
    kernels: UnitKernels,
    source_path: PathBuf,
    source_hash: String,
    key: CacheKey,
}

/// The kernels of one unit: CUTLASS kernels of one arch, back-to-back chain kernels, glue,
/// stitched or attention kernels.
enum UnitKernels {
    Cutlass(Vec<(String, KernelSpec)>),
    B2b(Vec<(String, crate::b2b::B2bSpec)>),
    Glue(Vec<(String, crate::glue::GlueSpec)>),
    Stitch(Vec<(String, crate::stitch::StitchSpec)>),
    Attention(Vec<(String, crate::attention::AttentionSpec)>),
    Recurrent(Vec<(String, crate::recurrent::RecurrentSpec)>),
}

impl UnitKernels {
    fn len(&self) -> usize {
        match self {
            UnitKernels::Cutlass(k) => k.len(),
            UnitKernels::B2b(k) => k.len(),
            UnitKernels::Glue(k) => k.len(),
            UnitKernels::Stitch(k) => k.len(),
            UnitKernels::Attention(k) => k.len(),
            UnitKernels::Recurrent(k) => k.len(),
        }
    }

    fn symbols(&self) -> Vec<String> {
        match self {
            UnitKernels::Cutlass(k) => k.iter().map(|(s, _)| s.clone()).collect(),
            UnitKernels::B2b(k) => k.iter().map(|(s, _)| s.clone()).collect(),
            UnitKernels::Glue(k) => k.iter().map(|(s, _)| s.clone()).collect(),
            UnitKernels::Stitch(k) => k.iter().map(|(s, _)| s.clone()).collect(),
            UnitKernels::Attention(k) => k.iter().map(|(s, _)| s.clone()).collect(),
            UnitKernels::Recurrent(k) => k.iter().map(|(s, _)| s.clone()).collect(),
        }
    }

    fn specs_json(&self) -> Vec<String> {
        match self {
            UnitKernels::Cutlass(k) => k.iter().map(|(_, spec)| spec_json(spec)).collect(),
            UnitKernels::B2b(k) => {
                k.iter().map(|(_, spec)| serde_json::to_string(spec).expect("b2b spec serialises")).collect()
            }
            UnitKernels::Glue(k) => {
                k.iter().map(|(_, spec)| serde_json::to_string(spec).expect("glue spec serialises")).collect()
            }
            UnitKernels::Stitch(k) => {
                k.iter().map(|(_, spec)| serde_json::to_string(spec).expect("stitch spec serialises")).collect()
            }
            UnitKernels::Attention(k) => {
                k.iter().map(|(_, spec)| serde_json::to_string(spec).expect("attention spec serialises")).collect()
            }
            UnitKernels::Recurrent(k) => {
                k.iter().map(|(_, spec)| serde_json::to_string(spec).expect("recurrent spec serialises")).collect()
            }
        }
    }
}

/// Stitched kernels per translation unit: each is small, so a unit is mostly CUTLASS's
/// headers; a few dozen share that cost while units still compile in parallel.
pub const STITCH_KERNELS_PER_UNIT: usize = 24;

/// Placeholders standing for per-build paths in cache keys and manifests.
const SOURCE_PLACEHOLDER: &str = "<source.cu>";
const OBJECT_PLACEHOLDER: &str = "<object.o>";
const INCLUDE_PLACEHOLDER: &str = "<build>/include";

impl Builder {
    pub fn new(toolchain: Toolchain, options: BuildOptions) -> Builder {
        Builder { toolchain, options }
    }

    /// With the toolchain found by [`Toolchain::discover`].
    pub fn discover(options: BuildOptions) -> Result<Builder, BuildError> {
        Ok(Builder::new(Toolchain::discover()?, options))
    }

    pub fn toolchain(&self) -> &Toolchain {
        &self.toolchain
    }

    pub fn options(&self) -> &BuildOptions {
        &self.options
    }

    /// The nvcc invocation for one unit (b2b units also see CUTLASS's fused-kernel example
    /// headers, [`crate::b2b::include_dir`]; attention units the fused attention example's,
    /// [`crate::attention::include_dir`], and `include`'s [`crate::attention::SUPPORT_DIR`]).
    fn compile_command(
        &self,
        source: &Path,
        output: &Path,
        include: &Path,
        class: UnitClass,
        ptxas: bool,
    ) -> Compile<'_> {
        let mut c = class
            .arch
            .targets_for(self.toolchain.compile(source, output), &self.options.run_on)
            .include(include)
            .ptxas_verbose(ptxas);
        match class.example {
            ExampleHeaders::None => {}
            ExampleHeaders::B2b => c = c.include(crate::b2b::include_dir(&self.toolchain)),
            ExampleHeaders::Attention => {
                c = c
                    .include(include.join(crate::attention::SUPPORT_DIR))
                    .include(crate::attention::include_dir(&self.toolchain, class.arch))
            }
            ExampleHeaders::GemmSoftmax => {
                c = c.include(self.toolchain.cutlass_dir().join(crate::sm80::GEMM_SOFTMAX_EXAMPLE_DIR))
            }
        }
        for flag in &self.options.nvcc_flags {
            c = c.arg(flag);
        }
        c
    }

    /// The flags of [`Builder::compile_command`] with per-build paths as placeholders: what
    /// the cache key and the manifest record.
    fn canonical_flags(&self, class: UnitClass) -> Result<Vec<String>, BuildError> {
        let c = self.compile_command(
            Path::new(SOURCE_PLACEHOLDER),
            Path::new(OBJECT_PLACEHOLDER),
            Path::new(INCLUDE_PLACEHOLDER),
            class,
            false,
        );
        Ok(c.args()?.into_iter().map(|a| a.to_string_lossy().into_owned()).collect())
    }

    fn link_flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = vec!["-shared".into(), "-cudart".into()];
        match self.options.cudart {
            Cudart::Static => flags.push("static".into()),
            Cudart::Shared => {
                flags.push("shared".into());
                flags.push("-Xlinker".into());
                flags.push(format!("-rpath,{}", self.toolchain.cuda().root().join("lib").display()));
            }
        }
        // Every symbol resolved at link time (a missing one fails the build, not the load);
        // the static cudart's symbols stay private to the library.
        flags.extend(["-Xlinker", "--no-undefined", "-Xlinker", "--exclude-libs,ALL"].map(String::from));
        flags
    }

    /// Builds `specs` with `source` into `<out>/lib<name>.so` + manifest.
    pub fn build(&self, source: &dyn KernelSource, specs: &[KernelSpec]) -> Result<BuildReport, BuildError> {
        self.build_all(source, specs, &[], &[], &[], &[], &[])
    }

    /// [`Builder::build`] plus back-to-back chain kernels ([`crate::b2b`]) and glue kernels
    /// ([`crate::glue`]) in the same library. Chain kernels go in units of up to
    /// [`crate::b2b::KERNELS_PER_UNIT`] with the fused-kernel example headers on the include
    /// path; glue kernels in one unit. Both compile like the sm80 kernels (SASS for each GPU of
    /// [`BuildOptions::run_on`] + compute_80 PTX: they load on any GPU Bolt targets) and are listed in the manifest's
    /// `b2b` and `glue`. Stitched kernels ([`crate::stitch`]) likewise, in units of up to
    /// [`STITCH_KERNELS_PER_UNIT`], listed in `stitch`; fused attention kernels
    /// ([`crate::attention`]) in units of up to [`crate::attention::KERNELS_PER_UNIT`] with
    /// CUTLASS's attention example headers on the include path, listed in `attention`. An
    /// invalid b2b, glue, stitch or attention spec fails the build (callers validate first).
    pub fn build_all(
        &self,
        source: &dyn KernelSource,
        specs: &[KernelSpec],
        b2b: &[crate::b2b::B2bSpec],
        glue: &[crate::glue::GlueSpec],
        stitch: &[crate::stitch::StitchSpec],
        attention: &[crate::attention::AttentionSpec],
        recurrent: &[crate::recurrent::RecurrentSpec],
    ) -> Result<BuildReport, BuildError> {
        let start = Instant::now();
        let opts = &self.options;
        let out = &opts.out_dir;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BuildError::Io { path, source }
        };

        // 1. Select, name, deduplicate and validate.
        let mut selected: BTreeMap<String, KernelSpec> = BTreeMap::new();
        let mut rejected = Vec::new();
        let mut skipped = 0;
        for spec in specs {
            if opts.archs.as_ref().is_some_and(|archs| !archs.contains(&spec.arch)) {
                skipped += 1;
                continue;
            }
            let symbol = source.symbol(spec);
            if let Some(prev) = selected.get(&symbol) {
                if prev != spec {
                    return Err(BuildError::SymbolClash { symbol, first: spec_json(prev), second: spec_json(spec) });
                }
                continue;
            }
            if let Some(r) = rejected.iter().find(|r: &&Rejected| r.symbol == symbol) {
                if r.spec != *spec {
                    return Err(BuildError::SymbolClash { symbol, first: spec_json(&r.spec), second: spec_json(spec) });
                }
                continue;
            }
            match source.validate(spec) {
                Ok(()) => {
                    selected.insert(symbol, spec.clone());
                }
                Err(reason) => {
                    tracing::warn!("skipping {symbol}: {reason}");
                    rejected.push(Rejected { symbol, spec: spec.clone(), reason });
                }
            }
        }
        let mut glue_selected: BTreeMap<String, crate::glue::GlueSpec> = BTreeMap::new();
        for g in glue {
            let symbol = crate::glue::symbol_for(g);
            crate::glue::validate(g).map_err(|r| BuildError::Glue { symbol: symbol.clone(), reason: r.to_string() })?;
            glue_selected.insert(symbol, *g);
        }
        let mut b2b_selected: BTreeMap<String, crate::b2b::B2bSpec> = BTreeMap::new();
        for spec in b2b {
            let symbol = crate::b2b::symbol_for(spec);
            crate::b2b::validate(spec)
                .map_err(|r| BuildError::B2b { symbol: symbol.clone(), reason: r.to_string() })?;
            b2b_selected.insert(symbol, spec.clone());
        }
        let mut stitch_selected: BTreeMap<String, crate::stitch::StitchSpec> = BTreeMap::new();
        for spec in stitch {
            let symbol = crate::stitch::symbol_for(spec);
            crate::stitch::validate(spec)
                .map_err(|r| BuildError::Stitch { symbol: symbol.clone(), reason: r.to_string() })?;
            stitch_selected.insert(symbol, spec.clone());
        }
        let mut attention_selected: BTreeMap<String, crate::attention::AttentionSpec> = BTreeMap::new();
        for spec in attention {
            let symbol = crate::attention::symbol_for(spec);
            crate::attention::validate(spec)
                .map_err(|r| BuildError::Attention { symbol: symbol.clone(), reason: r.to_string() })?;
            attention_selected.insert(symbol, *spec);
        }
        let mut recurrent_selected: BTreeMap<String, crate::recurrent::RecurrentSpec> = BTreeMap::new();
        for spec in recurrent {
            let symbol = crate::recurrent::symbol_for(spec);
            crate::recurrent::validate(spec)
                .map_err(|r| BuildError::Recurrent { symbol: symbol.clone(), reason: r.to_string() })?;
            recurrent_selected.insert(symbol, *spec);
        }
        if selected.is_empty()
            && recurrent_selected.is_empty()
            && glue_selected.is_empty()
            && b2b_selected.is_empty()
            && stitch_selected.is_empty()
            && attention_selected.is_empty()
        {
            return Err(BuildError::NoKernels { given: specs.len(), rejected, skipped });
        }

        // 2. Lay out the build directory, held for the whole build (a second build into the
        // same directory waits). src/ and logs/ hold only this build's files.
        std::fs::create_dir_all(out).map_err(io(out))?;
        let lock_path = out.join(".bolt-build.lock");
        let lock_file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        let mut out_lock = fd_lock::RwLock::new(lock_file);
        let _out_guard = out_lock.write().map_err(io(&lock_path))?;
        for sub in ["src", "logs"] {
            let dir = out.join(sub);
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
            }
        }
        for sub in ["src", "logs", "include"] {
            let dir = out.join(sub);
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let include = out.join("include");
        let mut headers = vec![(abi::HEADER_NAME.to_string(), abi::HEADER.to_string())];
        headers.extend(source.support_files());
        for (name, content) in &headers {
            let path = include.join(name);
            if std::fs::read_to_string(&path).ok().as_deref() != Some(content.as_str()) {
                cache::write_atomic(&path, content.as_bytes()).map_err(io(&path))?;
            }
        }
        // Headers only attention units include (and only their cache keys hash).
        let attention_headers: Vec<(String, String)> = if attention_selected.is_empty() {
            Vec::new()
        } else {
            crate::attention::write_support_files(&include)
                .map_err(io(&include.join(crate::attention::SUPPORT_DIR)))?;
            crate::attention::SUPPORT_FILES
                .iter()
                .map(|(name, content)| (format!("{}/{name}", crate::attention::SUPPORT_DIR), content.to_string()))
                .collect()
        };
        let cache_root = match &opts.cache_dir {
            Some(dir) => dir.clone(),
            None => Cache::default_dir().ok_or(bolt_cutlass::Error::NoCacheDir)?,
        };
        let cache = Cache::open(&cache_root).map_err(io(&cache_root))?;

        // 3. Group into units, per arch.
        // GemmSoftmax kernels get units of their own: only they see the example's headers.
        let mut by_arch: BTreeMap<(Arch, bool), Vec<(String, KernelSpec)>> = BTreeMap::new();
        for (symbol, spec) in selected {
            by_arch.entry((spec.arch, spec.family == Family::GemmSoftmax)).or_default().push((symbol, spec));
        }
        let mut groups = Vec::new();
        for ((arch, softmax), kernels) in by_arch {
            let tag = if softmax { format!("{}_softmax", arch_tag(arch)) } else { arch_tag(arch).to_string() };
            for (i, kernels) in group_units(kernels, opts.kernels_per_unit(arch)).into_iter().enumerate() {
                groups.push((arch, format!("{}_{tag}_{i:03}", opts.name), UnitKernels::Cutlass(kernels)));
            }
        }
        let b2b_units = group_units(b2b_selected.into_iter().collect(), crate::b2b::KERNELS_PER_UNIT);
        for (i, kernels) in b2b_units.into_iter().enumerate() {
            groups.push((Arch::Sm80, format!("{}_b2b_{i:03}", opts.name), UnitKernels::B2b(kernels)));
        }
        if !glue_selected.is_empty() {
            // Small kernels: one unit.
            groups.push((
                Arch::Sm80,
                format!("{}_glue_000", opts.name),
                UnitKernels::Glue(glue_selected.into_iter().collect()),
            ));
        }
        let stitch_units = group_units(stitch_selected.into_iter().collect(), STITCH_KERNELS_PER_UNIT);
        for (i, kernels) in stitch_units.into_iter().enumerate() {
            groups.push((Arch::Sm80, format!("{}_stitch_{i:03}", opts.name), UnitKernels::Stitch(kernels)));
        }
        // Attention units per arch: each arch's kernels see their own example's headers.
        let mut attention_by_arch: BTreeMap<Arch, Vec<(String, crate::attention::AttentionSpec)>> = BTreeMap::new();
        for (symbol, spec) in attention_selected {
            attention_by_arch.entry(spec.arch).or_default().push((symbol, spec));
        }
        for (arch, kernels) in attention_by_arch {
            let tag = match arch {
                Arch::Sm80 => "attention".to_string(),
                Arch::Sm90 => format!("{}_attention", arch_tag(arch)),
            };
            for (i, kernels) in group_units(kernels, crate::attention::kernels_per_unit(arch)).into_iter().enumerate() {
                groups.push((arch, format!("{}_{tag}_{i:03}", opts.name), UnitKernels::Attention(kernels)));
            }
        }
        let recurrent_units = group_units(recurrent_selected.into_iter().collect(), crate::recurrent::KERNELS_PER_UNIT);
        for (i, kernels) in recurrent_units.into_iter().enumerate() {
            groups.push((Arch::Sm80, format!("{}_recurrent_{i:03}", opts.name), UnitKernels::Recurrent(kernels)));
        }

        let jobs = opts.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
        let budget = opts.memory_budget.unwrap_or_else(default_memory_budget);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .thread_name(|i| format!("bolt-nvcc-{i}"))
            .build()
            .expect("thread pool");

        // 4. Render and hash (in parallel: rendering many units takes a while too).
        let mut flags_by_class = BTreeMap::new();
        for (arch, _, kernels) in &groups {
            let class = UnitClass::of(*arch, kernels);
            if let std::collections::btree_map::Entry::Vacant(e) = flags_by_class.entry(class) {
                e.insert(self.canonical_flags(class)?);
            }
        }
        let versions = (self.toolchain.cuda_version().to_string(), self.toolchain.cutlass_version().to_string());
        let units: Vec<Unit> = pool.install(|| {
            groups
                .into_par_iter()
                .map(|(arch, stem, kernels)| {
                    let text = match &kernels {
                        UnitKernels::Cutlass(kernels) => {
                            let pairs: Vec<(&KernelSpec, &str)> =
                                kernels.iter().map(|(s, k)| (k, s.as_str())).collect();
                            source.render_unit(&pairs)
                        }
                        UnitKernels::B2b(kernels) => {
                            let pairs: Vec<(&crate::b2b::B2bSpec, &str)> =
                                kernels.iter().map(|(s, k)| (k, s.as_str())).collect();
                            crate::b2b::render_unit(&pairs).map_err(|e| e.to_string())
                        }
                        UnitKernels::Glue(kernels) => {
                            let pairs: Vec<(&crate::glue::GlueSpec, &str)> =
                                kernels.iter().map(|(s, k)| (k, s.as_str())).collect();
                            crate::glue::render_unit(&pairs).map_err(|e| e.to_string())
                        }
                        UnitKernels::Stitch(kernels) => {
                            let pairs: Vec<(&crate::stitch::StitchSpec, &str)> =
                                kernels.iter().map(|(s, k)| (k, s.as_str())).collect();
                            crate::stitch::render_unit(&pairs).map_err(|e| e.to_string())
                        }
                        UnitKernels::Attention(kernels) => {
                            let pairs: Vec<(&crate::attention::AttentionSpec, &str)> =
                                kernels.iter().map(|(s, k)| (k, s.as_str())).collect();
                            crate::attention::render_unit(&pairs).map_err(|e| e.to_string())
                        }
                        UnitKernels::Recurrent(kernels) => {
                            let pairs: Vec<(&crate::recurrent::RecurrentSpec, &str)> =
                                kernels.iter().map(|(s, k)| (k, s.as_str())).collect();
                            crate::recurrent::render_unit(&pairs).map_err(|e| e.to_string())
                        }
                    }
                    .map_err(|message| BuildError::Render {
                        symbols: kernels.symbols(),
                        specs: kernels.specs_json(),
                        message,
                    })?;
                    let source_path = out.join("src").join(format!("{stem}.cu"));
                    std::fs::write(&source_path, &text).map_err(io(&source_path))?;
                    let mut h = KeyHasher::new("bolt-object-v1");
                    h.str("source", &text);
                    let class = UnitClass::of(arch, &kernels);
                    let extra: &[(String, String)] =
                        if class.example == ExampleHeaders::Attention { &attention_headers } else { &[] };
                    for (name, content) in headers.iter().chain(extra) {
                        h.str("header-name", name).str("header", content);
                    }
                    h.str("cuda", &versions.0).str("cutlass", &versions.1).str("arch", arch.nvcc_arch().number());
                    for flag in &flags_by_class[&class] {
                        h.str("flag", flag);
                    }
                    let key = h.finish();
                    let source_hash = blake3::hash(text.as_bytes()).to_hex().to_string();
                    Ok(Unit { class, stem, kernels, source_path, source_hash, key })
                })
                .collect::<Result<Vec<_>, BuildError>>()
        })?;
        let kernel_count: usize = units.iter().map(|u| u.kernels.len()).sum();
        tracing::info!(
            "building {kernel_count} kernels in {} translation units ({jobs} jobs, {:.1} GiB memory budget)",
            units.len(),
            budget as f64 / (1u64 << 30) as f64
        );

        // 5. Compile what the cache lacks; biggest units first so they pack into the budget.
        let gate = MemoryGate::new(budget);
        // A progress bar on a terminal (indicatif draws nothing when stderr is not one).
        let bar = indicatif::ProgressBar::new(units.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} building kernels [{bar:30}] {pos}/{len} units {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let compiles = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let mut order: Vec<usize> = (0..units.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(unit_memory(&units[i])));
        let results: Vec<(usize, Result<UnitReport, UnitFailure>)> = pool.install(|| {
            order
                .par_iter()
                .with_max_len(1)
                .map(|&i| {
                    let r = self.compile_unit(&units[i], &cache, &include, &gate, &compiles);
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    bar.inc(1);
                    bar.set_message(units[i].stem.clone());
                    match &r {
                        Ok(u) if u.compiled => tracing::info!(
                            "[{n}/{}] compiled {} ({} kernels, {}) in {:.1}s",
                            units.len(),
                            units[i].stem,
                            units[i].kernels.len(),
                            units[i].class.arch.nvcc_arch(),
                            u.nvcc_seconds.unwrap_or_default()
                        ),
                        Ok(_) => tracing::debug!("[{n}/{}] {} cached", units.len(), units[i].stem),
                        Err(f) => {
                            tracing::error!("[{n}/{}] {} failed, see {}", units.len(), units[i].stem, f.log.display())
                        }
                    }
                    (i, r)
                })
                .collect()
        });
        bar.finish_and_clear();
        let mut reports: Vec<Option<UnitReport>> = vec![None; units.len()];
        let mut failures = Vec::new();
        for (i, r) in results {
            match r {
                Ok(report) => reports[i] = Some(report),
                Err(failure) => failures.push(failure),
            }
        }
        if !failures.is_empty() {
            failures.sort_by(|a, b| a.source.cmp(&b.source));
            return Err(BuildError::Compile { failures, units: units.len() });
        }
        let reports: Vec<UnitReport> = reports.into_iter().map(|r| r.expect("every unit reported")).collect();

        // 6. Link (cached by the objects' keys and the link flags).
        let library = out.join(format!("lib{}.so", opts.name));
        let link_flags = self.link_flags();
        let mut h = KeyHasher::new("bolt-library-v1");
        h.str("cuda", &versions.0);
        for flag in &link_flags {
            h.str("flag", flag);
        }
        for unit in &units {
            h.part("object", &unit.key.0);
        }
        let library_key = h.finish();
        let link_log = out.join("logs").join(format!("lib{}.link.log", opts.name));
        let links = AtomicUsize::new(0);
        let mut link_seconds = None;
        let (cached_library, _) = cache
            .get_or_build(EntryKind::Library, &library_key, |tmp| {
                links.fetch_add(1, Ordering::SeqCst);
                let t = Instant::now();
                let r = self.link(tmp, &reports, &link_flags, &link_log);
                link_seconds = Some(t.elapsed().as_secs_f64());
                r
            })
            .map_err(|e| match e {
                CacheError::Build(e) => e,
                CacheError::Io { path, source } => BuildError::Io { path, source },
            })?;
        cache::copy_atomic(&cached_library, &library).map_err(io(&library))?;

        // 7. Manifest.
        let (library_size, library_blake3) = cache::hash_file(&library).map_err(io(&library))?;
        let mut kernels = Vec::new();
        let mut glue_entries = Vec::new();
        let mut b2b_entries = Vec::new();
        let mut stitch_entries = Vec::new();
        let mut attention_entries = Vec::new();
        let mut recurrent_entries = Vec::new();
        for (i, unit) in units.iter().enumerate() {
            let cutlass = match &unit.kernels {
                UnitKernels::Cutlass(k) => k,
                UnitKernels::B2b(k) => {
                    b2b_entries.extend(k.iter().map(|(symbol, spec)| B2bEntry {
                        symbol: symbol.clone(),
                        unit: i,
                        spec: spec.clone(),
                    }));
                    continue;
                }
                UnitKernels::Glue(k) => {
                    glue_entries.extend(k.iter().map(|(symbol, spec)| GlueEntry {
                        symbol: symbol.clone(),
                        unit: i,
                        spec: *spec,
                    }));
                    continue;
                }
                UnitKernels::Stitch(k) => {
                    stitch_entries.extend(k.iter().map(|(symbol, spec)| StitchEntry {
                        symbol: symbol.clone(),
                        unit: i,
                        spec: spec.clone(),
                    }));
                    continue;
                }
                UnitKernels::Attention(k) => {
                    attention_entries.extend(k.iter().map(|(symbol, spec)| AttentionEntry {
                        symbol: symbol.clone(),
                        unit: i,
                        spec: *spec,
                    }));
                    continue;
                }
                UnitKernels::Recurrent(k) => {
                    recurrent_entries.extend(k.iter().map(|(symbol, spec)| RecurrentEntry {
                        symbol: symbol.clone(),
                        unit: i,
                        spec: *spec,
                    }));
                    continue;
                }
            };
            for (symbol, spec) in cutlass {
                kernels.push(KernelEntry {
                    symbol: symbol.clone(),
                    family: family_name(&spec.family).into(),
                    arch: spec.arch,
                    nvcc_arch: unit.class.arch.nvcc_arch().to_string(),
                    problem: ProblemKind::of(&spec.family),
                    unit: i,
                    source_hash: unit.source_hash.clone(),
                    spec: spec.clone(),
                });
            }
        }
        kernels.sort_by(|a, b| a.symbol.cmp(&b.symbol));
        b2b_entries.sort_by(|a, b| a.symbol.cmp(&b.symbol));
        stitch_entries.sort_by(|a, b| a.symbol.cmp(&b.symbol));
        attention_entries.sort_by(|a, b| a.symbol.cmp(&b.symbol));
        recurrent_entries.sort_by(|a, b| a.symbol.cmp(&b.symbol));
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            abi_version: abi::ABI_VERSION,
            library: library.file_name().expect("file name").to_string_lossy().into_owned(),
            library_size,
            library_blake3,
            cuda_version: versions.0.clone(),
            cutlass_version: versions.1.clone(),
            nvcc_flags: flags_by_class.iter().map(|(c, f)| (c.name(), f.clone())).collect(),
            link_flags,
            units: units
                .iter()
                .map(|u| UnitEntry {
                    source: format!("{}.cu", u.stem),
                    nvcc_arch: u.class.arch.nvcc_arch().to_string(),
                    source_hash: u.source_hash.clone(),
                    object_key: u.key.hex(),
                    symbols: u.kernels.symbols(),
                })
                .collect(),
            kernels,
            b2b: b2b_entries,
            glue: glue_entries,
            stitch: stitch_entries,
            attention: attention_entries,
            recurrent: recurrent_entries,
        };
        let manifest_path = Manifest::path_for(&library);
        manifest.write(&manifest_path).map_err(io(&manifest_path))?;

        let nvcc_compiles = compiles.load(Ordering::SeqCst);
        let nvcc_links = links.load(Ordering::SeqCst);
        let report = BuildReport {
            library,
            manifest: manifest_path,
            symbols: manifest
                .kernels
                .iter()
                .map(|k| k.symbol.clone())
                .chain(manifest.b2b.iter().map(|g| g.symbol.clone()))
                .chain(manifest.glue.iter().map(|g| g.symbol.clone()))
                .chain(manifest.stitch.iter().map(|g| g.symbol.clone()))
                .chain(manifest.attention.iter().map(|g| g.symbol.clone()))
                .chain(manifest.recurrent.iter().map(|g| g.symbol.clone()))
                .collect(),
            compile_seconds: reports.iter().filter_map(|u| u.nvcc_seconds).sum(),
            units: reports,
            rejected,
            skipped_other_arch: skipped,
            nvcc_invocations: nvcc_compiles + nvcc_links,
            nvcc_compiles,
            nvcc_links,
            link_seconds,
            total_seconds: start.elapsed().as_secs_f64(),
            jobs,
            memory_budget: budget,
        };
        tracing::info!(
            "built {} ({} kernels, {} units; nvcc ran {} times) in {:.1}s",
            report.library.display(),
            report.symbols.len(),
            report.units.len(),
            report.nvcc_invocations,
            report.total_seconds
        );
        Ok(report)
    }

    /// Gets one unit's object from the cache, compiling it on a miss.
    fn compile_unit(
        &self,
        unit: &Unit,
        cache: &Cache,
        include: &Path,
        gate: &MemoryGate,
        compiles: &AtomicUsize,
    ) -> Result<UnitReport, UnitFailure> {
        let log = self.options.out_dir.join("logs").join(format!("{}.log", unit.stem));
        let mut nvcc_seconds = None;
        let built = cache.get_or_build(EntryKind::Object, &unit.key, |tmp| {
            let _memory = gate.acquire(unit_memory(unit));
            compiles.fetch_add(1, Ordering::SeqCst);
            let compile = self.compile_command(&unit.source_path, tmp, include, unit.class, self.options.ptxas_verbose);
            let command =
                compile.args().map(|a| bolt_cutlass::render_command(self.toolchain.nvcc(), &a)).unwrap_or_default();
            tracing::debug!("{command}");
            let t = Instant::now();
            let result = compile.run();
            nvcc_seconds = Some(t.elapsed().as_secs_f64());
            match result {
                Ok(done) => {
                    let text = format!(
                        "command: {command}\nstatus: ok ({:.1}s)\n\n{}",
                        done.elapsed.as_secs_f64(),
                        done.stderr
                    );
                    Ok(Some(text))
                }
                Err(bolt_cutlass::Error::CompileFailed { status, command, stderr, .. }) => {
                    Err((format!("command: {command}\nstatus: {status}\n\n{stderr}"), error_lines(&stderr)))
                }
                Err(other) => Err((format!("command: {command}\n\n{other}"), other.to_string())),
            }
        });
        match built {
            Ok((object, outcome)) => {
                let saved = cache.log_path(EntryKind::Object, &unit.key);
                let text = std::fs::read_to_string(&saved).unwrap_or_default();
                let _ = std::fs::write(&log, &text);
                let resources =
                    if self.options.ptxas_verbose { bolt_cutlass::parse_ptxas_report(&text) } else { Vec::new() };
                Ok(UnitReport {
                    source: unit.source_path.clone(),
                    arch: unit.class.arch,
                    symbols: unit.kernels.symbols(),
                    object,
                    object_key: unit.key,
                    compiled: outcome != Outcome::Hit,
                    nvcc_seconds,
                    log,
                    resources,
                })
            }
            Err(e) => {
                let (text, errors) = match e {
                    CacheError::Build(pair) => pair,
                    CacheError::Io { path, source } => {
                        let m = format!("{}: {source}", path.display());
                        (m.clone(), m)
                    }
                };
                let _ = std::fs::write(&log, &text);
                Err(UnitFailure {
                    source: unit.source_path.clone(),
                    log,
                    kernels: unit.kernels.symbols().into_iter().zip(unit.kernels.specs_json()).collect(),
                    errors,
                })
            }
        }
    }

    /// `nvcc <link flags> -o <output> <objects>`.
    fn link(
        &self,
        output: &Path,
        units: &[UnitReport],
        flags: &[String],
        log: &Path,
    ) -> Result<Option<String>, BuildError> {
        let mut cmd = Command::new(self.toolchain.nvcc());
        cmd.args(flags).arg("-o").arg(output).args(units.iter().map(|u| &u.object));
        let args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_owned()).collect();
        let command = bolt_cutlass::render_command(self.toolchain.nvcc(), &args);
        tracing::debug!("{command}");
        let result = cmd.output().map_err(|source| BuildError::Io { path: self.toolchain.nvcc().into(), source })?;
        let stderr = String::from_utf8_lossy(&result.stderr).into_owned() + &String::from_utf8_lossy(&result.stdout);
        let text = format!("command: {command}\nstatus: {}\n\n{stderr}", result.status);
        let _ = std::fs::write(log, &text);
        if !result.status.success() {
            return Err(BuildError::Link {
                library: output.into(),
                command,
                log: log.into(),
                errors: error_lines(&stderr),
            });
        }
        Ok(Some(text))
    }
}

fn spec_json(spec: &KernelSpec) -> String {
    serde_json::to_string(spec).expect("specs serialise")
}

fn arch_tag(arch: Arch) -> &'static str {
    match arch {
        Arch::Sm80 => "sm80",
        Arch::Sm90 => "sm90",
    }
}

fn unit_memory(unit: &Unit) -> u64 {
    unit_memory_estimate(unit.class.arch, unit.kernels.len())
}

/// The lines of compiler output that carry errors (at most 20), else its last 20 lines.
fn error_lines(output: &str) -> String {
    let errors: Vec<&str> = output.lines().filter(|l| l.contains("error")).take(20).collect();
    if !errors.is_empty() {
        return errors.join("\n");
    }
    let lines: Vec<&str> = output.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Splits kernels (of one arch) into units of at most `max` kernels. Kernels are taken in
/// symbol order; a unit ends after a kernel whose symbol hashes to a boundary (probability
/// 1/(2·max)) or when full. Boundaries depend only on the symbols around them, so adding or
/// removing a kernel reshapes only its own unit (and rarely the next): the other units'
/// sources, and so their cached objects, stay the same. Units average ≈80% of `max`.
pub fn group_units<T>(mut kernels: Vec<(String, T)>, max: usize) -> Vec<Vec<(String, T)>> {
    kernels.sort_by(|a, b| a.0.cmp(&b.0));
    let max = max.max(1);
    let period = 2 * max as u64;
    let mut units = Vec::new();
    let mut current = Vec::new();
    for (symbol, item) in kernels {
        let hash = blake3::hash(symbol.as_bytes());
        let boundary = u64::from_le_bytes(hash.as_bytes()[..8].try_into().expect("8 bytes")) % period == 0;
        current.push((symbol, item));
        if boundary || current.len() == max {
            units.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        units.push(current);
    }
    units
}

/// `MemAvailable` from /proc/meminfo less 1 GiB (at least 1 GiB); 4 GiB when unreadable.
pub fn default_memory_budget() -> u64 {
    mem_available().map_or(4 << 30, |avail| avail.saturating_sub(1 << 30).max(1 << 30))
}

/// `MemAvailable` in bytes.
pub fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Admits work while the estimated memory of everything admitted fits a budget. A request
/// larger than the whole budget is admitted alone.
pub struct MemoryGate {
    budget: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

pub struct MemoryPermit<'a> {
    gate: &'a MemoryGate,
    amount: u64,
}

impl MemoryGate {
    pub fn new(budget: u64) -> MemoryGate {
        MemoryGate { budget: budget.max(1), used: Mutex::new(0), freed: Condvar::new() }
    }

    /// Blocks until `amount` (capped at the budget) fits.
    pub fn acquire(&self, amount: u64) -> MemoryPermit<'_> {
        let amount = amount.min(self.budget);
        let mut used = self.used.lock().expect("memory gate");
        while *used + amount > self.budget {
            used = self.freed.wait(used).expect("memory gate");
        }
        *used += amount;
        MemoryPermit { gate: self, amount }
    }

    pub fn in_use(&self) -> u64 {
        *self.used.lock().expect("memory gate")
    }
}

impl Drop for MemoryPermit<'_> {
    fn drop(&mut self) {
        *self.gate.used.lock().expect("memory gate") -= self.amount;
        self.gate.freed.notify_all();
    }
}

impl fmt::Debug for MemoryGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryGate").field("budget", &self.budget).field("in_use", &self.in_use()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    fn names(n: usize) -> Vec<(String, ())> {
        (0..n).map(|i| (format!("kernel_{i:04}"), ())).collect()
    }

    fn shape(units: &[Vec<(String, ())>]) -> Vec<Vec<String>> {
        units.iter().map(|u| u.iter().map(|(s, _)| s.clone()).collect()).collect()
    }

    #[test]
    fn units_are_bounded_deterministic_and_stable_under_insertion() {
        let all = names(400);
        let units = group_units(all.clone(), 4);
        assert!(units.iter().all(|u| !u.is_empty() && u.len() <= 4));
        assert_eq!(units.iter().map(Vec::len).sum::<usize>(), 400);
        let mean = 400.0 / units.len() as f64;
        assert!((2.5..=4.0).contains(&mean), "mean unit size {mean}");
        let mut shuffled = all.clone();
        shuffled.reverse();
        assert_eq!(shape(&group_units(shuffled, 4)), shape(&units));
        assert!(group_units(all.clone(), 1).iter().all(|u| u.len() == 1));

        // One more kernel leaves most units untouched.
        let mut more = all.clone();
        more.push(("kernel_0200a".into(), ()));
        let before = shape(&units);
        let after = shape(&group_units(more, 4));
        let unchanged = after.iter().filter(|u| before.contains(u)).count();
        assert!(unchanged + 3 >= before.len(), "{unchanged} of {} units unchanged", before.len());
    }

    #[test]
    fn memory_gate_keeps_within_budget() {
        let gate = Arc::new(MemoryGate::new(10));
        let peak = Arc::new(AtomicU64::new(0));
        std::thread::scope(|s| {
            for i in 0..8u64 {
                let (gate, peak) = (gate.clone(), peak.clone());
                s.spawn(move || {
                    let _p = gate.acquire(3 + i % 3);
                    peak.fetch_max(gate.in_use(), Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                });
            }
        });
        assert!(peak.load(Ordering::SeqCst) <= 10);
        assert_eq!(gate.in_use(), 0);
        // Larger than the budget: admitted alone rather than never.
        let _big = gate.acquire(100);
        assert_eq!(gate.in_use(), 10);
    }

    #[test]
    fn candidate_library_is_valid_and_uniquely_named() {
        use crate::spec::Family;
        for arch in [Arch::Sm80, Arch::Sm90] {
            let specs = candidate_library_specs(&[arch]);
            assert!(specs.iter().any(|s| s.family == Family::Gemm));
            assert!(specs.iter().any(|s| matches!(s.family, Family::Conv2dFprop(_))));
            let mut symbols = std::collections::HashSet::new();
            for spec in &specs {
                assert_eq!(spec.arch, arch);
                Templates.validate(spec).unwrap();
                assert!(symbols.insert(Templates.symbol(spec)), "duplicate symbol for {spec:?}");
            }
            eprintln!("{arch:?}: {} candidate kernels", specs.len());
        }
    }

    #[test]
    fn reads_meminfo() {
        if Path::new("/proc/meminfo").exists() {
            assert!(mem_available().unwrap() > 0);
        }
        assert!(default_memory_budget() >= 1 << 30);
    }
}
