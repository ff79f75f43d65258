//! Building graphs in code (built-in models, tests) with the same checks import applies.

use super::{DType, Graph, Node, Op, Shape, Tensor, TensorType};
use crate::error::Result;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Default)]
pub struct GraphBuilder {
    graph: Graph,
}

impl GraphBuilder {
    pub fn new(name: &str) -> GraphBuilder {
        GraphBuilder { graph: Graph { name: name.into(), opset: 17, ..Default::default() } }
    }

    pub fn input(&mut self, name: &str, dtype: DType, shape: Shape) -> String {
        self.graph.types.insert(name.into(), TensorType::new(dtype, shape));
        self.graph.inputs.push(name.into());
        name.into()
    }

    pub fn initializer(&mut self, name: &str, t: Tensor) -> String {
        self.graph.types.insert(name.into(), TensorType::new(t.dtype(), Shape::from_static(&t.shape)));
        self.graph.initializers.insert(name.into(), Arc::new(t));
        name.into()
    }

    /// Adds a node with one output named after the node; returns the output name.
    pub fn node(&mut self, name: &str, op: Op, inputs: &[&str]) -> String {
        let out = format!("{name}_out");
        self.graph.nodes.push(Node {
            name: name.into(),
            op,
            inputs: inputs.iter().map(|s| if s.is_empty() { None } else { Some(s.to_string()) }).collect(),
            outputs: vec![out.clone()],
        });
        out
    }

    /// Adds a node with `outputs` outputs (`{name}_out0`, ...); returns their names.
    pub fn node_multi(&mut self, name: &str, op: Op, inputs: &[&str], outputs: usize) -> Vec<String> {
        let outs: Vec<String> = (0..outputs).map(|k| format!("{name}_out{k}")).collect();
        self.graph.nodes.push(Node {
            name: name.into(),
            op,
            inputs: inputs.iter().map(|s| if s.is_empty() { None } else { Some(s.to_string()) }).collect(),
            outputs: outs.clone(),
        });
        outs
    }

    pub fn output(&mut self, name: &str) {
        self.graph.outputs.push(name.into());
    }

    /// Sorts, checks and infers types, as import does.
    pub fn finish(mut self) -> Result<Graph> {
        self.graph.sort_and_check()?;
        super::infer::infer_graph(&mut self.graph, &HashMap::new())?;
        Ok(self.graph)
    }
}
