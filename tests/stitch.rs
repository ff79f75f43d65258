//! Stitched memory-intensive regions (src/partition/stitch.rs): how ops group into regions,
//! and what a region means: `Region::eval` of the typed steps against the reference executor
//! running the original ops (whose kernels are checked against onnxruntime in
//! tests/conformance.rs and tests/models.rs), on odd row widths, f32 and f16.

mod common;

use bolt::ir::builder::GraphBuilder;
use bolt::ir::precision::convert_floats;
use bolt::ir::{Binary, Compare, DType, Dim, Graph, Logic, Op, ReduceKind, Shape, Tensor, Unary};
use bolt::partition::stitch::{find, Region};
use std::collections::{HashMap, HashSet};

use common::random_tensor as random;

#[derive(Clone, Copy, Debug)]
enum Pattern {
    LayerNormOp,
    /// PyTorch's export of LayerNorm before opset 17.
    LayerNormDecomposed,
    GeluErf,
    Softmax,
    ReduceMean,
    /// Softmax as jax2tf and hand-written exports spell it: ReduceMax, Sub, Exp, ReduceSum, Div.
    SoftmaxDecomposed,
    /// LLaMA's RMSNorm: x * Reciprocal(Sqrt(ReduceMean(x * x) + eps)) * gamma.
    RmsNorm,
    /// Abs, Neg, Max, Min and a row minimum (ReduceMin).
    MinMax,
    /// A CTC or language-model head's LogSoftmax, and Log itself.
    LogSoftmax,
    /// Clip with a lower bound only, then with an upper bound only (a count clamped away
    /// from 0 before a division, as masked mean pooling does).
    Clip,
    /// An attention-style mask of bools and token ids (Cast to int64, Equal, GreaterOrEqual,
    /// Not, Or, Less, Xor, Where, Cast of a bool) under a softmax.
    Mask,
    /// ONNX's other row reductions: x / ReduceL2(x) (torch's F.normalize), ReduceL1,
    /// ReduceSumSquare, ReduceLogSum (of |x|) and ReduceLogSumExp.
    Norms,
}

impl Pattern {
    const ALL: [Pattern; 12] = [
        Pattern::LayerNormOp,
        Pattern::LayerNormDecomposed,
        Pattern::GeluErf,
        Pattern::Softmax,
        Pattern::ReduceMean,
        Pattern::SoftmaxDecomposed,
        Pattern::RmsNorm,
        Pattern::MinMax,
        Pattern::LogSoftmax,
        Pattern::Clip,
        Pattern::Mask,
        Pattern::Norms,
    ];
}

fn graph(p: Pattern, rows: usize, width: usize) -> Graph {
    let mut g = GraphBuilder::new("region");
    let x = g.input("x", DType::F32, Shape::from_static(&[rows, width]));
    let gamma = g.initializer("gamma", random(&[width], 5));
    let beta = g.initializer("beta", random(&[width], 6));
    let scalar = |g: &mut GraphBuilder, name: &str, v: f32| g.initializer(name, Tensor::scalar_f32(v));
    let y = match p {
        Pattern::LayerNormOp => g.node(
            "ln",
            Op::LayerNormalization { axis: -1, epsilon: 1e-5, stash_type: DType::F32 },
            &[&x, &gamma, &beta],
        ),
        Pattern::LayerNormDecomposed => {
            let mean_op = || Op::Reduce {
                kind: ReduceKind::Mean,
                axes: Some(vec![-1]),
                keepdims: true,
                noop_with_empty_axes: false,
            };
            let m = g.node("mean", mean_op(), &[&x]);
            let d = g.node("sub", Op::Binary(Binary::Sub), &[&x, &m]);
            let two = scalar(&mut g, "two", 2.0);
            let sq = g.node("pow", Op::Binary(Binary::Pow), &[&d, &two]);
            let var = g.node("var", mean_op(), &[&sq]);
            let eps = scalar(&mut g, "eps", 1e-5);
            let ve = g.node("add_eps", Op::Binary(Binary::Add), &[&var, &eps]);
            let sd = g.node("sqrt", Op::Unary(Unary::Sqrt), &[&ve]);
            let n = g.node("div", Op::Binary(Binary::Div), &[&d, &sd]);
            let s = g.node("mul_gamma", Op::Binary(Binary::Mul), &[&n, &gamma]);
            g.node("add_beta", Op::Binary(Binary::Add), &[&s, &beta])
        }
        Pattern::GeluErf => {
            let r2 = scalar(&mut g, "sqrt2", std::f32::consts::SQRT_2);
            let one = scalar(&mut g, "one", 1.0);
            let half = scalar(&mut g, "half", 0.5);
            let a = g.node("div", Op::Binary(Binary::Div), &[&x, &r2]);
            let e = g.node("erf", Op::Unary(Unary::Erf), &[&a]);
            let b = g.node("add1", Op::Binary(Binary::Add), &[&e, &one]);
            let c = g.node("mul_x", Op::Binary(Binary::Mul), &[&x, &b]);
            g.node("mul_half", Op::Binary(Binary::Mul), &[&c, &half])
        }
        Pattern::Softmax => g.node("softmax", Op::Softmax { axis: 1 }, &[&x]),
        Pattern::Mask => {
            // Token ids from the data (truncated: -1, 0, 1), so the masks vary per element.
            let ids = g.node("ids", Op::Cast { to: DType::I64, saturate: true }, &[&x]);
            let pad = g.initializer("pad", Tensor::from_i64(vec![], vec![1]));
            let padded = g.node("padded", Op::Compare(Compare::Equal), &[&ids, &pad]);
            let minus_half = scalar(&mut g, "minus_half", -0.5);
            let kept = g.node("kept", Op::Compare(Compare::GreaterOrEqual), &[&x, &minus_half]);
            let dropped = g.node("dropped", Op::Not, &[&kept]);
            let either = g.node("either", Op::Logic(Logic::Or), &[&padded, &dropped]);
            let half = scalar(&mut g, "half", 0.5);
            let small = g.node("small", Op::Compare(Compare::Less), &[&x, &half]);
            let masked = g.node("masked", Op::Logic(Logic::Xor), &[&either, &small]);
            // Small enough that -100 - 1 is exact in f16 (the reference rounds each op).
            let low = scalar(&mut g, "low", -100.0);
            let w = g.node("where", Op::Where, &[&masked, &low, &x]);
            let f = g.node("cast", Op::Cast { to: DType::F32, saturate: true }, &[&either]);
            let s = g.node("sub", Op::Binary(Binary::Sub), &[&w, &f]);
            g.node("softmax", Op::Softmax { axis: -1 }, &[&s])
        }
        Pattern::Clip => {
            let lo = scalar(&mut g, "lo", -0.5);
            let hi = scalar(&mut g, "hi", 0.75);
            let a = g.node("clip_lo", Op::Clip, &[&x, &lo]);
            let b = g.node("clip_hi", Op::Clip, &[&a, "", &hi]);
            g.node("div", Op::Binary(Binary::Div), &[&x, &b])
        }
        Pattern::LogSoftmax => {
            let l = g.node("log_softmax", Op::LogSoftmax { axis: -1 }, &[&x]);
            // log(exp(l) + 1): finite for any l.
            let e = g.node("exp", Op::Unary(Unary::Exp), &[&l]);
            let one = scalar(&mut g, "one", 1.0);
            let a = g.node("add1", Op::Binary(Binary::Add), &[&e, &one]);
            let lg = g.node("log", Op::Unary(Unary::Log), &[&a]);
            g.node("sum", Op::Binary(Binary::Add), &[&l, &lg])
        }
        Pattern::SoftmaxDecomposed => {
            let reduce = |kind| Op::Reduce { kind, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
            let m = g.node("max", reduce(ReduceKind::Max), &[&x]);
            let d = g.node("sub", Op::Binary(Binary::Sub), &[&x, &m]);
            let e = g.node("exp", Op::Unary(Unary::Exp), &[&d]);
            let s = g.node("sum", reduce(ReduceKind::Sum), &[&e]);
            g.node("div", Op::Binary(Binary::Div), &[&e, &s])
        }
        Pattern::RmsNorm => {
            let sq = g.node("square", Op::Binary(Binary::Mul), &[&x, &x]);
            let mean_op = Op::Reduce {
                kind: ReduceKind::Mean,
                axes: Some(vec![-1]),
                keepdims: true,
                noop_with_empty_axes: false,
            };
            let ms = g.node("mean", mean_op, &[&sq]);
            let eps = scalar(&mut g, "eps", 1e-6);
            let a = g.node("add_eps", Op::Binary(Binary::Add), &[&ms, &eps]);
            let r = g.node("sqrt", Op::Unary(Unary::Sqrt), &[&a]);
            let inv = g.node("reciprocal", Op::Unary(Unary::Reciprocal), &[&r]);
            let n = g.node("normed", Op::Binary(Binary::Mul), &[&x, &inv]);
            g.node("mul_gamma", Op::Binary(Binary::Mul), &[&n, &gamma])
        }
        Pattern::MinMax => {
            let a = g.node("abs", Op::Unary(Unary::Abs), &[&x]);
            let n = g.node("neg", Op::Unary(Unary::Neg), &[&a]);
            let hi = g.node("max", Op::Binary(Binary::Max), &[&x, &gamma]);
            let lo = g.node("min", Op::Binary(Binary::Min), &[&n, &beta]);
            let row_min =
                Op::Reduce { kind: ReduceKind::Min, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
            let m = g.node("row_min", row_min, &[&lo]);
            let s = g.node("shift", Op::Binary(Binary::Sub), &[&hi, &m]);
            g.node("add", Op::Binary(Binary::Add), &[&s, &lo])
        }
        Pattern::Norms => {
            let row = |kind| Op::Reduce { kind, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
            let l2 = g.node("l2", row(ReduceKind::L2), &[&x]);
            let unit = g.node("unit", Op::Binary(Binary::Div), &[&x, &l2]);
            let l1 = g.node("l1", row(ReduceKind::L1), &[&x]);
            let ss = g.node("sum_square", row(ReduceKind::SumSquare), &[&x]);
            let abs = g.node("abs", Op::Unary(Unary::Abs), &[&x]);
            let ls = g.node("log_sum", row(ReduceKind::LogSum), &[&abs]);
            let lse = g.node("log_sum_exp", row(ReduceKind::LogSumExp), &[&x]);
            let a = g.node("a", Op::Binary(Binary::Sub), &[&lse, &ls]);
            let b = g.node("b", Op::Binary(Binary::Div), &[&ss, &l1]);
            let c = g.node("c", Op::Binary(Binary::Add), &[&a, &b]);
            g.node("sum", Op::Binary(Binary::Add), &[&unit, &c])
        }
        Pattern::ReduceMean => {
            let m = g.node(
                "mean",
                Op::Reduce { kind: ReduceKind::Mean, axes: Some(vec![1]), keepdims: true, noop_with_empty_axes: false },
                &[&x],
            );
            g.node("center", Op::Binary(Binary::Sub), &[&x, &m])
        }
    };
    g.output(&y);
    g.finish().unwrap()
}

fn one_region(g: &Graph) -> Region {
    let (regions, not) = find(g, &HashSet::new());
    assert!(not.is_empty(), "{not:?}");
    assert_eq!(regions.len(), 1, "{regions:?}");
    regions.into_iter().next().unwrap()
}

#[test]
fn each_pattern_is_one_region_equal_to_its_ops_on_odd_widths_f32_and_f16() {
    for p in Pattern::ALL {
        for width in [1usize, 3, 17, 1000, 4099] {
            for dtype in [DType::F32, DType::F16] {
                let g32 = graph(p, 3, width);
                let g = if dtype == DType::F16 { convert_floats(&g32, DType::F16).unwrap() } else { g32 };
                let r = one_region(&g);
                assert_eq!(r.nodes.len(), g.nodes.len(), "{p:?}: every op in the region");
                assert_eq!(r.reduces(), !matches!(p, Pattern::GeluErf | Pattern::Clip), "{p:?}");
                let x = random(&[3, width], 1);
                let x = Tensor::from_f64_as(dtype, x.shape.clone(), &x.to_f64_vec()).unwrap();
                let want = bolt::reference::run(&g, &HashMap::from([("x".to_string(), x.clone())])).unwrap();
                let inputs: Vec<Tensor> =
                    r.inputs.iter().map(|n| if n == "x" { x.clone() } else { (*g.initializers[n]).clone() }).collect();
                let got = r.eval(&inputs.iter().collect::<Vec<_>>()).unwrap();
                assert_eq!(r.outputs.len(), 1);
                let w = &want[&r.outputs[0].0];
                assert_eq!((got[0].dtype(), &got[0].shape), (w.dtype(), &w.shape), "{p:?}");
                // f16: the reference rounds after every op, the region once.
                let tol = if dtype == DType::F16 { 2e-2 } else { 1e-5 };
                let worst = got[0]
                    .to_f32_vec()
                    .iter()
                    .zip(w.to_f32_vec())
                    .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
                    .fold(0f32, f32::max);
                assert!(worst <= tol, "{p:?} width {width} {dtype}: {worst}");
            }
        }
    }
}

#[test]
fn regions_stop_at_other_ops_and_rows_of_another_length() {
    // LayerNorm over [rows, 8], then a MatMul (not stitchable), then GELU: two regions.
    let mut g = GraphBuilder::new("two");
    let x = g.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let gamma = g.initializer("gamma", random(&[8], 5));
    let w = g.initializer("w", random(&[8, 16], 7));
    let ln = g.node("ln", Op::LayerNormalization { axis: -1, epsilon: 1e-5, stash_type: DType::F32 }, &[&x, &gamma]);
    let mm = g.node("mm", Op::MatMul, &[&ln, &w]);
    let a = g.node("tanh", Op::Unary(Unary::Tanh), &[&mm]);
    let s = g.node("sm", Op::Softmax { axis: -1 }, &[&a]);
    g.output(&s);
    let g = g.finish().unwrap();
    let (regions, not) = find(&g, &HashSet::new());
    assert!(not.is_empty(), "{not:?}");
    let names: Vec<Vec<String>> = regions.iter().map(|r| r.nodes.clone()).collect();
    assert_eq!(names, [vec!["ln".to_string()], vec!["tanh".into(), "sm".into()]]);

    // Nodes a GEMM partition took are not stitched again.
    let taken: HashSet<String> = ["tanh".to_string()].into();
    let (regions, _) = find(&g, &taken);
    assert_eq!(regions.iter().map(|r| r.nodes.len()).sum::<usize>(), 2);

    // Softmaxes over rows of 8 and of 1 joined by one Add: no single row length, so the
    // softmax over rows of 1 becomes a region of its own, whose output the other reads.
    let mut g = GraphBuilder::new("rows");
    let x = g.input("x", DType::F32, Shape::from_static(&[4, 1, 8]));
    let y = g.input("y", DType::F32, Shape::from_static(&[4, 8, 1]));
    let a = g.node("sx", Op::Softmax { axis: -1 }, &[&x]);
    let b = g.node("sy", Op::Softmax { axis: -1 }, &[&y]);
    let s = g.node("add", Op::Binary(Binary::Add), &[&a, &b]);
    g.output(&s);
    let g = g.finish().unwrap();
    let (regions, not) = find(&g, &HashSet::new());
    assert!(not.is_empty(), "{not:?}");
    let mut names: Vec<Vec<String>> = regions.iter().map(|r| r.nodes.clone()).collect();
    names.sort();
    assert_eq!(names, [vec!["sx".to_string(), "add".into()], vec!["sy".into()]]);
    assert_eq!(regions.iter().find(|r| r.nodes == ["sy"]).unwrap().outputs[0].0, g.nodes[1].outputs[0]);
}

/// BERT-base (tests/python/make_models.py, HuggingFace's export form), after the partitioner
/// took its GEMMs with their epilogues (the erf GELU among them): each layer leaves two
/// LayerNorm regions and three head transposes ([0,2,1,3], read in place as views); the
/// attention cores' Softmax and mask Add are left to attention fusion.
#[test]
fn bert_base_regions() {
    let Some(dir) = common::testdata("models/bert_base") else { return };
    let g = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
    let parts = bolt::partition::partition(&g);
    let taken: HashSet<String> = parts.partitions.iter().flat_map(|p| p.nodes.iter().cloned()).collect();
    let (regions, not) = find(&g, &taken);
    let attention: Vec<&str> =
        not.iter().filter(|n| n.reason.starts_with("attention core")).map(|n| n.node.as_str()).collect();
    assert_eq!(attention.iter().filter(|n| n.starts_with("softmax")).count(), 12, "{attention:?}");
    assert_eq!(attention.len(), 24, "softmax and mask Add of 12 cores: {attention:?}");
    let layernorms = regions.iter().filter(|r| r.reduces()).count();
    assert_eq!(layernorms, 24, "{:?}", regions.iter().map(|r| &r.nodes).collect::<Vec<_>>());
    let views = regions.iter().filter(|r| r.views.iter().any(|v| v.as_deref() == Some(&[0, 2, 1, 3][..]))).count();
    assert_eq!(views, 36);
    assert_eq!(regions.len(), 60, "{:?}", regions.iter().map(|r| &r.nodes).collect::<Vec<_>>());
    // The erf GELU after each intermediate dense layer is that GEMM's epilogue, not a region.
    let erf: Vec<&str> =
        g.nodes.iter().filter(|n| matches!(n.op, Op::Unary(Unary::Erf))).map(|n| n.name.as_str()).collect();
    assert_eq!(erf.len(), 12);
    assert!(erf.iter().all(|n| taken.contains(*n)), "{erf:?}");
}

/// The planner replaces each region with one stitched node, and the kernel spec it lowers to
/// (`plan::lower::stitch_spec`: element types, dense or broadcast reads, per-row outputs) means
/// the original ops: the spec's meaning on the run-time problem (`runtime::stitch`, what the
/// reference device runs for it) against the reference executor running the model's ops.
/// The generated code is checked against that same meaning in codegen/tests/stitch.rs.
#[test]
fn planned_regions_become_stitched_nodes_whose_kernel_specs_mean_the_original_ops() {
    for p in Pattern::ALL {
        for width in [1usize, 3, 17, 1000, 4099] {
            for dtype in [DType::F32, DType::F16] {
                let g32 = graph(p, 3, width);
                let g = if dtype == DType::F16 { convert_floats(&g32, DType::F16).unwrap() } else { g32 };
                let plan = bolt::plan::plan(&g).unwrap();
                let stitched: Vec<&bolt::ir::Node> =
                    plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))).collect();
                assert_eq!(stitched.len(), 1, "{p:?}: {:?}", plan.stitched);
                assert_eq!(plan.graph.nodes.len(), 1, "{p:?}: nothing else is left");
                let n = stitched[0];
                let spec = bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
                let x = random(&[3, width], 1);
                let x = Tensor::from_f64_as(dtype, x.shape.clone(), &x.to_f64_vec()).unwrap();
                let want = bolt::reference::run(&g, &HashMap::from([("x".to_string(), x.clone())])).unwrap();
                let inputs: Vec<Tensor> = n
                    .inputs
                    .iter()
                    .flatten()
                    .map(|t| if t == "x" { x.clone() } else { (*plan.graph.initializers[t]).clone() })
                    .collect();
                let out_types: Vec<DType> = n.outputs.iter().map(|o| plan.graph.types[o].dtype).collect();
                let Op::Stitched(region) = &n.op else { unreachable!() };
                let got =
                    bolt::runtime::stitch::run(&spec, region, &inputs.iter().collect::<Vec<_>>(), &out_types).unwrap();
                let w = &want[&g.outputs[0]];
                assert_eq!((got[0].dtype(), &got[0].shape), (w.dtype(), &w.shape), "{p:?}");
                let tol = if dtype == DType::F16 { 2e-2 } else { 1e-5 };
                let worst = got[0]
                    .to_f32_vec()
                    .iter()
                    .zip(w.to_f32_vec())
                    .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
                    .fold(0f32, f32::max);
                assert!(worst <= tol, "{p:?} width {width} {dtype}: {worst}");
            }
        }
    }
}

/// A reduction whose rows (of 1 here) are not the rows of the op that reads it (a [4, 1] mean
/// added to [4, 8]) cannot share its kernel: one kernel runs rows of one length. The reader
/// starts a region of its own, and both run as stitched kernels (they used to stay on the host
/// together); the plan still computes what the model does.
#[test]
fn a_reduction_read_over_rows_of_another_length_is_a_region_of_its_own() {
    let mut g = GraphBuilder::new("narrow");
    let x = g.input("x", DType::F32, Shape::from_static(&[4, 1]));
    let y = g.input("y", DType::F32, Shape::from_static(&[4, 8]));
    let m = g.node(
        "mean",
        Op::Reduce { kind: ReduceKind::Mean, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false },
        &[&x],
    );
    let s = g.node("add", Op::Binary(Binary::Add), &[&m, &y]);
    g.output(&s);
    let g = g.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let regions: Vec<(Vec<String>, bool)> =
        plan.stitched.iter().map(|d| (d.nodes.clone(), d.stitched.is_some())).collect();
    assert_eq!(regions, vec![(vec!["mean".to_string()], true), (vec!["add".to_string()], true)], "{:?}", plan.stitched);
    let inputs = HashMap::from([("x".to_string(), random(&[4, 1], 1)), ("y".to_string(), random(&[4, 8], 2))]);
    let a = bolt::reference::run(&g, &inputs).unwrap();
    let b = bolt::reference::run(&plan.graph, &inputs).unwrap();
    assert_eq!(a[&g.outputs[0]].to_f32_vec(), b[&g.outputs[0]].to_f32_vec());
}

/// BERT-base planned without attention fusion: every LayerNorm and every attention core's
/// mask Add + Softmax is a stitched node, so only Reshape/Transpose (shape and data movement)
/// are left to the host. With attention fusion (the default) the cores are fused attention
/// nodes reading the head-split transposes in place and writing the head merge directly: the
/// 24 LayerNorms are stitched, no Softmax is, and only Reshapes are left.
#[test]
fn bert_base_plan_leaves_only_data_movement_to_the_host() {
    let Some(dir) = common::testdata("models/bert_base") else { return };
    let g = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
    let unfused = bolt::plan::PlanOptions { attention: false, ..Default::default() };
    for (opts, stitched_count, softmax_count, attention_count, host) in [
        (unfused, 72, 12, 0, vec!["Reshape", "Transpose"]),
        (bolt::plan::PlanOptions::default(), 24, 0, 12, vec!["Reshape"]),
    ] {
        let plan = bolt::plan::plan_with(&g, &opts).unwrap();
        let stitched: Vec<&bolt::ir::Node> =
            plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))).collect();
        // Unfused: 24 LayerNorms, 12 mask + softmax, and the 36 [0,2,1,3] head transposes read
        // in place; the 12 [0,2,3,1] key transposes are NCHW -> NHWC glue kernels.
        assert_eq!(stitched.len(), stitched_count, "{:?}", plan.stitched);
        let softmax = stitched
            .iter()
            .filter(|n| match &n.op {
                Op::Stitched(r) => r.nodes.iter().any(|x| x.starts_with("softmax")),
                _ => false,
            })
            .count();
        assert_eq!(softmax, softmax_count);
        let attention = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Attention(_))).count();
        assert_eq!(attention, attention_count);
        for n in &stitched {
            bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap_or_else(|e| panic!("{}: {e}", n.name));
        }
        let mut left: Vec<&str> = plan
            .graph
            .nodes
            .iter()
            .filter(|n| !matches!(n.op, Op::Stitched(_) | Op::Fused(_) | Op::FusedChain(_) | Op::Attention(_)))
            .map(|n| n.op.op_type())
            .collect();
        left.sort();
        left.dedup();
        assert_eq!(left, host);
    }
}

/// A transpose of a region input is read in place through permuted strides: Transpose ->
/// Add (a broadcast bias) -> Softmax is one stitched node whose kernel spec, on the problem the
/// devices derive from the *stored* input, equals the original ops.
#[test]
fn transposed_inputs_are_strided_views() {
    let mut g = GraphBuilder::new("view");
    let x = g.input("x", DType::F32, Shape::from_static(&[2, 7, 5]));
    let b = g.initializer("b", random(&[7], 3));
    let t = g.node("t", Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[&x]);
    let a = g.node("add", Op::Binary(Binary::Add), &[&t, &b]);
    let s = g.node("sm", Op::Softmax { axis: -1 }, &[&a]);
    g.output(&s);
    let g = g.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    assert_eq!(plan.graph.nodes.len(), 1, "{:?}", plan.stitched);
    let n = &plan.graph.nodes[0];
    let Op::Stitched(region) = &n.op else { panic!("{:?}", n.op) };
    assert_eq!(region.nodes, ["t", "add", "sm"]);
    assert_eq!(region.views[0].as_deref(), Some(&[0, 2, 1][..]));
    let spec = bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
    assert_eq!(spec.inputs[0].access, bolt_codegen::stitch::Access::Strided);
    let xv = random(&[2, 7, 5], 1);
    let want = bolt::reference::run(&g, &HashMap::from([("x".to_string(), xv.clone())])).unwrap();
    let bias = (*plan.graph.initializers["b"]).clone();
    let got = bolt::runtime::stitch::run(&spec, region, &[&xv, &bias], &[DType::F32]).unwrap();
    let w = &want[&g.outputs[0]];
    assert_eq!(got[0].shape, w.shape);
    for (a, b) in got[0].to_f32_vec().iter().zip(w.to_f32_vec()) {
        assert!((a - b).abs() <= 1e-6, "{a} vs {b}");
    }
}

/// A group of ops joined through an op no region takes (Softplus -> Add -> an Expand adding a
/// leading axis, left to the host -> Mul, the Mul also reading the Softplus) cannot be one stitched node: it
/// would feed itself (the shape of epilogue-fuzzer seed 147, which made a cycle through a Clip
/// before Clip was stitched). It is split where the path leaves and comes back: {Softplus,
/// Add} and {Mul} are two stitched nodes around the host's op, and the plan still equals the
/// model.
#[test]
fn a_region_joined_through_a_host_op_is_split_where_the_path_leaves() {
    let mut g = GraphBuilder::new("cycle");
    let x = g.input("x", DType::F32, Shape::from_static(&[4, 8]));
    let one = g.initializer("one", Tensor::from_f64_as(DType::F32, vec![], &[1.0]).unwrap());
    let sp = g.node("softplus", Op::Unary(Unary::Softplus), &[&x]);
    let a = g.node("add", Op::Binary(Binary::Add), &[&sp, &one]);
    let shape = g.initializer("shape", Tensor::from_i64(vec![3], vec![2, 4, 8]));
    let c = g.node("expand", Op::Expand, &[&a, &shape]);
    let y = g.node("mul", Op::Binary(Binary::Mul), &[&sp, &c]);
    g.output(&y);
    let g = g.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let mut parts: Vec<Vec<String>> =
        plan.stitched.iter().filter(|d| d.stitched.is_some()).map(|d| d.nodes.clone()).collect();
    parts.sort();
    assert_eq!(parts, [vec!["mul".to_string()], vec!["softplus".into(), "add".into()]], "{:?}", plan.stitched);
    let kinds: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "Expand").count(), 1, "{kinds:?}");
    // The planned graph (stitched nodes run as their regions' meaning, in f64 rounded once)
    // equals the model on the reference executor: the split's rewriting, not the kernels, is
    // what this checks.
    let inputs = HashMap::from([("x".to_string(), random(&[4, 8], 1))]);
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
    for (a, b) in want[&g.outputs[0]].to_f32_vec().iter().zip(got[&g.outputs[0]].to_f32_vec()) {
        assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
    }
}

/// A Softmax over another axis than the last (YOLOv8's DFL head: axis 1 of a rank-4 tensor
/// it reads through a transpose) runs as a stitched row softmax: the canonical pass moves the
/// axis last with a transpose, which composes with the model's own transpose into one view the
/// stitched kernel reads in place, and transposes back. Every axis of ranks 2 to 4, odd sizes:
/// no Softmax is left to the host, and the planned graph equals the model on the reference
/// executor (whose Softmax over any axis is checked against onnxruntime in the conformance
/// cases): this checks the rewriting and the region's meaning, not a GPU kernel.
#[test]
fn softmax_over_any_axis_is_stitched_through_transposes() {
    for dims in [vec![5usize, 7], vec![3, 5, 7], vec![2, 3, 5, 7]] {
        let rank = dims.len();
        for axis in 0..rank as i64 - 1 {
            for through_transpose in [false, true] {
                let mut g = GraphBuilder::new("softmax_axis");
                let x = g.input("x", DType::F32, Shape::from_static(&dims));
                let mut v = x.clone();
                if through_transpose {
                    // The DFL head's [0, 2, 1, 3] (a swap of the two middle or first axes).
                    let mut p: Vec<usize> = (0..rank).collect();
                    p.swap(rank - 3.min(rank - 1), rank - 2);
                    v = g.node("t", Op::Transpose { perm: Some(p) }, &[&v]);
                }
                let s = g.node("sm", Op::Softmax { axis }, &[&v]);
                let y = g.node("relu", Op::Unary(Unary::Relu), &[&s]);
                g.output(&y);
                let g = g.finish().unwrap();
                let plan = bolt::plan::plan(&g).unwrap();
                let case = format!("{dims:?} axis {axis} transpose {through_transpose}");
                assert!(plan.stitched.iter().all(|d| d.stitched.is_some()), "{case}: {:?}", plan.stitched);
                let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
                assert!(!ops.contains(&"Softmax"), "{case}: {ops:?}");
                // Everything else is a stitched kernel or an NCHW <-> NHWC glue kernel.
                for n in plan.graph.nodes.iter().filter(|n| !matches!(n.op, Op::Stitched(_))) {
                    let glue = plan.glue.iter().find(|d| d.node == n.name).and_then(|d| d.kernel.as_ref());
                    assert!(glue.is_some(), "{case}: {} ({}) runs on the host: {ops:?}", n.name, n.op.op_type());
                }
                let inputs = HashMap::from([("x".to_string(), random(&dims, 3))]);
                let want = bolt::reference::run(&g, &inputs).unwrap();
                let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
                let (w, o) = (&want[&g.outputs[0]], &got[&g.outputs[0]]);
                assert_eq!(w.shape, o.shape, "{case}");
                for (a, b) in w.to_f32_vec().iter().zip(o.to_f32_vec()) {
                    assert!((a - b).abs() <= 1e-6, "{case}: {a} vs {b}");
                }
                for n in plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))) {
                    bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap_or_else(|e| panic!("{case}: {e}"));
                }
            }
        }
    }
}

/// A Slice of constant bounds is read in place as a strided window of the stored tensor: a
/// YOLOv5-style Focus (x[..., 0::2, 0::2] and its three siblings) feeding element-wise ops,
/// slices with starts, clamped and negative bounds, and a slice on a middle axis. Each is one
/// stitched node whose kernel spec, on the problem and input offsets the devices derive from
/// the *stored* input (`lower::stitch_problem`), equals the original ops on the reference
/// executor; odd sizes, f32 and f16.
#[test]
fn slices_are_strided_windows_read_in_place() {
    // (input shape, starts, ends, axes, steps)
    type Case = (Vec<usize>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);
    let cases: Vec<Case> = vec![
        (vec![1, 3, 9, 11], vec![0], vec![i64::MAX], vec![2], vec![2]),
        (vec![2, 3, 9, 11], vec![1, 0], vec![i64::MAX, i64::MAX], vec![2, 3], vec![2, 2]),
        (vec![2, 3, 9, 11], vec![1, 1], vec![i64::MAX, -1], vec![-2, -1], vec![2, 3]),
        (vec![4, 10, 7], vec![-7, 2], vec![100, 9], vec![1, 0], vec![3, 1]),
        (vec![5, 6], vec![2], vec![5], vec![1], vec![1]),
    ];
    for (shape, starts, ends, axes, steps) in cases {
        for dtype in [DType::F32, DType::F16] {
            let case = format!("{shape:?} {starts:?}:{ends:?} axes {axes:?} steps {steps:?} {dtype}");
            let mut g = GraphBuilder::new("slice");
            let x = g.input("x", dtype, Shape::from_static(&shape));
            let i64s = |v: &[i64]| Tensor::from_i64(vec![v.len()], v.to_vec());
            let (s, e) = (g.initializer("starts", i64s(&starts)), g.initializer("ends", i64s(&ends)));
            let (a, st) = (g.initializer("axes", i64s(&axes)), g.initializer("steps", i64s(&steps)));
            let sl = g.node("slice", Op::Slice, &[&x, &s, &e, &a, &st]);
            let y = g.node("sigmoid", Op::Unary(Unary::Sigmoid), &[&sl]);
            let two = g.initializer("two", Tensor::from_f64_as(dtype, vec![], &[2.0]).unwrap());
            let y = g.node("mul", Op::Binary(Binary::Mul), &[&y, &two]);
            g.output(&y);
            let g = g.finish().unwrap();
            let plan = bolt::plan::plan(&g).unwrap();
            assert_eq!(plan.graph.nodes.len(), 1, "{case}: {:?}", plan.stitched);
            let n = &plan.graph.nodes[0];
            let Op::Stitched(region) = &n.op else { panic!("{case}: {:?}", n.op) };
            assert_eq!(region.nodes, ["slice", "sigmoid", "mul"], "{case}");
            assert!(region.slice(0).is_some(), "{case}");
            let spec = bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
            assert_eq!(spec.inputs[0].access, bolt_codegen::stitch::Access::Strided, "{case}");
            let xv = random(&shape, 7);
            let xv = Tensor::from_f64_as(dtype, shape.clone(), &xv.to_f64_vec()).unwrap();
            let want = bolt::reference::run(&g, &HashMap::from([("x".to_string(), xv.clone())])).unwrap();
            let got = bolt::runtime::stitch::run(&spec, region, &[&xv], &[dtype]).unwrap();
            let w = &want[&g.outputs[0]];
            assert_eq!(got[0].shape, w.shape, "{case}");
            let tol = if dtype == DType::F16 { 2e-3 } else { 1e-6 };
            for (a, b) in got[0].to_f32_vec().iter().zip(w.to_f32_vec()) {
                assert!((a - b).abs() <= tol, "{case}: {a} vs {b}");
            }
        }
    }
}

/// A unit-step slice nobody in a region reads stays a device copy (cheaper than a kernel); a
/// stepped one (YOLOv5's Focus feeding a Concat) becomes a stitched strided-copy kernel.
#[test]
fn slices_outside_regions_are_copies_unless_stepped() {
    for (step, stitched) in [(1i64, false), (2, true)] {
        let mut g = GraphBuilder::new("slice_concat");
        let x = g.input("x", DType::F32, Shape::from_static(&[1, 3, 8, 8]));
        let i64s = |v: &[i64]| Tensor::from_i64(vec![v.len()], v.to_vec());
        let (s, e) = (g.initializer("starts", i64s(&[0])), g.initializer("ends", i64s(&[i64::MAX])));
        let (a, st) = (g.initializer("axes", i64s(&[2])), g.initializer("steps", i64s(&[step])));
        let sl = g.node("slice", Op::Slice, &[&x, &s, &e, &a, &st]);
        let c = g.node("concat", Op::Concat { axis: 1 }, &[&sl, &sl]);
        g.output(&c);
        let g = g.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let kinds: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
        assert_eq!(kinds.contains(&"BoltStitched"), stitched, "step {step}: {kinds:?}");
        let feeds = HashMap::from([("x".to_string(), random(&[1, 3, 8, 8], 2))]);
        let (want, got) =
            (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
        assert_eq!(want[&g.outputs[0]].to_f32_vec(), got[&g.outputs[0]].to_f32_vec(), "step {step}");
    }
}

/// Reductions that drop their axes (jax2tf's form: ReduceMax / ReduceSum with keepdims 0, the
/// axes as an input from opset 13 / 18) are stitched like keepdims ones: the canonical pass
/// gives them their axes as an attribute and keeps the reduced axis, a Squeeze (a view) drops
/// it after. A decomposed softmax spelt so is one stitched node and a view; the planned graph
/// equals the model on the reference executor (ReduceSum / ReduceMax / ReduceMin are checked
/// against the ONNX conformance cases).
#[test]
fn reductions_dropping_their_axes_are_stitched_with_a_squeeze_after() {
    for kind in [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min, ReduceKind::Mean] {
        let mut g = GraphBuilder::new("keepdims0");
        let x = g.input("x", DType::F32, Shape::from_static(&[3, 5, 19]));
        let axes = g.initializer("axes", Tensor::from_i64(vec![1], vec![-1]));
        let r = g.node(
            "reduce",
            Op::Reduce { kind, axes: None, keepdims: false, noop_with_empty_axes: false },
            &[&x, &axes],
        );
        let t = g.node("tanh", Op::Unary(Unary::Tanh), &[&r]);
        g.output(&t);
        let g = g.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
        assert_eq!(ops.iter().filter(|o| **o == "BoltStitched").count(), 2, "{kind:?}: {ops:?}");
        assert!(ops.contains(&"Squeeze") && ops.len() == 3, "{kind:?}: {ops:?}");
        let feeds = HashMap::from([("x".to_string(), random(&[3, 5, 19], 4))]);
        let (want, got) =
            (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
        let (w, o) = (&want[&g.outputs[0]], &got[&g.outputs[0]]);
        assert_eq!(w.shape, [3, 5], "{kind:?}");
        assert_eq!(w.shape, o.shape, "{kind:?}");
        for (a, b) in w.to_f32_vec().iter().zip(o.to_f32_vec()) {
            assert!((a - b).abs() <= 1e-6, "{kind:?}: {a} vs {b}");
        }
    }
}

/// A transformer's embeddings block as exporters write it: Gather(word table, token ids) +
/// position embeddings, then LayerNorm. The lookup joins the region (the table read by row,
/// the ids one per row), so the block is one stitched kernel; its meaning and its kernel
/// spec's equal the reference running the original ops, negative ids included.
#[test]
fn embedding_lookups_stitch_with_what_follows() {
    let (batch, seq, vocab, width) = (2usize, 5usize, 11usize, 37usize);
    let ids: Vec<i64> = (0..batch * seq).map(|i| (i as i64 * 7) % 13 - 2).collect();
    let ids = Tensor::from_i64(vec![batch, seq], ids);
    for dtype in [DType::F32, DType::F16] {
        let mut b = GraphBuilder::new("embeddings");
        let x = b.input("ids", DType::I64, Shape::from_static(&[batch, seq]));
        let table = b.initializer("word", random(&[vocab, width], 3));
        let pos = b.initializer("pos", random(&[seq, width], 4));
        let gamma = b.initializer("gamma", random(&[width], 5));
        let beta = b.initializer("beta", random(&[width], 6));
        let e = b.node("lookup", Op::Gather { axis: 0 }, &[&table, &x]);
        let s = b.node("add_pos", Op::Binary(Binary::Add), &[&e, &pos]);
        let ln = Op::LayerNormalization { axis: -1, epsilon: 1e-5, stash_type: DType::F32 };
        let y = b.node("ln", ln, &[&s, &gamma, &beta]);
        b.output(&y);
        let g32 = b.finish().unwrap();
        let g = if dtype == DType::F16 { convert_floats(&g32, DType::F16).unwrap() } else { g32 };
        let want = bolt::reference::run(&g, &HashMap::from([("ids".to_string(), ids.clone())])).unwrap()[&y].clone();
        let close = |got: &Tensor, what: &str| {
            assert_eq!((got.dtype(), &got.shape), (want.dtype(), &want.shape), "{what}");
            let tol = if dtype == DType::F16 { 2e-2 } else { 1e-5 };
            let worst = got
                .to_f32_vec()
                .iter()
                .zip(want.to_f32_vec())
                .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
                .fold(0f32, f32::max);
            assert!(worst <= tol, "{what} {dtype}: {worst}");
        };
        let r = one_region(&g);
        assert_eq!(r.nodes, ["lookup", "add_pos", "ln"]);
        let inputs: Vec<Tensor> =
            r.inputs.iter().map(|n| if n == "ids" { ids.clone() } else { (*g.initializers[n]).clone() }).collect();
        close(&r.eval(&inputs.iter().collect::<Vec<_>>()).unwrap()[0], "region");

        let plan = bolt::plan::plan(&g).unwrap();
        assert_eq!(plan.graph.nodes.len(), 1, "one stitched kernel: {:?}", plan.stitched);
        let n = &plan.graph.nodes[0];
        let Op::Stitched(region) = &n.op else { panic!("{:?}", n.op) };
        let spec = bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
        let inputs: Vec<Tensor> = n
            .inputs
            .iter()
            .flatten()
            .map(|t| if t == "ids" { ids.clone() } else { (*plan.graph.initializers[t]).clone() })
            .collect();
        let got =
            bolt::runtime::stitch::run(&spec, region, &inputs.iter().collect::<Vec<_>>(), &[want.dtype()]).unwrap();
        close(&got[0], "kernel spec");
    }
}

/// A lookup by ids the graph computes (tf2onnx's Keras embeddings take float ids and Cast them
/// to int64) reads them one per row from memory: the Cast is a stitched kernel and the lookup
/// starts one of its own, instead of the lookup staying on the host. The planned graph equals
/// the model on the reference (the rewriting; each region's meaning is checked above).
#[test]
fn a_lookup_by_computed_ids_starts_a_region_of_its_own() {
    let mut b = GraphBuilder::new("float_ids");
    let x = b.input("x", DType::F32, Shape::from_static(&[6, 21]));
    let table = b.initializer("table", random(&[17, 8], 3));
    let ids = b.node("cast", Op::Cast { to: DType::I64, saturate: true }, &[&x]);
    let e = b.node("lookup", Op::Gather { axis: 0 }, &[&table, &ids]);
    let y = b.node("relu", Op::Unary(Unary::Relu), &[&e]);
    b.output(&y);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let stitched: Vec<&Vec<String>> = plan.stitched.iter().filter(|d| d.stitched.is_some()).map(|d| &d.nodes).collect();
    assert!(stitched.iter().any(|n| n.contains(&"cast".to_string())), "{:?}", plan.stitched);
    assert!(stitched.iter().any(|n| n.contains(&"lookup".to_string())), "{:?}", plan.stitched);
    let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert!(ops.iter().all(|o| *o == "BoltStitched"), "{ops:?}");
    let ids: Vec<f32> = (0..6 * 21).map(|i| ((i * 5) % 17) as f32).collect();
    let feeds = HashMap::from([("x".to_string(), Tensor::from_f32(vec![6, 21], ids))]);
    let (want, got) = (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
    assert_eq!(want[&y].to_f32_vec(), got[&y].to_f32_vec());
}

/// Lengths computed from data (an ASR front end's frame counts from its sample counts, a
/// recogniser's widths rounded to its stride) are int64 arithmetic one stitched kernel computes
/// exactly: subtract, divide (truncating toward zero), add, a Clip with only an upper bound,
/// Python's Mod (the divisor's sign), Neg, Abs, Max. The planned graph, its stitched region's
/// meaning and its kernel spec's all equal the reference running the original ops, negative
/// lengths and exact multiples included.
#[test]
fn int64_length_arithmetic_is_one_exact_kernel() {
    let mut b = GraphBuilder::new("lengths");
    let lens = b.input("lens", DType::I64, Shape::from_static(&[6]));
    let int = |b: &mut GraphBuilder, name: &str, v: i64| b.initializer(name, Tensor::from_i64(vec![], vec![v]));
    let (frame, hop, one, cap, stride) = (
        int(&mut b, "frame", 400),
        int(&mut b, "hop", 160),
        int(&mut b, "one", 1),
        int(&mut b, "cap", 90),
        int(&mut b, "stride", -7),
    );
    let d = b.node("sub", Op::Binary(Binary::Sub), &[&lens, &frame]);
    let q = b.node("div", Op::Binary(Binary::Div), &[&d, &hop]);
    let n = b.node("add", Op::Binary(Binary::Add), &[&q, &one]);
    let c = b.node("clip", Op::Clip, &[&n, "", &cap]);
    let modulo =
        Op::Opaque { domain: String::new(), op_type: "Mod".into(), attrs: vec![], why: bolt::ir::HOST_COMPUTED.into() };
    let m = b.node("mod", modulo, &[&c, &stride]);
    let neg = b.node("neg", Op::Unary(Unary::Neg), &[&m]);
    let abs = b.node("abs", Op::Unary(Unary::Abs), &[&neg]);
    let y = b.node("max", Op::Binary(Binary::Max), &[&abs, &q]);
    b.output(&y);
    b.output(&c);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    // (The divisor's sign, of a constant, is a shape computation beside it.)
    let kernels: Vec<&bolt::ir::Node> = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))).collect();
    assert_eq!(kernels.len(), 1, "one stitched kernel: {:?}", plan.stitched);
    assert!(plan.graph.nodes.iter().all(|n| !n.op.is_opaque()), "{:?}", plan.graph.nodes);
    let lens_val = Tensor::from_i64(vec![6], vec![16000, 12345, 560, 399, 0, -161]);
    let feeds = HashMap::from([("lens".to_string(), lens_val.clone())]);
    let want = bolt::reference::run(&g, &feeds).unwrap();
    let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
    for out in [&y, &c] {
        assert_eq!(got[out].as_i64_vec(), want[out].as_i64_vec(), "{out}");
    }
    assert_eq!(
        want[&c].as_i64_vec().unwrap(),
        [90, 75, 2, 1, -1, -2],
        "the lengths themselves (truncating toward zero)"
    );

    let n = kernels[0];
    let Op::Stitched(region) = &n.op else { panic!("{:?}", n.op) };
    let spec = bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
    // The kernel's inputs: the graph's, its constants, what the host computes beside it.
    let mut every = plan.graph.clone();
    every.outputs = every.nodes.iter().flat_map(|n| n.outputs.clone()).collect();
    let values = bolt::reference::run(&every, &feeds).unwrap();
    let inputs: Vec<Tensor> = n
        .inputs
        .iter()
        .flatten()
        .map(|t| match (t.as_str(), values.get(t)) {
            ("lens", _) => lens_val.clone(),
            (_, Some(v)) => v.clone(),
            _ => (*plan.graph.initializers[t]).clone(),
        })
        .collect();
    let dtypes: Vec<DType> = region.dtypes.clone();
    let outs = bolt::runtime::stitch::run(&spec, region, &inputs.iter().collect::<Vec<_>>(), &dtypes).unwrap();
    for (k, (name, _)) in region.outputs.iter().enumerate() {
        assert_eq!(outs[k].as_i64_vec(), want[name].as_i64_vec(), "kernel spec: {name}");
    }
}

/// int32 arithmetic is stitched too, wrapped to 32 bits after every op as the reference's
/// int32 ops wrap (kernels compute integers in int64): a square past 2^31 divided after.
#[test]
fn int32_arithmetic_wraps_after_every_op() {
    let mut b = GraphBuilder::new("int32");
    let x = b.input("x", DType::I32, Shape::from_static(&[4]));
    let three = b.initializer("three", Tensor::from_i64_as(DType::I32, vec![], &[3]).unwrap());
    let sq = b.node("square", Op::Binary(Binary::Mul), &[&x, &x]);
    let y = b.node("third", Op::Binary(Binary::Div), &[&sq, &three]);
    b.output(&y);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert_eq!(ops, ["BoltStitched"]);
    let x_val = Tensor::from_i64_as(DType::I32, vec![4], &[70000, -70000, 46341, 5]).unwrap();
    let feeds = HashMap::from([("x".to_string(), x_val)]);
    let (want, got) = (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
    // 70000^2 = 4.9e9 wraps to 605032704; 46341^2 = 2147488281 wraps to -2147479015.
    assert_eq!(want[&y].as_i64_vec().unwrap(), [201677568, 201677568, -715826338, 8]);
    assert_eq!(got[&y].dtype(), DType::I32);
    assert_eq!(got[&y].as_i64_vec(), want[&y].as_i64_vec());
}

/// A region with more results read outside it than a kernel writes (4) is cut into regions
/// that each fit, not left to the host: five values of a chain each read again after a host
/// op (a CumSum of the last) come back, so the chain's region would write five.
#[test]
fn regions_past_a_kernels_outputs_are_cut_not_left_to_the_host() {
    let mut b = GraphBuilder::new("many_outputs");
    let mut x = b.input("x", DType::F32, Shape::from_static(&[3, 7]));
    let mut chain = Vec::new();
    for (k, u) in [Unary::Exp, Unary::Tanh, Unary::Neg, Unary::Abs, Unary::Relu].into_iter().enumerate() {
        x = b.node(&format!("u{k}"), Op::Unary(u), &[&x]);
        chain.push(x.clone());
    }
    let axis = b.initializer("axis", Tensor::from_i64(vec![], vec![1]));
    let cumsum = Op::Opaque {
        domain: String::new(),
        op_type: "CumSum".into(),
        attrs: vec![],
        why: bolt::ir::HOST_COMPUTED.into(),
    };
    let mut y = b.node("cumsum", cumsum, &[&x, &axis]);
    for (k, c) in chain.iter().enumerate() {
        y = b.node(&format!("add{k}"), Op::Binary(Binary::Add), &[&y, c]);
    }
    b.output(&y);
    let g = b.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let refused: Vec<_> = plan.stitched.iter().filter(|d| d.stitched.is_none()).collect();
    assert!(refused.is_empty(), "{refused:?}");
    let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert_eq!(ops.iter().filter(|o| **o != "BoltStitched").collect::<Vec<_>>(), [&"CumSum"], "{ops:?}");
    assert!(plan.stitched.iter().all(|d| d.nodes.len() <= 5), "{:?}", plan.stitched);
    let feeds = HashMap::from([("x".to_string(), random(&[3, 7], 9))]);
    let (want, got) = (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
    assert_eq!(got[&y].to_f32_vec(), want[&y].to_f32_vec());
}

/// A HuggingFace-style encoder layer from token ids, as its exports write it: embeddings
/// (Gathers of the word table by the ids and of the position table by a slice of the position
/// ids buffer up to the length, added, LayerNorm), the int64 attention mask made
/// additive in the graph (Unsqueeze, Cast, 1 - m, * -1e4), self-attention with the heads split
/// and merged by Reshape/Transpose, output projection + residual + LayerNorm, and a GELU FFN +
/// residual + LayerNorm, with symbolic batch and length. Planned, nothing is left but views and
/// the position ids' shape computation: the embeddings block (both lookups) and the mask
/// are stitched kernels, the attention core a fused attention kernel, the projections GEMMs.
/// The planned graph equals the model on the reference (this checks the rewriting; each
/// stitched spec's meaning is checked in the tests above).
#[test]
fn hf_style_encoder_layer_from_token_ids_runs_whole_on_the_device() {
    let (batch, seq, vocab, hidden, heads) = (2usize, 8usize, 30usize, 32usize, 4usize);
    let dh = hidden / heads;
    let mut b = GraphBuilder::new("hf_layer");
    // Symbolic batch and length, as exported: nothing about the positions folds at plan time.
    let dims = Shape(vec![Dim::Sym("batch".into()), Dim::Sym("seq".into())]);
    let ids = b.input("input_ids", DType::I64, dims.clone());
    let mask = b.input("attention_mask", DType::I64, dims);
    let mut seed = 10;
    let mut w = |b: &mut GraphBuilder, name: &str, shape: &[usize]| {
        seed += 1;
        let t = random(shape, seed);
        let fan_in = shape[0].max(1) as f32;
        b.initializer(
            name,
            Tensor::from_f32(t.shape.clone(), t.to_f32_vec().iter().map(|v| v / fan_in.sqrt()).collect()),
        )
    };
    let i64s =
        |b: &mut GraphBuilder, name: &str, v: &[i64]| b.initializer(name, Tensor::from_i64(vec![v.len()], v.to_vec()));
    let ln = |b: &mut GraphBuilder, name: &str, x: &str, gamma: &str, beta: &str| {
        let op = Op::LayerNormalization { axis: -1, epsilon: 1e-12, stash_type: DType::F32 };
        b.node(name, op, &[x, gamma, beta])
    };
    let (word, pos) = (w(&mut b, "word", &[vocab, hidden]), w(&mut b, "pos", &[seq, hidden]));
    let (g0, b0, g1, b1, g2, b2) = (
        w(&mut b, "ln0_g", &[hidden]),
        w(&mut b, "ln0_b", &[hidden]),
        w(&mut b, "ln1_g", &[hidden]),
        w(&mut b, "ln1_b", &[hidden]),
        w(&mut b, "ln2_g", &[hidden]),
        w(&mut b, "ln2_b", &[hidden]),
    );
    let e = b.node("word_lookup", Op::Gather { axis: 0 }, &[&word, &ids]);
    // Position ids as HF writes them: a slice of a [1, max_positions] buffer up to the length.
    let buffer = b.initializer("position_ids", Tensor::from_i64(vec![1, 2 * seq], (0..2 * seq as i64).collect()));
    let len = b.node("ids_shape", Op::Shape { start: 1, end: Some(2) }, &[&ids]);
    let (zero, one) = (i64s(&mut b, "zero", &[0]), i64s(&mut b, "one_axis", &[1]));
    let p = b.node("position_slice", Op::Slice, &[&buffer, &zero, &len, &one]);
    let pe = b.node("position_lookup", Op::Gather { axis: 0 }, &[&pos, &p]);
    let e = b.node("add_pos", Op::Binary(Binary::Add), &[&e, &pe]);
    let x = ln(&mut b, "ln0", &e, &g0, &b0);
    // The additive mask: (1 - mask[:, None, None, :].float()) * -1e4.
    let axes = i64s(&mut b, "axes12", &[1, 2]);
    let m = b.node("unsqueeze_mask", Op::Unsqueeze, &[&mask, &axes]);
    let m = b.node("cast_mask", Op::Cast { to: DType::F32, saturate: true }, &[&m]);
    let one = b.initializer("one", Tensor::scalar_f32(1.0));
    let m = b.node("invert_mask", Op::Binary(Binary::Sub), &[&one, &m]);
    let big = b.initializer("minus_1e4", Tensor::scalar_f32(-1e4));
    let m = b.node("scale_mask", Op::Binary(Binary::Mul), &[&m, &big]);
    // Self-attention.
    let split = i64s(&mut b, "split_heads", &[0, 0, heads as i64, dh as i64]);
    let merge = i64s(&mut b, "merge_heads", &[0, 0, hidden as i64]);
    let mut proj = |b: &mut GraphBuilder, name: &str, x: &str| {
        let (wt, bias) = (w(b, &format!("{name}_w"), &[hidden, hidden]), w(b, &format!("{name}_b"), &[hidden]));
        let y = b.node(&format!("{name}_matmul"), Op::MatMul, &[x, &wt]);
        b.node(&format!("{name}_bias"), Op::Binary(Binary::Add), &[&y, &bias])
    };
    let heads_of = |b: &mut GraphBuilder, name: &str, x: &str, perm: Vec<usize>| {
        let r = b.node(&format!("{name}_split"), Op::Reshape { allowzero: false }, &[x, &split]);
        b.node(&format!("{name}_heads"), Op::Transpose { perm: Some(perm) }, &[&r])
    };
    let q = proj(&mut b, "q", &x);
    let k = proj(&mut b, "k", &x);
    let v = proj(&mut b, "v", &x);
    let q = heads_of(&mut b, "q", &q, vec![0, 2, 1, 3]);
    let kt = heads_of(&mut b, "k", &k, vec![0, 2, 3, 1]);
    let v = heads_of(&mut b, "v", &v, vec![0, 2, 1, 3]);
    let s = b.node("scores", Op::MatMul, &[&q, &kt]);
    let scale = b.initializer("sqrt_dh", Tensor::scalar_f32((dh as f32).sqrt()));
    let s = b.node("scale", Op::Binary(Binary::Div), &[&s, &scale]);
    let s = b.node("add_mask", Op::Binary(Binary::Add), &[&s, &m]);
    let p = b.node("softmax", Op::Softmax { axis: -1 }, &[&s]);
    let c = b.node("context", Op::MatMul, &[&p, &v]);
    let c = b.node("merge_transpose", Op::Transpose { perm: Some(vec![0, 2, 1, 3]) }, &[&c]);
    let c = b.node("merge_reshape", Op::Reshape { allowzero: false }, &[&c, &merge]);
    let o = proj(&mut b, "out", &c);
    let o = b.node("residual1", Op::Binary(Binary::Add), &[&o, &x]);
    let h = ln(&mut b, "ln1", &o, &g1, &b1);
    let f = proj(&mut b, "ffn_in", &h);
    let f = b.node("gelu", Op::Unary(Unary::Gelu { approximate: bolt::ir::GeluApprox::None }), &[&f]);
    let f = proj(&mut b, "ffn_out", &f);
    let f = b.node("residual2", Op::Binary(Binary::Add), &[&f, &h]);
    let y = ln(&mut b, "ln2", &f, &g2, &b2);
    b.output(&y);
    let g = b.finish().unwrap();

    let plan = bolt::plan::plan(&g).unwrap();
    // Left: views, and the position ids' shape computation (Shape, Slice of the buffer).
    let metadata = bolt::partition::shape_computations(&plan.graph);
    let left: Vec<(usize, &bolt::ir::Node)> = plan
        .graph
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| !matches!(n.op, Op::Stitched(_) | Op::Fused(_) | Op::FusedChain(_) | Op::Attention(_)))
        .filter(|(_, n)| !n.op.is_view())
        .collect();
    for (i, n) in &left {
        assert!(metadata.contains(i), "{} ({}) is left and no shape computation", n.name, n.op.op_type());
    }
    assert_eq!(left.len(), 2, "{:?}", left.iter().map(|(_, n)| &n.name).collect::<Vec<_>>());
    let stitched: Vec<&bolt::ir::Node> = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))).collect();
    for n in &stitched {
        bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap_or_else(|e| panic!("{}: {e}", n.name));
    }
    let regions: Vec<&Vec<String>> = stitched
        .iter()
        .filter_map(|n| match &n.op {
            Op::Stitched(r) => Some(&r.nodes),
            _ => None,
        })
        .collect();
    assert!(regions.iter().any(|r| r[..] == ["word_lookup", "position_lookup", "add_pos", "ln0"]), "{regions:?}");
    assert!(regions.iter().any(|r| r[..] == ["cast_mask", "invert_mask", "scale_mask"]), "{regions:?}");
    assert_eq!(plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Attention(_))).count(), 1);

    let ids_v: Vec<i64> = (0..batch * seq).map(|i| (i as i64 * 11) % vocab as i64).collect();
    let keep: Vec<i64> = (0..batch * seq).map(|i| i64::from(i % seq < seq - 2 * (i / seq))).collect();
    let inputs = HashMap::from([
        ("input_ids".to_string(), Tensor::from_i64(vec![batch, seq], ids_v)),
        ("attention_mask".to_string(), Tensor::from_i64(vec![batch, seq], keep)),
    ]);
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
    let worst = got[&y]
        .to_f32_vec()
        .iter()
        .zip(want[&y].to_f32_vec())
        .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
        .fold(0f32, f32::max);
    assert!(worst <= 1e-3, "planned vs model: {worst}");
}

/// Reductions over several axes (TF's global pooling of NHWC data over [1, 2], SE blocks'
/// mean over [2, 3], non-adjacent axes, every axis) become one stitched row reduction over
/// the merged axes between views and transposes; the planned graph equals the model.
#[test]
fn reductions_over_several_axes_are_stitched_over_the_merged_axes() {
    let shape = [2usize, 3, 5, 7];
    for kind in [ReduceKind::Mean, ReduceKind::Sum, ReduceKind::Max, ReduceKind::Min] {
        for axes in [vec![2i64, 3], vec![1, 2], vec![0, 2], vec![-1, 1, 2], vec![0, 1, 2, 3]] {
            let mut g = GraphBuilder::new("multi_axis");
            let x = g.input("x", DType::F32, Shape::from_static(&shape));
            let op = Op::Reduce { kind, axes: Some(axes.clone()), keepdims: true, noop_with_empty_axes: false };
            let r = g.node("reduce", op, &[&x]);
            let t = g.node("tanh", Op::Unary(Unary::Tanh), &[&r]);
            g.output(&t);
            let g = g.finish().unwrap();
            let plan = bolt::plan::plan(&g).unwrap();
            let stitched: Vec<&Region> = plan
                .graph
                .nodes
                .iter()
                .filter_map(|n| match &n.op {
                    Op::Stitched(r) => Some(r.as_ref()),
                    _ => None,
                })
                .collect();
            assert!(
                stitched.iter().any(|r| r.nodes.contains(&"reduce".to_string())),
                "{kind:?} {axes:?}: {:?}",
                plan.stitched
            );
            let host: Vec<&str> = plan
                .graph
                .nodes
                .iter()
                .filter(|n| !matches!(n.op, Op::Stitched(_) | Op::Reshape { .. } | Op::Transpose { .. }))
                .map(|n| n.op.op_type())
                .collect();
            assert!(host.is_empty(), "{kind:?} {axes:?}: {host:?}");
            let feeds = HashMap::from([("x".to_string(), random(&shape, 9))]);
            let (want, got) =
                (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
            let (w, o) = (&want[&g.outputs[0]], &got[&g.outputs[0]]);
            assert_eq!(w.shape, o.shape, "{kind:?} {axes:?}");
            for (a, b) in w.to_f32_vec().iter().zip(o.to_f32_vec()) {
                assert!((a - b).abs() <= 1e-5, "{kind:?} {axes:?}: {a} vs {b}");
            }
        }
    }
}

/// PyTorch's `LayerNorm([C, H, W])` exports axis = -3: planned as the normalisation of rows
/// of the merged axes (a view, a stitched kernel, a view back), with constant scale and bias
/// flattened, or read through a view when computed. Checked against the formula written out
/// here in f64, not against Bolt's LayerNormalization, on a symbolic batch.
#[test]
fn layer_norms_over_several_axes_are_stitched_over_the_merged_axes() {
    let (c, h, w) = (3usize, 5, 7);
    for (axis, computed_scale) in [(-3i64, false), (1, true), (-2, false)] {
        let mut g = GraphBuilder::new("ln_multi_axis");
        let x =
            g.input("x", DType::F32, Shape(vec![Dim::Sym("N".into()), Dim::Known(c), Dim::Known(h), Dim::Known(w)]));
        let k = (axis.rem_euclid(4)) as usize;
        let norm: Vec<usize> = [c, h, w][k - 1..].to_vec();
        let mut gamma = g.initializer("gamma", random(&norm, 5));
        let beta = g.initializer("beta", random(&norm, 6));
        if computed_scale {
            gamma = g.node("gamma_abs", Op::Unary(Unary::Abs), &[&gamma]);
        }
        let op = Op::LayerNormalization { axis, epsilon: 1e-5, stash_type: DType::F32 };
        let y = g.node("ln", op, &[&x, &gamma, &beta]);
        g.output(&y);
        let g = g.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let left = beside_stitched_kernels(&plan);
        assert!(left.is_empty(), "axis {axis}: {left:?}");
        assert!(plan
            .graph
            .nodes
            .iter()
            .any(|n| matches!(&n.op, Op::Stitched(r) if r.nodes.contains(&"ln".to_string()))));
        for n in [1usize, 2] {
            let xs = random(&[n, c, h, w], 9);
            let feeds = HashMap::from([("x".to_string(), xs.clone())]);
            let got = bolt::reference::run(&plan.graph, &feeds).unwrap()[&y].to_f32_vec();
            let (xv, gv, bv) = (xs.to_f32_vec(), random(&norm, 5).to_f32_vec(), random(&norm, 6).to_f32_vec());
            let row: usize = norm.iter().product();
            for (r, chunk) in xv.chunks(row).enumerate() {
                let mean = chunk.iter().map(|&v| v as f64).sum::<f64>() / row as f64;
                let var = chunk.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / row as f64;
                for (i, &v) in chunk.iter().enumerate() {
                    let g = if computed_scale { gv[i].abs() } else { gv[i] } as f64;
                    let want = (v as f64 - mean) / (var + 1e-5).sqrt() * g + bv[i] as f64;
                    let at = r * row + i;
                    assert!((got[at] as f64 - want).abs() < 1e-4, "axis {axis}, N {n}, [{at}]: {} vs {want}", got[at]);
                }
            }
        }
    }
}

/// An f16 model's softmax computed in f32 as autocast exports write it (Cast up, Softmax, Cast
/// down, then a scale): one stitched kernel rounding at the casts, equal to the reference; a
/// cast between floats alone stays a glue kernel.
#[test]
fn float_casts_next_to_a_region_join_it() {
    let (rows, width) = (3usize, 37usize);
    let mut b = GraphBuilder::new("autocast");
    let x = b.input("x", DType::F16, Shape::from_static(&[rows, width]));
    let up = b.node("up", Op::Cast { to: DType::F32, saturate: true }, &[&x]);
    let p = b.node("softmax", Op::Softmax { axis: -1 }, &[&up]);
    let down = b.node("down", Op::Cast { to: DType::F16, saturate: true }, &[&p]);
    let scale = b.initializer("scale", Tensor::from_f64_as(DType::F16, vec![], &[3.0]).unwrap());
    let y = b.node("scale_mul", Op::Binary(Binary::Mul), &[&down, &scale]);
    b.output(&y);
    let g = b.finish().unwrap();
    let r = one_region(&g);
    assert_eq!(r.nodes, ["up", "softmax", "down", "scale_mul"]);
    let x_t = Tensor::from_f64_as(DType::F16, vec![rows, width], &random(&[rows, width], 2).to_f64_vec()).unwrap();
    let want = bolt::reference::run(&g, &HashMap::from([("x".to_string(), x_t.clone())])).unwrap()[&y].clone();
    let plan = bolt::plan::plan(&g).unwrap();
    assert_eq!(plan.graph.nodes.len(), 1, "{:?}", plan.stitched);
    let n = &plan.graph.nodes[0];
    let Op::Stitched(region) = &n.op else { panic!("{:?}", n.op) };
    let spec = bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
    let got = bolt::runtime::stitch::run(&spec, region, &[&x_t], &[DType::F16]).unwrap();
    assert_eq!(got[0].dtype(), DType::F16);
    for (a, b) in got[0].to_f32_vec().iter().zip(want.to_f32_vec()) {
        assert!((a - b).abs() <= 2e-3 * (1.0 + b.abs()), "{a} vs {b}");
    }
    // Alone, a cast between floats is a glue kernel's.
    let mut b = GraphBuilder::new("cast_alone");
    let x = b.input("x", DType::F16, Shape::from_static(&[rows, width]));
    let up = b.node("up", Op::Cast { to: DType::F32, saturate: true }, &[&x]);
    b.output(&up);
    let (regions, _) = find(&b.finish().unwrap(), &HashSet::new());
    assert!(regions.is_empty(), "{regions:?}");
}

/// jax2tf writes `BroadcastTo(x, Shape(x))` in every LayerNorm: an Expand to the shape its
/// input already has (symbolic dims included) is an Identity, so the LayerNorm around it is one
/// stitched kernel; an Expand that does broadcast (a dim of 1 to the batch) is left as it is.
#[test]
fn expands_to_their_own_shape_are_identities() {
    let mut g = GraphBuilder::new("broadcast_to");
    let b = Dim::Sym("B".into());
    let x = g.input("x", DType::F32, Shape(vec![b.clone(), Dim::Known(6)]));
    let ones = g.input("ones", DType::F32, Shape(vec![Dim::Known(1), Dim::Known(6)]));
    let shape = g.node("shape", Op::Shape { start: 0, end: None }, &[&x]);
    let mean = g.node(
        "mean",
        Op::Reduce { kind: ReduceKind::Mean, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false },
        &[&x],
    );
    let same = g.node("same", Op::Expand, &[&x, &shape]);
    let d = g.node("sub", Op::Binary(Binary::Sub), &[&same, &mean]);
    let wide = g.node("wide", Op::Expand, &[&ones, &shape]);
    let y = g.node("mul", Op::Binary(Binary::Mul), &[&d, &wide]);
    g.output(&y);
    let g = g.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert_eq!(ops.iter().filter(|o| **o == "Expand").count(), 1, "only the broadcasting one stays: {ops:?}");
    assert!(plan.graph.nodes.iter().any(|n| n.op.op_type() == "Identity" && n.inputs.len() == 1), "{ops:?}");
    let inputs = HashMap::from([("x".to_string(), random(&[3, 6], 1)), ("ones".to_string(), random(&[1, 6], 2))]);
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
    // (The stitched Sub rounds once, in f64: last-bit differences only.)
    for (a, b) in want[&g.outputs[0]].to_f32_vec().iter().zip(got[&g.outputs[0]].to_f32_vec()) {
        assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
    }
}

/// A masked mean over rows whose length only the run time knows (an unknown dim, as after a
/// strided conv or a Range of computed length: NeMo's and trueocr's normalisations):
/// sum(x * m) / sum(m) with both sums reading the mask m along the rows. That shared input
/// makes the rows one length, so the region stitches; its kernel spec means the original ops
/// at every width, and a run-time shape where m is one element along rows of x's width (ONNX
/// would sum an axis of 1) is refused with the reason instead of computed wrong. Reductions
/// over rows of unrelated unknown lengths do not share a region. (Reference against
/// reference: this checks the rewriting; `tests/artifact.rs` runs NeMo's against onnxruntime.)
#[test]
fn rows_of_run_time_length_stitch_where_the_reductions_read_one_input_along_them() {
    let sum = Op::Reduce { kind: ReduceKind::Sum, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
    let mut g = GraphBuilder::new("masked_mean");
    let x = g.input("x", DType::F32, Shape(vec![Dim::Known(3), Dim::Unknown]));
    let m = g.input("m", DType::F32, Shape(vec![Dim::Known(1), Dim::Unknown]));
    let xm = g.node("xm", Op::Binary(Binary::Mul), &[&x, &m]);
    let s = g.node("s", sum.clone(), &[&xm]);
    let c = g.node("c", sum.clone(), &[&m]);
    let mean = g.node("mean", Op::Binary(Binary::Div), &[&s, &c]);
    let y = g.node("y", Op::Binary(Binary::Sub), &[&x, &mean]);
    g.output(&y);
    let g = g.finish().unwrap();
    let (regions, not) = find(&g, &HashSet::new());
    assert!(not.is_empty(), "{not:?}");
    assert_eq!(regions.len(), 1);
    let plan = bolt::plan::plan(&g).unwrap();
    let n = plan.graph.nodes.iter().find(|n| matches!(n.op, Op::Stitched(_))).expect("stitched");
    let spec = bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
    let Op::Stitched(region) = &n.op else { unreachable!() };
    let run = |xs: &[usize], ms: &[usize]| {
        let feeds = HashMap::from([("x".to_string(), random(xs, 1)), ("m".to_string(), random(ms, 2))]);
        let inputs: Vec<&Tensor> = n.inputs.iter().flatten().map(|t| &feeds[t]).collect();
        let got = bolt::runtime::stitch::run(&spec, region, &inputs, &[DType::F32]);
        (got, bolt::reference::run(&g, &feeds).unwrap().remove(&g.outputs[0]).unwrap())
    };
    for width in [1usize, 7, 300] {
        let (got, want) = run(&[3, width], &[1, width]);
        let got = got.unwrap().remove(0);
        assert_eq!(got.shape, want.shape);
        let worst = got
            .to_f32_vec()
            .iter()
            .zip(want.to_f32_vec())
            .map(|(a, b)| (a - b).abs() / (1.0 + b.abs()))
            .fold(0f32, f32::max);
        assert!(worst <= 1e-5, "width {width}: {worst}");
    }
    let (got, want) = run(&[3, 7], &[1, 1]);
    assert_eq!(want.shape, [3, 7], "ONNX broadcasts the mask");
    let e = got.unwrap_err();
    assert!(e.contains("would reduce rows of 7 elements"), "{e}");

    // Two sums over rows of unrelated unknown lengths, added: not one region.
    let mut g = GraphBuilder::new("unrelated");
    let a = g.input("a", DType::F32, Shape(vec![Dim::Known(3), Dim::Unknown]));
    let b = g.input("b", DType::F32, Shape(vec![Dim::Known(3), Dim::Unknown]));
    let sa = g.node("sa", sum.clone(), &[&a]);
    let sb = g.node("sb", sum, &[&b]);
    let t = g.node("t", Op::Binary(Binary::Add), &[&sa, &sb]);
    g.output(&t);
    let g = g.finish().unwrap();
    let (regions, not) = find(&g, &HashSet::new());
    assert!(regions.iter().all(|r| !(r.nodes.contains(&"sa".to_string()) && r.nodes.contains(&"sb".to_string()))));
    assert!(not.iter().any(|n| n.reason.contains("nor shared")), "{not:?} {regions:?}");
}

/// Runs `planned` on the reference and checks each stitched node's kernel spec (run as the
/// reference device runs it) against the node's region on the inputs the run gives it.
fn kernel_specs_mean_their_nodes(planned: &Graph, feeds: &HashMap<String, Tensor>, label: &str) {
    bolt::reference::run_with(planned, feeds, |n, args| {
        let outs = bolt::reference::eval_node(n, args)?;
        if let Op::Stitched(region) = &n.op {
            let spec = bolt::plan::lower::stitch_spec(planned, n).unwrap();
            let inputs: Vec<&Tensor> = args.iter().flatten().copied().collect();
            let types: Vec<DType> = outs.iter().map(|t| t.dtype()).collect();
            let got = bolt::runtime::stitch::run(&spec, region, &inputs, &types).unwrap();
            for ((o, got), want) in n.outputs.iter().zip(got).zip(&outs) {
                assert_eq!(got.shape, want.shape, "{o}: {label}");
                assert_eq!(got.to_f32_vec(), want.to_f32_vec(), "{o}: {label}");
            }
        }
        Ok(outs)
    })
    .unwrap();
}

/// A reduction over every axis (no axes given: Whisper's and openWakeWord's log-mel clamps)
/// is planned as one row of all the elements (a merging view, then a stitched row
/// reduction: AStitch's global scheme), and the scalar arithmetic after it (`max - 80`, a
/// value of rank 0, here also a graph output) as a stitched kernel of one element whose
/// output keeps rank 0. The
/// planned graph and each kernel spec mean the original ops at several sizes of the symbolic
/// axis. (Reference against reference: this checks the rewriting;
/// `tests/artifact.rs::whole_tensor_reductions_are_one_row_stitched_kernels` and
/// `tests/python/test_fuzz_graphs.py` compare with onnxruntime.)
#[test]
fn reductions_over_every_axis_are_one_row_and_scalars_one_element() {
    let max = Op::Reduce { kind: ReduceKind::Max, axes: None, keepdims: false, noop_with_empty_axes: false };
    let mut g = GraphBuilder::new("clamp");
    let x = g.input("x", DType::F32, Shape(vec![Dim::Known(2), Dim::Sym("T".into()), Dim::Known(5)]));
    let eighty = g.initializer("eighty", Tensor::from_f32(vec![], vec![80.0]));
    let top = g.node("top", max, &[&x]);
    let floor = g.node("floor", Op::Binary(Binary::Sub), &[&top, &eighty]);
    let y = g.node("y", Op::Binary(Binary::Max), &[&x, &floor]);
    g.output(&y);
    g.output(&floor);
    let g = g.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    for n in &plan.graph.nodes {
        assert!(matches!(n.op, Op::Stitched(_)) || n.op.is_view(), "{} ({}) is neither", n.name, n.op.op_type());
    }
    let stitched: Vec<_> = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))).collect();
    assert_eq!(stitched.len(), 3, "the reduction, the scalar, the clamp");
    for t in [1usize, 9, 700] {
        let feeds = HashMap::from([("x".to_string(), random(&[2, t, 5], t as u64))]);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
        assert_eq!(got[&y].to_f32_vec(), want[&y].to_f32_vec(), "T = {t}");
        kernel_specs_mean_their_nodes(&plan.graph, &feeds, &format!("T = {t}"));
    }
}

/// A region output narrower than the region's iteration space: a masked mean's count of valid
/// positions (`Clip(ReduceSum(m), 1)`, [B, 1, 1]) in a region over [B, C, T], also read by a
/// later block's masked mean across a GEMM (trueocr's SE blocks). No kernel over [B, C, T]
/// writes a [B, 1, 1] tensor, so the region was refused whole; now the count's nodes start
/// regions of their own and the rest stitches. The planned graph and each kernel spec mean
/// the original ops (reference against reference: the rewriting; tests/corpus.rs runs
/// trueocr's artifact against onnxruntime).
#[test]
fn outputs_narrower_than_their_region_become_kernels_of_their_own() {
    let sum = Op::Reduce { kind: ReduceKind::Sum, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
    let mut g = GraphBuilder::new("masked_se");
    let t = Dim::Sym("T".into());
    let x = g.input("x", DType::F32, Shape(vec![Dim::Known(2), Dim::Known(8), t.clone()]));
    let m = g.input("m", DType::F32, Shape(vec![Dim::Known(2), Dim::Known(1), t]));
    let one = g.initializer("one", Tensor::from_f32(vec![], vec![1.0]));
    let w = g.initializer("w", random(&[8, 8], 7));
    let masked_mean = |g: &mut GraphBuilder, k: &str, v: &str, count: &str| {
        let vm = g.node(&format!("{k}.vm"), Op::Binary(Binary::Mul), &[v, &m]);
        let s = g.node(&format!("{k}.sum"), sum.clone(), &[&vm]);
        g.node(&format!("{k}.mean"), Op::Binary(Binary::Div), &[&s, count])
    };
    let c = g.node("count", sum.clone(), &[&m]);
    let count = g.node("clip", Op::Clip, &[&c, &one]);
    let mean = masked_mean(&mut g, "se0", &x, &count);
    let gated = g.node("gate", Op::Binary(Binary::Mul), &[&x, &mean]);
    let tr = g.node("to_rows", Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[&gated]);
    let mm = g.node("proj", Op::MatMul, &[&tr, &w]);
    let back = g.node("to_channels", Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[&mm]);
    let y = masked_mean(&mut g, "se1", &back, &count);
    g.output(&y);
    let g = g.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let refused: Vec<_> = plan.stitched.iter().filter(|d| d.stitched.is_none()).collect();
    assert!(refused.is_empty(), "{refused:?}");
    for n in &plan.graph.nodes {
        let device = matches!(n.op, Op::Stitched(_) | Op::Fused(_)) || n.op.is_view();
        assert!(device || bolt::plan::lower::is_copy_node(&plan.graph, n), "{} ({})", n.name, n.op.op_type());
    }
    for width in [1usize, 5, 33] {
        let feeds = HashMap::from([
            ("x".to_string(), random(&[2, 8, width], 1)),
            (
                "m".to_string(),
                Tensor::from_f32(vec![2, 1, width], (0..2 * width).map(|i| (i % 3 != 0) as u8 as f32).collect()),
            ),
        ]);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
        let (a, b) = (got[&y].to_f32_vec(), want[&y].to_f32_vec());
        assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + q.abs())), "T = {width}: {a:?} vs {b:?}");
        kernel_specs_mean_their_nodes(&plan.graph, &feeds, &format!("T = {width}"));
    }
}

/// An element-wise chain reading more tensors than a stitched kernel takes (a quantized
/// vocoder's residual blocks: 12) is cut where its inputs pass the limit, each part a kernel,
/// instead of leaving the whole chain to the host. (Reference against reference: the
/// rewriting only.)
#[test]
fn regions_reading_more_inputs_than_a_kernel_takes_are_cut() {
    let mut g = GraphBuilder::new("wide");
    let x = g.input("x", DType::F32, Shape::from_static(&[3, 17]));
    let mut acc = x.clone();
    for k in 0..11 {
        let a = g.input(&format!("a{k}"), DType::F32, Shape::from_static(&[3, 17]));
        acc = g.node(&format!("add{k}"), Op::Binary(Binary::Add), &[&acc, &a]);
        acc = g.node(&format!("tanh{k}"), Op::Unary(Unary::Tanh), &[&acc]);
    }
    g.output(&acc);
    let g = g.finish().unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let refused: Vec<_> = plan.stitched.iter().filter(|d| d.stitched.is_none()).collect();
    assert!(refused.is_empty(), "{refused:?}");
    let stitched: Vec<_> = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))).collect();
    assert!(stitched.len() >= 2 && stitched.len() == plan.graph.nodes.len(), "{:?}", plan.graph.nodes);
    for n in &stitched {
        assert!(n.inputs.len() <= bolt_codegen::abi::STITCH_MAX_INPUTS, "{}: {} inputs", n.name, n.inputs.len());
        bolt::plan::lower::stitch_spec(&plan.graph, n).unwrap();
    }
    let feeds: HashMap<String, Tensor> =
        g.inputs.iter().enumerate().map(|(i, name)| (name.clone(), random(&[3, 17], i as u64))).collect();
    let (want, got) = (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
    assert_eq!(got[&acc].to_f32_vec(), want[&acc].to_f32_vec());
}

/// ONNX's RMSNormalization (opset 23; LLaMA-style decoders) is `x / sqrt(mean(x²) + ε) · scale`
/// over the axes from `axis`: planned as one stitched row reduction (several trailing axes
/// merged into the row by views), computed in f32 for f16 data (stash_type), against the
/// formula in f64 here. A symbolic batch stays symbolic.
#[test]
fn rms_normalizations_are_stitched_row_reductions() {
    let (c, t) = (6usize, 40);
    for (axis, dtype) in [(-1i64, DType::F32), (-1, DType::F16), (1, DType::F32)] {
        let mut g = GraphBuilder::new("rms");
        let x = g.input("x", dtype, Shape(vec![Dim::Sym("N".into()), Dim::Known(c), Dim::Known(t)]));
        let norm: Vec<usize> = if axis == 1 { vec![c, t] } else { vec![t] };
        let scale_t = random(&norm, 3);
        let scale = g.initializer("scale", Tensor::from_f64_as(dtype, norm.clone(), &scale_t.to_f64_vec()).unwrap());
        let op = Op::Opaque {
            domain: String::new(),
            op_type: "RMSNormalization".into(),
            attrs: vec![
                ("axis".into(), bolt::ir::AttrValue::Int(axis)),
                ("epsilon".into(), bolt::ir::AttrValue::Float(1e-3)),
            ],
            why: "a host-only op".into(),
        };
        let y = g.node("rms", op, &[&x, &scale]);
        g.output(&y);
        let g = g.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let what = format!("axis {axis} {dtype}");
        let left = beside_stitched_kernels(&plan);
        assert!(left.is_empty(), "{what}: {left:?}");
        let stitched: Vec<_> = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))).collect();
        assert_eq!(stitched.len(), 1, "{what}");
        let xs = random(&[2, c, t], 9);
        let xs = Tensor::from_f64_as(dtype, xs.shape.clone(), &xs.to_f64_vec()).unwrap();
        let feeds = HashMap::from([("x".to_string(), xs.clone())]);
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap()[&y].to_f64_vec();
        let (xv, sv) =
            (xs.to_f64_vec(), Tensor::from_f64_as(dtype, norm.clone(), &scale_t.to_f64_vec()).unwrap().to_f64_vec());
        let row: usize = norm.iter().product();
        let tol = if dtype == DType::F16 { 1e-2 } else { 1e-5 };
        for (r, chunk) in xv.chunks(row).enumerate() {
            let rms = (chunk.iter().map(|v| v * v).sum::<f64>() / row as f64 + 1e-3).sqrt();
            for (i, &v) in chunk.iter().enumerate() {
                let want = v / rms * sv[i];
                let at = r * row + i;
                assert!((got[at] - want).abs() <= tol * want.abs().max(1.0), "{what} [{at}]: {} vs {want}", got[at]);
            }
        }
    }
}

/// GroupNormalization (opset 18's per-group and opset 21's per-channel scale and bias; the
/// UNets of diffusion models) plans as stitched kernels: the groups' normalisation as a row
/// reduction over a view, then the per-channel scale and shift; nothing is left to the host
/// but views and the shape they read. Against the formula in f64 here, at f32 and f16.
#[test]
fn group_normalizations_are_stitched_row_reductions() {
    let (c, hw, groups) = (8usize, 5, 4);
    for (per_group, dtype) in [(false, DType::F32), (true, DType::F32), (false, DType::F16)] {
        let mut g = GraphBuilder::new("group_norm");
        let x = g.input("x", dtype, Shape(vec![Dim::Sym("N".into()), Dim::Known(c), Dim::Known(hw), Dim::Known(hw)]));
        let n_params = if per_group { groups } else { c };
        let as_type = |t: Tensor| Tensor::from_f64_as(dtype, t.shape.clone(), &t.to_f64_vec()).unwrap();
        let (scale_t, bias_t) = (as_type(random(&[n_params], 3)), as_type(random(&[n_params], 4)));
        let scale = g.initializer("scale", scale_t.clone());
        let bias = g.initializer("bias", bias_t.clone());
        let op = Op::Opaque {
            domain: String::new(),
            op_type: "GroupNormalization".into(),
            attrs: vec![("num_groups".into(), bolt::ir::AttrValue::Int(groups as i64))],
            why: "a host-only op".into(),
        };
        let y = g.node("gn", op, &[&x, &scale, &bias]);
        g.output(&y);
        let g = g.finish().unwrap();
        let plan = bolt::plan::plan(&g).unwrap();
        let what = format!("per group {per_group} {dtype}");
        let left = beside_stitched_kernels(&plan);
        assert!(left.is_empty(), "{what}: {left:?}");
        let xs = as_type(random(&[2, c, hw, hw], 9));
        let feeds = HashMap::from([("x".to_string(), xs.clone())]);
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap()[&y].to_f64_vec();
        // The reference's own GroupNormalization (the op, unexpanded) too.
        let op = bolt::reference::run(&g, &feeds).unwrap()[&y].to_f64_vec();
        let (xv, sv, bv) = (xs.to_f64_vec(), scale_t.to_f64_vec(), bias_t.to_f64_vec());
        let block = c / groups * hw * hw;
        let tol = if dtype == DType::F16 { 1e-2 } else { 1e-5 };
        for (k, chunk) in xv.chunks(block).enumerate() {
            let mean = chunk.iter().sum::<f64>() / block as f64;
            let var = chunk.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / block as f64;
            for (i, &v) in chunk.iter().enumerate() {
                let group = k % groups;
                let p = if per_group { group } else { group * (c / groups) + i / (hw * hw) };
                let want = (v - mean) / (var + 1e-5).sqrt() * sv[p] + bv[p];
                let at = k * block + i;
                assert!((got[at] - want).abs() <= tol * want.abs().max(1.0), "{what} [{at}]: {} vs {want}", got[at]);
                assert!((op[at] - want).abs() <= tol * want.abs().max(1.0), "{what} op [{at}]: {} vs {want}", op[at]);
            }
        }
    }
}

/// The ops of a plan other than stitched kernels and the views (and the shapes they read)
/// around them.
fn beside_stitched_kernels(plan: &bolt::plan::Plan) -> Vec<&str> {
    plan.graph
        .nodes
        .iter()
        .filter(|n| !matches!(n.op, Op::Stitched(_) | Op::Reshape { .. } | Op::Shape { .. }))
        .map(|n| n.op.op_type())
        .collect()
}
