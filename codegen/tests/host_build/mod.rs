//! For tests that run generated kernels' host code (glue, stitched and direct depthwise
//! kernels): a unit of kernels plus a host `main`, compiled once for sm_80 and linked twice,
//! as an executable (the kernels' element code on the host) and as a shared library (the ABI's
//! host-side calls). Needs the toolchain, no GPU.
#![allow(dead_code)]

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;

use bolt_codegen::abi::{InitializeFn, ParamsSizeFn, Status};

pub struct HostBuild {
    pub exe: PathBuf,
    pub library: PathBuf,
}

/// The scratch folder of test `name`, with the ABI header and the host launch emulation the
/// units include.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(bolt_codegen::abi::HEADER_NAME), bolt_codegen::abi::HEADER).unwrap();
    std::fs::write(dir.join(bolt_codegen::abi::HOST_LAUNCH_HEADER_NAME), bolt_codegen::abi::HOST_LAUNCH_HEADER)
        .unwrap();
    dir
}

/// Compiles `source` (kernels and a host `main`) as `<dir>/<name>.cu` for sm_80 and links it
/// as `<dir>/<name>_host` and `<dir>/lib<name>.so`.
pub fn build(dir: &Path, name: &str, source: &str) -> HostBuild {
    build_with(dir, name, source, false)
}

/// As [`build`], the executable built with ThreadSanitizer: where its `main` emulates launches
/// (`bolt_host_launch.h`), a kernel that reads what another thread wrote with no barrier
/// between them fails the run (ThreadSanitizer's exit status 66), whatever the values.
pub fn build_race_checked(dir: &Path, name: &str, source: &str) -> HostBuild {
    build_with(dir, name, source, true)
}

fn build_with(dir: &Path, name: &str, source: &str, race_checked: bool) -> HostBuild {
    let tc = bolt_cutlass::Toolchain::discover().unwrap_or_else(|e| panic!("{e}"));
    let cu = dir.join(format!("{name}.cu"));
    std::fs::write(&cu, source).unwrap();
    let compile = |object: &Path, flags: &[&str]| {
        let mut c = tc.compile(&cu, object).arch(bolt_cutlass::Arch::Sm80).include(dir);
        for f in flags {
            c = c.arg(*f);
        }
        let compiled = c.run().unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{}: compiled in {:.1}s", object.display(), compiled.elapsed.as_secs_f64());
    };
    // The library is loaded into this (uninstrumented) process: never sanitized.
    let object = dir.join(format!("{name}.o"));
    compile(&object, &[]);
    let tsan = ["-Xcompiler=-fsanitize=thread", "-Xcompiler=-g"];
    let exe_object = if race_checked {
        let o = dir.join(format!("{name}_tsan.o"));
        compile(&o, &tsan);
        o
    } else {
        object.clone()
    };
    let link = |out: &PathBuf, object: &Path, flags: &[&str]| {
        let o = Command::new(tc.nvcc())
            .args(flags)
            .args(["-cudart", "static", "-o"])
            .arg(out)
            .arg(object)
            .output()
            .unwrap();
        assert!(o.status.success(), "link: {}", String::from_utf8_lossy(&o.stderr));
    };
    let build = HostBuild { exe: dir.join(format!("{name}_host")), library: dir.join(format!("lib{name}.so")) };
    link(&build.exe, &exe_object, if race_checked { &tsan } else { &[] });
    link(&build.library, &object, &["-shared"]);
    build
}

/// Runs the executable; it must succeed. Its standard output.
pub fn run(b: &HostBuild) -> String {
    let out = Command::new(&b.exe).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Kernel `symbol`'s set-up through the library's raw `_params_size` and `_initialize` (no
/// workspace, no stream) into a params buffer it owns: the ABI's host side as a host calls it.
pub struct RawSetup<A> {
    initialize: InitializeFn<A>,
    size: usize,
    params: Box<Params>,
}

#[repr(C, align(128))]
struct Params([u8; 4096]);

impl<A> RawSetup<A> {
    pub fn new(lib: &libloading::Library, symbol: &str) -> RawSetup<A> {
        let f = |suffix: &str| format!("{symbol}{suffix}");
        let params_size = *unsafe { lib.get::<ParamsSizeFn>(f("_params_size").as_bytes()) }.unwrap();
        let initialize = *unsafe { lib.get::<InitializeFn<A>>(f("_initialize").as_bytes()) }.unwrap();
        let size = unsafe { params_size() };
        assert!(size <= 4096, "{symbol}: params {size} bytes");
        RawSetup { initialize, size, params: Box::new(Params([0; 4096])) }
    }

    /// What `_initialize` answers for `problem` (a pointer to the kernel's problem struct) and `args`.
    pub fn initialize(&mut self, problem: *const c_void, args: &A) -> Status {
        unsafe {
            (self.initialize)(problem, args, std::ptr::null_mut(), 0, self.params(), self.size, std::ptr::null_mut())
        }
        .status()
    }

    /// The params buffer `_launch` takes.
    pub fn params(&mut self) -> *mut c_void {
        &mut *self.params as *mut Params as *mut c_void
    }
}
