//! The graph: nodes in topological order, typed values, initializers, inputs and outputs.

use super::{Op, Tensor, TensorType};
use crate::error::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Node {
    /// Unique within the graph; import names unnamed nodes `<op_type>_<index>`.
    pub name: String,
    pub op: Op,
    /// `None` marks an omitted optional input (ONNX's empty name).
    pub inputs: Vec<Option<String>>,
    pub outputs: Vec<String>,
}

/// `base`, or `base.2`, `base.3`, ... : the first not in `taken`, which then holds it.
pub fn unique_name(taken: &mut HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while taken.contains(&name) {
        k += 1;
        name = format!("{base}.{k}");
    }
    taken.insert(name.clone());
    name
}

impl Node {
    /// Name of input `i` when present.
    pub fn input(&self, i: usize) -> Option<&str> {
        self.inputs.get(i).and_then(|x| x.as_deref())
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Graph {
    pub name: String,
    /// Default-domain opset the model was written against.
    pub opset: i64,
    /// Nodes in topological order (import sorts them).
    pub nodes: Vec<Node>,
    /// Type of every tensor name: inputs, initializers, node outputs.
    pub types: HashMap<String, TensorType>,
    pub initializers: HashMap<String, Arc<Tensor>>,
    /// Graph inputs that are not initializers, in declaration order.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

impl Graph {
    pub fn tensor_type(&self, name: &str) -> Option<&TensorType> {
        self.types.get(name)
    }

    /// Whether a node runs subgraphs that read the graph's values without naming them as inputs
    /// (an opaque If, Loop or Scan): where one does, no value is known to be unread.
    pub fn has_opaque_subgraphs(&self) -> bool {
        self.nodes.iter().any(|n| n.op.attrs().hold_graph())
    }

    /// Reorders nodes topologically (stable for already-sorted graphs) and checks that every
    /// input is produced exactly once: by a node, a graph input or an initializer.
    pub fn sort_and_check(&mut self) -> Result<()> {
        let mut producer: HashMap<&str, usize> = HashMap::new();
        let available: HashSet<&str> =
            self.inputs.iter().map(String::as_str).chain(self.initializers.keys().map(String::as_str)).collect();
        for (i, n) in self.nodes.iter().enumerate() {
            for o in &n.outputs {
                if o.is_empty() {
                    continue;
                }
                if available.contains(o.as_str()) {
                    return Err(Error::node(n, format!("output '{o}' redefines a graph input or initializer")));
                }
                if let Some(&j) = producer.get(o.as_str()) {
                    return Err(Error::node(
                        n,
                        format!("output '{o}' is also produced by node '{}'", self.nodes[j].name),
                    ));
                }
                producer.insert(o, i);
            }
        }
        for n in &self.nodes {
            for x in n.inputs.iter().flatten() {
                if !available.contains(x.as_str()) && !producer.contains_key(x.as_str()) {
                    return Err(Error::node(
                        n,
                        format!("input '{x}' is not a graph input, an initializer or any node's output"),
                    ));
                }
            }
        }
        for o in &self.outputs {
            if !available.contains(o.as_str()) && !producer.contains_key(o.as_str()) {
                return Err(Error::tensor(o, "graph output is not produced by any node, input or initializer"));
            }
        }
        // Kahn's algorithm, always taking the lowest original index first so sorted graphs
        // keep their order.
        let mut indegree = vec![0usize; self.nodes.len()];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for x in n.inputs.iter().flatten() {
                if let Some(&p) = producer.get(x.as_str()) {
                    indegree[i] += 1;
                    users[p].push(i);
                }
            }
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> =
            (0..self.nodes.len()).filter(|&i| indegree[i] == 0).map(std::cmp::Reverse).collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(i);
            for &u in &users[i] {
                indegree[u] -= 1;
                if indegree[u] == 0 {
                    ready.push(std::cmp::Reverse(u));
                }
            }
        }
        if order.len() != self.nodes.len() {
            let stuck = (0..self.nodes.len()).find(|&i| indegree[i] > 0).map(|i| &self.nodes[i]);
            return Err(match stuck {
                Some(n) => Error::node(n, "the graph has a cycle through this node"),
                None => Error::Model("the graph has a cycle".into()),
            });
        }
        let mut old: Vec<Option<Node>> = std::mem::take(&mut self.nodes).into_iter().map(Some).collect();
        self.nodes = order.into_iter().map(|i| old[i].take().expect("each index once")).collect();
        Ok(())
    }

    /// Number of nodes per op type, for summaries.
    pub fn op_histogram(&self) -> Vec<(String, usize)> {
        let mut h: HashMap<&str, usize> = HashMap::new();
        for n in &self.nodes {
            *h.entry(n.op.op_type()).or_default() += 1;
        }
        let mut v: Vec<(String, usize)> = h.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}
