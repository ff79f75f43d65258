use super::OpResult;
use crate::ir::{ResizeAttrs, Tensor};
pub fn resize(_x: &Tensor, _roi: Option<&Tensor>, _scales: Option<&Tensor>, _sizes: Option<&Tensor>, _a: &ResizeAttrs) -> OpResult { Err("being written".into()) }
