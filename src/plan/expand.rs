//! ONNX operators defined as functions of other operators, expanded into the primitives the
//! partitioner, the stitcher and the attention recogniser take (part of pass 0,
//! [`super::canonical`]). Each expansion follows the operator's ONNX definition; a form it
//! does not cover stays the operator, which the reference executor computes on the host
//! (`reference::ops::attention`, `norm::rms_norm`: the independent statements of the same
//! meaning the expansions are checked against, with onnx's conformance cases over both).
//!
//! - **CastLike** is a Cast to its second input's type, once inference knows that type.
//! - **RMSNormalization** (opset 23) is `x / sqrt(mean(x²) + ε) · scale` over the trailing
//!   axes from `axis`, merged into one row (a view) when there are several: one stitched
//!   row-reduction kernel, computed in f32 for 16-bit inputs as `stash_type` asks.
//! - **GroupNormalization** (diffusion UNets) is an InstanceNormalization of the groups (a
//!   view of [N, G, C/G · spatial], which the instance-norm rewrite makes a stitched row
//!   reduction), a view back, and the per-channel scale and shift.
//! - **Attention** (opsets 23-25) is the core PyTorch's exporter writes for
//!   `scaled_dot_product_attention`: `MatMul(Q, Kᵀ) · scale (+ bias) -> Softmax -> MatMul(·, V)`,
//!   with the head split / merge of 3-D inputs, grouped KV heads repeated, the KV cache
//!   concatenated, the soft cap, and the additive bias made of the mask (a boolean mask selects
//!   0 or -inf) and the causal and sliding-window frontiers (a constant at known lengths). A query row the bias
//!   masks entirely gives zeros, as ONNX defines it, where a run-time mask could mask one.
//!   At lengths known only at run time the frontier is computed from the shapes (host
//!   arithmetic on sizes) and read as a mask. Left with the host: `nonpad_kv_seqlen`, the
//!   `qk_matmul_output` debug output, masks not proved as long as the keys.

use super::edit::{fresh_name, node};
use crate::ir::{Binary, Compare, DType, Dim, Graph, Node, Op, ReduceKind, Tensor, Unary};
use std::collections::HashSet;
use std::sync::Arc;

/// Expands every CastLike, RMSNormalization and Attention node of a form it covers; the
/// number expanded.
pub fn function_ops(g: &mut Graph, taken: &mut HashSet<String>) -> usize {
    let readers = super::edit::consumers(g);
    let read = |t: &str| g.outputs.iter().any(|o| o == t) || readers.contains_key(t);
    // Which outputs of each node anything reads (decided before the graph changes).
    let used: std::collections::HashMap<String, Vec<bool>> = g
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.outputs.iter().map(|o| !o.is_empty() && read(o)).collect()))
        .collect();
    let mut count = 0;
    let mut i = 0;
    while i < g.nodes.len() {
        let n = g.nodes[i].clone();
        let new = match &n.op {
            Op::Opaque { domain, op_type, .. } if domain.is_empty() || domain == "ai.onnx" => {
                let mut b = Builder { g, taken, stem: n.name.clone(), nodes: Vec::new() };
                let done = match op_type.as_str() {
                    "CastLike" => cast_like(&mut b, &n),
                    "RMSNormalization" => rms_norm(&mut b, &n),
                    "GroupNormalization" => group_norm(&mut b, &n),
                    "Attention" => attention(&mut b, &n, &used[&n.name]),
                    _ => None,
                };
                done.map(|()| b.nodes)
            }
            _ => None,
        };
        match new {
            Some(new) => {
                i += new.len();
                g.nodes.splice(i - new.len()..i - new.len() + 1, new);
                count += 1;
            }
            None => i += 1,
        }
    }
    count
}

/// Emits nodes named after the expanded node (its first keeps the node's own name, so reports
/// map kernels back to model nodes).
struct Builder<'a> {
    g: &'a mut Graph,
    taken: &'a mut HashSet<String>,
    stem: String,
    nodes: Vec<Node>,
}

impl Builder<'_> {
    fn name(&mut self, what: &str) -> String {
        fresh_name(self.g, self.taken, &format!("{}.{what}", self.stem))
    }

    /// One node of `op` on `inputs` writing `out` (a fresh name when `None`); its output.
    fn op(&mut self, what: &str, op: Op, inputs: &[&str], out: Option<&str>) -> String {
        // A new value names its node; a node writing one of the model's values is named
        // after what it computes.
        let (name, out) = match out {
            _ if self.nodes.is_empty() => (self.stem.clone(), out.map_or_else(|| self.name(what), str::to_string)),
            Some(y) => (self.name(what), y.to_string()),
            None => {
                let y = self.name(what);
                (y.clone(), y)
            }
        };
        self.taken.insert(name.clone());
        self.taken.insert(out.clone());
        self.nodes.push(node(name, op, inputs.iter().map(|t| Some(t.to_string())).collect(), out.clone()));
        out
    }

    fn constant(&mut self, what: &str, t: Tensor) -> String {
        let name = self.name(what);
        self.g.initializers.insert(name.clone(), Arc::new(t));
        name
    }

    fn ints(&mut self, what: &str, v: Vec<i64>) -> String {
        self.constant(what, Tensor::from_i64(vec![v.len()], v))
    }

    fn scalar(&mut self, what: &str, dtype: DType, v: f64) -> Option<String> {
        Some(self.constant(what, Tensor::from_f64_as(dtype, vec![], &[v])?))
    }

    fn binary(&mut self, what: &str, b: Binary, x: &str, y: &str, out: Option<&str>) -> String {
        self.op(what, Op::Binary(b), &[x, y], out)
    }

    fn reshape(&mut self, what: &str, x: &str, shape: Vec<i64>, out: Option<&str>) -> String {
        let s = self.ints(&format!("{what}_shape"), shape);
        self.op(what, Op::Reshape { allowzero: false }, &[x, &s], out)
    }

    fn transpose(&mut self, what: &str, x: &str, perm: Vec<usize>, out: Option<&str>) -> String {
        self.op(what, Op::Transpose { perm: Some(perm) }, &[x], out)
    }

    fn dims(&self, t: &str) -> Option<Vec<Dim>> {
        Some(self.g.types.get(t)?.shape.as_ref()?.0.clone())
    }

    fn dtype(&self, t: &str) -> Option<DType> {
        self.g.types.get(t).map(|t| t.dtype)
    }
}

fn cast_like(b: &mut Builder, n: &Node) -> Option<()> {
    let (x, like, [y]) = (n.input(0)?, n.input(1)?, &n.outputs[..]) else { return None };
    let to = b.dtype(like).filter(|d| !matches!(d, DType::Other(_)))?;
    let saturate = n.op.attrs().int_or("saturate", 1)? != 0;
    b.op("cast", Op::Cast { to, saturate }, &[x], Some(y));
    Some(())
}

fn rms_norm(b: &mut Builder, n: &Node) -> Option<()> {
    let (x, scale, [y]) = (n.input(0)?, n.input(1)?, &n.outputs[..]) else { return None };
    let dims = b.dims(x)?;
    let dtype = b.dtype(x)?;
    let rank = dims.len() as i64;
    let attrs = n.op.attrs();
    let axis = attrs.int_or("axis", -1)?;
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&a) || !dtype.is_float() || b.dtype(scale) != Some(dtype) {
        return None;
    }
    let epsilon = attrs.float_or("epsilon", 1e-5)?;
    let stash = DType::from_onnx(attrs.int_or("stash_type", 1)? as i32);
    let trailing = &dims[a as usize..];
    let scale_dims = b.dims(scale)?;
    // Several normalised axes become one row: the scale must then be a scalar or exactly
    // those axes (it flattens with them).
    let merged = trailing.len() > 1;
    let scale_fits = scale_dims.iter().all(|d| *d == Dim::Known(1)) || scale_dims == trailing;
    if merged && (!scale_fits || trailing.contains(&Dim::Unknown)) {
        return None;
    }
    // The scale broadcasts to X one way (Mul's two-way broadcast must not grow X).
    if scale_dims.len() > dims.len() {
        return None;
    }
    // Stage one in f32 for 16-bit inputs (stash_type 1), cast back before the scale.
    let compute = if stash == DType::F32 && dtype != DType::F64 { DType::F32 } else { dtype };
    let rows = if merged {
        let shape = std::iter::repeat_n(0, a as usize).chain([-1]).collect();
        b.reshape("rows", x, shape, None)
    } else {
        x.to_string()
    };
    let mut v = rows.clone();
    if compute != dtype {
        v = b.op("stash", Op::Cast { to: compute, saturate: true }, &[&rows], None);
    }
    let squares = b.binary("squares", Binary::Mul, &v, &v, None);
    let mean_of_row =
        Op::Reduce { kind: ReduceKind::Mean, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
    let mean = b.op("mean_square", mean_of_row, &[&squares], None);
    let eps = b.scalar("epsilon", compute, epsilon)?;
    let shifted = b.binary("mean_square_eps", Binary::Add, &mean, &eps, None);
    let rms = b.op("rms", Op::Unary(Unary::Sqrt), &[&shifted], None);
    let mut normed = b.binary("normed", Binary::Div, &v, &rms, None);
    if compute != dtype {
        normed = b.op("unstash", Op::Cast { to: dtype, saturate: true }, &[&normed], None);
    }
    let flat_scale =
        if merged && scale_dims.len() > 1 { b.reshape("scale_row", scale, vec![-1], None) } else { scale.to_string() };
    if merged {
        let scaled = b.binary("scaled", Binary::Mul, &normed, &flat_scale, None);
        let shape = b.op("shape", Op::Shape { start: 0, end: None }, &[x], None);
        b.op("back", Op::Reshape { allowzero: false }, &[&scaled, &shape], Some(y));
    } else {
        b.binary("scaled", Binary::Mul, &normed, &flat_scale, Some(y));
    }
    Some(())
}

fn group_norm(b: &mut Builder, n: &Node) -> Option<()> {
    let (x, scale, bias, [y]) = (n.input(0)?, n.input(1)?, n.input(2)?, &n.outputs[..]) else { return None };
    let dims = b.dims(x)?;
    let dtype = b.dtype(x)?;
    let c = dims.get(1)?.known()?;
    let attrs = n.op.attrs();
    let groups = usize::try_from(attrs.int("num_groups")?).ok().filter(|&g| g > 0 && c % g == 0)?;
    let epsilon = attrs.float_or("epsilon", 1e-5)?;
    let stash = DType::from_onnx(attrs.int_or("stash_type", 1)? as i32);
    if !dtype.is_float() || [scale, bias].iter().any(|t| b.dtype(t) != Some(dtype)) {
        return None;
    }
    // Per channel [C, 1, ...] against [N, C, spatial...]: constants (per-group ones of
    // opset 18 repeated over their channels), or a view of computed per-channel ones.
    let trailing = vec![1usize; dims.len() - 2];
    let per_channel = |b: &mut Builder, t: &str, what: &str| -> Option<String> {
        let shape: Vec<usize> = [c].into_iter().chain(trailing.iter().copied()).collect();
        match super::edit::constant(b.g, t) {
            Some(v) if v.len() == c || v.len() == groups => {
                let v = v.to_f64_vec();
                let full: Vec<f64> = (0..c).map(|k| if v.len() == c { v[k] } else { v[k / (c / groups)] }).collect();
                Some(b.constant(what, Tensor::from_f64_as(dtype, shape, &full)?))
            }
            None if b.dims(t)? == [Dim::Known(c)] => {
                let shape = shape.iter().map(|&d| d as i64).collect();
                Some(b.reshape(what, t, shape, None))
            }
            _ => None,
        }
    };
    let (s, t) = (per_channel(b, scale, "scale")?, per_channel(b, bias, "bias")?);
    // The instance norm of the groups: its own scale and shift are 1 and 0.
    let compute = if stash == DType::F32 && dtype != DType::F64 { DType::F32 } else { dtype };
    let mut v = b.reshape("groups", x, vec![0, groups as i64, -1], None);
    if compute != dtype {
        v = b.op("stash", Op::Cast { to: compute, saturate: true }, &[&v], None);
    }
    let ones = b.constant("unit_scale", Tensor::from_f64_as(compute, vec![groups], &vec![1.0; groups])?);
    let zeros = b.constant("zero_shift", Tensor::from_f64_as(compute, vec![groups], &vec![0.0; groups])?);
    let instance = Op::Opaque {
        domain: String::new(),
        op_type: "InstanceNormalization".into(),
        attrs: vec![("epsilon".into(), crate::ir::AttrValue::Float(epsilon as f32))],
        why: crate::ir::HOST_COMPUTED.into(),
    };
    let mut normed = b.op("normed_groups", instance, &[&v, &ones, &zeros], None);
    if compute != dtype {
        normed = b.op("unstash", Op::Cast { to: dtype, saturate: true }, &[&normed], None);
    }
    let shape = b.op("shape", Op::Shape { start: 0, end: None }, &[x], None);
    let back = b.op("back", Op::Reshape { allowzero: false }, &[&normed, &shape], None);
    let scaled = b.binary("scaled", Binary::Mul, &back, &s, None);
    b.binary("shifted", Binary::Add, &scaled, &t, Some(y));
    Some(())
}

/// Attention's expansion; `used[k]`: whether anything reads output k.
fn attention(b: &mut Builder, n: &Node, used: &[bool]) -> Option<()> {
    let attrs = n.op.attrs();
    let at = crate::reference::ops::attention::AttentionAttrs::read(&attrs);
    let (q, k, v) = (n.input(0)?, n.input(1)?, n.input(2)?);
    let (mask, past_k, past_v) = (n.input(3), n.input(4), n.input(5));
    let dtype = b.dtype(q)?;
    if attention_refusal(b.g, n, used).is_some() {
        return None;
    }
    let (qd, kd, vd) = (b.dims(q)?, b.dims(k)?, b.dims(v)?);
    let three_d = qd.len() == 3;
    if kd.len() != qd.len() || vd.len() != qd.len() || !(qd.len() == 3 || qd.len() == 4) {
        return None;
    }
    // Heads and head size, known when planning (grouped heads repeat by a known factor).
    let (hq, hk, d) = if three_d {
        let (hq, hk) = (at.q_num_heads?, at.kv_num_heads?);
        let d = qd[2].known()? / hq;
        (hq, hk, d)
    } else {
        (qd[1].known()?, kd[1].known()?, qd[3].known()?)
    };
    if hk == 0 || hq % hk != 0 || d == 0 {
        return None;
    }
    let scale = at.scale.unwrap_or(1.0 / (d as f64).sqrt());

    // Operands as [B, H, S, D].
    let heads = |b: &mut Builder, t: &str, h: usize, what: &str| -> String {
        if three_d {
            let split = b.reshape(&format!("{what}_heads"), t, vec![0, 0, h as i64, -1], None);
            b.transpose(&format!("{what}_bhsd"), &split, vec![0, 2, 1, 3], None)
        } else {
            t.to_string()
        }
    };
    let q4 = heads(b, q, hq, "q");
    let (present_k, present_v) =
        (n.outputs.get(1).filter(|o| !o.is_empty()), n.outputs.get(2).filter(|o| !o.is_empty()));
    let cache = |b: &mut Builder, t: &str, h: usize, past: Option<&str>, present: Option<&String>, what: &str| {
        let now = heads(b, t, h, what);
        match (past, present) {
            (Some(p), out) => {
                b.op(&format!("present_{what}"), Op::Concat { axis: 2 }, &[p, &now], out.map(String::as_str))
            }
            (None, Some(out)) => b.op(&format!("present_{what}"), Op::Identity, &[&now], Some(out)),
            (None, None) => now,
        }
    };
    let k4 = cache(b, k, hk, past_k, present_k, "k");
    let v4 = cache(b, v, hk, past_v, present_v, "v");
    // Grouped heads: each KV head serves hq / hk query heads in a row (np.repeat on axis 1).
    let group = |b: &mut Builder, t: &str, what: &str, size: usize| -> String {
        if hq == hk {
            return t.to_string();
        }
        let axis = b.ints(&format!("{what}_group_axis"), vec![2]);
        let one = b.op(&format!("{what}_group"), Op::Unsqueeze, &[t, &axis], None);
        let shape = b.op(&format!("{what}_shape"), Op::Shape { start: 0, end: None }, &[&one], None);
        let reps = b.ints(&format!("{what}_reps"), vec![1, 1, (hq / hk) as i64, 1, 1]);
        let target = b.binary(&format!("{what}_grouped_shape"), Binary::Mul, &shape, &reps, None);
        let wide = b.op(&format!("{what}_repeated"), Op::Expand, &[&one, &target], None);
        b.reshape(&format!("{what}_as_q_heads"), &wide, vec![0, hq as i64, -1, size as i64], None)
    };
    let dv = if three_d { vd[2].known().map(|h| h / hk) } else { vd[3].known() };
    if hq != hk && dv.is_none() {
        return None;
    }
    let (kq, vq) = (group(b, &k4, "k", d), group(b, &v4, "v", dv.unwrap_or(0)));

    // Scores: (Q · Kᵀ) · scale, then the soft cap.
    let kt = b.transpose("k_transposed", &kq, vec![0, 1, 3, 2], None);
    let qk = b.op("qk", Op::MatMul, &[&q4, &kt], None);
    let s = b.scalar("scale", dtype, scale)?;
    let mut scores = b.binary("scaled", Binary::Mul, &qk, &s, None);
    if at.softcap > 0.0 {
        let c = b.scalar("softcap", dtype, at.softcap)?;
        let over = b.binary("over_cap", Binary::Div, &scores, &c, None);
        let t = b.op("tanh", Op::Unary(Unary::Tanh), &[&over], None);
        scores = b.binary("capped", Binary::Mul, &t, &c, None);
    }

    // The additive bias: the mask (boolean: 0 where it keeps a key, -inf where not), the
    // causal frontier at the cache offset (a constant: lengths known when planning).
    let seq = if three_d { 1 } else { 2 };
    let q_len = qd[seq].clone();
    let kv_len = match (past_len(b, past_k), &kd[seq]) {
        (Some(0), len) => len.clone(),
        (Some(p), Dim::Known(len)) => Dim::Known(p + len),
        _ => Dim::Unknown,
    };
    let mut bias: Option<String> = None;
    let mut may_mask_a_row = false;
    if let Some(m) = mask {
        let md = b.dims(m)?;
        // A mask shorter than the keys pads with masked keys: left to the host.
        if md.last() != Some(&kv_len) || kv_len == Dim::Unknown || md.len() > 4 {
            return None;
        }
        // Only -inf masks a key: a float mask of finite values (onnxruntime's fused
        // attention's `mask_filter_value` mask) keeps every row.
        let keeps_every_row = match super::edit::constant(b.g, m) {
            Some(c) => rows_keep_a_key(&c),
            None => b.dtype(m)? != DType::Bool && finite(b.g, m, 8),
        };
        may_mask_a_row |= !keeps_every_row;
        bias = Some(match b.dtype(m)? {
            DType::Bool => {
                let zero = b.scalar("kept", dtype, 0.0)?;
                let masked = b.scalar("masked", dtype, f64::NEG_INFINITY)?;
                b.op("mask_bias", Op::Where, &[m, &zero, &masked], None)
            }
            t if t == dtype => m.to_string(),
            _ => return None,
        });
    }
    let windowed = at.left_window >= 0 || at.right_window >= 0;
    if at.is_causal || windowed {
        // The frontiers at the cache offset (bottom-right aligned): query i, at absolute
        // position i + past, attends key j iff j <= i + past (causal) and j lies within the
        // window around it.
        let frontier = match (q_len.known(), kv_len.known(), past_len(b, past_k)) {
            (Some(sq), Some(skv), Some(past)) => {
                let past = past as i64;
                let allowed = |i: usize, j: usize| {
                    let diff = i as i64 + past - j as i64;
                    !(at.is_causal && diff < 0)
                        && !(at.left_window >= 0 && diff > at.left_window)
                        && !(at.right_window >= 0 && -diff > at.right_window)
                };
                let v: Vec<f64> = (0..sq)
                    .flat_map(|i| (0..skv).map(move |j| (i, j)))
                    .map(|(i, j)| if allowed(i, j) { 0.0 } else { f64::NEG_INFINITY })
                    .collect();
                // A row the frontier masks entirely (a window past the keys) attends nothing.
                may_mask_a_row |= v.chunks(skv).any(|row| row.iter().all(|x| x.is_infinite()));
                b.constant("frontier", Tensor::from_f64_as(dtype, vec![sq, skv], &v)?)
            }
            _ => {
                // Lengths known at run time only (a decoder exported with a dynamic sequence):
                // the same frontier from the shapes, host arithmetic on sizes, read as a mask.
                may_mask_a_row |= at.left_window >= 0 || at.right_window >= 0;
                run_time_frontier(b, &q4, &kq, past_k, &at, dtype)?
            }
        };
        bias = Some(match bias {
            Some(m) => b.binary("bias", Binary::Add, &m, &frontier, None),
            None => frontier,
        });
    }
    if let Some(bias) = &bias {
        scores = b.binary("biased", Binary::Add, &scores, bias, None);
    }
    let probs = b.op("probs", Op::Softmax { axis: -1 }, &[&scores], None);
    let y4_out = if three_d || may_mask_a_row { None } else { Some(n.outputs[0].as_str()) };
    let mut y4 = b.op("attended", Op::MatMul, &[&probs, &vq], y4_out);
    if may_mask_a_row {
        // Rows whose bias masks every key attend nothing: zeros (the softmax of all -inf is NaN).
        let bias = bias.as_ref()?;
        let max_of_row =
            Op::Reduce { kind: ReduceKind::Max, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false };
        let best = b.op("best_bias", max_of_row, &[bias], None);
        let none = b.scalar("no_key", dtype, f64::NEG_INFINITY)?;
        let keeps = b.op("keeps_a_key", Op::Compare(Compare::Greater), &[&best, &none], None);
        let zero = b.scalar("zero", dtype, 0.0)?;
        let out = if three_d { None } else { Some(n.outputs[0].as_str()) };
        y4 = b.op("guarded", Op::Where, &[&keeps, &y4, &zero], out);
    }
    if three_d {
        let merged = b.transpose("bshd", &y4, vec![0, 2, 1, 3], None);
        b.reshape("merged", &merged, vec![0, 0, -1], Some(&n.outputs[0]));
    }
    Some(())
}

/// The additive causal / window frontier `[S_q, S_kv]` (0 where query i, at absolute
/// position i + past, may attend key j; -inf elsewhere) computed from the operands' shapes at
/// run time: `Range`s of the lengths and comparisons, shape arithmetic the host does.
fn run_time_frontier(
    b: &mut Builder,
    q4: &str,
    k4: &str,
    past_k: Option<&str>,
    at: &crate::reference::ops::attention::AttentionAttrs,
    dtype: DType,
) -> Option<String> {
    let int = |b: &mut Builder, what: &str, v: i64| b.constant(what, Tensor::from_i64(vec![], vec![v]));
    let length = |b: &mut Builder, t: &str, what: &str| {
        let s = b.op(&format!("{what}_length"), Op::Shape { start: 2, end: Some(3) }, &[t], None);
        b.reshape(&format!("{what}_length_scalar"), &s, vec![], None)
    };
    let (sq, skv) = (length(b, q4, "query"), length(b, k4, "key"));
    let (zero, one) = (int(b, "zero_index", 0), int(b, "unit_step", 1));
    let queries = b.op("query_positions", Op::Range, &[&zero, &sq, &one], None);
    let keys = b.op("key_positions", Op::Range, &[&zero, &skv, &one], None);
    let queries = match past_k {
        Some(p) => {
            let past = length(b, p, "past");
            b.binary("absolute_positions", Binary::Add, &queries, &past, None)
        }
        None => queries,
    };
    let axis = b.ints("column_axis", vec![1]);
    let column = b.op("query_column", Op::Unsqueeze, &[&queries, &axis], None);
    // diff[i][j] = (i + past) - j
    let diff = b.binary("distance", Binary::Sub, &column, &keys, None);
    let mut allowed: Option<String> = None;
    let mut and = |b: &mut Builder, cond: String| {
        allowed = Some(match allowed.take() {
            Some(a) => b.op("allowed", Op::Logic(crate::ir::Logic::And), &[&a, &cond], None),
            None => cond,
        });
    };
    if at.is_causal {
        let c = b.op("causal", Op::Compare(Compare::GreaterOrEqual), &[&diff, &zero], None);
        and(b, c);
    }
    if at.left_window >= 0 {
        let w = int(b, "left_window", at.left_window);
        let c = b.op("within_left", Op::Compare(Compare::LessOrEqual), &[&diff, &w], None);
        and(b, c);
    }
    if at.right_window >= 0 {
        let w = int(b, "right_window", -at.right_window);
        let c = b.op("within_right", Op::Compare(Compare::GreaterOrEqual), &[&diff, &w], None);
        and(b, c);
    }
    let allowed = allowed?;
    let kept = b.scalar("frontier_kept", dtype, 0.0)?;
    let masked = b.scalar("frontier_masked", dtype, f64::NEG_INFINITY)?;
    Some(b.op("frontier", Op::Where, &[&allowed, &kept, &masked], None))
}

/// Why an Attention node is not expanded, for the forms left to the host by design; `None`
/// for the others (which may still fail on shapes unknown when planning).
fn attention_refusal(g: &Graph, n: &Node, used: &[bool]) -> Option<&'static str> {
    let dtype = |i: usize| n.input(i).and_then(|t| g.types.get(t)).map(|t| t.dtype);
    let seq_of = |i: usize| -> Option<Dim> {
        let s = g.types.get(n.input(i)?)?.shape.as_ref()?;
        s.0.get(if s.rank() == 3 { 1 } else { 2 }).cloned()
    };
    if n.input(6).is_some() {
        return Some("an external KV cache's lengths (nonpad_kv_seqlen): left to the host");
    }
    if used.get(3).copied().unwrap_or(false) {
        return Some("its qk_matmul_output (the scores, a debug output) is read: left to the host");
    }
    if n.input(4).is_some() != n.input(5).is_some() {
        return Some("past_key without past_value or the other way round");
    }
    if !dtype(0).is_some_and(DType::is_float) || dtype(1) != dtype(0) || dtype(2) != dtype(0) {
        return Some("Q, K and V are not of one float type");
    }
    if let Some(m) = n.input(3).and_then(|m| g.types.get(m)?.shape.as_ref()) {
        let keys = match (seq_of(1), n.input(4).and_then(|p| g.types.get(p)?.shape.as_ref()?.0.get(2).cloned())) {
            (Some(k), None) => Some(k),
            (Some(Dim::Known(k)), Some(Dim::Known(p))) => Some(Dim::Known(k + p)),
            _ => None,
        };
        if m.0.last().is_none_or(|d| *d == Dim::Unknown) || m.0.last() != keys.as_ref() {
            return Some("a mask not proved as long as the keys (a shorter one pads with masked keys)");
        }
    }
    None
}

/// Why a function operator the planner expands stays one op (with the host), for reports.
pub fn why_left(g: &Graph, n: &Node) -> Option<String> {
    let Op::Opaque { op_type, .. } = &n.op else { return None };
    Some(match op_type.as_str() {
        "Attention" => {
            // Which outputs are read: only an Attention's reasons need it (a pass over the graph).
            let read: HashSet<&str> =
                g.nodes.iter().flat_map(|m| m.inputs.iter().flatten()).map(String::as_str).collect();
            let used: Vec<bool> = n
                .outputs
                .iter()
                .map(|o| !o.is_empty() && (g.outputs.contains(o) || read.contains(o.as_str())))
                .collect();
            attention_refusal(g, n, &used)
                .unwrap_or(
                    "a form its expansion does not cover (head counts, head size or ranks unknown when planning)",
                )
                .to_string()
        }
        "RMSNormalization" | "GroupNormalization" | "CastLike" => {
            "its expansion needs types and shapes unknown when planning (or a scale that does not fit them)".to_string()
        }
        _ => return None,
    })
}

/// The sequence length of a past KV cache (0 without one), when known.
fn past_len(b: &Builder, past: Option<&str>) -> Option<usize> {
    match past {
        None => Some(0),
        Some(p) => b.dims(p)?.get(2)?.known(),
    }
}

/// Whether every value of `t` is proved finite: a constant's, or what selects between, views
/// or casts to a float type wide enough such values (`depth` producers back at most).
fn finite(g: &Graph, t: &str, depth: usize) -> bool {
    if let Some(c) = super::edit::constant(g, t) {
        return c.dtype().is_float() && c.to_f64_vec().iter().all(|v| v.is_finite());
    }
    let Some(n) = g.nodes.iter().find(|n| n.outputs.iter().any(|o| o == t)).filter(|_| depth > 0) else {
        return false;
    };
    let input = |i: usize| n.input(i).is_some_and(|x| finite(g, x, depth - 1));
    match &n.op {
        Op::Where => input(1) && input(2),
        op if op.is_view() || matches!(op, Op::Expand | Op::Transpose { .. }) => input(0),
        // A cast of a constant: finite where the target type holds its values.
        Op::Cast { to, .. } => n.input(0).and_then(|x| super::edit::constant(g, x)).is_some_and(|c| {
            c.dtype().is_float()
                && Tensor::from_f64_as(*to, c.shape.clone(), &c.to_f64_vec())
                    .is_some_and(|y| y.to_f64_vec().iter().all(|v| v.is_finite()))
        }),
        _ => false,
    }
}

/// Whether a constant mask keeps at least one key in every query row (last axis: the keys).
fn rows_keep_a_key(mask: &Tensor) -> bool {
    let keys = mask.shape.last().copied().unwrap_or(1).max(1);
    let v = mask.to_f64_vec();
    let kept = |x: f64| if mask.dtype() == DType::Bool { x != 0.0 } else { x != f64::NEG_INFINITY };
    !v.is_empty() && v.chunks(keys).all(|row| row.iter().any(|&x| kept(x)))
}
