//! Lowering of sm80 kernel specs to the template context of `templates/sm80_*.cu.tera`
//! (CUTLASS 2.x: `GemmUniversal`, `ImplicitGemmConvolution`, and their broadcast-epilogue
//! variants).
//!
//! Everything CUTLASS would reject with a `static_assert` (or silently compute wrongly) is
//! rejected here with a [`RenderError`] naming the spec field, before nvcc runs.

use serde::Serialize;

use crate::epilogue::{Activation, NormalForm, ResidualAt};
use crate::render::RenderError;
use crate::spec::{Arch, ConvFeatures, Element, Family, GroupMode, KernelSpec, Layout, Sm80Tile, Swizzle, TileConfig};

pub const GEMM_TEMPLATE: &str = "sm80_gemm.cu.tera";
pub const GEMM_SOFTMAX_TEMPLATE: &str = "sm80_gemm_softmax.cu.tera";
pub const CONV2D_FPROP_TEMPLATE: &str = "sm80_conv2d_fprop.cu.tera";
/// The epilogue part alone (included by both kernel templates; rendered alone by host tests).
pub const EPILOGUE_TEMPLATE: &str = "sm80_epilogue.cu.tera";
/// A custom activation functor alone (included by the epilogue template; rendered alone for
/// the intermediate layers of back-to-back kernels).
pub const ACTIVATION_TEMPLATE: &str = "sm80_activation.cu.tera";

/// CUTLASS headers the kernel templates need; hoisted into the translation unit's prologue.
pub const INCLUDES: &[&str] = &[
    "cutlass/cutlass.h",
    "cutlass/numeric_types.h",
    "cutlass/functional.h",
    "cutlass/epilogue/thread/activation.h",
    "cutlass/epilogue/thread/linear_combination.h",
    "cutlass/epilogue/thread/linear_combination_generic.h",
    "cutlass/epilogue/thread/linear_combination_residual_block.h",
];
pub const GEMM_INCLUDES: &[&str] =
    &["cutlass/gemm/device/gemm_universal.h", "cutlass/gemm/device/gemm_universal_with_broadcast.h"];
/// GemmSoftmax's headers: CUTLASS's visitor and reduction kernels, then the example's device
/// operator (found on the include path of these units only, [`GEMM_SOFTMAX_EXAMPLE_DIR`]).
pub const GEMM_SOFTMAX_INCLUDES: &[&str] = &[
    "cutlass/gemm/kernel/default_gemm.h",
    "cutlass/epilogue/threadblock/epilogue_visitor_with_softmax.h",
    "cutlass/epilogue/threadblock/epilogue_with_visitor.h",
    "cutlass/reduction/kernel/reduce_softmax_final.h",
    "cutlass/device_kernel.h",
    "gemm_with_softmax.h",
];
/// The example holding `cutlass::GemmSoftmax`, relative to the CUTLASS tree.
pub const GEMM_SOFTMAX_EXAMPLE_DIR: &str = "examples/35_gemm_softmax";
pub const CONV_INCLUDES: &[&str] = &[
    "cutlass/conv/conv2d_problem_size.h",
    "cutlass/conv/kernel/default_conv2d_fprop.h",
    "cutlass/conv/kernel/default_conv2d_group_fprop.h",
    "cutlass/conv/kernel/default_depthwise_fprop.h",
    "cutlass/conv/kernel/default_conv2d_fprop_with_broadcast.h",
    "cutlass/conv/device/implicit_gemm_convolution.h",
];

/// The headers one spec's kernel needs.
pub fn includes(spec: &KernelSpec) -> Vec<&'static str> {
    let family = match spec.family {
        Family::Gemm | Family::BatchedGemm => GEMM_INCLUDES,
        Family::GemmSoftmax => GEMM_SOFTMAX_INCLUDES,
        Family::Conv2dFprop(_) => CONV_INCLUDES,
    };
    INCLUDES.iter().chain(family).copied().collect()
}

/// Which CUTLASS 2.x epilogue functor realises a normal form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EpilogueKind {
    /// `LinearCombination` / `LinearCombinationGeneric<Act>`: act(alpha*acc + beta*X) with at most
    /// one extra operand X read through the C iterator.
    LinearCombination,
    /// `LinearCombinationResidualBlock` on the broadcast epilogue:
    /// unary(activation(alpha*acc + bias) + beta*C), bias read as a broadcast vector.
    ResidualBlock,
}

/// What the single C operand of a `LinearCombination` epilogue points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum COperand {
    /// Not read (beta is 0).
    None,
    /// The source tensor C (beta*C, or a residual with beta 1).
    Source,
    /// The bias vector, read as C with a zero row stride (TVM's trick): every row sees the bias.
    Bias,
}

/// Where the epilogue's beta comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Beta {
    /// 0: the epilogue reads no C (kept as ScaleType::Default so serial split-K still works).
    Zero,
    /// The caller's `BoltArgs::beta` (the tree has beta*C).
    Arg,
    /// 1: a residual, or the bias as C.
    One,
}

/// How one normal form lowers onto CUTLASS 2.x epilogue functors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EpilogueLowering {
    pub kind: EpilogueKind,
    /// `LinearCombination`: the activation functor applied to alpha*acc + beta*X.
    /// `ResidualBlock`: the ActivationOp applied before the residual is added.
    pub activation: String,
    /// `ResidualBlock` only: the UnaryOp applied after the residual is added.
    pub unary: String,
    /// `LinearCombination` only: `Default` or `NoBetaScaling`.
    pub scale: &'static str,
    pub c_operand: COperand,
    pub beta: Beta,
    /// The kernel reads the source tensor C (`BoltArgs::c` must be set).
    pub reads_c: bool,
    /// The kernel reads the bias vector (`BoltArgs::bias` must be set).
    pub reads_bias: bool,
    /// The activation is expensive (CUTLASS's kIsHeavy: the epilogue unrolls less).
    pub heavy: bool,
    /// A functor CUTLASS lacks, defined in the rendered source.
    pub custom: Option<CustomActivation>,
    /// Short name, e.g. `bias_gelu_erf`.
    pub name: String,
    /// The formula, for the comment above the functor, e.g. `D = gelu_erf(alpha * acc + bias)`.
    pub formula: String,
}

/// An activation written out in the rendered source (CUTLASS 2.x has no such functor, or only
/// one taking run-time arguments, which the residual-block epilogue cannot pass). Parameters
/// are baked in as float literals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CustomActivation {
    /// `softplus`, `hardsigmoid`, `leaky_relu` or `clip`.
    pub kind: &'static str,
    /// C++ struct name.
    pub name: &'static str,
    /// Parameter literals: HardSigmoid alpha, beta; LeakyRelu alpha; Clip min, max.
    pub params: Vec<String>,
}

/// Template context of one sm80 kernel.
#[derive(Clone, Debug, Serialize)]
pub struct Sm80Context {
    pub symbol: String,
    /// One line for the banner comment.
    pub summary: String,
    /// `gemm`, `batched_gemm` or `conv2d_fprop`.
    pub family: &'static str,
    pub element_a: &'static str,
    pub element_b: &'static str,
    pub element_c: &'static str,
    pub element_accumulator: &'static str,
    pub layout_a: &'static str,
    pub layout_b: &'static str,
    pub layout_c: &'static str,
    /// GEMM families: the extent each of lda, ldb, ldc/ldd must cover (`p.k`, `p.m`, `p.n`).
    pub ld_extent: [&'static str; 3],
    pub alignment_a: u32,
    pub alignment_b: u32,
    pub alignment_c: u32,
    pub threadblock: [u32; 3],
    pub warp: [u32; 3],
    pub instruction: [u32; 3],
    pub stages: u32,
    pub swizzle: u32,
    pub split_k: u32,
    pub op_class: &'static str,
    pub math_operator: &'static str,
    pub epilogue: EpilogueLowering,
    pub conv: Option<ConvContext>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ConvContext {
    /// `fprop` (DefaultConv2dFprop), `group` (DefaultConv2dGroupFprop), `depthwise`
    /// (DefaultDepthwiseFprop, SIMT) or `broadcast` (DefaultConv2dFpropWithBroadcast).
    pub kernel: &'static str,
    pub iterator_algorithm: &'static str,
    pub stride_support: &'static str,
    pub group_mode: &'static str,
    pub unit_stride: bool,
}

fn unsupported(field: &'static str, reason: impl Into<String>) -> RenderError {
    RenderError::Unsupported { field, reason: reason.into() }
}

/// Validates `spec` for sm80 and builds its template context; returns the template name too.
pub fn context(spec: &KernelSpec, symbol: &str) -> Result<(&'static str, Sm80Context), RenderError> {
    if spec.arch != Arch::Sm80 {
        return Err(unsupported("arch", format!("{:?} spec given to the sm80 templates", spec.arch)));
    }
    let TileConfig::Sm80(tile) = spec.tile else {
        return Err(unsupported("tile", "sm80 kernels need an Sm80 tile config"));
    };
    let form = spec
        .epilogue
        .normal_form()
        .ok_or_else(|| RenderError::EpilogueNotNormal(format!("{:?}", spec.epilogue.expr)))?;
    let depthwise = matches!(spec.family, Family::Conv2dFprop(ConvFeatures { groups: GroupMode::Depthwise, .. }));

    check_types(spec)?;
    check_tile(spec, &tile, depthwise)?;
    let [alignment_a, alignment_b, alignment_c] = alignments(spec, depthwise)?;
    let mut epilogue = lower_epilogue(&form)?;

    let row_major = spec.layouts.map(|l| l == Layout::RowMajor);
    let needs_broadcast = epilogue.kind == EpilogueKind::ResidualBlock;
    let (family, conv, template) = match spec.family {
        Family::Gemm | Family::BatchedGemm => {
            // The bias is a per-column vector: broadcast along rows, which only the row-major
            // output iterators (and GemmUniversalWithBroadcast) do.
            if !row_major[2] && (form.bias || needs_broadcast) {
                return Err(unsupported(
                    "layouts",
                    "column-major C/D only with epilogues without bias or residual-after (the column bias is broadcast along row-major rows)",
                ));
            }
            if spec.family == Family::BatchedGemm && tile.split_k > 1 {
                return Err(unsupported(
                    "tile.split_k",
                    "batched GEMMs have no split-K (the batch index takes the grid's z)",
                ));
            }
            let family = if spec.family == Family::Gemm { "gemm" } else { "batched_gemm" };
            (family, None, GEMM_TEMPLATE)
        }
        Family::GemmSoftmax => {
            if !row_major[2] {
                return Err(unsupported(
                    "layouts",
                    "GemmSoftmax writes row-major C/D only (the softmax runs along rows)",
                ));
            }
            if needs_broadcast {
                return Err(unsupported(
                    "epilogue",
                    "GemmSoftmax's epilogue visitor takes one functor reading at most one C operand (no residual block)",
                ));
            }
            if tile.split_k > 1 {
                return Err(unsupported(
                    "tile.split_k",
                    "GemmSoftmax has no split-K (its visitor reduces whole tiles)",
                ));
            }
            // The visitor reads C unless the functor scales by alpha only; with no C operand
            // there is nothing to read.
            if epilogue.c_operand == COperand::None {
                epilogue.scale = "OnlyAlphaScaling";
            }
            ("gemm_softmax", None, GEMM_SOFTMAX_TEMPLATE)
        }
        Family::Conv2dFprop(features) => {
            ("conv2d_fprop", Some(conv_context(features, &tile, needs_broadcast)?), CONV2D_FPROP_TEMPLATE)
        }
    };
    // The residual block's ActivationOp runs on every K partition; only the last may apply it.
    if tile.split_k > 1 && form.residual == Some(ResidualAt::AfterActivation) {
        return Err(unsupported(
            "tile.split_k",
            "serial split-K cannot apply an activation before a residual (CUTLASS's residual block applies it per K partition)",
        ));
    }

    // With f32 operands the m16n8k8 tensor-op mma runs in tf32 (one pass); CUTLASS's
    // OpMultiplyAddFastF32 would be the 3xTF32 emulation of f32, about 3x the math.
    let math_operator = "cutlass::arch::OpMultiplyAdd";
    let op_class = if depthwise { "cutlass::arch::OpClassSimt" } else { "cutlass::arch::OpClassTensorOp" };
    let ctx = Sm80Context {
        symbol: symbol.to_string(),
        summary: summary(spec, &tile),
        family,
        element_a: spec.types.input.cpp(),
        element_b: spec.types.input.cpp(),
        element_c: spec.types.output.cpp(),
        element_accumulator: spec.types.accumulator.cpp(),
        layout_a: cpp_layout(spec.layouts[0]),
        layout_b: cpp_layout(spec.layouts[1]),
        layout_c: cpp_layout(spec.layouts[2]),
        ld_extent: [
            if row_major[0] { "p.k" } else { "p.m" },
            if row_major[1] { "p.n" } else { "p.k" },
            if row_major[2] { "p.n" } else { "p.m" },
        ],
        alignment_a,
        alignment_b,
        alignment_c,
        threadblock: tile.threadblock,
        warp: tile.warp,
        instruction: tile.instruction,
        stages: tile.stages,
        swizzle: match tile.swizzle {
            Swizzle::Identity(n) => n,
            Swizzle::SplitKSerial => 1,
        },
        split_k: tile.split_k,
        op_class,
        math_operator,
        epilogue,
        conv,
    };
    Ok((template, ctx))
}

fn check_types(spec: &KernelSpec) -> Result<(), RenderError> {
    let t = spec.types;
    match (t.input, t.accumulator) {
        (Element::F16, Element::F16 | Element::F32) | (Element::BF16, Element::F32) | (Element::F32, Element::F32) => {
            Ok(())
        }
        (input, acc) => Err(unsupported(
            "types.accumulator",
            format!("{acc:?} accumulation of {input:?} inputs has no sm80 tensor-core instruction (f16: f16/f32; bf16, f32: f32)"),
        )),
    }
}

fn check_tile(spec: &KernelSpec, tile: &Sm80Tile, depthwise: bool) -> Result<(), RenderError> {
    let expected = if depthwise {
        [1, 1, 1]
    } else if spec.types.input == Element::F32 {
        [16, 8, 8]
    } else {
        [16, 8, 16]
    };
    if tile.instruction != expected {
        let why = if depthwise {
            "depthwise conv uses CUTLASS's SIMT depthwise kernel"
        } else if spec.types.input == Element::F32 {
            "f32 inputs run as tf32 mma.sync"
        } else {
            "16-bit inputs run as mma.sync m16n8k16"
        };
        return Err(unsupported(
            "tile.instruction",
            format!("{:?} given, {expected:?} needed: {why}", tile.instruction),
        ));
    }
    if depthwise && tile.stages != 2 {
        return Err(unsupported("tile.stages", "CUTLASS's depthwise fprop kernel is the 2-stage pipelined one"));
    }
    if tile.stages < 2 {
        return Err(unsupported("tile.stages", format!("{} stages: at least 2 needed", tile.stages)));
    }
    for i in 0..3 {
        let (tb, w, ins) = (tile.threadblock[i], tile.warp[i], tile.instruction[i]);
        if w == 0 || tb % w != 0 || w % ins != 0 {
            return Err(unsupported(
                "tile.warp",
                format!(
                    "threadblock {:?} must be a multiple of warp {:?}, itself of instruction {:?}",
                    tile.threadblock, tile.warp, tile.instruction
                ),
            ));
        }
    }
    if tile.split_k == 0 {
        return Err(unsupported("tile.split_k", "0 K slices (1 means no split-K)"));
    }
    if let Swizzle::Identity(n) = tile.swizzle {
        if ![1, 2, 4, 8].contains(&n) {
            return Err(unsupported(
                "tile.swizzle",
                format!("Identity({n}): CUTLASS's identity swizzle takes 1, 2, 4 or 8"),
            ));
        }
    }
    Ok(())
}

/// The alignments the kernel is instantiated with, checked against 128-bit accesses.
fn alignments(spec: &KernelSpec, depthwise: bool) -> Result<[u32; 3], RenderError> {
    let a = spec.alignment;
    let checks = [
        ("alignment.a", a.a, spec.types.input),
        ("alignment.b", a.b, spec.types.input),
        ("alignment.c", a.c, spec.types.output),
    ];
    for (field, n, element) in checks {
        if ![1, 2, 4, 8].contains(&n) || n as usize * element.size_bytes() > 16 {
            return Err(unsupported(
                field,
                format!("{n} elements of {element:?}: accesses are 1, 2, 4 or 8 elements of at most 128 bits"),
            ));
        }
    }
    // cp.async copies 4, 8 or 16 bytes: narrower tensor-core operand loads do not exist.
    if !depthwise {
        for (field, n) in [("alignment.a", a.a), ("alignment.b", a.b)] {
            if (n as usize * spec.types.input.size_bytes()) < 4 {
                return Err(unsupported(
                    field,
                    format!("{n} {:?} elements: the sm80 mainloop loads at least 4 bytes", spec.types.input),
                ));
            }
        }
    }
    // The SIMT depthwise kernel reads and writes one element at a time, whatever the spec allows.
    Ok(if depthwise { [1, 1, 1] } else { [a.a, a.b, a.c] })
}

fn conv_context(f: ConvFeatures, tile: &Sm80Tile, needs_broadcast: bool) -> Result<ConvContext, RenderError> {
    if f.groups != GroupMode::None && tile.split_k > 1 {
        return Err(unsupported("tile.split_k", "CUTLASS's grouped and depthwise convolutions have no split-K"));
    }
    if f.groups != GroupMode::None && needs_broadcast {
        return Err(unsupported(
            "family.groups",
            "grouped/depthwise conv takes epilogues with one extra operand (bias or C), not bias with C or a residual after the activation: CUTLASS 2.x has no broadcast epilogue for them",
        ));
    }
    let dense_iterator = if f.analytic { "kAnalytic" } else { "kOptimized" };
    let (kernel, iterator_algorithm, group_mode) = match f.groups {
        GroupMode::None if needs_broadcast => ("broadcast", dense_iterator, "kNone"),
        GroupMode::None => ("fprop", dense_iterator, "kNone"),
        // Only the analytic iterators know about several groups per threadblock.
        GroupMode::SingleGroup => ("group", dense_iterator, "kSingleGroup"),
        GroupMode::MultipleGroup => ("group", "kAnalytic", "kMultipleGroup"),
        GroupMode::Depthwise => ("depthwise", "kAnalytic", "kDepthwise"),
    };
    Ok(ConvContext {
        kernel,
        iterator_algorithm,
        stride_support: if f.unit_stride { "kUnity" } else { "kStrided" },
        group_mode,
        unit_stride: f.unit_stride,
    })
}

/// Lowers a normal form onto CUTLASS 2.x functors:
///
/// | form | functor | C operand |
/// |---|---|---|
/// | act(alpha*acc) | LinearCombination[Generic] | none (beta 0) |
/// | act(alpha*acc + beta*C) | LinearCombination[Generic] | C |
/// | act(alpha*acc + bias) | ..., NoBetaScaling | bias, zero stride |
/// | act(alpha*acc + C) | ..., NoBetaScaling | C |
/// | act(alpha*acc + beta*C + bias), act(alpha*acc + bias + C) | ResidualBlock<Identity, plus, act> | C, bias broadcast |
/// | act(alpha*acc [+ bias]) + C | ResidualBlock<act, plus, Identity> | C, bias broadcast |
pub fn lower_epilogue(form: &NormalForm) -> Result<EpilogueLowering, RenderError> {
    let form = form.canonical();
    if form.beta_source && form.residual.is_some() {
        return Err(unsupported("epilogue", "beta*C and a residual both read the source tensor C"));
    }
    let (act, heavy, custom) = activation_functor(form.activation)?;
    let identity = || "cutlass::epilogue::thread::Identity".to_string();
    let linear =
        |scale, c_operand, beta| (EpilogueKind::LinearCombination, act.clone(), identity(), scale, c_operand, beta);
    let block =
        |activation, unary, beta| (EpilogueKind::ResidualBlock, activation, unary, "Default", COperand::Source, beta);
    let (kind, activation, unary, scale, c_operand, beta) = match (form.beta_source, form.bias, form.residual) {
        (false, false, None) => linear("Default", COperand::None, Beta::Zero),
        (true, false, None) => linear("Default", COperand::Source, Beta::Arg),
        (false, true, None) => linear("NoBetaScaling", COperand::Bias, Beta::One),
        (false, false, Some(ResidualAt::BeforeActivation)) => linear("NoBetaScaling", COperand::Source, Beta::One),
        // Two extra operands: identity first, the activation as the residual block's UnaryOp.
        (true, true, None) => block(identity(), act.clone(), Beta::Arg),
        (false, true, Some(ResidualAt::BeforeActivation)) => block(identity(), act.clone(), Beta::One),
        // The activation before the residual: the residual block's ActivationOp.
        (false, _, Some(ResidualAt::AfterActivation)) => block(act.clone(), identity(), Beta::One),
        (true, _, Some(_)) => unreachable!("rejected above"),
    };
    let lowering = EpilogueLowering {
        kind,
        activation,
        unary,
        scale,
        c_operand,
        beta,
        reads_c: form.beta_source || form.residual.is_some(),
        reads_bias: form.bias,
        heavy,
        custom,
        name: crate::epilogue::Epilogue::new(form).map(|e| e.name()).unwrap_or_default(),
        formula: formula(&form),
    };
    Ok(lowering)
}

/// The C++ functor template for an activation: (name, heavy, custom definition).
fn activation_functor(a: Activation) -> Result<(String, bool, Option<CustomActivation>), RenderError> {
    let cutlass = |name: &str, heavy| Ok((format!("cutlass::epilogue::thread::{name}"), heavy, None));
    let custom = |kind, name: &'static str, params: Vec<String>, heavy| {
        Ok((name.to_string(), heavy, Some(CustomActivation { kind, name, params })))
    };
    match a {
        Activation::Identity => cutlass("Identity", false),
        Activation::Relu => cutlass("ReLu", false),
        Activation::GeluErf => cutlass("GELU", true),
        // CUTLASS's GELU_taylor is the tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
        Activation::GeluTanh => cutlass("GELU_taylor", true),
        Activation::HardSwish => cutlass("HardSwish", false),
        Activation::Sigmoid => cutlass("Sigmoid", true),
        Activation::Silu => cutlass("SiLu", true),
        Activation::Tanh => cutlass("Tanh", true),
        Activation::Softplus => custom("softplus", "Softplus", vec![], true),
        Activation::HardSigmoid { alpha, beta } => custom(
            "hardsigmoid",
            "HardSigmoid",
            vec![cpp_float("epilogue", alpha.0)?, cpp_float("epilogue", beta.0)?],
            false,
        ),
        Activation::LeakyRelu { alpha } => {
            custom("leaky_relu", "LeakyRelu", vec![cpp_float("epilogue", alpha.0)?], false)
        }
        Activation::Clip { min, max } => {
            if min.0 > max.0 {
                return Err(unsupported("epilogue", format!("clip with min {} > max {}", min.0, max.0)));
            }
            custom("clip", "Clip", vec![cpp_float("epilogue", min.0)?, cpp_float("epilogue", max.0)?], false)
        }
    }
}

/// A float as a C++ literal that parses back to the same f32.
pub fn cpp_float(field: &'static str, v: f32) -> Result<String, RenderError> {
    if v.is_nan() {
        return Err(unsupported(field, "NaN activation parameter"));
    }
    if v.is_infinite() {
        let inf = "cutlass::platform::numeric_limits<float>::infinity()";
        return Ok(if v > 0.0 { inf.to_string() } else { format!("(-{inf})") });
    }
    // Debug prints the shortest string that round-trips, always with a '.' or an exponent.
    Ok(format!("{v:?}f"))
}

/// The formula of a normal form, e.g. `D = relu(alpha * acc + bias + C)`.
pub fn formula(form: &NormalForm) -> String {
    let mut lin = "alpha * acc".to_string();
    if form.beta_source {
        lin += " + beta * C";
    }
    if form.bias {
        lin += " + bias";
    }
    if form.residual == Some(ResidualAt::BeforeActivation) {
        lin += " + C";
    }
    let mut out = match form.activation {
        Activation::Identity => lin,
        Activation::HardSigmoid { alpha, beta } => format!("hardsigmoid({lin}; alpha={}, beta={})", alpha.0, beta.0),
        Activation::LeakyRelu { alpha } => format!("leaky_relu({lin}; alpha={})", alpha.0),
        Activation::Clip { min, max } => format!("clip({lin}; min={}, max={})", min.0, max.0),
        a => format!("{}({lin})", a.name()),
    };
    if form.residual == Some(ResidualAt::AfterActivation) {
        out += " + C";
    }
    format!("D = {out}")
}

fn cpp_layout(l: Layout) -> &'static str {
    match l {
        Layout::RowMajor => "cutlass::layout::RowMajor",
        Layout::ColumnMajor => "cutlass::layout::ColumnMajor",
    }
}

fn summary(spec: &KernelSpec, tile: &Sm80Tile) -> String {
    let t = spec.types;
    let math = if spec.types.input == Element::F32 { " (tf32 tensor cores)" } else { "" };
    let what = match spec.family {
        Family::Gemm => "GEMM".to_string(),
        Family::BatchedGemm => "batched GEMM".to_string(),
        Family::GemmSoftmax => "GEMM + row softmax".to_string(),
        Family::Conv2dFprop(f) => format!(
            "Conv2d fprop NHWC/KRSC, {} stride, groups: {:?}{}",
            if f.unit_stride { "unit" } else { "any" },
            f.groups,
            if f.analytic { ", analytic iterators (any filter size)" } else { "" }
        ),
    };
    let layouts = match spec.family {
        Family::Conv2dFprop(_) => String::new(),
        _ => {
            let l = |l: Layout| if l == Layout::RowMajor { "row" } else { "column" };
            format!("; A {}, B {}, C/D {}-major", l(spec.layouts[0]), l(spec.layouts[1]), l(spec.layouts[2]))
        }
    };
    let split = if tile.split_k > 1 { format!(", serial split-K {}", tile.split_k) } else { String::new() };
    format!(
        "{what}: {} inputs{math}, {} accumulation, {} output{layouts}{split}",
        t.input.name(),
        t.accumulator.name(),
        t.output.name()
    )
}

/// Renders only the epilogue declarations of an sm80 spec (any custom activation functor and
/// `EpilogueOp`) exactly as the kernel templates include them, for host-side checks of their
/// math. Expects `ElementC`, `ElementAccumulator`, `ElementCompute` and `kAlignmentC` declared.
pub fn render_epilogue(spec: &KernelSpec) -> Result<String, RenderError> {
    let (_, ctx) = context(spec, "epilogue_only")?;
    crate::render::render_template(EPILOGUE_TEMPLATE, &crate::render::to_context(&ctx)?)
}
