//! Artifact build cost and memory plan for ResNet-50 and BERT-base (printed, not a timed
//! test): `cargo bench --bench artifact [-- --arch sm90] [-- --dim N=1..32]`.
//!
//! Per model: a cold build (a fresh, empty kernel cache: every kernel compiled by nvcc) and a
//! warm rebuild (same cache: 0 nvcc runs expected), with seconds, kernels built and nvcc runs;
//! then the activation arena against one allocation per tensor. Needs testdata/ (bash
//! tests/run.sh) and the toolchain (bolt toolchain install). A cold ResNet-50 build compiles
//! every distinct conv workload: expect many minutes on 2 cores.

use bolt::artifact::format::DimRange;
use bolt::artifact::{compile, CompileOptions};
use bolt_codegen::spec::Arch;
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let arch = match arg("--arch").as_deref() {
        Some("sm90") => Arch::Sm90,
        _ => Arch::Sm80,
    };
    let dims: Vec<DimRange> = arg("--dim")
        .map(|d| {
            let (k, v) = d.split_once('=').expect("--dim NAME=MIN..MAX");
            let (a, b) = v.split_once("..").unwrap_or((v, v));
            vec![DimRange { name: k.into(), min: a.parse().unwrap(), max: b.parse().unwrap() }]
        })
        .unwrap_or_default();
    let root = std::env::var_os("BOLT_TESTDATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("testdata"));
    println!("artifact build ({arch:?}, dims {dims:?}): cold = empty kernel cache, warm = rebuild with it");
    for name in ["resnet50", "bert_base"] {
        let g = match bolt::import::load(&root.join("models").join(name).join("model.onnx")) {
            Ok(m) => m.graph,
            Err(e) => {
                println!("{name:<10} skipped: {e} (run bash tests/run.sh to generate testdata)");
                continue;
            }
        };
        let cache = tempfile::tempdir().expect("temp cache");
        let out = tempfile::tempdir().expect("temp out");
        let opts = CompileOptions {
            archs: vec![arch],
            dims: dims.clone(),
            cache_dir: Some(cache.path().to_path_buf()),
            ..CompileOptions::new(out.path().join(name))
        };
        for pass in ["cold", "warm"] {
            match compile(&g, &opts) {
                Ok(r) => println!(
                    "{name:<10} {pass}: {:7.1} s total ({:.1} s kernel build), {} kernels for {} kernel + {} chain + {} glue nodes, {} nvcc runs, {} host ops",
                    r.total_seconds,
                    r.build_seconds,
                    r.kernels,
                    r.kernel_nodes,
                    r.chain_nodes,
                    r.glue_nodes,
                    r.nvcc_invocations,
                    r.host_ops
                ),
                Err(e) => println!("{name:<10} {pass}: failed: {e}"),
            }
        }
        if let Ok(a) = bolt::artifact::Artifact::open(&out.path().join(name)) {
            let mb = |b: u64| b as f64 / (1 << 20) as f64;
            println!(
                "{name:<10} arena {:.1} MiB vs {:.1} MiB one allocation per tensor ({:.1}x less), {} tensors; weights {:.1} MiB",
                mb(a.plan.arena.bytes),
                mb(a.plan.arena.naive_bytes),
                a.plan.arena.naive_bytes as f64 / a.plan.arena.bytes.max(1) as f64,
                a.plan.arena.tensors.len(),
                mb(a.weights_blob.len() as u64)
            );
        }
    }
}
