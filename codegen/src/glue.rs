//! Glue kernels the plan needs around the CUTLASS kernels: layout transposes (NCHW <-> NHWC),
//! channel padding of NHWC activations (to the kernels' alignment, 8 or 4), and casts between
//! f32 and f16/bf16. One typed spec per family, one template (`templates/glue.cu.tera`), and
//! the same C ABI as every kernel (`BoltGlueProblem`, `BoltGlueArgs`; no workspace).
//!
//! A glue spec says what a kernel converts; the shapes come at run time in the problem.

use serde::{Deserialize, Serialize};

use crate::render::RenderError;
use crate::spec::Element;

/// NCHW <-> NHWC of a 4-D activation, keeping the element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TransposeSpec {
    pub direction: Direction,
    pub element: Element,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    NchwToNhwc,
    NhwcToNchw,
}

/// NHWC channels `c` -> `c_padded` (a multiple of `alignment`), the extra channels zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PadSpec {
    pub element: Element,
    /// 8 (16-bit elements) or 4 (f32): the kernels' vector width.
    pub alignment: u32,
}

/// Element-wise conversion (round to nearest even), any layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CastSpec {
    pub from: Element,
    pub to: Element,
}

/// One glue kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GlueSpec {
    Transpose(TransposeSpec),
    PadChannels(PadSpec),
    Cast(CastSpec),
}

/// Why a glue spec is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GlueRejection {
    #[error("pad_channels alignment {0}: the kernels take 2, 4 or 8 elements")]
    Alignment(u32),
    #[error("cast from {0:?} to itself: nothing to do")]
    SameType(Element),
    #[error("cast {from:?} -> {to:?}: casts go between f32 and f16/bf16")]
    NotViaF32 { from: Element, to: Element },
}

pub fn validate(spec: &GlueSpec) -> Result<(), GlueRejection> {
    match *spec {
        GlueSpec::Transpose(_) => Ok(()),
        GlueSpec::PadChannels(p) if ![2, 4, 8].contains(&p.alignment) => Err(GlueRejection::Alignment(p.alignment)),
        GlueSpec::PadChannels(_) => Ok(()),
        GlueSpec::Cast(c) if c.from == c.to => Err(GlueRejection::SameType(c.from)),
        GlueSpec::Cast(c) if c.from != Element::F32 && c.to != Element::F32 => {
            Err(GlueRejection::NotViaF32 { from: c.from, to: c.to })
        }
        GlueSpec::Cast(_) => Ok(()),
    }
}

impl GlueSpec {
    /// (template's op name, input element, output element).
    fn parts(&self) -> (&'static str, Element, Element) {
        match *self {
            GlueSpec::Transpose(t) => match t.direction {
                Direction::NchwToNhwc => ("nchw_to_nhwc", t.element, t.element),
                Direction::NhwcToNchw => ("nhwc_to_nchw", t.element, t.element),
            },
            GlueSpec::PadChannels(p) => ("pad_channels", p.element, p.element),
            GlueSpec::Cast(c) => ("cast", c.from, c.to),
        }
    }

    /// What a problem's output holds for this kernel: the problem with `c_padded` set to
    /// `c` rounded up to the alignment (padding kernels) or to `c`.
    pub fn problem(&self, n: i64, c: i64, h: i64, w: i64) -> crate::abi::BoltGlueProblem {
        let c_padded = match self {
            GlueSpec::PadChannels(p) => (c + p.alignment as i64 - 1) / p.alignment as i64 * p.alignment as i64,
            _ => c,
        };
        crate::abi::BoltGlueProblem { n, c, h, w, c_padded }
    }
}

/// A readable unique symbol, e.g. `bolt_glue_nchw_to_nhwc_f16`, `bolt_glue_pad_channels_f16_a8`,
/// `bolt_glue_cast_f32_bf16`.
pub fn symbol_for(spec: &GlueSpec) -> String {
    let (op, x, y) = spec.parts();
    match spec {
        GlueSpec::PadChannels(p) => format!("bolt_glue_{op}_{}_a{}", x.name(), p.alignment),
        GlueSpec::Cast(_) => format!("bolt_glue_{op}_{}_{}", x.name(), y.name()),
        GlueSpec::Transpose(_) => format!("bolt_glue_{op}_{}", x.name()),
    }
}

#[derive(Serialize)]
struct Context<'a> {
    symbol: &'a str,
    summary: String,
    op: &'static str,
    element_x: &'static str,
    element_y: &'static str,
    alignment: u32,
}

pub const TEMPLATE: &str = "glue.cu.tera";

/// Headers a unit with glue kernels needs (the element types and `cutlass::Status`).
pub fn includes() -> [&'static str; 3] {
    ["cutlass/cutlass.h", "cutlass/half.h", "cutlass/bfloat16.h"]
}

/// One glue kernel's block (relies on the unit prologue, like [`crate::render::render`]).
pub fn render(spec: &GlueSpec, symbol: &str) -> Result<String, RenderError> {
    crate::render::check_symbol(symbol)?;
    validate(spec).map_err(|r| RenderError::Unsupported { field: "glue", reason: r.to_string() })?;
    let (op, x, y) = spec.parts();
    let context = Context {
        symbol,
        summary: serde_json::to_string(spec).expect("glue spec serialises"),
        op,
        element_x: x.cpp(),
        element_y: y.cpp(),
        alignment: match spec {
            GlueSpec::PadChannels(p) => p.alignment,
            _ => 1,
        },
    };
    crate::render::render_template(TEMPLATE, &crate::render::to_context(&context)?)
}

/// Glue kernels as one `.cu` unit: the shared prologue, then each block.
pub fn render_unit(kernels: &[(&GlueSpec, &str)]) -> Result<String, RenderError> {
    crate::render::assemble_unit(kernels, &includes(), render)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_validate_name_and_size_their_problems() {
        let pad = GlueSpec::PadChannels(PadSpec { element: Element::F16, alignment: 8 });
        assert_eq!(symbol_for(&pad), "bolt_glue_pad_channels_f16_a8");
        assert_eq!(pad.problem(1, 3, 224, 224).c_padded, 8);
        assert_eq!(pad.problem(1, 16, 2, 2).c_padded, 16);
        let t = GlueSpec::Transpose(TransposeSpec { direction: Direction::NchwToNhwc, element: Element::F32 });
        assert_eq!(symbol_for(&t), "bolt_glue_nchw_to_nhwc_f32");
        assert_eq!(t.problem(2, 3, 4, 5).c_padded, 3);
        let cast = GlueSpec::Cast(CastSpec { from: Element::F32, to: Element::BF16 });
        assert_eq!(symbol_for(&cast), "bolt_glue_cast_f32_bf16");
        assert!(validate(&cast).is_ok());
        assert_eq!(
            validate(&GlueSpec::Cast(CastSpec { from: Element::F16, to: Element::F16 })),
            Err(GlueRejection::SameType(Element::F16))
        );
        assert!(validate(&GlueSpec::Cast(CastSpec { from: Element::F16, to: Element::BF16 })).is_err());
        assert!(validate(&GlueSpec::PadChannels(PadSpec { element: Element::F16, alignment: 3 })).is_err());
        assert_eq!(serde_json::to_string(&cast).unwrap(), r#"{"cast":{"from":"F32","to":"BF16"}}"#);
    }
}
