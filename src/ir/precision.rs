//! Changing a graph's floating-point precision: what a user does to run a model in f16 (the
//! precision Bolt's tensor-core kernels compute in), and how tests obtain f16 graphs.

use super::{DType, Graph, Op, Tensor, TensorType};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Rewrites `g` so every float tensor (inputs, weights, constants, intermediates, outputs)
/// has type `to`. Casts to a float type are retargeted to `to`; types are re-inferred.
pub fn convert_floats(g: &Graph, to: DType) -> Result<Graph> {
    if !to.is_float() {
        return Err(Error::Model(format!("cannot convert float tensors to {to}")));
    }
    convert_graph(g, to, true)
}

/// [`convert_floats`] with the graph's inputs and outputs left in the model's types: a Cast to
/// `to` after each float input and a Cast back before each float output, what a host framework
/// needs (ONNX Runtime and TVM hand over and take back tensors of the model's declared types;
/// TensorRT's f16 mode keeps f32 I/O the same way). The casts are ordinary nodes: on a GPU
/// they stitch into element-wise kernels.
pub fn convert_floats_keeping_io(g: &Graph, to: DType) -> Result<Graph> {
    let mut out = convert_floats(g, to)?;
    let changed = |name: &String| g.types.get(name).is_some_and(|t| t.dtype.is_float() && t.dtype != to);
    let fresh = |base: &str, out: &Graph| {
        let mut name = format!("{base}.{to}");
        while out.types.contains_key(&name) || out.nodes.iter().any(|n| n.outputs.contains(&name)) {
            name.push('_');
        }
        name
    };
    let mut casts = Vec::new();
    for x in g.inputs.iter().filter(|x| changed(x) && !g.initializers.contains_key(*x)) {
        let stored = fresh(x, &out);
        for n in &mut out.nodes {
            for i in n.inputs.iter_mut().flatten().filter(|i| *i == x) {
                *i = stored.clone();
            }
        }
        out.types.insert(x.clone(), g.types[x].clone());
        casts.push(super::Node {
            name: format!("{x}.to_{to}"),
            op: Op::Cast { to, saturate: true },
            inputs: vec![Some(x.clone())],
            outputs: vec![stored],
        });
    }
    // Inputs first: their casts precede every reader.
    out.nodes.splice(0..0, casts);
    for y in g.outputs.iter().filter(|y| changed(y) && !g.inputs.contains(y)) {
        let Some(at) = out.nodes.iter().position(|n| n.outputs.contains(y)) else { continue };
        let stored = fresh(y, &out);
        for n in &mut out.nodes {
            for o in n.outputs.iter_mut().filter(|o| *o == y) {
                *o = stored.clone();
            }
            for i in n.inputs.iter_mut().flatten().filter(|i| *i == y) {
                *i = stored.clone();
            }
        }
        out.types.remove(y);
        let dtype = g.types[y].dtype;
        out.nodes.insert(
            at + 1,
            super::Node {
                name: format!("{y}.to_{dtype}"),
                op: Op::Cast { to: dtype, saturate: true },
                inputs: vec![Some(stored)],
                outputs: vec![y.clone()],
            },
        );
    }
    super::infer::infer_graph(&mut out, &HashMap::new())?;
    Ok(out)
}

/// [`convert_floats`]; `If` branches are converted alike and typed by their `If` (`infer`
/// false: a branch's inputs are typed by the enclosing graph).
fn convert_graph(g: &Graph, to: DType, infer: bool) -> Result<Graph> {
    // Finite constants beyond `to`'s range are clamped to its largest value, as onnxruntime's
    // float16 converter does: the -3.4e38 of an attention mask stays a mask (-65504) instead of
    // an -inf whose product with 0 is NaN. Statistics are folded first (they would not survive
    // clamping); what else overflows, `first_overflow` finds on the compile's inputs.
    let max = max_finite(to);
    let convert = |t: &Tensor| -> Tensor {
        if t.dtype().is_float() && t.dtype() != to {
            let v: Vec<f64> =
                t.to_f64_vec().into_iter().map(|x| if x.is_finite() { x.clamp(-max, max) } else { x }).collect();
            Tensor::from_f64_as(to, t.shape.clone(), &v).expect("float dtype")
        } else {
            t.clone()
        }
    };
    let mut out = g.clone();
    fold_batch_norm_statistics(&mut out, to);
    out.initializers = out.initializers.iter().map(|(k, t)| (k.clone(), Arc::new(convert(t)))).collect();
    let keep: std::collections::HashSet<&String> = out.inputs.iter().chain(out.initializers.keys()).collect();
    out.types = out
        .types
        .iter()
        .filter(|(k, _)| keep.contains(k))
        .map(|(k, t)| {
            let dtype = if t.dtype.is_float() { to } else { t.dtype };
            (k.clone(), TensorType { dtype, shape: t.shape.clone() })
        })
        .collect();
    for n in &mut out.nodes {
        match &mut n.op {
            Op::Constant { value } => *value = Arc::new(convert(value)),
            Op::Cast { to: target, .. } if target.is_float() => *target = to,
            Op::If { then_branch, else_branch } => {
                *then_branch = Arc::new(convert_graph(then_branch, to, false)?);
                *else_branch = Arc::new(convert_graph(else_branch, to, false)?);
            }
            Op::Loop { body, .. } => *body = Arc::new(convert_graph(body, to, false)?),
            Op::Scan(s) => {
                let body = convert_graph(&s.body, to, false)?;
                *s = Arc::new(crate::ir::ScanAttrs { body, ..(**s).clone() });
            }
            // LayerNormalization's statistics stay in its stash type (f32), as on GPUs.
            _ => {}
        }
    }
    if infer {
        super::infer::infer_graph(&mut out, &HashMap::new())?;
    }
    Ok(out)
}

/// The largest finite value of float type `t`.
pub fn max_finite(t: DType) -> f64 {
    match t {
        DType::F16 => f64::from(half::f16::MAX),
        DType::BF16 => f64::from(half::bf16::MAX),
        DType::F32 => f64::from(f32::MAX),
        _ => f64::MAX,
    }
}

/// Inference BatchNormalizations whose constant statistics `to` cannot hold (a running
/// variance of 1e8 is inf in f16, and the normalisation then zeroes the channel) get the same
/// affine map with statistics that fit, computed in f64: scale' = scale / sqrt(var + eps),
/// bias' = bias - mean * scale', mean 0, variance 1, epsilon 0. The new constants get names of
/// their own (the old ones may have other readers).
fn fold_batch_norm_statistics(g: &mut Graph, to: DType) {
    let max = max_finite(to);
    // Constants: weights, and Constant nodes' values (exporters write statistics either way).
    let mut constants: HashMap<String, Arc<Tensor>> = g.initializers.clone().into_iter().collect();
    for n in &g.nodes {
        if let (Op::Constant { value }, Some(o)) = (&n.op, n.outputs.first()) {
            constants.insert(o.clone(), value.clone());
        }
    }
    let mut added = Vec::new();
    for n in &mut g.nodes {
        let Op::BatchNormalization { epsilon, training_mode: false, .. } = n.op else { continue };
        let get = |i: usize| n.input(i).and_then(|x| constants.get(x)).map(|t| t.to_f64_vec());
        let (Some(scale), Some(bias), Some(mean), Some(var)) = (get(1), get(2), get(3), get(4)) else { continue };
        let c = scale.len();
        if [&bias, &mean, &var].iter().any(|v| v.len() != c) {
            continue;
        }
        let fits = |v: &[f64]| v.iter().all(|x| !x.is_finite() || x.abs() <= max);
        if fits(&scale) && fits(&bias) && fits(&mean) && fits(&var) {
            continue;
        }
        let eps = f64::from(epsilon);
        let a: Vec<f64> = (0..c).map(|i| scale[i] / (var[i] + eps).sqrt()).collect();
        let b: Vec<f64> = (0..c).map(|i| bias[i] - mean[i] * a[i]).collect();
        let shape = vec![c];
        let name = n.name.clone();
        for (slot, what, values) in
            [(1, "scale", a), (2, "bias", b), (3, "mean", vec![0.0; c]), (4, "var", vec![1.0; c])]
        {
            let t = format!("{name}.f64_folded_{what}");
            added.push((t.clone(), Tensor::from_f64_as(DType::F32, shape.clone(), &values).expect("f32")));
            n.inputs[slot] = Some(t);
        }
        if let Op::BatchNormalization { epsilon, .. } = &mut n.op {
            *epsilon = 0.0;
        }
    }
    for (name, t) in added {
        g.types
            .insert(name.clone(), TensorType { dtype: DType::F32, shape: Some(super::Shape::from_static(&t.shape)) });
        g.initializers.insert(name, Arc::new(t));
    }
}

/// A tensor that overflows the converted graph's float type: finite in the original, inf or
/// NaN once converted.
#[derive(Clone, Debug, PartialEq)]
pub struct Overflow {
    pub node: String,
    pub tensor: String,
    /// The largest magnitude the original computes there.
    pub original_max_abs: f64,
}

/// Runs `original` and `converted` (its [`convert_floats`]) on `inputs` (float inputs cast to
/// each graph's input types) on the reference and returns the first tensor, in node order,
/// that is finite in the original and not in the converted graph: where the narrower type's
/// range ends the model's answer (an f16 sum of squares past 65504, say).
pub fn first_overflow(
    original: &Graph,
    converted: &Graph,
    inputs: &HashMap<String, Tensor>,
) -> Result<Option<Overflow>> {
    let cast = |g: &Graph| -> Result<HashMap<String, Tensor>> {
        inputs
            .iter()
            .map(|(k, t)| {
                let want = g.types.get(k).map_or(t.dtype(), |ty| ty.dtype);
                let t = if t.dtype().is_float() && want.is_float() && want != t.dtype() {
                    Tensor::from_f64_as(want, t.shape.clone(), &t.to_f64_vec())
                        .ok_or_else(|| Error::tensor(k, format!("cannot hold {want} values")))?
                } else {
                    t.clone()
                };
                Ok((k.clone(), t))
            })
            .collect()
    };
    let stats = |t: &Tensor| -> (bool, f64) {
        let v = t.to_f64_vec();
        (v.iter().all(|x| x.is_finite()), v.iter().fold(0.0f64, |m, x| m.max(x.abs())))
    };
    let mut finite: HashMap<String, f64> = HashMap::new();
    crate::reference::run_with(original, &cast(original)?, |n, xs| {
        let ys = crate::reference::eval_node(n, xs)?;
        for (o, y) in n.outputs.iter().zip(&ys) {
            if let (true, (true, m)) = (y.dtype().is_float(), stats(y)) {
                finite.insert(o.clone(), m);
            }
        }
        Ok(ys)
    })?;
    let mut first = None;
    crate::reference::run_with(converted, &cast(converted)?, |n, xs| {
        let ys = crate::reference::eval_node(n, xs)?;
        if first.is_none() {
            for (o, y) in n.outputs.iter().zip(&ys) {
                if let Some(&m) = finite.get(o) {
                    if y.dtype().is_float() && !stats(y).0 {
                        first = Some(Overflow { node: n.name.clone(), tensor: o.clone(), original_max_abs: m });
                        break;
                    }
                }
            }
        }
        Ok(ys)
    })?;
    Ok(first)
}
