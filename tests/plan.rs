//! A plan keeps the model's meaning: the planned graph (one fused kernel node per partition,
//! BatchNormalization folded, bias terms summed, scalars folded into alpha, convs in NHWC,
//! channels padded, back-to-back chains fused) run on the reference executor equals the
//! original graph's reference output.

mod common;

use bolt::cases::{compare, data_sets, read_tensor_pb, Tolerance};
use bolt::compile::{synthetic_inputs, DimBindings};
use bolt::ir::{Graph, Op, Tensor};
use std::collections::HashMap;

/// Folding changes rounding order (weights scaled before the GEMM, biases summed first).
const PLAN_TOL: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-4 };

fn assert_plan_preserves(name: &str, g: &Graph, inputs: &HashMap<String, Tensor>) {
    assert_plan_preserves_within(name, g, inputs, PLAN_TOL);
}

fn assert_plan_preserves_within(name: &str, g: &Graph, inputs: &HashMap<String, Tensor>, tol: Tolerance) {
    let planned = bolt::plan::plan(g).unwrap();
    let fused: usize = planned
        .graph
        .nodes
        .iter()
        .map(|n| match &n.op {
            Op::Fused(_) => 1,
            Op::FusedChain(layers) => layers.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(fused, planned.partitioning.partitions.len(), "{name}: every partition is one kernel or chain layer");
    let chains = planned.chains.iter().filter(|c| c.fused).count();
    assert!(fused > 0, "{name}: nothing planned");
    let want = bolt::reference::run(g, inputs).unwrap();
    let got = bolt::reference::run(&planned.graph, inputs).unwrap();
    for o in &g.outputs {
        let c = compare(o, &got[o], &want[o], tol);
        println!(
            "{name}: {fused} kernels ({chains} b2b chains, {} layout transforms, {} paddings), {} -> {} nodes, output {o} max abs err {:.2e}",
            planned.layout.len(),
            planned.padding.len(),
            g.nodes.len(),
            planned.graph.nodes.len(),
            c.max_abs_err
        );
        assert!(c.failure.is_none(), "{name}: {}", c.failure.unwrap());
    }
}

#[test]
fn the_default_model_plans_to_four_kernels_with_the_same_output() {
    let g = bolt::models::default_model().unwrap();
    let bindings: DimBindings = [("N".to_string(), 2)].into();
    assert_plan_preserves("default", &g, &synthetic_inputs(&g, &bindings, 3).unwrap());
}

#[test]
fn real_models_keep_their_outputs_when_planned() {
    for model in ["resnet50", "vgg16", "mobilenet_v2", "bert_base", "ppocrv4_det", "small_conv_mlp"] {
        let Some(dir) = common::testdata(&format!("models/{model}")) else { return };
        let g = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
        let set = &data_sets(&dir)[0];
        let inputs = g
            .inputs
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), read_tensor_pb(&set.join(format!("input_{i}.pb"))).unwrap().1))
            .collect();
        assert_plan_preserves(model, &g, &inputs);
    }
}

#[test]
fn f16_cnns_keep_their_outputs_and_explain_back_to_back_decisions() {
    // In f16 the planner considers fused chains (f32 has no fused mainloop). Batch 1 keeps
    // the reference quick.
    for model in ["resnet50", "mobilenet_v2"] {
        let Some(dir) = common::testdata(&format!("models/{model}")) else { return };
        let g32 = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
        let g = bolt::ir::precision::convert_floats(&g32, bolt::ir::DType::F16).unwrap();
        let bindings: DimBindings = [("N".to_string(), 1)].into();
        let inputs = synthetic_inputs(&g, &bindings, 5).unwrap();
        // f16 rounding differs between folded and unfolded BN over 50 layers.
        assert_plan_preserves_within(model, &g, &inputs, Tolerance { rtol: 5e-2, atol: 5e-2 });
        // ResNet-50's 3x3 -> 1x1 bottleneck pairs pass the traffic model, but their last
        // layer adds bias and the residual, which CUTLASS's fused epilogue cannot: each is
        // left unfused with that reason.
        let plan = bolt::plan::plan(&g).unwrap();
        for c in &plan.chains {
            println!("{model}: {} {}", if c.fused { "FUSED" } else { "not fused" }, c.reason);
            assert!(!c.reason.is_empty());
            assert_eq!(c.fused, c.kernel.is_some(), "a fused chain names its kernel");
        }
    }
}

#[test]
fn a_plan_lowers_to_one_typed_workload_per_kernel() {
    use bolt_codegen::spec::{Family, Layout};
    use bolt_profiler::workload::Problem;
    let g = bolt::models::default_model().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let bindings: DimBindings = [("N".to_string(), 8)].into();
    let (uses, skipped) = bolt::plan::lower::workloads(&plan.graph, &bindings);
    assert!(skipped.is_empty(), "{skipped:?}");
    let names: Vec<String> = uses.iter().map(|u| format!("{} {}", u.node, u.workload.describe())).collect();
    println!("{names:#?}");
    assert_eq!(uses.len(), 4);
    // conv1 reads the NHWC image padded from 3 to 4 channels (f32: 128-bit = 4 elements).
    let Problem::Conv2d(c) = uses[0].workload.problem else { panic!("{names:?}") };
    assert!(matches!(uses[0].workload.family, Family::Conv2dFprop(_)));
    assert_eq!((c.n, c.c, c.r, c.s, c.pad_h), (8, 4, 3, 3, 1));
    assert_eq!(uses[0].workload.epilogue.name(), "bias_relu");
    // The Gemms (transB = 1 in the model) read their weights K-major: column-major B.
    let Problem::Gemm(p) = uses[2].workload.problem else { panic!("{names:?}") };
    assert_eq!(p.m, 8);
    assert_eq!(uses[2].workload.layouts, [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor]);
}

/// TensorFlow exports pad explicitly: a Pad of zeros on the spatial axes before a Conv is the
/// Conv's own padding (canonical pass), so the conv kernel takes it and no Pad is left. Other
/// pads (reflect, a nonzero constant, a Pad another op reads too) stay Pad nodes. The planned
/// graph equals the model on the reference executor (whose Pad is checked against the ONNX
/// conformance cases): this checks the rewriting.
#[test]
fn zero_pads_before_convs_become_conv_padding() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AutoPad, DType, PadMode, Shape, Window};
    for (mode, value, folded) in [
        (PadMode::Constant, None, true),
        (PadMode::Constant, Some(0.0), true),
        (PadMode::Constant, Some(1.5), false),
        (PadMode::Reflect, None, false),
    ] {
        let mut g = GraphBuilder::new("pad_conv");
        let x = g.input("x", DType::F32, Shape::from_static(&[1, 3, 9, 7]));
        let pads = g.initializer("pads", Tensor::from_i64(vec![8], vec![0, 0, 1, 2, 0, 0, 1, 2]));
        let mut ins = vec![x.clone(), pads];
        if let Some(v) = value {
            ins.push(g.initializer("value", Tensor::scalar_f32(v)));
        }
        let refs: Vec<&str> = ins.iter().map(|s| s.as_str()).collect();
        let p = g.node("pad", Op::Pad { mode }, &refs);
        let w = g.initializer("w", common::random_tensor(&[4, 3, 3, 3], 2));
        let window = Window {
            kernel_shape: Some(vec![3, 3]),
            strides: Some(vec![2, 1]),
            // Even, and so with the Pad's (the kernels pad symmetrically; tests/artifact.rs
            // covers uneven pads).
            pads: Some(vec![1, 0, 1, 0]),
            dilations: None,
            auto_pad: AutoPad::NotSet,
        };
        let y = g.node("conv", Op::Conv { window, group: 1 }, &[&p, &w]);
        g.output(&y);
        let g = g.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let pads_left = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Pad { .. })).count();
        assert_eq!(pads_left, usize::from(!folded), "{mode:?} {value:?}");
        let feeds = HashMap::from([("x".to_string(), common::random_tensor(&[1, 3, 9, 7], 5))]);
        let (want, got) =
            (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
        let (a, b) = (&want[&g.outputs[0]], &got[&g.outputs[0]]);
        assert_eq!(a.shape, b.shape, "{mode:?} {value:?}");
        for (p, q) in a.to_f32_vec().iter().zip(b.to_f32_vec()) {
            assert!((p - q).abs() <= 1e-4 * (1.0 + p.abs()), "{mode:?} {value:?}: {p} vs {q}");
        }
    }
}

/// Per-channel constant scales right after an anchor (BatchNormalizations frozen into Mul/Add
/// constants, as torch.onnx writes them; a Div by a vector) fold into the kernel's weights and
/// bias, for convs, MatMuls and Gemms of either B layout; a bias read through an Identity of a
/// constant (torch.onnx's tied parameters) is still a bias. The planned graph equals the model
/// on the reference executor: this checks the rewriting; the epilogue fuzzer and the corpus's
/// captcha CRNN check it against onnxruntime.
#[test]
fn per_channel_scales_fold_into_the_weights() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AutoPad, Binary, DType, Shape, Unary, Window};
    use bolt::partition::ChannelFold;
    let scale = |len: usize, seed: u64| {
        let t = common::random_tensor(&[len], seed);
        // Away from 0: also divisors.
        Tensor::from_f32(vec![len], t.to_f32_vec().iter().map(|v| v.signum() * (0.5 + v.abs())).collect())
    };
    let mut g = GraphBuilder::new("channel_scales");
    let x = g.input("x", DType::F32, Shape::from_static(&[2, 3, 8, 8]));
    let r = g.input("r", DType::F32, Shape::from_static(&[2, 6, 8, 8]));
    let w = g.initializer("w", common::random_tensor(&[6, 3, 3, 3], 1));
    let b0 = g.initializer("b0", common::random_tensor(&[6], 2));
    let s = g.initializer("s", Tensor::from_f32(vec![6, 1, 1], scale(6, 3).to_f32_vec()));
    let t = g.initializer("t", Tensor::from_f32(vec![1, 6, 1, 1], common::random_tensor(&[6], 4).to_f32_vec()));
    let window = |p: usize| Window {
        kernel_shape: Some(vec![3, 3]),
        strides: None,
        pads: Some(vec![p; 4]),
        dilations: None,
        auto_pad: AutoPad::NotSet,
    };
    // conv + own bias -> * s -> + t -> relu: one kernel, relu(acc' + bias').
    let y = g.node("conv", Op::Conv { window: window(1), group: 1 }, &[&x, &w, &b0]);
    let y = g.node("scale", Op::Binary(Binary::Mul), &[&s, &y]);
    let y = g.node("shift", Op::Binary(Binary::Add), &[&y, &t]);
    let y = g.node("relu", Op::Unary(Unary::Relu), &[&y]);
    // A residual first: the scale would scale it too, so it is not folded.
    let w2 = g.initializer("w2", common::random_tensor(&[6, 6, 3, 3], 5));
    let z = g.node("conv2", Op::Conv { window: window(1), group: 1 }, &[&y, &w2]);
    let z = g.node("res", Op::Binary(Binary::Add), &[&z, &r]);
    let z = g.node("scale2", Op::Binary(Binary::Mul), &[&z, &s]);
    let z = g.node("flat", Op::Flatten { axis: 1 }, &[&z]);
    // MatMul by [K, N] / vector; Gemm with B transposed, C through an Identity, * [1, N].
    let k = 6 * 8 * 8;
    let wm = g.initializer("wm", common::random_tensor(&[k, 16], 6));
    let dv = g.initializer("dv", scale(16, 7));
    let m = g.node("mm", Op::MatMul, &[&z, &wm]);
    let m = g.node("div", Op::Binary(Binary::Div), &[&m, &dv]);
    let wg = g.initializer("wg", common::random_tensor(&[8, 16], 8));
    let cg = g.initializer("cg", common::random_tensor(&[8], 9));
    let tied = g.node("tied", Op::Identity, &[&cg]);
    let sg = g.initializer("sg", Tensor::from_f32(vec![1, 8], scale(8, 10).to_f32_vec()));
    let gemm = Op::Gemm { alpha: 0.5, beta: 2.0, trans_a: false, trans_b: true };
    let o = g.node("gemm", gemm, &[&m, &wg, &tied]);
    let o = g.node("scale3", Op::Binary(Binary::Mul), &[&o, &sg]);
    g.output(&o);
    let g = g.finish().unwrap();

    let plan = bolt::plan::plan(&g).unwrap();
    let folds = |anchor: &str| {
        let p = plan.partitioning.partitions.iter().find(|p| p.anchor == anchor).unwrap();
        (p.epilogue.folds.clone(), p.epilogue.form().bias.len(), p.nodes.len())
    };
    let scaled =
        |node: &str, tensor: &str, divide| ChannelFold::Scale { node: node.into(), tensor: tensor.into(), divide };
    assert_eq!(folds("conv"), (vec![scaled("scale", "s", false)], 2, 4));
    assert_eq!(folds("conv2").0, vec![]);
    assert_eq!(folds("mm"), (vec![scaled("div", "dv", true)], 0, 2));
    // Gemm's C (through the Identity) is its bias: C, then the scale, all in one kernel.
    assert_eq!(folds("gemm"), (vec![scaled("scale3", "sg", false)], 1, 2));
    // The scale after the residual runs element-wise after the kernel (a stitched region).
    assert!(plan.partitioning.partitions.iter().all(|p| !p.nodes.contains(&"scale2".to_string())));
    let feeds = HashMap::from([
        ("x".to_string(), common::random_tensor(&[2, 3, 8, 8], 11)),
        ("r".to_string(), common::random_tensor(&[2, 6, 8, 8], 12)),
    ]);
    assert_plan_preserves("channel_scales", &g, &feeds);
}

/// A conv whose weight an op shape inference cannot type computes (a quantizer of another
/// domain: brevitas exports) has output channels of unknown count, which its bias and kernel
/// need: it stays with the host with the reason, and planning the model does not fail (it
/// once did where a BatchNormalization followed).
#[test]
fn a_conv_of_unknown_output_channels_stays_with_the_host() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AutoPad, DType, Shape, Window};
    let mut b = GraphBuilder::new("quantized_weight");
    let x = b.input("x", DType::F32, Shape::from_static(&[1, 3, 8, 8]));
    let w0 = b.initializer("w0", common::random_tensor(&[8, 3, 3, 3], 1));
    let quant = Op::Opaque {
        domain: "onnx.brevitas".into(),
        op_type: "Quant".into(),
        attrs: vec![],
        why: "operator from a non-default domain".into(),
    };
    let w = b.node("quant", quant, &[&w0]);
    let bias = b.initializer("bias", common::random_tensor(&[8], 2));
    let window = Window {
        kernel_shape: None,
        strides: None,
        pads: Some(vec![1; 4]),
        dilations: None,
        auto_pad: AutoPad::NotSet,
    };
    let y = b.node("conv", Op::Conv { window, group: 1 }, &[&x, &w, &bias]);
    let stats: Vec<String> = ["scale", "shift", "mean", "var"]
        .iter()
        .map(|k| b.initializer(k, Tensor::from_f32(vec![8], vec![1.0; 8])))
        .collect();
    let bn = Op::BatchNormalization { epsilon: 1e-5, momentum: 0.9, training_mode: false };
    let z = b.node("bn", bn, &[&y, &stats[0], &stats[1], &stats[2], &stats[3]]);
    b.output(&z);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    assert!(plan.partitioning.partitions.is_empty());
    let conv = plan.partitioning.host.iter().find(|h| h.node == "conv").expect("the conv is a host node");
    assert!(conv.reason.contains("output channel count is not known"), "{conv:?}");
}

/// A conv and the BatchNormalization after it, the conv's weight computed from constants
/// beyond import's fold size: concatenated from two halves (paddle2onnx assembles recurrent
/// weights so), or a ConstantOfShape fill (onnx's caffe2-converted test models), or a model
/// input known only at run time. The planner folds computations of weights of any size that
/// do not grow their constants (the concatenation; not the fill, which would store a tensor
/// the model describes in a few bytes), and the BatchNormalization into such a weight; a
/// weight that is not a constant cannot take the BatchNormalization, which then runs after
/// the kernel (planning once failed on it). Every way, the planned graph gives the model's
/// outputs.
#[test]
fn a_batch_norm_folds_into_constant_conv_weights_and_runs_after_computed_ones() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AutoPad, DType, Shape, Window};
    let c = 192;
    for (source, folds) in [("concat", true), ("fill", false), ("input", false)] {
        let mut b = GraphBuilder::new("computed_weight");
        let x = b.input("x", DType::F32, Shape::from_static(&[1, c, 4, 4]));
        let w = match source {
            "concat" => {
                let half = |b: &mut GraphBuilder, name: &str, seed| {
                    b.initializer(name, common::random_tensor(&[c / 2, c, 3, 3], seed))
                };
                let (lo, hi) = (half(&mut b, "w_lo", 6), half(&mut b, "w_hi", 7));
                b.node("w", Op::Concat { axis: 0 }, &[&lo, &hi])
            }
            "fill" => {
                let dims = b.initializer("w_shape", Tensor::from_i64(vec![4], vec![c as i64, c as i64, 3, 3]));
                let fill = Tensor::from_f32(vec![1], vec![0.02]);
                b.node("w", Op::ConstantOfShape { value: Some(std::sync::Arc::new(fill)) }, &[&dims])
            }
            _ => b.input("w", DType::F32, Shape::from_static(&[c, c, 3, 3])),
        };
        let window = Window {
            kernel_shape: None,
            strides: None,
            pads: Some(vec![1; 4]),
            dilations: None,
            auto_pad: AutoPad::NotSet,
        };
        let y = b.node("conv", Op::Conv { window, group: 1 }, &[&x, &w]);
        let stats: Vec<String> = [("scale", 1.5), ("bias", 0.1), ("mean", 0.2), ("var", 2.0)]
            .iter()
            .map(|(k, v)| b.initializer(k, Tensor::from_f32(vec![c], vec![*v; c])))
            .collect();
        let bn = Op::BatchNormalization { epsilon: 1e-5, momentum: 0.9, training_mode: false };
        let z = b.node("bn", bn, &[&y, &stats[0], &stats[1], &stats[2], &stats[3]]);
        b.output(&z);
        let g = b.finish().unwrap();
        let known = bolt::ir::infer::known_values(&g).unwrap();
        assert!(!known.contains_key("w_out"), "{source}: import's inference folds small computations only");
        let plan = bolt::plan::plan(&g).unwrap();
        assert_eq!(plan.partitioning.partitions.len(), 1, "{source}: the conv is a kernel");
        let nodes = &plan.partitioning.partitions[0].nodes;
        assert_eq!(nodes.iter().any(|n| n == "bn"), folds, "{source}: {nodes:?}");
        let mut inputs = HashMap::from([("x".to_string(), common::random_tensor(&[1, c, 4, 4], 4))]);
        if source == "input" {
            inputs.insert("w".to_string(), common::random_tensor(&[c, c, 3, 3], 5));
        }
        let want = bolt::reference::run(&g, &inputs).unwrap();
        let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
        // Outputs of about 40 (1728-term sums): a folded weight rounds differently in f32.
        let tol = Tolerance { rtol: 1e-4, atol: 1e-3 };
        let check = compare(&z, &got[&z], &want[&z], tol);
        assert!(check.failure.is_none(), "{source}: {:?}", check.failure);
    }
}

/// A two-operand Einsum that is one batched matrix product (attention written as einsum, as
/// guided-diffusion UNets export it) is Transposes around a MatMul: a GEMM kernel, or, where
/// two of them and a Softmax form an attention core, one fused attention kernel. The
/// planned graph gives the reference's Einsum (its own contraction code); the ONNX
/// conformance case `test_einsum_batch_matmul_bfloat16` checks the rewrite against ONNX's
/// outputs, and tests/python/test_fuzz_graphs.py::test_planner_rewrites_match_ort[einsums] the
/// merged forms against onnxruntime. Other forms (a diagonal, a sum over one operand, an
/// outer product) stay einsums.
#[test]
fn einsums_that_are_batched_matrix_products_become_gemm_kernels() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AttrValue, DType, Shape};
    let einsum = |eq: &str| Op::Opaque {
        domain: String::new(),
        op_type: "Einsum".into(),
        attrs: vec![("equation".into(), AttrValue::String(eq.as_bytes().to_vec()))],
        why: "host-only".into(),
    };
    let mut b = GraphBuilder::new("einsum_attention");
    let q = b.input("q", DType::F32, Shape::from_static(&[2, 8, 5]));
    let k = b.input("k", DType::F32, Shape::from_static(&[2, 8, 6]));
    let v = b.input("v", DType::F32, Shape::from_static(&[2, 8, 6]));
    let w = b.node("scores", einsum("bct,bcs->bts"), &[&q, &k]);
    let p = b.node("softmax", Op::Softmax { axis: -1 }, &[&w]);
    let a = b.node("mix", einsum("bts,bcs->bct"), &[&p, &v]);
    let sq = b.input("sq", DType::F32, Shape::from_static(&[2, 4, 4]));
    let d = b.node("diag", einsum("bii->bi"), &[&sq]);
    // DeepFilterNet's grouped linear layer (a batch label between two free ones) and a weight
    // contracted over two axes: free and contracted labels merge into one axis each.
    let x = b.input("x", DType::F32, Shape::from_static(&[2, 3, 4, 5]));
    let w = b.input("w", DType::F32, Shape::from_static(&[4, 5, 6]));
    let grouped = b.node("grouped", einsum("btgi,gih->btgh"), &[&x, &w]);
    let f = b.input("f", DType::F32, Shape::from_static(&[4, 5]));
    let both = b.node("both", einsum("fi,fij->j"), &[&f, &w]);
    let outer = b.node("outer", einsum("i,j->ij"), &[&both, &both]);
    for y in [&a, &d, &grouped, &outer] {
        b.output(y);
    }
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let mut anchors: Vec<&str> = plan.partitioning.partitions.iter().map(|p| p.anchor.as_str()).collect();
    anchors.sort();
    assert_eq!(anchors, ["both", "grouped"]);
    // The attention pair (`bct,bcs->bts`, softmax, `bts,bcs->bct`: K given as Kᵀ) is one fused
    // attention kernel reading K's rows from a transpose kernel (tests/attention.rs).
    let core = plan.attention.iter().find(|d| d.nodes.contains(&"scores".to_string())).expect("the core");
    assert!(core.fused.is_some() && core.k_rows.is_some() && core.nodes.contains(&"mix".to_string()), "{core:?}");
    assert!(plan.graph.nodes.iter().any(|n| n.name == "outer" && n.op.is_opaque()), "nothing contracted");
    assert!(plan.graph.nodes.iter().any(|n| n.name == "diag" && n.op.is_opaque()), "a diagonal stays an Einsum");
    let inputs: HashMap<String, Tensor> =
        [("q", vec![2, 8, 5]), ("k", vec![2, 8, 6]), ("v", vec![2, 8, 6]), ("sq", vec![2, 4, 4])]
            .into_iter()
            .chain([("x", vec![2, 3, 4, 5]), ("w", vec![4, 5, 6]), ("f", vec![4, 5])])
            .enumerate()
            .map(|(i, (name, shape))| (name.to_string(), common::random_tensor(&shape, i as u64 + 1)))
            .collect();
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
    for y in [&a, &d, &grouped, &outer] {
        assert_eq!(got[y].shape, want[y].shape);
        let c = compare(y, &got[y], &want[y], Tolerance { rtol: 1e-5, atol: 1e-6 });
        assert!(c.failure.is_none(), "{y}: {:?}", c.failure);
    }
}

/// A Pad with negative pads crops: Kaldi's pre-emphasis (`pads [0, 1, 0, -1]`, edge mode)
/// shifts each frame by one. The planner writes it as a Slice of the cropped side (a view or
/// device copy) and a Pad glue kernel of the grown one, where it stayed on the host ("pad
/// kernels only grow"); in reflect mode, whose values a crop would change, it stays. The
/// planned graph equals the model on the reference (the rewriting only;
/// tests/python/test_fuzz_graphs.py::test_planner_rewrites_match_ort[negative_pads] checks against
/// onnxruntime).
#[test]
fn negative_pads_are_a_crop_then_a_pad_kernel() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{DType, PadMode, Shape};
    for (mode, kernel) in [(PadMode::Edge, true), (PadMode::Constant, true), (PadMode::Reflect, false)] {
        let mut b = GraphBuilder::new("pre_emphasis");
        let x = b.input("x", DType::F32, Shape::from_static(&[3, 40]));
        let pads = b.initializer("pads", Tensor::from_i64(vec![4], vec![0, 1, 0, -1]));
        let y = b.node("shift", Op::Pad { mode }, &[&x, &pads]);
        b.output(&y);
        let g = b.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let glue = plan.glue.iter().find(|d| d.node == "shift").expect("a glue decision for the pad");
        assert_eq!(glue.kernel.is_some(), kernel, "{mode:?}: {glue:?}");
        let feeds = HashMap::from([("x".to_string(), common::random_tensor(&[3, 40], 3))]);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
        assert_eq!(got[&y].shape, [3, 40]);
        assert_eq!(got[&y].to_f32_vec(), want[&y].to_f32_vec(), "{mode:?}");
    }
}

/// A ConvTranspose whose windows overlap or are padded (a vocoder's kernel 16 / stride 8, a
/// decoder's 3x3 / stride 2 with output_padding) had no kernel and stayed on the host. The
/// planner writes it as a Conv over the input with stride - 1 zeros inserted between elements
/// (Unsqueeze -> Pad glue kernel -> Reshape per strided axis) and the weight flipped with its
/// channel axes swapped: a conv partition. The planned graph equals the model on the
/// reference (the rewriting only; tests/python/test_fuzz_graphs.py::test_planner_rewrites_match_ort[conv_transposes]
/// checks against onnxruntime, and the reference's ConvTranspose is checked by the ONNX
/// conformance cases).
#[test]
fn overlapping_conv_transposes_are_convs_over_zero_spread_inputs() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AutoPad, DType, Shape, Window};
    // (input, weight, strides, pads, output_padding, dilations, group)
    type Case = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, usize);
    let cases: Vec<Case> = vec![
        (vec![1, 6, 9], vec![6, 4, 16], vec![8], vec![4, 4], vec![0], vec![1], 1),
        (vec![2, 5, 4, 3], vec![5, 3, 3, 3], vec![2, 2], vec![1, 1, 1, 1], vec![1, 1], vec![1, 1], 1),
        (vec![1, 4, 5, 4], vec![4, 3, 2, 3], vec![1, 3], vec![1, 0, 0, 3], vec![0, 0], vec![2, 2], 2),
        (vec![1, 3, 7, 7], vec![3, 2, 2, 2], vec![2, 2], vec![2, 2, 2, 2], vec![0, 0], vec![1, 1], 1),
    ];
    for (k, (xs, ws, strides, pads, extra, dil, group)) in cases.into_iter().enumerate() {
        let mut b = GraphBuilder::new("deconv");
        let x = b.input("x", DType::F32, Shape::from_static(&xs));
        let w = b.initializer("w", common::random_tensor(&ws, k as u64));
        let window = Window {
            kernel_shape: None,
            strides: Some(strides),
            pads: Some(pads),
            dilations: Some(dil),
            auto_pad: AutoPad::NotSet,
        };
        let op = Op::ConvTranspose { window, group, output_padding: Some(extra), output_shape: None };
        let y = b.node("deconv", op, &[&x, &w]);
        b.output(&y);
        let g = b.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        assert!(
            plan.partitioning.partitions.iter().any(|p| p.anchor == "deconv"),
            "case {k}: not a kernel: {:?}",
            plan.partitioning.host
        );
        assert!(!plan.graph.nodes.iter().any(|n| matches!(n.op, Op::ConvTranspose { .. })), "case {k}");
        let feeds = HashMap::from([("x".to_string(), common::random_tensor(&xs, 10 + k as u64))]);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
        let c = compare(&y, &got[&y], &want[&y], PLAN_TOL);
        assert!(c.failure.is_none(), "case {k}: {}", c.failure.unwrap());
    }
}

/// onnxruntime's static quantization writes QuantizeLinear -> DequantizeLinear around every
/// activation and DequantizeLinear of each int8 weight: all host ops, so a QDQ model ran no
/// kernel. The weights' DequantizeLinears now fold (constants), and each pair of the same
/// per-tensor scale and zero point is `clip(round(x / s), lo - z, hi - z) * s` in float ops
/// that stitch: no quantize op is left and the MatMul is a kernel. The planned graph equals
/// the model exactly on the reference (the rewriting only;
/// tests/python/test_fuzz_graphs.py::test_planner_rewrites_match_ort[qdq] checks against
/// onnxruntime).
#[test]
fn quantize_dequantize_pairs_are_float_ops_and_quantized_weights_constants() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AttrValue, DType, Shape};
    let opaque = |op: &str| Op::Opaque {
        domain: String::new(),
        op_type: op.into(),
        attrs: vec![("axis".into(), AttrValue::Int(1))],
        why: "host-only".into(),
    };
    let mut b = GraphBuilder::new("qdq");
    let x = b.input("x", DType::F32, Shape::from_static(&[4, 32]));
    let s = b.initializer("s", Tensor::scalar_f32(0.02));
    let z = b.initializer("z", Tensor::from_i64_as(DType::U8, vec![], &[128]).unwrap());
    let q = b.node("q", opaque("QuantizeLinear"), &[&x, &s, &z]);
    let dq = b.node("dq", opaque("DequantizeLinear"), &[&q, &s, &z]);
    let wq = b.initializer(
        "wq",
        Tensor::from_i64_as(DType::I8, vec![32, 8], &(0..256).map(|i| i % 255 - 127).collect::<Vec<_>>()).unwrap(),
    );
    let ws = b.initializer("ws", Tensor::scalar_f32(0.01));
    let w = b.node("w", opaque("DequantizeLinear"), &[&wq, &ws]);
    let y = b.node("mm", Op::MatMul, &[&dq, &w]);
    b.output(&y);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert!(!ops.iter().any(|op| op.contains("Quantize")), "{ops:?}");
    assert!(plan.partitioning.partitions.iter().any(|p| p.anchor == "mm"), "{:?}", plan.partitioning.host);
    let mut x = common::random_tensor(&[4, 32], 3).to_f32_vec();
    x[0] = 0.01; // exactly half a step: rounds to even
    x[1] = 9.0; // past the uint8 range: saturates
    let feeds = HashMap::from([("x".to_string(), Tensor::from_f32(vec![4, 32], x))]);
    let want = bolt::reference::run(&g, &feeds).unwrap();
    let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
    let c = compare(&y, &got[&y], &want[&y], PLAN_TOL);
    assert!(c.failure.is_none(), "{}", c.failure.unwrap());
}

/// A MatMul of a vector and a matrix (numpy's promotion) is the product of a one-row (or
/// one-column) matrix between an Unsqueeze and a Squeeze: a GEMM kernel, not a host op. The
/// planned graph gives the reference's MatMul (the rewriting only;
/// tests/python/test_fuzz_graphs.py::test_planner_rewrites_match_ort[einsums] checks
/// against onnxruntime). A dot product of two vectors stays as it is.
#[test]
fn vector_matrix_products_are_gemm_kernels() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{DType, Shape};
    let mut b = GraphBuilder::new("vector_products");
    let v = b.input("v", DType::F32, Shape::from_static(&[32]));
    let m = b.initializer("m", common::random_tensor(&[32, 13], 1));
    let row = b.node("row", Op::MatMul, &[&v, &m]);
    let x = b.input("x", DType::F32, Shape::from_static(&[2, 5, 32]));
    let col = b.node("col", Op::MatMul, &[&x, &v]);
    let dot = b.node("dot", Op::MatMul, &[&v, &v]);
    for y in [&row, &col, &dot] {
        b.output(y);
    }
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let mut anchors: Vec<&str> = plan.partitioning.partitions.iter().map(|p| p.anchor.as_str()).collect();
    anchors.sort();
    assert_eq!(anchors, ["col", "row"]);
    let inputs: HashMap<String, Tensor> = [("v", vec![32]), ("x", vec![2, 5, 32])]
        .iter()
        .map(|(n, s)| (n.to_string(), common::random_tensor(s, 3)))
        .collect();
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
    for (y, shape) in [(&row, vec![13]), (&col, vec![2, 5]), (&dot, vec![])] {
        assert_eq!(got[y].shape, shape);
        let c = compare(y, &got[y], &want[y], Tolerance { rtol: 1e-5, atol: 1e-6 });
        assert!(c.failure.is_none(), "{y}: {:?}", c.failure);
    }
}

/// An LRN node over `[n, c, 3, 4]` input `x`, and ONNX's formula for it in f64.
fn lrn_case(size: usize, alpha: f32, beta: f32, bias: f32) -> (Graph, impl Fn(&[f32]) -> Vec<f32>) {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AttrValue, DType, Shape};
    let (n, c, hw) = (2, 7, 12);
    let lrn = Op::Opaque {
        domain: String::new(),
        op_type: "LRN".into(),
        attrs: vec![
            ("size".into(), AttrValue::Int(size as i64)),
            ("alpha".into(), AttrValue::Float(alpha)),
            ("beta".into(), AttrValue::Float(beta)),
            ("bias".into(), AttrValue::Float(bias)),
        ],
        why: bolt::ir::HOST_COMPUTED.into(),
    };
    let mut b = GraphBuilder::new("lrn");
    let x = b.input("x", DType::F32, Shape::from_static(&[n, c, 3, 4]));
    let y = b.node("lrn", lrn, &[&x]);
    b.output(&y);
    let formula = move |v: &[f32]| {
        let at = |b: usize, ch: usize, p: usize| f64::from(v[(b * c + ch) * hw + p]);
        let mut want = vec![0.0f32; v.len()];
        for bt in 0..n {
            for ch in 0..c {
                for p in 0..hw {
                    // ONNX: channels from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2).
                    let lo = ch.saturating_sub((size - 1) / 2);
                    let hi = (ch + (size - 1).div_ceil(2)).min(c - 1);
                    let sum: f64 = (lo..=hi).map(|k| at(bt, k, p) * at(bt, k, p)).sum();
                    let d = (f64::from(bias) + f64::from(alpha) / size as f64 * sum).powf(f64::from(beta));
                    want[(bt * c + ch) * hw + p] = (at(bt, ch, p) / d) as f32;
                }
            }
        }
        want
    };
    (b.finish().unwrap(), formula)
}

/// LRN (AlexNet, GoogLeNet and ZFNet as caffe2 exported them) runs as a 1x1 conv of the
/// scaled squares with a band matrix plus element-wise kernels: the planned graph and the
/// reference's own LRN both equal ONNX's formula computed here, with a window of even size
/// (one channel before, two after) cut at the first and last channels, and an alpha large
/// enough that every term of the sum shows. At f16, with AlexNet's parameters and activations
/// in the hundreds (whose squares f16 cannot hold), it is still right: the squares are scaled
/// before they are stored.
#[test]
fn lrn_is_a_conv_of_the_squares_with_a_band_matrix() {
    let (g, formula) = lrn_case(4, 3.0, 0.75, 1.5);
    let plan = bolt::plan::plan(&g).unwrap();
    let anchors: Vec<&str> = plan.partitioning.partitions.iter().map(|p| p.anchor.as_str()).collect();
    assert_eq!(anchors, ["lrn"]);
    assert!(plan.graph.nodes.iter().all(|n| !n.op.is_opaque()), "nothing left to the host");
    let input = common::random_tensor(&[2, 7, 3, 4], 7);
    let want = Tensor::from_f32(input.shape.clone(), formula(&input.to_f32_vec()));
    let feeds: HashMap<String, Tensor> = [("x".to_string(), input)].into();
    for (what, graph) in [("reference", &g), ("planned", &plan.graph)] {
        let got = bolt::reference::run(graph, &feeds).unwrap();
        let check = compare("lrn_out", &got["lrn_out"], &want, Tolerance { rtol: 1e-5, atol: 1e-6 });
        assert!(check.failure.is_none(), "{what}: {:?}", check.failure);
    }

    let (g, formula) = lrn_case(5, 1e-4, 0.75, 1.0);
    let g16 = bolt::ir::precision::convert_floats(&g, bolt::ir::DType::F16).unwrap();
    let plan = bolt::plan::plan(&g16).unwrap();
    let big: Vec<f64> = common::random_tensor(&[2, 7, 3, 4], 8).to_f64_vec().iter().map(|v| 400.0 * v).collect();
    let input = Tensor::from_f64_as(bolt::ir::DType::F16, vec![2, 7, 3, 4], &big).unwrap();
    assert!(input.to_f32_vec().iter().any(|v| v * v > 65504.0), "squares past f16's range");
    let want = formula(&input.to_f32_vec());
    let want = Tensor::from_f64_as(
        bolt::ir::DType::F16,
        input.shape.clone(),
        &want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
    )
    .unwrap();
    let got = bolt::reference::run(&plan.graph, &[("x".to_string(), input)].into()).unwrap();
    let check = compare("lrn_out", &got["lrn_out"], &want, Tolerance { rtol: 1e-2, atol: 1e-2 });
    assert!(check.failure.is_none(), "f16: {:?}", check.failure);
}

/// ArgMax and ArgMin (a CTC head's greedy decoding, a classifier's pick) are row reductions in
/// one stitched kernel, not host work that would take the whole tensor back: on every axis,
/// with and without keepdims and select_last_index, in f32 and f16, the planned graph gives
/// the index numpy's argmax / argmin give, computed here: ties go to the first (or last)
/// index, and a NaN wins over any number (the first NaN, or the last).
#[test]
fn arg_max_and_min_are_stitched_row_reductions() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{AttrValue, DType, Shape};
    let dims = [3usize, 5, 6];
    // Few distinct values (ties in every row); a NaN at two places of one row along each axis.
    let mut v: Vec<f64> = (0..90).map(|i| ((i * 7) % 4) as f64 - 1.5).collect();
    v[8] = f64::NAN;
    v[10] = f64::NAN;
    v[44] = f64::NAN;
    v[74] = f64::NAN;
    for dtype in [DType::F32, DType::F16] {
        let x_val = Tensor::from_f64_as(dtype, dims.to_vec(), &v).unwrap();
        for (op, max) in [("ArgMax", true), ("ArgMin", false)] {
            for axis in [-1i64, 1, 0] {
                for (keep, last) in [(1, 0), (0, 0), (1, 1), (0, 1)] {
                    let what = format!("{op} axis {axis} keepdims {keep} select_last_index {last} {dtype}");
                    let mut b = GraphBuilder::new("arg");
                    let x = b.input("x", dtype, Shape::from_static(&dims));
                    let attrs = vec![
                        ("axis".into(), AttrValue::Int(axis)),
                        ("keepdims".into(), AttrValue::Int(keep)),
                        ("select_last_index".into(), AttrValue::Int(last)),
                    ];
                    let arg = Op::Opaque {
                        domain: String::new(),
                        op_type: op.into(),
                        attrs,
                        why: bolt::ir::HOST_COMPUTED.into(),
                    };
                    let y = b.node("arg", arg, &[&x]);
                    b.output(&y);
                    let g = b.finish().unwrap();
                    let plan = bolt::plan::plan(&g).unwrap();
                    assert!(plan.graph.nodes.iter().all(|n| !n.op.is_opaque()), "{what}: left to the host");
                    let kernels = plan.graph.nodes.iter().filter(|n| n.op.op_type() == "BoltStitched").count();
                    assert_eq!(kernels, 1, "{what}: one stitched kernel");

                    // numpy's answer, position by position.
                    let k = axis.rem_euclid(3) as usize;
                    let strides = [30usize, 6, 1];
                    let xs = x_val.to_f64_vec();
                    let mut want = Vec::new();
                    let mut out_shape = dims.to_vec();
                    out_shape[k] = 1;
                    for o in 0..90 / dims[k] {
                        let (mut idx, mut rest) = ([0usize; 3], o);
                        for d in (0..3).rev() {
                            if d != k {
                                idx[d] = rest % out_shape[d];
                                rest /= out_shape[d];
                            }
                        }
                        let at = |j: usize| {
                            let mut i = idx;
                            i[k] = j;
                            xs[i[0] * strides[0] + i[1] * strides[1] + i[2] * strides[2]]
                        };
                        let mut best = 0;
                        for j in 1..dims[k] {
                            let (c, b) = (at(j), at(best));
                            let beats = if b.is_nan() {
                                last == 1 && c.is_nan()
                            } else if c.is_nan() {
                                true
                            } else if c == b {
                                last == 1
                            } else {
                                (c > b) == max
                            };
                            if beats {
                                best = j;
                            }
                        }
                        want.push(best as i64);
                    }
                    if keep == 0 {
                        out_shape.remove(k);
                    }
                    let feeds: HashMap<String, Tensor> = [("x".to_string(), x_val.clone())].into();
                    let got = &bolt::reference::run(&plan.graph, &feeds).unwrap()[&y];
                    assert_eq!(got.shape, out_shape, "{what}");
                    assert_eq!(got.as_i64_vec().unwrap(), want, "{what}");
                }
            }
        }
    }
}

/// A node nobody reads (trueocr's export keeps a TopK over the vocabulary whose results no
/// one uses) is dropped, with what fed only it: the host would otherwise copy its input back
/// and compute it on every run. Graph outputs and what feeds them stay.
#[test]
fn nodes_nobody_reads_are_dropped() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{DType, Shape};
    let mut b = GraphBuilder::new("unread");
    let x = b.input("x", DType::F32, Shape::from_static(&[2, 9]));
    let k = b.initializer("k", Tensor::from_i64(vec![1], vec![3]));
    let logp = b.node("logp", Op::LogSoftmax { axis: -1 }, &[&x]);
    let topk = Op::Opaque {
        domain: String::new(),
        op_type: "TopK".into(),
        attrs: vec![],
        why: bolt::ir::HOST_COMPUTED.into(),
    };
    b.node_multi("topk", topk, &[&logp, &k], 2);
    let y = b.node("relu", Op::Unary(bolt::ir::Unary::Relu), &[&x]);
    b.output(&y);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert_eq!(ops, ["BoltStitched"], "only the ReLU is computed");
    let feeds: HashMap<String, Tensor> = [("x".to_string(), common::random_tensor(&[2, 9], 5))].into();
    let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
    let want: Vec<f32> = feeds["x"].to_f32_vec().iter().map(|v| v.max(0.0)).collect();
    assert_eq!(got[&y].to_f32_vec(), want);
}

/// A Dropout with a mask output (caffe2 names one on every Dropout) is its input in inference:
/// an Identity where nothing reads the mask; where the mask is a graph output it stays with the
/// host, which gives the input and a mask of all true, as onnxruntime does outside training.
#[test]
fn dropouts_with_masks_are_identities_in_inference() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{DType, Shape};
    let dropout = || Op::Opaque {
        domain: String::new(),
        op_type: "Dropout".into(),
        attrs: vec![],
        why: bolt::ir::HOST_COMPUTED.into(),
    };
    for mask_read in [false, true] {
        let mut b = GraphBuilder::new("dropout");
        let x = b.input("x", DType::F32, Shape::from_static(&[2, 5]));
        let outs = b.node_multi("drop", dropout(), &[&x], 2);
        let y = b.node("relu", Op::Unary(bolt::ir::Unary::Relu), &[&outs[0]]);
        b.output(&y);
        if mask_read {
            b.output(&outs[1]);
        }
        let g = b.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let on_host = plan.graph.nodes.iter().any(|n| n.op.op_type() == "Dropout");
        assert_eq!(on_host, mask_read, "mask read: {mask_read}");
        let x_val = common::random_tensor(&[2, 5], 3);
        let feeds: HashMap<String, Tensor> = [("x".to_string(), x_val.clone())].into();
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
        let relu: Vec<f32> = x_val.to_f32_vec().iter().map(|v| v.max(0.0)).collect();
        assert_eq!(got[&y].to_f32_vec(), relu);
        if mask_read {
            assert_eq!(got[&outs[1]].dtype(), bolt::ir::DType::Bool);
            assert_eq!(got[&outs[1]].to_f64_vec(), vec![1.0; 10], "all true");
        }
    }
    // A training_mode input: a constant false is inference (an Identity); one given at run
    // time stays with the host, which runs false as inference and refuses true.
    for constant in [true, false] {
        let mut b = GraphBuilder::new("dropout_training_mode");
        let x = b.input("x", DType::F32, Shape::from_static(&[2, 5]));
        let ratio = b.initializer("ratio", Tensor::scalar_f32(0.5));
        let mode = if constant {
            b.initializer("mode", Tensor::from_i64_as(DType::Bool, vec![], &[0]).unwrap())
        } else {
            b.input("mode", DType::Bool, Shape::from_static(&[]))
        };
        let outs = b.node_multi("drop", dropout(), &[&x, &ratio, &mode], 1);
        b.output(&outs[0]);
        let g = b.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let on_host = plan.graph.nodes.iter().any(|n| n.op.op_type() == "Dropout");
        assert_eq!(on_host, !constant, "constant training_mode: {constant}");
        let x_val = common::random_tensor(&[2, 5], 4);
        let mut feeds: HashMap<String, Tensor> = [("x".to_string(), x_val.clone())].into();
        if !constant {
            feeds.insert("mode".into(), Tensor::from_i64_as(DType::Bool, vec![], &[0]).unwrap());
            let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
            assert_eq!(got[&outs[0]].to_f32_vec(), x_val.to_f32_vec());
            feeds.insert("mode".into(), Tensor::from_i64_as(DType::Bool, vec![], &[1]).unwrap());
            let err = bolt::reference::run(&plan.graph, &feeds).unwrap_err().to_string();
            assert!(err.contains("'drop'") && err.contains("training_mode is true"), "{err}");
        } else {
            let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
            assert_eq!(got[&outs[0]].to_f32_vec(), x_val.to_f32_vec());
        }
    }
}
