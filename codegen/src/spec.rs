//! A kernel as a typed spec: everything that selects one compiled CUTLASS kernel. Problem sizes
//! are not in it: kernels take them at run time.

use crate::epilogue::Epilogue;
use serde::{Deserialize, Serialize};

/// GPU architecture a kernel is generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Arch {
    /// Ampere (A100): CUTLASS 2.x, mma.sync tensor cores, cp.async multistage mainloop.
    Sm80,
    /// Hopper (H100): CUTLASS 3.x, wgmma + TMA, warp-specialized kernels (built as sm_90a).
    Sm90,
}

impl Arch {
    /// `sm80`, `sm90` (or `sm90a`): the names users write (`bolt compile --arch`, host options).
    pub fn parse(s: &str) -> Option<Arch> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sm80" | "sm_80" => Some(Arch::Sm80),
            "sm90" | "sm90a" | "sm_90" | "sm_90a" => Some(Arch::Sm90),
            _ => None,
        }
    }

    /// Shared memory one threadblock may use, in bytes (opt-in maximum).
    pub fn smem_per_block(self) -> usize {
        match self {
            Arch::Sm80 => 163 * 1024,
            Arch::Sm90 => 227 * 1024,
        }
    }

    pub fn nvcc_arch(self) -> bolt_cutlass::Arch {
        match self {
            Arch::Sm80 => bolt_cutlass::Arch::Sm80,
            Arch::Sm90 => bolt_cutlass::Arch::Sm90a,
        }
    }

    /// The targets of a library compile for this arch: sm_80 SASS plus compute_80 PTX (the
    /// PTX lets later GPUs run it through the driver's JIT), or sm_90a SASS (arch-specific
    /// features: no PTX that a later GPU could run).
    pub fn targets<'a>(self, compile: bolt_cutlass::Compile<'a>) -> bolt_cutlass::Compile<'a> {
        self.targets_for(compile, &[Arch::Sm80])
    }

    /// [`Arch::targets`] for a library that runs on `gpus`: this arch's kernels get SASS for
    /// each GPU they can run on. sm80 kernels (CUTLASS 2.x, mma.sync) run on an H100 too, and
    /// get sm_90 SASS compiled from their compute_80 PTX for it, not only the PTX: the driver's
    /// JIT reads PTX no newer than the driver, and the pinned nvcc writes a newer PTX than the
    /// CUDA 13.0 drivers of H100 machines read. No GPU listed: as for an A100.
    pub fn targets_for<'a>(self, compile: bolt_cutlass::Compile<'a>, gpus: &[Arch]) -> bolt_cutlass::Compile<'a> {
        match self {
            Arch::Sm80 => {
                let mut c = compile;
                for gpu in if gpus.is_empty() { &[Arch::Sm80][..] } else { gpus } {
                    c = match gpu {
                        Arch::Sm80 => c.arch(bolt_cutlass::Arch::Sm80),
                        Arch::Sm90 => c.sass_from(bolt_cutlass::Arch::Sm80, bolt_cutlass::Arch::Sm90),
                    };
                }
                c.ptx(bolt_cutlass::Arch::Sm80)
            }
            Arch::Sm90 => compile.arch(bolt_cutlass::Arch::Sm90a),
        }
    }
}

/// What a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Family {
    /// D[M,N] = epilogue(A[M,K] B[K,N]).
    Gemm,
    /// A batch of independent GEMMs with strides between batch members.
    BatchedGemm,
    /// Implicit-GEMM 2-D convolution forward, NHWC activations, KRSC filters.
    Conv2dFprop(ConvFeatures),
    /// Softmax along each row of a GEMM's output: `softmax_rows(epilogue(A[M,K] B[K,N]))`,
    /// C/D row-major. CUTLASS's GemmSoftmax (example 35): the GEMM's epilogue also writes each
    /// row's max and sum of exponentials over its threadblock's columns, a small kernel
    /// combines them per row, a third normalises. The pre-softmax D and those partials live in
    /// the kernel's workspace. sm80 only (an H100 runs it through compute_80 PTX).
    GemmSoftmax,
}

/// Compile-time conv choices (CUTLASS's iterator algorithm, stride support, group mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvFeatures {
    /// Strided (any stride) or Unity (stride 1 only, cheaper address math).
    pub unit_stride: bool,
    pub groups: GroupMode,
    /// CUTLASS's analytic activation iterator instead of the optimized one for dense and
    /// single-group convs: the optimized one keeps a 32-bit mask of filter taps per axis, so
    /// filters taller or wider than 32 need this (a 1-D STFT-like conv of 256 taps). Left out
    /// of the JSON when false: the specs, symbols and cache entries of every other conv stay.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub analytic: bool,
}

/// Filter taps per axis CUTLASS's optimized conv iterators take (their masks are 32-bit;
/// conv2d_fprop_activation_tile_access_iterator_optimized.h `can_implement`).
pub const OPTIMIZED_ITERATOR_MAX_TAPS: i32 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GroupMode {
    None,
    /// Each threadblock tile covers one group (group channels a multiple of the tile N).
    SingleGroup,
    /// A threadblock tile covers several groups.
    MultipleGroup,
    Depthwise,
}

/// Element types of operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Element {
    F16,
    BF16,
    /// f32 storage; tensor-core math in tf32.
    F32,
}

impl Element {
    pub fn size_bytes(self) -> usize {
        match self {
            Element::F16 | Element::BF16 => 2,
            Element::F32 => 4,
        }
    }

    /// The CUTLASS C++ type.
    pub fn cpp(self) -> &'static str {
        match self {
            Element::F16 => "cutlass::half_t",
            Element::BF16 => "cutlass::bfloat16_t",
            Element::F32 => "float",
        }
    }

    /// Short name used in symbols: `f16`, `bf16`, `f32`.
    pub fn name(self) -> &'static str {
        match self {
            Element::F16 => "f16",
            Element::BF16 => "bf16",
            Element::F32 => "f32",
        }
    }
}

/// Matrix layouts of GEMM operands (conv operands are fixed NHWC / KRSC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Layout {
    RowMajor,
    ColumnMajor,
}

/// Element types: A and B share one type; C (source) and D share the output type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Types {
    pub input: Element,
    pub accumulator: Element,
    pub output: Element,
}

/// Guaranteed alignment of each operand's leading dimension and base pointer, in elements
/// (8/4/2/1). Wider vector loads need larger alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Alignment {
    pub a: u32,
    pub b: u32,
    pub c: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Swizzle {
    /// GemmIdentityThreadblockSwizzle<N>: tiles rasterised in groups of N for L2 reuse.
    Identity(u32),
    /// Split-K with a serial reduction in the epilogue.
    SplitKSerial,
}

/// CUTLASS 2.x (sm80) tile configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sm80Tile {
    pub threadblock: [u32; 3],
    pub warp: [u32; 3],
    pub instruction: [u32; 3],
    pub stages: u32,
    pub swizzle: Swizzle,
    /// K slices (1 = no split-K).
    pub split_k: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KernelSchedule {
    /// Two consumer warp groups share one output tile (tile M must be a multiple of 128).
    TmaWarpSpecializedCooperative,
    /// Two consumer warp groups alternate between output tiles.
    TmaWarpSpecializedPingpong,
    /// Cooperative kernel with the stream-K tile scheduler (balances partial waves).
    StreamK,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EpilogueSchedule {
    /// Matches the kernel schedule (TmaWarpSpecialized / TmaWarpSpecializedCooperative).
    Tma,
    /// Non-TMA epilogue (needed for unaligned output).
    NoSmem,
}

/// CUTLASS 3.x (sm90) tile configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sm90Tile {
    pub tile: [u32; 3],
    pub cluster: [u32; 3],
    pub kernel: KernelSchedule,
    pub epilogue: EpilogueSchedule,
}

/// A direct depthwise convolution (Bolt's own template, `templates/depthwise_direct.cu.tera`):
/// no implicit GEMM. One channel per group leaves nothing for tensor cores to reduce over, so
/// each thread accumulates its output taps on the CUDA cores in f32: `vector` adjacent channels
/// (one 16-byte access at most) of `pixels` adjacent output columns, reusing each filter tap it
/// loads across them. Plain CUDA: built like the sm80 kernels (SASS for the artifact's GPUs,
/// compute_80 PTX).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DirectTile {
    pub vector: u32,
    pub pixels: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TileConfig {
    Sm80(Sm80Tile),
    Sm90(Sm90Tile),
    /// Depthwise convs only, arch sm80 (runs on every GPU Bolt targets).
    Direct(DirectTile),
}

/// One kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelSpec {
    pub family: Family,
    pub arch: Arch,
    pub types: Types,
    /// Layouts of A, B and C/D (GEMM families; conv ignores them).
    pub layouts: [Layout; 3],
    pub alignment: Alignment,
    pub tile: TileConfig,
    pub epilogue: Epilogue,
}
