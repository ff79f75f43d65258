//! 1. Compiles the vendored ONNX protobuf schema (proto/onnx.proto, from the onnx 1.23.0 wheel)
//!    into Rust types with prost. protox is a pure-Rust protobuf compiler, so no protoc binary
//!    is needed on the build machine.
//! 2. With the `kernel-library` feature only: builds the pre-generated candidate kernel library
//!    (bolt_codegen::builder::candidate_library_specs) with nvcc into
//!    `$OUT_DIR/kernels/libbolt_kernels.so` + `libbolt_kernels.manifest.json`, and exports its
//!    path to the crate as `BOLT_KERNEL_LIBRARY` (`option_env!("BOLT_KERNEL_LIBRARY")`).
//!    Plain builds compile no kernels and not even the code generator.
//!
//!    | variable | effect |
//!    |---|---|
//!    | `BOLT_BUILD_KERNELS=0` | skip the step even with the feature |
//!    | `BOLT_KERNEL_ARCHS` | comma-separated archs, default `sm80`; `sm80,sm90` adds the Hopper kernels (≈45 s and 3.3 GB of nvcc each) |
//!    | `BOLT_KERNEL_LIMIT=N` | at most N kernels, spread evenly over the candidate list: CI builds the feature this way (`tests/run.sh`) to check that it compiles and links without the whole list's minutes of nvcc |
//!    | `BOLT_CACHE_DIR`, `CUDA_HOME`, `CUTLASS_DIR` | as for the toolchain; objects are cached in `<cache>/kernels`, so rebuilds run nvcc only for changed kernels |
//!
//!    Without an installed toolchain the step is skipped with a warning (`bolt toolchain
//!    install` fixes that); a kernel that fails to compile fails the build.
fn main() {
    let proto = "proto/onnx.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"]).expect("proto/onnx.proto must parse");
    prost_build::Config::new().compile_fds(fds).expect("prost code generation for onnx.proto");

    println!("cargo:rerun-if-env-changed=BOLT_BUILD_KERNELS");
    #[cfg(feature = "kernel-library")]
    kernel_library::build();
    #[cfg(not(feature = "kernel-library"))]
    if std::env::var("BOLT_BUILD_KERNELS").is_ok_and(|v| v == "1") {
        println!("cargo:warning=BOLT_BUILD_KERNELS=1 is ignored: build with `--features kernel-library` to build the kernel library");
    }
}

#[cfg(feature = "kernel-library")]
mod kernel_library {
    use std::path::PathBuf;

    use bolt_codegen::builder::{candidate_library_specs, BuildOptions, Builder, Templates};
    use bolt_codegen::spec::Arch;

    pub fn build() {
        for var in
            ["BOLT_KERNEL_ARCHS", "BOLT_KERNEL_LIMIT", "BOLT_CACHE_DIR", "XDG_CACHE_HOME", "CUDA_HOME", "CUTLASS_DIR"]
        {
            println!("cargo:rerun-if-env-changed={var}");
        }
        if std::env::var("BOLT_BUILD_KERNELS").is_ok_and(|v| v == "0") {
            println!("cargo:warning=BOLT_BUILD_KERNELS=0: kernel library not built");
            return;
        }
        let archs = parse_archs(&std::env::var("BOLT_KERNEL_ARCHS").unwrap_or_else(|_| "sm80".into()));
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("kernels");
        let mut options = BuildOptions::new(&out_dir);
        options.archs = Some(archs.clone());
        options.jobs = std::env::var("NUM_JOBS").ok().and_then(|n| n.parse().ok());
        let builder = match Builder::discover(options) {
            Ok(b) => b,
            Err(e) => {
                println!("cargo:warning=kernel library not built: {e}");
                return;
            }
        };
        let mut specs = candidate_library_specs(&archs);
        if let Some(limit) = std::env::var("BOLT_KERNEL_LIMIT").ok().map(|v| {
            v.parse::<usize>().unwrap_or_else(|_| panic!("BOLT_KERNEL_LIMIT: `{v}` is not a number of kernels"))
        }) {
            let step = specs.len().div_ceil(limit.max(1)).max(1);
            specs = specs.into_iter().step_by(step).collect();
            println!("cargo:warning=BOLT_KERNEL_LIMIT={limit}: a reduced library of {} kernels", specs.len());
        }
        println!("building {} candidate kernels for {archs:?} with {}", specs.len(), builder.toolchain());
        let report = builder.build(&Templates, &specs).unwrap_or_else(|e| panic!("kernel library build failed: {e}"));
        for r in &report.rejected {
            println!("cargo:warning=candidate {} rejected: {}", r.symbol, r.reason);
        }
        println!(
            "built {} ({} kernels, {} units, nvcc ran {} times, {:.1}s)",
            report.library.display(),
            report.symbols.len(),
            report.units.len(),
            report.nvcc_invocations,
            report.total_seconds
        );
        println!("cargo:rustc-env=BOLT_KERNEL_LIBRARY={}", report.library.display());
    }

    fn parse_archs(list: &str) -> Vec<Arch> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| match s.trim_start_matches("sm_").trim_start_matches("sm") {
                "80" => Arch::Sm80,
                "90" | "90a" => Arch::Sm90,
                other => panic!("BOLT_KERNEL_ARCHS: unknown arch `{other}` (expected sm80, sm90)"),
            })
            .collect()
    }
}
