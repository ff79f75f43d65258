//! Pass 0: rewrites of the model before partitioning into ops Bolt's kernels take.
//!
//! Constant nodes become initializers: weights like any other, stored once in the artifact,
//! instead of host steps that make their tensor again on every run. So do Identities of
//! constants (torch.onnx writes one for every tied or shared parameter), so that a weight or
//! bias read through one is still a constant to the partitioner. So do nodes whose outputs
//! inference knows: shape arithmetic on known dims (torch's `chunk` computes a GRU's gate
//! bounds as `Shape(x)[1] / 3 * k`), so a Slice with such bounds is a box (device copies).
//!
//! A ConvTranspose whose windows tile the output without overlap (kernel = stride, no
//! padding, dilation 1, one group: the 2x upsampling of decoders and detection heads) is a
//! 1x1 conv to C_out * k * k channels followed by a DepthToSpace (CRD): output pixel
//! (i*k + r, j*k + s) of channel o is input pixel (i, j) times weight [:, o, r, s]. The conv
//! becomes a GEMM/conv partition like any other, the DepthToSpace a glue kernel.
//!
//! Any other ConvTranspose of a constant weight (a vocoder's upsampling, a decoder's 3x3
//! stride-2 layers) is a Conv over its input with stride - 1 zeros inserted between elements
//! (views and pad glue kernels), the weight flipped and its channel axes swapped: the conv
//! kernels run it, at stride times (per spatial axis) the multiply-adds of a transposed
//! (dgrad) kernel Bolt does not have, instead of the host.
//!
//! LRN is a 1x1 conv of the squares with a band matrix (the channel window) and element-wise
//! ops; a Dropout whose mask nobody reads is an Identity.
//!
//! STFT and DFT of real signals with constant parameters (audio front ends) are products
//! with a constant Fourier basis: a strided 1-D conv and a GEMM.

use super::edit::{constant, finish, fresh_name, node};
use crate::error::Result;
use crate::ir::{AutoPad, DType, Graph, Op, Tensor, Window};
use std::collections::HashSet;
use std::sync::Arc;

/// `g` with every rewrite applied, and how many.
pub fn canonical(g: &Graph) -> Result<(Graph, usize)> {
    let mut out = g.clone();
    let mut taken: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut count = 0;
    count += lift_constants(&mut out);
    count += constant_identities(&mut out);
    count += value_identities(&mut out);
    count += fold_known_values(&mut out)?;
    count += unread_nodes(&mut out);
    count += inline_known_branches(&mut out)?;
    count += crate::ir::control::hoist_constants(&mut out);
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
        let d2s =
            node(d2s_name, Op::DepthToSpace { blocksize: k, crd: true }, vec![Some(blocks_out)], n.outputs[0].clone());
        out.nodes.splice(i - 1..i, [conv, d2s]);
        i += 1;
        count += 1;
    }
    count += conv_transposes_as_convs(&mut out, &mut taken);
    // Later rewrites read the expansions' types (a GroupNormalization's InstanceNormalization).
    let expanded = super::expand::function_ops(&mut out, &mut taken);
    if expanded > 0 {
        finish(&mut out)?;
        // An expansion's casts of constants (a CastLike of a scalar) are constants.
        count += fold_known_values(&mut out)?;
    }
    count += expanded;
    count += quantize_dequantize_pairs(&mut out, &mut taken);
    count += same_type_casts(&mut out);
    count += same_shape_expands(&mut out);
    count += recurrent_projections(&mut out, &mut taken);
    count += instance_norms_as_row_reductions(&mut out, &mut taken);
    count += einsums_as_matmuls(&mut out, &mut taken);
    count += fourier_transforms_as_products(&mut out, &mut taken);
    count += dropouts_in_inference(&mut out);
    count += lrn_as_conv(&mut out, &mut taken);
    count += vector_matmuls_as_matrices(&mut out, &mut taken);
    count += crops_out_of_pads(&mut out, &mut taken);
    count += zero_pads_into_convs(&mut out);
    count += asymmetric_conv_pads(&mut out, &mut taken);
    count += arg_reductions_as_row_reductions(&mut out, &mut taken);
    count += int_remainders(&mut out, &mut taken);
    count += constant_reduce_axes(&mut out);
    count += reductions_over_every_axis(&mut out);
    count += reduce_keeping_dims(&mut out, &mut taken);
    count += spatial_means_of_run_time_size(&mut out);
    count += merge_reduced_axes(&mut out, &mut taken);
    count += layer_norms_over_merged_axes(&mut out, &mut taken);
    count += row_ops_to_last_axis(&mut out, &mut taken);
    count += compose_transposes(&mut out);
    if count > 0 {
        finish(&mut out)?;
    }
    count += super::layout::cancel_inverse_transposes(&mut out);
    if count > 0 {
        finish(&mut out)?;
    }
    Ok((out, count))
}

/// Constant nodes become initializers; a constant that is a graph output stays a node
/// (outputs are computed values).
fn lift_constants(g: &mut Graph) -> usize {
    let before = g.nodes.len();
    let mut constants = Vec::new();
    let outputs = &g.outputs;
    g.nodes.retain(|n| match &n.op {
        Op::Constant { value } if n.outputs.len() == 1 && !outputs.contains(&n.outputs[0]) => {
            constants.push((n.outputs[0].clone(), value.clone()));
            false
        }
        _ => true,
    });
    g.initializers.extend(constants);
    before - g.nodes.len()
}

/// Every `If` whose condition is known (from constants and static shapes) becomes the nodes of
/// the branch it takes; branches nest, so this repeats while inlining reveals more.
fn inline_known_branches(g: &mut Graph) -> Result<usize> {
    let mut count = 0;
    loop {
        let mut inlined = 0;
        let mut i = 0;
        while i < g.nodes.len() {
            let cond = match &g.nodes[i].op {
                Op::If { .. } => g.nodes[i].input(0).and_then(|c| g.initializers.get(c)),
                _ => None,
            };
            match cond.map(|c| crate::ir::control::takes_then(c)) {
                Some(Ok(take)) if crate::ir::control::inline_if(g, i, take) => inlined += 1,
                _ => i += 1,
            }
        }
        if inlined == 0 {
            return Ok(count);
        }
        count += inlined;
        // The branch's nodes carry the types the file declared at most: infer them, and fold
        // what the static shapes now decide (conditions of nested Ifs included).
        let declared = g.types.clone();
        crate::ir::infer::infer_graph(g, &declared)?;
        count += lift_constants(g) + fold_known_values(g)?;
    }
}

/// Nodes (but Constant nodes, already initializers, and graph outputs) whose every output
/// inference knows become those initializers.
fn fold_known_values(g: &mut Graph) -> Result<usize> {
    let values = crate::ir::infer::known_weights(g)?;
    let before = g.nodes.len();
    let mut folded = Vec::new();
    g.nodes.retain(|n| {
        let known = !n.outputs.is_empty()
            && !matches!(n.op, Op::Constant { .. })
            && n.outputs.iter().all(|o| values.contains_key(o) && !g.outputs.contains(o));
        if known {
            folded.extend(n.outputs.iter().map(|o| (o.clone(), values[o].clone())));
        }
        !known
    });
    g.initializers.extend(folded);
    Ok(before - g.nodes.len())
}

/// Nodes whose outputs nobody reads and that are not graph outputs go, until none is left:
/// what fed only folded nodes (the Shape of a tensor of symbolic batch whose one known dim
/// was used), and what the exporter left unread (trueocr's TopK over the whole vocabulary's
/// log-probabilities, which the host would otherwise compute on every run after copying them
/// back). ONNX ops have no side effects. Subgraphs (If, Loop) read the graph's values without
/// naming them as inputs: with one, nothing is known unread.
fn unread_nodes(g: &mut Graph) -> usize {
    let before = g.nodes.len();
    if g.has_opaque_subgraphs() {
        return 0;
    }
    loop {
        let used: HashSet<&String> = g.nodes.iter().flat_map(|n| n.inputs.iter().flatten()).chain(&g.outputs).collect();
        let dead: HashSet<String> =
            g.nodes.iter().filter(|n| n.outputs.iter().all(|o| !used.contains(o))).map(|n| n.name.clone()).collect();
        if dead.is_empty() {
            return before - g.nodes.len();
        }
        g.nodes.retain(|n| !dead.contains(&n.name));
    }
}

/// Identity nodes of initializers (chains too) become initializers holding the same tensor;
/// those that are graph outputs stay computed values.
fn constant_identities(g: &mut Graph) -> usize {
    let before = g.nodes.len();
    let mut i = 0;
    while i < g.nodes.len() {
        let n = &g.nodes[i];
        let value = match (&n.op, n.input(0), &n.outputs[..]) {
            (Op::Identity, Some(x), [y]) if !g.outputs.contains(y) => g.initializers.get(x).cloned(),
            _ => None,
        };
        match value {
            // Nodes are in topological order: an Identity reading this one comes later.
            Some(v) => {
                let y = g.nodes.remove(i).outputs.swap_remove(0);
                g.initializers.insert(y, v);
            }
            None => i += 1,
        }
    }
    before - g.nodes.len()
}

/// An Identity of a computed value is that value: its readers read the value itself, so an
/// Identity between a conv and its BatchNormalization's Mul (paddle2onnx writes one after
/// nearly every op) neither ends the conv's epilogue nor splits an NHWC region, and one
/// between an attention's Softmax and its MatMul does not hide the core. Kept: Identities
/// that are graph outputs, and those read by control flow (whose bodies read the name).
fn value_identities(g: &mut Graph) -> usize {
    let readers = super::edit::consumers(g);
    let control = |c: usize| matches!(g.nodes[c].op, Op::If { .. } | Op::Loop { .. } | Op::Scan(_));
    let mut alias: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut dead = HashSet::new();
    for n in &g.nodes {
        let (Op::Identity, Some(x), [y]) = (&n.op, n.input(0), &n.outputs[..]) else { continue };
        if g.outputs.contains(y) || readers.get(y).is_some_and(|r| r.iter().any(|&(c, _)| control(c))) {
            continue;
        }
        // Nodes are in topological order: x's own alias, if any, is already known.
        let source = alias.get(x).cloned().unwrap_or_else(|| x.to_string());
        alias.insert(y.clone(), source);
        dead.insert(n.name.clone());
    }
    for n in &mut g.nodes {
        for t in n.inputs.iter_mut().flatten() {
            if let Some(source) = alias.get(t) {
                *t = source.clone();
            }
        }
    }
    g.nodes.retain(|n| !dead.contains(&n.name));
    dead.len()
}

/// A QuantizeLinear whose output only DequantizeLinears of the same per-tensor scale and zero
/// point read (the QDQ form onnxruntime's static quantizer writes around every activation)
/// is, with them, `clip(round(x / s), lo - z, hi - z) * s`: float ops (integers below 2^24 are
/// exact in f32; Round halves to even as QuantizeLinear does) that stitch with the
/// element-wise ops around them, while the dequantized constant weights fold into the kernels'
/// weights (shape inference). Per-axis, blocked and other-precision pairs stay as they are.
fn quantize_dequantize_pairs(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    let readers = super::edit::consumers(g);
    // The per-tensor (scale, zero point, zero point's type) of a Q or DQ node, if constant.
    let params = |g: &Graph, n: &crate::ir::Node| -> Option<(f64, i64, DType)> {
        let Op::Opaque { domain, .. } = &n.op else { return None };
        let plain = |k: &str| n.op.attrs().int_or(k, 0) == Some(0);
        if !domain.is_empty() || !plain("block_size") || !plain("precision") || !plain("output_dtype") {
            return None;
        }
        let scale = constant(g, n.input(1)?).filter(|t| t.len() == 1 && t.dtype() == DType::F32)?;
        let (zero, ty) = match n.input(2) {
            Some(z) => {
                let z = constant(g, z).filter(|t| t.len() == 1)?;
                (z.as_i64_vec()?[0], z.dtype())
            }
            None => (0, DType::U8),
        };
        Some((scale.to_f64_vec()[0], zero, ty))
    };
    let mut pairs = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Opaque { op_type, .. } = &n.op else { continue };
        let ([q], Some(x)) = (&n.outputs[..], n.input(0)) else { continue };
        if op_type != "QuantizeLinear" || g.outputs.contains(q) || g.types.get(x).map(|t| t.dtype) != Some(DType::F32) {
            continue;
        }
        let Some(p) = params(g, n) else { continue };
        let Some(range) = (match p.2 {
            DType::U8 => Some((0i64, 255i64)),
            DType::I8 => Some((-128, 127)),
            DType::U16 => Some((0, 65535)),
            DType::I16 => Some((-32768, 32767)),
            _ => None,
        }) else {
            continue;
        };
        let Some(dqs) = readers.get(q.as_str()) else { continue };
        let all_dq = dqs.iter().all(|&(d, pos)| {
            let dn = &g.nodes[d];
            pos == 0
                && matches!(&dn.op, Op::Opaque { op_type, .. } if op_type == "DequantizeLinear")
                && params(g, dn) == Some(p)
        });
        if all_dq {
            pairs.push((i, dqs.iter().map(|&(d, _)| d).collect::<Vec<_>>(), p, range));
        }
    }
    let count = pairs.len();
    let mut replace: std::collections::HashMap<usize, Vec<crate::ir::Node>> = std::collections::HashMap::new();
    let mut drop: HashSet<usize> = HashSet::new();
    for (i, dqs, (scale, zero, _), (lo, hi)) in pairs {
        let n = g.nodes[i].clone();
        let x = n.inputs[0].clone();
        let mut float = |g: &mut Graph, stem: &str, v: f32| {
            let name = fresh_name(g, taken, &format!("{}.{stem}", n.name));
            g.initializers.insert(name.clone(), Arc::new(Tensor::scalar_f32(v)));
            name
        };
        let (s, low, high) = (
            float(g, "scale", scale as f32),
            float(g, "low", (lo - zero) as f32),
            float(g, "high", (hi - zero) as f32),
        );
        let out = |g: &mut Graph, taken: &mut HashSet<String>, stem: &str| {
            fresh_name(g, taken, &format!("{}.{stem}", n.name))
        };
        let (q, r, c) = (out(g, taken, "quotient"), out(g, taken, "rounded"), out(g, taken, "clipped"));
        // The first reader's output is the chain's; the others read it through Identities.
        let y = g.nodes[dqs[0]].outputs[0].clone();
        let mut nodes = vec![
            node(q.clone(), Op::Binary(crate::ir::Binary::Div), vec![x, Some(s.clone())], q.clone()),
            node(r.clone(), Op::Unary(crate::ir::Unary::Round), vec![Some(q)], r.clone()),
            node(c.clone(), Op::Clip, vec![Some(r), Some(low), Some(high)], c.clone()),
            node(n.name.clone(), Op::Binary(crate::ir::Binary::Mul), vec![Some(c), Some(s)], y.clone()),
        ];
        for &d in &dqs[1..] {
            let dn = &g.nodes[d];
            nodes.push(node(dn.name.clone(), Op::Identity, vec![Some(y.clone())], dn.outputs[0].clone()));
        }
        replace.insert(i, nodes);
        drop.extend(dqs);
    }
    let old = std::mem::take(&mut g.nodes);
    for (i, n) in old.into_iter().enumerate() {
        match replace.remove(&i) {
            Some(nodes) => g.nodes.extend(nodes),
            None if drop.contains(&i) => {}
            None => g.nodes.push(n),
        }
    }
    count
}

/// A new 1-D int64 initializer named after `stem`.
fn int_const(g: &mut Graph, taken: &mut HashSet<String>, stem: &str, v: Vec<i64>) -> String {
    let name = fresh_name(g, taken, stem);
    g.initializers.insert(name.clone(), Arc::new(Tensor::from_i64(vec![v.len()], v)));
    name
}

/// A Pad's (begin, end) per axis of its rank-`rank` input, when its pads (and axes, if
/// given) are constants.
fn constant_pads(g: &Graph, n: &crate::ir::Node, rank: usize) -> Option<Vec<(i64, i64)>> {
    let ints = |k: usize| n.input(k).map(|t| constant(g, t).and_then(|c| c.as_i64_vec()));
    let pads = ints(1)??;
    let axes = match ints(3) {
        None => None,
        Some(a) => Some(a?),
    };
    crate::ir::infer::pads_per_axis(&pads, axes.as_deref(), rank).ok()
}

/// A Pad with negative pads crops those sides: Kaldi's pre-emphasis shifts frames by one
/// with `pads [0, 1, 0, -1]` (edge mode). In constant and edge modes that is a Slice of the
/// cropped sides (constant bounds: a view or device copy) and then a Pad of the grown ones
/// (a glue kernel): no side is both cropped and read for an edge value, so the order does
/// not matter. Reflect and wrap read the elements a crop removes, and stay as they are.
fn crops_out_of_pads(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    use crate::ir::PadMode;
    rewrite_each(g, |g, n| {
        let Op::Pad { mode: mode @ (PadMode::Constant | PadMode::Edge) } = n.op else { return None };
        let (x, [y]) = (n.input(0)?, &n.outputs[..]) else { return None };
        let rank = g.types.get(x)?.shape.as_ref()?.rank();
        let per_axis = constant_pads(g, n, rank)?;
        let cropped: Vec<usize> = (0..rank).filter(|&k| per_axis[k].0 < 0 || per_axis[k].1 < 0).collect();
        if cropped.is_empty() {
            return None;
        }
        let starts = cropped.iter().map(|&k| (-per_axis[k].0).max(0)).collect();
        // A negative end counts from the axis' end; an uncropped end runs to it.
        let ends = cropped.iter().map(|&k| if per_axis[k].1 < 0 { per_axis[k].1 } else { i64::MAX }).collect();
        let slice_inputs = vec![
            Some(x.to_string()),
            Some(int_const(g, taken, &format!("{}.crop_starts", n.name), starts)),
            Some(int_const(g, taken, &format!("{}.crop_ends", n.name), ends)),
            Some(int_const(g, taken, &format!("{}.crop_axes", n.name), cropped.iter().map(|&k| k as i64).collect())),
        ];
        let grown: Vec<i64> = per_axis.iter().map(|p| p.0.max(0)).chain(per_axis.iter().map(|p| p.1.max(0))).collect();
        let crop_name = fresh_name(g, taken, &format!("{}.crop", n.name));
        if grown.iter().all(|&p| p == 0) {
            return Some(vec![node(crop_name, Op::Slice, slice_inputs, y.clone())]);
        }
        let cropped_out = fresh_name(g, taken, &format!("{y}.cropped"));
        let pads = int_const(g, taken, &format!("{}.grown_pads", n.name), grown);
        let pad = crate::ir::Node {
            name: n.name.clone(),
            op: Op::Pad { mode },
            inputs: vec![Some(cropped_out.clone()), Some(pads), n.inputs.get(2).cloned().flatten()],
            outputs: vec![y.clone()],
        };
        Some(vec![node(crop_name, Op::Slice, slice_inputs, cropped_out), pad])
    })
}

/// A Conv padded more on one side of an axis than the other (TensorFlow's SAME padding at
/// stride 2 exports as pads [0, 0, 1, 1] or as `auto_pad`, or an explicit Pad folded in; a
/// ConvTranspose written as a conv) reads its input through a zero Pad of the difference (a glue kernel)
/// with the smaller padding on both sides: the conv kernels pad symmetrically.
fn asymmetric_conv_pads(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::Conv { window, group } = &n.op else { return None };
        let x = n.input(0)?;
        // SAME padding (auto_pad) as the explicit pads it means, where the sizes are known.
        let explicit = match window.auto_pad {
            AutoPad::NotSet => None,
            AutoPad::SameUpper | AutoPad::SameLower => {
                let input = g.types.get(x)?.shape.as_ref()?.as_static()?;
                let weight = g.types.get(n.input(1)?)?.shape.as_ref()?.as_static()?;
                let r = window.resolve(input.get(2..)?, weight.get(2..)?, false).ok()?;
                Some(r.pad_begin.iter().chain(&r.pad_end).copied().collect::<Vec<usize>>())
            }
            AutoPad::Valid => return None,
        };
        let window =
            &Window { auto_pad: AutoPad::NotSet, pads: explicit.or_else(|| window.pads.clone()), ..window.clone() };
        let pads = window.pads.as_ref()?;
        let sp = pads.len() / 2;
        // The pads give the rank (the input may be a tensor this pass made, not yet typed).
        if sp == 0 || (0..sp).all(|a| pads[a] == pads[sp + a]) {
            return None;
        }
        let both: Vec<usize> = (0..sp).map(|a| pads[a].min(pads[sp + a])).collect();
        // Full-rank pads: nothing on the batch and channel axes.
        let extra: Vec<i64> = [0, 0]
            .into_iter()
            .chain((0..sp).map(|a| (pads[a] - both[a]) as i64))
            .chain([0, 0])
            .chain((0..sp).map(|a| (pads[sp + a] - both[a]) as i64))
            .collect();
        let pads_name = int_const(g, taken, &format!("{}.uneven_pads", n.name), extra);
        let padded = fresh_name(g, taken, &format!("{x}.padded_unevenly"));
        let pad = node(
            padded.clone(),
            Op::Pad { mode: crate::ir::PadMode::Constant },
            vec![Some(x.to_string()), Some(pads_name)],
            padded.clone(),
        );
        let window = Window { pads: Some(both.iter().chain(&both).copied().collect()), ..window.clone() };
        let mut conv = n.clone();
        conv.op = Op::Conv { window, group: *group };
        conv.inputs[0] = Some(padded);
        Some(vec![pad, conv])
    })
}

/// A Pad of zeros on the spatial axes whose only reader is a Conv (TensorFlow exports pad
/// explicitly) is that Conv's own padding: the Conv reads the Pad's input with its pads grown,
/// and the Pad goes.
fn zero_pads_into_convs(g: &mut Graph) -> usize {
    let mut count = 0;
    loop {
        let readers = super::edit::consumers(g);
        let found = g.nodes.iter().enumerate().find_map(|(i, n)| {
            let Op::Pad { mode: crate::ir::PadMode::Constant } = n.op else { return None };
            let [y] = &n.outputs[..] else { return None };
            let rank = g.types.get(n.input(0)?)?.shape.as_ref()?.rank();
            let per_axis = constant_pads(g, n, rank)?;
            let zero = match n.input(2) {
                None => true,
                Some(v) => constant(g, v).is_some_and(|c| c.to_f64_vec().iter().all(|&x| x == 0.0)),
            };
            let spatial_only = per_axis[..2.min(rank)].iter().all(|&p| p == (0, 0));
            let grows = per_axis.iter().all(|&(b, e)| b >= 0 && e >= 0);
            if !(zero && spatial_only && grows && (3..=4).contains(&rank)) || g.outputs.contains(y) {
                return None;
            }
            let [(c, 0)] = readers.get(y)?[..] else { return None };
            let Op::Conv { window, .. } = &g.nodes[c].op else { return None };
            if window.auto_pad != crate::ir::AutoPad::NotSet {
                return None;
            }
            let spatial = rank - 2;
            let old = window.pads.clone().unwrap_or_else(|| vec![0; 2 * spatial]);
            if old.len() != 2 * spatial {
                return None;
            }
            let grown: Vec<usize> = (0..2 * spatial)
                .map(|k| {
                    let (b, e) = per_axis[2 + k % spatial];
                    let more = if k < spatial { b } else { e };
                    old[k] + more as usize
                })
                .collect();
            Some((i, c, grown))
        });
        let Some((i, c, grown)) = found else { return count };
        let x = g.nodes[i].inputs[0].clone();
        if let Op::Conv { window, .. } = &mut g.nodes[c].op {
            window.pads = Some(grown);
        }
        g.nodes[c].inputs[0] = x;
        g.nodes.remove(i);
        count += 1;
    }
}

/// A reduction whose axes come as a constant input (ReduceSum from opset 13, the others
/// from 18) takes them as its attribute, as older opsets wrote it: one form for the stitcher.
fn constant_reduce_axes(g: &mut Graph) -> usize {
    let mut count = 0;
    for i in 0..g.nodes.len() {
        let Op::Reduce { kind, axes: None, keepdims, noop_with_empty_axes } = g.nodes[i].op else { continue };
        let Some(axes) = g.nodes[i].input(1).and_then(|a| constant(g, a)).and_then(|t| t.as_i64_vec()) else {
            continue;
        };
        let n = &mut g.nodes[i];
        n.op = Op::Reduce { kind, axes: Some(axes), keepdims, noop_with_empty_axes };
        n.inputs.truncate(1);
        count += 1;
    }
    count
}

/// A reduction given no axes (or an empty constant list without `noop_with_empty_axes`)
/// reduces every axis: Whisper's and openWakeWord's log-mel clamps take the whole
/// spectrogram's maximum so. Naming the axes hands it to the passes after this one, which
/// merge them into one row (AStitch's global scheme as a one-row reduction); a scalar input,
/// or axes computed at run time, stay as they are.
fn reductions_over_every_axis(g: &mut Graph) -> usize {
    let mut count = 0;
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let Op::Reduce { kind, axes, keepdims, noop_with_empty_axes } = &n.op else { continue };
        let empty = match axes {
            None => n.input(1).is_none(),
            Some(a) => a.is_empty(),
        };
        if !empty || *noop_with_empty_axes {
            continue;
        }
        let Some(rank) = n.input(0).and_then(|x| g.types.get(x)?.shape.as_ref()).map(|s| s.rank()) else { continue };
        if rank == 0 {
            continue;
        }
        let op = Op::Reduce {
            kind: *kind,
            axes: Some((0..rank as i64).collect()),
            keepdims: *keepdims,
            noop_with_empty_axes: false,
        };
        let n = &mut g.nodes[i];
        n.op = op;
        n.inputs.truncate(1);
        count += 1;
    }
    count
}

/// A Cast to the type its input already has (torch exports of `.float()` on f32 data) is an
/// Identity: a view, not a kernel.
fn same_type_casts(g: &mut Graph) -> usize {
    let mut count = 0;
    for i in 0..g.nodes.len() {
        let Op::Cast { to, .. } = g.nodes[i].op else { continue };
        if g.nodes[i].input(0).and_then(|x| g.types.get(x)).is_some_and(|t| t.dtype == to) {
            g.nodes[i].op = Op::Identity;
            count += 1;
        }
    }
    count
}

/// An Expand to the shape its input already has (jax2tf's `BroadcastTo(x, Shape(x))` in every
/// LayerNorm) is an Identity. Shapes must be proved equal: known dims, or one symbol.
fn same_shape_expands(g: &mut Graph) -> usize {
    let mut count = 0;
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let (Op::Expand, Some(x), [y]) = (&n.op, n.input(0), &n.outputs[..]) else { continue };
        let shape = |t: &str| g.types.get(t).and_then(|t| t.shape.clone());
        let same = match (shape(x), shape(y)) {
            (Some(a), Some(b)) => a == b && !a.0.contains(&crate::ir::Dim::Unknown),
            _ => false,
        };
        if same {
            g.nodes[i].op = Op::Identity;
            g.nodes[i].inputs.truncate(1);
            count += 1;
        }
    }
    count
}

/// A recurrent layer with constant weights computes every step's input projection X·Wᵀ + Wb
/// up front as one GEMM (cuDNN's split: the sequential part is only H·Rᵀ), both directions in
/// one: MatMul(X, Wᵀ `[I, D*G*H]`) + Add(Wb), then a `RecurrentScan` over the projections with
/// R stored transposed (`[D, H, G*H]`, read a row of units at a time).
fn recurrent_projections(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::Recurrent(r) = &n.op else { return None };
        let (x, w, rw) = (n.input(0)?, constant(g, n.input(1)?)?, constant(g, n.input(2)?)?);
        let bias = match n.input(3) {
            Some(b) => Some(constant(g, b)?),
            None => None,
        };
        let dtype = g.types.get(x)?.dtype;
        if w.rank() != 3 || rw.rank() != 3 || w.dtype() != dtype || rw.dtype() != dtype {
            return None;
        }
        let (dirs, rows, input) = (w.shape[0], w.shape[1], w.shape[2]);
        let hidden = rw.shape[2];
        if dirs != r.direction.count() || rows != r.cell.gates() * hidden || rw.shape[..2] != [dirs, rows] {
            return None;
        }
        // Wᵀ: [D*G*H, I] -> [I, D*G*H].
        let wv = w.to_f64_vec();
        let wide = dirs * rows;
        let wt: Vec<f64> = (0..input * wide).map(|i| wv[(i % wide) * input + i / wide]).collect();
        // Rᵀ per direction: [G*H, H] -> [H, G*H].
        let rv = rw.to_f64_vec();
        let rt: Vec<f64> = (0..dirs * hidden * rows)
            .map(|i| {
                let (d, k, row) = (i / (hidden * rows), (i / rows) % hidden, i % rows);
                rv[(d * rows + row) * hidden + k]
            })
            .collect();
        fn add(g: &mut Graph, taken: &mut HashSet<String>, name: String, t: Tensor) -> String {
            let name = fresh_name(g, taken, &name);
            g.initializers.insert(name.clone(), Arc::new(t));
            name
        }
        let wt_name = add(g, taken, format!("{}.wt", n.name), Tensor::from_f64_as(dtype, vec![input, wide], &wt)?);
        let rt_name =
            add(g, taken, format!("{}.rt", n.name), Tensor::from_f64_as(dtype, vec![dirs, hidden, rows], &rt)?);
        let proj = fresh_name(g, taken, &format!("{}.xw", n.name));
        let mm = fresh_name(g, taken, &format!("{}.input_projection", n.name));
        let mut new = vec![node(mm, Op::MatMul, vec![Some(x.to_string()), Some(wt_name)], proj.clone())];
        let proj = match &bias {
            Some(b) => {
                // W's biases of every direction, in the projection's column order.
                let bv = b.to_f64_vec();
                let wb: Vec<f64> = (0..wide).map(|k| bv[(k / rows) * 2 * rows + k % rows]).collect();
                let wb_name = add(g, taken, format!("{}.wb", n.name), Tensor::from_f64_as(dtype, vec![wide], &wb)?);
                let biased = fresh_name(g, taken, &format!("{}.xw_b", n.name));
                let add_name = fresh_name(g, taken, &format!("{}.input_bias", n.name));
                new.push(node(
                    add_name,
                    Op::Binary(crate::ir::Binary::Add),
                    vec![Some(proj), Some(wb_name)],
                    biased.clone(),
                ));
                biased
            }
            None => proj,
        };
        let mut inputs = vec![Some(proj), Some(rt_name)];
        inputs.extend(n.inputs.iter().skip(3).cloned());
        // The scan keeps the node's name (hosts map work back to model nodes by name).
        new.push(crate::ir::Node {
            name: n.name.clone(),
            op: Op::RecurrentScan(r.clone()),
            inputs,
            outputs: n.outputs.clone(),
        });
        Some(new)
    })
}

/// A reduction that drops its axes (jax2tf writes them so) keeps them and a Squeeze drops
/// them after: the stitcher reduces rows into a length-1 axis, and the Squeeze is a view.
fn reduce_keeping_dims(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::Reduce { kind, axes: Some(axes), keepdims: false, noop_with_empty_axes } = &n.op else { return None };
        let rank = n.input(0).and_then(|x| g.types.get(x)?.shape.as_ref()).map(|s| s.rank())?;
        let [y] = &n.outputs[..] else { return None };
        // Empty axes reduce every axis (or none): left as they are.
        let dims: Option<Vec<i64>> = axes
            .iter()
            .map(|&a| (-(rank as i64)..rank as i64).contains(&a).then(|| a.rem_euclid(rank as i64)))
            .collect();
        let dims = dims.filter(|d| !d.is_empty())?;
        let kept = fresh_name(g, taken, &format!("{y}.kept"));
        let axes_name = fresh_name(g, taken, &format!("{}.axes", n.name));
        g.initializers.insert(axes_name.clone(), Arc::new(Tensor::from_i64(vec![dims.len()], dims)));
        let keeping = Op::Reduce {
            kind: *kind,
            axes: Some(axes.clone()),
            keepdims: true,
            noop_with_empty_axes: *noop_with_empty_axes,
        };
        let reduce = crate::ir::Node { op: keeping, outputs: vec![kept.clone()], ..n.clone() };
        let squeeze_name = fresh_name(g, taken, &format!("{}.squeeze", n.name));
        Some(vec![reduce, node(squeeze_name, Op::Squeeze, vec![Some(kept), Some(axes_name)], y.clone())])
    })
}

/// A ReduceMean over the spatial axes of NCHW data, keeping them (squeeze-excite blocks as
/// paddle2onnx writes them), over sizes known only at run time is a GlobalAveragePool: the pool
/// kernel takes any size, where the row reduction `merge_reduced_axes` would make has a
/// row length no stitched kernel can be compiled for. Over known sizes it stays a reduction.
fn spatial_means_of_run_time_size(g: &mut Graph) -> usize {
    let mut count = 0;
    for n in &mut g.nodes {
        let Op::Reduce { kind: crate::ir::ReduceKind::Mean, axes: Some(axes), keepdims: true, .. } = &n.op else {
            continue;
        };
        let Some(shape) = n.input(0).and_then(|x| g.types.get(x)).and_then(|t| t.shape.as_ref()) else { continue };
        if shape.rank() != 4 {
            continue;
        }
        let mut dims: Vec<i64> = axes.iter().map(|&a| a.rem_euclid(4)).collect();
        dims.sort_unstable();
        if dims != [2, 3] || (shape.0[2].known().is_some() && shape.0[3].known().is_some()) {
            continue;
        }
        n.op = Op::GlobalAveragePool;
        n.inputs.truncate(1);
        count += 1;
    }
    count
}

/// A reduction over several axes (keeping them) becomes one over a single last axis: a
/// Transpose moving the reduced axes last (none when they already are), a Reshape merging
/// them (`[0, .., 0, -1]`: kept dims copied, so symbolic sizes are fine), the reduction over
/// the last axis, a Reshape back to the kept dims and ones, and the inverse Transpose. Sums,
/// means, maxima and minima over the merged axis are those over the axes (TF's global pooling
/// `ReduceMean(axes=[1, 2])` of NHWC data, SE blocks' `ReduceMean(axes=[2, 3])`); the
/// reshapes are views and the transposes NCHW <-> NHWC glue kernels or strided reads.
fn merge_reduced_axes(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::Reduce { kind, axes: Some(axes), keepdims: true, noop_with_empty_axes } = &n.op else { return None };
        let rank = n.input(0).and_then(|x| g.types.get(x)?.shape.as_ref()).map(|s| s.rank())?;
        let (x, [y]) = (n.input(0)?, &n.outputs[..]) else { return None };
        let mut reduced: Vec<usize> = axes
            .iter()
            .map(|&a| (-(rank as i64)..rank as i64).contains(&a).then(|| a.rem_euclid(rank as i64) as usize))
            .collect::<Option<_>>()?;
        reduced.sort_unstable();
        reduced.dedup();
        if reduced.len() < 2 {
            return None;
        }
        let kept: Vec<usize> = (0..rank).filter(|d| !reduced.contains(d)).collect();
        let perm: Vec<usize> = kept.iter().chain(&reduced).copied().collect();
        let moved = perm.iter().enumerate().any(|(i, &d)| i != d);
        let mut back = vec![0; rank];
        for (i, &d) in perm.iter().enumerate() {
            back[d] = i;
        }
        let mut shape_const = |what: &str, v: Vec<i64>| {
            let name = fresh_name(g, taken, &format!("{}.{what}", n.name));
            g.initializers.insert(name.clone(), Arc::new(Tensor::from_i64(vec![v.len()], v)));
            name
        };
        let zeros = vec![0i64; kept.len()];
        let merged_shape = shape_const("merged_shape", zeros.iter().copied().chain([-1]).collect());
        let kept_shape =
            shape_const("kept_shape", zeros.iter().copied().chain(std::iter::repeat_n(1, reduced.len())).collect());
        let mut name = |stem: &str| fresh_name(g, taken, &format!("{}.{stem}", n.name));
        let (t_in, merged, r, unmerged, t_out) =
            (name("reduced_last"), name("merged"), name("over_merged"), name("unmerged"), name("back"));
        let over_last = Op::Reduce {
            kind: *kind,
            axes: Some(vec![-1]),
            keepdims: true,
            noop_with_empty_axes: *noop_with_empty_axes,
        };
        let reshape = Op::Reshape { allowzero: false };
        let mut out = Vec::new();
        let mut src = x.to_string();
        if moved {
            out.push(node(t_in.clone(), Op::Transpose { perm: Some(perm) }, vec![Some(src)], t_in.clone()));
            src = t_in;
        }
        out.push(node(merged.clone(), reshape.clone(), vec![Some(src), Some(merged_shape)], merged.clone()));
        out.push(node(n.name.clone(), over_last, vec![Some(merged)], r.clone()));
        let last = if moved { unmerged.clone() } else { y.clone() };
        out.push(node(unmerged.clone(), reshape, vec![Some(r), Some(kept_shape)], last));
        if moved {
            out.push(node(t_out, Op::Transpose { perm: Some(back) }, vec![Some(unmerged)], y.clone()));
        }
        Some(out)
    })
}

/// A LayerNormalization over several trailing axes (PyTorch's `LayerNorm([C, H, W])` exports
/// axis = -3) is one over the last axis of the input with those axes merged: Reshape to
/// [kept dims, -1] (a view), the normalisation over rows with its scale and bias flattened
/// (they have the normalised axes' shape), and a Reshape back to the input's shape. Stitched
/// kernels normalise rows; the op over several axes stayed with the host.
fn layer_norms_over_merged_axes(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::LayerNormalization { axis, epsilon, stash_type } = &n.op else { return None };
        let (x, [y]) = (n.input(0)?, &n.outputs[..]) else { return None };
        if n.inputs.len() < 2 {
            return None;
        }
        let shape = g.types.get(x)?.shape.clone()?;
        let rank = shape.rank() as i64;
        let a = if *axis < 0 { axis + rank } else { *axis };
        if a < 0 || a >= rank - 1 {
            return None;
        }
        let trailing = &shape.0[a as usize..];
        // Scale and bias of exactly the normalised axes' shape flatten to the merged row.
        let params: Vec<String> = n.inputs[1..].iter().flatten().cloned().collect();
        let fits = |p: &String| g.types.get(p).and_then(|t| t.shape.as_ref()).is_some_and(|s| s.0 == trailing);
        if params.is_empty() || !params.iter().all(fits) || trailing.contains(&crate::ir::Dim::Unknown) {
            return None;
        }
        let reshape = Op::Reshape { allowzero: false };
        let flat = |g: &mut Graph, taken: &mut HashSet<String>, stem: &str, v: Vec<i64>| {
            let name = fresh_name(g, taken, &format!("{}.{stem}", n.name));
            g.initializers.insert(name.clone(), Arc::new(Tensor::from_i64(vec![v.len()], v)));
            name
        };
        let rows_shape = flat(g, taken, "rows_shape", std::iter::repeat_n(0, a as usize).chain([-1]).collect());
        let row_shape = flat(g, taken, "row_shape", vec![-1]);
        let mut nodes = Vec::new();
        let mut inputs = Vec::new();
        for (i, p) in n.inputs.iter().enumerate() {
            let Some(p) = p else {
                inputs.push(None);
                continue;
            };
            let flat_p = fresh_name(g, taken, &format!("{}.{}", n.name, if i == 0 { "rows" } else { "row" }));
            let target = if i == 0 { rows_shape.clone() } else { row_shape.clone() };
            match constant(g, p).filter(|_| i > 0) {
                // Constant scale and bias flatten here; the input and computed ones through a view.
                Some(c) => {
                    let flat_c = c.reshaped(vec![c.len()]);
                    g.initializers.insert(flat_p.clone(), Arc::new(flat_c));
                }
                None => nodes.push(node(
                    flat_p.clone(),
                    reshape.clone(),
                    vec![Some(p.clone()), Some(target)],
                    flat_p.clone(),
                )),
            }
            inputs.push(Some(flat_p));
        }
        let mut name = |stem: &str| fresh_name(g, taken, &format!("{}.{stem}", n.name));
        let (normed, shape_of) = (name("normed_rows"), name("shape"));
        // The node's name stays on the normalisation (reports map back to model nodes by name).
        let over_rows = Op::LayerNormalization { axis: -1, epsilon: *epsilon, stash_type: *stash_type };
        nodes.push(node(n.name.clone(), over_rows, inputs, normed.clone()));
        nodes.push(node(
            shape_of.clone(),
            Op::Shape { start: 0, end: None },
            vec![Some(x.to_string())],
            shape_of.clone(),
        ));
        nodes.push(node(name("back"), reshape, vec![Some(normed), Some(shape_of)], y.clone()));
        Some(nodes)
    })
}

/// An InstanceNormalization (host-only as an op; PyTorch's GroupNorm and InstanceNorm export
/// as one) over [N, C, spatial...] with constant scale and bias is the normalisation of each
/// (sample, channel) row of its spatial elements merged: Reshape to [N, C, S] (a view), then
/// mean, centred values, mean of their squares, divide by sqrt(var + epsilon), per-channel
/// scale and shift ([C, 1] constants), and a Reshape back to the input's shape. Stitching
/// makes that one row-reduction kernel; what it cannot take still computes ONNX's meaning.
fn instance_norms_as_row_reductions(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    use crate::ir::{Binary, ReduceKind, Unary};
    rewrite_each(g, |g, n| {
        let Op::Opaque { domain, op_type, .. } = &n.op else { return None };
        if !(domain.is_empty() || domain == "ai.onnx") || op_type != "InstanceNormalization" {
            return None;
        }
        let (x, [y]) = (n.input(0)?, &n.outputs[..]) else { return None };
        let t = g.types.get(x)?;
        let (dtype, rank) = (t.dtype, t.shape.as_ref()?.rank());
        let c = t.shape.as_ref()?.0.get(1)?.known()?;
        if !dtype.is_float() || rank < 3 {
            return None;
        }
        let per_channel = |name: &str| constant(g, name).filter(|t| t.len() == c).map(|t| t.to_f64_vec());
        let (scale, bias) = (per_channel(n.input(1)?)?, per_channel(n.input(2)?)?);
        let epsilon = n.op.attrs().float_or("epsilon", 1e-5)?;
        let mut name = |stem: &str| fresh_name(g, taken, &format!("{}.{stem}", n.name));
        let [merged, mean, centred, squares, var, shifted, sd, normed, scaled, out, shape_of, back] = [
            "merged", "mean", "centred", "squares", "var", "var_eps", "sd", "normed", "scaled", "rows", "shape", "back",
        ]
        .map(&mut name);
        let [merged_shape, eps, scale_c1, bias_c1] = ["merged_shape", "epsilon", "scale", "bias"].map(&mut name);
        let constant_of = |v: &[f64], shape: Vec<usize>| Tensor::from_f64_as(dtype, shape, v).map(Arc::new);
        g.initializers.insert(eps.clone(), constant_of(&[epsilon], vec![])?);
        g.initializers.insert(scale_c1.clone(), constant_of(&scale, vec![c, 1])?);
        g.initializers.insert(bias_c1.clone(), constant_of(&bias, vec![c, 1])?);
        let mean_of_rows =
            Op::Reduce { kind: ReduceKind::Mean, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
        let reshape = Op::Reshape { allowzero: false };
        let s = |t: &String| Some(t.clone());
        let mut nodes = Vec::new();
        let rows = if rank == 3 {
            x.to_string()
        } else {
            g.initializers.insert(merged_shape.clone(), Arc::new(Tensor::from_i64(vec![3], vec![0, 0, -1])));
            nodes.push(node(
                merged.clone(),
                reshape.clone(),
                vec![Some(x.to_string()), s(&merged_shape)],
                merged.clone(),
            ));
            merged
        };
        let last = if rank == 3 { y.clone() } else { out.clone() };
        // The node's name stays on the normalisation (reports map back to model nodes by name).
        nodes.extend([
            node(n.name.clone(), mean_of_rows.clone(), vec![Some(rows.clone())], mean.clone()),
            node(centred.clone(), Op::Binary(Binary::Sub), vec![Some(rows), s(&mean)], centred.clone()),
            node(squares.clone(), Op::Binary(Binary::Mul), vec![s(&centred), s(&centred)], squares.clone()),
            node(var.clone(), mean_of_rows, vec![s(&squares)], var.clone()),
            node(shifted.clone(), Op::Binary(Binary::Add), vec![s(&var), s(&eps)], shifted.clone()),
            node(sd.clone(), Op::Unary(Unary::Sqrt), vec![s(&shifted)], sd.clone()),
            node(normed.clone(), Op::Binary(Binary::Div), vec![s(&centred), s(&sd)], normed.clone()),
            node(scaled.clone(), Op::Binary(Binary::Mul), vec![s(&normed), s(&scale_c1)], scaled.clone()),
            node(out.clone(), Op::Binary(Binary::Add), vec![s(&scaled), s(&bias_c1)], last),
        ]);
        if rank > 3 {
            nodes.push(node(
                shape_of.clone(),
                Op::Shape { start: 0, end: None },
                vec![Some(x.to_string())],
                shape_of.clone(),
            ));
            nodes.push(node(back, reshape, vec![s(&out), s(&shape_of)], y.clone()));
        }
        Some(nodes)
    })
}

/// A two-operand Einsum that is one batched matrix product is Transposes and Reshapes around a
/// MatMul, a GEMM kernel instead of a host op: each label is a batch label (in both operands
/// and the output), a contracted one (in both operands only) or a free one of its operand
/// (there and in the output), with at least one contracted. Several free or contracted labels
/// merge into one axis each. Attention written as einsum (`bct,bcs->bts`), grouped linear
/// layers (`btgi,gih->btgh`) and a weight contracted over two axes (`fi,fij->j`) are such;
/// transposes and reshapes that change nothing are left out.
fn einsums_as_matmuls(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::Opaque { domain, op_type, .. } = &n.op else { return None };
        if !(domain.is_empty() || domain == "ai.onnx") || op_type != "Einsum" || n.inputs.len() != 2 {
            return None;
        }
        let equation = n.op.attrs().string("equation")?;
        let (a, b, [y]) = (n.input(0)?, n.input(1)?, &n.outputs[..]) else { return None };
        let shape = |t: &str| g.types.get(t).and_then(|t| t.shape.clone());
        // Element types of GEMM kernels (a MatMul of others would stay on the host anyway).
        let kernel_type = |t: &crate::ir::TensorType| matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16);
        if !g.types.get(a).is_some_and(kernel_type) {
            return None;
        }
        let (sa, sb) = (shape(a)?, shape(b)?);
        let spec = crate::ir::einsum::parse(&equation, &[Some(sa.rank()), Some(sb.rank())]).ok()?;
        let (la, lb, out) = (spec.operands[0].clone()?, spec.operands[1].clone()?, spec.output.clone()?);
        let distinct = |l: &[usize]| l.iter().collect::<HashSet<_>>().len() == l.len();
        if !(distinct(&la) && distinct(&lb) && distinct(&out)) {
            return None;
        }
        let (mut contracted, mut free_a, mut free_b) = (Vec::new(), Vec::new(), Vec::new());
        for l in la.iter().chain(&lb).copied().collect::<std::collections::BTreeSet<_>>() {
            match (la.contains(&l), lb.contains(&l), out.contains(&l)) {
                (true, true, true) => {}
                (true, true, false) => contracted.push(l),
                (true, false, true) => free_a.push(l),
                (false, true, true) => free_b.push(l),
                _ => return None,
            }
        }
        if contracted.is_empty() {
            return None;
        }
        // Free labels in the order the output lists them (fewer moves after the product).
        free_a.sort_by_key(|l| out.iter().position(|o| o == l));
        free_b.sort_by_key(|l| out.iter().position(|o| o == l));
        let batch: Vec<usize> = out.iter().copied().filter(|l| la.contains(l) && lb.contains(l)).collect();
        let at = |labels: &[usize], l: usize| labels.iter().position(|&x| x == l).expect("a label of the operand");
        let dim = |l: usize| {
            let from_a = la.iter().position(|&x| x == l).map(|i| sa.0[i].clone());
            from_a.or_else(|| lb.iter().position(|&x| x == l).map(|i| sb.0[i].clone())).expect("a label")
        };
        // One merged axis: its size when known, -1 (once per target) when not.
        let merged = |labels: &[usize]| labels.iter().map(|&l| dim(l).known()).product::<Option<usize>>();
        let perm_a: Vec<usize> = batch.iter().chain(&free_a).chain(&contracted).map(|&l| at(&la, l)).collect();
        let perm_b: Vec<usize> = batch.iter().chain(&contracted).chain(&free_b).map(|&l| at(&lb, l)).collect();
        let product: Vec<usize> = batch.iter().chain(&free_a).chain(&free_b).copied().collect();
        let perm_out: Vec<usize> = out.iter().map(|&l| at(&product, l)).collect();
        let moves = |p: &[usize]| p.iter().enumerate().any(|(i, &d)| i != d);
        // Reshape targets, batch dims copied (0); None when two merged sizes are unknown.
        let target = |groups: [&[usize]; 2]| -> Option<Vec<i64>> {
            let sizes: Vec<Option<usize>> = groups.iter().map(|l| merged(l)).collect();
            (sizes.iter().filter(|s| s.is_none()).count() <= 1)
                .then(|| batch.iter().map(|_| 0).chain(sizes.iter().map(|s| s.map_or(-1, |s| s as i64))).collect())
        };
        // A product with a matrix (B: one contracted and one free axis, no batch axes) keeps
        // A's free axes apart: MatMul broadcasts the matrix over A's leading axes, so neither
        // A nor the product is reshaped (no sizes needed: a batch and a length both symbolic).
        let matrix_b = batch.is_empty() && free_b.len() == 1 && contracted.len() == 1 && !free_a.is_empty();
        let (reshape_a, reshape_b) =
            (!matrix_b && (free_a.len() != 1 || contracted.len() != 1), free_b.len() != 1 || contracted.len() != 1);
        let target_a = if reshape_a { Some(target([&free_a, &contracted])?) } else { None };
        let target_b = if reshape_b { Some(target([&contracted, &free_b])?) } else { None };
        // The product back to one axis per free label: every dim of a free label known but one.
        let unmerge = !matrix_b && (free_a.len() != 1 || free_b.len() != 1);
        let target_out: Option<Vec<i64>> = if unmerge {
            let dims: Vec<Option<usize>> = free_a.iter().chain(&free_b).map(|&l| dim(l).known()).collect();
            if dims.iter().filter(|d| d.is_none()).count() > 1 {
                return None;
            }
            Some(batch.iter().map(|_| 0).chain(dims.iter().map(|d| d.map_or(-1, |d| d as i64))).collect())
        } else {
            None
        };
        let mut nodes = Vec::new();
        let mut operand = |g: &mut Graph, x: &str, perm: Vec<usize>, target: Option<Vec<i64>>, stem: &str| {
            let mut x = x.to_string();
            if moves(&perm) {
                let t = fresh_name(g, taken, &format!("{}.{stem}_t", n.name));
                nodes.push(node(t.clone(), Op::Transpose { perm: Some(perm) }, vec![Some(x)], t.clone()));
                x = t;
            }
            if let Some(target) = target {
                let shape = int_const(g, taken, &format!("{}.{stem}_shape", n.name), target);
                let t = fresh_name(g, taken, &format!("{}.{stem}_2d", n.name));
                nodes.push(node(t.clone(), Op::Reshape { allowzero: false }, vec![Some(x), Some(shape)], t.clone()));
                x = t;
            }
            x
        };
        let (ta, tb) = (operand(g, a, perm_a, target_a, "a"), operand(g, b, perm_b, target_b, "b"));
        let after = unmerge || moves(&perm_out);
        let mm_out = if after { fresh_name(g, taken, &format!("{y}.product")) } else { y.clone() };
        // The MatMul keeps the node's name (hosts map kernels back to model nodes by name).
        nodes.push(node(n.name.clone(), Op::MatMul, vec![Some(ta), Some(tb)], mm_out.clone()));
        let mut last = mm_out;
        if let Some(target) = target_out {
            let shape = int_const(g, taken, &format!("{}.out_shape", n.name), target);
            let t = if moves(&perm_out) { fresh_name(g, taken, &format!("{}.out_nd", n.name)) } else { y.clone() };
            nodes.push(node(t.clone(), Op::Reshape { allowzero: false }, vec![Some(last), Some(shape)], t.clone()));
            last = t;
        }
        if moves(&perm_out) {
            let t = fresh_name(g, taken, &format!("{}.out_t", n.name));
            nodes.push(node(t, Op::Transpose { perm: Some(perm_out) }, vec![Some(last)], y.clone()));
        }
        Some(nodes)
    })
}

/// A Dropout the importer left to the host (for its mask output or training_mode input) is an
/// Identity of its input where nothing reads the mask and training_mode is absent or a
/// constant false: inference, as onnxruntime runs it. Subgraphs read values without naming
/// them as inputs: with one, a mask may be read, and the Dropout stays.
fn dropouts_in_inference(g: &mut Graph) -> usize {
    if g.has_opaque_subgraphs() {
        return 0;
    }
    let read: HashSet<String> = super::edit::read_tensors(g).into_iter().map(str::to_string).collect();
    rewrite_each(g, |g, n| {
        let Op::Opaque { domain, op_type, .. } = &n.op else { return None };
        if !(domain.is_empty() || domain == "ai.onnx") || op_type != "Dropout" {
            return None;
        }
        if n.outputs.iter().skip(1).any(|m| !m.is_empty() && read.contains(m)) {
            return None;
        }
        if let Some(t) = n.input(2) {
            if constant(g, t)?.to_f64_vec() != [0.0] {
                return None;
            }
        }
        Some(vec![node(n.name.clone(), Op::Identity, vec![n.inputs.first()?.clone()], n.outputs.first()?.clone())])
    })
}

/// LRN of NCHW data (AlexNet, GoogLeNet and ZFNet as caffe2 exported them) over a known
/// number of channels: `x / (bias + alpha / size * S)^beta`, where the channel-window sum of
/// squares S is a 1x1 conv with a constant band matrix (1 where an input channel is in the
/// output channel's window, the bias on every channel) of the squares already scaled by
/// `alpha / size`: scaled before they are stored, squares of activations in the hundreds do not
/// overflow f16. The conv runs as a GEMM kernel, the rest stitches.
fn lrn_as_conv(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    use crate::ir::Binary;
    rewrite_each(g, |g, n| {
        let Op::Opaque { domain, op_type, .. } = &n.op else { return None };
        if !(domain.is_empty() || domain == "ai.onnx") || op_type != "LRN" || n.outputs.len() != 1 {
            return None;
        }
        let a = n.op.attrs();
        let size = usize::try_from(a.int("size")?).ok().filter(|&s| s > 0)?;
        let (alpha, beta, bias) = (a.float_or("alpha", 1e-4)?, a.float_or("beta", 0.75)?, a.float_or("bias", 1.0)?);
        let x = n.input(0)?;
        let ty = g.types.get(x)?.clone();
        let shape = ty.shape.as_ref()?;
        if !matches!(ty.dtype, DType::F32 | DType::F16 | DType::BF16) || !matches!(shape.rank(), 3 | 4) {
            return None;
        }
        let c = shape.0[1].known()?;
        let (before, after) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
        // W[o, i] = 1 where i is in o's window.
        let mut w = vec![0.0; c * c];
        for o in 0..c {
            for i in o.saturating_sub(before)..=(o + after).min(c - 1) {
                w[o * c + i] = 1.0;
            }
        }
        let spatial = vec![1; shape.rank() - 2];
        let mut wshape = vec![c, c];
        wshape.extend(&spatial);
        let wname = fresh_name(g, taken, &format!("{}.window", n.name));
        g.initializers.insert(wname.clone(), Arc::new(Tensor::from_f64_as(ty.dtype, wshape, &w)?));
        let bname = fresh_name(g, taken, &format!("{}.bias", n.name));
        g.initializers.insert(bname.clone(), Arc::new(Tensor::from_f64_as(ty.dtype, vec![c], &vec![bias; c])?));
        let ename = fresh_name(g, taken, &format!("{}.beta", n.name));
        g.initializers.insert(ename.clone(), Arc::new(Tensor::from_f64_as(ty.dtype, vec![], &[beta])?));
        let sname = fresh_name(g, taken, &format!("{}.scale", n.name));
        let scale = alpha / size as f64;
        g.initializers.insert(sname.clone(), Arc::new(Tensor::from_f64_as(ty.dtype, vec![], &[scale])?));
        let (sq, scaled, sum, pw) = (
            fresh_name(g, taken, &format!("{}.squares", n.name)),
            fresh_name(g, taken, &format!("{}.scaled_squares", n.name)),
            fresh_name(g, taken, &format!("{}.sums", n.name)),
            fresh_name(g, taken, &format!("{}.denominator", n.name)),
        );
        let window = Window {
            kernel_shape: Some(spatial),
            strides: None,
            pads: None,
            dilations: None,
            auto_pad: AutoPad::NotSet,
        };
        let name = |stem: &str, taken: &mut HashSet<String>| fresh_name(g, taken, &format!("{}.{stem}", n.name));
        let (square, scale_node, pow) = (name("square", taken), name("scale", taken), name("pow", taken));
        Some(vec![
            node(square, Op::Binary(Binary::Mul), vec![Some(x.to_string()), Some(x.to_string())], sq.clone()),
            node(scale_node, Op::Binary(Binary::Mul), vec![Some(sq), Some(sname)], scaled.clone()),
            // The conv keeps the node's name (hosts map kernels back to model nodes by name).
            node(
                n.name.clone(),
                Op::Conv { window, group: 1 },
                vec![Some(scaled), Some(wname), Some(bname)],
                sum.clone(),
            ),
            node(pow, Op::Binary(Binary::Pow), vec![Some(sum), Some(ename)], pw.clone()),
            node(
                fresh_name(g, taken, &format!("{}.normalise", n.name)),
                Op::Binary(Binary::Div),
                vec![Some(x.to_string()), Some(pw)],
                n.outputs[0].clone(),
            ),
        ])
    })
}

/// Forward Fourier transforms of real signals with constant parameters are products with a
/// constant basis (the cos and -sin of each bin, interleaved as ONNX's [.., bins, 2] output
/// is), which the GEMM/conv kernels run instead of the host:
/// - STFT (constant frame_step, window or frame_length): a 1-D Conv of the signal
///   `[batch, 1, length]` with that basis times the window as `[2 * bins, 1, frame]` filters
///   at stride frame_step (whose output frames are STFT's: `(length - frame) / step + 1`), then
///   `[batch, frames, bins, 2]` through a Transpose and a Reshape;
/// - DFT along the axis before the last (the complex one, of size 1), of a known length: a
///   MatMul of the signal (that last axis squeezed) with the basis `[length, 2 * bins]`, whose
///   rows past dft_length are zeros (the truncation) and which has no rows for the zeros the
///   signal is padded with.
/// Inverse and complex transforms, other axes, and run-time parameters stay on the host. The
/// basis angles are exact (`j * k mod n`), as the reference's twiddles are.
fn fourier_transforms_as_products(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::Opaque { domain, op_type, .. } = &n.op else { return None };
        if !(domain.is_empty() || domain == "ai.onnx") || n.outputs.len() != 1 {
            return None;
        }
        let int_attr = |name: &str, default: i64| n.op.attrs().int_or(name, default);
        let scalar = |i: usize| -> Option<Option<i64>> {
            match n.input(i) {
                None => Some(None),
                Some(t) => match constant(g, t)?.as_i64_vec()?.as_slice() {
                    [v] => Some(Some(*v)),
                    _ => None,
                },
            }
        };
        let x = n.input(0)?;
        let ty = g.types.get(x)?.clone();
        if !matches!(ty.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return None;
        }
        let shape = ty.shape.as_ref()?;
        let rank = shape.rank();
        // basis[j][2k], basis[j][2k + 1]: cos and -sin of 2 pi j k / size, for j < rows.
        let basis = |rows: usize, size: usize, bins: usize, window: &[f64]| -> Vec<f64> {
            let mut v = vec![0.0; rows * 2 * bins];
            for j in 0..rows.min(size) {
                for k in 0..bins {
                    let a = 2.0 * std::f64::consts::PI * ((j * k) % size) as f64 / size as f64;
                    v[(j * bins + k) * 2] = window[j] * a.cos();
                    v[(j * bins + k) * 2 + 1] = -window[j] * a.sin();
                }
            }
            v
        };
        let onesided = |default: i64| int_attr("onesided", default).map(|o| o != 0);
        let mut nodes = Vec::new();
        let out = n.outputs[0].clone();
        match op_type.as_str() {
            "STFT" => {
                let onesided = onesided(1)?;
                let step = usize::try_from(scalar(1)??).ok().filter(|&s| s > 0)?;
                let window = match n.input(2) {
                    Some(w) => Some(constant(g, w)?).filter(|w| w.rank() == 1)?.to_f64_vec().into(),
                    None => None,
                };
                let frame = match (scalar(3)?, &window) {
                    (Some(f), Some(w)) if usize::try_from(f).ok()? == w.len() => w.len(),
                    (Some(f), None) => usize::try_from(f).ok().filter(|&f| f > 0)?,
                    (None, Some(w)) => w.len(),
                    _ => return None,
                };
                let window: Vec<f64> = window.unwrap_or_else(|| vec![1.0; frame]);
                let real = match rank {
                    2 => true,
                    3 => shape.0[2].known() == Some(1),
                    _ => false,
                };
                if !real || frame == 0 || shape.0[1].known().is_some_and(|len| len < frame) {
                    return None;
                }
                let bins = if onesided { frame / 2 + 1 } else { frame };
                // Filters [2 * bins, 1, frame]: the basis transposed.
                let b = basis(frame, frame, bins, &window);
                let filters: Vec<f64> = (0..2 * bins * frame).map(|i| b[(i % frame) * 2 * bins + i / frame]).collect();
                let w = fresh_name(g, taken, &format!("{}.basis", n.name));
                g.initializers
                    .insert(w.clone(), Arc::new(Tensor::from_f64_as(ty.dtype, vec![2 * bins, 1, frame], &filters)?));
                let signal = fresh_name(g, taken, &format!("{}.signal", n.name));
                let to_rows = fresh_name(g, taken, &format!("{}.signal_rows", n.name));
                nodes.push(if rank == 2 {
                    let axes = int_const(g, taken, &format!("{}.axes", n.name), vec![1]);
                    node(to_rows, Op::Unsqueeze, vec![Some(x.to_string()), Some(axes)], signal.clone())
                } else {
                    node(
                        to_rows,
                        Op::Transpose { perm: Some(vec![0, 2, 1]) },
                        vec![Some(x.to_string())],
                        signal.clone(),
                    )
                });
                let window = Window {
                    kernel_shape: Some(vec![frame]),
                    strides: Some(vec![step]),
                    pads: None,
                    dilations: None,
                    auto_pad: AutoPad::NotSet,
                };
                let spectra = fresh_name(g, taken, &format!("{}.spectra", n.name));
                // The conv keeps the node's name (hosts map kernels back to model nodes by name).
                nodes.push(node(
                    n.name.clone(),
                    Op::Conv { window, group: 1 },
                    vec![Some(signal), Some(w)],
                    spectra.clone(),
                ));
                let frames = fresh_name(g, taken, &format!("{}.frames", n.name));
                let t = fresh_name(g, taken, &format!("{}.frames_last", n.name));
                nodes.push(node(t, Op::Transpose { perm: Some(vec![0, 2, 1]) }, vec![Some(spectra)], frames.clone()));
                let target = int_const(g, taken, &format!("{}.bins", n.name), vec![0, 0, bins as i64, 2]);
                let r = fresh_name(g, taken, &format!("{}.complex", n.name));
                nodes.push(node(r, Op::Reshape { allowzero: false }, vec![Some(frames), Some(target)], out));
            }
            "DFT" => {
                let onesided = onesided(0)?;
                if int_attr("inverse", 0)? != 0 || rank < 2 || shape.0[rank - 1].known() != Some(1) {
                    return None;
                }
                let axis = scalar(2)?.unwrap_or(-2);
                if axis != rank as i64 - 2 && axis != -2 {
                    return None;
                }
                let len = shape.0[rank - 2].known().filter(|&l| l > 0)?;
                let size = match scalar(1)? {
                    Some(v) => usize::try_from(v).ok().filter(|&v| v > 0)?,
                    None => len,
                };
                let bins = if onesided { size / 2 + 1 } else { size };
                let b = basis(len, size, bins, &vec![1.0; len]);
                let w = fresh_name(g, taken, &format!("{}.basis", n.name));
                g.initializers.insert(w.clone(), Arc::new(Tensor::from_f64_as(ty.dtype, vec![len, 2 * bins], &b)?));
                let axes = int_const(g, taken, &format!("{}.axes", n.name), vec![rank as i64 - 1]);
                let signal = fresh_name(g, taken, &format!("{}.signal", n.name));
                let sq = fresh_name(g, taken, &format!("{}.real", n.name));
                nodes.push(node(sq, Op::Squeeze, vec![Some(x.to_string()), Some(axes)], signal.clone()));
                let spectra = fresh_name(g, taken, &format!("{}.spectra", n.name));
                nodes.push(node(n.name.clone(), Op::MatMul, vec![Some(signal), Some(w)], spectra.clone()));
                let dims: Vec<i64> = (0..rank - 2).map(|_| 0).chain([bins as i64, 2]).collect();
                let target = int_const(g, taken, &format!("{}.bins", n.name), dims);
                let r = fresh_name(g, taken, &format!("{}.complex", n.name));
                nodes.push(node(r, Op::Reshape { allowzero: false }, vec![Some(spectra), Some(target)], out));
            }
            _ => return None,
        }
        Some(nodes)
    })
}

/// A MatMul of a vector and a matrix (numpy's promotion: a 1-D left operand is a row, a 1-D
/// right one a column, and that axis is dropped from the product) as the matrix product of a
/// one-row (one-column) matrix, between an Unsqueeze and a Squeeze, so that a GEMM kernel
/// takes it (a filterbank applied to one frame: `[32] @ [32, 513]`). Two vectors (a dot
/// product) stay as they are.
fn vector_matmuls_as_matrices(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        if !matches!(n.op, Op::MatMul) {
            return None;
        }
        let rank = |t: &str| g.types.get(t).and_then(|t| t.shape.as_ref()).map(|s| s.rank());
        let (a, b, [y]) = (n.input(0)?, n.input(1)?, &n.outputs[..]) else { return None };
        // (operand promoted, the axis it gains, the product's axis dropped)
        let (k, axis, dropped) = match (rank(a)?, rank(b)?) {
            (1, r) if r >= 2 => (0, 0, -2),
            (r, 1) if r >= 2 => (1, 1, -1),
            _ => return None,
        };
        let x = n.inputs[k].clone()?;
        let gain = int_const(g, taken, &format!("{}.promoted_axis", n.name), vec![axis]);
        let drop = int_const(g, taken, &format!("{}.dropped_axis", n.name), vec![dropped]);
        let m = fresh_name(g, taken, &format!("{x}.as_matrix"));
        let p = fresh_name(g, taken, &format!("{y}.matrix"));
        let mut inputs = n.inputs.clone();
        inputs[k] = Some(m.clone());
        Some(vec![
            node(fresh_name(g, taken, &format!("{}.promote", n.name)), Op::Unsqueeze, vec![Some(x), Some(gain)], m),
            // The MatMul keeps the node's name (hosts map kernels back to model nodes by name).
            crate::ir::Node { name: n.name.clone(), op: Op::MatMul, inputs, outputs: vec![p.clone()] },
            node(
                fresh_name(g, taken, &format!("{}.demote", n.name)),
                Op::Squeeze,
                vec![Some(p), Some(drop)],
                y.clone(),
            ),
        ])
    })
}

/// Replaces each node `f` rewrites with the nodes it returns (in order, in its place), and
/// counts the rewrites; `f` may add initializers and names to the graph.
fn rewrite_each(
    g: &mut Graph,
    mut f: impl FnMut(&mut Graph, &crate::ir::Node) -> Option<Vec<crate::ir::Node>>,
) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let n = g.nodes[i].clone();
        match f(g, &n) {
            Some(new) => {
                let at = i;
                i += new.len();
                g.nodes.splice(at..at + 1, new);
                count += 1;
            }
            None => i += 1,
        }
    }
    count
}

/// ArgMax / ArgMin of a float tensor over an axis of known length (up to 2^24) are row
/// reductions one stitched kernel runs, instead of the host (which would take the whole
/// tensor back: a classifier's or CTC head's logits). With the axis last (a transpose read in
/// place): m is the row's max (min); the hits are the elements equal to m, or NaN (a NaN
/// makes m NaN, and ONNX's reference picks the first NaN); the index is the least hit's
/// column (select_last_index: the greatest): a min (max) over the columns, a constant `[n]` of
/// f32 (exact up to 2^24), where hit, else n (-1); cast to int64. keepdims 0 squeezes the last
/// axis (the other axes kept their order); keepdims 1 unsqueezes it back in place.
fn arg_reductions_as_row_reductions(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    use crate::ir::{Compare, Logic, ReduceKind};
    rewrite_each(g, |g, n| {
        let Op::Opaque { domain, op_type, .. } = &n.op else { return None };
        let max = match op_type.as_str() {
            "ArgMax" => true,
            "ArgMin" => false,
            _ => return None,
        };
        if !(domain.is_empty() || domain == "ai.onnx") {
            return None;
        }
        let a = n.op.attrs();
        let (axis, keep, last) =
            (a.int_or("axis", 0)?, a.int_or("keepdims", 1)? != 0, a.int_or("select_last_index", 0)? != 0);
        let (x, [y]) = (n.input(0)?, &n.outputs[..]) else { return None };
        let ty = g.types.get(x)?;
        let rank = ty.shape.as_ref()?.rank();
        if !matches!(ty.dtype, DType::F32 | DType::F16 | DType::BF16) || rank == 0 {
            return None;
        }
        let k = usize::try_from(if axis < 0 { axis + rank as i64 } else { axis }).ok().filter(|&k| k < rank)?;
        let len = ty.shape.as_ref()?.0[k].known().filter(|&l| l > 0 && l <= 1 << 24)?;
        let mut name = |stem: &str| fresh_name(g, taken, &format!("{}.{stem}", n.name));
        let [rows, extreme, equal, itself, nan, hit, cols, none, picked, index, cast, axes, squeeze, back, at] = [
            "rows", "extreme", "equal", "itself", "nan", "hit", "columns", "none", "picked", "index", "int64", "axes",
            "squeeze", "back", "axis",
        ]
        .map(&mut name);
        g.initializers
            .insert(cols.clone(), Arc::new(Tensor::from_f32(vec![len], (0..len).map(|c| c as f32).collect())));
        let miss = if last { -1.0 } else { len as f32 };
        g.initializers.insert(none.clone(), Arc::new(Tensor::from_f32(vec![], vec![miss])));
        let over_last = |kind| Op::Reduce { kind, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
        let (by_value, by_column) = match (max, last) {
            (true, false) => (ReduceKind::Max, ReduceKind::Min),
            (true, true) => (ReduceKind::Max, ReduceKind::Max),
            (false, false) => (ReduceKind::Min, ReduceKind::Min),
            (false, true) => (ReduceKind::Min, ReduceKind::Max),
        };
        let some = |t: &String| Some(t.clone());
        let mut out = Vec::new();
        let to_last: Vec<usize> = (0..rank).filter(|&d| d != k).chain([k]).collect();
        let xs = if k + 1 == rank {
            x.to_string()
        } else {
            out.push(node(
                rows.clone(),
                Op::Transpose { perm: Some(to_last.clone()) },
                vec![Some(x.to_string())],
                rows.clone(),
            ));
            rows.clone()
        };
        out.extend([
            node(extreme.clone(), over_last(by_value), vec![some(&xs)], extreme.clone()),
            node(equal.clone(), Op::Compare(Compare::Equal), vec![some(&xs), some(&extreme)], equal.clone()),
            node(itself.clone(), Op::Compare(Compare::Equal), vec![some(&xs), some(&xs)], itself.clone()),
            node(nan.clone(), Op::Not, vec![some(&itself)], nan.clone()),
            node(hit.clone(), Op::Logic(Logic::Or), vec![some(&equal), some(&nan)], hit.clone()),
            node(picked.clone(), Op::Where, vec![some(&hit), some(&cols), some(&none)], picked.clone()),
            // The index keeps the node's name (hosts map kernels back to model nodes by name).
            node(n.name.clone(), over_last(by_column), vec![some(&picked)], index.clone()),
        ]);
        let to_int = |output: String| {
            node(cast.clone(), Op::Cast { to: DType::I64, saturate: true }, vec![some(&index)], output)
        };
        if keep && k + 1 == rank {
            out.push(to_int(y.clone()));
        } else {
            // The reduced axis squeezed; kept, it comes back at k as an Unsqueeze: views both.
            g.initializers.insert(axes.clone(), Arc::new(Tensor::from_i64(vec![1], vec![-1])));
            out.push(to_int(cast.clone()));
            if keep {
                g.initializers.insert(at.clone(), Arc::new(Tensor::from_i64(vec![1], vec![k as i64])));
                out.push(node(squeeze, Op::Squeeze, vec![some(&cast), some(&axes)], back.clone()));
                out.push(node(back.clone(), Op::Unsqueeze, vec![some(&back), Some(at)], y.clone()));
            } else {
                out.push(node(squeeze, Op::Squeeze, vec![some(&cast), some(&axes)], y.clone()));
            }
        }
        Some(out)
    })
}

/// Mod of int64 tensors (a recogniser's widths rounded to its stride, a frame count) is int64
/// arithmetic the stitched kernels compute: r = a - (a / b) * b (C's remainder, division
/// truncating toward zero) for fmod 1; for fmod 0 (Python's, the divisor's sign) r + b where
/// r is not zero and its sign differs from b's. Other types stay with the host.
fn int_remainders(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    use crate::ir::{Binary, Compare, Logic};
    rewrite_each(g, |g, n| {
        let Op::Opaque { domain, op_type, .. } = &n.op else { return None };
        if !(domain.is_empty() || domain == "ai.onnx") || op_type != "Mod" || n.inputs.len() != 2 {
            return None;
        }
        let fmod = n.op.attrs().int_or("fmod", 0)? != 0;
        let (a, b, [y]) = (n.input(0)?, n.input(1)?, &n.outputs[..]) else { return None };
        let int64 = |t: &str| g.types.get(t).is_some_and(|ty| ty.dtype == DType::I64 && ty.shape.is_some());
        if !(int64(a) && int64(b) && int64(y)) {
            return None;
        }
        let mut name = |stem: &str| fresh_name(g, taken, &format!("{}.{stem}", n.name));
        let [quotient, product, rem, zero, nonzero_eq, nonzero, r_neg, b_neg, signs, fix, shifted, select] = [
            "quotient",
            "product",
            "remainder",
            "zero",
            "is_zero",
            "nonzero",
            "r_negative",
            "b_negative",
            "signs_differ",
            "fix",
            "shifted",
            "select",
        ]
        .map(&mut name);
        let (a, b) = (Some(a.to_string()), Some(b.to_string()));
        let some = |t: &String| Some(t.clone());
        let out = |t: &String| if fmod { y.clone() } else { t.clone() };
        let mut nodes = vec![
            node(quotient.clone(), Op::Binary(Binary::Div), vec![a.clone(), b.clone()], quotient.clone()),
            node(product.clone(), Op::Binary(Binary::Mul), vec![some(&quotient), b.clone()], product.clone()),
            // The remainder keeps the node's name (hosts map kernels back to model nodes by name).
            node(n.name.clone(), Op::Binary(Binary::Sub), vec![a, some(&product)], out(&rem)),
        ];
        if !fmod {
            g.initializers.insert(zero.clone(), Arc::new(Tensor::from_i64(vec![], vec![0])));
            let less = Op::Compare(Compare::Less);
            nodes.extend([
                node(
                    nonzero_eq.clone(),
                    Op::Compare(Compare::Equal),
                    vec![some(&rem), some(&zero)],
                    nonzero_eq.clone(),
                ),
                node(nonzero.clone(), Op::Not, vec![some(&nonzero_eq)], nonzero.clone()),
                node(r_neg.clone(), less.clone(), vec![some(&rem), some(&zero)], r_neg.clone()),
                node(b_neg.clone(), less, vec![b.clone(), some(&zero)], b_neg.clone()),
                node(signs.clone(), Op::Logic(Logic::Xor), vec![some(&r_neg), some(&b_neg)], signs.clone()),
                node(fix.clone(), Op::Logic(Logic::And), vec![some(&nonzero), some(&signs)], fix.clone()),
                node(shifted.clone(), Op::Binary(Binary::Add), vec![some(&rem), b], shifted.clone()),
                node(select, Op::Where, vec![some(&fix), some(&shifted), some(&rem)], y.clone()),
            ]);
        }
        Some(nodes)
    })
}

/// A Softmax, LogSoftmax or single-axis reduction (keeping its axis) over another axis than
/// the last becomes Transpose (that axis last) -> the op over the last axis -> Transpose back:
/// stitched kernels reduce along rows, the first transpose is a view they read in place, and
/// the second usually meets another transpose (a detection head's DFL softmax reads one, and
/// an NHWC conv region's entry undoes the other) and composes or cancels with it; after a
/// reduction it moves an axis of one element. Needs the input's rank.
fn row_ops_to_last_axis(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let (axis, over_last) = match &n.op {
            Op::Softmax { axis } => (*axis, Op::Softmax { axis: -1 }),
            Op::LogSoftmax { axis } => (*axis, Op::LogSoftmax { axis: -1 }),
            Op::Reduce { kind, axes: Some(axes), keepdims: true, noop_with_empty_axes } if axes.len() == 1 => {
                let over_last = Op::Reduce {
                    kind: *kind,
                    axes: Some(vec![-1]),
                    keepdims: true,
                    noop_with_empty_axes: *noop_with_empty_axes,
                };
                (axes[0], over_last)
            }
            _ => return None,
        };
        let rank = n.input(0).and_then(|x| g.types.get(x)?.shape.as_ref()).map(|s| s.rank())?;
        let (x, [y]) = (n.input(0)?, &n.outputs[..]) else { return None };
        let k = if axis < 0 { axis + rank as i64 } else { axis };
        if k < 0 || k as usize >= rank.saturating_sub(1) {
            return None;
        }
        let k = k as usize;
        let to_last: Vec<usize> = (0..rank).filter(|&d| d != k).chain([k]).collect();
        let mut back = vec![0; rank];
        for (i, &d) in to_last.iter().enumerate() {
            back[d] = i;
        }
        let t_in = fresh_name(g, taken, &format!("{}.to_last_axis", n.name));
        let s_out = fresh_name(g, taken, &format!("{y}.last_axis"));
        let t_out = fresh_name(g, taken, &format!("{}.from_last_axis", n.name));
        Some(vec![
            node(t_in.clone(), Op::Transpose { perm: Some(to_last) }, vec![Some(x.to_string())], t_in.clone()),
            node(n.name.clone(), over_last, vec![Some(t_in)], s_out.clone()),
            node(t_out, Op::Transpose { perm: Some(back) }, vec![Some(s_out)], y.clone()),
        ])
    })
}

/// `Transpose(Transpose(x, p), q)` whose first transpose nobody else reads is one
/// `Transpose(x, p . q)` (element i of the result's dims is `p[q[i]]`); pairs that undo each
/// other are left to [`super::layout::cancel_inverse_transposes`].
pub(super) fn compose_transposes(g: &mut Graph) -> usize {
    let mut count = 0;
    loop {
        let readers = super::edit::consumers(g);
        let producer: std::collections::HashMap<&str, usize> =
            g.nodes.iter().enumerate().flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.as_str(), i))).collect();
        let pair = g.nodes.iter().enumerate().find_map(|(b, nb)| {
            let Op::Transpose { perm: Some(q) } = &nb.op else { return None };
            let y = nb.input(0)?;
            let a = *producer.get(y)?;
            let Op::Transpose { perm: Some(p) } = &g.nodes[a].op else { return None };
            let alone = readers.get(y).is_some_and(|r| r.len() == 1) && !g.outputs.iter().any(|o| o == y);
            let composed: Vec<usize> = q.iter().map(|&d| p.get(d).copied()).collect::<Option<_>>()?;
            let identity = composed.iter().enumerate().all(|(i, &d)| i == d);
            (alone && p.len() == q.len() && !identity).then_some((a, b, composed))
        });
        let Some((a, b, composed)) = pair else { return count };
        let x = g.nodes[a].inputs[0].clone();
        g.nodes[b].inputs[0] = x;
        g.nodes[b].op = Op::Transpose { perm: Some(composed) };
        g.nodes.remove(a);
        count += 1;
    }
}

/// A 1-D or 2-D ConvTranspose of constant weight (explicit pads, no output_shape) as a Conv:
/// y[o, p] = sum over c, i of x[c, (p + pad - i * d) / s] * w[c, o, i] where the quotient is
/// whole, which is the stride-1 Conv of x with s - 1 zeros after each element by the weight
/// flipped in space and with its channel axes swapped (per group), padded by d * (k - 1) -
/// pad (the end also by output_padding, and less the trailing s - 1 zeros; a negative pad
/// crops). Zeros go in per strided axis as Unsqueeze -> Pad (a glue kernel) -> Reshape merging
/// the two axes; an axis other than the last needs the sizes after it known.
fn conv_transposes_as_convs(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    rewrite_each(g, |g, n| {
        let Op::ConvTranspose { window, group, output_padding, output_shape: None } = &n.op else { return None };
        if window.auto_pad != AutoPad::NotSet || *group == 0 {
            return None;
        }
        let (x, [y]) = (n.input(0)?, &n.outputs[..]) else { return None };
        let w = constant(g, n.input(1)?)?;
        let xt = g.types.get(x)?.clone();
        let shape = xt.shape.as_ref()?;
        let rank = shape.rank();
        if !(3..=4).contains(&rank) || w.rank() != rank || !w.dtype().is_float() {
            return None;
        }
        let sp = rank - 2;
        let k: Vec<usize> = w.shape[2..].to_vec();
        let per = |v: &Option<Vec<usize>>, len: usize, default: usize| match v {
            Some(v) if v.len() == len => Some(v.clone()),
            None => Some(vec![default; len]),
            Some(_) => None,
        };
        let strides = per(&window.strides, sp, 1)?;
        let dil = per(&window.dilations, sp, 1)?;
        let pads = per(&window.pads, 2 * sp, 0)?;
        let extra = per(output_padding, sp, 0)?;
        if window.kernel_shape.as_ref().is_some_and(|ks| *ks != k) || strides.contains(&0) || dil.contains(&0) {
            return None;
        }
        // Zeros between elements along axis 2 + a need the sizes after it (the merge's target).
        let first = (0..sp).find(|&a| strides[a] > 1);
        if let Some(a) = first {
            if shape.0[2 + a + 1..].iter().any(|d| d.known().is_none()) {
                return None;
            }
        }
        // The weight: [C_in, C_out / g, k..] -> [C_out, C_in / g, k..] per group, flipped.
        let (c_in, c_out_g, groups) = (w.shape[0], w.shape[1], *group);
        if c_in % groups != 0 {
            return None;
        }
        let c_in_g = c_in / groups;
        let taps: usize = k.iter().product();
        let v = w.to_f64_vec();
        let mut wt = vec![0.0; v.len()];
        for gi in 0..groups {
            for c in 0..c_in_g {
                for o in 0..c_out_g {
                    for t in 0..taps {
                        // Reversing the flat tap index reverses every spatial axis.
                        wt[((gi * c_out_g + o) * c_in_g + c) * taps + (taps - 1 - t)] =
                            v[((gi * c_in_g + c) * c_out_g + o) * taps + t];
                    }
                }
            }
        }
        let mut wshape = w.shape.clone();
        wshape[0] = groups * c_out_g;
        wshape[1] = c_in_g;
        let wt = Tensor::from_f64_as(w.dtype(), wshape, &wt)?;
        let mut out = Vec::new();
        let wname = fresh_name(g, taken, &format!("{}.as_conv", n.input(1)?));
        g.initializers.insert(wname.clone(), Arc::new(wt));
        let named = |stem: &str| format!("{}.{stem}", n.name);
        // The conv's pads: d * (k - 1) - pad (the end also + output_padding), less the zeros
        // the spread puts before the first element and after the last: s - 1 split between
        // them to even the two sides (the kernels pad symmetrically; what stays uneven is
        // `asymmetric_conv_pads`'), and negative ones crop.
        let mut begin = Vec::with_capacity(sp);
        let mut end = Vec::with_capacity(sp);
        let mut spread = Vec::with_capacity(sp);
        for a in 0..sp {
            let reach = (dil[a] * (k[a] - 1)) as i64;
            let (b, e, s) = (reach - pads[a] as i64, reach - pads[sp + a] as i64 + extra[a] as i64, strides[a] as i64);
            let before = ((s - 1 + b - e) / 2).clamp(0, s - 1);
            spread.push((before, s - 1 - before));
            begin.push(b - before);
            end.push(e - (s - 1 - before));
        }
        let mut cur = x.to_string();
        let mut cur_shape = shape.0.clone();
        // From the last axis back, so the sizes a merge copies with 0 are those before it.
        for a in (0..sp).rev().filter(|&a| strides[a] > 1) {
            let ax = 2 + a;
            let stem = format!("zeros{a}");
            let unsq = int_const(g, taken, &named(&format!("{stem}.axes")), vec![ax as i64 + 1]);
            let padv: Vec<i64> = (0..2 * (rank + 1))
                .map(|i| match i {
                    i if i == ax + 1 => spread[a].0,
                    i if i == rank + 1 + ax + 1 => spread[a].1,
                    _ => 0,
                })
                .collect();
            let padn = int_const(g, taken, &named(&format!("{stem}.pads")), padv);
            let mut target: Vec<i64> = vec![0; ax];
            target.push(-1);
            for d in &cur_shape[ax + 1..] {
                target.push(d.known()? as i64);
            }
            let tname = int_const(g, taken, &named(&format!("{stem}.merged_shape")), target);
            let names: Vec<String> = ["spread", "spaced", "merged"]
                .iter()
                .map(|k| fresh_name(g, taken, &format!("{}.{stem}.{k}", n.name)))
                .collect();
            out.push(node(names[0].clone(), Op::Unsqueeze, vec![Some(cur.clone()), Some(unsq)], names[0].clone()));
            out.push(node(
                names[1].clone(),
                Op::Pad { mode: crate::ir::PadMode::Constant },
                vec![Some(names[0].clone()), Some(padn)],
                names[1].clone(),
            ));
            out.push(node(
                names[2].clone(),
                Op::Reshape { allowzero: false },
                vec![Some(names[1].clone()), Some(tname)],
                names[2].clone(),
            ));
            cur = names[2].clone();
            cur_shape[ax] = match cur_shape[ax] {
                crate::ir::Dim::Known(l) => crate::ir::Dim::Known(l * strides[a]),
                _ => crate::ir::Dim::Unknown,
            };
        }
        let cropped: Vec<usize> = (0..sp).filter(|&a| begin[a] < 0 || end[a] < 0).collect();
        if !cropped.is_empty() {
            let starts = cropped.iter().map(|&a| (-begin[a]).max(0)).collect();
            let ends = cropped.iter().map(|&a| if end[a] < 0 { end[a] } else { i64::MAX }).collect();
            let axes = cropped.iter().map(|&a| 2 + a as i64).collect();
            let inputs = vec![
                Some(cur.clone()),
                Some(int_const(g, taken, &named("crop_starts"), starts)),
                Some(int_const(g, taken, &named("crop_ends"), ends)),
                Some(int_const(g, taken, &named("crop_axes"), axes)),
            ];
            let name = fresh_name(g, taken, &format!("{}.crop", n.name));
            out.push(node(name.clone(), Op::Slice, inputs, name.clone()));
            cur = name;
        }
        let conv_pads: Vec<usize> = begin.iter().chain(&end).map(|&p| p.max(0) as usize).collect();
        let conv_window = Window {
            kernel_shape: Some(k),
            strides: None,
            pads: Some(conv_pads),
            dilations: Some(dil),
            auto_pad: AutoPad::NotSet,
        };
        let mut inputs = vec![Some(cur), Some(wname)];
        if let Some(b) = n.input(2) {
            inputs.push(Some(b.to_string()));
        }
        // The conv keeps the node's name (hosts map kernels back to model nodes by name).
        out.push(crate::ir::Node {
            name: n.name.clone(),
            op: Op::Conv { window: conv_window, group: groups },
            inputs,
            outputs: vec![y.clone()],
        });
        Some(out)
    })
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
