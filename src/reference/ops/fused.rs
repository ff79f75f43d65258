//! A planned kernel (anchor + epilogue) computed the way the GPU kernel does: the anchor in
//! f32, then the epilogue per element in f32, rounded once to the output type. This is the
//! oracle for generated kernels and for checking that a plan preserves the model's meaning.

use super::{req, OpResult};
use crate::ir::{FusedKernel, Op, ResidualAt, Tensor};

pub fn fused(k: &FusedKernel, inputs: &[Option<&Tensor>]) -> OpResult {
    let a = req(inputs, 0)?;
    let w = req(inputs, 1)?;
    let acc = super::eval_op(&k.anchor, &[Some(a), Some(w)])?.remove(0);
    let shape = acc.shape.clone();
    let acc = acc.to_f32_vec();
    // Which output element belongs to which column / channel.
    let (channels, inner) = match &*k.anchor {
        Op::Conv { .. } => (shape[1], shape[2..].iter().product::<usize>()),
        _ => (*shape.last().ok_or("anchor output is a scalar")?, 1),
    };
    let bias = match super::opt(inputs, 2) {
        Some(b) if b.len() == channels => Some(b.to_f32_vec()),
        Some(b) => return Err(format!("bias has {} values for {channels} output channels", b.len())),
        None => None,
    };
    let source = match (super::opt(inputs, 3), k.source) {
        (Some(s), Some((scale, at))) if s.shape == shape => Some((s.to_f32_vec(), scale, at)),
        (Some(s), Some(_)) => return Err(format!("source has shape {:?}, the output {:?}", s.shape, shape)),
        (None, Some(_)) => return Err("the epilogue reads a source tensor but none was given".into()),
        (_, None) => None,
    };
    let out: Vec<f32> = (0..acc.len())
        .map(|i| {
            let mut v = k.alpha * acc[i];
            if let Some(b) = &bias {
                v += b[(i / inner) % channels];
            }
            if let Some((s, scale, ResidualAt::BeforeActivation)) = &source {
                v += scale * s[i];
            }
            if let Some(a) = k.activation {
                v = a.apply(v as f64) as f32;
            }
            if let Some((s, scale, ResidualAt::AfterActivation)) = &source {
                v += scale * s[i];
            }
            v
        })
        .collect();
    Ok(vec![Tensor::from_f64_as(k.output_dtype, shape, &out.iter().map(|&x| x as f64).collect::<Vec<_>>())
        .ok_or("output type is not a float type")?])
}
