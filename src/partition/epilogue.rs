//! A partition's epilogue as the model writes it, and what the kernel computes from it.
//!
//! The partitioner records each absorbed op as a [`Step`] in model order; a step applies to the
//! value everything before it computed (a scalar scales what precedes it only, a residual added
//! after a scale is not scaled, a bias added before a scale is). [`KernelForm`] is derived
//! from the steps one at a time, with explicit coefficients, and is the only thing the planner
//! reads. A step whose result has no kernel form (a scalar after the activation, a second
//! source tensor, ...) is refused when it is pushed, so the partition stops growing there and
//! the op stays with the host: the epilogue is right by construction or not fused at all.

use super::activation::Activation;
use crate::ir::{DType, Graph, Node, Op, ResidualAt};
use crate::plan::edit::constant;
use std::fmt;

/// One model op absorbed into the epilogue.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum Step {
    /// `x * factor`: Gemm's alpha, a scalar Mul, a Div by a scalar (factor 1/s).
    Scale(f32),
    /// `x + scale * tensor`, `tensor` constant with one value per output column / channel (or
    /// one value in all): a bias, Gemm's constant C with its beta.
    Bias { tensor: String, scale: f32 },
    /// `x + scale * tensor`, `tensor` of the output's shape: a residual, Gemm's C with its beta.
    Source { tensor: String, scale: f32 },
    /// `act(x)`.
    Activation(Activation),
}

/// A bias term of the kernel form: `scale * tensor`, summed per column / channel at plan time.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct BiasTerm {
    pub tensor: String,
    pub scale: f32,
}

/// The source tensor term of the kernel form.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SourceTerm {
    pub tensor: String,
    pub scale: f32,
    pub at: ResidualAt,
}

/// What the kernel computes: `act(alpha*acc + Σ bias + [s*src]) [+ src]`, the normal form
/// Bolt's kernel templates lower (codegen's `epilogue::NormalForm`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KernelForm {
    pub alpha: f32,
    pub bias: Vec<BiasTerm>,
    pub source: Option<SourceTerm>,
    pub activation: Option<Activation>,
}

impl Default for KernelForm {
    fn default() -> Self {
        KernelForm { alpha: 1.0, bias: Vec::new(), source: None, activation: None }
    }
}

impl KernelForm {
    /// The form after one more step, or why the kernel cannot compute it.
    pub fn then(&self, step: &Step) -> Result<KernelForm, String> {
        let mut f = self.clone();
        let after_act = f.activation.is_some();
        match step {
            Step::Scale(s) if after_act => {
                return Err(format!("a scalar ({s}) after the activation has no epilogue form"))
            }
            Step::Scale(s) => {
                // Everything computed so far is linear in the accumulator, the biases and the
                // source: scale each coefficient.
                f.alpha *= s;
                f.bias.iter_mut().for_each(|b| b.scale *= s);
                if let Some(src) = &mut f.source {
                    src.scale *= s;
                }
            }
            Step::Bias { .. } if after_act => return Err("a bias after the activation has no epilogue form".into()),
            Step::Bias { tensor, scale } => f.bias.push(BiasTerm { tensor: tensor.clone(), scale: *scale }),
            Step::Source { .. } if f.source.is_some() => {
                return Err("a second source tensor: the kernel reads one (C)".into());
            }
            Step::Source { scale, .. } if after_act && *scale != 1.0 => {
                return Err(format!("a source scaled by {scale} after the activation has no epilogue form"));
            }
            Step::Source { tensor, scale } => {
                let at = if after_act { ResidualAt::AfterActivation } else { ResidualAt::BeforeActivation };
                f.source = Some(SourceTerm { tensor: tensor.clone(), scale: *scale, at });
            }
            Step::Activation(_) if after_act => return Err("a second activation".into()),
            Step::Activation(a) => f.activation = Some(*a),
        }
        Ok(f)
    }
}

/// A per-output-channel affine map `y = s * x + t` of the anchor's output, folded into its
/// weights (scaled by `s` per output channel) and bias at plan time. Folds come right after
/// the anchor's own alpha and bias, before every step of the chain, in model order.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum ChannelFold {
    /// An inference BatchNormalization (node name): `s = gamma / sqrt(var + eps)`,
    /// `t = beta - s * mean`.
    BatchNorm(String),
    /// A Mul by the constant per-channel vector `tensor`, or a Div by it (`s = 1 / tensor`);
    /// `t = 0`. Exporters write BatchNormalizations frozen into constants this way.
    Scale { node: String, tensor: String, divide: bool },
}

/// What the partition's epilogue computes: the absorbed steps in model order, their kernel
/// form, the per-channel maps folded into the weights and the output type.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FusedEpilogue {
    steps: Vec<Step>,
    form: KernelForm,
    /// Folded into the weights and bias at plan time (see [`ChannelFold`]).
    pub folds: Vec<ChannelFold>,
    /// Output element type (a fused Cast's target, else the anchor's).
    pub output_dtype: DType,
}

impl FusedEpilogue {
    pub fn new(output_dtype: DType) -> FusedEpilogue {
        FusedEpilogue { steps: Vec::new(), form: KernelForm::default(), folds: Vec::new(), output_dtype }
    }

    /// Appends `step` when the kernel can compute the result; otherwise leaves the epilogue
    /// as it was and says why.
    pub fn push(&mut self, step: Step) -> Result<(), String> {
        self.form = self.form.then(&step)?;
        self.steps.push(step);
        Ok(())
    }

    /// Whether `step` could be appended.
    pub fn accepts(&self, step: &Step) -> bool {
        self.form.then(step).is_ok()
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    pub fn form(&self) -> &KernelForm {
        &self.form
    }
}

fn coeff(s: f32, term: &str) -> String {
    if s == 1.0 {
        term.to_string()
    } else {
        format!("{s}*{term}")
    }
}

/// The expression the kernel computes, e.g. `relu(0.125*acc + bias) + residual`.
impl fmt::Display for KernelForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lin = vec![coeff(self.alpha, "acc")];
        lin.extend(self.bias.iter().map(|b| coeff(b.scale, "bias")));
        let src = |s: &SourceTerm| coeff(s.scale, if s.at == ResidualAt::BeforeActivation { "C" } else { "residual" });
        if let Some(s) = self.source.as_ref().filter(|s| s.at == ResidualAt::BeforeActivation) {
            lin.push(src(s));
        }
        let lin = lin.join(" + ");
        let mut out = match self.activation {
            Some(a) => format!("{a}({lin})"),
            None => lin,
        };
        if let Some(s) = self.source.as_ref().filter(|s| s.at == ResidualAt::AfterActivation) {
            out = format!("{out} + {}", src(s));
        }
        f.write_str(&out)
    }
}

/// `batchnorm(conv) ...` prefix plus the kernel expression, e.g.
/// `relu(0.1*acc + bias + C) -> f16`.
impl fmt::Display for FusedEpilogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.folds.is_empty() {
            let names: Vec<&str> = self
                .folds
                .iter()
                .map(|k| match k {
                    ChannelFold::BatchNorm(_) => "batchnorm",
                    ChannelFold::Scale { divide: false, .. } => "channel scale",
                    ChannelFold::Scale { divide: true, .. } => "channel divisor",
                })
                .collect();
            write!(f, "[{} folded] ", names.join(", "))?;
        }
        write!(f, "{}", self.form)
    }
}

/// What a kernel adds and multiplies per output channel.
pub struct ChannelTerms {
    /// The one bias vector: every constant bias term times its coefficient in the kernel form,
    /// the folds' shifts included; `None` when the kernel adds none.
    pub bias: Option<Vec<f64>>,
    /// The folds' per-channel scale of the weights; `None` without folds.
    pub scale: Option<Vec<f64>>,
}

/// The bias and weight scale of the kernel of `anchor` (of `kind`) with epilogue `e`, over
/// `channels` output channels (the partitioner asks too, before it lets the kernel write a
/// narrower type: see `partition::grow`).
pub fn channel_terms(
    g: &Graph,
    anchor: &Node,
    kind: &super::AnchorKind,
    e: &FusedEpilogue,
    channels: usize,
) -> std::result::Result<ChannelTerms, String> {
    let form = e.form();
    let mut bias = vec![0.0f64; channels];
    let mut has_bias = !form.bias.is_empty();
    // The anchor's own bias (a conv's B, a Gemm's C) is the first bias term and comes before
    // the folds: it is scaled by them.
    let own_bias = match (kind, &anchor.op) {
        (super::AnchorKind::Conv2d { .. }, _) => anchor.input(2).is_some(),
        (_, Op::Gemm { .. }) => anchor.input(2).is_some() && !form.bias.is_empty(),
        _ => false,
    };
    // The folds compose to one map y = s * x + t per channel: the weights are scaled per
    // output channel by s and t joins the bias.
    let mut fold_scale: Option<Vec<f64>> = None;
    if !e.folds.is_empty() {
        let (mut s, mut t) = (vec![1.0f64; channels], vec![0.0f64; channels]);
        for fold in &e.folds {
            let (fs, ft) = channel_map(g, fold, channels)?;
            for c in 0..channels {
                s[c] *= fs[c];
                t[c] = t[c] * fs[c] + ft[c];
            }
        }
        for c in 0..channels {
            bias[c] += form.alpha as f64 * t[c];
        }
        fold_scale = Some(s);
        has_bias |= t.iter().any(|&x| x != 0.0);
    }
    for (k, term) in form.bias.iter().enumerate() {
        let t = constant(g, &term.tensor).ok_or_else(|| format!("bias '{}' is not constant", term.tensor))?;
        let v = t.to_f64_vec();
        if v.len() != 1 && v.len() != channels {
            return Err(format!("bias '{}' has {} values for {channels} channels", term.tensor, v.len()));
        }
        for (c, b) in bias.iter_mut().enumerate() {
            let x = if v.len() == 1 { v[0] } else { v[c] };
            let through_folds = match &fold_scale {
                Some(s) if own_bias && k == 0 => s[c],
                _ => 1.0,
            };
            *b += term.scale as f64 * through_folds * x;
        }
    }
    Ok(ChannelTerms { bias: has_bias.then_some(bias), scale: fold_scale })
}

/// The per-channel map `(s, t)` of a fold: `y = s * x + t`.
fn channel_map(g: &Graph, fold: &ChannelFold, channels: usize) -> std::result::Result<(Vec<f64>, Vec<f64>), String> {
    let values = |name: &str, what: &str| -> std::result::Result<Vec<f64>, String> {
        let v = constant(g, name).ok_or_else(|| format!("{what} '{name}' is not constant"))?.to_f64_vec();
        match v.len() {
            1 => Ok(vec![v[0]; channels]),
            n if n == channels => Ok(v),
            n => Err(format!("{what} '{name}' has {n} values for {channels} channels")),
        }
    };
    match fold {
        ChannelFold::BatchNorm(name) => {
            let bn = g.nodes.iter().find(|n| &n.name == name).ok_or_else(|| format!("no node '{name}'"))?;
            let Op::BatchNormalization { epsilon, .. } = bn.op else {
                return Err(format!("'{name}' is not a BatchNormalization"));
            };
            let stat = |i: usize| values(bn.input(i).unwrap_or_default(), "BatchNormalization input");
            let (gamma, beta, mean, var) = (stat(1)?, stat(2)?, stat(3)?, stat(4)?);
            let s: Vec<f64> = gamma.iter().zip(&var).map(|(g, v)| g / (v + epsilon as f64).sqrt()).collect();
            let t = (0..channels).map(|c| beta[c] - s[c] * mean[c]).collect();
            Ok((s, t))
        }
        ChannelFold::Scale { tensor, divide, .. } => {
            let v = values(tensor, "channel scale")?;
            let s = if *divide { v.iter().map(|x| 1.0 / x).collect() } else { v };
            Ok((s, vec![0.0; channels]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(steps: &[Step]) -> Result<KernelForm, String> {
        let mut e = FusedEpilogue::new(DType::F32);
        for s in steps {
            e.push(s.clone())?;
        }
        Ok(e.form().clone())
    }
    fn src(scale: f32) -> Step {
        Step::Source { tensor: "r".into(), scale }
    }
    fn bias(scale: f32) -> Step {
        Step::Bias { tensor: "b".into(), scale }
    }

    #[test]
    fn a_scalar_scales_what_precedes_it_only() {
        // (acc / 8) + r: the residual is not scaled.
        let f = form(&[Step::Scale(0.125), src(1.0)]).unwrap();
        assert_eq!((f.alpha, f.source.as_ref().unwrap().scale), (0.125, 1.0));
        assert_eq!(f.to_string(), "0.125*acc + C");
        // (acc + b + r) * 0.5: everything is.
        let f = form(&[bias(1.0), src(1.0), Step::Scale(0.5)]).unwrap();
        assert_eq!((f.alpha, f.bias[0].scale, f.source.as_ref().unwrap().scale), (0.5, 0.5, 0.5));
        // (acc + b) * 0.5 + b2
        let f = form(&[bias(1.0), Step::Scale(0.5), bias(1.0)]).unwrap();
        assert_eq!(f.bias.iter().map(|b| b.scale).collect::<Vec<_>>(), vec![0.5, 1.0]);
    }

    #[test]
    fn steps_without_a_kernel_form_are_refused() {
        let relu = Step::Activation(Activation::Relu);
        assert!(form(&[relu.clone(), Step::Scale(2.0)]).is_err());
        assert!(form(&[relu.clone(), bias(1.0)]).is_err());
        assert!(form(&[relu.clone(), src(0.5)]).is_err());
        assert!(form(&[src(1.0), src(1.0)]).is_err());
        assert!(form(&[relu.clone(), relu.clone()]).is_err());
        let f = form(&[Step::Scale(0.125), bias(1.0), relu, src(1.0)]).unwrap();
        assert_eq!(f.to_string(), "relu(0.125*acc + bias) + residual");
        // A refused step leaves the epilogue unchanged.
        let mut e = FusedEpilogue::new(DType::F32);
        e.push(Step::Activation(Activation::Relu)).unwrap();
        assert!(e.push(Step::Scale(3.0)).is_err());
        assert_eq!(e.steps().len(), 1);
    }
}
