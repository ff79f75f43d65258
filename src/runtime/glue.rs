//! Glue kernels on the host: what the reference device runs for the plan's glue nodes
//! (`PlanFile::glue`), from the spec and the problem the cuda device would launch with.
//!
//! Written from each spec's documented meaning (nested loops in the output's own order, the
//! `half` crate's conversions), not from the kernels' flat index arithmetic (which codegen's
//! tests check on the host against loops of their own). tests/artifact.rs compares this with
//! the reference executor's Transpose, BoltFitLastAxis, Cast, pools, Resize and DepthToSpace on
//! random shapes.

use crate::ir::{DType, Tensor, TensorData};
use bolt_codegen::abi::BoltGlueProblem;
use bolt_codegen::glue::{
    DepthToSpaceSpec, Direction, GlueSpec, Layout, NearestRounding, PadFill, PoolKind, PoolSpec, PoolWindow,
    ResizeCoord, ResizeSpec, Sampling, SpatialPadSpec,
};
use bolt_codegen::spec::Element;

fn dtype(e: Element) -> DType {
    match e {
        Element::F32 => DType::F32,
        Element::F16 => DType::F16,
        Element::BF16 => DType::BF16,
    }
}

/// [`run`] for node `op` on its inputs `args` (the data first): the output in the op's shape.
/// A pad of one leading axis runs as the `h` of [before, axis, after]; the kernel writes the
/// bytes, the op's pads say which axis grew.
pub fn run_op(
    op: &crate::ir::Op,
    spec: &GlueSpec,
    p: &BoltGlueProblem,
    args: &[Option<&Tensor>],
) -> Result<Tensor, String> {
    let x = args.first().copied().flatten().ok_or("a glue node without its input")?;
    let y = run(spec, p, x)?;
    let (crate::ir::Op::Pad { .. }, Some(pads)) = (op, args.get(1).copied().flatten()) else { return Ok(y) };
    let axes = args.get(3).copied().flatten().and_then(Tensor::as_i64_vec);
    let pads = pads.as_i64_vec().ok_or("pads are not integers")?;
    let per_axis = crate::ir::infer::pads_per_axis(&pads, axes.as_deref(), x.rank())?;
    let shape: Vec<usize> = x.shape.iter().zip(&per_axis).map(|(&d, &(b, e))| (d as i64 + b + e) as usize).collect();
    if shape.iter().product::<usize>() != y.len() {
        return Err(format!("the pad kernel wrote {} elements for {shape:?}", y.len()));
    }
    Ok(y.reshaped(shape))
}

/// Runs the glue kernel `spec` on `x` for `p` (as `plan::lower::glue_for` derives it).
pub fn run(spec: &GlueSpec, p: &BoltGlueProblem, x: &Tensor) -> Result<Tensor, String> {
    let [n, c, h, w, cp] = [p.n, p.c, p.h, p.w, p.c_padded].map(|d| d.max(0) as usize);
    // A DepthToSpace input holds blocksize^2 channels per output channel.
    let per_channel = match spec {
        GlueSpec::DepthToSpace(d) => (d.blocksize * d.blocksize) as usize,
        _ => 1,
    };
    if x.len() != n * c * h * w * per_channel {
        return Err(format!("input of shape {:?} does not hold the problem {p:?}", x.shape));
    }
    let input = match spec {
        GlueSpec::Transpose(t) => t.element,
        GlueSpec::PadChannels(s) => s.element,
        GlueSpec::Cast(s) => s.from,
        GlueSpec::Pool(s) => s.element,
        GlueSpec::Resize(s) => s.element,
        GlueSpec::DepthToSpace(s) => s.element,
        GlueSpec::Pad(s) => s.element,
    };
    if x.dtype() != dtype(input) {
        return Err(format!("input is {}, the kernel takes {}", x.dtype(), dtype(input)));
    }
    match spec {
        GlueSpec::Transpose(t) => {
            let mut idx = Vec::with_capacity(x.len());
            let shape = match t.direction {
                Direction::NchwToNhwc => {
                    for b in 0..n {
                        for y in 0..h {
                            for xx in 0..w {
                                for ch in 0..c {
                                    idx.push(((b * c + ch) * h + y) * w + xx);
                                }
                            }
                        }
                    }
                    vec![n, h, w, c]
                }
                Direction::NhwcToNchw => {
                    for b in 0..n {
                        for ch in 0..c {
                            for y in 0..h {
                                for xx in 0..w {
                                    idx.push(((b * h + y) * w + xx) * c + ch);
                                }
                            }
                        }
                    }
                    vec![n, c, h, w]
                }
            };
            Tensor::new(shape, x.data.gather(&idx))
        }
        GlueSpec::PadChannels(_) => {
            if cp < c {
                return Err(format!("c_padded {cp} < c {c}"));
            }
            // Every value of f32/f16/bf16 is exact in f64.
            let v = x.to_f64_vec();
            let mut out = vec![0.0; v.len() / c.max(1) * cp];
            for (src, dst) in v.chunks(c.max(1)).zip(out.chunks_mut(cp.max(1))) {
                dst[..c].copy_from_slice(src);
            }
            let mut shape = x.shape.clone();
            match shape.last_mut() {
                Some(last) => *last = cp,
                None => return Err("a scalar has no channels".into()),
            }
            Tensor::from_f64_as(x.dtype(), shape, &out).ok_or_else(|| format!("cannot pad {}", x.dtype()))
        }
        GlueSpec::Cast(s) => {
            let f = x.to_f32_vec();
            let data = match s.to {
                Element::F32 => TensorData::F32(f),
                Element::F16 => TensorData::F16(f.iter().map(|&v| half::f16::from_f32(v)).collect()),
                Element::BF16 => TensorData::BF16(f.iter().map(|&v| half::bf16::from_f32(v)).collect()),
            };
            Tensor::new(x.shape.clone(), data)
        }
        GlueSpec::Pool(s) => pool(s, p, x),
        GlueSpec::Resize(s) => resize(s, p, x),
        GlueSpec::DepthToSpace(s) => depth_to_space(s, p, x),
        GlueSpec::Pad(s) => pad(s, p, x),
    }
}

/// A pad of the last two axes by its definition, per output element of `[n, p, q]` (nested
/// loops in output order; the mode's source per axis as ONNX defines it). The output keeps
/// x's leading axes.
fn pad(s: &SpatialPadSpec, p: &BoltGlueProblem, x: &Tensor) -> Result<Tensor, String> {
    let [n, h, w, oh, ow] = [p.n * p.c, p.h, p.w, p.p, p.q];
    let [top, left] = [i64::from(s.pads[0]), i64::from(s.pads[1])];
    if oh != h + top + i64::from(s.pads[2]) || ow != w + left + i64::from(s.pads[3]) {
        return Err(format!("problem {p:?} is not the pads {:?} of its input", s.pads));
    }
    let source = |c: i64, d: i64| -> Option<i64> {
        if (0..d).contains(&c) {
            return Some(c);
        }
        match s.fill {
            PadFill::Constant => None,
            PadFill::Edge => Some(c.clamp(0, d - 1)),
            PadFill::Wrap => Some(c.rem_euclid(d)),
            PadFill::Reflect if d == 1 => Some(0),
            PadFill::Reflect => {
                let period = 2 * (d - 1);
                let m = c.rem_euclid(period);
                Some(if m < d { m } else { period - m })
            }
        }
    };
    let v = x.to_f64_vec();
    let mut out = Vec::with_capacity((n * oh * ow).max(0) as usize);
    for plane in 0..n {
        for y in 0..oh {
            for xx in 0..ow {
                out.push(match (source(y - top, h), source(xx - left, w)) {
                    (Some(sy), Some(sx)) => v[((plane * h + sy) * w + sx) as usize],
                    _ => f64::from(s.value.0),
                });
            }
        }
    }
    let mut shape = x.shape.clone();
    let rank = shape.len();
    if rank >= 2 {
        shape[rank - 2] = oh as usize;
    }
    if let Some(last) = shape.last_mut() {
        *last = ow as usize;
    }
    Tensor::from_f64_as(x.dtype(), shape, &out).ok_or_else(|| format!("cannot pad {}", x.dtype()))
}

/// DepthToSpace by its definition: output pixel (y, x) of channel ch is input pixel
/// (y / b, x / b) of channel (ch * b + y % b) * b + x % b (CRD) or (y % b * b + x % b) * c + ch
/// (DCR).
fn depth_to_space(s: &DepthToSpaceSpec, p: &BoltGlueProblem, x: &Tensor) -> Result<Tensor, String> {
    let [n, c, h, w] = [p.n, p.c, p.h, p.w].map(|d| d.max(0) as usize);
    let b = s.blocksize as usize;
    let from = |ch: usize, r: usize, q: usize| if s.crd { (ch * b + r) * b + q } else { (r * b + q) * c + ch };
    let (idx, shape) = in_output_order(s.layout, [n, c, h * b, w * b], |bn, ch, y, xx| match s.layout {
        Layout::Nchw => ((bn * c * b * b + from(ch, y % b, xx % b)) * h + y / b) * w + xx / b,
        Layout::Nhwc => ((bn * h + y / b) * w + xx / b) * c * b * b + from(ch, y % b, xx % b),
    });
    Tensor::new(shape, x.data.gather(&idx))
}

/// Resize by its definition: output index o of an axis samples x = transform(o) (the
/// coordinate mode, with the model's scale or output / input extents). Nearest: a fractional x
/// rounds by the mode, the index is clamped to the input. Linear: the neighbours floor(x) and
/// floor(x) + 1, clamped, weighted 1 - t and t (t = x - floor(x)), along h then w.
fn resize(s: &ResizeSpec, p: &BoltGlueProblem, x: &Tensor) -> Result<Tensor, String> {
    let [n, c, h, w, oh, ow] = [p.n, p.c, p.h, p.w, p.p, p.q].map(|d| d.max(0) as usize);
    let coord = |o: usize, input: usize, output: usize, axis: usize| -> f64 {
        let scale = s.scales.map_or(output as f64 / input as f64, |v| f64::from(v[axis].0));
        let (y, out_f) = (o as f64, scale * input as f64);
        match s.coord {
            ResizeCoord::Asymmetric => y / scale,
            ResizeCoord::HalfPixel => (y + 0.5) / scale - 0.5,
            ResizeCoord::PytorchHalfPixel => {
                if out_f == 1.0 {
                    -0.5
                } else {
                    (y + 0.5) / scale - 0.5
                }
            }
            ResizeCoord::AlignCorners => {
                if out_f == 1.0 {
                    0.0
                } else {
                    y * (input as f64 - 1.0) / (out_f - 1.0)
                }
            }
        }
    };
    let clamp = |i: i64, input: usize| i.clamp(0, input as i64 - 1) as usize;
    // Per output index of an axis: (input index, weight) pairs.
    let taps = |o: usize, input: usize, output: usize, axis: usize| -> Vec<(usize, f64)> {
        let pos = coord(o, input, output, axis);
        let (fl, frac) = (pos.floor(), pos - pos.floor());
        match s.sample {
            Sampling::Nearest(rounding) => {
                let up = frac > 0.0
                    && match rounding {
                        NearestRounding::Floor => false,
                        NearestRounding::Ceil => true,
                        NearestRounding::RoundPreferFloor => frac > 0.5,
                        NearestRounding::RoundPreferCeil => frac >= 0.5,
                    };
                vec![(clamp(fl as i64 + i64::from(up), input), 1.0)]
            }
            Sampling::Linear => vec![(clamp(fl as i64, input), 1.0 - frac), (clamp(fl as i64 + 1, input), frac)],
        }
    };
    let ys: Vec<Vec<(usize, f64)>> = (0..oh).map(|o| taps(o, h, oh, 0)).collect();
    let xs: Vec<Vec<(usize, f64)>> = (0..ow).map(|o| taps(o, w, ow, 1)).collect();
    let at = |bn: usize, ch: usize, y: usize, xx: usize| match s.layout {
        Layout::Nchw => ((bn * c + ch) * h + y) * w + xx,
        Layout::Nhwc => ((bn * h + y) * w + xx) * c + ch,
    };
    if let Sampling::Nearest(_) = s.sample {
        // One source element per output: a gather keeps the values bit for bit.
        let (idx, shape) =
            in_output_order(s.layout, [n, c, oh, ow], |bn, ch, y, xx| at(bn, ch, ys[y][0].0, xs[xx][0].0));
        return Tensor::new(shape, x.data.gather(&idx));
    }
    let v = x.to_f64_vec();
    let (vals, shape) = in_output_order(s.layout, [n, c, oh, ow], |bn, ch, y, xx| {
        let row = |iy: usize| xs[xx].iter().map(|&(ix, wx)| wx * v[at(bn, ch, iy, ix)]).sum::<f64>();
        ys[y].iter().map(|&(iy, wy)| wy * row(iy)).sum::<f64>()
    });
    Tensor::from_f64_as(x.dtype(), shape, &vals).ok_or_else(|| format!("cannot resize {}", x.dtype()))
}

/// A pool by its definition: for every output position, the window's positions (stride,
/// dilation, begin padding) that fall inside the input; the divisor of an average counts the
/// positions inside the padded input, or only the inside ones.
fn pool(s: &PoolSpec, p: &BoltGlueProblem, x: &Tensor) -> Result<Tensor, String> {
    let [n, c, h, w, op, oq] = [p.n, p.c, p.h, p.w, p.p, p.q].map(|d| d.max(0) as usize);
    let v = x.to_f64_vec();
    let at = |b: usize, ch: usize, y: usize, xx: usize| match s.layout {
        Layout::Nchw => v[((b * c + ch) * h + y) * w + xx],
        Layout::Nhwc => v[((b * h + y) * w + xx) * c + ch],
    };
    // Per axis: the input coordinates of output index o, and how many positions lie before the
    // end of the padded input.
    let positions = |win: &PoolWindow, d: usize, o: usize, size: usize| -> (Vec<usize>, usize) {
        let pads = win.pads_at(h as i64, w as i64, op as i64, oq as i64);
        let start = (o * win.strides[d] as usize) as i64 - pads[d];
        let all: Vec<i64> = (0..win.kernel[d] as i64).map(|k| start + k * win.dilations[d] as i64).collect();
        let padded = all.iter().filter(|&&q| q < size as i64 + pads[d + 2]).count();
        (all.into_iter().filter(|&q| q >= 0 && (q as usize) < size).map(|q| q as usize).collect(), padded)
    };
    let value = |b: usize, ch: usize, y: usize, xx: usize| -> f64 {
        let win = match s.kind {
            PoolKind::GlobalAverage => {
                let sum: f64 = (0..h).flat_map(|i| (0..w).map(move |j| (i, j))).map(|(i, j)| at(b, ch, i, j)).sum();
                return sum / (h * w) as f64;
            }
            PoolKind::GlobalMax => {
                let all = (0..h).flat_map(|i| (0..w).map(move |j| (i, j))).map(|(i, j)| at(b, ch, i, j));
                return all.reduce(|best, v| if v > best { v } else { best }).unwrap_or(f64::NAN);
            }
            PoolKind::Max(win) | PoolKind::Average { window: win, .. } => win,
        };
        let ((ys, ph), (xs, pw)) = (positions(&win, 0, y, h), positions(&win, 1, xx, w));
        let vals: Vec<f64> =
            ys.iter().flat_map(|&i| xs.iter().map(move |&j| (i, j))).map(|(i, j)| at(b, ch, i, j)).collect();
        match s.kind {
            PoolKind::Max(_) => {
                vals.iter().copied().reduce(|best, v| if v > best { v } else { best }).unwrap_or(f64::NEG_INFINITY)
            }
            PoolKind::Average { count_include_pad, .. } => {
                let divisor = if count_include_pad { ph * pw } else { vals.len() };
                vals.iter().sum::<f64>() / divisor as f64
            }
            PoolKind::GlobalAverage | PoolKind::GlobalMax => unreachable!("returned above"),
        }
    };
    let (out, shape) = in_output_order(s.layout, [n, c, op, oq], value);
    Tensor::from_f64_as(x.dtype(), shape, &out).ok_or_else(|| format!("cannot pool {}", x.dtype()))
}

/// `f(n, c, y, x)` for every output element of extents `[n, c, h, w]`, in the order `layout`
/// stores them, and the output's shape in that layout.
fn in_output_order<T>(
    layout: Layout,
    [n, c, h, w]: [usize; 4],
    mut f: impl FnMut(usize, usize, usize, usize) -> T,
) -> (Vec<T>, Vec<usize>) {
    let mut out = Vec::with_capacity(n * c * h * w);
    for b in 0..n {
        match layout {
            Layout::Nchw => {
                for ch in 0..c {
                    for y in 0..h {
                        for x in 0..w {
                            out.push(f(b, ch, y, x));
                        }
                    }
                }
            }
            Layout::Nhwc => {
                for y in 0..h {
                    for x in 0..w {
                        for ch in 0..c {
                            out.push(f(b, ch, y, x));
                        }
                    }
                }
            }
        }
    }
    let shape = match layout {
        Layout::Nchw => vec![n, c, h, w],
        Layout::Nhwc => vec![n, h, w, c],
    };
    (out, shape)
}
