//! Host-only ops the reference executor computes (Einsum, TopK, GatherND, DFT, STFT, ...):
//! the output types shape inference gives them, so that the kernels after them keep their
//! shapes, and what the reference does where the ONNX conformance cases do not look (numpy
//! broadcasting in Einsum, older opset versions, inputs no run can satisfy).

mod common;

use bolt::import::{self, proto::*};
use bolt::ir::{Graph, Tensor};
use common::onnx_proto::*;
use prost::Message;
use std::collections::HashMap;
use tensor_shape_proto::dimension::Value as D;

fn import(opset: i64, g: GraphProto) -> Graph {
    import::load_bytes(&model(opset, g).encode_to_vec(), None).unwrap_or_else(|e| panic!("{e}")).graph
}

fn ty(g: &Graph, t: &str) -> String {
    g.tensor_type(t).map_or("unknown".into(), |t| t.to_string())
}

fn claimed(g: &Graph) -> Vec<String> {
    bolt::partition::partition(g).partitions.into_iter().map(|p| p.anchor).collect()
}

fn graph(nodes: Vec<NodeProto>, initializer: Vec<TensorProto>, input: Vec<ValueInfoProto>, out: &str) -> GraphProto {
    GraphProto {
        node: nodes,
        initializer,
        input,
        output: vec![ValueInfoProto { name: Some(out.into()), ..Default::default() }],
        ..Default::default()
    }
}

/// Runs `g` on the reference with inputs by name; the error as text.
fn run(g: &Graph, inputs: &[(&str, Tensor)]) -> Result<HashMap<String, Tensor>, String> {
    let feeds = inputs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
    bolt::reference::run(g, &feeds).map_err(|e| e.to_string())
}

fn sym(name: &str) -> D {
    D::DimParam(name.into())
}

#[test]
fn einsum_output_rank_and_dims_come_from_the_equation() {
    // A projection written as Einsum (piper's, torch's einsum exports): its output keeps the
    // symbolic batch and time, so the MatMul after it is a kernel.
    let g = graph(
        vec![
            with_string(node("proj", "Einsum", &["x", "w"], &["y"]), "equation", "btd,dk->btk"),
            node("mm", "MatMul", &["y", "w2"], &["z"]),
        ],
        vec![weight("w", &[64, 32]), weight("w2", &[32, 16])],
        vec![typed_value_info("x", 1, vec![sym("N"), sym("T"), D::DimValue(64)])],
        "z",
    );
    let g = import(12, g);
    assert_eq!(ty(&g, "y"), "f32[N, T, 32]");
    assert_eq!(ty(&g, "z"), "f32[N, T, 16]");
    assert_eq!(claimed(&g), ["mm"]);

    // Implicit output: the ellipsis dims (N broadcast against 1), then the letters used once
    // in ASCII order, upper case first.
    let g = graph(
        vec![with_string(node("e", "Einsum", &["a", "b"], &["y"]), "equation", "...ij,...Bj")],
        vec![weight("b", &[1, 5, 3])],
        vec![typed_value_info("a", 1, vec![sym("N"), D::DimValue(4), D::DimValue(3)])],
        "y",
    );
    assert_eq!(ty(&import(12, g), "y"), "f32[N, 5, 4]");
}

#[test]
fn einsum_broadcasts_size_one_dims_as_numpy_does() {
    // "ij,ij->i" with a [2, 1] against b [2, 3]: a's j broadcasts, so row r is a[r] * sum(b[r]).
    let g = graph(
        vec![with_string(node("e", "Einsum", &["a", "b"], &["y"]), "equation", "ij,ij->i")],
        vec![floats("b", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        vec![value_info("a", &[2, 1])],
        "y",
    );
    let y = &run(&import(12, g), &[("a", Tensor::from_f32(vec![2, 1], vec![1.0, 2.0]))]).unwrap()["y"];
    assert_eq!((y.shape.clone(), y.to_f32_vec()), (vec![2], vec![6.0, 30.0]));

    // Differing sizes that do not broadcast are an error naming the label.
    let g = graph(
        vec![with_string(node("e", "Einsum", &["a", "b"], &["y"]), "equation", "ij,jk->ik")],
        vec![weight("b", &[5, 2])],
        vec![value_info("a", &[3, 4])],
        "y",
    );
    let err = run(&import(12, g), &[("a", Tensor::from_f32(vec![3, 4], vec![0.0; 12]))]).unwrap_err();
    assert!(err.contains("'e'") && err.contains("label 'j' is 4 in one input and 5 in another"), "{err}");
}

#[test]
fn topk_k_is_known_from_a_constant_a_shape_or_topk_1s_attribute() {
    // K a constant: [N, 5]. K read from the input's shape (torch's topk(x, x.size(1))): [N, T].
    let g = graph(
        vec![
            node("top5", "TopK", &["x", "five"], &["v", "i"]),
            node("shape", "Shape", &["x"], &["s"]),
            node("slice", "Slice", &["s", "one", "two"], &["t"]),
            node("topt", "TopK", &["x", "t"], &["vt", "it"]),
        ],
        vec![ints("five", &[5], false), ints("one", &[1], false), ints("two", &[2], false)],
        vec![typed_value_info("x", 1, vec![sym("N"), sym("T")])],
        "v",
    );
    let g = import(11, g);
    assert_eq!((ty(&g, "v"), ty(&g, "i")), ("f32[N, 5]".into(), "i64[N, 5]".into()));
    assert_eq!(ty(&g, "vt"), "f32[N, T]");

    // TopK-1 (opset 9): k is an attribute; the reference reads it too.
    let g = graph(
        vec![with_int(node("top", "TopK", &["x"], &["v", "i"]), "k", 2)],
        vec![],
        vec![value_info("x", &[1, 4])],
        "i",
    );
    let g = import(9, g);
    assert_eq!(ty(&g, "v"), "f32[1, 2]");
    let out = run(&g, &[("x", Tensor::from_f32(vec![1, 4], vec![1.0, 3.0, 2.0, 3.0]))]).unwrap();
    assert_eq!(out["i"].as_i64_vec().unwrap(), [1, 3], "ties: the lower index first");
}

#[test]
fn gathernd_and_fourier_transforms_have_output_shapes() {
    let g = graph(
        vec![
            // GatherND, batch_dims 1: [N, 5, 2] tuples into data [N, 7, 6, 8] -> [N, 5, 8].
            with_int(node("gnd", "GatherND", &["data", "idx"], &["picked"]), "batch_dims", 1),
            // STFT of [N, 16000, 1], hop 160, a 400-sample window: 98 frames of 201 bins.
            node("stft", "STFT", &["sig", "hop", "win"], &["spec"]),
        ],
        vec![ints("hop", &[160], true), weight("win", &[400])],
        vec![
            typed_value_info("data", 1, vec![sym("N"), D::DimValue(7), D::DimValue(6), D::DimValue(8)]),
            typed_value_info("idx", 7, vec![sym("N"), D::DimValue(5), D::DimValue(2)]),
            typed_value_info("sig", 1, vec![sym("N"), D::DimValue(16000), D::DimValue(1)]),
        ],
        "picked",
    );
    let g = import(17, g);
    assert_eq!(ty(&g, "picked"), "f32[N, 5, 8]");
    assert_eq!(ty(&g, "spec"), "f32[N, 98, 201, 2]");

    // DFT-17's axis attribute is DFT-20's axis input: a one-sided DFT over axis 2.
    let g = graph(
        vec![with_int(with_int(node("dft", "DFT", &["x"], &["y"]), "axis", 2), "onesided", 1)],
        vec![],
        vec![value_info("x", &[1, 3, 10, 1])],
        "y",
    );
    let g = import(17, g);
    assert_eq!(ty(&g, "y"), "f32[1, 3, 6, 2]");
    // The transform of a constant signal: all of it in bin 0 (the others 0 to rounding).
    let y = run(&g, &[("x", Tensor::from_f32(vec![1, 3, 10, 1], vec![1.0; 30]))]).unwrap()["y"].to_f32_vec();
    assert_eq!(y[..2], [10.0, 0.0]);
    assert!(y[2..12].iter().all(|v| v.abs() < 1e-6), "{y:?}");
}

#[test]
fn out_of_range_indices_and_misshapen_inputs_are_errors_naming_the_problem() {
    let g = graph(
        vec![with_int(node("ge", "GatherElements", &["x", "idx"], &["y"]), "axis", 1)],
        vec![ints("idx", &[0, -3, 5], false)],
        vec![value_info("x", &[1, 3])],
        "y",
    );
    // GatherElements' indices have the data's rank: [3] into [1, 3] is refused.
    let x = Tensor::from_f32(vec![1, 3], vec![1.0, 2.0, 3.0]);
    let err = run(&import(13, g), &[("x", x.clone())]).unwrap_err();
    assert!(err.contains("'ge'") && err.contains("must have the data's rank"), "{err}");

    // Of [1, 3] indices into [1, 3] data, -3 counts from the end; 5 is out of range.
    let idx = TensorProto { dims: vec![1, 3], ..ints("idx", &[0, -3, 5], false) };
    let g = graph(
        vec![with_int(node("ge", "GatherElements", &["x", "idx"], &["y"]), "axis", 1)],
        vec![idx],
        vec![value_info("x", &[1, 3])],
        "y",
    );
    let err = run(&import(13, g), &[("x", x)]).unwrap_err();
    assert!(err.contains("index 5 is out of range for axis 1 of size 3"), "{err}");

    // ScatterND's updates must cover the slices the indices pick: [2] of [4, 3] rows.
    let g = graph(
        vec![node("sc", "ScatterND", &["data", "rows", "upd"], &["y"])],
        vec![TensorProto { dims: vec![2, 1], ..ints("rows", &[0, 3], false) }, weight("upd", &[2, 2])],
        vec![value_info("data", &[4, 3])],
        "y",
    );
    let err = run(&import(18, g), &[("data", Tensor::from_f32(vec![4, 3], vec![0.0; 12]))]).unwrap_err();
    assert!(err.contains("updates have shape [2, 2]") && err.contains("need [2, 3]"), "{err}");

    let g = graph(
        vec![node("top", "TopK", &["x", "k"], &["v", "i"])],
        vec![ints("k", &[9], false)],
        vec![value_info("x", &[2, 4])],
        "v",
    );
    let err = run(&import(11, g), &[("x", Tensor::from_f32(vec![2, 4], vec![0.0; 8]))]).unwrap_err();
    assert!(err.contains("K = 9 must be between 0 and the size 4 of axis 1"), "{err}");
}

#[test]
fn hardmax_before_opset_13_runs_only_where_it_means_todays_op() {
    // Hardmax-11 flattens to 2-D at `axis` (default 1): over the last axis that is Hardmax-13,
    // elsewhere (a max over the flattened tail) the reference does not compute it.
    let hardmax = |axis: i64| {
        graph(
            vec![with_int(node("hm", "Hardmax", &["x"], &["y"]), "axis", axis)],
            vec![],
            vec![value_info("x", &[1, 2, 3])],
            "y",
        )
    };
    let x = Tensor::from_f32(vec![1, 2, 3], vec![1.0, 5.0, 2.0, 7.0, 0.0, 7.0]);
    let y = &run(&import(11, hardmax(2)), &[("x", x.clone())]).unwrap()["y"];
    assert_eq!(y.to_f32_vec(), [0.0, 1.0, 0.0, 1.0, 0.0, 0.0]);
    let err = run(&import(11, hardmax(1)), &[("x", x)]).unwrap_err();
    assert!(err.contains("cannot run it: this opset's version of the operator"), "{err}");
}

#[test]
fn the_report_says_the_reference_computes_host_only_ops() {
    let g = graph(
        vec![with_int(node("cs", "CumSum", &["x", "axis"], &["y"]), "exclusive", 1)],
        vec![ints("axis", &[0], true)],
        vec![value_info("x", &[4])],
        "y",
    );
    let p = bolt::partition::partition(&import(14, g));
    let reason = &p.host.iter().find(|h| h.node == "cs").expect("CumSum stays on the host").reason;
    assert_eq!(reason, bolt::ir::HOST_COMPUTED);
}

#[test]
fn dynamic_quantization_of_zeros_has_onnxruntimes_scale() {
    // The spec's scale (max - min) / 255 is 0 for an all-zero input; onnxruntime gives 1.
    let g = graph(
        vec![node("dq", "DynamicQuantizeLinear", &["x"], &["y", "scale", "zero"])],
        vec![],
        vec![value_info("x", &[3])],
        "scale",
    );
    let out = run(&import(11, g), &[("x", Tensor::from_f32(vec![3], vec![0.0; 3]))]).unwrap();
    assert_eq!(out["scale"].to_f32_vec(), [1.0]);
}

#[test]
fn a_scalar_zero_point_with_a_one_element_scale_is_per_tensor() {
    // onnxruntime's quantizer writes a bias's zero point as [] beside a scale of [1]
    // (pipecat's smart-turn v3); onnxruntime runs it per tensor, and so does the reference.
    let int32 = |name: &str, dims: &[i64], v: &[i32]| TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(6),
        int32_data: v.to_vec(),
        ..Default::default()
    };
    let g = graph(
        vec![node("dq", "DequantizeLinear", &["q", "s", "z"], &["b"]), node("add", "Add", &["x", "b"], &["y"])],
        vec![int32("q", &[2], &[7, -1]), int32("z", &[], &[3]), floats("s", &[1], &[0.5])],
        vec![value_info("x", &[2])],
        "y",
    );
    let out = run(&import(13, g), &[("x", Tensor::from_f32(vec![2], vec![0.0, 1.0]))]).unwrap();
    assert_eq!(out["y"].to_f32_vec(), [2.0, -1.0]);
}
