//! Ops Bolt compiles no kernel for (they import as host-only, opaque nodes) that the reference
//! executor still computes, so that a model holding them runs whole where Bolt is the host
//! (`bolt run`, the artifact's host steps) and can be checked: ArgMax / ArgMin (classifier and
//! decoder heads), Tile, OneHot and ScatterElements (table and sequence decoders), Sum, Mean,
//! Max and Min of more than two inputs. Each follows
//! the ONNX operator's definition; the ONNX conformance cases check them.

use super::{opt, req, OpResult};
use crate::ir::infer::norm_axis;
use crate::ir::{AttrValue, DType, Tensor};

/// The outputs of default-domain op `op_type`, or `None` when this module does not compute it.
pub fn eval(op_type: &str, attrs: &[(String, AttrValue)], inputs: &[Option<&Tensor>]) -> Option<OpResult> {
    let int = |name: &str, default: i64| {
        attrs.iter().find(|(n, _)| n == name).map_or(default, |(_, v)| match v {
            AttrValue::Int(i) => *i,
            _ => default,
        })
    };
    Some(match op_type {
        "ArgMax" | "ArgMin" => req(inputs, 0).and_then(|x| {
            arg_extreme(
                x,
                int("axis", 0),
                int("keepdims", 1) != 0,
                int("select_last_index", 0) != 0,
                op_type == "ArgMax",
            )
        }),
        "Tile" => req(inputs, 0).and_then(|x| tile(x, req(inputs, 1)?)),
        "Sum" | "Mean" | "Max" | "Min" => variadic(op_type, inputs),
        "OneHot" => one_hot(req(inputs, 0), req(inputs, 1), req(inputs, 2), int("axis", -1)),
        "ScatterElements" => {
            let reduction = attrs.iter().find(|(n, _)| n == "reduction").map(|(_, v)| match v {
                AttrValue::String(s) => String::from_utf8_lossy(s).into_owned(),
                _ => String::new(),
            });
            scatter_elements(inputs, int("axis", 0), reduction.as_deref().unwrap_or("none"))
        }
        _ => return None,
    })
}

/// ONNX's variadic Sum, Mean, Max and Min: the binary op folded over every input (each
/// broadcast), Mean the sum over the count.
fn variadic(op_type: &str, inputs: &[Option<&Tensor>]) -> OpResult {
    use super::elementwise::binary;
    use crate::ir::Binary;
    let inputs: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let (first, rest) = inputs.split_first().ok_or("no inputs")?;
    let op = match op_type {
        "Max" => Binary::Max,
        "Min" => Binary::Min,
        _ => Binary::Add,
    };
    let mut acc = (*first).clone();
    for x in rest {
        acc = binary(op, &acc, x)?.remove(0);
    }
    if op_type == "Mean" {
        let n = Tensor::from_f64_as(acc.dtype(), vec![], &[inputs.len() as f64])
            .ok_or_else(|| format!("Mean of {} inputs", acc.dtype()))?;
        acc = binary(Binary::Div, &acc, &n)?.remove(0);
    }
    Ok(vec![acc])
}

fn ints(t: &Tensor, what: &str) -> Result<Vec<i64>, String> {
    t.as_i64_vec().ok_or_else(|| format!("{what} must be integers, are {}", t.dtype()))
}

/// (outer, length, inner) of `shape` around axis `a`.
fn around(shape: &[usize], a: usize) -> (usize, usize, usize) {
    (shape[..a].iter().product(), shape[a], shape[a + 1..].iter().product())
}

/// The index of the largest (`max`) or smallest element along `axis`, the first of equal ones
/// (the last with `last`); a NaN is the extreme, as numpy's argmax / argmin.
fn arg_extreme(x: &Tensor, axis: i64, keepdims: bool, last: bool, max: bool) -> OpResult {
    let a = norm_axis(axis, x.rank(), false)?;
    let (outer, n, inner) = around(&x.shape, a);
    if n == 0 {
        return Err(format!("axis {a} is empty"));
    }
    let v = x.to_f64_vec();
    let beats = |cand: f64, best: f64| -> bool {
        match (cand.is_nan(), best.is_nan()) {
            (_, true) => last && cand.is_nan(),
            (true, false) => true,
            _ if cand == best => last,
            _ => (cand > best) == max,
        }
    };
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| v[(o * n + k) * inner + i];
            let mut best = 0;
            for k in 1..n {
                if beats(at(k), at(best)) {
                    best = k;
                }
            }
            out.push(best as i64);
        }
    }
    let mut shape = x.shape.clone();
    if keepdims {
        shape[a] = 1;
    } else {
        shape.remove(a);
    }
    Ok(vec![Tensor::from_i64(shape, out)])
}

/// `x` repeated `repeats[d]` times along each axis d.
fn tile(x: &Tensor, repeats: &Tensor) -> OpResult {
    let r = ints(repeats, "repeats")?;
    if r.len() != x.rank() || r.iter().any(|&k| k < 0) {
        return Err(format!("repeats {r:?} for an input of rank {}: one non-negative count per axis", x.rank()));
    }
    let shape: Vec<usize> = x.shape.iter().zip(&r).map(|(&d, &k)| d * k as usize).collect();
    let total: usize = shape.iter().product();
    let mut src = Vec::with_capacity(total);
    for mut i in 0..total {
        // Output index -> its source: each coordinate modulo the input's extent.
        let (mut s, mut stride) = (0, 1);
        for d in (0..shape.len()).rev() {
            s += (i % shape[d]) % x.shape[d] * stride;
            i /= shape[d];
            stride *= x.shape[d];
        }
        src.push(s);
    }
    Ok(vec![Tensor { data: x.data.gather(&src), shape }])
}

/// `values[1]` where an index (negative: counted from `depth`) equals the position along the
/// new axis, `values[0]` elsewhere (also for indices out of range).
fn one_hot(
    indices: Result<&Tensor, String>,
    depth: Result<&Tensor, String>,
    values: Result<&Tensor, String>,
    axis: i64,
) -> OpResult {
    let (indices, depth, values) = (indices?, depth?, values?);
    if depth.len() != 1 || values.len() != 2 {
        return Err(format!("depth has {} elements and values {}: OneHot takes 1 and 2", depth.len(), values.len()));
    }
    let depth = depth.to_f64_vec()[0];
    if !(depth >= 1.0) {
        return Err(format!("depth {depth} must be at least 1"));
    }
    let depth = depth as usize;
    let a = norm_axis(axis, indices.rank() + 1, false)?;
    let idx: Vec<f64> = indices.to_f64_vec();
    let (outer, inner) = (indices.shape[..a].iter().product::<usize>(), indices.shape[a..].iter().product::<usize>());
    let mut pick = Vec::with_capacity(outer * depth * inner);
    for o in 0..outer {
        for k in 0..depth {
            for i in 0..inner {
                let v = idx[o * inner + i].trunc();
                let v = if v < 0.0 { v + depth as f64 } else { v };
                pick.push(usize::from(v == k as f64));
            }
        }
    }
    let mut shape = indices.shape[..a].to_vec();
    shape.push(depth);
    shape.extend_from_slice(&indices.shape[a..]);
    Ok(vec![Tensor { data: values.data.gather(&pick), shape }])
}

/// `data` with each element of `updates` written (or combined by `reduction`) at its own
/// position, the coordinate along `axis` taken from `indices`.
fn scatter_elements(inputs: &[Option<&Tensor>], axis: i64, reduction: &str) -> OpResult {
    let (data, indices, updates) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
    if opt(inputs, 3).is_some() {
        return Err("ScatterElements takes three inputs".into());
    }
    if indices.shape != updates.shape || indices.rank() != data.rank() || data.dtype() != updates.dtype() {
        return Err(format!(
            "indices {:?} and updates {:?} ({}) must share a shape of the data's rank and the data's type ({:?}, {})",
            indices.shape,
            updates.shape,
            updates.dtype(),
            data.shape,
            data.dtype()
        ));
    }
    let a = norm_axis(axis, data.rank(), false)?;
    if let Some(d) = (0..data.rank()).find(|&d| d != a && indices.shape[d] > data.shape[d]) {
        return Err(format!("indices {:?} exceed the data {:?} on axis {d}", indices.shape, data.shape));
    }
    let idx = ints(indices, "indices")?;
    // Destination of each update: its own coordinates, axis a's from the index.
    let rank = data.rank();
    let mut targets = Vec::with_capacity(idx.len());
    for (p, &i) in idx.iter().enumerate() {
        let dim = data.shape[a] as i64;
        let i = if i < 0 { i + dim } else { i };
        if !(0..dim).contains(&i) {
            return Err(format!("index {} out of range for axis {a} of size {dim}", idx[p]));
        }
        let (mut rest, mut t, mut stride) = (p, 0, 1);
        for d in (0..rank).rev() {
            let c = rest % indices.shape[d];
            rest /= indices.shape[d];
            t += if d == a { i as usize } else { c } * stride;
            stride *= data.shape[d];
        }
        targets.push(t);
    }
    let combine = |old: f64, new: f64| -> Result<f64, String> {
        Ok(match reduction {
            "none" => new,
            "add" => old + new,
            "mul" => old * new,
            "max" => old.max(new),
            "min" => old.min(new),
            other => return Err(format!("unknown reduction '{other}'")),
        })
    };
    let dtype = data.dtype();
    let out = if dtype.is_float() || dtype == DType::Bool {
        let (mut v, u) = (data.to_f64_vec(), updates.to_f64_vec());
        for (&t, &x) in targets.iter().zip(&u) {
            v[t] = combine(v[t], x)?;
        }
        Tensor::from_f64_as(dtype, data.shape.clone(), &v)
    } else {
        // Integers exactly, in i64.
        let (mut v, u) = (ints(data, "data")?, ints(updates, "updates")?);
        for (&t, &x) in targets.iter().zip(&u) {
            v[t] = match reduction {
                "none" => x,
                "add" => v[t].wrapping_add(x),
                "mul" => v[t].wrapping_mul(x),
                "max" => v[t].max(x),
                "min" => v[t].min(x),
                other => return Err(format!("unknown reduction '{other}'")),
            };
        }
        Tensor::from_i64_as(dtype, data.shape.clone(), &v)
    };
    Ok(vec![out.ok_or_else(|| format!("cannot scatter {dtype}"))?])
}
