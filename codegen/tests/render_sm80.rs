//! Rendering sm80 kernels: golden files for representative specs (BOLT_BLESS=1 rewrites them),
//! symbols, and the errors for specs the sm80 templates cannot build.

mod common;

use bolt_codegen::epilogue::{Activation, Epilogue, Expr, ResidualAt};
use bolt_codegen::render::{render, render_unit, symbol_for, RenderError};
use bolt_codegen::spec::{Family, GroupMode, KernelSpec, Swizzle, TileConfig};
use common::*;

fn golden_cases() -> Vec<(&'static str, KernelSpec)> {
    let f16 = types(F16, F32, F16);
    let big = tile(F16, [128, 128, 32], [64, 64, 32], 3);
    let mut tf32_split = tile(F32, [128, 128, 16], [64, 64, 16], 4);
    tf32_split.split_k = 4;
    tf32_split.swizzle = Swizzle::SplitKSerial;
    let hardsigmoid = Activation::HardSigmoid { alpha: 0.2.into(), beta: 0.5.into() };
    let mut batched =
        gemm(types(F16, F16, F16), [ROW, COL, ROW], 8, tile(F16, [128, 64, 32], [64, 32, 32], 4), Epilogue::plain());
    batched.family = Family::BatchedGemm;
    vec![
        ("gemm_f16_bias_gelu_erf", gemm(f16, [ROW; 3], 8, big, epilogue(false, true, Activation::GeluErf, None))),
        (
            "gemm_bf16_bias_silu_residual_after",
            gemm(
                types(BF16, F32, BF16),
                [ROW, COL, ROW],
                8,
                big,
                epilogue(false, true, Activation::Silu, Some(ResidualAt::AfterActivation)),
            ),
        ),
        ("bgemm_f16_plain", batched),
        (
            "gemm_tf32_splitk_betac_hardsigmoid",
            gemm(types(F32, F32, F32), [COL, ROW, COL], 4, tf32_split, epilogue(true, false, hardsigmoid, None)),
        ),
        (
            "conv_f16_bias_relu_residual_before",
            conv(
                f16,
                features(false, GroupMode::None),
                8,
                big,
                epilogue(false, true, Activation::Relu, Some(ResidualAt::BeforeActivation)),
            ),
        ),
        (
            "conv_group_f16_unity_bias_leaky_relu",
            conv(
                f16,
                features(true, GroupMode::SingleGroup),
                8,
                tile(F16, [64, 64, 32], [32, 32, 32], 3),
                epilogue(false, true, Activation::LeakyRelu { alpha: 0.1.into() }, None),
            ),
        ),
        (
            "conv_depthwise_f16_bias_clip",
            conv(
                types(F16, F16, F16),
                features(false, GroupMode::Depthwise),
                8,
                depthwise_tile(),
                epilogue(false, true, Activation::Clip { min: 0.0.into(), max: 6.0.into() }, None),
            ),
        ),
    ]
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
fn a_kernel_block_defines_the_abi_functions() {
    let (_, spec) = &golden_cases()[0];
    let block = render(spec, "my_kernel").unwrap();
    for f in [
        "BoltStatus my_kernel_can_implement(const void *problem)",
        "size_t my_kernel_workspace_size(const void *problem)",
        "size_t my_kernel_params_size(void)",
        "BoltStatus my_kernel_initialize(\n    const void *problem, const BoltArgs *args, void *workspace, size_t workspace_bytes, void *params,\n    size_t params_bytes, void *stream)",
        "BoltStatus my_kernel_update(void *params, const BoltArgs *args)",
        "BoltStatus my_kernel_launch(void *params, void *stream)",
    ] {
        assert!(block.contains(&format!("extern \"C\" {f}")), "{f}");
    }
    assert!(!block.contains("#include"), "includes belong to the unit prologue");
    // The same kernel twice in a unit is an error; two kernels share one prologue.
    assert!(matches!(render_unit(&[(spec, "k"), (spec, "k")]), Err(RenderError::InvalidSymbol { .. })));
    let unit = render_unit(&[(spec, "k1"), (&golden_cases()[4].1, "k2")]).unwrap();
    assert_eq!(unit.matches("#include \"bolt_kernel.h\"").count(), 1);
    assert_eq!(unit.matches("#include <cutlass/cutlass.h>").count(), 1);
    assert!(unit.contains("k1_launch(") && unit.contains("k2_launch("));
    assert!(matches!(render(spec, "1abc"), Err(RenderError::InvalidSymbol { .. })));
}

#[test]
fn symbols_are_readable_stable_and_unique() {
    let cases = golden_cases();
    let symbol = symbol_for(&cases[0].1);
    assert!(
        symbol.starts_with("bolt_sm80_gemm_f16_f32acc_f16_rrr_a8_128x128x32_64x64x32_s3_bias_gelu_erf_"),
        "{symbol}"
    );
    assert_eq!(symbol.len(), "bolt_sm80_gemm_f16_f32acc_f16_rrr_a8_128x128x32_64x64x32_s3_bias_gelu_erf_".len() + 8);
    assert_eq!(symbol_for(&cases[0].1.clone()), symbol);
    let depthwise = symbol_for(&cases[6].1);
    assert!(
        depthwise.starts_with("bolt_sm80_conv2d_fprop_dw_f16_f16acc_f16_a8_64x64x8_32x32x8_s2_bias_clip_"),
        "{depthwise}"
    );
    // Specs that differ only in what the readable part leaves out still differ.
    let mut other = cases[0].1.clone();
    if let TileConfig::Sm80(t) = &mut other.tile {
        t.swizzle = Swizzle::Identity(4);
    }
    assert_ne!(symbol_for(&other), symbol);
    let mut all: Vec<String> = cases.iter().map(|(_, s)| symbol_for(s)).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), cases.len());
}

/// Which field an error blames.
fn field(e: RenderError) -> String {
    match e {
        RenderError::Unsupported { field, .. } => field.to_string(),
        RenderError::EpilogueNotNormal(_) => "epilogue".into(),
        e => panic!("unexpected error {e}"),
    }
}

#[test]
fn specs_the_templates_cannot_build_are_rejected_with_the_field_at_fault() {
    let f16 = types(F16, F32, F16);
    let base = gemm(f16, [ROW; 3], 8, tile(F16, [128, 128, 32], [64, 64, 32], 3), Epilogue::plain());
    let reject = |spec: KernelSpec| field(render(&spec, "k").expect_err("should be rejected"));
    let with_tile = |f: &dyn Fn(&mut bolt_codegen::spec::Sm80Tile)| {
        let mut s = base.clone();
        if let TileConfig::Sm80(t) = &mut s.tile {
            f(t);
        }
        s
    };

    let odd = Epilogue { expr: Expr::act(Activation::Relu, Expr::times(Expr::Acc, Expr::ColumnBias)) };
    assert_eq!(reject(KernelSpec { epilogue: odd, ..base.clone() }), "epilogue");
    assert_eq!(reject(KernelSpec { types: types(BF16, F16, BF16), ..base.clone() }), "types.accumulator");
    assert_eq!(reject(KernelSpec { types: types(F32, F32, F32), ..base.clone() }), "tile.instruction");
    assert_eq!(reject(with_tile(&|t| t.warp = [48, 64, 32])), "tile.warp");
    assert_eq!(reject(with_tile(&|t| t.stages = 1)), "tile.stages");
    let mut misaligned = base.clone();
    misaligned.alignment.c = 16;
    assert_eq!(reject(misaligned), "alignment.c");
    let mut narrow = base.clone();
    narrow.alignment.a = 1;
    assert_eq!(reject(narrow), "alignment.a");
    let bias = epilogue(false, true, Activation::Relu, None);
    assert_eq!(reject(KernelSpec { layouts: [ROW, ROW, COL], epilogue: bias.clone(), ..base.clone() }), "layouts");
    let mut batched_split = with_tile(&|t| t.split_k = 2);
    batched_split.family = Family::BatchedGemm;
    assert_eq!(reject(batched_split), "tile.split_k");
    let after = epilogue(false, true, Activation::Relu, Some(ResidualAt::AfterActivation));
    assert_eq!(reject(KernelSpec { epilogue: after.clone(), ..with_tile(&|t| t.split_k = 2) }), "tile.split_k");
    let group = conv(f16, features(false, GroupMode::SingleGroup), 8, tile(F16, [64, 64, 32], [32, 32, 32], 3), after);
    assert_eq!(reject(group), "family.groups");
    let depthwise = conv(f16, features(false, GroupMode::Depthwise), 8, tile(F16, [64, 64, 32], [32, 32, 32], 3), bias);
    assert_eq!(reject(depthwise), "tile.instruction");
    let sm90_with_sm80_tile = KernelSpec { arch: bolt_codegen::spec::Arch::Sm90, ..base.clone() };
    assert!(matches!(render(&sm90_with_sm80_tile, "k"), Err(RenderError::Sm90(_))));

    // What is accepted: split-K with an activation applied after the residual (identity first).
    let before = epilogue(false, true, Activation::GeluErf, Some(ResidualAt::BeforeActivation));
    assert!(render(&KernelSpec { epilogue: before, ..with_tile(&|t| t.split_k = 3) }, "k").is_ok());
}

/// Filters past 32 taps (the optimized iterators' masks) render with CUTLASS's analytic
/// iterators; every other conv renders, names and hashes exactly as before the option existed.
#[test]
fn wide_filter_convs_render_with_the_analytic_iterators() {
    let (_, dense) = golden_cases().swap_remove(4);
    let Family::Conv2dFprop(f) = dense.family else { panic!("case 4 is a conv") };
    let wide = KernelSpec {
        family: Family::Conv2dFprop(bolt_codegen::spec::ConvFeatures { analytic: true, ..f }),
        ..dense.clone()
    };
    let text = render(&wide, "wide").unwrap();
    assert!(text.contains("IteratorAlgorithm::kAnalytic") && !text.contains("IteratorAlgorithm::kOptimized"));
    assert!(render(&dense, "dense").unwrap().contains("IteratorAlgorithm::kOptimized"));
    assert!(symbol_for(&wide).starts_with("bolt_sm80_conv2d_fprop_analytic_f16_"), "{}", symbol_for(&wide));
    assert!(!serde_json::to_string(&dense).unwrap().contains("analytic"));
    assert_ne!(symbol_for(&wide), symbol_for(&dense));
}
