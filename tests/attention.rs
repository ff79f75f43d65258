//! Attention cores (src/partition/attention.rs): which Softmaxes centre a
//! MatMul -> scale -> (+ mask) -> Softmax -> MatMul core in the forms exporters write, why the
//! others do not, and what a core means: `Attention::eval` (softmax(scale·Q·Kᵀ + mask)·V from
//! the typed description) against the reference executor running the original ops, on odd
//! sequence lengths, f32 and f16. The reference executor's ops are themselves checked against
//! onnxruntime (tests/conformance.rs, tests/models.rs: BERT-base).

mod common;

use bolt::ir::builder::GraphBuilder;
use bolt::ir::precision::convert_floats;
use bolt::ir::{Binary, DType, Dim, Graph, Op, Shape, Tensor};
use bolt::partition::attention::{find, Attention, MaskKind};
use std::collections::HashMap;

/// How a test graph writes the scale and the mask.
#[derive(Clone, Copy)]
enum Form {
    /// BERT / HuggingFace: MatMul -> Div(sqrt(D)) -> Add(mask [B,1,1,S]) -> Softmax.
    DivThenPaddingMask,
    /// MatMul -> Mul(1/sqrt(D)) -> Softmax, no mask.
    MulNoMask,
    /// Q and K each scaled by D^-1/4 before the MatMul, a causal [S, S] mask constant.
    ScaledOperandsCausal,
}

const B: usize = 2;
const H: usize = 3;
const D: usize = 8;

fn graph(form: Form, s: usize) -> Graph {
    let mut g = GraphBuilder::new("attn");
    let q = g.input("q", DType::F32, Shape::from_static(&[B, H, s, D]));
    let kt = g.input("kt", DType::F32, Shape::from_static(&[B, H, D, s]));
    let v = g.input("v", DType::F32, Shape::from_static(&[B, H, s, D]));
    let scores = match form {
        Form::DivThenPaddingMask => {
            let mask = g.input("mask", DType::F32, Shape::from_static(&[B, 1, 1, s]));
            let root = g.initializer("sqrt_d", Tensor::scalar_f32((D as f32).sqrt()));
            let qk = g.node("qk", Op::MatMul, &[&q, &kt]);
            let scaled = g.node("div", Op::Binary(Binary::Div), &[&qk, &root]);
            g.node("add_mask", Op::Binary(Binary::Add), &[&scaled, &mask])
        }
        Form::MulNoMask => {
            let c = g.initializer("inv_sqrt_d", Tensor::scalar_f32(1.0 / (D as f32).sqrt()));
            let qk = g.node("qk", Op::MatMul, &[&q, &kt]);
            g.node("mul", Op::Binary(Binary::Mul), &[&c, &qk])
        }
        Form::ScaledOperandsCausal => {
            let c = g.initializer("quarter", Tensor::scalar_f32((D as f32).powf(-0.25)));
            let causal: Vec<f32> = (0..s * s).map(|i| if i % s > i / s { -1e4 } else { 0.0 }).collect();
            let mask = g.initializer("causal", Tensor::from_f32(vec![s, s], causal));
            let qs = g.node("q_scale", Op::Binary(Binary::Mul), &[&q, &c]);
            let ks = g.node("k_scale", Op::Binary(Binary::Mul), &[&kt, &c]);
            let qk = g.node("qk", Op::MatMul, &[&qs, &ks]);
            g.node("add_mask", Op::Binary(Binary::Add), &[&mask, &qk])
        }
    };
    let p = g.node("softmax", Op::Softmax { axis: -1 }, &[&scores]);
    let out = g.node("pv", Op::MatMul, &[&p, &v]);
    g.output(&out);
    g.finish().unwrap()
}

use common::random_tensor as random;

fn only_core(g: &Graph) -> Attention {
    let (found, not) = find(g);
    assert!(not.is_empty(), "{not:?}");
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().unwrap()
}

#[test]
fn each_exporter_form_is_one_core_with_its_scale_and_mask() {
    let a = only_core(&graph(Form::DivThenPaddingMask, 5));
    assert_eq!(a.nodes, ["qk", "div", "add_mask", "softmax", "pv"]);
    assert!((a.scale - 1.0 / 8f64.sqrt()).abs() < 1e-6, "{}", a.scale);
    assert_eq!(a.mask, Some(("mask".to_string(), MaskKind::PerKey)));
    assert_eq!((a.q.as_str(), a.k_t.as_str(), a.v.as_str(), a.output.as_str()), ("q", "kt", "v", "pv_out"));

    let a = only_core(&graph(Form::MulNoMask, 5));
    assert_eq!(a.nodes, ["qk", "mul", "softmax", "pv"]);
    assert_eq!(a.mask, None);

    let a = only_core(&graph(Form::ScaledOperandsCausal, 5));
    assert_eq!(a.nodes, ["k_scale", "q_scale", "qk", "add_mask", "softmax", "pv"]);
    assert!((a.scale - 1.0 / 8f64.sqrt()).abs() < 1e-6, "both D^-1/4 factors: {}", a.scale);
    assert_eq!(a.mask, Some(("causal".to_string(), MaskKind::PerQueryKey)));
    assert_eq!((a.q.as_str(), a.k_t.as_str()), ("q", "kt"), "operands before their scales");
}

#[test]
fn a_core_means_what_its_ops_compute_f32_and_f16() {
    for form in [Form::DivThenPaddingMask, Form::MulNoMask, Form::ScaledOperandsCausal] {
        for s in [1usize, 7, 33] {
            for dtype in [DType::F32, DType::F16] {
                let g32 = graph(form, s);
                let g = if dtype == DType::F16 { convert_floats(&g32, DType::F16).unwrap() } else { g32 };
                let a = only_core(&g);
                let cast = |t: Tensor| Tensor::from_f64_as(dtype, t.shape.clone(), &t.to_f64_vec()).unwrap();
                let mut feeds: HashMap<String, Tensor> = HashMap::new();
                feeds.insert("q".into(), cast(random(&[B, H, s, D], 1)));
                feeds.insert("kt".into(), cast(random(&[B, H, D, s], 2)));
                feeds.insert("v".into(), cast(random(&[B, H, s, D], 3)));
                // Padding mask: the last key of batch item 1 masked out.
                let pad: Vec<f32> =
                    (0..B * s).map(|i| if i / s == 1 && i % s == s - 1 && s > 1 { -1e4 } else { 0.0 }).collect();
                feeds.insert("mask".into(), cast(Tensor::from_f32(vec![B, 1, 1, s], pad)));
                if !matches!(form, Form::DivThenPaddingMask) {
                    feeds.remove("mask");
                }
                let want = bolt::reference::run(&g, &feeds).unwrap().remove("pv_out").unwrap();
                let mask =
                    a.mask.as_ref().map(|(m, _)| feeds.get(m).cloned().unwrap_or_else(|| (*g.initializers[m]).clone()));
                let got = a.eval(&feeds["q"], &feeds["kt"], &feeds["v"], mask.as_ref()).unwrap();
                assert_eq!(got.shape, want.shape);
                assert_eq!(got.dtype(), want.dtype());
                // The reference rounds after every op in f16; the core rounds once.
                let tol = if dtype == DType::F16 { 2e-2 } else { 1e-5 };
                let (x, y) = (got.to_f32_vec(), want.to_f32_vec());
                let worst = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst <= tol, "S={s} {dtype}: max |core - ops| = {worst}");
            }
        }
    }
}

#[test]
fn softmaxes_that_are_not_cores_say_why() {
    // Softmax over the query axis.
    let mut g = graph(Form::MulNoMask, 4);
    for n in &mut g.nodes {
        if let Op::Softmax { axis } = &mut n.op {
            *axis = 2;
        }
    }
    let (found, not) = find(&g);
    assert!(found.is_empty());
    assert!(not[0].reason.contains("not the last"), "{}", not[0].reason);

    // The scores are also a graph output: a fused kernel never writes them.
    let mut g = graph(Form::DivThenPaddingMask, 4);
    let scores = g.nodes.iter().find(|n| n.name == "add_mask").unwrap().outputs[0].clone();
    g.outputs.push(scores);
    let (found, not) = find(&g);
    assert!(found.is_empty());
    assert!(not[0].reason.contains("graph output"), "{}", not[0].reason);

    // A mask that varies per query but not per key ([B, 1, S, 1]) is no common mask shape.
    let mut g = graph(Form::DivThenPaddingMask, 4);
    g.types.get_mut("mask").unwrap().shape = Some(Shape::from_static(&[B, 1, 4, 1]));
    let (found, not) = find(&g);
    assert!(found.is_empty());
    assert!(not[0].reason.contains("mask 'mask'"), "{}", not[0].reason);
}

/// BERT-base as generated by tests/python/make_models.py (HuggingFace's export form): every
/// layer's attention is one core with scale 1/8 and the [batch, 1, 1, seq] padding mask.
#[test]
fn bert_base_has_one_core_per_layer() {
    let Some(dir) = common::testdata("models/bert_base") else { return };
    let g = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
    let (found, not) = find(&g);
    assert!(not.is_empty(), "{not:?}");
    assert_eq!(found.len(), 12);
    for a in &found {
        assert!((a.scale - 0.125).abs() < 1e-9, "{}", a.scale);
        assert_eq!(a.mask.as_ref().map(|m| (m.0.as_str(), m.1)), Some(("attention_mask", MaskKind::PerKey)));
        assert_eq!(a.q_shape.len(), 4);
        assert_eq!(a.q_shape[1], Dim::Known(12));
        assert_eq!(a.q_shape[3], Dim::Known(64));
    }
}

/// PP-OCRv4's recogniser (paddle2onnx, from the rapidocr wheel): its SVTR blocks' attention
/// scales Q before the MatMul; the model's last Softmax (a graph output) is no core. On a
/// random image, each core's `eval` on the Q, Kᵀ, V the reference executor computed equals the
/// reference's own output of the core's ops.
#[test]
fn ppocrv4_rec_svtr_attention_cores() {
    let Some(dir) = common::testdata("models/ppocrv4_rec") else { return };
    let mut g = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
    let (found, not) = find(&g);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(not.len(), 1);
    assert!(not[0].reason.contains("graph output"), "{}", not[0].reason);
    for a in &found {
        assert!(
            g.nodes.iter().any(|n| n.name == a.nodes[0] && matches!(n.op, Op::Binary(Binary::Mul))),
            "Q scaled first"
        );
        assert!(a.mask.is_none());
    }
    for a in &found {
        for t in [&a.q, &a.k_t, &a.v, &a.output] {
            g.outputs.push(t.clone());
        }
    }
    let x = random(&[1, 3, 48, 160], 9);
    let input = g.inputs[0].clone();
    let outs = bolt::reference::run(&g, &HashMap::from([(input, x)])).unwrap();
    for a in &found {
        let got = a.eval(&outs[&a.q], &outs[&a.k_t], &outs[&a.v], None).unwrap();
        let want = &outs[&a.output];
        assert_eq!(got.shape, want.shape);
        let worst = got.to_f32_vec().iter().zip(want.to_f32_vec()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        println!("{}: max |core - ops| = {worst:.2e}", a.nodes.join(" -> "));
        assert!(worst < 1e-4, "{worst}");
    }
}
