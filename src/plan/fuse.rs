//! Pass 1: every partition becomes one kernel node ([`Op::Fused`]) with its weights prepared
//! once, at plan time: per-channel maps (BatchNormalization, constant channel scales) folded
//! into the weights and bias, every constant bias term (times its coefficient in the kernel
//! form) summed into one vector.

use super::edit::{constant, finish, scale_cols, scale_rows};
use crate::error::{Error, Result};
use crate::ir::{FusedKernel, Graph, Node, Op, Tensor};
use crate::partition::epilogue::{channel_terms, ChannelTerms};
use crate::partition::{AnchorKind, Partition, Partitioning};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Rewrites every partition of `g` into one fused kernel node.
pub fn fuse_partitions(g: &Graph, partitioning: &Partitioning) -> Result<Graph> {
    let mut out = g.clone();
    let index: HashMap<&str, usize> = g.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut removed: HashSet<usize> = HashSet::new();
    // Fused nodes replace the partition's last node, where all their inputs exist.
    let mut replacement: HashMap<usize, Vec<Node>> = HashMap::new();
    for p in &partitioning.partitions {
        let mut node = fuse(g, p, &mut out)?;
        let nodes = match p.kind {
            AnchorKind::Conv2d { one_d: true, .. } => as_2d_conv(g, p, node, &mut out)?,
            _ => {
                node.name = p.anchor.clone();
                vec![node]
            }
        };
        let last = p.nodes.iter().map(|n| index[n.as_str()]).max().expect("a partition has nodes");
        removed.extend(p.nodes.iter().map(|n| index[n.as_str()]));
        replacement.insert(last, nodes);
    }
    out.nodes = (0..g.nodes.len())
        .flat_map(|i| {
            replacement
                .remove(&i)
                .unwrap_or_else(|| (!removed.contains(&i)).then(|| g.nodes[i].clone()).into_iter().collect())
        })
        .collect();
    finish(&mut out)?;
    Ok(out)
}

/// A 1-D conv kernel as the 2-D conv it equals with H = 1: [N, C, L] operands gain an H axis
/// (Unsqueeze at 2), the weight becomes [M, C/g, 1, k], the window gains a unit H dim (no
/// padding, stride and dilation 1), and the output loses the H axis again (Squeeze at 2).
/// The kernel, its lowering and the layout pass then see an ordinary 2-D conv.
fn as_2d_conv(g: &Graph, p: &Partition, mut node: Node, out: &mut Graph) -> Result<Vec<Node>> {
    let err = |reason: String| Error::Node { node: p.anchor.clone(), op_type: "partition".into(), reason };
    let Op::Fused(k) = &node.op else { unreachable!("fuse builds a fused node") };
    let Op::Conv { window, group } = k.anchor.as_ref() else { unreachable!("a conv partition") };
    let widen = |v: &Option<Vec<usize>>, h: usize| v.as_ref().map(|v| [vec![h], v.clone()].concat());
    let window2d = crate::ir::Window {
        kernel_shape: widen(&window.kernel_shape, 1),
        strides: widen(&window.strides, 1),
        dilations: widen(&window.dilations, 1),
        pads: window.pads.as_ref().map(|p| if p.len() == 2 { vec![0, p[0], 0, p[1]] } else { p.clone() }),
        auto_pad: window.auto_pad,
    };
    let mut kernel = (**k).clone();
    kernel.anchor = Box::new(Op::Conv { window: window2d, group: *group });
    node.op = Op::Fused(Arc::new(kernel));

    let w_name = node.input(1).expect("a conv has a weight").to_string();
    let w = out.initializers.get(&w_name).cloned().or_else(|| constant(g, &w_name));
    let w = w.ok_or_else(|| err(format!("1-D conv weight '{w_name}' is not constant")))?;
    let [m, c, l] = w.shape[..] else { return Err(err(format!("1-D conv weight of shape {:?}", w.shape))) };
    let w2d = format!("{}.bolt_weight_h1", p.anchor);
    out.initializers.insert(w2d.clone(), Arc::new(w.reshaped(vec![m, c, 1, l])));
    node.inputs[1] = Some(w2d);

    let axes = format!("{}.bolt_h_axis", p.anchor);
    out.initializers.insert(axes.clone(), Arc::new(Tensor::from_i64(vec![1], vec![2])));
    let mut nodes = Vec::new();
    // A (input 0) and the residual source (input 3) are [N, C, L] tensors.
    for (i, role) in [(0, "a"), (3, "source")] {
        if let Some(Some(x)) = node.inputs.get(i).cloned() {
            let y = format!("{}.bolt_{role}_h1", p.anchor);
            nodes.push(Node {
                name: format!("{}.bolt_{role}_to_2d", p.anchor),
                op: Op::Unsqueeze,
                inputs: vec![Some(x), Some(axes.clone())],
                outputs: vec![y.clone()],
            });
            node.inputs[i] = Some(y);
        }
    }
    let y = std::mem::replace(&mut node.outputs[0], format!("{}.bolt_out_h1", p.anchor));
    let squeeze = Node {
        name: format!("{}.bolt_to_1d", p.anchor),
        op: Op::Squeeze,
        inputs: vec![Some(node.outputs[0].clone()), Some(axes)],
        outputs: vec![y],
    };
    node.name = p.anchor.clone();
    nodes.push(node);
    nodes.push(squeeze);
    Ok(nodes)
}

/// Builds the fused node of partition `p`, adding its prepared weights to `out`.
fn fuse(g: &Graph, p: &Partition, out: &mut Graph) -> Result<Node> {
    let err = |reason: String| Error::Node { node: p.anchor.clone(), op_type: "partition".into(), reason };
    let anchor_node = g.nodes.iter().find(|n| n.name == p.anchor).expect("anchor exists");
    let e = &p.epilogue;
    let form = e.form();
    let channels = match p.output_type.as_ref().and_then(|t| t.shape.as_ref()) {
        Some(s) => match p.kind {
            AnchorKind::Conv2d { .. } => s.0.get(1).and_then(|d| d.known()),
            _ => s.0.last().and_then(|d| d.known()),
        },
        None => None,
    };
    // Only a bias or a fold needs the channel count (attention's batched GEMMs have a
    // symbolic sequence length there).
    let needs_channels = !form.bias.is_empty() || !e.folds.is_empty();
    let channels = match channels {
        Some(c) => c,
        None if !needs_channels => 0,
        None => return Err(err("output channel count is not static".into())),
    };

    let mut weight_name = p.b.clone();
    let ChannelTerms { bias, scale } = channel_terms(g, anchor_node, &p.kind, e, channels).map_err(err)?;
    let has_bias = bias.is_some();
    if let Some(s) = scale {
        let w = constant(g, &p.b).ok_or_else(|| err(format!("weight '{}' is not constant", p.b)))?;
        // Output channels lead a conv's weights and a transposed Gemm B; they are the last
        // axis of a [K, N] B.
        let rows = match (&p.kind, &anchor_node.op) {
            (AnchorKind::Conv2d { .. }, _) => true,
            (_, Op::Gemm { trans_b, .. }) => *trans_b,
            _ => false,
        };
        let scaled = if rows { scale_rows(&w, &s) } else { scale_cols(&w, &s) };
        let wt = scaled.ok_or_else(|| {
            err(format!("weight {:?} ({}) has no axis of {channels} output channels to fold into", w.shape, w.dtype()))
        })?;
        weight_name = format!("{}.bolt_folded_weight", p.anchor);
        out.initializers.insert(weight_name.clone(), Arc::new(wt));
    }
    g.types.get(&p.a).ok_or_else(|| err("input type unknown".into()))?;
    let mut inputs = vec![Some(p.a.clone()), Some(weight_name), None, None];
    if has_bias {
        // In the output's type: the kernels read the bias as they read C (ElementC is ElementD),
        // which differs from the operands' type when the epilogue took an output Cast.
        let name = format!("{}.bolt_bias", p.anchor);
        let bias = Tensor::from_f64_as(e.output_dtype, vec![channels], &bias.unwrap_or_default()).expect("float");
        out.initializers.insert(name.clone(), Arc::new(bias));
        inputs[2] = Some(name);
    }
    inputs[3] = form.source.as_ref().map(|s| s.tensor.clone());
    while inputs.last() == Some(&None) {
        inputs.pop();
    }
    let anchor = match &anchor_node.op {
        Op::Gemm { trans_a, trans_b, .. } => Op::Gemm { alpha: 1.0, beta: 0.0, trans_a: *trans_a, trans_b: *trans_b },
        other => other.clone(),
    };
    let kernel = FusedKernel {
        anchor: Box::new(anchor),
        alpha: form.alpha,
        source: form.source.as_ref().map(|s| (s.scale, s.at)),
        activation: form.activation,
        output_dtype: e.output_dtype,
        layout: crate::ir::ConvLayout::Nchw,
        weight_transposed: false,
        row: None,
    };
    Ok(Node { name: p.anchor.clone(), op: Op::Fused(Arc::new(kernel)), inputs, outputs: vec![p.output.clone()] })
}

/// Inference BatchNormalizations no conv absorbed become `x * a + b` with `a = scale /
/// sqrt(var + eps)` and `b = bias - mean * a` as [C, 1, ..] constants: element-wise ops the
/// layout pass moves NHWC and stitching runs on the device, instead of a host op.
pub fn decompose_batch_norms(g: &mut Graph) -> Result<usize> {
    use super::edit::{fresh_name, node};
    use crate::ir::Binary;
    let mut taken: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut count = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let n = g.nodes[i].clone();
        i += 1;
        let Op::BatchNormalization { epsilon, training_mode: false, .. } = n.op else { continue };
        let rank = n.input(0).and_then(|x| g.types.get(x)).and_then(|t| t.shape.as_ref()).map(|s| s.rank());
        let dtype = n.input(0).and_then(|x| g.types.get(x)).map(|t| t.dtype);
        let params: Option<Vec<Vec<f64>>> =
            (1..5).map(|k| n.input(k).and_then(|p| constant(g, p)).map(|t| t.to_f64_vec())).collect();
        let (Some(rank), Some(dtype), Some(p), 1) = (rank, dtype, params, n.outputs.len()) else { continue };
        let c = p[0].len();
        if rank < 2 || !dtype.is_float() || p.iter().any(|v| v.len() != c) {
            continue;
        }
        let a: Vec<f64> = (0..c).map(|k| p[0][k] / (p[3][k] + f64::from(epsilon)).sqrt()).collect();
        let b: Vec<f64> = (0..c).map(|k| p[1][k] - p[2][k] * a[k]).collect();
        let mut shape = vec![c];
        shape.resize(rank - 1, 1);
        let (Some(ta), Some(tb)) =
            (Tensor::from_f64_as(dtype, shape.clone(), &a), Tensor::from_f64_as(dtype, shape, &b))
        else {
            continue;
        };
        let (an, bn) =
            (fresh_name(g, &mut taken, &format!("{}.a", n.name)), fresh_name(g, &mut taken, &format!("{}.b", n.name)));
        let scaled = fresh_name(g, &mut taken, &format!("{}.scaled", n.name));
        g.initializers.insert(an.clone(), Arc::new(ta));
        g.initializers.insert(bn.clone(), Arc::new(tb));
        let x = n.inputs[0].clone();
        let mul_name = fresh_name(g, &mut taken, &format!("{}.scale", n.name));
        let mul = node(mul_name, Op::Binary(Binary::Mul), vec![x, Some(an)], scaled.clone());
        let add = node(n.name.clone(), Op::Binary(Binary::Add), vec![Some(scaled), Some(bn)], n.outputs[0].clone());
        g.nodes.splice(i - 1..i, [mul, add]);
        i += 1;
        count += 1;
    }
    if count > 0 {
        finish(g)?;
    }
    Ok(count)
}
