//! A node against its operator's ONNX schema, as ONNX's checker and onnxruntime's loader hold
//! it: an operator that exists in the model's opset and is not deprecated there, input and
//! output counts, required inputs not left empty, attributes the schema knows (of its type,
//! the required ones present), and input element types each type parameter admits, bound to
//! one type across the inputs that share it. A model that breaks one is not valid ONNX and no
//! host would run it; it is an error naming the node, not a silent choice of meaning (extra
//! inputs ignored, an int8 tensor in a Conv left to a host that refuses it).
//!
//! The table (`onnx_schemas.json`) is generated from the pinned onnx package by
//! tests/python/gen_onnx_schemas.py; tests/python/test_onnx_schemas.py keeps it in step.

use super::proto::NodeProto;
use crate::ir::DType;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

#[derive(Deserialize)]
struct Table {
    onnx: String,
    max_opset: i64,
    ops: HashMap<String, Vec<Schema>>,
}

/// One version of an operator.
#[derive(Deserialize)]
struct Schema {
    since: i64,
    deprecated: bool,
    inputs: Vec<Formal>,
    outputs: Vec<Formal>,
    min_inputs: usize,
    max_inputs: usize,
    min_outputs: usize,
    max_outputs: usize,
    /// Name -> (AttributeProto type code, required).
    attributes: BTreeMap<String, (i32, bool)>,
    /// Type parameter -> (tensor element type codes it admits, whether tensors only).
    constraints: BTreeMap<String, (Vec<i32>, bool)>,
}

/// A formal input or output: name, type ("T", "#<code>" fixed, "" unchecked), option ("1"
/// single, "?" optional, "*" variadic), homogeneous (a variadic's values share one type).
#[derive(Deserialize)]
struct Formal(String, String, String, bool);

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    // Generated and checked by the tests (`the_table_parses`): not input.
    TABLE.get_or_init(|| serde_json::from_str(include_str!("onnx_schemas.json")).expect("onnx_schemas.json parses"))
}

/// The version of `op_type` in effect at `opset`; None where the table cannot say (an opset
/// newer than the pinned onnx's, whose new operators Bolt leaves to the host).
fn version(op_type: &str, opset: i64) -> Option<Result<&'static Schema, String>> {
    let t = table();
    if opset > t.max_opset {
        return None;
    }
    let Some(versions) = t.ops.get(op_type) else {
        return Some(Err(format!("'{op_type}' is not an ONNX operator (onnx {} defines none of that name)", t.onnx)));
    };
    let Some(s) = versions.iter().rev().find(|s| s.since <= opset) else {
        return Some(Err(format!(
            "{op_type} does not exist in opset {opset}: ONNX defines it from opset {}",
            versions[0].since
        )));
    };
    if s.deprecated {
        return Some(Err(format!("{op_type} is deprecated in opset {opset} (since opset {})", s.since)));
    }
    Some(Ok(s))
}

/// The formal parameter of argument `i` (a trailing variadic takes the rest).
fn formal(list: &[Formal], i: usize) -> Option<&Formal> {
    list.get(i).or_else(|| list.last().filter(|f| f.2 == "*"))
}

fn counted(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

fn range(min: usize, max: usize, what: &str) -> String {
    match (min, max) {
        (a, b) if a == b => counted(a, what),
        (a, b) if b >= i32::MAX as usize => format!("at least {}", counted(a, what)),
        (a, b) => format!("{a} to {}", counted(b, what)),
    }
}

/// What can be checked on the node alone (before types are inferred): every default-domain
/// node, of every graph and body, at import.
pub fn check_node(n: &NodeProto, opset: i64) -> Result<(), String> {
    let Some(s) = version(n.op_type(), opset) else { return Ok(()) };
    let s = s?;
    let op = n.op_type();
    let at = format!("{op}-{}", s.since);
    if !(s.min_inputs..=s.max_inputs).contains(&n.input.len()) {
        return Err(format!("{at} takes {}, found {}", range(s.min_inputs, s.max_inputs, "input"), n.input.len()));
    }
    if !(s.min_outputs..=s.max_outputs).contains(&n.output.len()) {
        return Err(format!("{at} has {}, found {}", range(s.min_outputs, s.max_outputs, "output"), n.output.len()));
    }
    for (kind, names, formals) in [("input", &n.input, &s.inputs), ("output", &n.output, &s.outputs)] {
        for (i, name) in names.iter().enumerate() {
            if let Some(f) = formal(formals, i).filter(|f| name.is_empty() && f.2 == "1") {
                return Err(format!("{kind} {i} ('{}') of {at} is required but the node leaves it empty", f.0));
            }
        }
    }
    for (i, a) in n.attribute.iter().enumerate() {
        if n.attribute[..i].iter().any(|b| b.name() == a.name()) {
            return Err(format!("attribute '{}' is given twice", a.name()));
        }
        if a.ref_attr_name.is_some() {
            continue; // a function body's reference to its caller's attribute
        }
        let Some(&(ty, _)) = s.attributes.get(a.name()) else {
            let known: Vec<&str> = s.attributes.keys().map(String::as_str).collect();
            return Err(format!(
                "attribute '{}' is not one of {at}'s ({})",
                a.name(),
                if known.is_empty() { "it has none".to_string() } else { known.join(", ") }
            ));
        };
        let found = super::attrs::effective_type(a) as i32;
        // An attribute without its type field and no value (an empty list) could be any list.
        if found != 0 && found != ty {
            return Err(format!(
                "attribute '{}' of {at} must be {}, found {}",
                a.name(),
                attr_type_name(ty),
                attr_type_name(found)
            ));
        }
    }
    // Attributes naming an element type: one the operator's type parameter admits.
    for &(op_type, attr, param) in TYPE_ATTRIBUTES {
        let (Some(a), Some((types, _))) =
            (n.attribute.iter().find(|a| a.name() == attr).filter(|_| op == op_type), s.constraints.get(param))
        else {
            continue;
        };
        if !i32::try_from(a.i()).is_ok_and(|c| types.contains(&c)) {
            return Err(format!("attribute '{attr}' of {at} is {}, which is no element type it produces", a.i()));
        }
    }
    for (name, &(ty, required)) in &s.attributes {
        // A host that keeps control flow may hand the node over without its bodies.
        let graph = ty == 5 || ty == 10;
        if required && !graph && !n.attribute.iter().any(|a| a.name() == name) {
            return Err(format!("{at} requires attribute '{name}'"));
        }
    }
    Ok(())
}

/// The input element types against the type constraints, once inference has typed the
/// values (`type_of`; values it does not know are not checked).
pub fn check_types(n: &NodeProto, opset: i64, type_of: impl Fn(&str) -> Option<DType>) -> Result<(), String> {
    let Some(Ok(s)) = version(n.op_type(), opset) else { return Ok(()) };
    let at = format!("{}-{}", n.op_type(), s.since);
    let mut bound: HashMap<&str, (DType, usize)> = HashMap::new();
    for (i, name) in n.input.iter().enumerate() {
        let (Some(f), Some(dtype)) = (formal(&s.inputs, i), type_of(name).filter(|_| !name.is_empty())) else {
            continue;
        };
        let Formal(fname, ty, option, homogeneous) = f;
        let code = dtype.onnx_code();
        let allowed: Vec<i32> = if let Some(fixed) = ty.strip_prefix('#') {
            fixed.parse().map(|c| vec![c]).unwrap_or_default()
        } else if let Some((types, _)) = s.constraints.get(ty.as_str()) {
            types.clone()
        } else {
            continue;
        };
        if !allowed.contains(&code) {
            let names: Vec<String> = allowed.iter().map(|&c| DType::from_onnx(c).to_string()).collect();
            return Err(format!(
                "input {i} ('{fname}', tensor '{name}') of {at} is {dtype}; it takes {}",
                names.join(", ")
            ));
        }
        // Values of one type parameter share one type, except within a heterogeneous variadic.
        if !ty.starts_with('#') && (option != "*" || *homogeneous) {
            match bound.get(ty.as_str()) {
                Some(&(first, j)) if first != dtype => {
                    return Err(format!(
                        "inputs {j} and {i} of {at} share type parameter {ty} but are {first} and {dtype}"
                    ))
                }
                Some(_) => {}
                None => {
                    bound.insert(ty, (dtype, i));
                }
            }
        }
    }
    Ok(())
}

/// (operator, attribute, type parameter): attributes whose value is an element type code.
const TYPE_ATTRIBUTES: &[(&str, &str, &str)] = &[
    ("Cast", "to", "T2"),
    ("EyeLike", "dtype", "T2"),
    ("RandomNormal", "dtype", "T"),
    ("RandomUniform", "dtype", "T"),
    ("RandomNormalLike", "dtype", "T2"),
    ("RandomUniformLike", "dtype", "T2"),
    ("Bernoulli", "dtype", "T2"),
    ("Multinomial", "dtype", "T2"),
];

fn attr_type_name(code: i32) -> &'static str {
    match code {
        1 => "FLOAT",
        2 => "INT",
        3 => "STRING",
        4 => "TENSOR",
        5 => "GRAPH",
        6 => "FLOATS",
        7 => "INTS",
        8 => "STRINGS",
        9 => "TENSORS",
        10 => "GRAPHS",
        11 => "SPARSE_TENSOR",
        12 => "SPARSE_TENSORS",
        13 => "TYPE_PROTO",
        14 => "TYPE_PROTOS",
        _ => "UNDEFINED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_covers_the_opsets_bolt_imports() {
        let t = table();
        assert_eq!(t.max_opset, super::super::MAX_OPSET, "the table's onnx ({}) and MAX_OPSET disagree", t.onnx);
        assert!(t.ops.len() > 150, "{} operators", t.ops.len());
        let conv = version("Conv", 11).unwrap().unwrap();
        assert_eq!((conv.since, conv.min_inputs, conv.max_inputs), (11, 2, 3));
    }
}
