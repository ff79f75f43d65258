//! Stitched kernels on the host: what the reference device runs for the plan's stitched nodes
//! (`PlanFile::stitch`): the kernel spec's own meaning ([`StitchSpec::eval`]) on the problem
//! the cuda device would launch with. Running the *spec* rather than the region it came from
//! means `bolt run --check` on the reference device checks the lowering (element types, how
//! inputs are read, per-row outputs) against the original model.

use crate::ir::{DType, Tensor};
use crate::partition::stitch::Region;
use bolt_codegen::stitch::{HostInput, Kind, Scalar, StitchSpec};

/// Runs `spec`, the kernel of `region`, on `inputs` (the stored tensors: a transposed or
/// sliced input is read through the problem's strides from its offset, as on the device); outputs get the types `out_types`.
pub fn run(spec: &StitchSpec, region: &Region, inputs: &[&Tensor], out_types: &[DType]) -> Result<Vec<Tensor>, String> {
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let launch = crate::plan::lower::stitch_problem(spec, region, &shapes)?;
    let p = launch.problem;
    let values: Vec<Values> = inputs.iter().map(|t| Values::of(t)).collect();
    // Each input from its first element read, as the device's advanced address.
    let refs: Vec<HostInput> = values.iter().zip(&launch.offsets).map(|(v, &o)| v.from(o)).collect();
    let space = launch.space;
    let mut per_row = space.clone();
    if let Some(last) = per_row.last_mut() {
        *last = 1;
    }
    spec.eval(&p, &refs)
        .into_iter()
        .zip(&spec.outputs)
        .zip(out_types)
        .map(|((v, o), &dt)| {
            let shape = if o.per_row { per_row.clone() } else { space.clone() };
            let t = match o.element.kind() {
                Kind::Float => Tensor::from_f64_as(dt, shape, &v.iter().map(|x| x.f()).collect::<Vec<_>>()),
                _ => {
                    let ints: Option<Vec<i64>> =
                        v.iter().map(|x| if let Scalar::I(i) = x { Some(*i) } else { None }).collect();
                    Tensor::from_i64_as(dt, shape, &ints.ok_or("an integer output holds floats")?)
                }
            };
            t.ok_or_else(|| format!("an output cannot hold {dt}"))
        })
        .collect()
}

/// A tensor's elements as the kernel reads them: floats, or integers and bools exactly.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

impl Values {
    fn of(t: &Tensor) -> Values {
        match &t.data {
            crate::ir::TensorData::Bool(b) => Values::Int(b.iter().map(|&x| i64::from(x)).collect()),
            _ => match t.as_i64_vec() {
                Some(v) => Values::Int(v),
                None => Values::Float(t.to_f64_vec()),
            },
        }
    }

    fn from(&self, offset: usize) -> HostInput<'_> {
        match self {
            Values::Float(v) => HostInput::Float(v.get(offset..).unwrap_or_default()),
            Values::Int(v) => HostInput::Int(v.get(offset..).unwrap_or_default()),
        }
    }
}
