//! Models written against opsets 7 to 12 (tests/python/gen_legacy_opsets.py, outputs from
//! onnxruntime CPU): the op versions whose form changed since (Slice-1, Pad-2 and Clip-6 with
//! attributes, Upsample-7/9, Resize-10, Split-11's sizes, BatchNormalization-7) import as
//! today's ops and give onnxruntime's outputs, on the reference and planned; what Bolt cannot
//! express stays with the host, with the reason.

mod common;

use bolt::cases::{run_case, run_planned_case, Tolerance};
use bolt::ir::Op;

const TOL: Tolerance = Tolerance { rtol: 1e-4, atol: 1e-5 };

struct Case {
    name: String,
    dir: std::path::PathBuf,
    /// Why Bolt leaves one of its nodes to the host (a substring), if it does.
    host: Option<String>,
}

fn cases() -> Vec<Case> {
    let Some(root) = common::testdata("legacy-opsets") else { return vec![] };
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("index.json")).unwrap()).unwrap();
    let v: Vec<Case> = index
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: c["case"].as_str().unwrap().to_string(),
            dir: root.join(c["case"].as_str().unwrap()),
            host: c["host"].as_str().map(str::to_string),
        })
        .collect();
    assert!(v.len() >= 10, "{} cases", v.len());
    v
}

fn opaque_reasons(g: &bolt::ir::Graph) -> Vec<String> {
    g.nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Opaque { op_type, why, .. } => Some(format!("{} ({op_type}): {why}", n.name)),
            _ => None,
        })
        .collect()
}

#[test]
fn older_op_versions_import_as_todays_ops_and_give_onnxruntimes_outputs() {
    for case in cases().into_iter().filter(|c| c.host.is_none()) {
        let g = bolt::import::load(&case.dir.join("model.onnx")).unwrap().graph;
        assert!(g.opset < 13, "{}: opset {}", case.name, g.opset);
        let opaque = opaque_reasons(&g);
        assert!(opaque.is_empty(), "{}: left to the host: {opaque:?}", case.name);
        for (what, r) in [("reference", run_case(&case.dir, TOL)), ("planned", run_planned_case(&case.dir, TOL))] {
            let worst = r.outputs.iter().map(|o| o.max_abs_err).fold(0.0, f64::max);
            println!("{} ({what}): {} outputs, max abs err {worst:.2e}", case.name, r.outputs.len());
            assert!(r.passed(), "{} ({what}): {}", case.name, r.reason().unwrap_or_default());
            assert!(!r.outputs.is_empty(), "{}: nothing compared", case.name);
        }
    }
}

#[test]
fn what_an_older_version_means_beyond_todays_op_stays_with_the_host() {
    let mut seen = 0;
    for case in cases() {
        let Some(why) = &case.host else { continue };
        let g = bolt::import::load(&case.dir.join("model.onnx")).unwrap().graph;
        let opaque = opaque_reasons(&g);
        assert!(opaque.iter().any(|o| o.contains(why.as_str())), "{}: {opaque:?} lacks '{why}'", case.name);
        seen += 1;
    }
    assert!(seen >= 1 || cases().is_empty());
}

#[test]
fn an_opset_9_relu6_is_a_clip_epilogue_of_its_conv() {
    // Clip-6's bounds were attributes; as constant inputs they make the Clip the conv's
    // epilogue, as Clip-11's do.
    let Some(case) = cases().into_iter().find(|c| c.name == "conv_relu6_block_opset9") else { return };
    let g = bolt::import::load(&case.dir.join("model.onnx")).unwrap().graph;
    let plan = bolt::plan::plan(&g).unwrap();
    let op_of = |name: &String| g.nodes.iter().find(|n| &n.name == name).map_or("?", |n| n.op.op_type());
    let conv = plan.partitioning.partitions.iter().find(|p| op_of(&p.anchor) == "Conv").expect("the conv is a kernel");
    let ops: Vec<&str> = conv.nodes.iter().map(op_of).collect();
    assert!(ops.contains(&"Clip"), "conv partition {ops:?}");
}
