//! Shared helpers for integration tests that need generated data (see tests/data/README.md).

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
