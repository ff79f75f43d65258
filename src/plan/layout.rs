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
    cancel_inverse_transposes(g);
    // A transform whose transpose cancelled against the model's own, or against another
    // region's entry once sunk through layout-agnostic ops, is not done at all.
    let live: HashSet<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    let transforms = placed.into_iter().filter(|(n, _)| live.contains(n.as_str())).map(|(_, t)| t).collect();
    finish(g)?;
    Ok(transforms)
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

/// Whether `op` computes the same on an NHWC tensor once its axis arguments are permuted, or
/// (pools) runs on it as [`Op::ChannelsLast`].
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
    )
}

/// Axis `a` of an NCHW tensor (negative counts from the end) as the NHWC tensor's axis.
fn nhwc_axis(a: i64) -> Option<i64> {
    let a = if a < 0 { a + 4 } else { a };
    (0..4).contains(&a).then(|| TO_NCHW[a as usize] as i64)
}

/// An NCHW-side constant operand of a broadcasting op, for the NHWC side: one value stays as
/// it is; a tensor of rank <= 4 is aligned to rank 4 and permuted.
fn nhwc_constant(t: &crate::ir::Tensor) -> Option<crate::ir::Tensor> {
    if t.len() == 1 && t.rank() <= 4 {
        return Some(t.clone());
    }
    if t.rank() > 4 {
        return None;
    }
    let mut shape = vec![1; 4 - t.rank()];
    shape.extend(&t.shape);
    let t4 = t.reshaped(shape);
    crate::reference::eval_op(&Op::Transpose { perm: Some(TO_NHWC.to_vec()) }, &[Some(&t4)]).ok()?.pop()
}

/// The NHWC form of node `n` when every tensor input is an exit transform's output or a
/// constant it can adapt: (inputs, op, constants to add).
#[allow(clippy::type_complexity)]
fn nhwc_form(
    g: &Graph,
    n: &Node,
    exit_source: &dyn Fn(&str) -> Option<String>,
) -> Option<(Vec<Option<String>>, Op, Vec<(usize, crate::ir::Tensor)>)> {
    use super::edit::constant;
    let mut inputs = n.inputs.clone();
    let mut consts = Vec::new();
    let i64s = |v: Vec<i64>| crate::ir::Tensor::from_i64(vec![v.len()], v);
    // Tensor inputs the op broadcasts or concatenates.
    let data: Vec<usize> = match &n.op {
        Op::Binary(_) => vec![0, 1],
        Op::Concat { .. } => (0..n.inputs.len()).collect(),
        _ => vec![0],
    };
    let mut any = false;
    for &k in &data {
        let x = n.input(k)?;
        if let Some(src) = exit_source(x) {
            inputs[k] = Some(src);
            any = true;
        } else if matches!(n.op, Op::Binary(_)) {
            consts.push((k, nhwc_constant(&*constant(g, x)?)?));
        } else {
            return None;
        }
    }
    if !any {
        return None;
    }
    let op = match &n.op {
        Op::Clip => {
            // min / max: one value each.
            let scalar = |k: usize| n.input(k).is_none_or(|t| constant(g, t).is_some_and(|c| c.len() == 1));
            if !(scalar(1) && scalar(2)) {
                return None;
            }
            n.op.clone()
        }
        Op::Concat { axis } => Op::Concat { axis: nhwc_axis(*axis)? },
        Op::Slice => {
            let starts = constant(g, n.input(1)?)?;
            let axes = match n.input(3) {
                Some(a) => constant(g, a)?.as_i64_vec()?,
                None => (0..starts.len() as i64).collect(),
            };
            let axes = axes.into_iter().map(nhwc_axis).collect::<Option<Vec<_>>>()?;
            inputs.resize(inputs.len().max(4), None);
            consts.push((3, i64s(axes)));
            n.op.clone()
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
                if c.len() != 4 {
                    return None;
                }
                let v = c.to_f64_vec();
                let mut p = vec![0.0; 4];
                for (i, &x) in v.iter().enumerate() {
                    p[TO_NCHW[i]] = x;
                }
                consts.push((k, crate::ir::Tensor::from_f64_as(c.dtype(), vec![4], &p)?));
            }
            n.op.clone()
        }
        Op::MaxPool { window, .. } | Op::AveragePool { window, .. }
            if window.kernel_shape.as_ref().is_none_or(|k| k.len() != 2) =>
        {
            return None
        }
        Op::MaxPool { .. }
        | Op::AveragePool { .. }
        | Op::GlobalAveragePool
        | Op::GlobalMaxPool
        | Op::DepthToSpace { .. } => Op::ChannelsLast(Arc::new(n.op.clone())),
        op => op.clone(),
    };
    Some((inputs, op, consts))
}

/// Moves each region's NHWC -> NCHW transform past the layout-agnostic ops that read it, one
/// op at a time, as long as every reader of the transform is such an op (so no transform is
/// duplicated). `placed` holds (transpose node, transform) and gains the moved transforms.
fn sink_exit_transforms(
    g: &mut Graph,
    taken: &mut HashSet<String>,
    placed: &mut Vec<(String, Transform)>,
) -> Result<()> {
    loop {
        let exits: HashMap<String, (usize, usize)> = g
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(&n.op, Op::Transpose { perm: Some(p) } if p[..] == TO_NCHW))
            .filter_map(|(i, n)| {
                placed.iter().position(|(name, _)| *name == n.name).map(|k| (n.outputs[0].clone(), (i, k)))
            })
            .collect();
        let cons = consumers(g);
        let source = |t: &str| -> Option<String> {
            let &(i, _) = exits.get(t)?;
            // Every reader moves with it (a graph output keeps its transform anyway).
            let all_agnostic = !g.outputs.iter().any(|o| o == t)
                && cons.get(t).is_some_and(|c| c.iter().all(|&(j, _)| layout_agnostic(&g.nodes[j].op)));
            all_agnostic.then(|| g.nodes[i].inputs[0].clone()).flatten()
        };
        let found = g.nodes.iter().enumerate().find_map(|(i, n)| {
            if !layout_agnostic(&n.op) || n.outputs.len() != 1 {
                return None;
            }
            nhwc_form(g, n, &source).map(|f| (i, f))
        });
        let Some((i, (mut inputs, op, consts))) = found else { return Ok(()) };
        let n = g.nodes[i].clone();
        for (k, t) in consts {
            let name = fresh_name(g, taken, &format!("{}.nhwc_arg{k}", n.name));
            g.initializers.insert(name.clone(), Arc::new(t));
            inputs[k] = Some(name);
        }
        // The transform this op's output inherits: the first exit it read.
        let inherited =
            n.inputs.iter().flatten().find_map(|x| exits.get(x.as_str())).map(|&(_, k)| placed[k].1.clone());
        let out = n.outputs[0].clone();
        let nhwc = fresh_name(g, taken, &format!("{out}.nhwc"));
        let tname = fresh_name(g, taken, &format!("{out}.to_nchw"));
        g.nodes[i] = Node { name: n.name.clone(), op, inputs, outputs: vec![nhwc.clone()] };
        g.nodes.push(node(
            tname.clone(),
            Op::Transpose { perm: Some(TO_NCHW.to_vec()) },
            vec![Some(nhwc)],
            out.clone(),
        ));
        if let Some(t) = inherited {
            placed.push((tname, Transform { tensor: out, ..t }));
        }
        // Exit transforms nobody reads any more go.
        let read: HashSet<String> = super::edit::read_tensors(g).into_iter().map(str::to_string).collect();
        g.nodes.retain(|m| !(exits.contains_key(&m.outputs[0]) && !read.contains(&m.outputs[0])));
    }
}
