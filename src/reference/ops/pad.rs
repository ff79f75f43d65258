//! Pad: every output element from its input coordinate per axis, or the constant.

use super::{opt, req, OpResult};
use crate::ir::{PadMode, Tensor};

/// ONNX Pad of `x` by `pads` (begins then ends; negative ones crop) over `axes` (every axis
/// when absent), new elements by `mode` (`value` for Constant, 0 when absent).
pub fn pad(x: &Tensor, pads: &Tensor, value: Option<&Tensor>, axes: Option<&Tensor>, mode: PadMode) -> OpResult {
    let ints =
        |t: &Tensor, what: &str| t.as_i64_vec().ok_or_else(|| format!("{what} must be integers, is {}", t.dtype()));
    let pads = ints(pads, "pads")?;
    let axes = axes.map(|a| ints(a, "axes")).transpose()?;
    let per_axis = crate::ir::infer::pads_per_axis(&pads, axes.as_deref(), x.rank())?;
    let out_shape: Vec<usize> = x
        .shape
        .iter()
        .zip(&per_axis)
        .map(|(&d, &(b, e))| {
            let n = d as i64 + b + e;
            if n < 0 {
                Err(format!("pads {b}, {e} crop an axis of {d} below nothing"))
            } else {
                Ok(n as usize)
            }
        })
        .collect::<Result<_, _>>()?;
    if mode != PadMode::Constant && x.shape.iter().zip(&out_shape).any(|(&d, &o)| d == 0 && o > 0) {
        return Err(format!("{mode:?} padding of an empty axis"));
    }
    let constant = value.map(|v| v.to_f64_vec().first().copied().unwrap_or(0.0)).unwrap_or(0.0);
    // The input coordinate output coordinate `o` of an axis of `d` reads, or None (constant).
    let source = |o: usize, d: usize, begin: i64| -> Option<usize> {
        let c = o as i64 - begin;
        let d = d as i64;
        if (0..d).contains(&c) {
            return Some(c as usize);
        }
        match mode {
            PadMode::Constant => None,
            PadMode::Edge => Some(c.clamp(0, d - 1) as usize),
            PadMode::Wrap => Some(c.rem_euclid(d) as usize),
            // Period 2(d - 1) without repeating the edges: ... 2 1 | 0 1 2 | 1 0 ...
            PadMode::Reflect if d == 1 => Some(0),
            PadMode::Reflect => {
                let p = 2 * (d - 1);
                let m = c.rem_euclid(p);
                Some((if m < d { m } else { p - m }) as usize)
            }
        }
    };
    let xs = x.to_f64_vec();
    let in_strides = crate::ir::strides(&x.shape);
    let total: usize = out_shape.iter().product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; out_shape.len()];
    for _ in 0..total {
        let mut at = Some(0usize);
        for (k, &o) in idx.iter().enumerate() {
            at = at.and_then(|a| source(o, x.shape[k], per_axis[k].0).map(|c| a + c * in_strides[k]));
        }
        out.push(at.map_or(constant, |a| xs[a]));
        for k in (0..idx.len()).rev() {
            idx[k] += 1;
            if idx[k] < out_shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    let t = if x.dtype().is_float() {
        Tensor::from_f64_as(x.dtype(), out_shape, &out)
    } else {
        let v: Vec<i64> = out.iter().map(|&f| f as i64).collect();
        Tensor::from_i64_as(x.dtype(), out_shape, &v)
    };
    Ok(vec![t.ok_or_else(|| format!("Pad of {} tensors", x.dtype()))?])
}

/// Pad's inputs in node order.
pub fn eval(inputs: &[Option<&Tensor>], mode: PadMode) -> OpResult {
    pad(req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2), opt(inputs, 3), mode)
}
