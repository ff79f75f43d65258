//! Stitched kernels on the host: what the reference device runs for the plan's stitched nodes
//! (`PlanFile::stitch`): the kernel spec's own meaning ([`StitchSpec::eval`]) on the problem
//! the cuda device would launch with. Running the *spec* rather than the region it came from
//! means `bolt run --check` on the reference device checks the lowering (element types, how
//! inputs are read, per-row outputs) against the original model.

use crate::ir::{DType, Tensor};
use crate::partition::stitch::Region;
use bolt_codegen::stitch::StitchSpec;

/// Runs `spec`, the kernel of `region`, on `inputs` (the stored tensors: a transposed or
/// sliced input is read through the problem's strides from its offset, as on the device); outputs get the types `out_types`.
pub fn run(spec: &StitchSpec, region: &Region, inputs: &[&Tensor], out_types: &[DType]) -> Result<Vec<Tensor>, String> {
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape.as_slice()).collect();
    let launch = crate::plan::lower::stitch_problem(spec, region, &shapes)?;
    let p = launch.problem;
    let values: Vec<Vec<f64>> = inputs.iter().map(|t| t.to_f64_vec()).collect();
    // Each input from its first element read, as the device's advanced address.
    let refs: Vec<&[f64]> =
        values.iter().zip(&launch.offsets).map(|(v, &o)| v.get(o..).unwrap_or_default()).collect();
    let space: Vec<usize> = p.shape[..p.rank as usize].iter().map(|&d| d as usize).collect();
    let mut per_row = space.clone();
    *per_row.last_mut().expect("rank >= 1") = 1;
    spec.eval(&p, &refs)
        .into_iter()
        .zip(&spec.outputs)
        .zip(out_types)
        .map(|((v, o), &dt)| {
            let shape = if o.per_row { per_row.clone() } else { space.clone() };
            Tensor::from_f64_as(dt, shape, &v).ok_or_else(|| format!("an output cannot hold {dt}"))
        })
        .collect()
}
