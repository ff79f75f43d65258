//! Bolt's error type. Every error names what it is about (file, node, tensor) and why, so a
//! user can find the problem in their model without a debugger.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
    #[error("node '{node}' ({op_type}): {reason}")]
    Node { node: String, op_type: String, reason: String },
    #[error("tensor '{tensor}': {reason}")]
    Tensor { tensor: String, reason: String },
    #[error("model: {0}")]
    Model(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn node(node: &crate::ir::Node, reason: impl Into<String>) -> Error {
        Error::Node { node: node.name.clone(), op_type: node.op.op_type().to_string(), reason: reason.into() }
    }

    pub fn tensor(tensor: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Tensor { tensor: tensor.into(), reason: reason.into() }
    }
}
