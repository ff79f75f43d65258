//! Back-to-back fused chains: golden renders of a GEMM pair and a conv pair in both residency
//! modes (BOLT_BLESS=1 rewrites them), sm_80 compile-only of those four kernels (objects cached
//! under target/, so reruns do not run nvcc), one rejection per residence rule, the run-time
//! problem checks, and candidates for every chain of ../shared/workloads/b2b.json.

mod common;

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;

use bolt_codegen::abi::{BoltB2bArgs, BoltB2bConv2dProblem, BoltB2bGemmProblem, BoltConv2dProblem, Status};
use bolt_codegen::b2b::{
    self, candidates, check_problem, cost, render_unit, symbol_for, validate, B2bFamily, B2bLayer, B2bProblem,
    B2bRejection, B2bSpec, NoCandidate, ProblemRejection, Residency, INSTRUCTION,
};
use bolt_codegen::cache::{Cache, EntryKind, KeyHasher};
use bolt_codegen::epilogue::{Activation, Epilogue, ResidualAt};
use bolt_codegen::spec::{Arch, Element, Types};
use bolt_cutlass::fatbin::Image;
use common::*;

fn layer(n: u32, threadblock: [u32; 3], warp: [u32; 3], epilogue: Epilogue) -> B2bLayer {
    B2bLayer { n, threadblock, warp, epilogue }
}

fn spec(family: B2bFamily, types: Types, residency: Residency, layers: Vec<B2bLayer>) -> B2bSpec {
    B2bSpec { family, arch: Arch::Sm80, types, residency, layers, instruction: INSTRUCTION, stages: 3, alignment: 8 }
}

fn bias_relu() -> Epilogue {
    epilogue(false, true, Activation::Relu, None)
}

/// CUTLASS's fused_two_gemms_f16_sm80_rf.cu configuration (64x64x32 / 16x64x32, then
/// 64x128x32 / 16x128x32), f32 accumulation, bias + ReLU in both layers (Bolt's Table 1).
fn gemm_rf() -> B2bSpec {
    spec(
        B2bFamily::Gemm,
        types(F16, F32, F16),
        Residency::Registers,
        vec![layer(64, [64, 64, 32], [16, 64, 32], bias_relu()), layer(128, [64, 128, 32], [16, 128, 32], bias_relu())],
    )
}

/// fused_two_gemms_f16_sm80_shmem.cu's tiles (N1 = 256, warps split N): bias + SiLU, then a
/// residual added before a ReLU.
fn gemm_smem() -> B2bSpec {
    spec(
        B2bFamily::Gemm,
        types(F16, F32, F16),
        Residency::SharedMemory,
        vec![
            layer(64, [64, 64, 32], [32, 32, 32], epilogue(false, true, Activation::Silu, None)),
            layer(
                256,
                [64, 256, 32],
                [64, 64, 32],
                epilogue(false, false, Activation::Relu, Some(ResidualAt::BeforeActivation)),
            ),
        ],
    )
}

/// fused_two_convs_f16_sm80_rf.cu's tiles (2 warps of 32 rows), f16 accumulation as there.
fn conv_rf() -> B2bSpec {
    spec(
        B2bFamily::Conv2dFprop,
        types(F16, F16, F16),
        Residency::Registers,
        vec![layer(64, [64, 64, 32], [32, 64, 32], bias_relu()), layer(128, [64, 128, 32], [32, 128, 32], bias_relu())],
    )
}

/// fused_two_convs_f16_sm80_shmem.cu's first-layer tiles, 256 output channels after; a
/// LeakyReLU (a functor Bolt writes out), then bias only; bf16 with f32 accumulation.
fn conv_smem() -> B2bSpec {
    spec(
        B2bFamily::Conv2dFprop,
        types(BF16, F32, BF16),
        Residency::SharedMemory,
        vec![
            layer(
                64,
                [64, 64, 32],
                [32, 32, 32],
                epilogue(false, true, Activation::LeakyRelu { alpha: 0.1.into() }, None),
            ),
            layer(256, [64, 256, 32], [64, 64, 32], epilogue(false, true, Activation::Identity, None)),
        ],
    )
}

fn golden_cases() -> Vec<(&'static str, B2bSpec)> {
    vec![
        ("b2b_gemm_rf_f16_bias_relu", gemm_rf()),
        ("b2b_gemm_smem_f16_bias_silu_res_relu", gemm_smem()),
        ("b2b_conv_rf_f16_bias_relu", conv_rf()),
        ("b2b_conv_smem_bf16_bias_leaky_relu_bias", conv_smem()),
    ]
}

#[test]
fn the_four_kernels_validate() {
    for (name, s) in golden_cases() {
        validate(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn renders_match_the_golden_files() {
    assert_golden(golden_cases().into_iter().map(|(name, spec)| {
        let symbol = symbol_for(&spec);
        let text = render_unit(&[(&spec, &symbol)]).unwrap_or_else(|e| panic!("{name}: {e}"));
        (name.to_string(), text)
    }));
}

#[test]
fn symbols_and_blocks() {
    let s = gemm_rf();
    let symbol = symbol_for(&s);
    assert!(
        symbol.starts_with(
            "bolt_sm80_b2b_gemm_rf_f16_f32acc_a8_64x64x32_16x64x32_64x128x32_16x128x32_s3_bias_relu_bias_relu_"
        ),
        "{symbol}"
    );
    let block = b2b::render(&s, "k").unwrap();
    assert!(block.contains("extern \"C\" BoltStatus k_initialize(\n    const void *problem, const BoltB2bArgs *args"));
    assert!(block.contains("extern \"C\" BoltStatus k_update(void *params, const BoltB2bArgs *args)"));
    assert!(!block.contains("#include"));
    let unit = render_unit(&[(&s, "k1"), (&conv_rf(), "k2")]).unwrap();
    assert!(unit.contains("#include <device/b2b_gemm.h>"));
    assert!(unit.contains("#include <device/b2b_implicit_gemm_convolution.h>"));
    assert_eq!(unit.matches("BOLT_DETAIL_ABI_HELPERS\n#define").count(), 1, "one set of ABI helpers for all kernels");
    assert!(render_unit(&[(&s, "k"), (&s, "k")]).is_err());
    let mut symbols: Vec<String> = golden_cases().iter().map(|(_, s)| symbol_for(s)).collect();
    symbols.sort();
    symbols.dedup();
    assert_eq!(symbols.len(), 4);
}

// ---- nvcc ---------------------------------------------------------------------------------------

/// Builds `specs` with [`b2b::build_library`]: one unit compiled for sm_80 with the example's
/// headers on the include path, linked into a shared library. Objects and the library are
/// cached under target/ by a hash of the source, the ABI header, the toolchain versions and the
/// flags, so a rerun with nothing changed runs no nvcc. Checks the library exports the ABI
/// functions of each kernel, carries sm_80 SASS and compute_80 PTX, and the manifest lists
/// them; returns the library.
fn compile_b2b_unit(name: &str, specs: &[B2bSpec]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("b2b");
    let lib = b2b::build_library(specs, &dir.join(name), name, Some(&dir.join("cache")), &[])
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(lib.rejected.is_empty(), "{:?}", lib.rejected);
    if lib.nvcc_seconds.is_empty() {
        eprintln!("{name}: objects cached, nvcc not run");
    } else {
        let worst = lib.resources.iter().max_by_key(|k| k.registers);
        let spills: u32 = lib.resources.iter().map(|k| k.spill_store_bytes).sum();
        eprintln!(
            "{name}: {} kernels compiled for sm_80 in {:.1}s of nvcc; max {} registers, {spills} B spilled",
            specs.len(),
            lib.nvcc_seconds.iter().sum::<f64>(),
            worst.map_or(0, |k| k.registers)
        );
        assert_eq!(spills, 0, "{name}: ptxas spilled");
    }
    let symbols: Vec<String> = specs.iter().map(symbol_for).collect();
    let nm = Command::new("nm").args(["-D", "--defined-only"]).arg(&lib.library).output().expect("nm runs");
    let defined = String::from_utf8_lossy(&nm.stdout);
    for symbol in &symbols {
        for f in bolt_codegen::abi::FUNCTION_SUFFIXES {
            assert!(defined.contains(&format!(" T {symbol}{f}\n")), "{name}: {symbol}{f} not exported");
        }
    }
    // Chain kernels load on an A100 (sm_80 SASS) and an H100 (compute_80 PTX, JIT-compiled).
    let units: Vec<_> = bolt_cutlass::fatbin::fat_binaries(&std::fs::read(&lib.library).unwrap())
        .into_iter()
        .filter(|images| images.contains(&Image::Sass(80)))
        .collect();
    assert!(!units.is_empty() && units.iter().all(|images| images.contains(&Image::Ptx(80))), "{units:?}");
    let manifest: b2b::B2bManifest = serde_json::from_slice(&std::fs::read(&lib.manifest).unwrap()).unwrap();
    let mut listed: Vec<&str> = manifest.kernels.iter().map(|k| k.symbol.as_str()).collect();
    listed.sort();
    let mut want: Vec<&str> = symbols.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(listed, want);
    assert_eq!(manifest.library, format!("lib{name}.so"));
    lib.library
}

/// The host side of the ABI (no GPU), through [`b2b::B2bKernelLibrary`]: `<symbol>_can_implement` agrees with
/// [`b2b::check_problem`] on every problem (then CUTLASS's own can_implement accepts what both
/// accept), and `run` refuses null and misaligned arguments before any launch.
fn check_host_abi(library: &Path, spec: &B2bSpec, problems: &[(&str, B2bProblem)]) {
    let lib = b2b::B2bKernelLibrary::open(library).unwrap_or_else(|e| panic!("{e}"));
    let symbol = symbol_for(spec);
    let kernel = lib.kernel(&symbol).unwrap_or_else(|| panic!("{symbol} not in the manifest"));
    assert_eq!(&kernel.spec, spec);
    let mut accepted = 0;
    for (what, p) in problems {
        let rust = match check_problem(spec, p) {
            Ok(()) => Status::Ok,
            Err(ProblemRejection::Misaligned(_)) => Status::MisalignedOperand,
            Err(_) => Status::UnsupportedProblem,
        };
        let c = kernel.can_implement(p);
        assert_eq!(c, rust, "{symbol}: {what}: C++ says {c}, Rust {:?}", check_problem(spec, p));
        if c.is_ok() {
            accepted += 1;
            assert_eq!(kernel.workspace_size(p), 0);
            // Null pointers, then a misaligned one: refused before any CUDA call.
            let mut args = BoltB2bArgs::default();
            let init = |args: &BoltB2bArgs| unsafe {
                kernel.initialize(p, args, std::ptr::null_mut(), 0, std::ptr::null_mut())
            };
            assert_eq!(init(&args).unwrap_err().status, Status::NullArgument, "{what}");
            let buffer = vec![0u64; 64];
            let aligned = buffer.as_ptr() as *const c_void;
            args.a = unsafe { (aligned as *const u8).add(2) } as *const c_void;
            args.c = aligned;
            args.d = aligned as *mut c_void;
            for l in &mut args.layer[..2] {
                l.b = aligned;
                l.bias = aligned;
            }
            let err = init(&args).unwrap_err();
            assert_eq!(err.status, Status::MisalignedOperand, "{what}");
            assert_eq!(err.to_string(), format!("{symbol}_initialize: misaligned operand"));
        }
    }
    assert!(accepted > 0, "{symbol}: no problem accepted");
    // A problem of the other family never reaches the C++ side.
    let other = match spec.family {
        B2bFamily::Gemm => conv_pair(32, 56, 56, 64, 64, 1, 128),
        B2bFamily::Conv2dFprop => gemm_pair(81920, 576, 64, 128),
    };
    assert_eq!(kernel.can_implement(&other), Status::UnsupportedProblem);
}

#[test]
fn gemm_pairs_compile_for_sm80() {
    let library = compile_b2b_unit("b2b_gemm_pairs", &[gemm_rf(), gemm_smem()]);
    let with = |f: &dyn Fn(&mut BoltB2bGemmProblem)| {
        let B2bProblem::Gemm(mut p) = gemm_pair(81920, 576, 64, 128) else { unreachable!() };
        f(&mut p);
        B2bProblem::Gemm(p)
    };
    let problems = [
        ("cutlass example, N1 = 128", gemm_pair(81920, 576, 64, 128)),
        ("cutlass example, N1 = 256", gemm_pair(81920, 576, 64, 256)),
        ("narrower layers", gemm_pair(1000, 64, 32, 96)),
        ("bolt table 1", gemm_pair(128320, 96, 32, 96)),
        ("N0 over the tile", gemm_pair(4096, 64, 72, 64)),
        ("N1 over the tile", gemm_pair(4096, 64, 64, 264)),
        ("odd K", gemm_pair(4096, 66, 64, 128)),
        ("odd M", gemm_pair(4100, 64, 64, 128)),
        ("three layers", B2bProblem::Gemm(BoltB2bGemmProblem::packed(4096, 64, &[64, 64, 64]))),
        ("short lda", with(&|p| p.lda = 64)),
        ("padded lda", with(&|p| p.lda = 640)),
        ("misaligned ldd", with(&|p| p.ldd = 132)),
        ("short ldc (read by the residual)", with(&|p| p.ldc = 64)),
        ("zero M", with(&|p| p.m = 0)),
    ];
    check_host_abi(&library, &gemm_rf(), &problems);
    check_host_abi(&library, &gemm_smem(), &problems);
}

#[test]
fn conv_pairs_compile_for_sm80() {
    let library = compile_b2b_unit("b2b_conv_pairs", &[conv_rf(), conv_smem()]);
    let B2bProblem::Conv2d(good) = conv_pair(32, 56, 56, 64, 64, 1, 128) else { unreachable!() };
    let with = |f: &dyn Fn(&mut BoltB2bConv2dProblem)| {
        let mut p = good;
        f(&mut p);
        B2bProblem::Conv2d(p)
    };
    let problems = [
        ("cutlass example, K1 = 128", conv_pair(32, 56, 56, 64, 64, 1, 128)),
        ("cutlass example, K1 = 256", conv_pair(32, 56, 56, 64, 64, 1, 256)),
        ("bolt table 2, stride 2", conv_pair(32, 112, 112, 64, 64, 2, 64)),
        ("bolt table 2, 48 channels", conv_pair(32, 56, 56, 48, 48, 1, 48)),
        ("3 input channels", conv_pair(32, 224, 224, 3, 64, 2, 64)),
        ("K0 over the tile", conv_pair(2, 16, 16, 64, 72, 1, 64)),
        ("second conv 3x3", with(&|p| p.conv[1].r = 3)),
        (
            "second conv strided",
            with(&|p| {
                p.conv[1].stride_h = 2;
                p.conv[1].p = 28;
            }),
        ),
        ("second conv padded", with(&|p| p.conv[1].pad_h = 1)),
        ("second conv on other channels", with(&|p| p.conv[1].c = 32)),
        ("grouped first conv", with(&|p| p.conv[0].groups = 2)),
        ("three layers", with(&|p| p.layers = 3)),
    ];
    check_host_abi(&library, &conv_rf(), &problems);
    check_host_abi(&library, &conv_smem(), &problems);
}

// ---- rejections -------------------------------------------------------------------------------

fn rejected(s: &B2bSpec) -> B2bRejection {
    validate(s).expect_err("should be rejected")
}

#[test]
fn every_residence_rule_rejects_with_a_reason() {
    // Chains of 1 and of 3 layers.
    let mut one = gemm_rf();
    one.layers.truncate(1);
    assert!(matches!(rejected(&one), B2bRejection::TooFewLayers(1)));
    let mut three = gemm_rf();
    three.layers.push(layer(64, [64, 64, 32], [16, 64, 32], bias_relu()));
    let r = rejected(&three);
    assert!(matches!(r, B2bRejection::ChainTooLong(3)));
    assert!(r.to_string().contains("chains of N > 2 layers need a multi-stage b2b mainloop: not implemented"));

    // Types: f16/bf16 only, the intermediate in the input type.
    let mut tf32 = gemm_rf();
    tf32.types = types(F32, F32, F32);
    assert!(matches!(rejected(&tf32), B2bRejection::InputType(Element::F32)));
    let mut wide_out = gemm_rf();
    wide_out.types = types(F16, F32, F32);
    assert!(matches!(rejected(&wide_out), B2bRejection::OutputType { .. }));
    let mut bf16_f16acc = gemm_rf();
    bf16_f16acc.types = types(BF16, F16, BF16);
    assert!(matches!(rejected(&bf16_f16acc), B2bRejection::Accumulator { .. }));
    let mut sm90 = gemm_rf();
    sm90.arch = Arch::Sm90;
    assert!(matches!(rejected(&sm90), B2bRejection::Arch(Arch::Sm90)));
    let mut instr = gemm_rf();
    instr.instruction = [16, 8, 8];
    assert!(matches!(rejected(&instr), B2bRejection::Instruction(_)));

    // Alignment: GEMMs 2/4/8, convs 8.
    let mut a1 = gemm_rf();
    a1.alignment = 1;
    assert!(matches!(rejected(&a1), B2bRejection::Alignment { alignment: 1, .. }));
    let mut conv_a4 = conv_rf();
    conv_a4.alignment = 4;
    assert!(matches!(rejected(&conv_a4), B2bRejection::Alignment { alignment: 4, .. }));
    let mut two_stages = gemm_rf();
    two_stages.stages = 2;
    assert!(matches!(rejected(&two_stages), B2bRejection::Stages(2)));

    // Threadblock residence: tile N = the layer's N, at most 256, multiple of 8.
    let mut tb_n = gemm_rf();
    tb_n.layers[1].n = 96;
    assert!(matches!(rejected(&tb_n), B2bRejection::ThreadblockN { layer: 1, n: 96, threadblock_n: 128 }));
    let mut too_wide = gemm_smem();
    too_wide.layers[1] = layer(320, [64, 320, 32], [64, 80, 32], Epilogue::plain());
    assert!(matches!(rejected(&too_wide), B2bRejection::LayerN { layer: 1, n: 320, .. }));

    // Same threadblock M and warp count in every layer.
    let mut tb_m = gemm_rf();
    tb_m.layers[1].threadblock[0] = 128;
    tb_m.layers[1].warp[0] = 32;
    assert!(matches!(rejected(&tb_m), B2bRejection::ThreadblockM { layer: 1, m: 128, m0: 64 }));
    let mut warps = gemm_smem();
    warps.layers[1].warp = [64, 128, 32];
    assert!(matches!(rejected(&warps), B2bRejection::WarpCountMismatch { layer: 1, warps: 2, warps0: 4 }));

    // RF-resident: warp N = threadblock N in every layer.
    let mut rf_warp_n = gemm_smem();
    rf_warp_n.residency = Residency::Registers;
    assert!(matches!(rejected(&rf_warp_n), B2bRejection::RegisterWarpN { layer: 0, warp_n: 32, threadblock_n: 64 }));

    // RF-resident register budget: both layers' accumulators are live together.
    let mut rf_regs = gemm_rf();
    rf_regs.layers[1] = layer(256, [64, 256, 32], [16, 256, 32], bias_relu());
    let r = rejected(&rf_regs);
    assert!(matches!(r, B2bRejection::Registers { residency: Residency::Registers, registers: 160, .. }), "{r}");

    // Shared-memory-resident: the staged intermediate plus the mainloop stages must fit.
    let mut smem = gemm_smem();
    smem.layers[0] = layer(128, [128, 128, 64], [64, 64, 64], bias_relu());
    smem.layers[1] = layer(256, [128, 256, 64], [64, 128, 64], Epilogue::plain());
    smem.types = types(F16, F16, F16);
    smem.stages = 4;
    let r = rejected(&smem);
    assert!(matches!(r, B2bRejection::SharedMemory { .. }), "{r}");
    assert!(r.to_string().contains("staged intermediate"), "{r}");

    // The next layer walks the intermediate in whole K tiles.
    let mut k1 = gemm_rf();
    k1.layers[0] = layer(32, [64, 32, 32], [16, 32, 32], bias_relu());
    k1.layers[1].threadblock[2] = 64;
    k1.layers[1].warp[2] = 64;
    let r = rejected(&k1);
    assert!(matches!(r, B2bRejection::IntermediateK { layer: 1, k: 32, threadblock_k: 64 }), "{r}");

    // What Bolt picks of the valid chains: those that computed right on an H100. Warp N a
    // power of two; the last layer's warps 32 or 64 columns wide (16, 48, 96, 128 were wrong,
    // CUTLASS's own GEMM example configuration too); conv chains RF-resident.
    let mut warp_n = gemm_smem();
    warp_n.layers[1] = layer(96, [64, 96, 32], [32, 48, 32], Epilogue::plain());
    validate(&warp_n).unwrap();
    let r = b2b::check_verified(&warp_n).unwrap_err();
    assert!(matches!(r, B2bRejection::WarpN { layer: 1, warp_n: 48 }), "{r}");
    validate(&gemm_rf()).unwrap();
    let r = b2b::check_verified(&gemm_rf()).unwrap_err();
    assert!(matches!(r, B2bRejection::LastWarpN { layer: 1, warp_n: 128 }), "{r}");
    b2b::check_verified(&gemm_smem()).unwrap(); // 256 columns over 4 warps: 64 each

    let mut verified = gemm_rf();
    verified.layers[1] = layer(64, [64, 64, 32], [16, 64, 32], bias_relu());
    b2b::check_verified(&verified).unwrap();
    let r = b2b::check_verified(&conv_smem()).unwrap_err();
    assert!(matches!(r, B2bRejection::ConvUnverified { residency: Residency::SharedMemory }), "{r}");

    // Thread maps: 16 filter rows over 4 warps would drop rows.
    let mut map = gemm_smem();
    map.layers[1] = layer(16, [64, 16, 32], [16, 16, 32], Epilogue::plain());
    let r = rejected(&map);
    assert!(matches!(r, B2bRejection::ThreadMap { .. }), "{r}");

    // The last layer's epilogue thread map: 8 warps, 2 along M, over 64 columns leave each warp
    // 2 rows for 4-row accesses (found by compiling every candidate: a static_assert in CUTLASS).
    let mut epi = gemm_smem();
    epi.layers[0] = layer(128, [64, 128, 32], [32, 32, 32], bias_relu());
    epi.layers[1] = layer(64, [64, 64, 32], [32, 16, 32], bias_relu());
    let r = rejected(&epi);
    assert!(matches!(r, B2bRejection::EpilogueThreadMap { layer: 1, n: 64, warps: 8, warps_m: 2, .. }), "{r}");

    // Conv chains keep fewer accumulators live beside the conv iterators (ptxas spilled at 128).
    let mut conv_regs = conv_rf();
    conv_regs.types = types(F16, F32, F16);
    conv_regs.layers[0] = layer(64, [64, 64, 32], [32, 64, 32], bias_relu());
    conv_regs.layers[1] = layer(64, [64, 64, 32], [32, 64, 32], bias_relu());
    let r = rejected(&conv_regs);
    assert!(matches!(r, B2bRejection::ConvRegisters { registers: 128, max: 96, .. }), "{r}");
    let mut conv_loads = conv_smem();
    conv_loads.layers[0] = layer(32, [128, 32, 64], [64, 32, 64], bias_relu());
    conv_loads.layers[1] = layer(64, [128, 64, 32], [64, 64, 32], Epilogue::plain());
    let r = rejected(&conv_loads);
    assert!(matches!(r, B2bRejection::ConvActivationLoads { loads: 16, .. }), "{r}");

    // Tiles: divisibility, sliced K, K steps, warp count.
    let mut div = gemm_rf();
    div.layers[0].warp = [24, 64, 32];
    assert!(matches!(rejected(&div), B2bRejection::TileDivisibility { layer: 0, .. }));
    let mut sliced = gemm_rf();
    sliced.layers[0].threadblock[2] = 64;
    assert!(matches!(rejected(&sliced), B2bRejection::SlicedK { layer: 0, .. }));
    let mut steps = gemm_rf();
    steps.layers[0].threadblock[2] = 16;
    steps.layers[0].warp[2] = 16;
    assert!(matches!(rejected(&steps), B2bRejection::WarpKSteps { layer: 0, steps: 1, .. }));
    let mut sixteen = gemm_rf();
    sixteen.layers[0] = layer(64, [256, 64, 32], [16, 64, 32], bias_relu());
    sixteen.layers[1] = layer(128, [256, 128, 32], [16, 128, 32], bias_relu());
    assert!(matches!(rejected(&sixteen), B2bRejection::WarpCount(16)));

    // Epilogues: only the last layer reads C, and only without the residual block.
    let mut reads_c = gemm_rf();
    reads_c.layers[0].epilogue = epilogue(true, false, Activation::Relu, None);
    assert!(matches!(rejected(&reads_c), B2bRejection::IntermediateReadsSource { layer: 0, .. }));
    let mut residual0 = gemm_rf();
    residual0.layers[0].epilogue = epilogue(false, false, Activation::Relu, Some(ResidualAt::BeforeActivation));
    assert!(matches!(rejected(&residual0), B2bRejection::IntermediateReadsSource { layer: 0, .. }));
    let mut block = gemm_rf();
    block.layers[1].epilogue = epilogue(false, true, Activation::Relu, Some(ResidualAt::BeforeActivation));
    assert!(matches!(rejected(&block), B2bRejection::LastEpilogue { layer: 1, .. }));
    let mut after = gemm_rf();
    after.layers[1].epilogue = epilogue(false, false, Activation::GeluErf, Some(ResidualAt::AfterActivation));
    assert!(matches!(rejected(&after), B2bRejection::LastEpilogue { layer: 1, .. }));
    let mut odd = gemm_rf();
    odd.layers[0].epilogue = Epilogue {
        expr: bolt_codegen::epilogue::Expr::times(bolt_codegen::epilogue::Expr::Acc, bolt_codegen::epilogue::Expr::Acc),
    };
    assert!(matches!(rejected(&odd), B2bRejection::EpilogueNotNormalForm { layer: 0, .. }));

    // Rendering refuses what validation refuses.
    assert!(b2b::render(&three, "k").is_err());
}

// ---- problems -----------------------------------------------------------------------------------

fn conv([n, h, w, c]: [i32; 4], k: i32, r: i32, pad: i32, stride: i32) -> BoltConv2dProblem {
    let out = |x: i32| (x + 2 * pad - r) / stride + 1;
    BoltConv2dProblem {
        n,
        h,
        w,
        c,
        k,
        r,
        s: r,
        p: out(h),
        q: out(w),
        pad_h: pad,
        pad_w: pad,
        stride_h: stride,
        stride_w: stride,
        dilation_h: 1,
        dilation_w: 1,
        groups: 1,
    }
}

/// A 3x3 conv (pad 1) and then a 1x1 conv with `k1` outputs on its output.
fn conv_pair(n: i32, h: i32, w: i32, c: i32, k0: i32, stride: i32, k1: i32) -> B2bProblem {
    let c0 = conv([n, h, w, c], k0, 3, 1, stride);
    let c1 = conv([n, c0.p, c0.q, k0], k1, 1, 0, 1);
    let mut p = BoltB2bConv2dProblem { layers: 2, ..Default::default() };
    p.conv[0] = c0;
    p.conv[1] = c1;
    assert_eq!(B2bProblem::conv(c0, &[k1]), B2bProblem::Conv2d(p));
    B2bProblem::Conv2d(p)
}

fn gemm_pair(m: i64, k0: i64, n0: i64, n1: i64) -> B2bProblem {
    B2bProblem::gemm(m, k0, &[n0, n1])
}

#[test]
fn run_time_problem_checks() {
    let rf = gemm_rf();
    assert_eq!(check_problem(&rf, &gemm_pair(81920, 576, 64, 128)), Ok(()));
    // Smaller N than the tile: fine (zero-filled columns); larger: not one threadblock.
    assert_eq!(check_problem(&rf, &gemm_pair(81920, 576, 48, 128)), Ok(()));
    assert!(matches!(check_problem(&rf, &gemm_pair(81920, 576, 64, 136)), Err(ProblemRejection::Unsupported(_))));
    assert!(matches!(check_problem(&rf, &gemm_pair(81920, 572, 64, 128)), Err(ProblemRejection::Misaligned(_))));
    assert!(matches!(
        check_problem(&rf, &B2bProblem::Gemm(BoltB2bGemmProblem::packed(64, 64, &[64, 64, 64]))),
        Err(ProblemRejection::Layers { problem: 3, kernel: 2 })
    ));
    assert!(matches!(check_problem(&rf, &conv_pair(1, 8, 8, 8, 8, 1, 8)), Err(ProblemRejection::Family(..))));

    let conv_rf = conv_rf();
    assert_eq!(check_problem(&conv_rf, &conv_pair(32, 56, 56, 64, 64, 1, 128)), Ok(()));
    // Later convs: 1x1, stride 1, unpadded, on the first conv's output.
    let B2bProblem::Conv2d(good) = conv_pair(32, 56, 56, 64, 64, 1, 128) else { unreachable!() };
    for (what, change) in [
        ("3x3", &(|c: &mut BoltConv2dProblem| c.r = 3) as &dyn Fn(&mut BoltConv2dProblem)),
        ("stride 2", &|c| {
            c.stride_h = 2;
            c.p = 28;
        }),
        ("padded", &|c| c.pad_w = 1),
        ("other input", &|c| c.h = 28),
        ("other channels", &|c| c.c = 32),
    ] {
        let mut p = good;
        change(&mut p.conv[1]);
        let r = check_problem(&conv_rf, &B2bProblem::Conv2d(p));
        assert!(matches!(&r, Err(ProblemRejection::Unsupported(m)) if m.contains("1x1, stride 1")), "{what}: {r:?}");
    }
    assert!(matches!(
        check_problem(&conv_rf, &conv_pair(32, 56, 56, 3, 64, 1, 128)),
        Err(ProblemRejection::Misaligned(_))
    ));
}

// ---- candidates for ../shared/workloads/b2b.json --------------------------------------------------

fn workloads() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/workloads/b2b.json");
    let path = if path.exists() { path } else { PathBuf::from("/work/shared/workloads/b2b.json") };
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn best(family: B2bFamily, problem: &B2bProblem, epilogues: &[Epilogue]) -> b2b::B2bCandidates {
    let c = candidates(family, types(F16, F32, F16), problem, epilogues).unwrap_or_else(|e| panic!("{problem:?}: {e}"));
    let (first, first_cost) = &c.specs[0];
    assert_eq!(first.residency, c.residency);
    validate(first).unwrap();
    assert_eq!(check_problem(first, &c.problem), Ok(()));
    assert_eq!(first_cost.threadblocks, c.problem.m().div_ceil(first.layers[0].threadblock[0] as u64));
    assert!(first_cost.dram_bytes < first_cost.unfused_dram_bytes);
    for (s, _) in &c.specs {
        validate(s).unwrap();
    }
    c
}

#[test]
fn workload_chains_get_candidates_of_the_right_residency() {
    let w = workloads();
    let relu2 = [bias_relu(), bias_relu()];
    for (i, p) in w["cutlass_example_shapes"].as_array().unwrap().iter().enumerate() {
        let g = |k: &str| p[k].as_i64().unwrap();
        let problem = gemm_pair(g("M"), g("K0"), g("N0"), g("N1"));
        let c = best(B2bFamily::Gemm, &problem, &relu2);
        // The example's residency, except that RF residence needs the last layer's warps as wide
        // as its N, and only 32- and 64-column ones computed right on an H100.
        let want =
            if p["resident"] == "registers" && g("N1") <= 64 { Residency::Registers } else { Residency::SharedMemory };
        assert_eq!(c.residency, want, "cutlass example {i}: N1 = {}", g("N1"));
        let (s, cost) = &c.specs[0];
        eprintln!(
            "example {i}: {} ({} candidates), {} threadblocks x {} per SM, {:.1} MB fused vs {:.1} MB unfused",
            symbol_for(s),
            c.specs.len(),
            cost.threadblocks,
            cost.threadblocks_per_sm,
            cost.dram_bytes / 1e6,
            cost.unfused_dram_bytes / 1e6
        );
    }
    for p in w["gemm_pairs_bolt_table1"]["problems"].as_array().unwrap() {
        let g = |k: &str| p[k].as_i64().unwrap();
        let problem = gemm_pair(g("M"), g("K0"), g("N0"), g("N1"));
        let c = best(B2bFamily::Gemm, &problem, &relu2);
        // RF-resident where the last layer fits one 32- or 64-column warp (verified widths).
        let rf = if g("N1") <= 64 { Residency::Registers } else { Residency::SharedMemory };
        assert_eq!(c.residency, rf, "{p}");
        let (s, _) = &c.specs[0];
        eprintln!("gemm {p}: alignment {}, {}", c.alignment, symbol_for(s));
        if g("N0") == 1 {
            // N0 = 1 is padded (free: weights and bias of layer 0, rows of B1) to the alignment.
            let B2bProblem::Gemm(q) = c.problem else { unreachable!() };
            assert_eq!((q.n[0], c.alignment), (4, 4));
        }
    }
    for p in w["conv_pairs_bolt_table2"]["problems"].as_array().unwrap() {
        let g = |k: &str| p[k].as_i64().unwrap() as i32;
        let problem = conv_pair(32, g("H"), g("W"), g("C"), g("K0"), g("stride"), g("K1"));
        let c = best(B2bFamily::Conv2dFprop, &problem, &relu2);
        // The paper's RF residence, in 64-column warps (the configuration that computed
        // right on an H100 for every Table 2 pair).
        assert_eq!(c.residency, Residency::Registers, "{p}");
        assert!(c.specs.iter().all(|(s, _)| b2b::check_verified(s).is_ok()), "{p}");
        assert_eq!(c.padded_input_channels.is_some(), g("C") % 8 != 0, "{p}");
        let (s, cost) = &c.specs[0];
        eprintln!(
            "conv {p}: {}{}, {} threadblocks",
            symbol_for(s),
            c.padded_input_channels.map_or(String::new(), |(a, b)| format!(" (input channels padded {a} -> {b})")),
            cost.threadblocks
        );
    }
    // MLP chains: 3+ layers are not implemented, with the reason.
    for p in w["mlp_chains"]["problems"].as_array().unwrap() {
        let widths: Vec<i64> = p["widths"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        let m = p["M"].as_i64().unwrap();
        let ns = &widths[1..widths.len().min(5)];
        let problem = B2bProblem::Gemm(BoltB2bGemmProblem::packed(m, widths[0], ns));
        let e = vec![bias_relu(); ns.len()];
        let r = candidates(B2bFamily::Gemm, types(F16, F32, F16), &problem, &e).unwrap_err();
        assert!(matches!(r, NoCandidate::Layers(n) if n >= 3), "{r}");
        assert!(r.to_string().contains("not implemented"));
    }
    // Too wide for one threadblock.
    let r = candidates(B2bFamily::Gemm, types(F16, F32, F16), &gemm_pair(4096, 64, 64, 512), &relu2).unwrap_err();
    assert!(matches!(r, NoCandidate::TooWide { layer: 1, n: 512, .. }), "{r}");
}

#[test]
fn cost_counts_the_intermediate_once_unfused_only() {
    let s = gemm_rf();
    let p = gemm_pair(81920, 576, 64, 128);
    let c = cost(&s, &p);
    assert_eq!(c.threadblocks, 81920 / 64);
    let e = 2.0;
    let (m, k0, n0, n1) = (81920.0, 576.0, 64.0, 128.0);
    let weights = (k0 * n0 + n0 * n1) * e;
    let fused = m * k0 * e + weights + (n0 + n1) * e + m * n1 * e;
    assert_eq!(c.dram_bytes, fused);
    // Unfused: the intermediate M x N0 is written by layer 0 and read by layer 1.
    assert_eq!(c.unfused_dram_bytes, fused + 2.0 * m * n0 * e);
    assert_eq!(c.flops, 2.0 * m * (n0 * k0 + n1 * n0));
    assert_eq!(c.l2_weight_bytes, weights * c.threadblocks as f64);
    assert!(c.threadblocks_per_sm >= 1);
}

#[test]
fn spec_serialises() {
    let s = conv_smem();
    let json = serde_json::to_string(&s).unwrap();
    let back: B2bSpec = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
}

// ---- layer 0's on-chip epilogue, on the host ----------------------------------------------------

/// Layer 0's epilogue functor (written out by the template, applied by the fused mainloop to
/// accumulator fragments) compiled for the host with f32 elements and applied to a sweep of
/// accumulators and biases, against `Expr::eval`: every activation, with and without bias.
/// The executable is cached like the kernel objects.
#[test]
fn intermediate_epilogues_compute_what_the_tree_says() {
    const N: usize = 64;
    const ALPHA: f32 = 1.25;
    let mut activations = Activation::all();
    activations.push(Activation::Clip { min: (-1.5).into(), max: f32::INFINITY.into() });
    let mut cases = Vec::new();
    for &a in &activations {
        for bias in [false, true] {
            let mut s = gemm_rf();
            s.layers[0].epilogue = epilogue(false, bias, a, None);
            cases.push(s);
        }
    }
    let acc: Vec<f32> = (0..N).map(|i| -8.0 + 16.0 * i as f32 / N as f32).collect();
    let bias: Vec<f32> = (0..N).map(|i| ((i * 11 % 17) as f32 / 4.0 - 2.0).clamp(-2.0, 2.0)).collect();
    let array = |name: &str, v: &[f32]| {
        let items: Vec<String> = v.iter().map(|x| format!("{x:?}f")).collect();
        format!("static float const {name}[{N}] = {{{}}};\n", items.join(", "))
    };
    let mut src = String::from("#include <cstdio>\n");
    for h in ["cutlass/cutlass.h", "cutlass/numeric_types.h", "cutlass/array.h", "cutlass/gemm/gemm.h"] {
        src += &format!("#include <{h}>\n");
    }
    for h in ["cutlass/epilogue/thread/activation.h", "cutlass/epilogue/thread/scale_type.h"] {
        src += &format!("#include <{h}>\n");
    }
    src += &array("kAcc", &acc);
    src += &array("kBias", &bias);
    for (i, spec) in cases.iter().enumerate() {
        let name = format!("case_{i}");
        let functor = b2b::render_intermediate_epilogue(spec, &name).unwrap();
        src += &format!(
            "namespace {name} {{\nusing ElementA = float;\nusing ElementC = float;\nusing ElementAccumulator = float;\n\
             using InstructionShape = cutlass::gemm::GemmShape<16, 8, 16>;\n{functor}\n\
             void run(float alpha, float *d) {{\n\
             \x20 using Op = layer0::EpilogueOp;\n\
             \x20 Op op{{Op::Params(alpha)}};\n\
             \x20 for (int i = 0; i < {N}; i += Op::kCount) {{\n\
             \x20   Op::FragmentAccumulator a;\n\
             \x20   Op::FragmentScaleBias scale, b;\n\
             \x20   for (int j = 0; j < Op::kCount; ++j) {{ a[j] = kAcc[i + j]; b[j] = kBias[i + j]; scale[j] = 0.f; }}\n\
             \x20   Op::FragmentOutput out = op(a, scale, b);\n\
             \x20   for (int j = 0; j < Op::kCount; ++j) d[i + j] = out[j];\n\
             \x20 }}\n\
             }}\n}}  // namespace {name}\n"
        );
    }
    src += &format!("int main() {{\n  float d[{N}];\n");
    for i in 0..cases.len() {
        src += &format!(
            "  case_{i}::run({ALPHA:?}f, d);\n  for (int j = 0; j < {N}; ++j) printf(\"{i} %d %.9g\\n\", j, d[j]);\n"
        );
    }
    src += "  return 0;\n}\n";

    let tc = bolt_cutlass::Toolchain::discover().unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("b2b");
    std::fs::create_dir_all(&dir).unwrap();
    let cu = dir.join("intermediate_epilogues.cu");
    std::fs::write(&cu, &src).unwrap();
    let mut h = KeyHasher::new("bolt-b2b-test-host-epilogues-v1");
    h.str("source", &src).str("cuda", &tc.cuda_version().to_string()).str("cutlass", &tc.cutlass_version().to_string());
    let cache = Cache::open(dir.join("cache")).unwrap();
    let (exe, _) = cache
        .get_or_build(EntryKind::Library, &h.finish(), |tmp| {
            let obj = dir.join("intermediate_epilogues.o");
            let c = tc.compile(&cu, &obj).arch(bolt_cutlass::Arch::Sm80).run().map_err(|e| e.to_string())?;
            eprintln!(
                "{} intermediate epilogues compiled for the host in {:.1}s",
                cases.len(),
                c.elapsed.as_secs_f64()
            );
            let link = Command::new(tc.nvcc()).arg(&obj).arg("-o").arg(tmp).output().map_err(|e| e.to_string())?;
            if link.status.success() {
                Ok(None)
            } else {
                Err(String::from_utf8_lossy(&link.stderr).into_owned())
            }
        })
        .unwrap_or_else(|e| panic!("{e:?}"));
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let out = String::from_utf8(run.stdout).unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for line in out.lines() {
        let mut f = line.split_whitespace();
        let (i, j): (usize, usize) = (f.next().unwrap().parse().unwrap(), f.next().unwrap().parse().unwrap());
        let got: f64 = f.next().unwrap().parse().unwrap();
        let env = bolt_codegen::epilogue::EvalEnv {
            acc: acc[j] as f64,
            alpha: ALPHA as f64,
            bias: bias[j] as f64,
            ..Default::default()
        };
        let e = &cases[i].layers[0].epilogue;
        let want = e.expr.eval(&env);
        if got.is_nan() || (got - want).abs() > 2e-5 * (1.0 + want.abs()) {
            failures.push(format!("{}: acc {} bias {}: got {got}, want {want}", e.name(), acc[j], bias[j]));
        }
        checked += 1;
    }
    assert_eq!(checked, cases.len() * N);
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
}

// ---- shared memory estimate vs CUTLASS ----------------------------------------------------------

/// `B2bSpec::smem_bytes` (what validation and the cost use) against `sizeof(SharedStorage)` of
/// the instantiated CUTLASS kernels (what the launch asks for), compiled for the host. Cached.
#[test]
fn smem_estimates_match_cutlass() {
    let specs = [gemm_rf(), gemm_smem(), conv_rf(), conv_smem()];
    let symbols: Vec<String> = specs.iter().map(symbol_for).collect();
    let pairs: Vec<(&B2bSpec, &str)> = specs.iter().zip(&symbols).map(|(s, n)| (s, n.as_str())).collect();
    let mut src = render_unit(&pairs).unwrap();
    src += "\n#include <cstdio>\nint main() {\n";
    for (spec, symbol) in specs.iter().zip(&symbols) {
        let kernel = match spec.family {
            B2bFamily::Gemm => "B2bGemm::B2bGemmKernel",
            B2bFamily::Conv2dFprop => "B2bConv2dFpropKernel",
        };
        src += &format!("  printf(\"%zu\\n\", sizeof({symbol}::{kernel}::SharedStorage));\n");
    }
    src += "  return 0;\n}\n";
    let tc = bolt_cutlass::Toolchain::discover().unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("b2b");
    std::fs::create_dir_all(&dir).unwrap();
    let cu = dir.join("smem_sizes.cu");
    std::fs::write(&cu, &src).unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let mut h = KeyHasher::new("bolt-b2b-test-smem-sizes-v1");
    h.str("source", &src).str("header", bolt_codegen::abi::HEADER);
    h.str("cuda", &tc.cuda_version().to_string()).str("cutlass", &tc.cutlass_version().to_string());
    let cache = Cache::open(dir.join("cache")).unwrap();
    let (exe, _) = cache
        .get_or_build(EntryKind::Library, &h.finish(), |tmp| {
            let obj = dir.join("smem_sizes.o");
            let c = b2b::compile_command(&tc, &cu, &obj, &include).run().map_err(|e| e.to_string())?;
            eprintln!("shared-memory sizes compiled in {:.1}s", c.elapsed.as_secs_f64());
            let link = Command::new(tc.nvcc())
                .args(["-cudart", "static"])
                .arg(&obj)
                .arg("-o")
                .arg(tmp)
                .output()
                .map_err(|e| e.to_string())?;
            if link.status.success() {
                Ok(None)
            } else {
                Err(String::from_utf8_lossy(&link.stderr).into_owned())
            }
        })
        .unwrap_or_else(|e| panic!("{e:?}"));
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let sizes: Vec<usize> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    for ((spec, symbol), actual) in specs.iter().zip(&symbols).zip(sizes) {
        let estimate = spec.smem_bytes();
        eprintln!("{symbol}: estimate {estimate} B, CUTLASS {actual} B");
        assert!(
            estimate >= actual && estimate <= actual + actual / 10,
            "{symbol}: estimate {estimate}, CUTLASS {actual}"
        );
    }
}
