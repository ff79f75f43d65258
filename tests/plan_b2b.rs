//! Back-to-back fusion decisions on the shapes of ../shared/workloads/b2b.json (Bolt's Tables
//! 1 and 2, CUTLASS's fused examples, MLP chains): which chains the planner fuses, in which
//! residency, and why; and that a fused chain computes what the layers did one by one.

mod common;

use bolt::ir::{DType, Graph, Op};
use bolt::plan::b2b::{ChainDecision, Residency};
use bolt::plan::{plan_with, PlanOptions};
use common::nets::{inputs, Net};

fn usize_of(v: &serde_json::Value, k: &str) -> usize {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} missing in {v}")) as usize
}

/// GEMMs of widths w[0] -> w[1] -> ... with bias + ReLU each, M rows, f16.
fn mlp(m: usize, widths: &[usize]) -> Graph {
    let mut n = Net::new(DType::F16);
    let mut x = n.input("x", &[m, widths[0]]);
    for w in widths.windows(2) {
        let y = n.linear(&x, w[0], w[1]);
        x = n.relu(&y);
    }
    n.finish(&[&x])
}

/// 3x3 conv (pad 1, stride s) + bias + ReLU, then 1x1 conv + bias + ReLU, batch `batch`, f16.
fn conv_pair(batch: usize, h: usize, w: usize, c: usize, k0: usize, stride: usize, k1: usize) -> Graph {
    let mut n = Net::new(DType::F16);
    let x = n.input("x", &[batch, c, h, w]);
    let y = n.conv(&x, c, k0, 3, stride, 1);
    let y = n.relu(&y);
    let y = n.conv(&y, k0, k1, 1, 1, 0);
    let y = n.relu(&y);
    n.finish(&[&y])
}

fn decisions(g: &Graph) -> Vec<ChainDecision> {
    let plan = plan_with(g, &PlanOptions::default()).unwrap();
    for d in &plan.chains {
        println!("  {} {}", if d.fused { "FUSED" } else { "not fused" }, d.reason);
        if std::env::var_os("BOLT_SHOW_ESTIMATES").is_some() {
            println!("    fused {:?}\n    unfused {:?}", d.fused_estimate, d.unfused);
        }
    }
    plan.chains
}

#[test]
fn the_papers_gemm_pairs_fuse() {
    let Some(w) = common::workload("b2b.json") else { return };
    for p in w["gemm_pairs_bolt_table1"]["problems"].as_array().unwrap() {
        let (m, n0, k0, n1) = (usize_of(p, "M"), usize_of(p, "N0"), usize_of(p, "K0"), usize_of(p, "N1"));
        println!("M={m} N0={n0} K0={k0} N1={n1} (paper: {}x on T4)", p["paper_speedup"]);
        let d = decisions(&mlp(m, &[k0, n0, n1]));
        assert_eq!(d.len(), 1, "one candidate chain");
        assert!(d[0].fused, "{}", d[0].reason);
        // RF-resident where the last layer fits one 32- or 64-column warp (the widths that
        // computed right on an H100), staged in shared memory otherwise.
        let rf = if n1 <= 64 { Residency::Registers } else { Residency::SharedMemory };
        assert_eq!(d[0].residency, Some(rf), "N1 = {n1}");
        let unfused_bytes: f64 = d[0].unfused.iter().map(|(_, e)| e.dram_bytes).sum();
        assert!(d[0].fused_estimate.as_ref().unwrap().dram_bytes < unfused_bytes, "{}", d[0].reason);
    }
}

#[test]
fn the_papers_conv_pairs_fuse() {
    let Some(w) = common::workload("b2b.json") else { return };
    for p in w["conv_pairs_bolt_table2"]["problems"].as_array().unwrap() {
        let (h, wd, c) = (usize_of(p, "H"), usize_of(p, "W"), usize_of(p, "C"));
        let (k0, s, k1) = (usize_of(p, "K0"), usize_of(p, "stride"), usize_of(p, "K1"));
        println!("H={h} W={wd} C={c} K0={k0} stride={s} K1={k1} batch 32 (paper: {}x on T4)", p["paper_speedup"]);
        let d = decisions(&conv_pair(32, h, wd, c, k0, s, k1));
        assert_eq!(d.len(), 1);
        assert!(d[0].fused, "{}", d[0].reason);
        // One threadblock row block per 64 output pixels: hundreds of thousands of rows.
        assert!(d[0].fused_estimate.as_ref().unwrap().tiles > 132);
    }
}

/// A conv pair whose last layer needs warps wider than 64 columns stays unfused, with the
/// reason: only 32- and 64-column last-layer warps computed right on an H100.
#[test]
fn a_wide_conv_pair_waits_for_a_verified_configuration() {
    let d = decisions(&conv_pair(1, 112, 112, 32, 16, 1, 96));
    assert!(!d[0].fused, "{}", d[0].reason);
    assert!(d[0].reason.contains("computed right on a GPU"), "{}", d[0].reason);
}

#[test]
fn cutlass_example_shapes_pick_register_or_shared_memory_residency() {
    let Some(w) = common::workload("b2b.json") else { return };
    for p in w["cutlass_example_shapes"].as_array().unwrap() {
        let (m, n0, k0, n1) = (usize_of(p, "M"), usize_of(p, "N0"), usize_of(p, "K0"), usize_of(p, "N1"));
        let d = decisions(&mlp(m, &[k0, n0, n1]));
        // RF residence needs the last layer's warps as wide as its N: only 32 and 64 columns
        // computed right on an H100, so wider RF examples stage in shared memory.
        let want = match p["resident"].as_str().unwrap() {
            "registers" if n1 <= 64 => Residency::Registers,
            _ => Residency::SharedMemory,
        };
        assert!(d[0].fused, "{}", d[0].reason);
        assert_eq!(d[0].residency, Some(want), "N1 = {n1}");
    }
}

#[test]
fn mlp_chains_split_where_a_layer_is_too_wide_and_fuse_long_narrow_chains() {
    let Some(w) = common::workload("b2b.json") else { return };
    let problems = w["mlp_chains"]["problems"].as_array().unwrap();
    // DLRM bottom MLP 13 -> 512 -> 256 -> 128: the 512-wide layer cannot be held by one
    // threadblock, so only 512 -> 256 -> 128 (the last two GEMMs) chain, in shared memory.
    let widths: Vec<usize> =
        problems[0]["widths"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    let d = decisions(&mlp(usize_of(&problems[0], "M"), &widths));
    let rejected: Vec<_> = d.iter().filter(|d| !d.fused).collect();
    assert!(rejected.iter().any(|d| d.reason.contains("N = 512")), "{d:?}");
    let fused: Vec<_> = d.iter().filter(|d| d.fused).collect();
    assert_eq!(fused.len(), 1);
    assert_eq!(fused[0].layers.iter().map(|l| l.n).collect::<Vec<_>>(), vec![256, 128]);
    assert_eq!(fused[0].residency, Some(Residency::SharedMemory));
    // NeRF-style 8 x 64: seven narrow GEMMs. Fused kernels chain two layers (CUTLASS's
    // back-to-back mainloops), so the chain runs as three register-resident pairs plus one
    // GEMM on its own.
    let widths: Vec<usize> =
        problems[1]["widths"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    let d = decisions(&mlp(usize_of(&problems[1], "M"), &widths));
    assert_eq!(d.len(), 3);
    assert!(d.iter().all(|d| d.fused && d.layers.len() == 2 && d.residency == Some(Residency::Registers)));
}

#[test]
fn small_m_with_a_large_k_is_not_fused_for_lack_of_threadblocks() {
    // 256 rows are 4 row blocks of 64 for 132 SMs, and K = 8192 makes the first GEMM
    // compute-bound: the unfused kernels spread it over 2x more threadblocks.
    let d = decisions(&mlp(256, &[8192, 256, 256]));
    assert_eq!(d.len(), 1);
    assert!(!d[0].fused, "{}", d[0].reason);
    assert!(d[0].reason.contains("too few row blocks"), "{}", d[0].reason);
}

#[test]
fn residence_rules_reject_with_a_reason() {
    // Second conv 3x3: its rows are not the first conv's rows.
    let d = decisions(&{
        let mut n = Net::new(DType::F16);
        let x = n.input("x", &[2, 16, 16, 16]);
        let y = n.conv(&x, 16, 32, 3, 1, 1);
        let y = n.conv(&y, 32, 32, 3, 1, 1);
        n.finish(&[&y])
    });
    assert!(!d[0].fused && d[0].reason.contains("1x1, stride 1, no padding"), "{}", d[0].reason);
    // A residual add in the first layer.
    let d = decisions(&{
        let mut n = Net::new(DType::F16);
        let x = n.input("x", &[64, 32]);
        let r = n.input("r", &[64, 32]);
        let y = n.linear(&x, 32, 32);
        let y = n.op("add", Op::Binary(bolt::ir::Binary::Add), &[&y, &r]);
        let y = n.linear(&y, 32, 32);
        n.finish(&[&y])
    });
    assert!(!d[0].fused && d[0].reason.contains("residual"), "{}", d[0].reason);
    // f32: no fused tensor-core mainloop for it.
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[64, 32]);
    let y = n.linear(&x, 32, 32);
    let y = n.linear(&y, 32, 32);
    let d = decisions(&n.finish(&[&y]));
    assert!(!d[0].fused && d[0].reason.contains("f16/bf16"), "{}", d[0].reason);
    // Weights the layout pass did not store [N, K] (no NHWC / K-major pass): the fused
    // mainloop would read them transposed.
    let opts = PlanOptions { nhwc: false, ..PlanOptions::default() };
    let d = plan_with(&mlp(64, &[32, 32, 32]), &opts).unwrap().chains;
    assert!(!d[0].fused && d[0].reason.contains("weight is not stored"), "{}", d[0].reason);
    // The intermediate is also a graph output: it must be written, so no chain at all.
    let mut n = Net::new(DType::F16);
    let x = n.input("x", &[64, 32]);
    let y = n.linear(&x, 32, 32);
    let z = n.linear(&y, 32, 32);
    assert!(decisions(&n.finish(&[&y, &z])).iter().all(|d| !d.fused));
}

#[test]
fn a_fused_chain_computes_the_layers_one_by_one() {
    // Small versions of each kind: four GEMMs (two fused pairs), conv 3x3 -> 1x1 (NHWC,
    // channels padded from 3 to 8), checked against the unplanned graph on the reference
    // executor.
    let tol = bolt::cases::Tolerance { rtol: 1e-2, atol: 1e-2 };
    for (name, g, want) in
        [("mlp", mlp(2048, &[64, 64, 32, 16, 16]), 2), ("conv", conv_pair(2, 32, 32, 3, 16, 2, 16), 1)]
    {
        let plan = plan_with(&g, &PlanOptions::default()).unwrap();
        let chains = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::FusedChain(_))).count();
        assert_eq!(chains, want, "{name}: {:?}", plan.chains.iter().map(|c| &c.reason).collect::<Vec<_>>());
        let x = inputs(&g);
        let want = bolt::reference::run(&g, &x).unwrap();
        let got = bolt::reference::run(&plan.graph, &x).unwrap();
        for o in &g.outputs {
            let c = bolt::cases::compare(o, &got[o], &want[o], tol);
            println!("{name}: max abs err {:.2e}", c.max_abs_err);
            assert!(c.failure.is_none(), "{name}: {}", c.failure.unwrap());
        }
    }
}

/// One cost model (the profiler's analytic model on the one `DeviceSpec`) decides, knowing which
/// instructions each side runs on: unfused, each layer is its best single kernel on the arch's
/// native tensor-core instructions (wgmma on an H100); fused, the chain is one CUTLASS 2.x
/// mma.sync kernel, which an H100 runs at ~60% of its wgmma rate. For a compute-heavy chain
/// (K0 = 4096) fusion therefore looks worse on an H100 than on an A100 (same instructions both
/// ways there), and on the H100 the wgmma pair is faster than the fused chain.
#[test]
fn a_compute_heavy_chain_is_less_worth_fusing_on_h100_where_unfused_wgmma_is_faster() {
    use bolt::plan::b2b::MIN_GAIN;
    use bolt::plan::DeviceSpec;
    let g = mlp(16384, &[4096, 256, 256]);
    let decide = |device: DeviceSpec| {
        let plan = plan_with(&g, &PlanOptions { device, ..Default::default() }).unwrap();
        assert_eq!(plan.chains.len(), 1);
        plan.chains.into_iter().next().unwrap()
    };
    let on_a100 = decide(DeviceSpec::a100_sxm4_80gb());
    println!("A100: {}", on_a100.reason);
    assert!(on_a100.unfused.iter().all(|(k, _)| k.starts_with("bolt_sm80")), "{:?}", on_a100.unfused);
    let on_h100 = decide(DeviceSpec::h100_sxm5_80gb());
    println!("H100: {}", on_h100.reason);
    assert!(!on_h100.fused, "{}", on_h100.reason);
    assert!(on_h100.fused_seconds > on_h100.unfused_seconds, "{}", on_h100.reason);
    // Unfused, the layers' best kernels are sm90 (wgmma) ones; the fused estimate is of the
    // same chain kernel on both GPUs (mma.sync), whose rate is lower on Hopper relative to peak.
    assert!(on_h100.unfused.iter().all(|(k, _)| k.starts_with("bolt_sm90")), "{:?}", on_h100.unfused);
    let pct = |d: &bolt::plan::b2b::ChainDecision| d.fused_estimate.as_ref().unwrap().pct_peak;
    assert!(pct(&on_h100) < pct(&on_a100), "{} vs {}", pct(&on_h100), pct(&on_a100));
    let gain = |d: &bolt::plan::b2b::ChainDecision| d.unfused_seconds / d.fused_seconds;
    assert!(gain(&on_h100) < gain(&on_a100) && gain(&on_h100) < MIN_GAIN, "{} vs {}", gain(&on_h100), gain(&on_a100));
}
