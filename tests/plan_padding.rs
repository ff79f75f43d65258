//! Alignment padding: channel / K / N sizes that are not multiples of the 128-bit vector width
//! (8 f16 elements, 4 f32) are padded so aligned kernels apply. Shapes from
//! ../shared/workloads/padding.json (Bolt's Table 3).

mod common;

use bolt::ir::{DType, Graph, Op};
use bolt::plan::padding::{ActivationPadding, PaddedDim};
use bolt::plan::{plan_with, Plan, PlanOptions};
use common::nets::{inputs, Net};

fn planned(g: &Graph, check: bool) -> Plan {
    let plan = plan_with(g, &PlanOptions { b2b: false, ..Default::default() }).unwrap();
    for p in &plan.padding {
        println!("  {} {:?} {} -> {}: {:?}", p.kernel, p.dim, p.from, p.to, p.activation);
    }
    if check {
        let x = inputs(g);
        let (want, got) = (bolt::reference::run(g, &x).unwrap(), bolt::reference::run(&plan.graph, &x).unwrap());
        for o in &g.outputs {
            let c = bolt::cases::compare(o, &got[o], &want[o], bolt::cases::Tolerance { rtol: 1e-2, atol: 1e-2 });
            assert!(c.failure.is_none(), "{}", c.failure.unwrap());
        }
    }
    plan
}

fn pads(p: &Plan) -> usize {
    p.graph.nodes.iter().filter(|n| matches!(n.op, Op::FitLastAxis { .. })).count()
}

#[test]
fn table3_convs_pad_input_channels_to_8() {
    let Some(w) = common::workload("padding.json") else { return };
    for (i, q) in w["problems"].as_array().unwrap().iter().enumerate() {
        let d = |k: &str| q[k].as_u64().unwrap() as usize;
        let (c, k, r, s, pad) = (d("C"), d("K"), d("R"), d("S"), d("pad"));
        // Planning on the full batch; numerics on batch 2 of the first two (same kernels).
        for (batch, check) in [(d("N"), false), (2, i < 2)] {
            let mut n = Net::new(DType::F16);
            let x = n.input("x", &[batch, c, d("H"), d("W")]);
            let wt = n.random("w", &[k, c, r, s], (2.0 / (c * r * s) as f64).sqrt());
            let conv = Op::Conv {
                window: bolt::ir::Window {
                    kernel_shape: Some(vec![r, s]),
                    strides: None,
                    pads: Some(vec![pad; 4]),
                    dilations: None,
                    auto_pad: bolt::ir::AutoPad::NotSet,
                },
                group: 1,
            };
            let y = n.op("conv", conv, &[&x, &wt]);
            println!("N={batch} C={c} K={k} {r}x{s}");
            let p = planned(&n.finish(&[&y]), check);
            assert_eq!(p.padding.len(), 1);
            let pd = &p.padding[0];
            assert_eq!((pd.dim, pd.from, pd.to), (PaddedDim::InputChannels, c, c.div_ceil(8) * 8));
            assert_eq!(pd.weight_extra_bytes, k * r * s * (pd.to - c) * 2);
            let ActivationPadding::Standalone { extra_bytes, est_seconds, .. } = pd.activation else {
                panic!("the graph input has no producing kernel: {:?}", pd.activation)
            };
            assert_eq!(extra_bytes, batch * d("H") * d("W") * pd.to * 2);
            assert!(est_seconds > 0.0);
            assert_eq!(pads(&p), 1);
        }
    }
}

#[test]
fn a_producing_kernel_writes_padded_channels_so_no_pad_pass_is_needed() {
    // conv 8 -> 46 channels, ReLU, conv 46 -> 32: the first kernel writes 48 channels (two of
    // zero weight), the second reads all 48 with zero weights for the extra two.
    let mut n = Net::new(DType::F16);
    let x = n.input("x", &[2, 8, 10, 12]);
    let y = n.conv(&x, 8, 46, 3, 1, 1);
    let y = n.relu(&y);
    let y = n.conv(&y, 46, 32, 3, 1, 1);
    let p = planned(&n.finish(&[&y]), true);
    let dims: Vec<_> = p.padding.iter().map(|d| (d.dim, d.from, d.to)).collect();
    assert_eq!(dims, vec![(PaddedDim::OutputChannels, 46, 48), (PaddedDim::InputChannels, 46, 48)]);
    assert!(matches!(p.padding[1].activation, ActivationPadding::FusedIntoProducer { .. }));
    assert_eq!(pads(&p), 0);
}

#[test]
fn output_channels_read_by_the_host_are_not_padded() {
    let mut n = Net::new(DType::F16);
    let x = n.input("x", &[1, 8, 6, 6]);
    let y = n.conv(&x, 8, 46, 1, 1, 0);
    let p = planned(&n.finish(&[&y]), true);
    assert!(p.padding.is_empty(), "{:?}", p.padding);
}

#[test]
fn gemm_k_is_padded_per_element_width() {
    // K = 30: f16 pads to 32 (8-element vectors), f32 to 32 (4-element vectors); K = 36 is
    // aligned for f32 but not for f16.
    for (dtype, k, to) in
        [(DType::F16, 30, Some(32)), (DType::F32, 30, Some(32)), (DType::F32, 36, None), (DType::F16, 36, Some(40))]
    {
        let mut n = Net::new(dtype);
        let x = n.input("x", &[16, k]);
        let y = n.linear(&x, k, 16);
        let p = planned(&n.finish(&[&y]), true);
        assert_eq!(p.padding.first().map(|d| d.to), to, "{dtype} K={k}");
    }
}

#[test]
fn depthwise_convs_are_left_unpadded() {
    let mut n = Net::new(DType::F16);
    let x = n.input("x", &[1, 12, 6, 6]);
    let w = n.random("w", &[12, 1, 3, 3], 0.3);
    let dw = Op::Conv {
        window: bolt::ir::Window {
            kernel_shape: Some(vec![3, 3]),
            strides: None,
            pads: Some(vec![1; 4]),
            dilations: None,
            auto_pad: bolt::ir::AutoPad::NotSet,
        },
        group: 12,
    };
    let y = n.op("dw", dw, &[&x, &w]);
    let p = planned(&n.finish(&[&y]), true);
    assert!(p.padding.is_empty());

    // CUTLASS 3.x has no depthwise conv: for an H100 the pick is the sm80 kernel (an sm90
    // build compiles it as sm_90 SASS; the H100 ran it right, bench/results/2026-11-26-h100),
    // so the node runs on the GPU rather than on the host.
    let (uses, skipped) = bolt::plan::lower::workloads(&p.graph, &std::collections::HashMap::new());
    assert!(skipped.is_empty(), "{skipped:?}");
    let dw = uses.iter().find(|u| u.workload.describe().contains("g12")).expect("the depthwise conv's workload");
    let pick = bolt::compile::pick_kernel(&dw.workload, bolt_codegen::spec::Arch::Sm90, None).unwrap();
    assert_eq!(pick.spec.arch, bolt_codegen::spec::Arch::Sm80, "{}", pick.how);
    assert!(pick.how.contains("sm80 kernel"), "the pick says why: {}", pick.how);
}
