//! A small typed nvcc driver: one source file to an object file or cubin.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};
use crate::Toolchain;

/// GPU architectures Bolt targets. The `a` variants enable architecture-specific features
/// (Hopper wgmma/TMA/setmaxnreg, Blackwell tcgen05) that CUTLASS 3.x kernels need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    Sm75,
    Sm80,
    Sm86,
    Sm89,
    Sm90,
    Sm90a,
    Sm100a,
    Sm120a,
}

impl Arch {
    pub const ALL: [Arch; 8] =
        [Arch::Sm75, Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90, Arch::Sm90a, Arch::Sm100a, Arch::Sm120a];

    /// The number nvcc uses in `sm_XX` / `compute_XX`, e.g. `90a`.
    pub fn number(self) -> &'static str {
        match self {
            Arch::Sm75 => "75",
            Arch::Sm80 => "80",
            Arch::Sm86 => "86",
            Arch::Sm89 => "89",
            Arch::Sm90 => "90",
            Arch::Sm90a => "90a",
            Arch::Sm100a => "100a",
            Arch::Sm120a => "120a",
        }
    }

    /// The value of `-gencode`: SASS for exactly this architecture, e.g.
    /// `arch=compute_90a,code=sm_90a`.
    pub fn gencode(self) -> String {
        let n = self.number();
        format!("arch=compute_{n},code=sm_{n}")
    }

    /// The value of `-gencode` embedding this architecture's PTX, e.g.
    /// `arch=compute_80,code=compute_80`: the driver JIT-compiles it on newer GPUs.
    pub fn ptx_gencode(self) -> String {
        let n = self.number();
        format!("arch=compute_{n},code=compute_{n}")
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.number())
    }
}

impl FromStr for Arch {
    type Err = Error;

    /// Accepts `sm_90a`, `sm90a` and `90a`.
    fn from_str(s: &str) -> Result<Arch> {
        let n = s.strip_prefix("sm_").or_else(|| s.strip_prefix("sm")).unwrap_or(s);
        Arch::ALL.into_iter().find(|a| a.number() == n).ok_or_else(|| Error::UnknownArch(s.into()))
    }
}

/// What nvcc produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// Host object with an embedded fatbinary (`-c`), ready to link into a shared library.
    Object,
    /// Device code only (`-cubin`), for one architecture.
    Cubin,
}

/// One nvcc invocation, created by [`Toolchain::compile`]. Always passes `-std=c++17 -O3
/// -DNDEBUG --expt-relaxed-constexpr` and the CUTLASS include directories.
#[derive(Debug, Clone)]
pub struct Compile<'a> {
    toolchain: &'a Toolchain,
    source: PathBuf,
    output: PathBuf,
    kind: OutputKind,
    archs: Vec<Arch>,
    /// Architectures whose PTX is embedded besides the SASS.
    ptx_archs: Vec<Arch>,
    /// SASS for a GPU compiled from an older architecture's PTX: `(ptx, sass)`.
    cross_archs: Vec<(Arch, Arch)>,
    defines: Vec<(String, Option<String>)>,
    includes: Vec<PathBuf>,
    extra_args: Vec<OsString>,
    ptxas_verbose: bool,
}

/// A successful compile.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub output: PathBuf,
    /// nvcc's diagnostics (warnings, and the ptxas report when requested).
    pub stderr: String,
    pub elapsed: Duration,
    /// Per-kernel resource usage; filled only with [`Compile::ptxas_verbose`].
    pub kernels: Vec<KernelResources>,
}

/// Resource usage of one kernel for one architecture, from `ptxas -v`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// Mangled name.
    pub name: String,
    /// e.g. `sm_90a`.
    pub arch: String,
    pub registers: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    /// Static shared memory (CUTLASS kernels mostly use dynamic shared memory, not counted).
    pub smem_bytes: u32,
}

impl<'a> Compile<'a> {
    pub(crate) fn new(toolchain: &'a Toolchain, source: PathBuf, output: PathBuf) -> Self {
        Compile {
            toolchain,
            source,
            output,
            kind: OutputKind::Object,
            archs: Vec::new(),
            ptx_archs: Vec::new(),
            cross_archs: Vec::new(),
            defines: Vec::new(),
            includes: Vec::new(),
            extra_args: Vec::new(),
            ptxas_verbose: false,
        }
    }

    pub fn arch(mut self, arch: Arch) -> Self {
        if !self.archs.contains(&arch) {
            self.archs.push(arch);
        }
        self
    }

    /// Also embed `arch`'s PTX (objects only), so the code loads on GPUs newer than the SASS.
    pub fn ptx(mut self, arch: Arch) -> Self {
        if !self.ptx_archs.contains(&arch) {
            self.ptx_archs.push(arch);
        }
        self
    }

    /// SASS for `sass` compiled from `ptx`'s virtual architecture
    /// (`-gencode arch=compute_80,code=sm_90`): code written for an older GPU, ready to run on
    /// a newer one without the driver's JIT. That JIT reads PTX no newer than the driver's
    /// CUDA version, and nvcc writes its own version's PTX: a CUDA 13.5 nvcc's compute_80 PTX
    /// does not load under a CUDA 13.0 driver, its SASS does.
    pub fn sass_from(mut self, ptx: Arch, sass: Arch) -> Self {
        if ptx == sass {
            return self.arch(sass);
        }
        if !self.cross_archs.contains(&(ptx, sass)) {
            self.cross_archs.push((ptx, sass));
        }
        self
    }

    pub fn archs(self, archs: impl IntoIterator<Item = Arch>) -> Self {
        archs.into_iter().fold(self, Compile::arch)
    }

    pub fn kind(mut self, kind: OutputKind) -> Self {
        self.kind = kind;
        self
    }

    /// `-DNAME` or `-DNAME=VALUE`.
    pub fn define(mut self, name: impl Into<String>, value: Option<&str>) -> Self {
        self.defines.push((name.into(), value.map(Into::into)));
        self
    }

    /// An include directory searched before the CUTLASS ones.
    pub fn include(mut self, dir: impl Into<PathBuf>) -> Self {
        self.includes.push(dir.into());
        self
    }

    /// A raw nvcc argument, passed after all others.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Ask ptxas for its per-kernel register/spill/shared-memory report (`-Xptxas -v`).
    pub fn ptxas_verbose(mut self, on: bool) -> Self {
        self.ptxas_verbose = on;
        self
    }

    /// The nvcc arguments (without the nvcc path itself).
    pub fn args(&self) -> Result<Vec<OsString>> {
        if self.archs.is_empty() && self.cross_archs.is_empty() {
            return Err(Error::InvalidCompile("no target architecture given".into()));
        }
        let sass_count = self.archs.len() + self.cross_archs.len();
        if self.kind == OutputKind::Cubin && sass_count != 1 {
            return Err(Error::InvalidCompile(format!("a cubin holds one architecture, got {sass_count}")));
        }
        let mode = match self.kind {
            OutputKind::Object => "-c",
            OutputKind::Cubin => "-cubin",
        };
        let mut args: Vec<OsString> =
            vec![mode.into(), self.source.clone().into(), "-o".into(), self.output.clone().into()];
        for arch in &self.archs {
            args.push("-gencode".into());
            args.push(arch.gencode().into());
        }
        if self.kind == OutputKind::Cubin && !self.ptx_archs.is_empty() {
            return Err(Error::InvalidCompile("a cubin holds SASS only, not PTX".into()));
        }
        for (ptx, sass) in &self.cross_archs {
            args.push("-gencode".into());
            args.push(format!("arch=compute_{},code=sm_{}", ptx.number(), sass.number()).into());
        }
        for arch in &self.ptx_archs {
            args.push("-gencode".into());
            args.push(arch.ptx_gencode().into());
        }
        args.extend(["-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr"].map(OsString::from));
        if self.kind == OutputKind::Object {
            // Objects end up in shared libraries that Bolt loads.
            args.push("-Xcompiler=-fPIC".into());
        }
        for (name, value) in &self.defines {
            args.push(match value {
                Some(v) => format!("-D{name}={v}").into(),
                None => format!("-D{name}").into(),
            });
        }
        for dir in self.includes.iter().chain(&self.toolchain.cutlass_include_dirs()) {
            let mut arg = OsString::from("-I");
            arg.push(dir);
            args.push(arg);
        }
        if self.ptxas_verbose {
            args.extend(["-Xptxas", "-v"].map(OsString::from));
        }
        args.extend(self.extra_args.iter().cloned());
        Ok(args)
    }

    pub fn run(&self) -> Result<Compiled> {
        let args = self.args()?;
        if let Some(dir) = self.output.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).at(dir)?;
        }
        let nvcc = self.toolchain.nvcc();
        let command = render_command(nvcc, &args);
        tracing::debug!("{command}");
        let start = Instant::now();
        let out = Command::new(nvcc).args(&args).output().at(nvcc)?;
        let elapsed = start.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(Error::CompileFailed {
                source_file: self.source.clone(),
                status: out.status.to_string(),
                command,
                stderr,
            });
        }
        tracing::info!("compiled {} in {:.1}s", self.source.display(), elapsed.as_secs_f64());
        let kernels = if self.ptxas_verbose { parse_ptxas_report(&stderr) } else { Vec::new() };
        Ok(Compiled { output: self.output.clone(), stderr, elapsed, kernels })
    }
}

/// A copy-pasteable rendering of the command, for error messages.
pub fn render_command(program: &Path, args: &[OsString]) -> String {
    let quote = |s: &OsStr| {
        let s = s.to_string_lossy();
        if s.is_empty() || s.contains([' ', '"', '\'', '$', '\\']) {
            format!("'{}'", s.replace('\'', r"'\''"))
        } else {
            s.into_owned()
        }
    };
    std::iter::once(quote(program.as_os_str())).chain(args.iter().map(|a| quote(a))).collect::<Vec<_>>().join(" ")
}

/// Parses the `ptxas -v` lines nvcc forwards on stderr:
///
/// ```text
/// ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'
/// ptxas info    : Function properties for _Z1kPf
///     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
/// ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
/// ```
pub fn parse_ptxas_report(stderr: &str) -> Vec<KernelResources> {
    let mut kernels: Vec<KernelResources> = Vec::new();
    // "Function properties" also appear for non-inlined device functions: only take those of
    // the kernel being compiled.
    let mut in_current_kernel = false;
    for line in stderr.lines() {
        let info = line.trim_start().strip_prefix("ptxas info").map(|l| l.trim_start_matches([' ', ':']));
        if let Some(rest) = info.and_then(|l| l.strip_prefix("Compiling entry function '")) {
            let mut quoted = rest.split('\'');
            let name = quoted.next().unwrap_or_default();
            let arch = quoted.nth(1).unwrap_or_default();
            kernels.push(KernelResources { name: name.into(), arch: arch.into(), ..Default::default() });
            in_current_kernel = true;
        } else if let Some(name) = info.and_then(|l| l.strip_prefix("Function properties for ")) {
            in_current_kernel = kernels.last().is_some_and(|k| k.name == name.trim());
        } else if let (Some(k), Some(used)) = (kernels.last_mut(), info.and_then(|l| l.strip_prefix("Used "))) {
            for (value, what) in counted_fields(used) {
                match what {
                    "registers" => k.registers = value,
                    "bytes smem" => k.smem_bytes = value,
                    _ => {}
                }
            }
        } else if let (Some(k), true, None) = (kernels.last_mut(), in_current_kernel, info) {
            for (value, what) in counted_fields(line) {
                match what {
                    "bytes stack frame" => k.stack_frame_bytes = value,
                    "bytes spill stores" => k.spill_store_bytes = value,
                    "bytes spill loads" => k.spill_load_bytes = value,
                    _ => {}
                }
            }
        }
    }
    kernels
}

/// Splits `10 registers, used 1 barriers, 1024 bytes smem` into (10, "registers"),
/// (1, "barriers"), (1024, "bytes smem"); a leading "used " is dropped.
fn counted_fields(s: &str) -> impl Iterator<Item = (u32, &str)> {
    s.split(',').filter_map(|field| {
        let field = field.trim();
        let field = field.strip_prefix("used ").unwrap_or(field);
        let (number, what) = field.split_once(' ')?;
        Some((number.parse().ok()?, what.trim()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cuda, Cutlass, Origin, Version};

    #[test]
    fn gencode_flags() {
        assert_eq!(Arch::Sm80.gencode(), "arch=compute_80,code=sm_80");
        assert_eq!(Arch::Sm90a.gencode(), "arch=compute_90a,code=sm_90a");
        assert_eq!(Arch::Sm100a.to_string(), "sm_100a");
        for s in ["sm_90a", "sm90a", "90a"] {
            assert_eq!(s.parse::<Arch>().unwrap(), Arch::Sm90a);
        }
        for a in Arch::ALL {
            assert_eq!(a.to_string().parse::<Arch>().unwrap(), a);
        }
        let err = "sm_91".parse::<Arch>().unwrap_err();
        assert!(err.to_string().contains("unknown GPU architecture `sm_91`"));
    }

    fn fake_toolchain() -> Toolchain {
        let v = Version { major: 13, minor: 5, patch: 37 };
        Toolchain {
            cuda: Cuda { nvcc: "/cuda/bin/nvcc".into(), root: "/cuda".into(), version: v, origin: Origin::Pinned },
            cutlass: Cutlass { dir: "/cutlass".into(), version: v, origin: Origin::Pinned },
        }
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn renders_nvcc_arguments() {
        let tc = fake_toolchain();
        let compile = tc
            .compile("k.cu", "out/k.o")
            .archs([Arch::Sm80, Arch::Sm90a, Arch::Sm80])
            .define("BOLT_TILE", Some("128"))
            .include("/extra")
            .ptxas_verbose(true)
            .arg("-lineinfo");
        let args = strings(compile.args().unwrap());
        let expected = "-c k.cu -o out/k.o \
            -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a \
            -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr -Xcompiler=-fPIC -DBOLT_TILE=128 \
            -I/extra -I/cutlass/include -I/cutlass/tools/util/include -Xptxas -v -lineinfo";
        assert_eq!(args.join(" "), expected);
        assert_eq!(render_command(Path::new("/a b/nvcc"), &["-DX=it's".into()]), r"'/a b/nvcc' '-DX=it'\''s'");
    }

    #[test]
    fn sass_for_a_newer_gpu_from_older_ptx() {
        let tc = fake_toolchain();
        let compile = tc.compile("k.cu", "k.o").sass_from(Arch::Sm80, Arch::Sm90).ptx(Arch::Sm80);
        let args = strings(compile.args().unwrap());
        let gencodes: Vec<&str> = args.windows(2).filter(|w| w[0] == "-gencode").map(|w| w[1].as_str()).collect();
        assert_eq!(gencodes, ["arch=compute_80,code=sm_90", "arch=compute_80,code=compute_80"]);
        // Same architecture on both sides is plain SASS.
        let same = tc.compile("k.cu", "k.o").sass_from(Arch::Sm80, Arch::Sm80);
        assert!(strings(same.args().unwrap()).contains(&"arch=compute_80,code=sm_80".to_string()));
        let cubin =
            tc.compile("k.cu", "k.cubin").kind(OutputKind::Cubin).arch(Arch::Sm80).sass_from(Arch::Sm80, Arch::Sm90);
        assert!(matches!(cubin.args(), Err(Error::InvalidCompile(_))));
    }

    #[test]
    fn rejects_invalid_requests() {
        let tc = fake_toolchain();
        assert!(matches!(tc.compile("k.cu", "k.o").args(), Err(Error::InvalidCompile(_))));
        let two = tc.compile("k.cu", "k.cubin").kind(OutputKind::Cubin).archs([Arch::Sm80, Arch::Sm86]);
        assert!(matches!(two.args(), Err(Error::InvalidCompile(_))));
        let one = tc.compile("k.cu", "k.cubin").kind(OutputKind::Cubin).arch(Arch::Sm80);
        let args = strings(one.args().unwrap());
        assert_eq!(args[0], "-cubin");
        assert!(!args.iter().any(|a| a.contains("fPIC")));
    }

    #[test]
    fn parses_ptxas_report() {
        let report = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z2ktILi64EEvPd' for 'sm_80'
ptxas info    : Function properties for _Z2ktILi64EEvPd
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 138 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 7.532 ms
ptxas info    : Function properties for _Z6helperv
    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
ptxas info    : Function properties for _Z1kPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
";
        let kernels = parse_ptxas_report(report);
        assert_eq!(
            kernels,
            vec![
                KernelResources {
                    name: "_Z2ktILi64EEvPd".into(),
                    arch: "sm_80".into(),
                    registers: 138,
                    stack_frame_bytes: 8,
                    spill_store_bytes: 4,
                    spill_load_bytes: 12,
                    smem_bytes: 0,
                },
                KernelResources {
                    name: "_Z1kPf".into(),
                    arch: "sm_90a".into(),
                    registers: 10,
                    smem_bytes: 1024,
                    ..Default::default()
                },
            ]
        );
        assert!(parse_ptxas_report("warning: something\n").is_empty());
    }
}
