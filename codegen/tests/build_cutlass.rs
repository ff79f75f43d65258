//! Real CUTLASS kernels through the whole pipeline: an sm80 GEMM and an sm80 conv2d fprop from
//! the candidate lists, rendered by the templates into one translation unit, compiled, linked,
//! loaded; their `can_implement` (host-only CUTLASS checks) answers without a GPU. Needs the
//! toolchain; ≈15 s of nvcc on 2 cores.

mod build_support;

use bolt_codegen::abi::{BoltConv2dProblem, BoltGemmProblem, ProblemKind, Status};
use bolt_codegen::builder::Templates;
use bolt_codegen::candidates::candidates;
use bolt_codegen::epilogue::{Activation, Epilogue, NormalForm};
use bolt_codegen::loader::KernelLibrary;
use bolt_codegen::spec::*;
use build_support::*;

fn specs() -> Vec<KernelSpec> {
    let types = Types { input: Element::F16, accumulator: Element::F32, output: Element::F16 };
    let alignment = Alignment { a: 8, b: 8, c: 8 };
    let epilogue =
        Epilogue::new(NormalForm { beta_source: false, bias: true, activation: Activation::Relu, residual: None })
            .unwrap();
    let layouts = [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor];
    let gemm = candidates(Arch::Sm80, Family::Gemm, types, alignment);
    let conv_family = Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups: GroupMode::None, analytic: false });
    let conv = candidates(Arch::Sm80, conv_family, types, alignment);
    vec![
        gemm[0].spec(Family::Gemm, types, layouts, alignment, epilogue.clone()),
        conv[0].spec(conv_family, types, layouts, alignment, epilogue),
    ]
}

#[test]
fn real_sm80_gemm_and_conv_build_load_and_answer_can_implement() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let specs = specs();
    let report = builder_with(dir.path().join("out"), cache.clone(), |o| {
        o.sm80_kernels_per_unit = 2;
        o.ptxas_verbose = true;
    })
    .build(&Templates, &specs)
    .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{} kernels in {} units: nvcc {:.1}s compile, {:.1}s link, {:.1}s total",
        report.symbols.len(),
        report.units.len(),
        report.compile_seconds,
        report.link_seconds.unwrap_or_default(),
        report.total_seconds
    );
    assert_eq!(report.symbols.len(), 2);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let resources: Vec<_> = report.units.iter().flat_map(|u| &u.resources).collect();
    assert!(resources.iter().any(|k| k.arch == "sm_80" && k.registers > 0), "ptxas report: {resources:?}");

    let lib = KernelLibrary::open(&report.library).unwrap();
    assert_eq!(lib.kernels().len(), 2);
    for kernel in lib.kernels() {
        assert_eq!(kernel.symbol(), bolt_codegen::render::symbol_for(kernel.spec()));
        assert_eq!(unsafe { kernel.can_implement_raw(std::ptr::null()) }, Status::NullArgument, "{}", kernel.symbol());
        match kernel.problem_kind() {
            ProblemKind::Gemm => {
                let ok = BoltGemmProblem::packed(512, 256, 128, kernel.spec().layouts);
                assert_eq!(kernel.can_implement(&ok), Status::Ok, "{}", kernel.symbol());
                assert_eq!(kernel.workspace_size(&ok), 0);
                // K = 100 breaks the 8-element alignment of A's rows.
                let odd = BoltGemmProblem::packed(512, 256, 100, kernel.spec().layouts);
                assert_eq!(kernel.can_implement(&odd), Status::MisalignedOperand, "{}", kernel.symbol());
            }
            ProblemKind::Conv2d => {
                let ok = BoltConv2dProblem {
                    n: 2,
                    h: 16,
                    w: 16,
                    c: 64,
                    k: 64,
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
                    groups: 1,
                };
                assert_eq!(kernel.can_implement(&ok), Status::Ok, "{}", kernel.symbol());
                let odd = BoltConv2dProblem { c: 3, ..ok };
                assert_ne!(kernel.can_implement(&odd), Status::Ok, "{}", kernel.symbol());
            }
        }
    }

    // Warm: same specs, new build directory, nvcc never runs.
    let warm = builder_with(dir.path().join("warm"), cache, |o| o.sm80_kernels_per_unit = 2)
        .build(&Templates, &specs)
        .unwrap();
    assert_eq!(warm.nvcc_invocations, 0);
    assert_eq!(KernelLibrary::open(&warm.library).unwrap().kernels().len(), 2);
}
