//! The direct depthwise convolution kernel ([`DirectTile`]): Bolt's own CUDA template for
//! depthwise convs (groups = C = K), rendered from the same [`KernelSpec`] as the implicit-GEMM
//! kernels and behind the same C ABI (`BoltConv2dProblem`, `BoltArgs`), so the planner, the
//! artifact and the runtime treat it as one more conv candidate.
//!
//! Why: CUTLASS 2.x runs depthwise convs as a SIMT implicit GEMM with scalar accesses and a
//! 2-stage pipeline; on an H100 those took 9.2 of MobileNetV2's 10.5 ms. A depthwise conv has
//! no reduction for tensor cores (one input channel per output channel) and reads each input
//! byte R·S times from cache, so the direct form, vector loads along channels and f32 FMAs on
//! the CUDA cores, is bounded by memory traffic instead.
//!
//! The epilogue tree is evaluated per element ([`epilogue_statements`]), so every epilogue the
//! planner fuses (bias, residual, any activation) runs here, not only CUTLASS's functors.
//! The kernel's body is a template on its thread (`bolt_detail::DeviceThread` on the device):
//! codegen/tests/depthwise.rs runs the operator's own launch emulated on the host
//! (`bolt_host_launch.h`) and compares it with [`crate::epilogue::Expr::eval`] over a direct loop.

use serde::Serialize;

use crate::epilogue::{BinaryOp, Expr, Scalar};
use crate::render::RenderError;
use crate::spec::{DirectTile, KernelSpec, TileConfig};
use crate::stitch::UnaryFn;

pub const TEMPLATE: &str = "depthwise_direct.cu.tera";

/// Headers the unit needs: CUTLASS's numeric types and aligned arrays, no CUTLASS kernel.
pub fn includes() -> Vec<&'static str> {
    vec!["cmath", "cutlass/cutlass.h", "cutlass/half.h", "cutlass/bfloat16.h", "cutlass/array.h"]
}

#[derive(Serialize)]
struct Context {
    symbol: String,
    element_in: &'static str,
    element_out: &'static str,
    vector: u32,
    pixels: u32,
    formula: String,
    /// `float tN = ...;` lines computing the epilogue from `acc`, `alpha`, `beta`, `source`
    /// and `bias`; the value is `result`.
    statements: Vec<String>,
    result: String,
    reads_source: bool,
    reads_bias: bool,
}

/// The template and its context for a [`DirectTile`] spec (validated by the caller).
pub fn context(spec: &KernelSpec, symbol: &str) -> Result<(&'static str, tera::Context), RenderError> {
    let TileConfig::Direct(DirectTile { vector, pixels }) = spec.tile else {
        return Err(RenderError::Unsupported {
            field: "tile",
            reason: "the direct template takes a DirectTile".into(),
        });
    };
    crate::validate::validate(spec).map_err(|e| RenderError::Unsupported { field: "tile", reason: e.to_string() })?;
    let mut statements = Vec::new();
    let result = epilogue_statements(&spec.epilogue.expr, &mut statements);
    let ctx = Context {
        symbol: symbol.to_string(),
        element_in: spec.types.input.cpp(),
        element_out: spec.types.output.cpp(),
        vector,
        pixels,
        formula: spec.epilogue.name(),
        statements,
        result,
        reads_source: spec.epilogue.expr.reads_source(),
        reads_bias: spec.epilogue.expr.reads_bias(),
    };
    Ok((TEMPLATE, crate::render::to_context(&ctx)?))
}

/// Lowers an epilogue tree to f32 C++ statements, one temporary per node (an activation's
/// C++ may name its argument several times), returning the expression of the root. Leaves are
/// the kernel's locals `acc`, `alpha`, `beta`, `source`, `bias`.
pub fn epilogue_statements(e: &Expr, out: &mut Vec<String>) -> String {
    let value = match e {
        Expr::Acc => return "acc".into(),
        Expr::Scalar(Scalar::Alpha) => return "alpha".into(),
        Expr::Scalar(Scalar::Beta) => return "beta".into(),
        Expr::Source => return "source".into(),
        Expr::ColumnBias => return "bias".into(),
        Expr::Binary(op, a, b) => {
            let (a, b) = (epilogue_statements(a, out), epilogue_statements(b, out));
            match op {
                BinaryOp::Add => format!("{a} + {b}"),
                BinaryOp::Mul => format!("{a} * {b}"),
            }
        }
        Expr::Activation(f, x) => {
            let x = epilogue_statements(x, out);
            UnaryFn::Activation(*f).cpp(&x)
        }
    };
    let name = format!("t{}", out.len());
    out.push(format!("float const {name} = {value};"));
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epilogue::{Activation, Epilogue, NormalForm};

    #[test]
    fn an_epilogue_tree_becomes_one_temporary_per_node() {
        let e = Epilogue::new(NormalForm {
            beta_source: false,
            bias: true,
            activation: Activation::Clip { min: 0.0.into(), max: 6.0.into() },
            residual: None,
        })
        .unwrap();
        let mut lines = Vec::new();
        let root = epilogue_statements(&e.expr, &mut lines);
        assert_eq!(
            lines,
            [
                "float const t0 = alpha * acc;",
                "float const t1 = t0 + bias;",
                "float const t2 = fminf(fmaxf(t1, 0e0f), 6e0f);"
            ]
        );
        assert_eq!(root, "t2");
    }
}
