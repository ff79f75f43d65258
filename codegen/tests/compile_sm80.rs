//! nvcc compiles (to objects, for sm_80) every sm80 epilogue kind for both families: all 12
//! activations x {plain, bias, beta*C, bias + residual before, bias + residual after}, plus a
//! unit of variants (batched, layouts, split-K, bf16, tf32, grouped and depthwise conv, ...).
//! Kernels are batched several per translation unit, which costs ~1 s of nvcc per extra kernel
//! against ~9 s per unit. Needs the toolchain (`bolt-toolchain install`): without it the tests
//! fail with the toolchain's message.

mod common;

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;

mod abi_support;

use abi_support::{fake_args, RawLibrary};
use bolt_codegen::abi::{BoltConv2dProblem, BoltGemmProblem, Status};
use bolt_codegen::epilogue::{Activation, Epilogue, ResidualAt};
use bolt_codegen::render::{render_unit, symbol_for};
use bolt_codegen::spec::{Family, GroupMode, KernelSpec, Swizzle, TileConfig};
use bolt_cutlass::{Arch, Toolchain};
use common::*;

fn toolchain() -> Toolchain {
    Toolchain::discover().unwrap_or_else(|e| panic!("{e}"))
}

/// Renders `specs` into one unit, compiles it, and checks that the object holds one kernel per
/// spec and the ABI functions of each; returns the object, the distinct specs and their symbols.
fn compile_unit(name: &str, specs: Vec<KernelSpec>) -> (PathBuf, Vec<KernelSpec>, Vec<String>) {
    compile_unit_with(name, specs, &[])
}

/// [`compile_unit`] with more directories on the include path (a CUTLASS example's).
fn compile_unit_with(
    name: &str,
    specs: Vec<KernelSpec>,
    includes: &[PathBuf],
) -> (PathBuf, Vec<KernelSpec>, Vec<String>) {
    let tc = toolchain();
    let mut specs = specs;
    // Equal forms (identity with the residual after = before) give equal kernels.
    let mut seen = std::collections::HashSet::new();
    specs.retain(|s| seen.insert(symbol_for(s)));
    let symbols: Vec<String> = specs.iter().map(symbol_for).collect();
    let pairs: Vec<(&KernelSpec, &str)> = specs.iter().zip(&symbols).map(|(s, n)| (s, n.as_str())).collect();
    let source = render_unit(&pairs).unwrap_or_else(|e| panic!("{name}: {e}"));

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compile_sm80");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.cu"));
    let obj = dir.join(format!("{name}.o"));
    std::fs::write(&src, &source).unwrap();
    let _ = std::fs::remove_file(&obj);
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let mut compile = tc.compile(&src, &obj).arch(Arch::Sm80).include(&include).ptxas_verbose(true);
    for dir in includes {
        compile = compile.include(dir);
    }
    let compiled = compile.run().unwrap_or_else(|e| panic!("{name}: {e}"));

    let secs = compiled.elapsed.as_secs_f64();
    let worst = compiled.kernels.iter().max_by_key(|k| k.registers);
    let spills: u32 = compiled.kernels.iter().map(|k| k.spill_store_bytes).sum();
    eprintln!(
        "{name}: {} kernels ({} distinct instantiations) in {secs:.1}s ({:.2}s per kernel); max {} registers, {spills} B spilled in all",
        specs.len(),
        compiled.kernels.iter().filter(|k| k.arch == "sm_80").count(),
        secs / specs.len() as f64,
        worst.map_or(0, |k| k.registers),
    );
    // Kernels whose CUTLASS types coincide (plain and beta*C differ only in their arguments)
    // are one instantiation, so there may be fewer entries than specs; every spec's host side
    // is checked below.
    let entries = compiled.kernels.iter().filter(|k| k.arch == "sm_80").count();
    assert!(entries > 0, "{name}: ptxas compiled no sm_80 kernel");

    let nm = Command::new("nm").args(["-g", "--defined-only"]).arg(&obj).output().expect("nm (binutils) runs");
    let defined = String::from_utf8_lossy(&nm.stdout);
    for symbol in &symbols {
        for f in bolt_codegen::abi::FUNCTION_SUFFIXES {
            let name = format!(" T {symbol}{f}\n");
            assert!(defined.contains(&name), "{} does not define {symbol}{f}", obj.display());
        }
    }
    (obj, specs, symbols)
}

/// Every activation in `range` with each of the five epilogue forms, through `make`.
fn activation_matrix(range: std::ops::Range<usize>, make: impl Fn(Epilogue) -> KernelSpec) -> Vec<KernelSpec> {
    Activation::all()[range].iter().flat_map(|&a| forms(a)).map(make).collect()
}

fn f16_gemm(e: Epilogue) -> KernelSpec {
    gemm(types(F16, F32, F16), [ROW; 3], 8, tile(F16, [128, 128, 32], [64, 64, 32], 3), e)
}

fn f16_conv(e: Epilogue) -> KernelSpec {
    conv(types(F16, F32, F16), features(false, GroupMode::None), 8, tile(F16, [128, 128, 32], [64, 64, 32], 3), e)
}

#[test]
fn gemm_epilogues_first_half() {
    compile_unit("gemm_epilogues_1", activation_matrix(0..6, f16_gemm));
}

#[test]
fn gemm_epilogues_second_half() {
    compile_unit("gemm_epilogues_2", activation_matrix(6..12, f16_gemm));
}

#[test]
fn conv2d_fprop_epilogues_first_half() {
    compile_unit("conv2d_fprop_epilogues_1", activation_matrix(0..6, f16_conv));
}

#[test]
fn conv2d_fprop_epilogues_second_half() {
    compile_unit("conv2d_fprop_epilogues_2", activation_matrix(6..12, f16_conv));
}

#[test]
fn variants() {
    let bias_relu = epilogue(false, true, Activation::Relu, None);
    let res_after = epilogue(false, true, Activation::GeluTanh, Some(ResidualAt::AfterActivation));
    let res_before = epilogue(false, true, Activation::Relu, Some(ResidualAt::BeforeActivation));
    let betac_bias = epilogue(true, true, Activation::Sigmoid, None);
    let t16 = tile(F16, [128, 128, 32], [64, 64, 32], 3);
    let t32 = tile(F32, [128, 128, 16], [64, 64, 16], 3);
    let small = tile(F16, [64, 64, 32], [32, 32, 32], 4);
    let split = |mut t: bolt_codegen::spec::Sm80Tile, k| {
        t.split_k = k;
        t.swizzle = Swizzle::SplitKSerial;
        t
    };
    let batched = |mut s: KernelSpec| {
        s.family = Family::BatchedGemm;
        s
    };
    let f16 = types(F16, F32, F16);
    let specs = vec![
        // GEMM: batched, layouts, split-K, other types and alignments, two stages.
        batched(gemm(f16, [ROW, COL, ROW], 8, t16, Epilogue::plain())),
        batched(gemm(f16, [ROW; 3], 8, t16, res_after.clone())),
        gemm(f16, [COL, COL, COL], 8, t16, epilogue(true, false, Activation::Tanh, None)),
        gemm(f16, [ROW; 3], 8, split(t16, 4), res_before.clone()),
        gemm(f16, [ROW; 3], 8, split(t16, 2), epilogue(false, true, Activation::Silu, None)),
        gemm(types(BF16, F32, BF16), [ROW, COL, ROW], 8, t16, betac_bias.clone()),
        gemm(types(F16, F16, F16), [ROW; 3], 8, small, bias_relu.clone()),
        gemm(types(F16, F32, F32), [ROW; 3], 4, small, bias_relu.clone()),
        gemm(types(F32, F32, F32), [ROW, COL, ROW], 4, t32, res_after.clone()),
        gemm(types(F32, F32, F32), [COL, ROW, ROW], 1, t32, bias_relu.clone()),
        gemm(
            f16,
            [ROW; 3],
            2,
            tile(F16, [64, 128, 32], [32, 64, 32], 2),
            epilogue(false, false, Activation::HardSwish, None),
        ),
        // Conv: stride support, group modes, split-K, types.
        conv(f16, features(true, GroupMode::None), 8, t16, bias_relu.clone()),
        conv(f16, features(false, GroupMode::None), 8, split(t16, 3), res_before),
        conv(f16, features(false, GroupMode::SingleGroup), 8, small, bias_relu.clone()),
        conv(f16, features(false, GroupMode::MultipleGroup), 4, small, epilogue(false, false, Activation::Silu, None)),
        conv(f16, features(false, GroupMode::Depthwise), 1, depthwise_tile(), bias_relu.clone()),
        conv(
            types(F32, F32, F32),
            features(false, GroupMode::Depthwise),
            1,
            depthwise_tile(),
            epilogue(true, false, Activation::Sigmoid, None),
        ),
        conv(types(BF16, F32, BF16), features(false, GroupMode::None), 8, t16, betac_bias),
        conv(types(F32, F32, F32), features(true, GroupMode::None), 4, t32, res_after),
        conv(types(F16, F16, F16), features(false, GroupMode::None), 2, small, bias_relu),
    ];
    let (object, specs, symbols) = compile_unit("variants", specs);
    check_host_abi(&object, &symbols, &specs);
}

/// GEMM + row softmax (CUTLASS's GemmSoftmax, example 35) with each epilogue its visitor takes
/// (none, bias, beta*C, a residual before the activation, activations) in f16, bf16 and tf32; then, on
/// the host, the ABI's answers: the workspace holds the pre-softmax D and two partial arrays,
/// N must be a whole number of output vectors, batches are refused.
#[test]
fn gemm_softmax() {
    let t16 = tile(F16, [128, 128, 32], [64, 64, 32], 3);
    let t32 = tile(F32, [128, 128, 16], [64, 64, 16], 3);
    let small = tile(F16, [64, 64, 32], [32, 32, 32], 4);
    let softmax = |mut s: KernelSpec| {
        s.family = Family::GemmSoftmax;
        s
    };
    let f16 = types(F16, F32, F16);
    let specs = vec![
        softmax(gemm(f16, [ROW, COL, ROW], 8, t16, Epilogue::plain())),
        softmax(gemm(f16, [ROW, COL, ROW], 8, t16, epilogue(false, true, Activation::Identity, None))),
        softmax(gemm(f16, [ROW; 3], 8, small, epilogue(true, false, Activation::Identity, None))),
        softmax(gemm(f16, [ROW, COL, ROW], 8, t16, epilogue(false, true, Activation::GeluErf, None))),
        softmax(gemm(
            types(BF16, F32, BF16),
            [ROW, COL, ROW],
            8,
            t16,
            epilogue(false, false, Activation::Relu, Some(ResidualAt::BeforeActivation)),
        )),
        softmax(gemm(types(F32, F32, F32), [ROW, COL, ROW], 4, t32, epilogue(false, true, Activation::Tanh, None))),
    ];
    let example = toolchain().cutlass_dir().join(bolt_codegen::sm80::GEMM_SOFTMAX_EXAMPLE_DIR);
    let (object, specs, symbols) = compile_unit_with("gemm_softmax", specs, &[example]);
    let lib = RawLibrary::open(&link(&object, "libgemm_softmax.so"), &symbols);
    for (spec, symbol) in specs.iter().zip(&symbols) {
        let align = spec.alignment.c as i64;
        let (m, n) = (300, 40 * align);
        let ok = BoltGemmProblem::packed(m, n, 64 * align, spec.layouts);
        let p = &ok as *const BoltGemmProblem as *const c_void;
        lib.check_set_up(symbol, p, &fake_args());
        // D, then the row maxima and sums of each column tile, each piece 256-byte aligned.
        let TileConfig::Sm80(tile) = spec.tile else { unreachable!() };
        let up = |x: i64| (x + 255) / 256 * 256;
        let tiles_n = (n + tile.threadblock[1] as i64 - 1) / tile.threadblock[1] as i64;
        let expect = up(m * n * spec.types.output.size_bytes() as i64) + 2 * up(m * tiles_n * 4);
        assert_eq!(lib.workspace_size(symbol, p) as i64, expect, "{symbol}");
        let ldb = if spec.layouts[1] == ROW { n + align } else { ok.ldb };
        let ragged = BoltGemmProblem { n: n + 1, ldb, ldd: n + align, ldc: n + align, ..ok };
        let q = &ragged as *const BoltGemmProblem as *const c_void;
        assert_eq!(
            lib.can_implement(symbol, q),
            Status::MisalignedOperand,
            "{symbol}: N not a whole number of vectors"
        );
        let batched = BoltGemmProblem { batch: 2, ..ok };
        let q = &batched as *const BoltGemmProblem as *const c_void;
        assert_eq!(lib.can_implement(symbol, q), Status::UnsupportedProblem, "{symbol}");
    }
}

/// Links `object` into the shared library `name` beside it (static cudart, every symbol
/// resolved), as the builder does.
fn link(object: &Path, name: &str) -> PathBuf {
    let library = object.with_file_name(name);
    let link = Command::new(toolchain().nvcc())
        .args(["-shared", "-cudart", "static", "-Xlinker", "--no-undefined", "-o"])
        .arg(&library)
        .arg(object)
        .output()
        .unwrap();
    assert!(link.status.success(), "link: {}", String::from_utf8_lossy(&link.stderr));
    library
}

/// Links the variants into a library and checks what its kernels answer on the host (no GPU):
/// CUTLASS's can_implement through the ABI, workspace sizes (serial split-K needs one, sized by
/// the problem), and initialize/update/launch refusing before any CUDA call.
fn check_host_abi(object: &Path, symbols: &[String], specs: &[KernelSpec]) {
    let lib = RawLibrary::open(&link(object, "libvariants.so"), symbols);
    let mut split_k = 0;
    for (spec, symbol) in specs.iter().zip(symbols) {
        let align = spec.alignment.a.max(spec.alignment.c) as i64;
        match spec.family {
            Family::GemmSoftmax => unreachable!("compiled by gemm_softmax"),
            Family::Gemm | Family::BatchedGemm => {
                let batched = spec.family == Family::BatchedGemm;
                let mut ok = BoltGemmProblem::packed(256, 128, 64 * align, spec.layouts);
                if batched {
                    ok.batch = 3;
                }
                let p = &ok as *const BoltGemmProblem as *const c_void;
                lib.check_set_up(symbol, p, &fake_args());
                let ws = lib.workspace_size(symbol, p);
                let TileConfig::Sm80(tile) = spec.tile else { unreachable!() };
                if tile.split_k > 1 {
                    split_k += 1;
                    assert!(ws > 0, "{symbol}: serial split-K needs semaphores");
                    let bigger = BoltGemmProblem::packed(1024, 1024, 64 * align, spec.layouts);
                    let big_ws = lib.workspace_size(symbol, &bigger as *const BoltGemmProblem as *const c_void);
                    assert!(big_ws > ws, "{symbol}: the workspace grows with the problem ({ws} -> {big_ws})");
                } else {
                    assert_eq!(ws, 0, "{symbol}");
                }
                let other_batch = BoltGemmProblem { batch: 2, ..ok };
                let expect = if batched { Status::Ok } else { Status::UnsupportedProblem };
                let q = &other_batch as *const BoltGemmProblem as *const c_void;
                assert_eq!(lib.can_implement(symbol, q), expect, "{symbol}");
            }
            Family::Conv2dFprop(f) => {
                let c = 8 * align as i32;
                let (groups, k) = match f.groups {
                    GroupMode::Depthwise => (c, c),
                    GroupMode::SingleGroup | GroupMode::MultipleGroup => (2, 2 * c),
                    GroupMode::None => (1, 2 * c),
                };
                let c = if groups == 2 { 2 * c } else { c };
                let ok = BoltConv2dProblem {
                    n: 2,
                    h: 16,
                    w: 16,
                    c,
                    k,
                    r: 3,
                    s: 3,
                    p: 16,
                    q: 16,
                    pad_h: 1,
                    pad_w: 1,
                    stride_h: 1,
                    stride_w: 1,
                    dilation_h: 1,
                    dilation_w: 1,
                    groups,
                };
                let p = &ok as *const BoltConv2dProblem as *const c_void;
                lib.check_set_up(symbol, p, &fake_args());
            }
        }
    }
    assert!(split_k >= 2, "the variants include serial split-K GEMMs");
}
