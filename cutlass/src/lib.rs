//! Bolt's pinned CUDA + CUTLASS toolchain.
//!
//! [`Toolchain::discover`] finds nvcc (CUDA_HOME, PATH, /usr/local/cuda, then the pinned
//! install) and CUTLASS (CUTLASS_DIR, then the pinned install) without touching the network;
//! [`Toolchain::install`] installs whatever is missing from the wheels pinned in `pins.toml`;
//! [`Toolchain::compile`] drives nvcc. See README.md for the layout and overrides.

mod config;
mod error;
pub mod fatbin;
mod install;
mod nvcc;
mod pins;
mod version;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use config::Config;
pub use error::{Error, Result, INSTALL_HINT};
pub use install::{InstallState, Progress};
pub use nvcc::{parse_ptxas_report, render_command, Arch, Compile, Compiled, KernelResources, OutputKind};
pub use pins::{host_platform, Component, Pins, Wheel};
pub use version::Version;

use error::IoContext;
use install::{install_component, install_state, mib, WheelSource};

/// Where a toolchain part was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The named environment variable (CUDA_HOME, CUTLASS_DIR).
    Env(&'static str),
    /// nvcc on PATH.
    Path,
    /// The conventional system location (/usr/local/cuda).
    System,
    /// Bolt's pinned install.
    Pinned,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Env(var) => write!(f, "from {var}"),
            Origin::Path => f.write_str("from PATH"),
            Origin::System => f.write_str("system install"),
            Origin::Pinned => f.write_str("pinned install"),
        }
    }
}

/// A usable CUDA: an nvcc of version 12.x or 13.x.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cuda {
    nvcc: PathBuf,
    root: PathBuf,
    version: Version,
    origin: Origin,
}

impl Cuda {
    pub fn nvcc(&self) -> &Path {
        &self.nvcc
    }

    /// Install root (nvcc's `bin/..`).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// From `nvcc --version`.
    pub fn version(&self) -> Version {
        self.version
    }

    pub fn origin(&self) -> Origin {
        self.origin
    }
}

/// A usable CUTLASS tree (has include/cutlass/cutlass.h).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cutlass {
    dir: PathBuf,
    version: Version,
    origin: Origin,
}

impl Cutlass {
    /// The tree's root (holds include/ and tools/util/include/).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// From include/cutlass/version.h.
    pub fn version(&self) -> Version {
        self.version
    }

    pub fn origin(&self) -> Origin {
        self.origin
    }
}

/// nvcc + CUTLASS, ready to compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    cuda: Cuda,
    cutlass: Cutlass,
}

impl Toolchain {
    /// Finds an installed toolchain using the environment ([`Config::from_env`]). Never touches
    /// the network; fails with a message saying how to install what is missing.
    pub fn discover() -> Result<Toolchain> {
        Toolchain::discover_with(&Config::from_env())
    }

    pub fn discover_with(config: &Config) -> Result<Toolchain> {
        let pins = Pins::embedded()?;
        Ok(Toolchain { cuda: find_cuda(config, &pins)?, cutlass: find_cutlass(config, &pins)? })
    }

    /// Installs the pinned parts that [`Toolchain::discover_with`] would not find (a suitable
    /// system CUDA or a CUTLASS_DIR is used as is), reporting each step to `progress`. When
    /// everything is installed already this does not touch the network.
    pub fn install(config: &Config, progress: &mut dyn FnMut(&Progress)) -> Result<Installed> {
        let pins = Pins::embedded()?;
        let cache = config.cache_dir.as_deref();
        let wheel_cache = cache.map(|c| c.join("wheels"));

        let mut cuda_action = Action::AlreadyInstalled;
        let cuda = match find_cuda(config, &pins) {
            Ok(cuda) => cuda,
            Err(not_found @ Error::NvccNotFound { .. }) => {
                let platform = host_platform();
                if pins.cuda.platform.as_ref().is_some_and(|p| *p != platform) {
                    tracing::warn!("{not_found}");
                    return Err(Error::UnsupportedPlatform {
                        platform,
                        pinned: pins.cuda.platform.clone().unwrap_or_default(),
                    });
                }
                let (Some(cache), Some(wheel_cache)) = (cache, wheel_cache.as_deref()) else {
                    return Err(Error::NoCacheDir);
                };
                let dest = pinned_cuda_dir(cache, &pins);
                let source = WheelSource { local_dir: config.wheel_dir.as_deref(), cache_dir: wheel_cache };
                let check = |dir: &Path| finish_cuda_install(dir, &pins.cuda);
                if let Some(bytes) = install_component("CUDA", &pins.cuda, &dest, &source, &check, progress)? {
                    cuda_action = Action::Installed { bytes };
                }
                find_cuda(config, &pins)?
            }
            Err(e) => return Err(e),
        };

        let mut cutlass_action = Action::AlreadyInstalled;
        if config.cutlass_dir.is_none() {
            let dest = cutlass_install_dir(config)?;
            let Some(wheel_cache) = wheel_cache.as_deref() else {
                return Err(Error::NoCacheDir);
            };
            let source = WheelSource { local_dir: config.wheel_dir.as_deref(), cache_dir: wheel_cache };
            let check = |dir: &Path| check_cutlass_tree(dir, "the CUTLASS wheel is not as expected").map(drop);
            if let Some(bytes) = install_component("CUTLASS", &pins.cutlass, dest, &source, &check, progress)? {
                cutlass_action = Action::Installed { bytes };
            }
        }
        let cutlass = find_cutlass(config, &pins)?;
        Ok(Installed { toolchain: Toolchain { cuda, cutlass }, cuda: cuda_action, cutlass: cutlass_action })
    }

    pub fn cuda(&self) -> &Cuda {
        &self.cuda
    }

    pub fn cutlass(&self) -> &Cutlass {
        &self.cutlass
    }

    /// Path of the nvcc executable.
    pub fn nvcc(&self) -> &Path {
        &self.cuda.nvcc
    }

    /// nvcc's version, from `nvcc --version`.
    pub fn cuda_version(&self) -> Version {
        self.cuda.version
    }

    /// The CUTLASS tree (holds include/cutlass/cutlass.h).
    pub fn cutlass_dir(&self) -> &Path {
        &self.cutlass.dir
    }

    /// From include/cutlass/version.h.
    pub fn cutlass_version(&self) -> Version {
        self.cutlass.version
    }

    /// `include/` and `tools/util/include/` of the CUTLASS tree, passed to every compile.
    pub fn cutlass_include_dirs(&self) -> [PathBuf; 2] {
        [self.cutlass.dir.join("include"), self.cutlass.dir.join("tools/util/include")]
    }

    /// Starts an nvcc invocation compiling `source` to `output` (an object file by default).
    pub fn compile(&self, source: impl Into<PathBuf>, output: impl Into<PathBuf>) -> Compile<'_> {
        Compile::new(self, source.into(), output.into())
    }
}

impl fmt::Display for Toolchain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "CUDA {}: {} ({})", self.cuda.version, self.cuda.nvcc.display(), self.cuda.origin)?;
        write!(f, "CUTLASS {}: {} ({})", self.cutlass.version, self.cutlass.dir.display(), self.cutlass.origin)
    }
}

/// What [`Toolchain::install`] did for one part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Found already (system CUDA, CUTLASS_DIR, or an earlier pinned install): nothing done.
    AlreadyInstalled,
    /// Installed now; unpacked size.
    Installed { bytes: u64 },
}

/// Result of [`Toolchain::install`]; its Display is the CLI's summary.
#[derive(Debug, Clone)]
pub struct Installed {
    pub toolchain: Toolchain,
    pub cuda: Action,
    pub cutlass: Action,
}

impl fmt::Display for Installed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tc = &self.toolchain;
        let line = |f: &mut fmt::Formatter<'_>, name, version, path: &Path, origin, action| match action {
            Action::AlreadyInstalled => {
                writeln!(f, "{name} {version}: already installed at {} ({origin})", path.display())
            }
            Action::Installed { bytes } => {
                writeln!(f, "{name} {version}: installed at {} ({})", path.display(), mib(bytes))
            }
        };
        line(f, "CUDA", tc.cuda.version, &tc.cuda.root, tc.cuda.origin, self.cuda)?;
        line(f, "CUTLASS", tc.cutlass.version, &tc.cutlass.dir, tc.cutlass.origin, self.cutlass)
    }
}

/// Everything `bolt toolchain status` shows. Never fails: problems are part of the report.
#[derive(Debug)]
pub struct Status {
    /// What [`Toolchain::discover_with`] finds for each part, or why it finds nothing.
    pub cuda: Result<Cuda>,
    pub cutlass: Result<Cutlass>,
    pub pinned_cuda: PinnedInstall,
    pub pinned_cutlass: PinnedInstall,
    pub cache_dir: Option<PathBuf>,
}

/// A pinned component's install location and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedInstall {
    pub version: String,
    /// `None` when there is no cache directory to install into.
    pub dir: Option<PathBuf>,
    pub state: InstallState,
}

impl Status {
    /// Both CUDA and CUTLASS are usable.
    pub fn is_ok(&self) -> bool {
        self.cuda.is_ok() && self.cutlass.is_ok()
    }
}

/// The status report for `bolt toolchain status`.
pub fn status(config: &Config) -> Result<Status> {
    let pins = Pins::embedded()?;
    let pinned = |component: &Component, dir: Option<PathBuf>| PinnedInstall {
        version: component.version.clone(),
        state: dir.as_deref().map_or(InstallState::Absent, |d| install_state(d, component)),
        dir,
    };
    Ok(Status {
        cuda: find_cuda(config, &pins),
        cutlass: find_cutlass(config, &pins),
        pinned_cuda: pinned(&pins.cuda, config.cache_dir.as_deref().map(|c| pinned_cuda_dir(c, &pins))),
        pinned_cutlass: pinned(&pins.cutlass, config.cutlass_install_dir.clone()),
        cache_dir: config.cache_dir.clone(),
    })
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cuda {
            Ok(c) => writeln!(f, "CUDA:    {} at {} ({})", c.version, c.nvcc.display(), c.origin)?,
            Err(e) => writeln!(f, "CUDA:    MISSING: {e}")?,
        }
        match &self.cutlass {
            Ok(c) => writeln!(f, "CUTLASS: {} at {} ({})", c.version, c.dir.display(), c.origin)?,
            Err(e) => writeln!(f, "CUTLASS: MISSING: {e}")?,
        }
        for (name, PinnedInstall { version, dir, state }) in
            [("CUDA", &self.pinned_cuda), ("CUTLASS", &self.pinned_cutlass)]
        {
            let at = dir.as_ref().map_or("(no location)".into(), |d| d.display().to_string());
            writeln!(f, "pinned {name} {version}: {state} at {at}")?;
        }
        match &self.cache_dir {
            Some(c) => write!(f, "cache:   {}", c.display()),
            None => write!(f, "cache:   none (set BOLT_CACHE_DIR)"),
        }
    }
}

fn pinned_cuda_dir(cache: &Path, pins: &Pins) -> PathBuf {
    cache.join(format!("cuda-{}", pins.cuda.version))
}

fn cutlass_install_dir(config: &Config) -> Result<&Path> {
    config.cutlass_install_dir.as_deref().ok_or(Error::NoCacheDir)
}

/// CUDA_HOME, PATH, the system location, then the pinned install; the first nvcc of version
/// 12.x/13.x wins. Unsuitable candidates are listed in the error.
fn find_cuda(config: &Config, pins: &Pins) -> Result<Cuda> {
    let mut candidates = Vec::new();
    if let Some(home) = &config.cuda_home {
        candidates.push((home.join("bin/nvcc"), Origin::Env("CUDA_HOME")));
    }
    if let Some(nvcc) = config.path.as_deref().and_then(|p| find_in_path("nvcc", p)) {
        candidates.push((nvcc, Origin::Path));
    }
    if let Some(system) = &config.system_cuda {
        candidates.push((system.join("bin/nvcc"), Origin::System));
    }

    // Why the pinned install is not a candidate, reported after the others.
    let mut pinned_note = None;
    match &config.cache_dir {
        None => pinned_note = Some("pinned CUDA: no cache directory (set BOLT_CACHE_DIR)".to_string()),
        Some(cache) => {
            let dir = pinned_cuda_dir(cache, pins);
            match install_state(&dir, &pins.cuda) {
                InstallState::Installed => candidates.push((dir.join("bin/nvcc"), Origin::Pinned)),
                state => pinned_note = Some(format!("pinned CUDA {} at {}: {state}", pins.cuda.version, dir.display())),
            }
        }
    }

    let mut tried = Vec::new();
    for (nvcc, origin) in candidates {
        if !nvcc.is_file() {
            tried.push(format!("{} ({origin}): does not exist", nvcc.display()));
            continue;
        }
        match nvcc_version(&nvcc) {
            Ok(version) if matches!(version.major, 12 | 13) => {
                let canonical = nvcc.canonicalize().unwrap_or_else(|_| nvcc.clone());
                let root = canonical.parent().and_then(Path::parent).unwrap_or(Path::new("/")).into();
                tracing::debug!("using nvcc {} ({version}, {origin})", nvcc.display());
                return Ok(Cuda { nvcc, root, version, origin });
            }
            Ok(version) => tried.push(format!("{} ({origin}): CUDA {version}, need 12.x or 13.x", nvcc.display())),
            Err(e) => tried.push(format!("{} ({origin}): {e}", nvcc.display())),
        }
    }
    tried.extend(pinned_note);
    Err(Error::NvccNotFound { tried })
}

fn find_in_path(program: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// Runs `nvcc --version`.
fn nvcc_version(nvcc: &Path) -> Result<Version> {
    let bad = |reason: String| Error::BadNvcc { path: nvcc.into(), reason };
    let out = Command::new(nvcc).arg("--version").output().at(nvcc)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(bad(format!(
            "`nvcc --version` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Version::from_nvcc_output(&stdout)
        .ok_or_else(|| bad(format!("unrecognised `nvcc --version` output: {}", stdout.trim())))
}

/// Completes the unpacked CUDA tree and runs its nvcc, which proves the executable bits and
/// layout are right before the install is marked complete.
fn finish_cuda_install(dir: &Path, pinned: &Component) -> Result<()> {
    // The runtime wheel ships only the versioned libcudart.so.N; `-cudart shared` and
    // `-lcudart` need the unversioned name, as in a regular toolkit.
    #[cfg(unix)]
    {
        let lib = dir.join("lib");
        let versioned = std::fs::read_dir(&lib)
            .at(&lib)?
            .flatten()
            .map(|e| e.file_name())
            .find(|n| n.to_str().is_some_and(|n| n.starts_with("libcudart.so.") && n.matches('.').count() == 2));
        if let Some(versioned) = versioned {
            let link = lib.join("libcudart.so");
            std::os::unix::fs::symlink(versioned, &link).at(link)?;
        }
    }
    let nvcc = dir.join("bin/nvcc");
    let version = nvcc_version(&nvcc)?;
    if version.to_string() != pinned.version {
        return Err(Error::BadNvcc {
            path: nvcc,
            reason: format!("reports CUDA {version}, but the pins say {}", pinned.version),
        });
    }
    Ok(())
}

/// CUTLASS_DIR if set (it must be a valid tree), else the pinned install.
fn find_cutlass(config: &Config, pins: &Pins) -> Result<Cutlass> {
    if let Some(dir) = &config.cutlass_dir {
        let fix = "point CUTLASS_DIR at a CUTLASS checkout (the directory holding include/), or unset it to use the pinned CUTLASS";
        let version = check_cutlass_tree(dir, fix)?;
        return Ok(Cutlass { dir: dir.clone(), version, origin: Origin::Env("CUTLASS_DIR") });
    }
    let dir = cutlass_install_dir(config)?;
    match install_state(dir, &pins.cutlass) {
        InstallState::Installed => {
            let fix = "the pinned install is damaged: delete it and run `bolt toolchain install`";
            let version = check_cutlass_tree(dir, fix)?;
            Ok(Cutlass { dir: dir.into(), version, origin: Origin::Pinned })
        }
        state => Err(Error::CutlassNotFound {
            reason: format!("pinned CUTLASS {} at {}: {state}", pins.cutlass.version, dir.display()),
        }),
    }
}

/// Checks `dir` is a CUTLASS tree and returns its version.
fn check_cutlass_tree(dir: &Path, fix: &'static str) -> Result<Version> {
    let bad = |problem: &str| Error::BadCutlassDir { path: dir.into(), problem: problem.into(), fix };
    if !dir.join("include/cutlass/cutlass.h").is_file() {
        return Err(bad("lacks include/cutlass/cutlass.h"));
    }
    let header = std::fs::read_to_string(dir.join("include/cutlass/version.h"))
        .map_err(|_| bad("lacks include/cutlass/version.h"))?;
    Version::from_cutlass_version_h(&header).ok_or_else(|| bad("has an unreadable include/cutlass/version.h"))
}
