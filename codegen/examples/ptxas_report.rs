//! The ptxas resource report (registers, stack, spills, static shared memory) of kernels of a
//! built library, rebuilt from their specs in its manifest: what a launch failure on a GPU
//! ("too many resources requested") or a slow kernel asks first.
//!
//!     cargo run --release -p bolt-codegen --example ptxas_report -- MANIFEST.json SUBSTRING... [--for sm80|sm90]
//!
//! Kernels whose symbol contains any SUBSTRING are built (through the kernel cache; the report
//! of a cached object built without ptxas -v is empty, so this build keys its own objects) for
//! the GPUs `--for` names (default: sm90, the H100) and their resources printed per arch.
use bolt_codegen::builder::{BuildOptions, Builder, Templates};
use bolt_codegen::manifest::Manifest;
use bolt_codegen::spec::Arch;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut run_on = vec![Arch::Sm90];
    if let Some(i) = args.iter().position(|a| a == "--for") {
        let gpu = args.get(i + 1).ok_or("--for needs sm80 or sm90")?.clone();
        run_on = vec![Arch::parse(&gpu).ok_or(format!("--for {gpu}: expected sm80 or sm90"))?];
        args.drain(i..i + 2);
    }
    let (manifest, patterns) = args.split_first().ok_or("usage: ptxas_report MANIFEST.json SUBSTRING...")?;
    let m = Manifest::read(std::path::Path::new(manifest))?;
    let specs: Vec<_> = m
        .kernels
        .iter()
        .filter(|k| patterns.iter().any(|p| k.symbol.contains(p.as_str())))
        .map(|k| k.spec.clone())
        .collect();
    if specs.is_empty() {
        return Err(format!("{manifest}: no kernel matches {patterns:?}").into());
    }
    let dir = tempfile::tempdir()?;
    let mut options = BuildOptions::new(dir.path());
    options.ptxas_verbose = true;
    options.run_on = run_on;
    // Its own cache keys: a -Xptxas -v flag, so cached objects without a report are not reused.
    options.nvcc_flags = vec!["-Xptxas=-warn-spills".into()];
    let report = Builder::discover(options)?.build(&Templates, &specs)?;
    for unit in &report.units {
        for r in &unit.resources {
            println!(
                "{:>8} regs {:>3} stack {:>5} B spills {:>5}/{:<5} B smem {:>6} B  {}",
                r.arch, r.registers, r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes, r.smem_bytes, r.name
            );
        }
    }
    Ok(())
}
