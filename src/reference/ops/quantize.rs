//! The quantization ops onnxruntime's quantizer writes (QuantizeLinear, DequantizeLinear,
//! DynamicQuantizeLinear, MatMulInteger, ConvInteger), on the 8- and 16-bit integer types
//! (and int32 for DequantizeLinear); float8, int4 and int2 are types Bolt does not compute.
//! Scales and zero points apply per tensor, per axis or per block.

use super::{conv, elementwise, matmul, opt, req, OpResult};
use crate::ir::Attrs;
use crate::ir::{Binary, DType, Tensor, Window};

pub fn eval(op_type: &str, a: Attrs, inputs: &[Option<&Tensor>]) -> OpResult {
    match op_type {
        "QuantizeLinear" => quantize(a, inputs),
        "DequantizeLinear" => dequantize(a, inputs),
        "DynamicQuantizeLinear" => dynamic_quantize(req(inputs, 0)?),
        "MatMulInteger" => matmul_integer(inputs),
        _ => conv_integer(a, inputs),
    }
}

/// The range of an integer type values quantize to.
fn range(t: DType) -> Result<(i64, i64), String> {
    Ok(match t {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        DType::I16 => (-32768, 32767),
        _ => return Err(format!("quantizing to {t} is not computed by Bolt (8- and 16-bit integers only)")),
    })
}

/// For each element of an `x_shape` tensor, the index of its scale (and zero point): one for
/// all (a scalar scale), one per index along `axis` (a 1-D scale), or one per `block` indices
/// along `axis` (a scale of x's rank). Checks the scale's and zero point's shapes.
fn param_index(
    x_shape: &[usize],
    scale: &Tensor,
    zero: Option<&Tensor>,
    axis: i64,
    block: i64,
) -> Result<Vec<usize>, String> {
    if let Some(z) = zero {
        // One value each is per-tensor whatever their shapes ([] and [1]: onnxruntime's
        // quantizer writes such pairs, and onnxruntime runs them).
        if z.shape != scale.shape && !(z.len() == 1 && scale.len() == 1) {
            return Err(format!("the zero point's shape {:?} differs from the scale's {:?}", z.shape, scale.shape));
        }
    }
    let n: usize = x_shape.iter().product();
    if block == 0 && scale.len() == 1 {
        return Ok(vec![0; n]);
    }
    let a = crate::ir::infer::norm_axis(axis, x_shape.len(), false)?;
    let inner: usize = x_shape[a + 1..].iter().product();
    if block == 0 {
        if scale.shape != [x_shape[a]] {
            return Err(format!(
                "a per-axis scale must be 1-D of the size {} of axis {a}, has shape {:?}",
                x_shape[a], scale.shape
            ));
        }
        return Ok((0..n).map(|p| p / inner % x_shape[a]).collect());
    }
    let b = usize::try_from(block).map_err(|_| format!("block_size {block} must be positive"))?;
    let want: Vec<usize> = x_shape.iter().enumerate().map(|(d, &s)| if d == a { s.div_ceil(b) } else { s }).collect();
    if scale.shape != want {
        return Err(format!(
            "a blocked scale for input {x_shape:?}, axis {a} and block_size {b} must have shape {want:?}, has {:?}",
            scale.shape
        ));
    }
    let (len, blocks) = (x_shape[a], want[a]);
    Ok((0..n)
        .map(|p| {
            let (outer, i, rest) = (p / (len * inner), p / inner % len, p % inner);
            (outer * blocks + i / b) * inner + rest
        })
        .collect())
}

/// Values rounded to float type `t`'s precision (f64 keeps them).
fn rounded(t: DType, v: f64) -> f64 {
    match t {
        DType::F32 => v as f32 as f64,
        DType::F16 => f64::from(half::f16::from_f64(v)),
        DType::BF16 => f64::from(half::bf16::from_f64(v)),
        _ => v,
    }
}

/// The wider of two types as numpy promotes them for the division (ints count as f32's peers).
fn wider(a: DType, b: DType) -> DType {
    match (a, b) {
        (DType::F64, _) | (_, DType::F64) => DType::F64,
        (x, y) if x == y => x,
        _ => DType::F32,
    }
}

/// `saturate(round(x / scale) + zero_point)`, rounding half to even; the division in the
/// `precision` attribute's type, else the wider of x's and the scale's.
fn quantize(a: Attrs, inputs: &[Option<&Tensor>]) -> OpResult {
    let (x, scale, zero) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    let out_attr = a.int("output_dtype").unwrap_or(0);
    let dtype = match zero {
        Some(z) if out_attr != 0 && DType::from_onnx(out_attr as i32) != z.dtype() => {
            return Err(format!(
                "output_dtype {} differs from the zero point's type {}",
                DType::from_onnx(out_attr as i32),
                z.dtype()
            ));
        }
        Some(z) => z.dtype(),
        None if out_attr != 0 => DType::from_onnx(out_attr as i32),
        None => DType::U8,
    };
    let (lo, hi) = range(dtype)?;
    if !scale.dtype().is_float() {
        return Err(format!("the scale must be a float tensor, is {}", scale.dtype()));
    }
    let precision = match a.int("precision").unwrap_or(0) {
        0 => wider(x.dtype(), scale.dtype()),
        code => DType::from_onnx(code as i32),
    };
    let idx = param_index(&x.shape, scale, zero, a.int("axis").unwrap_or(1), a.int("block_size").unwrap_or(0))?;
    let (xs, ss) = (x.to_f64_vec(), scale.to_f64_vec());
    let zs = match zero {
        Some(z) => {
            z.as_i64_vec().ok_or_else(|| format!("the zero point must be an integer tensor, is {}", z.dtype()))?
        }
        None => vec![0; ss.len()],
    };
    let v: Vec<i64> = xs
        .iter()
        .zip(&idx)
        .map(|(&x, &i)| {
            let q = rounded(precision, rounded(precision, x) / rounded(precision, ss[i]));
            (q.round_ties_even() as i64).saturating_add(zs[i]).clamp(lo, hi)
        })
        .collect();
    Ok(vec![Tensor::from_i64_as(dtype, x.shape.clone(), &v).expect("an integer type")])
}

/// `(x - zero_point) * scale`, of the `output_dtype` attribute's type, else the scale's.
fn dequantize(a: Attrs, inputs: &[Option<&Tensor>]) -> OpResult {
    let (x, scale, zero) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
    if !matches!(x.dtype(), DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::I32) {
        return Err(format!("dequantizing {} is not computed by Bolt (8-, 16- and 32-bit integers only)", x.dtype()));
    }
    if let Some(z) = zero.filter(|z| z.dtype() != x.dtype()) {
        return Err(format!("the zero point is {} but the input is {}", z.dtype(), x.dtype()));
    }
    if !scale.dtype().is_float() {
        return Err(format!("the scale must be a float tensor, is {}", scale.dtype()));
    }
    let dtype = match a.int("output_dtype").unwrap_or(0) {
        0 => scale.dtype(),
        code => DType::from_onnx(code as i32),
    };
    if !dtype.is_float() {
        return Err(format!("output_dtype {dtype} is not a float type"));
    }
    let idx = param_index(&x.shape, scale, zero, a.int("axis").unwrap_or(1), a.int("block_size").unwrap_or(0))?;
    let (xs, ss) = (x.as_i64_vec().expect("an integer type"), scale.to_f64_vec());
    let zs = zero.map_or(vec![0; ss.len()], |z| z.as_i64_vec().expect("an integer type"));
    // The product of an integer and an f32 scale is exact in f64, rounded once to f32 as an
    // f32 multiply rounds it (f64 scales keep f64).
    let work = wider(scale.dtype(), dtype);
    let v: Vec<f64> = xs.iter().zip(&idx).map(|(&x, &i)| rounded(work, (x - zs[i]) as f64 * ss[i])).collect();
    Ok(vec![Tensor::from_f64_as(dtype, x.shape.clone(), &v).expect("a float type")])
}

/// uint8 quantization of an f32 tensor with the scale and zero point its range (widened to
/// hold 0) gives; outputs y, the scale and the zero point. All arithmetic in f32. The spec's
/// scale of an all-zero input is 0 (its division undefined): onnxruntime, which runs the
/// quantizer's models, makes it 1, as here (y and the zero point are 0 either way).
fn dynamic_quantize(x: &Tensor) -> OpResult {
    if x.dtype() != DType::F32 {
        return Err(format!("input must be f32, is {}", x.dtype()));
    }
    let v = x.to_f32_vec();
    let max = v.iter().fold(0.0f32, |m, &x| m.max(x));
    let min = v.iter().fold(0.0f32, |m, &x| m.min(x));
    let scale = if max == min { 1.0 } else { (max - min) / 255.0 };
    let zero = (0.0 - min / scale).clamp(0.0, 255.0).round_ties_even();
    let y: Vec<i64> = v.iter().map(|&x| ((x / scale).round_ties_even() + zero).clamp(0.0, 255.0) as i64).collect();
    Ok(vec![
        Tensor::from_i64_as(DType::U8, x.shape.clone(), &y).expect("u8"),
        Tensor::from_f32(vec![], vec![scale]),
        Tensor::from_i64_as(DType::U8, vec![], &[zero as i64]).expect("u8"),
    ])
}

/// `x - zero` in f64 (integers exactly), `zero` broadcast after reshaping a 1-D zero point of
/// `per` elements to `shape_1d` (per row of A, per output channel of W).
fn centred(x: &Tensor, zero: Option<&Tensor>, what: &str, per: Option<(usize, Vec<usize>)>) -> Result<Tensor, String> {
    if !matches!(x.dtype(), DType::U8 | DType::I8) {
        return Err(format!("{what} must be uint8 or int8, is {}", x.dtype()));
    }
    let xf = Tensor::from_f64_as(DType::F64, x.shape.clone(), &x.to_f64_vec()).expect("f64");
    let Some(z) = zero else { return Ok(xf) };
    if z.dtype() != x.dtype() {
        return Err(format!("{what}'s zero point is {} but {what} is {}", z.dtype(), x.dtype()));
    }
    let shape = match per {
        _ if z.len() == 1 => vec![],
        Some((n, shape)) if z.rank() == 1 && z.len() == n => shape,
        _ => z.shape.clone(),
    };
    let zf = Tensor::from_f64_as(DType::F64, shape, &z.to_f64_vec()).expect("f64");
    let d = elementwise::binary(Binary::Sub, &xf, &zf)?.remove(0);
    if d.shape != x.shape {
        return Err(format!("{what}'s zero point {:?} does not fit {what} {:?}", z.shape, x.shape));
    }
    Ok(d)
}

/// The exact integer product of `(A - a_zero) x (B - b_zero)` as int32 (numpy matmul rules).
fn matmul_integer(inputs: &[Option<&Tensor>]) -> OpResult {
    let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
    // A per-row zero point of [M] applies along A's rows: [M, 1].
    let rows = (a.rank() >= 2).then(|| (a.shape[a.rank() - 2], vec![a.shape[a.rank() - 2], 1]));
    let (af, bf) = (centred(a, opt(inputs, 2), "A", rows)?, centred(b, opt(inputs, 3), "B", None)?);
    let y = matmul::matmul(&af, &bf)?.remove(0);
    Ok(vec![Tensor::from_f64_as(DType::I32, y.shape.clone(), &y.to_f64_vec()).expect("i32")])
}

/// Integer convolution of `x - x_zero` by `w - w_zero` (per tensor, or per output channel),
/// exact, as int32.
fn conv_integer(a: Attrs, inputs: &[Option<&Tensor>]) -> OpResult {
    let (x, w) = (req(inputs, 0)?, req(inputs, 1)?);
    if w.rank() < 3 {
        return Err(format!("the weight must have rank >= 3, has shape {:?}", w.shape));
    }
    let mut per_channel = vec![w.shape[0]];
    per_channel.resize(w.rank(), 1);
    let xf = centred(x, opt(inputs, 2), "x", None)?;
    let wf = centred(w, opt(inputs, 3), "w", Some((w.shape[0], per_channel)))?;
    let window = Window::from_attrs(a.0)?;
    let group = usize::try_from(a.int("group").unwrap_or(1)).map_err(|_| "group must be >= 1".to_string())?;
    let y = conv::conv(&xf, &wf, None, &window, group)?.remove(0);
    Ok(vec![Tensor::from_f64_as(DType::I32, y.shape.clone(), &y.to_f64_vec()).expect("i32")])
}
