//! Data-movement ops: Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Concat, Slice, Gather,
//! Shape. All are index computations followed by one gather of the data.

use super::{req, OpResult};
use crate::ir::infer::{norm_axis, shape_range, slice_axes};
use crate::ir::{strides, DType, Tensor, TensorData};

fn ints(t: &Tensor, what: &str) -> Result<Vec<i64>, String> {
    t.as_i64_vec().ok_or_else(|| format!("{what} must be an integer tensor, is {}", t.dtype()))
}

pub fn transpose(x: &Tensor, perm: Option<&[usize]>) -> OpResult {
    let rank = x.rank();
    let perm: Vec<usize> = perm.map(<[usize]>::to_vec).unwrap_or_else(|| (0..rank).rev().collect());
    let mut seen = vec![false; rank];
    if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
        return Err(format!("perm {perm:?} is not a permutation of 0..{rank}"));
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let in_strides = strides(&x.shape);
    let permuted: Vec<i64> = perm.iter().map(|&p| in_strides[p] as i64).collect();
    Ok(vec![Tensor { data: x.data.gather(&strided_index(&out_shape, &permuted, 0)), shape: out_shape }])
}

/// Flat source indices for walking `shape` with per-dim source `strides` (negative for
/// reversed slices) from `base`.
pub(crate) fn strided_index(shape: &[usize], strides: &[i64], base: usize) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut idx = Vec::with_capacity(n);
    if n == 0 {
        return idx;
    }
    let rank = shape.len();
    let mut counter = vec![0usize; rank];
    let mut flat = base as i64;
    for _ in 0..n {
        idx.push(flat as usize);
        for d in (0..rank).rev() {
            counter[d] += 1;
            flat += strides[d];
            if counter[d] < shape[d] {
                break;
            }
            flat -= strides[d] * counter[d] as i64;
            counter[d] = 0;
        }
    }
    idx
}

pub fn reshape(x: &Tensor, shape: &Tensor, allowzero: bool) -> OpResult {
    let target = ints(shape, "shape")?;
    let mut out = Vec::with_capacity(target.len());
    let mut minus_one = None;
    for (i, &v) in target.iter().enumerate() {
        out.push(match v {
            0 if !allowzero => *x
                .shape
                .get(i)
                .ok_or_else(|| format!("shape {target:?} copies dim {i} of a rank-{} input", x.rank()))?,
            -1 if minus_one.is_none() => {
                minus_one = Some(i);
                1
            }
            v if v >= 0 => v as usize,
            _ => return Err(format!("invalid shape {target:?}")),
        });
    }
    let known: usize = out.iter().product();
    if let Some(i) = minus_one {
        if known == 0 || !x.len().is_multiple_of(known) {
            return Err(format!("cannot reshape {:?} to {target:?}", x.shape));
        }
        out[i] = x.len() / known;
    }
    if out.iter().product::<usize>() != x.len() {
        return Err(format!("cannot reshape {:?} ({} elements) to {target:?}", x.shape, x.len()));
    }
    Ok(vec![x.reshaped(out)])
}

pub fn flatten(x: &Tensor, axis: i64) -> OpResult {
    let a = norm_axis(axis, x.rank(), true)?;
    let outer: usize = x.shape[..a].iter().product();
    Ok(vec![x.reshaped(vec![outer, x.shape[a..].iter().product()])])
}

pub fn squeeze(x: &Tensor, axes: Option<&Tensor>) -> OpResult {
    let out: Vec<usize> = match axes {
        None => x.shape.iter().copied().filter(|&d| d != 1).collect(),
        Some(a) => {
            let mut drop = vec![false; x.rank()];
            for v in ints(a, "axes")? {
                let k = norm_axis(v, x.rank(), false)?;
                if x.shape[k] != 1 {
                    return Err(format!("cannot squeeze axis {k} of size {}", x.shape[k]));
                }
                drop[k] = true;
            }
            x.shape.iter().zip(&drop).filter(|(_, &d)| !d).map(|(&s, _)| s).collect()
        }
    };
    Ok(vec![x.reshaped(out)])
}

pub fn unsqueeze(x: &Tensor, axes: &Tensor) -> OpResult {
    let axes = ints(axes, "axes")?;
    let rank = x.rank() + axes.len();
    let mut ins = vec![false; rank];
    for v in axes {
        let k = norm_axis(v, rank, false)?;
        if std::mem::replace(&mut ins[k], true) {
            return Err(format!("axis {k} repeated"));
        }
    }
    let mut it = x.shape.iter();
    let out = ins.iter().map(|&i| if i { 1 } else { *it.next().expect("rank adds up") }).collect();
    Ok(vec![x.reshaped(out)])
}

pub fn concat(inputs: &[Option<&Tensor>], axis: i64) -> OpResult {
    let first = req(inputs, 0)?;
    let a = norm_axis(axis, first.rank(), false)?;
    let parts: Vec<&Tensor> =
        inputs.iter().map(|t| t.ok_or("Concat inputs cannot be omitted")).collect::<Result<_, _>>()?;
    let mut out_shape = first.shape.clone();
    out_shape[a] = 0;
    for (i, p) in parts.iter().enumerate() {
        if p.dtype() != first.dtype() || p.rank() != first.rank() {
            return Err(format!(
                "input {i} is {}{:?}, input 0 is {}{:?}",
                p.dtype(),
                p.shape,
                first.dtype(),
                first.shape
            ));
        }
        for d in 0..p.rank() {
            if d != a && p.shape[d] != first.shape[d] {
                return Err(format!(
                    "input {i} has shape {:?}, incompatible with {:?} off axis {a}",
                    p.shape, first.shape
                ));
            }
        }
        out_shape[a] += p.shape[a];
    }
    let outer: usize = first.shape[..a].iter().product();
    let inner: usize = first.shape[a + 1..].iter().product();
    // Concatenate by converting chunks through one typed buffer.
    let mut data = TensorData::zeros(first.dtype(), out_shape.iter().product()).ok_or("unsupported dtype")?;
    let row: usize = out_shape[a] * inner;
    let mut col = 0usize;
    for p in &parts {
        let chunk = p.shape[a] * inner;
        copy_blocks(&mut data, &p.data, outer, chunk, row, col);
        col += chunk;
    }
    Ok(vec![Tensor { shape: out_shape, data }])
}

/// Copies `outer` blocks of `chunk` elements from `src` into `dst` rows of length `row` at
/// column `col`.
fn copy_blocks(dst: &mut TensorData, src: &TensorData, outer: usize, chunk: usize, row: usize, col: usize) {
    macro_rules! go {
        ($($v:ident),*) => {
            match (dst, src) {
                $( (TensorData::$v(d), TensorData::$v(s)) => {
                    for o in 0..outer {
                        d[o * row + col..o * row + col + chunk].copy_from_slice(&s[o * chunk..(o + 1) * chunk]);
                    }
                } )*
                _ => unreachable!("concat checked dtypes"),
            }
        };
    }
    go!(F32, F16, BF16, F64, I64, I32, I16, I8, U8, U16, U32, U64, Bool)
}

pub fn slice(x: &Tensor, starts: &Tensor, ends: &Tensor, axes: Option<&Tensor>, steps: Option<&Tensor>) -> OpResult {
    let axes = axes.map(|t| ints(t, "axes")).transpose()?;
    let steps = steps.map(|t| ints(t, "steps")).transpose()?;
    let params =
        slice_axes(x.rank(), &ints(starts, "starts")?, &ints(ends, "ends")?, axes.as_deref(), steps.as_deref())?;
    let in_strides = strides(&x.shape);
    let mut out_shape = x.shape.clone();
    let mut st: Vec<i64> = in_strides.iter().map(|&s| s as i64).collect();
    let mut base = 0i64;
    for p in &params {
        let r = p.resolve(x.shape[p.axis]);
        out_shape[p.axis] = r.len;
        if r.len > 0 {
            base += r.start * in_strides[p.axis] as i64;
        }
        st[p.axis] = r.step * in_strides[p.axis] as i64;
    }
    let idx = strided_index(&out_shape, &st, base as usize);
    Ok(vec![Tensor { data: x.data.gather(&idx), shape: out_shape }])
}

pub fn gather(x: &Tensor, indices: &Tensor, axis: i64) -> OpResult {
    let a = norm_axis(axis, x.rank(), false)?;
    let idx = ints(indices, "indices")?;
    let n = x.shape[a] as i64;
    let outer: usize = x.shape[..a].iter().product();
    let inner: usize = x.shape[a + 1..].iter().product();
    let mut src = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        for &i in &idx {
            let k = if i < 0 { i + n } else { i };
            if k < 0 || k >= n {
                return Err(format!("index {i} is out of range for axis {a} of size {n}"));
            }
            let b = (o * x.shape[a] + k as usize) * inner;
            src.extend(b..b + inner);
        }
    }
    let mut out_shape = x.shape[..a].to_vec();
    out_shape.extend_from_slice(&indices.shape);
    out_shape.extend_from_slice(&x.shape[a + 1..]);
    Ok(vec![Tensor { data: x.data.gather(&src), shape: out_shape }])
}

pub fn shape(x: &Tensor, start: i64, end: Option<i64>) -> OpResult {
    let (b, e) = shape_range(x.rank(), start, end);
    let dims: Vec<i64> = x.shape[b..e.max(b)].iter().map(|&d| d as i64).collect();
    let t = Tensor::from_i64_as(DType::I64, vec![dims.len()], &dims).expect("i64");
    Ok(vec![t])
}

/// DepthToSpace ([N, C*b*b, H, W] -> [N, C, H*b, W*b]) as the ONNX definition's reshape,
/// transpose, reshape: DCR reads channel (r*b + s)*C + c, CRD reads (c*b + r)*b + s.
pub fn depth_to_space(x: &Tensor, b: usize, crd: bool) -> OpResult {
    if x.rank() != 4 {
        return Err(format!("input must have rank 4, has shape {:?}", x.shape));
    }
    let [n, cb, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    if b == 0 || cb % (b * b) != 0 {
        return Err(format!("{cb} channels are not a multiple of blocksize^2 = {}", b * b));
    }
    let c = cb / (b * b);
    let mut idx = Vec::with_capacity(x.len());
    for bn in 0..n {
        for ch in 0..c {
            for y in 0..h * b {
                for xx in 0..w * b {
                    let (r, s) = (y % b, xx % b);
                    let from = if crd { (ch * b + r) * b + s } else { (r * b + s) * c + ch };
                    idx.push(((bn * cb + from) * h + y / b) * w + xx / b);
                }
            }
        }
    }
    Ok(vec![Tensor::new(vec![n, c, h * b, w * b], x.data.gather(&idx))?])
}

/// Split along `axis` into `outputs` parts: the sizes `split` when given, else equal parts
/// (the last smaller when they do not divide).
pub fn split(x: &Tensor, split: Option<&Tensor>, axis: i64, outputs: usize) -> OpResult {
    let a = crate::ir::infer::norm_axis(axis, x.rank(), false)?;
    let sizes: Vec<usize> = match split {
        Some(t) => t
            .as_i64_vec()
            .ok_or("split must be an integer tensor")?
            .iter()
            .map(|&v| usize::try_from(v).map_err(|_| format!("split size {v} is negative")))
            .collect::<Result<_, _>>()?,
        None => crate::ir::infer::split_sizes(x.shape[a], outputs),
    };
    if sizes.len() != outputs || sizes.iter().sum::<usize>() != x.shape[a] {
        return Err(format!("split sizes {sizes:?} do not split dim {a} = {} into {outputs}", x.shape[a]));
    }
    let (outer, inner): (usize, usize) = (x.shape[..a].iter().product(), x.shape[a + 1..].iter().product());
    let mut start = 0;
    let mut out = Vec::with_capacity(outputs);
    for &n in &sizes {
        let idx: Vec<usize> = (0..outer)
            .flat_map(|o| {
                (start..start + n).flat_map(move |k| (0..inner).map(move |i| (o * x.shape[a] + k) * inner + i))
            })
            .collect();
        let mut shape = x.shape.clone();
        shape[a] = n;
        out.push(Tensor::new(shape, x.data.gather(&idx))?);
        start += n;
    }
    Ok(out)
}

/// Expand: `x` broadcast with the shape in `shape` (numpy rules, so a 1 in `shape` keeps
/// `x`'s dim and the result may have more axes than `shape` says).
pub fn expand(x: &Tensor, shape: &Tensor) -> OpResult {
    let target: Vec<usize> = ints(shape, "shape")?
        .into_iter()
        .map(|d| usize::try_from(d).map_err(|_| format!("the shape holds {d}")))
        .collect::<Result<_, _>>()?;
    let out = crate::ir::broadcast_static(&x.shape, &target)
        .ok_or_else(|| format!("shape {:?} does not broadcast to {target:?}", x.shape))?;
    let idx = crate::ir::broadcast_index(&x.shape, &out);
    Ok(vec![Tensor { data: x.data.gather(&idx), shape: out }])
}

/// ONNX ConstantOfShape: `shape` (1-D int64, entries >= 0) filled with `value`'s element.
pub fn constant_of_shape(shape: &Tensor, value: Option<&Tensor>) -> OpResult {
    let dims = shape.as_i64_vec().filter(|_| shape.rank() == 1).ok_or("the shape must be a 1-D integer tensor")?;
    let dims: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("shape {dims:?} has a negative entry")))
        .collect::<Result<_, _>>()?;
    let n: usize = dims.iter().product();
    let fill = value.cloned().unwrap_or_else(|| Tensor::scalar_f32(0.0));
    let t = match fill.as_i64_vec() {
        Some(v) => Tensor::from_i64_as(fill.dtype(), dims, &vec![v[0]; n]),
        None => Tensor::from_f64_as(fill.dtype(), dims, &vec![fill.to_f64_vec()[0]; n]),
    };
    Ok(vec![t.ok_or_else(|| format!("cannot fill a {} tensor", fill.dtype()))?])
}

/// ONNX Range: `start + i * delta` for i in 0..max(ceil((limit - start) / delta), 0), exact
/// for integer types.
pub fn range(start: &Tensor, limit: &Tensor, delta: &Tensor) -> OpResult {
    let dt = start.dtype();
    for (name, t) in [("start", start), ("limit", limit), ("delta", delta)] {
        if t.len() != 1 || t.dtype() != dt {
            return Err(format!("{name} must be a scalar of start's type {dt}, is {} {:?}", t.dtype(), t.shape));
        }
    }
    if let (Some(s), Some(l), Some(d)) = (start.as_i64_vec(), limit.as_i64_vec(), delta.as_i64_vec()) {
        let (s, l, d) = (s[0], l[0], d[0]);
        if d == 0 {
            return Err("delta is 0".into());
        }
        let span = l - s;
        let n = (span / d + i64::from(span % d != 0 && (span < 0) == (d < 0))).max(0);
        let v: Vec<i64> = (0..n).map(|i| s + i * d).collect();
        return Ok(vec![Tensor::from_i64_as(dt, vec![v.len()], &v).ok_or("integer range")?]);
    }
    let (s, l, d) = (start.to_f64_vec()[0], limit.to_f64_vec()[0], delta.to_f64_vec()[0]);
    if d == 0.0 || !d.is_finite() {
        return Err(format!("delta is {d}"));
    }
    let n = ((l - s) / d).ceil();
    if !(n.is_finite() && n < 1e9) {
        return Err(format!("range from {s} to {l} by {d} has no finite length"));
    }
    let v: Vec<f64> = (0..n.max(0.0) as usize).map(|i| s + i as f64 * d).collect();
    Ok(vec![Tensor::from_f64_as(dt, vec![v.len()], &v).ok_or("float range")?])
}
