//! Small graph-editing helpers the plan passes share.

use crate::error::Result;
use crate::ir::{Graph, Node, Op, Shape, Tensor, TensorType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A constant tensor: an initializer or a Constant node's value.
pub fn constant(g: &Graph, name: &str) -> Option<Arc<Tensor>> {
    g.initializers.get(name).cloned().or_else(|| {
        g.nodes.iter().find_map(|n| match &n.op {
            Op::Constant { value } if n.outputs[0] == name => Some(value.clone()),
            _ => None,
        })
    })
}

/// Readers of every tensor: (node index, input position).
pub fn consumers(g: &Graph) -> HashMap<String, Vec<(usize, usize)>> {
    let mut m: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for (k, x) in n.inputs.iter().enumerate() {
            if let Some(x) = x {
                m.entry(x.clone()).or_default().push((i, k));
            }
        }
    }
    m
}

/// Static shape of a tensor, with unbound symbolic dims taken from `bindings` (1 when unbound).
pub fn bound_shape(g: &Graph, t: &str, bindings: &HashMap<String, usize>) -> Option<Vec<usize>> {
    let s = g.types.get(t)?.shape.as_ref()?;
    s.0.iter()
        .map(|d| match d {
            crate::ir::Dim::Known(n) => Some(*n),
            crate::ir::Dim::Sym(name) => Some(bindings.get(name).copied().unwrap_or(1)),
            crate::ir::Dim::Unknown => None,
        })
        .collect()
}

/// A name not used by any tensor or node of `g`, derived from `base`.
pub fn fresh_name(g: &Graph, taken: &mut HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut i = 1;
    while taken.contains(&name) || g.types.contains_key(&name) || g.initializers.contains_key(&name) {
        i += 1;
        name = format!("{base}.{i}");
    }
    taken.insert(name.clone());
    name
}

pub fn node(name: String, op: Op, inputs: Vec<Option<String>>, output: String) -> Node {
    Node { name, op, inputs, outputs: vec![output] }
}

/// After a pass: drop weights nobody reads, type the new ones, order nodes and re-infer.
pub fn finish(g: &mut Graph) -> Result<()> {
    let used: HashSet<String> =
        g.nodes.iter().flat_map(|n| n.inputs.iter().flatten().cloned()).chain(g.outputs.iter().cloned()).collect();
    g.initializers.retain(|k, _| used.contains(k));
    let produced: HashSet<&String> = g.nodes.iter().flat_map(|n| n.outputs.iter()).collect();
    let keep: HashSet<String> = used.iter().chain(produced).chain(g.inputs.iter()).cloned().collect();
    g.types.retain(|k, _| keep.contains(k));
    for (k, t) in &g.initializers {
        g.types.insert(k.clone(), TensorType::new(t.dtype(), Shape::from_static(&t.shape)));
    }
    g.sort_and_check()?;
    crate::ir::infer::infer_graph(g, &HashMap::new())
}
