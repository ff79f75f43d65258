//! Back-to-back (persistent) fused chains, Bolt paper §3.1.1: GEMM -> GEMM and Conv2d fprop ->
//! 1x1 Conv2d fprop run as one kernel whose intermediate activation never leaves the
//! threadblock, kept in registers (RF-resident) or staged in shared memory.
//!
//! The kernels are CUTLASS's `examples/13_two_tensor_op_fusion` (`B2bGemm`,
//! `B2bImplicitGemmConvolution`, sm80 multistage mainloops) used as library headers from the
//! installed CUTLASS tree ([`include_dir`]). Everything here is typed and checked before nvcc:
//!
//! - [`B2bSpec`]: the kernel (family, types, residency, one [`B2bLayer`] per layer with its
//!   tiles and its [`Epilogue`] tree, stages, alignment);
//! - [`validate`]: the residence rules and CUTLASS's constraints, each a [`B2bRejection`] with
//!   the numbers involved;
//! - [`check_problem`]: what `<symbol>_can_implement` checks at run time, mirrored in Rust;
//! - [`candidates`] and [`cost`]: hardware-native fused candidates for a chain problem and the
//!   analytic numbers (threadblocks, occupancy, DRAM bytes fused vs unfused) the planner and the
//!   profiler share;
//! - [`render`], [`render_unit`]: the Tera templates `sm80_b2b_gemm.cu.tera` and
//!   `sm80_b2b_conv2d_fprop.cu.tera`, behind the C ABI of `bolt_kernel.h` (`BoltB2b*` structs).
//!
//! Chains of three or more layers are rejected: CUTLASS has a two-layer mainloop only, and a
//! multi-layer threadblock mainloop is not written yet.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::abi::{BoltB2bArgs, BoltB2bConv2dProblem, BoltB2bGemmProblem, BoltConv2dProblem, B2B_MAX_LAYERS};
use crate::epilogue::{Epilogue, NormalForm};
use crate::render::RenderError;
use crate::sm80::{self, EpilogueKind, EpilogueLowering};
use crate::spec::{Arch, Element, Types};
use crate::validate::{MAX_ACCUMULATOR_REGISTERS, MAX_CONV_ACTIVATION_LOADS};

/// Accumulator registers a fused conv may keep live while layer 0's activation iterator runs
/// (layer 0's accumulators; in registers, every layer's). The optimized conv iterators keep an
/// offset and masks per load: with ptxas 13.5, conv chains at 128 live accumulator registers
/// spilled 4 to 468 bytes (RF 16x128 + 16x128 warps; shared memory with 64x64 layer-0 warps),
/// at 96 none did.
pub const MAX_CONV_LIVE_ACCUMULATOR_REGISTERS: usize = 96;

pub const GEMM_TEMPLATE: &str = "sm80_b2b_gemm.cu.tera";
pub const CONV2D_FPROP_TEMPLATE: &str = "sm80_b2b_conv2d_fprop.cu.tera";
/// Layer 0's on-chip epilogue functor (included by both).
pub const INTERMEDIATE_TEMPLATE: &str = "sm80_b2b_intermediate.cu.tera";

/// Layers CUTLASS's fused mainloops chain (and so Bolt's b2b kernels).
pub const SUPPORTED_LAYERS: usize = 2;
/// The widest N one threadblock holds for every layer (CUTLASS's examples go to 256; the
/// planner's `MAX_RESIDENT_N`).
pub const MAX_RESIDENT_N: u32 = 256;
/// The instruction of every fused kernel: mma.sync m16n8k16 (f16 / bf16).
pub const INSTRUCTION: [u32; 3] = [16, 8, 16];

/// The example's directory in the CUTLASS tree, added to the include path of b2b units only.
pub const EXAMPLE_DIR: &str = "examples/13_two_tensor_op_fusion";

/// `<cutlass>/examples/13_two_tensor_op_fusion`: where `device/b2b_gemm.h` and the other
/// fused headers live. Compile b2b units with it on the include path (and only those).
pub fn include_dir(toolchain: &bolt_cutlass::Toolchain) -> PathBuf {
    toolchain.cutlass_dir().join(EXAMPLE_DIR)
}

/// An nvcc invocation for a rendered b2b unit: sm_80, `include` (with `bolt_kernel.h`) and the
/// example's headers on the include path.
pub fn compile_command<'a>(
    toolchain: &'a bolt_cutlass::Toolchain,
    source: &Path,
    output: &Path,
    include: &Path,
) -> bolt_cutlass::Compile<'a> {
    Arch::Sm80.targets(toolchain.compile(source, output)).include(include).include(include_dir(toolchain))
}

// ================================================================================================
// Spec
// ================================================================================================

/// What a chain computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum B2bFamily {
    /// D = epi1(epi0(A @ B0) @ B1): A, D row-major; B_i column-major (`[N_i, K_i]` arrays).
    Gemm,
    /// NHWC conv (any R x S, stride, padding) then 1x1 stride-1 unpadded conv on its output;
    /// KRSC filters (CUTLASS's optimized iterators).
    Conv2dFprop,
}

/// Where the intermediate activation lives between layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Residency {
    /// Each warp's accumulator fragment of layer i is layer i+1's A operand: every warp holds
    /// whole rows (warp N = threadblock N = the layer's N).
    Registers,
    /// Layer i's tile is written to shared memory and read back as layer i+1's A operand;
    /// warps may split N.
    SharedMemory,
}

/// One layer of a chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct B2bLayer {
    /// The layer's GEMM N (conv: output channels) the kernel holds: its threadblock N. Run-time
    /// problems may have a smaller N (the tile's extra columns are zero-filled).
    pub n: u32,
    /// Threadblock tile [M, N, K]: N = `n`, M the same for every layer.
    pub threadblock: [u32; 3],
    pub warp: [u32; 3],
    /// Applied to the layer's accumulators: layers before the last keep the result on chip
    /// (`act(alpha * acc [+ bias])` only); the last writes D.
    pub epilogue: Epilogue,
}

/// One fused chain kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct B2bSpec {
    pub family: B2bFamily,
    pub arch: Arch,
    /// input = output (each layer's output is the next layer's A operand), f16 or bf16.
    pub types: Types,
    pub residency: Residency,
    pub layers: Vec<B2bLayer>,
    pub instruction: [u32; 3],
    /// Mainloop stages of every layer (cp.async multistage: at least 3).
    pub stages: u32,
    /// Elements per access of A, every B, C and D (and every K / N / channel count).
    pub alignment: u32,
}

impl B2bLayer {
    fn warp_grid(&self) -> [u32; 3] {
        let d = |i: usize| self.threadblock[i].checked_div(self.warp[i]).unwrap_or(0);
        [d(0), d(1), d(2)]
    }

    pub fn warps(&self) -> u32 {
        self.warp_grid().iter().product()
    }

    /// Accumulator registers per thread of this layer's warp tile.
    pub fn accumulator_registers(&self, accumulator: Element) -> usize {
        (self.warp[0] * self.warp[1]) as usize / 32 * accumulator.size_bytes() / 4
    }

    /// Shared memory of this layer's mainloop: `stages` A (M x K) and B (K x N) tiles.
    pub fn mainloop_smem_bytes(&self, stages: u32, input: Element) -> usize {
        let [m, n, k] = self.threadblock.map(|x| x as usize);
        (m * k + k * n) * input.size_bytes() * stages as usize
    }
}

impl B2bSpec {
    pub fn threads(&self) -> u32 {
        32 * self.layers.first().map_or(0, B2bLayer::warps)
    }

    /// The intermediate tile staged in shared memory (shared-memory residency; 0 in registers):
    /// threadblock M x (N0 + 8 padding columns) elements of the output type
    /// (`AccumulatorSharedStorage`, threadblock/b2b_mma_base_smem_accumulator.h, padded as
    /// epilogue/warp/tile_iterator_tensor_op.h).
    pub fn staging_smem_bytes(&self) -> usize {
        match self.residency {
            Residency::Registers => 0,
            Residency::SharedMemory => self.layers[..self.layers.len() - 1]
                .iter()
                .map(|l| l.threadblock[0] as usize * (l.n as usize + 8) * self.types.output.size_bytes())
                .sum(),
        }
    }

    /// Shared memory of the kernel: the layers' mainloops are a union, the staged intermediate
    /// sits beside them, and the last layer's epilogue is a union with all of it (kernel/
    /// b2b_gemm.h `SharedStorage`). The epilogue estimate is the single-kernel one.
    pub fn smem_bytes(&self) -> usize {
        let mainloop = self.layers.iter().map(|l| l.mainloop_smem_bytes(self.stages, self.types.input)).max();
        let last = self.layers.last().expect("layers");
        let [wm, _, wk] = last.warp_grid().map(|x| x as usize);
        let epilogue = wm * wk * 8 * (last.n as usize + 8) * self.types.accumulator.size_bytes();
        (mainloop.unwrap_or(0) + self.staging_smem_bytes()).max(epilogue)
    }

    /// Registers per thread, estimated before ptxas: the accumulators plus 72 for fragments,
    /// addresses and predicates, rounded up to the allocation granule of 8, at most 255. Within
    /// about 10% of ptxas 13.5's counts for the example configurations (168 for the RF GEMM,
    /// 194 for the shared-memory conv).
    pub fn estimated_registers(&self) -> usize {
        ((self.accumulator_registers() + 72).div_ceil(8) * 8).min(255)
    }

    /// Accumulator registers per thread: in registers every layer's fragment is live when the
    /// next layer runs (its A operand), so they add up; staged in shared memory, the largest.
    pub fn accumulator_registers(&self) -> usize {
        let per_layer = self.layers.iter().map(|l| l.accumulator_registers(self.types.accumulator));
        match self.residency {
            Residency::Registers => per_layer.sum(),
            Residency::SharedMemory => per_layer.max().unwrap_or(0),
        }
    }
}

// ================================================================================================
// Validation
// ================================================================================================

/// Why a b2b spec is turned down before nvcc.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum B2bRejection {
    #[error("layers: a chain has at least 2 layers, {0} given")]
    TooFewLayers(usize),

    #[error("layers: chains of N > 2 layers need a multi-stage b2b mainloop: not implemented ({0} layers given; CUTLASS's examples/13_two_tensor_op_fusion chains two)")]
    ChainTooLong(usize),

    #[error(
        "arch {0:?}: CUTLASS's fused b2b mainloops are sm75/sm80 (mma.sync + cp.async); build sm80 code for Hopper too"
    )]
    Arch(Arch),

    #[error("types.input {0:?}: the fused mainloops are instantiated for f16/bf16 tensor cores (m16n8k16) only")]
    InputType(Element),

    #[error("types.output {output:?} != types.input {input:?}: each layer's output is the next layer's A operand, kept on chip in the input type")]
    OutputType { input: Element, output: Element },

    #[error("types.accumulator {accumulator:?} with {input:?} inputs: f16 accumulates in f16 or f32, bf16 in f32")]
    Accumulator { input: Element, accumulator: Element },

    #[error("instruction {}: fused kernels run mma.sync m16n8k16", fmt3(.0))]
    Instruction([u32; 3]),

    #[error("alignment {alignment}: {reason}")]
    Alignment { alignment: u32, reason: &'static str },

    #[error("stages {0}: the sm80 fused mainloops are the cp.async multistage ones (3 or more stages)")]
    Stages(u32),

    #[error("layer {layer}: threadblock {} is not a multiple of warp {}, itself of instruction 16x8x16", fmt3(.threadblock), fmt3(.warp))]
    TileDivisibility { layer: usize, threadblock: [u32; 3], warp: [u32; 3] },

    #[error("conv chain {residency:?}-resident: on an H100 RF-resident conv chains computed right; the one shared-memory-resident conv chain run gave wrong values (bench/results/2026-11-26-h100)")]
    ConvUnverified { residency: Residency },

    #[error("layer {layer} (last): warp N {warp_n}: on an H100 chains whose last layer has 16-, 48-, 96- or 128-column warps computed wrong values (CUTLASS's example 13 GEMM configuration among them), 32- and 64-column ones right (bench/results/2026-11-26-h100)")]
    LastWarpN { layer: usize, warp_n: u32 },

    #[error("layer {layer}: warp N {warp_n} is not a power of two: on an H100, fused chains with 48- and 96-column warps computed wrong values in the columns past each warp's first power of two (MobileNetV2's, PP-LCNet's and PP-OCRv4 det's conv chains, bench/results/2026-11-26-h100), 32- and 64-column ones right; CUTLASS's example 13 uses 32 to 128")]
    WarpN { layer: usize, warp_n: u32 },

    #[error("layer {layer}: warp K {warp_k} != threadblock K {threadblock_k}: no sliced-K in the fused mainloops")]
    SlicedK { layer: usize, threadblock_k: u32, warp_k: u32 },

    #[error("layer {layer}: warp K {warp_k} is {steps} mma steps of 16: the fused mainloops need an even number of at least 2 (\"The pipelined structure requires at least two warp-level GEMM operations\")")]
    WarpKSteps { layer: usize, warp_k: u32, steps: u32 },

    #[error("layer {layer}: n = {n}: a layer's N must be a positive multiple of 8 (the mma N) up to {max}: one threadblock holds every column of every layer")]
    LayerN { layer: usize, n: u32, max: u32 },

    #[error("layer {layer}: threadblock N {threadblock_n} != the layer's N {n}: the whole row block of every layer must stay in one threadblock (threadblock residence)")]
    ThreadblockN { layer: usize, n: u32, threadblock_n: u32 },

    #[error("layer {layer}: threadblock M {m} != layer 0's {m0}: every layer works on the same row block")]
    ThreadblockM { layer: usize, m: u32, m0: u32 },

    #[error("layer {layer}: {warps} warps != layer 0's {warps0}: the kernel launches layer 0's warps for every layer")]
    WarpCountMismatch { layer: usize, warps: u32, warps0: u32 },

    #[error("layer 0: {0} warps: need 1, 2, 4 or 8")]
    WarpCount(u32),

    #[error("layer {layer}: RF-resident chains need warp N = threadblock N ({threadblock_n}), warp N is {warp_n}: each warp's accumulator rows are the next layer's A fragment")]
    RegisterWarpN { layer: usize, warp_n: u32, threadblock_n: u32 },

    #[error("layer {layer}: K = {k} (the previous layer's N) is not a multiple of threadblock K {threadblock_k}: the layer walks its on-chip A operand in whole K tiles")]
    IntermediateK { layer: usize, k: u32, threadblock_k: u32 },

    #[error("operand {operand}: a {rows}x{cols} tile (K contiguous) over {warps} warps: CUTLASS's raked thread map needs rows a multiple of {need} ({arrangement} rows per warp access x {warps} warps), else it drops rows or does not compile (transform/pitch_linear_thread_map.h)")]
    ThreadMap { operand: String, rows: u32, cols: u32, warps: u32, need: u32, arrangement: u32 },

    #[error("layer {layer} (last): the epilogue's output thread map has no whole iteration for {warps} warps ({warps_m} along M) over {n} columns of {alignment}-element accesses ({detail}; epilogue/threadblock/output_tile_thread_map.h)")]
    EpilogueThreadMap { layer: usize, n: u32, warps: u32, warps_m: u32, alignment: u32, detail: String },

    #[error("conv chain: {registers} accumulator registers live beside layer 0's conv iterators > {max} ({residency:?}-resident): ptxas spills")]
    ConvRegisters { residency: Residency, registers: usize, max: usize },

    #[error("conv chain: layer 0's activation tile {rows}x{cols} is {loads} loads per thread per stage > {max} ({threads} threads): the optimized activation iterator's per-load offsets and masks make ptxas spill")]
    ConvActivationLoads { loads: u32, max: u32, rows: u32, cols: u32, threads: u32 },

    #[error("{residency:?}-resident: accumulators need {registers} registers per thread > {max} ({detail}): ptxas would spill")]
    Registers { residency: Residency, registers: usize, max: usize, detail: String },

    #[error("smem {bytes} bytes > {available} available ({detail})")]
    SharedMemory { bytes: usize, available: usize, detail: String },

    #[error("layer {layer}: epilogue `{name}` is outside Bolt's normal form act(alpha*acc [+ beta*C] [+ bias] [+ residual]) [+ residual]")]
    EpilogueNotNormalForm { layer: usize, name: String },

    #[error("layer {layer}: epilogue `{name}` reads C: only the last layer reads a source or residual (the fused mainloop applies the intermediate epilogues to on-chip fragments with a per-column bias only)")]
    IntermediateReadsSource { layer: usize, name: String },

    #[error("layer {layer} (last): epilogue `{name}` needs CUTLASS's broadcast (residual-block) epilogue (bias together with C, or a residual after the activation), which B2bGemm's epilogue does not take; a residual fits as act(alpha*acc + C) without bias")]
    LastEpilogue { layer: usize, name: String },
}

fn fmt3(s: &[u32; 3]) -> String {
    format!("{}x{}x{}", s[0], s[1], s[2])
}

/// The raked global->shared thread map CUTLASS's sm80 tensor-op cores give a K-contiguous
/// operand tile of `rows` x `k` 16-bit elements (gemm/threadblock/default_mma_core_sm80.h:
/// a warp covers `k / 8` accesses along K times `32 / (k / 8)` rows; warps rake the rows). `rows`
/// must be a whole number of warp passes per warp, else the map static_asserts or (when rows
/// per warp does not divide) silently skips rows. Returns `(need, arrangement)` on failure.
fn raked_map(rows: u32, k: u32, warps: u32, element_bytes: usize) -> Result<(), (u32, u32)> {
    let per_access = (16 / element_bytes) as u32;
    let contiguous = (k / per_access).clamp(1, 32);
    let arrangement = 32 / contiguous;
    let need = arrangement * warps;
    if k.is_multiple_of(per_access) && rows.is_multiple_of(need) && rows > 0 {
        Ok(())
    } else {
        Err((need, arrangement))
    }
}

/// CUTLASS's `OutputTileOptimalThreadMap` for the last layer's epilogue (`DefaultEpilogueTensorOp`:
/// a `n` x 8-row tile per warp row, `warps_m` warp rows of `warps` warps, `alignment`-element
/// accesses): its row and column iteration counts must be positive (`static_assert`s in
/// epilogue/threadblock/output_tile_thread_map.h `RowArrangement`).
fn epilogue_thread_map(n: u32, warps: u32, warps_m: u32, alignment: u32, element_bytes: u32) -> Result<(), String> {
    let rows_warps = warps / warps_m.max(1);
    let width = n / alignment;
    if 8 <= rows_warps {
        // One-dimensional arrangement: each warp covers 32 accesses of a row.
        return if width / 32 > 0 { Ok(()) } else { Err(format!("{width} accesses per row < 32")) };
    }
    let shape_row = 8 / rows_warps;
    let target_width = 256 / (alignment * element_bytes);
    let target_rows = 32 / target_width.max(1);
    let (access_width, access_rows) = if target_rows > shape_row {
        (32 / shape_row, shape_row)
    } else {
        let w = width.min(32).min(target_width);
        (w, 8.min(32 / w.max(1)))
    };
    let iterations_row = shape_row / access_rows.max(1);
    let iterations_column = width / access_width.max(1);
    if iterations_row > 0 && iterations_column > 0 && access_width * alignment <= n {
        Ok(())
    } else {
        Err(format!(
            "{shape_row} rows per warp, accesses {access_width} wide x {access_rows} rows: {iterations_row} row and {iterations_column} column iterations"
        ))
    }
}

/// Checks every rule; the first broken one is returned.
/// What Bolt picks among valid chains ([`validate`]): the configurations that computed right
/// on a GPU. Chains outside them render and compile, and gave wrong values on an H100 (the b2b
/// suite against layer-by-layer references, and every tensor of three models against the
/// reference device, bench/results/2026-11-26-h100): the last layer's warps must be 32 or 64
/// columns wide (16-, 48-, 96- and 128-column ones were wrong, CUTLASS's example 13 GEMM
/// configuration among them; 32 and 64 were right in RF- and shared-memory-resident GEMM chains
/// and RF-resident conv chains), every warp N a power of two, and conv chains RF-resident (the
/// only shared-memory-resident conv chain run, with 48-column warps, was wrong; none was right).
pub fn check_verified(spec: &B2bSpec) -> Result<(), B2bRejection> {
    let last = spec.layers.len().saturating_sub(1);
    for (i, l) in spec.layers.iter().enumerate() {
        if !l.warp[1].is_power_of_two() {
            return Err(B2bRejection::WarpN { layer: i, warp_n: l.warp[1] });
        }
        if i == last && !matches!(l.warp[1], 32 | 64) {
            return Err(B2bRejection::LastWarpN { layer: i, warp_n: l.warp[1] });
        }
    }
    if spec.family == B2bFamily::Conv2dFprop && spec.residency != Residency::Registers {
        return Err(B2bRejection::ConvUnverified { residency: spec.residency });
    }
    Ok(())
}

pub fn validate(spec: &B2bSpec) -> Result<(), B2bRejection> {
    let count = spec.layers.len();
    if count < 2 {
        return Err(B2bRejection::TooFewLayers(count));
    }
    if count > SUPPORTED_LAYERS {
        return Err(B2bRejection::ChainTooLong(count));
    }
    if spec.arch != Arch::Sm80 {
        return Err(B2bRejection::Arch(spec.arch));
    }
    let t = spec.types;
    if !matches!(t.input, Element::F16 | Element::BF16) {
        return Err(B2bRejection::InputType(t.input));
    }
    if t.output != t.input {
        return Err(B2bRejection::OutputType { input: t.input, output: t.output });
    }
    match (t.input, t.accumulator) {
        (_, Element::F32) | (Element::F16, Element::F16) => {}
        (input, accumulator) => return Err(B2bRejection::Accumulator { input, accumulator }),
    }
    if spec.instruction != INSTRUCTION {
        return Err(B2bRejection::Instruction(spec.instruction));
    }
    // Alignment: GEMM operand iterators take it as a template argument (cp.async of 4, 8 or 16
    // bytes, arch/memory_sm80.h); DefaultB2bConv2dFprop fixes 128-bit accesses.
    let a = spec.alignment;
    match spec.family {
        B2bFamily::Gemm if ![2, 4, 8].contains(&a) => {
            return Err(B2bRejection::Alignment {
                alignment: a,
                reason: "fused GEMMs copy 4, 8 or 16 bytes per cp.async: 2, 4 or 8 16-bit elements",
            })
        }
        B2bFamily::Conv2dFprop if a != 8 => {
            return Err(B2bRejection::Alignment {
                alignment: a,
                reason: "DefaultB2bConv2dFprop's optimized iterators read 128-bit vectors: 8 channels (pad C and K to multiples of 8)",
            })
        }
        _ => {}
    }
    if spec.stages < 3 {
        return Err(B2bRejection::Stages(spec.stages));
    }

    let first = &spec.layers[0];
    let warps0 = first.warps();
    if ![1, 2, 4, 8].contains(&warps0) {
        return Err(B2bRejection::WarpCount(warps0));
    }
    for (i, l) in spec.layers.iter().enumerate() {
        let divisible = (0..3).all(|d| {
            let (tb, w, ins) = (l.threadblock[d], l.warp[d], INSTRUCTION[d]);
            w != 0 && tb.is_multiple_of(w) && w.is_multiple_of(ins)
        });
        if !divisible {
            return Err(B2bRejection::TileDivisibility { layer: i, threadblock: l.threadblock, warp: l.warp });
        }
        if l.warp[2] != l.threadblock[2] {
            return Err(B2bRejection::SlicedK { layer: i, threadblock_k: l.threadblock[2], warp_k: l.warp[2] });
        }
        let steps = l.warp[2] / INSTRUCTION[2];
        if steps < 2 || !steps.is_multiple_of(2) {
            return Err(B2bRejection::WarpKSteps { layer: i, warp_k: l.warp[2], steps });
        }
        if l.n == 0 || !l.n.is_multiple_of(8) || l.n > MAX_RESIDENT_N {
            return Err(B2bRejection::LayerN { layer: i, n: l.n, max: MAX_RESIDENT_N });
        }
        // Threadblock residence (paper §3.1.1): the grid has one threadblock column, and the
        // next layer's K loop runs over this threadblock's whole N.
        if l.threadblock[1] != l.n {
            return Err(B2bRejection::ThreadblockN { layer: i, n: l.n, threadblock_n: l.threadblock[1] });
        }
        if l.threadblock[0] != first.threadblock[0] {
            return Err(B2bRejection::ThreadblockM { layer: i, m: l.threadblock[0], m0: first.threadblock[0] });
        }
        if l.warps() != warps0 {
            return Err(B2bRejection::WarpCountMismatch { layer: i, warps: l.warps(), warps0 });
        }
        if spec.residency == Residency::Registers && l.warp[1] != l.threadblock[1] {
            return Err(B2bRejection::RegisterWarpN { layer: i, warp_n: l.warp[1], threadblock_n: l.threadblock[1] });
        }
        if i > 0 {
            let k = spec.layers[i - 1].n;
            if !k.is_multiple_of(l.threadblock[2]) {
                return Err(B2bRejection::IntermediateK { layer: i, k, threadblock_k: l.threadblock[2] });
            }
        }
    }

    // Global->shared thread maps: A of layer 0 and every B (later layers' A is on chip).
    let bytes = t.input.size_bytes();
    let mut maps = vec![("A (layer 0)".to_string(), first.threadblock[0], first.threadblock[2])];
    for (i, l) in spec.layers.iter().enumerate() {
        maps.push((format!("B{i}"), l.n, l.threadblock[2]));
    }
    for (operand, rows, cols) in maps {
        if let Err((need, arrangement)) = raked_map(rows, cols, warps0, bytes) {
            return Err(B2bRejection::ThreadMap { operand, rows, cols, warps: warps0, need, arrangement });
        }
    }

    let last = spec.layers.last().expect("layers");
    let warps_m = last.warp_grid()[0];
    if let Err(detail) = epilogue_thread_map(last.n, warps0, warps_m, spec.alignment, t.output.size_bytes() as u32) {
        return Err(B2bRejection::EpilogueThreadMap {
            layer: count - 1,
            n: last.n,
            warps: warps0,
            warps_m,
            alignment: spec.alignment,
            detail,
        });
    }

    let registers = spec.accumulator_registers();
    if registers > MAX_ACCUMULATOR_REGISTERS {
        let detail =
            spec.layers.iter().map(|l| format!("{}x{} warp tile", l.warp[0], l.warp[1])).collect::<Vec<_>>().join(
                match spec.residency {
                    Residency::Registers => " + ",
                    Residency::SharedMemory => ", largest of ",
                },
            );
        return Err(B2bRejection::Registers {
            residency: spec.residency,
            registers,
            max: MAX_ACCUMULATOR_REGISTERS,
            detail: format!("{detail} of {:?}", t.accumulator),
        });
    }
    if spec.family == B2bFamily::Conv2dFprop {
        let live = match spec.residency {
            Residency::Registers => registers,
            Residency::SharedMemory => first.accumulator_registers(t.accumulator),
        };
        if live > MAX_CONV_LIVE_ACCUMULATOR_REGISTERS {
            return Err(B2bRejection::ConvRegisters {
                residency: spec.residency,
                registers: live,
                max: MAX_CONV_LIVE_ACCUMULATOR_REGISTERS,
            });
        }
        let threads = spec.threads();
        let [rows, _, cols] = first.threadblock;
        let loads = rows * cols / (16 / t.input.size_bytes() as u32) / threads.max(1);
        if loads > MAX_CONV_ACTIVATION_LOADS {
            return Err(B2bRejection::ConvActivationLoads {
                loads,
                max: MAX_CONV_ACTIVATION_LOADS,
                rows,
                cols,
                threads,
            });
        }
    }
    let available = Arch::Sm80.smem_per_block();
    let smem = spec.smem_bytes();
    if smem > available {
        let mainloops: Vec<String> =
            spec.layers.iter().map(|l| format!("{}", l.mainloop_smem_bytes(spec.stages, t.input))).collect();
        return Err(B2bRejection::SharedMemory {
            bytes: smem,
            available,
            detail: format!(
                "{} stages; layer mainloops {} bytes (a union); staged intermediate {} bytes = threadblock M {} x (N0 {} + 8) x {} bytes",
                spec.stages,
                mainloops.join(" / "),
                spec.staging_smem_bytes(),
                first.threadblock[0],
                first.n,
                t.output.size_bytes()
            ),
        });
    }

    for (i, l) in spec.layers.iter().enumerate() {
        let name = l.epilogue.name();
        let form =
            l.epilogue.normal_form().ok_or(B2bRejection::EpilogueNotNormalForm { layer: i, name: name.clone() })?;
        if i + 1 < count {
            if form.beta_source || form.residual.is_some() {
                return Err(B2bRejection::IntermediateReadsSource { layer: i, name });
            }
        } else {
            let lowering =
                sm80::lower_epilogue(&form).map_err(|_| B2bRejection::LastEpilogue { layer: i, name: name.clone() })?;
            if lowering.kind != EpilogueKind::LinearCombination {
                return Err(B2bRejection::LastEpilogue { layer: i, name });
            }
        }
    }
    Ok(())
}

// ================================================================================================
// Problems (the Rust side of `<symbol>_can_implement`)
// ================================================================================================

/// A chain problem: what the kernel runs at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum B2bProblem {
    Gemm(BoltB2bGemmProblem),
    Conv2d(BoltB2bConv2dProblem),
}

/// Why a problem does not fit a kernel (`<symbol>_can_implement`'s verdict, with the reason).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProblemRejection {
    #[error("the problem has {problem} layers, the kernel {kernel}")]
    Layers { problem: i64, kernel: usize },
    #[error("{0} problem for a {1:?} kernel")]
    Family(&'static str, B2bFamily),
    #[error("unsupported problem: {0}")]
    Unsupported(String),
    #[error("misaligned: {0}")]
    Misaligned(String),
}

impl B2bProblem {
    /// A packed GEMM chain: `m` rows, layer 0's K `k`, then each layer's N.
    pub fn gemm(m: i64, k: i64, ns: &[i64]) -> B2bProblem {
        B2bProblem::Gemm(BoltB2bGemmProblem::packed(m, k, ns))
    }

    /// A conv chain: `first`, then a 1x1, stride-1, unpadded conv with `k` outputs on the
    /// previous output for each of `ks`.
    pub fn conv(first: BoltConv2dProblem, ks: &[i32]) -> B2bProblem {
        assert!(ks.len() < B2B_MAX_LAYERS, "{} layers", ks.len() + 1);
        let mut p = BoltB2bConv2dProblem { layers: ks.len() as i64 + 1, ..Default::default() };
        p.conv[0] = first;
        for (i, &k) in ks.iter().enumerate() {
            let prev = p.conv[i];
            p.conv[i + 1] = BoltConv2dProblem {
                n: prev.n,
                h: prev.p,
                w: prev.q,
                c: prev.k,
                k,
                r: 1,
                s: 1,
                p: prev.p,
                q: prev.q,
                pad_h: 0,
                pad_w: 0,
                stride_h: 1,
                stride_w: 1,
                dilation_h: 1,
                dilation_w: 1,
                groups: 1,
            };
        }
        B2bProblem::Conv2d(p)
    }

    pub fn layers(&self) -> usize {
        match self {
            B2bProblem::Gemm(p) => p.layers.clamp(0, B2B_MAX_LAYERS as i64) as usize,
            B2bProblem::Conv2d(p) => p.layers.clamp(0, B2B_MAX_LAYERS as i64) as usize,
        }
    }

    /// Rows every layer shares: GEMM M, conv N*P*Q of the first conv.
    pub fn m(&self) -> u64 {
        match self {
            B2bProblem::Gemm(p) => p.m.max(0) as u64,
            B2bProblem::Conv2d(p) => {
                let c = &p.conv[0];
                c.n.max(0) as u64 * c.p.max(0) as u64 * c.q.max(0) as u64
            }
        }
    }

    /// Layer i's N (conv: output channels).
    pub fn n(&self, i: usize) -> u64 {
        match self {
            B2bProblem::Gemm(p) => p.n[i].max(0) as u64,
            B2bProblem::Conv2d(p) => p.conv[i].k.max(0) as u64,
        }
    }

    /// Layer i's GEMM K (conv: R*S*C).
    pub fn k(&self, i: usize) -> u64 {
        match self {
            B2bProblem::Gemm(p) if i == 0 => p.k.max(0) as u64,
            B2bProblem::Gemm(p) => p.n[i - 1].max(0) as u64,
            B2bProblem::Conv2d(p) => {
                let c = &p.conv[i];
                (c.r.max(0) * c.s.max(0)) as u64 * c.c.max(0) as u64
            }
        }
    }

    /// Elements of the chain's input as stored (a conv reads its activation tensor, not M x K).
    pub fn input_elements(&self) -> u64 {
        match self {
            B2bProblem::Gemm(p) => p.m.max(0) as u64 * p.k.max(0) as u64,
            B2bProblem::Conv2d(p) => {
                let c = &p.conv[0];
                [c.n, c.h, c.w, c.c].iter().map(|&x| x.max(0) as u64).product()
            }
        }
    }
}

/// What `<symbol>_can_implement` checks before CUTLASS's own `can_implement` (same rules, same
/// order): the layer count, every layer's N within its threadblock, later convs 1x1 / stride 1
/// / unpadded on the previous output, alignment of every extent.
pub fn check_problem(spec: &B2bSpec, problem: &B2bProblem) -> Result<(), ProblemRejection> {
    let kernel_layers = spec.layers.len();
    let layers = match problem {
        B2bProblem::Gemm(p) => p.layers,
        B2bProblem::Conv2d(p) => p.layers,
    };
    if layers != kernel_layers as i64 {
        return Err(ProblemRejection::Layers { problem: layers, kernel: kernel_layers });
    }
    let a = spec.alignment as i64;
    let unsupported = |s: String| Err(ProblemRejection::Unsupported(s));
    let misaligned = |s: String| Err(ProblemRejection::Misaligned(s));
    let last = spec.layers.last().expect("layers");
    let reads_c = last.epilogue.expr.reads_source();
    match (spec.family, problem) {
        (B2bFamily::Gemm, B2bProblem::Gemm(p)) => {
            if p.m <= 0 || p.k <= 0 || p.m > i32::MAX as i64 || p.k > i32::MAX as i64 {
                return unsupported(format!("m = {}, k = {}", p.m, p.k));
            }
            for (i, l) in spec.layers.iter().enumerate() {
                if p.n[i] <= 0 || p.n[i] > l.n as i64 {
                    return unsupported(format!(
                        "layer {i}: n = {} outside 1..={}: the kernel's threadblock holds {} columns",
                        p.n[i], l.n, l.n
                    ));
                }
            }
            let n_last = p.n[kernel_layers - 1];
            if p.lda < p.k || p.ldd < n_last || (reads_c && p.ldc < n_last) {
                return unsupported(format!("lda {} / ldc {} / ldd {} below the extents", p.lda, p.ldc, p.ldd));
            }
            let mut extents = vec![("m", p.m), ("k", p.k), ("lda", p.lda), ("ldd", p.ldd)];
            if reads_c {
                extents.push(("ldc", p.ldc));
            }
            for (i, &n) in p.n[..kernel_layers].iter().enumerate() {
                extents.push((["n[0]", "n[1]", "n[2]", "n[3]"][i], n));
            }
            if let Some((name, v)) = extents.iter().find(|(_, v)| v % a != 0) {
                return misaligned(format!("{name} = {v} is not a multiple of the kernel's alignment {a}"));
            }
            Ok(())
        }
        (B2bFamily::Conv2dFprop, B2bProblem::Conv2d(p)) => {
            for (i, c) in p.conv[..kernel_layers].iter().enumerate() {
                let positive = [c.n, c.h, c.w, c.c, c.k, c.r, c.s, c.p, c.q, c.stride_h, c.stride_w]
                    .iter()
                    .chain(&[c.dilation_h, c.dilation_w, c.groups])
                    .all(|&x| x > 0);
                if !positive || c.pad_h < 0 || c.pad_w < 0 {
                    return unsupported(format!("conv {i}: non-positive extent {c:?}"));
                }
                if c.groups != 1 {
                    return unsupported(format!("conv {i}: groups = {}: fused convs are dense", c.groups));
                }
                let max_taps = crate::spec::OPTIMIZED_ITERATOR_MAX_TAPS;
                if c.r > max_taps || c.s > max_taps {
                    return unsupported(format!(
                        "conv {i}: a {}x{} filter: the chain's optimized iterators take up to {max_taps} taps per axis",
                        c.r, c.s
                    ));
                }
                if c.k > spec.layers[i].n as i32 {
                    return unsupported(format!(
                        "conv {i}: k = {} > the kernel's threadblock N {}: one threadblock holds every output channel",
                        c.k, spec.layers[i].n
                    ));
                }
                if i > 0 {
                    let prev = &p.conv[i - 1];
                    if !later_conv_ok(prev, c) {
                        return unsupported(format!(
                            "conv {i}: later layers must be 1x1, stride 1, dilation 1, unpadded convs of conv {}'s output ({} x {} x {} x {}), got {c:?}",
                            i - 1,
                            prev.n,
                            prev.p,
                            prev.q,
                            prev.k
                        ));
                    }
                }
            }
            let c0 = &p.conv[0];
            let mut channels = vec![("conv 0 c", c0.c)];
            for (i, c) in p.conv[..kernel_layers].iter().enumerate() {
                channels.push((["conv 0 k", "conv 1 k", "conv 2 k", "conv 3 k"][i], c.k));
            }
            if let Some((name, v)) = channels.iter().find(|(_, v)| *v as i64 % a != 0) {
                return misaligned(format!("{name} = {v} is not a multiple of the kernel's alignment {a}"));
            }
            Ok(())
        }
        (family, B2bProblem::Gemm(_)) => Err(ProblemRejection::Family("GEMM", family)),
        (family, B2bProblem::Conv2d(_)) => Err(ProblemRejection::Family("conv", family)),
    }
}

/// Layer i > 0 of a conv chain: 1x1, stride 1, dilation 1, unpadded, dense, on the previous
/// conv's output (its rows are the previous layer's rows).
fn later_conv_ok(prev: &BoltConv2dProblem, c: &BoltConv2dProblem) -> bool {
    c.r == 1
        && c.s == 1
        && c.stride_h == 1
        && c.stride_w == 1
        && c.dilation_h == 1
        && c.dilation_w == 1
        && c.pad_h == 0
        && c.pad_w == 0
        && c.groups == 1
        && c.n == prev.n
        && c.h == prev.p
        && c.w == prev.q
        && c.c == prev.k
        && c.p == c.h
        && c.q == c.w
}

// ================================================================================================
// Cost
// ================================================================================================

/// The analytic numbers of one candidate on one problem: what the planner's fuse / do-not-fuse
/// decision and the profiler's ordering both use.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct B2bCost {
    /// Row blocks: ceil(M / threadblock M); the grid has one threadblock column.
    pub threadblocks: u64,
    /// Threadblocks one SM holds at once, by shared memory, threads and
    /// [`B2bSpec::estimated_registers`] (ptxas decides the real count).
    pub threadblocks_per_sm: u64,
    pub smem_bytes: usize,
    /// 2 * M * N * K summed over the layers, on the tile-padded N (what the tensor cores do).
    pub flops: f64,
    /// 2 * M * N * K summed over the layers, on the problem's N (the useful part).
    pub useful_flops: f64,
    /// DRAM bytes of the fused kernel: the chain's input, every layer's weights and bias, the
    /// last layer's source (when read) and output. Weights are re-read from L2 by every
    /// threadblock: see `l2_weight_bytes`.
    pub dram_bytes: f64,
    /// DRAM bytes of the same layers run one by one: every intermediate is written and read back.
    pub unfused_dram_bytes: f64,
    /// Weight bytes all threadblocks read (through L2).
    pub l2_weight_bytes: f64,
}

/// Cost of running `problem` on `spec` (the problem should pass [`check_problem`]).
pub fn cost(spec: &B2bSpec, problem: &B2bProblem) -> B2bCost {
    let e = spec.types.input.size_bytes() as f64;
    let m = problem.m();
    let layers = spec.layers.len().min(problem.layers());
    let tb_m = spec.layers[0].threadblock[0].max(1) as u64;
    let threadblocks = m.div_ceil(tb_m);
    let smem_bytes = spec.smem_bytes();
    let by_smem = (Arch::Sm80.smem_per_block() as u64 + 1024) / (smem_bytes as u64 + 1024).max(1);
    let by_threads = 2048 / u64::from(spec.threads().max(32));
    let by_registers = 65536 / (u64::from(spec.threads().max(32)) * spec.estimated_registers() as u64);
    let threadblocks_per_sm = by_smem.min(by_threads).min(by_registers).clamp(1, 32);

    let mut flops = 0.0;
    let mut useful = 0.0;
    let mut weights = 0.0;
    let mut bias = 0.0;
    let mut unfused = 0.0;
    for i in 0..layers {
        let (n, k) = (problem.n(i) as f64, problem.k(i) as f64);
        let tile_k = if i == 0 { k } else { spec.layers[i - 1].n as f64 };
        flops += 2.0 * m as f64 * spec.layers[i].n as f64 * tile_k;
        useful += 2.0 * m as f64 * n * k;
        let w = n * k * e;
        let b = if spec.layers[i].epilogue.expr.reads_bias() { n * e } else { 0.0 };
        weights += w;
        bias += b;
        let input = if i == 0 { problem.input_elements() as f64 * e } else { m as f64 * k * e };
        let source =
            if i + 1 == layers && spec.layers[i].epilogue.expr.reads_source() { m as f64 * n * e } else { 0.0 };
        unfused += input + w + b + m as f64 * n * e + source;
    }
    let last_n = problem.n(layers.saturating_sub(1)) as f64;
    let source = if spec.layers[layers - 1].epilogue.expr.reads_source() { m as f64 * last_n * e } else { 0.0 };
    let dram_bytes = problem.input_elements() as f64 * e + weights + bias + m as f64 * last_n * e + source;
    B2bCost {
        threadblocks,
        threadblocks_per_sm,
        smem_bytes,
        flops,
        useful_flops: useful,
        dram_bytes,
        unfused_dram_bytes: unfused,
        l2_weight_bytes: weights * threadblocks as f64,
    }
}

// ================================================================================================
// Candidates
// ================================================================================================

/// Fused candidates for one chain problem.
#[derive(Clone, Debug, PartialEq)]
pub struct B2bCandidates {
    /// The problem the candidates run: `problem` with every intermediate N rounded up to the
    /// alignment (zero weight columns and bias entries of layer i, zero weight rows of layer
    /// i+1: free, the intermediate never reaches memory) and, for convs, the input channels
    /// rounded up to 8 (that one needs the input tensor padded: a copy).
    pub problem: B2bProblem,
    /// `Some((from, to))` when the conv input channels were padded.
    pub padded_input_channels: Option<(i32, i32)>,
    pub alignment: u32,
    /// The residency the planner's rules pick: registers while every layer's tile N is at most
    /// 128 and the register budget holds, else shared memory.
    pub residency: Residency,
    /// Valid specs, each with its [`cost`] on `problem`: those of `residency` first, then the
    /// least tile-padded math, the most threadblocks per SM, the smaller threadblock M, fewer
    /// stages. The profiler times them; the planner can take the first.
    pub specs: Vec<(B2bSpec, B2bCost)>,
}

/// Why a chain gets no fused candidate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoCandidate {
    #[error("{0} layers: chains of N > 2 layers need a multi-stage b2b mainloop: not implemented")]
    Layers(usize),
    #[error("{0} epilogues for {1} layers")]
    Epilogues(usize, usize),
    #[error("layer {layer}: N = {n} > {max}: one threadblock must hold every column of every layer")]
    TooWide { layer: usize, n: u64, max: u32 },
    #[error("no alignment of 8, 4 or 2 divides {0}: pad the chain's outer extents")]
    Alignment(String),
    #[error("the problem does not fit a fused kernel: {0}")]
    Problem(String),
    #[error("no tile configuration passes validation (first rejection: {0})")]
    NoValidTile(String),
    #[error("valid tile configurations exist, but none of those that computed right on a GPU (e.g. {0})")]
    Unverified(String),
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// Hardware-native fused candidates for `problem` with one epilogue per layer: threadblock M
/// 64 or 128, 2/4/8 warps, threadblock K 32 or 64 for layer 0 (32 for later layers, which run
/// over the intermediate's N), 3 or 4 stages, each layer's tile N its N rounded up to 16, 32 or
/// 64 or to a power of two; RF-resident (warp N = tile N) and shared-memory-resident (warps split N) variants, each
/// through [`validate`] and [`check_problem`].
pub fn candidates(
    family: B2bFamily,
    types: Types,
    problem: &B2bProblem,
    epilogues: &[Epilogue],
) -> Result<B2bCandidates, NoCandidate> {
    let layers = problem.layers();
    if layers != SUPPORTED_LAYERS {
        return Err(NoCandidate::Layers(layers));
    }
    if epilogues.len() != layers {
        return Err(NoCandidate::Epilogues(epilogues.len(), layers));
    }
    // Pad what is free (intermediate N) or, for conv inputs, what the kernel cannot do without.
    let mut problem = *problem;
    let mut padded_input_channels = None;
    let alignment = match &mut problem {
        B2bProblem::Gemm(p) => {
            let outer = [p.m, p.k, p.n[layers - 1]];
            let alignment = [8, 4, 2]
                .into_iter()
                .find(|a| outer.iter().all(|x| x % a == 0))
                .ok_or_else(|| NoCandidate::Alignment(format!("m {}, k {}, last n {}", p.m, p.k, p.n[layers - 1])))?;
            for n in &mut p.n[..layers - 1] {
                *n = round_up((*n).max(1) as u64, alignment as u64) as i64;
            }
            p.lda = p.lda.max(p.k);
            alignment as u32
        }
        B2bProblem::Conv2d(p) => {
            let c0 = &mut p.conv[0];
            if c0.c % 8 != 0 {
                let to = round_up(c0.c.max(1) as u64, 8) as i32;
                padded_input_channels = Some((c0.c, to));
                c0.c = to;
            }
            if p.conv[layers - 1].k % 8 != 0 {
                return Err(NoCandidate::Alignment(format!("last conv k {}", p.conv[layers - 1].k)));
            }
            for i in 0..layers - 1 {
                let k = round_up(p.conv[i].k.max(1) as u64, 8) as i32;
                p.conv[i].k = k;
                p.conv[i + 1].c = k;
            }
            8
        }
    };
    for i in 0..layers {
        if problem.n(i) > MAX_RESIDENT_N as u64 {
            return Err(NoCandidate::TooWide { layer: i, n: problem.n(i), max: MAX_RESIDENT_N });
        }
    }

    let mut specs: Vec<B2bSpec> = Vec::new();
    let mut seen = HashSet::new();
    let mut first_rejection = None;
    let mut first_unverified = None;
    let mut consider = |spec: B2bSpec, specs: &mut Vec<B2bSpec>| match validate(&spec) {
        Ok(()) if check_problem(&spec, &problem).is_ok() => match check_verified(&spec) {
            Ok(()) => {
                if seen.insert(spec.clone()) {
                    specs.push(spec);
                }
            }
            Err(r) => {
                first_unverified.get_or_insert(r.to_string());
            }
        },
        Ok(()) => {}
        Err(r) => {
            first_rejection.get_or_insert(r.to_string());
        }
    };
    let ns: Vec<u64> = (0..layers).map(|i| problem.n(i)).collect();
    // Tile N: each layer's N rounded up to 16, 32 or 64, or to a power of two (warp N must be
    // one: [`B2bRejection::WarpN`]).
    let roundings: [fn(u64) -> u64; 4] =
        [|n| round_up(n, 16), |n| round_up(n, 32), |n| round_up(n, 64), |n| n.next_power_of_two().max(16)];
    for round in roundings {
        let tile_n: Vec<u32> = ns.iter().map(|&n| round(n.max(1)) as u32).collect();
        for tb_m in [64, 128] {
            for tb_k0 in [32, 64] {
                for stages in [3, 4] {
                    for warps in [2u32, 4, 8] {
                        let tb = |i: usize| [tb_m, tile_n[i], if i == 0 { tb_k0 } else { 32 }];
                        // Registers: warps stack along M, each holding whole rows.
                        if tb_m % warps == 0 && (tb_m / warps).is_multiple_of(16) {
                            let layers_rf = (0..layers)
                                .map(|i| B2bLayer {
                                    n: tile_n[i],
                                    threadblock: tb(i),
                                    warp: [tb_m / warps, tile_n[i], tb(i)[2]],
                                    epilogue: epilogues[i].clone(),
                                })
                                .collect();
                            consider(
                                B2bSpec {
                                    family,
                                    arch: Arch::Sm80,
                                    types,
                                    residency: Residency::Registers,
                                    layers: layers_rf,
                                    instruction: INSTRUCTION,
                                    stages,
                                    alignment,
                                },
                                &mut specs,
                            );
                        }
                        // Shared memory: per layer, the squarest warp tile splitting M and N.
                        let split = |i: usize| -> Option<[u32; 3]> {
                            let mut best: Option<[u32; 3]> = None;
                            for warps_m in [1, 2, 4, 8] {
                                if warps % warps_m != 0 || tb_m % warps_m != 0 {
                                    continue;
                                }
                                let warps_n = warps / warps_m;
                                let (wm, wn) = (tb_m / warps_m, tile_n[i] / warps_n);
                                if !wm.is_multiple_of(16) || !wn.is_multiple_of(8) || wn * warps_n != tile_n[i] {
                                    continue;
                                }
                                let score = |w: [u32; 3]| w[0].min(w[1]);
                                let w = [wm, wn, tb(i)[2]];
                                if best.is_none_or(|b| score(w) > score(b)) {
                                    best = Some(w);
                                }
                            }
                            best
                        };
                        let warps_smem: Option<Vec<[u32; 3]>> = (0..layers).map(split).collect();
                        if let Some(warp_tiles) = warps_smem {
                            let layers_smem = (0..layers)
                                .map(|i| B2bLayer {
                                    n: tile_n[i],
                                    threadblock: tb(i),
                                    warp: warp_tiles[i],
                                    epilogue: epilogues[i].clone(),
                                })
                                .collect();
                            consider(
                                B2bSpec {
                                    family,
                                    arch: Arch::Sm80,
                                    types,
                                    residency: Residency::SharedMemory,
                                    layers: layers_smem,
                                    instruction: INSTRUCTION,
                                    stages,
                                    alignment,
                                },
                                &mut specs,
                            );
                        }
                    }
                }
            }
        }
    }
    if specs.is_empty() {
        if let Some(why) = first_unverified {
            return Err(NoCandidate::Unverified(why));
        }
        return Err(NoCandidate::NoValidTile(first_rejection.unwrap_or_else(|| "none".into())));
    }
    let residency = if specs.iter().any(|s| s.residency == Residency::Registers) {
        Residency::Registers
    } else {
        Residency::SharedMemory
    };
    let mut specs: Vec<(B2bSpec, B2bCost)> = specs
        .into_iter()
        .map(|s| {
            let c = cost(&s, &problem);
            (s, c)
        })
        .collect();
    // Preferred residency first; then the least padded math, the most resident threadblocks,
    // the smaller threadblock M (more row blocks to spread), fewer stages.
    specs.sort_by(|(a, ca), (b, cb)| {
        (a.residency != residency)
            .cmp(&(b.residency != residency))
            .then(ca.flops.total_cmp(&cb.flops))
            .then(cb.threadblocks_per_sm.cmp(&ca.threadblocks_per_sm))
            .then(a.layers[0].threadblock[0].cmp(&b.layers[0].threadblock[0]))
            .then(a.stages.cmp(&b.stages))
    });
    Ok(B2bCandidates { problem, padded_input_channels, alignment, residency, specs })
}

// ================================================================================================
// Rendering
// ================================================================================================

/// Headers of a b2b unit: CUTLASS's, then the example's (relative to [`include_dir`]).
pub const INCLUDES: &[&str] = &[
    "cutlass/cutlass.h",
    "cutlass/numeric_types.h",
    "cutlass/functional.h",
    "cutlass/epilogue/thread/activation.h",
    "cutlass/epilogue/thread/linear_combination.h",
    "cutlass/epilogue/thread/linear_combination_generic.h",
    "cutlass/conv/conv2d_problem_size.h",
];
pub const GEMM_INCLUDES: &[&str] = &["device/b2b_gemm.h"];
pub const CONV_INCLUDES: &[&str] = &["device/b2b_implicit_gemm_convolution.h"];

/// The epilogue of a layer that keeps its output on chip: `act(alpha * acc [+ bias])` applied
/// by the fused mainloop to accumulator fragments (a functor with CUTLASS's scale/bias
/// interface, written out in the template).
#[derive(Clone, Debug, Serialize)]
pub struct IntermediateEpilogue {
    /// The activation functor template, e.g. `cutlass::epilogue::thread::ReLu`.
    pub activation: String,
    pub identity: bool,
    pub bias: bool,
    pub heavy: bool,
    /// The custom functor's definition when CUTLASS lacks it (rendered `sm80_activation`).
    pub activation_def: String,
    pub formula: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct B2bLayerContext {
    pub n: u32,
    pub threadblock: [u32; 3],
    pub warp: [u32; 3],
}

/// Template context of one b2b kernel.
#[derive(Clone, Debug, Serialize)]
pub struct B2bContext {
    pub symbol: String,
    pub summary: String,
    pub element: &'static str,
    pub element_accumulator: &'static str,
    pub alignment: u32,
    pub stages: u32,
    pub instruction: [u32; 3],
    pub smem_accumulator: bool,
    pub residency: &'static str,
    pub layers: Vec<B2bLayerContext>,
    /// Layer 0's on-chip epilogue.
    pub layer0: IntermediateEpilogue,
    /// The last layer's epilogue, as `sm80_epilogue.cu.tera` reads it (named `epilogue`).
    pub epilogue: EpilogueLowering,
}

/// Validates `spec` and builds its template context; returns the template name too.
pub fn context(spec: &B2bSpec, symbol: &str) -> Result<(&'static str, B2bContext), RenderError> {
    validate(spec).map_err(|r| RenderError::Unsupported { field: "b2b", reason: r.to_string() })?;
    let form0: NormalForm = spec.layers[0].epilogue.normal_form().expect("validated");
    let lowering0 = sm80::lower_epilogue(&form0)?;
    let activation_def = crate::render::render_template(sm80::ACTIVATION_TEMPLATE, &{
        let mut c = tera::Context::new();
        c.insert("epilogue", &lowering0);
        c
    })?;
    let last = spec.layers.last().expect("validated");
    let epilogue = sm80::lower_epilogue(&last.epilogue.normal_form().expect("validated"))?;
    let layer0 = IntermediateEpilogue {
        identity: lowering0.activation == "cutlass::epilogue::thread::Identity",
        activation: lowering0.activation.clone(),
        bias: form0.bias,
        heavy: lowering0.heavy,
        activation_def: activation_def.trim().to_string(),
        formula: sm80::formula(&form0).replacen("D = ", "X = ", 1),
    };
    let residency = match spec.residency {
        Residency::Registers => "registers",
        Residency::SharedMemory => "shared memory",
    };
    let what = match spec.family {
        B2bFamily::Gemm => "back-to-back GEMMs (A row-major, B column-major, D row-major)",
        B2bFamily::Conv2dFprop => "back-to-back Conv2d fprop NHWC/KRSC, then 1x1 stride-1 conv",
    };
    let summary = format!(
        "{what}: {} inputs, {} accumulation, intermediate resident in {residency}",
        spec.types.input.name(),
        spec.types.accumulator.name()
    );
    let ctx = B2bContext {
        symbol: symbol.to_string(),
        summary,
        element: spec.types.input.cpp(),
        element_accumulator: spec.types.accumulator.cpp(),
        alignment: spec.alignment,
        stages: spec.stages,
        instruction: spec.instruction,
        smem_accumulator: spec.residency == Residency::SharedMemory,
        residency,
        layers: spec
            .layers
            .iter()
            .map(|l| B2bLayerContext { n: l.n, threadblock: l.threadblock, warp: l.warp })
            .collect(),
        layer0,
        epilogue,
    };
    let template = match spec.family {
        B2bFamily::Gemm => GEMM_TEMPLATE,
        B2bFamily::Conv2dFprop => CONV2D_FPROP_TEMPLATE,
    };
    Ok((template, ctx))
}

/// Layer 0's on-chip epilogue alone (`namespace layer0 { ... EpilogueOp }`) exactly as the
/// kernel templates include it, for host-side checks of its math. Expects `ElementA`,
/// `ElementC`, `ElementAccumulator` and `InstructionShape` declared in a namespace named
/// `symbol`.
pub fn render_intermediate_epilogue(spec: &B2bSpec, symbol: &str) -> Result<String, RenderError> {
    let (_, ctx) = context(spec, symbol)?;
    crate::render::render_template(INTERMEDIATE_TEMPLATE, &crate::render::to_context(&ctx)?)
}

/// One kernel's definition block (relies on the unit prologue: use [`render_unit`]).
pub fn render(spec: &B2bSpec, symbol: &str) -> Result<String, RenderError> {
    crate::render::check_symbol(symbol)?;
    let (template, ctx) = context(spec, symbol)?;
    crate::render::render_template(template, &crate::render::to_context(&ctx)?)
}

/// Several b2b kernels as one `.cu` unit: the shared prologue (with the b2b ABI helpers) and
/// each kernel's block. Compile it with [`compile_command`] (the example's include path).
pub fn render_unit(kernels: &[(&B2bSpec, &str)]) -> Result<String, RenderError> {
    let mut includes: Vec<&str> = INCLUDES.to_vec();
    for &(spec, _) in kernels {
        let family = match spec.family {
            B2bFamily::Gemm => GEMM_INCLUDES,
            B2bFamily::Conv2dFprop => CONV_INCLUDES,
        };
        for h in family {
            if !includes.contains(h) {
                includes.push(h);
            }
        }
    }
    crate::render::assemble_unit(kernels, &includes, render)
}

/// A readable, stable, unique C identifier, e.g.
/// `bolt_sm80_b2b_gemm_rf_f16_f32acc_a8_64x64x32_16x64x32_64x128x32_16x128x32_s3_bias_relu_bias_relu_1a2b3c4d`.
pub fn symbol_for(spec: &B2bSpec) -> String {
    let family = match spec.family {
        B2bFamily::Gemm => "gemm",
        B2bFamily::Conv2dFprop => "conv2d_fprop",
    };
    let residency = match spec.residency {
        Residency::Registers => "rf",
        Residency::SharedMemory => "smem",
    };
    let shape = |s: [u32; 3]| format!("{}x{}x{}", s[0], s[1], s[2]);
    let tiles: Vec<String> =
        spec.layers.iter().map(|l| format!("{}_{}", shape(l.threadblock), shape(l.warp))).collect();
    let epilogues: Vec<String> = spec.layers.iter().map(|l| l.epilogue.name().replace('-', "_")).collect();
    let json = serde_json::to_string(spec).expect("specs serialize");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!(
        "bolt_sm80_b2b_{family}_{residency}_{}_{}acc_a{}_{}_s{}_{}_{:08x}",
        spec.types.input.name(),
        spec.types.accumulator.name(),
        spec.alignment,
        tiles.join("_"),
        spec.stages,
        epilogues.join("_"),
        (h ^ (h >> 32)) as u32
    )
}

// ================================================================================================
// Building a library of chain kernels
// ================================================================================================

/// Version of the b2b manifest format.
pub const MANIFEST_FORMAT: u32 = 1;

/// Most b2b kernels in one translation unit (each adds ~5 s of nvcc on 2 cores to a ~7 s unit).
pub const KERNELS_PER_UNIT: usize = 4;

/// `lib<name>.b2b.json` next to a library of chain kernels: which symbols it exports and the
/// spec of each. Every kernel's functions take a `BoltB2bGemmProblem` (family `Gemm`) or a
/// `BoltB2bConv2dProblem` (`Conv2dFprop`), and `initialize`/`update` a `BoltB2bArgs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct B2bManifest {
    pub format: u32,
    pub abi_version: u32,
    /// File name of the library (in the manifest's directory).
    pub library: String,
    pub library_blake3: String,
    pub cuda_version: String,
    pub cutlass_version: String,
    /// nvcc arguments of every unit (paths as placeholders).
    pub nvcc_flags: Vec<String>,
    /// Sorted by symbol.
    pub kernels: Vec<B2bManifestEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct B2bManifestEntry {
    pub symbol: String,
    pub spec: B2bSpec,
}

/// What [`build_library`] did.
#[derive(Clone, Debug)]
pub struct B2bLibrary {
    pub library: PathBuf,
    pub manifest: PathBuf,
    /// Built symbols, sorted.
    pub symbols: Vec<String>,
    /// Specs [`validate`] turned down, with the reason; not built.
    pub rejected: Vec<(B2bSpec, String)>,
    /// nvcc wall seconds of each unit compiled in this call (empty: every object was cached).
    pub nvcc_seconds: Vec<f64>,
    /// ptxas's report of the units compiled in this call.
    pub resources: Vec<bolt_cutlass::KernelResources>,
    pub linked: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum B2bBuildError {
    #[error("no b2b kernel to build ({} given, all rejected){}", given, .rejected.first().map(|(_, r)| format!("; e.g. {r}")).unwrap_or_default())]
    NoKernels { given: usize, rejected: Vec<(B2bSpec, String)> },
    #[error(transparent)]
    Build(#[from] crate::builder::BuildError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// Builds `specs` (invalid ones are reported, not built) into `<out_dir>/lib<name>.so` through
/// [`crate::builder::Builder::build_all`] (the one build path of every kernel: units of up to
/// [`KERNELS_PER_UNIT`] with the example's headers on the include path, SASS for each GPU of
/// `run_on` (empty: sm_80) + compute_80 PTX, the content-hash cache at `cache_dir`, default [`crate::cache::Cache::default_dir`]),
/// plus `lib<name>.b2b.json`, the chain-kernel index the benchmark package ships.
pub fn build_library(
    specs: &[B2bSpec],
    out_dir: &Path,
    name: &str,
    cache_dir: Option<&Path>,
    run_on: &[Arch],
) -> Result<B2bLibrary, B2bBuildError> {
    let mut selected: Vec<B2bSpec> = Vec::new();
    let mut rejected = Vec::new();
    for spec in specs {
        if selected.contains(spec) {
            continue;
        }
        match validate(spec) {
            Ok(()) => selected.push(spec.clone()),
            Err(r) => rejected.push((spec.clone(), r.to_string())),
        }
    }
    if selected.is_empty() {
        return Err(B2bBuildError::NoKernels { given: specs.len(), rejected });
    }
    let mut options = crate::builder::BuildOptions::new(out_dir);
    options.name = name.to_string();
    options.cache_dir = cache_dir.map(Path::to_path_buf);
    if !run_on.is_empty() {
        options.run_on = run_on.to_vec();
    }
    options.ptxas_verbose = true;
    let builder = crate::builder::Builder::discover(options)?;
    let report = builder.build_all(&crate::builder::Templates, &[], &selected, &[], &[], &[], &[])?;
    let built = crate::manifest::Manifest::read(&report.manifest)
        .map_err(|e| B2bBuildError::Io { path: report.manifest.clone(), source: std::io::Error::other(e) })?;
    let manifest = B2bManifest {
        format: MANIFEST_FORMAT,
        abi_version: built.abi_version,
        library: built.library.clone(),
        library_blake3: built.library_blake3.clone(),
        cuda_version: built.cuda_version.clone(),
        cutlass_version: built.cutlass_version.clone(),
        nvcc_flags: built.nvcc_flags.values().next().cloned().unwrap_or_default(),
        kernels: built
            .b2b
            .iter()
            .map(|k| B2bManifestEntry { symbol: k.symbol.clone(), spec: k.spec.clone() })
            .collect(),
    };
    let manifest_path = report.library.with_extension("b2b.json");
    let mut json = serde_json::to_vec_pretty(&manifest).expect("manifest serialises");
    json.push(b'\n');
    crate::cache::write_atomic(&manifest_path, &json)
        .map_err(|source| B2bBuildError::Io { path: manifest_path.clone(), source })?;
    let units = report.units.iter().filter(|u| u.compiled);
    Ok(B2bLibrary {
        library: report.library.clone(),
        manifest: manifest_path,
        symbols: manifest.kernels.iter().map(|k| k.symbol.clone()).collect(),
        rejected,
        nvcc_seconds: units.clone().filter_map(|u| u.nvcc_seconds).collect(),
        resources: units.flat_map(|u| u.resources.iter().filter(|k| k.arch == "sm_80").cloned()).collect(),
        linked: report.nvcc_links > 0,
    })
}

// ================================================================================================
// Loading
// ================================================================================================

/// A loaded library of chain kernels (built by [`build_library`]) with its manifest.
pub struct B2bKernelLibrary {
    pub manifest: B2bManifest,
    kernels: Vec<B2bKernel>,
}

/// One chain kernel of a loaded library; holds the library open.
#[derive(Clone)]
pub struct B2bKernel {
    pub symbol: String,
    pub spec: B2bSpec,
    pub(crate) functions: crate::loader::Functions<BoltB2bArgs>,
}

#[derive(Debug, thiserror::Error)]
pub enum B2bLoadError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not a b2b manifest of format {MANIFEST_FORMAT}: {reason}", path.display())]
    Manifest { path: PathBuf, reason: String },
    #[error(transparent)]
    Load(#[from] crate::loader::LoadError),
}

impl B2bKernelLibrary {
    /// Opens `lib<name>.so` with `lib<name>.b2b.json` next to it: checks that index's format,
    /// then loads the library through [`crate::loader::KernelLibrary::open`] (its manifest's ABI
    /// version and hash checked, every kernel's functions resolved).
    pub fn open(library: &Path) -> Result<B2bKernelLibrary, B2bLoadError> {
        let manifest_path = library.with_extension("b2b.json");
        let bytes =
            std::fs::read(&manifest_path).map_err(|source| B2bLoadError::Io { path: manifest_path.clone(), source })?;
        let manifest: B2bManifest = serde_json::from_slice(&bytes)
            .map_err(|e| B2bLoadError::Manifest { path: manifest_path.clone(), reason: e.to_string() })?;
        if manifest.format != MANIFEST_FORMAT || manifest.abi_version != crate::abi::ABI_VERSION {
            return Err(B2bLoadError::Manifest {
                path: manifest_path,
                reason: format!("format {} / ABI {}", manifest.format, manifest.abi_version),
            });
        }
        let lib = crate::loader::KernelLibrary::open(library)?;
        Ok(B2bKernelLibrary { manifest, kernels: lib.b2b_kernels().to_vec() })
    }

    pub fn kernels(&self) -> &[B2bKernel] {
        &self.kernels
    }

    pub fn kernel(&self, symbol: &str) -> Option<&B2bKernel> {
        self.kernels.iter().find(|k| k.symbol == symbol)
    }
}

impl B2bKernel {
    fn problem_ptr(&self, problem: &B2bProblem) -> Option<*const std::ffi::c_void> {
        match (self.spec.family, problem) {
            (B2bFamily::Gemm, B2bProblem::Gemm(p)) => Some(p as *const BoltB2bGemmProblem as *const _),
            (B2bFamily::Conv2dFprop, B2bProblem::Conv2d(p)) => Some(p as *const BoltB2bConv2dProblem as *const _),
            _ => None,
        }
    }

    /// `<symbol>_can_implement` (a problem of the other family is unsupported, not passed on).
    pub fn can_implement(&self, problem: &B2bProblem) -> crate::abi::Status {
        match self.problem_ptr(problem) {
            // SAFETY: the pointer is to the problem struct this kernel's family takes.
            Some(p) => unsafe { self.functions.can_implement(p) },
            None => crate::abi::Status::UnsupportedProblem,
        }
    }

    /// `<symbol>_workspace_size` (0 for a problem of the other family).
    pub fn workspace_size(&self, problem: &B2bProblem) -> usize {
        // SAFETY: as in can_implement.
        self.problem_ptr(problem).map_or(0, |p| unsafe { self.functions.workspace_size(p) })
    }

    /// Host bytes of the kernel's params.
    pub fn params_size(&self) -> usize {
        self.functions.params_size()
    }

    /// `<symbol>_initialize`: checks and builds the kernel's state for `problem` (see
    /// [`crate::loader::Kernel::initialize`]).
    ///
    /// # Safety
    /// The pointers in `args` must be device memory of the sizes `problem` implies (or ones
    /// the kernel refuses before any CUDA call), `workspace` a device buffer of
    /// `workspace_bytes` bytes (or null), and `stream` a valid stream of the current context.
    pub unsafe fn initialize(
        &self,
        problem: &B2bProblem,
        args: &BoltB2bArgs,
        workspace: *mut std::ffi::c_void,
        workspace_bytes: usize,
        stream: *mut std::ffi::c_void,
    ) -> Result<crate::loader::Params<BoltB2bArgs>, crate::loader::CallError> {
        match self.problem_ptr(problem) {
            Some(p) => unsafe { self.functions.initialize(p, args, workspace, workspace_bytes, stream) },
            None => Err(crate::loader::CallError {
                symbol: self.symbol.clone(),
                function: "_initialize",
                status: crate::abi::Status::UnsupportedProblem,
            }),
        }
    }
}
