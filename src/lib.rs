//! Bolt: carves GEMM/Conv-centric subgraphs out of ONNX models and compiles them to CUTLASS
//! kernels. The pipeline, one module per stage:
//!
//! import (ONNX -> [`ir::Graph`]) -> partition -> plan -> candidates/profile -> codegen ->
//! build -> [`artifact`] -> [`runtime`] -> dispatch. [`reference`] is the CPU oracle every generated kernel is checked
//! against.

pub mod artifact;
pub mod cases;
pub mod compile;
pub mod error;
pub mod import;
pub mod ir;
pub mod models;
pub mod partition;
pub mod plan;
pub mod reference;
pub mod runtime;

pub use error::{Error, Result};
