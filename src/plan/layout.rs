//! Pass 2: conv kernels run NHWC (Bolt's CUTLASS convs are NHWC / KRSC). NCHW models get one
//! transpose where data enters a region of consecutive conv kernels and one where it leaves,
//! never a pair around every conv: a tensor that only conv kernels read (as their input or
//! residual) stays NHWC between them. Conv weights are converted to OHWI once, here.
//!
//! A region's exit transform is moved past the layout-agnostic ops that read it (element-wise
//! ops, Concat and Slice on any axis, Resize, and 2-D pools, which become channels-last pools),
//! which then run on the NHWC tensor with their axis arguments permuted; where it meets the next region's entry transform both vanish, so a
//! transform remains only where an op truly needs NCHW (or at a graph output).
//!
//! The transposes are standalone kernels for now; folding the entry one into the first
//! conv's loads and the exit one into the last conv's epilogue store needs codegen support.

use super::edit::{consumers, finish, fresh_name, into_ohwi, node};
use crate::error::{Error, Result};
use crate::ir::{ConvLayout, FusedKernel, Graph, Node, Op};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
pub const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Direction {
    NchwToNhwc,
    NhwcToNchw,
}

/// One inserted layout transform.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Transform {
    /// The NCHW tensor of the model that is converted (at a region's entry) or produced (at
    /// its exit).
    pub tensor: String,
    pub direction: Direction,
    /// The kernel next to it: the region's first conv reading it, or the last one writing it.
    pub kernel: String,
    /// Region of consecutive NHWC conv kernels (numbered in graph order).
    pub region: usize,
}

fn is_conv(n: &Node) -> bool {
    matches!(&n.op, Op::Fused(k) if matches!(*k.anchor, Op::Conv { .. }))
}

/// Rewrites every conv kernel of `g` to NHWC. Returns the transforms inserted.
pub fn to_nhwc(g: &mut Graph) -> Result<Vec<Transform>> {
    let convs: HashSet<usize> = (0..g.nodes.len()).filter(|&i| is_conv(&g.nodes[i])).collect();
    if convs.is_empty() {
        return Ok(Vec::new());
    }
    // Weights are taken out of `g` below (a sole reader's 1x1 weight changes shape in place),
    // so the snapshot the rules read holds no initializers.
    let mut old = g.clone();
    old.initializers = HashMap::new();
    let cons = consumers(&old);
    // A conv output stays NHWC when conv kernels are all that read it, as input or residual.
    let stays_nhwc = |t: &str| {
        !old.outputs.iter().any(|o| o == t)
            && cons.get(t).is_some_and(|c| c.iter().all(|&(i, k)| convs.contains(&i) && (k == 0 || k == 3)))
    };
    let producer: HashMap<&str, usize> =
        old.nodes.iter().enumerate().flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.as_str(), i))).collect();
    let nhwc_tensor = |t: &str| producer.get(t).is_some_and(|p| convs.contains(p)) && stays_nhwc(t);

    // Regions: convs joined by tensors that stay NHWC (union-find over node indices).
    let mut parent: Vec<usize> = (0..g.nodes.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    for &i in &convs {
        let t = &old.nodes[i].outputs[0];
        if nhwc_tensor(t) {
            for &(j, _) in &cons[t.as_str()] {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a] = b;
            }
        }
    }
    let mut region_ids: HashMap<usize, usize> = HashMap::new();
    let mut sorted: Vec<usize> = convs.iter().copied().collect();
    sorted.sort_unstable();
    for &i in &sorted {
        let r = root(&mut parent, i);
        let next = region_ids.len();
        region_ids.entry(r).or_insert(next);
    }

    let mut taken = HashSet::new();
    let mut inserted: Vec<Node> = Vec::new();
    let mut transforms = Vec::new();
    let mut transform_nodes: Vec<String> = Vec::new();
    // NHWC versions of NCHW tensors: a conv output that leaves its region is written NHWC by
    // the kernel (then transposed for the other readers), so conv readers take that directly.
    let mut entry: HashMap<String, String> = HashMap::new();
    for &i in &sorted {
        let out = &old.nodes[i].outputs[0];
        if !nhwc_tensor(out) {
            entry.insert(out.clone(), fresh_name(&old, &mut taken, &format!("{out}.nhwc")));
        }
    }
    let mut new_weights = HashMap::new();
    for &i in &sorted {
        let region = region_ids[&root(&mut parent, i)];
        let n = &old.nodes[i];
        let Op::Fused(k) = &n.op else { unreachable!("is_conv") };
        let mut inputs = n.inputs.clone();
        for slot in [0, 3] {
            let Some(Some(x)) = n.inputs.get(slot) else { continue };
            if nhwc_tensor(x) {
                continue;
            }
            let t = match entry.get(x) {
                Some(t) => t.clone(),
                None => {
                    let t = fresh_name(&old, &mut taken, &format!("{x}.nhwc"));
                    let name = fresh_name(&old, &mut taken, &format!("{x}.to_nhwc"));
                    inserted.push(node(
                        name.clone(),
                        Op::Transpose { perm: Some(TO_NHWC.to_vec()) },
                        vec![Some(x.clone())],
                        t.clone(),
                    ));
                    transform_nodes.push(name);
                    transforms.push(Transform {
                        tensor: x.clone(),
                        direction: Direction::NchwToNhwc,
                        kernel: n.name.clone(),
                        region,
                    });
                    entry.insert(x.clone(), t.clone());
                    t
                }
            };
            inputs[slot] = Some(t);
        }
        // Weights: OIHW -> OHWI once when constant, else a transpose node.
        let w = n.input(1).ok_or_else(|| Error::node(n, "conv kernel without a weight"))?.to_string();
        let sole_reader = cons.get(&w).is_some_and(|c| c.len() == 1) && !old.outputs.contains(&w);
        let weight = match g.initializers.get(&w) {
            Some(_) if sole_reader => g.initializers.remove(&w),
            Some(t) => Some(t.clone()),
            None => super::edit::constant(&old, &w),
        };
        match weight {
            Some(t) => {
                let name = fresh_name(&old, &mut taken, &format!("{w}.ohwi"));
                let shape = t.shape.clone();
                let p = into_ohwi(t)
                    .ok_or_else(|| Error::node(n, format!("weight '{w}' of shape {shape:?} is not 4-D")))?;
                new_weights.insert(name.clone(), Arc::new(p));
                inputs[1] = Some(name);
            }
            None => {
                let t = fresh_name(&old, &mut taken, &format!("{w}.ohwi"));
                let name = fresh_name(&old, &mut taken, &format!("{w}.to_ohwi"));
                inserted.push(node(
                    name,
                    Op::Transpose { perm: Some(TO_NHWC.to_vec()) },
                    vec![Some(w.clone())],
                    t.clone(),
                ));
                inputs[1] = Some(t);
            }
        }
        let out = &n.outputs[0];
        let mut outputs = n.outputs.clone();
        if !nhwc_tensor(out) {
            let t = entry[out].clone();
            let name = fresh_name(&old, &mut taken, &format!("{out}.to_nchw"));
            inserted.push(node(
                name.clone(),
                Op::Transpose { perm: Some(TO_NCHW.to_vec()) },
                vec![Some(t.clone())],
                out.clone(),
            ));
            transform_nodes.push(name);
            transforms.push(Transform {
                tensor: out.clone(),
                direction: Direction::NhwcToNchw,
                kernel: n.name.clone(),
                region,
            });
            outputs[0] = t;
        }
        let kernel = FusedKernel { layout: ConvLayout::Nhwc, ..(**k).clone() };
        g.nodes[i] = Node { name: n.name.clone(), op: Op::Fused(Arc::new(kernel)), inputs, outputs };
    }
    g.nodes.extend(inserted);
    g.initializers.extend(new_weights);
    let mut placed: Vec<(String, Transform)> = transform_nodes.into_iter().zip(transforms).collect();
    sink_exit_transforms(g, &mut taken, &mut placed)?;
    // An exit that reached the model's own transpose (a CRNN's [N, C, W] -> [W, N, C]) is
    // one transpose with it.
    super::canonical::compose_transposes(g);
    cancel_inverse_transposes(g);
    unit_axis_transposes_as_views(g, &mut taken);
    // A transform whose transpose cancelled against the model's own, or against another
    // region's entry once sunk through layout-agnostic ops, is not done at all.
    let live: HashSet<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    let transforms = placed.into_iter().filter(|(n, _)| live.contains(n.as_str())).map(|(_, t)| t).collect();
    finish(g)?;
    Ok(transforms)
}

/// A Transpose that moves only axes of one (NWC held as [N, W, 1, C] read as [N, 1, W, C])
/// keeps the element order: it becomes a Squeeze of those axes and an Unsqueeze where they go,
/// views instead of a copy.
fn unit_axis_transposes_as_views(g: &mut Graph, taken: &mut HashSet<String>) {
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let Op::Transpose { perm: Some(perm) } = &n.op else { continue };
        let Some(shape) = n.input(0).and_then(|x| g.tensor_type(x)).and_then(|t| t.shape.clone()) else { continue };
        if shape.rank() != perm.len() {
            continue;
        }
        let unit = |a: usize| shape.0[a].known() == Some(1);
        let kept: Vec<usize> = perm.iter().copied().filter(|&a| !unit(a)).collect();
        if kept.windows(2).any(|w| w[0] > w[1]) || perm.iter().enumerate().all(|(i, &p)| i == p) {
            continue;
        }
        let dropped: Vec<i64> = (0..perm.len()).filter(|&a| unit(a)).map(|a| a as i64).collect();
        let inserted: Vec<i64> = (0..perm.len()).filter(|&i| unit(perm[i])).map(|i| i as i64).collect();
        let (x, y, name) = (n.inputs[0].clone(), n.outputs[0].clone(), n.name.clone());
        let i64s = |v: Vec<i64>| Arc::new(crate::ir::Tensor::from_i64(vec![v.len()], v));
        let (da, ia) =
            (fresh_name(g, taken, &format!("{name}.unit_axes")), fresh_name(g, taken, &format!("{name}.placed")));
        let squeezed = fresh_name(g, taken, &format!("{y}.squeezed"));
        g.initializers.insert(da.clone(), i64s(dropped));
        g.initializers.insert(ia.clone(), i64s(inserted));
        // A new name: the model's Transpose is gone, as a cancelled one is.
        let unsqueeze = fresh_name(g, taken, &format!("{name}.unsqueeze"));
        g.nodes[i] = node(unsqueeze, Op::Unsqueeze, vec![Some(squeezed.clone()), Some(ia)], y);
        let squeeze = node(fresh_name(g, taken, &format!("{name}.squeeze")), Op::Squeeze, vec![x, Some(da)], squeezed);
        g.nodes.push(squeeze);
    }
}

/// Removes `Transpose(Transpose(x, p), q)` where q undoes p: its readers read `x`. Models that
/// keep activations NHWC around an NCHW Conv (TensorFlow exports, TVM's NHWC convs handed to
/// Bolt as ONNX) have such pairs once the region boundary transposes are in. A transpose whose
/// result is a graph output stays; one nobody reads any more is dropped.
pub fn cancel_inverse_transposes(g: &mut Graph) -> usize {
    let perm_of = |op: &Op, rank: usize| match op {
        Op::Transpose { perm: Some(p) } => Some(p.clone()),
        Op::Transpose { perm: None } => Some((0..rank).rev().collect()),
        _ => None,
    };
    let mut cancelled = 0;
    loop {
        let producer: HashMap<&str, usize> =
            g.nodes.iter().enumerate().flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.as_str(), i))).collect();
        let pair = g.nodes.iter().enumerate().find_map(|(b, nb)| {
            let q = perm_of(&nb.op, 0).filter(|q| !q.is_empty())?;
            let y = nb.input(0)?;
            let a = *producer.get(y)?;
            let p = perm_of(&g.nodes[a].op, q.len())?;
            let undone = p.len() == q.len() && (0..q.len()).all(|i| p[q[i]] == i);
            if !undone {
                return None;
            }
            // Control flow reads outer values by name inside its bodies too: those stay.
            let control = |n: &Node| matches!(n.op, Op::If { .. } | Op::Loop { .. } | Op::Scan(_));
            if g.nodes.iter().any(|n| control(n) && n.inputs.iter().flatten().any(|i| *i == nb.outputs[0])) {
                return None;
            }
            if !g.outputs.contains(&nb.outputs[0]) {
                return Some((a, b, None));
            }
            // The pair ends in a graph output: the node producing `x` may write it under the
            // output's name instead, when the first transpose is its only reader.
            let x = g.nodes[a].input(0)?;
            let readers = g.nodes.iter().filter(|n| n.inputs.iter().flatten().any(|i| i == x)).count();
            let px = *producer.get(x)?;
            (readers == 1 && !g.outputs.iter().any(|o| o == x)).then_some((a, b, Some(px)))
        });
        let Some((a, b, rename)) = pair else { break };
        let x = g.nodes[a].inputs[0].clone();
        let z = g.nodes[b].outputs[0].clone();
        if let (Some(px), Some(x)) = (rename, &x) {
            let slot = g.nodes[px].outputs.iter().position(|o| o == x).unwrap_or(0);
            g.nodes[px].outputs[slot] = z;
            let (hi, lo) = (a.max(b), a.min(b));
            g.nodes.remove(hi);
            g.nodes.remove(lo);
            cancelled += 1;
            continue;
        }
        for n in &mut g.nodes {
            for i in n.inputs.iter_mut().flatten() {
                if *i == z {
                    *i = x.clone().unwrap_or_default();
                }
            }
        }
        g.nodes.remove(b);
        let y = &g.nodes[if a > b { a - 1 } else { a }].outputs[0];
        let read = g.nodes.iter().any(|n| n.inputs.iter().flatten().any(|i| i == y)) || g.outputs.contains(y);
        if !read {
            g.nodes.remove(if a > b { a - 1 } else { a });
        }
        cancelled += 1;
    }
    cancelled
}

/// Stores constant 2-D GEMM weights K-major ([N, K]) once, at plan time: the operand layout
/// tensor-core mainloops read fastest on sm80 and the only one sm90 tf32 wgmma takes (the
/// pre-generated library's GEMMs are row-major A, column-major B). Returns the kernels changed.
pub fn weights_k_major(g: &mut Graph) -> Result<Vec<String>> {
    let cons = consumers(g);
    let mut taken = HashSet::new();
    let mut changed = Vec::new();
    for i in 0..g.nodes.len() {
        let n = &g.nodes[i];
        let Op::Fused(k) = &n.op else { continue };
        let k_major = match &*k.anchor {
            Op::MatMul => false,
            Op::Gemm { trans_a: false, trans_b, .. } => *trans_b,
            _ => continue,
        };
        let Some(w) = n.input(1).map(str::to_string) else { continue };
        let Some(t) = g.initializers.get(&w).cloned() else { continue };
        if k_major || k.weight_transposed || t.rank() != 2 {
            continue;
        }
        let wt = super::edit::transpose_2d(&t).ok_or_else(|| Error::node(n, format!("weight '{w}' is not 2-D")))?;
        let name = fresh_name(g, &mut taken, &format!("{w}.kmajor"));
        if cons.get(&w).is_some_and(|c| c.len() == 1) && !g.outputs.contains(&w) {
            g.initializers.remove(&w);
        }
        g.initializers.insert(name.clone(), Arc::new(wt));
        let kernel = FusedKernel { weight_transposed: true, ..(**k).clone() };
        changed.push(n.name.clone());
        g.nodes[i].op = Op::Fused(Arc::new(kernel));
        g.nodes[i].inputs[1] = Some(name);
    }
    if !changed.is_empty() {
        finish(g)?;
    }
    Ok(changed)
}

/// Whether `op` computes the same on a transposed tensor once its axis arguments are
/// permuted (element-wise ops, Concat, Slice, Resize, the views that add or drop axes), or
/// (pools, DepthToSpace, on NHWC only) runs on it as [`Op::ChannelsLast`].
fn layout_agnostic(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_)
            | Op::Binary(_)
            | Op::Clip
            | Op::Cast { .. }
            | Op::Concat { .. }
            | Op::Slice
            | Op::Resize(_)
            | Op::MaxPool { .. }
            | Op::AveragePool { .. }
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool
            | Op::DepthToSpace { .. }
            | Op::Squeeze
            | Op::Unsqueeze
            | Op::Reshape { .. }
            | Op::Flatten { .. }
    )
}

/// The run of axes of `from` a Reshape to `to` merges into one (the dims before and after it
/// equal), as axes of `from`.
fn merged_axis(from: &crate::ir::Shape, to: &crate::ir::Shape) -> Option<std::ops::Range<usize>> {
    use crate::ir::Dim;
    let same = |x: &Dim, y: &Dim| !matches!(x, Dim::Unknown) && x == y;
    let (r, q) = (from.rank(), to.rank());
    if q >= r || q == 0 {
        return None;
    }
    let start = (0..q).take_while(|&i| same(&from.0[i], &to.0[i])).count().min(q - 1);
    let after = q - start - 1;
    let tail_same = (0..after).all(|i| same(&from.0[r - 1 - i], &to.0[q - 1 - i]));
    tail_same.then_some(start..r - after)
}

/// A Reshape or Flatten from `from` to `to` that only drops and inserts axes of one (the
/// other dims equal, in order): (axes of `from` dropped, axes of `to` inserted).
fn unit_axes_view(from: &crate::ir::Shape, to: &crate::ir::Shape) -> Option<(Vec<i64>, Vec<i64>)> {
    use crate::ir::Dim;
    let unit = |d: &Dim| d.known() == Some(1);
    let kept = |s: &crate::ir::Shape| s.0.iter().filter(|d| !unit(d)).cloned().collect::<Vec<_>>();
    let (a, b) = (kept(from), kept(to));
    let same = a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| !matches!(x, Dim::Unknown) && x == y);
    let units = |s: &crate::ir::Shape| s.0.iter().enumerate().filter(|(_, d)| unit(d)).map(|(i, _)| i as i64).collect();
    same.then(|| (units(from), units(to)))
}

/// Axis `a` of the model's (logical) tensor, negative counting from the end, as an axis of
/// the physical tensor that `Transpose(perm)` turns into it.
fn physical_axis(perm: &[usize], a: i64) -> Option<i64> {
    let r = perm.len() as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then(|| perm[a as usize] as i64)
}

/// A model-side constant operand of a broadcasting op, for the physical side of `perm`: one
/// value stays as it is; a tensor of lower rank is aligned to the rank and transposed.
fn physical_constant(perm: &[usize], t: &crate::ir::Tensor) -> Option<crate::ir::Tensor> {
    if t.len() == 1 && t.rank() <= perm.len() {
        return Some(t.clone());
    }
    if t.rank() > perm.len() {
        return None;
    }
    let mut shape = vec![1; perm.len() - t.rank()];
    shape.extend(&t.shape);
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    let aligned = t.reshaped(shape);
    crate::reference::eval_op(&Op::Transpose { perm: Some(inverse) }, &[Some(&aligned)]).ok()?.pop()
}

/// Squeeze of the model's `axes` on the physical side of `perm`: (physical axes, the perm
/// that turns the squeezed physical tensor into the model's).
fn squeezed(perm: &[usize], axes: &[i64]) -> Option<(Vec<i64>, Vec<usize>)> {
    let axes: Vec<usize> = axes
        .iter()
        .map(|&a| physical_axis(perm, a).map(|_| a.rem_euclid(perm.len() as i64) as usize))
        .collect::<Option<_>>()?;
    let gone: HashSet<usize> = axes.iter().map(|&a| perm[a]).collect();
    let kept: Vec<usize> = (0..perm.len()).filter(|i| !axes.contains(i)).map(|i| perm[i]).collect();
    let out = kept.iter().map(|&p| kept.iter().filter(|&&q| q < p).count()).collect();
    let mut physical: Vec<i64> = gone.into_iter().map(|a| a as i64).collect();
    physical.sort_unstable();
    Some((physical, out))
}

/// Unsqueeze at the model's `axes` (of the output) on the physical side of `perm`: each unit
/// axis goes in just before the physical axis of the model axis that follows it, so an NCW
/// tensor held as NWC unsqueezed at 2 is held as NHWC. (physical axes, the output's perm).
fn unsqueezed(perm: &[usize], axes: &[i64]) -> Option<(Vec<i64>, Vec<usize>)> {
    let rank = perm.len() + axes.len();
    let mut new: Vec<usize> =
        axes.iter().map(|&a| if a < 0 { a + rank as i64 } else { a }).map(|a| a as usize).collect();
    new.sort_unstable();
    new.dedup();
    if new.len() != axes.len() || new.last().is_some_and(|&a| a >= rank) {
        return None;
    }
    // The model's output axes in physical order, then the new ones slotted in.
    let old_axes: Vec<usize> = (0..rank).filter(|a| !new.contains(a)).collect();
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    let mut order: Vec<usize> = inverse.iter().map(|&i| old_axes[i]).collect();
    for &a in &new {
        let at = (a + 1..rank)
            .find(|b| !new.contains(b))
            .and_then(|b| order.iter().position(|&o| o == b))
            .unwrap_or(order.len());
        order.insert(at, a);
    }
    let out = (0..rank).map(|a| order.iter().position(|&o| o == a).expect("every axis placed")).collect();
    let physical = new.iter().map(|a| order.iter().position(|o| o == a).expect("placed") as i64).collect();
    Some((physical, out))
}

/// The physical form of node `n` when every tensor input is an exit transform's output (all of
/// one perm) or a constant it can adapt: (inputs, op, constants to add, the output's perm).
#[allow(clippy::type_complexity)]
fn physical_form(
    g: &Graph,
    cons: &HashMap<String, Vec<(usize, usize)>>,
    n: &Node,
    exit_source: &dyn Fn(&str) -> Option<(String, Vec<usize>)>,
) -> Option<(Vec<Option<String>>, Op, Vec<(usize, crate::ir::Tensor)>, Vec<usize>)> {
    use super::edit::constant;
    let mut inputs = n.inputs.clone();
    let i64s = |v: Vec<i64>| crate::ir::Tensor::from_i64(vec![v.len()], v);
    // Tensor inputs the op broadcasts or concatenates.
    let data: Vec<usize> = match &n.op {
        Op::Binary(_) => vec![0, 1],
        Op::Concat { .. } => (0..n.inputs.len()).collect(),
        _ => vec![0],
    };
    let mut perm: Option<Vec<usize>> = None;
    let mut constants = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for &k in &data {
        let x = n.input(k)?;
        if let Some((src, p)) = exit_source(x) {
            if perm.as_ref().is_some_and(|q| *q != p) {
                return None;
            }
            perm = Some(p);
            inputs[k] = Some(src);
        } else if matches!(n.op, Op::Binary(_)) {
            match constant(g, x) {
                Some(c) => constants.push((k, c)),
                None => pending.push(x.to_string()),
            }
        } else {
            return None;
        }
    }
    let perm = perm?;
    // An activation of ones but on axes the layouts share (a mean or variance kept as
    // [N, 1, 1], one per sample) is the same tensor in both.
    let same_in_both = |t: &str| {
        let Some(s) = g.tensor_type(t).and_then(|t| t.shape.as_ref()) else { return false };
        let skip = perm.len().checked_sub(s.rank());
        skip.is_some_and(|skip| s.0.iter().enumerate().all(|(a, d)| d.known() == Some(1) || perm[a + skip] == a + skip))
    };
    if !pending.iter().all(|t| same_in_both(t)) {
        return None;
    }
    let mut consts =
        constants.into_iter().map(|(k, c)| Some((k, physical_constant(&perm, &c)?))).collect::<Option<Vec<_>>>()?;
    let nhwc = perm[..] == TO_NCHW;
    let mut out_perm = perm.clone();
    let op = match &n.op {
        Op::Clip => {
            // min / max: one value each.
            let scalar = |k: usize| n.input(k).is_none_or(|t| constant(g, t).is_some_and(|c| c.len() == 1));
            if !(scalar(1) && scalar(2)) {
                return None;
            }
            n.op.clone()
        }
        Op::Concat { axis } => Op::Concat { axis: physical_axis(&perm, *axis)? },
        Op::Slice => {
            let starts = constant(g, n.input(1)?)?;
            let axes = match n.input(3) {
                Some(a) => constant(g, a)?.as_i64_vec()?,
                None => (0..starts.len() as i64).collect(),
            };
            let axes = axes.into_iter().map(|a| physical_axis(&perm, a)).collect::<Option<Vec<_>>>()?;
            inputs.resize(inputs.len().max(4), None);
            consts.push((3, i64s(axes)));
            n.op.clone()
        }
        Op::Squeeze | Op::Unsqueeze => {
            let axes = constant(g, n.input(1)?)?.as_i64_vec()?;
            let (physical, out) =
                if matches!(n.op, Op::Squeeze) { squeezed(&perm, &axes)? } else { unsqueezed(&perm, &axes)? };
            consts.push((1, i64s(physical)));
            out_perm = out;
            n.op.clone()
        }
        Op::Reshape { .. } | Op::Flatten { .. } => {
            // Only views that drop or insert unit axes keep the element order of both layouts.
            let shape = |t: &str| g.tensor_type(t).and_then(|t| t.shape.clone());
            let (from, to) = (shape(n.input(0)?)?, shape(&n.outputs[0])?);
            let Some((dropped, inserted)) = unit_axes_view(&from, &to) else {
                // Axes merged into one that only reductions over it read (a global layer
                // norm's mean over [C, T]): the physical merge holds the same elements in
                // another order, which a sum, mean, max or min does not see.
                let merged = merged_axis(&from, &to)?;
                let reduced = |&(j, _): &(usize, usize)| {
                    let axis = |a: &i64| if *a < 0 { a + to.rank() as i64 } else { *a };
                    matches!(&g.nodes[j].op, Op::Reduce { axes: Some(a), .. }
                        if a.len() == 1 && axis(&a[0]) == merged.start as i64)
                };
                let readers = cons.get(&n.outputs[0])?;
                let physical_run: Vec<usize> = merged.clone().map(|a| perm[a]).collect();
                let (lo, hi) = (*physical_run.iter().min()?, *physical_run.iter().max()?);
                let in_place = hi - lo + 1 == merged.len()
                    && lo == merged.start
                    && (0..perm.len()).filter(|a| !merged.contains(a)).all(|a| perm[a] == a);
                if !(in_place && matches!(n.op, Op::Reshape { .. }) && readers.iter().all(reduced))
                    || g.outputs.contains(&n.outputs[0])
                {
                    return None;
                }
                return Some((inputs, n.op.clone(), consts, (0..to.rank()).collect()));
            };
            let (_, squeezed_perm) = squeezed(&perm, &dropped)?;
            let (_, out) = unsqueezed(&squeezed_perm, &inserted)?;
            // The physical shape: the model's output dims in the output perm's order, one
            // dim not known until run time written as -1.
            let mut inverse = vec![0; out.len()];
            for (i, &p) in out.iter().enumerate() {
                inverse[p] = i;
            }
            let dims: Vec<Option<usize>> = inverse.iter().map(|&i| to.0[i].known()).collect();
            if dims.iter().filter(|d| d.is_none()).count() > 1 {
                return None;
            }
            inputs.truncate(1);
            inputs.push(None);
            consts.push((1, i64s(dims.iter().map(|d| d.map_or(-1, |d| d as i64)).collect())));
            out_perm = out;
            Op::Reshape { allowzero: false }
        }
        Op::Resize(attrs) => {
            let empty = |k: usize| n.input(k).is_none_or(|t| constant(g, t).is_some_and(|c| c.len() == 0));
            if attrs.axes.is_some() || !empty(1) {
                return None;
            }
            for k in [2, 3] {
                let Some(t) = n.input(k) else { continue };
                let c = constant(g, t)?;
                if c.len() == 0 {
                    continue;
                }
                if c.len() != perm.len() {
                    return None;
                }
                let v = c.to_f64_vec();
                let mut p = vec![0.0; perm.len()];
                for (i, &x) in v.iter().enumerate() {
                    p[perm[i]] = x;
                }
                consts.push((k, crate::ir::Tensor::from_f64_as(c.dtype(), vec![perm.len()], &p)?));
            }
            n.op.clone()
        }
        Op::MaxPool { window, .. } | Op::AveragePool { window, .. }
            if !nhwc || window.kernel_shape.as_ref().is_none_or(|k| k.len() != 2) =>
        {
            return None
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool | Op::DepthToSpace { .. } if !nhwc => return None,
        Op::MaxPool { .. }
        | Op::AveragePool { .. }
        | Op::GlobalAveragePool
        | Op::GlobalMaxPool
        | Op::DepthToSpace { .. } => Op::ChannelsLast(Arc::new(n.op.clone())),
        op => op.clone(),
    };
    Some((inputs, op, consts, out_perm))
}

/// Moves each region's exit transform (NHWC -> NCHW, or the transpose it became after a
/// view dropped an axis) past the layout-agnostic ops that read it, one op at a time, as long
/// as every reader of the transform is such an op (so no transform is duplicated). `placed`
/// holds (transpose node, transform) and gains the moved transforms.
fn sink_exit_transforms(
    g: &mut Graph,
    taken: &mut HashSet<String>,
    placed: &mut Vec<(String, Transform)>,
) -> Result<()> {
    loop {
        // A region's exits, and the model's own transposes (a norm computed over [N, T, C]
        // between 1-D convs transposes back to [N, C, T] and meets the next entry).
        let exits: HashMap<String, (usize, Option<usize>)> = g
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(&n.op, Op::Transpose { perm: Some(_) }))
            .map(|(i, n)| (n.outputs[0].clone(), (i, placed.iter().position(|(name, _)| *name == n.name))))
            .collect();
        let cons = consumers(g);
        let exit = |t: &str| -> Option<(String, Vec<usize>)> {
            let &(i, _) = exits.get(t)?;
            let Op::Transpose { perm: Some(p) } = &g.nodes[i].op else { return None };
            Some((g.nodes[i].inputs[0].clone()?, p.clone()))
        };
        let source = |t: &str| -> Option<(String, Vec<usize>)> {
            let (src, perm) = exit(t)?;
            // Every reader moves with it (a graph output keeps its transform anyway), or the
            // transform would stay for one reader and be added after the others. A reader's
            // other activation inputs may move to this layout later (x * sigmoid(x)).
            let later = |x: &str| {
                exit(x).or_else(|| super::edit::constant(g, x).is_none().then(|| (x.to_string(), perm.clone())))
            };
            let all_move = !g.outputs.iter().any(|o| o == t)
                && cons.get(t).is_some_and(|c| {
                    c.iter().all(|&(j, _)| {
                        let m = &g.nodes[j];
                        layout_agnostic(&m.op) && m.outputs.len() == 1 && physical_form(g, &cons, m, &later).is_some()
                    })
                });
            all_move.then_some((src, perm))
        };
        let found = g.nodes.iter().enumerate().find_map(|(i, n)| {
            if !layout_agnostic(&n.op) || n.outputs.len() != 1 {
                return None;
            }
            physical_form(g, &cons, n, &source).map(|f| (i, f))
        });
        let Some((i, (mut inputs, op, consts, perm))) = found else { return Ok(()) };
        let n = g.nodes[i].clone();
        for (k, t) in consts {
            let name = fresh_name(g, taken, &format!("{}.nhwc_arg{k}", n.name));
            g.initializers.insert(name.clone(), Arc::new(t));
            inputs[k] = Some(name);
        }
        // The transform this op's output inherits: the first exit it read.
        let inherited = n.inputs.iter().flatten().find_map(|x| exits.get(x.as_str())?.1).map(|k| placed[k].1.clone());
        let out = n.outputs[0].clone();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            // Dropping unit axes left the two layouts one (NHWC [N, 1, 1, C] squeezed to
            // [N, C]): no transform at all.
            g.nodes[i] = Node { name: n.name.clone(), op, inputs, outputs: vec![out] };
        } else {
            let nchw = perm[..] == TO_NCHW;
            let physical = fresh_name(g, taken, &format!("{out}.{}", if nchw { "nhwc" } else { "channels_last" }));
            let tname = fresh_name(g, taken, &format!("{out}.{}", if nchw { "to_nchw" } else { "to_model_layout" }));
            g.nodes[i] = Node { name: n.name.clone(), op, inputs, outputs: vec![physical.clone()] };
            g.nodes.push(node(tname.clone(), Op::Transpose { perm: Some(perm) }, vec![Some(physical)], out.clone()));
            if let Some(t) = inherited {
                placed.push((tname, Transform { tensor: out, ..t }));
            }
        }
        // Exit transforms nobody reads any more go.
        let read: HashSet<String> = super::edit::read_tensors(g).into_iter().map(str::to_string).collect();
        g.nodes.retain(|m| !(exits.contains_key(&m.outputs[0]) && !read.contains(&m.outputs[0])));
    }
}
