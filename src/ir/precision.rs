//! Changing a graph's floating-point precision: what a user does to run a model in f16 (the
//! precision Bolt's tensor-core kernels compute in), and how tests obtain f16 graphs.

use super::{DType, Graph, Op, Tensor, TensorType};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Rewrites `g` so every float tensor (inputs, weights, constants, intermediates, outputs)
/// has type `to`. Casts to a float type are retargeted to `to`; types are re-inferred.
pub fn convert_floats(g: &Graph, to: DType) -> Result<Graph> {
    if !to.is_float() {
        return Err(Error::Model(format!("cannot convert float tensors to {to}")));
    }
    convert_graph(g, to, true)
}

/// [`convert_floats`]; `If` branches are converted alike and typed by their `If` (`infer`
/// false: a branch's inputs are typed by the enclosing graph).
fn convert_graph(g: &Graph, to: DType, infer: bool) -> Result<Graph> {
    let convert = |t: &Tensor| -> Tensor {
        if t.dtype().is_float() && t.dtype() != to {
            Tensor::from_f64_as(to, t.shape.clone(), &t.to_f64_vec()).expect("float dtype")
        } else {
            t.clone()
        }
    };
    let mut out = g.clone();
    out.initializers = g.initializers.iter().map(|(k, t)| (k.clone(), Arc::new(convert(t)))).collect();
    let keep: std::collections::HashSet<&String> = g.inputs.iter().chain(g.initializers.keys()).collect();
    out.types = g
        .types
        .iter()
        .filter(|(k, _)| keep.contains(k))
        .map(|(k, t)| {
            let dtype = if t.dtype.is_float() { to } else { t.dtype };
            (k.clone(), TensorType { dtype, shape: t.shape.clone() })
        })
        .collect();
    for n in &mut out.nodes {
        match &mut n.op {
            Op::Constant { value } => *value = Arc::new(convert(value)),
            Op::Cast { to: target, .. } if target.is_float() => *target = to,
            Op::If { then_branch, else_branch } => {
                *then_branch = Arc::new(convert_graph(then_branch, to, false)?);
                *else_branch = Arc::new(convert_graph(else_branch, to, false)?);
            }
            Op::Loop { body, .. } => *body = Arc::new(convert_graph(body, to, false)?),
            Op::Scan(s) => {
                let body = convert_graph(&s.body, to, false)?;
                *s = Arc::new(crate::ir::ScanAttrs { body, ..(**s).clone() });
            }
            // LayerNormalization's statistics stay in its stash type (f32), as on GPUs.
            _ => {}
        }
    }
    if infer {
        super::infer::infer_graph(&mut out, &HashMap::new())?;
    }
    Ok(out)
}
