use super::OpResult;
use crate::ir::{Tensor, Window};
pub fn conv_transpose(_x: &Tensor, _w: &Tensor, _b: Option<&Tensor>, _window: &Window, _group: usize, _op: Option<&[usize]>, _os: Option<&[usize]>) -> OpResult { Err("ConvTranspose: being written".into()) }
