//! ConvTranspose: N-D transposed convolution, NCHW, weight [C_in, C_out/group, k...].
//!
//! Per batch image and group, one GEMM computes every kernel tap's contribution for every
//! input position, cols[(oc, tap), pos] = sum_c W[c, oc, tap] * X[c, pos] (f32, via
//! matrixmultiply), and col2im scatter-adds the columns into the output at
//! pos * stride + tap * dilation - pad_begin, dropping what falls outside the output (the
//! cropped pads) and leaving zeros where nothing lands (an output_shape larger than the full
//! output). Output channels scatter in parallel; the bias seeds each output plane.

use super::{float_in, float_out, OpResult};
use crate::ir::{ResolvedWindow, Tensor, Window};
use rayon::prelude::*;

pub fn conv_transpose(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    window: &Window,
    group: usize,
    output_padding: Option<&[usize]>,
    output_shape: Option<&[usize]>,
) -> OpResult {
    let rank = x.rank();
    if rank < 3 {
        return Err(format!("input must have rank >= 3 (N, C, spatial...), has shape {:?}", x.shape));
    }
    if w.rank() != rank {
        return Err(format!("weight {:?} must have the input's rank {rank}", w.shape));
    }
    if x.dtype() != w.dtype() {
        return Err(format!("input is {} but weight is {}", x.dtype(), w.dtype()));
    }
    if group == 0 {
        return Err("group must be positive".into());
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    if w.shape[0] != c {
        return Err(format!("input has {c} channels but weight {:?} expects {}", w.shape, w.shape[0]));
    }
    if c % group != 0 {
        return Err(format!("{c} input channels do not divide into {group} groups"));
    }
    let mg = w.shape[1];
    let m = mg.checked_mul(group).ok_or("output channel count overflows")?;
    let kernel = &w.shape[2..];
    if let Some(k) = &window.kernel_shape {
        if k.as_slice() != kernel {
            return Err(format!("kernel_shape {k:?} differs from the weight's spatial dims {kernel:?}"));
        }
    }
    if let Some(b) = b {
        if b.dtype() != x.dtype() {
            return Err(format!("bias is {} but the input is {}", b.dtype(), x.dtype()));
        }
        if b.rank() != 1 || b.len() != m {
            return Err(format!("bias has shape {:?}, expected [{m}]", b.shape));
        }
    }
    let input = &x.shape[2..];
    let rw = window.resolve_transposed(input, kernel, output_padding, output_shape)?;

    let mut out_shape = vec![n, m];
    out_shape.extend_from_slice(&rw.output);
    let too_big = || "output size overflows".to_string();
    let out_size = checked_product(&rw.output).ok_or_else(too_big)?;
    let total = checked_product(&out_shape).ok_or_else(too_big)?;
    let l = checked_product(input).ok_or_else(too_big)?;
    let k = checked_product(kernel).ok_or_else(too_big)?;
    let cg = c / group;
    let rows = mg.checked_mul(k).ok_or_else(too_big)?;
    let col_len = rows.checked_mul(l).ok_or_else(too_big)?;
    // Every offset handed to the GEMM and the scatter fits in isize from here on.
    for v in [total, x.len(), w.len(), col_len] {
        isize::try_from(v).map_err(|_| too_big())?;
    }

    let xv = float_in(x, "input")?;
    let wv = float_in(w, "weight")?;
    let bv = b.map(|b| float_in(b, "bias")).transpose()?;
    let mut y = alloc(total)?;
    if total == 0 {
        return Ok(vec![float_out(x.dtype(), out_shape, y)]);
    }
    let geom = Geom::new(&rw, input)?;
    let mut col = alloc(if cg == 0 || l == 0 { 0 } else { col_len })?;

    for (ng, y_ng) in y.chunks_mut(mg * out_size).enumerate() {
        let (img, g) = (ng / group, ng % group);
        let have_cols = !col.is_empty() && rows > 0;
        if have_cols {
            let xg = &xv[(img * c + g * cg) * l..][..cg * l];
            let wg = &wv[g * cg * rows..][..cg * rows];
            // SAFETY: A = wg^T is rows x cg with strides (1, rows), inside wg's cg*rows
            // elements; B = xg is cg x l with strides (l, 1), inside xg; C = col is rows x l
            // with strides (l, 1), exactly col_len elements. All sizes were checked to fit
            // in isize above; the slices do not alias.
            unsafe {
                matrixmultiply::sgemm(
                    rows,
                    cg,
                    l,
                    1.0,
                    wg.as_ptr(),
                    1,
                    rows as isize,
                    xg.as_ptr(),
                    l as isize,
                    1,
                    0.0,
                    col.as_mut_ptr(),
                    l as isize,
                    1,
                );
            }
        }
        let col = &col;
        let bv = bv.as_deref();
        y_ng.par_chunks_mut(out_size).enumerate().for_each(|(oc, plane)| {
            plane.fill(bv.map_or(0.0, |b| b[g * mg + oc]));
            if have_cols {
                geom.scatter(&col[oc * k * l..][..k * l], plane);
            }
        });
    }
    Ok(vec![float_out(x.dtype(), out_shape, y)])
}

fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// A zeroed f32 buffer, or an error instead of aborting when memory runs out.
fn alloc(len: usize) -> Result<Vec<f32>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| format!("cannot allocate {len} floats"))?;
    v.resize(len, 0.0);
    Ok(v)
}

/// col2im geometry for one output plane.
struct Geom {
    input: Vec<usize>,
    kernel: Vec<usize>,
    /// Row-major strides of the output plane.
    out_strides: Vec<usize>,
    /// For spatial dim d and kernel tap t along it: the output coordinate of each input
    /// coordinate, or `usize::MAX` when it falls outside the output.
    map: Vec<Vec<Vec<usize>>>,
    /// Along the last dim, for each tap t: the input range that lands inside the output and
    /// the output coordinate of its first element.
    last: Vec<(usize, usize, usize)>,
    last_stride: usize,
}

impl Geom {
    fn new(rw: &ResolvedWindow, input: &[usize]) -> Result<Geom, String> {
        let nd = input.len();
        let kernel = rw.kernel.clone();
        let out = &rw.output;
        let mut out_strides = vec![1usize; nd];
        for d in (0..nd.saturating_sub(1)).rev() {
            out_strides[d] = out_strides[d + 1] * out[d + 1];
        }
        // Output coordinate (before cropping) of input coordinate i, tap t, dim d; i128 so
        // no stride or dilation can overflow it.
        let coord = |d: usize, i: usize, t: usize| -> Option<usize> {
            let o = i as i128 * rw.strides[d] as i128 + t as i128 * rw.dilations[d] as i128 - rw.pad_begin[d] as i128;
            (0..out[d] as i128).contains(&o).then_some(o as usize)
        };
        let map = (0..nd)
            .map(|d| {
                (0..kernel[d]).map(|t| (0..input[d]).map(|i| coord(d, i, t).unwrap_or(usize::MAX)).collect()).collect()
            })
            .collect();
        let dl = nd - 1;
        let last = (0..kernel[dl])
            .map(|t| {
                // Valid inputs along a dim form one contiguous range (coord is monotonic).
                let valid: Vec<usize> = (0..input[dl]).filter(|&i| coord(dl, i, t).is_some()).collect();
                match (valid.first(), valid.last()) {
                    (Some(&lo), Some(&hi)) => (lo, hi + 1, coord(dl, lo, t).unwrap_or(0)),
                    _ => (0, 0, 0),
                }
            })
            .collect();
        Ok(Geom { input: input.to_vec(), kernel, out_strides, map, last, last_stride: rw.strides[dl] })
    }

    /// Adds one output channel's columns (taps x input positions, row-major) into its plane.
    fn scatter(&self, col: &[f32], plane: &mut [f32]) {
        let nd = self.input.len();
        let dl = nd - 1;
        let row_len = self.input[dl];
        let l: usize = self.input.iter().product();
        let outer_count = l / row_len.max(1);
        let mut tap = vec![0usize; nd];
        for cols in col.chunks_exact(l.max(1)).take(self.kernel.iter().product()) {
            let (lo, hi, o0) = self.last[tap[dl]];
            if lo < hi {
                let mut pos = vec![0usize; dl];
                'outer: for outer in 0..outer_count {
                    let mut base = o0;
                    for d in 0..dl {
                        let o = self.map[d][tap[d]][pos[d]];
                        if o == usize::MAX {
                            advance(&mut pos, &self.input[..dl]);
                            continue 'outer;
                        }
                        base += o * self.out_strides[d];
                    }
                    let src = &cols[outer * row_len + lo..outer * row_len + hi];
                    if self.last_stride == 1 {
                        for (dst, s) in plane[base..base + src.len()].iter_mut().zip(src) {
                            *dst += s;
                        }
                    } else {
                        for (dst, s) in plane[base..].iter_mut().step_by(self.last_stride).zip(src) {
                            *dst += s;
                        }
                    }
                    advance(&mut pos, &self.input[..dl]);
                }
            }
            advance(&mut tap, &self.kernel);
        }
    }
}

/// Steps a row-major multi-index.
fn advance(idx: &mut [usize], dims: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < dims[d] {
            return;
        }
        idx[d] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AutoPad, DType, TensorData};

    fn win(strides: &[usize], pads: Option<&[usize]>, dilations: Option<&[usize]>, auto_pad: AutoPad) -> Window {
        Window {
            kernel_shape: None,
            strides: Some(strides.to_vec()),
            pads: pads.map(<[usize]>::to_vec),
            dilations: dilations.map(<[usize]>::to_vec),
            auto_pad,
        }
    }

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_f32(shape.to_vec(), v.to_vec())
    }

    fn run(
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        wd: &Window,
        group: usize,
        op: Option<&[usize]>,
        os: Option<&[usize]>,
    ) -> Tensor {
        conv_transpose(x, w, b, wd, group, op, os).unwrap().remove(0)
    }

    /// Direct definition: every input element times every tap, added at its output position.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        wd: &Window,
        group: usize,
        op: Option<&[usize]>,
        os: Option<&[usize]>,
    ) -> Tensor {
        let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
        let (n, c, input, kernel) = (x.shape[0], x.shape[1], &x.shape[2..], &w.shape[2..]);
        let mg = w.shape[1];
        let m = mg * group;
        let rw = wd.resolve_transposed(input, kernel, op, os).unwrap();
        let out_size: usize = rw.output.iter().product();
        let (l, k): (usize, usize) = (input.iter().product(), kernel.iter().product());
        let mut y = vec![0f64; n * m * out_size];
        let nd = input.len();
        for img in 0..n {
            for ic in 0..c {
                let g = ic / (c / group);
                for oc in 0..mg {
                    let mut pos = vec![0; nd];
                    for li in 0..l {
                        let mut tap = vec![0; nd];
                        for ki in 0..k {
                            let mut flat = 0i64;
                            let mut ok = true;
                            for d in 0..nd {
                                let o =
                                    (pos[d] * rw.strides[d] + tap[d] * rw.dilations[d]) as i64 - rw.pad_begin[d] as i64;
                                ok &= o >= 0 && o < rw.output[d] as i64;
                                flat = flat * rw.output[d] as i64 + o;
                            }
                            if ok {
                                y[(img * m + g * mg + oc) * out_size + flat as usize] +=
                                    xv[(img * c + ic) * l + li] * wv[(ic * mg + oc) * k + ki];
                            }
                            advance(&mut tap, kernel);
                        }
                        advance(&mut pos, input);
                    }
                }
            }
        }
        if let Some(b) = b {
            let bv = b.to_f64_vec();
            for (i, v) in y.iter_mut().enumerate() {
                *v += bv[(i / out_size) % m];
            }
        }
        let mut shape = vec![n, m];
        shape.extend(&rw.output);
        Tensor::from_f32(shape, y.into_iter().map(|v| v as f32).collect())
    }

    /// Deterministic pseudo-random values in [-1, 1).
    fn pseudo(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let v = (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect::<Vec<_>>();
        t(shape, &v)
    }

    fn assert_close(a: &Tensor, b: &Tensor) {
        assert_eq!(a.shape, b.shape);
        for (i, (p, q)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
            assert!((p - q).abs() <= 1e-5 + 1e-5 * q.abs(), "element {i}: {p} vs {q}");
        }
    }

    #[test]
    fn stride_2_kernel_2_tiles_the_kernel() {
        let x = t(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let w = t(&[1, 1, 2, 2], &[1., 10., 100., 1000.]);
        let y = run(&x, &w, None, &win(&[2, 2], None, None, AutoPad::NotSet), 1, None, None);
        assert_eq!(y.shape, vec![1, 1, 4, 4]);
        #[rustfmt::skip]
        let want = [
            1., 10., 2., 20.,
            100., 1000., 200., 2000.,
            3., 30., 4., 40.,
            300., 3000., 400., 4000.,
        ];
        assert_eq!(y.to_f32_vec(), want);
    }

    #[test]
    fn stride_1_overlaps_add_and_pads_crop() {
        let x = t(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let w = t(&[1, 1, 2, 2], &[1., 1., 1., 1.]);
        let y = run(&x, &w, None, &win(&[1, 1], None, None, AutoPad::NotSet), 1, None, None);
        assert_eq!(y.shape, vec![1, 1, 3, 3]);
        assert_eq!(y.to_f32_vec(), [1., 3., 2., 4., 10., 6., 3., 7., 4.]);
        let y = run(&x, &w, None, &win(&[1, 1], Some(&[1, 1, 0, 0]), None, AutoPad::NotSet), 1, None, None);
        assert_eq!(y.shape, vec![1, 1, 2, 2]);
        assert_eq!(y.to_f32_vec(), [10., 6., 7., 4.]);
    }

    #[test]
    fn bias_groups_and_output_channels() {
        // Two groups of one input channel, each producing two output channels (1x1 kernel).
        let x = t(&[1, 2, 1, 2], &[1., 2., 3., 4.]);
        let w = t(&[2, 2, 1, 1], &[1., 2., 10., 20.]);
        let b = t(&[4], &[0.5, 0.25, 0., -1.]);
        let y = run(&x, &w, Some(&b), &win(&[1, 1], None, None, AutoPad::NotSet), 2, None, None);
        assert_eq!(y.shape, vec![1, 4, 1, 2]);
        assert_eq!(y.to_f32_vec(), [1.5, 2.5, 2.25, 4.25, 30., 40., 59., 79.]);
    }

    #[test]
    fn output_padding_and_larger_output_shape_add_zeros_at_the_end() {
        let x = t(&[1, 1, 2], &[1., 2.]);
        let w = t(&[1, 1, 2], &[1., 1.]);
        let y = run(&x, &w, None, &win(&[2], None, None, AutoPad::NotSet), 1, Some(&[1]), None);
        assert_eq!(y.to_f32_vec(), [1., 1., 2., 2., 0.]);
        let y = run(&x, &w, None, &win(&[2], None, None, AutoPad::NotSet), 1, None, Some(&[6]));
        assert_eq!(y.to_f32_vec(), [1., 1., 2., 2., 0., 0.]);
    }

    #[test]
    fn resolve_transposed_matches_onnxruntime() {
        // Input 3, kernel 3, stride 2: full output 7. Values checked against onnxruntime 1.31
        // (and the onnx reference, where it accepts the attributes).
        let w = |a| win(&[2], None, None, a);
        let r = |wd: Window, os: Option<&[usize]>| {
            let r = wd.resolve_transposed(&[3], &[3], None, os).unwrap();
            (r.pad_begin[0], r.pad_end[0], r.output[0])
        };
        assert_eq!(r(w(AutoPad::SameUpper), None), (0, 1, 6));
        assert_eq!(r(w(AutoPad::SameLower), None), (1, 0, 6));
        assert_eq!(r(w(AutoPad::NotSet), Some(&[6])), (1, 0, 6));
        assert_eq!(r(w(AutoPad::Valid), Some(&[6])), (1, 0, 6));
        assert_eq!(r(w(AutoPad::SameUpper), Some(&[6])), (0, 1, 6));
        assert_eq!(r(w(AutoPad::NotSet), Some(&[5])), (1, 1, 5));
        assert_eq!(r(w(AutoPad::NotSet), Some(&[8])), (0, 0, 8));
        // output_shape overrides explicit pads; it may carry the N and C dims.
        assert_eq!(r(win(&[2], Some(&[0, 1]), None, AutoPad::NotSet), Some(&[1, 1, 6])), (1, 0, 6));
        assert_eq!(r(win(&[2], Some(&[2, 1]), None, AutoPad::NotSet), None), (2, 1, 4));
    }

    #[test]
    fn matches_the_direct_definition() {
        struct Case {
            x: Vec<usize>,
            w: Vec<usize>,
            group: usize,
            strides: Vec<usize>,
            pads: Option<Vec<usize>>,
            dil: Option<Vec<usize>>,
            auto_pad: AutoPad,
            op: Option<Vec<usize>>,
            os: Option<Vec<usize>>,
            bias: bool,
        }
        let c = |x: &[usize], w: &[usize], group, strides: &[usize]| Case {
            x: x.to_vec(),
            w: w.to_vec(),
            group,
            strides: strides.to_vec(),
            pads: None,
            dil: None,
            auto_pad: AutoPad::NotSet,
            op: None,
            os: None,
            bias: false,
        };
        let cases = vec![
            Case { bias: true, ..c(&[1, 24, 10, 9], &[24, 6, 2, 2], 1, &[2, 2]) },
            Case { pads: Some(vec![1, 0, 2, 1]), dil: Some(vec![2, 1]), ..c(&[2, 4, 5, 6], &[4, 3, 3, 2], 2, &[3, 1]) },
            Case { auto_pad: AutoPad::SameLower, bias: true, ..c(&[1, 3, 4, 5], &[3, 2, 3, 3], 1, &[2, 2]) },
            Case { auto_pad: AutoPad::SameUpper, op: Some(vec![1, 0]), ..c(&[1, 3, 4, 5], &[3, 2, 3, 3], 1, &[2, 3]) },
            Case { os: Some(vec![9, 13]), ..c(&[1, 2, 4, 5], &[2, 2, 3, 3], 1, &[2, 2]) },
            Case { os: Some(vec![7, 10]), ..c(&[1, 2, 4, 5], &[2, 2, 3, 3], 1, &[2, 2]) },
            Case { pads: Some(vec![1, 2]), bias: true, ..c(&[3, 6, 7], &[6, 1, 4], 6, &[3]) },
            Case {
                pads: Some(vec![0, 1, 1, 1, 0, 1]),
                dil: Some(vec![1, 2, 1]),
                ..c(&[1, 2, 3, 4, 3], &[2, 2, 2, 2, 3], 1, &[1, 2, 2])
            },
            // Kernel taps that land wholly in the cropped pads.
            Case { pads: Some(vec![3, 3, 3, 3]), ..c(&[1, 1, 3, 3], &[1, 1, 4, 4], 1, &[1, 1]) },
        ];
        for (i, cs) in cases.iter().enumerate() {
            let x = pseudo(&cs.x, 2 * i as u64);
            let w = pseudo(&cs.w, 2 * i as u64 + 1);
            let b = pseudo(&[cs.w[1] * cs.group], 99);
            let wd = Window {
                kernel_shape: None,
                strides: Some(cs.strides.clone()),
                pads: cs.pads.clone(),
                dilations: cs.dil.clone(),
                auto_pad: cs.auto_pad,
            };
            let b = cs.bias.then_some(&b);
            let got = run(&x, &w, b, &wd, cs.group, cs.op.as_deref(), cs.os.as_deref());
            assert_close(&got, &naive(&x, &w, b, &wd, cs.group, cs.op.as_deref(), cs.os.as_deref()));
        }
    }

    #[test]
    fn keeps_the_input_float_type() {
        let x = Tensor {
            shape: vec![1, 1, 2],
            data: TensorData::F16(vec![half::f16::from_f32(1.0), half::f16::from_f32(2.0)]),
        };
        let w = Tensor { shape: vec![1, 1, 1], data: TensorData::F16(vec![half::f16::from_f32(3.0)]) };
        let y = run(&x, &w, None, &win(&[1], None, None, AutoPad::NotSet), 1, None, None);
        assert_eq!(y.dtype(), DType::F16);
        assert_eq!(y.to_f32_vec(), [3., 6.]);
    }

    #[test]
    fn empty_batch_and_empty_input() {
        let w = t(&[1, 2, 2], &[1., 1., 1., 1.]);
        let x = t(&[0, 1, 3], &[]);
        let y = run(&x, &w, None, &win(&[1], None, None, AutoPad::NotSet), 1, None, None);
        assert_eq!(y.shape, vec![0, 2, 4]);
        let b = t(&[2], &[1., 2.]);
        let x = t(&[1, 1, 0], &[]);
        let y = run(&x, &w, Some(&b), &win(&[1], None, None, AutoPad::NotSet), 1, None, Some(&[3]));
        assert_eq!(y.to_f32_vec(), [1., 1., 1., 2., 2., 2.]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let wd = win(&[1, 1], None, None, AutoPad::NotSet);
        let x = t(&[1, 2, 2, 2], &[0.; 8]);
        let w = t(&[2, 1, 2, 2], &[0.; 8]);
        let ct =
            |x: &Tensor, w: &Tensor, b: Option<&Tensor>, wd: &Window, g| conv_transpose(x, w, b, wd, g, None, None);
        assert!(ct(&x, &t(&[3, 1, 2, 2], &[0.; 12]), None, &wd, 1).is_err(), "channel mismatch");
        assert!(ct(&x, &w, None, &wd, 0).is_err(), "group 0");
        assert!(ct(&x, &w, None, &wd, 3).is_err(), "group does not divide");
        assert!(ct(&x, &w, Some(&t(&[3], &[0.; 3])), &wd, 1).is_err(), "bias length");
        assert!(ct(&x, &t(&[2, 1, 2], &[0.; 4]), None, &wd, 1).is_err(), "weight rank");
        assert!(ct(&t(&[2, 2], &[0.; 4]), &t(&[2, 2], &[0.; 4]), None, &wd, 1).is_err(), "rank 2");
        let xi = Tensor::from_i64(vec![1, 2, 2, 2], vec![0; 8]);
        let wi = Tensor::from_i64(vec![2, 1, 2, 2], vec![0; 8]);
        assert!(ct(&xi, &wi, None, &wd, 1).is_err(), "integer input");
        assert!(ct(&x, &w, None, &win(&[0, 1], None, None, AutoPad::NotSet), 1).is_err(), "zero stride");
        assert!(
            ct(&x, &w, None, &win(&[1, 1], Some(&[2, 2, 2, 2]), None, AutoPad::NotSet), 1).is_err(),
            "pads too large"
        );
        assert!(ct(&x, &w, None, &win(&[1, 1], Some(&[1, 1]), None, AutoPad::NotSet), 1).is_err(), "pads length");
        let mut wk = wd.clone();
        wk.kernel_shape = Some(vec![3, 3]);
        assert!(ct(&x, &w, None, &wk, 1).is_err(), "kernel_shape mismatch");
        assert!(conv_transpose(&x, &w, None, &wd, 1, Some(&[1]), None).is_err(), "output_padding length");
        assert!(conv_transpose(&x, &w, None, &wd, 1, None, Some(&[1, 2, 3])).is_err(), "output_shape length");
    }
}
