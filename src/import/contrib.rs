//! Operators onnxruntime writes into the models it saves after optimising them (a session's
//! `optimized_model_filepath`, what many deployed models are): the `com.microsoft` FusedConv,
//! FusedGemm and FusedMatMul (an ONNX op with an activation after it, or a scale, or
//! transposes before it); Gelu, BiasGelu, FastGelu and QuickGelu (GELU's and SiLU's fusions);
//! SkipLayerNormalization and SkipSimplifiedLayerNormalization (a residual sum, then a layer or
//! RMS normalisation); and the two it registers in ONNX's own domain: LayerNormalization at
//! opsets before 17 (its contrib version, whose inputs, outputs, attributes and meaning
//! ONNX's LayerNormalization-17 took over) and SimplifiedLayerNormalization (ONNX's
//! RMSNormalization-23). Such a model imports as the ONNX ops that were fused, which Bolt
//! plans like any other. Forms these rules do not cover (FusedMatMul's batch transposes, an
//! activation Bolt has no name for, an output only training reads) stay with the host as
//! operators of another domain.

use super::attrs::Attrs;
use super::proto::{attribute_proto::AttributeType, AttributeProto, GraphProto, NodeProto, TensorProto};
use std::collections::HashMap;

const DOMAIN: &str = "com.microsoft";

/// ONNX's first opset with LayerNormalization, the op onnxruntime's contrib version became.
const LAYER_NORM_OPSET: i64 = 17;
/// ONNX's first opset with Gelu (GELU's fusions are written as it).
const GELU_OPSET: i64 = 20;
/// ONNX's first opset with RMSNormalization (onnxruntime's SimplifiedLayerNormalization).
const RMS_NORM_OPSET: i64 = 23;
/// ONNX's first opset with Einsum (a FusedMatMul's transposed operand of unknown rank).
const EINSUM_OPSET: i64 = 12;
/// ONNX's first opset with CastLike (a fused op's constant given its input's type).
const CAST_LIKE_OPSET: i64 = 15;

/// A model graph with onnxruntime's fused ops written as ONNX ops.
pub struct Expanded {
    pub graph: GraphProto,
    /// Each added node's fused node, by name (the first node of an expansion keeps the fused
    /// node's name and is not listed).
    pub origin: HashMap<String, String>,
    pub notes: Notes,
}

/// What the importer reads differently in an expanded graph, by node index.
#[derive(Default)]
pub struct Notes {
    /// Nodes read as of a later opset than the model's: ONNX ops an expansion wrote that the
    /// model's opset does not have yet.
    pub at_opset: HashMap<usize, i64>,
    /// Fused ops left as they are, and why (the host's reason in reports).
    pub kept: HashMap<usize, &'static str>,
}

/// Why a fused op of a form no rule here covers stays onnxruntime's.
const NOT_COVERED: &str =
    "one of onnxruntime's fused ops in a form Bolt does not read as ONNX ops (an input, output or attribute its rules do not cover): left to the host";

/// The opset default-domain node `n` of a model at `opset` is checked and read as of:
/// onnxruntime's contrib LayerNormalization (ONNX domain, before opset 17) as ONNX's
/// LayerNormalization-17, which has its inputs, outputs, attributes and meaning; else `opset`.
pub fn node_opset(n: &NodeProto, opset: i64) -> i64 {
    if n.op_type() == "LayerNormalization" && opset < LAYER_NORM_OPSET {
        LAYER_NORM_OPSET
    } else {
        opset
    }
}

/// Whether default-domain `n` is one of onnxruntime's own operators, which ONNX's schemas do
/// not describe (a SimplifiedLayerNormalization whose inverse-RMS output is read: not
/// expanded, the host's).
pub fn ort_own(n: &NodeProto) -> bool {
    n.op_type() == "SimplifiedLayerNormalization"
}

/// `g` with every fused onnxruntime op it can expand written as ONNX ops, or `None` when it
/// has none. `opset` is the model's default-domain opset (Clip took attributes before 11).
pub fn expand(g: &GraphProto, opset: i64) -> Option<Expanded> {
    let default_domain = |n: &NodeProto| n.domain().is_empty() || n.domain() == "ai.onnx";
    let fused = |n: &NodeProto| {
        (n.domain() == DOMAIN
            && matches!(
                n.op_type(),
                "FusedConv"
                    | "FusedGemm"
                    | "FusedMatMul"
                    | "Gelu"
                    | "BiasGelu"
                    | "FastGelu"
                    | "QuickGelu"
                    | "SkipLayerNormalization"
                    | "SkipSimplifiedLayerNormalization"
                    | "Attention"
            ))
            || (default_domain(n) && n.op_type() == "SimplifiedLayerNormalization")
    };
    if !g.node.iter().any(fused) {
        return None;
    }
    let mut out = g.clone();
    out.node.clear();
    let mut origin = HashMap::new();
    let mut notes = Notes::default();
    for (i, n) in g.node.iter().enumerate() {
        if !fused(n) {
            out.node.push(n.clone());
            continue;
        }
        match expand_node(g, n, i, opset, &mut out.initializer) {
            Ok(nodes) => {
                for (m, since) in nodes {
                    if m.name() != n.name() {
                        origin.insert(m.name().to_string(), n.name().to_string());
                    }
                    if since > opset {
                        notes.at_opset.insert(out.node.len(), since);
                    }
                    out.node.push(m);
                }
            }
            Err(why) => {
                notes.kept.insert(out.node.len(), why);
                out.node.push(n.clone());
            }
        }
    }
    Some(Expanded { graph: out, origin, notes })
}

/// The ONNX nodes of fused node `n`, each with the opset it needs (the model's unless an op
/// of a later one), or why no rule takes it.
fn expand_node(
    g: &GraphProto,
    n: &NodeProto,
    index: usize,
    opset: i64,
    inits: &mut Vec<TensorProto>,
) -> Result<Vec<(NodeProto, i64)>, &'static str> {
    match n.op_type() {
        "FusedConv" | "FusedGemm" | "FusedMatMul" => {
            let nodes = expand_fused_anchor(g, n, index, opset, inits).ok_or(NOT_COVERED)?;
            let since = |m: &NodeProto| if m.op_type() == "Einsum" { opset.max(EINSUM_OPSET) } else { opset };
            Ok(nodes.into_iter().map(|m| (since(&m), m)).map(|(since, m)| (m, since)).collect())
        }
        "Attention" if n.domain() == DOMAIN => match attention_kept(g, n, opset) {
            Some(why) => Err(why),
            None => expand_attention(g, n, index, opset, inits).ok_or(NOT_COVERED),
        },
        _ => expand_transformer_op(n, index, opset, inits).ok_or(NOT_COVERED),
    }
}

/// Why onnxruntime's Attention `n` stays onnxruntime's, for the forms left to it by design.
fn attention_kept(g: &GraphProto, n: &NodeProto, opset: i64) -> Option<&'static str> {
    let given = |v: &[String], i: usize| v.get(i).is_some_and(|x| !x.is_empty());
    if given(&n.input, 4) || given(&n.input, 6) || given(&n.output, 1) {
        return Some("onnxruntime's Attention with a KV cache (past / present): left to the host");
    }
    if given(&n.input, 5) {
        return Some("onnxruntime's Attention with an attention bias (relative positions): left to the host");
    }
    if Attrs::new(n).int_or("do_rotary", 0).is_ok_and(|r| r != 0) {
        return Some("onnxruntime's Attention with rotary embeddings (do_rotary): left to the host");
    }
    if given(&n.input, 3) && rank_of(g, &n.input[3]).is_some_and(|r| r == 1) {
        return Some("onnxruntime's Attention with key lengths as its mask (a 1-D mask_index): left to the host");
    }
    // Slices take their bounds as inputs from opset 10.
    (opset < 10).then_some("onnxruntime's Attention in a model before opset 10: left to the host")
}

/// ONNX's first opset with Attention (what onnxruntime's fused self-attention is written as).
const ATTENTION_OPSET: i64 = 23;

/// onnxruntime's fused self-attention (com.microsoft Attention: BERT-style models through its
/// transformer optimiser): the packed Q/K/V projection (one MatMul, its bias), sliced into Q, K
/// and V, then ONNX's Attention over them (the heads, the scale, causal for `unidirectional`),
/// with the raw attention mask (2-D [batch, keys] or 3-D [batch, queries, keys], 1 = attend)
/// as the additive mask onnxruntime applies: `mask_filter_value` where it is 0, which a
/// fully masked row shifts away as onnxruntime's kernel does. Other forms stay onnxruntime's
/// ([`attention_kept`] says why).
fn expand_attention(
    g: &GraphProto,
    n: &NodeProto,
    index: usize,
    opset: i64,
    inits: &mut Vec<TensorProto>,
) -> Option<Vec<(NodeProto, i64)>> {
    let name = if n.name().is_empty() { format!("{}_{index}", n.op_type()) } else { n.name().to_string() };
    let a = Attrs::new(n);
    let input = |i: usize| n.input.get(i).filter(|x| !x.is_empty()).cloned();
    let output = |i: usize| n.output.get(i).filter(|y| !y.is_empty()).cloned();
    // The forms `attention_kept` names are not here.
    if output(2).is_some() {
        return None;
    }
    let heads = a.int("num_heads").ok()??;
    let (x, w, y) = (input(0)?, input(1)?, output(0)?);
    let dims = g.initializer.iter().find(|t| t.name() == w)?.dims.clone();
    let [_, total] = dims[..] else { return None };
    let sizes = match a.ints("qkv_hidden_sizes").ok()? {
        Some(s) => s,
        None if total % 3 == 0 => vec![total / 3; 3],
        None => return None,
    };
    let [hq, hk, hv] = sizes[..] else { return None };
    if heads < 1 || hq != hk || hq % heads != 0 || hv % heads != 0 || hq + hk + hv != total {
        return None;
    }
    let mut nodes: Vec<(NodeProto, i64)> = Vec::new();
    let i64s = |inits: &mut Vec<TensorProto>, what: &str, v: Vec<i64>| -> String {
        let t = format!("{name}.{what}");
        inits.push(TensorProto {
            name: Some(t.clone()),
            dims: vec![v.len() as i64],
            data_type: Some(7),
            int64_data: v,
            ..Default::default()
        });
        t
    };
    let mm = proto_node(&name, "MatMul", vec![x.clone(), w]);
    let mut qkv = mm.output[0].clone();
    nodes.push((mm, opset));
    if let Some(b) = input(2) {
        let add = proto_node(&format!("{name}.bias"), "Add", vec![qkv, b]);
        qkv = add.output[0].clone();
        nodes.push((add, opset));
    }
    let axes = i64s(inits, "qkv_axis", vec![-1]);
    let mut parts = Vec::new();
    for (what, start, end) in [("q", 0, hq), ("k", hq, hq + hk), ("v", hq + hk, total)] {
        let (s0, s1) =
            (i64s(inits, &format!("{what}_start"), vec![start]), i64s(inits, &format!("{what}_end"), vec![end]));
        let slice = proto_node(&format!("{name}.{what}"), "Slice", vec![qkv.clone(), s0, s1, axes.clone()]);
        parts.push(slice.output[0].clone());
        nodes.push((slice, opset));
    }
    if let Some(mask) = input(3) {
        // Rank 2 ([batch, keys]) or 3 ([batch, queries, keys]); 1-D key lengths are not a mask.
        let rank = rank_of(g, &mask).filter(|r| (2..=3).contains(r))?;
        let filter = a.float_or("mask_filter_value", -10000.0).ok()?;
        let zero = format!("{name}.mask_zero");
        inits.push(TensorProto {
            name: Some(zero.clone()),
            data_type: Some(6),
            int32_data: vec![0],
            ..Default::default()
        });
        let kept = proto_node(&format!("{name}.mask_kept"), "Greater", vec![mask, zero]);
        let typed = |what: &str, v: f32, nodes: &mut Vec<(NodeProto, i64)>, inits: &mut Vec<TensorProto>| {
            let c = format!("{name}.{what}_value");
            inits.push(scalar(&c, v));
            let like = proto_node(&format!("{name}.{what}"), "CastLike", vec![c, x.clone()]);
            let t = like.output[0].clone();
            nodes.push((like, opset.max(CAST_LIKE_OPSET)));
            t
        };
        let (on, off) = (typed("attend", 0.0, &mut nodes, inits), typed("masked", filter, &mut nodes, inits));
        let bias = proto_node(&format!("{name}.mask_bias"), "Where", vec![kept.output[0].clone(), on, off]);
        nodes.push((kept, opset));
        // Heads (and, for a 2-D mask, queries) broadcast.
        let axes: Vec<i64> = if rank == 2 { vec![1, 2] } else { vec![1] };
        let mut unsq = proto_node(&format!("{name}.mask_4d"), "Unsqueeze", vec![bias.output[0].clone()]);
        if opset >= 13 {
            unsq.input.push(i64s(inits, "mask_axes", axes));
        } else {
            unsq.attribute.push(ints_attr("axes", axes));
        }
        parts.push(unsq.output[0].clone());
        nodes.push((bias, opset));
        nodes.push((unsq, opset));
    }
    let mut att = proto_node(&format!("{name}.attention"), "Attention", parts);
    att.attribute.push(int_attr("q_num_heads", heads));
    att.attribute.push(int_attr("kv_num_heads", heads));
    if a.int_or("unidirectional", 0).ok()? != 0 {
        att.attribute.push(int_attr("is_causal", 1));
    }
    let scale = a.float_or("scale", 0.0).ok()?;
    if scale != 0.0 {
        att.attribute.push(float_attr("scale", scale));
    }
    att.output = vec![y];
    nodes.push((att, opset.max(ATTENTION_OPSET)));
    Some(nodes)
}

/// GELU's and SiLU's fusions and the normalisations after a residual sum.
fn expand_transformer_op(
    n: &NodeProto,
    index: usize,
    opset: i64,
    inits: &mut Vec<TensorProto>,
) -> Option<Vec<(NodeProto, i64)>> {
    let name = if n.name().is_empty() { format!("{}_{index}", n.op_type()) } else { n.name().to_string() };
    let a = Attrs::new(n);
    let input = |i: usize| n.input.get(i).filter(|x| !x.is_empty()).cloned();
    let output = |i: usize| n.output.get(i).filter(|y| !y.is_empty()).cloned();
    let mut nodes: Vec<(NodeProto, i64)> = Vec::new();
    // `x + b` where a bias is given (the first node keeps the fused node's name).
    let add = |nodes: &mut Vec<(NodeProto, i64)>, x: String, b: Option<String>, what: &str| -> String {
        match b {
            None => x,
            Some(b) => {
                let node_name = if nodes.is_empty() { name.clone() } else { format!("{name}.{what}") };
                let node = proto_node(&node_name, "Add", vec![x, b]);
                let y = node.output[0].clone();
                nodes.push((node, opset));
                y
            }
        }
    };
    let gelu = |nodes: &mut Vec<(NodeProto, i64)>, x: String, tanh: bool| {
        let node_name = if nodes.is_empty() { name.clone() } else { format!("{name}.gelu") };
        let mut node = proto_node(&node_name, "Gelu", vec![x]);
        if tanh {
            node.attribute.push(string_attr_proto("approximate", "tanh"));
        }
        nodes.push((node, opset.max(GELU_OPSET)));
    };
    match (n.domain(), n.op_type()) {
        (DOMAIN, "Gelu") => gelu(&mut nodes, input(0)?, false),
        (DOMAIN, "BiasGelu") => {
            let x = add(&mut nodes, input(0)?, Some(input(1)?), "bias");
            gelu(&mut nodes, x, false);
        }
        (DOMAIN, "FastGelu") => {
            let x = add(&mut nodes, input(0)?, input(1), "bias");
            gelu(&mut nodes, x, true);
        }
        (DOMAIN, "QuickGelu") => {
            // x * sigmoid(alpha * x); alpha 1 (what the fusion of SiLU writes) needs no scale.
            let x = input(0)?;
            let alpha = a.float_or("alpha", 1.702).ok()?;
            let scaled = if alpha == 1.0 {
                x.clone()
            } else {
                let c = format!("{name}.alpha");
                inits.push(scalar(&c, alpha));
                let like = proto_node(&format!("{name}.alpha_typed"), "CastLike", vec![c, x.clone()]);
                let mul = proto_node(&format!("{name}.scaled"), "Mul", vec![x.clone(), like.output[0].clone()]);
                let y = mul.output[0].clone();
                nodes.push((like, opset.max(CAST_LIKE_OPSET)));
                nodes.push((mul, opset));
                y
            };
            let sig = proto_node(&format!("{name}.sigmoid"), "Sigmoid", vec![scaled]);
            let mul = proto_node(&name, "Mul", vec![x, sig.output[0].clone()]);
            nodes.push((sig, opset));
            nodes.push((mul, opset));
        }
        (DOMAIN, "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization") => {
            let simplified = n.op_type() == "SkipSimplifiedLayerNormalization";
            // Inputs: input, skip, gamma, then beta and bias (LayerNorm) or bias (RMS).
            let (gamma, beta, bias) =
                if simplified { (input(2)?, None, input(3)) } else { (input(2)?, input(3), input(4)) };
            // RMSNormalization has no statistics outputs.
            if simplified && (output(1).is_some() || output(2).is_some()) {
                return None;
            }
            let sum = proto_node(&name, "Add", vec![input(0)?, input(1)?]);
            let mut s = sum.output[0].clone();
            nodes.push((sum, opset));
            s = add(&mut nodes, s, bias, "bias");
            // The residual sum, an output of its own (the next block's skip).
            if let Some(y3) = output(3) {
                let last = nodes.last_mut().expect("the sum");
                last.0.output[0] = y3.clone();
                s = y3;
            }
            let epsilon = a.float_or("epsilon", 1e-5).ok()?;
            let (op, since) = if simplified {
                ("RMSNormalization", RMS_NORM_OPSET)
            } else {
                ("LayerNormalization", LAYER_NORM_OPSET)
            };
            let mut inputs = vec![s, gamma];
            inputs.extend(beta);
            let mut norm = proto_node(&format!("{name}.norm"), op, inputs);
            norm.attribute.push(float_attr("epsilon", epsilon));
            norm.output = vec![output(0)?];
            if !simplified {
                // LayerNormalization's Mean and InvStdDev are SkipLayerNormalization's too.
                for k in [1, 2] {
                    if let Some(y) = output(k) {
                        norm.output.resize(k, String::new());
                        norm.output.push(y);
                    }
                }
            }
            nodes.push((norm, opset.max(since)));
            return Some(nodes);
        }
        ("" | "ai.onnx", "SimplifiedLayerNormalization") => {
            if output(1).is_some() {
                return None;
            }
            let mut norm = n.clone();
            norm.op_type = Some("RMSNormalization".into());
            norm.domain = None;
            norm.output.truncate(1);
            nodes.push((norm, opset.max(RMS_NORM_OPSET)));
            return Some(nodes);
        }
        _ => return None,
    }
    // The last node writes the fused op's output.
    nodes.last_mut()?.0.output[0] = output(0)?;
    Some(nodes)
}

/// FusedConv, FusedGemm, FusedMatMul: the ONNX op, then the activation.
fn expand_fused_anchor(
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
            let (trans_a, trans_b) = (a.int_or("transA", 0).ok()? != 0, a.int_or("transB", 0).ok()? != 0);
            let (x, w) = (n.input.first()?.clone(), n.input.get(1)?.clone());
            let ranks = (rank_of(g, &x), rank_of(g, &w));
            let known = |t: bool, r: Option<usize>| !t || r.is_some_and(|r| r >= 2);
            let mm = if known(trans_a, ranks.0) && known(trans_b, ranks.1) {
                let mut inputs = Vec::new();
                for (x, flag, t, rank) in [(x, "transA", trans_a, ranks.0), (w, "transB", trans_b, ranks.1)] {
                    if !t {
                        inputs.push(x);
                        continue;
                    }
                    // The last two axes swapped.
                    let rank = rank?;
                    let mut perm: Vec<i64> = (0..rank as i64).collect();
                    perm.swap(rank - 2, rank - 1);
                    let mut t = proto_node(&format!("{name}.{flag}"), "Transpose", vec![x]);
                    t.attribute.push(ints_attr("perm", perm));
                    inputs.push(t.output[0].clone());
                    nodes.push(t);
                }
                proto_node(&name, "MatMul", inputs)
            } else {
                // A rank the file does not say (no value_info): the product over the last two
                // axes as an Einsum, whose ellipsis takes the batch axes of any rank.
                let side = |t: bool, rows: &str, cols: &str| {
                    format!("...{}", if t { cols.to_owned() + rows } else { rows.to_owned() + cols })
                };
                let mut e = proto_node(&name, "Einsum", vec![x, w]);
                let equation = format!("{},{}->...ij", side(trans_a, "i", "k"), side(trans_b, "k", "j"));
                e.attribute.push(string_attr_proto("equation", &equation));
                e
            };
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

fn string_attr_proto(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: Vec<i64>) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(AttributeType::Ints as i32), ints: v, ..Default::default() }
}

fn scalar(name: &str, v: f32) -> TensorProto {
    TensorProto { name: Some(name.into()), data_type: Some(1), float_data: vec![v], ..Default::default() }
}
