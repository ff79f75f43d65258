//! Glue kernels the plan needs around the CUTLASS kernels: layout transposes (NCHW <-> NHWC),
//! channel padding of NHWC activations (to the kernels' alignment, 8 or 4), casts between
//! f32 and f16/bf16, and 2-D pooling (max, average, global average) in either layout, so
//! that a CNN's pools run on the GPU between its convs instead of on the host. One typed spec per family, one template (`templates/glue.cu.tera`), and
//! the same C ABI as every kernel (`BoltGlueProblem`, `BoltGlueArgs`; no workspace).
//!
//! A glue spec says what a kernel converts; the shapes come at run time in the problem.

use serde::{Deserialize, Serialize};

use crate::render::RenderError;
use crate::spec::Element;

/// NCHW <-> NHWC of a 4-D activation, keeping the element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TransposeSpec {
    pub direction: Direction,
    pub element: Element,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    NchwToNhwc,
    NhwcToNchw,
}

/// NHWC channels `c` -> `c_padded` (a multiple of `alignment`), the extra channels zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PadSpec {
    pub element: Element,
    /// 8 (16-bit elements) or 4 (f32): the kernels' vector width.
    pub alignment: u32,
}

/// Element-wise conversion (round to nearest even), any layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CastSpec {
    pub from: Element,
    pub to: Element,
}

/// A 2-D pooling window. The output extents come in the problem (`p`, `q`): the model's ceil
/// mode decides them (SAME padding: ceil(input / stride)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolWindow {
    pub kernel: [u32; 2],
    pub strides: [u32; 2],
    pub dilations: [u32; 2],
    pub pads: PoolPads,
}

/// A pool window's padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolPads {
    /// Begin h, begin w, end h, end w.
    Fixed([u32; 4]),
    /// ONNX's auto_pad SAME_UPPER (`upper`) / SAME_LOWER, Keras's `padding="same"`: the output
    /// is ceil(input / stride), and the padding that makes it so, the odd unit at the end
    /// (upper) or the beginning, follows the input's size, known at run time.
    Same { upper: bool },
}

impl PoolWindow {
    fn span(&self, d: usize) -> i64 {
        i64::from(self.dilations[d]) * (i64::from(self.kernel[d]) - 1) + 1
    }

    /// Output extents for input extents `h`, `w`: floor mode (ONNX's default), or SAME's.
    pub fn output(&self, h: i64, w: i64) -> (i64, i64) {
        let out = |x: i64, d: usize| {
            let stride = i64::from(self.strides[d].max(1));
            match self.pads {
                PoolPads::Fixed(p) => (x + i64::from(p[d]) + i64::from(p[d + 2]) - self.span(d)) / stride + 1,
                PoolPads::Same { .. } => (x + stride - 1) / stride,
            }
        };
        (out(h, 0), out(w, 1))
    }

    /// The pads (begin h, begin w, end h, end w) on an input of `h` x `w` with output `p` x `q`.
    pub fn pads_at(&self, h: i64, w: i64, p: i64, q: i64) -> [i64; 4] {
        match self.pads {
            PoolPads::Fixed(f) => f.map(i64::from),
            PoolPads::Same { upper } => {
                let total = |x: i64, o: i64, d: usize| ((o - 1) * i64::from(self.strides[d]) + self.span(d) - x).max(0);
                let (th, tw) = (total(h, p, 0), total(w, q, 1));
                let begin = |t: i64| if upper { t / 2 } else { t - t / 2 };
                [begin(th), begin(tw), th - begin(th), tw - begin(tw)]
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// Padding never wins; a window wholly in the padding gives -inf (as onnxruntime).
    Max(PoolWindow),
    /// With `count_include_pad`, the divisor counts window positions inside the padded input
    /// (positions past the end padding, which ceil mode creates, never count).
    Average { window: PoolWindow, count_include_pad: bool },
    /// The mean over h x w (output 1 x 1).
    GlobalAverage,
    /// The maximum over h x w (output 1 x 1), as Max's rule: a later value wins when greater.
    GlobalMax,
}

/// Whether an activation is NCHW (the model's) or NHWC (inside the planner's conv regions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    Nchw,
    Nhwc,
}

/// Pooling of a 4-D activation, accumulating in f32, keeping the layout and element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PoolSpec {
    pub kind: PoolKind,
    pub layout: Layout,
    pub element: Element,
}

/// Where output index `o` of an axis samples the input (ONNX Resize's
/// coordinate_transformation_mode; `scale` = output / input extent, or the model's scale).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResizeCoord {
    /// o / scale
    Asymmetric,
    /// (o + 0.5) / scale - 0.5
    HalfPixel,
    /// as HalfPixel, but -0.5 when the output extent (scale * input) is 1
    PytorchHalfPixel,
    /// o * (input - 1) / (scale * input - 1), 0 when that is 1
    AlignCorners,
}

/// How a fractional source coordinate picks its neighbour (ONNX nearest_mode); an integer
/// coordinate is itself; the index is clamped to the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NearestRounding {
    Floor,
    Ceil,
    RoundPreferFloor,
    RoundPreferCeil,
}

/// How an output pixel is made from the input around its source coordinate (ONNX Resize's
/// mode, without antialias).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// The one input pixel the rounding picks.
    Nearest(NearestRounding),
    /// Bilinear: the two neighbours along each axis (clamped to the edge), weighted by the
    /// coordinate's fractional part.
    Linear,
}

/// Resize of the two spatial axes of a 4-D activation (h, w of NCHW or NHWC). `scales`: the
/// model's constant scales along h and w; `None`: output / input extents (a model giving
/// sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResizeSpec {
    pub coord: ResizeCoord,
    pub sample: Sampling,
    pub scales: Option<[ordered_float::OrderedFloat<f32>; 2]>,
    pub layout: Layout,
    pub element: Element,
}

/// DepthToSpace of a 4-D activation: c * b * b channels of h x w pixels -> c channels of
/// (h * b) x (w * b); output (y, x) of channel ch reads channel (ch * b + y % b) * b + x % b
/// (CRD) or (y % b * b + x % b) * c + ch (DCR) at (y / b, x / b).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DepthToSpaceSpec {
    pub blocksize: u32,
    pub crd: bool,
    pub layout: Layout,
    pub element: Element,
}

/// How a spatial pad fills the new elements (ONNX Pad's modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PadFill {
    /// The spec's value.
    Constant,
    /// Mirrored about the edge element, which is not repeated (period 2(d - 1); an axis of one
    /// element repeats it).
    Reflect,
    /// The edge element repeated.
    Edge,
    /// From the other end, as if the axis were a ring.
    Wrap,
}

/// ONNX Pad of the last two axes of data viewed as `[n, h, w]` (every leading axis is `n`;
/// a 1-D pad has h = 1): output `[n, h + pads[0] + pads[2], w + pads[1] + pads[3]]` (`pads`:
/// begin h, begin w, end h, end w; never negative: crops are copies).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpatialPadSpec {
    pub fill: PadFill,
    pub pads: [u32; 4],
    /// What `Constant` writes (0 for the other modes).
    #[serde(with = "crate::json_float::ordered_f32")]
    pub value: ordered_float::OrderedFloat<f32>,
    pub element: Element,
}

/// One glue kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GlueSpec {
    Transpose(TransposeSpec),
    PadChannels(PadSpec),
    Cast(CastSpec),
    Pool(PoolSpec),
    Resize(ResizeSpec),
    DepthToSpace(DepthToSpaceSpec),
    Pad(SpatialPadSpec),
}

/// Why a glue spec is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GlueRejection {
    #[error("pad_channels alignment {0}: the kernels take 2, 4 or 8 elements")]
    Alignment(u32),
    #[error("cast from {0:?} to itself: nothing to do")]
    SameType(Element),
    #[error("cast {from:?} -> {to:?}: casts go between f32 and f16/bf16")]
    NotViaF32 { from: Element, to: Element },
    #[error(
        "pool window {0:?}: kernel, strides and dilations must be positive, each pad smaller than the window's span"
    )]
    Window(PoolWindow),
    #[error("depth_to_space blocksize 0")]
    Blocksize,
    #[error("resize scale {0}: must be positive and finite")]
    Scale(ordered_float::OrderedFloat<f32>),
    #[error("pad value NaN")]
    PadValue,
}

pub fn validate(spec: &GlueSpec) -> Result<(), GlueRejection> {
    match *spec {
        GlueSpec::Transpose(_) => Ok(()),
        GlueSpec::PadChannels(p) if ![2, 4, 8].contains(&p.alignment) => Err(GlueRejection::Alignment(p.alignment)),
        GlueSpec::PadChannels(_) => Ok(()),
        GlueSpec::Cast(c) if c.from == c.to => Err(GlueRejection::SameType(c.from)),
        GlueSpec::Cast(c) if c.from != Element::F32 && c.to != Element::F32 => {
            Err(GlueRejection::NotViaF32 { from: c.from, to: c.to })
        }
        GlueSpec::Cast(_) => Ok(()),
        GlueSpec::Pool(p) => match p.kind {
            PoolKind::Max(w) | PoolKind::Average { window: w, .. } => {
                let positive = w.kernel.iter().chain(&w.strides).chain(&w.dilations).all(|&x| x > 0);
                // A pad as wide as the window's span would make whole windows of padding.
                let span = |d: usize| w.dilations[d].saturating_mul(w.kernel[d].saturating_sub(1)) + 1;
                let pads_fit = match w.pads {
                    PoolPads::Fixed(pads) => (0..4).all(|k| pads[k] < span(k % 2)),
                    // SAME pads less than the span: (ceil(x / s) - 1) * s + span - x < span.
                    PoolPads::Same { .. } => true,
                };
                if positive && pads_fit {
                    Ok(())
                } else {
                    Err(GlueRejection::Window(w))
                }
            }
            PoolKind::GlobalAverage | PoolKind::GlobalMax => Ok(()),
        },
        GlueSpec::DepthToSpace(d) if d.blocksize == 0 => Err(GlueRejection::Blocksize),
        GlueSpec::DepthToSpace(_) => Ok(()),
        GlueSpec::Pad(p) if p.value.0.is_nan() => Err(GlueRejection::PadValue),
        GlueSpec::Pad(_) => Ok(()),
        GlueSpec::Resize(r) => match r.scales.into_iter().flatten().find(|s| !(s.0 > 0.0 && s.0.is_finite())) {
            Some(bad) => Err(GlueRejection::Scale(bad)),
            None => Ok(()),
        },
    }
}

impl GlueSpec {
    /// (template's op name, input element, output element).
    fn parts(&self) -> (&'static str, Element, Element) {
        match *self {
            GlueSpec::Transpose(t) => match t.direction {
                Direction::NchwToNhwc => ("nchw_to_nhwc", t.element, t.element),
                Direction::NhwcToNchw => ("nhwc_to_nchw", t.element, t.element),
            },
            GlueSpec::PadChannels(p) => ("pad_channels", p.element, p.element),
            GlueSpec::Cast(c) => ("cast", c.from, c.to),
            GlueSpec::Pool(p) => match p.kind {
                PoolKind::Max(_) => ("max_pool", p.element, p.element),
                PoolKind::Average { .. } => ("average_pool", p.element, p.element),
                PoolKind::GlobalAverage => ("global_average_pool", p.element, p.element),
                PoolKind::GlobalMax => ("global_max_pool", p.element, p.element),
            },
            GlueSpec::Resize(r) => match r.sample {
                Sampling::Nearest(_) => ("resize_nearest", r.element, r.element),
                Sampling::Linear => ("resize_linear", r.element, r.element),
            },
            GlueSpec::DepthToSpace(d) => ("depth_to_space", d.element, d.element),
            GlueSpec::Pad(p) => ("pad", p.element, p.element),
        }
    }

    /// What a problem's output holds for this kernel: the problem with `c_padded` set to
    /// `c` rounded up to the alignment (padding kernels) or to `c`, and the output extents
    /// `p`, `q` of a pool (floor mode; ceil-mode callers set them) or `h`, `w`.
    pub fn problem(&self, n: i64, c: i64, h: i64, w: i64) -> crate::abi::BoltGlueProblem {
        let c_padded = match self {
            GlueSpec::PadChannels(p) => (c + p.alignment as i64 - 1) / p.alignment as i64 * p.alignment as i64,
            _ => c,
        };
        let (p, q) = match self {
            GlueSpec::Pool(s) => match s.kind {
                PoolKind::Max(win) | PoolKind::Average { window: win, .. } => win.output(h, w),
                PoolKind::GlobalAverage | PoolKind::GlobalMax => (1, 1),
            },
            // The output extents of constant scales (floor(input * scale)); sizes: the same.
            GlueSpec::Resize(r) => match r.scales {
                Some([sh, sw]) => ((h as f64 * f64::from(sh.0)) as i64, (w as f64 * f64::from(sw.0)) as i64),
                None => (h, w),
            },
            GlueSpec::DepthToSpace(d) => (h * i64::from(d.blocksize), w * i64::from(d.blocksize)),
            GlueSpec::Pad(s) => (h + i64::from(s.pads[0] + s.pads[2]), w + i64::from(s.pads[1] + s.pads[3])),
            _ => (h, w),
        };
        crate::abi::BoltGlueProblem { n, c, h, w, c_padded, p, q }
    }
}

/// A readable unique symbol, e.g. `bolt_glue_nchw_to_nhwc_f16`, `bolt_glue_pad_channels_f16_a8`,
/// `bolt_glue_cast_f32_bf16`, `bolt_glue_max_pool_nhwc_f32_k3x3_s2x2_d1x1_p1x1x1x1`,
/// `bolt_glue_average_pool_nchw_f16_k2x2_s2x2_d1x1_p0x0x0x0_incl`.
pub fn symbol_for(spec: &GlueSpec) -> String {
    let (op, x, y) = spec.parts();
    match spec {
        GlueSpec::PadChannels(p) => format!("bolt_glue_{op}_{}_a{}", x.name(), p.alignment),
        GlueSpec::Cast(_) => format!("bolt_glue_{op}_{}_{}", x.name(), y.name()),
        GlueSpec::Transpose(_) => format!("bolt_glue_{op}_{}", x.name()),
        GlueSpec::Resize(r) => {
            let coord = match r.coord {
                ResizeCoord::Asymmetric => "asym",
                ResizeCoord::HalfPixel => "half",
                ResizeCoord::PytorchHalfPixel => "pthalf",
                ResizeCoord::AlignCorners => "corners",
            };
            let rounding = match r.sample {
                Sampling::Nearest(NearestRounding::Floor) => "_floor",
                Sampling::Nearest(NearestRounding::Ceil) => "_ceil",
                Sampling::Nearest(NearestRounding::RoundPreferFloor) => "_rpf",
                Sampling::Nearest(NearestRounding::RoundPreferCeil) => "_rpc",
                Sampling::Linear => "",
            };
            // Scales as their bit patterns: exact and a valid identifier.
            let scales = match r.scales {
                Some([h, w]) => format!("s{:08x}x{:08x}", h.0.to_bits(), w.0.to_bits()),
                None => "sizes".into(),
            };
            format!("bolt_glue_{op}_{}_{}_{coord}{rounding}_{scales}", layout_name(r.layout), x.name())
        }
        GlueSpec::Pad(p) => {
            let pads = p.pads.map(|v| v.to_string()).join("x");
            let value = match p.fill {
                PadFill::Constant => format!("_v{:08x}", p.value.0.to_bits()),
                _ => String::new(),
            };
            format!("bolt_glue_{op}_{}_{}_p{pads}{value}", fill_name(p.fill), x.name())
        }
        GlueSpec::DepthToSpace(d) => {
            let mode = if d.crd { "crd" } else { "dcr" };
            format!("bolt_glue_{op}_{}_{}_b{}_{mode}", layout_name(d.layout), x.name(), d.blocksize)
        }
        GlueSpec::Pool(p) => {
            let base = format!("bolt_glue_{op}_{}_{}", layout_name(p.layout), x.name());
            let x2 = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join("x");
            let window = |w: &PoolWindow| {
                let pads = match w.pads {
                    PoolPads::Fixed(p) => x2(&p),
                    PoolPads::Same { upper: true } => "same_upper".into(),
                    PoolPads::Same { upper: false } => "same_lower".into(),
                };
                format!("_k{}_s{}_d{}_p{pads}", x2(&w.kernel), x2(&w.strides), x2(&w.dilations))
            };
            match p.kind {
                PoolKind::Max(w) => base + &window(&w),
                PoolKind::Average { window: w, count_include_pad } => {
                    base + &window(&w) + if count_include_pad { "_incl" } else { "_excl" }
                }
                PoolKind::GlobalAverage | PoolKind::GlobalMax => base,
            }
        }
    }
}

fn fill_name(f: PadFill) -> &'static str {
    match f {
        PadFill::Constant => "constant",
        PadFill::Reflect => "reflect",
        PadFill::Edge => "edge",
        PadFill::Wrap => "wrap",
    }
}

/// An f32 as a C++ expression (infinities by name).
fn cpp_f32(v: f32) -> String {
    match v {
        v if v == f32::INFINITY => "INFINITY".into(),
        v if v == f32::NEG_INFINITY => "(-INFINITY)".into(),
        v => format!("{v:e}f"),
    }
}

fn layout_name(l: Layout) -> &'static str {
    match l {
        Layout::Nchw => "nchw",
        Layout::Nhwc => "nhwc",
    }
}

#[derive(Serialize)]
struct Context<'a> {
    symbol: &'a str,
    summary: String,
    op: &'static str,
    element_x: &'static str,
    element_y: &'static str,
    alignment: u32,
    /// Pools: layout, window and divisor (zeros / false for the other kernels).
    nhwc: bool,
    kernel: [u32; 2],
    strides: [u32; 2],
    dilations: [u32; 2],
    pads: [u32; 4],
    /// Pools: the pads (begin h, begin w, end h, end w) as C++ expressions of the problem `p`
    /// (numbers when fixed), and whether they are SAME's.
    pool_pads: [String; 4],
    same_pads: bool,
    count_include_pad: bool,
    /// Resize: coordinate mode, rounding (nearest only), and the scales as C++ literals ("" for
    /// sizes).
    coord: &'static str,
    /// DepthToSpace: channel order CRD (else DCR).
    crd: bool,
    rounding: &'static str,
    scales: [String; 2],
    /// Pad: the fill mode and what a constant pad (and every other kernel's -1 source) writes.
    fill: &'static str,
    fill_value: String,
}

pub const TEMPLATE: &str = "glue.cu.tera";

/// Headers a unit with glue kernels needs (the element types and `cutlass::Status`).
pub fn includes() -> [&'static str; 3] {
    ["cutlass/cutlass.h", "cutlass/half.h", "cutlass/bfloat16.h"]
}

/// One glue kernel's block (relies on the unit prologue, like [`crate::render::render`]).
pub fn render(spec: &GlueSpec, symbol: &str) -> Result<String, RenderError> {
    crate::render::check_symbol(symbol)?;
    validate(spec).map_err(|r| RenderError::Unsupported { field: "glue", reason: r.to_string() })?;
    let (op, x, y) = spec.parts();
    let context = Context {
        symbol,
        summary: serde_json::to_string(spec).expect("glue spec serialises"),
        op,
        element_x: x.cpp(),
        element_y: y.cpp(),
        // Pad kernels: the vector width; depth_to_space: the blocksize.
        alignment: match spec {
            GlueSpec::PadChannels(p) => p.alignment,
            GlueSpec::DepthToSpace(d) => d.blocksize,
            _ => 1,
        },
        nhwc: matches!(spec, GlueSpec::Pool(p) if p.layout == Layout::Nhwc)
            || matches!(spec, GlueSpec::Resize(r) if r.layout == Layout::Nhwc)
            || matches!(spec, GlueSpec::DepthToSpace(d) if d.layout == Layout::Nhwc),
        kernel: [0; 2],
        strides: [0; 2],
        dilations: [0; 2],
        pads: [0; 4],
        pool_pads: Default::default(),
        same_pads: false,
        count_include_pad: false,
        coord: "",
        crd: matches!(spec, GlueSpec::DepthToSpace(d) if d.crd),
        rounding: "",
        scales: [String::new(), String::new()],
        fill: "",
        fill_value: "0.f".into(),
    };
    let context = match spec {
        GlueSpec::Pad(p) => {
            Context { pads: p.pads, fill: fill_name(p.fill), fill_value: cpp_f32(p.value.0), ..context }
        }
        GlueSpec::Pool(PoolSpec { kind: PoolKind::Max(w) | PoolKind::Average { window: w, .. }, .. }) => Context {
            kernel: w.kernel,
            strides: w.strides,
            dilations: w.dilations,
            // SAME: of the total t, the begin pad is floor(t / 2) (upper) or ceil(t / 2).
            pool_pads: match w.pads {
                PoolPads::Fixed(p) => p.map(|v| v.to_string()),
                PoolPads::Same { upper } => {
                    let (lo, hi) = if upper { ("", " + 1") } else { (" + 1", "") };
                    [
                        format!("((same_total_h(p){lo}) / 2)"),
                        format!("((same_total_w(p){lo}) / 2)"),
                        format!("((same_total_h(p){hi}) / 2)"),
                        format!("((same_total_w(p){hi}) / 2)"),
                    ]
                }
            },
            same_pads: matches!(w.pads, PoolPads::Same { .. }),
            count_include_pad: matches!(
                spec,
                GlueSpec::Pool(PoolSpec { kind: PoolKind::Average { count_include_pad: true, .. }, .. })
            ),
            ..context
        },
        GlueSpec::Resize(r) => Context {
            coord: match r.coord {
                ResizeCoord::Asymmetric => "asymmetric",
                ResizeCoord::HalfPixel => "half_pixel",
                ResizeCoord::PytorchHalfPixel => "pytorch_half_pixel",
                ResizeCoord::AlignCorners => "align_corners",
            },
            rounding: match r.sample {
                Sampling::Nearest(NearestRounding::Floor) => "floor",
                Sampling::Nearest(NearestRounding::Ceil) => "ceil",
                Sampling::Nearest(NearestRounding::RoundPreferFloor) => "round_prefer_floor",
                Sampling::Nearest(NearestRounding::RoundPreferCeil) => "round_prefer_ceil",
                Sampling::Linear => "",
            },
            // f32 scales exactly, as doubles (the reference computes in f64 from the f32).
            scales: r.scales.map_or([String::new(), String::new()], |s| s.map(|v| format!("{:?}", f64::from(v.0)))),
            ..context
        },
        _ => context,
    };
    crate::render::render_template(TEMPLATE, &crate::render::to_context(&context)?)
}

/// Glue kernels as one `.cu` unit: the shared prologue, then each block.
pub fn render_unit(kernels: &[(&GlueSpec, &str)]) -> Result<String, RenderError> {
    crate::render::assemble_unit(kernels, &includes(), render)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_validate_name_and_size_their_problems() {
        let pad = GlueSpec::PadChannels(PadSpec { element: Element::F16, alignment: 8 });
        assert_eq!(symbol_for(&pad), "bolt_glue_pad_channels_f16_a8");
        assert_eq!(pad.problem(1, 3, 224, 224).c_padded, 8);
        assert_eq!(pad.problem(1, 16, 2, 2).c_padded, 16);
        let t = GlueSpec::Transpose(TransposeSpec { direction: Direction::NchwToNhwc, element: Element::F32 });
        assert_eq!(symbol_for(&t), "bolt_glue_nchw_to_nhwc_f32");
        assert_eq!(t.problem(2, 3, 4, 5).c_padded, 3);
        let cast = GlueSpec::Cast(CastSpec { from: Element::F32, to: Element::BF16 });
        assert_eq!(symbol_for(&cast), "bolt_glue_cast_f32_bf16");
        assert!(validate(&cast).is_ok());
        assert_eq!(
            validate(&GlueSpec::Cast(CastSpec { from: Element::F16, to: Element::F16 })),
            Err(GlueRejection::SameType(Element::F16))
        );
        assert!(validate(&GlueSpec::Cast(CastSpec { from: Element::F16, to: Element::BF16 })).is_err());
        assert!(validate(&GlueSpec::PadChannels(PadSpec { element: Element::F16, alignment: 3 })).is_err());
        assert_eq!(serde_json::to_string(&cast).unwrap(), r#"{"cast":{"from":"F32","to":"BF16"}}"#);
    }
}
