//! Shape inference through the shape computations real exporters write, on small hand-built
//! graphs: each ends in an anchor whose operands must have known shapes for the partitioner
//! to claim it, so a lost shape shows up as a missing partition as well as a type.

mod common;

use bolt::import::{self, proto::*};
use common::onnx_proto::*;
use prost::Message;
use tensor_shape_proto::dimension::Value as D;

fn import(opset: i64, g: GraphProto) -> bolt::ir::Graph {
    import::load_bytes(&model(opset, g).encode_to_vec(), None).unwrap_or_else(|e| panic!("{e}")).graph
}

fn ty(g: &bolt::ir::Graph, t: &str) -> String {
    g.tensor_type(t).map_or("unknown".into(), |t| t.to_string())
}

fn claimed(g: &bolt::ir::Graph) -> Vec<String> {
    bolt::partition::partition(g).partitions.into_iter().map(|p| p.anchor).collect()
}

#[test]
fn torch_expand_target_folds_through_equal_and_where() {
    // torch.onnx writes expand(x, [N, 3, -1]) as
    // Where(Equal(target, -1), ConstantOfShape(Shape(target)) of 1, target): with the batch
    // symbolic, Equal still folds (a dim is never -1, and the -1 concatenated into the target
    // stays known as -1: true there) and the Expand output is [N, 3, 4]. The planned graph,
    // which runs on what inference folded, gives the model's output (a fold of that -1 as
    // "some dim, never negative" once left Expand a -1 to expand to).
    let g = GraphProto {
        node: vec![
            node("shape", "Shape", &["x"], &["s"]),
            node("gather", "Gather", &["s", "zero"], &["n"]),
            node("unsq", "Unsqueeze", &["n", "zero1"], &["n1"]),
            with_int(node("cat", "Concat", &["n1", "three_m1"], &["target"]), "axis", 0),
            node("tshape", "Shape", &["target"], &["tlen"]),
            node("ones", "ConstantOfShape", &["tlen"], &["one"]),
            node("eq", "Equal", &["target", "m1"], &["is_m1"]),
            node("where", "Where", &["is_m1", "one", "target"], &["t2"]),
            node("expand", "Expand", &["x", "t2"], &["xe"]),
            node("mm", "MatMul", &["xe", "w"], &["y"]),
        ],
        initializer: vec![
            ints("zero", &[0], true),
            ints("zero1", &[0], false),
            ints("three_m1", &[3, -1], false),
            ints("m1", &[-1], true),
            weight("w", &[4, 5]),
        ],
        input: vec![typed_value_info("x", 1, vec![D::DimParam("N".into()), D::DimValue(1), D::DimValue(4)])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let mut g = g;
    // ConstantOfShape's value: int64 1 (torch's spelling).
    g.node[5].attribute.push(AttributeProto {
        name: Some("value".into()),
        r#type: Some(attribute_proto::AttributeType::Tensor as i32),
        t: Some(ints("", &[1], false)),
        ..Default::default()
    });
    let g = import(17, g);
    assert_eq!(ty(&g, "t2"), "i64[3]");
    assert_eq!(ty(&g, "xe"), "f32[N, 3, 4]");
    assert_eq!(ty(&g, "y"), "f32[N, 3, 5]");
    assert_eq!(claimed(&g), ["mm"]);
    let x = common::random_tensor(&[2, 1, 4], 3);
    let inputs = std::collections::HashMap::from([("x".to_string(), x)]);
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap_or_else(|e| panic!("planned: {e}"));
    assert_eq!(got["y"].shape, [2, 3, 5]);
    for (a, w) in got["y"].to_f64_vec().iter().zip(want["y"].to_f64_vec()) {
        assert!((a - w).abs() <= 1e-5 * (1.0 + w.abs()), "{a} vs {w}");
    }
}

#[test]
fn shape_arithmetic_keeps_symbols_and_folds_numbers() {
    // Reshape(x, [N, C / 2, 2]) with N and C read from Shape(x): [N, 6] -> [N, 3, 2].
    let g = GraphProto {
        node: vec![
            node("shape", "Shape", &["x"], &["s"]),
            node("g0", "Gather", &["s", "zero"], &["n"]),
            node("g1", "Gather", &["s", "one"], &["c"]),
            node("half", "Div", &["c", "two"], &["c2"]),
            node("u0", "Unsqueeze", &["n", "axes0"], &["n1"]),
            node("u1", "Unsqueeze", &["c2", "axes0"], &["c21"]),
            with_int(node("cat", "Concat", &["n1", "c21", "two1"], &["target"]), "axis", 0),
            node("reshape", "Reshape", &["x", "target"], &["xr"]),
            node("mm", "MatMul", &["xr", "w"], &["y"]),
        ],
        initializer: vec![
            ints("zero", &[0], true),
            ints("one", &[1], true),
            ints("two", &[2], true),
            ints("two1", &[2], false),
            ints("axes0", &[0], false),
            weight("w", &[2, 7]),
        ],
        input: vec![typed_value_info("x", 1, vec![D::DimParam("N".into()), D::DimValue(6)])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(17, g);
    assert_eq!(ty(&g, "xr"), "f32[N, 3, 2]");
    assert_eq!(ty(&g, "y"), "f32[N, 3, 7]");
    assert_eq!(claimed(&g), ["mm"]);
}

#[test]
fn lstm_outputs_and_split_parts_have_shapes() {
    // A CRNN head: bidirectional LSTM -> Transpose -> Reshape [0, 0, -1] -> Split in two
    // along features -> MatMul on the first half.
    let lstm = with_int(
        with_string(node("lstm", "LSTM", &["x", "W", "R"], &["Y", "Yh", "Yc"]), "direction", "bidirectional"),
        "hidden_size",
        16,
    );
    let g = GraphProto {
        node: vec![
            lstm,
            with_ints(node("tr", "Transpose", &["Y"], &["Yt"]), "perm", &[0, 2, 1, 3]),
            node("flat", "Reshape", &["Yt", "target"], &["feat"]),
            with_int(node("split", "Split", &["feat"], &["f0", "f1"]), "axis", 2),
            node("mm", "MatMul", &["f0", "w"], &["y"]),
        ],
        initializer: vec![
            weight("W", &[2, 64, 8]),
            weight("R", &[2, 64, 16]),
            ints("target", &[0, 0, -1], false),
            weight("w", &[16, 3]),
        ],
        input: vec![typed_value_info("x", 1, vec![D::DimParam("T".into()), D::DimValue(1), D::DimValue(8)])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(12, g);
    assert_eq!(ty(&g, "Y"), "f32[T, 2, 1, 16]");
    assert_eq!(ty(&g, "Yh"), "f32[2, 1, 16]");
    assert_eq!(ty(&g, "feat"), "f32[T, 1, 32]");
    assert_eq!(ty(&g, "f0"), "f32[T, 1, 16]");
    assert_eq!(claimed(&g), ["mm"]);
}

#[test]
fn declared_value_info_types_what_inference_cannot() {
    // An op from another domain has unknown outputs; the exporter's value_info gives the
    // shape, and the MatMul after it becomes a kernel. Without the value_info it stays with
    // the host, with the reason.
    let mut custom = node("custom", "Decoder", &["x"], &["h"]);
    custom.domain = Some("com.example".into());
    let graph = |declared: bool| GraphProto {
        node: vec![custom.clone(), node("mm", "MatMul", &["h", "w"], &["y"])],
        initializer: vec![weight("w", &[4, 5])],
        input: vec![value_info("x", &[2, 4])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        value_info: if declared { vec![value_info("h", &[2, -1])] } else { vec![] },
        ..Default::default()
    };
    let mut m = model(17, graph(true));
    m.opset_import.push(OperatorSetIdProto { domain: Some("com.example".into()), version: Some(1) });
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert_eq!(ty(&g, "h"), "f32[2, ?]");
    assert_eq!(ty(&g, "y"), "f32[2, 5]");
    assert_eq!(claimed(&g), ["mm"]);

    m.graph = Some(graph(false));
    let g = import::load_bytes(&m.encode_to_vec(), None).unwrap().graph;
    assert_eq!(ty(&g, "y"), "unknown");
    let p = bolt::partition::partition(&g);
    assert!(p.partitions.is_empty());
    let mm = p.host.iter().find(|h| h.node == "mm").unwrap();
    assert!(mm.reason.contains("unknown"), "{}", mm.reason);
}

#[test]
fn one_d_convolutions_are_anchors() {
    // Conv on [N, C, L] with a [C, 1] bias Add and Relu: one kernel, planned as a 2-D conv
    // with H = 1. Planned vs original on the reference (this checks the rewriting only; the
    // reference's Conv is checked against ONNX's conformance cases, and tests/python checks
    // the ONNX Runtime provider against ORT CPU on real 1-D conv models).
    let conv = with_ints(
        with_ints(with_ints(node("conv", "Conv", &["x", "w"], &["c"]), "pads", &[2, 2]), "strides", &[2]),
        "dilations",
        &[2],
    );
    let mut w = weight("w", &[6, 4, 3]);
    w.float_data = (0..72).map(|i| ((i * 37 % 11) as f32 - 5.0) / 7.0).collect();
    let mut b = weight("b", &[6, 1]);
    b.float_data = (0..6).map(|i| i as f32 / 10.0 - 0.2).collect();
    let g = GraphProto {
        node: vec![conv, node("bias", "Add", &["c", "b"], &["cb"]), node("act", "Relu", &["cb"], &["y"])],
        initializer: vec![w, b],
        input: vec![typed_value_info("x", 1, vec![D::DimParam("N".into()), D::DimValue(4), D::DimValue(19)])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(17, g);
    assert_eq!(ty(&g, "y"), "f32[N, 6, 10]");
    let p = bolt::partition::partition(&g);
    assert_eq!(p.partitions.len(), 1);
    assert_eq!(p.partitions[0].nodes, ["conv", "bias", "act"]);
    let plan = bolt::plan::plan(&g).unwrap();
    let bindings: bolt::compile::DimBindings = [("N".to_string(), 2)].into();
    let inputs = bolt::compile::synthetic_inputs(&g, &bindings, 7).unwrap();
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
    let c = bolt::cases::compare("y", &got["y"], &want["y"], bolt::cases::Tolerance { rtol: 1e-5, atol: 1e-5 });
    assert!(c.failure.is_none(), "{:?}", c.failure);
    assert_eq!(want["y"].shape, [2, 6, 10]);
    // The kernel itself is a 2-D conv over [N, 1, L] (NHWC: [N, H=1, W=L, C]).
    let (uses, skipped) = bolt::plan::lower::workloads(&plan.graph, &bindings);
    assert!(skipped.is_empty(), "{skipped:?}");
    let bolt_profiler::workload::Problem::Conv2d(c) = uses[0].workload.problem else { panic!() };
    assert_eq!((c.n, c.h, c.w, c.r, c.s), (2, 1, 19, 1, 3));
}

#[test]
fn convolutions_by_weights_of_run_time_size_import_and_run_on_the_host() {
    // Valid ONNX: a Conv (and a ConvTranspose) whose weight is a graph input with a symbolic
    // window. Their outputs' spatial sizes are unknown until run time; nothing claims them
    // (an anchor needs constant weights) and the reference runs them at the sizes given:
    // a 1x1 window here, y[m] = Σ_c w[m, c] · x[c].
    let sym = |n: &str| D::DimParam(n.into());
    let g = GraphProto {
        node: vec![node("conv", "Conv", &["x", "w"], &["y"]), node("up", "ConvTranspose", &["x", "wt"], &["z"])],
        input: vec![
            typed_value_info("x", 1, vec![D::DimValue(1), D::DimValue(3), D::DimValue(2), D::DimValue(2)]),
            typed_value_info("w", 1, vec![D::DimValue(4), D::DimValue(3), sym("k"), sym("k")]),
            typed_value_info("wt", 1, vec![D::DimValue(3), D::DimValue(2), sym("k"), sym("k")]),
        ],
        output: vec![
            ValueInfoProto { name: Some("y".into()), ..Default::default() },
            ValueInfoProto { name: Some("z".into()), ..Default::default() },
        ],
        ..Default::default()
    };
    let g = import(17, g);
    assert_eq!(ty(&g, "y"), "f32[1, 4, ?, ?]");
    assert_eq!(ty(&g, "z"), "f32[1, 2, ?, ?]");
    assert!(claimed(&g).is_empty());
    let x: Vec<f32> = (0..12).map(|i| i as f32 / 4.0 - 1.0).collect();
    let w: Vec<f32> = (0..12).map(|i| (i % 5) as f32 - 2.0).collect();
    let inputs = [
        ("x".to_string(), bolt::ir::Tensor::from_f32(vec![1, 3, 2, 2], x.clone())),
        ("w".to_string(), bolt::ir::Tensor::from_f32(vec![4, 3, 1, 1], w.clone())),
        ("wt".to_string(), bolt::ir::Tensor::from_f32(vec![3, 2, 1, 1], w[..6].to_vec())),
    ]
    .into();
    let out = bolt::reference::run(&g, &inputs).unwrap();
    assert_eq!(out["y"].shape, [1, 4, 2, 2]);
    assert_eq!(out["z"].shape, [1, 2, 2, 2]);
    let y = out["y"].to_f32_vec();
    for m in 0..4 {
        for p in 0..4 {
            let want: f32 = (0..3).map(|c| w[m * 3 + c] * x[c * 4 + p]).sum();
            assert!((y[m * 4 + p] - want).abs() < 1e-5, "y[{m}, {p}]: {} vs {want}", y[m * 4 + p]);
        }
    }
    // Planning keeps them as they are (the planned graph gives the same values).
    let plan = bolt::plan::plan(&g).unwrap();
    let planned = bolt::reference::run(&plan.graph, &inputs).unwrap();
    assert_eq!((planned["y"].to_f32_vec(), planned["z"].to_f32_vec()), (y, out["z"].to_f32_vec()));
}

#[test]
fn chunk_bounds_from_known_dims_are_constants() {
    // torch.chunk(h, 3, dim=1) of a GRU's gates, as torch.onnx 2.x writes it: the bounds are
    // (Shape(h)[1] + 2) / 3 * k. With h [N, 12] every bound is known though N is not: the
    // Slice keeps N, its gate feeds a GEMM, and the plan folds the arithmetic away so that the
    // Slice is a box of constant bounds (device copies) and no shape computation is left.
    let g = GraphProto {
        node: vec![
            node("shape", "Shape", &["h"], &["s"]),
            node("g1", "Gather", &["s", "one"], &["c"]),
            node("add", "Add", &["c", "two"], &["c2"]),
            node("div", "Div", &["c2", "three"], &["size"]),
            node("start", "Mul", &["size", "one1"], &["b0"]),
            node("end", "Mul", &["size", "two1"], &["b1"]),
            node("slice", "Slice", &["h", "b0", "b1", "one1"], &["gate"]),
            node("mm", "MatMul", &["gate", "w"], &["y"]),
        ],
        initializer: vec![
            ints("one", &[1], true),
            ints("two", &[2], true),
            ints("three", &[3], true),
            ints("one1", &[1], false),
            ints("two1", &[2], false),
            weight("w", &[4, 5]),
        ],
        input: vec![typed_value_info("h", 1, vec![D::DimParam("N".into()), D::DimValue(12)])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(17, g);
    assert_eq!(ty(&g, "gate"), "f32[N, 4]");
    assert_eq!(ty(&g, "y"), "f32[N, 5]");
    assert_eq!(claimed(&g), ["mm"]);
    let plan = bolt::plan::plan(&g).unwrap();
    let left: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
    assert!(!left.iter().any(|op| matches!(*op, "Shape" | "Gather" | "Add" | "Div" | "Mul")), "{left:?}");
    let slice = plan.graph.nodes.iter().find(|n| n.name == "slice").unwrap();
    assert!(bolt::plan::lower::is_copy_node(&plan.graph, slice));
    // The rewritten graph computes what the model does.
    let h = common::random_tensor(&[3, 12], 4);
    let feeds = std::collections::HashMap::from([("h".to_string(), h)]);
    let (want, got) = (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&plan.graph, &feeds).unwrap());
    let (a, b) = (want["y"].to_f32_vec(), got["y"].to_f32_vec());
    assert_eq!(want["y"].shape, vec![3, 5]);
    assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-4 * (1.0 + p.abs())), "{a:?} vs {b:?}");
}

#[test]
fn position_ids_sliced_to_the_length_keep_its_symbol() {
    // HF's position embeddings: Gather(table, Slice(position_ids[1, 512], 0, Shape(ids)[1],
    // axis 1)) added to the word embeddings [B, S, 16]: the slice is [1, S] (the end taken
    // within the buffer, as onnxruntime's symbolic inference does), so the sum keeps S.
    let g = GraphProto {
        node: vec![
            with_int(node("words", "Gather", &["word_table", "ids"], &["we"]), "axis", 0),
            with_int(node("len", "Shape", &["ids"], &["len"]), "start", 1),
            node("slice", "Slice", &["position_ids", "zero", "len", "one"], &["pids"]),
            with_int(node("positions", "Gather", &["pos_table", "pids"], &["pe"]), "axis", 0),
            node("add", "Add", &["we", "pe"], &["e"]),
            node("mm", "MatMul", &["e", "w"], &["y"]),
        ],
        initializer: vec![
            ints("position_ids", &(0..512).collect::<Vec<i64>>(), false),
            ints("zero", &[0], false),
            ints("one", &[1], false),
            weight("word_table", &[100, 16]),
            weight("pos_table", &[512, 16]),
            weight("w", &[16, 4]),
        ],
        input: vec![typed_value_info("ids", 7, vec![D::DimParam("B".into()), D::DimParam("S".into())])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let mut g = g;
    // The buffer is [1, 512].
    g.initializer[0].dims = vec![1, 512];
    let g = import(17, g);
    assert_eq!(ty(&g, "pids"), "i64[1, S]");
    assert_eq!(ty(&g, "e"), "f32[B, S, 16]");
    assert_eq!(claimed(&g), ["mm"]);
}

#[test]
fn one_hot_of_a_constant_depth_has_its_shape() {
    // tf2onnx's embedding of byte ids as a matmul (magika): OneHot(ids, 256) -> [N, T, 256]
    // -> MatMul. With the depth inserted at the axis the MatMul is a GEMM kernel; without
    // it, the MatMul's operand had no shape and stayed with the host.
    let g = GraphProto {
        node: vec![
            with_int(node("onehot", "OneHot", &["ids", "depth", "values"], &["h"]), "axis", -1),
            node("mm", "MatMul", &["h", "w"], &["y"]),
        ],
        initializer: vec![ints("depth", &[256], true), floats("values", &[2], &[0.0, 1.0]), weight("w", &[256, 16])],
        input: vec![typed_value_info("ids", 7, vec![D::DimParam("N".into()), D::DimValue(12)])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(13, g);
    assert_eq!(ty(&g, "h"), "f32[N, 12, 256]");
    assert_eq!(claimed(&g), ["mm"]);
    let ids = bolt::ir::Tensor::from_i64(vec![2, 12], (0..24).map(|i| (i * 37) % 256).collect());
    let inputs = std::collections::HashMap::from([("ids".to_string(), ids)]);
    let want = bolt::reference::run(&g, &inputs).unwrap();
    let plan = bolt::plan::plan(&g).unwrap();
    let got = bolt::reference::run(&plan.graph, &inputs).unwrap();
    assert_eq!(got["y"].shape, [2, 12, 16]);
    assert_eq!(got["y"].to_f64_vec(), want["y"].to_f64_vec());
}

#[test]
fn frame_counts_computed_with_mod_are_known_once_the_length_is() {
    // A speech front end (onnx-asr's WeSpeaker, OnnxScript) trims the waveform to whole hops:
    // Slice(x, 0, n - (n - 400) % 160) with n = Shape(x)[1]. Mod is a host-only op; with the
    // length bound, its value folds like the other shape arithmetic, so the slice (and the
    // frames after it) have known shapes and a standalone artifact can plan their memory.
    let g = GraphProto {
        node: vec![
            node("shape", "Shape", &["x"], &["s"]),
            node("n", "Gather", &["s", "one"], &["n"]),
            node("less_win", "Sub", &["n", "win"], &["nw"]),
            node("mod", "Mod", &["nw", "hop"], &["r"]),
            node("trimmed", "Sub", &["n", "r"], &["len"]),
            node("end", "Unsqueeze", &["len", "zero1"], &["ends"]),
            node("slice", "Slice", &["x", "zero1", "ends", "one1"], &["y"]),
        ],
        initializer: vec![
            ints("one", &[1], true),
            ints("win", &[400], true),
            ints("hop", &[160], true),
            ints("zero1", &[0], false),
            ints("one1", &[1], false),
        ],
        input: vec![typed_value_info("x", 1, vec![D::DimValue(2), D::DimParam("N".into())])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(17, g);
    let bound = bolt::plan::edit::bind_inputs(&g, &std::collections::HashMap::from([("N".to_string(), 1000)])).unwrap();
    // 1000 - (600 % 160 = 120) = 880.
    assert_eq!(ty(&bound, "y"), "f32[2, 880]");
    let x = common::random_tensor(&[2, 1000], 5);
    let got = bolt::reference::run(&g, &std::collections::HashMap::from([("x".to_string(), x)])).unwrap();
    assert_eq!(got["y"].shape, [2, 880]);
}

#[test]
fn a_backward_slice_of_an_empty_axis_is_empty() {
    // Silero VAD v3 flips x[:, :, 1:4] (Slice with steps -1 from -1 to -INT64_MAX). With the
    // length symbolic, planning and `bolt report` bind it to 1 to place glue kernels, which
    // makes the slice before the flip empty; a model fed such a short input gets [1, 1, 0]
    // from onnxruntime. Either way the flip is empty, not a panic.
    let g = GraphProto {
        node: vec![
            node("pad", "Pad", &["x", "pads"], &["xp"]),
            node("window", "Slice", &["xp", "one1", "four", "last", "one1"], &["w"]),
            node("flip", "Slice", &["w", "minus1", "most_negative", "last", "minus1"], &["y"]),
        ],
        initializer: vec![
            ints("pads", &[0, 0, 0, 0, 0, 0], false),
            ints("one1", &[1], false),
            ints("four", &[4], false),
            ints("last", &[-1], false),
            ints("minus1", &[-1], false),
            ints("most_negative", &[-i64::MAX], false),
        ],
        input: vec![typed_value_info("x", 1, vec![D::DimValue(1), D::DimValue(1), D::DimParam("T".into())])],
        output: vec![ValueInfoProto { name: Some("y".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(13, g);
    bolt::plan::plan(&g).unwrap_or_else(|e| panic!("{e}"));
    let bound = bolt::plan::edit::bind_inputs(&g, &std::collections::HashMap::from([("T".to_string(), 1)])).unwrap();
    assert_eq!(ty(&bound, "y"), "f32[1, 1, 0]");
    for (t, want) in [(1, vec![]), (9, vec![3.0, 2.0, 1.0])] {
        let x = bolt::ir::Tensor::from_f32(vec![1, 1, t], (0..t).map(|v| v as f32).collect());
        let got = bolt::reference::run(&g, &std::collections::HashMap::from([("x".to_string(), x)])).unwrap();
        assert_eq!(got["y"].shape, [1, 1, want.len()]);
        assert_eq!(got["y"].to_f32_vec(), want);
    }
}

#[test]
fn convs_that_keep_a_symbolic_length_keep_its_name() {
    // An audio model's length is symbolic: a stride-1 conv padded by its reach (or SAME)
    // gives the same length back, so it keeps the name; a strided one gives a new, unknown
    // length. Known axes beside it (the H = 1 of a 1-D conv planned as 2-D) stay known.
    let same = with_ints(node("same", "Conv", &["x", "w"], &["a"]), "pads", &[2, 2]);
    let dilated =
        with_ints(with_ints(node("dilated", "Conv", &["a", "w2"], &["b"]), "pads", &[2, 2]), "dilations", &[2]);
    let strided = with_ints(with_ints(node("strided", "Conv", &["b", "w2"], &["c"]), "pads", &[1, 1]), "strides", &[2]);
    let pool = with_ints(
        with_ints(with_ints(node("pool", "MaxPool", &["x2d"], &["p"]), "kernel_shape", &[1, 3]), "pads", &[0, 1, 0, 1]),
        "strides",
        &[1, 1],
    );
    let g = GraphProto {
        node: vec![same, dilated, strided, node("h", "Unsqueeze", &["c", "two"], &["x2d"]), pool],
        initializer: vec![weight("w", &[6, 4, 5]), weight("w2", &[6, 6, 3]), ints("two", &[2], false)],
        input: vec![typed_value_info("x", 1, vec![D::DimValue(1), D::DimValue(4), D::DimParam("T".into())])],
        output: vec![ValueInfoProto { name: Some("p".into()), ..Default::default() }],
        ..Default::default()
    };
    let g = import(17, g);
    assert_eq!(ty(&g, "a"), "f32[1, 6, T]");
    assert_eq!(ty(&g, "b"), "f32[1, 6, T]");
    assert_eq!(ty(&g, "c"), "f32[1, 6, ?]");
    assert_eq!(ty(&g, "p"), "f32[1, 6, 1, ?]");
}
