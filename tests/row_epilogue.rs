//! A Softmax after a GEMM (nn.Linear + softmax, as classifier heads export it) runs inside the
//! GEMM kernel (CUTLASS's GemmSoftmax) when the one cost model says it pays, or always when
//! asked. The fused kernel's meaning is checked against softmax(x W + b) computed here from
//! the ops' definitions (not Bolt's reference code), at odd sizes.

mod common;

use bolt::ir::{Binary, DType, FusedKernel, Graph, Op, RowEpilogue, Tensor};
use bolt::plan::row_epilogue::RowEpilogueMode;
use bolt::plan::{plan_with, PlanOptions};
use bolt_codegen::spec::{Arch, Family};
use common::nets::Net;
use std::collections::HashMap;

use common::nets::softmax_head as head;

fn options(mode: RowEpilogueMode) -> PlanOptions {
    PlanOptions { row_epilogue: mode, ..PlanOptions::default() }
}

fn fused_kernels(g: &Graph) -> Vec<&FusedKernel> {
    g.nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Fused(k) => Some(k.as_ref()),
            _ => None,
        })
        .collect()
}

/// softmax(x W + b) along rows, in f64 from the graph's own weights.
fn expected(g: &Graph, x: &Tensor) -> Vec<f64> {
    let mm = g.nodes.iter().find(|n| n.op == Op::MatMul).unwrap();
    let add = g.nodes.iter().find(|n| n.op == Op::Binary(Binary::Add)).unwrap();
    let w = &g.initializers[mm.input(1).unwrap()];
    let b = &g.initializers[add.input(1).unwrap()];
    let (k, n) = (w.shape[0], w.shape[1]);
    let (xs, ws, bs) = (x.to_f64_vec(), w.to_f64_vec(), b.to_f64_vec());
    let m = xs.len() / k;
    let mut out = vec![0.0; m * n];
    for r in 0..m {
        let logits: Vec<f64> =
            (0..n).map(|j| bs[j] + (0..k).map(|i| xs[r * k + i] * ws[i * n + j]).sum::<f64>()).collect();
        let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
        for j in 0..n {
            out[r * n + j] = (logits[j] - max).exp() / sum;
        }
    }
    out
}

fn run(g: &Graph, x: &Tensor) -> Vec<f64> {
    let inputs: HashMap<String, Tensor> = [("x".to_string(), x.clone())].into();
    let out = bolt::reference::run(g, &inputs).unwrap();
    out[&g.outputs[0]].to_f64_vec()
}

#[test]
fn asked_to_always_fuse_the_gemm_computes_the_softmax_and_equals_its_definition() {
    for (m, k, n, axis) in [(5, 24, 40, -1), (33, 16, 8, 1), (2, 64, 200, -1)] {
        let g = head(m, k, n, axis);
        let plan = plan_with(&g, &options(RowEpilogueMode::Always)).unwrap();
        assert!(!plan.graph.nodes.iter().any(|n| matches!(n.op, Op::Softmax { .. })), "{m}x{k}x{n}: softmax left");
        let kernels = fused_kernels(&plan.graph);
        assert_eq!(kernels.len(), 1);
        assert_eq!(kernels[0].row, Some(RowEpilogue::Softmax));
        assert!(plan.row_epilogues[0].fused);

        let x = common::random_tensor(&[m, k], 11);
        let want = expected(&g, &x);
        let got = run(&plan.graph, &x);
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-5 + 1e-4 * b.abs(), "{m}x{k}x{n} [{i}]: {a} vs {b}");
        }
        // Each row of a softmax sums to one: a wrong axis or a missing normalisation fails.
        for r in 0..m {
            let s: f64 = got[r * n..(r + 1) * n].iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "row {r} sums to {s}");
        }
    }
}

#[test]
fn the_cost_model_decides_and_the_report_gives_both_estimates() {
    // A classifier head on H100 and A100: whatever the verdict, it is the estimates' verdict.
    for device in [bolt::plan::DeviceSpec::h100_sxm5_80gb(), bolt::plan::DeviceSpec::a100_sxm4_80gb()] {
        for (m, k, n) in [(1, 2048, 1000), (4096, 768, 768), (256, 64, 32000)] {
            let g = head(m, k, n, -1);
            let opts = PlanOptions { device: device.clone(), ..PlanOptions::default() };
            let plan = plan_with(&g, &opts).unwrap();
            let d = &plan.row_epilogues[0];
            eprintln!("{} {m}x{k}x{n}: {}", device.name, d.reason);
            let (unfused, fused) = (d.unfused_seconds.unwrap(), d.fused_seconds.unwrap());
            assert!(unfused > 0.0 && fused > 0.0);
            assert_eq!(d.fused, unfused > fused * bolt::plan::row_epilogue::MIN_GAIN, "{}: {}", device.name, d.reason);
            let softmax_left = plan.graph.nodes.iter().any(|n| matches!(n.op, Op::Softmax { .. }) || is_stitched(n));
            assert_eq!(softmax_left, !d.fused, "{}: {}", device.name, d.reason);
            assert!(d.reason.contains("us"), "{}", d.reason);
        }
    }
}

fn is_stitched(n: &bolt::ir::Node) -> bool {
    matches!(n.op, Op::Stitched(_))
}

#[test]
fn a_gemm_with_other_readers_or_another_axis_keeps_its_softmax_apart() {
    // The GEMM's output is also a model output: GemmSoftmax keeps D in its workspace.
    let mut net = Net::new(DType::F32);
    let x = net.input("x", &[8, 32]);
    let y = net.linear(&x, 32, 16);
    let p = net.op("softmax", Op::Softmax { axis: -1 }, &[&y]);
    let g = net.finish(&[&p, &y]);
    let plan = plan_with(&g, &options(RowEpilogueMode::Always)).unwrap();
    assert!(fused_kernels(&plan.graph).iter().all(|k| k.row.is_none()));
    // Softmax over the rows' axis (0) is not a row epilogue.
    let g = head(8, 32, 16, 0);
    let plan = plan_with(&g, &options(RowEpilogueMode::Always)).unwrap();
    assert!(plan.row_epilogues.is_empty());
    assert!(fused_kernels(&plan.graph).iter().all(|k| k.row.is_none()));
    // Off: never.
    let plan = plan_with(&head(8, 32, 16, -1), &options(RowEpilogueMode::Off)).unwrap();
    assert!(fused_kernels(&plan.graph).iter().all(|k| k.row.is_none()));
}

#[test]
fn the_fused_kernel_lowers_to_gemm_softmax_which_an_h100_runs_as_its_sm80_build() {
    let g = head(64, 32, 48, -1);
    let plan = plan_with(&g, &options(RowEpilogueMode::Always)).unwrap();
    let (uses, skipped) = bolt::plan::lower::workloads(&plan.graph, &HashMap::new());
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(uses.len(), 1);
    assert_eq!(uses[0].workload.family, Family::GemmSoftmax);
    let pick = bolt::compile::pick_kernel(&uses[0].workload, Arch::Sm90, None).unwrap();
    assert_eq!(pick.spec.arch, Arch::Sm80, "no CUTLASS 3.x GemmSoftmax: the sm80 kernel runs on Hopper");
    assert_eq!(pick.spec.family, Family::GemmSoftmax);
    bolt_codegen::validate::validate(&pick.spec).unwrap();
    let source = bolt_codegen::render::render(&pick.spec, "k").unwrap();
    assert!(source.contains("cutlass::GemmSoftmax<"), "rendered from the GemmSoftmax template");
}
