//! From a plan to the kernels it needs: one profiler workload (family, element types, layouts,
//! the alignment the shapes permit, the typed epilogue, the run-time problem) per kernel node.
//! The profiler picks a tile configuration for each; codegen renders and builds it.

use super::edit::bound_shape;
use crate::ir::{Activation, ConvLayout, DType, FusedKernel, Graph, Node, Op, ResidualAt, RowEpilogue, Window};
use bolt_codegen::abi::{BoltConv2dProblem, BoltGlueProblem};
use bolt_codegen::epilogue::{self as ep, Epilogue, NormalForm};
use bolt_codegen::spec::{Element, Family, Layout, Types};
use bolt_profiler::workload::{Conv2dShape, Workload};
use ordered_float::OrderedFloat;
use serde::Serialize;
use std::collections::HashMap;

/// One kernel of the plan and what the profiler tunes for it.
#[derive(Clone, Debug)]
pub struct KernelUse {
    pub node: String,
    /// The fused back-to-back chain this layer belongs to (each layer is tuned on its own
    /// until the chain kernels have their own candidates).
    pub chain: Option<String>,
    pub workload: Workload,
    /// Run-time epilogue scalars (alpha; beta when the epilogue reads beta*C).
    pub alpha: f32,
    pub beta: f32,
}

/// A kernel node the lowering cannot express, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unlowered {
    pub node: String,
    pub reason: String,
}

pub fn element(d: DType) -> Option<Element> {
    match d {
        DType::F16 => Some(Element::F16),
        DType::BF16 => Some(Element::BF16),
        DType::F32 => Some(Element::F32),
        _ => None,
    }
}

/// What a stitched kernel stores a tensor of type `d` as, if it can.
pub fn stitch_storage(d: DType) -> Option<bolt_codegen::stitch::Storage> {
    use bolt_codegen::stitch::Storage;
    match d {
        DType::I32 => Some(Storage::I32),
        DType::I64 => Some(Storage::I64),
        DType::Bool => Some(Storage::Bool),
        d => element(d).map(Storage::from),
    }
}

/// The stitched kernels' function for a binary op (one mapping for lowering and for the
/// regions' own meaning of integer steps).
pub fn binary_fn(b: crate::ir::Binary) -> bolt_codegen::stitch::BinaryFn {
    use crate::ir::Binary;
    use bolt_codegen::stitch::BinaryFn;
    match b {
        Binary::Add => BinaryFn::Add,
        Binary::Sub => BinaryFn::Sub,
        Binary::Mul => BinaryFn::Mul,
        Binary::Div => BinaryFn::Div,
        Binary::Pow => BinaryFn::Pow,
        Binary::Max => BinaryFn::Max,
        Binary::Min => BinaryFn::Min,
        Binary::PRelu => BinaryFn::PRelu,
    }
}

/// The stitched kernels' function for a unary op (one mapping for lowering and for the
/// regions' own meaning of integer steps).
pub fn unary_fn(u: crate::ir::Unary) -> bolt_codegen::stitch::UnaryFn {
    use crate::ir::Unary;
    use bolt_codegen::stitch::UnaryFn;
    match u {
        Unary::Sqrt => UnaryFn::Sqrt,
        Unary::Erf => UnaryFn::Erf,
        Unary::Exp => UnaryFn::Exp,
        Unary::Neg => UnaryFn::Neg,
        Unary::Abs => UnaryFn::Abs,
        Unary::Reciprocal => UnaryFn::Reciprocal,
        Unary::Log => UnaryFn::Log,
        Unary::Ceil => UnaryFn::Ceil,
        Unary::Floor => UnaryFn::Floor,
        Unary::Round => UnaryFn::Round,
        Unary::Sin => UnaryFn::Sin,
        Unary::Cos => UnaryFn::Cos,
        Unary::Tan => UnaryFn::Tan,
        Unary::Asin => UnaryFn::Asin,
        Unary::Acos => UnaryFn::Acos,
        Unary::Atan => UnaryFn::Atan,
        Unary::Sinh => UnaryFn::Sinh,
        Unary::Cosh => UnaryFn::Cosh,
        Unary::Asinh => UnaryFn::Asinh,
        Unary::Acosh => UnaryFn::Acosh,
        Unary::Atanh => UnaryFn::Atanh,
        Unary::Sign => UnaryFn::Sign,
        Unary::Elu { alpha } => UnaryFn::Elu { alpha: alpha.into() },
        Unary::Selu { alpha, gamma } => UnaryFn::Selu { alpha: alpha.into(), gamma: gamma.into() },
        Unary::Celu { alpha } => UnaryFn::Celu { alpha: alpha.into() },
        Unary::ThresholdedRelu { alpha } => UnaryFn::ThresholdedRelu { alpha: alpha.into() },
        Unary::Softsign => UnaryFn::Softsign,
        Unary::Mish => UnaryFn::Mish,
        Unary::Shrink { bias, lambd } => UnaryFn::Shrink { bias: bias.into(), lambd: lambd.into() },
        Unary::Tanh => UnaryFn::Activation(ep::Activation::Tanh),
        Unary::Relu => UnaryFn::Activation(ep::Activation::Relu),
        Unary::Sigmoid => UnaryFn::Activation(ep::Activation::Sigmoid),
        Unary::Softplus => UnaryFn::Activation(ep::Activation::Softplus),
        Unary::HardSwish => UnaryFn::Activation(ep::Activation::HardSwish),
        Unary::LeakyRelu { alpha } => UnaryFn::Activation(ep::Activation::LeakyRelu { alpha: alpha.into() }),
        Unary::HardSigmoid { alpha, beta } => {
            UnaryFn::Activation(ep::Activation::HardSigmoid { alpha: alpha.into(), beta: beta.into() })
        }
        Unary::Gelu { approximate: crate::ir::GeluApprox::None } => UnaryFn::Activation(ep::Activation::GeluErf),
        Unary::Gelu { approximate: crate::ir::GeluApprox::Tanh } => UnaryFn::Activation(ep::Activation::GeluTanh),
    }
}

pub fn activation(a: Activation) -> ep::Activation {
    match a {
        Activation::Relu => ep::Activation::Relu,
        Activation::GeluErf => ep::Activation::GeluErf,
        Activation::GeluTanh => ep::Activation::GeluTanh,
        Activation::HardSwish => ep::Activation::HardSwish,
        Activation::HardSigmoid { alpha, beta } => {
            ep::Activation::HardSigmoid { alpha: OrderedFloat(alpha), beta: OrderedFloat(beta) }
        }
        Activation::Softplus => ep::Activation::Softplus,
        Activation::Sigmoid => ep::Activation::Sigmoid,
        Activation::Silu => ep::Activation::Silu,
        Activation::Tanh => ep::Activation::Tanh,
        Activation::LeakyRelu { alpha } => ep::Activation::LeakyRelu { alpha: OrderedFloat(alpha) },
        Activation::Clip { min, max } => ep::Activation::Clip { min: OrderedFloat(min), max: OrderedFloat(max) },
    }
}

/// The typed epilogue of a planned kernel and its run-time (alpha, beta).
pub fn epilogue(k: &FusedKernel, has_bias: bool) -> Result<(Epilogue, f32, f32), String> {
    let act = k.activation.map_or(ep::Activation::Identity, activation);
    let at = |a: ResidualAt| match a {
        ResidualAt::BeforeActivation => ep::ResidualAt::BeforeActivation,
        ResidualAt::AfterActivation => ep::ResidualAt::AfterActivation,
    };
    let (beta_source, residual, beta) = match k.source {
        None => (false, None, 0.0),
        Some((1.0, a)) => (false, Some(at(a)), 0.0),
        // A scaled source before the activation is beta * C.
        Some((scale, ResidualAt::BeforeActivation)) => (true, None, scale),
        Some((scale, ResidualAt::AfterActivation)) => {
            return Err(format!("a residual scaled by {scale} after the activation has no epilogue form"))
        }
    };
    let form = NormalForm { beta_source, bias: has_bias, activation: act, residual };
    Ok((Epilogue::new(form)?, k.alpha, beta))
}

/// The run-time problem of an NHWC conv with input `a` ([N, H, W, C]) and OHWI weight `w`
/// ([K, R, S, C / groups]).
pub fn conv2d_problem(a: &[usize], w: &[usize], window: &Window, groups: usize) -> Result<BoltConv2dProblem, String> {
    if a.len() != 4 || w.len() != 4 {
        return Err(format!("conv operands {a:?} and {w:?} are not 4-D"));
    }
    let r = window.resolve(&a[1..3], &w[1..3], false).map_err(|e| format!("conv window: {e}"))?;
    if r.pad_begin != r.pad_end {
        return Err(format!("asymmetric padding {:?} / {:?}", r.pad_begin, r.pad_end));
    }
    let i = |v: usize| v as i32;
    Ok(BoltConv2dProblem {
        n: i(a[0]),
        h: i(a[1]),
        w: i(a[2]),
        c: i(a[3]),
        k: i(w[0]),
        r: i(w[1]),
        s: i(w[2]),
        p: i(r.output[0]),
        q: i(r.output[1]),
        pad_h: i(r.pad_begin[0]),
        pad_w: i(r.pad_begin[1]),
        stride_h: i(r.strides[0]),
        stride_w: i(r.strides[1]),
        dilation_h: i(r.dilations[0]),
        dilation_w: i(r.dilations[1]),
        groups: i(groups),
    })
}

/// Lowers one kernel whose A operand has shape `a` and type `a_type`; returns the workload,
/// its (alpha, beta) and the output shape (the next chain layer's A).
pub(crate) fn lower_one(
    g: &Graph,
    name: &str,
    k: &FusedKernel,
    (a, a_type): (Vec<usize>, DType),
    (weight, bias): (Option<&str>, Option<&str>),
    bindings: &HashMap<String, usize>,
) -> Result<(Workload, f32, f32, Vec<usize>), String> {
    let w = weight.ok_or("missing weight")?;
    let w = bound_shape(g, w, bindings).ok_or_else(|| format!("weight '{w}' has an unknown shape"))?;
    let input = element(a_type).ok_or("operand type is not f16, bf16 or f32")?;
    let output = element(k.output_dtype).ok_or("output type is not f16, bf16 or f32")?;
    let types = Types { input, accumulator: Element::F32, output };
    if let Some(b) = bias {
        same_type_as_output(g, k, b, "bias")?;
    }
    let (epi, alpha, beta) = epilogue(k, bias.is_some())?;
    let i64s = |v: usize| v as i64;
    let (wl, out) = match &*k.anchor {
        Op::Conv { window, group } => {
            if k.layout != ConvLayout::Nhwc {
                return Err("NCHW conv: Bolt's conv kernels are NHWC (plan with the layout pass)".into());
            }
            let c = conv2d_problem(&a, &w, window, *group)?;
            let l = |v: i32| v as i64;
            let mut s = Conv2dShape::new(l(c.n), l(c.h), l(c.w), l(c.c), l(c.k), l(c.r), l(c.s));
            s.pad = (l(c.pad_h), l(c.pad_w));
            s.stride = (l(c.stride_h), l(c.stride_w));
            s.dilation = (l(c.dilation_h), l(c.dilation_w));
            s.groups = l(c.groups);
            let out = vec![a[0], c.p as usize, c.q as usize, w[0]];
            (Workload::conv2d(name, s, types, epi), out)
        }
        Op::Gemm { trans_a, trans_b, .. } if a.len() == 2 && w.len() == 2 => {
            let (m, kk) = if *trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
            let b_col = *trans_b != k.weight_transposed;
            let nn = if b_col { w[0] } else { w[1] };
            let l = |t: bool| if t { Layout::ColumnMajor } else { Layout::RowMajor };
            let layouts = [l(*trans_a), l(b_col), Layout::RowMajor];
            (Workload::gemm(name, (i64s(m), i64s(nn), i64s(kk), 1), types, layouts, epi), vec![m, nn])
        }
        Op::MatMul if w.len() == 2 && !a.is_empty() => {
            let kk = a[a.len() - 1];
            let m = a.iter().product::<usize>() / kk.max(1);
            let (nn, b) = if k.weight_transposed { (w[0], Layout::ColumnMajor) } else { (w[1], Layout::RowMajor) };
            let mut out = a.clone();
            *out.last_mut().expect("non-empty") = nn;
            let layouts = [Layout::RowMajor, b, Layout::RowMajor];
            (Workload::gemm(name, (i64s(m), i64s(nn), i64s(kk), 1), types, layouts, epi), out)
        }
        Op::MatMul if w.len() == a.len() && a.len() >= 3 => {
            let r = a.len();
            let batch: usize = a[..r - 2].iter().product();
            let mut out = a.clone();
            out[r - 1] = w[r - 1];
            let problem = (i64s(a[r - 2]), i64s(w[r - 1]), i64s(a[r - 1]), i64s(batch));
            (Workload::gemm(name, problem, types, [Layout::RowMajor; 3], epi), out)
        }
        other => return Err(format!("{} with operands {a:?} x {w:?} maps to no kernel family", other.op_type())),
    };
    let mut wl = wl.map_err(|e| e.to_string())?;
    if let Some(row) = k.row {
        // A row stage needs the whole row in one GEMM's output: one (unbatched) GEMM.
        if wl.family != Family::Gemm || wl.layouts[2] != Layout::RowMajor {
            return Err(format!("a {row:?} row stage on a {:?} kernel: only a row-major GEMM takes one", wl.family));
        }
        wl.family = match row {
            RowEpilogue::Softmax => Family::GemmSoftmax,
        };
    }
    Ok((wl, alpha, beta, out))
}

/// The kernels read the bias and the source (C) in the output's type (CUTLASS's ElementC is
/// ElementD): a tensor of another type would be read as the wrong bytes.
fn same_type_as_output(g: &Graph, k: &FusedKernel, tensor: &str, role: &str) -> Result<(), String> {
    match g.types.get(tensor).map(|t| t.dtype) {
        Some(t) if t == k.output_dtype => Ok(()),
        Some(t) => Err(format!(
            "{role} '{tensor}' is {t} but the kernel writes {}: kernels read it in the output's type",
            k.output_dtype
        )),
        None => Err(format!("{role} '{tensor}' has no type")),
    }
}

/// Every kernel of a planned graph as a workload, under `bindings` for symbolic dims (1 when
/// unbound).
pub fn workloads(g: &Graph, bindings: &HashMap<String, usize>) -> (Vec<KernelUse>, Vec<Unlowered>) {
    // Shapes under the bindings: symbolic inference leaves dims it cannot name (Reshape with
    // -1, Resize) unknown; with static inputs every kernel's shape is known.
    let bound;
    let g = match super::edit::bind_inputs(g, bindings) {
        Ok(b) => {
            bound = b;
            &bound
        }
        Err(_) => g,
    };
    let mut uses = Vec::new();
    let mut skipped = Vec::new();
    for n in &g.nodes {
        let (layers, chain): (Vec<&FusedKernel>, Option<String>) = match &n.op {
            Op::Fused(k) => (vec![k.as_ref()], None),
            Op::FusedChain(ks) => (ks.iter().collect(), Some(n.name.clone())),
            _ => continue,
        };
        let Some(a) = n.input(0) else { continue };
        let mut a_in = match (bound_shape(g, a, bindings), g.types.get(a)) {
            (Some(s), Some(t)) => (s, t.dtype),
            _ => {
                skipped.push(Unlowered { node: n.name.clone(), reason: format!("'{a}' has an unknown shape or type") });
                continue;
            }
        };
        for (i, k) in layers.iter().enumerate() {
            // Inputs: A, then (weight, bias) per layer, then the last layer's source.
            let (w, b) = if chain.is_some() { (1 + 2 * i, 2 + 2 * i) } else { (1, 2) };
            let name = if chain.is_some() { format!("{}#{i}", n.name) } else { n.name.clone() };
            // The last layer's source (C): after its weights and biases.
            let source = (i + 1 == layers.len()).then(|| n.input(1 + 2 * layers.len())).flatten();
            let lowered = source
                .map_or(Ok(()), |c| same_type_as_output(g, k, c, "source"))
                .and_then(|()| lower_one(g, &name, k, a_in.clone(), (n.input(w), n.input(b)), bindings));
            match lowered {
                Ok((workload, alpha, beta, out)) => {
                    a_in = (out, k.output_dtype);
                    uses.push(KernelUse { node: name, chain: chain.clone(), workload, alpha, beta });
                }
                Err(reason) => {
                    skipped.push(Unlowered { node: name, reason });
                    break;
                }
            }
        }
    }
    (uses, skipped)
}

/// A planned data-movement node or a pool as a glue kernel ([`bolt_codegen::glue`]): the
/// layout transposes the planner puts around NHWC conv regions, its channel padding
/// (`FitLastAxis` growing the last axis), float casts, and 2-D MaxPool / AveragePool /
/// GlobalAveragePool on NCHW data or, inside conv regions, NHWC data ([`Op::ChannelsLast`]).
/// `None`: not a glue op; `Some(Err)`: a glue op this instance of which no glue kernel takes
/// (the reason), so it stays on the host. Shapes come from `g`'s types: bind its inputs first
/// ([`super::edit::bind_inputs`]) when dims are symbolic.
pub fn glue(g: &Graph, n: &Node, bindings: &HashMap<String, usize>) -> Option<Result<GlueUse, String>> {
    if !is_glue_op(&n.op) {
        return None;
    }
    if indices_used(n) {
        return Some(Err(INDICES_USED.into()));
    }
    let x = n.input(0)?;
    let y = n.outputs.first()?;
    let (Some(xt), Some(yt)) = (g.types.get(x).map(|t| t.dtype), g.types.get(y).map(|t| t.dtype)) else {
        // Inference stopped before it (an op from another domain whose output it cannot type).
        return Some(Err(format!("'{x}' or '{y}' has no known type")));
    };
    let Some(shape) = bound_shape(g, x, bindings) else {
        return Some(Err(format!("'{x}' has an unknown shape")));
    };
    let mut constants: Vec<Option<std::sync::Arc<crate::ir::Tensor>>> =
        n.inputs.iter().map(|i| i.as_deref().and_then(|t| super::edit::constant(g, t))).collect();
    // A Resize to sizes the model computes from shapes (paddle2onnx's FPN upsampling to another
    // map's size): inference knows its output's dims, and they are those sizes. The kernel
    // takes its scales from the extents (output / input, ONNX's rule for sizes), as the
    // reference device derives them from the computed sizes at run time.
    if let (Op::Resize(_), Some(Some(_)), None) = (&n.op, n.inputs.get(3), constants.get(3).cloned().flatten()) {
        let no_scales = n.input(2).is_none_or(|_| constants[2].as_ref().is_some_and(|t| t.len() == 0));
        if let (true, Some(out)) = (no_scales, bound_shape(g, y, bindings)) {
            let sizes = out.iter().map(|&d| d as i64).collect();
            constants[3] = Some(std::sync::Arc::new(crate::ir::Tensor::from_i64(vec![out.len()], sizes)));
        }
    }
    let constants: Vec<Option<&crate::ir::Tensor>> = constants.iter().map(|c| c.as_deref()).collect();
    if matches!(n.op, Op::Pad { .. }) && n.input(2).is_some() && constants.get(2).copied().flatten().is_none() {
        return Some(Err("the pad value is computed at run time: pad kernels take a constant".into()));
    }
    glue_for(&n.op, &shape, xt, yt, &constants)
        .map(|r| r.map(|(spec, problem)| GlueUse { node: n.name.clone(), spec, problem }))
}

/// Why a MaxPool whose Indices output is used has no glue kernel.
pub const INDICES_USED: &str = "its second output (MaxPool's Indices) is used: the glue kernel writes values only";

/// Whether `n` has a second output (MaxPool's Indices): glue kernels write one.
pub fn indices_used(n: &Node) -> bool {
    n.outputs.iter().skip(1).any(|o| !o.is_empty())
}

/// Whether `op` is a pool (of the model's, or run channels-last by the planner).
pub fn is_pool(op: &Op) -> bool {
    if let Op::ChannelsLast(inner) = op {
        return is_pool(inner);
    }
    matches!(op, Op::MaxPool { .. } | Op::AveragePool { .. } | Op::GlobalAveragePool | Op::GlobalMaxPool)
}

fn is_glue_op(op: &Op) -> bool {
    match op {
        Op::Transpose { .. } | Op::FitLastAxis { .. } | Op::Cast { .. } | Op::Resize(_) => true,
        Op::DepthToSpace { .. } | Op::Pad { .. } => true,
        Op::ChannelsLast(inner) if matches!(**inner, Op::DepthToSpace { .. }) => true,
        op => is_pool(op),
    }
}

/// A nearest or (bi)linear Resize of two spatial axes of a rank-4 tensor (NCHW's h, w or, as the layout
/// pass leaves it inside conv regions, NHWC's) as a glue kernel: its spec and problem, from
/// the constant scales or sizes (`constants`, by input position).
fn resize_for(
    a: &crate::ir::ResizeAttrs,
    shape: &[usize],
    element: bolt_codegen::spec::Element,
    constants: &[Option<&crate::ir::Tensor>],
) -> Result<(bolt_codegen::glue::ResizeSpec, BoltGlueProblem), String> {
    use crate::ir::{AspectPolicy, CoordTransform, NearestMode, ResizeMode};
    use bolt_codegen::glue::{Layout, NearestRounding, ResizeCoord, ResizeSpec, Sampling};
    if a.antialias || a.axes.is_some() || a.aspect != AspectPolicy::Stretch {
        return Err("antialias, axes or keep_aspect_ratio_policy: resize kernels take plain ones".into());
    }
    let coord = match a.coord {
        CoordTransform::Asymmetric => ResizeCoord::Asymmetric,
        CoordTransform::HalfPixel => ResizeCoord::HalfPixel,
        CoordTransform::PytorchHalfPixel => ResizeCoord::PytorchHalfPixel,
        CoordTransform::AlignCorners => ResizeCoord::AlignCorners,
        other => return Err(format!("coordinate_transformation_mode {other:?} has no resize kernel")),
    };
    // Linear's exclude_outside changes nothing: its weights never fall outside once the
    // neighbours are clamped to the edge.
    let sample = match a.mode {
        ResizeMode::Nearest => Sampling::Nearest(match a.nearest {
            NearestMode::Floor => NearestRounding::Floor,
            NearestMode::Ceil => NearestRounding::Ceil,
            NearestMode::RoundPreferFloor => NearestRounding::RoundPreferFloor,
            NearestMode::RoundPreferCeil => NearestRounding::RoundPreferCeil,
        }),
        ResizeMode::Linear => Sampling::Linear,
        ResizeMode::Cubic => return Err("mode cubic: resize kernels are nearest or linear".into()),
    };
    if shape.len() != 4 {
        return Err(format!("the input has rank {}: resize kernels take rank-4 data", shape.len()));
    }
    let given = |k: usize| constants.get(k).copied().flatten().filter(|t| t.len() > 0);
    let (scales, sizes) = match (given(2), given(3)) {
        (Some(s), None) if s.dtype().is_float() => (Some(s.to_f32_vec()), None),
        (None, Some(z)) => (None, Some(z.as_i64_vec().ok_or("sizes are not integers")?)),
        _ => return Err("scales or sizes are not a constant".into()),
    };
    let (out, _) = crate::ir::infer::resize_output(shape, a, scales.as_deref(), sizes.as_deref())?;
    // Which axes change: n and c keep their extent (and scale 1).
    let kept = |d: usize| out[d] == shape[d] && scales.as_ref().is_none_or(|s| s[d] == 1.0);
    let layout = if kept(0) && kept(1) {
        Layout::Nchw
    } else if kept(0) && kept(3) {
        Layout::Nhwc
    } else {
        return Err(format!("resizes {shape:?} to {out:?}: resize kernels resize two spatial axes"));
    };
    let (hw, (n, c)) = match layout {
        Layout::Nchw => ([2, 3], (shape[0], shape[1])),
        Layout::Nhwc => ([1, 2], (shape[0], shape[3])),
    };
    let spec = ResizeSpec {
        coord,
        sample,
        scales: scales.map(|s| hw.map(|d| ordered_float::OrderedFloat(s[d]))),
        layout,
        element,
    };
    let i = |x: usize| x as i64;
    let problem = BoltGlueProblem {
        p: i(out[hw[0]]),
        q: i(out[hw[1]]),
        ..BoltGlueProblem::new(i(n), i(c), i(shape[hw[0]]), i(shape[hw[1]]))
    };
    Ok((spec, problem))
}

/// The pool kernel of a pool op (plain: NCHW; [`Op::ChannelsLast`]: NHWC) on `element` data,
/// whatever the input's size, or why no pool kernel takes it.
pub fn pool_spec(op: &Op, element: bolt_codegen::spec::Element) -> Result<bolt_codegen::glue::PoolSpec, String> {
    use bolt_codegen::glue::{Layout, PoolKind, PoolPads, PoolSpec, PoolWindow};
    let (op, layout) = match op {
        Op::ChannelsLast(inner) => (&**inner, Layout::Nhwc),
        op => (op, Layout::Nchw),
    };
    let window = |w: &crate::ir::Window| -> Result<PoolWindow, String> {
        let pads = match w.auto_pad {
            crate::ir::AutoPad::NotSet => Some(w.pads.clone().unwrap_or_else(|| vec![0; 4])),
            crate::ir::AutoPad::Valid => Some(vec![0; 4]),
            // Pads that follow the input size: the kernel works them out from its problem.
            crate::ir::AutoPad::SameUpper | crate::ir::AutoPad::SameLower => None,
        };
        let kernel = w.kernel_shape.as_ref().ok_or("no kernel_shape")?;
        if kernel.len() != 2 || pads.as_ref().is_some_and(|p| p.len() != 4) {
            return Err(format!("a {}-D window: pool kernels pool 2-D", kernel.len()));
        }
        let two = |v: Option<&Vec<usize>>| -> Result<[u32; 2], String> {
            let v = v.map_or(vec![1, 1], Clone::clone);
            match v[..] {
                [a, b] => Ok([a, b].map(|x| u32::try_from(x).unwrap_or(u32::MAX))),
                _ => Err(format!("{v:?} has {} entries for a 2-D window", v.len())),
            }
        };
        let pads = match pads {
            Some(p) => PoolPads::Fixed([0, 1, 2, 3].map(|k| u32::try_from(p[k]).unwrap_or(u32::MAX))),
            None => PoolPads::Same { upper: w.auto_pad == crate::ir::AutoPad::SameUpper },
        };
        Ok(PoolWindow {
            kernel: two(Some(kernel))?,
            strides: two(w.strides.as_ref())?,
            dilations: two(w.dilations.as_ref())?,
            pads,
        })
    };
    let kind = match op {
        Op::MaxPool { window: w, .. } => PoolKind::Max(window(w)?),
        Op::AveragePool { window: w, count_include_pad, .. } => {
            PoolKind::Average { window: window(w)?, count_include_pad: *count_include_pad }
        }
        Op::GlobalAveragePool => PoolKind::GlobalAverage,
        Op::GlobalMaxPool => PoolKind::GlobalMax,
        _ => return Err("not a pool".into()),
    };
    let spec = PoolSpec { kind, layout, element };
    bolt_codegen::glue::validate(&bolt_codegen::glue::GlueSpec::Pool(spec)).map_err(|e| e.to_string())?;
    Ok(spec)
}

/// A Pad of the last two axes (or the last) of an input of `shape` as a glue kernel, from its
/// constant pads, value and axes (`constants`, by input position). Crops are copies, not this.
fn pad_for(
    mode: crate::ir::PadMode,
    shape: &[i64],
    element: bolt_codegen::spec::Element,
    constants: &[Option<&crate::ir::Tensor>],
) -> Result<(bolt_codegen::glue::GlueSpec, BoltGlueProblem), String> {
    use crate::ir::PadMode;
    use bolt_codegen::glue::{GlueSpec, PadFill, SpatialPadSpec};
    let given = |k: usize| constants.get(k).copied().flatten();
    let ints = |k: usize, what: &str| -> Result<Option<Vec<i64>>, String> {
        given(k).map(|t| t.as_i64_vec().ok_or_else(|| format!("{what} are not integers"))).transpose()
    };
    let pads = ints(1, "the pads")?.ok_or("the pads are computed at run time: pad kernels take constant pads")?;
    let axes = ints(3, "the axes")?;
    let rank = shape.len();
    let per_axis = crate::ir::infer::pads_per_axis(&pads, axes.as_deref(), rank)?;
    if per_axis.iter().any(|&(b, e)| b < 0 || e < 0) {
        return Err(format!("pads {pads:?} crop: pad kernels only grow"));
    }
    if rank == 0 {
        return Err("a scalar input: nothing to pad".into());
    }
    // The kernel pads the last two axes of [n, h, w]. One padded axis k anywhere is the `h`
    // of [axes before k, k, axes after k] (whole slices move, so reflect and edge hold too);
    // padding on the last two axes is [axes before, h, w] as they are.
    let padded: Vec<usize> = (0..rank).filter(|&k| per_axis[k] != (0, 0)).collect();
    let product = |axes: std::ops::Range<usize>| shape[axes].iter().product::<i64>();
    let (n, h, hp, w, wp) = match padded[..] {
        [k] if k + 2 < rank => (product(0..k), shape[k], per_axis[k], product(k + 1..rank), (0, 0)),
        _ if padded.iter().any(|&k| k + 2 < rank) => {
            return Err(format!("pads {pads:?} of a rank-{rank} input: pad kernels pad one axis, or the last two"))
        }
        _ if rank >= 2 => {
            (product(0..rank - 2), shape[rank - 2], per_axis[rank - 2], shape[rank - 1], per_axis[rank - 1])
        }
        _ => (1, 1, (0, 0), shape[0], per_axis[0]),
    };
    let value = match given(2) {
        Some(v) if v.len() == 1 => v.to_f64_vec()[0] as f32,
        Some(v) => return Err(format!("a pad value of {} elements", v.len())),
        // Absent (a value computed at run time is refused by `glue`).
        None => 0.0,
    };
    let fill = match mode {
        PadMode::Constant => PadFill::Constant,
        PadMode::Reflect => PadFill::Reflect,
        PadMode::Edge => PadFill::Edge,
        PadMode::Wrap => PadFill::Wrap,
    };
    let u32_of = |v: i64| u32::try_from(v).map_err(|_| format!("pad {v} above the kernels' range"));
    let pads = [u32_of(hp.0)?, u32_of(wp.0)?, u32_of(hp.1)?, u32_of(wp.1)?];
    let value = if fill == PadFill::Constant { value } else { 0.0 };
    let spec = SpatialPadSpec { fill, pads, value: value.into(), element };
    let problem = GlueSpec::Pad(spec).problem(n, 1, h, w);
    Ok((GlueSpec::Pad(spec), problem))
}

/// DepthToSpace of an input of `shape` (in `layout`) as a glue kernel.
fn depth_to_space_for(
    blocksize: usize,
    crd: bool,
    layout: bolt_codegen::glue::Layout,
    shape: &[i64],
    element: bolt_codegen::spec::Element,
) -> Result<(bolt_codegen::glue::GlueSpec, BoltGlueProblem), String> {
    use bolt_codegen::glue::{DepthToSpaceSpec, GlueSpec, Layout};
    let b = i64::try_from(blocksize).map_err(|_| "blocksize too large")?;
    if shape.len() != 4 || b == 0 {
        return Err(format!("an input of rank {} (blocksize {b}): DepthToSpace kernels take rank 4", shape.len()));
    }
    let (n, cb, h, w) = match layout {
        Layout::Nchw => (shape[0], shape[1], shape[2], shape[3]),
        Layout::Nhwc => (shape[0], shape[3], shape[1], shape[2]),
    };
    if cb % (b * b) != 0 {
        return Err(format!("{cb} channels are not a multiple of blocksize^2 = {}", b * b));
    }
    let spec = DepthToSpaceSpec { blocksize: blocksize as u32, crd, layout, element };
    let c = cb / (b * b);
    Ok((GlueSpec::DepthToSpace(spec), BoltGlueProblem { p: h * b, q: w * b, ..BoltGlueProblem::new(n, c, h, w) }))
}

/// A pool's spec and problem on an input of `shape` (the op's layout); the output extents
/// come from the model's window rules (ceil mode included).
fn pool_for(
    op: &Op,
    shape: &[i64],
    element: bolt_codegen::spec::Element,
) -> Result<(bolt_codegen::glue::PoolSpec, BoltGlueProblem), String> {
    use bolt_codegen::glue::Layout;
    let spec = pool_spec(op, element)?;
    if shape.len() != 4 {
        return Err(format!("the input has rank {}: pool kernels take rank-4 data", shape.len()));
    }
    let (n, c, h, w) = match spec.layout {
        Layout::Nchw => (shape[0], shape[1], shape[2], shape[3]),
        Layout::Nhwc => (shape[0], shape[3], shape[1], shape[2]),
    };
    let inner = match op {
        Op::ChannelsLast(inner) => &**inner,
        op => op,
    };
    let (p, q) = match inner {
        Op::MaxPool { window, ceil_mode, .. } | Op::AveragePool { window, ceil_mode, .. } => {
            let kernel = window.kernel_shape.as_ref().ok_or("no kernel_shape")?;
            let r = window.resolve(&[h as usize, w as usize], kernel, *ceil_mode)?;
            (r.output[0] as i64, r.output[1] as i64)
        }
        _ => (1, 1),
    };
    Ok((spec, BoltGlueProblem { n, c, h, w, c_padded: c, p, q }))
}

/// [`glue`] of one op on an input of `shape` and type `xt`, writing type `yt`, whose other
/// inputs are `constants` where constant (by input position; a Resize's scales or sizes): the
/// spec and the problem (what the runtime computes from the actual shapes).
pub fn glue_for(
    op: &Op,
    shape: &[usize],
    xt: DType,
    yt: DType,
    constants: &[Option<&crate::ir::Tensor>],
) -> Option<Result<(bolt_codegen::glue::GlueSpec, BoltGlueProblem), String>> {
    use bolt_codegen::glue::{CastSpec, Direction, GlueSpec, Layout, PadSpec, TransposeSpec};
    if !is_glue_op(op) {
        return None;
    }
    if let Op::FitLastAxis { to } = op {
        if shape.last().is_some_and(|&from| *to < from) {
            // Truncation keeps a box of the input: device copies (`fit_blocks`), not a kernel.
            return None;
        }
    }
    let direction = match op {
        Op::Transpose { perm: Some(p) } if p[..] == super::layout::TO_NHWC => Some(Direction::NchwToNhwc),
        Op::Transpose { perm: Some(p) } if p[..] == super::layout::TO_NCHW => Some(Direction::NhwcToNchw),
        Op::Transpose { .. } => return None,
        _ => None,
    };
    let lowered = (|| {
        let ex = element(xt).ok_or_else(|| format!("the input is {xt}: glue kernels move f32, f16 and bf16"))?;
        let s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let numel: i64 = s.iter().product();
        let (spec, problem) = match (op, direction) {
            (_, Some(direction)) => {
                if s.len() != 4 {
                    return Err(format!("the input has rank {}, not 4", s.len()));
                }
                // The problem names the logical NCHW extents whichever way the data moves.
                let (n, c, h, w) = match direction {
                    Direction::NchwToNhwc => (s[0], s[1], s[2], s[3]),
                    Direction::NhwcToNchw => (s[0], s[3], s[1], s[2]),
                };
                let spec = GlueSpec::Transpose(TransposeSpec { direction, element: ex });
                (spec, BoltGlueProblem::new(n, c, h, w))
            }
            (Op::FitLastAxis { to }, _) => {
                // (A truncation returned `None` above: it is device copies.)
                let (from, to) = (*s.last().ok_or("the input is a scalar")?, *to as i64);
                // The kernels' vector width when it divides the padded size, else narrower.
                let widest = super::padding::vector_elements(xt.size_bytes().unwrap_or(4)) as i64;
                let alignment = [widest, 4, 2].into_iter().filter(|&a| a <= widest).find(|&a| to % a == 0);
                let alignment = alignment.ok_or_else(|| format!("pads to {to} elements, not a multiple of 2"))?;
                let spec = GlueSpec::PadChannels(PadSpec { element: ex, alignment: alignment as u32 });
                // Every axis but the last is one "pixel".
                (spec, BoltGlueProblem { c_padded: to, ..BoltGlueProblem::new(numel / from.max(1), from, 1, 1) })
            }
            (Op::Cast { .. }, _) => {
                let ey = element(yt).ok_or_else(|| format!("casts to {yt}: glue kernels cast between floats"))?;
                // Element-wise: the tensor as one row.
                (GlueSpec::Cast(CastSpec { from: ex, to: ey }), BoltGlueProblem::new(numel, 1, 1, 1))
            }
            (Op::DepthToSpace { blocksize, crd }, _) => depth_to_space_for(*blocksize, *crd, Layout::Nchw, &s, ex)?,
            (Op::ChannelsLast(inner), _) if matches!(**inner, Op::DepthToSpace { .. }) => {
                let Op::DepthToSpace { blocksize, crd } = **inner else { unreachable!("matched") };
                depth_to_space_for(blocksize, crd, Layout::Nhwc, &s, ex)?
            }
            (Op::Resize(a), _) => {
                let (spec, problem) = resize_for(a, shape, ex, constants)?;
                (GlueSpec::Resize(spec), problem)
            }
            (Op::Pad { mode }, _) => pad_for(*mode, &s, ex, constants)?,
            (op, _) => {
                let (spec, problem) = pool_for(op, &s, ex)?;
                (GlueSpec::Pool(spec), problem)
            }
        };
        bolt_codegen::glue::validate(&spec).map_err(|e| e.to_string())?;
        if [problem.n, problem.c, problem.h, problem.w, problem.p, problem.q].iter().any(|&d| d <= 0) {
            return Err(format!("the input of shape {shape:?} is empty"));
        }
        Ok((spec, problem))
    })();
    Some(lowered)
}

/// One glue kernel of the plan: what it converts and its run-time problem.
#[derive(Clone, Debug, PartialEq)]
pub struct GlueUse {
    pub node: String,
    pub spec: bolt_codegen::glue::GlueSpec,
    pub problem: BoltGlueProblem,
}

/// A fused back-to-back chain node ([`Op::FusedChain`]) as one chain kernel
/// ([`bolt_codegen::b2b`]): what codegen's candidates take, and each layer's run-time scalars.
#[derive(Clone, Debug)]
pub struct ChainUse {
    pub node: String,
    pub family: bolt_codegen::b2b::B2bFamily,
    pub types: Types,
    pub epilogues: Vec<Epilogue>,
    pub problem: bolt_codegen::b2b::B2bProblem,
    /// (alpha, beta) of each layer.
    pub scalars: Vec<(f32, f32)>,
}

impl ChainUse {
    /// The chain kernel: codegen's first candidate for the problem (as the planner decided
    /// with), when it runs on the plan's tensors as they are (no operand padding).
    pub fn kernel(&self) -> Result<bolt_codegen::b2b::B2bSpec, String> {
        let c = bolt_codegen::b2b::candidates(self.family, self.types, &self.problem, &self.epilogues)
            .map_err(|e| e.to_string())?;
        if c.problem != self.problem || c.padded_input_channels.is_some() {
            return Err("the fused kernel needs padded operands the plan does not hold".into());
        }
        c.specs.first().map(|(s, _)| s.clone()).ok_or_else(|| "no fused candidate".to_string())
    }
}

/// Every chain node of `g` as a [`ChainUse`], from the per-layer workloads
/// [`workloads`] gives for it (`node#i`); chains with a layer it could not lower are returned
/// as [`Unlowered`] under the chain's name.
pub fn chains(g: &Graph, uses: &[KernelUse], skipped: &[Unlowered]) -> (Vec<ChainUse>, Vec<Unlowered>) {
    use bolt_codegen::b2b::{B2bFamily, B2bProblem};
    use bolt_profiler::workload::Problem;
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for n in &g.nodes {
        let Op::FusedChain(ks) = &n.op else { continue };
        let prefix = format!("{}#", n.name);
        if let Some(s) = skipped.iter().find(|s| s.node.starts_with(&prefix)) {
            failed.push(Unlowered { node: n.name.clone(), reason: format!("{}: {}", s.node, s.reason) });
            continue;
        }
        let layers: Vec<&KernelUse> = uses.iter().filter(|u| u.chain.as_deref() == Some(&n.name)).collect();
        let lowered = (|| {
            if layers.len() != ks.len() || layers.is_empty() {
                return Err(format!("{} of {} layers lowered", layers.len(), ks.len()));
            }
            let (first, last) = (&layers[0].workload, &layers[layers.len() - 1].workload);
            let types = Types { input: first.types.input, accumulator: Element::F32, output: last.types.output };
            let (family, problem) = match first.problem {
                Problem::Gemm(p) => {
                    let ns = layers.iter().map(|l| match l.workload.problem {
                        Problem::Gemm(q) => Ok(q.n),
                        Problem::Conv2d(_) => Err("a conv layer in a GEMM chain"),
                    });
                    (B2bFamily::Gemm, B2bProblem::gemm(p.m, p.k, &ns.collect::<Result<Vec<_>, _>>()?))
                }
                Problem::Conv2d(p) => {
                    let ks = layers[1..].iter().map(|l| match l.workload.problem {
                        Problem::Conv2d(q) => Ok(q.k),
                        Problem::Gemm(_) => Err("a GEMM layer in a conv chain"),
                    });
                    (B2bFamily::Conv2dFprop, B2bProblem::conv(p, &ks.collect::<Result<Vec<_>, _>>()?))
                }
            };
            Ok(ChainUse {
                node: n.name.clone(),
                family,
                types,
                epilogues: layers.iter().map(|l| l.workload.epilogue.clone()).collect(),
                problem,
                scalars: layers.iter().map(|l| (l.alpha, l.beta)).collect(),
            })
        })();
        match lowered {
            Ok(c) => out.push(c),
            Err(reason) => failed.push(Unlowered { node: n.name.clone(), reason: reason.to_string() }),
        }
    }
    (out, failed)
}

/// A stitched node's kernel ([`bolt_codegen::stitch`]): the region's steps with the kernel's
/// element types, how each input is read (densely when its shape is the iteration space,
/// else through broadcast strides) and whether each output has one value per row. Symbolic
/// dims count as equal when they have the same name. `Err`: why no stitched kernel takes it.
pub fn stitch_spec(g: &Graph, n: &Node) -> Result<bolt_codegen::stitch::StitchSpec, String> {
    use crate::ir::{Compare, Dim, Logic, Shape};
    use crate::partition::stitch::{Reduce, Step};
    use bolt_codegen::stitch::{self as st, Access, CompareFn, LogicFn, Reduction, StitchSpec};
    let Op::Stitched(r) = &n.op else { return Err("not a stitched node".into()) };
    let ty = |t: &str| g.types.get(t).ok_or_else(|| format!("tensor '{t}' has no type"));
    let mut shapes = Vec::new();
    let mut inputs = Vec::new();
    for x in n.inputs.iter().flatten() {
        let t = ty(x)?;
        let e = stitch_storage(t.dtype).ok_or_else(|| {
            format!("input '{x}' is {}: stitched kernels read f32, f16, bf16, i32, i64 and bool", t.dtype)
        })?;
        shapes.push(t.shape.clone().ok_or_else(|| format!("input '{x}' has no known rank"))?);
        inputs.push(e);
    }
    // Each input as the region reads it (a transposed input through its permutation, a
    // sliced one through its window).
    let viewed: Vec<Shape> = shapes.iter().enumerate().map(|(i, s)| r.viewed_shape(i, s)).collect::<Result<_, _>>()?;
    // A gather's table is read by row, not broadcast: its rows' width is the space's.
    let space = viewed
        .iter()
        .enumerate()
        .map(|(i, s)| if r.is_table(i) { Shape(s.0.last().cloned().into_iter().collect()) } else { s.clone() })
        .try_fold(Shape(vec![]), |acc, s| crate::ir::broadcast_shapes(&acc, &s))
        .ok_or("the inputs do not broadcast together")?;
    // Scalars (a reduced maximum less a constant) run as one row of one element.
    let scalars = space.rank() == 0;
    let space = if scalars { Shape(vec![Dim::Known(1)]) } else { space };
    if space.rank() > bolt_codegen::abi::STITCH_MAX_RANK {
        return Err(format!("an iteration space of rank {} (stitched kernels take 1..=6)", space.rank()));
    }
    // Dims of unknown size (exporters that drop spatial sizes) are resolved at run time from
    // the actual shapes; the spec may then only rely on what holds for every size (below).
    let unknown = viewed.iter().any(|s| s.0.iter().any(|d| matches!(d, Dim::Unknown)));
    let refs: Vec<&Shape> = shapes.iter().collect();
    let step_shapes = r.shapes(&refs)?;
    let width = space.0.last().expect("rank >= 1");
    let mut steps = Vec::with_capacity(r.steps.len());
    for (j, s) in r.steps.iter().enumerate() {
        steps.push(match *s {
            Step::Input(i) => st::Step::Input(i),
            Step::Const(c64) => {
                let c = c64 as f32;
                // Infinities stay infinities; a finite value must stay finite in f32 (0 * 1e300
                // is 0, 0 * inf is NaN).
                if c.is_nan() || (c.is_infinite() && c64.is_finite()) {
                    return Err(format!("constant {c64} is not a finite f32 nor an infinity"));
                }
                st::Step::Const(OrderedFloat(c))
            }
            Step::Unary(u, a) => st::Step::Unary(unary_fn(u), a),
            Step::Binary(b, x, y) => st::Step::Binary(binary_fn(b), x, y),
            Step::Compare(c, a, b) => st::Step::Compare(
                match c {
                    Compare::Equal => CompareFn::Eq,
                    Compare::Less => CompareFn::Lt,
                    Compare::LessOrEqual => CompareFn::Le,
                    Compare::Greater => CompareFn::Gt,
                    Compare::GreaterOrEqual => CompareFn::Ge,
                },
                a,
                b,
            ),
            Step::Logic(l, a, b) => st::Step::Logic(
                match l {
                    Logic::And => LogicFn::And,
                    Logic::Or => LogicFn::Or,
                    Logic::Xor => LogicFn::Xor,
                },
                a,
                b,
            ),
            Step::Not(a) => st::Step::Not(a),
            Step::Select(c, a, b) => st::Step::Select(c, a, b),
            Step::Gather(t, a) => st::Step::Gather(t, a),
            Step::Cast(to, a) => st::Step::Cast(
                stitch_storage(to)
                    .ok_or_else(|| format!("step {j} casts to {to}, which stitched kernels do not store"))?,
                a,
            ),
            Step::Reduce(kind, a) => {
                // The kernel reduces along the space's rows: the reduced value must span them.
                if step_shapes[a].0.last() != Some(width) {
                    return Err(format!(
                        "step {j} reduces rows of {} over an iteration space {space}",
                        step_shapes[a].0.last().map_or("?".into(), |d| d.to_string())
                    ));
                }
                st::Step::Reduce(
                    match kind {
                        Reduce::Sum => Reduction::Sum,
                        Reduce::Mean => Reduction::Mean,
                        Reduce::Max => Reduction::Max,
                    },
                    a,
                )
            }
        });
    }
    // Per step: the inputs it reads, and whether it varies along the row (no reduction cuts
    // it off from every input).
    let mut deps: Vec<std::collections::BTreeSet<usize>> = Vec::with_capacity(r.steps.len());
    let mut varies: Vec<bool> = Vec::with_capacity(r.steps.len());
    for s in &r.steps {
        let (d, v) = match *s {
            // An input with one value per row (its last dim 1) does not vary along it.
            Step::Input(i) => ([i].into(), viewed[i].0.last() != Some(&Dim::Known(1))),
            Step::Const(_) => (Default::default(), false),
            Step::Unary(_, a) => (deps[a].clone(), varies[a]),
            Step::Reduce(_, a) => (deps[a].clone(), false),
            Step::Not(a) | Step::Cast(_, a) => (deps[a].clone(), varies[a]),
            Step::Gather(t, a) => (deps[a].iter().copied().chain([t]).collect(), true),
            Step::Binary(_, a, b) | Step::Compare(_, a, b) | Step::Logic(_, a, b) => {
                (deps[a].union(&deps[b]).copied().collect(), varies[a] || varies[b])
            }
            Step::Select(c, a, b) => {
                (deps[c].union(&deps[a]).chain(&deps[b]).copied().collect(), varies[c] || varies[a] || varies[b])
            }
        };
        deps.push(d);
        varies.push(v);
    }
    let mut per_row_space = space.0.clone();
    *per_row_space.last_mut().expect("rank >= 1") = Dim::Known(1);
    let mut outputs = Vec::new();
    for ((name, j), out) in r.outputs.iter().zip(&n.outputs) {
        debug_assert_eq!(name, out);
        let t = ty(out)?;
        let element = stitch_storage(t.dtype).ok_or_else(|| format!("output '{out}' is {}", t.dtype))?;
        let shape = &step_shapes[*j];
        let per_row = if unknown {
            // Unknown sizes compare equal without being equal: an output is the iteration
            // space (or one value per row of it) only if its shape is the broadcast of every
            // input: it reads each, or the input cannot widen it (each of the input's dims is 1
            // or a known size the output has too, e.g. a LayerNorm's gamma under a residual
            // the region also writes), and its row is the space's (or reduced to 1). Without
            // reductions its shape is then the space; with them, its row must be.
            let absorbed = |i: usize, per_row: bool| {
                let (u, o) = (&viewed[i].0, &shape.0);
                u.iter().rev().enumerate().all(|(k, d)| {
                    *d == Dim::Known(1)
                        || (per_row && k == 0)
                        || (matches!(d, Dim::Known(_)) && k < o.len() && o[o.len() - 1 - k] == *d)
                })
            };
            // A per-row output (cut off from the row by a reduction) ignores the inputs' rows.
            let reads_all = (0..n.inputs.len()).all(|i| deps[*j].contains(&i) || absorbed(i, !varies[*j]));
            // With reductions its row must be the space's: where that length is unknown the
            // kernel's problem checks at run time that the output spans the row.
            let last = shape.0.last();
            let full_row = !r.reduces() || last == space.0.last();
            match (reads_all, varies[*j]) {
                (true, true) if full_row => false,
                (true, false) if last == Some(&Dim::Known(1)) => true,
                _ => {
                    return Err(format!(
                        "output '{out}' of shape {shape}: over dims of unknown size it must read every input of \
                         the region and span or reduce its rows"
                    ))
                }
            }
        } else if *shape == space || (scalars && shape.rank() == 0) {
            false
        } else if shape.0 == per_row_space {
            true
        } else {
            return Err(format!(
                "output '{out}' of shape {shape} is neither the iteration space {space} nor one value per row"
            ));
        };
        outputs.push(st::Output { step: *j, element, per_row });
    }
    let spec = StitchSpec {
        inputs: inputs
            .into_iter()
            .enumerate()
            .map(|(i, element)| {
                let known = viewed[i].0.iter().all(|d| !matches!(d, Dim::Unknown));
                let dense = r.view(i).is_none() && r.slice(i).is_none() && known && viewed[i] == space;
                let access = match (dense, viewed[i].0.last()) {
                    _ if r.is_table(i) => Access::Table,
                    (true, _) => Access::Dense,
                    (false, Some(Dim::Known(1))) => Access::Row,
                    _ => Access::Strided,
                };
                st::Input { element, access }
            })
            .collect(),
        steps,
        outputs,
    };
    st::validate(&spec).map_err(|e| e.to_string())?;
    Ok(spec)
}

/// A stitched node's launch on inputs of actual shapes: the problem and where each input's
/// first element read lies.
#[derive(Clone, Debug, PartialEq)]
pub struct StitchLaunch {
    pub problem: bolt_codegen::abi::BoltStitchProblem,
    /// Per input, elements from the stored tensor's start to the first one the kernel reads
    /// (a slice's window; 0 otherwise): the devices pass the input's address advanced by it.
    pub offsets: Vec<usize>,
    /// The iteration space: the shape of outputs of one value per element (empty for
    /// scalars, which the problem launches as one element).
    pub space: Vec<usize>,
}

/// A stitched node's run-time problem from its inputs' actual shapes: each input as the
/// region reads it (a transposed input as a strided view of the stored tensor, a sliced one as
/// a strided window of it), the iteration space their broadcast.
pub fn stitch_problem(
    spec: &bolt_codegen::stitch::StitchSpec,
    region: &crate::partition::stitch::Region,
    inputs: &[&[usize]],
) -> Result<StitchLaunch, String> {
    let mut views: Vec<(Vec<usize>, Vec<i64>)> = Vec::with_capacity(inputs.len());
    let mut offsets = Vec::with_capacity(inputs.len());
    for (i, s) in inputs.iter().enumerate() {
        let strides = bolt_codegen::abi::contiguous_strides(s);
        let (view, offset) = match region.view(i) {
            // A gather's indices: one per row of the space.
            None if region.row_index(i) => {
                let (mut shape, mut st) = (s.to_vec(), strides.clone());
                shape.push(1);
                st.push(0);
                ((shape, st), 0)
            }
            None => {
                let w = region.window(i, s);
                let offset = w.iter().zip(&strides).map(|(&(start, _, _), &st)| start as i64 * st).sum::<i64>();
                let shape = w.iter().map(|&(_, _, len)| len).collect();
                let st = w.iter().zip(&strides).map(|(&(_, step, _), &st)| step as i64 * st).collect();
                ((shape, st), offset as usize)
            }
            Some(p) if p.len() == s.len() && p.iter().all(|&d| d < s.len()) => {
                ((p.iter().map(|&d| s[d]).collect(), p.iter().map(|&d| strides[d]).collect()), 0)
            }
            Some(p) => return Err(format!("input {i} of shape {s:?} viewed through {p:?}")),
        };
        views.push(view);
        offsets.push(offset);
    }
    // A gather's table is read by row, not broadcast: its rows' width is the space's.
    let space = views
        .iter()
        .enumerate()
        .map(|(i, (s, _))| if region.is_table(i) { s.last().copied().into_iter().collect() } else { s.clone() })
        .try_fold(Vec::new(), |acc, s: Vec<usize>| crate::ir::broadcast_static(&acc, &s))
        .ok_or_else(|| format!("inputs {inputs:?} do not broadcast together"))?;
    let refs: Vec<(&[usize], &[i64])> = views.iter().map(|(s, t)| (s.as_slice(), t.as_slice())).collect();
    // A space of scalars launches as one row of one element (as `stitch_spec` planned it).
    let launched = if space.is_empty() { vec![1] } else { space.clone() };
    Ok(StitchLaunch { problem: spec.problem_of_views(&launched, &refs)?, offsets, space })
}

/// One rectangular device-to-device copy of a copy node ([`copy_blocks`]): `height` rows of
/// `width` bytes from input `input` at `src` (+ `src_pitch` per row) to output `output` at
/// `dst` (+ `dst_pitch` per row). Offsets are bytes from the tensors' starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyBlock {
    pub input: usize,
    pub output: usize,
    pub src: usize,
    pub dst: usize,
    pub width: usize,
    pub height: usize,
    pub src_pitch: usize,
    pub dst_pitch: usize,
}

/// Whether `op` only moves bytes in rectangles (views, Concat, Split, Expand): run as device
/// copies, never a kernel nor a host round trip.
pub fn is_copy(op: &Op) -> bool {
    op.is_view() || matches!(op, Op::Concat { .. } | Op::Split { .. } | Op::Expand)
}

/// [`is_copy`], a Slice of constant starts, ends and axes with unit steps (a box of its
/// input: rectangles, [`slice_blocks`]), a Gather of one constant index ([`gather_blocks`])
/// and a FitLastAxis that truncates ([`fit_blocks`]).
pub fn is_copy_node(g: &Graph, n: &Node) -> bool {
    is_copy(&n.op) || slice_params(g, n).is_some() || gather_pick(g, n).is_some() || truncates(g, n)
}

/// A Gather node's axis (`axis` of an input of rank `rank`) and its one constant index, when
/// it picks a single entry: a scalar index (the axis goes: a recurrent network's time step,
/// a transformer's class token) or an index of shape [1] (the axis stays).
fn gather_pick(g: &Graph, n: &Node) -> Option<(usize, i64)> {
    let Op::Gather { axis } = n.op else { return None };
    let rank = g.types.get(n.input(0)?)?.shape.as_ref()?.rank() as i64;
    let index = super::edit::constant(g, n.input(1)?)?;
    let [i] = index.as_i64_vec()?[..] else { return None };
    let axis = if axis < 0 { axis + rank } else { axis };
    (0..rank).contains(&axis).then_some((axis as usize, i))
}

/// The copies that run a Gather of one constant index ([`gather_pick`]) on an input of shape
/// `x`: the box of that entry along the axis. `None` for any other node, or an index outside
/// the axis (the host's Gather then says so).
pub fn gather_blocks(g: &Graph, n: &Node, x: &[usize], elem: usize) -> Option<Vec<CopyBlock>> {
    let (axis, i) = gather_pick(g, n)?;
    let size = *x.get(axis)? as i64;
    let i = if i < 0 { i + size } else { i };
    if !(0..size).contains(&i) {
        return None;
    }
    let mut boxed: Vec<(usize, usize)> = x.iter().map(|&d| (0, d)).collect();
    boxed[axis] = (i as usize, 1);
    box_blocks(x, &boxed, elem)
}

/// Whether `n` is a FitLastAxis that drops elements of a last axis of known size.
fn truncates(g: &Graph, n: &Node) -> bool {
    let Op::FitLastAxis { to } = n.op else { return false };
    let last = n.input(0).and_then(|x| g.types.get(x)?.shape.as_ref()?.0.last().cloned());
    matches!(last, Some(crate::ir::Dim::Known(from)) if to < from)
}

/// The copies of a FitLastAxis that truncates an input of shape `x` to `to` elements.
pub fn fit_blocks(x: &[usize], to: usize, elem: usize) -> Option<Vec<CopyBlock>> {
    let (&last, lead) = x.split_last()?;
    if to > last {
        return None;
    }
    let boxed: Vec<(usize, usize)> = lead.iter().map(|&d| (0, d)).chain([(0, to)]).collect();
    box_blocks(x, &boxed, elem)
}

/// A Slice node's parameters per axis, when its bounds (and axes, steps) are constants.
pub fn constant_slice(g: &Graph, n: &Node) -> Option<Vec<crate::ir::infer::SliceAxis>> {
    if !matches!(n.op, Op::Slice) {
        return None;
    }
    let ints = |i: usize| -> Option<Option<Vec<i64>>> {
        match n.input(i) {
            None => Some(None),
            Some(t) => Some(Some(super::edit::constant(g, t)?.as_i64_vec()?)),
        }
    };
    let rank = g.types.get(n.input(0)?)?.shape.as_ref()?.rank();
    let (starts, ends, axes, steps) = (ints(1)??, ints(2)??, ints(3)?, ints(4)?);
    crate::ir::infer::slice_axes(rank, &starts, &ends, axes.as_deref(), steps.as_deref()).ok()
}

/// A Slice node's constant parameters, when every step other than 1 (a reversal, a stride)
/// is on an axis before the last, so that its copies are whole runs of the inner axes.
fn slice_params(g: &Graph, n: &Node) -> Option<Vec<crate::ir::infer::SliceAxis>> {
    let rank = g.types.get(n.input(0)?)?.shape.as_ref()?.rank();
    constant_slice(g, n).filter(|params| params.iter().all(|p| p.step == 1 || p.axis + 1 < rank))
}

/// The copies that run Slice node `n` ([`slice_params`]) on an input of shape `x` (`elem`
/// bytes per element): a box for unit steps; for other steps one box per output index of the
/// stepped axes (torch.flip's reversal of a bidirectional RNN's time axis), at most 4096
/// copies in all. `None` for any other node, or more copies.
pub fn slice_blocks(g: &Graph, n: &Node, x: &[usize], elem: usize) -> Option<Vec<CopyBlock>> {
    let params = slice_params(g, n)?;
    let mut boxed: Vec<(usize, usize)> = x.iter().map(|&d| (0, d)).collect();
    let mut stepped = Vec::new();
    for p in &params {
        let r = p.resolve(*x.get(p.axis)?);
        boxed[p.axis] = (r.start.max(0) as usize, r.len);
        if r.step != 1 {
            stepped.push((p.axis, r.start, r.step, r.len));
        }
    }
    let out: Vec<usize> = boxed.iter().map(|b| b.1).collect();
    let out_strides = crate::ir::strides(&out);
    let picks: usize = stepped.iter().map(|s| s.3).product();
    let mut blocks = Vec::new();
    for k in 0..picks {
        // Output index j of each stepped axis reads input index start + j * step.
        let (mut rem, mut dst) = (k, 0);
        for &(axis, start, step, len) in stepped.iter().rev() {
            let j = rem % len;
            rem /= len;
            boxed[axis] = (usize::try_from(start + j as i64 * step).ok()?, 1);
            dst += j * out_strides[axis];
        }
        blocks.extend(box_blocks_into(x, &boxed, &out_strides, dst, elem)?);
        if blocks.len() > 4096 {
            return None;
        }
    }
    Some(blocks)
}

/// An Expand's copies: the whole input into the output once per index of the axes it
/// broadcasts (an input dim of 1, or a missing leading one, under a larger output dim), each
/// as [`box_blocks_into`] makes them; at most 4096. `None` when the shapes do not broadcast
/// that way.
pub fn expand_blocks(x: &[usize], out: &[usize], elem: usize) -> Option<Vec<CopyBlock>> {
    let mut xs = vec![1; out.len().checked_sub(x.len())?];
    xs.extend_from_slice(x);
    if xs.iter().zip(out).any(|(&a, &b)| a != b && a != 1) {
        return None;
    }
    let strides = crate::ir::strides(out);
    let boxed: Vec<(usize, usize)> = xs.iter().map(|&d| (0, d)).collect();
    let broadcast: Vec<usize> = (0..out.len()).filter(|&a| xs[a] != out[a]).collect();
    let picks: usize = broadcast.iter().map(|&a| out[a]).product();
    let mut blocks = Vec::new();
    for k in 0..picks {
        let (mut rem, mut dst) = (k, 0);
        for &a in broadcast.iter().rev() {
            dst += (rem % out[a]) * strides[a];
            rem /= out[a];
        }
        blocks.extend(box_blocks_into(&xs, &boxed, &strides, dst, elem)?);
        if blocks.len() > 4096 {
            return None;
        }
    }
    Some(blocks)
}

/// The copies of box `boxed` ((start, length) per axis) of a row-major tensor of shape `x`
/// into a dense tensor of the box's shape: runs of adjacent axes contiguous on both sides
/// merge, the innermost two are one 2-D rectangle, the outer ones one rectangle each (at
/// most 4096).
pub fn box_blocks(x: &[usize], boxed: &[(usize, usize)], elem: usize) -> Option<Vec<CopyBlock>> {
    let dense = crate::ir::strides(&boxed.iter().map(|b| b.1).collect::<Vec<_>>());
    box_blocks_into(x, boxed, &dense, 0, elem)
}

/// [`box_blocks`] into a tensor with element strides `dst_strides` (per axis of `x`), the
/// box's first element at element `dst_base`.
fn box_blocks_into(
    x: &[usize],
    boxed: &[(usize, usize)],
    dst_strides: &[usize],
    dst_base: usize,
    elem: usize,
) -> Option<Vec<CopyBlock>> {
    if x.len() != boxed.len() || dst_strides.len() != x.len() || boxed.iter().zip(x).any(|(&(s, l), &d)| s + l > d) {
        return None;
    }
    let total: usize = boxed.iter().map(|b| b.1).product();
    if total == 0 {
        return Some(Vec::new());
    }
    let src_strides: Vec<usize> = crate::ir::strides(x);
    let base: usize = boxed.iter().zip(&src_strides).map(|(b, s)| b.0 * s).sum();
    // (extent, src stride, dst stride), axes of extent 1 dropped, contiguous runs merged.
    let mut dims: Vec<(usize, usize, usize)> = Vec::new();
    for ((b, &ss), &ds) in boxed.iter().zip(&src_strides).zip(dst_strides) {
        if b.1 == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == b.1 * ss && last.2 == b.1 * ds => *last = (last.0 * b.1, ss, ds),
            _ => dims.push((b.1, ss, ds)),
        }
    }
    // The innermost run: elements (an axis of one kept element when the last kept axis is
    // not the input's last, or not the destination's: an Expand along the last axis).
    if dims.last().is_none_or(|d| d.1 != 1 || d.2 != 1) {
        dims.push((1, 1, 1));
    }
    let (width, ws, wd) = *dims.last()?;
    if ws != 1 || wd != 1 {
        return None;
    }
    let (height, sp, dp) = if dims.len() >= 2 { dims[dims.len() - 2] } else { (1, width, width) };
    let outer = &dims[..dims.len().saturating_sub(2)];
    let count: usize = outer.iter().map(|d| d.0).product();
    if count > 4096 {
        return None;
    }
    let mut blocks = Vec::with_capacity(count);
    for i in 0..count {
        let (mut rem, mut src, mut dst) = (i, base, dst_base);
        for &(extent, ss, ds) in outer.iter().rev() {
            src += (rem % extent) * ss;
            dst += (rem % extent) * ds;
            rem /= extent;
        }
        blocks.push(CopyBlock {
            input: 0,
            output: 0,
            src: src * elem,
            dst: dst * elem,
            width: width * elem,
            height,
            src_pitch: sp * elem,
            dst_pitch: dp * elem,
        });
    }
    Some(blocks)
}

/// The copies that run copy node `op` on data inputs of shapes `inputs` (row-major, `elem`
/// bytes per element) producing `outputs`; `None` when `op` is not a copy op or the shapes do
/// not fit.
pub fn copy_blocks(op: &Op, inputs: &[&[usize]], outputs: &[&[usize]], elem: usize) -> Option<Vec<CopyBlock>> {
    let count = |s: &[usize]| s.iter().product::<usize>();
    match op {
        Op::Expand => expand_blocks(inputs.first()?, outputs.first()?, elem),
        op if op.is_view() => {
            let bytes = count(outputs.first()?) * elem;
            (count(inputs.first()?) * elem == bytes).then(|| {
                vec![CopyBlock {
                    input: 0,
                    output: 0,
                    src: 0,
                    dst: 0,
                    width: bytes,
                    height: 1,
                    src_pitch: bytes,
                    dst_pitch: bytes,
                }]
            })
        }
        Op::Split { axis, .. } => {
            // Concat's copies the other way round.
            let whole = inputs.first()?;
            let concat = copy_blocks(&Op::Concat { axis: *axis }, outputs, &[whole], elem)?;
            Some(
                concat
                    .into_iter()
                    .map(|b| CopyBlock {
                        input: 0,
                        output: b.input,
                        src: b.dst,
                        dst: b.src,
                        src_pitch: b.dst_pitch,
                        dst_pitch: b.src_pitch,
                        ..b
                    })
                    .collect(),
            )
        }
        Op::Concat { axis } => {
            let output = *outputs.first()?;
            let rank = output.len();
            let a = if *axis < 0 { *axis + rank as i64 } else { *axis };
            let a = usize::try_from(a).ok().filter(|&a| a < rank)?;
            let (outer, unit) = (count(&output[..a]), count(&output[a + 1..]) * elem);
            let row = output[a] * unit;
            let mut offset = 0;
            let mut blocks = Vec::new();
            for (i, s) in inputs.iter().enumerate() {
                if s.len() != rank || (0..rank).any(|d| d != a && s[d] != output[d]) {
                    return None;
                }
                let width = s[a] * unit;
                if width > 0 && outer > 0 {
                    blocks.push(CopyBlock {
                        input: i,
                        output: 0,
                        src: 0,
                        dst: offset,
                        width,
                        height: outer,
                        src_pitch: width,
                        dst_pitch: row,
                    });
                }
                offset += width;
            }
            (offset == row).then_some(blocks)
        }
        _ => None,
    }
}

/// The attention kernel of an [`Op::Attention`] node: its element and head dims are static
/// (the planner fused only such cores); the output is the model's `[.., S_q, D_v]`, or
/// `[B, S_q, H, D_v]` when the node merges heads.
pub fn attention_spec(g: &Graph, n: &Node) -> Result<bolt_codegen::attention::AttentionSpec, String> {
    use bolt_codegen::attention::{AttentionSpec, OutputLayout};
    let Op::Attention(a) = &n.op else { return Err("not an attention node".into()) };
    let r = a.rank();
    let shape = |i: usize| -> Result<(crate::ir::DType, Vec<crate::ir::Dim>), String> {
        let x = n.input(i).ok_or_else(|| format!("input {i} missing"))?;
        let t = g.types.get(x).ok_or_else(|| format!("tensor '{x}' has no type"))?;
        let s = t.shape.as_ref().ok_or_else(|| format!("tensor '{x}' has no known rank"))?;
        Ok((t.dtype, a.source_dims(i, &s.0, |d| crate::ir::Dim::Known(d))))
    };
    let (dtype, q) = shape(0)?;
    let (_, v) = shape(2)?;
    let e = element(dtype).ok_or_else(|| format!("Q is {dtype}: attention kernels take f32, f16 and bf16"))?;
    let head = |s: &[crate::ir::Dim], perm: &[usize], what: &str| match perm.get(r - 1).and_then(|&p| s.get(p)) {
        Some(crate::ir::Dim::Known(d)) => Ok(*d as i64),
        d => Err(format!("the head dim of {what} is {d:?}, not static")),
    };
    let (d, d_v) = (head(&q, &a.q_perm, "Q")?, head(&v, &a.v_perm, "V")?);
    let layout = if a.merge_heads { OutputLayout::Bshd } else { OutputLayout::Bhsd };
    AttentionSpec::for_head_dims(e, d, d_v, a.mask, layout)
        .map(|spec| AttentionSpec { causal: a.causal, ..spec })
        .ok_or_else(|| {
            format!(
                "head dims {d} and {d_v}: attention kernels are built for head dims up to {}",
                bolt_codegen::attention::HEAD_DIM_MAX.iter().max().expect("head dims")
            )
        })
}

/// A mask whose rows are not whole vectors reaches the attention kernel through a copy: its
/// `rows` rows of `width` bytes (dense, `src_pitch` apart) into scratch `dst_pitch` apart,
/// `bytes` in all; the kernel then reads the padded rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskStaging {
    pub rows: usize,
    pub width: usize,
    pub src_pitch: usize,
    pub dst_pitch: usize,
    pub bytes: usize,
}

/// The kernel problem of attention op `a` run by `spec` on inputs of shapes `shapes` (Q, K,
/// V sources, then the mask), and the mask's staging when it needs one.
pub fn attention_problem(
    a: &crate::partition::attention::FusedAttention,
    spec: &bolt_codegen::attention::AttentionSpec,
    shapes: &[&[usize]],
) -> Result<(bolt_codegen::abi::BoltAttentionProblem, Option<MaskStaging>), String> {
    use bolt_codegen::abi::{contiguous_strides, BoltAttentionProblem};
    let r = a.rank();
    if shapes.len() != 3 + usize::from(a.mask) {
        return Err(format!("{} inputs, the node takes {}", shapes.len(), 3 + usize::from(a.mask)));
    }
    for (i, w) in a.packed.iter().flatten().enumerate() {
        let width = shapes[i].last().copied().unwrap_or(0);
        if w.end() > width || w.head_stride < w.head_dim {
            return Err(format!("operand {i}: window {w:?} of a packed projection {width} wide"));
        }
    }
    // Each operand's logical [.., S, D] dims and element strides (0 where a dim of 1 broadcasts).
    // A packed operand's source is a window of its input (`FusedAttention::source_view`): its
    // strides step over the whole packed rows; the caller offsets its pointer.
    let view = |i: usize, perm: &[usize], what: &str| -> Result<(Vec<usize>, Vec<i64>), String> {
        let (s, st, _) = a.source_view(i, shapes[i]);
        if s.len() != r || perm.len() != r {
            return Err(format!("{what} of shape {:?} viewed through {perm:?}", shapes[i]));
        }
        let dims: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
        let strides = perm.iter().map(|&p| if s[p] == 1 { 0 } else { st[p] }).collect();
        Ok((dims, strides))
    };
    let (qd, qs) = view(0, &a.q_perm, "Q")?;
    let (kd, ks) = view(1, &a.k_perm, "K")?;
    let (vd, vs) = view(2, &a.v_perm, "V")?;
    // (batch, head, seq) axes of the logical operands; rank 3 has one head.
    let axes: [Option<usize>; 3] = if r == 4 { [Some(0), Some(1), Some(2)] } else { [Some(0), None, Some(1)] };
    let pick = |s: &[i64]| axes.map(|a| a.map_or(0, |i| s[i]));
    let extent = |i: Option<usize>, what: &str| -> Result<usize, String> {
        let Some(i) = i else { return Ok(1) };
        let ds = [qd[i], kd[i], vd[i]];
        let m = ds.iter().copied().max().unwrap_or(1);
        if ds.iter().all(|&d| d == m || d == 1) {
            Ok(m)
        } else {
            Err(format!("{what} extents {ds:?} of Q, K, V do not broadcast"))
        }
    };
    let (batch, heads) = (extent(axes[0], "batch")?, extent(axes[1], "head")?);
    let (sq, sk, d, dv) = (qd[r - 2], kd[r - 2], qd[r - 1], vd[r - 1]);
    if vd[r - 2] != sk || kd[r - 1] != d {
        return Err(format!("Q {qd:?}, K {kd:?} and V {vd:?} do not chain"));
    }
    let mut p = BoltAttentionProblem {
        batch: batch as i64,
        heads: heads as i64,
        seq_q: sq as i64,
        seq_k: sk as i64,
        head_dim: d as i64,
        head_dim_v: dv as i64,
        q_strides: pick(&qs),
        k_strides: pick(&ks),
        v_strides: pick(&vs),
        bias_strides: [0; 3],
        scale: a.scale,
    };
    let mut staging = None;
    if a.mask {
        // The mask broadcasts (numpy rules) to the scores [B, (H), S_q, S_k], never over keys.
        let m = shapes[3];
        let lead: &[usize] = if r == 4 { &[batch, heads] } else { &[batch] };
        let scores: Vec<usize> = lead.iter().copied().chain([sq, sk]).collect();
        if m.len() > r || m.last() != Some(&sk) {
            return Err(format!("mask of shape {m:?} for scores {scores:?}: needs S_k = {sk} keys in its last axis"));
        }
        let st = contiguous_strides(m);
        let mut strides = vec![0i64; r];
        for (j, (&dim, &s)) in m.iter().zip(&st).enumerate() {
            let axis = j + r - m.len();
            if dim != scores[axis] && dim != 1 {
                return Err(format!("mask of shape {m:?} does not broadcast to the scores {scores:?}"));
            }
            strides[axis] = if dim == 1 { 0 } else { s };
        }
        let mut bias = [strides[0], if r == 4 { strides[1] } else { 0 }, strides[r - 2]];
        let align = spec.alignment();
        // The kernel reads bias rows in whole vectors (the last one too): rows of a ragged S_k
        // or at misaligned strides are copied to rows padded to whole vectors in scratch
        // (rows of S_k are dense in the mask).
        if bias.iter().any(|s| s % align != 0) || sk % align as usize != 0 {
            let pitch = sk.div_ceil(align as usize) * align as usize;
            let rows = m.iter().product::<usize>() / sk.max(1);
            let e = spec.element.size_bytes();
            bias = bias.map(|s| s / sk as i64 * pitch as i64);
            staging = Some(MaskStaging {
                rows,
                width: sk * e,
                src_pitch: sk * e,
                dst_pitch: pitch * e,
                bytes: rows * pitch * e,
            });
        }
        p.bias_strides = bias;
    }
    spec.check(&p).map_err(|e| e.to_string())?;
    Ok((p, staging))
}

/// A recurrent scan node's kernel: the cell, direction, activations (one set for both
/// directions), clip, layout and element type of its inputs.
pub fn recurrent_spec(
    r: &crate::ir::Recurrent,
    dtype: DType,
) -> Result<bolt_codegen::recurrent::RecurrentSpec, String> {
    use crate::ir::{Cell, RnnDirection};
    use bolt_codegen::recurrent::{RecurrentCell, RecurrentSpec, ScanDirection};
    let element = element(dtype).ok_or_else(|| format!("the layer is {dtype}: scan kernels take f32, f16 and bf16"))?;
    let per_dir = r.cell.default_activations().len();
    let (first, rest) = r.activations.split_at(per_dir.min(r.activations.len()));
    if !rest.is_empty() && rest != first {
        return Err("the two directions use different activations: one scan kernel runs both with one set".into());
    }
    let mut activations = [ep::Activation::Identity; 3];
    for (k, &u) in first.iter().enumerate() {
        let a = Activation::of_unary(u).ok_or_else(|| format!("activation {u:?}: no kernel function"))?;
        activations[k] = activation(a);
    }
    let spec = RecurrentSpec {
        cell: match r.cell {
            Cell::Rnn => RecurrentCell::Rnn,
            Cell::Gru { linear_before_reset } => RecurrentCell::Gru { linear_before_reset },
            Cell::Lstm { input_forget } => RecurrentCell::Lstm { input_forget },
        },
        direction: match r.direction {
            RnnDirection::Forward => ScanDirection::Forward,
            RnnDirection::Reverse => ScanDirection::Reverse,
            RnnDirection::Bidirectional => ScanDirection::Bidirectional,
        },
        activations,
        clip: r.clip.map(OrderedFloat),
        batch_major: r.batch_major,
        element,
    };
    bolt_codegen::recurrent::validate(&spec).map_err(|e| e.to_string())?;
    Ok(spec)
}

/// The recurrent kernel of scan node `n` of `g`, from its types alone (the one rule the report,
/// the host offload and `bolt compile` share): the spec lowers, the sequence lengths are int32
/// (the kernel reads them so) and a known hidden size fits a block. Shapes at run time are
/// checked by [`recurrent_problem`].
pub fn recurrent_scan_kernel(g: &Graph, n: &Node) -> Result<bolt_codegen::recurrent::RecurrentSpec, String> {
    let Op::RecurrentScan(r) = &n.op else { return Err("not a recurrent scan".into()) };
    let ty = |i: usize| n.input(i).and_then(|x| g.types.get(x));
    let spec = recurrent_spec(r, ty(0).ok_or("XW has no type")?.dtype)?;
    if let Some(lens) = ty(3) {
        if lens.dtype != DType::I32 {
            return Err(format!("sequence_lens is {}: scan kernels read int32", lens.dtype));
        }
    }
    let hidden = ty(1).and_then(|t| t.shape.as_ref()).and_then(|s| s.0.get(1)).and_then(crate::ir::Dim::known);
    if let Some(h) = hidden.filter(|&h| h as i64 > bolt_codegen::recurrent::MAX_HIDDEN) {
        return Err(format!(
            "hidden size {h}: scan kernels hold at most {} units",
            bolt_codegen::recurrent::MAX_HIDDEN
        ));
    }
    Ok(spec)
}

/// A recurrent scan's problem from its XW and Rᵀ shapes, checked as the kernel checks it.
pub fn recurrent_problem(
    r: &crate::ir::Recurrent,
    xw: &[usize],
    rt: &[usize],
) -> Result<bolt_codegen::abi::BoltRecurrentProblem, String> {
    let ([a, b, _], [_, hidden, _]) = (
        <[usize; 3]>::try_from(xw).map_err(|_| format!("XW of shape {xw:?}"))?,
        <[usize; 3]>::try_from(rt).map_err(|_| format!("Rᵀ of shape {rt:?}"))?,
    );
    let (seq, batch) = if r.batch_major { (b, a) } else { (a, b) };
    let p = bolt_codegen::abi::BoltRecurrentProblem { seq: seq as i64, batch: batch as i64, hidden: hidden as i64 };
    bolt_codegen::recurrent::check(&p).map_err(|e| e.to_string())?;
    Ok(p)
}
