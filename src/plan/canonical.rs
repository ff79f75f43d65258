//! Pass 0: rewrites of the model before partitioning into ops Bolt's kernels take.
//!
//! Constant nodes become initializers: weights like any other, stored once in the artifact,
//! instead of host steps that make their tensor again on every run.
//!
//! A ConvTranspose whose windows tile the output without overlap (kernel = stride, no
//! padding, dilation 1, one group: the 2x upsampling of decoders and detection heads) is a
//! 1x1 conv to C_out * k * k channels followed by a DepthToSpace (CRD): output pixel
//! (i*k + r, j*k + s) of channel o is input pixel (i, j) times weight [:, o, r, s]. The conv
//! becomes a GEMM/conv partition like any other, the DepthToSpace a glue kernel.

use super::edit::{constant, finish, fresh_name, node};
use crate::error::Result;
use crate::ir::{AutoPad, Graph, Op, Tensor, Window};
use std::collections::HashSet;
use std::sync::Arc;

/// `g` with every rewrite applied, and how many.
pub fn canonical(g: &Graph) -> Result<(Graph, usize)> {
    let mut out = g.clone();
    let mut taken: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut count = 0;
    // A constant that is a graph output stays a node (outputs are computed values).
    let before = out.nodes.len();
    let mut constants = Vec::new();
    out.nodes.retain(|n| match &n.op {
        Op::Constant { value } if n.outputs.len() == 1 && !g.outputs.contains(&n.outputs[0]) => {
            constants.push((n.outputs[0].clone(), value.clone()));
            false
        }
        _ => true,
    });
    count += before - out.nodes.len();
    out.initializers.extend(constants);
    let mut i = 0;
    while i < out.nodes.len() {
        let n = out.nodes[i].clone();
        i += 1;
        let Some((w, blocks)) = tiling_conv_transpose(&out, &n) else { continue };
        let [c_in, c_out, k, _] = [w.shape[0], w.shape[1], w.shape[2], w.shape[3]];
        // w'[(o*k + r)*k + s, c] = w[c, o, r, s]: the 1x1 conv's output channels in CRD order.
        let v = w.to_f64_vec();
        let mut wt = vec![0.0; v.len()];
        for c in 0..c_in {
            for o in 0..c_out {
                for rs in 0..k * k {
                    wt[(o * k * k + rs) * c_in + c] = v[(c * c_out + o) * k * k + rs];
                }
            }
        }
        let Some(wt) = Tensor::from_f64_as(w.dtype(), vec![blocks, c_in, 1, 1], &wt) else { continue };
        let wname = fresh_name(&out, &mut taken, &format!("{}.as_conv", n.inputs[1].as_deref().unwrap_or("w")));
        out.initializers.insert(wname.clone(), Arc::new(wt));
        let mut inputs = vec![n.inputs[0].clone(), Some(wname)];
        if let Some(b) = n.input(2) {
            // Each output channel's bias for each of its k*k positions.
            let Some(bias) = constant(&out, b) else { continue };
            let bv = bias.to_f64_vec();
            let rep: Vec<f64> = bv.iter().flat_map(|&x| std::iter::repeat_n(x, k * k)).collect();
            let Some(bt) = Tensor::from_f64_as(bias.dtype(), vec![blocks], &rep) else { continue };
            let bname = fresh_name(&out, &mut taken, &format!("{b}.as_conv"));
            out.initializers.insert(bname.clone(), Arc::new(bt));
            inputs.push(Some(bname));
        }
        let blocks_out = fresh_name(&out, &mut taken, &format!("{}.blocks", n.outputs[0]));
        let window = Window {
            kernel_shape: Some(vec![1, 1]),
            strides: None,
            pads: None,
            dilations: None,
            auto_pad: AutoPad::NotSet,
        };
        // The conv keeps the node's name (hosts map kernels back to model nodes by name).
        let conv = crate::ir::Node {
            name: n.name.clone(),
            op: Op::Conv { window, group: 1 },
            inputs,
            outputs: vec![blocks_out.clone()],
        };
        let d2s_name = fresh_name(&out, &mut taken, &format!("{}.depth_to_space", n.name));
        let d2s = node(d2s_name, Op::DepthToSpace { blocksize: k, crd: true }, vec![Some(blocks_out)], n.outputs[0].clone());
        out.nodes.splice(i - 1..i, [conv, d2s]);
        i += 1;
        count += 1;
    }
    if count > 0 {
        finish(&mut out)?;
    }
    Ok((out, count))
}

/// A 2-D ConvTranspose of `g` whose square windows tile its output (kernel = stride, no
/// padding or output padding, dilation 1, one group) with a constant weight: the weight and
/// the 1x1 conv's channel count C_out * k * k.
fn tiling_conv_transpose(g: &Graph, n: &crate::ir::Node) -> Option<(Arc<Tensor>, usize)> {
    let Op::ConvTranspose { window, group: 1, output_padding, output_shape: None } = &n.op else { return None };
    let w = constant(g, n.input(1)?)?;
    if w.rank() != 4 || w.shape[2] != w.shape[3] || n.outputs.len() != 1 {
        return None;
    }
    let k = w.shape[2];
    let all = |v: &Option<Vec<usize>>, x: usize| v.as_ref().is_none_or(|v| v.iter().all(|&e| e == x));
    let tiles = window.kernel_shape.as_ref().is_none_or(|ks| ks[..] == [k, k])
        && window.strides.as_deref() == Some(&[k, k][..])
        && all(&window.pads, 0)
        && all(&window.dilations, 1)
        && all(output_padding, 0)
        && matches!(window.auto_pad, AutoPad::NotSet | AutoPad::Valid);
    let float = w.dtype().is_float();
    (tiles && float).then(|| (w.clone(), w.shape[1] * k * k))
}
