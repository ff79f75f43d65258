//! Ops Bolt compiles no kernel for (they import as host-only, opaque nodes) that the reference
//! executor still computes, so that a model holding them runs whole where Bolt is the host
//! (`bolt run`, the artifact's host steps) and can be checked. Here: ArgMax / ArgMin and
//! Hardmax (classifier and decoder heads), Tile, OneHot and ScatterElements (table and
//! sequence decoders), Sum, Mean, Max and Min of more than two inputs, Mod, IsNaN, IsInf,
//! NonZero, SpaceToDepth, Trilu, EyeLike and InstanceNormalization. In their own files, dispatched from here:
//! indexing (GatherElements, GatherND, ScatterND), ops along one axis (CumSum, TopK,
//! ReverseSequence), Einsum, quantization and the Fourier transforms. Each follows the ONNX
//! operator's definition; the ONNX conformance cases check them.

use super::{opt, req, OpResult};
use crate::ir::infer::norm_axis;
use crate::ir::{broadcast_index, broadcast_static, AttrValue, Attrs, DType, Tensor, TensorData};

/// The default-domain op types [`eval`] computes (where their inputs fit).
pub const COMPUTED: &[&str] = &[
    "ArgMax",
    "ArgMin",
    "Hardmax",
    "Tile",
    "Sum",
    "Mean",
    "Max",
    "Min",
    "OneHot",
    "ScatterElements",
    "Mod",
    "IsNaN",
    "IsInf",
    "NonZero",
    "SpaceToDepth",
    "GatherElements",
    "GatherND",
    "ScatterND",
    "CumSum",
    "TopK",
    "ReverseSequence",
    "Trilu",
    "EyeLike",
    "Einsum",
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "MatMulInteger",
    "ConvInteger",
    "DFT",
    "STFT",
    "InstanceNormalization",
    "LRN",
    "Dropout",
    "CastLike",
    "RMSNormalization",
    "Attention",
    "RotaryEmbedding",
    "GroupNormalization",
];

/// The outputs of default-domain op `op_type`, or `None` when the reference does not compute it.
pub fn eval(op_type: &str, attrs: &[(String, AttrValue)], inputs: &[Option<&Tensor>]) -> Option<OpResult> {
    let a = Attrs(attrs);
    let int = |name: &str, default: i64| a.int(name).unwrap_or(default);
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
        "Hardmax" => req(inputs, 0).and_then(|x| hardmax(x, int("axis", -1))),
        "Tile" => req(inputs, 0).and_then(|x| tile(x, req(inputs, 1)?)),
        "Sum" | "Mean" | "Max" | "Min" => variadic(op_type, inputs),
        "OneHot" => one_hot(req(inputs, 0), req(inputs, 1), req(inputs, 2), int("axis", -1)),
        "ScatterElements" => {
            scatter_elements(inputs, int("axis", 0), a.string("reduction").as_deref().unwrap_or("none"))
        }
        "Mod" => req(inputs, 0).and_then(|x| modulo(x, req(inputs, 1)?, int("fmod", 0) != 0)),
        "IsNaN" => req(inputs, 0).and_then(|x| is_class(x, f64::is_nan)),
        "IsInf" => {
            let (neg, pos) = (int("detect_negative", 1) != 0, int("detect_positive", 1) != 0);
            req(inputs, 0).and_then(|x| is_class(x, |v| v.is_infinite() && if v > 0.0 { pos } else { neg }))
        }
        "NonZero" => req(inputs, 0).and_then(non_zero),
        "SpaceToDepth" => {
            req(inputs, 0).and_then(|x| space_to_depth(x, int("blocksize", 0), a.string("mode").as_deref()))
        }
        "GatherElements" => super::gather_scatter::gather_elements(req(inputs, 0), req(inputs, 1), int("axis", 0)),
        "GatherND" => super::gather_scatter::gather_nd(req(inputs, 0), req(inputs, 1), int("batch_dims", 0)),
        "ScatterND" => super::gather_scatter::scatter_nd(inputs, a.string("reduction").as_deref().unwrap_or("none")),
        "CumSum" => super::along_axis::cumsum(inputs, int("exclusive", 0) != 0, int("reverse", 0) != 0),
        "TopK" => super::along_axis::top_k(inputs, a),
        "ReverseSequence" => super::along_axis::reverse_sequence(inputs, int("batch_axis", 1), int("time_axis", 0)),
        "Trilu" => trilu(inputs, int("upper", 1) != 0),
        "EyeLike" => eye_like(req(inputs, 0), a.has("dtype").then(|| int("dtype", 1)), int("k", 0)),
        "Einsum" => match a.string("equation") {
            Some(eq) => super::einsum::einsum(&eq, inputs),
            None => Err("Einsum needs its equation attribute".into()),
        },
        "QuantizeLinear" | "DequantizeLinear" | "DynamicQuantizeLinear" | "MatMulInteger" | "ConvInteger" => {
            super::quantize::eval(op_type, a, inputs)
        }
        "DFT" => super::spectral::dft(inputs, int("inverse", 0) != 0, int("onesided", 0) != 0),
        "STFT" => super::spectral::stft(inputs, int("onesided", 1) != 0),
        "InstanceNormalization" => super::norm::instance_norm(inputs, a.float("epsilon").unwrap_or(1e-5)),
        "LRN" => match a.has("size") {
            true => super::norm::lrn(
                inputs,
                int("size", 0),
                a.float("alpha").unwrap_or(1e-4),
                a.float("beta").unwrap_or(0.75),
                a.float("bias").unwrap_or(1.0),
            ),
            false => Err("LRN needs its size attribute".into()),
        },
        "Dropout" => dropout(inputs),
        // Cast to the second input's element type (ONNX functions and the dynamo exporter write
        // it to match a constant's type to a value's).
        "CastLike" => {
            req(inputs, 0).and_then(|x| super::elementwise::cast(x, req(inputs, 1)?.dtype(), int("saturate", 1) != 0))
        }
        "RMSNormalization" => super::norm::rms_norm(inputs, int("axis", -1), a.float("epsilon").unwrap_or(1e-5)),
        "Attention" => super::attention::attention(inputs, &super::attention::AttentionAttrs::read(&a)),
        "RotaryEmbedding" => super::attention::rotary_embedding(inputs, &a),
        "GroupNormalization" => match a.int("num_groups") {
            Some(groups) => super::norm::group_norm(inputs, groups, a.float("epsilon").unwrap_or(1e-5)),
            None => Err("GroupNormalization needs its num_groups attribute".into()),
        },
        _ => return None,
    })
}

/// Dropout in inference: its input, and a mask of all true (what onnx's reference and
/// onnxruntime give outside training). A training_mode of true draws random masks: refused.
fn dropout(inputs: &[Option<&Tensor>]) -> OpResult {
    let x = req(inputs, 0)?;
    if let Some(t) = opt(inputs, 2) {
        match t.to_f64_vec().as_slice() {
            [v] if *v == 0.0 => {}
            [_] => return Err("training_mode is true: training draws random masks; Bolt runs inference".into()),
            _ => return Err(format!("training_mode must be one bool, is {} {:?}", t.dtype(), t.shape)),
        }
    }
    let mask = Tensor::from_i64_as(DType::Bool, x.shape.clone(), &vec![1; x.len()])
        .expect("bool tensors are built from integers");
    Ok(vec![x.clone(), mask])
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

pub(super) fn ints(t: &Tensor, what: &str) -> Result<Vec<i64>, String> {
    t.as_i64_vec().ok_or_else(|| format!("{what} must be integers, are {}", t.dtype()))
}

/// (outer, length, inner) of `shape` around axis `a`.
pub(super) fn around(shape: &[usize], a: usize) -> (usize, usize, usize) {
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
    Ok(vec![scatter_into(data, updates, &targets, reduction)?])
}

/// `data` with `updates[i]` written to (or combined by `reduction` with) element `targets[i]`,
/// in order: the last write to one element wins, as ONNX's reference applies them.
pub(super) fn scatter_into(
    data: &Tensor,
    updates: &Tensor,
    targets: &[usize],
    reduction: &str,
) -> Result<Tensor, String> {
    let dtype = data.dtype();
    if updates.dtype() != dtype {
        return Err(format!("updates are {} but the data is {dtype}", updates.dtype()));
    }
    let out = match reduction {
        // Any element type: each element's source, the data's or an update's.
        "none" => {
            let mut src: Vec<usize> = (0..data.len()).collect();
            for (u, &t) in targets.iter().enumerate() {
                src[t] = data.len() + u;
            }
            let all = data.data.chained(&updates.data).ok_or("updates and data differ in type")?;
            Some(Tensor { shape: data.shape.clone(), data: all.gather(&src) })
        }
        "add" | "mul" | "max" | "min" if dtype.is_float() || dtype == DType::Bool => {
            let (mut v, u) = (data.to_f64_vec(), updates.to_f64_vec());
            for (&t, &x) in targets.iter().zip(&u) {
                v[t] = match reduction {
                    "add" => v[t] + x,
                    "mul" => v[t] * x,
                    "max" => v[t].max(x),
                    _ => v[t].min(x),
                };
            }
            Tensor::from_f64_as(dtype, data.shape.clone(), &v)
        }
        "add" | "mul" | "max" | "min" => {
            // Integers exactly, in i64.
            let (mut v, u) = (ints(data, "data")?, ints(updates, "updates")?);
            for (&t, &x) in targets.iter().zip(&u) {
                v[t] = match reduction {
                    "add" => v[t].wrapping_add(x),
                    "mul" => v[t].wrapping_mul(x),
                    "max" => v[t].max(x),
                    _ => v[t].min(x),
                };
            }
            Tensor::from_i64_as(dtype, data.shape.clone(), &v)
        }
        other => return Err(format!("unknown reduction '{other}' (none, add, mul, max or min)")),
    };
    out.ok_or_else(|| format!("cannot scatter {dtype}"))
}

/// 1 where `x` holds its first largest value along `axis`, 0 elsewhere (Hardmax-13).
fn hardmax(x: &Tensor, axis: i64) -> OpResult {
    if !x.dtype().is_float() {
        return Err(format!("input must be a float tensor, is {}", x.dtype()));
    }
    let a = norm_axis(axis, x.rank(), false)?;
    let mut v = vec![0.0; x.len()];
    if !v.is_empty() {
        let (_, n, inner) = around(&x.shape, a);
        let best = arg_extreme(x, axis, false, false, true)?.remove(0);
        let best = best.as_i64_vec().expect("indices are i64");
        for (p, &k) in best.iter().enumerate() {
            let (o, i) = (p / inner, p % inner);
            v[(o * n + k as usize) * inner + i] = 1.0;
        }
    }
    Ok(vec![Tensor::from_f64_as(x.dtype(), x.shape.clone(), &v).expect("a float type")])
}

/// ONNX Mod, broadcasting: with `fmod` C's fmod (the sign of the dividend, floats' only
/// form before opset 28); without, the sign of the divisor, as Python's `%` (numpy's mod).
fn modulo(a: &Tensor, b: &Tensor, fmod: bool) -> OpResult {
    if a.dtype() != b.dtype() {
        return Err(format!("input types differ: {} vs {}", a.dtype(), b.dtype()));
    }
    let shape = broadcast_static(&a.shape, &b.shape)
        .ok_or_else(|| format!("shapes {:?} and {:?} do not broadcast", a.shape, b.shape))?;
    let (ia, ib) = (broadcast_index(&a.shape, &shape), broadcast_index(&b.shape, &shape));
    let dtype = a.dtype();
    let out = if dtype.is_float() {
        let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
        let v: Vec<f64> = ia
            .iter()
            .zip(&ib)
            .map(|(&i, &j)| {
                let (x, y) = (x[i], y[j]);
                let r = x % y; // C fmod: NaN for an infinite x or a zero y.
                match () {
                    _ if fmod || r.is_nan() => r,
                    _ if r == 0.0 => 0.0f64.copysign(y),
                    _ if (r < 0.0) != (y < 0.0) => r + y,
                    _ => r,
                }
            })
            .collect();
        Tensor::from_f64_as(dtype, shape, &v)
    } else if dtype.is_integer() {
        let (x, y) = (ints(a, "A")?, ints(b, "B")?);
        let unsigned = matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64);
        let mut v = Vec::with_capacity(ia.len());
        for (&i, &j) in ia.iter().zip(&ib) {
            let (x, y) = (x[i], y[j]);
            if y == 0 {
                return Err("integer modulo by zero".into());
            }
            v.push(if unsigned {
                // u64 beyond i64's range: the bits reinterpret.
                ((x as u64) % (y as u64)) as i64
            } else {
                let r = x.wrapping_rem(y);
                if !fmod && r != 0 && (r < 0) != (y < 0) {
                    r + y
                } else {
                    r
                }
            });
        }
        Tensor::from_i64_as(dtype, shape, &v)
    } else {
        return Err(format!("Mod is not defined on {dtype}"));
    };
    Ok(vec![out.ok_or_else(|| format!("Mod of {dtype}"))?])
}

/// A bool tensor: whether each element of float tensor `x` is of the class `test` picks.
fn is_class(x: &Tensor, test: impl Fn(f64) -> bool) -> OpResult {
    if !x.dtype().is_float() {
        return Err(format!("input must be a float tensor, is {}", x.dtype()));
    }
    let v = x.to_f64_vec().into_iter().map(test).collect();
    Ok(vec![Tensor { shape: x.shape.clone(), data: TensorData::Bool(v) }])
}

/// The coordinates of the non-zero elements, one column each in row-major order: [rank, count].
fn non_zero(x: &Tensor) -> OpResult {
    let nz: Vec<usize> = x.to_f64_vec().iter().enumerate().filter(|(_, v)| **v != 0.0).map(|(i, _)| i).collect();
    let (rank, n) = (x.rank(), nz.len());
    let mut out = vec![0i64; rank * n];
    for (c, &i) in nz.iter().enumerate() {
        let mut rest = i;
        for d in (0..rank).rev() {
            out[d * n + c] = (rest % x.shape[d]) as i64;
            rest /= x.shape[d];
        }
    }
    Ok(vec![Tensor::from_i64(vec![rank, n], out)])
}

/// Blocks of [blocksize, blocksize] pixels moved into channels: [N, C, H, W] -> [N, C * b * b,
/// H / b, W / b], the block offset outermost (DCR, the default) or innermost (CRD).
fn space_to_depth(x: &Tensor, blocksize: i64, mode: Option<&str>) -> OpResult {
    let crd = match mode.unwrap_or("DCR") {
        "DCR" => false,
        "CRD" => true,
        other => return Err(format!("unknown mode '{other}' (DCR or CRD)")),
    };
    let &[n, c, h, w] = &x.shape[..] else {
        return Err(format!("input must have rank 4, has shape {:?}", x.shape));
    };
    let b = usize::try_from(blocksize)
        .ok()
        .filter(|&b| b > 0 && h % b == 0 && w % b == 0)
        .ok_or_else(|| format!("blocksize {blocksize} must be positive and divide the height {h} and width {w}"))?;
    let (ho, wo) = (h / b, w / b);
    let mut src = Vec::with_capacity(x.len());
    for ni in 0..n {
        for co in 0..c * b * b {
            // The output channel's (channel, block row, block column).
            let (ci, bh, bw) = if crd { (co / (b * b), co / b % b, co % b) } else { (co % c, co / c / b, co / c % b) };
            for y in 0..ho {
                for xo in 0..wo {
                    src.push(((ni * c + ci) * h + y * b + bh) * w + xo * b + bw);
                }
            }
        }
    }
    Ok(vec![Tensor { data: x.data.gather(&src), shape: vec![n, c * b * b, ho, wo] }])
}

/// The upper (or lower) triangle of each matrix in the last two axes, from diagonal `k`
/// (input 1, default 0; positive above the main one); zeros elsewhere.
fn trilu(inputs: &[Option<&Tensor>], upper: bool) -> OpResult {
    let x = req(inputs, 0)?;
    let k = match opt(inputs, 1) {
        Some(k) if k.len() == 1 => ints(k, "k")?[0],
        Some(k) => return Err(format!("k must hold one value, has shape {:?}", k.shape)),
        None => 0,
    };
    if x.rank() < 2 {
        return Err(format!("input must have rank >= 2, has shape {:?}", x.shape));
    }
    let (rows, cols) = (x.shape[x.rank() - 2], x.shape[x.rank() - 1]);
    let zero = TensorData::zeros(x.dtype(), 1).ok_or_else(|| format!("cannot compute {}", x.dtype()))?;
    let all = x.data.chained(&zero).expect("same type");
    let src: Vec<usize> = (0..x.len())
        .map(|p| {
            let (i, j) = ((p / cols % rows) as i64, (p % cols) as i64);
            let keep = if upper { j - i >= k } else { j - i <= k };
            if keep {
                p
            } else {
                x.len()
            }
        })
        .collect();
    Ok(vec![Tensor { data: all.gather(&src), shape: x.shape.clone() }])
}

/// A 2-D tensor of the input's shape with ones on diagonal `k`, zeros elsewhere; of the type
/// ONNX code `dtype` names, else the input's.
fn eye_like(x: Result<&Tensor, String>, dtype: Option<i64>, k: i64) -> OpResult {
    let x = x?;
    let &[rows, cols] = &x.shape[..] else {
        return Err(format!("input must have rank 2, has shape {:?}", x.shape));
    };
    let dtype = match dtype {
        Some(code) => DType::from_onnx(i32::try_from(code).map_err(|_| format!("unknown dtype {code}"))?),
        None => x.dtype(),
    };
    let v: Vec<f64> =
        (0..rows * cols).map(|p| f64::from(u8::from((p % cols) as i64 - (p / cols) as i64 == k))).collect();
    Ok(vec![Tensor::from_f64_as(dtype, vec![rows, cols], &v).ok_or_else(|| format!("cannot compute {dtype}"))?])
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_listed_op_is_dispatched() {
        // With no inputs each listed op answers (an error), an unlisted one does not.
        for op in super::COMPUTED {
            assert!(super::eval(op, &[], &[]).is_some_and(|r| r.is_err()), "{op}");
        }
        assert!(super::eval("Softmax", &[], &[]).is_none());
    }
}
