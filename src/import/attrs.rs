//! Typed access to a NodeProto's attributes, with errors that name the node and attribute.

use super::proto::{attribute_proto::AttributeType, AttributeProto, NodeProto};
use super::tensor_proto::decode_tensor;
use crate::ir::{AttrValue, Tensor};
use std::sync::Arc;

pub struct Attrs<'a> {
    list: &'a [AttributeProto],
}

impl<'a> Attrs<'a> {
    pub fn new(node: &'a NodeProto) -> Attrs<'a> {
        Attrs { list: &node.attribute }
    }

    fn get(&self, name: &str) -> Option<&'a AttributeProto> {
        self.list.iter().find(|a| a.name() == name)
    }

    fn typed(&self, name: &str, want: AttributeType) -> Result<Option<&'a AttributeProto>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(a) => {
                let ty = effective_type(a);
                if ty != want {
                    Err(format!("attribute '{name}' must be {:?}, found {:?}", want, ty))
                } else {
                    Ok(Some(a))
                }
            }
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn int(&self, name: &str) -> Result<Option<i64>, String> {
        Ok(self.typed(name, AttributeType::Int)?.map(|a| a.i()))
    }

    pub fn int_or(&self, name: &str, default: i64) -> Result<i64, String> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.int(name)? {
            None => Ok(default),
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(v) => Err(format!("attribute '{name}' must be 0 or 1, found {v}")),
        }
    }

    pub fn float_or(&self, name: &str, default: f32) -> Result<f32, String> {
        Ok(self.typed(name, AttributeType::Float)?.map(|a| a.f()).unwrap_or(default))
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        Ok(self.typed(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    /// Non-negative integer list (kernel shapes, strides, pads).
    pub fn usizes(&self, name: &str) -> Result<Option<Vec<usize>>, String> {
        match self.ints(name)? {
            None => Ok(None),
            Some(v) => v
                .iter()
                .map(|&x| usize::try_from(x).map_err(|_| format!("attribute '{name}' has negative entry {x}")))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
        }
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, String> {
        Ok(self.typed(name, AttributeType::Floats)?.map(|a| a.floats.clone()))
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, String> {
        match self.typed(name, AttributeType::String)? {
            None => Ok(None),
            Some(a) => String::from_utf8(a.s().to_vec())
                .map(Some)
                .map_err(|_| format!("attribute '{name}' is not valid UTF-8")),
        }
    }

    pub fn strings(&self, name: &str) -> Result<Option<Vec<String>>, String> {
        match self.typed(name, AttributeType::Strings)? {
            None => Ok(None),
            Some(a) => a
                .strings
                .iter()
                .map(|s| String::from_utf8(s.clone()).map_err(|_| format!("attribute '{name}' is not valid UTF-8")))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
        }
    }

    /// The element type of tensor attribute `name`, without decoding it.
    pub fn tensor_type(&self, name: &str) -> Result<Option<crate::ir::DType>, String> {
        Ok(self
            .typed(name, AttributeType::Tensor)?
            .and_then(|a| a.t.as_ref())
            .map(|t| crate::ir::DType::from_onnx(t.data_type())))
    }

    pub fn tensor(&self, name: &str) -> Result<Option<Tensor>, String> {
        match self.typed(name, AttributeType::Tensor)? {
            None => Ok(None),
            Some(a) => {
                let t = a.t.as_ref().ok_or_else(|| format!("attribute '{name}' has no tensor"))?;
                decode_tensor(t, None).map(Some).map_err(|e| format!("attribute '{name}': {e}"))
            }
        }
    }

    /// Every attribute as a generic value, for opaque nodes.
    pub fn generic(&self) -> Vec<(String, AttrValue)> {
        self.list
            .iter()
            .map(|a| {
                let v = match effective_type(a) {
                    AttributeType::Float => AttrValue::Float(a.f()),
                    AttributeType::Int => AttrValue::Int(a.i()),
                    AttributeType::String => AttrValue::String(a.s().to_vec()),
                    AttributeType::Floats => AttrValue::Floats(a.floats.clone()),
                    AttributeType::Ints => AttrValue::Ints(a.ints.clone()),
                    AttributeType::Strings => AttrValue::Strings(a.strings.clone()),
                    AttributeType::Tensor => match a.t.as_ref().map(|t| decode_tensor(t, None)) {
                        Some(Ok(t)) => AttrValue::Tensor(Arc::new(t)),
                        _ => AttrValue::Unsupported("tensor".into()),
                    },
                    AttributeType::Graph | AttributeType::Graphs => AttrValue::Unsupported("graph".into()),
                    _ => AttrValue::Unsupported("other".into()),
                };
                (a.name().to_string(), v)
            })
            .collect()
    }
}

/// The attribute's type; files from old exporters leave `type` unset, so infer it from which
/// field is filled.
pub(super) fn effective_type(a: &AttributeProto) -> AttributeType {
    if a.r#type.is_some() {
        return a.r#type();
    }
    if a.f.is_some() {
        AttributeType::Float
    } else if a.i.is_some() {
        AttributeType::Int
    } else if a.s.is_some() {
        AttributeType::String
    } else if a.t.is_some() {
        AttributeType::Tensor
    } else if a.g.is_some() {
        AttributeType::Graph
    } else if !a.floats.is_empty() {
        AttributeType::Floats
    } else if !a.ints.is_empty() {
        AttributeType::Ints
    } else if !a.strings.is_empty() {
        AttributeType::Strings
    } else {
        AttributeType::Undefined
    }
}
