//! Renders kernel specs into CUTLASS C++ through the Tera templates in `templates/` (embedded,
//! so a Bolt binary renders anywhere).
//!
//! [`render`] gives one kernel's definition block (its types in a namespace named after the
//! symbol, and the three `extern "C"` functions of `bolt_kernel.h`); [`render_unit`] puts
//! several behind one prologue (includes and the shared ABI helpers) as one `.cu` translation
//! unit: nvcc parses the CUTLASS headers once for all of them.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::OnceLock;

use serde::Serialize;
use tera::Tera;

use crate::spec::{Arch, Family, GroupMode, KernelSpec, Layout, TileConfig};
use crate::{sm80, sm90};

/// Why a spec cannot be rendered. Each variant names the spec field at fault.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The spec asks for something the templates (or CUTLASS) cannot build.
    #[error("unsupported {field}: {reason}")]
    Unsupported { field: &'static str, reason: String },
    /// `epilogue`: the tree is not `act(alpha*acc [+ beta*C] [+ bias] [+ residual]) [+ residual]`.
    #[error("unsupported epilogue: tree outside the normal form act(alpha*acc [+ beta*C] [+ bias] [+ C]) [+ C]: {0}")]
    EpilogueNotNormal(String),
    /// The symbol is not a C identifier, or appears twice in one unit.
    #[error("invalid symbol `{symbol}`: {reason}")]
    InvalidSymbol { symbol: String, reason: &'static str },
    /// The sm90 lowering rejected the spec (codegen/src/sm90.rs says why).
    #[error(transparent)]
    Sm90(#[from] sm90::Sm90Error),
    /// A template failed to render (a bug in the template or its context, not in the spec).
    #[error("template {template}: {message}")]
    Template { template: String, message: String },
}

pub(crate) const PROLOGUE_TEMPLATE: &str = "unit_prologue.cu.tera";

/// Every template, embedded.
const TEMPLATES: &[(&str, &str)] = &[
    (PROLOGUE_TEMPLATE, include_str!("../../templates/unit_prologue.cu.tera")),
    ("abi_exports.cu.tera", include_str!("../../templates/abi_exports.cu.tera")),
    (sm80::ACTIVATION_TEMPLATE, include_str!("../../templates/sm80_activation.cu.tera")),
    (sm80::EPILOGUE_TEMPLATE, include_str!("../../templates/sm80_epilogue.cu.tera")),
    (sm80::GEMM_TEMPLATE, include_str!("../../templates/sm80_gemm.cu.tera")),
    (sm80::GEMM_SOFTMAX_TEMPLATE, include_str!("../../templates/sm80_gemm_softmax.cu.tera")),
    (sm80::CONV2D_FPROP_TEMPLATE, include_str!("../../templates/sm80_conv2d_fprop.cu.tera")),
    (crate::b2b::INTERMEDIATE_TEMPLATE, include_str!("../../templates/sm80_b2b_intermediate.cu.tera")),
    (crate::b2b::GEMM_TEMPLATE, include_str!("../../templates/sm80_b2b_gemm.cu.tera")),
    (crate::b2b::CONV2D_FPROP_TEMPLATE, include_str!("../../templates/sm80_b2b_conv2d_fprop.cu.tera")),
    (sm90::GEMM_TEMPLATE, include_str!("../../templates/sm90_gemm.cu.tera")),
    (sm90::CONV2D_FPROP_TEMPLATE, include_str!("../../templates/sm90_conv2d_fprop.cu.tera")),
    (crate::glue::TEMPLATE, include_str!("../../templates/glue.cu.tera")),
    (crate::stitch::TEMPLATE, include_str!("../../templates/stitch.cu.tera")),
    (crate::attention::TEMPLATE, include_str!("../../templates/attention.cu.tera")),
    (crate::attention::SM90_TEMPLATE, include_str!("../../templates/sm90_attention.cu.tera")),
    (crate::recurrent::TEMPLATE, include_str!("../../templates/recurrent.cu.tera")),
    (crate::depthwise::TEMPLATE, include_str!("../../templates/depthwise_direct.cu.tera")),
];

fn tera() -> &'static Tera {
    static TERA: OnceLock<Tera> = OnceLock::new();
    TERA.get_or_init(|| {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        tera.add_raw_templates(TEMPLATES.iter().copied())
            .unwrap_or_else(|e| panic!("embedded templates do not parse: {}", error_chain(&e)));
        tera
    })
}

/// Tera's Display shows only the outermost error; the cause is further down.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let _ = write!(message, ": {s}");
        source = s.source();
    }
    message
}

/// Renders a template; runs of blank lines left by template tags are squeezed to one, so
/// templates can stay laid out for reading.
pub(crate) fn render_template(template: &str, context: &tera::Context) -> Result<String, RenderError> {
    let text = tera()
        .render(template, context)
        .map_err(|e| RenderError::Template { template: template.into(), message: error_chain(&e) })?;
    let mut out = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.split_inclusive('\n') {
        blank_run = if line.trim().is_empty() { blank_run + 1 } else { 0 };
        if blank_run <= 1 {
            out.push_str(if blank_run == 1 { "\n" } else { line });
        }
    }
    Ok(out)
}

pub(crate) fn to_context(value: &impl Serialize) -> Result<tera::Context, RenderError> {
    tera::Context::from_serialize(value)
        .map_err(|e| RenderError::Template { template: "(context)".into(), message: error_chain(&e) })
}

pub(crate) fn check_symbol(symbol: &str) -> Result<(), RenderError> {
    let bad = |reason| Err(RenderError::InvalidSymbol { symbol: symbol.into(), reason });
    match symbol.chars().next() {
        None => bad("empty"),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => bad("must start with a letter or '_'"),
        _ if !symbol.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
            bad("only ASCII letters, digits and '_'")
        }
        _ => Ok(()),
    }
}

/// Renders one kernel's definition block, defining `<symbol>_can_implement`,
/// `<symbol>_workspace_size` and `<symbol>_run`. It relies on the unit prologue; compile it
/// through [`render_unit`].
pub fn render(spec: &KernelSpec, symbol: &str) -> Result<String, RenderError> {
    check_symbol(symbol)?;
    let (template, context) = match spec.arch {
        Arch::Sm80 if matches!(spec.tile, TileConfig::Direct(_)) => crate::depthwise::context(spec, symbol)?,
        Arch::Sm80 => {
            let (template, ctx) = sm80::context(spec, symbol)?;
            (template, to_context(&ctx)?)
        }
        Arch::Sm90 => sm90::context(spec, symbol)?,
    };
    render_template(template, &context)
}

/// Renders several kernels into one `.cu` translation unit: one prologue (bolt_kernel.h, the
/// CUTLASS headers all of them need, the ABI helpers), then each kernel's block.
pub fn render_unit(kernels: &[(&KernelSpec, &str)]) -> Result<String, RenderError> {
    let mut includes: Vec<&str> = Vec::new();
    for &(spec, _) in kernels {
        let needed = match spec.arch {
            Arch::Sm80 if matches!(spec.tile, TileConfig::Direct(_)) => crate::depthwise::includes(),
            Arch::Sm80 => sm80::includes(spec),
            // The unit prologue's helpers need cutlass::Status before any block's prelude.
            Arch::Sm90 => sm90::includes(spec),
        };
        for header in needed {
            if !includes.contains(&header) {
                includes.push(header);
            }
        }
    }
    assemble_unit(kernels, &includes, render)
}

/// One `.cu` translation unit of any kernel kind: the prologue (bolt_kernel.h, `includes`,
/// the ABI helpers of every symbol), then each kernel's block as `block` renders it. A symbol
/// may appear once.
pub(crate) fn assemble_unit<S: ?Sized>(
    kernels: &[(&S, &str)],
    includes: &[&str],
    block: impl Fn(&S, &str) -> Result<String, RenderError>,
) -> Result<String, RenderError> {
    let mut seen = HashSet::new();
    for &(_, symbol) in kernels {
        if !seen.insert(symbol) {
            return Err(RenderError::InvalidSymbol { symbol: symbol.into(), reason: "appears twice in one unit" });
        }
    }
    let mut context = tera::Context::new();
    context.insert("symbols", &kernels.iter().map(|(_, s)| *s).collect::<Vec<_>>());
    context.insert("includes", &includes);
    let mut unit = render_template(PROLOGUE_TEMPLATE, &context)?;
    for &(spec, symbol) in kernels {
        unit.push('\n');
        unit.push_str(&block(spec, symbol)?);
    }
    Ok(unit)
}

/// A readable, stable, unique C identifier for a spec, e.g.
/// `bolt_sm80_gemm_f16_f32acc_f16_rrr_a8_128x128x32_64x64x32_s3_bias_gelu_erf_1a2b3c4d`: the
/// readable part says what the kernel is, the hash (of the whole spec) makes it unique.
pub fn symbol_for(spec: &KernelSpec) -> String {
    let arch = match spec.arch {
        Arch::Sm80 => "sm80",
        Arch::Sm90 => "sm90",
    };
    let family = match spec.family {
        Family::Gemm => "gemm".to_string(),
        Family::BatchedGemm => "bgemm".to_string(),
        Family::GemmSoftmax => "gemm_softmax".to_string(),
        Family::Conv2dFprop(f) => {
            let groups = match f.groups {
                GroupMode::None => "",
                GroupMode::SingleGroup => "_group",
                GroupMode::MultipleGroup => "_mgroup",
                GroupMode::Depthwise => "_dw",
            };
            let analytic = if f.analytic { "_analytic" } else { "" };
            format!("conv2d_fprop{groups}{}{analytic}", if f.unit_stride { "_unity" } else { "" })
        }
    };
    let t = spec.types;
    let types = format!("{}_{}acc_{}", t.input.name(), t.accumulator.name(), t.output.name());
    let layouts = match spec.family {
        Family::Conv2dFprop(_) => String::new(),
        _ => {
            let l = |l: Layout| if l == Layout::RowMajor { 'r' } else { 'c' };
            format!("_{}", spec.layouts.iter().map(|&x| l(x)).collect::<String>())
        }
    };
    let a = spec.alignment;
    let alignment = if a.a == a.b && a.b == a.c { format!("a{}", a.a) } else { format!("a{}_{}_{}", a.a, a.b, a.c) };
    let shape = |s: [u32; 3]| format!("{}x{}x{}", s[0], s[1], s[2]);
    let tile = match spec.tile {
        TileConfig::Sm80(t) => {
            let split = if t.split_k > 1 { format!("_sk{}", t.split_k) } else { String::new() };
            format!("{}_{}_s{}{split}", shape(t.threadblock), shape(t.warp), t.stages)
        }
        TileConfig::Sm90(t) => {
            let kernel = match t.kernel {
                crate::spec::KernelSchedule::TmaWarpSpecializedCooperative => "coop",
                crate::spec::KernelSchedule::TmaWarpSpecializedPingpong => "pingpong",
                crate::spec::KernelSchedule::StreamK => "streamk",
            };
            format!("{}_c{}_{kernel}", shape(t.tile), shape(t.cluster))
        }
        TileConfig::Direct(t) => format!("direct_v{}_p{}", t.vector, t.pixels),
    };
    let epilogue = spec.epilogue.name().replace('-', "_");
    format!("bolt_{arch}_{family}_{types}{layouts}_{alignment}_{tile}_{epilogue}_{:08x}", spec_hash(spec))
}

/// FNV-1a over the spec's JSON, folded to 32 bits: stable across runs, platforms and Rust
/// versions (unlike std's hasher).
fn spec_hash(spec: &KernelSpec) -> u32 {
    let json = serde_json::to_string(spec).expect("specs serialize");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h ^ (h >> 32)) as u32
}
