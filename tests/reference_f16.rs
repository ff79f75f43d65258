//! The reference executor runs f16 graphs (Bolt's kernels compute in f16), rounding once per
//! op as a GPU epilogue does; results track the f32 run within f16's precision.

mod common;

use bolt::compile::{synthetic_inputs, DimBindings};
use bolt::ir::{precision::convert_floats, DType, Graph, Op, Tensor};
use std::collections::HashMap;

/// The fused kernels of a planned graph with the types their bias and source (C) are stored
/// in: CUTLASS reads both in the kernel's output type (ElementC is ElementD), so any other type
/// would be read as the wrong bytes on a GPU (the reference device reads values, not bytes).
fn fused_operand_types(g: &Graph) -> Vec<(String, DType, Vec<(String, DType)>)> {
    let mut out = Vec::new();
    for n in &g.nodes {
        let Op::Fused(k) = &n.op else { continue };
        let operands = [n.input(2), n.input(3)]
            .into_iter()
            .flatten()
            .map(|x| (x.to_string(), g.tensor_type(x).unwrap().dtype))
            .collect();
        out.push((n.name.clone(), k.output_dtype, operands));
    }
    out
}

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

use bolt::ir::builder::GraphBuilder;
use bolt::ir::precision::{first_overflow, max_finite};
use bolt::ir::{Binary, ReduceKind, Shape, Unary};

fn as_f16(inputs: &HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    inputs
        .iter()
        .map(|(k, t)| (k.clone(), Tensor::from_f64_as(DType::F16, t.shape.clone(), &t.to_f64_vec()).unwrap()))
        .collect()
}

/// PaddleOCR's detector carries running variances near 1e8 (in Constant nodes): as f16 they
/// are inf and the normalisation zeroes its channels. The conversion folds such statistics in
/// f64 first (scale / sqrt(var + eps), bias - mean * that; mean 0, variance 1, epsilon 0), so
/// the f16 graph computes BatchNormalization's definition, evaluated here in the test.
#[test]
fn batch_norm_statistics_beyond_f16_are_folded_not_lost() {
    let c = 3;
    let (scale, bias, mean, var) =
        ([1.5f32, -0.5, 2.0], [0.25f32, 1.0, -1.0], [3e5f32, -2.0, 1e5], [9.8e7f32, 0.5, 4e6]);
    for statistics_as_constant_nodes in [false, true] {
        let mut g = GraphBuilder::new("bn");
        let x = g.input("x", DType::F32, Shape::from_static(&[2, c, 2, 2]));
        let param = |g: &mut GraphBuilder, name: &str, v: &[f32]| {
            let t = Tensor::from_f32(vec![c], v.to_vec());
            if statistics_as_constant_nodes {
                g.node(name, Op::Constant { value: std::sync::Arc::new(t) }, &[])
            } else {
                g.initializer(name, t)
            }
        };
        let (s, b, m, v) = (
            param(&mut g, "s", &scale),
            param(&mut g, "b", &bias),
            param(&mut g, "m", &mean),
            param(&mut g, "v", &var),
        );
        let y = g.node(
            "bn",
            Op::BatchNormalization { epsilon: 1e-5, momentum: 0.9, training_mode: false },
            &[&x, &s, &b, &m, &v],
        );
        g.output(&y);
        let g32 = g.finish().unwrap();
        let g16 = convert_floats(&g32, DType::F16).unwrap();
        let xs: Vec<f32> = (0..2 * c * 4).map(|i| (i as f32 - 10.0) * 2.5e3).collect();
        let feed: HashMap<String, Tensor> = [("x".to_string(), Tensor::from_f32(vec![2, c, 2, 2], xs.clone()))].into();
        let got = bolt::reference::run(&g16, &as_f16(&feed)).unwrap()[&y].to_f64_vec();
        for (i, (x, got)) in xs.iter().zip(&got).enumerate() {
            let ch = (i / 4) % c;
            let want = f64::from(scale[ch]) * (f64::from(*x) - f64::from(mean[ch]))
                / (f64::from(var[ch]) + 1e-5).sqrt()
                + f64::from(bias[ch]);
            assert!((got - want).abs() <= 2e-3 * (1.0 + want.abs()), "[{i}] {got} vs {want}");
        }
    }
}

/// Finite constants past f16's range are clamped to it, as onnxruntime's converter does: an
/// attention mask built as (1 - m) * f32::MIN stays a mask (-65504) rather than an -inf whose
/// product with 0 is NaN.
#[test]
fn constants_beyond_f16_are_clamped_so_masks_stay_masks() {
    let mut g = GraphBuilder::new("mask");
    let scores = g.input("scores", DType::F32, Shape::from_static(&[2, 4]));
    let keep = g.input("keep", DType::F32, Shape::from_static(&[2, 4]));
    let one = g.initializer("one", Tensor::from_f32(vec![], vec![1.0]));
    let lowest = g.initializer("lowest", Tensor::from_f32(vec![], vec![f32::MIN]));
    let dropped = g.node("dropped", Op::Binary(Binary::Sub), &[&one, &keep]);
    let bias = g.node("bias", Op::Binary(Binary::Mul), &[&dropped, &lowest]);
    let masked = g.node("masked", Op::Binary(Binary::Add), &[&scores, &bias]);
    let p = g.node("softmax", Op::Softmax { axis: -1 }, &[&masked]);
    g.output(&p);
    let g32 = g.finish().unwrap();
    let g16 = convert_floats(&g32, DType::F16).unwrap();
    assert_eq!(g16.initializers["lowest"].to_f64_vec(), vec![-max_finite(DType::F16)]);
    let feed: HashMap<String, Tensor> = [
        ("scores".to_string(), Tensor::from_f32(vec![2, 4], vec![0.5, -1.0, 2.0, 0.0, 1.0, 1.0, -3.0, 0.25])),
        ("keep".to_string(), Tensor::from_f32(vec![2, 4], vec![1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])),
    ]
    .into();
    let want = &bolt::reference::run(&g32, &feed).unwrap()[&p];
    let got = &bolt::reference::run(&g16, &as_f16(&feed)).unwrap()[&p];
    assert!(got.to_f64_vec().iter().all(|v| v.is_finite()), "{:?}", got.to_f64_vec());
    assert!(max_rel_err(got, want) < 2e-3);
    assert_eq!(got.to_f64_vec()[2], 0.0, "the masked key gets no weight");
}

/// Where a model's values leave f16's range on given inputs (magika's decomposed LayerNorm sums
/// squares past 65504), `first_overflow` names the first tensor that is finite in f32 and not
/// in f16, which `bolt compile --precision f16` reports instead of building a wrong artifact.
#[test]
fn first_overflow_names_the_sum_of_squares_that_leaves_f16() {
    let mut g = GraphBuilder::new("rms");
    let x = g.input("x", DType::F32, Shape::from_static(&[2, 64]));
    let sq = g.node("square", Op::Binary(Binary::Mul), &[&x, &x]);
    let sum = g.node(
        "sum",
        Op::Reduce { kind: ReduceKind::Sum, axes: Some(vec![-1]), keepdims: true, noop_with_empty_axes: false },
        &[&sq],
    );
    let inv = g.initializer("inv_n", Tensor::from_f32(vec![], vec![1.0 / 64.0]));
    let mean = g.node("mean", Op::Binary(Binary::Mul), &[&sum, &inv]);
    let rms = g.node("rms", Op::Unary(Unary::Sqrt), &[&mean]);
    let y = g.node("normalised", Op::Binary(Binary::Div), &[&x, &rms]);
    g.output(&y);
    let g32 = g.finish().unwrap();
    let g16 = convert_floats(&g32, DType::F16).unwrap();
    let feed = |scale: f32| -> HashMap<String, Tensor> {
        [("x".to_string(), Tensor::from_f32(vec![2, 64], (0..128).map(|i| scale * ((i % 7) as f32 - 3.0)).collect()))]
            .into()
    };
    // |x| up to 3 * 40: squares up to 14400, their row sum ~ 3.7e5.
    let o = first_overflow(&g32, &g16, &feed(40.0)).unwrap().expect("the row sum leaves f16");
    assert_eq!((o.node.as_str(), o.tensor.as_str()), ("sum", sum.as_str()));
    assert!(o.original_max_abs > max_finite(DType::F16), "{o:?}");
    // Small values stay in range: nothing to report.
    assert_eq!(first_overflow(&g32, &g16, &feed(1.0)).unwrap(), None);
    // bf16 has f32's range.
    let gbf = convert_floats(&g32, DType::BF16).unwrap();
    assert_eq!(first_overflow(&g32, &gbf, &feed(40.0)).unwrap(), None);
}

/// What hosts need from an f16 build of an f32 model: inputs and outputs of the model's types,
/// f16 inside. The I/O-keeping conversion casts at the edges only; its run equals the plain f16
/// conversion's (same roundings, the edge casts exact conversions) on the same f32 inputs.
#[test]
fn f16_keeping_io_types_casts_at_the_edges_and_computes_in_f16() {
    let g32 = bolt::models::default_model().unwrap();
    let kept = bolt::ir::precision::convert_floats_keeping_io(&g32, DType::F16).unwrap();
    for x in kept.inputs.iter().chain(&kept.outputs) {
        assert_eq!(kept.tensor_type(x).unwrap().dtype, DType::F32, "{x} keeps the model's type");
    }
    assert!(kept.initializers.values().all(|t| t.dtype() != DType::F32), "weights are f16");
    let casts: Vec<_> = kept.nodes.iter().filter(|n| matches!(n.op, Op::Cast { .. })).collect();
    assert_eq!(casts.len(), kept.inputs.len() + kept.outputs.len(), "one cast per float input and output");
    assert!(matches!(kept.nodes[0].op, Op::Cast { to: DType::F16, .. }), "inputs are cast before any reader");

    let bindings: DimBindings = [("N".to_string(), 2)].into();
    let in32 = synthetic_inputs(&g32, &bindings, 3).unwrap();
    let out = &g32.outputs[0];
    let y_kept = &bolt::reference::run(&kept, &in32).unwrap()[out];
    let g16 = convert_floats(&g32, DType::F16).unwrap();
    let y16 = &bolt::reference::run(&g16, &as_f16(&in32)).unwrap()[out];
    assert_eq!(y_kept.dtype(), DType::F32);
    assert_eq!(y_kept.to_f64_vec(), y16.to_f64_vec(), "the edge casts change no value");
    let y32 = &bolt::reference::run(&g32, &in32).unwrap()[out];
    assert!(max_rel_err(y_kept, y32) > 0.0, "f16 inside: not bit-identical to the f32 run");
}

/// An f32 model compiled at f16 for a host keeps its declared input and output types in the
/// artifact; the artifact's run on the reference device (f32 in, f32 out) tracks the f32 model.
#[test]
fn an_f16_artifact_with_the_models_io_types_takes_and_returns_f32() {
    let g32 = bolt::models::default_model().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = bolt::artifact::CompileOptions {
        archs: vec![],
        precision: Some(bolt::artifact::Precision::F16),
        io_types: bolt::artifact::IoTypes::Model,
        ..bolt::artifact::CompileOptions::new(dir.path())
    };
    bolt::artifact::compile(&g32, &opts).unwrap();
    let a = bolt::artifact::Artifact::open(dir.path()).unwrap();
    assert_eq!(a.manifest.precision, bolt::artifact::Precision::F16);
    let planned = a.graph();
    for x in planned.inputs.iter().chain(&planned.outputs) {
        assert_eq!(planned.tensor_type(x).unwrap().dtype, DType::F32, "{x}");
    }
    // The output cast folded into the last Gemm, whose bias is then f32 like its output (an f16
    // bias read as f32 gave ResNet-50 logits of 1e8 through ONNX Runtime on an H100).
    let fused = fused_operand_types(&planned);
    assert!(fused.iter().any(|(_, out, ops)| *out == DType::F32 && !ops.is_empty()), "{fused:?}");
    for (node, out, operands) in &fused {
        for (x, t) in operands {
            assert_eq!(t, out, "{node}: '{x}' is stored as {t}, the kernel writes {out}");
        }
    }
    let bindings: DimBindings = [("N".to_string(), 2)].into();
    let in32 = synthetic_inputs(&g32, &bindings, 5).unwrap();
    let mut dev = bolt::runtime::Reference::new(&a);
    let got = bolt::runtime::Executor::run(&mut dev, &in32).unwrap();
    let out = &g32.outputs[0];
    let want = &bolt::reference::run(&g32, &in32).unwrap()[out];
    assert_eq!(got[out].dtype(), DType::F32);
    let err = max_rel_err(&got[out], want);
    assert!(err > 0.0 && err < 1e-2, "f16 inside, f32 at the edges: relative error {err}");
}

/// A residual (source C) of the operands' type keeps the output cast out of the epilogue: the
/// kernel would read the f16 residual as f32. The cast stays a node of its own.
#[test]
fn an_output_cast_after_an_f16_residual_stays_out_of_the_epilogue() {
    let mut net = common::nets::Net::new(DType::F32);
    let x = net.input("x", &[8, 16]);
    let r = net.input("r", &[8, 32]);
    let y = net.linear(&x, 16, 32);
    let y = net.op("residual", Op::Binary(bolt::ir::Binary::Add), &[&y, &r]);
    let g32 = net.finish(&[&y]);
    let kept = bolt::ir::precision::convert_floats_keeping_io(&g32, DType::F16).unwrap();
    let planned = bolt::plan::plan(&kept).unwrap().graph;
    let fused = fused_operand_types(&planned);
    assert_eq!(fused.len(), 1, "{fused:?}");
    let (node, out, operands) = &fused[0];
    assert_eq!(*out, DType::F16, "{node} writes f16; a Cast node makes the f32 output");
    assert_eq!(operands.len(), 2, "bias and residual: {operands:?}");
    assert!(operands.iter().all(|(_, t)| t == out), "{operands:?}");
    assert!(planned.nodes.iter().any(|n| matches!(n.op, Op::Cast { to: DType::F32, .. })));
    let inputs = common::nets::inputs(&g32);
    let want = &bolt::reference::run(&g32, &inputs).unwrap()[&y];
    let got = &bolt::reference::run(&planned, &inputs).unwrap()[&y];
    assert!(max_rel_err(got, want) < 1e-2, "f16 inside tracks the f32 model");
}
