//! Bolt's graph IR: typed tensors (static and symbolic dims), typed operators, graphs, and
//! shape/dtype inference.

pub mod builder;
pub mod control;
mod dtype;
pub mod einsum;
mod graph;
pub mod infer;
mod infer_host;
mod op;
pub mod precision;
mod shape;
mod tensor;

pub use dtype::DType;
pub use graph::{unique_name, Graph, Node};
pub use infer_host::fold_host;
pub use op::*;
pub use shape::{broadcast_index, broadcast_shapes, broadcast_static, Dim, Shape, TensorType};
pub use tensor::{strides, Element, Tensor, TensorData};
