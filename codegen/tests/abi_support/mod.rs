//! Calls a linked kernel library's C functions directly (no manifest), for the compile tests'
//! host-side ABI checks: everything a kernel answers without a GPU.
#![allow(dead_code)]

use std::ffi::c_void;
use std::path::Path;

use bolt_codegen::abi::{
    BoltArgs, CanImplementFn, InitializeFn, LaunchFn, ParamsSizeFn, Status, UpdateFn, WorkspaceSizeFn,
    FUNCTION_SUFFIXES, PARAMS_ALIGNMENT,
};

pub struct RawLibrary(libloading::Library);

/// A params buffer aligned as the ABI requires.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
pub struct Block([u8; PARAMS_ALIGNMENT]);

impl RawLibrary {
    /// Opens `library` and checks every symbol exports all of bolt_kernel.h's functions.
    pub fn open(library: &Path, symbols: &[String]) -> RawLibrary {
        let lib = unsafe { libloading::Library::new(library) }.unwrap_or_else(|e| panic!("{}: {e}", library.display()));
        for symbol in symbols {
            for suffix in FUNCTION_SUFFIXES {
                unsafe { lib.get::<*const c_void>(format!("{symbol}{suffix}").as_bytes()) }
                    .unwrap_or_else(|e| panic!("{symbol}{suffix}: {e}"));
            }
        }
        RawLibrary(lib)
    }

    fn f<T: Copy>(&self, symbol: &str, suffix: &str) -> T {
        *unsafe { self.0.get::<T>(format!("{symbol}{suffix}").as_bytes()) }.unwrap()
    }

    pub fn can_implement(&self, symbol: &str, problem: *const c_void) -> Status {
        unsafe { self.f::<CanImplementFn>(symbol, "_can_implement")(problem) }.status()
    }

    pub fn workspace_size(&self, symbol: &str, problem: *const c_void) -> usize {
        unsafe { self.f::<WorkspaceSizeFn>(symbol, "_workspace_size")(problem) }
    }

    pub fn params_size(&self, symbol: &str) -> usize {
        unsafe { self.f::<ParamsSizeFn>(symbol, "_params_size")() }
    }

    /// A zeroed, aligned buffer of `params_size` bytes.
    pub fn params(&self, symbol: &str) -> Vec<Block> {
        vec![Block([0; PARAMS_ALIGNMENT]); self.params_size(symbol).div_ceil(PARAMS_ALIGNMENT)]
    }

    /// `initialize` with no stream; only call it with arguments it refuses before any CUDA call
    /// or on a machine where a failing CUDA call is the expected answer.
    pub fn initialize(
        &self,
        symbol: &str,
        problem: *const c_void,
        args: &BoltArgs,
        workspace_bytes: usize,
        params: &mut [Block],
    ) -> Status {
        let workspace = if workspace_bytes > 0 { 0x10000 as *mut c_void } else { std::ptr::null_mut() };
        let f = self.f::<InitializeFn<BoltArgs>>(symbol, "_initialize");
        unsafe {
            f(
                problem,
                args,
                workspace,
                workspace_bytes,
                params.as_mut_ptr() as *mut c_void,
                params.len() * PARAMS_ALIGNMENT,
                std::ptr::null_mut(),
            )
        }
        .status()
    }

    pub fn update(&self, symbol: &str, params: &mut [Block], args: &BoltArgs) -> Status {
        unsafe { self.f::<UpdateFn<BoltArgs>>(symbol, "_update")(params.as_mut_ptr() as *mut c_void, args) }.status()
    }

    pub fn launch(&self, symbol: &str, params: &mut [Block]) -> Status {
        unsafe { self.f::<LaunchFn>(symbol, "_launch")(params.as_mut_ptr() as *mut c_void, std::ptr::null_mut()) }
            .status()
    }

    /// What every kernel answers on the host for a problem it can implement: refusals of the
    /// params buffer, null and misaligned pointers and a short workspace, all before any CUDA
    /// call; update and launch refuse params no initialize filled. `args` holds aligned (fake)
    /// pointers for every operand.
    pub fn check_set_up(&self, symbol: &str, problem: *const c_void, args: &BoltArgs) {
        assert_eq!(self.can_implement(symbol, problem), Status::Ok, "{symbol}");
        let size = self.params_size(symbol);
        assert!(size >= 64, "{symbol}: {size} bytes of params cannot hold CUTLASS's Params");
        let workspace = self.workspace_size(symbol, problem);
        let mut params = self.params(symbol);
        let init = |args: &BoltArgs, workspace: usize, params: &mut [Block]| {
            self.initialize(symbol, problem, args, workspace, params)
        };
        // Params buffer: null, too small, misaligned.
        let f = self.f::<InitializeFn<BoltArgs>>(symbol, "_initialize");
        let null = std::ptr::null_mut();
        let status = |p: *mut c_void, bytes| unsafe { f(problem, args, null, workspace, p, bytes, null) }.status();
        assert_eq!(status(null, size), Status::InvalidParams, "{symbol}");
        assert_eq!(status(params.as_mut_ptr() as *mut c_void, size - 1), Status::InvalidParams, "{symbol}");
        let mut bigger = self.params(symbol);
        bigger.push(Block([0; PARAMS_ALIGNMENT]));
        let off = unsafe { (bigger.as_mut_ptr() as *mut u8).add(8) } as *mut c_void;
        assert_eq!(status(off, size), Status::InvalidParams, "{symbol}: misaligned params");
        // Problem and arguments.
        assert_eq!(
            unsafe { f(null, args, null, workspace, params.as_mut_ptr() as *mut c_void, size, null) }.status(),
            Status::NullArgument
        );
        assert_eq!(init(&BoltArgs::default(), workspace, &mut params), Status::NullArgument, "{symbol}");
        let odd = BoltArgs { a: (args.a as usize + 1) as *const c_void, ..*args };
        assert_eq!(init(&odd, workspace, &mut params), Status::MisalignedOperand, "{symbol}");
        let odd = BoltArgs { d: (args.d as usize + 1) as *mut c_void, ..*args };
        assert_eq!(init(&odd, workspace, &mut params), Status::MisalignedOperand, "{symbol}");
        if workspace > 0 {
            assert_eq!(init(args, workspace - 1, &mut params), Status::WorkspaceTooSmall, "{symbol}");
        }
        // Nothing initialised: update and launch refuse without touching the device.
        assert_eq!(self.update(symbol, &mut params, args), Status::InvalidParams, "{symbol}");
        assert_eq!(self.launch(symbol, &mut params), Status::InvalidParams, "{symbol}");
        let mut zero = self.params(symbol);
        assert_eq!(self.launch(symbol, &mut zero), Status::InvalidParams, "{symbol}");
    }
}

/// Aligned fake device pointers for every operand (never dereferenced by the host checks).
pub fn fake_args() -> BoltArgs {
    let p = 0x1000 as *const c_void;
    BoltArgs { a: p, b: p, c: p, bias: p, d: p as *mut c_void, alpha: 1.0, beta: 0.0 }
}
