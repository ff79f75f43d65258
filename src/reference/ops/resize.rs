//! Resize (opset 18/19 semantics), following the ONNX reference implementation
//! (onnx/reference/ops/op_resize.py): separable, one axis at a time, in f64.
//!
//! Along one axis every output index maps to a source coordinate `x_ori` (by the coordinate
//! transformation mode), and reads a fixed-size run of neighbours, clamped to the edge, with
//! weights from the mode's kernel (nearest picks one, linear and cubic interpolate; antialias
//! stretches the kernel by 1/scale when downsampling).

use super::OpResult;
use crate::ir::infer::{norm_axis, resize_output};
use crate::ir::{CoordTransform, NearestMode, ResizeAttrs, ResizeMode, Tensor};
use rayon::prelude::*;

/// Beyond this many output elements Resize is refused rather than attempted.
const MAX_OUTPUT: usize = 1 << 30;

pub fn resize(
    x: &Tensor,
    roi: Option<&Tensor>,
    scales: Option<&Tensor>,
    sizes: Option<&Tensor>,
    a: &ResizeAttrs,
) -> OpResult {
    let dtype = x.dtype();
    if !(dtype.is_float() || dtype.is_integer()) {
        return Err(format!("input must be numeric, is {dtype}"));
    }
    let scales = match scales {
        Some(t) if !t.dtype().is_float() => return Err(format!("scales must be a float tensor, is {}", t.dtype())),
        Some(t) => Some(t.to_f32_vec()),
        None => None,
    };
    let sizes = match sizes {
        Some(t) => Some(t.as_i64_vec().ok_or_else(|| format!("sizes must be an integer tensor, is {}", t.dtype()))?),
        None => None,
    };
    let (out_shape, scale) = resize_output(&x.shape, a, scales.as_deref(), sizes.as_deref())?;
    let rank = x.rank();
    let axes: Vec<usize> = match &a.axes {
        Some(ax) => ax.iter().map(|&v| norm_axis(v, rank, false)).collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    // Per-dim crop box [start, end] in normalised coordinates (only tf_crop_and_resize reads it).
    let mut boxes = vec![(0.0, 1.0); rank];
    if let Some(r) = roi.filter(|r| !r.is_empty() && a.coord == CoordTransform::TfCropAndResize) {
        if !r.dtype().is_float() {
            return Err(format!("roi must be a float tensor, is {}", r.dtype()));
        }
        let v = r.to_f64_vec();
        if v.len() != 2 * axes.len() {
            return Err(format!(
                "roi has {} entries, expected {} (starts and ends for {} axes)",
                v.len(),
                2 * axes.len(),
                axes.len()
            ));
        }
        for (i, &ax) in axes.iter().enumerate() {
            boxes[ax] = (v[i], v[axes.len() + i]);
        }
    }
    if out_shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).is_none_or(|n| n > MAX_OUTPUT) {
        return Err(format!("output shape {out_shape:?} is too large"));
    }
    if let Some(d) = (0..rank).find(|&d| x.shape[d] == 0 && out_shape[d] > 0) {
        return Err(format!("cannot resize the empty dim {d} of input {:?} to {}", x.shape, out_shape[d]));
    }

    let mut data = x.to_f64_vec();
    let mut shape = x.shape.clone();
    for d in 0..rank {
        let close = |p: f64, q: f64| (p - q).abs() <= 1e-9 * p.abs().max(q.abs());
        let identity =
            out_shape[d] == shape[d] && close(scale[d], 1.0) && boxes[d].0.abs() <= 1e-9 && close(boxes[d].1, 1.0);
        if identity {
            continue;
        }
        let taps = axis_taps(shape[d], out_shape[d], scale[d], boxes[d], a);
        data = apply_axis(&data, &shape, d, &taps, a.extrapolation_value as f64);
        shape[d] = out_shape[d];
    }
    if dtype.is_integer() {
        // Saturating cast after rounding half to even, as the reference's saturate_cast.
        data.iter_mut().for_each(|v| *v = v.round_ties_even());
    }
    Ok(vec![Tensor::from_f64_as(dtype, shape, &data).expect("numeric dtype")])
}

/// How one output index along an axis is computed.
struct Tap {
    /// Index of the first neighbour (may lie outside the input; reads clamp to the edge).
    start: isize,
    coeffs: Vec<f64>,
    /// tf_crop_and_resize sample outside the input: the output is the extrapolation value.
    extrapolate: bool,
}

/// Source coordinate of output index `y` (the reference's `_compute_x_ori`), and whether it
/// is an extrapolated tf_crop_and_resize sample.
fn source_coord(y: f64, in_w: usize, out_w: usize, scale: f64, roi: (f64, f64), coord: CoordTransform) -> (f64, bool) {
    let in_f = in_w as f64;
    // The reference uses the fractional output width scale * in, not the rounded one.
    let out_f = scale * in_f;
    match coord {
        CoordTransform::AlignCorners => (if out_f == 1.0 { 0.0 } else { y * (in_f - 1.0) / (out_f - 1.0) }, false),
        CoordTransform::Asymmetric => (y / scale, false),
        CoordTransform::TfCropAndResize => {
            let span = (roi.1 - roi.0) * (in_f - 1.0);
            let x = if out_f == 1.0 { span / 2.0 } else { y * span / (out_f - 1.0) } + roi.0 * (in_f - 1.0);
            (x, x < 0.0 || x > in_f - 1.0)
        }
        CoordTransform::PytorchHalfPixel => (if out_f == 1.0 { -0.5 } else { (y + 0.5) / scale - 0.5 }, false),
        CoordTransform::HalfPixel => ((y + 0.5) / scale - 0.5, false),
        CoordTransform::HalfPixelSymmetric => {
            // Centres the sampled region when the output size was rounded.
            let offset = in_f / 2.0 * (1.0 - out_w as f64 / out_f);
            (offset + (y + 0.5) / scale - 0.5, false)
        }
    }
}

/// Kernel weights for the fractional position `ratio` in (0, 1] past the left neighbour.
/// Every mode yields an even number of weights, centred on the gap the position falls in.
fn coeffs(ratio: f64, scale: f64, a: &ResizeAttrs) -> Vec<f64> {
    let normalise = |c: Vec<f64>| {
        let s: f64 = c.iter().sum();
        c.into_iter().map(|v| v / s).collect()
    };
    match a.mode {
        ResizeMode::Nearest => {
            let right = ratio == 1.0
                || match a.nearest {
                    NearestMode::RoundPreferFloor => ratio > 0.5,
                    NearestMode::RoundPreferCeil => ratio >= 0.5,
                    NearestMode::Floor => false,
                    NearestMode::Ceil => true,
                };
            if right {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        ResizeMode::Linear if a.antialias => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as isize + 1;
            normalise((start..2 - start).map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0)).collect())
        }
        ResizeMode::Linear => vec![1.0 - ratio, ratio],
        ResizeMode::Cubic => {
            let aa = a.cubic_coeff_a as f64;
            let kernel = |x: f64| {
                let x = x.abs();
                if x <= 1.0 {
                    ((aa + 2.0) * x - (aa + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    ((aa * x - 5.0 * aa) * x + 8.0 * aa) * x - 4.0 * aa
                } else {
                    0.0
                }
            };
            if a.antialias {
                let s = scale.min(1.0);
                let start = (-2.0 / s).floor() as isize + 1;
                normalise((start..2 - start).map(|i| kernel(s * (i as f64 - ratio))).collect())
            } else {
                vec![kernel(ratio + 1.0), kernel(ratio), kernel(1.0 - ratio), kernel(2.0 - ratio)]
            }
        }
    }
}

fn axis_taps(in_w: usize, out_w: usize, scale: f64, roi: (f64, f64), a: &ResizeAttrs) -> Vec<Tap> {
    (0..out_w)
        .map(|o| {
            let (x, extrapolate) = source_coord(o as f64, in_w, out_w, scale, roi, a.coord);
            let fl = x.floor();
            // An exact integer coordinate counts as ratio 1 past its left neighbour.
            let ratio = if x == fl { 1.0 } else { x - fl };
            let mut c = coeffs(ratio, scale, a);
            let half = (c.len() / 2) as isize;
            // Neighbour window as the reference picks it: the n indices nearest x, ties to
            // the smaller ones (computed on x shifted by half, as it does).
            let xp = x + half as f64;
            let p = xp.floor();
            let start = p as isize + if xp == p { -half } else { 1 - half } - half;
            if a.exclude_outside {
                for (k, w) in c.iter_mut().enumerate() {
                    let i = start + k as isize;
                    if i < 0 || i >= in_w as isize {
                        *w = 0.0;
                    }
                }
                let s: f64 = c.iter().sum();
                let s = if s == 0.0 { 1.0 } else { s };
                c.iter_mut().for_each(|w| *w /= s);
            }
            Tap { start, coeffs: c, extrapolate }
        })
        .collect()
}

/// Resizes dim `axis` of row-major `data` (shape `shape`) to `taps.len()`.
fn apply_axis(data: &[f64], shape: &[usize], axis: usize, taps: &[Tap], extrapolation: f64) -> Vec<f64> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let (in_w, out_w) = (shape[axis], taps.len());
    let mut out = vec![0.0; outer * out_w * inner];
    if out.is_empty() {
        return out;
    }
    out.par_chunks_mut(out_w * inner).zip(data.par_chunks(in_w * inner)).for_each(|(ob, ib)| {
        for (tap, dst) in taps.iter().zip(ob.chunks_mut(inner)) {
            if tap.extrapolate {
                dst.fill(extrapolation);
                continue;
            }
            for (k, &w) in tap.coeffs.iter().enumerate() {
                // Zero weights are skipped so nearest copies exactly (no 0 * inf).
                if w == 0.0 {
                    continue;
                }
                let i = (tap.start + k as isize).clamp(0, in_w as isize - 1) as usize;
                for (o, &v) in dst.iter_mut().zip(&ib[i * inner..(i + 1) * inner]) {
                    *o += w * v;
                }
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::AspectPolicy;

    fn attrs(mode: ResizeMode, coord: CoordTransform) -> ResizeAttrs {
        ResizeAttrs { mode, coord, ..Default::default() }
    }

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_f32(shape.to_vec(), v.to_vec())
    }

    fn run(x: &Tensor, scales: &[f32], a: &ResizeAttrs) -> Tensor {
        resize(x, None, Some(&t(&[scales.len()], scales)), None, a).unwrap().remove(0)
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        assert!(a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5), "{a:?} vs {b:?}");
    }

    #[test]
    fn nearest_upsample() {
        let x = t(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let y = run(&x, &[1., 1., 2., 3.], &attrs(ResizeMode::Nearest, CoordTransform::Asymmetric));
        assert_eq!(y.shape, vec![1, 1, 4, 6]);
        // x_ori = 0, 1/3, 2/3, 1, ...: 2/3 rounds to 1.
        assert_eq!(y.to_f32_vec()[..6], [1., 1., 2., 2., 2., 2.]);
        // half_pixel, round_prefer_floor: 1-D [a, b] x2 -> x_ori -0.25, 0.25, 0.75, 1.25.
        let y = run(&t(&[2], &[1., 2.]), &[2.], &attrs(ResizeMode::Nearest, CoordTransform::HalfPixel));
        assert_eq!(y.to_f32_vec(), vec![1., 1., 2., 2.]);
    }

    #[test]
    fn linear_half_pixel_and_align_corners() {
        let x = t(&[2], &[1., 3.]);
        let y = run(&x, &[2.], &attrs(ResizeMode::Linear, CoordTransform::HalfPixel));
        close(&y.to_f32_vec(), &[1., 1.5, 2.5, 3.]);
        let y = run(&x, &[1.5], &attrs(ResizeMode::Linear, CoordTransform::AlignCorners));
        close(&y.to_f32_vec(), &[1., 2., 3.]);
        let sizes = Tensor::from_i64(vec![1], vec![5]);
        let a = attrs(ResizeMode::Linear, CoordTransform::AlignCorners);
        let y = resize(&t(&[3], &[1., 3., 5.]), None, None, Some(&sizes), &a).unwrap().remove(0);
        close(&y.to_f32_vec(), &[1., 2., 3., 4., 5.]);
    }

    #[test]
    fn cubic_keeps_constants_and_samples() {
        let x = t(&[4], &[2.; 4]);
        let y = run(&x, &[2.], &attrs(ResizeMode::Cubic, CoordTransform::HalfPixel));
        close(&y.to_f32_vec(), &[2.; 8]);
        // Integer source coordinates reproduce the input exactly.
        let x = t(&[4], &[1., 5., 2., 7.]);
        let y = run(&x, &[2.], &attrs(ResizeMode::Cubic, CoordTransform::Asymmetric));
        let v = y.to_f32_vec();
        close(&[v[0], v[2], v[4], v[6]], &[1., 5., 2., 7.]);
    }

    #[test]
    fn sizes_axes_and_policy() {
        let x = t(&[1, 2, 4], &[1., 2., 3., 4., 5., 6., 7., 8.]);
        let mut a = attrs(ResizeMode::Nearest, CoordTransform::Asymmetric);
        a.axes = Some(vec![-1]);
        let y = resize(&x, None, None, Some(&Tensor::from_i64(vec![1], vec![2])), &a).unwrap().remove(0);
        assert_eq!((y.shape.clone(), y.to_f32_vec()), (vec![1, 2, 2], vec![1., 3., 5., 7.]));
        let mut a = attrs(ResizeMode::Nearest, CoordTransform::Asymmetric);
        a.aspect = AspectPolicy::NotLarger;
        a.axes = Some(vec![1, 2]);
        let y = resize(&x, None, None, Some(&Tensor::from_i64(vec![2], vec![4, 2])), &a).unwrap().remove(0);
        assert_eq!(y.shape, vec![1, 1, 2]);
    }

    #[test]
    fn tf_crop_and_resize_extrapolates() {
        let x = t(&[3], &[0., 10., 20.]);
        let mut a = attrs(ResizeMode::Linear, CoordTransform::TfCropAndResize);
        a.extrapolation_value = -1.0;
        let roi = t(&[2], &[0.25, 1.25]);
        let y = resize(&x, Some(&roi), None, Some(&Tensor::from_i64(vec![1], vec![3])), &a).unwrap().remove(0);
        // x_ori = 0.5, 1.5, 2.5 (outside).
        close(&y.to_f32_vec(), &[5., 15., -1.]);
    }

    #[test]
    fn antialias_linear_downsample_averages() {
        // Downsample by 2 with antialias: triangle filter of width 2 input pixels each side.
        let x = t(&[4], &[0., 4., 8., 12.]);
        let mut a = attrs(ResizeMode::Linear, CoordTransform::HalfPixel);
        a.antialias = true;
        let y = run(&x, &[0.5], &a);
        // x_ori = 0.5 and 2.5: taps at offsets -1..3 weigh 1/8, 3/8, 3/8, 1/8 (edge-clamped).
        close(&y.to_f32_vec(), &[0.375 * 4. + 0.125 * 8., 0.125 * 4. + 0.375 * 8. + 0.5 * 12.]);
    }

    #[test]
    fn integer_and_errors() {
        let x = Tensor { shape: vec![2], data: crate::ir::TensorData::U8(vec![0, 255]) };
        let y = run(&x, &[1.5], &attrs(ResizeMode::Linear, CoordTransform::AlignCorners));
        assert_eq!(y.as_i64_vec().unwrap(), vec![0, 128, 255]); // 127.5 rounds to even
        let a = attrs(ResizeMode::Linear, CoordTransform::HalfPixel);
        assert!(resize(&t(&[2], &[1., 2.]), None, None, None, &a).is_err());
        assert!(resize(&t(&[2], &[1., 2.]), None, Some(&t(&[2], &[1., 2.])), None, &a).is_err());
        assert!(resize(&t(&[2], &[1., 2.]), None, Some(&t(&[1], &[-1.])), None, &a).is_err());
        assert!(resize(&t(&[0], &[]), None, None, Some(&Tensor::from_i64(vec![1], vec![3])), &a).is_err());
    }
}
