//! Older operator versions in today's form. From opset 7 (numpy broadcasting) to 10, Bolt's ops
//! mean what they mean today except where an attribute became an input (Slice's starts/ends/axes
//! at 10; Pad's pads and value, Clip's min and max at 11; Squeeze's and Unsqueeze's axes and
//! Split's sizes at 13; the host-only DFT's axis at 20)
//! or an op was renamed (Upsample, then Resize-10, became Resize-11 with explicit coordinate and
//! rounding modes). Each such node is imported as today's op with the old attributes as constant
//! inputs, so the rest of Bolt sees one form; PyTorch exported at opset 9 by default until 1.12,
//! Keras and TF converters at 7 to 10. A version whose meaning Bolt does not compute stays with
//! the host, with the reason.

use super::attrs::Attrs;
use super::ops::{pad_mode, Parsed};
use super::proto::NodeProto;
use crate::ir::*;
use std::collections::HashMap;

/// An input of the upgraded node.
pub enum Arg {
    /// The node's own input at this position (`None` where the file left it empty).
    Input(usize),
    /// An optional input left out.
    Absent,
    /// A constant the old attribute held: becomes the initializer `<node>.<suffix>`. With
    /// `like: Some(i)` its element type is that of input i, known after inference (Clip's
    /// bounds and Pad's value have the data's type; the old attributes were floats).
    Constant { suffix: &'static str, value: Tensor, like: Option<usize> },
}

/// A node of an older version in today's form.
pub struct Upgraded {
    pub parsed: Parsed,
    pub inputs: Vec<Arg>,
}

/// Today's form of `node` when `opset` has an older version of it that Bolt rewrites; `None`
/// when the node is read as it is. `constants` are the graph's constant tensors by name
/// (initializers and Constant nodes), for what depends on a constant input's values.
pub fn upgrade(node: &NodeProto, opset: i64, constants: &HashMap<String, Tensor>) -> Result<Option<Upgraded>, String> {
    if !(node.domain().is_empty() || node.domain() == "ai.onnx") {
        return Ok(None);
    }
    let a = Attrs::new(node);
    let own = |n: usize| (0..n).map(Arg::Input);
    let ints = |name: &'static str, suffix: &'static str| -> Result<Arg, String> {
        Ok(match a.ints(name)? {
            Some(v) => Arg::Constant { suffix, value: Tensor::from_i64(vec![v.len()], v), like: None },
            None => Arg::Absent,
        })
    };
    let op = |op: Op, inputs: Vec<Arg>| Ok(Some(Upgraded { parsed: Parsed::Op(op), inputs }));
    match node.op_type() {
        "Squeeze" | "Unsqueeze" if opset < 13 && node.input.len() == 1 => {
            let op_ = if node.op_type() == "Squeeze" { Op::Squeeze } else { Op::Unsqueeze };
            op(op_, own(1).chain([ints("axes", "axes")?]).collect())
        }
        // Split-2/11's `split` attribute (the parts' sizes) is Split-13's input 1.
        "Split" if opset < 13 && node.input.len() == 1 => {
            let axis = a.int_or("axis", 0)?;
            op(Op::Split { axis, outputs: node.output.len() }, vec![Arg::Input(0), ints("split", "split")?])
        }
        "Slice" if opset < 10 => {
            for required in ["starts", "ends"] {
                if !a.has(required) {
                    return Err(format!("Slice before opset 10 needs attribute '{required}'"));
                }
            }
            op(Op::Slice, vec![Arg::Input(0), ints("starts", "starts")?, ints("ends", "ends")?, ints("axes", "axes")?])
        }
        "Pad" if opset < 11 => {
            if !a.has("pads") {
                return Err("Pad before opset 11 needs attribute 'pads'".into());
            }
            let value = a.float_or("value", 0.0)?;
            op(
                Op::Pad { mode: pad_mode(&a)? },
                vec![
                    Arg::Input(0),
                    ints("pads", "pads")?,
                    Arg::Constant { suffix: "value", value: Tensor::scalar_f32(value), like: Some(0) },
                ],
            )
        }
        "Clip" if opset < 11 => {
            // Clip-6's bounds default to the float range: an absent bound clips nothing.
            let bound = |name: &str, suffix: &'static str| -> Result<Arg, String> {
                Ok(match a.has(name) {
                    true => Arg::Constant { suffix, value: Tensor::scalar_f32(a.float_or(name, 0.0)?), like: Some(0) },
                    false => Arg::Absent,
                })
            };
            op(Op::Clip, vec![Arg::Input(0), bound("min", "min")?, bound("max", "max")?])
        }
        "BatchNormalization" if opset < 9 && a.int_or("spatial", 1)? == 0 => Ok(Some(Upgraded {
            parsed: Parsed::Opaque("BatchNormalization with spatial=0 (statistics per element, before opset 9)"),
            inputs: own(node.input.len()).collect(),
        })),
        // DFT-17's axis attribute (default 1) is DFT-20's input 2 (default -2).
        "DFT" if opset < 20 => Ok(Some(Upgraded {
            parsed: Parsed::Opaque(HOST_COMPUTED),
            inputs: vec![
                Arg::Input(0),
                Arg::Input(1),
                Arg::Constant {
                    suffix: "axis",
                    value: Tensor::from_i64(vec![], vec![a.int_or("axis", 1)?]),
                    like: None,
                },
            ],
        })),
        // Upsample (7 to 9) and Resize-10 scale by `scales` with asymmetric coordinates,
        // output size floor(input * scale).
        "Upsample" if opset < 10 => legacy_resize(node, &a, opset, constants, true),
        "Resize" if opset < 11 => legacy_resize(node, &a, opset, constants, false),
        _ => Ok(None),
    }
}

/// Upsample-7 (scales as an attribute), Upsample-9 and Resize-10 (scales as input 1) as
/// Resize-11 with `asymmetric` coordinates. Their nearest mode rounds down where an axis
/// grows and up where it shrinks (onnxruntime's rule for these versions); Resize-11 has one
/// rounding for all axes, so the scales decide it: Upsample's are >= 1 by definition,
/// Resize-10's must be constants that all grow or all shrink.
fn legacy_resize(
    node: &NodeProto,
    a: &Attrs,
    opset: i64,
    constants: &HashMap<String, Tensor>,
    upsample: bool,
) -> Result<Option<Upgraded>, String> {
    let mode = match a.string("mode")?.as_deref().unwrap_or("nearest") {
        "nearest" => ResizeMode::Nearest,
        "linear" | "bilinear" => ResizeMode::Linear,
        other => return Err(format!("unknown mode '{other}'")),
    };
    let scales_attr = upsample && opset < 9;
    let scales: Option<Vec<f64>> = if scales_attr {
        Some(
            a.floats("scales")?
                .ok_or("Upsample before opset 9 needs attribute 'scales'")?
                .iter()
                .map(|&s| s as f64)
                .collect(),
        )
    } else {
        node.input.get(1).and_then(|s| constants.get(s)).map(Tensor::to_f64_vec)
    };
    if !scales_attr && node.input.get(1).is_none_or(|s| s.is_empty()) {
        return Err(format!("{} needs input 1 (scales)", node.op_type()));
    }
    let nearest = match scales.as_deref() {
        _ if mode != ResizeMode::Nearest || upsample => NearestMode::Floor,
        Some(s) if s.iter().all(|&x| x >= 1.0) => NearestMode::Floor,
        Some(s) if s.iter().all(|&x| x <= 1.0) => NearestMode::Ceil,
        Some(_) => {
            return Ok(Some(Upgraded {
                parsed: Parsed::Opaque("Resize-10 nearest growing some axes and shrinking others (rounding per axis)"),
                inputs: (0..node.input.len()).map(Arg::Input).collect(),
            }))
        }
        None => {
            return Ok(Some(Upgraded {
                parsed: Parsed::Opaque(
                    "Resize-10 nearest with scales known only at run time (its rounding depends on them)",
                ),
                inputs: (0..node.input.len()).map(Arg::Input).collect(),
            }))
        }
    };
    let attrs = ResizeAttrs { mode, coord: CoordTransform::Asymmetric, nearest, ..Default::default() };
    let scales_arg = match scales_attr {
        true => {
            let s = scales.unwrap_or_default();
            let v: Vec<f32> = s.iter().map(|&x| x as f32).collect();
            Arg::Constant { suffix: "scales", value: Tensor::from_f32(vec![v.len()], v), like: None }
        }
        false => Arg::Input(1),
    };
    Ok(Some(Upgraded { parsed: Parsed::Op(Op::Resize(attrs)), inputs: vec![Arg::Input(0), Arg::Absent, scales_arg] }))
}
