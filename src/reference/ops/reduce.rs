//! The reductions Bolt has no kernel for: ReduceProd (TF's Tensordot shape products),
//! ReduceSumSquare, ReduceL1, ReduceL2 (speaker-embedding norms), ReduceLogSum and
//! ReduceLogSumExp. Axes come from the attribute (before opset 18) or input 1; over no axes
//! (`noop_with_empty_axes`) the element-wise part still applies, as ONNX specifies (the square
//! of ReduceSumSquare, the log of ReduceLogSum).

use super::host::{ints, Attrs};
use super::{opt, req, OpResult};
use crate::ir::infer::norm_axis;
use crate::ir::{strides, Tensor};

/// Evaluates reduction `op_type` (one of the six above).
pub fn eval(op_type: &str, a: Attrs, inputs: &[Option<&Tensor>]) -> OpResult {
    let x = req(inputs, 0)?;
    let dtype = x.dtype();
    if !(dtype.is_float() || dtype.is_integer()) {
        return Err(format!("{op_type} is not defined on {dtype}"));
    }
    let axes = match (a.ints("axes"), opt(inputs, 1)) {
        (Some(v), _) => v,
        (None, Some(t)) => ints(t, "axes")?,
        (None, None) => vec![],
    };
    let rank = x.rank();
    let mut reduced = vec![axes.is_empty() && a.int("noop_with_empty_axes", 0) == 0; rank];
    for &ax in &axes {
        if std::mem::replace(&mut reduced[norm_axis(ax, rank, false)?], true) {
            return Err(format!("axis {ax} is repeated in {axes:?}"));
        }
    }
    let kept: Vec<usize> = x.shape.iter().zip(&reduced).map(|(&d, &r)| if r { 1 } else { d }).collect();
    // Each input element's output element: its coordinates with the reduced ones dropped.
    let st = strides(&kept);
    let steps: Vec<i64> = (0..rank).map(|d| if reduced[d] { 0 } else { st[d] as i64 }).collect();
    let target = super::layout::strided_index(&x.shape, &steps, 0);
    let n_out: usize = kept.iter().product();
    let mut shape = kept.clone();
    if a.int("keepdims", 1) == 0 {
        shape = x.shape.iter().zip(&reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).collect();
    }
    let exact_int = dtype.is_integer() && matches!(op_type, "ReduceProd" | "ReduceSumSquare" | "ReduceL1");
    let out = if exact_int {
        // Integers in i64, wrapping as the type's own arithmetic would.
        let v = ints(x, "input")?;
        let mut acc = vec![i64::from(op_type == "ReduceProd"); n_out];
        for (&t, &v) in target.iter().zip(&v) {
            acc[t] = match op_type {
                "ReduceProd" => acc[t].wrapping_mul(v),
                "ReduceSumSquare" => acc[t].wrapping_add(v.wrapping_mul(v)),
                _ => acc[t].wrapping_add(v.wrapping_abs()),
            };
        }
        Tensor::from_i64_as(dtype, shape, &acc)
    } else {
        let v = x.to_f64_vec();
        // LogSumExp shifts by each output's largest finite value, so exp cannot overflow.
        let mut shift = vec![0.0f64; n_out];
        if op_type == "ReduceLogSumExp" {
            let mut max = vec![f64::NEG_INFINITY; n_out];
            for (&t, &v) in target.iter().zip(&v) {
                if v.is_finite() {
                    max[t] = max[t].max(v);
                }
            }
            shift = max.into_iter().map(|m| if m.is_finite() { m } else { 0.0 }).collect();
        }
        let mut acc = vec![if op_type == "ReduceProd" { 1.0 } else { 0.0 }; n_out];
        for (&t, &v) in target.iter().zip(&v) {
            match op_type {
                "ReduceProd" => acc[t] *= v,
                "ReduceSumSquare" | "ReduceL2" => acc[t] += v * v,
                "ReduceL1" => acc[t] += v.abs(),
                "ReduceLogSum" => acc[t] += v,
                _ => acc[t] += (v - shift[t]).exp(),
            }
        }
        for (a, s) in acc.iter_mut().zip(&shift) {
            *a = match op_type {
                "ReduceL2" => a.sqrt(),
                "ReduceLogSum" => a.ln(),
                "ReduceLogSumExp" => a.ln() + s,
                _ => *a,
            };
        }
        Tensor::from_f64_as(dtype, shape, &acc)
    };
    Ok(vec![out.ok_or_else(|| format!("{op_type} of {dtype}"))?])
}
