//! Indexing ops Bolt leaves to the host: GatherElements (loss and decoder heads), GatherND and
//! ScatterND (TF and torch exports' advanced indexing). Negative indices count from the end
//! of their axis, as ONNX allows; an index outside `[-n, n-1]` is an error naming it.

use super::host::{ints, scatter_into};
use super::{opt, req, OpResult};
use crate::ir::infer::norm_axis;
use crate::ir::{strides, Tensor};

/// Index `i` into an axis of size `n`, counted from the end when negative.
fn within(i: i64, n: usize, what: impl Fn() -> String) -> Result<usize, String> {
    let j = if i < 0 { i + n as i64 } else { i };
    if (0..n as i64).contains(&j) {
        Ok(j as usize)
    } else {
        Err(format!("index {i} is out of range for {} of size {n}", what()))
    }
}

/// `out[p] = data[p with its coordinate on axis replaced by indices[p]]`: the output has the
/// indices' shape, which may be smaller than the data's on the other axes (as onnxruntime and
/// torch.gather allow).
pub fn gather_elements(data: Result<&Tensor, String>, indices: Result<&Tensor, String>, axis: i64) -> OpResult {
    let (data, indices) = (data?, indices?);
    let rank = data.rank();
    if indices.rank() != rank || rank == 0 {
        return Err(format!("indices {:?} must have the data's rank ({:?}), at least 1", indices.shape, data.shape));
    }
    let a = norm_axis(axis, rank, false)?;
    if let Some(d) = (0..rank).find(|&d| d != a && indices.shape[d] > data.shape[d]) {
        return Err(format!("indices {:?} exceed the data {:?} on axis {d}", indices.shape, data.shape));
    }
    let idx = ints(indices, "indices")?;
    let ds = strides(&data.shape);
    let mut src = Vec::with_capacity(idx.len());
    for (p, &i) in idx.iter().enumerate() {
        let (mut rest, mut s) = (p, 0);
        for d in (0..rank).rev() {
            let c = rest % indices.shape[d];
            rest /= indices.shape[d];
            s += if d == a { within(i, data.shape[a], || format!("axis {a}"))? } else { c } * ds[d];
        }
        src.push(s);
    }
    Ok(vec![Tensor { data: data.data.gather(&src), shape: indices.shape.clone() }])
}

/// Data offsets of the slices an [.., k] index tensor selects, after `batch` leading axes
/// shared by data and indices; also the slice length (the data's axes after batch + k) and
/// the leading (batch + index) shape. GatherND reads these slices, ScatterND writes them.
fn nd_slices(data: &Tensor, indices: &Tensor, batch: usize) -> Result<(Vec<usize>, usize, Vec<usize>), String> {
    let (r, q) = (data.rank(), indices.rank());
    if q == 0 {
        return Err("indices must have rank >= 1".into());
    }
    let k = indices.shape[q - 1];
    if batch >= q || batch > r || k > r - batch {
        return Err(format!(
            "indices {:?} with batch_dims {batch} cannot index data {:?}: the last axis of the indices \
             ({k}) must be at most the data's rank after the batch axes ({})",
            indices.shape,
            data.shape,
            r.saturating_sub(batch)
        ));
    }
    if indices.shape[..batch] != data.shape[..batch] {
        return Err(format!("the {batch} batch axes of indices {:?} and data {:?} differ", indices.shape, data.shape));
    }
    let idx = ints(indices, "indices")?;
    let ds = strides(&data.shape);
    let slice: usize = data.shape[batch + k..].iter().product();
    // Index tuples in all, and per batch (the batch axes lead both tensors).
    let tuples: usize = indices.shape[..q - 1].iter().product();
    let per_batch: usize = indices.shape[batch..q - 1].iter().product();
    let mut offsets = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let mut off = if batch == 0 { 0 } else { t / per_batch * ds[batch - 1] };
        for (j, &i) in idx[t * k..(t + 1) * k].iter().enumerate() {
            let d = batch + j;
            off += within(i, data.shape[d], || format!("data axis {d}"))? * ds[d];
        }
        offsets.push(off);
    }
    Ok((offsets, slice, indices.shape[..q - 1].to_vec()))
}

/// Slices of `data` gathered by index tuples (the last axis of `indices`), the first
/// `batch_dims` axes shared: output [indices.shape[..-1], data.shape[batch_dims + k..]].
pub fn gather_nd(data: Result<&Tensor, String>, indices: Result<&Tensor, String>, batch_dims: i64) -> OpResult {
    let (data, indices) = (data?, indices?);
    let batch = usize::try_from(batch_dims).map_err(|_| format!("batch_dims {batch_dims} must be >= 0"))?;
    let (offsets, slice, lead) = nd_slices(data, indices, batch)?;
    let k = indices.shape[indices.rank() - 1];
    let src: Vec<usize> = offsets.iter().flat_map(|&o| o..o + slice).collect();
    let shape = [lead, data.shape[batch + k..].to_vec()].concat();
    Ok(vec![Tensor { data: data.data.gather(&src), shape }])
}

/// `data` with the slices the index tuples select replaced by (or combined by `reduction`
/// with) `updates`, whose shape is [indices.shape[..-1], data.shape[k..]]; in index order.
pub fn scatter_nd(inputs: &[Option<&Tensor>], reduction: &str) -> OpResult {
    let (data, indices, updates) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if opt(inputs, 3).is_some() {
        return Err("ScatterND takes three inputs".into());
    }
    let (offsets, slice, lead) = nd_slices(data, indices, 0)?;
    let k = indices.shape[indices.rank() - 1];
    let want = [lead, data.shape[k..].to_vec()].concat();
    if updates.shape != want {
        return Err(format!(
            "updates have shape {:?}; indices {:?} into data {:?} need {want:?}",
            updates.shape, indices.shape, data.shape
        ));
    }
    let targets: Vec<usize> = offsets.iter().flat_map(|&o| o..o + slice).collect();
    Ok(vec![scatter_into(data, updates, &targets, reduction)?])
}
