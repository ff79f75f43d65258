//! ONNX `If`: imported with its branches, typed, run by the reference (the branch the condition
//! takes), inlined by the planner when static shapes decide it (PyTorch's `squeeze(dim)`), and
//! kept with the host, weights and all, when only the run decides it. The expected values are
//! computed here from the ops' definitions (an Add, a Mul), not by the reference; the ONNX
//! conformance case `test_if` and the corpus's VAD models (whole networks inside an `If`, vs
//! onnxruntime) check the same paths against outside outputs. ONNX `Loop` (below) likewise:
//! expected values from the loop's definition here, `test_loop11` in the conformance suite.

mod common;

use bolt::import::proto::{GraphProto, ModelProto, NodeProto, TensorProto};
use bolt::ir::{Dim, Graph, Op, Tensor};
use common::onnx_proto::*;
use prost::Message;
use std::collections::HashMap;

fn load(m: &ModelProto) -> Graph {
    bolt::import::load_bytes(&m.encode_to_vec(), None).unwrap().graph
}

fn branch(name: &str, nodes: Vec<bolt::import::proto::NodeProto>, outputs: &[&str]) -> GraphProto {
    GraphProto {
        name: Some(name.into()),
        node: nodes,
        output: outputs
            .iter()
            .map(|o| value_info(o, &[]))
            .map(|mut v| {
                v.r#type = None; // branches often leave output types to inference
                v
            })
            .collect(),
        ..Default::default()
    }
}

/// An If node with one output.
fn if_node(name: &str, cond: &str, output: &str, then_b: GraphProto, else_b: GraphProto) -> NodeProto {
    with_graph(with_graph(node(name, "If", &[cond], &[output]), "then_branch", then_b), "else_branch", else_b)
}

fn bools(name: &str, v: bool) -> TensorProto {
    TensorProto { name: Some(name.into()), data_type: Some(9), int32_data: vec![v as i32], ..Default::default() }
}

/// `y = If(cond, then: x + a, else: x * b) @ w`: the branches' weights are Constant nodes
/// inside them, and both read the enclosing `x`.
fn run_time_if() -> ModelProto {
    let a: Vec<f32> = (0..8).map(|i| i as f32 * 0.25).collect();
    let b: Vec<f32> = (0..8).map(|i| 1.0 - i as f32 * 0.125).collect();
    let then_b =
        branch("then", vec![constant("ca", floats("a", &[8], &a)), node("add", "Add", &["x", "a"], &["t"])], &["t"]);
    let else_b =
        branch("else", vec![constant("cb", floats("b", &[8], &b)), node("mul", "Mul", &["x", "b"], &["e"])], &["e"]);
    let cond = typed_value_info("cond", 9, vec![]);
    let w: Vec<f32> = (0..8 * 4).map(|i| ((i * 7) % 5) as f32 * 0.1 - 0.2).collect();
    model(
        17,
        GraphProto {
            name: Some("run_time_if".into()),
            node: vec![if_node("if", "cond", "h", then_b, else_b), node("mm", "MatMul", &["h", "w"], &["y"])],
            initializer: vec![floats("w", &[8, 4], &w)],
            input: vec![value_info("x", &[3, 8]), cond],
            output: vec![value_info("y", &[3, 4])],
            ..Default::default()
        },
    )
}

fn expected_run_time_if(x: &[f32], cond: bool) -> Vec<f64> {
    let w: Vec<f64> = (0..8 * 4).map(|i| ((i * 7) % 5) as f64 * 0.1 - 0.2).collect();
    let mut y = vec![0.0; 3 * 4];
    for r in 0..3 {
        for k in 0..8 {
            let xv = x[r * 8 + k] as f64;
            let h = if cond { xv + k as f64 * 0.25 } else { xv * (1.0 - k as f64 * 0.125) };
            for c in 0..4 {
                y[r * 4 + c] += h * w[k * 4 + c];
            }
        }
    }
    y
}

fn feeds(cond: bool) -> HashMap<String, Tensor> {
    let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin()).collect();
    HashMap::from([
        (
            "x".to_string(),
            Tensor::from_f64_as(bolt::ir::DType::F32, vec![3, 8], &x.iter().map(|&v| v as f64).collect::<Vec<_>>())
                .unwrap(),
        ),
        ("cond".to_string(), Tensor::from_f64_as(bolt::ir::DType::Bool, vec![], &[cond as u8 as f64]).unwrap()),
    ])
}

fn assert_close(got: &Tensor, want: &[f64], what: &str) {
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "{what}");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-5 + 1e-5 * b.abs(), "{what}[{i}]: {a} vs {b}");
    }
}

#[test]
fn the_reference_runs_the_branch_the_condition_takes() {
    let g = load(&run_time_if());
    let Op::If { then_branch, else_branch } = &g.nodes[0].op else { panic!("{:?}", g.nodes[0].op) };
    // The enclosing value both branches read is an input of the If, after the condition.
    assert_eq!(g.nodes[0].inputs, vec![Some("cond".to_string()), Some("x".to_string())]);
    assert_eq!(then_branch.inputs, vec!["x"]);
    assert_eq!(else_branch.inputs, vec!["x"]);
    assert_eq!(g.types["h"].to_string(), "f32[3, 8]");
    let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin()).collect();
    for cond in [true, false] {
        let out = bolt::reference::run(&g, &feeds(cond)).unwrap();
        assert_close(&out["y"], &expected_run_time_if(&x, cond), &format!("y (cond {cond})"));
    }
}

#[test]
fn an_if_decided_at_run_time_stays_with_the_host_with_its_weights_in_the_artifact() {
    let g = load(&run_time_if());
    let plan = bolt::plan::plan(&g).unwrap();
    let host = plan.partitioning.host.iter().find(|h| h.op_type == "If").expect("the If stays with the host");
    assert!(host.reason.contains("decided at run time"), "{}", host.reason);
    // The MatMul after it is still a kernel.
    assert_eq!(plan.partitioning.partitions.len(), 1);
    // Branch constants are the model's weights: hoisted out of the branches, read by the If.
    let planned_if = plan.graph.nodes.iter().find(|n| matches!(n.op, Op::If { .. })).unwrap();
    for w in ["a", "b"] {
        assert!(plan.graph.initializers.contains_key(w), "{w} hoisted");
        assert!(planned_if.inputs.contains(&Some(w.to_string())), "{w} read by the If");
    }
    // tf32 (the default for an f32 model) and f16, whose conversion reaches into the branches.
    for precision in [None, Some(bolt::artifact::Precision::F16)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = bolt::artifact::CompileOptions { precision, ..bolt::artifact::CompileOptions::new(dir.path()) };
        bolt::artifact::compile(&g, &opts).unwrap();
        let plan_json = std::fs::read_to_string(dir.path().join("plan.json")).unwrap();
        assert!(!plan_json.contains("\"Constant\""), "branch constants stay out of plan.json");
        let art = bolt::artifact::Artifact::open(dir.path()).unwrap();
        assert!(art.plan.weights.iter().any(|w| w.name == "a"), "branch weights are stored in weights.bin");
        let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin()).collect();
        for cond in [true, false] {
            let mut exec =
                bolt::runtime::open(&art, bolt::runtime::DeviceKind::Reference, &bolt::runtime::RunOptions::default())
                    .unwrap();
            let inputs = bolt::runtime::prepare_inputs(&art.graph(), &feeds(cond)).unwrap();
            let out = bolt::runtime::outputs_as_f32(exec.run(&inputs).unwrap());
            // The MatMul's inputs are rounded to 10 mantissa bits (tf32, f16).
            let want = expected_run_time_if(&x, cond);
            let got = out["y"].to_f64_vec();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!((a - b).abs() <= 1e-2 + 1e-2 * b.abs(), "y[{i}] ({precision:?}, cond {cond}): {a} vs {b}");
            }
        }
    }
}

/// PyTorch's `x.squeeze(0)` at opset >= 11: `If(Shape(x)[0] == 1, Squeeze(x, 0), Identity(x))`,
/// here around a MatMul whose input it feeds.
fn squeeze_if(batch: i64) -> ModelProto {
    let then_b = branch(
        "squeeze",
        vec![constant("c0", ints("axes0", &[0], false)), node("sq", "Squeeze", &["x", "axes0"], &["sq_out"])],
        &["sq_out"],
    );
    let else_b = branch("keep", vec![node("id", "Identity", &["x"], &["id_out"])], &["id_out"]);
    model(
        17,
        GraphProto {
            name: Some("squeeze_if".into()),
            node: vec![
                node("shape", "Shape", &["x"], &["s"]),
                node("gather", "Gather", &["s", "zero"], &["d0"]),
                node("eq", "Equal", &["d0", "one"], &["is_one"]),
                if_node("if", "is_one", "h", then_b, else_b),
                node("mm", "MatMul", &["h", "w"], &["y"]),
            ],
            initializer: vec![ints("zero", &[0], true), ints("one", &[1], true), weight("w", &[8, 4])],
            input: vec![value_info("x", &[batch, 5, 8])],
            output: vec![value_info("y", &[])],
            ..Default::default()
        },
    )
}

#[test]
fn an_if_that_static_shapes_decide_is_inlined() {
    for (batch, rank) in [(1, 2), (3, 3)] {
        let g = load(&squeeze_if(batch));
        // Inference follows the branch the shapes decide.
        assert_eq!(g.types["y"].shape.as_ref().unwrap().rank(), rank, "batch {batch}");
        let plan = bolt::plan::plan(&g).unwrap();
        assert!(
            !plan.graph.nodes.iter().any(|n| matches!(n.op, Op::If { .. })),
            "batch {batch}: the If is inlined: {:?}",
            plan.graph.nodes.iter().map(|n| &n.name).collect::<Vec<_>>()
        );
        assert!(plan.partitioning.host.iter().all(|h| h.op_type != "If"));
        assert_eq!(plan.partitioning.partitions.len(), 1, "batch {batch}: the MatMul is a kernel");
        // Planned vs model, both on the reference: checks the inlining (the rewriting).
        let x = common::random_tensor(&[batch as usize, 5, 8], 3);
        let feeds = HashMap::from([("x".to_string(), x.clone())]);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
        assert_eq!(got["y"].shape, want["y"].shape);
        assert_eq!(got["y"].to_f64_vec(), want["y"].to_f64_vec());
        // And the value itself: every weight is 0.5, so y = 0.5 * (row sum of x).
        let xv = x.to_f64_vec();
        for (i, v) in want["y"].to_f64_vec().iter().enumerate() {
            let row = i / 4;
            let s: f64 = xv[row * 8..row * 8 + 8].iter().sum();
            assert!((v - 0.5 * s).abs() < 1e-5, "y[{i}]");
        }
    }
}

/// With a dynamic batch the squeeze-If is a run-time decision; specialised to one batch size
/// (`bolt compile --static`) it folds like a static model's, and the specialised graph
/// declares that size.
#[test]
fn static_shapes_decide_an_if_on_a_dynamic_batch() {
    let g = load(&squeeze_if(-1));
    let plan = bolt::plan::plan(&g).unwrap();
    assert!(plan.graph.nodes.iter().any(|n| matches!(n.op, Op::If { .. })), "dynamic batch: decided at run time");
    for batch in [1usize, 3] {
        let fixed = bolt::compile::specialize(&g, &HashMap::from([("x.0".to_string(), batch)])).unwrap();
        assert_eq!(fixed.types["x"].shape.as_ref().unwrap().to_string(), format!("[{batch}, 5, 8]"));
        let plan = bolt::plan::plan(&fixed).unwrap();
        assert!(!plan.graph.nodes.iter().any(|n| matches!(n.op, Op::If { .. })), "batch {batch}: inlined");
        assert_eq!(plan.partitioning.partitions.len(), 1, "batch {batch}: the MatMul is a kernel");
        let x = common::random_tensor(&[batch, 5, 8], 5);
        let got = bolt::reference::run(&plan.graph, &HashMap::from([("x".to_string(), x.clone())])).unwrap();
        // squeeze(0) at batch 1: [5, 4]; otherwise [batch, 5, 4]; every weight is 0.5.
        let want_shape = if batch == 1 { vec![5, 4] } else { vec![batch, 5, 4] };
        assert_eq!(got["y"].shape, want_shape);
        let xv = x.to_f64_vec();
        for (i, v) in got["y"].to_f64_vec().iter().enumerate() {
            let s: f64 = xv[(i / 4) * 8..(i / 4) * 8 + 8].iter().sum();
            assert!((v - 0.5 * s).abs() < 1e-5, "batch {batch} y[{i}]");
        }
    }
    let err = bolt::compile::specialize(&g, &HashMap::new()).unwrap_err().to_string();
    assert!(err.contains("input 'x' axis 0") && err.contains("'x.0'"), "{err}");
}

#[test]
fn an_if_inside_a_branch_is_inlined_once_its_enclosing_if_is() {
    // The outer If is decided by a constant, the inner one by x's static shape.
    let inner = if_node(
        "inner",
        "is_one",
        "i_out",
        branch(
            "sq",
            vec![constant("c0", ints("axes0", &[0], false)), node("sq", "Squeeze", &["x", "axes0"], &["sq_out"])],
            &["sq_out"],
        ),
        branch("keep", vec![node("id", "Identity", &["x"], &["id_out"])], &["id_out"]),
    );
    let outer_then = branch(
        "outer_then",
        vec![
            node("shape", "Shape", &["x"], &["s"]),
            node("gather", "Gather", &["s", "zero"], &["d0"]),
            node("eq", "Equal", &["d0", "one"], &["is_one"]),
            inner,
        ],
        &["i_out"],
    );
    let outer_else = branch("outer_else", vec![node("neg", "Neg", &["x"], &["n_out"])], &["n_out"]);
    let m = model(
        17,
        GraphProto {
            name: Some("nested".into()),
            node: vec![if_node("outer", "yes", "h", outer_then, outer_else), node("relu", "Relu", &["h"], &["y"])],
            initializer: vec![ints("zero", &[0], true), ints("one", &[1], true), {
                let mut t = bools("yes", true);
                t.dims = vec![];
                t
            }],
            input: vec![value_info("x", &[1, 6])],
            output: vec![value_info("y", &[])],
            ..Default::default()
        },
    );
    let g = load(&m);
    assert_eq!(g.types["y"].to_string(), "f32[6]");
    let plan = bolt::plan::plan(&g).unwrap();
    assert!(!plan.graph.nodes.iter().any(|n| matches!(n.op, Op::If { .. })));
    let x = common::random_tensor(&[1, 6], 9);
    let feeds = HashMap::from([("x".to_string(), x.clone())]);
    let want: Vec<f64> = x.to_f64_vec().iter().map(|v| v.max(0.0)).collect();
    for (which, graph) in [("model", &g), ("plan", &plan.graph)] {
        let out = bolt::reference::run(graph, &feeds).unwrap();
        assert_eq!(out["y"].shape, vec![6], "{which}");
        assert_close(&out["y"], &want, which);
    }
}

#[test]
fn malformed_ifs_are_errors_naming_the_node() {
    let then_b = branch("then", vec![node("id", "Identity", &["x"], &["t"])], &["t"]);
    let no_else = model(
        17,
        GraphProto {
            name: Some("g".into()),
            node: vec![with_graph(node("the_if", "If", &["c"], &["y"]), "then_branch", then_b.clone())],
            initializer: vec![bools("c", true)],
            input: vec![value_info("x", &[2])],
            output: vec![value_info("y", &[])],
            ..Default::default()
        },
    );
    let e = bolt::import::load_bytes(&no_else.encode_to_vec(), None).unwrap_err().to_string();
    assert!(e.contains("the_if") && e.contains("else_branch"), "{e}");
    let two_out = branch("else", vec![node("id2", "Identity", &["x"], &["e"])], &["e", "x"]);
    let mismatch = model(
        17,
        GraphProto {
            name: Some("g".into()),
            node: vec![if_node("the_if", "c", "y", then_b, two_out)],
            initializer: vec![bools("c", true)],
            input: vec![value_info("x", &[2])],
            output: vec![value_info("y", &[])],
            ..Default::default()
        },
    );
    let e = bolt::import::load_bytes(&mismatch.encode_to_vec(), None).unwrap_err().to_string();
    assert!(e.contains("the_if") && e.contains("2 outputs"), "{e}");
}

#[test]
fn unnamed_dynamic_input_dims_get_names_that_dim_can_size() {
    use bolt::import::proto::tensor_shape_proto::dimension::Value as D;
    let m = model(
        17,
        GraphProto {
            name: Some("g".into()),
            node: vec![node("relu", "Relu", &["x"], &["y"])],
            input: vec![typed_value_info("x", 1, vec![D::DimValue(0), D::DimParam(String::new()), D::DimValue(4)])],
            output: vec![value_info("y", &[])],
            ..Default::default()
        },
    );
    let g = load(&m);
    let s = g.types["x"].shape.as_ref().unwrap();
    assert_eq!(s.0, vec![Dim::Sym("x.0".into()), Dim::Sym("x.1".into()), Dim::Known(4)]);
}

/// `y = If(cond, Reshape(x, [3, 2]), Reshape(-x, else_shape))`: a graph of views and an If
/// (branches run on the host), so an artifact of it needs no kernel build.
fn views_if(else_shape: &[i64]) -> ModelProto {
    let shape = |name: &str, v: &[i64]| constant(&format!("c_{name}"), ints(name, v, false));
    let then_b = branch("then", vec![shape("s32", &[3, 2]), node("r32", "Reshape", &["x", "s32"], &["t"])], &["t"]);
    let else_b = branch(
        "else",
        vec![
            shape("s_else", else_shape),
            node("neg", "Neg", &["x"], &["nx"]),
            node("r_else", "Reshape", &["nx", "s_else"], &["e"]),
        ],
        &["e"],
    );
    let cond = typed_value_info("cond", 9, vec![]);
    model(
        17,
        GraphProto {
            name: Some("views_if".into()),
            node: vec![if_node("if", "cond", "y", then_b, else_b)],
            input: vec![value_info("x", &[2, 3]), cond],
            output: vec![value_info("y", &[])],
            ..Default::default()
        },
    )
}

#[test]
fn binding_an_input_to_a_constant_decides_the_ifs_that_read_it() {
    // The run-time If of `run_time_if` with its condition bound: inlined, nothing on the host.
    let g = load(&run_time_if());
    for (cond, text) in [(true, "true"), (false, "0")] {
        let bound = bolt::compile::bind_input_values(
            &g,
            &std::collections::BTreeMap::from([("cond".to_string(), text.to_string())]),
        )
        .unwrap();
        assert_eq!(bound.inputs, vec!["x"]);
        let plan = bolt::plan::plan(&bound).unwrap();
        assert!(!plan.graph.nodes.iter().any(|n| matches!(n.op, Op::If { .. })), "cond {cond}");
        let x: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut feeds = feeds(cond);
        feeds.remove("cond");
        let out = bolt::reference::run(&plan.graph, &feeds).unwrap();
        assert_close(&out["y"], &expected_run_time_if(&x, cond), &format!("y (cond bound to {cond})"));
    }
    // Bad bindings name the input and why.
    let bind = |k: &str, v: &str| {
        bolt::compile::bind_input_values(&g, &std::collections::BTreeMap::from([(k.to_string(), v.to_string())]))
            .unwrap_err()
            .to_string()
    };
    assert!(bind("nope", "1").contains("not an input"), "{}", bind("nope", "1"));
    assert!(bind("cond", "yes").contains("'yes' is not a number"), "{}", bind("cond", "yes"));
    assert!(bind("x", "1,2").contains("2 values for an input of f32[3, 8]"), "{}", bind("x", "1,2"));
}

#[test]
fn bolt_run_check_feeds_the_bound_inputs_to_the_original_model() {
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("views_if.onnx");
    std::fs::write(&model_path, views_if(&[6, 1]).encode_to_vec()).unwrap();
    let art = dir.path().join("views_if.bolt");
    let bolt = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_bolt")).args(args).output().unwrap();
    let out = bolt(&["compile", model_path.to_str().unwrap(), "--bind", "cond=true", "-o", art.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let manifest = std::fs::read_to_string(art.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"bound_inputs\"") && manifest.contains("\"cond\": \"true\""), "{manifest}");
    let run = bolt(&["run", art.to_str().unwrap(), "--check"]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    // The then-branch's shape: the artifact computes the bound model.
    assert!(stdout.contains("y: [3, 2]") && stdout.contains("ok y"), "{stdout}");
}

#[test]
fn an_artifact_with_a_run_time_if_takes_numpy_bool_conditions() {
    let Ok(py) = std::env::var("BOLT_PYTHON") else {
        eprintln!("SKIPPED: BOLT_PYTHON not set (tests/run.sh sets it): numpy writes the .npz inputs");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("views_if.onnx");
    std::fs::write(&model_path, views_if(&[3, 2]).encode_to_vec()).unwrap();
    let art = dir.path().join("views_if.bolt");
    let bolt = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_bolt")).args(args).output().unwrap();
    let out = bolt(&["compile", model_path.to_str().unwrap(), "-o", art.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for cond in ["True", "False"] {
        let npz = dir.path().join(format!("in_{cond}.npz"));
        let code = format!(
            "import numpy as np; np.savez(r'{}', x=np.arange(6, dtype=np.float32).reshape(2, 3), cond=np.array({cond}))",
            npz.display()
        );
        assert!(std::process::Command::new(&py).args(["-c", &code]).status().unwrap().success());
        let run = bolt(&["run", art.to_str().unwrap(), "--check", "--inputs", npz.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
        // The else branch negates: mean -2.5 instead of 2.5.
        let mean = if cond == "True" { "mean 2.50000" } else { "mean -2.50000" };
        assert!(stdout.contains(&format!("y: [3, 2] {mean}")), "cond {cond}: {stdout}");
    }
}

// ---- Loop ----------------------------------------------------------------------------------

/// `acc, steps = Loop(M = 5, cond, acc0) { acc += x * i; step = acc; cond = i < stop }`: a
/// carried value, a scan output, a captured enclosing value (`x`) and an early exit (after
/// iteration `stop` the condition turns false), as exporters write `while` loops; with no
/// `stop` the body passes its condition through, as they write `for i in range(5)`.
fn loop_model(stop: Option<i64>) -> ModelProto {
    let cond = match stop {
        Some(_) => node("less", "Less", &["i", "stop"], &["cond_out"]),
        None => node("keep", "Identity", &["cond_in"], &["cond_out"]),
    };
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            node("cast", "Cast", &["i"], &["fi"]),
            node("mul", "Mul", &["x", "fi"], &["xi"]),
            node("add", "Add", &["acc_in", "xi"], &["acc_out"]),
            node("step", "Identity", &["acc_out"], &["step"]),
            cond,
        ]
        .into_iter()
        .map(|n| if n.name() == "cast" { with_int(n, "to", 1) } else { n })
        .collect(),
        initializer: vec![ints("stop", &[stop.unwrap_or(0)], true)],
        input: vec![
            typed_value_info("i", 7, vec![]),
            typed_value_info("cond_in", 9, vec![]),
            value_info("acc_in", &[3]),
        ],
        output: vec![typed_value_info("cond_out", 9, vec![]), value_info("acc_out", &[3]), value_info("step", &[3])],
        ..Default::default()
    };
    model(
        17,
        GraphProto {
            name: Some("loop".into()),
            node: vec![
                with_graph(node("loop", "Loop", &["m", "", "acc0"], &["acc", "steps"]), "body", body),
                node("out", "Relu", &["acc"], &["y"]),
            ],
            initializer: vec![ints("m", &[5], true), floats("acc0", &[3], &[0.5, -1.0, 2.0])],
            input: vec![value_info("x", &[3])],
            output: vec![value_info("y", &[]), value_info("steps", &[])],
            ..Default::default()
        },
    )
}

#[test]
fn a_loop_runs_its_body_until_the_trip_count_or_the_condition_stops_it() {
    let x = [1.0f64, -2.0, 0.25];
    for (stop, iterations) in [(Some(10), 5), (Some(2), 3), (Some(0), 1), (None, 5)] {
        let g = load(&loop_model(stop));
        // Types: the carried value keeps its shape; the scan output gains an axis of run-time length.
        assert_eq!(g.types["acc"].shape.as_ref().unwrap().to_string(), "[3]");
        // The iterations are known only when the body passes its condition through.
        let rows = if stop.is_none() { Dim::Known(5) } else { Dim::Unknown };
        assert_eq!(g.types["steps"].shape.as_ref().unwrap().0[0], rows, "stop {stop:?}");
        let feeds = HashMap::from([("x".to_string(), Tensor::from_f32(vec![3], x.map(|v| v as f32).to_vec()))]);
        let out = bolt::reference::run(&g, &feeds).unwrap();
        // By the definition: after iteration i, acc = acc0 + x * (0 + 1 + ... + i).
        let acc0 = [0.5, -1.0, 2.0];
        let after = |i: i64| -> Vec<f64> { (0..3).map(|k| acc0[k] + x[k] * (i * (i + 1) / 2) as f64).collect() };
        let last = after(iterations - 1);
        assert_eq!(out["y"].to_f64_vec(), last.iter().map(|v| v.max(0.0)).collect::<Vec<_>>(), "stop {stop:?}");
        assert_eq!(out["steps"].shape, vec![iterations as usize, 3], "stop {stop:?}");
        let steps: Vec<f64> = (0..iterations).flat_map(after).collect();
        assert_eq!(out["steps"].to_f64_vec(), steps, "stop {stop:?}");
    }
}

#[test]
fn a_loop_stays_with_the_host_and_the_plan_around_it_keeps_its_meaning() {
    let g = load(&loop_model(Some(2)));
    let plan = bolt::plan::plan(&g).unwrap();
    let host = plan.partitioning.host.iter().find(|h| h.op_type == "Loop").expect("the Loop is a host op");
    assert!(host.reason.contains("Loop") && host.reason.contains("run-time"), "{}", host.reason);
    // The body's constant (`stop`) is stored with the model's weights, read as an enclosing value.
    let lp = plan.graph.nodes.iter().find(|n| matches!(n.op, Op::Loop { .. })).unwrap();
    let Op::Loop { body, .. } = &lp.op else { unreachable!() };
    assert!(plan.graph.initializers.contains_key("stop") && !body.initializers.contains_key("stop"));
    assert!(lp.inputs.contains(&Some("stop".to_string())) && body.inputs.contains(&"stop".to_string()));
    let feeds = HashMap::from([("x".to_string(), Tensor::from_f32(vec![3], vec![0.5, 1.5, -3.0]))]);
    let want = bolt::reference::run(&g, &feeds).unwrap();
    let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
    for o in ["y", "steps"] {
        assert_eq!(got[o].to_f64_vec(), want[o].to_f64_vec(), "{o}");
    }
    // A standalone artifact plans every tensor: the scan output's length is a run-time value.
    let dir = tempfile::tempdir().unwrap();
    let opts = bolt::artifact::CompileOptions { archs: vec![], ..bolt::artifact::CompileOptions::new(dir.path()) };
    let err = bolt::artifact::compile(&g, &opts).unwrap_err().to_string();
    assert!(err.contains("steps") && err.contains("Loop") && err.contains("trip count"), "{err}");
}

/// `for i in range(5)`: the trip count is known, so the scan output's size is, and the
/// standalone artifact runs the Loop as a host step between its kernels.
#[test]
fn a_loop_of_known_trip_count_compiles_into_an_artifact() {
    let g = load(&loop_model(None));
    let dir = tempfile::tempdir().unwrap();
    let opts = bolt::artifact::CompileOptions { archs: vec![], ..bolt::artifact::CompileOptions::new(dir.path()) };
    bolt::artifact::compile(&g, &opts).unwrap();
    let art = bolt::artifact::Artifact::open(dir.path()).unwrap();
    assert!(art.plan.host_ops.iter().any(|h| h.op_type == "Loop"));
    let feeds = HashMap::from([("x".to_string(), Tensor::from_f32(vec![3], vec![0.5, 1.5, -3.0]))]);
    let want = bolt::reference::run(&g, &feeds).unwrap();
    let mut exec = bolt::runtime::open(&art, bolt::runtime::DeviceKind::Reference, &Default::default()).unwrap();
    let got = exec.run(&feeds).unwrap();
    for o in ["y", "steps"] {
        assert_eq!(got[o].shape, want[o].shape, "{o}");
        assert_eq!(got[o].to_f64_vec(), want[o].to_f64_vec(), "{o}");
    }
}

#[test]
fn malformed_loops_are_errors_naming_the_node() {
    let mut m = loop_model(Some(2));
    // Two carried values on the node, one in the body.
    m.graph.as_mut().unwrap().node[0].input.push("acc0".into());
    let err = bolt::import::load_bytes(&m.encode_to_vec(), None).unwrap_err().to_string();
    assert!(err.contains("'loop'") && err.contains("body declares 3 inputs"), "{err}");
}

// ---- Scan ----------------------------------------------------------------------------------

/// `s, ys = Scan(s0, x) { s += x_t * w; y_t = s }` over the rows of x [4, 3] from the last to
/// the first (scan_input_directions 1), the ys stacked along axis 1 ([3, 4]); `w` an enclosing
/// value the body reads.
fn scan_model() -> ModelProto {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            node("mul", "Mul", &["xt", "w"], &["xw"]),
            node("add", "Add", &["s_in", "xw"], &["s_out"]),
            node("y", "Identity", &["s_out"], &["yt"]),
        ],
        input: vec![value_info("s_in", &[3]), value_info("xt", &[3])],
        output: vec![value_info("s_out", &[3]), value_info("yt", &[3])],
        ..Default::default()
    };
    let scan = with_ints(
        with_ints(
            with_int(node("scan", "Scan", &["s0", "x"], &["s", "ys"]), "num_scan_inputs", 1),
            "scan_input_directions",
            &[1],
        ),
        "scan_output_axes",
        &[1],
    );
    model(
        17,
        GraphProto {
            name: Some("scan".into()),
            node: vec![with_graph(scan, "body", body)],
            initializer: vec![floats("s0", &[3], &[1.0, 0.0, -1.0]), floats("w", &[3], &[2.0, 0.5, 1.0])],
            input: vec![value_info("x", &[4, 3])],
            output: vec![value_info("s", &[]), value_info("ys", &[])],
            ..Default::default()
        },
    )
}

#[test]
fn a_scan_walks_its_input_in_its_direction_and_stacks_along_its_output_axis() {
    let g = load(&scan_model());
    assert_eq!(g.types["ys"].shape.as_ref().unwrap().to_string(), "[3, 4]");
    let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    let feeds = HashMap::from([("x".to_string(), Tensor::from_f32(vec![4, 3], x.clone()))]);
    let out = bolt::reference::run(&g, &feeds).unwrap();
    // By the definition: rows 3, 2, 1, 0 in turn; ys[:, t] is the state after the t-th step.
    let (s0, w) = ([1.0f64, 0.0, -1.0], [2.0f64, 0.5, 1.0]);
    let mut s = s0;
    let mut ys = vec![0.0f64; 12];
    for t in 0..4 {
        let row = 3 - t;
        for k in 0..3 {
            s[k] += x[row * 3 + k] as f64 * w[k];
            ys[k * 4 + t] = s[k];
        }
    }
    assert_eq!(out["s"].to_f64_vec(), s.to_vec());
    assert_eq!(out["ys"].shape, vec![3, 4]);
    assert_eq!(out["ys"].to_f64_vec(), ys);
    let plan = bolt::plan::plan(&g).unwrap();
    assert!(plan.partitioning.host.iter().any(|h| h.op_type == "Scan" && h.reason.contains("Scan")));
}

/// A Loop body reading an enclosing value that a pair of inverse transposes computes (tf2onnx's
/// LSTM loops read their transposed input so): the plan cancels such pairs elsewhere, but a
/// body names the value it reads, so this pair stays and the planned graph keeps its meaning.
#[test]
fn a_transpose_pair_read_inside_a_loop_body_is_kept() {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            node("add", "Add", &["acc_in", "xt"], &["acc_out"]),
            node("keep", "Identity", &["cond_in"], &["cond_out"]),
        ],
        input: vec![
            typed_value_info("i", 7, vec![]),
            typed_value_info("cond_in", 9, vec![]),
            value_info("acc_in", &[3, 2]),
        ],
        output: vec![typed_value_info("cond_out", 9, vec![]), value_info("acc_out", &[3, 2])],
        ..Default::default()
    };
    let m = model(
        17,
        GraphProto {
            name: Some("loop_reads_a_pair".into()),
            node: vec![
                with_ints(node("t1", "Transpose", &["x"], &["xt1"]), "perm", &[1, 0]),
                with_ints(node("t2", "Transpose", &["xt1"], &["xt"]), "perm", &[1, 0]),
                with_graph(node("loop", "Loop", &["m", "", "acc0"], &["acc"]), "body", body),
                node("out", "Relu", &["acc"], &["y"]),
            ],
            initializer: vec![ints("m", &[3], true), floats("acc0", &[3, 2], &[0.5, -1.0, 2.0, 0.0, 1.0, -2.0])],
            input: vec![value_info("x", &[3, 2])],
            output: vec![value_info("y", &[])],
            ..Default::default()
        },
    );
    let g = load(&m);
    let plan = bolt::plan::plan(&g).unwrap();
    let feeds = HashMap::from([("x".to_string(), Tensor::from_f32(vec![3, 2], vec![0.5, 1.5, -3.0, 1.0, 0.25, -0.5]))]);
    let want = bolt::reference::run(&g, &feeds).unwrap();
    let got = bolt::reference::run(&plan.graph, &feeds).unwrap_or_else(|e| panic!("planned: {e}"));
    assert_eq!(got["y"].to_f64_vec(), want["y"].to_f64_vec());
}
