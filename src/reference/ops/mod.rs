//! Reference kernels, one file per op family. Each takes the node's inputs (`None` for
//! omitted optional inputs) and returns its outputs, or a reason it cannot.

mod along_axis;
pub(crate) mod attention;
mod conv;
mod conv_transpose;
mod einsum;
mod elementwise;
mod fused;
mod gather_scatter;
pub(crate) mod host;
pub(crate) mod layout;
mod matmul;
mod norm;
mod pad;
mod pool;
mod quantize;
mod recurrent;
mod resize;
mod spectral;

use crate::ir::{Op, Tensor};

pub use elementwise::unary_fn;

pub(crate) type OpResult = Result<Vec<Tensor>, String>;

/// Input `i`, which the op requires.
pub(crate) fn req<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, String> {
    inputs.get(i).copied().flatten().ok_or_else(|| format!("missing required input {i}"))
}

/// Input `i` when given.
pub(crate) fn opt<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

/// Evaluates one operator on concrete tensors.
pub fn eval_op(op: &Op, inputs: &[Option<&Tensor>]) -> OpResult {
    match op {
        Op::MatMul => matmul::matmul(req(inputs, 0)?, req(inputs, 1)?),
        Op::Gemm { alpha, beta, trans_a, trans_b } => {
            matmul::gemm(req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2), *alpha, *beta, *trans_a, *trans_b)
        }
        Op::Conv { window, group } => conv::conv(req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2), window, *group),
        Op::ConvTranspose { window, group, output_padding, output_shape } => conv_transpose::conv_transpose(
            req(inputs, 0)?,
            req(inputs, 1)?,
            opt(inputs, 2),
            window,
            *group,
            output_padding.as_deref(),
            output_shape.as_deref(),
        ),
        Op::BatchNormalization { epsilon, momentum, training_mode } => {
            norm::batch_norm(inputs, *epsilon, *momentum, *training_mode)
        }
        Op::Binary(b) => elementwise::binary(*b, req(inputs, 0)?, req(inputs, 1)?),
        Op::Unary(u) => elementwise::unary(*u, req(inputs, 0)?),
        Op::Compare(c) => elementwise::compare(*c, req(inputs, 0)?, req(inputs, 1)?),
        Op::Logic(l) => elementwise::logic(*l, req(inputs, 0)?, req(inputs, 1)?),
        Op::Not => elementwise::not(req(inputs, 0)?),
        Op::Where => elementwise::select(req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?),
        Op::Expand => layout::expand(req(inputs, 0)?, req(inputs, 1)?),
        Op::Clip => elementwise::clip(req(inputs, 0)?, opt(inputs, 1), opt(inputs, 2)),
        Op::Cast { to, saturate } => elementwise::cast(req(inputs, 0)?, *to, *saturate),
        Op::Transpose { perm } => layout::transpose(req(inputs, 0)?, perm.as_deref()),
        Op::Reshape { allowzero } => layout::reshape(req(inputs, 0)?, req(inputs, 1)?, *allowzero),
        Op::Flatten { axis } => layout::flatten(req(inputs, 0)?, *axis),
        Op::Squeeze => layout::squeeze(req(inputs, 0)?, opt(inputs, 1)),
        Op::Unsqueeze => layout::unsqueeze(req(inputs, 0)?, req(inputs, 1)?),
        Op::Concat { axis } => layout::concat(inputs, *axis),
        Op::Split { axis, outputs } => layout::split(req(inputs, 0)?, opt(inputs, 1), *axis, *outputs),
        Op::Slice => layout::slice(req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?, opt(inputs, 3), opt(inputs, 4)),
        Op::Gather { axis } => layout::gather(req(inputs, 0)?, req(inputs, 1)?, *axis),
        Op::Shape { start, end } => layout::shape(req(inputs, 0)?, *start, *end),
        Op::Constant { value } => Ok(vec![value.as_ref().clone()]),
        Op::Identity => Ok(vec![req(inputs, 0)?.clone()]),
        Op::ConstantOfShape { value } => layout::constant_of_shape(req(inputs, 0)?, value.as_deref()),
        Op::Range => layout::range(req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?),
        Op::MaxPool { window, ceil_mode, storage_order } => {
            pool::max_pool(req(inputs, 0)?, window, *ceil_mode, *storage_order)
        }
        Op::AveragePool { window, ceil_mode, count_include_pad } => {
            pool::average_pool(req(inputs, 0)?, window, *ceil_mode, *count_include_pad)
        }
        Op::GlobalAveragePool => pool::global_pool(req(inputs, 0)?, false),
        Op::GlobalMaxPool => pool::global_pool(req(inputs, 0)?, true),
        Op::Pad { mode } => pad::eval(inputs, *mode),
        Op::DepthToSpace { blocksize, crd } => layout::depth_to_space(req(inputs, 0)?, *blocksize, *crd),
        Op::Softmax { axis } => norm::softmax(req(inputs, 0)?, *axis, false),
        Op::LogSoftmax { axis } => norm::softmax(req(inputs, 0)?, *axis, true),
        Op::LayerNormalization { axis, epsilon, stash_type } => {
            norm::layer_norm(req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2), *axis, *epsilon, *stash_type)
        }
        Op::Reduce { kind, axes, keepdims, noop_with_empty_axes } => {
            norm::reduce(*kind, req(inputs, 0)?, axes.as_deref(), opt(inputs, 1), *keepdims, *noop_with_empty_axes)
        }
        Op::Resize(attrs) => resize::resize(req(inputs, 0)?, opt(inputs, 1), opt(inputs, 2), opt(inputs, 3), attrs),
        Op::Recurrent(r) => recurrent::eval(r, inputs),
        Op::RecurrentScan(r) => recurrent::eval_scan(r, inputs),
        Op::Fused(k) => fused::fused(k, inputs),
        Op::FusedChain(layers) => fused::fused_chain(layers, inputs),
        Op::Stitched(r) => {
            let args: Vec<&Tensor> = (0..r.inputs.len()).map(|i| req(inputs, i)).collect::<Result<_, _>>()?;
            r.eval(&args)
        }
        Op::Attention(a) => {
            let args: Vec<&Tensor> = inputs.iter().map(|t| t.ok_or("missing input")).collect::<Result<_, _>>()?;
            Ok(vec![a.eval(&args)?])
        }
        Op::ChannelsLast(inner) => {
            let x = req(inputs, 0)?;
            if x.rank() != 4 {
                return Err(format!("channels-last data must have rank 4, has shape {:?}", x.shape));
            }
            let nchw = layout::transpose(x, Some(&[0, 3, 1, 2]))?.swap_remove(0);
            let y = eval_op(inner, &[Some(&nchw)])?.swap_remove(0);
            layout::transpose(&y, Some(&[0, 2, 3, 1]))
        }
        Op::FitLastAxis { to } => fused::fit_last_axis(req(inputs, 0)?, *to),
        Op::Opaque { why, .. } => Err(format!("not computed by the reference executor: {why}")),
        // Needs its input names to bind the branch's: crate::reference::eval_node runs it.
        Op::If { .. } | Op::Loop { .. } | Op::Scan(_) => {
            Err("control flow runs as a node (its graph reads inputs by name)".into())
        }
    }
}

/// A float tensor's values as f32 for computing. Kernels compute in f32 (f64 accumulators
/// where sums are long) and round once to the input's type with [`float_out`].
pub(crate) fn float_in(t: &Tensor, what: &str) -> Result<Vec<f32>, String> {
    if !t.dtype().is_float() {
        return Err(format!("{what} must be a float tensor, is {}", t.dtype()));
    }
    Ok(t.to_f32_vec())
}

/// Builds a tensor of float type `dtype` from f32 results.
pub(crate) fn float_out(dtype: crate::ir::DType, shape: Vec<usize>, v: Vec<f32>) -> Tensor {
    use crate::ir::{DType, TensorData};
    let data = match dtype {
        DType::F16 => TensorData::F16(v.into_iter().map(half::f16::from_f32).collect()),
        DType::BF16 => TensorData::BF16(v.into_iter().map(half::bf16::from_f32).collect()),
        DType::F64 => TensorData::F64(v.into_iter().map(f64::from).collect()),
        _ => TensorData::F32(v),
    };
    Tensor { shape, data }
}
