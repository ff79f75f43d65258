//! Replays the loader fuzz corpus (fuzz/corpus/load_model: seed models plus the inputs
//! cargo-fuzz found that reach new code) through import and summary: nothing may panic, and
//! the seed models (the *.onnx files) must import. Crashes the fuzzer finds are minimised into
//! this corpus, so each stays fixed.

use std::path::Path;

#[test]
fn every_fuzz_corpus_input_imports_or_errors_without_panicking() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/load_model");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("fuzz corpus dir").flatten().map(|e| e.path()).collect();
    files.sort();
    assert!(files.len() >= 20, "corpus unexpectedly small: {}", files.len());
    let (mut ok, mut err) = (0, 0);
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        match bolt::import::load_bytes(&bytes, None) {
            Ok(m) => {
                ok += 1;
                bolt::compile::summarize(&m.graph, &Default::default(), bolt::compile::RunOn::Skip)
                    .expect("summary of an imported graph");
            }
            Err(e) => {
                err += 1;
                assert!(f.extension().is_none_or(|x| x != "onnx"), "seed model {} must import: {e}", f.display());
                assert!(!e.to_string().is_empty());
            }
        }
    }
    println!("fuzz corpus: {} inputs, {ok} imported, {err} rejected with an error", files.len());
}
