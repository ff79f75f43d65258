//! Normalisations and reductions: BatchNormalization, InstanceNormalization, Softmax,
//! LayerNormalization, ReduceMean. All compute in f64 (sums included) and round once to the output type.

use super::{req, OpResult};
use crate::ir::broadcast_index;
use crate::ir::infer::norm_axis;
use crate::ir::{broadcast_static, DType, ReduceKind, Tensor};
use rayon::prelude::*;

fn float_check(t: &Tensor, what: &str) -> Result<(), String> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(format!("{what} must be a float tensor, is {}", t.dtype()))
    }
}

fn out(dtype: DType, shape: Vec<usize>, v: &[f64]) -> Tensor {
    Tensor::from_f64_as(dtype, shape, v).expect("numeric dtype")
}

/// Inputs X, scale, B, input_mean, input_var. Inference mode normalises with the given
/// statistics; training mode with the batch's (population variance) and also outputs the
/// running statistics `input * momentum + batch * (1 - momentum)`.
pub fn batch_norm(inputs: &[Option<&Tensor>], epsilon: f32, momentum: f32, training: bool) -> OpResult {
    let x = req(inputs, 0)?;
    float_check(x, "X")?;
    if x.rank() < 2 {
        return Err(format!("X must have rank >= 2, has shape {:?}", x.shape));
    }
    let c = x.shape[1];
    let mut params = Vec::with_capacity(4);
    for i in 1..5 {
        let p = req(inputs, i)?;
        float_check(p, &format!("input {i}"))?;
        if p.shape != [c] {
            return Err(format!("input {i} has shape {:?}, expected [{c}]", p.shape));
        }
        params.push(p.to_f64_vec());
    }
    let (scale, bias, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
    let plane: usize = x.shape[2..].iter().product();
    let xs = x.to_f64_vec();
    let eps = epsilon as f64;

    // Per-channel statistics the normalisation uses.
    let (use_mean, use_var) = if training {
        let count = (x.shape[0] * plane) as f64;
        let stats: Vec<(f64, f64)> = (0..c)
            .into_par_iter()
            .map(|ch| {
                let xs = &xs;
                let vals = || (0..x.shape[0]).flat_map(move |n| xs[(n * c + ch) * plane..][..plane].iter().copied());
                let m = vals().sum::<f64>() / count;
                (m, vals().map(|v| (v - m) * (v - m)).sum::<f64>() / count)
            })
            .collect();
        stats.into_iter().unzip()
    } else {
        (mean.clone(), var.clone())
    };
    let mut y = vec![0.0; xs.len()];
    if plane > 0 {
        y.par_chunks_mut(plane).zip(xs.par_chunks(plane)).enumerate().for_each(|(j, (yp, xp))| {
            let ch = j % c;
            let k = scale[ch] / (use_var[ch] + eps).sqrt();
            for (o, &v) in yp.iter_mut().zip(xp) {
                *o = (v - use_mean[ch]) * k + bias[ch];
            }
        });
    }
    let mut outs = vec![out(x.dtype(), x.shape.clone(), &y)];
    if training {
        let m = momentum as f64;
        let run = |given: &[f64], batch: &[f64]| {
            given.iter().zip(batch).map(|(g, b)| g * m + b * (1.0 - m)).collect::<Vec<_>>()
        };
        let stat_dtype = req(inputs, 3)?.dtype();
        outs.push(out(stat_dtype, vec![c], &run(mean, &use_mean)));
        outs.push(out(stat_dtype, vec![c], &run(var, &use_var)));
    }
    Ok(outs)
}

/// (outer, len, inner) sizes around `axis`.
/// Inputs X ([N, C, spatial...]), scale and B ([C]): each sample's channel normalised over
/// its spatial elements (population variance), then scaled and shifted per channel.
pub fn instance_norm(inputs: &[Option<&Tensor>], epsilon: f64) -> OpResult {
    let (x, scale, bias) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    float_check(x, "input")?;
    if x.rank() < 3 {
        return Err(format!("input must have rank >= 3 ([N, C, spatial...]), has shape {:?}", x.shape));
    }
    let c = x.shape[1];
    for (t, what) in [(scale, "scale"), (bias, "B")] {
        if t.len() != c {
            return Err(format!("{what} has {} elements for {c} channels", t.len()));
        }
    }
    let (s, b) = (scale.to_f64_vec(), bias.to_f64_vec());
    let spatial: usize = x.shape[2..].iter().product();
    let mut v = x.to_f64_vec();
    for (k, plane) in v.chunks_mut(spatial.max(1)).enumerate() {
        let ch = k % c;
        let mean = plane.iter().sum::<f64>() / spatial as f64;
        let var = plane.iter().map(|&y| (y - mean) * (y - mean)).sum::<f64>() / spatial as f64;
        let inv = 1.0 / (var + epsilon).sqrt();
        plane.iter_mut().for_each(|y| *y = (*y - mean) * inv * s[ch] + b[ch]);
    }
    Ok(vec![out(x.dtype(), x.shape.clone(), &v)])
}

/// GroupNormalization: each sample's channels in `groups` consecutive groups, each group
/// normalised over its channels and positions, then scaled and shifted per channel (opset 21)
/// or per group (opset 18: scale and bias of `groups` elements; with as many groups as
/// channels the two agree).
pub fn group_norm(inputs: &[Option<&Tensor>], groups: i64, epsilon: f64) -> OpResult {
    let (x, scale, bias) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    float_check(x, "X")?;
    if x.rank() < 2 {
        return Err(format!("X must have rank >= 2 ([N, C, ...]), has shape {:?}", x.shape));
    }
    let c = x.shape[1];
    let g = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0 && c % g == 0)
        .ok_or_else(|| format!("num_groups {groups} must be positive and divide the {c} channels"))?;
    let per_group = scale.len() != c;
    for (t, what) in [(scale, "scale"), (bias, "bias")] {
        if t.len() != c && t.len() != g {
            return Err(format!("{what} has {} elements for {c} channels in {g} groups", t.len()));
        }
        if (t.len() != c) != per_group {
            return Err("scale and bias must both be per channel or both per group".into());
        }
    }
    let (s, b) = (scale.to_f64_vec(), bias.to_f64_vec());
    let spatial: usize = x.shape[2..].iter().product();
    let size = c / g * spatial;
    let mut v = x.to_f64_vec();
    for (k, block) in v.chunks_mut(size.max(1)).enumerate() {
        let group = k % g;
        let mean = block.iter().sum::<f64>() / size as f64;
        let var = block.iter().map(|&y| (y - mean) * (y - mean)).sum::<f64>() / size as f64;
        let inv = 1.0 / (var + epsilon).sqrt();
        for (i, y) in block.iter_mut().enumerate() {
            let at = if per_group { group } else { group * (c / g) + i / spatial.max(1) };
            *y = (*y - mean) * inv * s[at] + b[at];
        }
    }
    Ok(vec![out(x.dtype(), x.shape.clone(), &v)])
}

/// LRN: each element over `(bias + alpha / size * sum of squares)^beta`, the sum over the
/// channels from `c - floor((size - 1) / 2)` to `c + ceil((size - 1) / 2)` (those that exist).
pub fn lrn(inputs: &[Option<&Tensor>], size: i64, alpha: f64, beta: f64, bias: f64) -> OpResult {
    let x = req(inputs, 0)?;
    float_check(x, "input")?;
    if x.rank() < 3 {
        return Err(format!("input must have rank >= 3 ([N, C, spatial...]), has shape {:?}", x.shape));
    }
    let size = usize::try_from(size).ok().filter(|&s| s > 0).ok_or_else(|| format!("size {size} must be positive"))?;
    let (n, c, spatial) = (x.shape[0], x.shape[1], x.shape[2..].iter().product::<usize>());
    let (before, after) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
    let v = x.to_f64_vec();
    let mut y = vec![0.0; v.len()];
    for b in 0..n {
        for ch in 0..c {
            let (lo, hi) = (ch.saturating_sub(before), (ch + after).min(c - 1));
            for p in 0..spatial {
                let at = |k: usize| v[(b * c + k) * spatial + p];
                let sum: f64 = (lo..=hi).map(|k| at(k) * at(k)).sum();
                y[(b * c + ch) * spatial + p] = at(ch) / (bias + alpha / size as f64 * sum).powf(beta);
            }
        }
    }
    Ok(vec![out(x.dtype(), x.shape.clone(), &y)])
}

fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// Softmax along one axis (opset 13), max-subtracted for stability.
pub fn softmax(x: &Tensor, axis: i64, log: bool) -> OpResult {
    float_check(x, "input")?;
    if x.rank() == 0 {
        return Err("input must have rank >= 1".into());
    }
    let a = norm_axis(axis, x.rank(), false)?;
    let (_, len, inner) = split(&x.shape, a);
    let xs = x.to_f64_vec();
    let mut y = vec![0.0; xs.len()];
    if len * inner > 0 {
        y.par_chunks_mut(len * inner).zip(xs.par_chunks(len * inner)).for_each(|(yb, xb)| {
            for i in 0..inner {
                let max = (0..len).map(|k| xb[k * inner + i]).fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for k in 0..len {
                    let e = (xb[k * inner + i] - max).exp();
                    yb[k * inner + i] = e;
                    sum += e;
                }
                for k in 0..len {
                    let at = k * inner + i;
                    // log softmax as x - max - log(sum): finite where softmax underflows to 0.
                    yb[at] = if log { xb[at] - max - sum.ln() } else { yb[at] / sum };
                }
            }
        });
    }
    Ok(vec![out(x.dtype(), x.shape.clone(), &y)])
}

/// LayerNormalization over dims `axis..`: outputs Y, Mean and InvStdDev, the last two of
/// shape `x.shape[..axis] + [1; rank - axis]` in `stash_type`.
pub fn layer_norm(
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    axis: i64,
    epsilon: f32,
    stash_type: DType,
) -> OpResult {
    float_check(x, "X")?;
    if !stash_type.is_float() {
        return Err(format!("stash_type must be a float type, is {stash_type}"));
    }
    if x.rank() == 0 {
        return Err("X must have rank >= 1".into());
    }
    let a = norm_axis(axis, x.rank(), false)?;
    let norm_shape = &x.shape[a..];
    let mut params = Vec::new();
    for (t, what) in [(Some(scale), "Scale"), (bias, "B")] {
        let Some(t) = t else { continue };
        float_check(t, what)?;
        if broadcast_static(&t.shape, norm_shape).as_deref() != Some(norm_shape) {
            return Err(format!("{what} of shape {:?} does not broadcast to {norm_shape:?}", t.shape));
        }
        let v = t.to_f64_vec();
        params.push(broadcast_index(&t.shape, norm_shape).into_iter().map(|i| v[i]).collect::<Vec<f64>>());
    }
    let (scale, bias) = (&params[0], params.get(1));
    let size: usize = norm_shape.iter().product();
    let xs = x.to_f64_vec();
    let rows: usize = x.shape[..a].iter().product();
    let mut y = vec![0.0; xs.len()];
    // Statistics of an empty normalised block are undefined.
    let mut stats = vec![(f64::NAN, f64::NAN); rows];
    if size > 0 {
        y.par_chunks_mut(size).zip(xs.par_chunks(size)).zip(stats.par_iter_mut()).for_each(|((yr, xr), st)| {
            let mean = xr.iter().sum::<f64>() / size as f64;
            let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / size as f64;
            let inv = 1.0 / (var + epsilon as f64).sqrt();
            for (i, (o, &v)) in yr.iter_mut().zip(xr).enumerate() {
                *o = (v - mean) * inv * scale[i] + bias.map_or(0.0, |b| b[i]);
            }
            *st = (mean, inv);
        });
    }
    let stat_shape: Vec<usize> = x.shape.iter().enumerate().map(|(i, &d)| if i < a { d } else { 1 }).collect();
    let (mean, inv): (Vec<f64>, Vec<f64>) = stats.into_iter().unzip();
    Ok(vec![
        out(x.dtype(), x.shape.clone(), &y),
        out(stash_type, stat_shape.clone(), &mean),
        out(stash_type, stat_shape, &inv),
    ])
}

/// RMSNormalization (opset 23): `X / sqrt(mean(X²) + epsilon)` over the axes from `axis` on,
/// times Scale (broadcast to X), in the type of Scale. Computed in f64: stash_type only asks
/// for at least f32.
pub fn rms_norm(inputs: &[Option<&Tensor>], axis: i64, epsilon: f64) -> OpResult {
    let (x, scale) = (req(inputs, 0)?, req(inputs, 1)?);
    float_check(x, "X")?;
    float_check(scale, "scale")?;
    if x.rank() == 0 {
        return Err("X must have rank >= 1".into());
    }
    let a = norm_axis(axis, x.rank(), false)?;
    if broadcast_static(&scale.shape, &x.shape).as_deref() != Some(&x.shape[..]) {
        return Err(format!("scale of shape {:?} does not broadcast to X's {:?}", scale.shape, x.shape));
    }
    let size: usize = x.shape[a..].iter().product();
    let xs = x.to_f64_vec();
    let sv = scale.to_f64_vec();
    let si = broadcast_index(&scale.shape, &x.shape);
    let mut y = vec![0.0; xs.len()];
    if size > 0 {
        y.par_chunks_mut(size).zip(xs.par_chunks(size)).enumerate().for_each(|(r, (yr, xr))| {
            let rms = (xr.iter().map(|v| v * v).sum::<f64>() / size as f64 + epsilon).sqrt();
            for (i, (o, &v)) in yr.iter_mut().zip(xr).enumerate() {
                *o = v / rms * sv[si[r * size + i]];
            }
        });
    }
    Ok(vec![out(scale.dtype(), x.shape.clone(), &y)])
}

/// ReduceMean / Sum / Max / Min over `axes` (attribute, or input 1 in later opsets); no axes
/// reduce all dims unless `noop_with_empty_axes`.
pub fn reduce(
    kind: ReduceKind,
    x: &Tensor,
    axes_attr: Option<&[i64]>,
    axes_in: Option<&Tensor>,
    keepdims: bool,
    noop_with_empty_axes: bool,
) -> OpResult {
    if !(x.dtype().is_float() || x.dtype().is_integer()) {
        return Err(format!("input must be numeric, is {}", x.dtype()));
    }
    let axes: Vec<i64> = match (axes_attr, axes_in) {
        (Some(a), _) => a.to_vec(),
        (None, Some(t)) => t.as_i64_vec().ok_or_else(|| format!("axes must be an integer tensor, is {}", t.dtype()))?,
        (None, None) => vec![],
    };
    if axes.is_empty() && noop_with_empty_axes {
        return Ok(vec![x.clone()]);
    }
    let rank = x.rank();
    let mut reduce = vec![axes.is_empty(); rank];
    for &ax in &axes {
        let a = norm_axis(ax, rank, false)?;
        if std::mem::replace(&mut reduce[a], true) {
            return Err(format!("axis {ax} repeated in {axes:?}"));
        }
    }
    let kept: Vec<usize> = x.shape.iter().zip(&reduce).map(|(&d, &r)| if r { 1 } else { d }).collect();
    let count: usize = x.shape.iter().zip(&reduce).filter(|(_, &r)| r).map(|(&d, _)| d).product();
    let (start, combine): (f64, fn(f64, f64) -> f64) = match kind {
        ReduceKind::Mean | ReduceKind::Sum | ReduceKind::L1 | ReduceKind::L2 | ReduceKind::SumSquare => {
            (0.0, |a, v| a + v)
        }
        ReduceKind::LogSum | ReduceKind::LogSumExp => (0.0, |a, v| a + v),
        ReduceKind::Prod => (1.0, |a, v| a * v),
        // NaN wins, as numpy's max / min.
        ReduceKind::Max => (f64::NEG_INFINITY, |a, v| if a.is_nan() || v.is_nan() { f64::NAN } else { a.max(v) }),
        ReduceKind::Min => (f64::INFINITY, |a, v| if a.is_nan() || v.is_nan() { f64::NAN } else { a.min(v) }),
    };
    // LogSumExp as max + log(sum(exp(x - max))): no overflow where the plain sum would.
    let shift = match kind {
        ReduceKind::LogSumExp => {
            let m = &self::reduce(ReduceKind::Max, x, Some(&axes), None, true, false)?[0];
            Some(m.to_f64_vec().into_iter().map(|m| if m.is_finite() { m } else { 0.0 }).collect::<Vec<f64>>())
        }
        _ => None,
    };
    // Each input element combines into the output element broadcast_index maps it from.
    let mut acc = vec![start; kept.iter().product()];
    let xs: Vec<f64> = match kind {
        ReduceKind::L1 => x.to_f64_vec().into_iter().map(f64::abs).collect(),
        ReduceKind::L2 | ReduceKind::SumSquare => x.to_f64_vec().into_iter().map(|v| v * v).collect(),
        _ => x.to_f64_vec(),
    };
    let src = crate::ir::strides(&kept);
    let bstr: Vec<usize> = (0..rank).map(|i| if reduce[i] { 0 } else { src[i] }).collect();
    let mut counter = vec![0usize; rank];
    let mut flat = 0;
    for &v in &xs {
        let v = match &shift {
            Some(m) => (v - m[flat]).exp(),
            None => v,
        };
        acc[flat] = combine(acc[flat], v);
        for d in (0..rank).rev() {
            counter[d] += 1;
            flat += bstr[d];
            if counter[d] < x.shape[d] {
                break;
            }
            flat -= bstr[d] * counter[d];
            counter[d] = 0;
        }
    }
    match (kind, &shift) {
        (ReduceKind::L2, _) => acc.iter_mut().for_each(|s| *s = s.sqrt()),
        (ReduceKind::LogSum, _) => acc.iter_mut().for_each(|s| *s = s.ln()),
        (ReduceKind::LogSumExp, Some(m)) => acc.iter_mut().zip(m).for_each(|(s, m)| *s = m + s.ln()),
        _ => {}
    }
    if kind == ReduceKind::Mean {
        acc.iter_mut().for_each(|s| *s /= count as f64);
        if x.dtype().is_integer() {
            // Integer means truncate toward zero, as numpy's astype and onnxruntime do.
            acc.iter_mut().for_each(|m| *m = m.trunc());
        }
    }
    let shape =
        if keepdims { kept } else { x.shape.iter().zip(&reduce).filter(|(_, &r)| !r).map(|(&d, _)| d).collect() };
    Ok(vec![out(x.dtype(), shape, &acc)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_f32(shape.to_vec(), v.to_vec())
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn batch_norm_inference() {
        let x = t(&[1, 2, 2], &[1., 2., 3., 4.]);
        let (s, b, m, v) = (t(&[2], &[1., 2.]), t(&[2], &[0., 1.]), t(&[2], &[1., 3.]), t(&[2], &[4., 1.]));
        let r = batch_norm(&[Some(&x), Some(&s), Some(&b), Some(&m), Some(&v)], 0.0, 0.9, false).unwrap();
        assert_eq!(r.len(), 1);
        close(&r[0].to_f32_vec(), &[0., 0.5, 1., 3.]);
        assert!(batch_norm(&[Some(&x), Some(&s), Some(&b), Some(&m)], 0.0, 0.9, false).is_err());
        assert!(
            batch_norm(&[Some(&x), Some(&s), Some(&b), Some(&m), Some(&t(&[3], &[1.; 3]))], 0.0, 0.9, false).is_err()
        );
    }

    #[test]
    fn batch_norm_training() {
        // Channel 0 values 1, 3 (mean 2, var 1); channel 1 values 2, 4 (mean 3, var 1).
        let x = t(&[2, 2, 1], &[1., 2., 3., 4.]);
        let (s, b, m, v) = (t(&[2], &[1., 1.]), t(&[2], &[0., 0.]), t(&[2], &[0., 0.]), t(&[2], &[1., 1.]));
        let r = batch_norm(&[Some(&x), Some(&s), Some(&b), Some(&m), Some(&v)], 0.0, 0.5, true).unwrap();
        close(&r[0].to_f32_vec(), &[-1., -1., 1., 1.]);
        close(&r[1].to_f32_vec(), &[1., 1.5]);
        close(&r[2].to_f32_vec(), &[1., 1.]);
    }

    #[test]
    fn softmax_axes() {
        let x = t(&[2, 2], &[0., 0., 1000., 1000. + 2f32.ln()]);
        close(&softmax(&x, -1, false).unwrap()[0].to_f32_vec(), &[0.5, 0.5, 1. / 3., 2. / 3.]);
        let y = softmax(&x, 0, false).unwrap()[0].to_f32_vec();
        close(&y, &[0., 0., 1., 1.]);
        assert!(softmax(&x, 2, false).is_err());
        // LogSoftmax stays finite where softmax underflows to 0 (log 0 would be -inf).
        let l = softmax(&x, 0, true).unwrap()[0].to_f32_vec();
        close(&l, &[-1000., -1000. - 2f32.ln(), 0., 0.]);
        // Row [1000, 1000 + ln 2] as stored in f32: log of exp(v) / (exp(a) + exp(b)).
        let (a, b) = (x.to_f64_vec()[2], x.to_f64_vec()[3]);
        let lse = b + (1.0 + (a - b).exp()).ln();
        let l = softmax(&x, -1, true).unwrap()[0].to_f32_vec();
        close(&l, &[-(2f32.ln()), -(2f32.ln()), (a - lse) as f32, (b - lse) as f32]);
    }

    #[test]
    fn layer_norm_stats() {
        let x = t(&[2, 2], &[1., 3., 2., 2.]);
        let r = layer_norm(&x, &t(&[2], &[1., 2.]), Some(&t(&[1], &[1.])), 1, 0.0, DType::F32).unwrap();
        let y = r[0].to_f32_vec();
        close(&y[..2], &[0., 3.]);
        assert!(y[2].is_nan()); // zero variance with epsilon 0
        assert_eq!(r[1].shape, vec![2, 1]);
        close(&r[1].to_f32_vec(), &[2., 2.]);
        close(&r[2].to_f32_vec()[..1], &[1.]);
        let r = layer_norm(&x, &t(&[], &[1.]), None, 0, 1e-5, DType::F32).unwrap();
        assert_eq!(r[1].shape, vec![1, 1]);
        assert!(layer_norm(&x, &t(&[3], &[1.; 3]), None, 1, 1e-5, DType::F32).is_err());
    }

    #[test]
    fn reduce_mean_cases() {
        let x = t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let r = &reduce(ReduceKind::Mean, &x, Some(&[1]), None, true, false).unwrap()[0];
        assert_eq!((r.shape.clone(), r.to_f32_vec()), (vec![2, 1], vec![2., 5.]));
        let axes = Tensor::from_i64(vec![1], vec![-2]);
        let r = &reduce(ReduceKind::Mean, &x, None, Some(&axes), false, false).unwrap()[0];
        assert_eq!((r.shape.clone(), r.to_f32_vec()), (vec![3], vec![2.5, 3.5, 4.5]));
        let r = &reduce(ReduceKind::Mean, &x, None, None, false, false).unwrap()[0];
        assert_eq!((r.shape.clone(), r.to_f32_vec()), (vec![], vec![3.5]));
        let r = &reduce(ReduceKind::Mean, &x, None, Some(&Tensor::from_i64(vec![0], vec![])), true, true).unwrap()[0];
        assert_eq!(r, &x);
        assert!(reduce(ReduceKind::Mean, &x, Some(&[1, -1]), None, true, false).is_err());
        assert!(reduce(ReduceKind::Mean, &x, Some(&[2]), None, true, false).is_err());
    }
}
