//! RNN, GRU and LSTM as the ONNX operator specification writes them: every step of every
//! sequence in order, gate sums accumulated in f64, states kept in f32, the outputs rounded
//! once to X's type. Steps past a sequence's length leave Y zero and the state unchanged.

use super::{float_in, float_out, opt, req, OpResult};
use crate::ir::{Cell, Recurrent, RnnDirection, Tensor, Unary};

use super::elementwise::unary_fn;

pub fn eval(r: &Recurrent, inputs: &[Option<&Tensor>]) -> OpResult {
    let x = req(inputs, 0)?;
    let (w, rw) = (req(inputs, 1)?, req(inputs, 2)?);
    if x.rank() != 3 || w.rank() != 3 || rw.rank() != 3 {
        return Err(format!("X, W and R must have rank 3, have shapes {:?}, {:?}, {:?}", x.shape, w.shape, rw.shape));
    }
    let dirs = r.direction.count();
    let gates = r.cell.gates();
    let (seq, batch, input) =
        if r.batch_major { (x.shape[1], x.shape[0], x.shape[2]) } else { (x.shape[0], x.shape[1], x.shape[2]) };
    let hidden = r.hidden_size.unwrap_or(rw.shape[2]);
    let want = |name: &str, t: &Tensor, shape: &[usize]| -> Result<(), String> {
        if t.shape != shape {
            return Err(format!("{name} has shape {:?}, expected {shape:?}", t.shape));
        }
        Ok(())
    };
    want("W", w, &[dirs, gates * hidden, input])?;
    want("R", rw, &[dirs, gates * hidden, hidden])?;
    let state_shape = if r.batch_major { [batch, dirs, hidden] } else { [dirs, batch, hidden] };
    let lstm = matches!(r.cell, Cell::Lstm { .. });
    let xv = float_in(x, "X")?;
    let wv = float_in(w, "W")?;
    let rv = float_in(rw, "R")?;
    let bias = match opt(inputs, 3) {
        Some(b) => {
            want("B", b, &[dirs, 2 * gates * hidden])?;
            float_in(b, "B")?
        }
        None => vec![0.0; dirs * 2 * gates * hidden],
    };
    let lens: Vec<usize> = match opt(inputs, 4) {
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
        opt(inputs, i)
            .map(|t| {
                want(name, t, &state_shape)?;
                float_in(t, name)
            })
            .transpose()
    };
    let h0 = state(5, "initial_h")?;
    let c0 = if lstm { state(6, "initial_c")? } else { None };
    let peep = match opt(inputs, 7).filter(|_| lstm) {
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

    // Index of element (t, b, k) of X / (t, d, b, k) of Y / (d, b, k) of a state.
    let x_at = |t: usize, b: usize| if r.batch_major { (b * seq + t) * input } else { (t * batch + b) * input };
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
    for d in 0..dirs {
        let reverse = r.direction == RnnDirection::Reverse || d == 1;
        let acts: Vec<Box<dyn Fn(f64) -> f64>> =
            r.activations[d * per_dir..(d + 1) * per_dir].iter().map(|&u: &Unary| Box::new(unary_fn(u)) as _).collect();
        let wd = &wv[d * gates * hidden * input..(d + 1) * gates * hidden * input];
        let rd = &rv[d * gates * hidden * hidden..(d + 1) * gates * hidden * hidden];
        let (wb, rb) = bias[d * 2 * gates * hidden..(d + 1) * 2 * gates * hidden].split_at(gates * hidden);
        let pd = peep.as_ref().map(|p| &p[d * 3 * hidden..(d + 1) * 3 * hidden]);
        // Row `row` of W times x_t / of R times a state, plus that row's bias.
        let x_row = |row: usize, xt: &[f32]| -> f64 {
            let w = &wd[row * input..(row + 1) * input];
            w.iter().zip(xt).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() + wb[row] as f64
        };
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
                let xt = &xv[x_at(t, b)..x_at(t, b) + input];
                let xs: Vec<f64> = (0..gates * hidden).map(|row| x_row(row, xt)).collect();
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
    let dt = x.dtype();
    let mut out = vec![float_out(dt, y_shape, y), float_out(dt, state_shape.to_vec(), yh)];
    if lstm {
        out.push(float_out(dt, state_shape.to_vec(), yc));
    }
    Ok(out)
}
