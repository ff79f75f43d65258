//! Attention cores: `MatMul(Q, Kᵀ) -> scale -> (mask) -> Softmax(last axis) -> MatMul(·, V)`
//! as PyTorch's and HuggingFace's exporters write them (the scale as a Div or Mul by a scalar
//! after the first MatMul, or folded into Q and/or K before it; the mask added, selected by a
//! `Where` as `masked_fill` exports, or both; the head split/merge Reshape/Transpose stay
//! outside the core).
//!
//! [`find`] recognises each core as a typed [`Attention`] (or says why a Softmax is not one),
//! and [`Attention::eval`] states its meaning on host tensors: what a fused attention kernel
//! must compute, checked against the reference executor running the original ops
//! (tests/attention.rs). [`crate::plan::attention`] makes the cores a kernel takes one
//! [`FusedAttention`] node each; the others stay two batched GEMMs around a stitched softmax.

use crate::ir::{Binary, DType, Dim, Graph, Node, Op, Tensor, TensorData};
use serde::Serialize;
use std::collections::HashMap;

/// How the additive mask broadcasts over the scores [B, H, S_q, S_k].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MaskKind {
    /// One row per batch item, or one for all: [B, 1, 1, S_k] (padding masks, HuggingFace
    /// encoders).
    PerKey,
    /// A full [S_q, S_k] pattern, shared ([S_q, S_k], [1, 1, S_q, S_k]) or per batch item
    /// ([B, 1, S_q, S_k]): causal and block masks.
    PerQueryKey,
    /// Values per head: relative position biases (T5's [1, H, S_q, S_k], Swin's), ALiBi's
    /// [B, H, 1, S_k], or a padding mask added to one of them.
    PerHead,
}

/// A mask the model applies by selection (PyTorch's `masked_fill(mask, value)`, exported as
/// `Where`): the scores where `cond` keeps them, the constant `fill` (at most -10⁴) where it
/// masks. A kernel adds it as an additive mask ([`SelectMask::additive`]): 0 where kept, the
/// type's lowest value where masked (-inf where the model fills -inf). Where a query keeps a
/// key, a masked key's weight is 0 both ways (`exp(fill - max)` underflows in f32 for scaled
/// scores within ±4900). Where a query keeps no key, the model weighs its keys evenly (equal
/// scores): in f32 arithmetic so does the additive form with f32's or bf16's lowest value,
/// which absorbs any score; f16's (-65504) does not, so at f16 a selection with a finite fill
/// fuses only where every row keeps a key (`plan::attention`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectMask {
    pub cond: String,
    /// `Where(cond, fill, scores)`: true masks; `Where(cond, scores, fill)`: false masks.
    pub masked_when: bool,
    pub fill: f64,
    /// How `cond` broadcasts over the scores.
    pub kind: MaskKind,
}

impl SelectMask {
    /// The additive mask of `dtype` this selection is, for condition values `cond`.
    pub fn additive(&self, cond: &Tensor, dtype: DType) -> Result<Tensor, String> {
        let masked = if self.fill == f64::NEG_INFINITY { f64::NEG_INFINITY } else { lowest(dtype)? };
        let v: Vec<f64> =
            cond.to_f64_vec().iter().map(|&c| if (c != 0.0) == self.masked_when { masked } else { 0.0 }).collect();
        Tensor::from_f64_as(dtype, cond.shape.clone(), &v).ok_or_else(|| format!("a mask of type {dtype}"))
    }

    /// Whether condition values `cond` keep at least one key of every query (its last axis
    /// runs over the keys, or broadcasts one value over them).
    pub fn keeps_a_key_in_every_row(&self, cond: &Tensor) -> bool {
        let values = cond.to_f64_vec();
        let keys = cond.shape.last().copied().unwrap_or(1).max(1);
        !values.is_empty() && values.chunks(keys).all(|row| row.iter().any(|&c| (c != 0.0) != self.masked_when))
    }

    /// The value the additive form puts at masked keys, as a scalar of `dtype`.
    pub fn masked_value(&self, dtype: DType) -> Result<Tensor, String> {
        let v = if self.fill == f64::NEG_INFINITY { f64::NEG_INFINITY } else { lowest(dtype)? };
        Tensor::from_f64_as(dtype, vec![], &[v]).ok_or_else(|| format!("a mask of type {dtype}"))
    }
}

/// The lowest finite value of a float type.
fn lowest(dtype: DType) -> Result<f64, String> {
    match dtype {
        DType::F32 => Ok(f32::MIN as f64),
        DType::F16 => Ok(half::f16::MIN.to_f64()),
        DType::BF16 => Ok(half::bf16::MIN.to_f64()),
        DType::F64 => Ok(f64::MIN),
        d => Err(format!("scores of type {d}")),
    }
}

/// One recognised attention core. Q is [.., S_q, D], `k_t` is Kᵀ as the first MatMul reads it
/// ([.., D, S_k]), V is [.., S_k, D_v]; the output is [.., S_q, D_v].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Attention {
    /// The core's nodes in model order: first MatMul .. second MatMul (scale ops on Q/K too).
    pub nodes: Vec<String>,
    pub q: String,
    pub k_t: String,
    pub v: String,
    /// Multiplies Q·Kᵀ (every scalar Mul/Div on the way, Q's and K's included).
    pub scale: f64,
    /// The additive mask (`+ mask`).
    pub mask: Option<(String, MaskKind)>,
    /// The mask applied by selection (`Where`), nearest the Softmax like the additive one.
    pub select: Option<SelectMask>,
    pub output: String,
    /// [batch..., S_q, D] as shape inference knows them (symbolic dims stay symbolic).
    pub q_shape: Vec<Dim>,
    pub k_t_shape: Vec<Dim>,
}

/// A Softmax that is not the centre of an attention core, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NotAttention {
    pub softmax: String,
    pub reason: String,
}

struct Ctx<'g> {
    g: &'g Graph,
    producer: HashMap<&'g str, usize>,
    consumers: HashMap<&'g str, Vec<usize>>,
}

impl<'g> Ctx<'g> {
    fn producer(&self, t: &str) -> Option<&'g Node> {
        self.producer.get(t).map(|&i| &self.g.nodes[i])
    }

    /// The single reader of `t` (and `t` is no graph output): an intermediate of the core.
    fn only_reader(&self, t: &str) -> Result<&'g Node, String> {
        if self.g.outputs.iter().any(|o| o == t) {
            return Err(format!("'{t}' is a graph output"));
        }
        match self.consumers.get(t).map(Vec::as_slice) {
            Some([i]) => Ok(&self.g.nodes[*i]),
            Some(r) => Err(format!("'{t}' has {} readers", r.len())),
            None => Err(format!("'{t}' is not read")),
        }
    }

    fn scalar(&self, t: &str) -> Option<f64> {
        let c = self.g.initializers.get(t).cloned().or_else(|| match &self.producer(t)?.op {
            Op::Constant { value } => Some(value.clone()),
            _ => None,
        })?;
        (c.len() == 1 && c.dtype().is_float()).then(|| c.to_f64_vec()[0])
    }

    fn shape(&self, t: &str) -> Option<Vec<Dim>> {
        self.g.types.get(t)?.shape.as_ref().map(|s| s.0.clone())
    }

    /// `n` is `x * c` or `x / c` (either operand order for Mul) with scalar constant `c`:
    /// (x, the factor it applies).
    fn scaling(&self, n: &Node) -> Option<(String, f64)> {
        let (a, b) = (n.input(0)?, n.input(1)?);
        match n.op {
            Op::Binary(Binary::Mul) => match (self.scalar(a), self.scalar(b)) {
                (None, Some(c)) => Some((a.to_string(), c)),
                (Some(c), None) => Some((b.to_string(), c)),
                _ => None,
            },
            Op::Binary(Binary::Div) => self.scalar(b).filter(|c| *c != 0.0).map(|c| (a.to_string(), 1.0 / c)),
            _ => None,
        }
    }
}

impl Ctx<'_> {
    /// `n` is `Where(cond, fill, x)` or `Where(cond, x, fill)` with a scalar constant `fill`:
    /// (cond, x, fill, whether true masks).
    fn selection(&self, n: &Node) -> Option<(String, String, f64, bool)> {
        if !matches!(n.op, Op::Where) {
            return None;
        }
        let (c, a, b) = (n.input(0)?, n.input(1)?, n.input(2)?);
        match (self.scalar(a), self.scalar(b)) {
            (Some(f), None) => Some((c.to_string(), b.to_string(), f, true)),
            (None, Some(f)) => Some((c.to_string(), a.to_string(), f, false)),
            _ => None,
        }
    }
}

/// Every Softmax of `g`: the attention cores it centres, or why not.
pub fn find(g: &Graph) -> (Vec<Attention>, Vec<NotAttention>) {
    let mut cx = Ctx { g, producer: HashMap::new(), consumers: HashMap::new() };
    for (i, n) in g.nodes.iter().enumerate() {
        for o in &n.outputs {
            cx.producer.insert(o.as_str(), i);
        }
        for x in n.inputs.iter().flatten() {
            cx.consumers.entry(x.as_str()).or_default().push(i);
        }
    }
    let (mut found, mut not) = (Vec::new(), Vec::new());
    for n in &g.nodes {
        if let Op::Softmax { .. } = n.op {
            match core(&cx, n) {
                Ok(a) => found.push(a),
                Err(reason) => not.push(NotAttention { softmax: n.name.clone(), reason }),
            }
        }
    }
    (found, not)
}

fn core(cx: &Ctx, softmax: &Node) -> Result<Attention, String> {
    let Op::Softmax { axis } = softmax.op else { unreachable!("called on Softmax nodes") };
    let x = softmax.input(0).ok_or("no input")?;
    let rank = cx.shape(x).ok_or_else(|| format!("rank of '{x}' unknown"))?.len();
    if !(axis == -1 || axis == rank as i64 - 1) {
        return Err(format!("softmax over axis {axis} of a rank-{rank} tensor, not the last (keys) axis"));
    }
    // Forwards: the probabilities are the first operand of the only MatMul reading them.
    let p = &softmax.outputs[0];
    let pv = cx.only_reader(p).map_err(|e| format!("probabilities: {e}"))?;
    if !matches!(pv.op, Op::MatMul) || pv.input(0) != Some(p.as_str()) {
        return Err(format!("probabilities feed {} '{}', not the first operand of a MatMul", pv.op.op_type(), pv.name));
    }
    let v = pv.input(1).ok_or("second MatMul without V")?.to_string();
    // Backwards from the softmax: [+ mask] [scale]* MatMul(Q, Kᵀ).
    let mut nodes = vec![softmax.name.clone(), pv.name.clone()];
    let (mut scale, mut mask, mut select) = (1.0f64, None, None);
    let mut t = x.to_string();
    let qk = loop {
        // Every intermediate is read by the next op of the core only.
        cx.only_reader(&t).map_err(|e| format!("scores: {e}"))?;
        let n = cx.producer(&t).ok_or_else(|| format!("'{t}' has no producer (a graph input)"))?;
        match &n.op {
            Op::MatMul => break n,
            // Walking backwards, the mask Add comes first (nearest the Softmax).
            Op::Binary(Binary::Add) if mask.is_none() && scale == 1.0 => {
                // The mask is the operand not on the chain (the chain side comes from the
                // MatMul or a scale).
                let (a, b) = (n.input(0).ok_or("Add input")?, n.input(1).ok_or("Add input")?);
                let on_chain = |s: &str| {
                    cx.producer(s).is_some_and(|p| {
                        matches!(p.op, Op::MatMul) || cx.scaling(p).is_some() || cx.selection(p).is_some()
                    })
                };
                let (chain, m) = if on_chain(a) { (a, b) } else { (b, a) };
                mask = Some(m.to_string());
                nodes.insert(0, n.name.clone());
                t = chain.to_string();
            }
            Op::Binary(Binary::Add) => {
                return Err(format!("'{}': a second Add, or the mask added before the scale", n.name))
            }
            Op::Where if select.is_none() && scale == 1.0 => {
                let (cond, chain, fill, masked_when) = cx.selection(n).ok_or_else(|| {
                    format!("'{}': a Where that does not choose between the scores and a constant", n.name)
                })?;
                // Only a fill no score comes near is a mask (a masked key then weighs nothing).
                if !(fill <= -1e4) {
                    return Err(format!("'{}' fills masked scores with {fill}: a mask fills at most -10⁴", n.name));
                }
                select = Some((cond, masked_when, fill));
                nodes.insert(0, n.name.clone());
                t = chain;
            }
            Op::Where => return Err(format!("'{}': a second Where, or the selection before the scale", n.name)),
            _ => match cx.scaling(n) {
                Some((from, c)) => {
                    scale *= c;
                    nodes.insert(0, n.name.clone());
                    t = from;
                }
                None => {
                    return Err(format!(
                        "scores come from {} '{}', not MatMul -> scale -> mask",
                        n.op.op_type(),
                        n.name
                    ))
                }
            },
        }
    };
    nodes.insert(0, qk.name.clone());
    // Scales folded into Q or K before the first MatMul (e.g. both by D^-1/4).
    let mut operand = |i: usize| -> Result<String, String> {
        let mut s = qk.input(i).ok_or("first MatMul operand")?.to_string();
        while let Some(n) = cx.producer(&s) {
            let Some((from, c)) = cx.scaling(n) else { break };
            if cx.only_reader(&s).is_err() {
                break;
            }
            scale *= c;
            nodes.insert(0, n.name.clone());
            s = from;
        }
        Ok(s)
    };
    let (q, k_t) = (operand(0)?, operand(1)?);
    let q_shape = cx.shape(&q).ok_or_else(|| format!("shape of Q '{q}' unknown"))?;
    let k_t_shape = cx.shape(&k_t).ok_or_else(|| format!("shape of Kᵀ '{k_t}' unknown"))?;
    if q_shape.len() < 3 || q_shape.len() != k_t_shape.len() {
        return Err(format!("Q rank {} and Kᵀ rank {}: not batched heads", q_shape.len(), k_t_shape.len()));
    }
    let mask = match mask {
        None => None,
        Some(m) => {
            let ms = cx.shape(&m).ok_or_else(|| format!("shape of mask '{m}' unknown"))?;
            Some((
                m.clone(),
                mask_kind(&ms, &q_shape, &k_t_shape).ok_or_else(|| {
                    format!("mask '{m}' of shape {ms:?} does not broadcast to the scores (never over keys)")
                })?,
            ))
        }
    };
    let select = match select {
        None => None,
        Some((cond, masked_when, fill)) => {
            let cs = cx.shape(&cond).ok_or_else(|| format!("shape of mask condition '{cond}' unknown"))?;
            let kind = mask_kind(&cs, &q_shape, &k_t_shape).ok_or_else(|| {
                format!("mask condition '{cond}' of shape {cs:?} does not broadcast to the scores (never over keys)")
            })?;
            Some(SelectMask { cond, masked_when, fill, kind })
        }
    };
    Ok(Attention { nodes, q, k_t, v, scale, mask, select, output: pv.outputs[0].clone(), q_shape, k_t_shape })
}

/// How a mask of dims `m` broadcasts over the scores `[batch.., S_q, S_k]` of Q `q` and Kᵀ
/// `k_t`, if it does (numpy rules, every dim known or symbolic, never broadcast over keys).
fn mask_kind(m: &[Dim], q: &[Dim], k_t: &[Dim]) -> Option<MaskKind> {
    let one = |d: &Dim| matches!(d, Dim::Known(1));
    let r = q.len();
    let scores: Vec<&Dim> = q[..r - 2].iter().chain([&q[r - 2], &k_t[r - 1]]).collect();
    if m.is_empty() || m.len() > r || m.last() != Some(scores[r - 1]) || m.iter().any(|d| *d == Dim::Unknown) {
        return None;
    }
    let off = r - m.len();
    if m.iter().enumerate().any(|(j, d)| !one(d) && d != scores[off + j]) {
        return None;
    }
    // Whether the mask has more than one value along scores axis `axis`.
    let varies = |axis: usize| axis >= off && !one(&m[axis - off]);
    if (1..r - 2).any(varies) {
        Some(MaskKind::PerHead)
    } else if varies(r - 2) {
        Some(MaskKind::PerQueryKey)
    } else {
        Some(MaskKind::PerKey)
    }
}

/// An attention core as one planned op ([`Op::Attention`], what a fused attention kernel
/// runs). Its inputs are the sources of Q, K and V, then the mask when there is one; each
/// operand is a transpose of its source that keeps the last (head-dim) axis: Q =
/// Transpose(input 0, `q_perm`) is `[.., S_q, D]`, K = Transpose(input 1, `k_perm`) is
/// `[.., S_k, D]` (K, not the model's Kᵀ), V = Transpose(input 2, `v_perm`) is `[.., S_k, D_v]`.
/// A kernel reads them in place by strides, so the head split/merge transposes of a model
/// cost nothing. Rank 3 (`[B, S, D]`) or 4 (`[B, H, S, D]`); batch dims broadcast.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct FusedAttention {
    pub scale: f64,
    pub q_perm: Vec<usize>,
    pub k_perm: Vec<usize>,
    pub v_perm: Vec<usize>,
    pub mask: bool,
    /// The output is the context with its heads merged (`[B, S_q, H, D_v]`, the model's
    /// Transpose [0, 2, 1, 3] after the core, written directly) instead of `[B, H, S_q, D_v]`.
    #[serde(default)]
    pub merge_heads: bool,
    /// Query `i` sees keys `j <= i` only (causal from the top left): what the model's constant
    /// causal mask said, done by the kernel, which skips the masked tiles (no mask input).
    #[serde(default)]
    pub causal: bool,
    /// Q, K and V as column windows of one packed projection (one GEMM computes all three:
    /// [`crate::plan::attention::pack_projections`] packed them, or the model's fused
    /// projection did): input `i` is that projection's output `[.., W]` and operand `i`'s
    /// source is its window viewed as `[.., heads, head_dim]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed: Option<[HeadWindow; 3]>,
}

/// Head `h`'s columns `[start + h * head_stride, .. + head_dim)` of a packed projection's
/// output `[.., W]`, viewed as `[.., heads, head_dim]`: read in place through strides (rows
/// `W` apart). Heads are contiguous (`head_stride = head_dim`) where Q, K and V are packed
/// side by side (GPT-2's `c_attn`), `head_stride = 3 * head_dim` where a fused projection
/// interleaves them per head (GPT-NeoX's `[.., H, 3 * D]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HeadWindow {
    pub start: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub head_stride: usize,
}

impl HeadWindow {
    /// One past the last column the window reads.
    pub fn end(&self) -> usize {
        self.start + self.heads.saturating_sub(1) * self.head_stride + self.head_dim
    }
}

impl FusedAttention {
    pub fn rank(&self) -> usize {
        self.q_perm.len()
    }

    /// The dims of operand `i`'s source (what its permutation reorders) given its input's
    /// dims: the input itself, or its window split into heads (`known` makes a dim).
    pub fn source_dims<T: Clone>(&self, i: usize, input: &[T], known: impl Fn(usize) -> T) -> Vec<T> {
        match self.packed.map(|w| w[i]) {
            Some(w) if !input.is_empty() => {
                input[..input.len() - 1].iter().cloned().chain([known(w.heads), known(w.head_dim)]).collect()
            }
            _ => input.to_vec(),
        }
    }

    /// Operand `i`'s source on a dense input of shape `input`: its dims, element strides and
    /// the element offset of its first element.
    pub fn source_view(&self, i: usize, input: &[usize]) -> (Vec<usize>, Vec<i64>, usize) {
        let st = bolt_codegen::abi::contiguous_strides(input);
        match self.packed.map(|w| w[i]) {
            Some(w) if !input.is_empty() => {
                let n = input.len();
                let dims = self.source_dims(i, input, |d| d);
                let strides = st[..n - 1].iter().copied().chain([w.head_stride as i64, 1]).collect();
                (dims, strides, w.start)
            }
            _ => (input.to_vec(), st, 0),
        }
    }

    /// The op's meaning on host tensors: [`attention`] of the permuted operands.
    pub fn eval(&self, inputs: &[&Tensor]) -> Result<Tensor, String> {
        let want = 3 + usize::from(self.mask);
        if inputs.len() != want {
            return Err(format!("{} inputs, the op takes {want}", inputs.len()));
        }
        let view = |i: usize, perm: &[usize]| -> Result<Tensor, String> {
            let source = self.source(i, inputs[i])?;
            Ok(crate::reference::ops::layout::transpose(&source, Some(perm))?.swap_remove(0))
        };
        let r = self.rank();
        let mut kt_perm = self.k_perm.clone();
        kt_perm.swap(r - 2, r - 1);
        let (q, k_t, v) = (view(0, &self.q_perm)?, view(1, &kt_perm)?, view(2, &self.v_perm)?);
        // Causal masking is the pattern added to any mask read.
        let mask = match (self.causal, inputs.get(3).copied()) {
            (false, m) => m.cloned(),
            (true, m) => {
                let (sq, sk) = (q.shape[r - 2], k_t.shape[r - 1]);
                let v: Vec<f64> = (0..sq * sk).map(|x| if x % sk > x / sk { f64::NEG_INFINITY } else { 0.0 }).collect();
                let dtype = m.map_or(DType::F32, Tensor::dtype);
                let pattern = Tensor::from_f64_as(dtype, vec![sq, sk], &v).ok_or("a mask of a non-float type")?;
                Some(match m {
                    Some(m) => crate::reference::ops::eval_op(&Op::Binary(Binary::Add), &[Some(m), Some(&pattern)])?
                        .swap_remove(0),
                    None => pattern,
                })
            }
        };
        let out = attention(&q, &k_t, &v, mask.as_ref(), self.scale)?;
        if self.merge_heads {
            return Ok(crate::reference::ops::layout::transpose(&out, Some(&[0, 2, 1, 3]))?.swap_remove(0));
        }
        Ok(out)
    }
}

impl FusedAttention {
    /// Operand `i`'s source as a dense tensor: `t` itself, or its window's columns.
    fn source(&self, i: usize, t: &Tensor) -> Result<Tensor, String> {
        let Some(w) = self.packed.map(|w| w[i]) else { return Ok(t.clone()) };
        let width = *t.shape.last().ok_or("a packed projection of rank 0")?;
        if w.end() > width || w.head_stride < w.head_dim {
            return Err(format!("window {w:?} of a packed projection {width} wide"));
        }
        let v = t.to_f64_vec();
        let out: Vec<f64> = v
            .chunks(width.max(1))
            .flat_map(|row| (0..w.heads).flat_map(move |h| &row[w.start + h * w.head_stride..][..w.head_dim]))
            .copied()
            .collect();
        let (shape, _, _) = self.source_view(i, &t.shape);
        Tensor::from_f64_as(t.dtype(), shape, &out).ok_or_else(|| format!("a packed projection of type {}", t.dtype()))
    }
}

impl Attention {
    /// The additive mask of `dtype` (the scores' type) a kernel adds for this core, given the
    /// values of its additive mask and of its selection's condition: the one there is, or
    /// their sum (broadcast).
    pub fn additive_mask(
        &self,
        dtype: DType,
        mask: Option<&Tensor>,
        cond: Option<&Tensor>,
    ) -> Result<Option<Tensor>, String> {
        let selected = match (&self.select, cond) {
            (Some(s), Some(c)) => Some(s.additive(c, dtype)?),
            (None, None) => None,
            _ => return Err("a selection mask needs its condition, and only it".into()),
        };
        Ok(match (mask, selected) {
            (Some(m), Some(s)) => {
                Some(crate::reference::ops::eval_op(&Op::Binary(Binary::Add), &[Some(m), Some(&s)])?.swap_remove(0))
            }
            (m, s) => s.or_else(|| m.cloned()),
        })
    }

    /// [`attention`] with this core's scale.
    pub fn eval(&self, q: &Tensor, k_t: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Result<Tensor, String> {
        attention(q, k_t, v, mask, self.scale)
    }
}

/// softmax(scale · Q·Kᵀ + mask) · V on host tensors, in f32 with the result rounded once
/// to Q's type (as a fused kernel that keeps scores on chip would). Batch dims broadcast
/// as in MatMul; the mask as in Add.
pub fn attention(q: &Tensor, k_t: &Tensor, v: &Tensor, mask: Option<&Tensor>, scale: f64) -> Result<Tensor, String> {
    let (r, rk, rv) = (q.shape.len(), k_t.shape.len(), v.shape.len());
    if r < 2 || rk != r || rv != r {
        return Err(format!("ranks {r}, {rk}, {rv}: Q, Kᵀ and V must share one rank >= 2"));
    }
    let (sq, d) = (q.shape[r - 2], q.shape[r - 1]);
    let (d2, sk) = (k_t.shape[r - 2], k_t.shape[r - 1]);
    let (sk2, dv) = (v.shape[r - 2], v.shape[r - 1]);
    if d != d2 || sk != sk2 {
        return Err(format!("Q {:?}, Kᵀ {:?}, V {:?} do not chain", q.shape, k_t.shape, v.shape));
    }
    let batch: Vec<usize> = (0..r - 2)
        .map(|i| {
            let ds = [q.shape[i], k_t.shape[i], v.shape[i]];
            let m = *ds.iter().max().expect("three dims");
            if ds.iter().all(|&x| x == m || x == 1) {
                Ok(m)
            } else {
                Err(format!("batch dim {i}: {ds:?} do not broadcast"))
            }
        })
        .collect::<Result<_, _>>()?;
    let scores_shape: Vec<usize> = batch.iter().copied().chain([sq, sk]).collect();
    let mvals = match mask {
        Some(m) => Some(broadcast(m, &scores_shape)?),
        None => None,
    };
    let (qf, kf, vf) = (q.to_f32_vec(), k_t.to_f32_vec(), v.to_f32_vec());
    let nb: usize = batch.iter().product();
    let mut out = vec![0f32; nb * sq * dv];
    let mut row = vec![0f32; sk];
    for b in 0..nb {
        let (qo, ko, vo) = (
            offset(b, &batch, &q.shape) * sq * d,
            offset(b, &batch, &k_t.shape) * d * sk,
            offset(b, &batch, &v.shape) * sk * dv,
        );
        for i in 0..sq {
            for (j, s) in row.iter_mut().enumerate() {
                let dot: f32 = (0..d).map(|e| qf[qo + i * d + e] * kf[ko + e * sk + j]).sum();
                *s = (scale as f32) * dot + mvals.as_ref().map_or(0.0, |m| m[(b * sq + i) * sk + j]);
            }
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for s in row.iter_mut() {
                *s = (*s - max).exp();
                sum += *s;
            }
            for c in 0..dv {
                let acc: f32 = (0..sk).map(|j| row[j] * vf[vo + j * dv + c]).sum();
                out[(b * sq + i) * dv + c] = acc / sum;
            }
        }
    }
    let shape: Vec<usize> = batch.into_iter().chain([sq, dv]).collect();
    let data = match q.dtype() {
        DType::F16 => TensorData::F16(out.iter().map(|&x| half::f16::from_f32(x)).collect()),
        DType::BF16 => TensorData::BF16(out.iter().map(|&x| half::bf16::from_f32(x)).collect()),
        _ => TensorData::F32(out),
    };
    Tensor::new(shape, data)
}

/// Flat batch index `b` (over `batch`) as an index into a tensor whose leading dims
/// (`shape[..batch.len()]`) may be 1 (broadcast).
fn offset(b: usize, batch: &[usize], shape: &[usize]) -> usize {
    let (mut rem, mut off, mut stride) = (b, 0, 1);
    for i in (0..batch.len()).rev() {
        let idx = rem % batch[i];
        rem /= batch[i];
        if shape[i] != 1 {
            off += idx * stride;
        }
        stride *= shape[i];
    }
    off
}

/// `t`'s values broadcast (numpy rules) to `shape`, as f32.
fn broadcast(t: &Tensor, shape: &[usize]) -> Result<Vec<f32>, String> {
    if crate::ir::broadcast_static(&t.shape, shape).as_deref() != Some(shape) {
        return Err(format!("mask {:?} does not broadcast to the scores {shape:?}", t.shape));
    }
    let src = t.to_f32_vec();
    Ok(crate::ir::broadcast_index(&t.shape, shape).into_iter().map(|i| src[i]).collect())
}
