//! Seconds for one CPU reference run of PP-OCRv4 det (1x3x320x320) and of the ResNet-50
//! graph at batch 1, plus BERT-base (1x128). Run with `cargo bench --bench reference` after
//! `bash tests/run.sh` has generated testdata/ (or point BOLT_TESTDATA at it). Prints the
//! median of a few runs and the spread; numbers depend on the machine (cores, clocks).

use bolt::cases::{data_sets, read_tensor_pb};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let root = std::env::var_os("BOLT_TESTDATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("testdata"));
    let runs: usize = std::env::var("BOLT_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    println!("reference executor, {} rayon threads, median of {runs} runs", rayon::current_num_threads());
    for (name, label) in [
        ("ppocrv4_det", "PP-OCRv4 det 1x3x320x320"),
        ("resnet50", "ResNet-50 batch 1"),
        ("bert_base", "BERT-base 1x128"),
    ] {
        let dir = root.join("models").join(name);
        let model = match bolt::import::load(&dir.join("model.onnx")) {
            Ok(m) => m,
            Err(e) => {
                println!("{label:<28} skipped: {e} (run bash tests/run.sh to generate testdata)");
                continue;
            }
        };
        let g = &model.graph;
        let set = &data_sets(&dir)[0];
        let inputs: HashMap<String, _> = g
            .inputs
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), read_tensor_pb(&set.join(format!("input_{i}.pb"))).expect("input").1))
            .collect();
        let mut secs: Vec<f64> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                bolt::reference::run(g, &inputs).expect("reference run");
                t.elapsed().as_secs_f64()
            })
            .collect();
        secs.sort_by(f64::total_cmp);
        println!("{label:<28} {:.3} s  (min {:.3}, max {:.3})", secs[runs / 2], secs[0], secs[runs - 1]);
    }
}
