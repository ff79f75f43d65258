//! Element-wise ops: broadcasting binary arithmetic, activations, Clip, Cast.
//!
//! Floats compute in f64 and round once to the output type; integers compute in i64 with
//! C-like wrapping, so int64 shape arithmetic stays exact.

use super::OpResult;
use crate::ir::{broadcast_index, broadcast_static, Binary, Compare, DType, GeluApprox, Logic, Tensor, Unary};
use rayon::prelude::*;

enum Class {
    Float,
    Int,
}

fn class(t: DType) -> Result<Class, String> {
    if t.is_float() {
        Ok(Class::Float)
    } else if t.is_integer() {
        Ok(Class::Int)
    } else {
        Err(format!("arithmetic is not defined on {t}"))
    }
}

pub fn binary(op: Binary, a: &Tensor, b: &Tensor) -> OpResult {
    if op != Binary::Pow && a.dtype() != b.dtype() {
        return Err(format!("input types differ: {} vs {}", a.dtype(), b.dtype()));
    }
    let out_shape = broadcast_static(&a.shape, &b.shape)
        .ok_or_else(|| format!("shapes {:?} and {:?} do not broadcast", a.shape, b.shape))?;
    let (ia, ib) = (broadcast_index(&a.shape, &out_shape), broadcast_index(&b.shape, &out_shape));
    let dtype = a.dtype();
    let out = match class(dtype)? {
        Class::Float => {
            let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
            let v: Vec<f64> = ia.par_iter().zip(&ib).map(|(&i, &j)| op.apply(x[i], y[j])).collect();
            Tensor::from_f64_as(dtype, out_shape, &v)
        }
        Class::Int => {
            let x = a.as_i64_vec().expect("integer tensor");
            let v: Vec<i64> = if op == Binary::Pow {
                let y = b.to_f64_vec();
                ia.iter().zip(&ib).map(|(&i, &j)| (x[i] as f64).powf(y[j]) as i64).collect()
            } else {
                let y = b.as_i64_vec().expect("integer tensor");
                let mut v = Vec::with_capacity(ia.len());
                for (&i, &j) in ia.iter().zip(&ib) {
                    v.push(match op {
                        Binary::Add => x[i].wrapping_add(y[j]),
                        Binary::Sub => x[i].wrapping_sub(y[j]),
                        Binary::Mul => x[i].wrapping_mul(y[j]),
                        Binary::Div if y[j] == 0 => return Err("integer division by zero".into()),
                        Binary::Div => div_for(dtype, x[i], y[j]),
                        Binary::Max => x[i].max(y[j]),
                        Binary::Min => x[i].min(y[j]),
                        Binary::PRelu if x[i] < 0 => x[i].wrapping_mul(y[j]),
                        Binary::PRelu => x[i],
                        Binary::Pow => unreachable!("handled above"),
                    });
                }
                v
            };
            Tensor::from_i64_as(dtype, out_shape, &v)
        }
    };
    Ok(vec![out.expect("numeric dtype")])
}

/// Integer division truncates toward zero, as C++ (and onnxruntime) does for signed types.
fn div_for(_dtype: DType, p: i64, q: i64) -> i64 {
    p.wrapping_div(q)
}

/// The scalar function of a unary op, in f64.
pub fn unary_fn(u: Unary) -> impl Fn(f64) -> f64 + Sync {
    move |x: f64| match u {
        Unary::Sqrt => x.sqrt(),
        Unary::Erf => libm::erf(x),
        Unary::Exp => x.exp(),
        Unary::Neg => -x,
        Unary::Abs => x.abs(),
        Unary::Reciprocal => 1.0 / x,
        Unary::Log => x.ln(),
        Unary::Ceil => x.ceil(),
        Unary::Floor => x.floor(),
        Unary::Round => x.round_ties_even(),
        Unary::Tanh => x.tanh(),
        Unary::Relu => x.max(0.0),
        Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        // Stable form: never exponentiates a large positive number.
        Unary::Softplus => x.max(0.0) + (-x.abs()).exp().ln_1p(),
        Unary::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        Unary::LeakyRelu { alpha } => {
            if x >= 0.0 {
                x
            } else {
                alpha as f64 * x
            }
        }
        Unary::HardSigmoid { alpha, beta } => (alpha as f64 * x + beta as f64).clamp(0.0, 1.0),
        Unary::Gelu { approximate: GeluApprox::None } => 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2)),
        Unary::Gelu { approximate: GeluApprox::Tanh } => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tan => x.tan(),
        Unary::Asin => x.asin(),
        Unary::Acos => x.acos(),
        Unary::Atan => x.atan(),
        Unary::Sinh => x.sinh(),
        Unary::Cosh => x.cosh(),
        Unary::Asinh => x.asinh(),
        Unary::Acosh => x.acosh(),
        Unary::Atanh => x.atanh(),
        Unary::Sign if x.is_nan() || x == 0.0 => x,
        Unary::Sign => x.signum(),
        Unary::Elu { alpha } if x < 0.0 => alpha as f64 * x.exp_m1(),
        Unary::Elu { .. } => x,
        Unary::Selu { gamma, .. } if x > 0.0 => gamma as f64 * x,
        Unary::Selu { alpha, gamma } => gamma as f64 * alpha as f64 * x.exp_m1(),
        Unary::Celu { alpha } => {
            let a = alpha as f64;
            x.max(0.0) + (a * (x / a).exp_m1()).min(0.0)
        }
        Unary::ThresholdedRelu { alpha } if x > alpha as f64 => x,
        Unary::ThresholdedRelu { .. } => 0.0,
        Unary::Softsign => x / (1.0 + x.abs()),
        Unary::Mish => x * (x.max(0.0) + (-x.abs()).exp().ln_1p()).tanh(),
        Unary::Shrink { bias, lambd } if x < -(lambd as f64) => x + bias as f64,
        Unary::Shrink { bias, lambd } if x > lambd as f64 => x - bias as f64,
        Unary::Shrink { .. } => 0.0,
    }
}

pub fn unary(u: Unary, x: &Tensor) -> OpResult {
    let dtype = x.dtype();
    let f = unary_fn(u);
    match class(dtype)? {
        Class::Float => {
            let v: Vec<f64> = x.to_f64_vec().into_par_iter().map(&f).collect();
            Ok(vec![Tensor::from_f64_as(dtype, x.shape.clone(), &v).expect("float dtype")])
        }
        // Exact in i64 for every integer type (wrapping as the type's own negation does).
        Class::Int if matches!(u, Unary::Abs | Unary::Neg | Unary::Sign) => {
            let v: Vec<i64> = x
                .as_i64_vec()
                .expect("integer")
                .into_iter()
                .map(|i| match u {
                    Unary::Abs => i.wrapping_abs(),
                    Unary::Neg => i.wrapping_neg(),
                    _ => i.signum(),
                })
                .collect();
            Ok(vec![Tensor::from_i64_as(dtype, x.shape.clone(), &v).expect("integer dtype")])
        }
        // Relu, LeakyRelu (from opset 14) and Shrink accept integers; they are exact in f64 for
        // the integer widths concerned.
        Class::Int if matches!(u, Unary::Relu | Unary::LeakyRelu { .. } | Unary::Shrink { .. }) => {
            let v: Vec<i64> = x.as_i64_vec().expect("integer").into_iter().map(|i| f(i as f64) as i64).collect();
            Ok(vec![Tensor::from_i64_as(dtype, x.shape.clone(), &v).expect("integer dtype")])
        }
        Class::Int => Err(format!("{u:?} is not defined on {dtype}")),
    }
}

pub fn clip(x: &Tensor, min: Option<&Tensor>, max: Option<&Tensor>) -> OpResult {
    let dtype = x.dtype();
    for (what, t) in [("min", min), ("max", max)] {
        if let Some(t) = t {
            if t.len() != 1 {
                return Err(format!("{what} must be a scalar, has shape {:?}", t.shape));
            }
            if t.dtype() != dtype {
                return Err(format!("{what} is {} but the input is {dtype}", t.dtype()));
            }
        }
    }
    let out = match class(dtype)? {
        Class::Float => {
            let lo = min.map_or(f64::NEG_INFINITY, |t| t.to_f64_vec()[0]);
            let hi = max.map_or(f64::INFINITY, |t| t.to_f64_vec()[0]);
            // min(max(x, lo), hi): when lo > hi every element becomes hi, as onnxruntime does.
            let v: Vec<f64> =
                x.to_f64_vec().into_iter().map(|e| if e.is_nan() { e } else { e.max(lo).min(hi) }).collect();
            Tensor::from_f64_as(dtype, x.shape.clone(), &v)
        }
        Class::Int => {
            let lo = min.map_or(i64::MIN, |t| t.as_i64_vec().expect("int")[0]);
            let hi = max.map_or(i64::MAX, |t| t.as_i64_vec().expect("int")[0]);
            let v: Vec<i64> = x.as_i64_vec().expect("int").into_iter().map(|e| e.max(lo).min(hi)).collect();
            Tensor::from_i64_as(dtype, x.shape.clone(), &v)
        }
    };
    Ok(vec![out.expect("numeric dtype")])
}

pub fn cast(x: &Tensor, to: DType, _saturate: bool) -> OpResult {
    // `saturate` only affects float8 targets, which Bolt imports as opaque.
    let from = x.dtype();
    let out = if from == to {
        Some(x.clone())
    } else if from.is_float() {
        let v = x.to_f64_vec();
        if to.is_integer() {
            // Truncation toward zero, as a C++ static_cast does.
            let iv: Vec<i64> = v.iter().map(|&f| f.trunc() as i64).collect();
            Tensor::from_i64_as(to, x.shape.clone(), &iv)
        } else {
            Tensor::from_f64_as(to, x.shape.clone(), &v)
        }
    } else if from == DType::Bool {
        Tensor::from_f64_as(to, x.shape.clone(), &x.to_f64_vec())
    } else {
        let iv = x.as_i64_vec().ok_or_else(|| format!("cannot cast from {from}"))?;
        Tensor::from_i64_as(to, x.shape.clone(), &iv)
    };
    out.map(|t| vec![t]).ok_or_else(|| format!("cannot cast {from} to {to}"))
}

/// Each element of `t` broadcast to `shape`, as integers (bools as 0 / 1) or floats.
enum Lanes {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

fn lanes(t: &Tensor, shape: &[usize]) -> Lanes {
    let idx = broadcast_index(&t.shape, shape);
    match &t.data {
        crate::ir::TensorData::Bool(v) => Lanes::Int(idx.iter().map(|&i| i64::from(v[i])).collect()),
        _ if t.dtype().is_integer() => {
            let v = t.as_i64_vec().expect("integer tensor");
            Lanes::Int(idx.iter().map(|&i| v[i]).collect())
        }
        _ => {
            let v = t.to_f64_vec();
            Lanes::Float(idx.iter().map(|&i| v[i]).collect())
        }
    }
}

/// The broadcast shape of `ts`, or why there is none.
fn broadcast_all(ts: &[&Tensor]) -> Result<Vec<usize>, String> {
    let mut shape = ts[0].shape.clone();
    for t in &ts[1..] {
        shape = broadcast_static(&shape, &t.shape)
            .ok_or_else(|| format!("shapes {shape:?} and {:?} do not broadcast", t.shape))?;
    }
    Ok(shape)
}

/// Equal, Less, ... in the inputs' own type (integers exactly, floats with IEEE rules).
pub fn compare(op: Compare, a: &Tensor, b: &Tensor) -> OpResult {
    if a.dtype() != b.dtype() {
        return Err(format!("input types differ: {} vs {}", a.dtype(), b.dtype()));
    }
    let shape = broadcast_all(&[a, b])?;
    let v: Vec<bool> = match (lanes(a, &shape), lanes(b, &shape)) {
        (Lanes::Int(x), Lanes::Int(y)) => x.iter().zip(&y).map(|(&p, &q)| op.apply(p, q)).collect(),
        (Lanes::Float(x), Lanes::Float(y)) => x.iter().zip(&y).map(|(&p, &q)| op.apply(p, q)).collect(),
        _ => unreachable!("one dtype, one class"),
    };
    Ok(vec![Tensor::new(shape, crate::ir::TensorData::Bool(v))?])
}

fn bools<'a>(t: &'a Tensor, what: &str) -> Result<&'a [bool], String> {
    match &t.data {
        crate::ir::TensorData::Bool(v) => Ok(v),
        _ => Err(format!("{what} must be bool, is {}", t.dtype())),
    }
}

pub fn logic(op: Logic, a: &Tensor, b: &Tensor) -> OpResult {
    let (x, y) = (bools(a, "input 0")?, bools(b, "input 1")?);
    let shape = broadcast_all(&[a, b])?;
    let (ia, ib) = (broadcast_index(&a.shape, &shape), broadcast_index(&b.shape, &shape));
    let v = ia.iter().zip(&ib).map(|(&i, &j)| op.apply(x[i], y[j])).collect();
    Ok(vec![Tensor::new(shape, crate::ir::TensorData::Bool(v))?])
}

pub fn not(a: &Tensor) -> OpResult {
    let v = bools(a, "the input")?.iter().map(|&x| !x).collect();
    Ok(vec![Tensor::new(a.shape.clone(), crate::ir::TensorData::Bool(v))?])
}

/// `cond ? x : y` with the three broadcast; x and y of any one type.
pub fn select(cond: &Tensor, x: &Tensor, y: &Tensor) -> OpResult {
    let c = bools(cond, "the condition")?;
    if x.dtype() != y.dtype() {
        return Err(format!("the branches differ in type: {} vs {}", x.dtype(), y.dtype()));
    }
    let shape = broadcast_all(&[cond, x, y])?;
    let ic = broadcast_index(&cond.shape, &shape);
    let (ix, iy) = (broadcast_index(&x.shape, &shape), broadcast_index(&y.shape, &shape));
    // One gather from x's elements followed by y's.
    let both = x.data.chained(&y.data).expect("one dtype");
    let idx: Vec<usize> = (0..ic.len()).map(|k| if c[ic[k]] { ix[k] } else { x.len() + iy[k] }).collect();
    Ok(vec![Tensor::new(shape, both.gather(&idx))?])
}
