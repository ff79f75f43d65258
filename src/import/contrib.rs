//! Operators onnxruntime writes into the models it saves after optimising them (the
//! `com.microsoft` FusedConv, FusedGemm and FusedMatMul of a session's
//! `optimized_model_filepath`): each is an ONNX op with an activation after it (or a scale,
//! or transposes before it), so such a model imports as the ONNX ops that were fused, which
//! Bolt plans like any other. Forms these rules do not cover (FusedMatMul's batch transposes,
//! an activation Bolt has no name for) stay with the host as operators of another domain.

use super::attrs::Attrs;
use super::proto::{attribute_proto::AttributeType, AttributeProto, GraphProto, NodeProto, TensorProto};
use std::collections::HashMap;

const DOMAIN: &str = "com.microsoft";

/// `g` with every fused onnxruntime op it can expand written as ONNX ops, and the node each
/// added node comes from (the first of an expansion keeps the fused node's name), or `None`
/// when it has none. `opset` is the model's default-domain opset (Clip took attributes
/// before 11).
pub fn expand(g: &GraphProto, opset: i64) -> Option<(GraphProto, HashMap<String, String>)> {
    let fused =
        |n: &NodeProto| n.domain() == DOMAIN && matches!(n.op_type(), "FusedConv" | "FusedGemm" | "FusedMatMul");
    if !g.node.iter().any(fused) {
        return None;
    }
    let mut out = g.clone();
    out.node.clear();
    let mut origin = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        let expanded = if fused(n) { expand_node(g, n, i, opset, &mut out.initializer) } else { None };
        match expanded {
            Some(nodes) => {
                for m in nodes.iter().filter(|m| m.name() != n.name()) {
                    origin.insert(m.name().to_string(), n.name().to_string());
                }
                out.node.extend(nodes)
            }
            None => out.node.push(n.clone()),
        }
    }
    Some((out, origin))
}

fn expand_node(
    g: &GraphProto,
    n: &NodeProto,
    index: usize,
    opset: i64,
    inits: &mut Vec<TensorProto>,
) -> Option<Vec<NodeProto>> {
    let name = if n.name().is_empty() { format!("{}_{index}", n.op_type()) } else { n.name().to_string() };
    let [y] = &n.output[..] else { return None };
    let a = Attrs::new(n);
    let mut nodes = Vec::new();
    // The fused op's own attributes, without the activation's.
    let own = |keep: &dyn Fn(&str) -> bool| n.attribute.iter().filter(|t| keep(t.name())).cloned().collect::<Vec<_>>();
    let (activation, params): (Option<String>, Vec<f32>) = match n.op_type() {
        "FusedMatMul" => (None, vec![]),
        "FusedGemm" => {
            let p = ["activation_alpha", "activation_beta", "activation_gamma"];
            let params = p.iter().map_while(|k| a.float_or(k, f32::NAN).ok().filter(|v| !v.is_nan())).collect();
            (string_attr(n, "activation"), params)
        }
        _ => (string_attr(n, "activation"), a.floats("activation_params").ok().flatten().unwrap_or_default()),
    };
    let last = match n.op_type() {
        "FusedConv" => {
            let mut conv = proto_node(&name, "Conv", n.input.iter().take(3).cloned().collect());
            conv.attribute = own(&|k| !k.starts_with("activation"));
            let t = conv.output[0].clone();
            nodes.push(conv);
            // Z, added before the activation.
            match n.input.get(3).filter(|z| !z.is_empty()) {
                Some(z) => {
                    let add = proto_node(&format!("{name}.sum"), "Add", vec![t, z.clone()]);
                    let t = add.output[0].clone();
                    nodes.push(add);
                    t
                }
                None => t,
            }
        }
        "FusedGemm" => {
            let mut gemm = proto_node(&name, "Gemm", n.input.clone());
            gemm.attribute = own(&|k| !k.starts_with("activation"));
            let t = gemm.output[0].clone();
            nodes.push(gemm);
            t
        }
        _ => {
            if a.int_or("transBatchA", 0).ok()? != 0 || a.int_or("transBatchB", 0).ok()? != 0 {
                return None;
            }
            let mut inputs = Vec::new();
            for (k, flag) in ["transA", "transB"].iter().enumerate() {
                let x = n.input.get(k)?.clone();
                if a.int_or(flag, 0).ok()? == 0 {
                    inputs.push(x);
                    continue;
                }
                // The last two axes swapped: the perm needs the operand's rank.
                let rank = rank_of(g, &x)?;
                if rank < 2 {
                    return None;
                }
                let mut perm: Vec<i64> = (0..rank as i64).collect();
                perm.swap(rank - 2, rank - 1);
                let mut t = proto_node(&format!("{name}.{flag}"), "Transpose", vec![x]);
                t.attribute.push(ints_attr("perm", perm));
                inputs.push(t.output[0].clone());
                nodes.push(t);
            }
            let mm = proto_node(&name, "MatMul", inputs);
            let t = mm.output[0].clone();
            nodes.push(mm);
            let alpha = a.float_or("alpha", 1.0).ok()?;
            if alpha != 1.0 {
                let s = format!("{name}.alpha");
                inits.push(scalar(&s, alpha));
                let mul = proto_node(&format!("{name}.scale"), "Mul", vec![t, s]);
                let t = mul.output[0].clone();
                nodes.push(mul);
                t
            } else {
                t
            }
        }
    };
    if let Some(act) = activation {
        let p = |i: usize| params.get(i).copied();
        let mut node = proto_node(&format!("{name}.activation"), &act, vec![last.clone()]);
        match act.as_str() {
            "Relu" | "Tanh" | "Sigmoid" => {}
            "LeakyRelu" => node.attribute.push(float_attr("alpha", p(0).unwrap_or(0.01))),
            "HardSigmoid" => {
                node.attribute.push(float_attr("alpha", p(0).unwrap_or(0.2)));
                node.attribute.push(float_attr("beta", p(1).unwrap_or(0.5)));
            }
            "Clip" => {
                let (lo, hi) = (p(0)?, p(1)?);
                if opset < 11 {
                    node.attribute.push(float_attr("min", lo));
                    node.attribute.push(float_attr("max", hi));
                } else {
                    let (l, h) = (format!("{name}.clip_min"), format!("{name}.clip_max"));
                    inits.push(scalar(&l, lo));
                    inits.push(scalar(&h, hi));
                    node.input.extend([l, h]);
                }
            }
            _ => return None,
        }
        nodes.push(node);
    }
    // The last node writes the fused op's output.
    nodes.last_mut().expect("a node").output[0] = y.clone();
    Some(nodes)
}

/// A default-domain node `name` writing `<name>.out`.
fn proto_node(name: &str, op: &str, input: Vec<String>) -> NodeProto {
    NodeProto {
        name: Some(name.to_string()),
        op_type: Some(op.to_string()),
        input,
        output: vec![format!("{name}.out")],
        ..Default::default()
    }
}

fn rank_of(g: &GraphProto, t: &str) -> Option<usize> {
    if let Some(i) = g.initializer.iter().find(|i| i.name() == t) {
        return Some(i.dims.len());
    }
    let vi = g.value_info.iter().chain(&g.input).chain(&g.output).find(|v| v.name() == t)?;
    use super::proto::type_proto::Value;
    match vi.r#type.as_ref()?.value.as_ref()? {
        Value::TensorType(tt) => Some(tt.shape.as_ref()?.dim.len()),
        _ => None,
    }
}

fn string_attr(n: &NodeProto, name: &str) -> Option<String> {
    n.attribute.iter().find(|a| a.name() == name).map(|a| String::from_utf8_lossy(a.s()).into_owned())
}

fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: Vec<i64>) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Ints as i32), ints: v, ..Default::default() }
}

fn scalar(name: &str, v: f32) -> TensorProto {
    TensorProto { name: Some(name.into()), data_type: Some(1), float_data: vec![v], ..Default::default() }
}
