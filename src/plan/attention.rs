//! Attention fusion: each attention core ([`crate::partition::attention`]) that a fused
//! attention kernel can run becomes one [`Op::Attention`] node before partitioning, so its two
//! MatMuls are not batched-GEMM partitions and its scores never reach memory.
//!
//! The node reads Q, K and V in place: where an operand is a transpose that keeps the head dim
//! last (the head split of PyTorch and HuggingFace exports, `[B, S, H, D] -> [B, H, S, D]`),
//! the node takes the transpose's input and a permutation instead, and a transpose nobody else
//! reads goes with the core. The kernel reads K rows: Kᵀ is read in place where it is such a
//! transpose of a tensor with the head dim last; where it is a tensor of its own (the einsum
//! attention of diffusion UNets, `bct,bcs->bts`), a transpose kernel writes K's rows first,
//! when that costs less traffic than the scores the fused kernel keeps on chip (head dim below
//! twice the queries); otherwise the core stays two batched GEMMs and a stitched softmax, and
//! the decision says why. The head merge after the core (Transpose [0, 2, 1, 3])
//! goes into the node too: the kernel writes `[B, S_q, H, D_v]` directly. Head dims that are
//! not whole 16-byte vectors (PP-OCRv4's SVTR: 15) are zero-padded and the output cut back.

use super::edit;
use super::lower;
use crate::error::Result;
use crate::ir::{Binary, DType, Dim, Graph, Node, Op, Tensor};
use crate::partition::attention::{Attention, FusedAttention, HeadWindow, SelectMask};
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
    /// The transpose the pass added that writes K with its head dim last, where the model's Kᵀ
    /// is a tensor of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k_rows: Option<String>,
    /// Nodes the pass added that make the model's selection mask (`Where`) the additive mask
    /// the kernel reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mask: Vec<String>,
    /// The core's mask is a constant causal pattern, done by the kernel's causal masking (which
    /// skips the tiles above the diagonal) instead of read.
    pub causal: bool,
    /// Q, K and V were three projections of one input: one GEMM now computes all three and
    /// the kernel reads each as a window of its output ([`pack_projections`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packed: Option<PackedProjections>,
}

impl AttentionDecision {
    /// The model's nodes a fused core runs: its own, and the projections its packed GEMM
    /// replaced (one device unit: the kernel reads that GEMM's output).
    pub fn model_nodes(&self) -> impl Iterator<Item = &String> {
        self.nodes.iter().chain(self.packed.iter().flat_map(|p| &p.replaced))
    }
}

/// Q, K and V as windows of one projection's output: three projections of one input
/// (`X·W_q + b_q`, `X·W_k + b_k`, `X·W_v + b_v`) that became one GEMM
/// `X·[W_q W_k W_v] + [b_q b_k b_v]`, or the model's own fused projection, whose split the
/// kernel reads through instead (`split`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PackedProjections {
    /// The packed GEMM (its MatMul node; the bias Add follows it), or the node that computes
    /// the model's fused projection.
    pub gemm: String,
    /// The model's nodes it replaced: each projection's MatMul, bias Add and head-split Reshape;
    /// or the fused projection's split and head reshapes.
    pub replaced: Vec<String>,
    /// The model computed Q, K and V as one tensor and split it (GPT-2, GPT-NeoX).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub split: bool,
}

/// Replaces every attention core a fused kernel takes with one [`Op::Attention`] node.
pub fn fuse(g: &mut Graph) -> Result<Vec<AttentionDecision>> {
    let (cores, _) = crate::partition::attention::find(g);
    let mut decisions = Vec::new();
    let mut names: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut changed = false;
    for a in cores {
        let Fusable { op, mut inputs, mask, pad_d, pad_dv, k_rows } = match fusable(g, &a) {
            Ok(x) => x,
            Err(why) => {
                decisions.push(AttentionDecision {
                    nodes: a.nodes,
                    fused: None,
                    reason: Some(why),
                    padding: Vec::new(),
                    causal: false,
                    mask: Vec::new(),
                    packed: None,
                    k_rows: None,
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
        // K's rows written by a transpose of the model's Kᵀ (swapping its last two axes).
        let k_rows = k_rows.map(|rank| {
            let node = edit::fresh_name(g, &mut names, &format!("{name}.k_rows"));
            let y = edit::fresh_name(g, &mut names, &format!("{}.rows", inputs[1]));
            names.insert(y.clone());
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.swap(rank - 2, rank - 1);
            g.nodes.push(edit::node(
                node.clone(),
                Op::Transpose { perm: Some(perm) },
                vec![Some(inputs[1].clone())],
                y.clone(),
            ));
            inputs[1] = y;
            node
        });
        for (i, to, what) in [(0, pad_d, "pad_q"), (1, pad_d, "pad_k"), (2, pad_dv, "pad_v")] {
            if let Some((_, to)) = to {
                inputs[i] = fit(g, &mut names, inputs[i].clone(), to, what);
            }
        }
        let mut mask_nodes = Vec::new();
        if let Some(m) = mask {
            inputs.push(materialize(g, &mut names, &name, m, &mut mask_nodes)?);
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
            let read = edit::read_tensors(g);
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
        decisions.push(AttentionDecision {
            nodes,
            fused: Some(name),
            reason: None,
            padding,
            causal,
            mask: mask_nodes,
            packed: None,
            k_rows,
        });
    }
    if changed {
        edit::finish(g)?;
    }
    Ok(decisions)
}

/// The fused node `node`'s mask input: the model's tensor, a new weight, or the output of new
/// nodes (named in `added`) that make the selection an additive mask.
fn materialize(
    g: &mut Graph,
    names: &mut HashSet<String>,
    node: &str,
    m: MaskInput,
    added: &mut Vec<String>,
) -> Result<String> {
    let weight = |g: &mut Graph, names: &mut HashSet<String>, what: &str, t: Tensor| {
        let n = edit::fresh_name(g, names, &format!("{node}.{what}"));
        g.initializers.insert(n.clone(), Arc::new(t));
        n
    };
    Ok(match m {
        MaskInput::Tensor(t) => t,
        MaskInput::Constant(t) => weight(g, names, "mask", t),
        MaskInput::Select { select, add, dtype } => {
            let bad = |reason: String| crate::error::Error::Node {
                node: node.to_string(),
                op_type: "Attention".into(),
                reason: format!("its mask: {reason}"),
            };
            let masked = weight(g, names, "mask_fill", select.masked_value(dtype).map_err(bad)?);
            let kept = weight(g, names, "mask_zero", Tensor::from_f64_as(dtype, vec![], &[0.0]).expect("a float type"));
            let (x, y) = if select.masked_when { (masked, kept) } else { (kept, masked) };
            let mut push =
                |g: &mut Graph, names: &mut HashSet<String>, what: &str, op: Op, inputs: Vec<Option<String>>| {
                    let n = edit::fresh_name(g, names, &format!("{node}.{what}"));
                    let out = edit::fresh_name(g, names, &format!("{node}.{what}_values"));
                    g.nodes.push(edit::node(n.clone(), op, inputs, out.clone()));
                    added.push(n);
                    out
                };
            let selected = push(g, names, "mask", Op::Where, vec![Some(select.cond), Some(x), Some(y)]);
            match add {
                Some(add) => push(g, names, "mask_sum", Op::Binary(Binary::Add), vec![Some(selected), Some(add)]),
                None => selected,
            }
        }
    })
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

/// A core an attention kernel takes: the op, its Q, K and V inputs, its mask, and the head
/// dims (D, D_v) to pad to whole vectors as (from, to).
struct Fusable {
    op: FusedAttention,
    inputs: Vec<String>,
    mask: Option<MaskInput>,
    pad_d: Option<(usize, usize)>,
    pad_dv: Option<(usize, usize)>,
    /// Kᵀ is a tensor of its own: a transpose of this rank writes K's rows for the kernel.
    k_rows: Option<usize>,
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
    let (k, mut k_perm, k_rows) = match through(&a.k_t, r - 2) {
        Some((k, perm)) => (k, perm, None),
        None => {
            // A transpose kernel writes K's rows (reading and writing K once each) where that
            // is less traffic than the scores kept on chip (written and read back twice:
            // scores, probabilities): D < 2 S_q, or S_q known only at run time.
            let (s_q, d) = (a.q_shape[r - 2].known(), a.q_shape[r - 1].known());
            if rank_of(&a.k_t) != Some(r) || s_q.zip(d).is_some_and(|(s_q, d)| d >= 2 * s_q) {
                return Err(format!(
                    "Kᵀ '{}' is not a transpose of a tensor with the head dim last, and writing K's rows for the kernel \
                     (which reads K with its head dim contiguous) moves more than the scores it keeps on chip",
                    a.k_t
                ));
            }
            // K = Kᵀ with its last two axes swapped, read as it is written: the identity.
            let mut swapped: Vec<usize> = (0..r).collect();
            swapped.swap(r - 2, r - 1);
            (a.k_t.clone(), swapped, Some(r))
        }
    };
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
    let mut operands = vec![("K", k.clone()), ("V", v.clone())];
    if let Some((m, _)) = &a.mask {
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
    // The mask the kernel adds: the model's additive mask, its selection as an additive one,
    // or their sum. A constant causal pattern is the kernel's causal masking (which skips the
    // tiles past the diagonal), beside any mask computed at run time.
    let q_dtype = dtype(&q).expect("Q's type is known: its element was");
    let causal_pattern = |t: &Tensor| constant_causal(t, &a.q_shape, &a.k_t_shape);
    let bad_mask = |e: String| format!("the mask: {e}");
    // Each part's value where it is known while planning (`Some(None)`: computed at run time).
    let add_value = a.mask.as_ref().map(|(m, _)| edit::constant(g, m));
    let cond_value = a.select.as_ref().map(|s| edit::constant(g, &s.cond));
    let add_name = a.mask.as_ref().map(|m| m.0.clone());
    let select_input =
        |add: Option<String>| a.select.as_ref().map(|s| MaskInput::Select { select: s.clone(), add, dtype: q_dtype });
    let planned = |v: &Option<Option<Arc<Tensor>>>| !matches!(v, Some(None));
    // A query whose every key is masked weighs its keys evenly in the model (equal filled
    // scores); the kernel's additive form does so only where the type's lowest value absorbs
    // any score in f32 arithmetic, which f16's (-65504) does not. A fill of -inf gives NaN
    // both ways. So at f16 a finite fill's selection fuses only where no row can be fully
    // masked: a condition known while planning with a kept key in every row.
    if let (Some(s), DType::F16) = (&a.select, q_dtype) {
        if s.fill.is_finite() {
            let every_row_keeps_a_key = match &cond_value {
                Some(Some(c)) => s.keeps_a_key_in_every_row(c),
                _ => false,
            };
            if !every_row_keeps_a_key {
                return Err(format!(
                    "the selection mask ('{}' fills {}) may mask every key of a query at f16: the model then weighs the keys evenly, a fused kernel by score (f16's lowest value added to the scores does not absorb them); the Where and Softmax run as they are",
                    s.cond, s.fill
                ));
            }
        }
    }
    let (causal, mask) = if planned(&add_value) && planned(&cond_value) {
        let (m, c) = (add_value.flatten(), cond_value.flatten());
        match a.additive_mask(q_dtype, m.as_deref(), c.as_deref()).map_err(bad_mask)? {
            None => (false, None),
            Some(t) if causal_pattern(&t) => (true, None),
            // The model's own weight where it is the whole mask.
            Some(t) => (
                false,
                Some(if a.select.is_none() {
                    MaskInput::Tensor(add_name.clone().expect("a mask"))
                } else {
                    MaskInput::Constant(t)
                }),
            ),
        }
    } else {
        let add_causal = matches!(&add_value, Some(Some(m)) if causal_pattern(m));
        let select_causal = match (&a.select, &cond_value) {
            (Some(s), Some(Some(c))) => causal_pattern(&s.additive(c, q_dtype).map_err(bad_mask)?),
            _ => false,
        };
        if add_causal {
            (true, select_input(None))
        } else if select_causal {
            (true, add_name.map(MaskInput::Tensor))
        } else if a.select.is_some() {
            (false, select_input(add_name))
        } else {
            (false, add_name.map(MaskInput::Tensor))
        }
    };
    AttentionSpec::for_head_dims(element, d_p, d_v_p, mask.is_some(), OutputLayout::Bhsd).ok_or_else(|| {
        format!(
            "head dims {d} and {d_v}: attention kernels are built for head dims up to {}",
            bolt_codegen::attention::HEAD_DIM_MAX.iter().max().expect("head dims")
        )
    })?;
    let pad = |from: i64, to: i64| (to != from).then_some((from as usize, to as usize));
    let (pad_d, pad_dv) = (pad(d, d_p), pad(d_v, d_v_p));
    let inputs = vec![q, k, v];
    let op = FusedAttention {
        scale: a.scale,
        q_perm,
        k_perm,
        v_perm,
        mask: mask.is_some(),
        merge_heads: false,
        causal,
        packed: None,
    };
    Ok(Fusable { op, inputs, mask, pad_d, pad_dv, k_rows })
}

/// Where the additive mask a fused kernel reads comes from.
enum MaskInput {
    /// The model's additive mask.
    Tensor(String),
    /// Known while planning (a selection by a constant condition): a weight.
    Constant(Tensor),
    /// The selection's condition made an additive mask of the scores' type (plus the model's
    /// additive mask) by nodes the pass adds.
    Select { select: SelectMask, add: Option<String>, dtype: DType },
}

/// Whether constant mask `t` is a causal pattern for scores `[.., S_q, S_k]` (Q `q`, Kᵀ
/// `k_t`): both static and the mask's own last two dims (leading dims 1), 0 where key `j <=`
/// query `i` and at most -10⁴ (-inf included) where `j > i` (what exporters write: -inf, the
/// type's lowest value, or -10⁴). A masked key's weight in the model is then
/// `exp(s - 10⁴ - max)`, which is 0 in f32 for scaled scores within ±4900, so the kernel's
/// causal masking gives the model's answer.
fn constant_causal(t: &Tensor, q: &[Dim], k_t: &[Dim]) -> bool {
    let (Some(Dim::Known(sq)), Some(Dim::Known(sk))) = (q.iter().rev().nth(1), k_t.last()) else { return false };
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

/// Packs the Q, K and V projections of each fused attention node into one GEMM where all
/// three are `Reshape(MatMul(X, W) (+ b))` of one input `X` with constant weights, each read
/// only on the way to this node: `X·[W_q W_k W_v] + [b_q b_k b_v]` computes them at once (one
/// launch instead of three, three times the tiles per wave: what packed-QKV attention does in
/// TensorRT and FasterTransformer), and the kernel reads each operand as a window of its
/// output through strides ([`FusedAttention::packed`]). Nothing is copied: windows start at
/// whole vectors. Where only K and V are such projections of one input (cross-attention,
/// or Q's projection read elsewhere), they are packed and Q is read through its own
/// projection's output. A model that computes Q, K and V as one tensor and splits it has its
/// split read through instead ([`split_windows`]). The rewrite changes no value (the same
/// products, in the same order per column) except where Q is scaled before its head split:
/// the scale goes into Q's weight and bias columns (rounded once there instead of on every
/// output); `decisions` record it.
pub fn pack_projections(g: &mut Graph, decisions: &mut [AttentionDecision]) -> Result<()> {
    let mut names: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut changed = false;
    for d in decisions.iter_mut() {
        let Some(node) = d.fused.clone() else { continue };
        let Some(p) = packable(g, &node) else {
            // A projection the model fused already: read its windows through the split.
            if let Some(w) = split_windows(g, &node) {
                let mut op = w.op;
                op.packed = Some(w.windows);
                g.nodes[w.node].op = Op::Attention(Arc::new(op));
                for i in 0..3 {
                    g.nodes[w.node].inputs[i] = Some(w.source.clone());
                }
                let replaced = remove_dead(g, &w.parts);
                d.packed = Some(PackedProjections { gemm: w.producer, replaced, split: true });
                changed = true;
            }
            continue;
        };
        let base = p.projections[0].matmul.clone();
        let (w, bias) = (p.weight, p.bias);
        let w_name = edit::fresh_name(g, &mut names, &format!("{base}.qkv_weight"));
        g.initializers.insert(w_name.clone(), Arc::new(w));
        let gemm = edit::fresh_name(g, &mut names, &format!("{base}.qkv"));
        let y = edit::fresh_name(g, &mut names, &format!("{base}.qkv_output"));
        let mut new_nodes =
            vec![edit::node(gemm.clone(), Op::MatMul, vec![Some(p.x.clone()), Some(w_name)], y.clone())];
        let out = match bias {
            Some(b) => {
                let b_name = edit::fresh_name(g, &mut names, &format!("{base}.qkv_bias"));
                g.initializers.insert(b_name.clone(), Arc::new(b));
                let add = edit::fresh_name(g, &mut names, &format!("{base}.qkv_bias_add"));
                let out = edit::fresh_name(g, &mut names, &format!("{base}.qkv_biased"));
                new_nodes.push(edit::node(add, Op::Binary(Binary::Add), vec![Some(y), Some(b_name)], out.clone()));
                out
            }
            None => y,
        };
        // The attention node reads the packed output through its windows.
        let mut op = p.op;
        op.packed = Some(p.windows);
        g.nodes[p.node].op = Op::Attention(Arc::new(op));
        for i in 0..3 {
            g.nodes[p.node].inputs[i] = Some(out.clone());
        }
        let mut replaced: Vec<String> = p.projections.iter().flat_map(|x| x.nodes.iter().cloned()).collect();
        if let Some((q, reshape)) = p.q_alone {
            g.nodes[p.node].inputs[0] = Some(q);
            replaced.push(reshape);
        }
        // The packed GEMM takes the first projection's place; the projections go.
        g.nodes.splice(p.first..p.first + 1, new_nodes);
        g.nodes.retain(|n| !replaced.contains(&n.name));
        remove_dead(g, &p.inputs_of_removed);
        d.packed = Some(PackedProjections { gemm, replaced, split: false });
        changed = true;
    }
    if changed {
        edit::finish(g)?;
    }
    Ok(())
}

/// One projection `Reshape(MatMul(X, W) (+ b))` feeding an attention operand.
#[derive(Clone)]
struct Projection {
    matmul: String,
    weight: Arc<Tensor>,
    bias: Option<Arc<Tensor>>,
    /// N: the projection's output columns.
    cols: usize,
    /// Its MatMul, bias Add and Reshape.
    nodes: Vec<String>,
}

struct Packable {
    /// The attention node's index and op; the first projection MatMul's index.
    node: usize,
    op: FusedAttention,
    first: usize,
    x: String,
    projections: Vec<Projection>,
    /// `[K, N_q + N_k + N_v]` and `[N_q + N_k + N_v]` (a projection without a bias adds zeros).
    weight: Tensor,
    bias: Option<Tensor>,
    windows: [HeadWindow; 3],
    /// Q where one GEMM computes K and V only (cross-attention): its projection's output
    /// `[.., H·D]`, read through its window, and its head-split Reshape, which goes.
    q_alone: Option<(String, String)>,
    /// What the removed nodes read besides X and the weights (the Reshapes' shape inputs):
    /// computations left unread are removed with them.
    inputs_of_removed: Vec<String>,
}

/// Attention node `node` when it is `[B, H, S, D]` and reads its operands whole (no windows yet):
/// its index, op and Q, K and V inputs.
fn unwindowed<'g>(g: &'g Graph, node: &str) -> Option<(usize, &'g FusedAttention, Vec<&'g str>)> {
    let index = g.nodes.iter().position(|n| n.name == node)?;
    let n = &g.nodes[index];
    let Op::Attention(a) = &n.op else { return None };
    if a.packed.is_some() || a.rank() != 4 {
        return None;
    }
    Some((index, a, (0..3).map(|i| n.input(i)).collect::<Option<_>>()?))
}

/// One projection `MatMul(X, W) (+ b) (* s)` computing an attention operand's flat tensor.
struct ProjectionOf<'g> {
    x: &'g str,
    projection: Projection,
}

/// Whether attention node `node`'s operands are projections of one input that one GEMM can
/// compute (all three, or K and V of cross-attention, Q then read through its own projection's
/// output), and what that GEMM packs.
fn packable<'g>(g: &'g Graph, node: &str) -> Option<Packable> {
    let (index, a, inputs) = unwindowed(g, node)?;
    if inputs[0] == inputs[1] || inputs[1] == inputs[2] || inputs[0] == inputs[2] {
        return None;
    }
    let producer: HashMap<&str, &Node> =
        g.nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n))).collect();
    let readers = edit::consumers(g);
    // `t` is read once, by node `by`, and is no graph output.
    let only_reader = |t: &str, by: &str| {
        !g.outputs.iter().any(|o| o == t)
            && matches!(readers.get(t).map(Vec::as_slice), Some([(i, _)]) if g.nodes[*i].name == by)
    };
    let dims = |t: &str| g.types.get(t).and_then(|t| t.shape.as_ref()).map(|s| s.0.clone());
    // The projection computing `t` ([.., cols]) for the head split `reshape` alone.
    let projection_of = |t: &'g str, cols: usize, reshape: &Node| -> Option<ProjectionOf<'g>> {
        if !only_reader(t, &reshape.name) {
            return None;
        }
        // A scalar scale (BART's and Whisper's `q_proj(x) * scaling`), the bias Add (either
        // operand order) and the MatMul.
        let mut nodes = vec![reshape.name.clone()];
        let mut bias = None;
        let mut scale = 1.0;
        let mut t = t;
        if let Some(p) = producer.get(t).filter(|p| matches!(p.op, Op::Binary(Binary::Mul))) {
            let (l, r) = (p.input(0)?, p.input(1)?);
            let (s, other) = match (edit::constant(g, l), edit::constant(g, r)) {
                (None, Some(s)) => (s, l),
                (Some(s), None) => (s, r),
                _ => return None,
            };
            if s.len() != 1 || s.shape.len() > 3 || !only_reader(other, &p.name) {
                return None;
            }
            scale = s.to_f64_vec()[0];
            nodes.push(p.name.clone());
            t = other;
        }
        let mut m = t;
        let p = producer.get(t)?;
        if matches!(p.op, Op::Binary(Binary::Add)) {
            let (l, r) = (p.input(0)?, p.input(1)?);
            let (b, other) = match (edit::constant(g, l), edit::constant(g, r)) {
                (None, Some(b)) => (b, l),
                (Some(b), None) => (b, r),
                _ => return None,
            };
            // A bias of N values (leading dims 1) that broadcasts to the output unchanged.
            let shape_ok = b.shape.last() == Some(&cols) && b.shape.iter().rev().skip(1).all(|&d| d == 1);
            if !shape_ok || b.shape.len() > 3 || !only_reader(other, &p.name) {
                return None;
            }
            bias = Some(b);
            nodes.push(p.name.clone());
            m = other;
        }
        let mm = producer.get(m)?;
        if !matches!(mm.op, Op::MatMul) {
            return None;
        }
        let (x, wi) = (mm.input(0)?, mm.input(1)?);
        let w = edit::constant(g, wi)?;
        let dtype = g.types.get(t)?.dtype;
        if w.shape.len() != 2
            || w.shape[1] != cols
            || w.dtype() != dtype
            || bias.as_ref().is_some_and(|b| b.dtype() != dtype)
        {
            return None;
        }
        if bias.is_none() && g.types.get(x).map(|t| t.dtype) != Some(dtype) {
            return None;
        }
        nodes.push(mm.name.clone());
        // The scale goes into the weight and bias columns: (X·W + b)·s = X·(W·s) + b·s.
        let (w, bias) = if scale == 1.0 {
            (w, bias)
        } else {
            let scaled = |t: &Tensor| {
                Tensor::from_f64_as(
                    t.dtype(),
                    t.shape.clone(),
                    &t.to_f64_vec().iter().map(|v| v * scale).collect::<Vec<_>>(),
                )
            };
            (
                Arc::new(scaled(&w)?),
                match bias {
                    Some(b) => Some(Arc::new(scaled(&b)?)),
                    None => None,
                },
            )
        };
        let projection = Projection { matmul: mm.name.clone(), weight: w, bias, cols, nodes };
        Some(ProjectionOf { x, projection })
    };
    // Each operand's head split [.., N] -> [.., H, D] (read by this node only), its flat
    // tensor, and its projection where it is one.
    let mut operands = Vec::new();
    for &s in &inputs {
        let reshape = producer.get(s)?;
        if !matches!(reshape.op, Op::Reshape { .. }) || !only_reader(s, node) {
            return None;
        }
        let t = reshape.input(0)?;
        let (split, flat) = (dims(s)?, dims(t)?);
        let [b, seq, Dim::Known(h), Dim::Known(d)] = split.as_slice() else { return None };
        let [b2, seq2, Dim::Known(cols)] = flat.as_slice() else { return None };
        if b != b2 || seq != seq2 || h * d != *cols || [b, seq].iter().any(|x| matches!(x, Dim::Unknown)) {
            return None;
        }
        operands.push((*reshape, t, *h, *d, *cols, projection_of(t, *cols, reshape)));
    }
    let dtype = g.types.get(operands[0].1)?.dtype;
    if operands.iter().any(|o| g.types.get(o.1).map(|t| t.dtype) != Some(dtype)) {
        return None;
    }
    // Which operands one GEMM computes: those projected from one input by weights of one K.
    let same = |i: usize, j: usize| match (&operands[i].5, &operands[j].5) {
        (Some(a), Some(b)) => a.x == b.x && a.projection.weight.shape[0] == b.projection.weight.shape[0],
        _ => false,
    };
    let packed: Vec<usize> = if same(0, 1) && same(1, 2) {
        vec![0, 1, 2]
    } else if same(1, 2) {
        vec![1, 2]
    } else {
        return None;
    };
    // Windows start at whole 16-byte vectors, as the kernels' operand pointers must.
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return None;
    }
    let align = 16 / dtype.size_bytes().filter(|&s| s > 0)?;
    let mut windows = [HeadWindow { start: 0, heads: 0, head_dim: 0, head_stride: 0 }; 3];
    let mut start = 0;
    for &i in &packed {
        let (_, _, h, d, cols, _) = &operands[i];
        if start % align != 0 {
            return None;
        }
        windows[i] = HeadWindow { start, heads: *h, head_dim: *d, head_stride: *d };
        start += cols;
    }
    // Q not packed: read through its own projection's output, its head split gone.
    let q_alone = if packed.len() == 2 {
        let (reshape, t, h, d, cols, _) = &operands[0];
        if cols % align != 0 || d % align != 0 {
            return None;
        }
        windows[0] = HeadWindow { start: 0, heads: *h, head_dim: *d, head_stride: *d };
        Some((t.to_string(), reshape.name.clone()))
    } else {
        None
    };
    let mut inputs_of_removed: Vec<String> =
        operands.iter().flat_map(|o| o.0.inputs.iter().skip(1).flatten().cloned()).collect();
    inputs_of_removed.sort();
    inputs_of_removed.dedup();
    let x = operands[packed[0]].5.as_ref()?.x.to_string();
    let projections: Vec<Projection> =
        packed.iter().map(|&i| operands[i].5.as_ref().map(|p| p.projection.clone())).collect::<Option<_>>()?;
    let w_refs: Vec<Option<&Tensor>> = projections.iter().map(|p| Some(p.weight.as_ref())).collect();
    let weight = crate::reference::ops::layout::concat(&w_refs, 1).ok()?.swap_remove(0);
    let bias = if projections.iter().any(|p| p.bias.is_some()) {
        let values: Vec<f64> = projections
            .iter()
            .flat_map(|p| match &p.bias {
                Some(b) => b.to_f64_vec(),
                None => vec![0.0; p.cols],
            })
            .collect();
        Some(Tensor::from_f64_as(dtype, vec![values.len()], &values)?)
    } else {
        None
    };
    let first = g.nodes.iter().position(|n| n.name == projections[0].matmul)?;
    Some(Packable {
        node: index,
        op: a.clone(),
        first,
        x,
        projections,
        weight,
        bias,
        windows,
        q_alone,
        inputs_of_removed,
    })
}

/// Attention operands read as windows of a projection the model computed whole and split.
struct SplitWindows {
    /// The attention node's index and op.
    node: usize,
    op: FusedAttention,
    /// The fused projection's output `[B, S, W]` and the node computing it.
    source: String,
    producer: String,
    windows: [HeadWindow; 3],
    /// The operands the node read until now (the split's parts), removed once unread.
    parts: Vec<String>,
}

/// Whether attention node `node`'s Q, K and V are head views of parts of one tensor `[B, S, W]`
/// split along its last axis, as a model with a fused QKV projection computes them: GPT-2
/// (`c_attn(x).split(E, dim=2)`, then each part's head split `[B, S, E] -> [B, S, H, D]`) or
/// GPT-NeoX (`qkv.view(B, S, H, 3 * D).split(D, dim=3)`: Q, K and V interleaved per head). The
/// kernel can read each as a window of that tensor: no split, no copies.
fn split_windows(g: &Graph, node: &str) -> Option<SplitWindows> {
    let (index, a, inputs) = unwindowed(g, node)?;
    let producer: HashMap<&str, &Node> =
        g.nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n))).collect();
    let dims = |t: &str| g.types.get(t).and_then(|t| t.shape.as_ref()).map(|s| s.0.clone());
    let known = |d: &Dim| match d {
        Dim::Known(n) => Some(*n),
        _ => None,
    };
    // `part` is an output of a Split along its input's last axis: (the Split, the part's first
    // column).
    let split_part = |part: &str| -> Option<(&Node, usize)> {
        let split = producer.get(part)?;
        let Op::Split { axis, .. } = split.op else { return None };
        let rank = dims(split.input(0)?)?.len() as i64;
        if axis != rank - 1 && axis != -1 {
            return None;
        }
        let k = split.outputs.iter().position(|o| o == part)?;
        let widths: Option<Vec<usize>> = split.outputs[..k].iter().map(|o| dims(o)?.last().and_then(known)).collect();
        Some((*split, widths?.iter().sum()))
    };
    let (mut source, mut windows) = (None::<&str>, [HeadWindow { start: 0, heads: 0, head_dim: 0, head_stride: 0 }; 3]);
    for (i, &t) in inputs.iter().enumerate() {
        let operand = dims(t)?;
        let [b, s, h, d] = operand.as_slice() else { return None };
        let (h, d) = (known(h)?, known(d)?);
        if [b, s].iter().any(|x| matches!(x, Dim::Unknown)) {
            return None;
        }
        let p = producer.get(t)?;
        let (src, window) = match p.op {
            // GPT-2: a part [B, S, H·D] split into heads.
            Op::Reshape { .. } => {
                let part = p.input(0)?;
                if dims(part)? != [b.clone(), s.clone(), Dim::Known(h * d)] {
                    return None;
                }
                let (split, start) = split_part(part)?;
                (split.input(0)?, HeadWindow { start, heads: h, head_dim: d, head_stride: d })
            }
            // GPT-NeoX: a part of the per-head view [B, S, H, G] of [B, S, H·G].
            Op::Split { .. } => {
                let (split, start) = split_part(t)?;
                let grouped = split.input(0)?;
                let group = match dims(grouped)?.as_slice() {
                    [b2, s2, Dim::Known(h2), Dim::Known(w)] if b2 == b && s2 == s && *h2 == h => *w,
                    _ => return None,
                };
                let view = producer.get(grouped).filter(|r| matches!(r.op, Op::Reshape { .. }))?;
                let whole = view.input(0)?;
                if dims(whole)? != [b.clone(), s.clone(), Dim::Known(h * group)] {
                    return None;
                }
                (whole, HeadWindow { start, heads: h, head_dim: d, head_stride: group })
            }
            _ => return None,
        };
        if source.is_some_and(|x| x != src) {
            return None;
        }
        source = Some(src);
        windows[i] = window;
    }
    let source = source?;
    // (Its leading dims are the operands': a split keeps them, a head view was checked.)
    let [_, _, Dim::Known(width)] = dims(source)?[..] else { return None };
    // Windows inside the rows, at whole 16-byte vectors, as the kernels' pointers and strides
    // must be.
    let dtype = g.types.get(source)?.dtype;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return None;
    }
    let align = 16 / dtype.size_bytes()?;
    let aligned = |x: usize| x % align == 0;
    if !aligned(width)
        || windows
            .iter()
            .any(|w| w.end() > width || !aligned(w.start) || !aligned(w.head_stride) || !aligned(w.head_dim))
    {
        return None;
    }
    Some(SplitWindows {
        node: index,
        op: a.clone(),
        source: source.to_string(),
        producer: producer.get(source)?.name.clone(),
        windows,
        parts: inputs.iter().map(|t| t.to_string()).collect(),
    })
}

/// Removes the nodes that computed only `seeds` (and what only they read), once nothing reads
/// them: a removed Reshape's shape computation. Returns the removed nodes' names.
fn remove_dead(g: &mut Graph, seeds: &[String]) -> Vec<String> {
    let mut maybe: HashSet<String> = seeds.iter().cloned().collect();
    let mut removed = Vec::new();
    loop {
        let read = edit::read_tensors(g);
        let dead: Vec<usize> = (0..g.nodes.len())
            .filter(|&i| {
                let n = &g.nodes[i];
                n.outputs.iter().any(|o| maybe.contains(o)) && n.outputs.iter().all(|o| !read.contains(o.as_str()))
            })
            .collect();
        if dead.is_empty() {
            return removed;
        }
        for &i in dead.iter().rev() {
            let n = g.nodes.remove(i);
            maybe.extend(n.inputs.into_iter().flatten());
            removed.push(n.name);
        }
    }
}
