//! Shared helpers for integration tests that need generated data (see tests/data/README.md).
#![allow(dead_code)] // each test binary uses a subset

pub mod nets;
pub mod onnx_proto;

use std::path::PathBuf;

/// The generated test data directory. `bash tests/run.sh` sets BOLT_TESTDATA and
/// BOLT_REQUIRE_TESTDATA=1; a bare `cargo test` without data skips these tests and says why.
pub fn testdata(sub: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("BOLT_TESTDATA").map(PathBuf::from).map(|d| d.join(sub));
    match dir {
        Some(d) if d.exists() => Some(d),
        _ if std::env::var("BOLT_REQUIRE_TESTDATA").as_deref() == Ok("1") => {
            panic!("test data '{sub}' is missing under BOLT_TESTDATA; tests/run.sh generates it")
        }
        _ => {
            eprintln!("SKIPPED: BOLT_TESTDATA/{sub} not found; run `bash tests/run.sh` to generate test data");
            None
        }
    }
}

/// ../shared/workloads/<file> beside the repository (CI clones it there). Missing: skipped
/// with a message, or a failure under BOLT_REQUIRE_TESTDATA=1.
pub fn workload(file: &str) -> Option<serde_json::Value> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/workloads").join(file);
    match std::fs::read_to_string(&p) {
        Ok(s) => Some(serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()))),
        Err(_) if std::env::var("BOLT_REQUIRE_TESTDATA").as_deref() == Ok("1") => {
            panic!("{} is missing (../shared beside the repository)", p.display())
        }
        Err(_) => {
            eprintln!("SKIPPED: {} not found", p.display());
            None
        }
    }
}

/// Deterministic values in [-2, 2) (a small LCG), f32.
pub fn random_tensor(shape: &[usize], seed: u64) -> bolt::ir::Tensor {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let n = shape.iter().product();
    let v = (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) as f32 / (1u64 << 31) as f32) * 4.0 - 2.0
        })
        .collect();
    bolt::ir::Tensor::from_f32(shape.to_vec(), v)
}
