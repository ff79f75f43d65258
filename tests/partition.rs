//! The partitioner's patterns, safety rules and fallbacks, one test each, on graphs built in
//! code; then the real models (when test data is generated).

mod common;

use bolt::ir::builder::GraphBuilder;
use bolt::ir::*;
use bolt::partition::{partition, Activation, AnchorKind, BiasTerm, ResidualAt};

fn f32s(shape: &[usize], v: f32) -> Tensor {
    Tensor::from_f32(shape.to_vec(), vec![v; shape.iter().product()])
}

fn scalar(b: &mut GraphBuilder, name: &str, v: f32) -> String {
    b.initializer(name, Tensor::scalar_f32(v))
}

/// x[4,8] @ w[8,16] (+ bias[16]) feeding `tail`, which returns the tensor to output.
fn gemm_graph(tail: impl FnOnce(&mut GraphBuilder, String) -> String) -> Graph {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let w = b.initializer("w", f32s(&[8, 16], 0.1));
    let y = b.node("mm", Op::MatMul, &[&x, &w]);
    let out = tail(&mut b, y);
    b.output(&out);
    b.finish().unwrap()
}

fn bias_add(b: &mut GraphBuilder, y: String) -> String {
    let bias = b.initializer("bias", f32s(&[16], 0.5));
    b.node("add_bias", Op::Binary(Binary::Add), &[&y, &bias])
}

/// `+ bias`, then GELU as exporters write it: `x * (1 + Erf(x / sqrt(2))) * 0.5`.
fn bias_and_erf_gelu(b: &mut GraphBuilder, y: String) -> String {
    let y = bias_add(b, y);
    let sqrt2 = scalar(b, "sqrt2", std::f32::consts::SQRT_2);
    let one = scalar(b, "one", 1.0);
    let half = scalar(b, "half", 0.5);
    let d = b.node("div", Op::Binary(Binary::Div), &[&y, &sqrt2]);
    let e = b.node("erf", Op::Unary(Unary::Erf), &[&d]);
    let a = b.node("add1", Op::Binary(Binary::Add), &[&e, &one]);
    let m = b.node("mul_x", Op::Binary(Binary::Mul), &[&y, &a]);
    b.node("mul_half", Op::Binary(Binary::Mul), &[&m, &half])
}

#[test]
fn matmul_bias_and_erf_gelu_formula_fuse_into_one_partition() {
    let g = gemm_graph(bias_and_erf_gelu);
    let p = partition(&g);
    assert_eq!(p.partitions.len(), 1, "{:#?}", p);
    let part = &p.partitions[0];
    assert_eq!(part.kind, AnchorKind::MatMul);
    assert_eq!(part.epilogue.form().bias, vec![BiasTerm { tensor: "bias".into(), scale: 1.0 }]);
    assert_eq!(part.epilogue.form().activation, Some(Activation::GeluErf));
    assert_eq!(part.nodes.len(), 7);
    assert_eq!(part.output, "mul_half_out");
    assert!(p.host.is_empty(), "{:?}", p.host);
}

/// At f16 the formula's constants are f16's (sqrt(2) is 1.4140625, 1e-4 off): still GELU, as
/// BERT-base's f16 build needs (found on an H100: with a tolerance of f32's constants the GELU
/// ran as a kernel of its own after each intermediate GEMM, 12 x 48 us at batch 32).
#[test]
fn the_erf_gelu_formula_in_f16_fuses_too() {
    let g = gemm_graph(bias_and_erf_gelu);
    let g16 = bolt::ir::precision::convert_floats(&g, DType::F16).unwrap();
    let p = partition(&g16);
    assert_eq!(p.partitions.len(), 1, "{:#?}", p);
    assert_eq!(p.partitions[0].epilogue.form().activation, Some(Activation::GeluErf));
    assert_eq!(p.partitions[0].nodes.len(), 7);
    // A scale that f16 keeps (1.001 is 1.0009765625 there) is still no activation.
    let g = gemm_graph(|b, y| {
        let s = scalar(b, "s", 1.001);
        b.node("scale", Op::Binary(Binary::Mul), &[&y, &s])
    });
    let p = partition(&bolt::ir::precision::convert_floats(&g, DType::F16).unwrap());
    assert_eq!(p.partitions[0].epilogue.form().activation, None, "{:#?}", p.partitions[0]);
}

#[test]
fn x_times_sigmoid_x_is_silu_not_sigmoid() {
    let g = gemm_graph(|b, y| {
        let s = b.node("sig", Op::Unary(Unary::Sigmoid), &[&y]);
        b.node("mul", Op::Binary(Binary::Mul), &[&y, &s])
    });
    let p = partition(&g);
    assert_eq!(p.partitions[0].epilogue.form().activation, Some(Activation::Silu));
    assert_eq!(p.partitions[0].output, "mul_out");
}

#[test]
fn hardswish_written_with_clip_is_recognised() {
    let g = gemm_graph(|b, y| {
        let (three, zero, six) = (scalar(b, "three", 3.0), scalar(b, "zero", 0.0), scalar(b, "six", 6.0));
        let a = b.node("add3", Op::Binary(Binary::Add), &[&y, &three]);
        let c = b.node("clip", Op::Clip, &[&a, &zero, &six]);
        let m = b.node("mul", Op::Binary(Binary::Mul), &[&y, &c]);
        b.node("div6", Op::Binary(Binary::Div), &[&m, &six])
    });
    assert_eq!(partition(&g).partitions[0].epilogue.form().activation, Some(Activation::HardSwish));
}

#[test]
fn adding_a_tiny_constant_is_not_an_activation() {
    // Mel front ends guard a log with `x + 2^-24`: close to x everywhere but at 0, where the
    // log tells them apart, so it must not become a leaky ReLU of slope 0.99999994.
    let g = gemm_graph(|b, y| {
        let guard = scalar(b, "guard", 2f32.powi(-24));
        let a = b.node("guard_add", Op::Binary(Binary::Add), &[&y, &guard]);
        b.node("log", Op::Unary(Unary::Log), &[&a])
    });
    let p = partition(&g);
    assert_eq!(p.partitions[0].epilogue.form().activation, None, "{:#?}", p.partitions[0]);
}

#[test]
fn scaling_by_nearly_one_is_not_an_activation() {
    // `x * 1.00001` is within 1e-4 of x: a leaky ReLU of slope 1.00001 would drop the scale of
    // every positive value. It is a scale the epilogue applies, not an activation.
    let g = gemm_graph(|b, y| {
        let s = scalar(b, "nearly_one", 1.00001);
        b.node("scale", Op::Binary(Binary::Mul), &[&y, &s])
    });
    let p = partition(&g);
    let form = p.partitions[0].epilogue.form();
    assert!(!matches!(form.activation, Some(Activation::LeakyRelu { .. })), "{:#?}", p.partitions[0]);
    let x = common::random_tensor(&[4, 8], 3);
    let inputs = std::collections::HashMap::from([("x".to_string(), x)]);
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let planned = bolt::plan::plan(&g).unwrap();
    let got = bolt::reference::run(&planned.graph, &inputs).unwrap();
    let out = &g.outputs[0];
    for (a, w) in got[out].to_f64_vec().iter().zip(want[out].to_f64_vec()) {
        assert!((a - w).abs() <= 1e-6 * (1.0 + w.abs()), "{a} vs {w}");
    }
}

#[test]
fn a_tensor_read_outside_the_chain_is_never_fused_away() {
    // The MatMul output is also a graph output: the bias add must stay outside.
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let w = b.initializer("w", f32s(&[8, 16], 0.1));
    let y = b.node("mm", Op::MatMul, &[&x, &w]);
    let z = bias_add(&mut b, y.clone());
    b.output(&y);
    b.output(&z);
    let p = partition(&b.finish().unwrap());
    assert_eq!(p.partitions[0].nodes, vec!["mm"]);
    assert!(p.partitions[0].epilogue.form().bias.is_empty());
    assert!(p.host.iter().any(|h| h.node == "add_bias"));
}

#[test]
fn conv_batchnorm_residual_relu_is_one_partition() {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[1, 8, 6, 6]));
    let r = b.input("r", DType::F32, Shape::from_static(&[1, 8, 6, 6]));
    let w = b.initializer("w", f32s(&[8, 8, 3, 3], 0.1));
    let conv = Op::Conv {
        window: Window {
            kernel_shape: Some(vec![3, 3]),
            strides: None,
            pads: Some(vec![1, 1, 1, 1]),
            dilations: None,
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    };
    let y = b.node("conv", conv, &[&x, &w]);
    let stats: Vec<String> =
        ["scale", "bias", "mean", "var"].iter().map(|n| b.initializer(n, f32s(&[8], 1.0))).collect();
    let y = b.node(
        "bn",
        Op::BatchNormalization { epsilon: 1e-5, momentum: 0.9, training_mode: false },
        &[&y, &stats[0], &stats[1], &stats[2], &stats[3]],
    );
    let y = b.node("add", Op::Binary(Binary::Add), &[&y, &r]);
    let y = b.node("relu", Op::Unary(Unary::Relu), &[&y]);
    b.output(&y);
    let p = partition(&b.finish().unwrap());
    assert_eq!(p.partitions.len(), 1);
    let e = &p.partitions[0].epilogue;
    assert_eq!(e.folds, vec![bolt::partition::ChannelFold::BatchNorm("bn".into())]);
    let src = e.form().source.as_ref().unwrap();
    assert_eq!((src.tensor.as_str(), src.at), ("r", ResidualAt::BeforeActivation));
    assert_eq!(e.form().activation, Some(Activation::Relu));
}

/// The residual fuses after the activation; the Cast past it does not: the kernels read the
/// source C in the output's type (CUTLASS's ElementC is ElementD), and the residual is of the
/// operands' type, so the Cast stays a node of its own.
#[test]
fn residual_after_activation_fuses_and_a_cast_past_it_stays_out() {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let r = b.input("r", DType::F32, Shape::from_static(&[4, 16]));
    let w = b.initializer("w", f32s(&[8, 16], 0.1));
    let y = b.node("mm", Op::MatMul, &[&x, &w]);
    let y = bias_add(&mut b, y);
    let y = b.node("tanh", Op::Unary(Unary::Tanh), &[&y]);
    let y = b.node("res", Op::Binary(Binary::Add), &[&y, &r]);
    let y = b.node("cast", Op::Cast { to: DType::F16, saturate: true }, &[&y]);
    b.output(&y);
    let p = partition(&b.finish().unwrap());
    let e = &p.partitions[0].epilogue;
    assert_eq!(e.form().source.as_ref().map(|s| s.at), Some(ResidualAt::AfterActivation));
    assert_eq!(e.output_dtype, DType::F32);
    assert_eq!(p.partitions[0].nodes.len(), 4, "mm, bias, tanh, res; not the cast");
}

/// With no source read, the output Cast fuses: the kernel writes the cast type.
#[test]
fn an_output_cast_fuses_when_the_kernel_reads_no_source() {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let w = b.initializer("w", f32s(&[8, 16], 0.1));
    let y = b.node("mm", Op::MatMul, &[&x, &w]);
    let y = bias_add(&mut b, y);
    let y = b.node("cast", Op::Cast { to: DType::F16, saturate: true }, &[&y]);
    b.output(&y);
    let p = partition(&b.finish().unwrap());
    assert_eq!(p.partitions[0].epilogue.output_dtype, DType::F16);
    assert_eq!(p.partitions[0].nodes.len(), 3, "mm, bias, cast");
}

/// The kernels read the bias in the output's type too: a Cast to f16 fuses only where the bias
/// is exactly an f16 value. The model adds the bias in f32 and rounds the sum; a bias of
/// 1000.3 rounded first (to 1000.5) moves an output near 0.3 by 0.2, where the sum cancels.
/// So the Cast stays a node of its own, and the planned graph (run on the reference
/// executor) rounds where the model does.
#[test]
fn an_output_cast_stays_out_when_the_bias_does_not_fit_its_type() {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let w = b.initializer("w", f32s(&[8, 16], 0.1));
    let bias = b.initializer("bias", f32s(&[16], 1000.3));
    let y = b.node("mm", Op::MatMul, &[&x, &w]);
    let y = b.node("add", Op::Binary(Binary::Add), &[&y, &bias]);
    let y = b.node("cast", Op::Cast { to: DType::F16, saturate: true }, &[&y]);
    b.output(&y);
    let g = b.finish().unwrap();
    let p = partition(&g);
    assert_eq!(p.partitions[0].epilogue.output_dtype, DType::F32);
    assert_eq!(p.partitions[0].nodes, ["mm", "add"], "not the cast");
    // x * w sums to about -1000: outputs near 0.3.
    let xs: Vec<f32> = (0..32).map(|i| -1250.0 + (i % 7) as f32 * 0.125).collect();
    let feeds = std::collections::HashMap::from([("x".to_string(), Tensor::from_f32(vec![4, 8], xs))]);
    let plan = bolt::plan::plan(&g).unwrap();
    let want = bolt::reference::run(&g, &feeds).unwrap()[&y].to_f64_vec();
    let got = bolt::reference::run(&plan.graph, &feeds).unwrap()[&y].to_f64_vec();
    assert!(want.iter().all(|v| v.abs() < 1.0), "{want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= w.abs() * 2f64.powi(-10), "planned {g} vs model {w}");
    }
}

#[test]
fn gemm_bias_and_scalar_scaling_fold_into_alpha_and_bias_scale() {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let w = b.initializer("w", f32s(&[16, 8], 0.1));
    let c = b.initializer("c", f32s(&[16], 1.0));
    let y = b.node("gemm", Op::Gemm { alpha: 2.0, beta: 0.5, trans_a: false, trans_b: true }, &[&x, &w, &c]);
    let eight = scalar(&mut b, "eight", 8.0);
    let y = b.node("div", Op::Binary(Binary::Div), &[&y, &eight]);
    b.output(&y);
    let e = partition(&b.finish().unwrap()).partitions[0].epilogue.clone();
    assert_eq!((e.form().alpha, &e.form().bias), (0.25, &vec![BiasTerm { tensor: "c".into(), scale: 0.0625 }]));
}

#[test]
fn unsupported_anchors_stay_with_the_host_with_a_reason() {
    // A 3-D convolution and an integer MatMul (1-D convolutions are anchors: see
    // tests/shape_inference.rs).
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[1, 4, 6, 6, 6]));
    let w = b.initializer("w", f32s(&[4, 4, 3, 3, 3], 0.1));
    let conv = Op::Conv {
        window: Window { kernel_shape: None, strides: None, pads: None, dilations: None, auto_pad: AutoPad::NotSet },
        group: 1,
    };
    let y = b.node("conv3d", conv, &[&x, &w]);
    b.output(&y);
    let i = b.input("i", DType::I32, Shape::from_static(&[2, 2]));
    let j = b.initializer("j", Tensor::from_i64_as(DType::I32, vec![2, 2], &[1, 2, 3, 4]).unwrap());
    let k = b.node("imm", Op::MatMul, &[&i, &j]);
    b.output(&k);
    let p = partition(&b.finish().unwrap());
    assert!(p.partitions.is_empty());
    let reason = |n: &str| p.host.iter().find(|h| h.node == n).map(|h| h.reason.clone()).unwrap();
    assert!(reason("conv3d").contains("3-D convolution"), "{}", reason("conv3d"));
    assert!(reason("imm").contains("element type i32"));
}

#[test]
fn the_default_model_is_four_partitions_and_two_host_ops() {
    let p = partition(&bolt::models::default_model().unwrap());
    let anchors: Vec<_> = p.partitions.iter().map(|p| (p.anchor.as_str(), p.epilogue.form().activation)).collect();
    assert_eq!(
        anchors,
        vec![
            ("conv1", Some(Activation::Relu)),
            ("conv2", Some(Activation::Relu)),
            ("fc1", Some(Activation::Relu)),
            ("fc2", None)
        ]
    );
    let host: Vec<_> = p.host.iter().map(|h| h.op_type.as_str()).collect();
    assert_eq!(host, vec!["GlobalAveragePool", "Flatten"]);
}

#[test]
fn real_models_partition_every_anchor() {
    // ResNet-50: 53 convs + the classifier Gemm. BERT-base: per layer Q, K, V, QK^T,
    // attention x V, output projection and the two FFN GEMMs. PP-OCRv4 det: its 62 convs.
    // VGG-16: 13 convs + 3 Gemms. MobileNetV2: 52 convs (17 blocks, 16 with an expansion
    // conv) + the classifier (ReLU6 arrives as Clip).
    for (model, convs_or_gemms, activation_kinds) in [
        ("resnet50", 54, 1),
        ("bert_base", 8 * 12, 1),
        ("ppocrv4_det", 62, 3),
        ("vgg16", 16, 1),
        ("mobilenet_v2", 53, 1),
    ] {
        let Some(dir) = common::testdata(&format!("models/{model}")) else { return };
        let g = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
        let p = partition(&g);
        assert_eq!(p.partitions.len(), convs_or_gemms, "{model}: {} partitions", p.partitions.len());
        let kinds: std::collections::BTreeSet<String> =
            p.partitions.iter().filter_map(|q| q.epilogue.form().activation.map(|a| format!("{a:?}"))).collect();
        assert!(kinds.len() >= activation_kinds, "{model}: activations {kinds:?}");
        println!("{model}: {} partitions, activations {kinds:?}, {} host nodes", p.partitions.len(), p.host.len());
    }
}

#[test]
fn a_gemm_with_a_broadcast_non_constant_c_stays_with_the_host() {
    // C of shape [1, N] read from a graph input: the epilogue reads either a constant bias
    // vector or a full [M, N] source, so this Gemm is not a kernel.
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let c = b.input("c", DType::F32, Shape::from_static(&[1, 16]));
    let w = b.initializer("w", f32s(&[8, 16], 0.1));
    let gemm = Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: false };
    let y = b.node("gemm", gemm, &[&x, &w, &c]);
    b.output(&y);
    let p = partition(&b.finish().unwrap());
    assert!(p.partitions.is_empty());
    assert!(p.host[0].reason.contains("neither a constant per-column bias"), "{}", p.host[0].reason);
}

#[test]
fn a_conv_whose_bias_is_a_graph_input_stays_with_the_host() {
    // Valid ONNX (an IR-3 model whose bias initializer was dropped from the graph leaves its
    // graph input behind): the epilogue folds constant per-channel biases only, so the Conv
    // runs on the host and planning still succeeds (it failed with "bias is not constant").
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape::from_static(&[1, 2, 3, 3]));
    let bias = b.input("bias", DType::F32, Shape::from_static(&[4]));
    let w = b.initializer("w", f32s(&[4, 2, 1, 1], 0.5));
    let window = Window { kernel_shape: None, strides: None, pads: None, dilations: None, auto_pad: AutoPad::NotSet };
    let y = b.node("conv", Op::Conv { window, group: 1 }, &[&x, &w, &bias]);
    b.output(&y);
    let g = b.finish().unwrap();
    let p = partition(&g);
    assert!(p.partitions.is_empty(), "{:#?}", p.partitions);
    assert!(p.host[0].reason.contains("bias is computed at run time"), "{}", p.host[0].reason);
    let plan = bolt::plan::plan(&g).unwrap();
    // y[m] = 0.5 * (x[0] + x[1]) + bias[m], by hand.
    let xs: Vec<f32> = (0..18).map(|i| i as f32 / 3.0).collect();
    let inputs = [
        ("x".to_string(), Tensor::from_f32(vec![1, 2, 3, 3], xs.clone())),
        ("bias".to_string(), Tensor::from_f32(vec![4], vec![1.0, -2.0, 0.25, 8.0])),
    ]
    .into();
    let out = bolt::reference::run(&plan.graph, &inputs).unwrap()[&y].to_f32_vec();
    for m in 0..4 {
        for q in 0..9 {
            let want = 0.5 * (xs[q] + xs[9 + q]) + [1.0, -2.0, 0.25, 8.0][m];
            assert!((out[m * 9 + q] - want).abs() < 1e-5, "y[{m}, {q}] = {} vs {want}", out[m * 9 + q]);
        }
    }
}

/// The epilogue keeps the model's order: a scalar scales what precedes it only, and the
/// report writes the expression the kernel computes.
#[test]
fn epilogue_steps_keep_the_models_order_and_print_as_the_kernels_expression() {
    let g = gemm_graph(|b, y| {
        let r = b.input("r", DType::F32, Shape::from_static(&[4, 16]));
        let y = bias_add(b, y);
        let eight = scalar(b, "eight", 8.0);
        let y = b.node("div", Op::Binary(Binary::Div), &[&y, &eight]);
        let y = b.node("res", Op::Binary(Binary::Add), &[&r, &y]);
        let y = b.node("relu", Op::Unary(Unary::Relu), &[&y]);
        let r2 = b.input("r2", DType::F32, Shape::from_static(&[4, 16]));
        b.node("res2", Op::Binary(Binary::Add), &[&y, &r2])
    });
    let p = partition(&g);
    let e = &p.partitions[0].epilogue;
    // The bias is divided with the product; the residual after the Div is not; a second
    // residual has no kernel form (one source tensor) and stays with the host.
    assert_eq!(e.to_string(), "relu(0.125*acc + 0.125*bias + C)");
    assert_eq!(e.form().source.as_ref().map(|s| s.scale), Some(1.0));
    assert_eq!(p.host.iter().map(|h| h.node.as_str()).collect::<Vec<_>>(), ["res2"]);
    let summary = bolt::compile::summarize(&g, &Default::default(), bolt::compile::RunOn::Synthetic).unwrap();
    assert_eq!(summary.anchors[0].epilogue, "relu(0.125*acc + 0.125*bias + C)");
    let plan = summary.plan.unwrap();
    assert!(plan.mismatches.is_empty() && plan.max_abs_diff.unwrap() < 1e-5, "{:?}", plan.mismatches);
}

/// A fused output never changes rank: a [1, 1, N] bias on a 2-D GEMM broadcasts the output
/// to 3-D, so it stays with the host.
#[test]
fn a_rank_raising_bias_is_not_fused() {
    let g = gemm_graph(|b, y| {
        let bias = b.initializer("bias3", f32s(&[1, 1, 16], 0.5));
        b.node("add3", Op::Binary(Binary::Add), &[&y, &bias])
    });
    let p = partition(&g);
    assert_eq!(p.partitions[0].nodes, ["mm"]);
    assert_eq!(p.host[0].node, "add3");
}

/// A dim nobody can name (exporters' -1, a Resize's output) does not stop a bias, a scalar or
/// an activation from fusing: a constant that only broadcasts along known dims keeps the shape.
#[test]
fn unknown_dims_do_not_stop_constant_epilogue_steps() {
    let mut b = GraphBuilder::new("t");
    let x = b.input("x", DType::F32, Shape(vec![Dim::Unknown, Dim::Known(8)]));
    let w = b.initializer("w", f32s(&[8, 16], 0.1));
    let y = b.node("mm", Op::MatMul, &[&x, &w]);
    let y = bias_add(&mut b, y);
    let two = scalar(&mut b, "two", 2.0);
    let y = b.node("mul", Op::Binary(Binary::Mul), &[&y, &two]);
    let y = b.node("relu", Op::Unary(Unary::Relu), &[&y]);
    b.output(&y);
    let p = partition(&b.finish().unwrap());
    assert_eq!(p.partitions[0].nodes.len(), 4, "{:?}", p.partitions[0].nodes);
    assert_eq!(p.partitions[0].epilogue.to_string(), "relu(2*acc + 2*bias)");
}
