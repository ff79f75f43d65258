//! Fourier transforms on the host (audio front ends): DFT (opset 20's form; opset 17's
//! axis attribute becomes its axis input at import) and STFT. Complex values are the last axis
//! of size 2 (real, imaginary), real ones a last axis of size 1. Computed in f64 with an exact
//! twiddle table, rounded once to the input's type.

use super::{opt, req, OpResult};
use crate::ir::Tensor;
use rayon::prelude::*;
use std::f64::consts::PI;

/// `e^(-2 pi i t / n)` for t in 0..n (conjugate for the inverse), indexed by `j * k mod n`.
fn twiddles(n: usize, inverse: bool) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    (0..n).map(|t| 2.0 * PI * t as f64 / n as f64).map(|a| (a.cos(), sign * a.sin())).collect()
}

fn scalar_int(t: &Tensor, what: &str) -> Result<i64, String> {
    match t.as_i64_vec().as_deref() {
        Some([v]) => Ok(*v),
        _ => Err(format!("{what} must be one integer, is {} {:?}", t.dtype(), t.shape)),
    }
}

/// The complex signal's element `(re, im)` at flat position `p` of a [.., 1 or 2] tensor.
fn complex(v: &[f64], p: usize, channels: usize) -> (f64, f64) {
    if channels == 1 {
        (v[p], 0.0)
    } else {
        (v[2 * p], v[2 * p + 1])
    }
}

/// ONNX DFT: the transform of length `dft_length` (input 1; default the axis' size, or
/// `2 * (size - 1)` for a one-sided inverse) along `axis` (input 2, default -2; never the
/// last, complex axis), the signal zero-padded or truncated to it. `onesided` keeps bins 0 to
/// n/2 (forward, of a real signal) or reads them and returns the real signal (inverse).
pub fn dft(inputs: &[Option<&Tensor>], inverse: bool, onesided: bool) -> OpResult {
    let x = req(inputs, 0)?;
    let r = x.rank();
    if !x.dtype().is_float() || r < 2 || !matches!(x.shape[r - 1], 1 | 2) {
        return Err(format!("input must be a float tensor [.., 1 or 2], is {} {:?}", x.dtype(), x.shape));
    }
    let axis = opt(inputs, 2).map_or(Ok(-2), |t| scalar_int(t, "axis"))?;
    let a = if axis < 0 { axis + r as i64 } else { axis };
    let a = usize::try_from(a).ok().filter(|&a| a + 1 < r).ok_or_else(|| {
        format!("axis {axis} must name a signal axis of the rank-{r} input, not its last (complex) axis")
    })?;
    let len = x.shape[a];
    let n = match opt(inputs, 1) {
        Some(t) => scalar_int(t, "dft_length")?,
        None if inverse && onesided => 2 * (len as i64 - 1),
        None => len as i64,
    };
    let n = usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| format!("dft_length {n} must be positive"))?;
    let channels = x.shape[r - 1];
    let outer: usize = x.shape[..a].iter().product();
    let inner: usize = x.shape[a + 1..r - 1].iter().product();
    let (bins, out_channels) = match (inverse, onesided) {
        (false, true) => (n / 2 + 1, 2),
        (true, true) => (n, 1),
        _ => (n, 2),
    };
    let w = twiddles(n, inverse);
    let v = x.to_f64_vec();
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    // The input bins a one-sided inverse reads: 0 to n/2 of the Hermitian spectrum.
    let used = if inverse && onesided { len.min(n / 2 + 1) } else { len.min(n) };
    let mut out = vec![0.0; outer * bins * inner * out_channels];
    out.par_chunks_mut(bins * inner * out_channels).enumerate().for_each(|(o, block)| {
        for i in 0..inner {
            let at = |j: usize| complex(&v, (o * len + j) * inner + i, channels);
            for k in 0..bins {
                let (mut re, mut im) = (0.0, 0.0);
                if inverse && onesided {
                    // Bin j and its mirror n - j (the conjugate) together: twice the real part;
                    // bin 0 and, for even n, bin n/2 once, their imaginary parts unused.
                    for j in 0..used {
                        let (cr, ci) = at(j);
                        let (wr, wi) = w[j * k % n];
                        let real = cr * wr - ci * wi;
                        re += if j == 0 || 2 * j == n { real } else { 2.0 * real };
                    }
                } else {
                    for j in 0..used {
                        let (cr, ci) = at(j);
                        let (wr, wi) = w[j * k % n];
                        re += cr * wr - ci * wi;
                        im += cr * wi + ci * wr;
                    }
                }
                let p = (k * inner + i) * out_channels;
                block[p] = re * scale;
                if out_channels == 2 {
                    block[p + 1] = im * scale;
                }
            }
        }
    });
    let mut shape = x.shape.clone();
    shape[a] = bins;
    shape[r - 1] = out_channels;
    Ok(vec![Tensor::from_f64_as(x.dtype(), shape, &out).expect("a float type")])
}

/// ONNX STFT: the DFT of each `frame_length`-long frame of signal [batch, length, 1 or 2],
/// frames `frame_step` apart, weighted by `window` (default ones): [batch, frames, bins, 2],
/// bins 0 to frame_length / 2 when `onesided`. A real signal may also be [batch, length], as
/// onnxruntime accepts and audio front ends (onnx-asr's) write.
pub fn stft(inputs: &[Option<&Tensor>], onesided: bool) -> OpResult {
    let x = req(inputs, 0)?;
    let (batch, len, channels) = match x.shape[..] {
        [b, l] => (b, l, 1),
        [b, l, c] if matches!(c, 1 | 2) => (b, l, c),
        _ => return Err(format!("the signal must be [batch, length] or [batch, length, 1 or 2], is {:?}", x.shape)),
    };
    if !x.dtype().is_float() {
        return Err(format!("the signal must be a float tensor, is {}", x.dtype()));
    }
    let step = scalar_int(req(inputs, 1)?, "frame_step")?;
    let step =
        usize::try_from(step).ok().filter(|&s| s > 0).ok_or_else(|| format!("frame_step {step} must be positive"))?;
    let window = opt(inputs, 2);
    if let Some(w) = window.filter(|w| w.rank() != 1) {
        return Err(format!("the window must be 1-D, has shape {:?}", w.shape));
    }
    let frame = match (opt(inputs, 3), window) {
        (Some(f), w) => {
            let f = scalar_int(f, "frame_length")?;
            let f = usize::try_from(f)
                .ok()
                .filter(|&f| f > 0)
                .ok_or_else(|| format!("frame_length {f} must be positive"))?;
            if let Some(w) = w.filter(|w| w.len() != f) {
                return Err(format!("the window has {} values for frame_length {f}", w.len()));
            }
            f
        }
        (None, Some(w)) => w.len(),
        (None, None) => len,
    };
    if frame == 0 || frame > len {
        return Err(format!("frame_length {frame} must be between 1 and the signal length {len}"));
    }
    let frames = (len - frame) / step + 1;
    let bins = if onesided { frame / 2 + 1 } else { frame };
    let win = window.map_or(vec![1.0; frame], Tensor::to_f64_vec);
    let w = twiddles(frame, false);
    let v = x.to_f64_vec();
    let mut out = vec![0.0; batch * frames * bins * 2];
    out.par_chunks_mut(bins * 2).enumerate().for_each(|(bf, row)| {
        let (b, f) = (bf / frames, bf % frames);
        let start = b * len + f * step;
        for k in 0..bins {
            let (mut re, mut im) = (0.0, 0.0);
            for j in 0..frame {
                let (cr, ci) = complex(&v, start + j, channels);
                let (wr, wi) = w[j * k % frame];
                re += win[j] * (cr * wr - ci * wi);
                im += win[j] * (cr * wi + ci * wr);
            }
            row[2 * k] = re;
            row[2 * k + 1] = im;
        }
    });
    Ok(vec![Tensor::from_f64_as(x.dtype(), vec![batch, frames, bins, 2], &out).expect("a float type")])
}
