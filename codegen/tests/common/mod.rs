//! Spec builders shared by the sm80 render, compile and host-epilogue tests.
#![allow(dead_code)]

use bolt_codegen::epilogue::{Activation, Epilogue, NormalForm, ResidualAt};
use bolt_codegen::spec::{
    Alignment, Arch, ConvFeatures, Element, Family, GroupMode, KernelSpec, Layout, Sm80Tile, Swizzle, TileConfig, Types,
};

pub const ROW: Layout = Layout::RowMajor;
pub const COL: Layout = Layout::ColumnMajor;

pub fn types(input: Element, accumulator: Element, output: Element) -> Types {
    Types { input, accumulator, output }
}

/// A tensor-op tile for the input type (m16n8k16 for 16-bit inputs, tf32 m16n8k8 for f32).
pub fn tile(input: Element, threadblock: [u32; 3], warp: [u32; 3], stages: u32) -> Sm80Tile {
    let instruction = if input == Element::F32 { [16, 8, 8] } else { [16, 8, 16] };
    Sm80Tile { threadblock, warp, instruction, stages, swizzle: Swizzle::Identity(8), split_k: 1 }
}

/// The SIMT tile CUTLASS's depthwise kernel takes.
pub fn depthwise_tile() -> Sm80Tile {
    Sm80Tile {
        threadblock: [64, 64, 8],
        warp: [32, 32, 8],
        instruction: [1, 1, 1],
        stages: 2,
        swizzle: Swizzle::Identity(1),
        split_k: 1,
    }
}

pub fn epilogue(beta_source: bool, bias: bool, activation: Activation, residual: Option<ResidualAt>) -> Epilogue {
    Epilogue::new(NormalForm { beta_source, bias, activation, residual }).unwrap()
}

pub fn gemm(types: Types, layouts: [Layout; 3], align: u32, tile: Sm80Tile, epilogue: Epilogue) -> KernelSpec {
    KernelSpec {
        family: Family::Gemm,
        arch: Arch::Sm80,
        types,
        layouts,
        alignment: Alignment { a: align, b: align, c: align },
        tile: TileConfig::Sm80(tile),
        epilogue,
    }
}

pub fn conv(types: Types, features: ConvFeatures, align: u32, tile: Sm80Tile, epilogue: Epilogue) -> KernelSpec {
    KernelSpec {
        family: Family::Conv2dFprop(features),
        arch: Arch::Sm80,
        types,
        layouts: [ROW; 3],
        alignment: Alignment { a: align, b: align, c: align },
        tile: TileConfig::Sm80(tile),
        epilogue,
    }
}

pub fn features(unit_stride: bool, groups: GroupMode) -> ConvFeatures {
    ConvFeatures { unit_stride, groups, analytic: false }
}

/// The epilogue forms every activation is combined with in the compile tests.
pub fn forms(activation: Activation) -> Vec<Epilogue> {
    vec![
        epilogue(false, false, activation, None),
        epilogue(false, true, activation, None),
        epilogue(true, false, activation, None),
        epilogue(false, true, activation, Some(ResidualAt::BeforeActivation)),
        epilogue(false, true, activation, Some(ResidualAt::AfterActivation)),
    ]
}

pub const F16: Element = Element::F16;
pub const BF16: Element = Element::BF16;
pub const F32: Element = Element::F32;

/// Compares each `(name, rendered text)` with `tests/golden/<name>.cu`; with BOLT_BLESS=1
/// rewrites the files instead.
pub fn assert_golden(renders: impl IntoIterator<Item = (String, String)>) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let bless = std::env::var_os("BOLT_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, text) in renders {
        let path = dir.join(format!("{name}.cu"));
        if bless {
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let golden = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (BOLT_BLESS=1 writes it)", path.display()));
        if golden != text {
            stale.push(name);
        }
    }
    assert!(
        stale.is_empty(),
        "renders differ from tests/golden/ for {stale:?}; check the diff, then BOLT_BLESS=1 to accept"
    );
}
