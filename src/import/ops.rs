//! NodeProto -> typed [`Op`]. Valid ONNX that Bolt does not compute (string constants, casts
//! to float8, unknown op types, other domains) becomes [`Op::Opaque`] so the host runs it;
//! malformed attributes are errors.

use super::attrs::Attrs;
use super::proto::NodeProto;
use crate::ir::*;
use std::sync::Arc;

/// Outcome of parsing one node: a typed op, or an opaque one with the reason Bolt leaves it.
pub enum Parsed {
    Op(Op),
    Opaque(&'static str),
}

/// The first default-domain opset whose version of `op_type` has the semantics Bolt
/// implements. Older versions of these ops differ (Softmax and Hardmax coerced their input to
/// 2-D; Slice, Pad and Clip took attributes where today's take inputs), so nodes from older
/// opsets stay with the host unless `legacy::upgrade` rewrote them first.
fn semantics_since(op_type: &str) -> i64 {
    match op_type {
        "Slice" => 10,
        "Pad" | "Clip" | "Resize" => 11,
        "Softmax" | "LogSoftmax" | "Hardmax" | "Squeeze" | "Unsqueeze" | "Split" => 13,
        "HardSwish" => 14,
        "LayerNormalization" => 17,
        "Gelu" => 20,
        _ => super::MIN_OPSET,
    }
}

pub fn parse_op(node: &NodeProto, opset: i64) -> Result<Parsed, String> {
    let domain = node.domain();
    if !(domain.is_empty() || domain == "ai.onnx") {
        return Ok(Parsed::Opaque("operator from a non-default domain"));
    }
    if opset < semantics_since(node.op_type()) {
        return Ok(Parsed::Opaque(OLDER_SEMANTICS));
    }
    // Explicitly UNDEFINED: an attribute a host could not hand over (the ORT plugin's sign),
    // which read as absent would change the op's meaning.
    if node.attribute.iter().any(|a| a.r#type == Some(0)) {
        return Ok(Parsed::Opaque("an attribute its host could not hand over (type UNDEFINED)"));
    }
    let a = Attrs::new(node);
    let op = match node.op_type() {
        "MatMul" => Op::MatMul,
        "Gemm" => Op::Gemm {
            alpha: a.float_or("alpha", 1.0)?,
            beta: a.float_or("beta", 1.0)?,
            trans_a: a.bool_or("transA", false)?,
            trans_b: a.bool_or("transB", false)?,
        },
        "Conv" => {
            let group = a.int_or("group", 1)?;
            if group < 1 {
                return Err(format!("group must be >= 1, found {group}"));
            }
            Op::Conv { window: window(&a)?, group: group as usize }
        }
        "ConvTranspose" => {
            let group = a.int_or("group", 1)?;
            if group < 1 {
                return Err(format!("group must be >= 1, found {group}"));
            }
            Op::ConvTranspose {
                window: window(&a)?,
                group: group as usize,
                output_padding: a.usizes("output_padding")?,
                output_shape: a.usizes("output_shape")?,
            }
        }
        "BatchNormalization" => Op::BatchNormalization {
            epsilon: a.float_or("epsilon", 1e-5)?,
            momentum: a.float_or("momentum", 0.9)?,
            training_mode: a.bool_or("training_mode", false)?,
        },
        "Add" => Op::Binary(Binary::Add),
        "Sub" => Op::Binary(Binary::Sub),
        "Mul" => Op::Binary(Binary::Mul),
        "Div" => Op::Binary(Binary::Div),
        "Pow" => Op::Binary(Binary::Pow),
        // Variadic in ONNX: one input is itself, two (how exporters write them) the binary op;
        // the host computes the others (reference::ops::host).
        "Max" | "Min" | "Sum" | "Mean" if node.input.len() == 1 => Op::Identity,
        "Sum" if node.input.len() == 2 => Op::Binary(Binary::Add),
        "Max" if node.input.len() == 2 => Op::Binary(Binary::Max),
        "Min" if node.input.len() == 2 => Op::Binary(Binary::Min),
        "Max" | "Min" | "Sum" | "Mean" => {
            return Ok(Parsed::Opaque("Max / Min / Sum / Mean of other than two inputs (Mean: one)"));
        }
        "PRelu" => Op::Binary(Binary::PRelu),
        "Exp" => Op::Unary(Unary::Exp),
        "Neg" => Op::Unary(Unary::Neg),
        "Abs" => Op::Unary(Unary::Abs),
        "Reciprocal" => Op::Unary(Unary::Reciprocal),
        "Log" => Op::Unary(Unary::Log),
        "Ceil" => Op::Unary(Unary::Ceil),
        "Floor" => Op::Unary(Unary::Floor),
        "Round" => Op::Unary(Unary::Round),
        "Sqrt" => Op::Unary(Unary::Sqrt),
        "Erf" => Op::Unary(Unary::Erf),
        "Tanh" => Op::Unary(Unary::Tanh),
        "Relu" => Op::Unary(Unary::Relu),
        "Sigmoid" => Op::Unary(Unary::Sigmoid),
        "Softplus" => Op::Unary(Unary::Softplus),
        "HardSwish" => Op::Unary(Unary::HardSwish),
        "LeakyRelu" => Op::Unary(Unary::LeakyRelu { alpha: a.float_or("alpha", 0.01)? }),
        "HardSigmoid" => {
            Op::Unary(Unary::HardSigmoid { alpha: a.float_or("alpha", 0.2)?, beta: a.float_or("beta", 0.5)? })
        }
        "Sin" => Op::Unary(Unary::Sin),
        "Cos" => Op::Unary(Unary::Cos),
        "Tan" => Op::Unary(Unary::Tan),
        "Asin" => Op::Unary(Unary::Asin),
        "Acos" => Op::Unary(Unary::Acos),
        "Atan" => Op::Unary(Unary::Atan),
        "Sinh" => Op::Unary(Unary::Sinh),
        "Cosh" => Op::Unary(Unary::Cosh),
        "Asinh" => Op::Unary(Unary::Asinh),
        "Acosh" => Op::Unary(Unary::Acosh),
        "Atanh" => Op::Unary(Unary::Atanh),
        "Sign" => Op::Unary(Unary::Sign),
        "Elu" => Op::Unary(Unary::Elu { alpha: a.float_or("alpha", 1.0)? }),
        "Selu" => Op::Unary(Unary::Selu {
            alpha: a.float_or("alpha", 1.673_263_192_176_818_847_656_25)?,
            gamma: a.float_or("gamma", 1.050_701_022_148_132_324_218_75)?,
        }),
        "Celu" => Op::Unary(Unary::Celu { alpha: a.float_or("alpha", 1.0)? }),
        "ThresholdedRelu" => Op::Unary(Unary::ThresholdedRelu { alpha: a.float_or("alpha", 1.0)? }),
        "Softsign" => Op::Unary(Unary::Softsign),
        "Mish" => Op::Unary(Unary::Mish),
        "Shrink" => Op::Unary(Unary::Shrink { bias: a.float_or("bias", 0.0)?, lambd: a.float_or("lambd", 0.5)? }),
        "Gelu" => {
            let approximate = match a.string("approximate")?.as_deref() {
                None | Some("none") => GeluApprox::None,
                Some("tanh") => GeluApprox::Tanh,
                Some(other) => return Err(format!("approximate must be 'none' or 'tanh', found '{other}'")),
            };
            Op::Unary(Unary::Gelu { approximate })
        }
        "Equal" => Op::Compare(Compare::Equal),
        "Less" => Op::Compare(Compare::Less),
        "LessOrEqual" => Op::Compare(Compare::LessOrEqual),
        "Greater" => Op::Compare(Compare::Greater),
        "GreaterOrEqual" => Op::Compare(Compare::GreaterOrEqual),
        "And" => Op::Logic(Logic::And),
        "Or" => Op::Logic(Logic::Or),
        "Xor" => Op::Logic(Logic::Xor),
        "Not" => Op::Not,
        "Where" => Op::Where,
        "Expand" => Op::Expand,
        "Clip" => Op::Clip,
        "Cast" => {
            let to = a.int("to")?.ok_or("missing required attribute 'to'")?;
            match DType::from_onnx(to as i32) {
                DType::Other(_) => return Ok(Parsed::Opaque("Cast to an element type Bolt does not compute with")),
                to => Op::Cast { to, saturate: a.bool_or("saturate", true)? },
            }
        }
        "Transpose" => Op::Transpose { perm: a.usizes("perm")? },
        "Reshape" => Op::Reshape { allowzero: a.bool_or("allowzero", false)? },
        "Flatten" => Op::Flatten { axis: a.int_or("axis", 1)? },
        "Squeeze" => Op::Squeeze,
        "Unsqueeze" => Op::Unsqueeze,
        "Concat" => Op::Concat { axis: a.int("axis")?.ok_or("missing required attribute 'axis'")? },
        "Split" => Op::Split { axis: a.int_or("axis", 0)?, outputs: node.output.len() },
        "Slice" => Op::Slice,
        "Gather" => Op::Gather { axis: a.int_or("axis", 0)? },
        "Shape" => Op::Shape { start: a.int_or("start", 0)?, end: a.int("end")? },
        "Constant" => match constant_value(&a)? {
            Some(t) => Op::Constant { value: Arc::new(t) },
            None => {
                return Ok(Parsed::Opaque(
                    "Constant holding strings, another type Bolt does not compute with, or a sparse tensor",
                ))
            }
        },
        "Identity" => Op::Identity,
        // Inference is Dropout's eval mode: its output is its input. With a mask output (all
        // true in inference; caffe2 exports name one nobody reads) or a training_mode input
        // (which may switch training on at run time) the reference computes it, and the
        // planner makes it an Identity where nothing reads the mask and training stays off.
        "Dropout"
            if node.output.iter().skip(1).any(|o| !o.is_empty())
                || node.input.get(2).is_some_and(|t| !t.is_empty()) =>
        {
            return Ok(Parsed::Opaque(HOST_COMPUTED))
        }
        "Dropout" => Op::Identity,
        "ConstantOfShape" => match a.tensor("value")? {
            Some(t) if t.len() != 1 => return Err(format!("value must hold one element, holds {}", t.len())),
            Some(t) if matches!(t.dtype(), DType::Other(_)) => {
                return Ok(Parsed::Opaque("ConstantOfShape of a type Bolt does not compute with"))
            }
            value => Op::ConstantOfShape { value: value.map(Arc::new) },
        },
        "Range" => Op::Range,
        "DepthToSpace" => {
            let blocksize = a.int("blocksize")?.ok_or("missing required attribute 'blocksize'")?;
            if blocksize < 1 {
                return Err(format!("blocksize must be >= 1, found {blocksize}"));
            }
            let crd = match a.string("mode")?.as_deref().unwrap_or("DCR") {
                "DCR" => false,
                "CRD" => true,
                other => return Err(format!("mode must be DCR or CRD, found {other:?}")),
            };
            Op::DepthToSpace { blocksize: blocksize as usize, crd }
        }
        "MaxPool" => {
            let storage_order = a.int_or("storage_order", 0)?;
            Op::MaxPool { window: window(&a)?, ceil_mode: a.bool_or("ceil_mode", false)?, storage_order }
        }
        "AveragePool" => Op::AveragePool {
            window: window(&a)?,
            ceil_mode: a.bool_or("ceil_mode", false)?,
            count_include_pad: a.bool_or("count_include_pad", false)?,
        },
        "GlobalAveragePool" => Op::GlobalAveragePool,
        "GlobalMaxPool" => Op::GlobalMaxPool,
        "Pad" => Op::Pad { mode: pad_mode(&a)? },
        "Softmax" => Op::Softmax { axis: a.int_or("axis", -1)? },
        "LogSoftmax" => Op::LogSoftmax { axis: a.int_or("axis", -1)? },
        "LayerNormalization" => {
            let stash = a.int_or("stash_type", 1)?;
            Op::LayerNormalization {
                axis: a.int_or("axis", -1)?,
                epsilon: a.float_or("epsilon", 1e-5)?,
                stash_type: DType::from_onnx(stash as i32),
            }
        }
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceL1" | "ReduceL2" | "ReduceSumSquare"
        | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceProd" => {
            let (kind, axes_input_since) = match node.op_type() {
                "ReduceMean" => (ReduceKind::Mean, 18),
                "ReduceSum" => (ReduceKind::Sum, 13),
                "ReduceMax" => (ReduceKind::Max, 18),
                "ReduceMin" => (ReduceKind::Min, 18),
                "ReduceL1" => (ReduceKind::L1, 18),
                "ReduceL2" => (ReduceKind::L2, 18),
                "ReduceSumSquare" => (ReduceKind::SumSquare, 18),
                "ReduceLogSum" => (ReduceKind::LogSum, 18),
                "ReduceLogSumExp" => (ReduceKind::LogSumExp, 18),
                _ => (ReduceKind::Prod, 18),
            };
            Op::Reduce {
                kind,
                // Axes were an attribute before they became input 1.
                axes: if opset < axes_input_since { a.ints("axes")? } else { None },
                keepdims: a.bool_or("keepdims", true)?,
                noop_with_empty_axes: a.bool_or("noop_with_empty_axes", false)?,
            }
        }
        "Resize" => Op::Resize(resize(&a)?),
        "RNN" | "GRU" | "LSTM" => match recurrent(node.op_type(), &a)? {
            Ok(r) => Op::Recurrent(r),
            Err(why) => return Ok(Parsed::Opaque(why)),
        },
        op if crate::reference::ops::host::COMPUTED.contains(&op) => return Ok(Parsed::Opaque(HOST_COMPUTED)),
        _ => return Ok(Parsed::Opaque("operator outside Bolt's supported list")),
    };
    Ok(Parsed::Op(op))
}

/// A recurrent layer's attributes; `Ok(Err(why))` for valid ones Bolt does not compute.
fn recurrent(op_type: &str, a: &Attrs) -> Result<Result<Recurrent, &'static str>, String> {
    let cell = match op_type {
        "RNN" => Cell::Rnn,
        "GRU" => Cell::Gru { linear_before_reset: a.bool_or("linear_before_reset", false)? },
        _ => Cell::Lstm { input_forget: a.bool_or("input_forget", false)? },
    };
    let direction = match a.string("direction")?.as_deref().unwrap_or("forward") {
        "forward" => RnnDirection::Forward,
        "reverse" => RnnDirection::Reverse,
        "bidirectional" => RnnDirection::Bidirectional,
        other => return Err(format!("direction '{other}' is not one of forward, reverse, bidirectional")),
    };
    let hidden_size = match a.int("hidden_size")? {
        None => None,
        Some(h) if h > 0 => Some(h as usize),
        Some(h) => return Err(format!("hidden_size must be positive, found {h}")),
    };
    let clip = match a.has("clip").then(|| a.float_or("clip", 0.0)).transpose()? {
        Some(c) if !(c > 0.0) => return Err(format!("clip must be positive, found {c}")),
        c => c,
    };
    let batch_major = match a.int_or("layout", 0)? {
        0 => false,
        1 => true,
        l => return Err(format!("layout must be 0 or 1, found {l}")),
    };
    let per_direction = cell.default_activations().len();
    let names = a.strings("activations")?.unwrap_or_default();
    let activations = if names.is_empty() {
        cell.default_activations().repeat(direction.count())
    } else {
        if names.len() != per_direction * direction.count() {
            return Err(format!(
                "activations lists {} functions; a {op_type} with {} direction(s) takes {}",
                names.len(),
                direction.count(),
                per_direction * direction.count()
            ));
        }
        // Parameters are consumed in order by the functions that take them (onnxruntime's rule).
        let mut alphas = a.floats("activation_alpha")?.unwrap_or_default().into_iter();
        let mut betas = a.floats("activation_beta")?.unwrap_or_default().into_iter();
        let mut out = Vec::with_capacity(names.len());
        for name in &names {
            out.push(match name.to_ascii_lowercase().as_str() {
                "sigmoid" => Unary::Sigmoid,
                "tanh" => Unary::Tanh,
                "relu" => Unary::Relu,
                "softplus" => Unary::Softplus,
                "leakyrelu" => Unary::LeakyRelu { alpha: alphas.next().unwrap_or(0.01) },
                "hardsigmoid" => {
                    Unary::HardSigmoid { alpha: alphas.next().unwrap_or(0.2), beta: betas.next().unwrap_or(0.5) }
                }
                "affine" | "thresholdedrelu" | "scaledtanh" | "elu" | "softsign" => return Ok(Err(
                    "a recurrent activation outside Bolt's list (Affine, ThresholdedRelu, ScaledTanh, Elu, Softsign)",
                )),
                other => return Err(format!("unknown recurrent activation '{other}'")),
            });
        }
        out
    };
    Ok(Ok(Recurrent { cell, direction, hidden_size, activations, clip, batch_major }))
}

pub(super) fn pad_mode(a: &Attrs) -> Result<PadMode, String> {
    match a.string("mode")?.as_deref().unwrap_or("constant") {
        "constant" => Ok(PadMode::Constant),
        "reflect" => Ok(PadMode::Reflect),
        "edge" => Ok(PadMode::Edge),
        "wrap" => Ok(PadMode::Wrap),
        other => Err(format!("Pad mode '{other}' is not one of constant, reflect, edge, wrap")),
    }
}

fn window(a: &Attrs) -> Result<Window, String> {
    let auto_pad = match a.string("auto_pad")?.as_deref() {
        None | Some("NOTSET") => AutoPad::NotSet,
        Some("SAME_UPPER") => AutoPad::SameUpper,
        Some("SAME_LOWER") => AutoPad::SameLower,
        Some("VALID") => AutoPad::Valid,
        Some(other) => return Err(format!("unknown auto_pad '{other}'")),
    };
    Ok(Window {
        kernel_shape: a.usizes("kernel_shape")?,
        strides: a.usizes("strides")?,
        pads: a.usizes("pads")?,
        dilations: a.usizes("dilations")?,
        auto_pad,
    })
}

fn constant_value(a: &Attrs) -> Result<Option<Tensor>, String> {
    if a.tensor_type("value")?.is_some_and(|d| d.size_bytes().is_none()) {
        return Ok(None);
    }
    if let Some(t) = a.tensor("value")? {
        return Ok(Some(t));
    }
    if let Some(t) = a.ints("value_ints")? {
        return Ok(Some(Tensor::from_i64(vec![t.len()], t)));
    }
    if let Some(v) = a.int("value_int")? {
        return Ok(Some(Tensor::from_i64(vec![], vec![v])));
    }
    if let Some(v) = a.floats("value_floats")? {
        return Ok(Some(Tensor::from_f32(vec![v.len()], v)));
    }
    if a.has("value_float") {
        return Ok(Some(Tensor::scalar_f32(a.float_or("value_float", 0.0)?)));
    }
    if a.has("value_string") || a.has("value_strings") || a.has("sparse_value") {
        return Ok(None);
    }
    Err("Constant has no value attribute".into())
}

fn resize(a: &Attrs) -> Result<ResizeAttrs, String> {
    let s = |name: &str, default: &str| -> Result<String, String> {
        Ok(a.string(name)?.unwrap_or_else(|| default.to_string()))
    };
    let mode = match s("mode", "nearest")?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" => ResizeMode::Linear,
        "cubic" => ResizeMode::Cubic,
        other => return Err(format!("unknown mode '{other}'")),
    };
    let coord = match s("coordinate_transformation_mode", "half_pixel")?.as_str() {
        "half_pixel" => CoordTransform::HalfPixel,
        "half_pixel_symmetric" => CoordTransform::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordTransform::PytorchHalfPixel,
        "align_corners" => CoordTransform::AlignCorners,
        "asymmetric" => CoordTransform::Asymmetric,
        "tf_crop_and_resize" => CoordTransform::TfCropAndResize,
        other => return Err(format!("unknown coordinate_transformation_mode '{other}'")),
    };
    let nearest = match s("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(format!("unknown nearest_mode '{other}'")),
    };
    let aspect = match s("keep_aspect_ratio_policy", "stretch")?.as_str() {
        "stretch" => AspectPolicy::Stretch,
        "not_larger" => AspectPolicy::NotLarger,
        "not_smaller" => AspectPolicy::NotSmaller,
        other => return Err(format!("unknown keep_aspect_ratio_policy '{other}'")),
    };
    Ok(ResizeAttrs {
        mode,
        coord,
        nearest,
        cubic_coeff_a: a.float_or("cubic_coeff_a", -0.75)?,
        exclude_outside: a.bool_or("exclude_outside", false)?,
        extrapolation_value: a.float_or("extrapolation_value", 0.0)?,
        antialias: a.bool_or("antialias", false)?,
        axes: a.ints("axes")?,
        aspect,
    })
}
