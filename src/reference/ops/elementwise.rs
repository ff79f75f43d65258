//! Element-wise ops: broadcasting binary arithmetic, activations, Clip, Cast.
//!
//! Floats compute in f64 and round once to the output type; integers compute in i64 with
//! C-like wrapping, so int64 shape arithmetic stays exact.

use super::OpResult;
use crate::ir::{broadcast_index, broadcast_static, Binary, DType, GeluApprox, Tensor, Unary};
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
        // Relu and LeakyRelu accept integers from opset 14; they are exact in f64 for the
        // integer widths concerned.
        Class::Int if matches!(u, Unary::Relu | Unary::LeakyRelu { .. }) => {
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
