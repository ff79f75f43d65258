//! ONNX protobuf messages built in code, for tests of the importer.

use bolt::import::proto::*;

/// A float tensor value_info; a negative dim is written as a dim_value, as exporters do.
pub fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    typed_value_info(name, 1, dims.iter().map(|&d| tensor_shape_proto::dimension::Value::DimValue(d)).collect())
}

/// A value_info of element type `elem` whose dims are values or names.
pub fn typed_value_info(name: &str, elem: i32, dims: Vec<tensor_shape_proto::dimension::Value>) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .into_iter()
                        .map(|d| tensor_shape_proto::Dimension { value: Some(d), ..Default::default() })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub fn with_int(mut n: NodeProto, name: &str, v: i64) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    });
    n
}

pub fn with_ints(mut n: NodeProto, name: &str, v: &[i64]) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    });
    n
}

pub fn with_string(mut n: NodeProto, name: &str, v: &str) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    });
    n
}

/// A float initializer of `dims` filled with 0.5.
pub fn weight(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: vec![0.5; n as usize],
        ..Default::default()
    }
}

/// An int64 initializer; `dims` None makes a scalar.
pub fn ints(name: &str, v: &[i64], scalar: bool) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: if scalar { vec![] } else { vec![v.len() as i64] },
        data_type: Some(7),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

pub fn model(opset: i64, graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// Attaches a subgraph attribute (If's `then_branch` / `else_branch`).
pub fn with_graph(mut n: NodeProto, name: &str, g: GraphProto) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Graph as i32),
        g: Some(g),
        ..Default::default()
    });
    n
}

/// A Constant node holding `t`.
pub fn constant(name: &str, t: TensorProto) -> NodeProto {
    let out = t.name().to_string();
    let mut n = node(name, "Constant", &[], &[&out]);
    n.attribute.push(AttributeProto {
        name: Some("value".into()),
        r#type: Some(attribute_proto::AttributeType::Tensor as i32),
        t: Some(t),
        ..Default::default()
    });
    n
}

/// A float tensor of `dims` holding `v`.
pub fn floats(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        float_data: v.to_vec(),
        ..Default::default()
    }
}
