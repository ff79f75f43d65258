//! Recognising activations in any exporter's spelling. Exporters write GELU as
//! `x * 0.5 * (1 + Erf(x / sqrt(2)))` (in several operand orders), SiLU as `x * Sigmoid(x)`,
//! HardSwish as `x * HardSigmoid(x)` or `x * Clip(x + 3, 0, 6) / 6`. Rather than one pattern
//! per spelling, Bolt finds the element-wise region hanging off a tensor, evaluates it with the
//! reference executor on probe points and compares with each known activation.

pub use crate::ir::Activation;
use crate::ir::{Binary, Graph, Node, Op, Tensor};
use std::collections::{HashMap, HashSet};

/// Probe points: dense around 0 where activations differ, plus both tails.
fn probes() -> Vec<f64> {
    let mut v: Vec<f64> = (-64..=64).map(|i| i as f64 / 8.0).collect();
    v.extend([-30.0, -12.5, 12.5, 30.0, 0.03125, -0.03125]);
    v
}

/// Candidates for a probed function; parameterised ones take their parameters from the probes.
fn candidates(f: &dyn Fn(f64) -> f64) -> Vec<Activation> {
    let mut c = vec![
        Activation::Relu,
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::HardSwish,
        Activation::Softplus,
        Activation::Sigmoid,
        Activation::Silu,
        Activation::Tanh,
        Activation::HardSigmoid { alpha: 0.2, beta: 0.5 },
        Activation::HardSigmoid { alpha: 1.0 / 6.0, beta: 0.5 },
    ];
    let leak = f(-1.0) / -1.0;
    if leak.is_finite() && leak != 0.0 {
        c.push(Activation::LeakyRelu { alpha: leak as f32 });
    }
    let (lo, hi) = (f(-30.0), f(30.0));
    if lo.is_finite() && hi.is_finite() && lo < hi {
        c.push(Activation::Clip { min: lo as f32, max: hi as f32 });
    }
    c
}

/// `rel`: how far a spelling's constants may be from the activation's own, relative: 1e-6 for
/// f32 (and wider) regions, half a unit in the last place of f16 or bf16 for regions of those
/// types, whose constants were rounded to them (f16's sqrt(2) is 1.4140625, 1e-4 off).
fn matches(f: &[f64], xs: &[f64], a: &Activation, rel: f64) -> bool {
    xs.iter().zip(f).all(|(&x, &y)| {
        let want = a.apply(x);
        // At 0 every spelling of an activation computes exactly (0 * .., erf(0), exp(0)): a
        // region off there by any amount adds a constant (a log's guard, `x + 2^-24`), which
        // the tolerance would otherwise take for a leaky ReLU of slope 1. Elsewhere spellings
        // differ by their f32 constants (1/sqrt(2), sqrt(2/pi), 1/6: ~1e-8 relative); 1e-6
        // keeps a scale an exporter meant (`x * 1.00001`) from passing for a leaky ReLU (in
        // f16 such a scale rounds to 1 and is no scale).
        let tol = if x == 0.0 { 1e-12 } else { rel * (1.0 + want.abs()) };
        (y - want).abs() <= tol
    })
}

/// Ops allowed inside an activation region: element-wise, one tensor operand at most besides
/// scalar constants.
fn elementwise(op: &Op) -> bool {
    matches!(op, Op::Binary(_) | Op::Unary(_) | Op::Clip)
}

/// A recognised activation region: the nodes it covers and the tensor it produces.
#[derive(Debug)]
pub struct ActivationMatch {
    pub activation: Activation,
    pub nodes: Vec<usize>,
    pub output: String,
}

/// Finds the largest element-wise region computed from `x` alone (plus scalar constants) that
/// equals a known activation, and whose intermediates nobody else reads.
pub fn match_activation(
    g: &Graph,
    x: &str,
    consumers: &HashMap<&str, Vec<usize>>,
    consts: &HashMap<String, std::sync::Arc<Tensor>>,
) -> Option<ActivationMatch> {
    let scalar = |name: &str| consts.get(name).is_some_and(|t| t.len() == 1);
    // Grow the region: nodes whose every input is x, a region output or a scalar constant.
    let mut region: Vec<usize> = Vec::new();
    let mut produced: HashSet<String> = HashSet::from([x.to_string()]);
    let mut frontier = vec![x.to_string()];
    while let Some(t) = frontier.pop() {
        for &ni in consumers.get(t.as_str()).map(Vec::as_slice).unwrap_or(&[]) {
            let n = &g.nodes[ni];
            if region.contains(&ni) || !elementwise(&n.op) || region.len() >= 16 {
                continue;
            }
            let ok = n.inputs.iter().flatten().all(|i| produced.contains(i) || scalar(i));
            if ok && n.outputs.len() == 1 {
                region.push(ni);
                produced.insert(n.outputs[0].clone());
                frontier.push(n.outputs[0].clone());
            }
        }
    }
    region.sort_unstable();
    let rel = match g.types.get(x).map(|t| t.dtype) {
        Some(crate::ir::DType::F16) => f64::from(half::f16::EPSILON.to_f32()) / 2.0,
        Some(crate::ir::DType::BF16) => f64::from(half::bf16::EPSILON.to_f32()) / 2.0,
        _ => 1e-6,
    };
    // Try each region node as the exit, latest first (the largest region wins).
    for &exit in region.iter().rev() {
        let sub = ancestors_within(g, exit, &region, x);
        if !closed(g, &sub, exit, x, consumers) {
            continue;
        }
        let f = match probe(g, &sub, x, consts) {
            Some(f) => f,
            None => continue,
        };
        let xs = probes();
        let lookup = |v: f64| xs.iter().position(|&p| p == v).map(|i| f[i]).unwrap_or(f64::NAN);
        if let Some(a) = candidates(&lookup).into_iter().find(|a| matches(&f, &xs, a, rel)) {
            return Some(ActivationMatch { activation: a, nodes: sub, output: g.nodes[exit].outputs[0].clone() });
        }
    }
    None
}

/// Region nodes that `exit` depends on (including itself), in graph order.
fn ancestors_within(g: &Graph, exit: usize, region: &[usize], x: &str) -> Vec<usize> {
    let mut keep = vec![exit];
    let mut stack = vec![exit];
    while let Some(n) = stack.pop() {
        for i in g.nodes[n].inputs.iter().flatten() {
            if i == x {
                continue;
            }
            if let Some(&p) = region.iter().find(|&&r| g.nodes[r].outputs[0] == *i) {
                if !keep.contains(&p) {
                    keep.push(p);
                    stack.push(p);
                }
            }
        }
    }
    keep.sort_unstable();
    keep
}

/// The region is fusable when x and every intermediate are read only inside it and no
/// intermediate is a graph output.
fn closed(g: &Graph, sub: &[usize], exit: usize, x: &str, consumers: &HashMap<&str, Vec<usize>>) -> bool {
    let inside = |t: &str| consumers.get(t).is_none_or(|c| c.iter().all(|n| sub.contains(n)));
    if !inside(x) || g.outputs.iter().any(|o| o == x) {
        return false;
    }
    sub.iter().filter(|&&n| n != exit).all(|&n| {
        let o = &g.nodes[n].outputs[0];
        inside(o) && !g.outputs.contains(o)
    })
}

/// Evaluates the region on the probe points (as an f64 vector input).
fn probe(g: &Graph, sub: &[usize], x: &str, consts: &HashMap<String, std::sync::Arc<Tensor>>) -> Option<Vec<f64>> {
    let xs = probes();
    let mut env: HashMap<&str, Tensor> = HashMap::new();
    env.insert(x, Tensor::from_f64_as(crate::ir::DType::F64, vec![xs.len()], &xs)?);
    for &ni in sub {
        let n: &Node = &g.nodes[ni];
        let ins: Vec<Tensor> = n
            .inputs
            .iter()
            .flatten()
            .map(|i| match env.get(i.as_str()) {
                Some(t) => Some(t.clone()),
                // Scalar constants as f64 so the probe keeps full precision.
                None => {
                    consts.get(i).map(|c| Tensor::from_f64_as(crate::ir::DType::F64, vec![], &c.to_f64_vec()).unwrap())
                }
            })
            .collect::<Option<_>>()?;
        let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
        let out = crate::reference::eval_op(&n.op, &refs).ok()?.into_iter().next()?;
        env.insert(&n.outputs[0], out);
    }
    let last = &g.nodes[*sub.last()?].outputs[0];
    Some(env.get(last.as_str())?.to_f64_vec())
}

/// Whether an op is a binary op with the given kind (helper for chain matching).
pub fn is_binary(op: &Op, b: Binary) -> bool {
    matches!(op, Op::Binary(x) if *x == b)
}
