//! Glue kernels (transposes, channel padding, casts): one unit with every family is compiled
//! once for sm_80 and linked twice. An executable runs the kernels' index math and conversions
//! on the host, compared with loops written here and with the `half` crate's conversions; a
//! library answers the ABI's host-side calls. Needs the toolchain, no GPU.

mod host_build;

use std::ffi::c_void;

use bolt_codegen::abi::{BoltGlueArgs, BoltGlueProblem, CanImplementFn, LaunchFn, Status, FUNCTION_SUFFIXES};
use bolt_codegen::glue::{
    self, CastSpec, DepthToSpaceSpec, Direction, GlueSpec, Layout, NearestRounding, PadFill, PadSpec, PoolKind,
    PoolPads, PoolSpec, PoolWindow, ResizeCoord, ResizeSpec, Sampling, SpatialPadSpec, TransposeSpec,
};
use bolt_codegen::spec::Element;
use ordered_float::OrderedFloat;

fn specs() -> Vec<GlueSpec> {
    vec![
        GlueSpec::Transpose(TransposeSpec { direction: Direction::NchwToNhwc, element: Element::F16 }),
        GlueSpec::Transpose(TransposeSpec { direction: Direction::NhwcToNchw, element: Element::F32 }),
        GlueSpec::PadChannels(PadSpec { element: Element::F16, alignment: 8 }),
        GlueSpec::Cast(CastSpec { from: Element::F32, to: Element::F16 }),
        GlueSpec::Cast(CastSpec { from: Element::F32, to: Element::BF16 }),
        // ResNet's stem pool, channels-last.
        GlueSpec::Pool(PoolSpec {
            kind: PoolKind::Max(PoolWindow {
                kernel: [3, 3],
                strides: [2, 2],
                dilations: [1, 1],
                pads: PoolPads::Fixed([1, 1, 1, 1]),
            }),
            layout: Layout::Nhwc,
            element: Element::F16,
        }),
        // Uneven window, dilation and pads; the divisor with and without the padding.
        GlueSpec::Pool(PoolSpec {
            kind: PoolKind::Average { window: UNEVEN, count_include_pad: true },
            layout: Layout::Nchw,
            element: Element::F32,
        }),
        GlueSpec::Pool(PoolSpec {
            kind: PoolKind::Average { window: UNEVEN, count_include_pad: false },
            layout: Layout::Nhwc,
            element: Element::F32,
        }),
        // SAME padding worked out from the problem's size: the odd unit at the end (upper) or
        // the beginning (lower) of uneven totals (the 5 x 6 test input).
        GlueSpec::Pool(PoolSpec { kind: PoolKind::Max(SAME_UPPER), layout: Layout::Nhwc, element: Element::F16 }),
        GlueSpec::Pool(PoolSpec {
            kind: PoolKind::Average { window: SAME_LOWER, count_include_pad: true },
            layout: Layout::Nchw,
            element: Element::F32,
        }),
        GlueSpec::Pool(PoolSpec {
            kind: PoolKind::Average { window: SAME_UPPER, count_include_pad: false },
            layout: Layout::Nchw,
            element: Element::F32,
        }),
        GlueSpec::Pool(PoolSpec { kind: PoolKind::GlobalAverage, layout: Layout::Nhwc, element: Element::F32 }),
        GlueSpec::Pool(PoolSpec { kind: PoolKind::GlobalMax, layout: Layout::Nchw, element: Element::F16 }),
        // PP-OCR's FPN upsampling (x2, asymmetric, floor), channels-last.
        resize(ResizeCoord::Asymmetric, NearestRounding::Floor, Some([2.0, 2.0]), Layout::Nhwc),
        // Uneven scales, up and down, each coordinate mode and rounding.
        resize(ResizeCoord::HalfPixel, NearestRounding::RoundPreferFloor, Some([1.5, 0.75]), Layout::Nchw),
        resize(ResizeCoord::PytorchHalfPixel, NearestRounding::RoundPreferCeil, Some([0.5, 2.5]), Layout::Nhwc),
        resize(ResizeCoord::AlignCorners, NearestRounding::Ceil, None, Layout::Nchw),
        // Bilinear: PyTorch's upsample (x2, align_corners=False), uneven up and down scales in
        // every coordinate mode (edges clamp), and by sizes.
        linear(ResizeCoord::PytorchHalfPixel, Some([2.0, 2.0]), Layout::Nhwc, Element::F16),
        linear(ResizeCoord::HalfPixel, Some([1.5, 0.75]), Layout::Nchw, Element::F32),
        linear(ResizeCoord::Asymmetric, Some([0.5, 2.5]), Layout::Nhwc, Element::F32),
        linear(ResizeCoord::AlignCorners, None, Layout::Nchw, Element::F32),
        // The test problem's 3 channels are the output's: the input has 3 * b * b.
        GlueSpec::DepthToSpace(DepthToSpaceSpec {
            blocksize: 2,
            crd: true,
            layout: Layout::Nchw,
            element: Element::F16,
        }),
        GlueSpec::DepthToSpace(DepthToSpaceSpec {
            blocksize: 3,
            crd: false,
            layout: Layout::Nhwc,
            element: Element::F32,
        }),
        // STFT front ends' reflect pad of the last axis (wider than the axis: it reflects
        // again), and every mode on both axes; a constant of -inf.
        pad(PadFill::Reflect, [0, 7, 0, 6], 0.0, Element::F32),
        pad(PadFill::Reflect, [3, 1, 2, 4], 0.0, Element::F16),
        pad(PadFill::Edge, [2, 0, 1, 3], 0.0, Element::BF16),
        pad(PadFill::Wrap, [5, 2, 0, 6], 0.0, Element::F32),
        pad(PadFill::Constant, [1, 2, 3, 4], f32::NEG_INFINITY, Element::F16),
    ]
}

fn pad(fill: PadFill, pads: [u32; 4], value: f32, element: Element) -> GlueSpec {
    GlueSpec::Pad(SpatialPadSpec { fill, pads, value: value.into(), element })
}

fn resize(coord: ResizeCoord, rounding: NearestRounding, scales: Option<[f32; 2]>, layout: Layout) -> GlueSpec {
    let scales = scales.map(|s| s.map(OrderedFloat));
    GlueSpec::Resize(ResizeSpec { coord, sample: Sampling::Nearest(rounding), scales, layout, element: Element::F32 })
}

fn linear(coord: ResizeCoord, scales: Option<[f32; 2]>, layout: Layout, element: Element) -> GlueSpec {
    let scales = scales.map(|s| s.map(OrderedFloat));
    GlueSpec::Resize(ResizeSpec { coord, sample: Sampling::Linear, scales, layout, element })
}

fn is_linear(spec: &GlueSpec) -> bool {
    matches!(spec, GlueSpec::Resize(ResizeSpec { sample: Sampling::Linear, .. }))
}

/// The problem a glue kernel is tested on: `problem`'s input, the spec's own output extents,
/// and for a resize by sizes an output of 7 x 3.
fn glue_problem(spec: &GlueSpec, problem: BoltGlueProblem) -> BoltGlueProblem {
    let p = spec.problem(problem.n, problem.c, problem.h, problem.w);
    match spec {
        GlueSpec::Resize(ResizeSpec { scales: None, .. }) => BoltGlueProblem { p: 7, q: 3, ..p },
        _ => p,
    }
}

/// The source coordinate of output index `o` of an axis (ONNX Resize's
/// coordinate_transformation_mode), from the operator's definition in f64.
fn source_coord(spec: &ResizeSpec, o: i64, input: i64, output: i64, axis: usize) -> f64 {
    let scale = match spec.scales {
        Some(s) => f64::from(s[axis].0),
        None => output as f64 / input as f64,
    };
    let (y, in_f, out_f) = (o as f64, input as f64, scale * input as f64);
    let x = match spec.coord {
        ResizeCoord::Asymmetric => y / scale,
        ResizeCoord::HalfPixel => (y + 0.5) / scale - 0.5,
        ResizeCoord::PytorchHalfPixel if out_f == 1.0 => -0.5,
        ResizeCoord::PytorchHalfPixel => (y + 0.5) / scale - 0.5,
        ResizeCoord::AlignCorners if out_f == 1.0 => 0.0,
        ResizeCoord::AlignCorners => y * (in_f - 1.0) / (out_f - 1.0),
    };
    x
}

/// The input index ONNX Resize (nearest) reads for output index `o` of an axis.
fn nearest(spec: &ResizeSpec, o: i64, input: i64, output: i64, axis: usize) -> i64 {
    let x = source_coord(spec, o, input, output, axis);
    let Sampling::Nearest(rounding) = spec.sample else { unreachable!("a nearest resize") };
    let i = if x.fract() == 0.0 {
        x
    } else {
        match rounding {
            NearestRounding::Floor => x.floor(),
            NearestRounding::Ceil => x.ceil(),
            NearestRounding::RoundPreferFloor if x - x.floor() == 0.5 => x.floor(),
            NearestRounding::RoundPreferCeil if x - x.floor() == 0.5 => x.ceil(),
            _ => x.round(),
        }
    };
    (i as i64).clamp(0, input - 1)
}

/// Bilinear resize outputs by the ONNX definition: along each axis the neighbours floor(x) and
/// floor(x) + 1 of the source coordinate x, clamped to the input, weighted 1 - t and t.
fn expected_linear(spec: &ResizeSpec, p: BoltGlueProblem) -> Vec<f64> {
    let (n, c, h, w) = (p.n, p.c, p.h, p.w);
    let at = |b: i64, ch: i64, y: i64, x: i64| match spec.layout {
        Layout::Nchw => pool_input(((b * c + ch) * h + y) * w + x),
        Layout::Nhwc => pool_input(((b * h + y) * w + x) * c + ch),
    };
    let taps = |o: i64, input: i64, output: i64, axis: usize| {
        let x = source_coord(spec, o, input, output, axis);
        let t = x - x.floor();
        let i = x.floor() as i64;
        [(i.clamp(0, input - 1), 1.0 - t), ((i + 1).clamp(0, input - 1), t)]
    };
    let value = |b: i64, ch: i64, oy: i64, ox: i64| {
        let mut v = 0.0;
        for (iy, wy) in taps(oy, h, p.p, 0) {
            for (ix, wx) in taps(ox, w, p.q, 1) {
                v += wy * wx * at(b, ch, iy, ix);
            }
        }
        v
    };
    in_output_order(spec.layout, [n, c, p.p, p.q], value)
}

const UNEVEN: PoolWindow =
    PoolWindow { kernel: [3, 2], strides: [2, 1], dilations: [1, 2], pads: PoolPads::Fixed([1, 0, 1, 1]) };
/// Keras's `padding="same"` (ONNX auto_pad SAME_UPPER / SAME_LOWER): pads from the input size.
const SAME_UPPER: PoolWindow =
    PoolWindow { kernel: [3, 2], strides: [2, 2], dilations: [1, 1], pads: PoolPads::Same { upper: true } };
const SAME_LOWER: PoolWindow =
    PoolWindow { kernel: [2, 3], strides: [1, 2], dilations: [2, 1], pads: PoolPads::Same { upper: false } };

/// Input element `i` of the pool tests (exact in f16).
fn pool_input(i: i64) -> f64 {
    ((i * 37) % 101 - 50) as f64 / 8.0
}

/// The problem a pool is tested on: 2 x 3 x 5 x 6 input, and per axis the extra output of ceil
/// mode where its window still starts inside the input (its positions run into and past the
/// end padding).
fn pool_problem(spec: &GlueSpec) -> BoltGlueProblem {
    let p = spec.problem(2, 3, 5, 6);
    let GlueSpec::Pool(PoolSpec { kind: PoolKind::Max(win) | PoolKind::Average { window: win, .. }, .. }) = spec else {
        return p;
    };
    let PoolPads::Fixed(pads) = win.pads else { return p }; // SAME: one output size
    let extra = |o: i64, d: usize, size: i64| o + i64::from(o * i64::from(win.strides[d]) - i64::from(pads[d]) < size);
    BoltGlueProblem { p: extra(p.p, 0, p.h), q: extra(p.q, 1, p.w), ..p }
}

/// The pool's outputs by the ONNX definition: per output position the window's positions
/// (start = o * stride - pad_begin, step = dilation) inside the input; an average divides by
/// the positions inside the input, or (count_include_pad) by those before the end padding.
fn expected_pool(spec: &PoolSpec, p: BoltGlueProblem) -> Vec<f64> {
    let (n, c, h, w) = (p.n, p.c, p.h, p.w);
    let at = |b: i64, ch: i64, y: i64, x: i64| match spec.layout {
        Layout::Nchw => pool_input(((b * c + ch) * h + y) * w + x),
        Layout::Nhwc => pool_input(((b * h + y) * w + x) * c + ch),
    };
    let value = |b: i64, ch: i64, oy: i64, ox: i64| -> f64 {
        let win = match spec.kind {
            PoolKind::Max(win) | PoolKind::Average { window: win, .. } => win,
            PoolKind::GlobalAverage => {
                let all: Vec<f64> = (0..h).flat_map(|y| (0..w).map(move |x| at(b, ch, y, x))).collect();
                return all.iter().sum::<f64>() / all.len() as f64;
            }
            PoolKind::GlobalMax => {
                return (0..h).flat_map(|y| (0..w).map(move |x| at(b, ch, y, x))).fold(f64::NEG_INFINITY, f64::max);
            }
        };
        // SAME: ONNX's pads for output ceil(input / stride), the odd unit at the end (upper)
        // or the beginning, written out here from the operator's definition.
        let pads = match win.pads {
            PoolPads::Fixed(f) => f.map(i64::from),
            PoolPads::Same { upper } => {
                let total = |x: i64, o: i64, d: usize| {
                    let span = win.dilations[d] as i64 * (win.kernel[d] as i64 - 1) + 1;
                    ((o - 1) * win.strides[d] as i64 + span - x).max(0)
                };
                let (th, tw) = (total(h, p.p, 0), total(w, p.q, 1));
                let (bh, bw) = if upper { (th / 2, tw / 2) } else { (th - th / 2, tw - tw / 2) };
                [bh, bw, th - bh, tw - bw]
            }
        };
        let (mut vals, mut padded) = (Vec::new(), 0);
        for r in 0..win.kernel[0] as i64 {
            for s in 0..win.kernel[1] as i64 {
                let y = oy * win.strides[0] as i64 - pads[0] + r * win.dilations[0] as i64;
                let x = ox * win.strides[1] as i64 - pads[1] + s * win.dilations[1] as i64;
                if y < h + pads[2] && x < w + pads[3] {
                    padded += 1;
                }
                if (0..h).contains(&y) && (0..w).contains(&x) {
                    vals.push(at(b, ch, y, x));
                }
            }
        }
        match spec.kind {
            PoolKind::Max(_) => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            PoolKind::Average { count_include_pad: true, .. } => vals.iter().sum::<f64>() / padded as f64,
            _ => vals.iter().sum::<f64>() / vals.len() as f64,
        }
    };
    in_output_order(spec.layout, [n, c, p.p, p.q], value)
}

/// `f(n, c, y, x)` for every output element of extents `[n, c, h, w]`, in the order `layout`
/// stores them.
fn in_output_order<T>(layout: Layout, [n, c, h, w]: [i64; 4], mut f: impl FnMut(i64, i64, i64, i64) -> T) -> Vec<T> {
    let mut out = Vec::new();
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
    out
}

const VALUES: [f32; 8] = [1.0, 0.1, -2.5, 65504.0, 70000.0, 1e-7, 3.14159265, -0.0];

/// A host block printing `symbol::function(p, x, i)` for every output element of `q`, on the
/// input of [`pool_input`].
fn value_block(s: &str, q: BoltGlueProblem, function: &str) -> String {
    let len = q.n * q.c * q.h * q.w;
    format!(
        "  {{ BoltGlueProblem p{{{}, {}, {}, {}, {}, {}, {}}};\n    static {s}::ElementX x[{len}];\n    for (int64_t i = 0; i < {len}; ++i) x[i] = {s}::ElementX(float(((i * 37) % 101 - 50) / 8.0));\n    for (int64_t i = 0; i < {s}::output_elements(p); ++i) printf(\"{s} %.9g\\n\", double({s}::{function}(p, x, i))); }}\n",
        q.n, q.c, q.h, q.w, q.c_padded, q.p, q.q
    )
}

/// A host `main` printing every kernel's source index per output element of `problem`, and the
/// casts of [`VALUES`].
fn test_main(symbols: &[String], problem: BoltGlueProblem) -> String {
    let p = problem;
    let mut m = String::from("\n#include <cstdio>\nint main() {\n");
    for (spec, s) in specs().iter().zip(symbols) {
        match spec {
            GlueSpec::Resize(_) if is_linear(spec) => m += &value_block(s, glue_problem(spec, p), "linear_value"),
            GlueSpec::Pool(_) => m += &value_block(s, pool_problem(spec), "pool_value"),
            GlueSpec::Cast(_) => {
                for v in VALUES {
                    m += &format!("  printf(\"{s} %.9g\\n\", double(float({s}::convert({v:e}f))));\n");
                }
            }
            _ => {
                let q = glue_problem(spec, p);
                m += &format!(
                    "  {{ BoltGlueProblem p{{{}, {}, {}, {}, {}, {}, {}}};\n    for (int64_t i = 0; i < {s}::output_elements(p); ++i) printf(\"{s} %lld\\n\", (long long){s}::source_index(p, i)); }}\n",
                    q.n, q.c, q.h, q.w, q.c_padded, q.p, q.q
                );
            }
        }
    }
    m + "  return 0;\n}\n"
}

/// Where each output element comes from, by nested loops over the output's own order.
fn expected_sources(spec: &GlueSpec, p: BoltGlueProblem) -> Vec<i64> {
    let (n, c, h, w) = (p.n, p.c, p.h, p.w);
    let mut out = Vec::new();
    match spec {
        GlueSpec::Transpose(t) if t.direction == Direction::NchwToNhwc => {
            for b in 0..n {
                for y in 0..h {
                    for x in 0..w {
                        for ch in 0..c {
                            out.push(b * c * h * w + ch * h * w + y * w + x);
                        }
                    }
                }
            }
        }
        GlueSpec::Transpose(_) => {
            for b in 0..n {
                for ch in 0..c {
                    for y in 0..h {
                        for x in 0..w {
                            out.push(b * h * w * c + y * w * c + x * c + ch);
                        }
                    }
                }
            }
        }
        GlueSpec::PadChannels(_) => {
            let cp = spec.problem(n, c, h, w).c_padded;
            for b in 0..n {
                for y in 0..h {
                    for x in 0..w {
                        for ch in 0..cp {
                            out.push(if ch < c { b * h * w * c + y * w * c + x * c + ch } else { -1 });
                        }
                    }
                }
            }
        }
        GlueSpec::Resize(r) => {
            let q = glue_problem(spec, p);
            let src = |b: i64, ch: i64, y: i64, x: i64| {
                let (iy, ix) = (nearest(r, y, h, q.p, 0), nearest(r, x, w, q.q, 1));
                match r.layout {
                    Layout::Nchw => ((b * c + ch) * h + iy) * w + ix,
                    Layout::Nhwc => ((b * h + iy) * w + ix) * c + ch,
                }
            };
            out = in_output_order(r.layout, [n, c, q.p, q.q], src);
        }
        GlueSpec::DepthToSpace(d) => {
            // y[n, ch, y, x] = x[n, from(ch, y % b, x % b), y / b, x / b] (ONNX DepthToSpace).
            let b = i64::from(d.blocksize);
            let from = |ch: i64, r: i64, s: i64| if d.crd { (ch * b + r) * b + s } else { (r * b + s) * c + ch };
            let src = |bn: i64, ch: i64, y: i64, x: i64| match d.layout {
                Layout::Nchw => ((bn * c * b * b + from(ch, y % b, x % b)) * h + y / b) * w + x / b,
                Layout::Nhwc => ((bn * h + y / b) * w + x / b) * c * b * b + from(ch, y % b, x % b),
            };
            out = in_output_order(d.layout, [n, c, h * b, w * b], src);
        }
        GlueSpec::Pad(s) => {
            // ONNX Pad per axis: reflect mirrors about the edges, again and again while out.
            let source = |mut i: i64, d: i64| -> i64 {
                match s.fill {
                    _ if (0..d).contains(&i) => i,
                    PadFill::Constant => -1,
                    PadFill::Edge => i.clamp(0, d - 1),
                    PadFill::Wrap => i.rem_euclid(d),
                    PadFill::Reflect => {
                        while !(0..d).contains(&i) {
                            i = if i < 0 { -i } else { 2 * (d - 1) - i };
                        }
                        i
                    }
                }
            };
            let [top, left, bottom, right] = s.pads.map(i64::from);
            for plane in 0..n * c {
                for y in 0..h + top + bottom {
                    for x in 0..w + left + right {
                        let (sy, sx) = (source(y - top, h), source(x - left, w));
                        out.push(if sy < 0 || sx < 0 { -1 } else { (plane * h + sy) * w + sx });
                    }
                }
            }
        }
        GlueSpec::Cast(_) | GlueSpec::Pool(_) => unreachable!(),
    }
    out
}

#[test]
fn glue_kernels_compute_the_documented_layouts_and_answer_the_abi() {
    let dir = host_build::scratch("glue");
    let specs = specs();
    let symbols: Vec<String> = specs.iter().map(glue::symbol_for).collect();
    let pairs: Vec<(&GlueSpec, &str)> = specs.iter().zip(&symbols).map(|(s, n)| (s, n.as_str())).collect();
    let problem = BoltGlueProblem::new(2, 3, 4, 5);
    let unit = glue::render_unit(&pairs).unwrap() + &test_main(&symbols, problem);
    let built = host_build::build(&dir, "glue", &unit);

    // Index math and conversions, run on the host.
    let printed = host_build::run(&built);
    for (spec, symbol) in specs.iter().zip(&symbols) {
        let got: Vec<&str> = printed.lines().filter_map(|l| l.strip_prefix(symbol.as_str()).map(str::trim)).collect();
        match spec {
            GlueSpec::Cast(c) => {
                let want: Vec<f32> = VALUES
                    .iter()
                    .map(|&v| match c.to {
                        Element::F16 => half::f16::from_f32(v).to_f32(),
                        Element::BF16 => half::bf16::from_f32(v).to_f32(),
                        Element::F32 => v,
                    })
                    .collect();
                let got: Vec<f32> = got.iter().map(|v| v.parse::<f64>().unwrap() as f32).collect();
                assert_eq!(got.len(), want.len(), "{symbol}");
                for (g, w) in got.iter().zip(&want) {
                    assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{symbol}: {g} vs {w}");
                }
            }
            GlueSpec::Resize(r) if is_linear(spec) => {
                let want = expected_linear(r, glue_problem(spec, problem));
                let got: Vec<f64> = got.iter().map(|v| v.parse().unwrap()).collect();
                assert_eq!(got.len(), want.len(), "{symbol}");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // f32 blends of f16-exact values: a few ulps of f32.
                    assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{symbol} output {i}: {g} vs {w}");
                }
            }
            GlueSpec::Pool(pool) => {
                let want = expected_pool(pool, pool_problem(spec));
                let got: Vec<f64> = got.iter().map(|v| v.parse().unwrap()).collect();
                assert_eq!(got.len(), want.len(), "{symbol}");
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    // f32 accumulation of f16-exact values: a few ulps of f32.
                    assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{symbol} output {i}: {g} vs {w}");
                }
            }
            _ => {
                let got: Vec<i64> = got.iter().map(|v| v.parse().unwrap()).collect();
                assert_eq!(got, expected_sources(spec, problem), "{symbol}");
            }
        }
    }

    // The ABI's host side.
    let lib = unsafe { libloading::Library::new(&built.library) }.unwrap();
    for (spec, symbol) in specs.iter().zip(&symbols) {
        let f = |suffix: &str| format!("{symbol}{suffix}");
        for suffix in FUNCTION_SUFFIXES {
            unsafe { lib.get::<*const c_void>(f(suffix).as_bytes()) }.unwrap_or_else(|e| panic!("{e}"));
        }
        let can_implement = *unsafe { lib.get::<CanImplementFn>(f("_can_implement").as_bytes()) }.unwrap();
        let launch = *unsafe { lib.get::<LaunchFn>(f("_launch").as_bytes()) }.unwrap();
        let ok = spec.problem(2, 3, 4, 5);
        let status = |p: &BoltGlueProblem| unsafe { can_implement(p as *const _ as *const c_void) }.status();
        if matches!(spec, GlueSpec::Pool(_)) {
            // Ceil mode's extra outputs are fine; windows that start past the padded input are not.
            let ceil = pool_problem(spec);
            assert_eq!(status(&ceil), Status::Ok, "{symbol}");
            let beyond = BoltGlueProblem { p: ceil.p + 3, ..ceil };
            assert_eq!(status(&beyond), Status::UnsupportedProblem, "{symbol}: windows past the input");
        } else if let GlueSpec::DepthToSpace(_) = spec {
            let other = BoltGlueProblem { q: ok.q + 1, ..ok };
            assert_eq!(status(&other), Status::UnsupportedProblem, "{symbol}: q != w * b");
        } else if let GlueSpec::Resize(r) = spec {
            // By sizes any output extent goes; constant scales fix them.
            let other = BoltGlueProblem { p: ok.p + 1, ..ok };
            let want = if r.scales.is_some() { Status::UnsupportedProblem } else { Status::Ok };
            assert_eq!(status(&other), want, "{symbol}: p");
        } else {
            let moved = BoltGlueProblem { p: ok.p + 1, ..ok };
            assert_eq!(status(&moved), Status::UnsupportedProblem, "{symbol}: p != h");
        }
        assert_eq!(status(&ok), Status::Ok, "{symbol}");
        assert_eq!(status(&BoltGlueProblem { n: 0, ..ok }), Status::UnsupportedProblem, "{symbol}");
        let odd_padding = BoltGlueProblem { c_padded: ok.c_padded + 1, ..ok };
        assert_eq!(status(&odd_padding), Status::UnsupportedProblem, "{symbol}: c_padded");
        let mut setup = host_build::RawSetup::<BoltGlueArgs>::new(&lib, symbol);
        let problem = &ok as *const _ as *const c_void;
        assert_eq!(setup.initialize(problem, &BoltGlueArgs::default()), Status::NullArgument, "{symbol}");
        let odd = BoltGlueArgs { x: 0x1001 as *const c_void, y: 0x1000 as *mut c_void };
        assert_eq!(setup.initialize(problem, &odd), Status::MisalignedOperand, "{symbol}");
        assert_eq!(unsafe { launch(setup.params(), std::ptr::null_mut()) }.status(), Status::InvalidParams);
        // Set-up needs no device for glue kernels (nothing is launched: the pointers are fake).
        let fake = BoltGlueArgs { x: 0x1000 as *const c_void, y: 0x1000 as *mut c_void };
        assert_eq!(setup.initialize(problem, &fake), Status::Ok, "{symbol}");
    }
}
