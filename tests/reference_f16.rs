//! The reference executor runs f16 graphs (Bolt's kernels compute in f16), rounding once per
//! op as a GPU epilogue does; results track the f32 run within f16's precision.

use bolt::compile::{synthetic_inputs, DimBindings};
use bolt::ir::{precision::convert_floats, DType, Tensor};
use std::collections::HashMap;

fn max_rel_err(a: &Tensor, b: &Tensor) -> f64 {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-6);
    x.iter().zip(&y).map(|(p, q)| (p - q).abs() / scale).fold(0.0, f64::max)
}

#[test]
fn default_model_in_f16_tracks_f32() {
    let g32 = bolt::models::default_model().unwrap();
    let g16 = convert_floats(&g32, DType::F16).unwrap();
    let out = &g16.outputs[0];
    assert_eq!(g16.tensor_type(out).unwrap().dtype, DType::F16);

    let bindings: DimBindings = [("N".to_string(), 3)].into();
    let in32 = synthetic_inputs(&g32, &bindings, 7).unwrap();
    let in16: HashMap<String, Tensor> = in32
        .iter()
        .map(|(k, t)| (k.clone(), Tensor::from_f64_as(DType::F16, t.shape.clone(), &t.to_f64_vec()).unwrap()))
        .collect();
    let y32 = &bolt::reference::run(&g32, &in32).unwrap()[out];
    let y16 = &bolt::reference::run(&g16, &in16).unwrap()[out];
    assert_eq!(y16.dtype(), DType::F16);
    assert_eq!(y16.shape, vec![3, 10]);
    let err = max_rel_err(y16, y32);
    // f16 has an 11-bit significand (~5e-4 per rounding); a few layers of rounding stay
    // well within 1e-2 of the output's range, and a wrong kernel is far outside it.
    assert!(err < 1e-2, "f16 vs f32 relative error {err}");
    assert!(err > 0.0, "f16 run is bit-identical to f32: rounding did not happen");
}

#[test]
fn bf16_conversion_keeps_integer_tensors() {
    let g = bolt::models::default_model().unwrap();
    let gb = convert_floats(&g, DType::BF16).unwrap();
    assert!(gb.initializers.values().all(|t| t.dtype() == DType::BF16));
    assert!(convert_floats(&g, DType::I32).is_err());
}
