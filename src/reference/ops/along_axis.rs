//! Host-only ops that run along one axis of their input: CumSum, TopK (beam search and
//! detection heads) and ReverseSequence (bidirectional recurrent layers over padded batches).

use super::host::{around, ints};
use super::{opt, req, OpResult};
use crate::ir::infer::norm_axis;
use crate::ir::Attrs;
use crate::ir::{DType, Tensor};
use std::cmp::Ordering;

/// The single integer a scalar (or one-element) input holds.
fn scalar_int(t: &Tensor, what: &str) -> Result<i64, String> {
    match &ints(t, what)?[..] {
        [v] => Ok(*v),
        _ => Err(format!("{what} must hold one value, has shape {:?}", t.shape)),
    }
}

/// Running sums along the axis input 1 holds: each element the sum of those before it
/// (`exclusive`: strictly before), counted from the end with `reverse`. Floats sum in f64 and
/// round once; integers wrap as the type's own addition.
pub fn cumsum(inputs: &[Option<&Tensor>], exclusive: bool, reverse: bool) -> OpResult {
    let x = req(inputs, 0)?;
    let a = norm_axis(scalar_int(req(inputs, 1)?, "axis")?, x.rank(), false)?;
    let (outer, n, inner) = around(&x.shape, a);
    let order = |k: usize| if reverse { n - 1 - k } else { k };
    let dtype = x.dtype();
    let out = if dtype.is_float() {
        let v = x.to_f64_vec();
        let mut out = vec![0.0; v.len()];
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0.0;
                for k in 0..n {
                    let p = (o * n + order(k)) * inner + i;
                    if exclusive {
                        out[p] = acc;
                        acc += v[p];
                    } else {
                        acc += v[p];
                        out[p] = acc;
                    }
                }
            }
        }
        Tensor::from_f64_as(dtype, x.shape.clone(), &out)
    } else if dtype.is_integer() {
        let v = ints(x, "input")?;
        let mut out = vec![0i64; v.len()];
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = 0i64;
                for k in 0..n {
                    let p = (o * n + order(k)) * inner + i;
                    if exclusive {
                        out[p] = acc;
                        acc = acc.wrapping_add(v[p]);
                    } else {
                        acc = acc.wrapping_add(v[p]);
                        out[p] = acc;
                    }
                }
            }
        }
        Tensor::from_i64_as(dtype, x.shape.clone(), &out)
    } else {
        None
    };
    Ok(vec![out.ok_or_else(|| format!("CumSum is not defined on {dtype}"))?])
}

/// The `k` largest (or smallest) elements along `axis` and their indices, sorted; of equal
/// values the lower index comes first, as ONNX specifies. NaN counts as larger than any
/// number (numpy's sort order). K is input 1 (TopK-10 on) or the `k` attribute (TopK-1).
pub fn top_k(inputs: &[Option<&Tensor>], a: Attrs) -> OpResult {
    let x = req(inputs, 0)?;
    let k = match opt(inputs, 1) {
        Some(k) => scalar_int(k, "K")?,
        None if a.has("k") => a.int("k").unwrap_or(0),
        None => return Err("TopK needs K (input 1)".into()),
    };
    let largest = a.int("largest").unwrap_or(1) != 0;
    let ax = norm_axis(a.int("axis").unwrap_or(-1), x.rank(), false)?;
    let (outer, n, inner) = around(&x.shape, ax);
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= n)
        .ok_or_else(|| format!("K = {k} must be between 0 and the size {n} of axis {ax}"))?;
    let dtype = x.dtype();
    // Ascending order of two flat positions' values; integers compare exactly.
    let cmp: Box<dyn Fn(usize, usize) -> Ordering> = if dtype.is_float() {
        let v = x.to_f64_vec();
        Box::new(move |p, q| match (v[p].is_nan(), v[q].is_nan()) {
            (false, false) => v[p].partial_cmp(&v[q]).expect("not NaN"),
            (p, q) => p.cmp(&q),
        })
    } else if dtype == DType::U64 {
        let v: Vec<u64> = ints(x, "input")?.into_iter().map(|i| i as u64).collect();
        Box::new(move |p, q| v[p].cmp(&v[q]))
    } else if dtype.is_integer() {
        let v = ints(x, "input")?;
        Box::new(move |p, q| v[p].cmp(&v[q]))
    } else {
        return Err(format!("TopK is not defined on {dtype}"));
    };
    let (mut src, mut idx) = (vec![0usize; outer * k * inner], vec![0i64; outer * k * inner]);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * n + j) * inner + i;
            order.clear();
            order.extend(0..n);
            // Stable, so equal values keep the lower index first in either direction.
            order.sort_by(|&p, &q| {
                let c = cmp(at(p), at(q));
                if largest {
                    c.reverse()
                } else {
                    c
                }
            });
            for (j, &from) in order[..k].iter().enumerate() {
                let t = (o * k + j) * inner + i;
                src[t] = at(from);
                idx[t] = from as i64;
            }
        }
    }
    let mut shape = x.shape.clone();
    shape[ax] = k;
    Ok(vec![Tensor { data: x.data.gather(&src), shape: shape.clone() }, Tensor::from_i64(shape, idx)])
}

/// Each batch entry's first `sequence_lens[b]` steps along the time axis reversed, the rest
/// copied; `batch_axis` and `time_axis` are 0 and 1 in either order.
pub fn reverse_sequence(inputs: &[Option<&Tensor>], batch_axis: i64, time_axis: i64) -> OpResult {
    let (x, lens) = (req(inputs, 0)?, req(inputs, 1)?);
    if x.rank() < 2 {
        return Err(format!("input must have rank >= 2, has shape {:?}", x.shape));
    }
    let (ba, ta) = match (batch_axis, time_axis) {
        (0, 1) => (0, 1),
        (1, 0) => (1, 0),
        _ => return Err(format!("batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 in some order")),
    };
    let (batch, time) = (x.shape[ba], x.shape[ta]);
    let lens = ints(lens, "sequence_lens")?;
    if lens.len() != batch {
        return Err(format!("sequence_lens has {} values for a batch of {batch}", lens.len()));
    }
    if let Some(l) = lens.iter().find(|&&l| l < 0 || l as usize > time) {
        return Err(format!("sequence length {l} is outside [0, {time}] (the time axis)"));
    }
    let inner: usize = x.shape[2..].iter().product();
    // Row-major position of (batch b, time t) within axes 0 and 1.
    let pos = |b: usize, t: usize| if ba == 0 { b * time + t } else { t * batch + b };
    let mut src = Vec::with_capacity(x.len());
    for p in 0..x.len() / inner.max(1) {
        let (b, t) = if ba == 0 { (p / time, p % time) } else { (p % batch, p / batch) };
        let len = lens[b] as usize;
        let from = if t < len { pos(b, len - 1 - t) } else { p };
        src.extend(from * inner..(from + 1) * inner);
    }
    Ok(vec![Tensor { data: x.data.gather(&src), shape: x.shape.clone() }])
}
