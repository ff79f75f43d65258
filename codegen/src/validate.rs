//! Rejects kernel specs that would fail inside nvcc (a CUTLASS `static_assert`), fail every
//! `can_implement`, or describe a kernel that is certain to perform badly (register spills) —
//! before anything is rendered or compiled. Each rule returns a typed [`Rejection`] whose message
//! names the spec field and the numbers involved.
//!
//! Where each rule comes from is cited next to it: a CUTLASS 4.2 header (paths relative to
//! `cutlass/source/include/cutlass/`), CUTLASS's own kernel generator
//! (`python/cutlass_library/generator.py`, `sm90_utils.py`), a hardware limit, or one of
//! Bolt's templates (`templates/`, `codegen/src/sm80.rs`, `codegen/src/sm90.rs`) where CUTLASS
//! offers more than Bolt renders.

use crate::abi::BoltConv2dProblem;
use crate::epilogue::{NormalForm, ResidualAt};
use crate::spec::{
    Alignment, Arch, ConvFeatures, Element, EpilogueSchedule, Family, GroupMode, KernelSchedule, KernelSpec, Layout,
    Sm80Tile, Sm90Tile, Swizzle, TileConfig, Types, OPTIMIZED_ITERATOR_MAX_TAPS,
};

/// Accumulator registers a thread may hold. sm80: 255 registers per thread, and fragments of A
/// and B (double-buffered), addresses and the epilogue need the rest; CUTLASS's largest sm80
/// warp tile (64x64, f32) sits exactly here. sm90: consumer warp groups get 232 registers
/// (`setmaxnreg`, `MmaRegisterRequirement` in gemm/kernel/sm90_gemm_tma_warpspecialized_*.hpp);
/// CUTLASS's largest good tiles (128x256 cooperative, 64x256 ping-pong) sit here too.
/// Past it, ptxas spills accumulators to local memory.
pub const MAX_ACCUMULATOR_REGISTERS: usize = 128;

/// Accumulators a SIMT thread may hold (the depthwise kernel). SIMT warp tiles need their A/B
/// fragments, the analytic iterators' per-access offsets and predicates besides: with ptxas
/// 13.5, a 64x64 SIMT warp tile (128 accumulators per thread) reaches 255 registers and
/// spills; 32x64 and 64x32 (64 accumulators) do not.
pub const MAX_SIMT_ACCUMULATORS: usize = 64;

/// Global loads of the conv activation (A) tile per thread and stage. The optimized fprop
/// activation iterator keeps an offset and predicate masks per strided access
/// (conv/threadblock/conv2d_fprop_activation_tile_access_iterator_optimized.h): with ptxas
/// 13.5, 256x64x64 16-bit tiles on 4 warps (16 loads) spill 424-516 bytes, 8 loads do not.
pub const MAX_CONV_ACTIVATION_LOADS: u32 = 8;

/// Widest vector access (LDG.128 / cp.async.16 / TMA element granularity), in bytes.
const MAX_ACCESS_BYTES: usize = 16;

/// TMA moves 16-byte-aligned boxes: `tma_alignment_bytes` in
/// gemm/collective/builders/sm90_common.inl.
const TMA_ALIGNMENT_BYTES: usize = 16;

/// Why a spec is turned down before nvcc sees it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    // ---- arch, types, epilogue ---------------------------------------------------------------
    #[error("arch {arch:?} given a {tile} tile config: Sm80 specs take Sm80Tile or DirectTile, Sm90 specs Sm90Tile")]
    ArchTileMismatch { arch: Arch, tile: &'static str },

    #[error("direct depthwise kernel: {0}")]
    Direct(String),

    #[error("types.accumulator BF16: no tensor-core (or SIMT) instruction accumulates in bf16; use F32")]
    AccumulatorBf16,

    #[error("types.accumulator F16 with {input:?} inputs: only f16 mma accumulates in f16 (bf16 and tf32 mma accumulate in f32)")]
    AccumulatorF16NeedsF16Input { input: Element },

    #[error("types.output {output:?} ({output_bytes} bytes) is wider than the {accumulator:?} accumulator ({accumulator_bytes} bytes): the extra precision does not exist")]
    OutputWiderThanAccumulator { accumulator: Element, accumulator_bytes: usize, output: Element, output_bytes: usize },

    #[error("epilogue `{name}` is outside Bolt's normal form act(alpha*acc [+ beta*C] [+ bias] [+ residual]) [+ residual]: sm80 (CUTLASS 2.x functors) cannot lower it")]
    EpilogueNotNormalForm { name: String },

    #[error("GemmSoftmax on sm90: CUTLASS's GemmSoftmax (example 35) is a CUTLASS 2.x kernel; an H100 runs the sm80 build through its compute_80 PTX")]
    GemmSoftmaxSm80Only,

    #[error("GemmSoftmax with {what}: {why}")]
    GemmSoftmax { what: String, why: &'static str },

    #[error("layouts C {c:?} with epilogue `{epilogue}` on sm80: the column bias is broadcast along the rows of a row-major output only (bias as zero-stride C, EpilogueWithBroadcast), so column-major C/D takes epilogues without bias")]
    Sm80ColumnMajorBias { c: Layout, epilogue: String },

    // ---- alignment ---------------------------------------------------------------------------
    #[error("{field} = {value}: alignment must be 8, 4, 2 or 1 elements")]
    AlignmentValue { field: &'static str, value: u32 },

    #[error("{field} = {value} {element:?} elements = {bytes} bytes > 16-byte widest vector access")]
    AlignmentTooWide { field: &'static str, value: u32, element: Element, bytes: usize },

    #[error("{field} = {value} {element:?} elements = {bytes}-byte loads: sm80 cp.async copies 4, 8 or 16 bytes (arch/memory_sm80.h); pad the tensor to a wider alignment")]
    CpAsyncTooNarrow { field: &'static str, value: u32, element: Element, bytes: usize },

    #[error("{field} = {value} {element:?} elements = {bytes} bytes: sm90 TMA loads need 16-byte alignment (\"Should meet TMA alignment requirement\", sm90 collective builder)")]
    TmaAlignment { field: &'static str, value: u32, element: Element, bytes: usize },

    #[error("alignment.c = {value} {element:?} elements = {bytes} bytes: the TMA epilogue needs 16-byte aligned C/D (use EpilogueSchedule::NoSmem)")]
    TmaEpilogueAlignment { value: u32, element: Element, bytes: usize },

    // ---- sm80 tile ---------------------------------------------------------------------------
    #[error("tile.instruction {}: {input:?} inputs run as {what} {}", fmt3(.instruction), fmt3(.expected))]
    Instruction { instruction: [u32; 3], expected: [u32; 3], input: Element, what: &'static str },

    #[error("tile.threadblock {} is not a multiple of tile.warp {}", fmt3(.threadblock), fmt3(.warp))]
    ThreadblockNotWarpMultiple { threadblock: [u32; 3], warp: [u32; 3] },

    #[error("tile.warp {} is not a multiple of tile.instruction {}", fmt3(.warp), fmt3(.instruction))]
    WarpNotInstructionMultiple { warp: [u32; 3], instruction: [u32; 3] },

    #[error("tile.warp K {warp_k} < tile.threadblock K {threadblock_k} (sliced-K): no CUTLASS sm80 configuration uses it and its epilogue reduction is not modelled")]
    SlicedK { threadblock_k: u32, warp_k: u32 },

    #[error("tile.threadblock {} / tile.warp {} = {warps} warps: need 1, 2, 4 or 8 (at most 256 threads)", fmt3(.threadblock), fmt3(.warp))]
    WarpCount { threadblock: [u32; 3], warp: [u32; 3], warps: u32 },

    #[error("tile.warp K {warp_k} / instruction K {instruction_k} = {steps} mma steps: CUTLASS's mainloop needs an even number of at least 2 (gemm/threadblock/mma_base.h)")]
    WarpKSteps { warp_k: u32, instruction_k: u32, steps: u32 },

    #[error("tile.stages {stages}: {reason}")]
    Stages { stages: u32, reason: &'static str },

    #[error("smem {bytes} bytes > {available} available ({detail})")]
    SharedMemory { bytes: usize, available: usize, detail: String },

    #[error("accumulators need {registers} registers per thread > {max} ({detail}): ptxas would spill")]
    AccumulatorRegisters { registers: usize, max: usize, detail: String },

    #[error("operand {operand}: a {rows}x{cols} tile is {accesses} 128-bit accesses per stage for {threads} threads; each thread needs a whole, non-zero number (transform/pitch_linear_thread_map.h)")]
    ThreadMap { operand: &'static str, rows: u32, cols: u32, accesses: u32, threads: u32 },

    #[error("operand A (conv activations): {loads} loads per thread per stage > {max} ({rows}x{cols} tile, {threads} threads): the optimized activation iterator's per-load offsets and masks make ptxas spill")]
    ConvActivationLoads { loads: u32, max: u32, rows: u32, cols: u32, threads: u32 },

    #[error("tile.swizzle Identity({n}): CUTLASS's identity swizzle takes 1, 2, 4 or 8 (get_log_tile caps at 8)")]
    SwizzleWidth { n: u32 },

    #[error("tile.split_k 0: 1 means no split-K")]
    SplitKZero,

    #[error(
        "tile.split_k {split_k} with tile.swizzle {swizzle:?}: split_k > 1 exactly when the swizzle is SplitKSerial"
    )]
    SplitKSwizzle { split_k: u32, swizzle: Swizzle },

    #[error(
        "tile.split_k {split_k} on a batched GEMM: the batch index takes the grid's z, so there is no serial split-K"
    )]
    SplitKBatched { split_k: u32 },

    #[error("tile.split_k {split_k} with epilogue `{epilogue}`: it needs CUTLASS's residual block, which adds the bias and applies the inner activation on every K partition (epilogue/thread/linear_combination_residual_block.h)")]
    SplitKResidualBlock { split_k: u32, epilogue: String },

    #[error("tile.split_k {split_k} with {groups:?} conv: CUTLASS's grouped convolutions have no split-K (conv/device/implicit_gemm_convolution.h can_implement)")]
    SplitKGroupedConv { split_k: u32, groups: GroupMode },

    // ---- conv --------------------------------------------------------------------------------
    #[error("depthwise conv runs CUTLASS's SIMT implicit-GEMM kernel (conv/kernel/default_depthwise_fprop.h): tile.instruction must be 1x1x1, not {}", fmt3(.instruction))]
    DepthwiseNeedsSimt { instruction: [u32; 3] },

    #[error("{groups:?} conv with epilogue `{epilogue}`: CUTLASS 2.x has no broadcast (residual-block) epilogue for grouped convolutions; one extra operand (bias or C) only")]
    GroupedConvBroadcastEpilogue { groups: GroupMode, epilogue: String },

    #[error("{groups:?} conv on sm90: CUTLASS 3.x convolutions have no groups (\"does not support conv groups > 1\", conv/collective/sm90_implicit_gemm_gmma_ss_warpspecialized.hpp)")]
    Sm90GroupedConv { groups: GroupMode },

    #[error("tile.kernel {kernel:?} for an sm90 conv: CUTLASS 4.2 builds sm90 convs only as the non-persistent warp-specialized kernel (\"Persistent schedules not support for conv yet\", conv/dispatch_policy.hpp), which Bolt spells TmaWarpSpecializedCooperative")]
    Sm90ConvSchedule { kernel: KernelSchedule },

    #[error("tile.epilogue NoSmem for an sm90 conv: Bolt's sm90 conv template has the TMA epilogue only")]
    Sm90ConvEpilogue,

    // ---- sm90 tile ---------------------------------------------------------------------------
    #[error("tile M {m} with {kernel:?}{}: needs {allowed}", conv_suffix(.conv))]
    Sm90TileM { m: u32, kernel: KernelSchedule, conv: bool, allowed: &'static str },

    #[error("tile N {n}: wgmma N must be a multiple of 16 from 16 to 256")]
    Sm90TileN { n: u32 },

    #[error(
        "tile K {k} = {bytes} bytes of {element:?}: must be a multiple of 32 bytes (one swizzle atom) up to 256 bytes"
    )]
    Sm90TileK { k: u32, bytes: usize, element: Element },

    #[error("cluster {}: M and N each 1, 2 or 4, K 1, at most 8 CTAs (portable cluster size)", fmt3(.cluster))]
    Cluster { cluster: [u32; 3] },

    #[error("smem: {stages} mainloop stage(s) of {stage_bytes} bytes fit in {capacity} bytes after {epilogue_bytes} epilogue bytes; the TMA mainloop needs at least 2 (\"Specialization requires Stages set to value 2 or more\")")]
    Sm90Stages { stages: usize, stage_bytes: usize, epilogue_bytes: usize, capacity: usize },

    #[error("layouts A {a:?}, B {b:?} with f32 (tf32) inputs on sm90: tf32 wgmma reads K-major shared memory only, so Bolt needs row-major A and column-major B (other layouts take CUTLASS's transposing / register-A mainloops, and row-major B with row-major A its transposed epilogue)")]
    Tf32Layout { a: Layout, b: Layout },
}

fn fmt3(s: &[u32; 3]) -> String {
    format!("{}x{}x{}", s[0], s[1], s[2])
}

fn conv_suffix(conv: &bool) -> &'static str {
    if *conv {
        " (conv)"
    } else {
        ""
    }
}

/// Largest conv stride an sm90 conv kernel takes: the TMA im2col descriptor's traversal strides
/// (`elementStrides` of cuTensorMapEncodeIm2col) are at most 8. CUTLASS checks this only with
/// `assert` (compiled out under -DNDEBUG), so a larger stride would build an invalid descriptor
/// and fail at launch, or worse.
pub const SM90_CONV_MAX_STRIDE: i32 = 8;

/// Why a (valid) spec cannot run a concrete problem, for rules a shape-free spec cannot see.
/// The rendered `<symbol>_can_implement` refuses the same problems.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProblemRejection {
    #[error("a {r}x{s} filter on a conv kernel with CUTLASS's optimized iterators, whose masks take up to {OPTIMIZED_ITERATOR_MAX_TAPS} taps per axis: an analytic-iterator kernel runs it")]
    OptimizedIteratorTaps { r: i32, s: i32 },
    #[error("a filter of {taps} taps (dilation {dilation}, padding {pad}) along {axis} on an sm90 conv kernel: TMA im2col takes padding up to 256 and filter reaches within [-128, 127] of the padding; use an sm80 kernel")]
    Sm90Im2col { axis: &'static str, taps: i32, pad: i32, dilation: i32 },
    #[error("conv stride {stride_h}x{stride_w} on an sm90 conv kernel: the TMA im2col descriptor takes traversal strides up to {SM90_CONV_MAX_STRIDE} (CUTLASS only asserts it); use an sm80 kernel")]
    Sm90ConvStride { stride_h: i32, stride_w: i32 },
}

/// Problem-level rules of `spec` on the conv `problem` (the planner's and the tuner's view of
/// what the compiled `can_implement` answers).
pub fn validate_conv_problem(spec: &KernelSpec, problem: &BoltConv2dProblem) -> Result<(), ProblemRejection> {
    let Family::Conv2dFprop(features) = spec.family else { return Ok(()) };
    let p = problem;
    let taps = (p.r, p.s);
    if spec.arch == Arch::Sm90 {
        if p.stride_h > SM90_CONV_MAX_STRIDE || p.stride_w > SM90_CONV_MAX_STRIDE {
            return Err(ProblemRejection::Sm90ConvStride { stride_h: p.stride_h, stride_w: p.stride_w });
        }
        // TMA im2col (2-D): padding up to 256, box corners (-pad, pad - (taps-1)·dilation) in
        // [-128, 127], filter offsets (taps-1)·dilation below 255 (CUTLASS's sm90 implicit-GEMM
        // collective `can_implement`).
        for (axis, taps, pad, dilation) in [("h", p.r, p.pad_h, p.dilation_h), ("w", p.s, p.pad_w, p.dilation_w)] {
            let reach = (taps as i64 - 1) * dilation as i64;
            let (lower, upper) = (-(pad as i64), pad as i64 - reach);
            let fits = |c: i64| (-128..=127).contains(&c);
            if pad > 256 || !fits(lower) || !fits(upper) || reach >= 255 {
                return Err(ProblemRejection::Sm90Im2col { axis, taps, pad, dilation });
            }
        }
    }
    let optimized = spec.arch == Arch::Sm80
        && !features.analytic
        && matches!(features.groups, GroupMode::None | GroupMode::SingleGroup)
        && matches!(spec.tile, TileConfig::Sm80(_));
    if optimized && (taps.0 > OPTIMIZED_ITERATOR_MAX_TAPS || taps.1 > OPTIMIZED_ITERATOR_MAX_TAPS) {
        return Err(ProblemRejection::OptimizedIteratorTaps { r: taps.0, s: taps.1 });
    }
    Ok(())
}

/// Checks `spec` against every rule; the first broken one is returned.
pub fn validate(spec: &KernelSpec) -> Result<(), Rejection> {
    check_types(spec.types)?;
    match (spec.arch, &spec.tile) {
        (Arch::Sm80, TileConfig::Sm80(tile)) => validate_sm80(spec, tile),
        (Arch::Sm90, TileConfig::Sm90(tile)) => validate_sm90(spec, tile),
        (Arch::Sm80, TileConfig::Direct(tile)) => validate_direct(spec, tile),
        (arch, TileConfig::Sm80(_)) => Err(Rejection::ArchTileMismatch { arch, tile: "Sm80Tile" }),
        (arch, TileConfig::Sm90(_)) => Err(Rejection::ArchTileMismatch { arch, tile: "Sm90Tile" }),
        (arch, TileConfig::Direct(_)) => Err(Rejection::ArchTileMismatch { arch, tile: "DirectTile" }),
    }
}

/// The direct depthwise kernel: depthwise convs, f32 accumulation, one access of at most 16
/// bytes per thread per pixel on channels whose count and pointers allow it, a few pixels per
/// thread. Any epilogue tree (it is evaluated per element).
fn validate_direct(spec: &KernelSpec, tile: &crate::spec::DirectTile) -> Result<(), Rejection> {
    let bad = |reason: String| Err(Rejection::Direct(reason));
    if !matches!(spec.family, Family::Conv2dFprop(ConvFeatures { groups: GroupMode::Depthwise, .. })) {
        return bad(format!("family {:?}: the direct kernel runs depthwise convs only", spec.family));
    }
    if spec.types.accumulator != Element::F32 {
        return bad(format!("accumulator {:?}: the direct kernel accumulates in f32", spec.types.accumulator));
    }
    let v = tile.vector;
    if !v.is_power_of_two() || v as usize * spec.types.input.size_bytes().max(spec.types.output.size_bytes()) > 16 {
        return bad(format!("vector {v}: a power of two of at most 16 bytes of either type"));
    }
    let a = spec.alignment;
    if a.a % v != 0 || a.c % v != 0 {
        return bad(format!("vector {v} with channel alignments a{} / c{}: channels come in whole vectors", a.a, a.c));
    }
    if !matches!(tile.pixels, 1 | 2 | 4 | 8) {
        return bad(format!("pixels {}: 1, 2, 4 or 8 output columns per thread", tile.pixels));
    }
    Ok(())
}

/// Element-type rules shared by both archs. Tensor-core instructions: mma.sync / wgmma with
/// f16 inputs accumulate in f16 or f32; bf16 and tf32 accumulate in f32 only (PTX ISA, and the
/// math instructions CUTLASS's generator lists for 16816 / 1688 / WGMMA).
fn check_types(t: Types) -> Result<(), Rejection> {
    match (t.input, t.accumulator) {
        (_, Element::BF16) => return Err(Rejection::AccumulatorBf16),
        (Element::BF16 | Element::F32, Element::F16) => {
            return Err(Rejection::AccumulatorF16NeedsF16Input { input: t.input })
        }
        _ => {}
    }
    // CUTLASS's generator emits outputs of the accumulator or the input type; an f32 output of
    // an f16 accumulator only stores f16 precision in twice the bytes.
    if t.output.size_bytes() > t.accumulator.size_bytes() {
        return Err(Rejection::OutputWiderThanAccumulator {
            accumulator: t.accumulator,
            accumulator_bytes: t.accumulator.size_bytes(),
            output: t.output,
            output_bytes: t.output.size_bytes(),
        });
    }
    Ok(())
}

fn epilogue_name(spec: &KernelSpec) -> String {
    spec.epilogue.name()
}

fn groups(family: Family) -> GroupMode {
    match family {
        Family::Conv2dFprop(ConvFeatures { groups, .. }) => groups,
        _ => GroupMode::None,
    }
}

/// Normal forms CUTLASS 2.x lowers onto `LinearCombinationResidualBlock` (an epilogue with a
/// broadcast bias *and* the source tensor): bias together with C, or a residual added after a
/// (non-identity) activation. Mirrors the lowering in `sm80.rs`.
fn needs_residual_block(f: &NormalForm) -> bool {
    f.residual == Some(ResidualAt::AfterActivation) || (f.bias && (f.beta_source || f.residual.is_some()))
}

/// `(field, value, element)` of each operand's alignment.
fn alignment_fields(a: Alignment, t: Types) -> [(&'static str, u32, Element); 3] {
    [("alignment.a", a.a, t.input), ("alignment.b", a.b, t.input), ("alignment.c", a.c, t.output)]
}

/// Alignments must be 8/4/2/1 elements and fit one 128-bit access (CUTLASS's `AlignedArray`
/// accesses; the generator's alignments are 8/4/2 for 16-bit and 4/2/1 for 32-bit data).
fn check_alignment_values(a: Alignment, t: Types) -> Result<(), Rejection> {
    for (field, value, element) in alignment_fields(a, t) {
        if ![1, 2, 4, 8].contains(&value) {
            return Err(Rejection::AlignmentValue { field, value });
        }
        let bytes = value as usize * element.size_bytes();
        if bytes > MAX_ACCESS_BYTES {
            return Err(Rejection::AlignmentTooWide { field, value, element, bytes });
        }
    }
    Ok(())
}

// ================================================================================================
// sm80
// ================================================================================================

impl Sm80Tile {
    /// Warps along M, N, K.
    pub fn warp_grid(&self) -> [u32; 3] {
        let d = |i: usize| self.threadblock[i].checked_div(self.warp[i]).unwrap_or(0);
        [d(0), d(1), d(2)]
    }

    pub fn warps(&self) -> u32 {
        self.warp_grid().iter().product()
    }

    pub fn threads(&self) -> u32 {
        32 * self.warps()
    }

    /// Mainloop shared memory: every stage holds the A tile (M x K) and the B tile (K x N);
    /// the tensor-op smem layouts of CUTLASS 2.x have no padding (gemm/threadblock/mma_base.h
    /// SharedStorage).
    pub fn mainloop_smem_bytes(&self, input: Element) -> usize {
        let [m, n, k] = self.threadblock.map(|x| x as usize);
        (m * k + k * n) * input.size_bytes() * self.stages as usize
    }

    /// Epilogue shared memory (estimate): each warp row stages 8 accumulator rows of the
    /// threadblock's N columns, plus 8 elements of padding per row
    /// (epilogue/threadblock/epilogue_base.h SharedStorage, epilogue/warp/tile_iterator_tensor_op.h).
    pub fn epilogue_smem_bytes(&self, accumulator: Element) -> usize {
        let [wm, _, wk] = self.warp_grid().map(|x| x as usize);
        let n = self.threadblock[1] as usize;
        wm * wk * 8 * (n + 8) * accumulator.size_bytes()
    }

    /// Shared memory of the kernel: the mainloop's and the epilogue's storage are a union in
    /// CUTLASS 2.x kernels (gemm/kernel/gemm.h, gemm_universal.h: `union SharedStorage`).
    pub fn smem_bytes(&self, types: Types) -> usize {
        self.mainloop_smem_bytes(types.input).max(self.epilogue_smem_bytes(types.accumulator))
    }

    /// Accumulator registers per thread: the warp tile's accumulators spread over 32 lanes.
    pub fn accumulator_registers(&self, accumulator: Element) -> usize {
        let (m, n) = (self.warp[0] as usize, self.warp[1] as usize);
        m * n / 32 * accumulator.size_bytes() / 4
    }
}

fn validate_sm80(spec: &KernelSpec, tile: &Sm80Tile) -> Result<(), Rejection> {
    let t = spec.types;
    let group_mode = groups(spec.family);
    let depthwise = group_mode == GroupMode::Depthwise;
    let is_conv = matches!(spec.family, Family::Conv2dFprop(_));

    // CUTLASS 2.x epilogues are fixed functors; Bolt lowers its normal form onto them.
    let form =
        spec.epilogue.normal_form().ok_or_else(|| Rejection::EpilogueNotNormalForm { name: epilogue_name(spec) })?;

    // Grouped / depthwise fprop kernels (conv/kernel/default_conv2d_group_fprop.h,
    // default_depthwise_fprop.h) take a plain epilogue: no EpilogueWithBroadcast variant.
    if group_mode != GroupMode::None && needs_residual_block(&form) {
        return Err(Rejection::GroupedConvBroadcastEpilogue { groups: group_mode, epilogue: epilogue_name(spec) });
    }

    // Bias: CUTLASS 2.x adds the N-vector either as C with a zero row stride or through
    // EpilogueWithBroadcast, both broadcasting along rows of a row-major output; a column-major
    // GEMM output would need a per-row vector (sm80.rs lowering).
    if !is_conv && spec.layouts[2] == Layout::ColumnMajor && (form.bias || needs_residual_block(&form)) {
        return Err(Rejection::Sm80ColumnMajorBias { c: spec.layouts[2], epilogue: epilogue_name(spec) });
    }

    // GemmSoftmax (example 35): one row-major output, one functor reading at most one C
    // operand through the visitor, whole K per tile.
    if spec.family == Family::GemmSoftmax {
        let reject = |what: String, why| Err(Rejection::GemmSoftmax { what, why });
        if spec.layouts[2] != Layout::RowMajor {
            return reject(format!("layouts C {:?}", spec.layouts[2]), "the softmax runs along rows of a row-major D");
        }
        if needs_residual_block(&form) {
            return reject(
                format!("epilogue `{}`", epilogue_name(spec)),
                "its visitor takes a LinearCombination functor (one C operand), not CUTLASS's residual block",
            );
        }
        if tile.split_k > 1 {
            return reject(format!("tile.split_k {}", tile.split_k), "its visitor reduces whole tiles (no split-K)");
        }
    }

    // Alignment. The depthwise kernel is SIMT and Bolt instantiates it with alignment 1.
    check_alignment_values(spec.alignment, t)?;
    if !depthwise {
        // Multistage mainloops copy A and B with cp.async of alignment * sizeof bytes, which
        // static_asserts 4, 8 or 16 (arch/memory_sm80.h). CUTLASS's sm80 generator has no
        // 16-bit alignment-1 kernel for the 2-stage pipeline either (alignments 8/4/2).
        for (field, value, element) in alignment_fields(spec.alignment, t).into_iter().take(2) {
            let bytes = value as usize * element.size_bytes();
            if bytes < 4 {
                return Err(Rejection::CpAsyncTooNarrow { field, value, element, bytes });
            }
        }
    }

    // Instruction shape: mma.sync m16n8k16 for 16-bit inputs, m16n8k8 for tf32 (the math
    // instructions of GenerateSM80_TensorOp_16816 / _1688); SIMT 1x1x1 for depthwise.
    let (expected, what) = match (depthwise, t.input) {
        (true, _) => ([1, 1, 1], "CUTLASS's SIMT depthwise kernel, instruction"),
        (false, Element::F32) => ([16, 8, 8], "tf32 mma.sync m16n8k8, instruction"),
        (false, _) => ([16, 8, 16], "mma.sync m16n8k16, instruction"),
    };
    if tile.instruction != expected {
        if depthwise {
            return Err(Rejection::DepthwiseNeedsSimt { instruction: tile.instruction });
        }
        return Err(Rejection::Instruction { instruction: tile.instruction, expected, input: t.input, what });
    }

    // Divisibility: "Threadblock-scoped GEMM should be divisible by warp-scoped GEMM size"
    // (gemm/threadblock/default_mma_core_sm80.h); warp tiles are built of whole instructions
    // (gemm/warp/mma_tensor_op.h iterates WarpShape / InstructionShape).
    for i in 0..3 {
        if tile.warp[i] == 0 || !tile.threadblock[i].is_multiple_of(tile.warp[i]) {
            return Err(Rejection::ThreadblockNotWarpMultiple { threadblock: tile.threadblock, warp: tile.warp });
        }
    }
    for i in 0..3 {
        if !tile.warp[i].is_multiple_of(tile.instruction[i]) {
            return Err(Rejection::WarpNotInstructionMultiple { warp: tile.warp, instruction: tile.instruction });
        }
    }
    if tile.warp[2] != tile.threadblock[2] {
        return Err(Rejection::SlicedK { threadblock_k: tile.threadblock[2], warp_k: tile.warp[2] });
    }
    // The paper's guideline (4 or 8 warps perform best) and CUTLASS's generator use 4 or 8;
    // 1 and 2 are legal CUTLASS configurations. More than 8 warps exceed the 255-register
    // budget per thread at 65536 registers per SM for any useful tile.
    let warps = tile.warps();
    if ![1, 2, 4, 8].contains(&warps) {
        return Err(Rejection::WarpCount { threadblock: tile.threadblock, warp: tile.warp, warps });
    }
    // "The pipelined structure requires at least two warp-level GEMM operations" and "Inner loop
    // iteration must be an even number" (gemm/threadblock/mma_base.h).
    let steps = tile.warp[2] / tile.instruction[2];
    if steps < 2 || !steps.is_multiple_of(2) {
        return Err(Rejection::WarpKSteps { warp_k: tile.warp[2], instruction_k: tile.instruction[2], steps });
    }

    // Stages: 2 selects the register double-buffered MmaPipelined, >= 3 the cp.async
    // MmaMultistage (gemm/threadblock/default_mma.h); CUTLASS's SIMT depthwise kernel exists
    // only with 2 (conv/kernel/default_depthwise_fprop.h specialises Stages = 2).
    if depthwise && tile.stages != 2 {
        return Err(Rejection::Stages {
            stages: tile.stages,
            reason: "CUTLASS's depthwise fprop kernel is the 2-stage pipelined one",
        });
    }
    if tile.stages < 2 {
        return Err(Rejection::Stages {
            stages: tile.stages,
            reason: "at least 2 needed (2: pipelined, 3 or more: cp.async multistage)",
        });
    }

    // Swizzle and split-K.
    if let Swizzle::Identity(n) = tile.swizzle {
        if ![1, 2, 4, 8].contains(&n) {
            return Err(Rejection::SwizzleWidth { n });
        }
    }
    if tile.split_k == 0 {
        return Err(Rejection::SplitKZero);
    }
    if (tile.split_k > 1) != (tile.swizzle == Swizzle::SplitKSerial) {
        return Err(Rejection::SplitKSwizzle { split_k: tile.split_k, swizzle: tile.swizzle });
    }
    if tile.split_k > 1 {
        if spec.family == Family::BatchedGemm {
            return Err(Rejection::SplitKBatched { split_k: tile.split_k });
        }
        if group_mode != GroupMode::None {
            return Err(Rejection::SplitKGroupedConv { split_k: tile.split_k, groups: group_mode });
        }
        // Serial split-K re-runs the epilogue once per K partition with the partial output as
        // its source; LinearCombination[Generic] handle that (beta := 1, activation skipped
        // until the last partition), the residual block does not.
        if needs_residual_block(&form) {
            return Err(Rejection::SplitKResidualBlock { split_k: tile.split_k, epilogue: epilogue_name(spec) });
        }
    }

    // Global->shared thread maps move 128-bit vectors: every thread must own a whole number
    // of them (PitchLinearWarpRakedThreadMap: "Number of iterations must be non-zero", shapes
    // divisible by the warp arrangement). The SIMT depthwise core has its own maps.
    if !depthwise {
        let per_access = (MAX_ACCESS_BYTES / t.input.size_bytes()) as u32;
        let threads = tile.threads();
        let [m, n, k] = tile.threadblock;
        for (operand, rows, cols) in [("A", m, k), ("B", k, n)] {
            let accesses = rows * cols / per_access;
            if accesses < threads || !accesses.is_multiple_of(threads) {
                return Err(Rejection::ThreadMap { operand, rows, cols, accesses, threads });
            }
        }
        if is_conv {
            let loads = m * k / per_access / threads;
            if loads > MAX_CONV_ACTIVATION_LOADS {
                return Err(Rejection::ConvActivationLoads {
                    loads,
                    max: MAX_CONV_ACTIVATION_LOADS,
                    rows: m,
                    cols: k,
                    threads,
                });
            }
            // The optimized filter iterator keeps one predicate bit per strided load in a u32
            // ("the number of loads per iteration is limited by the size of the predicates
            // container", conv/threadblock/conv2d_fprop_filter_tile_access_iterator_optimized.h).
            let loads = k * n / per_access / threads;
            if loads >= 32 {
                return Err(Rejection::ThreadMap {
                    operand: "B (conv filter)",
                    rows: k,
                    cols: n,
                    accesses: k * n / per_access,
                    threads,
                });
            }
        }
    }

    // Shared memory: the opt-in maximum per block (A100: 164 KB per SM, 163 KB per block).
    let available = Arch::Sm80.smem_per_block();
    let bytes = tile.smem_bytes(t);
    if bytes > available {
        let [m, n, k] = tile.threadblock;
        return Err(Rejection::SharedMemory {
            bytes,
            available,
            detail: format!(
                "threadblock {m}x{n}x{k}, {} stages of {} bytes of {:?}; epilogue {} bytes",
                tile.stages,
                tile.mainloop_smem_bytes(t.input) / tile.stages as usize,
                t.input,
                tile.epilogue_smem_bytes(t.accumulator)
            ),
        });
    }

    // Registers.
    if depthwise {
        let accumulators = (tile.warp[0] * tile.warp[1] / 32) as usize;
        if accumulators > MAX_SIMT_ACCUMULATORS {
            return Err(Rejection::AccumulatorRegisters {
                registers: accumulators,
                max: MAX_SIMT_ACCUMULATORS,
                detail: format!(
                    "SIMT warp tile {}x{} over 32 lanes, one register or more per accumulator",
                    tile.warp[0], tile.warp[1]
                ),
            });
        }
    }
    let registers = tile.accumulator_registers(t.accumulator);
    if registers > MAX_ACCUMULATOR_REGISTERS {
        return Err(Rejection::AccumulatorRegisters {
            registers,
            max: MAX_ACCUMULATOR_REGISTERS,
            detail: format!("warp tile {}x{} of {:?} over 32 lanes", tile.warp[0], tile.warp[1], t.accumulator),
        });
    }
    Ok(())
}

// ================================================================================================
// sm90
// ================================================================================================

/// Shared-memory budget of an sm90 kernel, as CUTLASS's collective builder computes it with
/// `StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>` (Bolt's templates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sm90Smem {
    /// One mainloop stage: A and B tiles rounded up to 128 bytes, plus its two barriers.
    pub stage_bytes: usize,
    /// The epilogue's shared storage (estimate), rounded up to 128 bytes.
    pub epilogue_bytes: usize,
    /// `sm90_smem_capacity_bytes` (gemm/collective/builders/sm90_common.inl) = 227 KiB.
    pub capacity: usize,
    /// Mainloop stages that fit: `(capacity - carveout) / stage_bytes`
    /// (`compute_stage_count_or_override`, gemm/collective/builders/sm90_gmma_builder.inl).
    pub stages: usize,
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Sm90Tile {
    /// Whether two consumer warp groups split the tile along M (cooperative and stream-K GEMMs).
    /// sm90 convs run the non-persistent kernel with one consumer warp group.
    pub fn cooperative(&self, conv: bool) -> bool {
        !conv && matches!(self.kernel, KernelSchedule::TmaWarpSpecializedCooperative | KernelSchedule::StreamK)
    }

    /// Threads holding the tile's accumulators.
    pub fn consumer_threads(&self, conv: bool) -> usize {
        if self.cooperative(conv) {
            256
        } else {
            128
        }
    }

    pub fn accumulator_registers(&self, accumulator: Element, conv: bool) -> usize {
        let (m, n) = (self.tile[0] as usize, self.tile[1] as usize);
        m * n * accumulator.size_bytes() / 4 / self.consumer_threads(conv)
    }

    /// The shared-memory plan of this tile (see [`Sm90Smem`]).
    pub fn smem(&self, types: Types, conv: bool, reads_source: bool, reads_bias: bool) -> Sm90Smem {
        let [m, n, k] = self.tile.map(|x| x as usize);
        // PipelineTmaAsync<1>::SharedStorage: one full and one empty 8-byte barrier per stage.
        let stage_bytes = round_up((m * k + n * k) * types.input.size_bytes(), 128) + 16;
        let epilogue = match self.epilogue {
            // EpilogueTensorBroadcast keeps nothing in shared memory.
            EpilogueSchedule::NoSmem => 0,
            EpilogueSchedule::Tma => {
                // Epilogue subtile: sm90_compute_tile_shape_or_override (epilogue/collective/
                // builders/sm90_builder.inl): cooperative min(128, M) x gcd(min(32, N), N),
                // otherwise min(64, M) x the same N (16- and 32-bit outputs).
                let em = if self.cooperative(conv) { m.min(128) } else { m.min(64) };
                let en = gcd(32.min(n as u32), n as u32) as usize;
                let epi_tiles = (m / em.max(1)) * (n / en.max(1));
                // sm90_get_tma_dispatch_policy: StagesD = min(tiles, 2); with a source of the
                // output's type, D reuses C's StagesC = max(min(tiles, 4), StagesD + 1) buffers.
                let d = types.output.size_bytes();
                let stages_d = epi_tiles.min(2);
                let (buffers, load_barriers) = if reads_source {
                    let stages_c = epi_tiles.min(4).max(stages_d + 1);
                    (stages_c, stages_c * 16)
                } else {
                    (stages_d, 0)
                };
                let bias = if reads_bias { n * 4 } else { 0 };
                round_up(buffers * em * en * d, 128) + round_up(load_barriers + bias, 128)
            }
        };
        let capacity = Arch::Sm90.smem_per_block() / 128 * 128;
        let epilogue_bytes = round_up(epilogue, 128);
        let stages = capacity.saturating_sub(epilogue_bytes) / stage_bytes;
        Sm90Smem { stage_bytes, epilogue_bytes, capacity, stages }
    }
}

fn validate_sm90(spec: &KernelSpec, tile: &Sm90Tile) -> Result<(), Rejection> {
    if spec.family == Family::GemmSoftmax {
        return Err(Rejection::GemmSoftmaxSm80Only);
    }
    let t = spec.types;
    let conv = matches!(spec.family, Family::Conv2dFprop(_));
    let group_mode = groups(spec.family);

    if group_mode != GroupMode::None {
        return Err(Rejection::Sm90GroupedConv { groups: group_mode });
    }
    if conv && tile.kernel != KernelSchedule::TmaWarpSpecializedCooperative {
        return Err(Rejection::Sm90ConvSchedule { kernel: tile.kernel });
    }
    if conv && tile.epilogue != EpilogueSchedule::Tma {
        return Err(Rejection::Sm90ConvEpilogue);
    }
    // tf32: generator.py / sm90_utils.py get_valid_schedules route non-TN fp32 layouts through
    // transposing or register-sourced mainloops and the TT case through EpilogueTransposed,
    // none of which Bolt's sm90 template instantiates (sm90.rs).
    if !conv
        && t.input == Element::F32
        && (spec.layouts[0] != Layout::RowMajor || spec.layouts[1] != Layout::ColumnMajor)
    {
        return Err(Rejection::Tf32Layout { a: spec.layouts[0], b: spec.layouts[1] });
    }

    // Alignment: A and B are always loaded by TMA (Bolt has no cp.async sm90 schedule).
    check_alignment_values(spec.alignment, t)?;
    for (field, value, element) in alignment_fields(spec.alignment, t).into_iter().take(2) {
        let bytes = value as usize * element.size_bytes();
        if !bytes.is_multiple_of(TMA_ALIGNMENT_BYTES) {
            return Err(Rejection::TmaAlignment { field, value, element, bytes });
        }
    }
    // "C/D Should meet TMA alignment requirement" (Sm90TmaBuilderImpl, epilogue builder).
    let c_bytes = spec.alignment.c as usize * t.output.size_bytes();
    if tile.epilogue == EpilogueSchedule::Tma && !c_bytes.is_multiple_of(TMA_ALIGNMENT_BYTES) {
        return Err(Rejection::TmaEpilogueAlignment { value: spec.alignment.c, element: t.output, bytes: c_bytes });
    }

    // Tile M: wgmma is 64 rows per warp group. Cooperative kernels split M over two consumer
    // warp groups ("Cooperative kernel requires Tile Size to be greater than or equal to 128
    // along the M-dimension", gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp) and
    // stream-K is a cooperative kernel ("Ping-pong kernel does not currently support stream-K").
    // One ping-pong (or conv) warp group owns a whole tile: 64 or 128 rows in Bolt's templates.
    let [m, n, k] = tile.tile;
    let (ok_m, allowed) = if conv || tile.kernel == KernelSchedule::TmaWarpSpecializedPingpong {
        (m == 64 || m == 128, "64 or 128 (one consumer warp group owns the tile)")
    } else {
        (m == 128 || m == 256, "128 or 256 (two consumer warp groups split M into 64-row wgmma atoms)")
    };
    if !ok_m {
        return Err(Rejection::Sm90TileM { m, kernel: tile.kernel, conv, allowed });
    }
    // Tile N: one wgmma instruction spans N = 8..256 in steps of 8; CUTLASS's CTA tiles and the
    // epilogue subtiles (N % 16, sm90_builder.inl) keep to multiples of 16.
    if n < 16 || !n.is_multiple_of(16) || n > 256 {
        return Err(Rejection::Sm90TileN { n });
    }
    // Tile K: a whole number of 32/64/128-byte swizzle atoms of the K-major smem layout
    // (ss_smem_selector, sm90_common.inl); CUTLASS's generator uses 64 16-bit or 32 tf32
    // elements (128 bytes) and caps CTA tiles at 256.
    let k_bytes = k as usize * t.input.size_bytes();
    if k == 0 || !k_bytes.is_multiple_of(32) || k_bytes > 256 {
        return Err(Rejection::Sm90TileK { k, bytes: k_bytes, element: t.input });
    }
    // Clusters: TMA multicast along M and N only (cluster K is 1 in every CUTLASS config);
    // 8 CTAs is the portable maximum on H100 (16 needs the non-portable attribute).
    let [cm, cn, ck] = tile.cluster;
    if ck != 1 || ![1, 2, 4].contains(&cm) || ![1, 2, 4].contains(&cn) || cm * cn > 8 {
        return Err(Rejection::Cluster { cluster: tile.cluster });
    }

    // Shared memory: room for at least two mainloop stages after the epilogue's carveout
    // (gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp static_assert).
    let expr = &spec.epilogue.expr;
    let smem = tile.smem(t, conv, expr.reads_source(), expr.reads_bias());
    if smem.stages < 2 {
        return Err(Rejection::Sm90Stages {
            stages: smem.stages,
            stage_bytes: smem.stage_bytes,
            epilogue_bytes: smem.epilogue_bytes,
            capacity: smem.capacity,
        });
    }

    let registers = tile.accumulator_registers(t.accumulator, conv);
    if registers > MAX_ACCUMULATOR_REGISTERS {
        return Err(Rejection::AccumulatorRegisters {
            registers,
            max: MAX_ACCUMULATOR_REGISTERS,
            detail: format!(
                "tile {m}x{n} of {:?} over {} consumer threads",
                t.accumulator,
                tile.consumer_threads(conv)
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epilogue::{Activation, Epilogue, Expr};

    const F16_F32: Types = Types { input: Element::F16, accumulator: Element::F32, output: Element::F16 };
    const ALIGN8: Alignment = Alignment { a: 8, b: 8, c: 8 };
    const TN: [Layout; 3] = [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor];

    fn sm80_tile() -> Sm80Tile {
        Sm80Tile {
            threadblock: [128, 128, 32],
            warp: [64, 64, 32],
            instruction: [16, 8, 16],
            stages: 3,
            swizzle: Swizzle::Identity(8),
            split_k: 1,
        }
    }

    fn sm80() -> KernelSpec {
        KernelSpec {
            family: Family::Gemm,
            arch: Arch::Sm80,
            types: F16_F32,
            layouts: TN,
            alignment: ALIGN8,
            tile: TileConfig::Sm80(sm80_tile()),
            epilogue: Epilogue::plain(),
        }
    }

    fn sm90_tile() -> Sm90Tile {
        Sm90Tile {
            tile: [128, 256, 64],
            cluster: [2, 1, 1],
            kernel: KernelSchedule::TmaWarpSpecializedCooperative,
            epilogue: EpilogueSchedule::Tma,
        }
    }

    fn sm90() -> KernelSpec {
        KernelSpec { arch: Arch::Sm90, tile: TileConfig::Sm90(sm90_tile()), ..sm80() }
    }

    fn conv(groups: GroupMode) -> Family {
        Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups, analytic: false })
    }

    fn with80(f: impl FnOnce(&mut Sm80Tile)) -> KernelSpec {
        let mut t = sm80_tile();
        f(&mut t);
        KernelSpec { tile: TileConfig::Sm80(t), ..sm80() }
    }

    fn with90(f: impl FnOnce(&mut Sm90Tile)) -> KernelSpec {
        let mut t = sm90_tile();
        f(&mut t);
        KernelSpec { tile: TileConfig::Sm90(t), ..sm90() }
    }

    #[test]
    fn sm90_convs_refuse_strides_over_8_and_sm80_convs_take_them() {
        let problem = |stride: i32| BoltConv2dProblem {
            n: 1,
            h: 64,
            w: 64,
            c: 64,
            k: 64,
            r: 3,
            s: 3,
            p: 63 / stride + 1,
            q: 63 / stride + 1,
            pad_h: 1,
            pad_w: 1,
            stride_h: stride,
            stride_w: 1,
            dilation_h: 1,
            dilation_w: 1,
            groups: 1,
        };
        let sm90_conv = KernelSpec { family: conv(GroupMode::None), ..sm90() };
        let sm80_conv = KernelSpec { family: conv(GroupMode::None), ..sm80() };
        assert_eq!(validate_conv_problem(&sm90_conv, &problem(8)), Ok(()));
        let err = validate_conv_problem(&sm90_conv, &problem(9)).unwrap_err();
        assert_eq!(err, ProblemRejection::Sm90ConvStride { stride_h: 9, stride_w: 1 });
        assert!(err.to_string().contains("stride 9x1") && err.to_string().contains("up to 8"), "{err}");
        let wide = BoltConv2dProblem { stride_h: 1, stride_w: 16, ..problem(1) };
        assert!(validate_conv_problem(&sm90_conv, &wide).is_err());
        assert_eq!(validate_conv_problem(&sm80_conv, &problem(9)), Ok(()));
    }

    /// A 1-D conv of 256 taps at stride 128 (silero VAD's STFT as a conv, run as a 1 x 256
    /// filter over an H of one): CUTLASS's optimized iterators refuse it at run time (found on
    /// an H100), so does TMA im2col; an sm80 kernel with the analytic iterators takes it.
    #[test]
    fn filters_past_32_taps_need_the_analytic_iterators() {
        let stft = BoltConv2dProblem {
            n: 1,
            h: 1,
            w: 640,
            c: 8,
            k: 258,
            r: 1,
            s: 256,
            p: 1,
            q: 4,
            pad_h: 0,
            pad_w: 0,
            stride_h: 1,
            stride_w: 128,
            dilation_h: 1,
            dilation_w: 1,
            groups: 1,
        };
        let optimized = KernelSpec { family: conv(GroupMode::None), ..sm80() };
        let err = validate_conv_problem(&optimized, &stft).unwrap_err();
        assert_eq!(err, ProblemRejection::OptimizedIteratorTaps { r: 1, s: 256 });
        let analytic =
            Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups: GroupMode::None, analytic: true });
        assert_eq!(validate_conv_problem(&KernelSpec { family: analytic, ..sm80() }, &stft), Ok(()));
        // Filters of 32 taps stay with the optimized iterators.
        let taps32 = BoltConv2dProblem { s: 32, stride_w: 1, q: 609, ..stft };
        assert_eq!(validate_conv_problem(&optimized, &taps32), Ok(()));
        // TMA im2col: 256 taps reach past 255; a 3x3 conv with padding 200 is past the corners.
        let sm90_conv = KernelSpec { family: conv(GroupMode::None), ..sm90() };
        let wide = BoltConv2dProblem { stride_w: 1, q: 385, ..stft };
        assert!(matches!(
            validate_conv_problem(&sm90_conv, &wide),
            Err(ProblemRejection::Sm90Im2col { axis: "w", .. })
        ));
        let padded =
            BoltConv2dProblem { r: 3, s: 3, h: 8, w: 8, p: 406, q: 406, pad_h: 200, pad_w: 200, stride_w: 1, ..stft };
        assert!(validate_conv_problem(&sm90_conv, &padded).is_err());
        let plain = BoltConv2dProblem { r: 3, s: 3, h: 8, w: 8, p: 8, q: 8, pad_h: 1, pad_w: 1, stride_w: 1, ..stft };
        assert_eq!(validate_conv_problem(&sm90_conv, &plain), Ok(()));
    }

    fn bias_res_after() -> Epilogue {
        Epilogue::new(NormalForm {
            beta_source: false,
            bias: true,
            activation: Activation::Relu,
            residual: Some(ResidualAt::AfterActivation),
        })
        .unwrap()
    }

    fn depthwise_spec() -> KernelSpec {
        KernelSpec {
            family: conv(GroupMode::Depthwise),
            alignment: Alignment { a: 1, b: 1, c: 1 },
            tile: TileConfig::Sm80(Sm80Tile {
                threadblock: [64, 64, 8],
                warp: [32, 32, 8],
                instruction: [1, 1, 1],
                stages: 2,
                swizzle: Swizzle::Identity(1),
                split_k: 1,
            }),
            ..sm80()
        }
    }

    #[test]
    fn base_specs_are_valid() {
        validate(&sm80()).unwrap();
        validate(&sm90()).unwrap();
        validate(&depthwise_spec()).unwrap();
        validate(&KernelSpec { family: conv(GroupMode::SingleGroup), ..sm80() }).unwrap();
        validate(&KernelSpec { epilogue: bias_res_after(), ..sm80() }).unwrap();
        validate(&KernelSpec { epilogue: bias_res_after(), ..sm90() }).unwrap();
        // Serial split-K with a plain (or bias-only) epilogue is fine.
        validate(&with80(|t| {
            t.split_k = 4;
            t.swizzle = Swizzle::SplitKSerial;
        }))
        .unwrap();
        // The register double-buffered 2-stage pipeline is a legal sm80 kernel.
        validate(&with80(|t| t.stages = 2)).unwrap();
        // tf32 with 4-element alignment; f32 output.
        let tf32 = Types { input: Element::F32, accumulator: Element::F32, output: Element::F32 };
        validate(&KernelSpec {
            types: tf32,
            alignment: Alignment { a: 4, b: 4, c: 4 },
            tile: TileConfig::Sm80(Sm80Tile {
                threadblock: [128, 128, 16],
                warp: [64, 64, 16],
                instruction: [16, 8, 8],
                ..sm80_tile()
            }),
            ..sm80()
        })
        .unwrap();
        // The no-smem epilogue takes unaligned output on sm90.
        validate(&KernelSpec {
            alignment: Alignment { a: 8, b: 8, c: 1 },
            tile: TileConfig::Sm90(Sm90Tile { epilogue: EpilogueSchedule::NoSmem, ..sm90_tile() }),
            ..sm90()
        })
        .unwrap();
    }

    /// One case per rule: the spec, a predicate on the variant, and substrings the message
    /// must contain (the numbers).
    #[allow(clippy::type_complexity)]
    fn cases() -> Vec<(&'static str, KernelSpec, fn(&Rejection) -> bool, Vec<&'static str>)> {
        use Rejection as R;
        let odd_epilogue = Epilogue { expr: Expr::act(Activation::Relu, Expr::times(Expr::Acc, Expr::ColumnBias)) };
        vec![
            (
                "sm80 arch with sm90 tile",
                KernelSpec { tile: TileConfig::Sm90(sm90_tile()), ..sm80() },
                |r| matches!(r, R::ArchTileMismatch { arch: Arch::Sm80, .. }),
                vec!["Sm80", "Sm90Tile"],
            ),
            (
                "sm90 arch with sm80 tile",
                KernelSpec { tile: TileConfig::Sm80(sm80_tile()), ..sm90() },
                |r| matches!(r, R::ArchTileMismatch { arch: Arch::Sm90, .. }),
                vec!["Sm90", "Sm80Tile"],
            ),
            (
                "bf16 accumulator",
                KernelSpec {
                    types: Types { input: Element::BF16, accumulator: Element::BF16, output: Element::BF16 },
                    ..sm80()
                },
                |r| matches!(r, R::AccumulatorBf16),
                vec!["BF16"],
            ),
            (
                "f32 input with f16 accumulator",
                KernelSpec {
                    types: Types { input: Element::F32, accumulator: Element::F16, output: Element::F16 },
                    ..sm80()
                },
                |r| matches!(r, R::AccumulatorF16NeedsF16Input { input: Element::F32 }),
                vec!["F32 inputs"],
            ),
            (
                "bf16 input with f16 accumulator",
                KernelSpec {
                    types: Types { input: Element::BF16, accumulator: Element::F16, output: Element::BF16 },
                    ..sm90()
                },
                |r| matches!(r, R::AccumulatorF16NeedsF16Input { input: Element::BF16 }),
                vec!["BF16 inputs"],
            ),
            (
                "f16 accumulator, f32 output",
                KernelSpec {
                    types: Types { input: Element::F16, accumulator: Element::F16, output: Element::F32 },
                    ..sm80()
                },
                |r| matches!(r, R::OutputWiderThanAccumulator { .. }),
                vec!["4 bytes", "2 bytes"],
            ),
            (
                "epilogue outside the normal form on sm80",
                KernelSpec { epilogue: odd_epilogue, ..sm80() },
                |r| matches!(r, R::EpilogueNotNormalForm { .. }),
                vec!["custom"],
            ),
            (
                "column-major C with bias on sm80",
                KernelSpec {
                    layouts: [Layout::RowMajor, Layout::RowMajor, Layout::ColumnMajor],
                    epilogue: bias_res_after(),
                    ..sm80()
                },
                |r| matches!(r, R::Sm80ColumnMajorBias { c: Layout::ColumnMajor, .. }),
                vec!["ColumnMajor", "bias_relu_res"],
            ),
            (
                "alignment 3",
                KernelSpec { alignment: Alignment { a: 3, b: 8, c: 8 }, ..sm80() },
                |r| matches!(r, R::AlignmentValue { field: "alignment.a", value: 3 }),
                vec!["alignment.a = 3"],
            ),
            (
                "f32 output with alignment 8",
                KernelSpec { types: Types { output: Element::F32, ..F16_F32 }, ..sm80() },
                |r| matches!(r, R::AlignmentTooWide { field: "alignment.c", value: 8, bytes: 32, .. }),
                vec!["alignment.c = 8", "32 bytes > 16"],
            ),
            (
                "f16 alignment 1 on sm80",
                KernelSpec { alignment: Alignment { a: 8, b: 1, c: 8 }, ..sm80() },
                |r| matches!(r, R::CpAsyncTooNarrow { field: "alignment.b", value: 1, bytes: 2, .. }),
                vec!["alignment.b = 1", "2-byte"],
            ),
            (
                "f16 alignment 4 on sm90 (TMA)",
                KernelSpec { alignment: Alignment { a: 4, b: 8, c: 8 }, ..sm90() },
                |r| matches!(r, R::TmaAlignment { field: "alignment.a", value: 4, bytes: 8, .. }),
                vec!["alignment.a = 4", "8 bytes"],
            ),
            (
                "TMA epilogue with unaligned output",
                KernelSpec { alignment: Alignment { a: 8, b: 8, c: 2 }, ..sm90() },
                |r| matches!(r, R::TmaEpilogueAlignment { value: 2, bytes: 4, .. }),
                vec!["alignment.c = 2", "4 bytes"],
            ),
            (
                "f16 with the tf32 instruction",
                with80(|t| t.instruction = [16, 8, 8]),
                |r| matches!(r, R::Instruction { expected: [16, 8, 16], .. }),
                vec!["16x8x8", "16x8x16"],
            ),
            (
                "threadblock not a multiple of the warp",
                with80(|t| t.warp = [48, 64, 32]),
                |r| matches!(r, R::ThreadblockNotWarpMultiple { .. }),
                vec!["128x128x32", "48x64x32"],
            ),
            (
                "warp not a multiple of the instruction",
                with80(|t| {
                    t.threadblock = [96, 128, 32];
                    t.warp = [24, 64, 32];
                }),
                |r| matches!(r, R::WarpNotInstructionMultiple { .. }),
                vec!["24x64x32", "16x8x16"],
            ),
            (
                "sliced K",
                with80(|t| t.warp = [64, 64, 16]),
                |r| matches!(r, R::SlicedK { threadblock_k: 32, warp_k: 16 }),
                vec!["16", "32"],
            ),
            (
                "16 warps",
                with80(|t| t.warp = [32, 32, 32]),
                |r| matches!(r, R::WarpCount { warps: 16, .. }),
                vec!["16 warps"],
            ),
            (
                "one mma step per warp tile",
                with80(|t| {
                    t.threadblock = [128, 128, 16];
                    t.warp = [64, 64, 16];
                }),
                |r| matches!(r, R::WarpKSteps { steps: 1, .. }),
                vec!["16", "= 1 mma steps"],
            ),
            (
                "one stage",
                with80(|t| t.stages = 1),
                |r| matches!(r, R::Stages { stages: 1, .. }),
                vec!["tile.stages 1"],
            ),
            (
                "shared memory",
                with80(|t| {
                    t.threadblock = [128, 128, 64];
                    t.warp = [64, 64, 64];
                    t.stages = 6;
                }),
                |r| matches!(r, R::SharedMemory { bytes: 196608, available: 166912, .. }),
                vec!["smem 196608 bytes > 166912 available", "6 stages of 32768 bytes"],
            ),
            (
                "accumulator registers (sm80)",
                with80(|t| {
                    t.threadblock = [256, 128, 32];
                    t.warp = [128, 64, 32];
                }),
                |r| matches!(r, R::AccumulatorRegisters { registers: 256, max: 128, .. }),
                vec!["256 registers", "> 128", "128x64"],
            ),
            (
                "thread map: tile too small for the threads",
                with80(|t| {
                    t.threadblock = [32, 64, 32];
                    t.warp = [16, 16, 32];
                }),
                |r| matches!(r, R::ThreadMap { operand: "A", accesses: 128, threads: 256, .. }),
                vec!["128 128-bit accesses", "256 threads"],
            ),
            (
                "conv activation loads",
                KernelSpec {
                    family: conv(GroupMode::None),
                    ..with80(|t| {
                        t.threadblock = [256, 64, 64];
                        t.warp = [64, 64, 64];
                    })
                },
                |r| matches!(r, R::ConvActivationLoads { loads: 16, max: 8, .. }),
                vec!["16 loads", "> 8", "256x64 tile"],
            ),
            (
                "SIMT accumulators (depthwise)",
                {
                    let mut s = depthwise_spec();
                    if let TileConfig::Sm80(t) = &mut s.tile {
                        t.threadblock = [128, 128, 8];
                        t.warp = [64, 64, 8];
                    }
                    s
                },
                |r| matches!(r, R::AccumulatorRegisters { registers: 128, max: 64, .. }),
                vec!["128 registers", "> 64", "SIMT warp tile 64x64"],
            ),
            (
                "swizzle 3",
                with80(|t| t.swizzle = Swizzle::Identity(3)),
                |r| matches!(r, R::SwizzleWidth { n: 3 }),
                vec!["Identity(3)"],
            ),
            ("split_k 0", with80(|t| t.split_k = 0), |r| matches!(r, R::SplitKZero), vec!["split_k 0"]),
            (
                "split_k without the split-K swizzle",
                with80(|t| t.split_k = 4),
                |r| matches!(r, R::SplitKSwizzle { split_k: 4, .. }),
                vec!["split_k 4", "Identity(8)"],
            ),
            (
                "split-K swizzle without split_k",
                with80(|t| t.swizzle = Swizzle::SplitKSerial),
                |r| matches!(r, R::SplitKSwizzle { split_k: 1, .. }),
                vec!["split_k 1", "SplitKSerial"],
            ),
            (
                "split-K on a batched GEMM",
                KernelSpec {
                    family: Family::BatchedGemm,
                    ..with80(|t| {
                        t.split_k = 2;
                        t.swizzle = Swizzle::SplitKSerial;
                    })
                },
                |r| matches!(r, R::SplitKBatched { split_k: 2 }),
                vec!["split_k 2"],
            ),
            (
                "split-K with a residual block epilogue",
                KernelSpec {
                    epilogue: bias_res_after(),
                    ..with80(|t| {
                        t.split_k = 2;
                        t.swizzle = Swizzle::SplitKSerial;
                    })
                },
                |r| matches!(r, R::SplitKResidualBlock { split_k: 2, .. }),
                vec!["split_k 2", "bias_relu_res"],
            ),
            (
                "split-K on a grouped conv",
                KernelSpec {
                    family: conv(GroupMode::SingleGroup),
                    ..with80(|t| {
                        t.split_k = 2;
                        t.swizzle = Swizzle::SplitKSerial;
                    })
                },
                |r| matches!(r, R::SplitKGroupedConv { split_k: 2, groups: GroupMode::SingleGroup }),
                vec!["split_k 2", "SingleGroup"],
            ),
            (
                "depthwise with a tensor-op tile",
                KernelSpec { family: conv(GroupMode::Depthwise), ..sm80() },
                |r| matches!(r, R::DepthwiseNeedsSimt { instruction: [16, 8, 16] }),
                vec!["16x8x16"],
            ),
            (
                "depthwise with 3 stages",
                {
                    let mut s = depthwise_spec();
                    if let TileConfig::Sm80(t) = &mut s.tile {
                        t.stages = 3;
                    }
                    s
                },
                |r| matches!(r, R::Stages { stages: 3, .. }),
                vec!["tile.stages 3", "2-stage"],
            ),
            (
                "grouped conv with a residual block epilogue",
                KernelSpec { family: conv(GroupMode::MultipleGroup), epilogue: bias_res_after(), ..sm80() },
                |r| matches!(r, R::GroupedConvBroadcastEpilogue { groups: GroupMode::MultipleGroup, .. }),
                vec!["MultipleGroup", "bias_relu_res"],
            ),
            (
                "grouped conv on sm90",
                KernelSpec { family: conv(GroupMode::SingleGroup), ..sm90() },
                |r| matches!(r, R::Sm90GroupedConv { groups: GroupMode::SingleGroup }),
                vec!["SingleGroup"],
            ),
            (
                "stream-K conv on sm90",
                KernelSpec { family: conv(GroupMode::None), ..with90(|t| t.kernel = KernelSchedule::StreamK) },
                |r| matches!(r, R::Sm90ConvSchedule { kernel: KernelSchedule::StreamK }),
                vec!["StreamK"],
            ),
            (
                "no-smem conv on sm90",
                KernelSpec { family: conv(GroupMode::None), ..with90(|t| t.epilogue = EpilogueSchedule::NoSmem) },
                |r| matches!(r, R::Sm90ConvEpilogue),
                vec!["NoSmem"],
            ),
            (
                "tf32 with row-major B on sm90",
                KernelSpec {
                    types: Types { input: Element::F32, accumulator: Element::F32, output: Element::F32 },
                    alignment: Alignment { a: 4, b: 4, c: 4 },
                    layouts: [Layout::RowMajor, Layout::RowMajor, Layout::RowMajor],
                    ..with90(|t| t.tile = [128, 256, 32])
                },
                |r| matches!(r, R::Tf32Layout { b: Layout::RowMajor, .. }),
                vec!["RowMajor"],
            ),
            (
                "cooperative tile M 64",
                with90(|t| t.tile = [64, 128, 64]),
                |r| matches!(r, R::Sm90TileM { m: 64, .. }),
                vec!["tile M 64", "128 or 256"],
            ),
            (
                "ping-pong tile M 256",
                with90(|t| {
                    t.tile = [256, 64, 64];
                    t.kernel = KernelSchedule::TmaWarpSpecializedPingpong;
                }),
                |r| matches!(r, R::Sm90TileM { m: 256, kernel: KernelSchedule::TmaWarpSpecializedPingpong, .. }),
                vec!["tile M 256", "64 or 128"],
            ),
            (
                "conv tile M 256",
                KernelSpec { family: conv(GroupMode::None), ..with90(|t| t.tile = [256, 64, 64]) },
                |r| matches!(r, R::Sm90TileM { m: 256, conv: true, .. }),
                vec!["tile M 256", "(conv)"],
            ),
            (
                "tile N 24",
                with90(|t| t.tile = [128, 24, 64]),
                |r| matches!(r, R::Sm90TileN { n: 24 }),
                vec!["tile N 24"],
            ),
            (
                "tile N 512",
                with90(|t| t.tile = [128, 512, 64]),
                |r| matches!(r, R::Sm90TileN { n: 512 }),
                vec!["tile N 512"],
            ),
            (
                "tile K 8",
                with90(|t| t.tile = [128, 128, 8]),
                |r| matches!(r, R::Sm90TileK { k: 8, bytes: 16, .. }),
                vec!["tile K 8", "16 bytes"],
            ),
            (
                "cluster 8x2",
                with90(|t| t.cluster = [8, 2, 1]),
                |r| matches!(r, R::Cluster { cluster: [8, 2, 1] }),
                vec!["8x2x1"],
            ),
            (
                "cluster along K",
                with90(|t| t.cluster = [1, 1, 2]),
                |r| matches!(r, R::Cluster { cluster: [1, 1, 2] }),
                vec!["1x1x2"],
            ),
            (
                "sm90 shared memory",
                with90(|t| t.tile = [256, 256, 128]),
                |r| matches!(r, R::Sm90Stages { stages: 1, stage_bytes: 131088, capacity: 232448, .. }),
                vec!["1 mainloop stage(s) of 131088 bytes", "232448 bytes", "16384 epilogue bytes"],
            ),
            (
                "accumulator registers (sm90 ping-pong)",
                with90(|t| {
                    t.tile = [128, 256, 64];
                    t.kernel = KernelSchedule::TmaWarpSpecializedPingpong;
                }),
                |r| matches!(r, R::AccumulatorRegisters { registers: 256, max: 128, .. }),
                vec!["256 registers", "128x256", "128 consumer threads"],
            ),
            (
                "accumulator registers (sm90 cooperative 256x256)",
                with90(|t| t.tile = [256, 256, 64]),
                |r| matches!(r, R::AccumulatorRegisters { registers: 256, .. }),
                vec!["256 registers", "256 consumer threads"],
            ),
        ]
    }

    #[test]
    fn every_rule_rejects_with_its_reason() {
        for (name, spec, is_variant, needles) in cases() {
            let err = validate(&spec).expect_err(name);
            assert!(is_variant(&err), "{name}: wrong rejection {err:?}");
            let msg = err.to_string();
            for needle in needles {
                assert!(msg.contains(needle), "{name}: message `{msg}` lacks `{needle}`");
            }
        }
    }

    #[test]
    fn sm80_smem_counts_stages_and_the_epilogue_union() {
        let t = sm80_tile();
        assert_eq!(t.mainloop_smem_bytes(Element::F16), (128 * 32 + 32 * 128) * 2 * 3);
        // 2 warps along M, 8 rows each, 128 + 8 columns of f32.
        assert_eq!(t.epilogue_smem_bytes(Element::F32), 2 * 8 * 136 * 4);
        assert_eq!(t.smem_bytes(F16_F32), 49152);
        assert_eq!(t.accumulator_registers(Element::F32), 128);
        assert_eq!(t.accumulator_registers(Element::F16), 64);
    }

    #[test]
    fn sm90_smem_plan_follows_the_builder() {
        // 128x256x64 f16 cooperative, TMA epilogue reading C: 128x32 subtiles, 8 of them,
        // D reuses C's 4 buffers.
        let t = sm90_tile();
        let p = t.smem(F16_F32, false, true, false);
        assert_eq!(p.stage_bytes, (128 * 64 + 256 * 64) * 2 + 16);
        assert_eq!(p.epilogue_bytes, 4 * 128 * 32 * 2 + 128);
        assert_eq!(p.capacity, 232448);
        assert_eq!(p.stages, (232448 - 32896) / 49168);
        assert_eq!(p.stages, 4);
        // No source: two D buffers only.
        assert_eq!(t.smem(F16_F32, false, false, false).epilogue_bytes, 2 * 128 * 32 * 2);
        // No-smem epilogue: the whole capacity goes to the mainloop.
        let ns = Sm90Tile { epilogue: EpilogueSchedule::NoSmem, ..t };
        assert_eq!(ns.smem(F16_F32, false, true, true).stages, 232448 / (49152 + 16));
        assert_eq!(t.accumulator_registers(Element::F32, false), 128);
        assert_eq!(t.accumulator_registers(Element::F32, true), 256);
    }
}
