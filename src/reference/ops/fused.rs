//! A planned kernel (anchor + epilogue) computed the way the GPU kernel does: the anchor in
//! f32, then the epilogue per element in f32, rounded once to the output type. This is the
//! oracle for generated kernels and for checking that a plan preserves the model's meaning. A
//! row stage (softmax) then runs on the rounded output, as the GemmSoftmax kernel reads its D.

use super::{req, OpResult};
use crate::ir::{ConvLayout, FusedKernel, Op, RowEpilogue, Tensor};
use bolt_codegen::epilogue::EvalEnv;

const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

fn permuted(t: &Tensor, perm: &[usize]) -> Result<Tensor, String> {
    Ok(super::layout::transpose(t, Some(perm))?.remove(0))
}

pub fn fused(k: &FusedKernel, inputs: &[Option<&Tensor>]) -> OpResult {
    // An NHWC conv kernel computes what the NCHW conv does on the permuted tensors: the
    // oracle says so literally (the GPU kernel never transposes).
    if k.layout == ConvLayout::Nhwc && matches!(*k.anchor, Op::Conv { .. }) {
        let nchw: Vec<Option<Tensor>> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                Some(t) if i != 2 => permuted(t, &TO_NCHW).map(Some),
                Some(t) => Ok(Some((*t).clone())),
                None => Ok(None),
            })
            .collect::<Result<_, String>>()?;
        let refs: Vec<Option<&Tensor>> = nchw.iter().map(Option::as_ref).collect();
        let k = FusedKernel { layout: ConvLayout::Nchw, ..k.clone() };
        let out = fused(&k, &refs)?.remove(0);
        return Ok(vec![permuted(&out, &TO_NHWC)?]);
    }
    // The mainloop reads f16/bf16 operands exactly and accumulates in f32: compute the anchor
    // on the operands widened to f32, so the only rounding is the output's, after the epilogue.
    let widen = |t: &Tensor| Tensor::from_f32(t.shape.clone(), t.to_f32_vec());
    let a = widen(req(inputs, 0)?);
    let w = widen(req(inputs, 1)?);
    let w = if k.weight_transposed { permuted(&w, &[1, 0])? } else { w };
    let acc = super::eval_op(&k.anchor, &[Some(&a), Some(&w)])?.remove(0);
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
        (Some(s), Some(_)) if s.shape == shape => Some(s.to_f32_vec()),
        (Some(s), Some(_)) => return Err(format!("source has shape {:?}, the output {:?}", s.shape, shape)),
        (None, Some(_)) => return Err("the epilogue reads a source tensor but none was given".into()),
        (_, None) => None,
    };
    // The typed tree the kernel is generated from, evaluated per element: the lowering is the
    // kernel's meaning, so a plan checked against the model checks the lowering too.
    let (epilogue, alpha, beta) = crate::plan::lower::epilogue(k, bias.is_some())?;
    let out: Vec<f64> = (0..acc.len())
        .map(|i| {
            let env = EvalEnv {
                acc: acc[i] as f64,
                alpha: alpha as f64,
                beta: beta as f64,
                source: source.as_ref().map_or(0.0, |s| s[i] as f64),
                bias: bias.as_ref().map_or(0.0, |b| b[(i / inner) % channels] as f64),
            };
            // The kernel computes in f32.
            epilogue.expr.eval(&env) as f32 as f64
        })
        .collect();
    let out = Tensor::from_f64_as(k.output_dtype, shape, &out).ok_or("output type is not a float type")?;
    match k.row {
        None => Ok(vec![out]),
        // The row stage reads the epilogue's output as stored (rounded to the output type).
        Some(RowEpilogue::Softmax) => super::norm::softmax(&out, -1, false),
    }
}

/// A back-to-back chain, layer by layer: each intermediate is rounded to its layer's output
/// type, as the fused kernel does when it feeds the next layer's MMA from registers or
/// shared memory.
pub fn fused_chain(layers: &[FusedKernel], inputs: &[Option<&Tensor>]) -> OpResult {
    let mut cur = req(inputs, 0)?.clone();
    let last = layers.len().checked_sub(1).ok_or("empty chain")?;
    for (i, k) in layers.iter().enumerate() {
        let source = if i == last { inputs.get(1 + 2 * layers.len()).copied().flatten() } else { None };
        let args = [Some(&cur), Some(req(inputs, 1 + 2 * i)?), inputs.get(2 + 2 * i).copied().flatten(), source];
        cur = fused(k, &args).map_err(|e| format!("chain layer {i}: {e}"))?.remove(0);
    }
    Ok(vec![cur])
}

/// Zero-pads or truncates the last axis.
pub fn fit_last_axis(x: &Tensor, to: usize) -> OpResult {
    let from = *x.shape.last().ok_or("cannot pad a scalar")?;
    let rows = x.len() / from.max(1);
    let v = x.to_f64_vec();
    let mut out = vec![0.0f64; rows * to];
    for r in 0..rows {
        let n = from.min(to);
        out[r * to..r * to + n].copy_from_slice(&v[r * from..r * from + n]);
    }
    let mut shape = x.shape.clone();
    *shape.last_mut().expect("rank >= 1") = to;
    Ok(vec![Tensor::from_f64_as(x.dtype(), shape, &out).ok_or("only float tensors are padded")?])
}
