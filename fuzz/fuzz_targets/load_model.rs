//! Feeds arbitrary bytes to the ONNX loader (decode, attribute parsing, topological sort,
//! shape inference with constant folding). Any panic, overflow or hang is a bug: bad input
//! must come back as an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = bolt::import::load_bytes(data, None) {
        // Summaries walk every inferred type; the reference run is skipped (unbounded sizes).
        let _ = bolt::compile::summarize(&model.graph, &Default::default(), false);
    }
});
