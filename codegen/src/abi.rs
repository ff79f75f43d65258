//! Rust mirrors of the C ABI in `codegen/include/bolt_kernel.h`, which every generated kernel
//! exports (`ARGS` is [`BoltArgs`], or [`BoltB2bArgs`] for chain kernels):
//!
//! ```c
//! BoltStatus <symbol>_can_implement(const void* problem);
//! size_t     <symbol>_workspace_size(const void* problem);
//! size_t     <symbol>_params_size(void);
//! BoltStatus <symbol>_initialize(const void* problem, const ARGS* args, void* workspace,
//!                                size_t workspace_bytes, void* params, size_t params_bytes, void* stream);
//! BoltStatus <symbol>_update(void* params, const ARGS* args);
//! BoltStatus <symbol>_launch(void* params, void* stream);
//! ```
//!
//! The header documents the contract (set-up once per shape in `initialize`, a launch that
//! allocates nothing and never synchronises); [`crate::loader`] wraps it in a typed API.
//!
//! The layouts are checked against the header by compiling a C program that prints every
//! `sizeof`/`offsetof` (see the tests below).

use std::ffi::c_void;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::spec::{Family, Layout};

/// `BOLT_ABI_VERSION` of the header; recorded in every manifest and checked on load.
pub const ABI_VERSION: u32 = 6;

/// `BOLT_PARAMS_ALIGNMENT`: alignment in bytes of a kernel's params buffer.
pub const PARAMS_ALIGNMENT: usize = 128;

/// The header itself, written next to the rendered sources of every build (so builds do not
/// depend on where this crate's checkout lives).
pub const HEADER: &str = include_str!("../include/bolt_kernel.h");

/// File name under which [`HEADER`] is included by generated sources.
pub const HEADER_NAME: &str = "bolt_kernel.h";

/// For tests without a GPU: a launch of Bolt's own kernels (their bodies are templates on a
/// thread type) emulated on the host, each CUDA thread an OS thread, barriers and warp
/// shuffles real. Included as [`HOST_LAUNCH_HEADER_NAME`]; never part of a built library.
pub const HOST_LAUNCH_HEADER: &str = include_str!("../include/bolt_host_launch.h");

/// File name under which test units include [`HOST_LAUNCH_HEADER`].
pub const HOST_LAUNCH_HEADER_NAME: &str = "bolt_host_launch.h";

/// `BoltGemmProblem`: D = epilogue(A @ B) with A M x K, B K x N, C/D M x N in the kernel's
/// layouts; leading dimensions and batch strides in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BoltGemmProblem {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub batch: i64,
    pub lda: i64,
    pub ldb: i64,
    pub ldc: i64,
    pub ldd: i64,
    pub batch_stride_a: i64,
    pub batch_stride_b: i64,
    pub batch_stride_c: i64,
    pub batch_stride_d: i64,
}

impl BoltGemmProblem {
    /// A densely packed problem (batch 1) for operands in `layouts` (A, B, C/D): leading
    /// dimensions are the packed ones, batch strides the operand sizes.
    pub fn packed(m: i64, n: i64, k: i64, layouts: [Layout; 3]) -> BoltGemmProblem {
        let ld = |layout: Layout, rows: i64, cols: i64| match layout {
            Layout::RowMajor => cols,
            Layout::ColumnMajor => rows,
        };
        let ldc = ld(layouts[2], m, n);
        BoltGemmProblem {
            m,
            n,
            k,
            batch: 1,
            lda: ld(layouts[0], m, k),
            ldb: ld(layouts[1], k, n),
            ldc,
            ldd: ldc,
            batch_stride_a: m * k,
            batch_stride_b: k * n,
            batch_stride_c: m * n,
            batch_stride_d: m * n,
        }
    }
}

/// `BoltConv2dProblem`: NHWC activations, KRSC filters, NPQK output.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BoltConv2dProblem {
    pub n: i32,
    pub h: i32,
    pub w: i32,
    pub c: i32,
    pub k: i32,
    pub r: i32,
    pub s: i32,
    pub p: i32,
    pub q: i32,
    pub pad_h: i32,
    pub pad_w: i32,
    pub stride_h: i32,
    pub stride_w: i32,
    pub dilation_h: i32,
    pub dilation_w: i32,
    pub groups: i32,
}

/// `BoltArgs`: device pointers and epilogue scalars. `c` and `bias` are null unless the
/// kernel's epilogue reads them.
///
/// With cudarc (not a dependency here: this crate is built and tested without a GPU), the
/// pointers come from `CudaSlice::device_ptr()` (a `CUdeviceptr`, cast with `as *const c_void`)
/// and the stream of [`crate::loader::Params::launch`] from `CudaStream::cu_stream()`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoltArgs {
    pub a: *const c_void,
    pub b: *const c_void,
    pub c: *const c_void,
    pub bias: *const c_void,
    pub d: *mut c_void,
    pub alpha: f32,
    pub beta: f32,
}

impl Default for BoltArgs {
    fn default() -> Self {
        BoltArgs {
            a: std::ptr::null(),
            b: std::ptr::null(),
            c: std::ptr::null(),
            bias: std::ptr::null(),
            d: std::ptr::null_mut(),
            alpha: 1.0,
            beta: 0.0,
        }
    }
}

/// `BOLT_B2B_MAX_LAYERS`: the most layers a back-to-back problem or argument struct holds.
pub const B2B_MAX_LAYERS: usize = 4;

/// `BoltB2bGemmProblem`: layer i computes `[m, n[i]] = epilogue_i([m, k_i] @ B_i)` with
/// `k_0 = k`, `k_i = n[i-1]`; A, C and D row-major, each B_i column-major (an `[n[i], k_i]`
/// row-major array), packed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BoltB2bGemmProblem {
    pub layers: i64,
    pub m: i64,
    pub k: i64,
    pub n: [i64; B2B_MAX_LAYERS],
    pub lda: i64,
    pub ldc: i64,
    pub ldd: i64,
}

impl BoltB2bGemmProblem {
    /// A densely packed chain: `ns` are the layers' N.
    pub fn packed(m: i64, k: i64, ns: &[i64]) -> BoltB2bGemmProblem {
        assert!(!ns.is_empty() && ns.len() <= B2B_MAX_LAYERS, "{} layers", ns.len());
        let mut n = [0; B2B_MAX_LAYERS];
        n[..ns.len()].copy_from_slice(ns);
        let last = *ns.last().expect("non-empty");
        BoltB2bGemmProblem { layers: ns.len() as i64, m, k, n, lda: k, ldc: last, ldd: last }
    }
}

/// `BoltB2bConv2dProblem`: `conv[0]` any conv the kernel supports, `conv[i > 0]` 1x1, stride 1,
/// unpadded on `conv[i-1]`'s output.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BoltB2bConv2dProblem {
    pub layers: i64,
    pub conv: [BoltConv2dProblem; B2B_MAX_LAYERS],
}

/// `BoltB2bLayerArgs`: one layer's weights, bias (null unless its epilogue reads one) and scalars.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoltB2bLayerArgs {
    pub b: *const c_void,
    pub bias: *const c_void,
    pub alpha: f32,
    pub beta: f32,
}

impl Default for BoltB2bLayerArgs {
    fn default() -> Self {
        BoltB2bLayerArgs { b: std::ptr::null(), bias: std::ptr::null(), alpha: 1.0, beta: 0.0 }
    }
}

/// `BoltB2bArgs`: the chain's input, the last layer's source/residual and output, and each
/// layer's [`BoltB2bLayerArgs`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoltB2bArgs {
    pub a: *const c_void,
    pub c: *const c_void,
    pub d: *mut c_void,
    pub layer: [BoltB2bLayerArgs; B2B_MAX_LAYERS],
}

impl Default for BoltB2bArgs {
    fn default() -> Self {
        BoltB2bArgs {
            a: std::ptr::null(),
            c: std::ptr::null(),
            d: std::ptr::null_mut(),
            layer: [BoltB2bLayerArgs::default(); B2B_MAX_LAYERS],
        }
    }
}

/// `BoltGlueProblem`: a 4-D activation of logical extents n, c, h, w; `c_padded` is a padding
/// kernel's output channel count (`c` for the other glue kernels); `p`, `q` a pool's output
/// extents (`h`, `w` for the others).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BoltGlueProblem {
    pub n: i64,
    pub c: i64,
    pub h: i64,
    pub w: i64,
    pub c_padded: i64,
    pub p: i64,
    pub q: i64,
}

impl BoltGlueProblem {
    /// An unpadded problem that keeps the spatial extents.
    pub fn new(n: i64, c: i64, h: i64, w: i64) -> BoltGlueProblem {
        BoltGlueProblem { n, c, h, w, c_padded: c, p: h, q: w }
    }
}

/// `BoltGlueArgs`: a glue kernel's input and output.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoltGlueArgs {
    pub x: *const c_void,
    pub y: *mut c_void,
}

impl Default for BoltGlueArgs {
    fn default() -> Self {
        BoltGlueArgs { x: std::ptr::null(), y: std::ptr::null_mut() }
    }
}

/// `BoltAttentionProblem`: softmax(scale · Q·Kᵀ + bias)·V over `batch` x `heads` problems of
/// `seq_q` queries and `seq_k` keys. Strides are in elements over the (batch, head, seq) axes of
/// Q, K and V, whose head-dim axis is contiguous; the bias's are over (batch, head, query), its
/// key axis contiguous; 0 broadcasts. The output is dense in the kernel's layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BoltAttentionProblem {
    pub batch: i64,
    pub heads: i64,
    pub seq_q: i64,
    pub seq_k: i64,
    pub head_dim: i64,
    pub head_dim_v: i64,
    pub q_strides: [i64; 3],
    pub k_strides: [i64; 3],
    pub v_strides: [i64; 3],
    pub bias_strides: [i64; 3],
    pub scale: f64,
}

impl BoltAttentionProblem {
    /// Dense operands: Q `[b, h, sq, d]`, K `[b, h, sk, d]`, V `[b, h, sk, dv]`, a bias
    /// `[b, h, sq, sk]`.
    pub fn dense(b: i64, h: i64, sq: i64, sk: i64, d: i64, dv: i64, scale: f64) -> BoltAttentionProblem {
        BoltAttentionProblem {
            batch: b,
            heads: h,
            seq_q: sq,
            seq_k: sk,
            head_dim: d,
            head_dim_v: dv,
            q_strides: [h * sq * d, sq * d, d],
            k_strides: [h * sk * d, sk * d, d],
            v_strides: [h * sk * dv, sk * dv, dv],
            bias_strides: [h * sq * sk, sq * sk, sk],
            scale,
        }
    }
}

/// `BoltAttentionArgs`: Q, K, V, the bias (null when the kernel takes none) and the output.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoltAttentionArgs {
    pub q: *const c_void,
    pub k: *const c_void,
    pub v: *const c_void,
    pub bias: *const c_void,
    pub o: *mut c_void,
}

impl Default for BoltAttentionArgs {
    fn default() -> Self {
        BoltAttentionArgs {
            q: std::ptr::null(),
            k: std::ptr::null(),
            v: std::ptr::null(),
            bias: std::ptr::null(),
            o: std::ptr::null_mut(),
        }
    }
}

/// `BoltRecurrentProblem`: `seq` steps of `batch` sequences, `hidden` units per direction.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BoltRecurrentProblem {
    pub seq: i64,
    pub batch: i64,
    pub hidden: i64,
}

/// `BoltRecurrentArgs`: the input projections, Rᵀ, then the optional bias, sequence lengths
/// (int32), initial states and peepholes (null when absent), the outputs (Y always; Y_h and
/// Y_c may be null).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoltRecurrentArgs {
    pub xw: *const c_void,
    pub rt: *const c_void,
    pub bias: *const c_void,
    pub lens: *const i32,
    pub h0: *const c_void,
    pub c0: *const c_void,
    pub peepholes: *const c_void,
    pub y: *mut c_void,
    pub yh: *mut c_void,
    pub yc: *mut c_void,
}

impl Default for BoltRecurrentArgs {
    fn default() -> Self {
        BoltRecurrentArgs {
            xw: std::ptr::null(),
            rt: std::ptr::null(),
            bias: std::ptr::null(),
            lens: std::ptr::null(),
            h0: std::ptr::null(),
            c0: std::ptr::null(),
            peepholes: std::ptr::null(),
            y: std::ptr::null_mut(),
            yh: std::ptr::null_mut(),
            yc: std::ptr::null_mut(),
        }
    }
}

/// `BOLT_STITCH_MAX_RANK`, `BOLT_STITCH_MAX_INPUTS`, `BOLT_STITCH_MAX_OUTPUTS`.
pub const STITCH_MAX_RANK: usize = 6;
pub const STITCH_MAX_INPUTS: usize = 8;
pub const STITCH_MAX_OUTPUTS: usize = 4;

/// `BoltStitchProblem`: a stitched region's iteration space (`rank` dims, `rows` rows of
/// `width` elements) and each input's element strides over it (0: broadcast). A gathered
/// input (an embedding table) has its row stride at `rank - 2`, its column stride at
/// `rank - 1` and `table_rows` rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BoltStitchProblem {
    pub rows: i64,
    pub width: i64,
    pub rank: i64,
    pub shape: [i64; STITCH_MAX_RANK],
    pub strides: [[i64; STITCH_MAX_RANK]; STITCH_MAX_INPUTS],
    pub table_rows: [i64; STITCH_MAX_INPUTS],
}

impl BoltStitchProblem {
    /// The problem of an iteration space `shape` (rank 1..=6) whose inputs have the shapes
    /// `inputs` (each broadcasting to `shape`, numpy rules); `None` otherwise.
    pub fn new(shape: &[usize], inputs: &[&[usize]]) -> Option<BoltStitchProblem> {
        let strides: Vec<Vec<i64>> = inputs.iter().map(|s| contiguous_strides(s)).collect();
        let pairs: Vec<(&[usize], &[i64])> = inputs.iter().zip(&strides).map(|(s, t)| (*s, t.as_slice())).collect();
        Self::with_strides(shape, &pairs)
    }

    /// [`BoltStitchProblem::new`] for inputs given as (shape, element strides) views, e.g. a
    /// transpose read in place (its strides permuted).
    pub fn with_strides(shape: &[usize], inputs: &[(&[usize], &[i64])]) -> Option<BoltStitchProblem> {
        if shape.is_empty() || shape.len() > STITCH_MAX_RANK || inputs.len() > STITCH_MAX_INPUTS {
            return None;
        }
        let rank = shape.len();
        let mut p = BoltStitchProblem {
            width: *shape.last()? as i64,
            rows: shape[..rank - 1].iter().product::<usize>() as i64,
            rank: rank as i64,
            ..Default::default()
        };
        for (d, &n) in shape.iter().enumerate() {
            p.shape[d] = n as i64;
        }
        for (i, (s, st)) in inputs.iter().enumerate() {
            if s.len() > rank || st.len() != s.len() {
                return None;
            }
            // Right-aligned dims; a dim of 1 (or a missing leading one) broadcasts.
            for k in 0..s.len() {
                let (dim, d) = (s[s.len() - 1 - k], rank - 1 - k);
                if dim == shape[d] && dim != 1 {
                    p.strides[i][d] = st[s.len() - 1 - k];
                } else if dim != 1 {
                    return None;
                }
            }
        }
        Some(p)
    }
}

/// Row-major element strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1] as i64;
    }
    s
}

/// `BoltStitchArgs`: a stitched kernel's inputs and outputs, in its spec's order.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoltStitchArgs {
    pub inputs: [*const c_void; STITCH_MAX_INPUTS],
    pub outputs: [*mut c_void; STITCH_MAX_OUTPUTS],
}

impl Default for BoltStitchArgs {
    fn default() -> Self {
        BoltStitchArgs {
            inputs: [std::ptr::null(); STITCH_MAX_INPUTS],
            outputs: [std::ptr::null_mut(); STITCH_MAX_OUTPUTS],
        }
    }
}

/// `BoltStatus` exactly as the C functions return it (a C enum is an `int`). Kept as a raw
/// integer: a value outside the enum must not be undefined behaviour on the Rust side.
/// [`BoltStatus::status`] turns it into a [`Status`].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BoltStatus(pub i32);

impl BoltStatus {
    pub const OK: BoltStatus = BoltStatus(0);
    pub const ERR_NULL_ARGUMENT: BoltStatus = BoltStatus(1);
    pub const ERR_MISALIGNED_OPERAND: BoltStatus = BoltStatus(2);
    pub const ERR_UNSUPPORTED_PROBLEM: BoltStatus = BoltStatus(3);
    pub const ERR_WORKSPACE_TOO_SMALL: BoltStatus = BoltStatus(4);
    pub const ERR_CUTLASS_INTERNAL: BoltStatus = BoltStatus(5);
    pub const ERR_LAUNCH_FAILED: BoltStatus = BoltStatus(6);
    pub const ERR_UNKNOWN: BoltStatus = BoltStatus(7);
    pub const ERR_INVALID_PARAMS: BoltStatus = BoltStatus(8);

    pub fn status(self) -> Status {
        match self.0 {
            0 => Status::Ok,
            1 => Status::NullArgument,
            2 => Status::MisalignedOperand,
            3 => Status::UnsupportedProblem,
            4 => Status::WorkspaceTooSmall,
            5 => Status::CutlassInternal,
            6 => Status::LaunchFailed,
            7 => Status::Unknown,
            8 => Status::InvalidParams,
            other => Status::Invalid(other),
        }
    }
}

/// What a kernel function reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Ok,
    /// A required pointer is null.
    NullArgument,
    /// A leading dimension or pointer breaks the kernel's alignment.
    MisalignedOperand,
    /// Sizes, strides or groups the kernel cannot do (also: a problem of the wrong kind for
    /// the kernel, caught on the Rust side without calling it).
    UnsupportedProblem,
    /// The workspace is null or smaller than `workspace_size(problem)`.
    WorkspaceTooSmall,
    /// CUTLASS's initialize/update reported an error (e.g. no device).
    CutlassInternal,
    /// The launch, or `cudaGetLastError` after it, failed.
    LaunchFailed,
    Unknown,
    /// The params buffer is null, too small, misaligned, or was not filled by a successful
    /// `initialize` of this kernel.
    InvalidParams,
    /// A value outside the enum: a kernel broke the ABI.
    Invalid(i32),
}

impl Status {
    pub fn is_ok(self) -> bool {
        self == Status::Ok
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Ok => f.write_str("ok"),
            Status::NullArgument => f.write_str("null argument"),
            Status::MisalignedOperand => f.write_str("misaligned operand"),
            Status::UnsupportedProblem => f.write_str("unsupported problem"),
            Status::WorkspaceTooSmall => f.write_str("workspace too small"),
            Status::CutlassInternal => f.write_str("CUTLASS internal error"),
            Status::LaunchFailed => f.write_str("launch failed"),
            Status::Unknown => f.write_str("unknown error"),
            Status::InvalidParams => f.write_str("invalid params (not initialised by this kernel)"),
            Status::Invalid(v) => write!(f, "invalid status {v} (ABI violation)"),
        }
    }
}

/// `<symbol>_can_implement`.
pub type CanImplementFn = unsafe extern "C" fn(problem: *const c_void) -> BoltStatus;
/// `<symbol>_workspace_size`.
pub type WorkspaceSizeFn = unsafe extern "C" fn(problem: *const c_void) -> usize;
/// `<symbol>_params_size`.
pub type ParamsSizeFn = unsafe extern "C" fn() -> usize;
/// `<symbol>_initialize`, with `A` the kernel's argument struct ([`BoltArgs`] or [`BoltB2bArgs`]).
pub type InitializeFn<A> = unsafe extern "C" fn(
    problem: *const c_void,
    args: *const A,
    workspace: *mut c_void,
    workspace_bytes: usize,
    params: *mut c_void,
    params_bytes: usize,
    stream: *mut c_void,
) -> BoltStatus;
/// `<symbol>_update`.
pub type UpdateFn<A> = unsafe extern "C" fn(params: *mut c_void, args: *const A) -> BoltStatus;
/// `<symbol>_launch`.
pub type LaunchFn = unsafe extern "C" fn(params: *mut c_void, stream: *mut c_void) -> BoltStatus;

/// Suffixes of the functions every kernel exports after its symbol.
pub const FUNCTION_SUFFIXES: [&str; 6] =
    ["_can_implement", "_workspace_size", "_params_size", "_initialize", "_update", "_launch"];

/// An argument struct of the ABI: [`BoltArgs`], [`BoltB2bArgs`], [`BoltGlueArgs`],
/// [`BoltStitchArgs`], [`BoltAttentionArgs`] or [`BoltRecurrentArgs`]. Sealed.
pub trait KernelArgs: sealed::SealedArgs + Copy {}
impl KernelArgs for BoltArgs {}
impl KernelArgs for BoltB2bArgs {}
impl KernelArgs for BoltGlueArgs {}
impl KernelArgs for BoltStitchArgs {}
impl KernelArgs for BoltAttentionArgs {}
impl KernelArgs for BoltRecurrentArgs {}

/// Which problem struct a kernel's functions take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProblemKind {
    /// [`BoltGemmProblem`].
    Gemm,
    /// [`BoltConv2dProblem`].
    Conv2d,
}

impl ProblemKind {
    pub fn of(family: &Family) -> ProblemKind {
        match family {
            Family::Gemm | Family::BatchedGemm | Family::GemmSoftmax => ProblemKind::Gemm,
            Family::Conv2dFprop(_) => ProblemKind::Conv2d,
        }
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProblemKind::Gemm => "gemm",
            ProblemKind::Conv2d => "conv2d",
        })
    }
}

/// A problem struct of the ABI. Sealed: only the two `#[repr(C)]` mirrors implement it.
pub trait Problem: sealed::Sealed {
    const KIND: ProblemKind;

    fn as_ptr(&self) -> *const c_void {
        self as *const Self as *const c_void
    }
}

impl Problem for BoltGemmProblem {
    const KIND: ProblemKind = ProblemKind::Gemm;
}

impl Problem for BoltConv2dProblem {
    const KIND: ProblemKind = ProblemKind::Conv2d;
}

mod sealed {
    pub trait SealedArgs {}
    impl SealedArgs for super::BoltArgs {}
    impl SealedArgs for super::BoltB2bArgs {}
    impl SealedArgs for super::BoltGlueArgs {}
    impl SealedArgs for super::BoltStitchArgs {}
    impl SealedArgs for super::BoltAttentionArgs {}
    impl SealedArgs for super::BoltRecurrentArgs {}
    pub trait Sealed {}
    impl Sealed for super::BoltGemmProblem {}
    impl Sealed for super::BoltConv2dProblem {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};
    use std::process::Command;

    /// (C expression, value on the Rust side) for every size, offset and constant.
    fn rust_layout() -> Vec<(String, usize)> {
        let mut v: Vec<(String, usize)> = Vec::new();
        macro_rules! layout {
            ($t:ident: $($f:ident),*) => {
                v.push((format!("sizeof({})", stringify!($t)), size_of::<$t>()));
                $(v.push((format!("offsetof({}, {})", stringify!($t), stringify!($f)), offset_of!($t, $f)));)*
            };
        }
        layout!(BoltGemmProblem: m, n, k, batch, lda, ldb, ldc, ldd,
            batch_stride_a, batch_stride_b, batch_stride_c, batch_stride_d);
        layout!(BoltConv2dProblem: n, h, w, c, k, r, s, p, q, pad_h, pad_w,
            stride_h, stride_w, dilation_h, dilation_w, groups);
        layout!(BoltArgs: a, b, c, bias, d, alpha, beta);
        layout!(BoltB2bGemmProblem: layers, m, k, n, lda, ldc, ldd);
        layout!(BoltB2bConv2dProblem: layers, conv);
        layout!(BoltB2bLayerArgs: b, bias, alpha, beta);
        layout!(BoltB2bArgs: a, c, d, layer);
        layout!(BoltGlueProblem: n, c, h, w, c_padded, p, q);
        layout!(BoltGlueArgs: x, y);
        layout!(BoltStitchProblem: rows, width, rank, shape, strides);
        layout!(BoltStitchArgs: inputs, outputs);
        layout!(BoltAttentionProblem: batch, heads, seq_q, seq_k, head_dim, head_dim_v,
            q_strides, k_strides, v_strides, bias_strides, scale);
        layout!(BoltAttentionArgs: q, k, v, bias, o);
        layout!(BoltRecurrentProblem: seq, batch, hidden);
        layout!(BoltRecurrentArgs: xw, rt, bias, lens, h0, c0, peepholes, y, yh, yc);
        v.push(("BOLT_STITCH_MAX_RANK".into(), STITCH_MAX_RANK));
        v.push(("BOLT_STITCH_MAX_INPUTS".into(), STITCH_MAX_INPUTS));
        v.push(("BOLT_STITCH_MAX_OUTPUTS".into(), STITCH_MAX_OUTPUTS));
        v.push(("BOLT_B2B_MAX_LAYERS".into(), B2B_MAX_LAYERS));
        v.push(("sizeof(BoltStatus)".into(), size_of::<BoltStatus>()));
        v.push(("BOLT_ABI_VERSION".into(), ABI_VERSION as usize));
        v.push(("BOLT_PARAMS_ALIGNMENT".into(), PARAMS_ALIGNMENT));
        for (name, value) in [
            ("BOLT_OK", BoltStatus::OK),
            ("BOLT_ERR_NULL_ARGUMENT", BoltStatus::ERR_NULL_ARGUMENT),
            ("BOLT_ERR_MISALIGNED_OPERAND", BoltStatus::ERR_MISALIGNED_OPERAND),
            ("BOLT_ERR_UNSUPPORTED_PROBLEM", BoltStatus::ERR_UNSUPPORTED_PROBLEM),
            ("BOLT_ERR_WORKSPACE_TOO_SMALL", BoltStatus::ERR_WORKSPACE_TOO_SMALL),
            ("BOLT_ERR_CUTLASS_INTERNAL", BoltStatus::ERR_CUTLASS_INTERNAL),
            ("BOLT_ERR_LAUNCH_FAILED", BoltStatus::ERR_LAUNCH_FAILED),
            ("BOLT_ERR_UNKNOWN", BoltStatus::ERR_UNKNOWN),
            ("BOLT_ERR_INVALID_PARAMS", BoltStatus::ERR_INVALID_PARAMS),
        ] {
            v.push((name.into(), value.0 as usize));
        }
        v
    }

    /// Compiles a C program printing each expression with gcc (C, not C++: the header must
    /// stay valid C) and checks it agrees with the Rust mirrors.
    #[test]
    fn mirrors_match_the_c_header() {
        let expected = rust_layout();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(HEADER_NAME), HEADER).unwrap();
        let mut program =
            String::from("#include <stdio.h>\n#include <stddef.h>\n#include \"bolt_kernel.h\"\nint main(void) {\n");
        for (expr, _) in &expected {
            program.push_str(&format!("  printf(\"%s=%zu\\n\", \"{expr}\", (size_t)({expr}));\n"));
        }
        program.push_str("  return 0;\n}\n");
        std::fs::write(dir.path().join("layout.c"), program).unwrap();
        let exe = dir.path().join("layout");
        let cc = std::env::var("CC").unwrap_or_else(|_| "gcc".into());
        let out = Command::new(&cc)
            .args(["-std=c99", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(dir.path().join("layout.c"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
        assert!(out.status.success(), "{cc} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new(&exe).output().unwrap();
        let printed = String::from_utf8(out.stdout).unwrap();
        let c_side: Vec<(String, usize)> = printed
            .lines()
            .map(|l| {
                let (k, v) = l.rsplit_once('=').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect();
        assert_eq!(c_side.len(), expected.len());
        for ((expr, rust), (c_expr, c)) in expected.iter().zip(&c_side) {
            assert_eq!(expr, c_expr);
            assert_eq!(rust, c, "{expr}: Rust says {rust}, C says {c}");
        }
    }

    #[test]
    fn statuses_and_packed_problems() {
        assert_eq!(BoltStatus(3).status(), Status::UnsupportedProblem);
        assert_eq!(BoltStatus(42).status(), Status::Invalid(42));
        assert!(BoltStatus::OK.status().is_ok());
        let p = BoltGemmProblem::packed(8, 16, 32, [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor]);
        assert_eq!((p.lda, p.ldb, p.ldc, p.ldd, p.batch), (32, 32, 16, 16, 1));
        let q = BoltGemmProblem::packed(8, 16, 32, [Layout::ColumnMajor, Layout::RowMajor, Layout::ColumnMajor]);
        assert_eq!((q.lda, q.ldb, q.ldc), (8, 16, 8));
        assert_eq!(ProblemKind::of(&Family::BatchedGemm), ProblemKind::Gemm);
        assert_eq!(serde_json::to_string(&ProblemKind::Conv2d).unwrap(), "\"conv2d\"");
    }
}
