//! Bad input never panics: every malformed model gives an error that names the file, node or
//! tensor and the reason, and the CLI exits non-zero.

use bolt::import::{self, proto::*};
use prost::Message;
use std::process::Command;

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn weight(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: vec![0.5; n as usize],
        ..Default::default()
    }
}

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
    assert!(e.contains("opset 40") && e.contains("11 to 28"), "{e}");
    m.opset_import.clear();
    assert!(import_err(&m).contains("no default-domain"));
}

#[test]
fn dangling_tensor_names_name_the_node_and_tensor() {
    let mut m = good_model();
    m.graph.as_mut().unwrap().node[1].input[0] = "ghost".into();
    let e = import_err(&m);
    assert!(e.contains("node 'act'") && e.contains("'ghost'"), "{e}");
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
fn declared_output_shapes_must_agree_with_inference() {
    let mut m = good_model();
    m.graph.as_mut().unwrap().output[0] = value_info("y", &[2, 5]);
    let e = import_err(&m);
    assert!(e.contains("node 'act'") && e.contains("output 'y'") && e.contains("[2, 5]"), "{e}");
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
    m.graph.as_mut().unwrap().node[1].op_type = Some("Mish".into());
    m.graph.as_mut().unwrap().output[0] = value_info("y", &[2, 4]);
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert!(g.nodes[1].op.is_opaque());
    // The declared output type survives for the host to use.
    assert_eq!(g.tensor_type("y").unwrap().to_string(), "f32[2, 4]");
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
