//! Attention fusion: each attention core ([`crate::partition::attention`]) that a fused
//! attention kernel can run becomes one [`Op::Attention`] node before partitioning, so its two
//! MatMuls are not batched-GEMM partitions and its scores never reach memory.
//!
//! The node reads Q, K and V in place: where an operand is a transpose that keeps the head dim
//! last (the head split of PyTorch and HuggingFace exports, `[B, S, H, D] -> [B, H, S, D]`),
//! the node takes the transpose's input and a permutation instead, and a transpose nobody else
//! reads goes with the core. Kᵀ must be such a transpose of a tensor with the head dim last
//! (the kernel reads K rows); otherwise the core stays two batched GEMMs and a stitched
//! softmax, and the decision says why. The head merge after the core (Transpose [0, 2, 1, 3])
//! goes into the node too: the kernel writes `[B, S_q, H, D_v]` directly. Head dims that are
//! not whole 16-byte vectors (PP-OCRv4's SVTR: 15) are zero-padded and the output cut back.

use super::edit;
use super::lower;
use crate::error::Result;
use crate::ir::{Dim, Graph, Node, Op};
use crate::partition::attention::{Attention, FusedAttention};
use bolt_codegen::attention::{AttentionSpec, OutputLayout};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What happened to one attention core.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AttentionDecision {
    /// The core's nodes in model order, then the head merge it writes directly and the head
    /// transposes it reads in place (gone with it).
    pub nodes: Vec<String>,
    /// The fused node, or `None` when the core stays as its ops.
    pub fused: Option<String>,
    pub reason: Option<String>,
    /// Nodes the pass added around the fused node: head dims that are not whole vectors are
    /// zero-padded (Q, K, V: FitLastAxis kernels) and the output cut back (device copies).
    pub padding: Vec<String>,
    /// The core's mask is a constant causal pattern, done by the kernel's causal masking (which
    /// skips the tiles above the diagonal) instead of read.
    pub causal: bool,
}

/// Replaces every attention core a fused kernel takes with one [`Op::Attention`] node.
pub fn fuse(g: &mut Graph) -> Result<Vec<AttentionDecision>> {
    let (cores, _) = crate::partition::attention::find(g);
    let mut decisions = Vec::new();
    let mut names: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut changed = false;
    for a in cores {
        let Fusable { op, mut inputs, pad_d, pad_dv } = match fusable(g, &a) {
            Ok(x) => x,
            Err(why) => {
                decisions.push(AttentionDecision {
                    nodes: a.nodes,
                    fused: None,
                    reason: Some(why),
                    padding: Vec::new(),
                    causal: false,
                });
                continue;
            }
        };
        let (mut op, mut nodes, mut output) = (op, a.nodes.clone(), a.output.clone());
        let causal = op.causal;
        // The head merge after the core ([B, H, S, D_v] -> [B, S, H, D_v]) is written directly.
        if let Some(merge) = head_merge(g, &a.output) {
            op.merge_heads = true;
            nodes.push(merge.name.clone());
            output = merge.outputs[0].clone();
        }
        let name = edit::fresh_name(g, &mut names, &format!("{}.attention", a.nodes[0]));
        let members: HashSet<&String> = nodes.iter().collect();
        g.nodes.retain(|n| !members.contains(&n.name));
        // Head dims padded with zeros: Q·Kᵀ is unchanged, V's extra columns give output columns
        // that are cut off again.
        let mut padding = Vec::new();
        let mut fit = |g: &mut Graph, names: &mut HashSet<String>, x: String, to: usize, what: &str| -> String {
            let node = edit::fresh_name(g, names, &format!("{name}.{what}"));
            let y = edit::fresh_name(g, names, &format!("{x}.{what}"));
            names.insert(y.clone());
            g.nodes.push(edit::node(node.clone(), Op::FitLastAxis { to }, vec![Some(x)], y.clone()));
            padding.push(node);
            y
        };
        for (i, to, what) in [(0, pad_d, "pad_q"), (1, pad_d, "pad_k"), (2, pad_dv, "pad_v")] {
            if let Some((_, to)) = to {
                inputs[i] = fit(g, &mut names, inputs[i].clone(), to, what);
            }
        }
        let kernel_out = match pad_dv {
            Some(_) => {
                let t = edit::fresh_name(g, &mut names, &format!("{output}.padded"));
                names.insert(t.clone());
                t
            }
            None => output.clone(),
        };
        g.nodes.push(Node {
            name: name.clone(),
            op: Op::Attention(Arc::new(op)),
            inputs: inputs.into_iter().map(Some).collect(),
            outputs: vec![kernel_out.clone()],
        });
        if let Some((dv, _)) = pad_dv {
            let node = edit::fresh_name(g, &mut names, &format!("{name}.cut_v"));
            g.nodes.push(edit::node(node.clone(), Op::FitLastAxis { to: dv }, vec![Some(kernel_out)], output));
            padding.push(node);
        }
        // Transposes of the operands that nothing reads any more went into the node.
        loop {
            let read: HashSet<&str> = g
                .nodes
                .iter()
                .flat_map(|n| n.inputs.iter().flatten().map(String::as_str))
                .chain(g.outputs.iter().map(String::as_str))
                .collect();
            let dead: Vec<String> = g
                .nodes
                .iter()
                .filter(|n| matches!(n.op, Op::Transpose { .. }) && !read.contains(n.outputs[0].as_str()))
                .filter(|n| [&a.q, &a.k_t, &a.v].contains(&&n.outputs[0]))
                .map(|n| n.name.clone())
                .collect();
            if dead.is_empty() {
                break;
            }
            g.nodes.retain(|n| !dead.contains(&n.name));
            nodes.extend(dead);
        }
        changed = true;
        decisions.push(AttentionDecision { nodes, fused: Some(name), reason: None, padding, causal });
    }
    if changed {
        edit::finish(g)?;
    }
    Ok(decisions)
}

/// The only reader of the core's output `t`, when it is a Transpose [0, 2, 1, 3] (the head
/// merge of PyTorch and HuggingFace exports) and `t` is no graph output.
fn head_merge<'g>(g: &'g Graph, t: &str) -> Option<&'g Node> {
    if g.outputs.iter().any(|o| o == t) {
        return None;
    }
    let mut readers = g.nodes.iter().filter(|n| n.inputs.iter().flatten().any(|x| x == t));
    let n = readers.next()?;
    if readers.next().is_some() {
        return None;
    }
    matches!(&n.op, Op::Transpose { perm: Some(p) } if p == &[0, 2, 1, 3]).then_some(n)
}

/// A core an attention kernel takes: the op, its inputs, and the head dims (D, D_v) to pad
/// to whole vectors as (from, to).
struct Fusable {
    op: FusedAttention,
    inputs: Vec<String>,
    pad_d: Option<(usize, usize)>,
    pad_dv: Option<(usize, usize)>,
}

/// The fused op and its inputs for core `a`, or why no attention kernel takes it.
fn fusable(g: &Graph, a: &Attention) -> std::result::Result<Fusable, String> {
    let r = a.q_shape.len();
    if !(3..=4).contains(&r) {
        return Err(format!("rank {r}: attention kernels take [B, S, D] or [B, H, S, D] operands"));
    }
    let producer: HashMap<&str, &Node> =
        g.nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n))).collect();
    let rank_of = |t: &str| g.types.get(t).and_then(|t| t.shape.as_ref()).map(|s| s.rank());
    // An operand as (source, permutation): through a transpose that keeps the last axis where
    // it is (for Kᵀ: that moves the source's last axis to the second last).
    let through = |t: &str, head_axis: usize| -> Option<(String, Vec<usize>)> {
        let n = producer.get(t)?;
        let Op::Transpose { perm } = &n.op else { return None };
        let src = n.input(0)?;
        let perm = match perm {
            Some(p) => p.clone(),
            None => (0..r).rev().collect(),
        };
        (rank_of(src) == Some(r) && perm.len() == r && perm[head_axis] == r - 1).then(|| (src.to_string(), perm))
    };
    let identity: Vec<usize> = (0..r).collect();
    let (q, q_perm) = through(&a.q, r - 1).unwrap_or_else(|| (a.q.clone(), identity.clone()));
    let (v, v_perm) = through(&a.v, r - 1).unwrap_or_else(|| (a.v.clone(), identity.clone()));
    let (k, mut k_perm) = through(&a.k_t, r - 2).ok_or_else(|| {
        format!(
            "Kᵀ '{}' is not a transpose of a tensor with the head dim last: the kernel reads K with its head dim \
             contiguous",
            a.k_t
        )
    })?;
    k_perm.swap(r - 2, r - 1);
    for (what, t) in [("Q", &q), ("V", &v)] {
        if rank_of(t) != Some(r) {
            return Err(format!("{what} '{t}' has no known rank {r}"));
        }
    }
    // Types: one float type for every operand, which names the kernel's element.
    let dtype = |t: &str| g.types.get(t).map(|t| t.dtype);
    let element = dtype(&q)
        .and_then(lower::element)
        .ok_or_else(|| format!("Q is {:?}: attention kernels take f32, f16 and bf16", dtype(&q)))?;
    // A constant causal mask is the kernel's causal masking: no mask input.
    let causal = a.mask.as_ref().is_some_and(|(m, _)| constant_causal(g, m, &a.q_shape, &a.k_t_shape));
    let mask = a.mask.as_ref().filter(|_| !causal);
    let mut operands = vec![("K", k.clone()), ("V", v.clone())];
    if let Some((m, _)) = mask {
        operands.push(("the mask", m.clone()));
    }
    for (what, t) in &operands {
        if dtype(t) != dtype(&q) {
            return Err(format!("{what} '{t}' is {:?}, Q is {:?}: one type for every operand", dtype(t), dtype(&q)));
        }
    }
    // Head dims: static, within a built kernel, and whole vectors.
    let known = |s: &[Dim], i: usize, what: &str| match s.get(i) {
        Some(Dim::Known(n)) => Ok(*n as i64),
        d => Err(format!("{what} is {d:?}: attention kernels need a static head dim")),
    };
    let d = known(&a.q_shape, r - 1, "the head dim of Q")?;
    let v_shape: Vec<Dim> = g.types.get(&a.v).and_then(|t| t.shape.as_ref()).map(|s| s.0.clone()).unwrap_or_default();
    let d_v = known(&v_shape, r - 1, "the head dim of V")?;
    // Head dims that are not whole vectors are zero-padded to them.
    let w = bolt_codegen::attention::alignment(element);
    let (d_p, d_v_p) = ((d + w - 1) / w * w, (d_v + w - 1) / w * w);
    AttentionSpec::for_head_dims(element, d_p, d_v_p, mask.is_some(), OutputLayout::Bhsd)
        .ok_or_else(|| format!("head dims {d} and {d_v}: attention kernels are built for head dims up to 128"))?;
    let pad = |from: i64, to: i64| (to != from).then_some((from as usize, to as usize));
    let (pad_d, pad_dv) = (pad(d, d_p), pad(d_v, d_v_p));
    let mut inputs = vec![q, k, v];
    if let Some((m, _)) = mask {
        inputs.push(m.clone());
    }
    let op =
        FusedAttention { scale: a.scale, q_perm, k_perm, v_perm, mask: mask.is_some(), merge_heads: false, causal };
    Ok(Fusable { op, inputs, pad_d, pad_dv })
}

/// Whether mask `m` is a constant causal pattern for scores `[.., S_q, S_k]` (Q `q`, Kᵀ
/// `k_t`): both static and the mask's own last two dims (leading dims 1), 0 where key `j <=`
/// query `i` and at most -10⁴ (-inf included) where `j > i` (what exporters write: -inf, the
/// type's lowest value, or -10⁴). A masked key's weight in the model is then
/// `exp(s - 10⁴ - max)`, which is 0 in f32 for scaled scores within ±4900, so the kernel's
/// causal masking gives the model's answer.
fn constant_causal(g: &Graph, m: &str, q: &[Dim], k_t: &[Dim]) -> bool {
    let (Some(Dim::Known(sq)), Some(Dim::Known(sk))) = (q.iter().rev().nth(1), k_t.last()) else { return false };
    let Some(t) = g.initializers.get(m) else { return false };
    let n = t.shape.len();
    if n < 2 || t.shape[n - 2] != *sq || t.shape[n - 1] != *sk || t.shape[..n - 2].iter().any(|&d| d != 1) {
        return false;
    }
    let (sq, sk) = (*sq, *sk);
    // A single query row would broadcast over any query count: not a pattern of its own.
    if sq < 2 {
        return false;
    }
    let v = t.to_f32_vec();
    (0..sq * sk).all(|x| {
        let (i, j) = (x / sk, x % sk);
        if j <= i {
            v[x] == 0.0
        } else {
            v[x] <= -1e4
        }
    })
}
