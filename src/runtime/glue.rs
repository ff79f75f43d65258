//! Glue kernels on the host: what the reference device runs for the plan's glue nodes
//! (`PlanFile::glue`), from the spec and the problem the cuda device would launch with.
//!
//! Written from each spec's documented meaning (nested loops in the output's own order, the
//! `half` crate's conversions), not from the kernels' flat index arithmetic (which codegen's
//! tests check on the host against loops of their own). tests/artifact.rs compares this with
//! the reference executor's Transpose, BoltFitLastAxis and Cast on random shapes.

use crate::ir::{DType, Tensor, TensorData};
use bolt_codegen::abi::BoltGlueProblem;
use bolt_codegen::glue::{Direction, GlueSpec};
use bolt_codegen::spec::Element;

fn dtype(e: Element) -> DType {
    match e {
        Element::F32 => DType::F32,
        Element::F16 => DType::F16,
        Element::BF16 => DType::BF16,
    }
}

/// Runs the glue kernel `spec` on `x` for `p` (as `plan::lower::glue_for` derives it).
pub fn run(spec: &GlueSpec, p: &BoltGlueProblem, x: &Tensor) -> Result<Tensor, String> {
    let [n, c, h, w, cp] = [p.n, p.c, p.h, p.w, p.c_padded].map(|d| d.max(0) as usize);
    if x.len() != n * c * h * w {
        return Err(format!("input of shape {:?} does not hold the problem {p:?}", x.shape));
    }
    let input = match spec {
        GlueSpec::Transpose(t) => t.element,
        GlueSpec::PadChannels(s) => s.element,
        GlueSpec::Cast(s) => s.from,
    };
    if x.dtype() != dtype(input) {
        return Err(format!("input is {}, the kernel takes {}", x.dtype(), dtype(input)));
    }
    match spec {
        GlueSpec::Transpose(t) => {
            let mut idx = Vec::with_capacity(x.len());
            let shape = match t.direction {
                Direction::NchwToNhwc => {
                    for b in 0..n {
                        for y in 0..h {
                            for xx in 0..w {
                                for ch in 0..c {
                                    idx.push(((b * c + ch) * h + y) * w + xx);
                                }
                            }
                        }
                    }
                    vec![n, h, w, c]
                }
                Direction::NhwcToNchw => {
                    for b in 0..n {
                        for ch in 0..c {
                            for y in 0..h {
                                for xx in 0..w {
                                    idx.push(((b * h + y) * w + xx) * c + ch);
                                }
                            }
                        }
                    }
                    vec![n, c, h, w]
                }
            };
            Tensor::new(shape, x.data.gather(&idx))
        }
        GlueSpec::PadChannels(_) => {
            if cp < c {
                return Err(format!("c_padded {cp} < c {c}"));
            }
            // Every value of f32/f16/bf16 is exact in f64.
            let v = x.to_f64_vec();
            let mut out = vec![0.0; v.len() / c.max(1) * cp];
            for (src, dst) in v.chunks(c.max(1)).zip(out.chunks_mut(cp.max(1))) {
                dst[..c].copy_from_slice(src);
            }
            let mut shape = x.shape.clone();
            match shape.last_mut() {
                Some(last) => *last = cp,
                None => return Err("a scalar has no channels".into()),
            }
            Tensor::from_f64_as(x.dtype(), shape, &out).ok_or_else(|| format!("cannot pad {}", x.dtype()))
        }
        GlueSpec::Cast(s) => {
            let f = x.to_f32_vec();
            let data = match s.to {
                Element::F32 => TensorData::F32(f),
                Element::F16 => TensorData::F16(f.iter().map(|&v| half::f16::from_f32(v)).collect()),
                Element::BF16 => TensorData::BF16(f.iter().map(|&v| half::bf16::from_f32(v)).collect()),
            };
            Tensor::new(x.shape.clone(), data)
        }
    }
}
