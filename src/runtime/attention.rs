//! Fused attention on the host: what the reference device runs for the plan's attention nodes
//! (`PlanFile::attention`): the kernel's meaning ([`AttentionSpec::eval`]) on the problem the
//! cuda device launches with ([`crate::plan::lower::attention_problem`]), the mask staged into
//! padded rows as the cuda device stages it. So the artifact's attention nodes run end to end
//! here through the kernel's strides, and tests compare them with onnxruntime.

use crate::artifact::format::NodeAttention;
use crate::ir::{DType, Tensor, TensorData};
use crate::partition::attention::FusedAttention;
use crate::plan::lower::MaskStaging;
use bolt_codegen::abi::BoltAttentionProblem;
use bolt_codegen::attention::AttentionSpec;
use bolt_codegen::spec::Arch;

/// Runs attention kernel `spec` for op `op` on its inputs (Q, K, V sources, then the mask).
pub fn run(spec: &AttentionSpec, op: &FusedAttention, inputs: &[&Tensor]) -> Result<Tensor, String> {
    let dtype = match spec.element {
        bolt_codegen::spec::Element::F32 => DType::F32,
        bolt_codegen::spec::Element::F16 => DType::F16,
        bolt_codegen::spec::Element::BF16 => DType::BF16,
    };
    if let Some(t) = inputs.iter().find(|t| t.dtype() != dtype) {
        return Err(format!("an input is {}, the kernel reads {dtype}", t.dtype()));
    }
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let (p, staging) = crate::plan::lower::attention_problem(op, spec, &shapes)?;
    let values = |t: &Tensor| -> Vec<f64> { t.to_f32_vec().into_iter().map(f64::from).collect() };
    let mut bias = inputs.get(3).map(|t| values(t));
    if let (Some(s), Some(b)) = (staging, bias.as_mut()) {
        // Rows of `width` bytes, `dst_pitch` apart; the pad is never read (keys < S_k).
        let e = spec.element.size_bytes();
        let (width, pitch) = (s.width / e, s.dst_pitch / e);
        let mut padded = vec![f64::NAN; s.rows * pitch];
        for (row, src) in b.chunks(width).enumerate() {
            padded[row * pitch..row * pitch + width].copy_from_slice(src);
        }
        *b = padded;
    }
    // A packed operand starts at its window's first column (the cuda device offsets the pointer).
    let operand = |i: usize| -> Vec<f64> {
        let v = values(inputs[i]);
        let (_, _, offset) = op.source_view(i, &inputs[i].shape);
        v[offset.min(v.len())..].to_vec()
    };
    let out = spec.eval(&p, &operand(0), &operand(1), &operand(2), bias.as_deref());
    let (b, h, sq, dv) = (p.batch as usize, p.heads as usize, p.seq_q as usize, p.head_dim_v as usize);
    // Dense in the kernel's layout.
    let shape = match (op.rank(), spec.output) {
        (4, bolt_codegen::attention::OutputLayout::Bshd) => vec![b, sq, h, dv],
        (4, _) => vec![b, h, sq, dv],
        _ => vec![b, sq, dv],
    };
    let data = match dtype {
        DType::F16 => TensorData::F16(out.iter().map(|&x| half::f16::from_f64(x)).collect()),
        DType::BF16 => TensorData::BF16(out.iter().map(|&x| half::bf16::from_f64(x)).collect()),
        _ => TensorData::F32(out.iter().map(|&x| x as f32).collect()),
    };
    Tensor::new(shape, data)
}

/// Which kernel of attention node `a` a GPU of `arch` runs on inputs of `shapes` (Q, K, V
/// sources, then the mask), with its problem and mask staging: on sm90 the Hopper kernel where
/// the artifact has one and it takes the problem (query counts of whole vectors, say), else
/// the portable sm80 kernel. The cuda device launches what this says.
pub fn choose(
    a: &NodeAttention,
    op: &FusedAttention,
    arch: Arch,
    shapes: &[&[usize]],
) -> Result<(AttentionSpec, BoltAttentionProblem, Option<MaskStaging>), String> {
    if let (Arch::Sm90, Some(spec)) = (arch, a.sm90) {
        if let Ok((p, None)) = crate::plan::lower::attention_problem(op, &spec, shapes) {
            if spec.check(&p).is_ok() {
                return Ok((spec, p, None));
            }
        }
    }
    let (p, staging) = crate::plan::lower::attention_problem(op, &a.spec, shapes)?;
    Ok((a.spec, p, staging))
}
