//! sm90 (CUTLASS 3.x) kernels: golden renders of representative specs, and nvcc compiles of a
//! representative set for sm_90a (no GPU needed). Every sm90 kernel costs ~45 s and ~3-5 GB of
//! memory in nvcc, so the compile test builds 6 kernels in 2 translation units, one after the
//! other. It needs the toolchain (`bolt-toolchain install`) and fails without it.
//!
//! `BOLT_BLESS=1 cargo test -p bolt-codegen --test compile_sm90 golden` rewrites the goldens.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

mod abi_support;

use abi_support::{fake_args, RawLibrary};
use bolt_codegen::abi::{BoltArgs, BoltConv2dProblem, BoltGemmProblem, Status};
use bolt_codegen::epilogue::{Activation, Epilogue, Expr, NormalForm, ResidualAt};
use bolt_codegen::render::{render, render_unit, RenderError};
use bolt_codegen::sm90::Sm90Error;
use bolt_codegen::spec::*;
use bolt_cutlass::{Arch as NvccArch, Toolchain};

fn form(beta_source: bool, bias: bool, activation: Activation, residual: Option<ResidualAt>) -> Epilogue {
    Epilogue::new(NormalForm { beta_source, bias, activation, residual }).unwrap()
}

fn spec(family: Family, kernel: KernelSchedule, tile: [u32; 3], cluster: [u32; 3], epilogue: Epilogue) -> KernelSpec {
    KernelSpec {
        family,
        arch: Arch::Sm90,
        types: Types { input: Element::F16, accumulator: Element::F32, output: Element::F16 },
        layouts: [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor],
        alignment: Alignment { a: 8, b: 8, c: 8 },
        tile: TileConfig::Sm90(Sm90Tile { tile, cluster, kernel, epilogue: EpilogueSchedule::Tma }),
        epilogue,
    }
}

fn sm90_tile(s: &KernelSpec) -> Sm90Tile {
    match s.tile {
        TileConfig::Sm90(t) => t,
        _ => unreachable!(),
    }
}

fn with_epilogue_schedule(mut s: KernelSpec, e: EpilogueSchedule) -> KernelSpec {
    if let TileConfig::Sm90(t) = &mut s.tile {
        t.epilogue = e;
    }
    s
}

use KernelSchedule::{StreamK, TmaWarpSpecializedCooperative as Coop, TmaWarpSpecializedPingpong as Pingpong};

const CONV: Family = Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups: GroupMode::None, analytic: false });

/// The representative set: (name, spec). Together: cooperative, ping-pong and stream-K kernels;
/// plain, bias + GELU(erf), bias + ReLU + residual-after, parameterised activations (through EVT
/// arguments and in the no-smem thread op), beta*C; one batched bf16 GEMM with transposed
/// operands; a no-smem epilogue with 2-element aligned, column-major D; one conv.
fn representative() -> Vec<(&'static str, KernelSpec)> {
    use Activation::*;
    let mut batched = spec(
        Family::BatchedGemm,
        Coop,
        [128, 64, 64],
        [1, 1, 1],
        form(true, false, HardSigmoid { alpha: 0.2.into(), beta: 0.5.into() }, None),
    );
    batched.types = Types { input: Element::BF16, accumulator: Element::F32, output: Element::BF16 };
    batched.layouts = [Layout::ColumnMajor, Layout::RowMajor, Layout::RowMajor];
    let clip = Clip { min: 0.0.into(), max: 6.0.into() };
    let mut nosmem = with_epilogue_schedule(
        spec(
            Family::Gemm,
            Pingpong,
            [64, 128, 64],
            [1, 1, 1],
            form(false, true, clip, Some(ResidualAt::AfterActivation)),
        ),
        EpilogueSchedule::NoSmem,
    );
    nosmem.alignment.c = 2;
    nosmem.layouts[2] = Layout::ColumnMajor;
    vec![
        ("gemm_coop_plain", spec(Family::Gemm, Coop, [128, 128, 64], [1, 2, 1], Epilogue::plain())),
        (
            "gemm_pingpong_bias_gelu",
            spec(Family::Gemm, Pingpong, [64, 128, 64], [2, 1, 1], form(false, true, GeluErf, None)),
        ),
        (
            "gemm_streamk_bias_relu_res",
            spec(
                Family::Gemm,
                StreamK,
                [128, 128, 64],
                [1, 1, 1],
                form(false, true, Relu, Some(ResidualAt::AfterActivation)),
            ),
        ),
        ("bgemm_coop_bf16_betac_hardsigmoid", batched),
        ("gemm_pingpong_nosmem_bias_clip_res", nosmem),
        (
            "conv_bias_silu_res",
            spec(CONV, Coop, [128, 128, 64], [1, 1, 1], form(false, true, Silu, Some(ResidualAt::BeforeActivation))),
        ),
    ]
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

#[test]
fn golden_renders() {
    let bless = std::env::var_os("BOLT_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, spec) in representative() {
        let symbol = format!("bolt_sm90_{name}");
        let rendered = render(&spec, &symbol).unwrap_or_else(|e| panic!("{name}: {e}"));
        let path = golden_dir().join(format!("sm90_{name}.cu"));
        if bless {
            std::fs::create_dir_all(golden_dir()).unwrap();
            std::fs::write(&path, &rendered).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(rendered.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(stale.is_empty(), "renders differ from goldens (BOLT_BLESS=1 rewrites them): {stale:#?}");
}

/// The unit prologue's ABI helpers use CUTLASS types, so the sm90 headers must be hoisted into
/// it (`sm90::includes`), before any kernel block.
#[test]
fn units_include_the_sm90_headers_first() {
    for (name, spec) in representative() {
        let unit = render_unit(&[(&spec, "k")]).unwrap();
        let helpers = unit.find("namespace bolt_detail").expect("the prologue defines bolt_detail");
        for header in bolt_codegen::sm90::includes(&spec) {
            let at = unit.find(&format!("#include <{header}>"));
            assert!(at.is_some_and(|at| at < helpers), "{name}: <{header}> is not included before bolt_detail");
        }
    }
}

#[test]
fn arbitrary_trees_lower_to_evts() {
    // Outside the normal form: relu(acc * bias) + beta * C. The EVT follows the tree.
    let expr = Expr::plus(
        Expr::act(Activation::Relu, Expr::times(Expr::Acc, Expr::ColumnBias)),
        Expr::times(Expr::Scalar(bolt_codegen::epilogue::Scalar::Beta), Expr::Source),
    );
    let s = spec(Family::Gemm, Coop, [128, 128, 64], [1, 1, 1], Epilogue { expr });
    let out = render(&s, "odd").unwrap();
    assert!(out.contains("Sm90EVT<Sm90Compute<cutlass::plus, ElementD, ElementCompute, RoundStyle>"), "{out}");
    assert!(out.contains("Sm90Compute<cutlass::epilogue::thread::ReLu, ElementCompute"), "{out}");
    assert!(out.contains("using ElementC = cutlass::half_t;"));

    // A bare leaf is converted through an identity node.
    let s = spec(Family::Gemm, Coop, [128, 128, 64], [1, 1, 1], Epilogue { expr: Expr::Acc });
    let out = render(&s, "acc_only").unwrap();
    assert!(out.contains("Sm90EVT<Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, ElementCompute, RoundStyle>,\n        Sm90AccFetch>"), "{out}");
    assert!(out.contains("using ElementC = void;"));
}

#[test]
fn rejects_what_cutlass_cannot_build() {
    let plain = || spec(Family::Gemm, Coop, [128, 128, 64], [1, 1, 1], Epilogue::plain());
    let rejected = |s: KernelSpec| match render(&s, "k") {
        Err(RenderError::Sm90(e)) => e,
        other => panic!("expected an sm90 rejection, got {:?}", other.map(|_| "a render")),
    };
    // Cooperative needs tile M >= 128.
    let mut s = plain();
    s.tile = TileConfig::Sm90(Sm90Tile {
        tile: [64, 128, 64],
        cluster: [1, 1, 1],
        kernel: Coop,
        epilogue: EpilogueSchedule::Tma,
    });
    assert!(matches!(rejected(s), Sm90Error::Rejected(_)));
    // TMA needs 16-byte alignment of A.
    let mut s = plain();
    s.alignment.a = 4;
    assert!(matches!(rejected(s), Sm90Error::Rejected(_)));
    // The TMA epilogue needs 16-byte aligned C/D; the no-smem one does not.
    let mut s = plain();
    s.alignment.c = 2;
    assert!(matches!(rejected(s.clone()), Sm90Error::Rejected(_)));
    assert!(render(&with_epilogue_schedule(s, EpilogueSchedule::NoSmem), "k").is_ok());
    // Convs have no groups, one schedule and the TMA epilogue only.
    let grouped = Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups: GroupMode::Depthwise, analytic: false });
    assert!(matches!(
        rejected(spec(grouped, Coop, [128, 128, 64], [1, 1, 1], Epilogue::plain())),
        Sm90Error::Rejected(_)
    ));
    assert!(matches!(
        rejected(spec(CONV, Pingpong, [128, 128, 64], [1, 1, 1], Epilogue::plain())),
        Sm90Error::Rejected(_)
    ));
    // An sm80 tile on an sm90 spec.
    let mut s = plain();
    s.tile = TileConfig::Sm80(Sm80Tile {
        threadblock: [128, 128, 32],
        warp: [64, 64, 32],
        instruction: [16, 8, 16],
        stages: 3,
        swizzle: Swizzle::Identity(1),
        split_k: 1,
    });
    assert!(render(&s, "k").is_err());
}

/// Compiles the representative set for sm_90a, sequentially, a few kernels per unit (nvcc parses
/// the CUTLASS headers once per unit). Checks that each kernel's warp-specialized body was
/// built (not CUTLASS's empty stub), then links the units and checks the host side of the ABI
/// (can_implement, argument checks of run), which needs no GPU.
#[test]
fn compiles_representative_kernels_for_sm90a() {
    let tc = Toolchain::discover().unwrap_or_else(|e| panic!("sm90 compile test needs the toolchain: {e}"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compile_sm90");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(bolt_codegen::abi::HEADER_NAME), bolt_codegen::abi::HEADER).unwrap();

    let kernels: Vec<(String, KernelSpec)> =
        representative().into_iter().map(|(name, spec)| (format!("bolt_sm90_{name}"), spec)).collect();
    // Two units of three kernels (nvcc peaks near 5 GB for either: ptxas takes one kernel at a
    // time). The second mixes GEMMs and a conv, whose kernel type must not clash with the GEMM
    // headers.
    let units: [&[usize]; 2] = [&[0, 1, 2], &[3, 4, 5]];
    let mut objects = Vec::new();
    for (i, members) in units.iter().enumerate() {
        let unit: Vec<(&KernelSpec, &str)> = members.iter().map(|&k| (&kernels[k].1, kernels[k].0.as_str())).collect();
        let source = dir.join(format!("unit{i}.cu"));
        std::fs::write(&source, render_unit(&unit).unwrap()).unwrap();
        let object = source.with_extension("o");
        let _ = std::fs::remove_file(&object);
        let compiled = tc
            .compile(&source, &object)
            .arch(NvccArch::Sm90a)
            .include(&dir)
            .ptxas_verbose(true)
            .run()
            .unwrap_or_else(|e| panic!("unit {i}: {e}"));
        eprintln!("unit {i} ({} kernels): {:.1}s", unit.len(), compiled.elapsed.as_secs_f64());
        let bodies: Vec<_> =
            compiled.kernels.iter().filter(|k| k.name.starts_with("_ZN7cutlass13device_kernel")).collect();
        assert_eq!(bodies.len(), unit.len(), "unit {i}: one CUTLASS kernel per spec: {:?}", compiled.kernels);
        for k in &bodies {
            eprintln!("  {} registers, {} B spill stores", k.registers, k.spill_store_bytes);
            assert_eq!(k.arch, "sm_90a");
            // Without sm_90a features CUTLASS compiles an empty stub with few registers.
            assert!(k.registers >= 128, "{} registers: sm_90a kernel body missing?", k.registers);
        }
        objects.push(object);
    }

    let library = dir.join("libbolt_sm90_test.so");
    let link = std::process::Command::new(tc.nvcc())
        .args(["-shared", "-cudart", "static", "-Xlinker", "--no-undefined", "-o"])
        .arg(&library)
        .args(&objects)
        .output()
        .unwrap();
    assert!(link.status.success(), "link: {}", String::from_utf8_lossy(&link.stderr));
    check_host_abi(&library);
}

/// The ABI's answers that come from the host alone: size, alignment and null checks, CUTLASS's
/// own can_implement, and the set-up functions' refusals (nothing is launched).
fn check_host_abi(library: &Path) {
    let specs: std::collections::HashMap<_, _> = representative().into_iter().collect();
    let symbols: Vec<String> = specs.keys().map(|name| format!("bolt_sm90_{name}")).collect();
    let lib = RawLibrary::open(library, &symbols);
    let can_implement = |name: &str, problem: *const c_void| lib.can_implement(&format!("bolt_sm90_{name}"), problem);
    let gemm = |p: &BoltGemmProblem| p as *const BoltGemmProblem as *const c_void;

    for name in ["gemm_coop_plain", "gemm_pingpong_bias_gelu", "gemm_streamk_bias_relu_res"] {
        let layouts = specs[name].layouts;
        let ok = BoltGemmProblem::packed(256, 512, 128, layouts);
        assert_eq!(can_implement(name, gemm(&ok)), Status::Ok, "{name}");
        assert_eq!(can_implement(name, std::ptr::null()), Status::NullArgument, "{name}");
        let misaligned = BoltGemmProblem::packed(256, 512, 100, layouts);
        assert_eq!(can_implement(name, gemm(&misaligned)), Status::MisalignedOperand, "{name}");
        let empty = BoltGemmProblem::packed(0, 512, 128, layouts);
        assert_eq!(can_implement(name, gemm(&empty)), Status::UnsupportedProblem, "{name}");
        // Answers without a GPU too (stream-K sizes its workspace by the SM count, never taken
        // as 0); the data-parallel schedulers need none.
        let workspace = lib.workspace_size(&format!("bolt_sm90_{name}"), gemm(&ok));
        if sm90_tile(&specs[name]).kernel != StreamK {
            assert_eq!(workspace, 0, "{name}");
        }
        let batched = BoltGemmProblem { batch: 2, ..ok };
        assert_eq!(can_implement(name, gemm(&batched)), Status::UnsupportedProblem, "{name}: not a batched kernel");
        let short_ld = BoltGemmProblem { lda: 64, ..ok };
        assert_eq!(can_implement(name, gemm(&short_ld)), Status::UnsupportedProblem, "{name}");
        // initialize checks its arguments before touching the GPU.
        let symbol = format!("bolt_sm90_{name}");
        lib.check_set_up(&symbol, gemm(&ok), &fake_args());
        if specs[name].epilogue.expr.reads_bias() {
            let mut params = lib.params(&symbol);
            let args = BoltArgs { bias: std::ptr::null(), ..fake_args() };
            assert_eq!(lib.initialize(&symbol, gemm(&ok), &args, workspace, &mut params), Status::NullArgument);
        }
    }

    // Batched, column-major A and row-major B (contiguous extents M and N).
    let name = "bgemm_coop_bf16_betac_hardsigmoid";
    let ok = BoltGemmProblem { batch: 3, ..BoltGemmProblem::packed(256, 512, 128, specs[name].layouts) };
    assert_eq!(can_implement(name, gemm(&ok)), Status::Ok);
    assert_eq!(can_implement(name, gemm(&BoltGemmProblem { batch_stride_a: 4, ..ok })), Status::MisalignedOperand);
    let odd_k = BoltGemmProblem { batch: 3, ..BoltGemmProblem::packed(256, 512, 100, specs[name].layouts) };
    assert_eq!(can_implement(name, gemm(&odd_k)), Status::Ok, "K is not contiguous in either operand");
    let odd_m = BoltGemmProblem { batch: 3, ..BoltGemmProblem::packed(250, 512, 128, specs[name].layouts) };
    assert_eq!(can_implement(name, gemm(&odd_m)), Status::MisalignedOperand);

    // No-smem epilogue with 2-element aligned, column-major D.
    let name = "gemm_pingpong_nosmem_bias_clip_res";
    let ok = BoltGemmProblem::packed(258, 500, 128, specs[name].layouts);
    assert_eq!(can_implement(name, gemm(&ok)), Status::Ok);
    let odd = BoltGemmProblem::packed(257, 500, 128, specs[name].layouts);
    assert_eq!(can_implement(name, gemm(&odd)), Status::MisalignedOperand);

    let name = "conv_bias_silu_res";
    let conv = |p: &BoltConv2dProblem| p as *const BoltConv2dProblem as *const c_void;
    let ok = BoltConv2dProblem {
        n: 2,
        h: 16,
        w: 16,
        c: 64,
        k: 128,
        r: 3,
        s: 3,
        p: 8,
        q: 8,
        pad_h: 1,
        pad_w: 1,
        stride_h: 2,
        stride_w: 2,
        dilation_h: 1,
        dilation_w: 1,
        groups: 1,
    };
    assert_eq!(can_implement(name, conv(&ok)), Status::Ok);
    assert_eq!(can_implement(name, conv(&BoltConv2dProblem { groups: 2, ..ok })), Status::UnsupportedProblem);
    assert_eq!(can_implement(name, conv(&BoltConv2dProblem { p: 9, ..ok })), Status::UnsupportedProblem);
    assert_eq!(can_implement(name, conv(&BoltConv2dProblem { c: 60, ..ok })), Status::MisalignedOperand);
    assert_eq!(can_implement(name, conv(&BoltConv2dProblem { k: 100, ..ok })), Status::MisalignedOperand);
    // The TMA im2col descriptor takes traversal strides up to 8 (CUTLASS only asserts it).
    let stride9 = BoltConv2dProblem { h: 64, w: 64, stride_h: 9, p: 8, q: 8, ..ok };
    assert_eq!(can_implement(name, conv(&BoltConv2dProblem { stride_w: 9, ..stride9 })), Status::UnsupportedProblem);
    let stride8 = BoltConv2dProblem { h: 64, w: 64, stride_h: 8, stride_w: 8, p: 8, q: 8, ..ok };
    assert_eq!(can_implement(name, conv(&stride8)), Status::Ok);
    lib.check_set_up(&format!("bolt_sm90_{name}"), conv(&ok), &fake_args());
}
