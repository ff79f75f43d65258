//! sm90 (Hopper) kernels: CUTLASS 3.x TMA warp-specialized GEMMs (cooperative, ping-pong,
//! stream-K) and implicit-GEMM Conv2d fprop, rendered from `templates/sm90_*.cu.tera`.
//!
//! [`context`] checks that a spec is buildable (rejecting what would fail inside nvcc) and fills the
//! template context. The epilogue tree is lowered here by a recursive walk over [`Expr`]:
//!
//! * TMA epilogue: into an epilogue visitor tree (`Sm90EVT<Sm90Compute<Op>, children...>` with
//!   `Sm90AccFetch`, `Sm90ScalarBroadcast`, `Sm90SrcFetch`, `Sm90RowBroadcast` leaves), and its
//!   nested argument initializer, which mirrors the tree;
//! * no-smem epilogue: into one scalar C++ expression evaluated per element (CUTLASS 3.x offers
//!   EVTs only with the TMA epilogue).

use std::fmt::Write as _;

use tera::Context;

use crate::epilogue::{Activation, BinaryOp, Expr, Scalar};
use crate::spec::{Arch, EpilogueSchedule, Family, KernelSchedule, KernelSpec, Layout, Sm90Tile, TileConfig};

/// Template file names under `templates/`.
pub const GEMM_TEMPLATE: &str = "sm90_gemm.cu.tera";
pub const CONV2D_FPROP_TEMPLATE: &str = "sm90_conv2d_fprop.cu.tera";

/// Helpers every sm90 kernel needs (activation functors CUTLASS lacks), guarded so that several
/// kernels can share a translation unit. Templates emit it through the `prelude` variable.
pub const PRELUDE: &str = include_str!("../../templates/sm90_prelude.cuh");

/// Headers of every sm90 kernel, for the unit prologue (they must precede `bolt_detail`).
pub const INCLUDES: &[&str] = &[
    "limits",
    "cutlass/cutlass.h",
    "cute/tensor.hpp",
    "cutlass/kernel_hardware_info.h",
    "cutlass/epilogue/thread/activation.h",
    "cutlass/epilogue/collective/collective_builder.hpp",
    "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp",
];
pub const GEMM_INCLUDES: &[&str] = &[
    "cutlass/epilogue/collective/epilogue_tensor_broadcast.hpp",
    "cutlass/gemm/collective/collective_builder.hpp",
    "cutlass/gemm/device/gemm_universal_adapter.h",
    "cutlass/gemm/kernel/gemm_universal.hpp",
    "cutlass/gemm/kernel/tile_scheduler.hpp",
];
pub const CONV_INCLUDES: &[&str] = &[
    "cutlass/conv/convnd_problem_shape.hpp",
    "cutlass/conv/collective/collective_builder.hpp",
    "cutlass/conv/device/conv_universal_adapter.hpp",
    "cutlass/conv/kernel/conv_universal.hpp",
];

/// The headers one spec's kernel needs.
pub fn includes(spec: &KernelSpec) -> Vec<&'static str> {
    let family = match spec.family {
        // GemmSoftmax is never rendered for sm90 (validation rejects it).
        Family::Gemm | Family::BatchedGemm | Family::GemmSoftmax => GEMM_INCLUDES,
        Family::Conv2dFprop(_) => CONV_INCLUDES,
    };
    INCLUDES.iter().chain(family).copied().collect()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Sm90Error {
    #[error("not an sm90 spec: {0}")]
    WrongArch(String),
    #[error("rejected sm90 spec: {0}")]
    Rejected(#[from] crate::validate::Rejection),
    #[error("kernel symbol `{0}` is not a C identifier")]
    BadSymbol(String),
}

/// The template and its context for one kernel exporting bolt_kernel.h's functions.
pub fn context(spec: &KernelSpec, symbol: &str) -> Result<(&'static str, Context), Sm90Error> {
    let tile = validate(spec)?;
    if !is_c_identifier(symbol) {
        return Err(Sm90Error::BadSymbol(symbol.into()));
    }
    let expr = &spec.epilogue.expr;
    let tma_epilogue = tile.epilogue == EpilogueSchedule::Tma;
    let reads_source = expr.reads_source();

    let mut ctx = Context::new();
    ctx.insert("prelude", PRELUDE);
    ctx.insert("symbol", symbol);
    ctx.insert("summary", &summary(spec, tile));
    ctx.insert("epilogue_tree", &describe(expr));
    ctx.insert("element_a", spec.types.input.cpp());
    ctx.insert("element_b", spec.types.input.cpp());
    ctx.insert("element_d", spec.types.output.cpp());
    // A void C makes CUTLASS skip the source load entirely.
    ctx.insert("element_c", if reads_source { spec.types.output.cpp() } else { "void" });
    ctx.insert("element_acc", spec.types.accumulator.cpp());
    ctx.insert("align_a", &spec.alignment.a);
    ctx.insert("align_b", &spec.alignment.b);
    ctx.insert("align_c", &spec.alignment.c);
    let [tm, tn, tk] = tile.tile;
    let [cm, cn, ck] = tile.cluster;
    ctx.insert("tile_m", &tm);
    ctx.insert("tile_n", &tn);
    ctx.insert("tile_k", &tk);
    ctx.insert("cluster_m", &cm);
    ctx.insert("cluster_n", &cn);
    ctx.insert("cluster_k", &ck);
    ctx.insert("reads_source", &reads_source);
    ctx.insert("reads_bias", &expr.reads_bias());
    ctx.insert("tma_epilogue", &tma_epilogue);
    if tma_epilogue {
        let evt = lower_evt(expr);
        ctx.insert("evt_type", &evt.ty);
        ctx.insert("evt_args", &evt.args);
    } else {
        ctx.insert("thread_expr", &lower_scalar(expr));
    }

    match spec.family {
        Family::GemmSoftmax => return Err(crate::validate::Rejection::GemmSoftmaxSm80Only.into()),
        Family::Gemm | Family::BatchedGemm => {
            let [la, lb, lc] = spec.layouts;
            let batched = spec.family == Family::BatchedGemm;
            let (kernel, epilogue, scheduler) = match tile.kernel {
                KernelSchedule::TmaWarpSpecializedCooperative => (
                    "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
                    "cutlass::epilogue::TmaWarpSpecializedCooperative",
                    "cutlass::gemm::PersistentScheduler",
                ),
                KernelSchedule::TmaWarpSpecializedPingpong => (
                    "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
                    "cutlass::epilogue::TmaWarpSpecialized",
                    "cutlass::gemm::PersistentScheduler",
                ),
                KernelSchedule::StreamK => (
                    "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
                    "cutlass::epilogue::TmaWarpSpecializedCooperative",
                    "cutlass::gemm::StreamKScheduler",
                ),
            };
            ctx.insert("kernel_schedule", kernel);
            // Used with the TMA epilogue; the no-smem one is assembled in the template.
            ctx.insert("epilogue_schedule", epilogue);
            ctx.insert("tile_scheduler", scheduler);
            ctx.insert("batched", &batched);
            ctx.insert("layout_a", cpp_layout(la));
            ctx.insert("layout_b", cpp_layout(lb));
            ctx.insert("layout_c", cpp_layout(lc));
            // Contiguous extent of each operand: A is M x K, B is K x N, C/D are M x N.
            let pick = |l: Layout, row_major: &str, col_major: &str| match l {
                Layout::RowMajor => row_major.to_string(),
                Layout::ColumnMajor => col_major.to_string(),
            };
            ctx.insert("contiguous_a", &pick(la, "p.k", "p.m"));
            ctx.insert("contiguous_b", &pick(lb, "p.n", "p.k"));
            ctx.insert("contiguous_c", &pick(lc, "p.n", "p.m"));
            // CUTLASS 3.x strides are (M, K, L) for A, (N, K, L) for B and (M, N, L) for C/D.
            let stride = |l: Layout, ld: &str, batch: &str, first_contiguous: bool| {
                let batch = if batched { format!("p.{batch}") } else { "int64_t(0)".into() };
                let (s0, s1) = if (l == Layout::ColumnMajor) == first_contiguous {
                    ("cute::Int<1>{}".to_string(), format!("p.{ld}"))
                } else {
                    (format!("p.{ld}"), "cute::Int<1>{}".to_string())
                };
                format!("cute::make_stride({s0}, {s1}, {batch})")
            };
            ctx.insert("stride_a", &stride(la, "lda", "batch_stride_a", true));
            // B (K x N) seen as N x K: row-major B has N contiguous.
            ctx.insert("stride_b", &stride(lb, "ldb", "batch_stride_b", false));
            ctx.insert("stride_c", &stride(lc, "ldc", "batch_stride_c", true));
            ctx.insert("stride_d", &stride(lc, "ldd", "batch_stride_d", true));
            Ok((GEMM_TEMPLATE, ctx))
        }
        Family::Conv2dFprop(features) => {
            ctx.insert("kernel_schedule", "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90");
            ctx.insert("epilogue_schedule", "cutlass::epilogue::TmaWarpSpecialized");
            ctx.insert("unit_stride", &features.unit_stride);
            Ok((CONV2D_FPROP_TEMPLATE, ctx))
        }
    }
}

/// The spec's sm90 tile, once [`crate::validate`] (which holds every rule about what CUTLASS can
/// build, including the ones this lowering relies on) accepts the spec.
pub fn validate(spec: &KernelSpec) -> Result<&Sm90Tile, Sm90Error> {
    let tile = match (spec.arch, &spec.tile) {
        (Arch::Sm90, TileConfig::Sm90(t)) => t,
        (arch, _) => return Err(Sm90Error::WrongArch(format!("{arch:?} spec with {:?}", spec.tile))),
    };
    crate::validate::validate(spec)?;
    Ok(tile)
}

fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn cpp_layout(l: Layout) -> &'static str {
    match l {
        Layout::RowMajor => "cutlass::layout::RowMajor",
        Layout::ColumnMajor => "cutlass::layout::ColumnMajor",
    }
}

fn summary(spec: &KernelSpec, tile: &Sm90Tile) -> String {
    let [tm, tn, tk] = tile.tile;
    let [cm, cn, ck] = tile.cluster;
    let layouts = match spec.family {
        Family::Conv2dFprop(_) => "nhwc".to_string(),
        _ => spec.layouts.iter().map(|l| if *l == Layout::RowMajor { "r" } else { "c" }).collect(),
    };
    format!(
        "{:?} {:?}->{:?} (acc {:?}) {layouts}, tile {tm}x{tn}x{tk}, cluster {cm}x{cn}x{ck}, {:?} + {:?} epilogue, align {}/{}/{}",
        spec.family,
        spec.types.input,
        spec.types.output,
        spec.types.accumulator,
        tile.kernel,
        tile.epilogue,
        spec.alignment.a,
        spec.alignment.b,
        spec.alignment.c
    )
}

/// The tree in infix form, for the comment above each kernel.
fn describe(e: &Expr) -> String {
    match e {
        Expr::Acc => "acc".into(),
        Expr::Scalar(Scalar::Alpha) => "alpha".into(),
        Expr::Scalar(Scalar::Beta) => "beta".into(),
        Expr::Source => "C".into(),
        Expr::ColumnBias => "bias[col]".into(),
        Expr::Binary(BinaryOp::Add, a, b) => format!("({} + {})", describe(a), describe(b)),
        Expr::Binary(BinaryOp::Mul, a, b) => format!("{} * {}", describe(a), describe(b)),
        Expr::Activation(f, x) => format!("{}{}", f.name(), wrap(&describe(x))),
    }
}

fn wrap(s: &str) -> String {
    if s.starts_with('(') && s.ends_with(')') {
        s.into()
    } else {
        format!("({s})")
    }
}

/// A C++ float literal; infinities (e.g. an unbounded Clip) become numeric_limits.
fn float_literal(v: f32) -> String {
    if v.is_infinite() {
        let sign = if v < 0.0 { "-" } else { "" };
        format!("{sign}std::numeric_limits<float>::infinity()")
    } else {
        // Debug prints the shortest representation that round-trips (e.g. `0.2`, `6.0`, `1e-7`).
        format!("{v:?}f")
    }
}

/// CUTLASS functor template (one type parameter) of an activation, and the initializer of its
/// `Arguments` for parameterised ones.
fn activation_functor(f: &Activation) -> (&'static str, Option<String>) {
    use Activation::*;
    match *f {
        Identity => ("cutlass::epilogue::thread::Identity", None),
        Relu => ("cutlass::epilogue::thread::ReLu", None),
        GeluErf => ("cutlass::epilogue::thread::GELU", None),
        GeluTanh => ("cutlass::epilogue::thread::GELU_taylor", None),
        HardSwish => ("cutlass::epilogue::thread::HardSwish", None),
        HardSigmoid { alpha, beta } => {
            ("bolt_sm90::HardSigmoid", Some(format!("{}, {}", float_literal(alpha.0), float_literal(beta.0))))
        }
        Softplus => ("bolt_sm90::Softplus", None),
        Sigmoid => ("cutlass::epilogue::thread::Sigmoid", None),
        Silu => ("cutlass::epilogue::thread::SiLu", None),
        Tanh => ("cutlass::epilogue::thread::Tanh", None),
        LeakyRelu { alpha } => ("cutlass::epilogue::thread::LeakyReLU", Some(float_literal(alpha.0))),
        Clip { min, max } => {
            ("cutlass::epilogue::thread::Clamp", Some(format!("{}, {}", float_literal(min.0), float_literal(max.0))))
        }
    }
}

/// An epilogue visitor tree: leaves fetch operands, compute nodes apply a functor to their
/// children's outputs.
enum EvtNode {
    Leaf { ty: &'static str, args: &'static str },
    Compute { functor: &'static str, out: &'static str, args: Option<String>, children: Vec<EvtNode> },
}

/// The lowered EVT: its C++ type and the nested initializer of its `Arguments`
/// (`{child args..., node args}` for every compute node).
struct Evt {
    ty: String,
    args: String,
}

fn lower_evt(e: &Expr) -> Evt {
    let mut root = evt_node(e, true);
    if let EvtNode::Leaf { .. } = root {
        // The epilogue stores the root's output: a bare leaf goes through an identity node that
        // converts it to ElementD.
        root = EvtNode::Compute {
            functor: "cutlass::epilogue::thread::Identity",
            out: "ElementD",
            args: None,
            children: vec![root],
        };
    }
    let (mut ty, mut args) = (String::new(), String::new());
    evt_type(&root, 1, &mut ty);
    evt_args(&root, 1, &mut args);
    Evt { ty: format!("    {ty}"), args }
}

/// Interior compute nodes produce `ElementCompute` (f32); the root produces `ElementD`.
/// `x * y + z` becomes one fused multiply-add node.
fn evt_node(e: &Expr, root: bool) -> EvtNode {
    let compute = |functor, args, children: &[&Expr]| EvtNode::Compute {
        functor,
        out: if root { "ElementD" } else { "ElementCompute" },
        args,
        children: children.iter().map(|c| evt_node(c, false)).collect(),
    };
    match e {
        Expr::Acc => EvtNode::Leaf { ty: "Sm90AccFetch", args: "{}" },
        Expr::Scalar(Scalar::Alpha) => EvtNode::Leaf { ty: "Sm90ScalarBroadcast<ElementScalar>", args: "{{alpha}}" },
        Expr::Scalar(Scalar::Beta) => EvtNode::Leaf { ty: "Sm90ScalarBroadcast<ElementScalar>", args: "{{beta}}" },
        Expr::Source => EvtNode::Leaf { ty: "Sm90SrcFetch<ElementC>", args: "{}" },
        // A length-N vector indexed by column is broadcast along the rows: CUTLASS's "row"
        // broadcast (stride 0 along M, 1 along N, 0 between batches).
        Expr::ColumnBias => EvtNode::Leaf {
            ty: "Sm90RowBroadcast<0, TileShape, ElementBias, ElementCompute, Stride<_0, _1, int64_t>, AlignmentBias>",
            args: "{bias, ElementBias(0), {}}",
        },
        Expr::Binary(BinaryOp::Add, xy, z) => match &**xy {
            Expr::Binary(BinaryOp::Mul, x, y) => compute("cutlass::homogeneous_multiply_add", None, &[x, y, z]),
            _ => compute("cutlass::plus", None, &[xy, z]),
        },
        Expr::Binary(BinaryOp::Mul, x, y) => compute("cutlass::multiplies", None, &[x, y]),
        Expr::Activation(f, x) => {
            let (functor, args) = activation_functor(f);
            compute(functor, args, &[x])
        }
    }
}

fn evt_type(n: &EvtNode, depth: usize, out: &mut String) {
    match n {
        EvtNode::Leaf { ty, .. } => out.push_str(ty),
        EvtNode::Compute { functor, out: element, children, .. } => {
            let _ = write!(out, "Sm90EVT<Sm90Compute<{functor}, {element}, ElementCompute, RoundStyle>");
            for child in children {
                let _ = write!(out, ",\n{}", indent(depth + 1));
                evt_type(child, depth + 1, out);
            }
            out.push('>');
        }
    }
}

fn evt_args(n: &EvtNode, depth: usize, out: &mut String) {
    match n {
        EvtNode::Leaf { args, .. } => out.push_str(args),
        EvtNode::Compute { functor, args, children, .. } => {
            out.push('{');
            for child in children {
                let _ = write!(out, "\n{}", indent(depth + 1));
                evt_args(child, depth + 1, out);
                out.push(',');
            }
            let own = args.as_deref().map(|a| format!("{{{a}}}")).unwrap_or_else(|| "{}".into());
            let name = functor.rsplit("::").next().unwrap_or(functor);
            let _ = write!(out, "\n{}{own}  // {name}\n{}}}", indent(depth + 1), indent(depth));
        }
    }
}

fn indent(depth: usize) -> String {
    "    ".repeat(depth)
}

/// Lowers `e` into one f32 C++ expression over `acc`, `alpha`, `beta`, `source` and `bias`
/// (the no-smem epilogue's per-element thread op).
fn lower_scalar(e: &Expr) -> String {
    match e {
        Expr::Acc => "acc".into(),
        Expr::Scalar(Scalar::Alpha) => "alpha".into(),
        Expr::Scalar(Scalar::Beta) => "beta".into(),
        Expr::Source => "source".into(),
        Expr::ColumnBias => "bias".into(),
        Expr::Binary(BinaryOp::Add, a, b) => format!("({} + {})", lower_scalar(a), lower_scalar(b)),
        Expr::Binary(BinaryOp::Mul, a, b) => format!("({} * {})", lower_scalar(a), lower_scalar(b)),
        Expr::Activation(f, x) => {
            let (functor, args) = activation_functor(f);
            match args {
                Some(a) => format!("{functor}<float>{{}}({}, {a})", lower_scalar(x)),
                None => format!("{functor}<float>{{}}({})", lower_scalar(x)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epilogue::{Epilogue, EvalEnv, NormalForm, ResidualAt};

    const XS: [f64; 8] = [-3.5, -1.0, -0.25, 0.0, 0.3, 1.0, 2.5, 7.0];

    /// Runs the activation functors (scalar and `Array` forms, with the `Arguments` initializers
    /// the EVT uses) and the no-smem epilogue expressions on the host, and compares them with
    /// the Rust reference. Compiles a small host program with nvcc (no GPU needed).
    #[test]
    fn lowered_epilogue_math_matches_the_reference() {
        let tc = bolt_cutlass::Toolchain::discover().unwrap_or_else(|e| panic!("needs the toolchain: {e}"));
        let mut activations = Activation::all();
        activations.push(Activation::Clip { min: f32::NEG_INFINITY.into(), max: 6.0.into() });
        activations.push(Activation::HardSigmoid { alpha: 0.1.into(), beta: 0.6.into() });
        activations.push(Activation::LeakyRelu { alpha: 0.3.into() });

        let mut body = String::new();
        let mut expected = Vec::new();
        let xs = XS.map(|x| format!("{x:?}f")).join(", ");
        for f in &activations {
            let (functor, args) = activation_functor(f);
            let call = match &args {
                Some(a) => {
                    format!("{functor}<cutlass::Array<float, 8>>{{}}(x, typename {functor}<float>::Arguments{{{a}}})")
                }
                None => format!("{functor}<cutlass::Array<float, 8>>{{}}(x)"),
            };
            let _ = writeln!(body, "  {{ cutlass::Array<float, 8> x; float v[8] = {{{xs}}};");
            let _ = writeln!(body, "    for (int i = 0; i < 8; ++i) x[i] = v[i];");
            let _ = writeln!(body, "    auto y = {call};");
            let _ = writeln!(body, "    for (int i = 0; i < 8; ++i) std::printf(\"%.9g\\n\", double(y[i])); }}");
            expected.extend(XS.map(|x| (format!("{} (EVT functor) at {x}", f.name()), f.apply(x))));
        }
        // Whole trees in the no-smem thread op's scalar form.
        let env = EvalEnv { acc: 0.0, alpha: 1.5, beta: 0.5, source: -0.75, bias: 0.25 };
        for f in &activations {
            for (beta_source, residual) in
                [(true, None), (false, Some(ResidualAt::AfterActivation)), (false, Some(ResidualAt::BeforeActivation))]
            {
                let e = Epilogue::new(NormalForm { beta_source, bias: true, activation: *f, residual }).unwrap();
                for x in XS {
                    let _ = writeln!(
                        body,
                        "  {{ float acc = {x:?}f, alpha = {:?}f, beta = {:?}f, source = {:?}f, bias = {:?}f;\n    std::printf(\"%.9g\\n\", double({})); }}",
                        env.alpha,
                        env.beta,
                        env.source,
                        env.bias,
                        lower_scalar(&e.expr)
                    );
                    expected.push((format!("{} (no-smem) at {x}", e.name()), e.expr.eval(&EvalEnv { acc: x, ..env })));
                }
            }
        }
        let source = format!(
            "#include <cstdio>\n#include <limits>\n#include <cutlass/cutlass.h>\n#include <cutlass/array.h>\n\
             #include <cutlass/functional.h>\n#include <cutlass/kernel_hardware_info.h>\n#include <cutlass/epilogue/thread/activation.h>\n{PRELUDE}\n\
             int main() {{\n{body}  return 0;\n}}\n"
        );

        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/sm90_host_math");
        std::fs::create_dir_all(&dir).unwrap();
        let (src, exe) = (dir.join("math.cu"), dir.join("math"));
        std::fs::write(&src, source).unwrap();
        let [include, util] = tc.cutlass_include_dirs();
        let out = std::process::Command::new(tc.nvcc())
            .args(["-std=c++17", "-O2", "--expt-relaxed-constexpr", "-arch=sm_80", "-o"])
            .arg(&exe)
            .arg(&src)
            .arg(format!("-I{}", include.display()))
            .arg(format!("-I{}", util.display()))
            .output()
            .unwrap();
        assert!(out.status.success(), "nvcc: {}", String::from_utf8_lossy(&out.stderr));
        let run = std::process::Command::new(&exe).output().unwrap();
        assert!(run.status.success());
        let got: Vec<f64> = String::from_utf8_lossy(&run.stdout).lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(got.len(), expected.len());
        for ((what, want), got) in expected.iter().zip(got) {
            // f32 math with CUTLASS's fast tanh/exp approximations.
            assert!((got - want).abs() <= 2e-3 * (1.0 + want.abs()), "{what}: got {got}, want {want}");
        }
    }

    #[test]
    fn float_literals_round_trip() {
        assert_eq!(float_literal(0.2), "0.2f");
        assert_eq!(float_literal(6.0), "6.0f");
        assert_eq!(float_literal(1e-7), "1e-7f");
        assert_eq!(float_literal(f32::NEG_INFINITY), "-std::numeric_limits<float>::infinity()");
    }
}
