//! Rust types generated from proto/onnx.proto by build.rs (prost).
#![allow(clippy::all, missing_docs)]
include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
