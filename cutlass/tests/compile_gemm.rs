//! Proof that the installed toolchain builds real CUTLASS GEMMs: a CUTLASS 2.x tensor-op GEMM
//! for sm_80 and a CUTLASS 3.x TMA warp-specialized GEMM for sm_90a, compiled to object files.
//! Needs the toolchain (`bolt-toolchain install`); fails with instructions when it is missing.

use std::path::{Path, PathBuf};

use bolt_cutlass::{Arch, Compiled, Toolchain};

fn toolchain() -> Toolchain {
    Toolchain::discover().unwrap_or_else(|e| panic!("{e}"))
}

fn compile(source: &str, arch: Arch) -> Compiled {
    let tc = toolchain();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cu").join(source);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(source).with_extension("o");
    let _ = std::fs::remove_file(&out);
    let compiled = tc.compile(&src, &out).arch(arch).ptxas_verbose(true).run().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{source}: {:.1}s with {tc}", compiled.elapsed.as_secs_f64());
    for k in &compiled.kernels {
        let name: String = k.name.chars().take(60).collect();
        eprintln!(
            "  {} {name}...: {} registers, {} B spill stores, {} B smem",
            k.arch, k.registers, k.spill_store_bytes, k.smem_bytes
        );
    }
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "{} missing or empty", out.display());
    compiled
}

#[test]
fn cutlass2_tensorop_gemm_sm80() {
    let compiled = compile("gemm_sm80.cu", Arch::Sm80);
    // The 2.x GEMM kernel is cutlass::Kernel<cutlass::gemm::kernel::Gemm<...>>.
    let kernel = compiled
        .kernels
        .iter()
        .find(|k| k.name.starts_with("_ZN7cutlass6KernelINS_4gemm6kernel4Gemm"))
        .expect("ptxas report lists the CUTLASS GEMM kernel");
    assert_eq!(kernel.arch, "sm_80");
    assert!(kernel.registers > 0);
}

#[test]
fn cutlass3_tma_warp_specialized_gemm_sm90a() {
    let compiled = compile("gemm_sm90a.cu", Arch::Sm90a);
    // The 3.x kernel is cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>.
    let kernel = compiled
        .kernels
        .iter()
        .find(|k| k.name.starts_with("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversal"))
        .expect("ptxas report lists the CUTLASS GEMM kernel");
    assert_eq!(kernel.arch, "sm_90a");
    // Built without sm_90a features CUTLASS compiles an empty stub; the real warp-specialized
    // kernel needs the full 168 registers per thread of its math warp groups.
    assert!(kernel.registers >= 128, "{} registers: sm_90a kernel body missing?", kernel.registers);
}
