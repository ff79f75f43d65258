//! Bad input never panics: every malformed model gives an error that names the file, node or
//! tensor and the reason, and the CLI exits non-zero.

mod common;

use bolt::import::{self, proto::*};
use common::onnx_proto::{node, value_info, weight};
use prost::Message;
use std::process::Command;

/// x[2,3] @ w[3,4] -> Relu -> y[2,4]
fn good_model() -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![node("mm", "MatMul", &["x", "w"], &["h"]), node("act", "Relu", &["h"], &["y"])],
            initializer: vec![weight("w", &[3, 4])],
            input: vec![value_info("x", &[2, 3])],
            output: vec![value_info("y", &[2, 4])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn import_err(m: &ModelProto) -> String {
    import::load_bytes(&m.encode_to_vec(), None).expect_err("import must fail").to_string()
}

#[test]
fn a_valid_model_imports_with_inferred_types() {
    let g = import::load_bytes(&good_model().encode_to_vec(), None).unwrap().graph;
    assert_eq!(g.tensor_type("h").unwrap().to_string(), "f32[2, 4]");
}

#[test]
fn truncated_files_are_rejected() {
    let bytes = good_model().encode_to_vec();
    for cut in [1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let e = import::load_bytes(&bytes[..cut], None).expect_err("truncated").to_string();
        assert!(
            e.contains("not a valid ONNX model") || e.contains("no graph") || e.contains("opset"),
            "cut {cut}: {e}"
        );
    }
}

#[test]
fn truncation_is_located_by_byte_offset() {
    // A cut inside the graph names the graph field and where it was declared.
    let bytes = good_model().encode_to_vec();
    let e = import::load_bytes(&bytes[..bytes.len() / 2], None).expect_err("truncated").to_string();
    assert!(e.contains("byte ") && e.contains("graph declares") && e.contains("truncated"), "{e}");
}

#[test]
fn garbage_bytes_are_rejected_without_panicking() {
    for seed in 0..200u32 {
        let bytes: Vec<u8> =
            (0..64 + seed).map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8).collect();
        assert!(import::load_bytes(&bytes, None).is_err());
    }
}

#[test]
fn unknown_opsets_are_named() {
    let mut m = good_model();
    m.opset_import[0].version = Some(40);
    let e = import_err(&m);
    assert!(e.contains("opset 40") && e.contains("7 to 28"), "{e}");
    // Default-domain nodes need the default domain's opset.
    m.opset_import.clear();
    let e = import_err(&m);
    assert!(e.contains("node 'mm' (MatMul)") && e.contains("imports no ai.onnx opset"), "{e}");
}

/// A model of ai.onnx.ml ops only (a scikit-learn pipeline; onnxruntime ships one) needs no
/// default-domain opset: it imports, its ops stay with the host, and the shape-keeping
/// transforms (Scaler here) are typed for what follows them.
#[test]
fn models_of_other_domains_only_import() {
    let mut m = good_model();
    m.opset_import = vec![OperatorSetIdProto { domain: Some("ai.onnx.ml".into()), version: Some(1) }];
    let g = m.graph.as_mut().unwrap();
    let mut scale = node("scale", "Scaler", &["x"], &["y"]);
    scale.domain = Some("ai.onnx.ml".into());
    g.node = vec![scale];
    g.initializer.clear();
    g.output = vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }];
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert!(g.nodes[0].op.is_opaque());
    let y = &g.types["y"];
    assert_eq!((y.dtype, y.shape.as_ref().map(|s| s.to_string())), (bolt::ir::DType::F32, Some("[2, 3]".into())));
}

#[test]
fn dangling_tensor_names_name_the_node_and_tensor() {
    let mut m = good_model();
    m.graph.as_mut().unwrap().node[1].input[0] = "ghost".into();
    let e = import_err(&m);
    assert!(e.contains("node 'act'") && e.contains("'ghost'"), "{e}");
}

#[test]
fn graph_inputs_of_undefined_element_type_are_named() {
    let mut m = good_model();
    if let Some(type_proto::Value::TensorType(t)) =
        m.graph.as_mut().unwrap().input[0].r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(0);
    }
    let e = import_err(&m);
    assert!(e.contains("'x'") && e.contains("UNDEFINED"), "{e}");
}

#[test]
fn missing_initializers_are_named() {
    let mut m = good_model();
    m.graph.as_mut().unwrap().initializer.clear();
    let e = import_err(&m);
    assert!(e.contains("node 'mm'") && e.contains("input 'w'"), "{e}");
}

#[test]
fn mismatched_shapes_name_the_node() {
    let mut m = good_model();
    m.graph.as_mut().unwrap().initializer[0] = weight("w", &[5, 4]);
    let e = import_err(&m);
    assert!(e.contains("node 'mm' (MatMul)") && e.contains("inner dimensions"), "{e}");
}

#[test]
fn a_reshape_whose_minus_one_sits_beside_a_zero_size_is_named() {
    // x [0, 3] (a constant of no elements) to [0, -1]: the -1 could be any size; onnxruntime
    // refuses it at load. [-1, 3] is fine (0 rows).
    let mut m = good_model();
    let g = m.graph.as_mut().unwrap();
    g.initializer = vec![weight("e", &[0, 3]), common::onnx_proto::ints("t", &[0, -1], false)];
    g.node = vec![node("r", "Reshape", &["e", "t"], &["y"])];
    g.input.clear();
    g.output[0] = ValueInfoProto { name: Some("y".into()), ..Default::default() };
    let e = import_err(&m);
    assert!(e.contains("node 'r' (Reshape)") && e.contains("-1 beside a dim of size 0"), "{e}");
    m.graph.as_mut().unwrap().initializer[1] = common::onnx_proto::ints("t", &[-1, 3], false);
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert_eq!(g.tensor_type("y").unwrap().to_string(), "f32[0, 3]");
}

#[test]
fn resize_constants_that_fit_no_input_are_named_even_when_sizes_are_dynamic() {
    // x[N, 3, 4, 4] resized by constant scales: their count and signs do not depend on N, so
    // a wrong count is an error at import (onnxruntime rejects the model at load too), not a
    // node left to fail at run time.
    let resize = |scales: &[i64]| {
        let g = GraphProto {
            name: Some("g".into()),
            node: vec![node("up", "Resize", &["x", "", "scales"], &["y"])],
            initializer: vec![weight("scales", scales)],
            input: vec![value_info("x", &[-1, 3, 4, 4])],
            output: vec![value_info("y", &[-1, 3, 2, 2])],
            ..Default::default()
        };
        common::onnx_proto::model(17, g)
    };
    let e = import_err(&resize(&[3]));
    assert!(e.contains("node 'up' (Resize)") && e.contains("scales has 3 entries for 4 axes"), "{e}");
    // Four scales of 0.5: a valid model, its output sizes known once N is.
    let g = import::load_bytes(&resize(&[4]).encode_to_vec(), None).unwrap().graph;
    assert_eq!(g.tensor_type("y").unwrap().shape.as_ref().unwrap().rank(), 4);
}

#[test]
fn declared_output_shapes_that_contradict_inference_yield_to_it() {
    // Exporters leave stale declared shapes (ddddocr's CRNN declares [1, -1] for a rank-3
    // output); onnxruntime runs such models with a warning, so Bolt keeps what the
    // computation gives.
    let mut m = good_model();
    m.graph.as_mut().unwrap().output[0] = value_info("y", &[2, 5]);
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert_eq!(g.tensor_type("y").unwrap().to_string(), "f32[2, 4]");
}

#[test]
fn negative_zero_and_unnamed_dims_are_dynamic() {
    // A graph input's unnamed dynamic dim is named `<input>.<axis>` (so --dim can size it);
    // elsewhere it stays unknown.
    for d in [-1, 0] {
        let mut m = good_model();
        m.graph.as_mut().unwrap().input[0] = value_info("x", &[d, 3]);
        m.graph.as_mut().unwrap().output[0] = value_info("y", &[d, 4]);
        m.graph.as_mut().unwrap().value_info.push(value_info("h", &[d, 4]));
        let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
        assert_eq!(g.tensor_type("x").unwrap().to_string(), "f32[x.0, 3]", "dim {d}");
        assert_eq!(g.tensor_type("y").unwrap().to_string(), "f32[x.0, 4]", "dim {d}");
    }
}

#[test]
fn ops_from_other_domains_and_control_flow_import_as_host_nodes() {
    // com.microsoft's Inverse (an op Bolt has no rule for), and an If decided at run time whose branches give
    // different ranks. Their outputs have unknown types (the If's rank); the MatMul reading
    // one still imports and the partitioner leaves it to the host with the reason.
    let mut m = good_model();
    m.opset_import.push(OperatorSetIdProto { domain: Some("com.microsoft".into()), version: Some(1) });
    let g = m.graph.as_mut().unwrap();
    let mut ms = node("ms", "Inverse", &["x"], &["p"]);
    ms.domain = Some("com.microsoft".into());
    let branch = |name: &str, nodes: Vec<NodeProto>, out: &str| AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Graph as i32),
        g: Some(GraphProto {
            node: nodes,
            output: vec![ValueInfoProto { name: Some(out.into()), ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let flat = TensorProto {
        name: Some("flat".into()),
        dims: vec![1],
        data_type: Some(7),
        int64_data: vec![-1],
        ..Default::default()
    };
    let mut flatten = common::onnx_proto::constant("k", flat);
    flatten.name = Some("k".into());
    let mut iff = node("cond", "If", &["c"], &["q"]);
    iff.attribute = vec![
        branch("then_branch", vec![node("id", "Identity", &["x"], &["t"])], "t"),
        branch("else_branch", vec![flatten, node("r", "Reshape", &["x", "flat"], &["e"])], "e"),
    ];
    g.input.push(ValueInfoProto {
        name: Some("c".into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor { elem_type: Some(9), shape: None })),
            ..Default::default()
        }),
        ..Default::default()
    });
    g.node = vec![ms, iff, node("mm", "MatMul", &["q", "w"], &["h"]), node("act", "Relu", &["h"], &["y"])];
    g.output[0].r#type = None;
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert!(g.nodes[0].op.is_opaque() && matches!(g.nodes[1].op, bolt::ir::Op::If { .. }));
    assert!(g.tensor_type("q").unwrap().shape.is_none(), "{:?}", g.tensor_type("q"));
    assert!(g.tensor_type("p").is_none() && g.tensor_type("h").is_none_or(|t| t.shape.is_none()));
    let parts = bolt::partition::partition(&g);
    assert!(parts.partitions.is_empty());
    let mm = parts.host.iter().find(|h| h.node == "mm").unwrap();
    assert!(mm.reason.contains("unknown"), "{}", mm.reason);
}

#[test]
fn a_sequence_graph_input_imports_and_what_reads_it_stays_with_the_host() {
    // Valid ONNX: a sequence input (untyped in Bolt) beside tensors; the MatMul is still a
    // kernel, and `bolt compile` says why its runtime cannot take the model.
    let mut m = good_model();
    let g = m.graph.as_mut().unwrap();
    g.input.push(ValueInfoProto {
        name: Some("s".into()),
        r#type: Some(TypeProto { value: Some(type_proto::Value::SequenceType(Box::default())), ..Default::default() }),
        ..Default::default()
    });
    g.node.push(node("len", "SequenceLength", &["s"], &["n"]));
    g.output.push(ValueInfoProto { name: Some("n".into()), ..Default::default() });
    let graph = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert!(graph.tensor_type("s").is_none() && graph.nodes[2].op.is_opaque());
    assert_eq!(bolt::partition::partition(&graph).partitions.len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seq.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bolt"))
        .args(["compile", path.to_str().unwrap(), "-o", dir.path().join("seq.bolt").to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("tensor 's': graph input is no tensor"), "{err}");
}

#[test]
fn squeeze_and_unsqueeze_with_axes_attributes_keep_shape_arithmetic_visible() {
    // Opset 12, as torch.onnx < 1.10 writes a dynamic flatten: Shape -> Gather(0) ->
    // Unsqueeze(axes=[0]) -> Concat with [-1] -> Reshape. The Reshape's output is [N, 6]
    // with N the input's symbol, so the Gemm after it is a kernel.
    let mut m = good_model();
    m.opset_import[0].version = Some(12);
    let g = m.graph.as_mut().unwrap();
    use tensor_shape_proto::dimension::Value as D;
    g.input[0] =
        common::onnx_proto::typed_value_info("x", 1, vec![D::DimParam("N".into()), D::DimValue(2), D::DimValue(3)]);
    let int = |name: &str, v: Vec<i64>| TensorProto {
        name: Some(name.into()),
        dims: if v.len() == 1 && name == "zero" { vec![] } else { vec![v.len() as i64] },
        data_type: Some(7),
        int64_data: v,
        ..Default::default()
    };
    let mut unsq = node("unsq", "Unsqueeze", &["n"], &["n1"]);
    unsq.attribute.push(AttributeProto {
        name: Some("axes".into()),
        r#type: Some(attribute_proto::AttributeType::Ints as i32),
        ints: vec![0],
        ..Default::default()
    });
    let mut concat = node("cat", "Concat", &["n1", "minus1"], &["target"]);
    concat.attribute.push(AttributeProto {
        name: Some("axis".into()),
        r#type: Some(attribute_proto::AttributeType::Int as i32),
        i: Some(0),
        ..Default::default()
    });
    g.initializer = vec![weight("w", &[6, 4]), int("zero", vec![0]), int("minus1", vec![-1])];
    g.node = vec![
        node("shape", "Shape", &["x"], &["s"]),
        node("gather", "Gather", &["s", "zero"], &["n"]),
        unsq,
        concat,
        node("flat", "Reshape", &["x", "target"], &["x2"]),
        node("mm", "Gemm", &["x2", "w"], &["y"]),
    ];
    g.output[0] = ValueInfoProto { name: Some("y".into()), ..Default::default() };
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert_eq!(g.tensor_type("x2").unwrap().to_string(), "f32[N, 6]");
    assert_eq!(g.tensor_type("y").unwrap().to_string(), "f32[N, 4]");
    assert_eq!(bolt::partition::partition(&g).partitions.len(), 1);
}

#[test]
fn initializer_data_that_does_not_fit_its_dims_is_named() {
    let mut m = good_model();
    m.graph.as_mut().unwrap().initializer[0].float_data.pop();
    let e = import_err(&m);
    assert!(e.contains("tensor 'w'") && e.contains("11 elements"), "{e}");
}

#[test]
fn cycles_are_rejected() {
    let mut m = good_model();
    let g = m.graph.as_mut().unwrap();
    g.node[0].input[0] = "y".into();
    assert!(import_err(&m).contains("cycle"));
}

#[test]
fn unknown_ops_import_as_host_only_nodes() {
    let mut m = good_model();
    m.graph.as_mut().unwrap().node[1].op_type = Some("Det".into());
    m.graph.as_mut().unwrap().output[0] = value_info("y", &[2, 4]);
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert!(g.nodes[1].op.is_opaque());
    // The declared output type survives for the host to use.
    assert_eq!(g.tensor_type("y").unwrap().to_string(), "f32[2, 4]");
}

/// What ONNX's checker and onnxruntime's loader refuse, named at import: a node against its
/// operator's schema in the model's opset (tests/python/test_onnx_schemas.py has onnxruntime
/// refuse the same models).
#[test]
fn nodes_that_break_their_operators_schema_are_named() {
    use common::onnx_proto::{with_int, with_ints};
    type Edit = fn(&mut ModelProto);
    fn relu(m: &mut ModelProto) -> &mut NodeProto {
        &mut m.graph.as_mut().unwrap().node[1]
    }
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("an input too many", |m| relu(m).input.push("x".into()), "Relu-14 takes 1 input, found 2"),
        (
            "a required input left empty",
            |m| m.graph.as_mut().unwrap().node[0].input[1] = String::new(),
            "input 1 ('B') of MatMul-13 is required but the node leaves it empty",
        ),
        (
            "an attribute the operator does not have",
            |m| *relu(m) = with_ints(relu(m).clone(), "perm", &[1, 0]),
            "attribute 'perm' is not one of Relu-14's (it has none)",
        ),
        (
            "an attribute of the wrong type",
            |m| {
                let n = node("act", "LeakyRelu", &["h"], &["y"]);
                *relu(m) = with_int(n, "alpha", 2);
            },
            "attribute 'alpha' of LeakyRelu-16 must be FLOAT, found INT",
        ),
        (
            "a required attribute missing",
            |m| *relu(m) = node("act", "Cast", &["h"], &["y"]),
            "Cast-13 requires attribute 'to'",
        ),
        (
            "an operator newer than the model's opset",
            |m| relu(m).op_type = Some("Gelu".into()),
            "Gelu does not exist in opset 17: ONNX defines it from opset 20",
        ),
        ("no such operator", |m| relu(m).op_type = Some("Frobnicate".into()), "'Frobnicate' is not an ONNX operator"),
        (
            "an element type code that names no type",
            |m| *relu(m) = with_int(node("act", "Cast", &["h"], &["y"]), "to", 1234),
            "attribute 'to' of Cast-13 is 1234, which is no element type it produces",
        ),
        (
            "an attribute given twice",
            |m| *relu(m) = with_int(with_int(node("act", "Softmax", &["h"], &["y"]), "axis", 1), "axis", 0),
            "attribute 'axis' is given twice",
        ),
        (
            "a deprecated operator",
            |m| {
                m.opset_import[0].version = Some(10);
                relu(m).op_type = Some("Upsample".into());
            },
            "Upsample is deprecated in opset 10",
        ),
        (
            "an element type the operator does not take",
            |m| {
                m.graph.as_mut().unwrap().input[0] = common::onnx_proto::typed_value_info(
                    "x",
                    3,
                    vec![
                        tensor_shape_proto::dimension::Value::DimValue(2),
                        tensor_shape_proto::dimension::Value::DimValue(3),
                    ],
                )
            },
            "input 0 ('A', tensor 'x') of MatMul-13 is i8; it takes",
        ),
        (
            "two types for one type parameter",
            |m| {
                let g = m.graph.as_mut().unwrap();
                g.initializer.push(TensorProto { data_type: Some(10), int32_data: vec![0; 3], ..weight("b", &[3]) });
                g.initializer[1].float_data.clear();
                g.node[0] = node("mm", "Add", &["x", "b"], &["h"]);
            },
            "inputs 0 and 1 of Add-14 share type parameter T but are f32 and f16",
        ),
    ];
    for (what, edit, want) in cases {
        let mut m = good_model();
        edit(&mut m);
        let e = import_err(&m);
        assert!(e.contains(want), "{what}: {e}");
        assert!(e.contains("node 'act'") || e.contains("node 'mm'"), "{what}: {e}");
    }
}

#[test]
fn initializers_listed_as_inputs_must_agree_with_their_declared_type() {
    // IR 3 lists every initializer as a graph input too; onnxruntime refuses a declaration that
    // contradicts the data.
    let mut m = good_model();
    let g = m.graph.as_mut().unwrap();
    g.input.push(value_info("w", &[3, 5]));
    assert!(import_err(&m).contains("tensor 'w': graph input is declared [3, 5] but its initializer has dims [3, 4]"));
    let g = m.graph.as_mut().unwrap();
    g.input[1] = common::onnx_proto::typed_value_info("w", 10, vec![]);
    assert!(import_err(&m).contains("tensor 'w': graph input is declared f16 but its initializer holds f32"));
    let g = m.graph.as_mut().unwrap();
    g.input[1] = common::onnx_proto::typed_value_info("w", 0, vec![]);
    let e = import_err(&m);
    assert!(e.contains("tensor 'w': graph input is declared") && e.contains("but its initializer holds f32"), "{e}");
    let g = m.graph.as_mut().unwrap();
    g.input[1] = value_info("w", &[3, 4]);
    import::load_bytes(&m.encode_to_vec(), None).unwrap();
}

#[test]
fn an_attribute_its_host_could_not_hand_over_keeps_the_node_with_the_host() {
    // The ORT plugin marks an attribute it cannot read (a tensor of a type Bolt does not hold)
    // UNDEFINED: read as absent it would change the op, so the node stays with the host.
    let mut m = good_model();
    let g = m.graph.as_mut().unwrap();
    g.node[1] = node("act", "LeakyRelu", &["h"], &["y"]);
    g.node[1].attribute.push(AttributeProto {
        name: Some("alpha".into()),
        r#type: Some(attribute_proto::AttributeType::Undefined as i32),
        ..Default::default()
    });
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert!(g.nodes[1].op.is_opaque(), "{:?}", g.nodes[1].op);
}

#[test]
fn malformed_attributes_name_the_node_and_attribute() {
    let mut m = good_model();
    let g = m.graph.as_mut().unwrap();
    g.node[1] = node("act", "LeakyRelu", &["h"], &["y"]);
    g.node[1].attribute.push(AttributeProto {
        name: Some("alpha".into()),
        r#type: Some(attribute_proto::AttributeType::String as i32),
        s: Some(b"big".to_vec()),
        ..Default::default()
    });
    let e = import_err(&m);
    assert!(e.contains("node 'act' (LeakyRelu)") && e.contains("attribute 'alpha'"), "{e}");
}

#[test]
fn the_cli_reports_bad_files_by_path_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.onnx");
    let bytes = good_model().encode_to_vec();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bolt")).arg("compile").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("broken.onnx") && stderr.contains("error:"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let missing =
        Command::new(env!("CARGO_BIN_EXE_bolt")).args(["compile", "/nonexistent/model.onnx"]).output().unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/model.onnx: cannot read"));
}

#[test]
fn bolt_check_exits_non_zero_when_a_case_fails() {
    // One case in the ONNX backend-test layout whose expected output is wrong.
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("wrong_case");
    std::fs::create_dir_all(case.join("test_data_set_0")).unwrap();
    std::fs::write(case.join("model.onnx"), good_model().encode_to_vec()).unwrap();
    let tensor = |name: &str, dims: &[i64], v: f32| TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: vec![v; dims.iter().product::<i64>() as usize],
        ..Default::default()
    };
    let ds = case.join("test_data_set_0");
    std::fs::write(ds.join("input_0.pb"), tensor("x", &[2, 3], 1.0).encode_to_vec()).unwrap();
    // Relu(x @ w) = 3 * 0.5 = 1.5 everywhere; the file says 7.
    std::fs::write(ds.join("output_0.pb"), tensor("y", &[2, 4], 7.0).encode_to_vec()).unwrap();
    let run = || Command::new(env!("CARGO_BIN_EXE_bolt")).arg("check").arg(dir.path()).output().unwrap();
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("FAIL") && stdout.contains("wrong_case"), "{stdout}");
    // The same case with the right answer passes.
    std::fs::write(ds.join("output_0.pb"), tensor("y", &[2, 4], 1.5).encode_to_vec()).unwrap();
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn compile_says_which_symbolic_dims_ran_at_their_default_size() {
    // x[1, 2, H, W] -> MaxPool 2x2: at H = W = 1 (the default) the window does not fit.
    use common::onnx_proto::{typed_value_info, with_ints};
    use tensor_shape_proto::dimension::Value;
    let dims = |h: Value, w: Value| vec![Value::DimValue(1), Value::DimValue(2), h, w];
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            name: Some("pool".into()),
            node: vec![with_ints(node("pool", "MaxPool", &["x"], &["y"]), "kernel_shape", &[2, 2])],
            input: vec![typed_value_info("x", 1, dims(Value::DimParam("H".into()), Value::DimParam("W".into())))],
            output: vec![typed_value_info("y", 1, dims(Value::DimParam("h".into()), Value::DimParam("w".into())))],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let compile = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bolt"))
            .arg("compile")
            .arg("--no-artifact")
            .args(extra)
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = compile(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("symbolic dims H, W were 1") && stderr.contains("--dim"), "{stderr}");
    assert!(stderr.contains("'pool'"), "the node is still named: {stderr}");
    let out = compile(&["--dim", "H=4", "--dim", "W=6"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Valid models holding tensors of types Bolt does not compute with (a table of strings as an
/// initializer or a Constant, as label-encoding front ends ship) import: those constants and
/// what reads them stay with the host, and the reference names the node when asked to run
/// it. Types print under ONNX's names.
#[test]
fn string_initializers_and_constants_import_as_host_constants() {
    let mut m = good_model();
    m.opset_import.push(OperatorSetIdProto { domain: Some("ai.onnx.ml".into()), version: Some(2) });
    let g = m.graph.as_mut().unwrap();
    let strings = |name: &str| TensorProto {
        name: Some(name.into()),
        dims: vec![2],
        data_type: Some(8),
        string_data: vec![b"a".to_vec(), b"b".to_vec()],
        ..Default::default()
    };
    g.initializer.push(strings("labels"));
    let mut table = common::onnx_proto::constant("table", strings("table"));
    table.name = Some("table_const".into());
    let mut encode = node("encode", "LabelEncoder", &["labels"], &["codes"]);
    encode.domain = Some("ai.onnx.ml".into());
    g.node.extend([table, encode, node("same", "Identity", &["table"], &["table_out"])]);
    g.output.push(ValueInfoProto { name: Some("codes".into()), ..Default::default() });
    g.output.push(ValueInfoProto { name: Some("table_out".into()), ..Default::default() });
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert_eq!(g.tensor_type("labels").unwrap().to_string(), "string[2]");
    let host: Vec<String> = bolt::partition::partition(&g).host.into_iter().map(|h| h.node).collect();
    for n in ["labels.initializer", "table_const", "encode"] {
        assert!(host.iter().any(|h| h == n), "{n} is a host node: {host:?}");
    }
    let x = bolt::ir::Tensor::from_f32(vec![2, 3], vec![0.5; 6]);
    let err = bolt::reference::run(&g, &std::collections::HashMap::from([("x".to_string(), x)])).unwrap_err();
    assert!(err.to_string().contains("labels.initializer") || err.to_string().contains("table_const"), "{err}");
}

/// onnxruntime's fused self-attention (com.microsoft Attention) is read as ONNX ops where Bolt
/// has a rule for its form (a raw [batch, keys] mask), and kept, with the reason in the host
/// table, where it has none by design (key lengths as the mask: a 1-D mask_index).
#[test]
fn onnxruntime_attention_is_expanded_or_kept_with_its_reason() {
    use common::onnx_proto::typed_value_info;
    use tensor_shape_proto::dimension::Value::DimValue;
    for (mask_dims, expanded) in [(vec![2, 5], true), (vec![2], false)] {
        let mut m = good_model();
        m.opset_import.push(OperatorSetIdProto { domain: Some("com.microsoft".into()), version: Some(1) });
        let g = m.graph.as_mut().unwrap();
        let mut att =
            common::onnx_proto::with_int(node("att", "Attention", &["x", "w", "b", "mask"], &["y"]), "num_heads", 2);
        att.domain = Some("com.microsoft".into());
        g.node = vec![att];
        g.initializer = vec![weight("w", &[8, 24]), weight("b", &[24])];
        g.input = vec![
            value_info("x", &[2, 5, 8]),
            typed_value_info("mask", 6, mask_dims.into_iter().map(DimValue).collect()),
        ];
        g.output = vec![value_info("y", &[2, 5, 8])];
        let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
        let onnx_attention = g.nodes.iter().any(|n| {
            n.op.op_type() == "Attention" && matches!(&n.op, bolt::ir::Op::Opaque { domain, .. } if domain.is_empty())
        });
        assert_eq!(onnx_attention, expanded, "{:?}", g.nodes.iter().map(|n| n.op.op_type()).collect::<Vec<_>>());
        if !expanded {
            let parts = bolt::partition::partition(&g);
            let h = parts.host.iter().find(|h| h.node == "att").unwrap();
            assert!(h.reason.contains("key lengths as its mask"), "{}", h.reason);
        }
    }
}
