//! ONNX import: a .onnx file (protobuf) -> [`Graph`], with types inferred for every tensor.
//!
//! Accepted: default-domain opsets [`MIN_OPSET`]..=[`MAX_OPSET`]. Errors name the file, node or
//! tensor and the reason; nothing in here panics on bad input (see fuzz/ and
//! tests/import_errors.rs).

mod attrs;
mod contrib;
mod legacy;
mod ops;
pub mod proto;
mod schema;
mod tensor_proto;

pub use tensor_proto::{decode_tensor, encode_tensor};

use crate::error::{Error, Result};
use crate::ir::{DType, Dim, Graph, Node, Op, Shape, Tensor, TensorType};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Oldest default-domain opset Bolt imports: 7, where element-wise ops took numpy
/// broadcasting (ONNX Runtime loads nothing older either). Older versions of a few ops are
/// rewritten into today's form (`legacy`); the few that `ops::semantics_since` lists and
/// `legacy` does not rewrite import as host-only nodes.
pub const MIN_OPSET: i64 = 7;
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
    /// Nodes the importer added for one of the file's (onnxruntime's fused ops written as the
    /// ONNX ops they fused), by name: the file's node each comes from. A host that offers Bolt
    /// the file's nodes by name maps these back to it.
    pub expanded_from: HashMap<String, String>,
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
    let model = proto::ModelProto::decode(bytes).map_err(|e| {
        let at = wire_error(bytes, 0, &MODEL_FIELDS).map_or(String::new(), |w| format!("; {w}"));
        Error::Model(format!("not a valid ONNX model (protobuf decoding failed: {e}{at})"))
    })?;
    let g = model.graph.as_ref().ok_or_else(|| Error::Model("model has no graph".into()))?;
    let default_domain = |d: &str| d.is_empty() || d == "ai.onnx";
    let opset = match model.opset_import.iter().find(|o| default_domain(o.domain())) {
        Some(o) => o.version(),
        // Only other domains (a scikit-learn pipeline in ai.onnx.ml): no default-domain op
        // to version, unless a node uses one anyway.
        None => match g.node.iter().find(|n| default_domain(n.domain())) {
            Some(n) => {
                return Err(Error::Model(format!(
                    "node '{}' ({}) is an ai.onnx op, but the model imports no ai.onnx opset",
                    n.name(),
                    n.op_type()
                )))
            }
            None => MAX_OPSET,
        },
    };
    if !(MIN_OPSET..=MAX_OPSET).contains(&opset) {
        return Err(Error::Model(format!(
            "model uses ai.onnx opset {opset}; Bolt imports opsets {MIN_OPSET} to {MAX_OPSET} \
             (convert it with onnx.version_converter)"
        )));
    }
    // A model onnxruntime saved after optimising it: its fused ops as the ONNX ops they fused.
    let (graph, expanded_from) = import_expanded(g, opset, base_dir, Scope::Main)?;
    Ok(Model { graph, ir_version: model.ir_version(), producer: model.producer_name().to_string(), expanded_from })
}

/// Imports graph `g` (the model's, or a body's: onnxruntime fuses inside them too) with
/// onnxruntime's fused ops written as ONNX ops ([`contrib`]); also each added node's fused
/// node, by name.
fn import_expanded(
    g: &proto::GraphProto,
    opset: i64,
    base_dir: Option<&Path>,
    scope: Scope,
) -> Result<(Graph, HashMap<String, String>)> {
    match contrib::expand(g, opset) {
        Some(e) => Ok((import_graph(&e.graph, opset, &e.notes, base_dir, scope)?, e.origin)),
        None => Ok((import_graph(g, opset, &contrib::Notes::default(), base_dir, scope)?, HashMap::new())),
    }
}

/// Which graph is being imported: the model's, or a branch of an `If` (which reads values of
/// the graphs around it and is typed by the `If`'s inference, see [`crate::ir::control`]).
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    Main,
    /// An If branch: no inputs of its own.
    Branch,
    /// A Loop body: its declared inputs (iteration number, condition, carried values).
    LoopBody,
}

/// `notes`: what an expansion of onnxruntime's fused ops ([`contrib`]) says of nodes by index:
/// those read as of a later opset than `opset`, and why fused ops are kept.
fn import_graph(
    g: &proto::GraphProto,
    opset: i64,
    notes: &contrib::Notes,
    base_dir: Option<&Path>,
    scope: Scope,
) -> Result<Graph> {
    let mut graph = Graph { name: g.name().to_string(), opset, ..Default::default() };

    for t in &g.initializer {
        let name = t.name();
        if name.is_empty() {
            return Err(Error::Model("an initializer has no name".into()));
        }
        let dtype = DType::from_onnx(t.data_type());
        if dtype.size_bytes().is_none() {
            // Strings (a label table) and other types Bolt does not compute with: a host-only
            // constant, so that the model imports and the host runs what reads it.
            let dims = t.dims.iter().map(|&d| usize::try_from(d).map(Dim::Known)).collect::<Result<Vec<_>, _>>();
            let shape = dims.ok().map(Shape);
            graph.types.insert(name.to_string(), TensorType { dtype, shape });
            graph.nodes.push(Node {
                name: format!("{name}.initializer"),
                op: Op::Opaque {
                    domain: String::new(),
                    op_type: "Constant".into(),
                    attrs: vec![],
                    why:
                        "an initializer of an element type Bolt does not compute with (strings, complex, 4- and 8-bit \
                          floats)"
                            .into(),
                },
                inputs: vec![],
                outputs: vec![name.to_string()],
            });
            continue;
        }
        let tensor =
            decode_tensor(t, base_dir).map_err(|reason| Error::tensor(name, format!("initializer: {reason}")))?;
        graph.types.insert(name.to_string(), TensorType::new(tensor.dtype(), Shape::from_static(&tensor.shape)));
        if graph.initializers.insert(name.to_string(), Arc::new(tensor)).is_some() {
            return Err(Error::tensor(name, "initializer defined twice"));
        }
    }
    let mut seen_inputs = HashSet::new();
    if scope == Scope::Branch && !g.input.is_empty() {
        return Err(Error::Model(format!("branch '{}' declares inputs; If branches take none", g.name())));
    }
    for vi in &g.input {
        let name = vi.name();
        if !seen_inputs.insert(name) {
            return Err(Error::tensor(name, "graph input declared twice"));
        }
        let ty = value_type(vi);
        // An initializer listed as an input is a default value the caller may override
        // (IR < 4 style); Bolt treats it as a constant weight and keeps its tensor type.
        if let Some(t) = g.initializer.iter().find(|t| t.name() == name) {
            let (declared, held) = (ty.as_ref().map(|t| t.dtype), DType::from_onnx(t.data_type()));
            if let Some(declared) = declared.filter(|&d| d != held) {
                return Err(Error::tensor(
                    name,
                    format!("graph input is declared {declared} but its initializer holds {held}"),
                ));
            }
            if let Some(shape) = ty.as_ref().and_then(|t| t.shape.as_ref()) {
                let fits = shape.0.len() == t.dims.len()
                    && shape.0.iter().zip(&t.dims).all(|(d, &n)| d.known().is_none_or(|k| k as i64 == n));
                if !fits {
                    return Err(Error::tensor(
                        name,
                        format!("graph input is declared {shape} but its initializer has dims {:?}", t.dims),
                    ));
                }
            }
            continue;
        }
        if scope == Scope::LoopBody {
            // Typed by the Loop's inference when the file does not.
            if let Some(ty) = ty {
                graph.types.insert(name.to_string(), ty);
            }
            graph.inputs.push(name.to_string());
            continue;
        }
        // A sequence, optional or map (valid ONNX that Bolt does not compute with): an input
        // of no tensor type, which the ops reading it leave to the host.
        let other_kind = vi
            .r#type
            .as_ref()
            .and_then(|t| t.value.as_ref())
            .is_some_and(|v| !matches!(v, proto::type_proto::Value::TensorType(_)));
        if other_kind {
            graph.inputs.push(name.to_string());
            continue;
        }
        let mut ty = ty.ok_or_else(|| Error::tensor(name, "graph input has no tensor type"))?;
        if ty.dtype == crate::ir::DType::Other(0) {
            return Err(Error::tensor(
                name,
                "graph input's element type is 0 (UNDEFINED): a caller could feed anything",
            ));
        }
        // A dynamic input dim the exporter left unnamed gets the name `<input>.<axis>`, so
        // that `--dim` can size it and errors can name it.
        if let Some(s) = ty.shape.as_mut() {
            for (axis, d) in s.0.iter_mut().enumerate() {
                if *d == Dim::Unknown {
                    *d = Dim::Sym(format!("{name}.{axis}"));
                }
            }
        }
        graph.types.insert(name.to_string(), ty);
        graph.inputs.push(name.to_string());
    }
    // Types the exporter recorded for intermediates and outputs seed inference and are
    // checked against it.
    let mut declared: HashMap<String, TensorType> = HashMap::new();
    for vi in g.value_info.iter().chain(&g.output) {
        if let Some(ty) = value_type(vi) {
            declared.insert(vi.name().to_string(), ty);
        }
    }
    graph.outputs = g.output.iter().map(|o| o.name().to_string()).collect();

    // Constant tensors by name, for older op versions whose meaning depends on an input's
    // values (Resize-10's scales; none from opset 11); and the constants `legacy::upgrade`
    // adds that take another tensor's type.
    let constants = if opset < 11 { small_constants(g, &graph, base_dir) } else { HashMap::new() };
    let mut retype: Vec<(String, String)> = Vec::new();
    let mut used_names: HashSet<String> = HashSet::new();
    let mut node_names: Vec<String> = Vec::with_capacity(g.node.len());
    for (idx, n) in g.node.iter().enumerate() {
        let mut name = if n.name().is_empty() { format!("{}_{idx}", n.op_type()) } else { n.name().to_string() };
        if !used_names.insert(name.clone()) {
            name = format!("{name}__{idx}");
            used_names.insert(name.clone());
        }
        let op_type = n.op_type().to_string();
        let opset = node_opset(n, idx, opset, &notes.at_opset);
        if (n.domain().is_empty() || n.domain() == "ai.onnx") && !contrib::ort_own(n) {
            schema::check_node(n, opset).map_err(|reason| Error::Node {
                node: name.clone(),
                op_type: op_type.clone(),
                reason,
            })?;
        }
        node_names.push(name.clone());
        let mut inputs: Vec<Option<String>> =
            n.input.iter().map(|s| if s.is_empty() { None } else { Some(s.clone()) }).collect();
        let legacy = legacy::upgrade(n, opset, &constants).map_err(|reason| Error::Node {
            node: name.clone(),
            op_type: op_type.clone(),
            reason,
        })?;
        let parsed = match legacy {
            Some(up) => {
                let own = std::mem::take(&mut inputs);
                for arg in up.inputs {
                    inputs.push(match arg {
                        legacy::Arg::Input(i) => own.get(i).cloned().flatten(),
                        legacy::Arg::Absent => None,
                        legacy::Arg::Constant { suffix, value, like } => {
                            let t = format!("{name}.{suffix}");
                            graph
                                .types
                                .insert(t.clone(), TensorType::new(value.dtype(), Shape::from_static(&value.shape)));
                            graph.initializers.insert(t.clone(), Arc::new(value));
                            if let Some(x) = like.and_then(|i| own.get(i).cloned().flatten()) {
                                retype.push((t.clone(), x));
                            }
                            Some(t)
                        }
                    });
                }
                // Trailing absent inputs are left out, as a file would.
                while inputs.last() == Some(&None) {
                    inputs.pop();
                }
                Ok(up.parsed)
            }
            // A host handing Bolt a graph without its control-flow bodies (ONNX Runtime's
            // graph API: the plugin EP) keeps the If, an opaque node that may read any value.
            None if op_type == "If" && (n.domain().is_empty() || n.domain() == "ai.onnx") && !has_branches(n) => {
                Ok(ops::Parsed::Opaque("an If whose branches the host keeps"))
            }
            // Control flow with its graphs: If, Loop, and Scan from opset 9 (opset 8's, with a
            // batch axis and sequence lengths, stays with the host).
            None if (n.domain().is_empty() || n.domain() == "ai.onnx")
                && match op_type.as_str() {
                    "If" => true,
                    "Loop" => has_body(n),
                    "Scan" => has_body(n) && opset >= 9,
                    _ => false,
                } =>
            {
                let import = match op_type.as_str() {
                    "If" => import_if,
                    "Loop" => import_loop,
                    _ => import_scan,
                };
                let (op, captured) = import(n, opset, base_dir).map_err(|reason| Error::Node {
                    node: name.clone(),
                    op_type: op_type.clone(),
                    reason,
                })?;
                inputs.extend(captured.into_iter().map(Some));
                Ok(ops::Parsed::Op(op))
            }
            None => ops::parse_op(n, opset),
        };
        let op = match parsed {
            Ok(ops::Parsed::Op(op)) => op,
            Ok(ops::Parsed::Opaque(why)) => {
                let why = notes.kept.get(&idx).copied().unwrap_or(why);
                let mut attrs = attrs::Attrs::new(n).generic();
                if op_type == "If" && !crate::ir::Attrs(&attrs).hold_graph() {
                    attrs.push(("then_branch".into(), crate::ir::AttrValue::Unsupported("graph".into())));
                }
                Op::Opaque { domain: n.domain().to_string(), op_type: op_type.clone(), attrs, why: why.into() }
            }
            Err(reason) => return Err(Error::Node { node: name, op_type, reason }),
        };
        if n.output.is_empty() {
            return Err(Error::Node { node: name, op_type, reason: "node has no outputs".into() });
        }
        graph.nodes.push(Node { name, op, inputs, outputs: n.output.clone() });
    }
    if scope != Scope::Main {
        // Typed by the If's or Loop's inference, from the enclosing values; what the file
        // declares seeds it. A Loop body's own inputs come first, then what it captures.
        let own = std::mem::take(&mut graph.inputs);
        let captured = crate::ir::control::captured(&graph).into_iter().filter(|x| !own.contains(x));
        graph.inputs = own.iter().cloned().chain(captured).collect();
        graph.sort_and_check()?;
        for (name, ty) in declared {
            graph.types.entry(name).or_insert(ty);
        }
        return Ok(graph);
    }
    graph.sort_and_check()?;
    // The file's nodes' input types against their schemas: those of graph inputs and
    // initializers first (inference would stop at them with a vaguer reason), then every value.
    check_input_types(g, &node_names, &graph, &notes.at_opset)?;
    crate::ir::infer::infer_graph(&mut graph, &declared)?;
    check_input_types(g, &node_names, &graph, &notes.at_opset)?;
    if legacy_softmax_on_last_axis(&mut graph) {
        graph.sort_and_check()?;
        crate::ir::infer::infer_graph(&mut graph, &declared)?;
    }
    retype_legacy_constants(&mut graph, &retype)?;
    Ok(graph)
}

/// The opset node `idx` of a graph at `opset` is checked and read as of.
fn node_opset(n: &proto::NodeProto, idx: usize, opset: i64, at_opset: &HashMap<usize, i64>) -> i64 {
    at_opset.get(&idx).copied().unwrap_or_else(|| contrib::node_opset(n, opset))
}

fn check_input_types(
    g: &proto::GraphProto,
    names: &[String],
    graph: &Graph,
    at_opset: &HashMap<usize, i64>,
) -> Result<()> {
    for (idx, (n, name)) in g.node.iter().zip(names).enumerate() {
        if (n.domain().is_empty() || n.domain() == "ai.onnx") && !contrib::ort_own(n) {
            schema::check_types(n, node_opset(n, idx, graph.opset, at_opset), |v| graph.types.get(v).map(|t| t.dtype))
                .map_err(|reason| Error::Node { node: name.clone(), op_type: n.op_type().to_string(), reason })?;
        }
    }
    Ok(())
}

/// The graph's small constant tensors (scales and sizes, not weights), initializers and
/// Constant nodes', by name.
fn small_constants(g: &proto::GraphProto, graph: &Graph, base_dir: Option<&Path>) -> HashMap<String, Tensor> {
    const SMALL: usize = 64;
    let mut out: HashMap<String, Tensor> = graph
        .initializers
        .iter()
        .filter(|(_, v)| v.len() <= SMALL)
        .map(|(k, v)| (k.clone(), v.as_ref().clone()))
        .collect();
    for n in g.node.iter().filter(|n| n.op_type() == "Constant" && n.domain().is_empty() && n.output.len() == 1) {
        let value = n.attribute.iter().find(|a| a.name() == "value").and_then(|a| a.t.as_ref());
        if let Some(t) = value.filter(|t| t.dims.iter().product::<i64>() <= SMALL as i64) {
            if let Ok(t) = decode_tensor(t, base_dir) {
                out.insert(n.output[0].clone(), t);
            }
        }
    }
    out
}

/// The constants older op versions held as float attributes (Clip's bounds, Pad's value) in
/// the element type of the tensor they apply to, now that inference knows it.
fn retype_legacy_constants(graph: &mut Graph, retype: &[(String, String)]) -> Result<()> {
    for (constant, like) in retype {
        let Some(dtype) = graph.types.get(like).map(|t| t.dtype) else { continue };
        let Some(t) = graph.initializers.get(constant) else { continue };
        if t.dtype() == dtype {
            continue;
        }
        let v = Tensor::from_f64_as(dtype, t.shape.clone(), &t.to_f64_vec()).ok_or_else(|| {
            Error::tensor(constant, format!("an attribute of an older op version cannot be held as {dtype}"))
        })?;
        graph.types.insert(constant.clone(), TensorType::new(dtype, Shape::from_static(&v.shape)));
        graph.initializers.insert(constant.clone(), Arc::new(v));
    }
    Ok(())
}

/// Whether a `Loop` or `Scan` node carries its body (a host's graph API may hand it without).
fn has_body(n: &proto::NodeProto) -> bool {
    n.attribute.iter().any(|a| a.name() == "body" && a.g.is_some())
}

/// A Loop's or Scan's `body` attribute, as written and imported.
fn import_body<'a>(
    n: &'a proto::NodeProto,
    opset: i64,
    base_dir: Option<&Path>,
) -> std::result::Result<(&'a proto::GraphProto, Graph), String> {
    let g = n.attribute.iter().find(|a| a.name() == "body").and_then(|a| a.g.as_ref()).ok_or("no body")?;
    let (body, _) = import_expanded(g, opset, base_dir, Scope::LoopBody).map_err(|e| format!("body: {e}"))?;
    Ok((g, body))
}

/// A `Loop` node: its body, and the enclosing values the body reads (which become the node's
/// inputs after the trip count, the condition and the carried values).
fn import_loop(
    n: &proto::NodeProto,
    opset: i64,
    base_dir: Option<&Path>,
) -> std::result::Result<(Op, Vec<String>), String> {
    let (g, body) = import_body(n, opset, base_dir)?;
    if n.input.len() < 2 {
        return Err(format!(
            "Loop takes a trip count and a condition (either may be empty) before its carried values; the node has {} inputs",
            n.input.len()
        ));
    }
    let carried = n.input.len() - 2;
    let own = g.input.len();
    if own != carried + 2 {
        return Err(format!(
            "the body declares {own} inputs; it needs 2 + {carried} (iteration number, condition, the carried values)"
        ));
    }
    if body.outputs.len() < 1 + carried {
        return Err(format!(
            "the body has {} outputs; it needs 1 + {carried} (the condition, the carried values) before its scan outputs",
            body.outputs.len()
        ));
    }
    let scans = body.outputs.len() - 1 - carried;
    if n.output.len() != carried + scans {
        return Err(format!(
            "the node has {} outputs; its body gives {carried} carried values and {scans} scan outputs",
            n.output.len()
        ));
    }
    let captured = body.inputs[own..].to_vec();
    Ok((Op::Loop { body: Arc::new(body), carried }, captured))
}

/// A `Scan` node (opset 9 on): its body and attributes, and the enclosing values the body
/// reads (which become the node's inputs after the states and scan inputs).
fn import_scan(
    n: &proto::NodeProto,
    opset: i64,
    base_dir: Option<&Path>,
) -> std::result::Result<(Op, Vec<String>), String> {
    let (g, body) = import_body(n, opset, base_dir)?;
    let a = attrs::Attrs::new(n);
    let scans = usize::try_from(a.int("num_scan_inputs")?.ok_or("attribute 'num_scan_inputs' is missing")?)
        .map_err(|_| "num_scan_inputs is negative".to_string())?;
    if scans == 0 || scans > n.input.len() {
        return Err(format!("num_scan_inputs {scans} with {} inputs", n.input.len()));
    }
    let states = n.input.len() - scans;
    if g.input.len() != n.input.len() {
        return Err(format!(
            "the body declares {} inputs; the node has {} (states and scan inputs)",
            g.input.len(),
            n.input.len()
        ));
    }
    if body.outputs.len() != n.output.len() || n.output.len() < states {
        return Err(format!(
            "the body has {} outputs and the node {}; both list the {states} states first",
            body.outputs.len(),
            n.output.len()
        ));
    }
    let outs = n.output.len() - states;
    let list = |name: &str, len: usize| -> std::result::Result<Vec<i64>, String> {
        match a.ints(name)? {
            None => Ok(vec![0; len]),
            Some(v) if v.len() == len => Ok(v),
            Some(v) => Err(format!("attribute '{name}' has {} entries for {len} values", v.len())),
        }
    };
    let reverse = |name: &str, len: usize| -> std::result::Result<Vec<bool>, String> {
        list(name, len)?
            .into_iter()
            .map(|d| match d {
                0 => Ok(false),
                1 => Ok(true),
                d => Err(format!("attribute '{name}' has direction {d}; 0 or 1")),
            })
            .collect()
    };
    let attrs = crate::ir::ScanAttrs {
        input_axes: list("scan_input_axes", scans)?,
        input_reverse: reverse("scan_input_directions", scans)?,
        output_axes: list("scan_output_axes", outs)?,
        output_reverse: reverse("scan_output_directions", outs)?,
        states,
        body: Graph::default(),
    };
    let captured = body.inputs[n.input.len()..].to_vec();
    Ok((Op::Scan(Arc::new(crate::ir::ScanAttrs { body, ..attrs })), captured))
}

/// Whether an `If` node carries any of its branches.
fn has_branches(n: &proto::NodeProto) -> bool {
    n.attribute.iter().any(|a| matches!(a.name(), "then_branch" | "else_branch"))
}

/// An `If` node: its branches, and the enclosing values they read (which become the node's
/// inputs after the condition).
fn import_if(
    n: &proto::NodeProto,
    opset: i64,
    base_dir: Option<&Path>,
) -> std::result::Result<(Op, Vec<String>), String> {
    if n.input.len() != 1 || n.input[0].is_empty() {
        return Err(format!("If takes one input (the condition); the node has {}", n.input.len()));
    }
    let branch = |attr: &str| -> std::result::Result<Graph, String> {
        let g = n
            .attribute
            .iter()
            .find(|a| a.name() == attr)
            .and_then(|a| a.g.as_ref())
            .ok_or_else(|| format!("attribute '{attr}' (a graph) is missing"))?;
        let (b, _) = import_expanded(g, opset, base_dir, Scope::Branch).map_err(|e| format!("{attr}: {e}"))?;
        if b.outputs.len() != n.output.len() {
            return Err(format!("{attr} has {} outputs; the node has {}", b.outputs.len(), n.output.len()));
        }
        Ok(b)
    };
    let (then_branch, else_branch) = (branch("then_branch")?, branch("else_branch")?);
    let mut captured: Vec<String> = Vec::new();
    for x in then_branch.inputs.iter().chain(&else_branch.inputs) {
        if !captured.contains(x) && x != &n.input[0] {
            captured.push(x.clone());
        }
    }
    if then_branch.inputs.contains(&n.input[0]) || else_branch.inputs.contains(&n.input[0]) {
        // A branch reading the condition itself: list it once more so the node's inputs after
        // the condition are exactly what the branches read.
        captured.push(n.input[0].clone());
    }
    Ok((Op::If { then_branch: Arc::new(then_branch), else_branch: Arc::new(else_branch) }, captured))
}

/// Softmax, LogSoftmax and Hardmax before opset 13 flatten their input to 2-D at `axis`; over
/// the last axis that is today's op, which is how paddle2onnx and torch.onnx use them, and so
/// is one over an axis followed by dims of 1 only (caffe2's SqueezeNet: [N, 1000, 1, 1] at
/// axis 1). Softmax and LogSoftmax over other axes become what they mean: Flatten at the axis,
/// the op over the last axis, and a Reshape back to the input's shape. Decided after inference,
/// which knows the rank; returns whether nodes were added (the caller infers again).
fn legacy_softmax_on_last_axis(graph: &mut Graph) -> bool {
    let mut added = Vec::new();
    let mut names: std::collections::HashSet<String> = graph.nodes.iter().map(|n| n.name.clone()).collect();
    names.extend(graph.types.keys().cloned());
    names.extend(graph.initializers.keys().cloned());
    let mut fresh = |base: String| crate::ir::unique_name(&mut names, &base);
    for n in &mut graph.nodes {
        let Op::Opaque { domain, op_type, attrs, .. } = &n.op else { continue };
        if !matches!(op_type.as_str(), "Softmax" | "LogSoftmax" | "Hardmax") {
            continue;
        }
        if !(domain.is_empty() || domain == "ai.onnx") || graph.opset >= 13 {
            continue;
        }
        let axis = crate::ir::Attrs(attrs).int_or("axis", 1);
        let shape = n.input(0).and_then(|x| graph.types.get(x)).and_then(|t| t.shape.as_ref());
        let rank = shape.map(Shape::rank);
        if let (Some(axis), Some(rank), Some(shape)) = (axis, rank, shape) {
            let a = if axis < 0 { axis + rank as i64 } else { axis };
            let ones_after =
                (0..rank as i64).contains(&a) && shape.0[a as usize + 1..].iter().all(|d| d.known() == Some(1));
            if rank > 0 && ones_after && a != rank as i64 - 1 {
                // The flattened block is the axis itself.
                n.op = match op_type.as_str() {
                    "Softmax" => Op::Softmax { axis: a },
                    "LogSoftmax" => Op::LogSoftmax { axis: a },
                    _ => Op::Opaque {
                        domain: domain.clone(),
                        op_type: op_type.clone(),
                        attrs: vec![("axis".into(), crate::ir::AttrValue::Int(a))],
                        why: crate::ir::HOST_COMPUTED.into(),
                    },
                };
                continue;
            }
            if (0..rank as i64 - 1).contains(&a) && op_type != "Hardmax" && n.outputs.len() == 1 {
                let x = n.inputs[0].clone();
                let (flat, soft, dims) = (
                    fresh(format!("{}.flat", n.name)),
                    fresh(format!("{}.rows", n.name)),
                    fresh(format!("{}.dims", n.name)),
                );
                let node = |name: String, op: Op, inputs: Vec<Option<String>>, out: String| crate::ir::Node {
                    name,
                    op,
                    inputs,
                    outputs: vec![out],
                };
                added.push(node(
                    fresh(format!("{}.flatten", n.name)),
                    Op::Flatten { axis: a },
                    vec![x.clone()],
                    flat.clone(),
                ));
                added.push(node(
                    fresh(format!("{}.shape", n.name)),
                    Op::Shape { start: 0, end: None },
                    vec![x],
                    dims.clone(),
                ));
                let op = if op_type == "Softmax" { Op::Softmax { axis: -1 } } else { Op::LogSoftmax { axis: -1 } };
                added.push(node(fresh(format!("{}.over_rows", n.name)), op, vec![Some(flat)], soft.clone()));
                // The node keeps its name and output: a Reshape of the rows back.
                n.op = Op::Reshape { allowzero: false };
                n.inputs = vec![Some(soft), Some(dims)];
                continue;
            }
            if rank > 0 && (axis == -1 || axis == rank as i64 - 1) {
                n.op = match op_type.as_str() {
                    "Softmax" => Op::Softmax { axis: -1 },
                    "LogSoftmax" => Op::LogSoftmax { axis: -1 },
                    // Hardmax-13 over the last axis, which the reference computes.
                    _ => Op::Opaque {
                        domain: domain.clone(),
                        op_type: op_type.clone(),
                        attrs: vec![("axis".into(), crate::ir::AttrValue::Int(-1))],
                        why: crate::ir::HOST_COMPUTED.into(),
                    },
                };
            }
        }
    }
    let grew = !added.is_empty();
    graph.nodes.extend(added);
    grew
}

/// Field names of ModelProto for error messages; the graph (7) is walked into.
const MODEL_FIELDS: [(u64, &str); 4] = [(1, "ir_version"), (7, "graph"), (8, "opset_import"), (2, "producer_name")];
/// Field names of GraphProto for error messages.
const GRAPH_FIELDS: [(u64, &str); 6] =
    [(1, "node"), (5, "initializer"), (11, "input"), (12, "output"), (13, "value_info"), (2, "name")];

/// Where a protobuf message stops being well-formed: the byte offset (in the file) of the
/// first field whose key, length or payload runs past the end or has an invalid wire type.
/// prost's errors name the field path but not the place; a truncated download is then
/// plain to see. `None` when the wire format itself is intact.
fn wire_error(bytes: &[u8], base: usize, fields: &[(u64, &str)]) -> Option<String> {
    use prost::encoding::decode_varint;
    let name = |f: u64| fields.iter().find(|(n, _)| *n == f).map_or(format!("field {f}"), |(_, s)| s.to_string());
    let mut pos = 0usize;
    while pos < bytes.len() {
        let start = pos;
        let mut buf = &bytes[pos..];
        let Ok(key) = decode_varint(&mut buf) else {
            return Some(format!("byte {}: a field key is cut off", base + start));
        };
        let (field, wire) = (key >> 3, key & 7);
        let size = match wire {
            0 => match decode_varint(&mut buf) {
                Ok(_) => 0,
                Err(_) => return Some(format!("byte {}: {} (an integer) is cut off", base + start, name(field))),
            },
            1 => 8,
            2 => match decode_varint(&mut buf) {
                Ok(n) => n,
                Err(_) => return Some(format!("byte {}: the length of {} is cut off", base + start, name(field))),
            },
            5 => 4,
            w => return Some(format!("byte {}: {} has invalid wire type {w}", base + start, name(field))),
        };
        pos = bytes.len() - buf.len();
        let left = bytes.len() - pos;
        if size > left as u64 {
            return Some(format!(
                "byte {}: {} declares {size} bytes but only {left} remain (is the file truncated?)",
                base + start,
                name(field)
            ));
        }
        let end = pos + size as usize;
        if wire == 2 && fields == MODEL_FIELDS && field == 7 {
            if let Some(inner) = wire_error(&bytes[pos..end], base + pos, &GRAPH_FIELDS) {
                return Some(format!("in the graph at {inner}"));
            }
        }
        pos = end;
    }
    None
}

/// The tensor type of a ValueInfoProto: `None` when it carries no tensor type.
fn value_type(vi: &proto::ValueInfoProto) -> Option<TensorType> {
    use proto::type_proto::Value;
    let Some(Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return None;
    };
    let dtype = DType::from_onnx(t.elem_type());
    let shape = t.shape.as_ref().map(|s| {
        Shape(
            s.dim
                .iter()
                .map(|d| {
                    use proto::tensor_shape_proto::dimension::Value as D;
                    // Exporters mark a dynamic dim with -1 (paddle2onnx, old tf2onnx), 0 (Keras),
                    // "?" or an empty name, as onnxruntime reads them: none of them names a
                    // size shared with another dim.
                    match &d.value {
                        Some(D::DimValue(v)) if *v > 0 => Dim::Known(*v as usize),
                        Some(D::DimParam(p)) if !p.is_empty() && p != "?" => Dim::Sym(p.clone()),
                        _ => Dim::Unknown,
                    }
                })
                .collect(),
        )
    });
    Some(TensorType { dtype, shape })
}
