//! Kernel library build cost: `cargo bench -p bolt-codegen --bench codegen_build`.
//!
//! Builds real candidate kernels (templates + CUTLASS) with a fresh cache and prints nvcc
//! seconds per kernel cold — one kernel per translation unit, then the same kernels batched
//! into units — and then rebuilds from the warm cache, which must run nvcc 0 times.
//!
//! | variable | effect |
//! |---|---|
//! | `BOLT_BENCH_KERNELS` | sm80 kernels to build (default 8) |
//! | `BOLT_BENCH_BATCH` | most sm80 kernels per unit in the batched build (default 8) |
//! | `BOLT_BENCH_JOBS` | parallel nvcc processes (default 1: clean per-kernel times) |
//! | `BOLT_BENCH_SM90=1` | also time sm90 kernels (≈45 s and 3.3 GB each); `BOLT_BENCH_SM90_KERNELS` (default 1) |
//! | `BOLT_BENCH_KEEP=DIR` | keep the build directories (sources, logs with the nvcc commands) under DIR |
//! | `RUST_LOG` | e.g. `bolt_codegen=info` for per-unit progress |
//!
//! Not a timed test: a report to read.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bolt_codegen::builder::{candidate_library_specs, BuildOptions, BuildReport, Builder, Templates};
use bolt_codegen::loader::KernelLibrary;
use bolt_codegen::spec::{Arch, KernelSpec};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn build(dir: &Path, out: &str, per_unit: usize, jobs: usize, specs: &[KernelSpec]) -> BuildReport {
    let mut options = BuildOptions::new(dir.join(out));
    options.cache_dir = Some(dir.join("cache"));
    options.sm80_kernels_per_unit = per_unit;
    options.sm90_kernels_per_unit = per_unit;
    options.jobs = Some(jobs);
    Builder::discover(options).and_then(|b| b.build(&Templates, specs)).unwrap_or_else(|e| panic!("{e}"))
}

fn print_units(report: &BuildReport) {
    for u in &report.units {
        println!(
            "    {:<28} {} kernel(s)  nvcc {:>6.1}s{}",
            u.source.file_name().unwrap().to_string_lossy(),
            u.symbols.len(),
            u.nvcc_seconds.unwrap_or_default(),
            if u.compiled { "" } else { "  (cached)" }
        );
    }
}

/// A fresh directory: a temporary one, or `$BOLT_BENCH_KEEP/<name>` (emptied first).
fn scratch(name: &str) -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("BOLT_BENCH_KEEP") {
        Some(keep) => {
            let dir = Path::new(&keep).join(name);
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            (None, dir)
        }
        None => {
            let t = tempfile::tempdir().unwrap();
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    }
}

fn bench_arch(arch: Arch, n: usize, jobs: usize, batched: usize) {
    let specs: Vec<KernelSpec> = candidate_library_specs(&[arch]).into_iter().take(n).collect();
    let n = specs.len();
    println!("\n== {arch:?}: {n} candidate kernels, {jobs} nvcc job(s)");

    // Separate caches: the batched build must not reuse the single-kernel objects.
    let (_single_tmp, single_dir) = scratch(&format!("{arch:?}-single"));
    let t = Instant::now();
    let single = build(&single_dir, "single", 1, jobs, &specs);
    let wall = t.elapsed().as_secs_f64();
    println!(
        "  cold, 1 kernel per unit: {wall:.1}s wall, nvcc {:.1}s = {:.1}s per kernel; link {:.1}s",
        single.compile_seconds,
        single.compile_seconds / n as f64,
        single.link_seconds.unwrap_or_default()
    );
    print_units(&single);

    if batched > 1 && n > 1 {
        let (_batched_tmp, batched_dir) = scratch(&format!("{arch:?}-batched"));
        let t = Instant::now();
        let grouped = build(&batched_dir, "batched", batched, jobs, &specs);
        let wall = t.elapsed().as_secs_f64();
        println!(
            "  cold, up to {batched} kernels per unit ({} units): {wall:.1}s wall, nvcc {:.1}s = {:.1}s per kernel",
            grouped.units.len(),
            grouped.compile_seconds,
            grouped.compile_seconds / n as f64
        );
        print_units(&grouped);
    }

    let t = Instant::now();
    let warm = build(&single_dir, "warm", 1, jobs, &specs);
    let wall = t.elapsed().as_secs_f64();
    println!("  warm rebuild: nvcc ran {} times, {wall:.2}s wall", warm.nvcc_invocations);
    assert_eq!(warm.nvcc_invocations, 0, "a warm build must not run nvcc");
    let t = Instant::now();
    let lib = KernelLibrary::open(&warm.library).unwrap();
    println!("  load + resolve {} kernels: {:.1} ms", lib.kernels().len(), t.elapsed().as_secs_f64() * 1e3);
}

fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .try_init();
    let jobs = env_usize("BOLT_BENCH_JOBS", 1);
    let tc = bolt_cutlass::Toolchain::discover().unwrap_or_else(|e| panic!("{e}"));
    println!("{tc}");
    bench_arch(Arch::Sm80, env_usize("BOLT_BENCH_KERNELS", 8), jobs, env_usize("BOLT_BENCH_BATCH", 8));
    if std::env::var("BOLT_BENCH_SM90").is_ok_and(|v| v == "1") {
        bench_arch(Arch::Sm90, env_usize("BOLT_BENCH_SM90_KERNELS", 1), jobs, 2);
    } else {
        println!("\n(sm90 skipped: BOLT_BENCH_SM90=1 to time it, ≈45 s and 3.3 GB of nvcc per kernel)");
    }
}
