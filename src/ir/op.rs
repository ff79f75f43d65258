//! Operators with typed attributes. Import turns ONNX's attribute lists into these structs once,
//! so later stages (inference, reference executor, partitioner) match on types, never on
//! strings.

use super::{DType, Tensor};
use std::sync::Arc;

/// How a convolution or pooling window pads when `auto_pad` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AutoPad {
    /// Explicit `pads` attribute.
    NotSet,
    /// Output size ceil(in / stride); odd padding goes at the end.
    SameUpper,
    /// Output size ceil(in / stride); odd padding goes at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

/// Sliding-window geometry shared by Conv, MaxPool and AveragePool. Vectors cover the spatial
/// dims only; `pads` is [begin_0, begin_1, ..., end_0, end_1, ...] as in ONNX.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// For Conv, `None` means "take it from the weight tensor".
    pub kernel_shape: Option<Vec<usize>>,
    pub strides: Option<Vec<usize>>,
    pub pads: Option<Vec<usize>>,
    pub dilations: Option<Vec<usize>>,
    pub auto_pad: AutoPad,
}

impl Window {
    /// The window an opaque node's attributes describe (auto_pad, kernel_shape, strides,
    /// pads, dilations), as ConvInteger carries them.
    pub fn from_attrs(attrs: &[(String, AttrValue)]) -> Result<Window, String> {
        let get = |name: &str| attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        let auto_pad = match get("auto_pad") {
            None => AutoPad::NotSet,
            Some(AttrValue::String(s)) => match s.as_slice() {
                b"NOTSET" => AutoPad::NotSet,
                b"SAME_UPPER" => AutoPad::SameUpper,
                b"SAME_LOWER" => AutoPad::SameLower,
                b"VALID" => AutoPad::Valid,
                other => return Err(format!("unknown auto_pad '{}'", String::from_utf8_lossy(other))),
            },
            Some(_) => return Err("auto_pad must be a string".into()),
        };
        let usizes = |name: &str| -> Result<Option<Vec<usize>>, String> {
            match get(name) {
                None => Ok(None),
                Some(AttrValue::Ints(v)) => v
                    .iter()
                    .map(|&i| usize::try_from(i).map_err(|_| format!("{name} {v:?} holds {i}")))
                    .collect::<Result<_, _>>()
                    .map(Some),
                Some(_) => Err(format!("{name} must be a list of integers")),
            }
        };
        Ok(Window {
            kernel_shape: usizes("kernel_shape")?,
            strides: usizes("strides")?,
            pads: usizes("pads")?,
            dilations: usizes("dilations")?,
            auto_pad,
        })
    }

    /// Output spatial size and the effective begin/end pads for input spatial sizes `input`
    /// with kernel `kernel`. `ceil_mode` only applies to pooling.
    pub fn resolve(&self, input: &[usize], kernel: &[usize], ceil_mode: bool) -> Result<ResolvedWindow, String> {
        let n = input.len();
        if kernel.len() != n {
            return Err(format!("kernel has {} spatial dims, input has {}", kernel.len(), n));
        }
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; n]);
        let dilations = self.dilations.clone().unwrap_or_else(|| vec![1; n]);
        if strides.len() != n || dilations.len() != n {
            return Err(format!("strides/dilations must have {n} entries"));
        }
        if strides.iter().chain(&dilations).any(|&s| s == 0) {
            return Err("strides and dilations must be positive".into());
        }
        let mut begin = vec![0; n];
        let mut end = vec![0; n];
        let mut out = vec![0; n];
        for i in 0..n {
            let eff_k = dilations[i] * (kernel[i].max(1) - 1) + 1;
            match self.auto_pad {
                AutoPad::NotSet | AutoPad::Valid => {
                    if self.auto_pad == AutoPad::NotSet {
                        if let Some(p) = &self.pads {
                            if p.len() != 2 * n {
                                return Err(format!("pads must have {} entries, has {}", 2 * n, p.len()));
                            }
                            begin[i] = p[i];
                            end[i] = p[i + n];
                        }
                    }
                    let span = input[i] + begin[i] + end[i];
                    if span < eff_k {
                        return Err(format!("window {eff_k} larger than padded input {span} on spatial dim {i}"));
                    }
                    let num = span - eff_k;
                    out[i] = if ceil_mode {
                        let mut o = num.div_ceil(strides[i]) + 1;
                        // The last window must start inside the input or its begin padding.
                        if (o - 1) * strides[i] >= input[i] + begin[i] {
                            o -= 1;
                        }
                        o
                    } else {
                        num / strides[i] + 1
                    };
                }
                AutoPad::SameUpper | AutoPad::SameLower => {
                    out[i] = input[i].div_ceil(strides[i]);
                    let total = ((out[i] - 1) * strides[i] + eff_k).saturating_sub(input[i]);
                    let small = total / 2;
                    let large = total - small;
                    if self.auto_pad == AutoPad::SameUpper {
                        begin[i] = small;
                        end[i] = large;
                    } else {
                        begin[i] = large;
                        end[i] = small;
                    }
                }
            }
        }
        Ok(ResolvedWindow { kernel: kernel.to_vec(), strides, dilations, pad_begin: begin, pad_end: end, output: out })
    }
}

impl Window {
    /// Geometry of a transposed convolution: output size and the begin/end pads cropped from
    /// the full-size output, for input spatial sizes `input`. Follows the ONNX operator spec
    /// (and its reference implementation) for auto_pad and output_shape.
    pub fn resolve_transposed(
        &self,
        input: &[usize],
        kernel: &[usize],
        output_padding: Option<&[usize]>,
        output_shape: Option<&[usize]>,
    ) -> Result<ResolvedWindow, String> {
        let n = input.len();
        if kernel.len() != n {
            return Err(format!("kernel has {} spatial dims, input has {}", kernel.len(), n));
        }
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; n]);
        let dilations = self.dilations.clone().unwrap_or_else(|| vec![1; n]);
        let adj = output_padding.map(<[usize]>::to_vec).unwrap_or_else(|| vec![0; n]);
        if strides.len() != n || dilations.len() != n || adj.len() != n {
            return Err(format!("strides, dilations and output_padding must have {n} entries"));
        }
        if strides.iter().chain(&dilations).any(|&s| s == 0) {
            return Err("strides and dilations must be positive".into());
        }
        // output_shape may include the batch and channel dims.
        let out_req = match output_shape {
            Some(o) if o.len() == n + 2 => Some(&o[2..]),
            Some(o) if o.len() == n => Some(o),
            Some(o) => return Err(format!("output_shape {o:?} does not match {n} spatial dims")),
            None => None,
        };
        let (mut begin, mut end, mut out) = (vec![0; n], vec![0; n], vec![0; n]);
        for i in 0..n {
            let full = strides[i] * (input[i].max(1) - 1) + adj[i] + dilations[i] * (kernel[i].max(1) - 1) + 1;
            let target = match (out_req, self.auto_pad) {
                (Some(o), _) => Some(o[i]),
                (None, AutoPad::SameUpper | AutoPad::SameLower) => Some(input[i] * strides[i]),
                _ => None,
            };
            match target {
                Some(t) => {
                    // The spec's pads for a requested size (explicit pads are then ignored):
                    // SAME_UPPER puts the odd unit at the end, every other auto_pad (NOTSET and
                    // VALID included) at the beginning; onnxruntime does the same. A size larger
                    // than the full output (negative total padding) pads zeros at the end, as
                    // onnxruntime and the onnx reference do for NOTSET.
                    let total = full.saturating_sub(t);
                    let (small, large) = (total / 2, total - total / 2);
                    (begin[i], end[i]) =
                        if self.auto_pad == AutoPad::SameUpper { (small, large) } else { (large, small) };
                    out[i] = t;
                }
                None => {
                    if self.auto_pad == AutoPad::NotSet {
                        if let Some(p) = &self.pads {
                            if p.len() != 2 * n {
                                return Err(format!("pads must have {} entries, has {}", 2 * n, p.len()));
                            }
                            begin[i] = p[i];
                            end[i] = p[i + n];
                        }
                    }
                    out[i] = full
                        .checked_sub(begin[i] + end[i])
                        .ok_or_else(|| format!("pads exceed the output size {full} on spatial dim {i}"))?;
                }
            }
        }
        Ok(ResolvedWindow { kernel: kernel.to_vec(), strides, dilations, pad_begin: begin, pad_end: end, output: out })
    }
}

/// A window with every parameter concrete, for one input size.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedWindow {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
    pub output: Vec<usize>,
}

/// Element-wise functions of one tensor. Parameterised activations carry their constants;
/// the same enum later describes fused epilogue activations.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Unary {
    Sqrt,
    Erf,
    Tanh,
    Relu,
    Sigmoid,
    Softplus,
    HardSwish,
    LeakyRelu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    Gelu {
        approximate: GeluApprox,
    },
    Exp,
    Neg,
    Abs,
    Reciprocal,
    /// Natural logarithm.
    Log,
    Ceil,
    Floor,
    /// To the nearest integer, halves to even (ONNX Round).
    Round,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign,
    /// `x < 0 ? alpha * (exp(x) - 1) : x`.
    Elu {
        alpha: f32,
    },
    /// `gamma * (x > 0 ? x : alpha * (exp(x) - 1))`.
    Selu {
        alpha: f32,
        gamma: f32,
    },
    /// `max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`.
    Celu {
        alpha: f32,
    },
    /// `x > alpha ? x : 0`.
    ThresholdedRelu {
        alpha: f32,
    },
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`.
    Shrink {
        bias: f32,
        lambd: f32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GeluApprox {
    /// Exact: x * Phi(x) with the error function.
    None,
    /// The tanh approximation.
    Tanh,
}

/// Activations an epilogue can apply.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    Relu,
    GeluErf,
    GeluTanh,
    HardSwish,
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    Softplus,
    Sigmoid,
    Silu,
    Tanh,
    LeakyRelu {
        alpha: f32,
    },
    /// A one-sided clip has an infinite bound.
    Clip {
        #[serde(with = "bolt_codegen::json_float::f32")]
        min: f32,
        #[serde(with = "bolt_codegen::json_float::f32")]
        max: f32,
    },
}

/// The function as the report writes it: `relu`, `leaky_relu[0.1]`, `clip[0, 6]`.
impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Activation::Relu => f.write_str("relu"),
            Activation::GeluErf => f.write_str("gelu"),
            Activation::GeluTanh => f.write_str("gelu_tanh"),
            Activation::HardSwish => f.write_str("hardswish"),
            Activation::HardSigmoid { alpha, beta } => write!(f, "hardsigmoid[{alpha}, {beta}]"),
            Activation::Softplus => f.write_str("softplus"),
            Activation::Sigmoid => f.write_str("sigmoid"),
            Activation::Silu => f.write_str("silu"),
            Activation::Tanh => f.write_str("tanh"),
            Activation::LeakyRelu { alpha } => write!(f, "leaky_relu[{alpha}]"),
            Activation::Clip { min, max } => write!(f, "clip[{min}, {max}]"),
        }
    }
}

impl Activation {
    pub fn apply(&self, x: f64) -> f64 {
        let u = |u: Unary| crate::reference::unary_fn(u)(x);
        match *self {
            Activation::Relu => u(Unary::Relu),
            Activation::GeluErf => u(Unary::Gelu { approximate: GeluApprox::None }),
            Activation::GeluTanh => u(Unary::Gelu { approximate: GeluApprox::Tanh }),
            Activation::HardSwish => u(Unary::HardSwish),
            Activation::HardSigmoid { alpha, beta } => u(Unary::HardSigmoid { alpha, beta }),
            Activation::Softplus => u(Unary::Softplus),
            Activation::Sigmoid => u(Unary::Sigmoid),
            Activation::Silu => x * u(Unary::Sigmoid),
            Activation::Tanh => u(Unary::Tanh),
            Activation::LeakyRelu { alpha } => u(Unary::LeakyRelu { alpha }),
            Activation::Clip { min, max } => x.max(min as f64).min(max as f64),
        }
    }

    /// The activation of a single-node op, if it is one.
    pub fn of_unary(u: Unary) -> Option<Activation> {
        Some(match u {
            Unary::Relu => Activation::Relu,
            Unary::Sigmoid => Activation::Sigmoid,
            Unary::Tanh => Activation::Tanh,
            Unary::Softplus => Activation::Softplus,
            Unary::HardSwish => Activation::HardSwish,
            Unary::LeakyRelu { alpha } => Activation::LeakyRelu { alpha },
            Unary::HardSigmoid { alpha, beta } => Activation::HardSigmoid { alpha, beta },
            Unary::Gelu { approximate: GeluApprox::None } => Activation::GeluErf,
            Unary::Gelu { approximate: GeluApprox::Tanh } => Activation::GeluTanh,
            Unary::Sqrt
            | Unary::Erf
            | Unary::Exp
            | Unary::Neg
            | Unary::Abs
            | Unary::Reciprocal
            | Unary::Log
            | Unary::Ceil
            | Unary::Floor
            | Unary::Round
            | Unary::Sin
            | Unary::Cos
            | Unary::Tan
            | Unary::Asin
            | Unary::Acos
            | Unary::Atan
            | Unary::Sinh
            | Unary::Cosh
            | Unary::Asinh
            | Unary::Acosh
            | Unary::Atanh
            | Unary::Sign
            | Unary::Elu { .. }
            | Unary::Selu { .. }
            | Unary::Celu { .. }
            | Unary::ThresholdedRelu { .. }
            | Unary::Softsign
            | Unary::Mish
            | Unary::Shrink { .. } => return None,
        })
    }
}

/// Where a fused kernel adds its source tensor relative to the activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResidualAt {
    BeforeActivation,
    AfterActivation,
}

/// A GEMM/Conv anchor with its epilogue, as one kernel computes it. Inputs: A, the weight,
/// then an optional bias vector (one value per output column / channel) and an optional
/// source tensor of the output's shape. Output: `act(alpha*acc + bias [+ s*src]) [+ s*src]`
/// converted to `output_dtype`, computed in f32 and rounded once.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FusedKernel {
    /// MatMul, Gemm (its alpha/beta/C are moved into the epilogue) or Conv (no bias input).
    pub anchor: Box<Op>,
    pub alpha: f32,
    pub source: Option<(f32, ResidualAt)>,
    pub activation: Option<Activation>,
    pub output_dtype: DType,
    /// Memory layout of a conv kernel's activations, source and output. GEMMs are row-major.
    pub layout: ConvLayout,
    /// GEMM kernels: the planner stored the 2-D weight transposed ([N, K], K-major), the
    /// operand layout tensor-core mainloops read fastest (and the only one sm90 tf32 wgmma
    /// takes). The anchor's meaning is on the untransposed weight.
    pub weight_transposed: bool,
    /// A stage over whole rows (the last axis) of the epilogue's output, rounded to
    /// `output_dtype` first: the output is that stage's result.
    #[serde(default)]
    pub row: Option<RowEpilogue>,
}

/// What a kernel computes over each row of its epilogue's output (GEMM kernels, row-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RowEpilogue {
    /// Softmax along the row (ONNX Softmax over the last axis).
    Softmax,
}

/// What an ONNX Scan iterates: its body and how it walks its scan inputs and builds its scan
/// outputs (axes as given, maybe negative; `reverse`: from the last slice to the first).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScanAttrs {
    pub body: super::Graph,
    pub states: usize,
    pub input_axes: Vec<i64>,
    pub input_reverse: Vec<bool>,
    pub output_axes: Vec<i64>,
    pub output_reverse: Vec<bool>,
}

/// Layout of a conv kernel's tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ConvLayout {
    /// As the model has it: NCHW activations, OIHW (KCRS) weights.
    #[default]
    Nchw,
    /// What Bolt's kernels run: NHWC activations, OHWI (KRSC) weights.
    Nhwc,
}

impl Binary {
    /// The op on two real numbers (what every float path computes before rounding).
    pub fn apply(self, p: f64, q: f64) -> f64 {
        match self {
            Binary::Add => p + q,
            Binary::Sub => p - q,
            Binary::Mul => p * q,
            Binary::Div => p / q,
            Binary::Pow => p.powf(q),
            // NaN wins, as numpy's maximum / minimum and onnxruntime.
            Binary::Max if p.is_nan() || q.is_nan() => f64::NAN,
            Binary::Min if p.is_nan() || q.is_nan() => f64::NAN,
            Binary::Max => p.max(q),
            Binary::Min => p.min(q),
            Binary::PRelu if p < 0.0 => p * q,
            Binary::PRelu => p,
        }
    }
}

/// Element-wise comparisons (ONNX Equal, Less, ...): bool outputs, broadcasting inputs of one
/// type. A NaN compares unequal to everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Compare {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl Compare {
    pub fn apply<T: PartialOrd>(self, p: T, q: T) -> bool {
        match self {
            Compare::Equal => p == q,
            Compare::Less => p < q,
            Compare::LessOrEqual => p <= q,
            Compare::Greater => p > q,
            Compare::GreaterOrEqual => p >= q,
        }
    }
}

/// Element-wise logic on bool tensors (ONNX And, Or, Xor), broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Logic {
    And,
    Or,
    Xor,
}

impl Logic {
    pub fn apply(self, p: bool, q: bool) -> bool {
        match self {
            Logic::And => p && q,
            Logic::Or => p || q,
            Logic::Xor => p != q,
        }
    }
}

/// How Pad fills the new elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PadMode {
    /// The constant (0 unless given).
    Constant,
    /// Mirrored about the edge element, which is not repeated.
    Reflect,
    /// The edge element repeated.
    Edge,
    /// From the other end, as if the axis were a ring.
    Wrap,
}

/// What a Reduce op computes over its axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReduceKind {
    Mean,
    Sum,
    Max,
    Min,
    /// Sum of absolute values.
    L1,
    /// Square root of the sum of squares.
    L2,
    /// Sum of squares.
    SumSquare,
    /// Natural log of the sum.
    LogSum,
    /// Natural log of the sum of exponentials.
    LogSumExp,
    Prod,
}

/// Broadcasting binary arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    /// Element-wise maximum / minimum of two tensors (ONNX Max / Min with two inputs); a NaN
    /// in either gives NaN.
    Max,
    Min,
    /// ONNX PRelu: `x < 0 ? slope * x : x`, the slope (input 1) broadcast to x (one per
    /// channel, as Keras and PyTorch write it, or one for all).
    PRelu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResizeMode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CoordTransform {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AspectPolicy {
    Stretch,
    NotLarger,
    NotSmaller,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResizeAttrs {
    pub mode: ResizeMode,
    pub coord: CoordTransform,
    pub nearest: NearestMode,
    pub cubic_coeff_a: f32,
    pub exclude_outside: bool,
    pub extrapolation_value: f32,
    pub antialias: bool,
    pub axes: Option<Vec<i64>>,
    pub aspect: AspectPolicy,
}

/// ONNX's defaults for every attribute (nearest, half_pixel, round_prefer_floor, a = -0.75).
impl Default for ResizeAttrs {
    fn default() -> ResizeAttrs {
        ResizeAttrs {
            mode: ResizeMode::Nearest,
            coord: CoordTransform::HalfPixel,
            nearest: NearestMode::RoundPreferFloor,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            extrapolation_value: 0.0,
            antialias: false,
            axes: None,
            aspect: AspectPolicy::Stretch,
        }
    }
}

/// The cell of a recurrent layer (ONNX RNN, GRU, LSTM), with its variant attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Cell {
    /// `H = f(X·Wᵀ + H·Rᵀ + b)`: one gate.
    Rnn,
    /// Gates z, r, h in that order in W, R and B. With `linear_before_reset` the reset gate
    /// scales `H·Rhᵀ + Rbh` (cuDNN's and PyTorch's GRU) instead of `H` before the product.
    Gru { linear_before_reset: bool },
    /// Gates i, o, f, c in that order (peepholes i, o, f). `input_forget` couples the forget
    /// gate to the input gate: f = 1 - i.
    Lstm { input_forget: bool },
}

impl Cell {
    /// Gates per direction: the rows of W and R are `gates() * hidden_size`.
    pub fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    /// Activation functions per direction (f; f, g; f, g, h) and ONNX's defaults.
    pub fn default_activations(self) -> &'static [Unary] {
        match self {
            Cell::Rnn => &[Unary::Tanh],
            Cell::Gru { .. } => &[Unary::Sigmoid, Unary::Tanh],
            Cell::Lstm { .. } => &[Unary::Sigmoid, Unary::Tanh, Unary::Tanh],
        }
    }
}

/// Which way a recurrent layer walks the sequence; bidirectional runs both and stacks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RnnDirection {
    Forward,
    Reverse,
    Bidirectional,
}

impl RnnDirection {
    pub fn count(self) -> usize {
        if self == RnnDirection::Bidirectional {
            2
        } else {
            1
        }
    }
}

/// One recurrent layer (ONNX RNN, GRU, LSTM). Inputs: X, W `[D, G*H, I]`, R `[D, G*H, H]`,
/// then optional B `[D, 2*G*H]` (W's biases then R's), sequence_lens `[batch]`, initial_h
/// `[D, batch, H]`, and for LSTM initial_c and peepholes P `[D, 3*H]`. Outputs: Y (every
/// step's hidden state; 0 past a sequence's length), Y_h (the last), and for LSTM Y_c.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Recurrent {
    pub cell: Cell,
    pub direction: RnnDirection,
    /// From the attribute; else R's last dim.
    pub hidden_size: Option<usize>,
    /// The cell's activations for each direction in turn (forward's, then reverse's).
    pub activations: Vec<Unary>,
    /// Gate pre-activations are clipped to [-clip, clip] when set.
    pub clip: Option<f32>,
    /// ONNX `layout` 1: X and Y batch-major (`[batch, seq, ..]`), states `[batch, D, H]`.
    pub batch_major: bool,
}

/// A generic ONNX attribute value, kept for opaque nodes so a host framework can run them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(Arc<Tensor>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    /// Graphs, sparse tensors, type protos: carried by name only.
    Unsupported(String),
}

impl AttrValue {
    /// Whether it is a subgraph (If's branches, Loop's and Scan's bodies), which may read any
    /// value of the enclosing graph.
    pub fn holds_graph(&self) -> bool {
        matches!(self, AttrValue::Unsupported(kind) if kind == "graph")
    }
}

/// An opaque node's attributes read by name: the one reader the importer's rewrites, shape
/// inference, the planner's rewrites and the reference executor share. A getter answers
/// `None` for an attribute that is absent or of another type; the `_or` getters give ONNX's
/// default for an absent one and still `None` for one of another type (a model this reading
/// does not understand is left alone, not guessed at).
#[derive(Clone, Copy, Debug)]
pub struct Attrs<'a>(pub &'a [(String, AttrValue)]);

impl<'a> Attrs<'a> {
    pub fn get(&self, name: &str) -> Option<&'a AttrValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Whether the attribute is present at all (some ops' meaning changes with that).
    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(AttrValue::Int(i)) => Some(*i),
            _ => None,
        }
    }

    pub fn ints(&self, name: &str) -> Option<&'a [i64]> {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => Some(v),
            _ => None,
        }
    }

    pub fn float(&self, name: &str) -> Option<f64> {
        match self.get(name) {
            Some(AttrValue::Float(f)) => Some(f64::from(*f)),
            _ => None,
        }
    }

    /// A string attribute (ONNX strings are bytes; read as UTF-8, lossily).
    pub fn string(&self, name: &str) -> Option<String> {
        match self.get(name) {
            Some(AttrValue::String(s)) => Some(String::from_utf8_lossy(s).into_owned()),
            _ => None,
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> Option<i64> {
        if self.has(name) {
            self.int(name)
        } else {
            Some(default)
        }
    }

    pub fn float_or(&self, name: &str, default: f32) -> Option<f64> {
        if self.has(name) {
            self.float(name)
        } else {
            Some(f64::from(default))
        }
    }

    /// Whether one of them is a subgraph (see [`AttrValue::holds_graph`]).
    pub fn hold_graph(&self) -> bool {
        self.0.iter().any(|(_, v)| v.holds_graph())
    }
}

/// One operator with its attributes. Inputs and outputs live on the [`super::Node`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    MatMul,
    Gemm {
        alpha: f32,
        beta: f32,
        trans_a: bool,
        trans_b: bool,
    },
    Conv {
        window: Window,
        group: usize,
    },
    /// Transposed convolution (the gradient of Conv w.r.t. its input), as decoders and
    /// segmentation heads use for upsampling.
    ConvTranspose {
        window: Window,
        group: usize,
        output_padding: Option<Vec<usize>>,
        output_shape: Option<Vec<usize>>,
    },
    /// `momentum` only matters in training mode (running statistics).
    BatchNormalization {
        epsilon: f32,
        momentum: f32,
        training_mode: bool,
    },
    Binary(Binary),
    Unary(Unary),
    Compare(Compare),
    Logic(Logic),
    /// Logical negation of a bool tensor.
    Not,
    /// `cond ? x : y` element-wise, the three inputs broadcast (attention masks, padding).
    Where,
    /// Input 0 broadcast to the shape of input 1 (numpy rules: the result may be larger).
    Expand,
    /// Clip with min/max as optional inputs 1 and 2.
    Clip,
    Cast {
        to: DType,
        saturate: bool,
    },
    Transpose {
        perm: Option<Vec<usize>>,
    },
    Reshape {
        allowzero: bool,
    },
    Flatten {
        axis: i64,
    },
    /// Axes come from input 1 (opset >= 13).
    Squeeze,
    Unsqueeze,
    Concat {
        axis: i64,
    },
    /// Splits `axis` into `outputs` parts: the sizes of input 1 when given, else equal parts
    /// (the last one smaller when they do not divide, as opset 18's `num_outputs`).
    Split {
        axis: i64,
        outputs: usize,
    },
    /// starts, ends, axes, steps from inputs 1..=4.
    Slice,
    Gather {
        axis: i64,
    },
    Shape {
        start: i64,
        end: Option<i64>,
    },
    Constant {
        value: Arc<Tensor>,
    },
    /// A tensor of the shape input 0 gives, filled with `value`'s one element (f32 0 when
    /// absent): initial states, masks, padding amounts.
    ConstantOfShape {
        value: Option<Arc<Tensor>>,
    },
    /// `start, start + delta, ...` below `limit` (inputs 0..=2, scalars of one type).
    Range,
    Identity,
    MaxPool {
        window: Window,
        ceil_mode: bool,
        storage_order: i64,
    },
    AveragePool {
        window: Window,
        ceil_mode: bool,
        count_include_pad: bool,
    },
    GlobalAveragePool,
    GlobalMaxPool,
    /// ONNX Pad (opset 11+): pads from input 1 (begins then ends, negative crops), the
    /// constant from input 2, axes from input 3 (opset 18+).
    Pad {
        mode: PadMode,
    },
    /// Moves blocks of `blocksize` x `blocksize` channels into space: [N, C*b*b, H, W] ->
    /// [N, C, H*b, W*b]. DCR: the block index is the slowest part of the channel; CRD: fastest.
    DepthToSpace {
        blocksize: usize,
        crd: bool,
    },
    Softmax {
        axis: i64,
    },
    /// log(Softmax(x)) along `axis`, computed as x - max - log(sum(exp(x - max))).
    LogSoftmax {
        axis: i64,
    },
    LayerNormalization {
        axis: i64,
        epsilon: f32,
        stash_type: DType,
    },
    /// ReduceMean, ReduceSum, ReduceMax, ReduceMin. `axes` from the attribute (before opset
    /// 18; ReduceSum before 13); from input 1 otherwise.
    Reduce {
        kind: ReduceKind,
        axes: Option<Vec<i64>>,
        keepdims: bool,
        noop_with_empty_axes: bool,
    },
    /// roi, scales, sizes from inputs 1..=3.
    Resize(ResizeAttrs),
    /// RNN, GRU, LSTM.
    Recurrent(Recurrent),
    /// A recurrent layer's recurrence once the planner has made its input projections a GEMM
    /// (never imported). Inputs: XW `[seq, batch, D*G*H]` (batch-major: `[batch, seq, ..]`;
    /// X·Wᵀ plus W's biases), Rᵀ `[D, H, G*H]` (R transposed, as its kernel reads it), then
    /// the layer's optional B (R's biases are read from it), sequence_lens, initial_h,
    /// initial_c, P. Outputs: the layer's.
    RecurrentScan(Recurrent),
    /// A planned kernel: an anchor and its fused epilogue (never imported; the planner makes it).
    Fused(Arc<FusedKernel>),
    /// Planned back-to-back kernels run as one: each layer's output is the next one's A
    /// operand and never leaves the threadblock. Inputs: A, then per layer its weight and
    /// optional bias, then the last layer's optional source.
    FusedChain(Arc<Vec<FusedKernel>>),
    /// A planned stitched kernel: a region of element-wise ops and row reductions run as one
    /// (inputs and outputs: the region's, in its order).
    Stitched(Arc<crate::partition::stitch::Region>),
    /// A planned fused attention core (inputs: the sources of Q, K, V, then the mask).
    Attention(Arc<crate::partition::attention::FusedAttention>),
    /// A spatial op of the model (a pool) run on channels-last data: the planner keeps the
    /// NHWC activations of a conv region through it instead of transposing around it. Its
    /// meaning: the inner op on the NCHW tensor, its first output permuted back to NHWC.
    ChannelsLast(Arc<Op>),
    /// Zero-pads or truncates the last axis to `to` elements (the planner's alignment padding
    /// of NHWC channels / GEMM K and N, and its removal).
    FitLastAxis {
        to: usize,
    },
    /// ONNX If: runs `then_branch` or `else_branch` as the boolean scalar of input 0 says.
    /// Inputs 1.. are the enclosing graph's values the branches read: ONNX leaves them
    /// implicit, import lists them so that ordering, liveness and partition boundaries see
    /// them. Each branch lists those it reads as its own inputs (see [`super::control`]).
    If {
        then_branch: Arc<super::Graph>,
        else_branch: Arc<super::Graph>,
    },
    /// ONNX Loop: runs `body` while the trip count (input 0, optional) and the condition
    /// (input 1, optional) allow. Inputs 2..2+`carried` are the loop-carried values' initial
    /// values, then the enclosing values the body reads. The body's inputs: the iteration
    /// number, the condition, the carried values, then those enclosing values; its outputs:
    /// the condition, the carried values, then the scan outputs, which the node stacks.
    Loop {
        body: Arc<super::Graph>,
        carried: usize,
    },
    /// ONNX Scan (opset 9 on): runs `body` once per slice of its scan inputs. Inputs: the
    /// `states` initial state values, the scan inputs, then the enclosing values the body
    /// reads. The body's inputs: the states, one slice of each scan input (its scan axis
    /// removed), then those enclosing values; its outputs: the states, then one slice of each
    /// scan output, which the node stacks along that output's axis.
    Scan(Arc<ScanAttrs>),
    /// Any other operator: imported as-is and left to the host framework.
    Opaque {
        domain: String,
        op_type: String,
        attrs: Vec<(String, AttrValue)>,
        why: std::borrow::Cow<'static, str>,
    },
}

/// Why a node of an older opset version whose meaning differs from today's (Softmax before 13
/// coerced its input to 2-D) stays opaque. The reference computes host-only ops by today's
/// definitions, so it leaves such nodes alone.
pub const OLDER_SEMANTICS: &str = "this opset's version of the operator has semantics Bolt does not implement";

/// Why a host-only op the reference executor computes stays opaque.
pub const HOST_COMPUTED: &str = "a host-only op: Bolt compiles no kernel for it (the reference executor computes it)";

impl Op {
    /// An opaque node's attributes (none for typed operators, whose fields hold them).
    pub fn attrs(&self) -> Attrs<'_> {
        match self {
            Op::Opaque { attrs, .. } => Attrs(attrs),
            _ => Attrs(&[]),
        }
    }

    /// The ONNX op_type this operator came from.
    pub fn op_type(&self) -> &str {
        match self {
            Op::MatMul => "MatMul",
            Op::Gemm { .. } => "Gemm",
            Op::Conv { .. } => "Conv",
            Op::ConvTranspose { .. } => "ConvTranspose",
            Op::BatchNormalization { .. } => "BatchNormalization",
            Op::Binary(b) => match b {
                Binary::Add => "Add",
                Binary::Sub => "Sub",
                Binary::Mul => "Mul",
                Binary::Div => "Div",
                Binary::Pow => "Pow",
                Binary::Max => "Max",
                Binary::PRelu => "PRelu",
                Binary::Min => "Min",
            },
            Op::Unary(u) => match u {
                Unary::Sqrt => "Sqrt",
                Unary::Erf => "Erf",
                Unary::Tanh => "Tanh",
                Unary::Relu => "Relu",
                Unary::Sigmoid => "Sigmoid",
                Unary::Softplus => "Softplus",
                Unary::HardSwish => "HardSwish",
                Unary::LeakyRelu { .. } => "LeakyRelu",
                Unary::HardSigmoid { .. } => "HardSigmoid",
                Unary::Gelu { .. } => "Gelu",
                Unary::Exp => "Exp",
                Unary::Neg => "Neg",
                Unary::Abs => "Abs",
                Unary::Reciprocal => "Reciprocal",
                Unary::Log => "Log",
                Unary::Ceil => "Ceil",
                Unary::Floor => "Floor",
                Unary::Round => "Round",
                Unary::Sin => "Sin",
                Unary::Cos => "Cos",
                Unary::Tan => "Tan",
                Unary::Asin => "Asin",
                Unary::Acos => "Acos",
                Unary::Atan => "Atan",
                Unary::Sinh => "Sinh",
                Unary::Cosh => "Cosh",
                Unary::Asinh => "Asinh",
                Unary::Acosh => "Acosh",
                Unary::Atanh => "Atanh",
                Unary::Sign => "Sign",
                Unary::Elu { .. } => "Elu",
                Unary::Selu { .. } => "Selu",
                Unary::Celu { .. } => "Celu",
                Unary::ThresholdedRelu { .. } => "ThresholdedRelu",
                Unary::Softsign => "Softsign",
                Unary::Mish => "Mish",
                Unary::Shrink { .. } => "Shrink",
            },
            Op::Compare(c) => match c {
                Compare::Equal => "Equal",
                Compare::Less => "Less",
                Compare::LessOrEqual => "LessOrEqual",
                Compare::Greater => "Greater",
                Compare::GreaterOrEqual => "GreaterOrEqual",
            },
            Op::Logic(l) => match l {
                Logic::And => "And",
                Logic::Or => "Or",
                Logic::Xor => "Xor",
            },
            Op::Not => "Not",
            Op::Where => "Where",
            Op::Expand => "Expand",
            Op::Clip => "Clip",
            Op::Cast { .. } => "Cast",
            Op::Transpose { .. } => "Transpose",
            Op::Reshape { .. } => "Reshape",
            Op::Flatten { .. } => "Flatten",
            Op::Squeeze => "Squeeze",
            Op::Unsqueeze => "Unsqueeze",
            Op::Concat { .. } => "Concat",
            Op::Split { .. } => "Split",
            Op::Slice => "Slice",
            Op::Gather { .. } => "Gather",
            Op::Shape { .. } => "Shape",
            Op::Constant { .. } => "Constant",
            Op::ConstantOfShape { .. } => "ConstantOfShape",
            Op::Range => "Range",
            Op::Identity => "Identity",
            Op::MaxPool { .. } => "MaxPool",
            Op::AveragePool { .. } => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::GlobalMaxPool => "GlobalMaxPool",
            Op::Pad { .. } => "Pad",
            Op::DepthToSpace { .. } => "DepthToSpace",
            Op::Softmax { .. } => "Softmax",
            Op::LogSoftmax { .. } => "LogSoftmax",
            Op::LayerNormalization { .. } => "LayerNormalization",
            Op::Reduce { kind: ReduceKind::Mean, .. } => "ReduceMean",
            Op::Reduce { kind: ReduceKind::Sum, .. } => "ReduceSum",
            Op::Reduce { kind: ReduceKind::Max, .. } => "ReduceMax",
            Op::Reduce { kind: ReduceKind::Min, .. } => "ReduceMin",
            Op::Reduce { kind: ReduceKind::L1, .. } => "ReduceL1",
            Op::Reduce { kind: ReduceKind::L2, .. } => "ReduceL2",
            Op::Reduce { kind: ReduceKind::SumSquare, .. } => "ReduceSumSquare",
            Op::Reduce { kind: ReduceKind::LogSum, .. } => "ReduceLogSum",
            Op::Reduce { kind: ReduceKind::LogSumExp, .. } => "ReduceLogSumExp",
            Op::Reduce { kind: ReduceKind::Prod, .. } => "ReduceProd",
            Op::Resize(_) => "Resize",
            Op::Recurrent(r) => match r.cell {
                Cell::Rnn => "RNN",
                Cell::Gru { .. } => "GRU",
                Cell::Lstm { .. } => "LSTM",
            },
            Op::RecurrentScan(_) => "BoltRecurrentScan",
            Op::Fused(_) => "BoltKernel",
            Op::FusedChain(_) => "BoltKernelChain",
            Op::Stitched(_) => "BoltStitched",
            Op::Attention(_) => "BoltAttention",
            Op::ChannelsLast(_) => "BoltChannelsLast",
            Op::FitLastAxis { .. } => "BoltFitLastAxis",
            Op::If { .. } => "If",
            Op::Loop { .. } => "Loop",
            Op::Scan(_) => "Scan",
            Op::Opaque { op_type, .. } => op_type,
        }
    }

    /// Whether the op only renames bytes under a new shape (Reshape, Flatten, Squeeze,
    /// Unsqueeze, Identity): on a device it is a copy at most, never a kernel.
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze | Op::Unsqueeze | Op::Identity)
    }

    pub fn is_opaque(&self) -> bool {
        matches!(self, Op::Opaque { .. })
    }
}
