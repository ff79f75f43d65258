//! A plan keeps the model's meaning: the planned graph (one fused kernel node per partition,
//! BatchNormalization folded, bias terms summed, scalars folded into alpha) run on the
//! reference executor equals the original graph's reference output.

mod common;

use bolt::cases::{compare, data_sets, read_tensor_pb, Tolerance};
use bolt::compile::{synthetic_inputs, DimBindings};
use bolt::ir::{Graph, Op, Tensor};
use std::collections::HashMap;

/// Folding changes rounding order (weights scaled before the GEMM, biases summed first).
const PLAN_TOL: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-4 };

fn assert_plan_preserves(name: &str, g: &Graph, inputs: &HashMap<String, Tensor>) {
    let planned = bolt::plan::plan(g).unwrap();
    let fused = planned.graph.nodes.iter().filter(|n| matches!(n.op, Op::Fused(_))).count();
    assert_eq!(fused, planned.partitioning.partitions.len());
    assert!(fused > 0, "{name}: nothing planned");
    let want = bolt::reference::run(g, inputs).unwrap();
    let got = bolt::reference::run(&planned.graph, inputs).unwrap();
    for o in &g.outputs {
        let c = compare(o, &got[o], &want[o], PLAN_TOL);
        println!(
            "{name}: {fused} kernels, {} -> {} nodes, output {o} max abs err {:.2e}",
            g.nodes.len(),
            planned.graph.nodes.len(),
            c.max_abs_err
        );
        assert!(c.failure.is_none(), "{name}: {}", c.failure.unwrap());
    }
}

#[test]
fn the_default_model_plans_to_four_kernels_with_the_same_output() {
    let g = bolt::models::default_model().unwrap();
    let bindings: DimBindings = [("N".to_string(), 2)].into();
    assert_plan_preserves("default", &g, &synthetic_inputs(&g, &bindings, 3).unwrap());
}

#[test]
fn real_models_keep_their_outputs_when_planned() {
    for model in ["resnet50", "vgg16", "mobilenet_v2", "bert_base", "ppocrv4_det", "small_conv_mlp"] {
        let Some(dir) = common::testdata(&format!("models/{model}")) else { return };
        let g = bolt::import::load(&dir.join("model.onnx")).unwrap().graph;
        let set = &data_sets(&dir)[0];
        let inputs = g
            .inputs
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), read_tensor_pb(&set.join(format!("input_{i}.pb"))).unwrap().1))
            .collect();
        assert_plan_preserves(model, &g, &inputs);
    }
}
