//! The epilogue as a small typed tree: what each output element is computed from once the
//! mainloop's accumulator is ready. Templates lower it to CUTLASS 2.x epilogue functors on
//! sm80 and to an epilogue visitor tree (EVT) on sm90; nothing matches strings.

use ordered_float::OrderedFloat;
use serde::{Deserialize, Serialize};

/// Element-wise activation functions the epilogue can apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Activation {
    Identity,
    Relu,
    /// x * Phi(x), with the error function.
    GeluErf,
    /// The tanh approximation of GELU.
    GeluTanh,
    HardSwish,
    /// max(0, min(1, alpha*x + beta)); ONNX's defaults are alpha 0.2, beta 0.5.
    HardSigmoid {
        #[serde(with = "crate::json_float::ordered_f32")]
        alpha: OrderedFloat<f32>,
        #[serde(with = "crate::json_float::ordered_f32")]
        beta: OrderedFloat<f32>,
    },
    Softplus,
    Sigmoid,
    /// x * sigmoid(x).
    Silu,
    Tanh,
    LeakyRelu {
        #[serde(with = "crate::json_float::ordered_f32")]
        alpha: OrderedFloat<f32>,
    },
    /// A one-sided clip has an infinite bound.
    Clip {
        #[serde(with = "crate::json_float::ordered_f32")]
        min: OrderedFloat<f32>,
        #[serde(with = "crate::json_float::ordered_f32")]
        max: OrderedFloat<f32>,
    },
}

impl Activation {
    /// Every activation kind with representative parameters (for tests and candidate sweeps).
    pub fn all() -> Vec<Activation> {
        vec![
            Activation::Identity,
            Activation::Relu,
            Activation::GeluErf,
            Activation::GeluTanh,
            Activation::HardSwish,
            Activation::HardSigmoid { alpha: 0.2.into(), beta: 0.5.into() },
            Activation::Softplus,
            Activation::Sigmoid,
            Activation::Silu,
            Activation::Tanh,
            Activation::LeakyRelu { alpha: 0.01.into() },
            Activation::Clip { min: 0.0.into(), max: 6.0.into() },
        ]
    }

    /// Short stable name for symbols and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Activation::Identity => "identity",
            Activation::Relu => "relu",
            Activation::GeluErf => "gelu_erf",
            Activation::GeluTanh => "gelu_tanh",
            Activation::HardSwish => "hardswish",
            Activation::HardSigmoid { .. } => "hardsigmoid",
            Activation::Softplus => "softplus",
            Activation::Sigmoid => "sigmoid",
            Activation::Silu => "silu",
            Activation::Tanh => "tanh",
            Activation::LeakyRelu { .. } => "leaky_relu",
            Activation::Clip { .. } => "clip",
        }
    }

    /// The function itself, in f64: the reference the rendered C++ is checked against.
    pub fn apply(&self, x: f64) -> f64 {
        match *self {
            Activation::Identity => x,
            Activation::Relu => x.max(0.0),
            Activation::GeluErf => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
            Activation::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            Activation::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            Activation::HardSigmoid { alpha, beta } => (alpha.0 as f64 * x + beta.0 as f64).clamp(0.0, 1.0),
            Activation::Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Activation::Silu => x / (1.0 + (-x).exp()),
            Activation::Tanh => x.tanh(),
            Activation::LeakyRelu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha.0 as f64 * x
                }
            }
            Activation::Clip { min, max } => x.max(min.0 as f64).min(max.0 as f64),
        }
    }
}

/// std has no erf; use the libm routine the reference executor uses.
fn erf(x: f64) -> f64 {
    libm::erf(x)
}

/// Run-time scalars of the epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scalar {
    Alpha,
    Beta,
}

/// Binary operations inside the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    Add,
    Mul,
}

/// One node of the epilogue tree.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Expr {
    /// The mainloop accumulator.
    Acc,
    /// A run-time scalar argument.
    Scalar(Scalar),
    /// The source tensor C, of the output's shape: GEMM's C operand or a residual input.
    Source,
    /// A vector of length N (GEMM columns / conv output channels) broadcast over rows.
    ColumnBias,
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    Activation(Activation, Box<Expr>),
}

impl Expr {
    pub fn plus(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinaryOp::Add, Box::new(a), Box::new(b))
    }
    pub fn times(a: Expr, b: Expr) -> Expr {
        Expr::Binary(BinaryOp::Mul, Box::new(a), Box::new(b))
    }
    pub fn act(a: Activation, x: Expr) -> Expr {
        if a == Activation::Identity {
            x
        } else {
            Expr::Activation(a, Box::new(x))
        }
    }

    /// Evaluates the tree for one element (the reference semantics of the epilogue).
    pub fn eval(&self, env: &EvalEnv) -> f64 {
        match self {
            Expr::Acc => env.acc,
            Expr::Scalar(Scalar::Alpha) => env.alpha,
            Expr::Scalar(Scalar::Beta) => env.beta,
            Expr::Source => env.source,
            Expr::ColumnBias => env.bias,
            Expr::Binary(BinaryOp::Add, a, b) => a.eval(env) + b.eval(env),
            Expr::Binary(BinaryOp::Mul, a, b) => a.eval(env) * b.eval(env),
            Expr::Activation(f, x) => f.apply(x.eval(env)),
        }
    }

    fn any(&self, p: &dyn Fn(&Expr) -> bool) -> bool {
        p(self)
            || match self {
                Expr::Binary(_, a, b) => a.any(p) || b.any(p),
                Expr::Activation(_, x) => x.any(p),
                _ => false,
            }
    }

    pub fn reads_source(&self) -> bool {
        self.any(&|e| matches!(e, Expr::Source))
    }
    pub fn reads_bias(&self) -> bool {
        self.any(&|e| matches!(e, Expr::ColumnBias))
    }
}

/// Values of the leaves for [`Expr::eval`].
#[derive(Clone, Copy, Debug, Default)]
pub struct EvalEnv {
    pub acc: f64,
    pub alpha: f64,
    pub beta: f64,
    pub source: f64,
    pub bias: f64,
}

/// Where a residual (the source tensor) is added relative to the activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResidualAt {
    /// act(alpha*acc + bias + residual): ResNet's add-then-ReLU.
    BeforeActivation,
    /// act(alpha*acc + bias) + residual: transformer blocks.
    AfterActivation,
}

/// The epilogue trees Bolt's partitioner produces, in one normal form:
/// `act(alpha*acc [+ beta*C] [+ bias] [+ residual]) [+ residual]`. Templates lower this form;
/// [`Epilogue::normal_form`] recovers it from any equivalent tree built by [`Epilogue::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NormalForm {
    /// beta * C added before the activation (GEMM's C operand).
    pub beta_source: bool,
    pub bias: bool,
    pub activation: Activation,
    pub residual: Option<ResidualAt>,
}

impl NormalForm {
    /// With no activation, adding the residual before or after it is the same tree; the
    /// canonical form says "before".
    pub fn canonical(self) -> NormalForm {
        match (self.activation, self.residual) {
            (Activation::Identity, Some(ResidualAt::AfterActivation)) => {
                NormalForm { residual: Some(ResidualAt::BeforeActivation), ..self }
            }
            _ => self,
        }
    }
}

/// A complete epilogue tree. The conversion to the output element type is the spec's
/// `types.output`; compute happens in f32.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Epilogue {
    pub expr: Expr,
}

impl Epilogue {
    /// Builds the tree of a normal form. `beta_source` and a residual both read the source
    /// tensor C, so they cannot both be set.
    pub fn new(form: NormalForm) -> Result<Epilogue, String> {
        let form = form.canonical();
        if form.beta_source && form.residual.is_some() {
            return Err("beta*C and a residual both read the source tensor C; use one".into());
        }
        let mut lin = Expr::times(Expr::Scalar(Scalar::Alpha), Expr::Acc);
        if form.beta_source {
            lin = Expr::plus(lin, Expr::times(Expr::Scalar(Scalar::Beta), Expr::Source));
        }
        if form.bias {
            lin = Expr::plus(lin, Expr::ColumnBias);
        }
        if form.residual == Some(ResidualAt::BeforeActivation) {
            lin = Expr::plus(lin, Expr::Source);
        }
        let mut out = Expr::act(form.activation, lin);
        if form.residual == Some(ResidualAt::AfterActivation) {
            out = Expr::plus(out, Expr::Source);
        }
        Ok(Epilogue { expr: out })
    }

    /// alpha * acc: the plain epilogue the profiler times mainloops with.
    pub fn plain() -> Epilogue {
        Epilogue::new(NormalForm { beta_source: false, bias: false, activation: Activation::Identity, residual: None })
            .expect("valid")
    }

    /// Recovers the normal form, or `None` for trees outside it.
    pub fn normal_form(&self) -> Option<NormalForm> {
        let (inner, residual_after) = match &self.expr {
            Expr::Binary(BinaryOp::Add, a, b) if **b == Expr::Source && !a.reads_source() => (a.as_ref(), true),
            e => (e, false),
        };
        let (activation, lin) = match inner {
            Expr::Activation(f, x) => (*f, x.as_ref()),
            e => (Activation::Identity, e),
        };
        // Peel the additive terms of the linear part from the right.
        let mut terms = Vec::new();
        let mut cur = lin;
        while let Expr::Binary(BinaryOp::Add, a, b) = cur {
            terms.push(b.as_ref());
            cur = a.as_ref();
        }
        if *cur != Expr::times(Expr::Scalar(Scalar::Alpha), Expr::Acc) {
            return None;
        }
        let beta_c = Expr::times(Expr::Scalar(Scalar::Beta), Expr::Source);
        let (mut beta_source, mut bias, mut residual_before) = (false, false, false);
        // Terms were collected outermost-first; the builder adds beta*C, then bias, then the residual.
        for t in terms.into_iter().rev() {
            match t {
                t if *t == beta_c && !beta_source && !bias && !residual_before => beta_source = true,
                Expr::ColumnBias if !bias && !residual_before => bias = true,
                Expr::Source if !residual_before => residual_before = true,
                _ => return None,
            }
        }
        let residual = match (residual_before, residual_after) {
            (false, false) => None,
            (true, false) => Some(ResidualAt::BeforeActivation),
            (false, true) => Some(ResidualAt::AfterActivation),
            (true, true) => return None,
        };
        let form = NormalForm { beta_source, bias, activation, residual }.canonical();
        Epilogue::new(form).ok().filter(|e| e == self).map(|_| form)
    }

    /// Short stable name, e.g. `bias_gelu_erf_res-after`.
    pub fn name(&self) -> String {
        match self.normal_form() {
            None => "custom".into(),
            Some(f) => {
                let mut parts = Vec::new();
                if f.beta_source {
                    parts.push("betac".to_string());
                }
                if f.bias {
                    parts.push("bias".into());
                }
                if f.residual == Some(ResidualAt::BeforeActivation) {
                    parts.push("res".into());
                }
                parts.push(f.activation.name().into());
                if f.residual == Some(ResidualAt::AfterActivation) {
                    parts.push("res".into());
                }
                parts.join("_")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_forms_round_trip_through_the_tree() {
        for activation in Activation::all() {
            for (beta_source, bias, residual) in [
                (false, false, None),
                (true, false, None),
                (false, true, None),
                (true, true, None),
                (false, true, Some(ResidualAt::BeforeActivation)),
                (false, true, Some(ResidualAt::AfterActivation)),
                (false, false, Some(ResidualAt::AfterActivation)),
            ] {
                let form = NormalForm { beta_source, bias, activation, residual };
                let e = Epilogue::new(form).unwrap();
                assert_eq!(e.normal_form(), Some(form.canonical()), "{e:?}");
            }
        }
    }

    #[test]
    fn trees_outside_the_normal_form_are_recognised_as_such() {
        let odd = Epilogue { expr: Expr::act(Activation::Relu, Expr::times(Expr::Acc, Expr::ColumnBias)) };
        assert_eq!(odd.normal_form(), None);
        assert!(Epilogue::new(NormalForm {
            beta_source: true,
            bias: false,
            activation: Activation::Relu,
            residual: Some(ResidualAt::AfterActivation)
        })
        .is_err());
    }

    #[test]
    fn evaluation_follows_the_tree() {
        let e = Epilogue::new(NormalForm {
            beta_source: false,
            bias: true,
            activation: Activation::Relu,
            residual: Some(ResidualAt::AfterActivation),
        })
        .unwrap();
        let env = EvalEnv { acc: -3.0, alpha: 1.0, beta: 0.0, source: 0.5, bias: 1.0 };
        assert_eq!(e.expr.eval(&env), 0.5); // relu(-3 + 1) + 0.5
        assert_eq!(e.name(), "bias_relu_res");
    }
}
