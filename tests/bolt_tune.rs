//! `bolt-tune` end to end, analytic-only (no GPU here): single problems, the standard sweep
//! files, the database it leaves, `--resume`, CSV/JSON output, and bad input.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bolt_tune(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bolt-tune"))
        .args(args)
        .arg("--db")
        .arg(db)
        .env_remove("BOLT_TUNING_DB")
        .env_remove("BOLT_KERNEL_LIBRARY")
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `../shared/workloads` of the repository root, or of an ancestor (git worktrees live below
/// the main checkout's parent).
fn workloads_dir() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    root.ancestors().map(|a| a.join("../shared/workloads")).find(|p| p.join("gemm.json").is_file())
}

#[test]
fn gemm_analytic_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tuning.json");
    let out_json = dir.path().join("out.json");
    let out_csv = dir.path().join("out.csv");
    let o = bolt_tune(
        &db,
        &[
            "gemm",
            "--m",
            "1280",
            "--n",
            "3072",
            "--k",
            "768",
            "--epilogue",
            "bias+gelu",
            "--analytic-only",
            "--json",
            out_json.to_str().unwrap(),
            "--csv",
            out_csv.to_str().unwrap(),
        ],
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("no GPU: analytic only"), "{stderr}");
    assert!(stdout.contains("gemm 1280x3072x768") && stdout.contains("sm90_"), "{stdout}");
    assert!(stdout.contains("1/1 workloads have a configuration"), "{stdout}");

    let doc = json(&out_json);
    assert_eq!(doc["arch"], "sm90");
    let r = &doc["results"][0];
    assert_eq!(r["outcome"]["kind"], "analytic");
    let best = r["entry"]["best"].as_str().unwrap();
    assert!(best.starts_with("sm90_"), "{best}");
    assert_eq!(r["entry"]["key"]["shape"], serde_json::json!([1280, 3072, 768, 1]));
    assert_eq!(r["entry"]["key"]["epilogue"], "bias_gelu_erf");
    let tflops = r["estimate"]["tflops"].as_f64().unwrap();
    assert!(tflops > 50.0 && tflops < 989.0, "{tflops}");

    // The database holds the same pick under the full key.
    let stored = json(&db);
    assert_eq!(stored["schema_version"], 1);
    let entries = stored["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["best"], best);
    assert_eq!(entries[0]["key"]["gpu"], "NVIDIA H100 80GB HBM3");
    assert_eq!(entries[0]["key"]["cutlass_version"], "4.2.0");
    assert_eq!(entries[0]["source"], "analytic");

    let csv = std::fs::read_to_string(&out_csv).unwrap();
    assert!(csv.starts_with("workload,problem,best,"), "{csv}");
    assert!(csv.lines().nth(1).unwrap().contains(best));

    // --resume takes it from the database.
    let o = bolt_tune(
        &db,
        &[
            "gemm",
            "--m",
            "1280",
            "--n",
            "3072",
            "--k",
            "768",
            "--epilogue",
            "bias+gelu",
            "--resume",
            "--json",
            out_json.to_str().unwrap(),
        ],
    );
    assert!(o.status.success());
    assert_eq!(json(&out_json)["results"][0]["outcome"]["kind"], "resumed");
}

#[test]
fn conv2d_analytic_on_sm80() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tuning.json");
    let out = dir.path().join("out.json");
    let o = bolt_tune(
        &db,
        &[
            "conv2d",
            "--n",
            "32",
            "--h",
            "56",
            "--w",
            "56",
            "--c",
            "64",
            "--k",
            "64",
            "--r",
            "3",
            "--s",
            "3",
            "--pad",
            "1",
            "--arch",
            "sm80",
            "--json",
            out.to_str().unwrap(),
        ],
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("analytic only"), "{stderr}");
    assert!(stdout.contains("conv 32x56x56x64 k64 3x3 s1"), "{stdout}");
    let doc = json(&out);
    assert_eq!(doc["device"]["name"], "NVIDIA A100-SXM4-80GB");
    let e = &doc["results"][0]["entry"];
    assert!(e["best"].as_str().unwrap().starts_with("sm80_"));
    assert_eq!(e["key"]["family"], "conv2d_fprop");
    assert_eq!(e["key"]["shape"], serde_json::json!([32, 56, 56, 64, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1]));
    assert!(e["tried"].as_array().unwrap().len() >= 10);
}

#[test]
fn the_standard_sweep_files() {
    let Some(dir) = workloads_dir() else {
        eprintln!("skipped: no ../shared/workloads next to the repository (or an ancestor)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("tuning.json");
    let mut keys = std::collections::BTreeSet::new();
    for (file, arch, min) in [("gemm.json", "sm90", 25), ("conv2d.json", "sm80", 20), ("padding.json", "sm80", 6)] {
        let out = tmp.path().join(format!("{file}.out.json"));
        let o = bolt_tune(
            &db,
            &["shapes", dir.join(file).to_str().unwrap(), "--arch", arch, "--json", out.to_str().unwrap()],
        );
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{file}: {stderr}");
        let results = json(&out)["results"].as_array().unwrap().clone();
        let tuned: Vec<&Value> = results.iter().filter(|r| !r["entry"].is_null()).collect();
        assert!(tuned.len() >= min, "{file}: {} tuned\n{stdout}", tuned.len());
        // What cannot be tuned says why (alignment-1 shapes: C = 3 stem, N = 1 MLP output).
        for r in results.iter().filter(|r| r["entry"].is_null()) {
            assert_eq!(r["outcome"]["kind"], "no_candidate", "{r}");
            assert!(r["outcome"]["detail"].as_str().unwrap().contains("alignment"), "{r}");
        }
        keys.extend(tuned.iter().map(|r| r["entry"]["key"].to_string()));
        // Every distinct key tuned so far is in the database (same shape + epilogue = one key).
        assert_eq!(json(&db)["entries"].as_array().unwrap().len(), keys.len(), "{file}");
    }
    // gemm.json: the BERT shapes and the big squares are there.
    let gemm = json(&tmp.path().join("gemm.json.out.json"));
    let names: Vec<&str> =
        gemm["results"].as_array().unwrap().iter().map(|r| r["workload"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.ends_with("ffn1")) && names.iter().any(|n| n.starts_with("square")), "{names:?}");
    assert!(keys.len() >= 45, "{}", keys.len());
}

#[test]
fn bad_input_fails_with_a_message_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tuning.json");
    let bad_json = dir.path().join("shapes.json");
    std::fs::write(&bad_json, "{\"square\": [{\"M\": 64, ").unwrap();
    let zero_dim = dir.path().join("zero.json");
    std::fs::write(&zero_dim, r#"{"set": [{"name": "broken", "M": 0, "N": 64, "K": 64}]}"#).unwrap();
    let nothing = dir.path().join("nothing.json");
    std::fs::write(&nothing, r#"{"note": "no problems here"}"#).unwrap();
    let future_db = dir.path().join("future.json");
    std::fs::write(&future_db, r#"{"schema_version": 7, "entries": []}"#).unwrap();

    let cases: Vec<(Vec<String>, &Path, &str)> = vec![
        (
            vec!["gemm".into(), "--m".into(), "0".into(), "--n".into(), "8".into(), "--k".into(), "8".into()],
            &db,
            "M = 0",
        ),
        (
            vec![
                "gemm".into(),
                "--m".into(),
                "8".into(),
                "--n".into(),
                "8".into(),
                "--k".into(),
                "8".into(),
                "--dtype".into(),
                "f8".into(),
            ],
            &db,
            "unknown --dtype `f8`",
        ),
        (
            vec![
                "gemm".into(),
                "--m".into(),
                "8".into(),
                "--n".into(),
                "8".into(),
                "--k".into(),
                "8".into(),
                "--layout".into(),
                "rx".into(),
            ],
            &db,
            "bad --layout",
        ),
        (
            vec![
                "conv2d".into(),
                "--n".into(),
                "1".into(),
                "--h".into(),
                "2".into(),
                "--w".into(),
                "2".into(),
                "--c".into(),
                "8".into(),
                "--k".into(),
                "8".into(),
                "--r".into(),
                "5".into(),
                "--s".into(),
                "5".into(),
            ],
            &db,
            "does not fit",
        ),
        (
            vec![
                "conv2d".into(),
                "--n".into(),
                "1".into(),
                "--h".into(),
                "8".into(),
                "--w".into(),
                "8".into(),
                "--c".into(),
                "8".into(),
                "--k".into(),
                "8".into(),
                "--r".into(),
                "1".into(),
                "--s".into(),
                "1".into(),
                "--groups".into(),
                "3".into(),
            ],
            &db,
            "groups = 3",
        ),
        (
            vec![
                "gemm".into(),
                "--m".into(),
                i64::MAX.to_string(),
                "--n".into(),
                "4096".into(),
                "--k".into(),
                "8".into(),
            ],
            &db,
            "too large",
        ),
        (
            vec![
                "conv2d".into(),
                "--n".into(),
                "1".into(),
                "--h".into(),
                "8".into(),
                "--w".into(),
                "8".into(),
                "--c".into(),
                "8".into(),
                "--k".into(),
                "8".into(),
                "--r".into(),
                "1".into(),
                "--s".into(),
                "1".into(),
                "--pad".into(),
                i64::MAX.to_string(),
            ],
            &db,
            "32-bit sizes",
        ),
        (vec!["shapes".into(), bad_json.display().to_string()], &db, "not valid JSON"),
        (vec!["shapes".into(), zero_dim.display().to_string()], &db, "`set/broken`: M = 0"),
        (vec!["shapes".into(), nothing.display().to_string()], &db, "no GEMM"),
        (vec!["shapes".into(), dir.path().join("missing.json").display().to_string()], &db, "cannot read"),
        (
            vec![
                "gemm".into(),
                "--m".into(),
                "8".into(),
                "--n".into(),
                "8".into(),
                "--k".into(),
                "8".into(),
                "--arch".into(),
                "sm90".into(),
                "--device".into(),
                "a100".into(),
            ],
            &db,
            "need a Hopper GPU",
        ),
        (
            vec!["gemm".into(), "--m".into(), "8".into(), "--n".into(), "8".into(), "--k".into(), "8".into()],
            &future_db,
            "schema_version 7",
        ),
    ];
    for (args, db, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = bolt_tune(db, &args);
        let (_, stderr) = text(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(want), "{args:?}: expected `{want}` in:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        // The shapes file errors name the file.
        if args[0] == "shapes" {
            assert!(stderr.contains(args[1]), "{stderr}");
        }
    }
    // Nothing was written by the failures.
    assert!(!db.exists());
    // A missing subcommand / unknown flag is clap's usage error.
    let o = bolt_tune(&db, &["gemm", "--m", "8"]);
    assert!(!o.status.success());
}

#[test]
fn a_model_is_planned_lowered_and_every_kernel_tuned() {
    // BERT-base at 32 x 128 (f32 -> tf32): the four distinct GEMMs of its 48 GEMM kernels
    // (each layer's Q, K and V projections are one packed GEMM), each with a configuration on
    // sm90 and sm80. Its attention cores are fused attention
    // kernels (tiles fixed by the head dim: nothing to tune); without attention fusion their
    // two batched GEMMs multiply activations in row-major B, which sm90 tf32 wgmma cannot read.
    let Some(dir) = common::testdata("models/bert_base") else { return };
    let model = dir.join("model.onnx");
    let tmp = tempfile::tempdir().unwrap();
    let out_json = tmp.path().join("out.json");
    for arch in ["sm90", "sm80"] {
        let db = tmp.path().join(format!("{arch}.json"));
        let o = bolt_tune(
            &db,
            &[
                model.to_str().unwrap(),
                "--dim",
                "batch=32",
                "--dim",
                "seq=128",
                "--arch",
                arch,
                "--json",
                out_json.to_str().unwrap(),
            ],
        );
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{stderr}");
        assert!(stderr.contains("48 kernels, 4 distinct"), "{stderr}");
        assert!(stdout.contains("4096x2304x768 +bias"), "the packed Q/K/V GEMM: {stdout}");
        assert!(stdout.contains("4/4 workloads have a configuration"), "{arch}: {stdout}");
        let results = json(&out_json);
        let rows = results["results"].as_array().or_else(|| results.as_array()).expect("a list of results");
        assert_eq!(rows.len(), 4, "{results}");
        assert!(stdout.contains("4096x3072x768 +bias_gelu_erf"), "the FFN GEMM with its fused GELU: {stdout}");
    }
}

#[test]
fn a_model_that_does_not_exist_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let o = bolt_tune(&tmp.path().join("db.json"), &["/nonexistent/m.onnx"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("/nonexistent/m.onnx"));
}

/// `bolt-tune model` tunes what `bolt compile` with the same --dim and --precision looks up:
/// the model at that precision (here f16, channels padded to 8) in every shape bucket of a
/// range (N=1..4: 1 and 4), back-to-back chain layers included (a build that cannot fuse the
/// chain runs them as kernels). It used to tune the f32 model at one size, keys no f16 build
/// ever looked up.
#[test]
fn a_models_tuning_keys_are_those_its_build_looks_up() {
    let Some(dir) = common::testdata("models/small_conv_mlp") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (db, out_json) = (tmp.path().join("db.json"), tmp.path().join("out.json"));
    let model = dir.join("model.onnx");
    let args = [model.to_str().unwrap(), "--precision", "f16", "--dim", "N=1..4", "--arch", "sm90"];
    let o = bolt_tune(&db, &[&args[..], &["--json", out_json.to_str().unwrap()]].concat());
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    let results = json(&out_json);
    let keys: Vec<&Value> = results["results"].as_array().unwrap().iter().map(|r| &r["key"]).collect();
    assert_eq!(keys.len(), 8, "2 convs and 2 GEMMs in 2 buckets: {stdout}");
    assert!(keys.iter().all(|k| k["dtypes"] == "f16/f32/f16"), "{keys:?}");
    assert!(stdout.contains("conv 1x32x32x8 k16") && stdout.contains("conv 4x32x32x8 k16"), "{stdout}");
    let o = bolt_tune(&db, &[args[0], "--precision", "f64"]);
    assert!(!o.status.success() && text(&o).1.contains("--precision f64"), "{}", text(&o).1);
}
