//! N-D grouped convolution (NCHW...) as im2col + GEMM per (image, group).
//!
//! For one image and group, the im2col matrix has a row per (input channel, kernel offset) and
//! a column per output position; the group's weights are a [M/group, C/group * prod(kernel)]
//! matrix, so the output block is one GEMM. 1x1 stride-1 unpadded convs skip im2col.

use super::matmul::{gemm_into, GemmScalar, Mat};
use super::OpResult;
use crate::ir::{DType, ResolvedWindow, Tensor, Window};
use rayon::prelude::*;
use std::borrow::Cow;

pub fn conv(x: &Tensor, w: &Tensor, b: Option<&Tensor>, window: &Window, group: usize) -> OpResult {
    if !x.dtype().is_float() {
        return Err(format!("input must be a float tensor, is {}", x.dtype()));
    }
    for (t, what) in [(Some(w), "weight"), (b, "bias")] {
        if let Some(t) = t {
            if t.dtype() != x.dtype() {
                return Err(format!("{what} is {} but the input is {}", t.dtype(), x.dtype()));
            }
        }
    }
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(format!("input {:?} and weight {:?} must have the same rank >= 3", x.shape, w.shape));
    }
    if group == 0 {
        return Err("group must be >= 1".into());
    }
    let (c, m, cg) = (x.shape[1], w.shape[0], w.shape[1]);
    if cg * group != c {
        return Err(format!(
            "input has {c} channels but weight {:?} with group {group} expects {}",
            w.shape,
            cg * group
        ));
    }
    if m % group != 0 {
        return Err(format!("{m} output channels are not divisible by group {group}"));
    }
    let kernel = &w.shape[2..];
    if let Some(k) = &window.kernel_shape {
        if k[..] != kernel[..] {
            return Err(format!("kernel_shape {k:?} differs from the weight's spatial dims {kernel:?}"));
        }
    }
    if let Some(b) = b {
        if b.shape != [m] {
            return Err(format!("bias has shape {:?}, expected [{m}]", b.shape));
        }
    }
    let geom = window.resolve(&x.shape[2..], kernel, false)?;
    Ok(vec![if x.dtype() == DType::F64 {
        conv_typed::<f64>(x, w, b, &geom, group)
    } else {
        conv_typed::<f32>(x, w, b, &geom, group)
    }])
}

fn conv_typed<T: GemmScalar>(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    geom: &ResolvedWindow,
    group: usize,
) -> Tensor {
    let (n, c, m) = (x.shape[0], x.shape[1], w.shape[0]);
    let (cg, mg) = (c / group, m / group);
    let in_size: usize = x.shape[2..].iter().product();
    let positions: usize = geom.output.iter().product();
    let kdim = cg * geom.kernel.iter().product::<usize>();
    let mut out_shape = vec![n, m];
    out_shape.extend(&geom.output);
    let mut out = vec![T::ZERO; n * m * positions];
    if out.is_empty() {
        return T::tensor(x.dtype(), out_shape, out);
    }
    let (xs, ws) = (T::values(x), T::values(w));
    let bias = b.map(T::values);
    let identity = geom.kernel.iter().chain(&geom.strides).all(|&v| v == 1)
        && geom.pad_begin.iter().chain(&geom.pad_end).all(|&p| p == 0);
    let tasks = n * group;

    // One (image, group) pair: its output block is `mg` contiguous channel planes.
    let run = |(j, y): (usize, &mut [T])| {
        let (img, g) = (j / group, j % group);
        if let Some(bias) = &bias {
            for (oc, plane) in y.chunks_mut(positions).enumerate() {
                plane.fill(bias[g * mg + oc]);
            }
        }
        if kdim == 0 {
            return;
        }
        let xin = &xs[(img * c + g * cg) * in_size..][..cg * in_size];
        let col: Cow<[T]> =
            if identity { Cow::Borrowed(xin) } else { Cow::Owned(im2col(xin, cg, &x.shape[2..], geom, tasks == 1)) };
        let wg = Mat::row_major(&ws[g * mg * kdim..][..mg * kdim], kdim, false);
        let beta = if bias.is_some() { T::ONE } else { T::ZERO };
        gemm_into(mg, kdim, positions, T::ONE, wg, Mat::row_major(&col, positions, false), beta, y);
    };
    if tasks > 1 {
        out.par_chunks_mut(mg * positions).enumerate().for_each(run);
    } else {
        run((0, &mut out));
    }
    T::tensor(x.dtype(), out_shape, out)
}

/// The [channels * prod(kernel), prod(output)] patch matrix of one image's channels `x`.
fn im2col<T: GemmScalar>(x: &[T], channels: usize, input: &[usize], g: &ResolvedWindow, parallel: bool) -> Vec<T> {
    let ktotal: usize = g.kernel.iter().product();
    let positions: usize = g.output.iter().product();
    let in_size: usize = input.iter().product();
    let mut col = vec![T::ZERO; channels * ktotal * positions];
    let fill = |(r, row): (usize, &mut [T])| {
        let (ch, mut k) = (r / ktotal, r % ktotal);
        // Kernel offset of this row, per spatial dim (last dim fastest).
        let mut koff = vec![0; g.kernel.len()];
        for d in (0..g.kernel.len()).rev() {
            koff[d] = k % g.kernel[d];
            k /= g.kernel[d];
        }
        fill_row(row, &x[ch * in_size..][..in_size], input, &koff, g);
    };
    if parallel {
        col.par_chunks_mut(positions).enumerate().for_each(fill);
    } else {
        col.chunks_mut(positions).enumerate().for_each(fill);
    }
    col
}

/// One im2col row: for every output position, the input element under kernel offset `koff`
/// (zero where it falls in the padding).
fn fill_row<T: GemmScalar>(row: &mut [T], plane: &[T], input: &[usize], koff: &[usize], g: &ResolvedWindow) {
    let nd = input.len();
    let last = nd - 1;
    // Input coordinate of output index `o` on dim `d`, when inside the input.
    let coord = |d: usize, o: usize| -> Option<usize> {
        let v = (o * g.strides[d] + koff[d] * g.dilations[d]) as isize - g.pad_begin[d] as isize;
        (v >= 0 && (v as usize) < input[d]).then_some(v as usize)
    };
    // Output range on the last dim whose input coordinate is inside the input.
    let (s, ol) = (g.strides[last], g.output[last]);
    let shift = (koff[last] * g.dilations[last]) as isize - g.pad_begin[last] as isize;
    let lo = if shift >= 0 { 0 } else { ((-shift) as usize).div_ceil(s) }.min(ol);
    let hi = if shift >= input[last] as isize { 0 } else { ((input[last] as isize - shift) as usize).div_ceil(s) }
        .clamp(lo, ol);
    let in_strides = crate::ir::strides(input);
    let mut outer = vec![0usize; last]; // output multi-index over the leading dims
    for seg in row.chunks_mut(ol) {
        let mut base = Some(0usize);
        for d in 0..last {
            base = base.and_then(|b| coord(d, outer[d]).map(|i| b + i * in_strides[d]));
        }
        match base {
            Some(base) if lo < hi => {
                seg[..lo].fill(T::ZERO);
                seg[hi..].fill(T::ZERO);
                let first = (base as isize + (lo * s) as isize + shift) as usize;
                if s == 1 {
                    seg[lo..hi].copy_from_slice(&plane[first..first + (hi - lo)]);
                } else {
                    for (i, v) in seg[lo..hi].iter_mut().enumerate() {
                        *v = plane[first + i * s];
                    }
                }
            }
            _ => seg.fill(T::ZERO),
        }
        for d in (0..last).rev() {
            outer[d] += 1;
            if outer[d] < g.output[d] {
                break;
            }
            outer[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::AutoPad;

    fn win(strides: &[usize], pads: &[usize], dilations: &[usize]) -> Window {
        let opt = |v: &[usize]| (!v.is_empty()).then(|| v.to_vec());
        Window {
            kernel_shape: None,
            strides: opt(strides),
            pads: opt(pads),
            dilations: opt(dilations),
            auto_pad: AutoPad::NotSet,
        }
    }

    /// Direct N-D convolution, the definition, for cross-checking im2col.
    fn naive(x: &Tensor, w: &Tensor, b: Option<&Tensor>, g: &ResolvedWindow, group: usize) -> Vec<f64> {
        let (xs, ws) = (x.to_f64_vec(), w.to_f64_vec());
        let (n, c, m) = (x.shape[0], x.shape[1], w.shape[0]);
        let (cg, mg) = (c / group, m / group);
        let sp = &x.shape[2..];
        let nd = sp.len();
        let positions: usize = g.output.iter().product();
        let ktot: usize = g.kernel.iter().product();
        let unflat = |mut i: usize, dims: &[usize]| {
            let mut v = vec![0; dims.len()];
            for d in (0..dims.len()).rev() {
                v[d] = i % dims[d];
                i /= dims[d];
            }
            v
        };
        let mut out = vec![0.0; n * m * positions];
        for img in 0..n {
            for oc in 0..m {
                let grp = oc / mg;
                for p in 0..positions {
                    let o = unflat(p, &g.output);
                    let mut acc = b.map_or(0.0, |b| b.to_f64_vec()[oc]);
                    for ic in 0..cg {
                        for kk in 0..ktot {
                            let k = unflat(kk, &g.kernel);
                            let mut flat = 0i64;
                            let mut inside = true;
                            for d in 0..nd {
                                let v = (o[d] * g.strides[d] + k[d] * g.dilations[d]) as i64 - g.pad_begin[d] as i64;
                                inside &= v >= 0 && v < sp[d] as i64;
                                flat = flat * sp[d] as i64 + v;
                            }
                            if inside {
                                let xi = (img * c + grp * cg + ic) * sp.iter().product::<usize>() + flat as usize;
                                acc += xs[xi] * ws[(oc * cg + ic) * ktot + kk];
                            }
                        }
                    }
                    out[(img * m + oc) * positions + p] = acc;
                }
            }
        }
        out
    }

    fn ramp(shape: &[usize], seed: f32) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32(shape.to_vec(), (0..n).map(|i| ((i as f32 * 0.37 + seed).sin() * 2.0).round() / 2.0).collect())
    }

    fn check(xs: &[usize], ws: &[usize], window: &Window, group: usize, bias: bool) {
        let (x, w) = (ramp(xs, 0.1), ramp(ws, 1.3));
        let b = bias.then(|| ramp(&[ws[0]], 2.0));
        let y = &conv(&x, &w, b.as_ref(), window, group).unwrap()[0];
        let g = window.resolve(&xs[2..], &ws[2..], false).unwrap();
        let want = naive(&x, &w, b.as_ref(), &g, group);
        assert_eq!(y.shape[2..], g.output[..]);
        for (a, e) in y.to_f64_vec().iter().zip(&want) {
            assert!((a - e).abs() < 1e-4, "{a} vs {e} for x {xs:?} w {ws:?} {window:?}");
        }
    }

    #[test]
    fn hand_checked_2d() {
        // 3x3 ones kernel over 0..9, pad 1: each output sums its 3x3 neighbourhood.
        let x = Tensor::from_f32(vec![1, 1, 3, 3], (0..9).map(|v| v as f32).collect());
        let w = Tensor::from_f32(vec![1, 1, 3, 3], vec![1.0; 9]);
        let y = &conv(&x, &w, None, &win(&[], &[1, 1, 1, 1], &[]), 1).unwrap()[0];
        assert_eq!(y.to_f32_vec(), vec![8., 15., 12., 21., 36., 27., 20., 33., 24.]);
        let y = &conv(&x, &w, Some(&Tensor::from_f32(vec![1], vec![1.0])), &win(&[2, 2], &[1, 1, 1, 1], &[]), 1)
            .unwrap()[0];
        assert_eq!((y.shape.clone(), y.to_f32_vec()), (vec![1, 1, 2, 2], vec![9., 13., 21., 25.]));
    }

    #[test]
    fn f64_computes_in_f64() {
        use crate::ir::TensorData;
        let x = Tensor { shape: vec![1, 1, 1, 2], data: TensorData::F64(vec![1.0 + 1e-12, 2.0]) };
        let w = Tensor { shape: vec![1, 1, 1, 2], data: TensorData::F64(vec![1.0, 1.0]) };
        let y = &conv(&x, &w, None, &win(&[], &[], &[]), 1).unwrap()[0];
        assert_eq!((y.dtype(), y.to_f64_vec()), (DType::F64, vec![3.0 + 1e-12]));
    }

    #[test]
    fn matches_direct_convolution() {
        check(&[2, 3, 7], &[4, 3, 3], &win(&[2], &[1, 2], &[2]), 1, true);
        // Kernel offsets whose whole row lies in the padding.
        check(&[1, 2, 1], &[3, 2, 3], &win(&[], &[2, 2], &[]), 1, true);
        check(&[1, 1, 2, 1], &[1, 1, 3, 3], &win(&[1, 2], &[2, 2, 2, 2], &[]), 1, false);
        check(&[1, 4, 6, 5], &[6, 2, 3, 2], &win(&[1, 2], &[2, 0, 1, 1], &[1, 2]), 2, true);
        check(&[2, 4, 5, 5], &[8, 1, 3, 3], &win(&[2, 2], &[1, 1, 1, 1], &[]), 4, false); // depthwise x2
        check(&[1, 3, 4, 4], &[5, 3, 1, 1], &win(&[], &[], &[]), 1, true); // 1x1 fast path
        check(&[1, 2, 4, 5, 3], &[2, 2, 2, 3, 2], &win(&[1, 2, 1], &[1, 0, 1, 0, 1, 1], &[2, 1, 1]), 1, true);
        let same = Window { auto_pad: AutoPad::SameLower, ..win(&[2, 2], &[], &[]) };
        check(&[1, 2, 5, 6], &[3, 2, 3, 2], &same, 1, false);
    }

    #[test]
    fn rejects_bad_shapes() {
        let x = ramp(&[1, 3, 4, 4], 0.0);
        assert!(conv(&x, &ramp(&[2, 2, 3, 3], 0.0), None, &win(&[], &[], &[]), 1).is_err());
        assert!(conv(&x, &ramp(&[2, 3, 5, 5], 0.0), None, &win(&[], &[], &[]), 1).is_err());
        assert!(conv(&x, &ramp(&[2, 3, 3], 0.0), None, &win(&[], &[], &[]), 1).is_err());
        assert!(conv(&x, &ramp(&[2, 3, 3, 3], 0.0), Some(&ramp(&[3], 0.0)), &win(&[], &[], &[]), 1).is_err());
        let y = &conv(&ramp(&[0, 3, 4, 4], 0.0), &ramp(&[2, 3, 3, 3], 0.0), None, &win(&[], &[], &[]), 1).unwrap()[0];
        assert_eq!(y.shape, vec![0, 2, 2, 2]);
    }
}
