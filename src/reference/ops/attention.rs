//! ONNX's transformer ops of opsets 23-25: Attention (scaled dot-product attention with its
//! masks, KV cache, grouped heads, soft cap and debug output) and RotaryEmbedding, as the
//! operators define them (onnx's reference implementation decides the corner cases: masked
//! keys are -inf, a query row no key may attend gives zeros, not NaN). Computed in f64 and
//! rounded once to the output type. The planner lowers the common forms to the attention
//! cores it fuses ([`crate::plan::canonical`]); these are what those lowerings are checked
//! against, and what runs where Bolt is the host.

use super::{opt, req, OpResult};
use crate::ir::{broadcast_index, Attrs, DType, Tensor};

/// Attention's attributes (absent ones at their defaults).
pub struct AttentionAttrs {
    pub q_num_heads: Option<usize>,
    pub kv_num_heads: Option<usize>,
    pub scale: Option<f64>,
    pub is_causal: bool,
    pub softcap: f64,
    pub qk_matmul_output_mode: i64,
    pub left_window: i64,
    pub right_window: i64,
}

impl AttentionAttrs {
    pub fn read(a: &Attrs) -> AttentionAttrs {
        let heads = |k: &str| a.int(k).filter(|&h| h > 0).map(|h| h as usize);
        AttentionAttrs {
            q_num_heads: heads("q_num_heads"),
            kv_num_heads: heads("kv_num_heads"),
            scale: a.float("scale"),
            is_causal: a.int("is_causal").unwrap_or(0) != 0,
            softcap: a.float("softcap").unwrap_or(0.0),
            qk_matmul_output_mode: a.int("qk_matmul_output_mode").unwrap_or(0),
            left_window: a.int("left_window_size").unwrap_or(-1),
            right_window: a.int("right_window_size").unwrap_or(-1),
        }
    }
}

/// A [B, H, S, D] operand as f64 values, from a 4-D input or a 3-D [B, S, H·D] one split
/// into `heads` heads.
struct Heads {
    dims: [usize; 4],
    v: Vec<f64>,
}

impl Heads {
    fn of(t: &Tensor, heads: Option<usize>, what: &str) -> Result<Heads, String> {
        let v = t.to_f64_vec();
        match t.shape[..] {
            [b, h, s, d] => Ok(Heads { dims: [b, h, s, d], v }),
            [b, s, hidden] => {
                let h = heads.ok_or_else(|| format!("{what} is 3-D: q_num_heads and kv_num_heads are required"))?;
                if hidden % h != 0 {
                    return Err(format!("{what}'s hidden size {hidden} is not a multiple of its {h} heads"));
                }
                let d = hidden / h;
                // [B, S, H, D] -> [B, H, S, D]
                let mut out = vec![0.0; v.len()];
                for bi in 0..b {
                    for si in 0..s {
                        for hi in 0..h {
                            for di in 0..d {
                                out[((bi * h + hi) * s + si) * d + di] = v[((bi * s + si) * h + hi) * d + di];
                            }
                        }
                    }
                }
                Ok(Heads { dims: [b, h, s, d], v: out })
            }
            _ => Err(format!("{what} must be 3-D or 4-D, has shape {:?}", t.shape)),
        }
    }

    fn at(&self, b: usize, h: usize, s: usize) -> &[f64] {
        let [_, hs, ss, d] = self.dims;
        let i = ((b * hs + h) * ss + s) * d;
        &self.v[i..i + d]
    }

    /// Past entries then these along the sequence axis (the KV cache update).
    fn after(past: Heads, now: Heads, what: &str) -> Result<Heads, String> {
        let ([b, h, sp, d], [b2, h2, sn, d2]) = (past.dims, now.dims);
        if (b, h, d) != (b2, h2, d2) {
            return Err(format!("past_{what} {:?} does not extend {what} {:?}", past.dims, now.dims));
        }
        let mut v = Vec::with_capacity(past.v.len() + now.v.len());
        for bh in 0..b * h {
            v.extend_from_slice(&past.v[bh * sp * d..(bh + 1) * sp * d]);
            v.extend_from_slice(&now.v[bh * sn * d..(bh + 1) * sn * d]);
        }
        Ok(Heads { dims: [b, h, sp + sn, d], v })
    }

    fn tensor(&self, dtype: DType) -> Result<Tensor, String> {
        Tensor::from_f64_as(dtype, self.dims.to_vec(), &self.v).ok_or_else(|| format!("an output of type {dtype}"))
    }
}

/// Inputs Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen; outputs Y,
/// present_key, present_value, qk_matmul_output.
pub fn attention(inputs: &[Option<&Tensor>], at: &AttentionAttrs) -> OpResult {
    let (q, k, v) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let dtype = q.dtype();
    if !dtype.is_float() {
        return Err(format!("Q must be a float tensor, is {dtype}"));
    }
    if q.rank() != k.rank() || q.rank() != v.rank() {
        return Err(format!("Q, K and V must have one rank, have {:?}, {:?}, {:?}", q.shape, k.shape, v.shape));
    }
    let three_d = q.rank() == 3;
    let (qh, mut kh, mut vh) =
        (Heads::of(q, at.q_num_heads, "Q")?, Heads::of(k, at.kv_num_heads, "K")?, Heads::of(v, at.kv_num_heads, "V")?);
    let (past_k, past_v, nonpad) = (opt(inputs, 4), opt(inputs, 5), opt(inputs, 6));
    if past_k.is_some() != past_v.is_some() {
        return Err("past_key and past_value must be given together".into());
    }
    if nonpad.is_some() && past_k.is_some() {
        return Err("nonpad_kv_seqlen cannot be combined with past_key / past_value".into());
    }
    let past_len = match (past_k, past_v) {
        (Some(pk), Some(pv)) => {
            let len = pk.shape.get(2).copied().ok_or("past_key must be 4-D")?;
            kh = Heads::after(Heads::of(pk, None, "past_key")?, kh, "key")?;
            vh = Heads::after(Heads::of(pv, None, "past_value")?, vh, "value")?;
            len
        }
        _ => 0,
    };
    let [b, hq, sq, d] = qh.dims;
    let [bk, hk, skv, dk] = kh.dims;
    let [bv, hv, sv, dv] = vh.dims;
    if (bk, bv) != (b, b) || dk != d || hv != hk || sv != skv {
        return Err(format!(
            "Q [B, H, S, D] = {:?}, K {:?} and V {:?} do not agree (batch, head size, KV heads and length)",
            qh.dims, kh.dims, vh.dims
        ));
    }
    if hk == 0 || hq % hk != 0 {
        return Err(format!("{hq} query heads are not a multiple of {hk} key/value heads"));
    }
    let group = hq / hk;
    let scale = at.scale.unwrap_or(1.0 / (d as f64).sqrt());

    // The additive bias per (batch, head, query, key): the mask (shorter masks pad with
    // masked keys), the causal and window frontiers at the cache offset, the padding of
    // nonpad_kv_seqlen.
    let mask = opt(inputs, 3);
    let mask_info = match mask {
        Some(m) => {
            let last = *m.shape.last().ok_or("attn_mask must have rank >= 1")?;
            if last > skv || m.rank() > 4 {
                return Err(format!("attn_mask of shape {:?} does not fit scores of {skv} keys", m.shape));
            }
            let mut padded = m.shape.clone();
            *padded.last_mut().unwrap() = skv;
            let full = [b, hq, sq, skv];
            if crate::ir::broadcast_static(&padded, &full).as_deref() != Some(&full[..]) {
                return Err(format!("attn_mask of shape {:?} does not broadcast to {full:?}", m.shape));
            }
            Some((m.dtype() == DType::Bool, m.to_f64_vec(), broadcast_index(&padded, &full), last))
        }
        None => None,
    };
    let lengths: Option<Vec<i64>> = match nonpad {
        Some(t) => {
            let l = t.as_i64_vec().ok_or("nonpad_kv_seqlen must be int64")?;
            if l.len() != b {
                return Err(format!("nonpad_kv_seqlen has {} entries for a batch of {b}", l.len()));
            }
            Some(l)
        }
        None => None,
    };
    let offset = |bi: usize| -> i64 {
        match &lengths {
            Some(l) if past_len == 0 => l[bi] - sq as i64,
            _ => past_len as i64,
        }
    };
    let windowed = at.left_window >= 0 || at.right_window >= 0;
    let bias = |bi: usize, hi: usize, i: usize, j: usize| -> f64 {
        let flat = ((bi * hq + hi) * sq + i) * skv + j;
        let mut x = match &mask_info {
            // Keys past the mask's own length are masked (its padding).
            Some((_, _, _, last)) if j >= *last => f64::NEG_INFINITY,
            Some((boolean, mv, idx, last)) => {
                // The padded index maps back to the unpadded mask's element.
                let p = idx[flat];
                let (row, col) = (p / skv, p % skv);
                let m = mv[row * last + col];
                match boolean {
                    true if m != 0.0 => 0.0,
                    true => f64::NEG_INFINITY,
                    false => m,
                }
            }
            None => 0.0,
        };
        let pos = i as i64 + offset(bi);
        if at.is_causal && j as i64 > pos {
            x = f64::NEG_INFINITY;
        }
        if windowed {
            let diff = pos - j as i64;
            if (at.left_window >= 0 && diff > at.left_window) || (at.right_window >= 0 && -diff > at.right_window) {
                x = f64::NEG_INFINITY;
            }
        }
        if lengths.as_ref().is_some_and(|l| j as i64 >= l[bi]) {
            x = f64::NEG_INFINITY;
        }
        x
    };

    let mut y = vec![0.0; b * hq * sq * dv];
    let mut qk_out = vec![0.0; b * hq * sq * skv];
    let mut scores = vec![0.0; skv];
    let mut biases = vec![0.0; skv];
    for bi in 0..b {
        for hi in 0..hq {
            let kv_head = hi / group;
            for i in 0..sq {
                let qrow = qh.at(bi, hi, i);
                for j in 0..skv {
                    let krow = kh.at(bi, kv_head, j);
                    let mut s = scale * qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>();
                    if at.softcap > 0.0 {
                        s = at.softcap * (s / at.softcap).tanh();
                    }
                    scores[j] = s;
                    biases[j] = bias(bi, hi, i, j);
                }
                let row = ((bi * hq + hi) * sq + i) * skv;
                let with_bias: Vec<f64> = scores.iter().zip(&biases).map(|(s, b)| s + b).collect();
                if at.qk_matmul_output_mode == 2 {
                    qk_out[row..row + skv].copy_from_slice(&with_bias);
                } else if at.qk_matmul_output_mode != 3 {
                    qk_out[row..row + skv].copy_from_slice(&scores);
                }
                // A row whose bias masks every key attends nothing: zeros, not NaN.
                let all_masked = biases.iter().all(|&x| x == f64::NEG_INFINITY);
                let probs: Vec<f64> = if all_masked {
                    vec![0.0; skv]
                } else {
                    let max = with_bias.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let max = if max == f64::NEG_INFINITY { 0.0 } else { max };
                    let e: Vec<f64> = with_bias.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    let sum = if sum == 0.0 { 1.0 } else { sum };
                    e.iter().map(|x| x / sum).collect()
                };
                if at.qk_matmul_output_mode == 3 {
                    qk_out[row..row + skv].copy_from_slice(&probs);
                }
                let out = &mut y[((bi * hq + hi) * sq + i) * dv..][..dv];
                for (j, p) in probs.iter().enumerate() {
                    if *p != 0.0 {
                        for (o, x) in out.iter_mut().zip(vh.at(bi, kv_head, j)) {
                            *o += p * x;
                        }
                    }
                }
            }
        }
    }
    let y = if three_d {
        // [B, H, S, Dv] -> [B, S, H·Dv]
        let mut t = vec![0.0; y.len()];
        for bi in 0..b {
            for hi in 0..hq {
                for si in 0..sq {
                    for di in 0..dv {
                        t[((bi * sq + si) * hq + hi) * dv + di] = y[((bi * hq + hi) * sq + si) * dv + di];
                    }
                }
            }
        }
        Tensor::from_f64_as(dtype, vec![b, sq, hq * dv], &t)
    } else {
        Tensor::from_f64_as(dtype, vec![b, hq, sq, dv], &y)
    };
    Ok(vec![
        y.ok_or_else(|| format!("an output of type {dtype}"))?,
        kh.tensor(k.dtype())?,
        vh.tensor(v.dtype())?,
        Tensor::from_f64_as(dtype, vec![b, hq, sq, skv], &qk_out)
            .ok_or_else(|| format!("an output of type {dtype}"))?,
    ])
}

/// RotaryEmbedding (opset 23): rotates the first `rotary_embedding_dim` (default: all) of
/// each head's features by the cached cos / sin of its position: pairs are the two halves,
/// or neighbours when `interleaved`. Input [B, H, S, D] or [B, S, H·D] (`num_heads`); caches
/// [B, S, R/2], or [positions, R/2] read at `position_ids` [B, S].
pub fn rotary_embedding(inputs: &[Option<&Tensor>], a: &Attrs) -> OpResult {
    let (x, cos, sin) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    let interleaved = a.int("interleaved").unwrap_or(0) != 0;
    let (b, s, h, d, four_d) = match x.shape[..] {
        [b, h, s, d] => (b, s, h, d, true),
        [b, s, hidden] => {
            let h = a.int("num_heads").filter(|&h| h > 0).ok_or("a 3-D input needs num_heads")? as usize;
            if hidden % h != 0 {
                return Err(format!("hidden size {hidden} is not a multiple of num_heads {h}"));
            }
            (b, s, h, hidden / h, false)
        }
        _ => return Err(format!("input must be 3-D or 4-D, has shape {:?}", x.shape)),
    };
    let r = match a.int("rotary_embedding_dim").unwrap_or(0) {
        0 => d,
        r if r > 0 && r as usize <= d && r % 2 == 0 => r as usize,
        r => return Err(format!("rotary_embedding_dim {r} must be even and at most the head size {d}")),
    };
    let half = r / 2;
    let (cv, sv) = (cos.to_f64_vec(), sin.to_f64_vec());
    if cos.shape != sin.shape || cos.shape.last() != Some(&half) {
        return Err(format!("cos and sin caches {:?}, {:?} must agree and end in {half}", cos.shape, sin.shape));
    }
    // The cache row of (batch, position).
    let rows: Vec<usize> = match opt(inputs, 3) {
        Some(p) => {
            let ids = p.as_i64_vec().ok_or("position_ids must be int64")?;
            if p.shape != [b, s] || cos.rank() != 2 {
                return Err(format!("position_ids {:?} must be [{b}, {s}] over caches of rank 2", p.shape));
            }
            ids.iter()
                .map(|&i| usize::try_from(i).ok().filter(|&i| i < cos.shape[0]))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("a position id is outside the caches' {} rows", cos.shape[0]))?
        }
        None if cos.shape == [b, s, half] => (0..b * s).collect(),
        None => return Err(format!("without position_ids the caches must be [{b}, {s}, {half}], are {:?}", cos.shape)),
    };
    let xv = x.to_f64_vec();
    let mut y = xv.clone();
    // Element (batch, position, head, feature) of the input.
    let at = |bi: usize, si: usize, hi: usize, di: usize| {
        if four_d {
            ((bi * h + hi) * s + si) * d + di
        } else {
            ((bi * s + si) * h + hi) * d + di
        }
    };
    for bi in 0..b {
        for si in 0..s {
            let row = rows[bi * s + si] * half;
            for hi in 0..h {
                for k in 0..half {
                    let (i1, i2) = if interleaved { (2 * k, 2 * k + 1) } else { (k, k + half) };
                    let (x1, x2) = (xv[at(bi, si, hi, i1)], xv[at(bi, si, hi, i2)]);
                    let (c, sn) = (cv[row + k], sv[row + k]);
                    y[at(bi, si, hi, i1)] = c * x1 - sn * x2;
                    y[at(bi, si, hi, i2)] = sn * x1 + c * x2;
                }
            }
        }
    }
    Ok(vec![Tensor::from_f64_as(x.dtype(), x.shape.clone(), &y).ok_or("a float input")?])
}
