//! RNN, GRU and LSTM as the ONNX operator specification writes them: every step of every
//! sequence in order, gate sums accumulated in f64, states kept in f32, the outputs rounded
//! once to X's type. Steps past a sequence's length leave Y zero and the state unchanged.
//!
//! Two entry points share the recurrence: [`eval`] (the ONNX op, from X and W) and
//! [`eval_scan`] (the planner's `RecurrentScan`: the input projections X·Wᵀ + Wb already made
//! by a GEMM, R stored transposed as its kernel reads it).

use super::{float_in, float_out, opt, req, OpResult};
use crate::ir::{Cell, Recurrent, RnnDirection, Tensor, Unary};

use super::elementwise::unary_fn;

fn want(name: &str, t: &Tensor, shape: &[usize]) -> Result<(), String> {
    if t.shape != shape {
        return Err(format!("{name} has shape {:?}, expected {shape:?}", t.shape));
    }
    Ok(())
}

/// The ONNX operator: inputs X, W, R, B, sequence_lens, initial_h, initial_c, P.
pub fn eval(r: &Recurrent, inputs: &[Option<&Tensor>]) -> OpResult {
    let x = req(inputs, 0)?;
    let (w, rw) = (req(inputs, 1)?, req(inputs, 2)?);
    if x.rank() != 3 || w.rank() != 3 || rw.rank() != 3 {
        return Err(format!("X, W and R must have rank 3, have shapes {:?}, {:?}, {:?}", x.shape, w.shape, rw.shape));
    }
    let (dirs, gates) = (r.direction.count(), r.cell.gates());
    let (seq, batch, input) =
        if r.batch_major { (x.shape[1], x.shape[0], x.shape[2]) } else { (x.shape[0], x.shape[1], x.shape[2]) };
    let hidden = r.hidden_size.unwrap_or(rw.shape[2]);
    want("W", w, &[dirs, gates * hidden, input])?;
    want("R", rw, &[dirs, gates * hidden, hidden])?;
    let xv = float_in(x, "X")?;
    let wv = float_in(w, "W")?;
    let bias = biases(r, opt(inputs, 3), hidden)?;
    // proj[(t * batch + b) * D*G*H + d*G*H + row] = W[d, row]·x[t, b] + Wb[d, row].
    let width = dirs * gates * hidden;
    let mut proj = vec![0f64; seq * batch * width];
    for t in 0..seq {
        for b in 0..batch {
            let at = if r.batch_major { (b * seq + t) * input } else { (t * batch + b) * input };
            let xt = &xv[at..at + input];
            for (k, p) in proj[(t * batch + b) * width..][..width].iter_mut().enumerate() {
                let (d, row) = (k / (gates * hidden), k % (gates * hidden));
                let wrow = &wv[k * input..(k + 1) * input];
                *p = wrow.iter().zip(xt).map(|(&a, &c)| a as f64 * c as f64).sum::<f64>()
                    + bias[d * 2 * gates * hidden + row] as f64;
            }
        }
    }
    recur(r, x.dtype(), seq, batch, hidden, &proj, &float_in(rw, "R")?, &bias, &inputs[4.min(inputs.len())..])
}

/// The planner's `RecurrentScan`: inputs XW (`[seq, batch, D*G*H]`, batch-major `[batch, seq,
/// ..]`: every step's input projections with W's biases), Rᵀ (`[D, H, G*H]`), B (of which R's
/// biases are read), sequence_lens, initial_h, initial_c, P.
pub fn eval_scan(r: &Recurrent, inputs: &[Option<&Tensor>]) -> OpResult {
    let (xw, rt) = (req(inputs, 0)?, req(inputs, 1)?);
    if xw.rank() != 3 || rt.rank() != 3 {
        return Err(format!("XW and Rᵀ must have rank 3, have shapes {:?}, {:?}", xw.shape, rt.shape));
    }
    let (dirs, gates) = (r.direction.count(), r.cell.gates());
    let (seq, batch) = if r.batch_major { (xw.shape[1], xw.shape[0]) } else { (xw.shape[0], xw.shape[1]) };
    let hidden = rt.shape[1];
    let width = dirs * gates * hidden;
    want("XW", xw, &if r.batch_major { [batch, seq, width] } else { [seq, batch, width] })?;
    want("Rᵀ", rt, &[dirs, hidden, gates * hidden])?;
    let v = float_in(xw, "XW")?;
    let mut proj = vec![0f64; seq * batch * width];
    for t in 0..seq {
        for b in 0..batch {
            let at = if r.batch_major { (b * seq + t) * width } else { (t * batch + b) * width };
            for (p, &x) in proj[(t * batch + b) * width..][..width].iter_mut().zip(&v[at..at + width]) {
                *p = x as f64;
            }
        }
    }
    // Back to R's own [D, G*H, H].
    let rtv = float_in(rt, "Rᵀ")?;
    let mut rv = vec![0f32; rtv.len()];
    for d in 0..dirs {
        for k in 0..hidden {
            for row in 0..gates * hidden {
                rv[(d * gates * hidden + row) * hidden + k] = rtv[(d * hidden + k) * gates * hidden + row];
            }
        }
    }
    let bias = biases(r, opt(inputs, 2), hidden)?;
    recur(r, xw.dtype(), seq, batch, hidden, &proj, &rv, &bias, &inputs[3.min(inputs.len())..])
}

/// B `[D, 2*G*H]` (W's biases then R's), zeros when absent.
fn biases(r: &Recurrent, b: Option<&Tensor>, hidden: usize) -> Result<Vec<f32>, String> {
    let (dirs, gates) = (r.direction.count(), r.cell.gates());
    match b {
        Some(b) => {
            want("B", b, &[dirs, 2 * gates * hidden])?;
            float_in(b, "B")
        }
        None => Ok(vec![0.0; dirs * 2 * gates * hidden]),
    }
}

/// The recurrence from the input projections `proj` (time-major, W's biases in), R `[D, G*H,
/// H]`, B, and `rest`: sequence_lens, initial_h, initial_c, P.
#[allow(clippy::too_many_arguments)]
fn recur(
    r: &Recurrent,
    dtype: crate::ir::DType,
    seq: usize,
    batch: usize,
    hidden: usize,
    proj: &[f64],
    rv: &[f32],
    bias: &[f32],
    rest: &[Option<&Tensor>],
) -> OpResult {
    let (dirs, gates) = (r.direction.count(), r.cell.gates());
    let state_shape = if r.batch_major { [batch, dirs, hidden] } else { [dirs, batch, hidden] };
    let lstm = matches!(r.cell, Cell::Lstm { .. });
    let lens: Vec<usize> = match opt(rest, 0) {
        Some(l) => {
            let v = l.as_i64_vec().ok_or("sequence_lens must be an integer tensor")?;
            if v.len() != batch {
                return Err(format!("sequence_lens has {} entries for a batch of {batch}", v.len()));
            }
            v.into_iter()
                .map(|n| {
                    usize::try_from(n)
                        .ok()
                        .filter(|&n| n <= seq)
                        .ok_or_else(|| format!("sequence length {n} outside 0..={seq}"))
                })
                .collect::<Result<_, _>>()?
        }
        None => vec![seq; batch],
    };
    let state = |i: usize, name: &str| -> Result<Option<Vec<f32>>, String> {
        opt(rest, i)
            .map(|t| {
                want(name, t, &state_shape)?;
                float_in(t, name)
            })
            .transpose()
    };
    let h0 = state(1, "initial_h")?;
    let c0 = if lstm { state(2, "initial_c")? } else { None };
    let peep = match opt(rest, 3).filter(|_| lstm) {
        Some(p) => {
            want("P", p, &[dirs, 3 * hidden])?;
            Some(float_in(p, "P")?)
        }
        None => None,
    };
    let per_dir = r.cell.default_activations().len();
    if r.activations.len() != per_dir * dirs {
        return Err(format!("{} activations for {dirs} direction(s) of {per_dir}", r.activations.len()));
    }

    // Index of element (t, d, b, k) of Y / (d, b, k) of a state.
    let y_at = |t: usize, d: usize, b: usize| {
        if r.batch_major {
            ((b * seq + t) * dirs + d) * hidden
        } else {
            ((t * dirs + d) * batch + b) * hidden
        }
    };
    let s_at = |d: usize, b: usize| if r.batch_major { (b * dirs + d) * hidden } else { (d * batch + b) * hidden };

    let mut y = vec![0f32; seq * dirs * batch * hidden];
    let mut yh = vec![0f32; dirs * batch * hidden];
    let mut yc = vec![0f32; dirs * batch * hidden];
    let clip = |v: f64| match r.clip {
        Some(c) => v.clamp(-c as f64, c as f64),
        None => v,
    };
    let width = dirs * gates * hidden;
    for d in 0..dirs {
        let reverse = r.direction == RnnDirection::Reverse || d == 1;
        let acts: Vec<Box<dyn Fn(f64) -> f64>> =
            r.activations[d * per_dir..(d + 1) * per_dir].iter().map(|&u: &Unary| Box::new(unary_fn(u)) as _).collect();
        let rd = &rv[d * gates * hidden * hidden..(d + 1) * gates * hidden * hidden];
        let rb = &bias[d * 2 * gates * hidden + gates * hidden..(d + 1) * 2 * gates * hidden];
        let pd = peep.as_ref().map(|p| &p[d * 3 * hidden..(d + 1) * 3 * hidden]);
        // Row `row` of R times a state, plus that row's bias.
        let h_row = |row: usize, h: &[f32]| -> f64 {
            let w = &rd[row * hidden..(row + 1) * hidden];
            w.iter().zip(h).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() + rb[row] as f64
        };
        for b in 0..batch {
            let from = |v: &Option<Vec<f32>>| {
                v.as_ref().map_or(vec![0.0; hidden], |v| v[s_at(d, b)..s_at(d, b) + hidden].to_vec())
            };
            let (mut h, mut c) = (from(&h0), from(&c0));
            for step in 0..lens[b] {
                let t = if reverse { lens[b] - 1 - step } else { step };
                let xs = &proj[(t * batch + b) * width + d * gates * hidden..][..gates * hidden];
                let hs: Vec<f64> = (0..gates * hidden).map(|row| h_row(row, &h)).collect();
                let gate = |g: usize, j: usize| xs[g * hidden + j] + hs[g * hidden + j];
                let next_h: Vec<f32> = match r.cell {
                    Cell::Rnn => (0..hidden).map(|j| acts[0](clip(gate(0, j))) as f32).collect(),
                    Cell::Gru { linear_before_reset } => {
                        let z: Vec<f64> = (0..hidden).map(|j| acts[0](clip(gate(0, j)))).collect();
                        let rg: Vec<f64> = (0..hidden).map(|j| acts[0](clip(gate(1, j)))).collect();
                        // Without linear_before_reset the reset gate scales H before R_h.
                        let reset_h: Vec<f32> = (0..hidden).map(|k| (rg[k] * h[k] as f64) as f32).collect();
                        (0..hidden)
                            .map(|j| {
                                let row = 2 * hidden + j;
                                let recur = if linear_before_reset { rg[j] * hs[row] } else { h_row(row, &reset_h) };
                                let hh = acts[1](clip(xs[row] + recur));
                                ((1.0 - z[j]) * hh + z[j] * h[j] as f64) as f32
                            })
                            .collect()
                    }
                    Cell::Lstm { input_forget } => {
                        let p = |k: usize, j: usize| pd.map_or(0.0, |p| p[k * hidden + j] as f64);
                        (0..hidden)
                            .map(|j| {
                                let cj = c[j] as f64;
                                let i = acts[0](clip(gate(0, j) + p(0, j) * cj));
                                let f = if input_forget { 1.0 - i } else { acts[0](clip(gate(2, j) + p(2, j) * cj)) };
                                let g = acts[1](clip(gate(3, j)));
                                let cn = f * cj + i * g;
                                let o = acts[0](clip(gate(1, j) + p(1, j) * cn));
                                c[j] = cn as f32;
                                (o * acts[2](cn)) as f32
                            })
                            .collect()
                    }
                };
                h = next_h;
                y[y_at(t, d, b)..y_at(t, d, b) + hidden].copy_from_slice(&h);
            }
            yh[s_at(d, b)..s_at(d, b) + hidden].copy_from_slice(&h);
            yc[s_at(d, b)..s_at(d, b) + hidden].copy_from_slice(&c);
        }
    }
    let y_shape = if r.batch_major { vec![batch, seq, dirs, hidden] } else { vec![seq, dirs, batch, hidden] };
    let mut out = vec![float_out(dtype, y_shape, y), float_out(dtype, state_shape.to_vec(), yh)];
    if lstm {
        out.push(float_out(dtype, state_shape.to_vec(), yc));
    }
    Ok(out)
}
