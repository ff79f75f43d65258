//! Planning time (partition + fuse + NHWC + padding + back-to-back decisions; import
//! excluded) for the repo's BERT-base and ResNet-50 graphs and the others in testdata/models.
//! Target: well under 100 ms. Run with `cargo bench --bench plan` after `bash tests/run.sh`
//! has generated testdata/ (or point BOLT_TESTDATA at it). Prints the median of 5 runs.

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let root = std::env::var_os("BOLT_TESTDATA").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("testdata"));
    let runs = 5;
    println!("planning time (bolt::plan::plan, H100 cost model), median of {runs} runs");
    for name in ["bert_base", "resnet50", "vgg16", "mobilenet_v2", "ppocrv4_det"] {
        let g = match bolt::import::load(&root.join("models").join(name).join("model.onnx")) {
            Ok(m) => m.graph,
            Err(e) => {
                println!("{name:<14} skipped: {e} (run bash tests/run.sh to generate testdata)");
                continue;
            }
        };
        let mut ms: Vec<f64> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                let p = bolt::plan::plan(&g).expect("plan");
                std::hint::black_box(p);
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        // The same without the layout pass: what storing weights OHWI / K-major costs (one
        // pass over every weight byte; BERT-base's GEMMs hold 340 MB).
        let no_layout = bolt::plan::PlanOptions { nhwc: false, ..Default::default() };
        let mut ms_no: Vec<f64> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(bolt::plan::plan_with(&g, &no_layout).expect("plan"));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms_no.sort_by(f64::total_cmp);
        println!(
            "{name:<14} {:>4} nodes  {:8.1} ms  (min {:.1}, max {:.1});  without weight layout conversion {:.1} ms",
            g.nodes.len(),
            ms[runs / 2],
            ms[0],
            ms[runs - 1],
            ms_no[runs / 2]
        );
    }
}
