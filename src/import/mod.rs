//! ONNX import: a .onnx file (protobuf) -> [`Graph`], with types inferred for every tensor.
//!
//! Accepted: default-domain opsets [`MIN_OPSET`]..=[`MAX_OPSET`]. Errors name the file, node or
//! tensor and the reason; nothing in here panics on bad input (see fuzz/ and
//! tests/import_errors.rs).

mod attrs;
mod ops;
pub mod proto;
mod tensor_proto;

pub use tensor_proto::{decode_tensor, encode_tensor};

use crate::error::{Error, Result};
use crate::ir::{DType, Dim, Graph, Node, Op, Shape, TensorType};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Oldest default-domain opset Bolt imports: from 11 on, Bolt's ops have today's semantics
/// (Clip's min/max as inputs, Resize's coordinate modes, negative axes), except the few that
/// `ops::semantics_since` lists, which import as host-only nodes in older models.
pub const MIN_OPSET: i64 = 11;
/// Newest default-domain opset Bolt imports (onnx 1.23's). Versions 22-28 of Bolt's ops only
/// add element types (bf16 for convs and activations; float8, float4, int4, int2 for casts
/// and layout ops) to version 21; the semantics implemented here are unchanged.
pub const MAX_OPSET: i64 = 28;

/// An imported model: the graph plus provenance for reports.
#[derive(Debug)]
pub struct Model {
    pub graph: Graph,
    pub ir_version: i64,
    pub producer: String,
}

/// Reads and imports an ONNX file. External data files resolve relative to its directory.
pub fn load(path: &Path) -> Result<Model> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::File { path: path.into(), reason: format!("cannot read: {e}") })?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_bytes(&bytes, Some(base)).map_err(|e| match e {
        Error::Model(reason) => Error::File { path: path.into(), reason },
        other => other,
    })
}

/// Imports an ONNX model from memory. `base_dir` enables external data.
pub fn load_bytes(bytes: &[u8], base_dir: Option<&Path>) -> Result<Model> {
    let model = proto::ModelProto::decode(bytes)
        .map_err(|e| Error::Model(format!("not a valid ONNX model (protobuf decoding failed: {e})")))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain().is_empty() || o.domain() == "ai.onnx")
        .map(|o| o.version())
        .ok_or_else(|| Error::Model("model imports no default-domain (ai.onnx) opset".into()))?;
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(Error::Model(format!(
            "model uses ai.onnx opset {opset}; Bolt imports opsets {MIN_OPSET} to {MAX_OPSET} \
             (convert it with onnx.version_converter)"
        )));
    }
    let g = model.graph.as_ref().ok_or_else(|| Error::Model("model has no graph".into()))?;
    let graph = import_graph(g, opset, base_dir)?;
    Ok(Model { graph, ir_version: model.ir_version(), producer: model.producer_name().to_string() })
}

fn import_graph(g: &proto::GraphProto, opset: i64, base_dir: Option<&Path>) -> Result<Graph> {
    let mut graph = Graph { name: g.name().to_string(), opset, ..Default::default() };

    for t in &g.initializer {
        let name = t.name();
        if name.is_empty() {
            return Err(Error::Model("an initializer has no name".into()));
        }
        let tensor =
            decode_tensor(t, base_dir).map_err(|reason| Error::tensor(name, format!("initializer: {reason}")))?;
        graph.types.insert(name.to_string(), TensorType::new(tensor.dtype(), Shape::from_static(&tensor.shape)));
        if graph.initializers.insert(name.to_string(), Arc::new(tensor)).is_some() {
            return Err(Error::tensor(name, "initializer defined twice"));
        }
    }
    let mut seen_inputs = HashSet::new();
    for vi in &g.input {
        let name = vi.name();
        if !seen_inputs.insert(name) {
            return Err(Error::tensor(name, "graph input declared twice"));
        }
        let ty = value_type(vi).map_err(|r| Error::tensor(name, format!("graph input: {r}")))?;
        // An initializer listed as an input is a default value the caller may override
        // (IR < 4 style); Bolt treats it as a constant weight and keeps its tensor type.
        if graph.initializers.contains_key(name) {
            continue;
        }
        let ty = ty.ok_or_else(|| Error::tensor(name, "graph input has no tensor type"))?;
        graph.types.insert(name.to_string(), ty);
        graph.inputs.push(name.to_string());
    }
    // Types the exporter recorded for intermediates and outputs seed inference and are
    // checked against it.
    let mut declared: HashMap<String, TensorType> = HashMap::new();
    for vi in g.value_info.iter().chain(&g.output) {
        if let Ok(Some(ty)) = value_type(vi) {
            declared.insert(vi.name().to_string(), ty);
        }
    }
    graph.outputs = g.output.iter().map(|o| o.name().to_string()).collect();

    let mut used_names: HashSet<String> = HashSet::new();
    for (idx, n) in g.node.iter().enumerate() {
        let mut name = if n.name().is_empty() { format!("{}_{idx}", n.op_type()) } else { n.name().to_string() };
        if !used_names.insert(name.clone()) {
            name = format!("{name}__{idx}");
            used_names.insert(name.clone());
        }
        let op_type = n.op_type().to_string();
        let op = match ops::parse_op(n, opset) {
            Ok(ops::Parsed::Op(op)) => op,
            Ok(ops::Parsed::Opaque(why)) => Op::Opaque {
                domain: n.domain().to_string(),
                op_type: op_type.clone(),
                attrs: attrs::Attrs::new(n).generic(),
                why: why.into(),
            },
            Err(reason) => return Err(Error::Node { node: name, op_type, reason }),
        };
        if n.output.is_empty() {
            return Err(Error::Node { node: name, op_type, reason: "node has no outputs".into() });
        }
        graph.nodes.push(Node {
            name,
            op,
            inputs: n.input.iter().map(|s| if s.is_empty() { None } else { Some(s.clone()) }).collect(),
            outputs: n.output.clone(),
        });
    }
    graph.sort_and_check()?;
    crate::ir::infer::infer_graph(&mut graph, &declared)?;
    Ok(graph)
}

/// The tensor type of a ValueInfoProto: `Ok(None)` when it carries no tensor type.
fn value_type(vi: &proto::ValueInfoProto) -> Result<Option<TensorType>, String> {
    use proto::type_proto::Value;
    let Some(Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Ok(None);
    };
    let dtype = DType::from_onnx(t.elem_type());
    let shape = match &t.shape {
        None => None,
        Some(s) => Some(Shape(
            s.dim
                .iter()
                .map(|d| {
                    use proto::tensor_shape_proto::dimension::Value as D;
                    match &d.value {
                        Some(D::DimValue(v)) if *v >= 0 => Ok(Dim::Known(*v as usize)),
                        Some(D::DimValue(v)) => Err(format!("negative dimension {v}")),
                        Some(D::DimParam(p)) if !p.is_empty() => Ok(Dim::Sym(p.clone())),
                        _ => Ok(Dim::Unknown),
                    }
                })
                .collect::<Result<_, _>>()?,
        )),
    };
    Ok(Some(TensorType { dtype, shape }))
}
