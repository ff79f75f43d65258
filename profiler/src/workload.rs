//! The thing to tune: one GEMM or Conv2d fprop problem with its element types, layouts, the
//! largest alignment its shape permits and its epilogue. The root crate builds these from a
//! planned model; `bolt-tune` builds them from the command line or a shapes file
//! ([`load_shapes_file`], the formats of `../shared/workloads/{gemm,conv2d,padding}.json`).

use std::path::{Path, PathBuf};

use bolt_codegen::abi::{BoltConv2dProblem, BoltGemmProblem};
use bolt_codegen::epilogue::{Activation, Epilogue, NormalForm, ResidualAt};
use bolt_codegen::spec::{Alignment, ConvFeatures, Element, Family, GroupMode, Layout, Types};
use serde_json::Value;

/// One problem to tune.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: String,
    pub family: Family,
    pub types: Types,
    pub layouts: [Layout; 3],
    /// The largest alignment the problem permits (see [`MaxAlignment`]).
    pub alignment: Alignment,
    pub epilogue: Epilogue,
    pub problem: Problem,
}

/// The run-time problem of a kernel, as the C ABI takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Problem {
    Gemm(BoltGemmProblem),
    Conv2d(BoltConv2dProblem),
}

/// A problem seen as the GEMM the kernel computes (conv: implicit GEMM), per group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmView {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// Independent GEMMs: the batch of a batched GEMM, the groups of a grouped conv.
    pub batch: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("workload `{name}`: {reason}")]
    Invalid { name: String, reason: String },
    #[error("{}: {reason}", path.display())]
    File { path: PathBuf, reason: String },
}

fn invalid(name: &str, reason: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid { name: name.into(), reason: reason.into() }
}

/// f16 inputs, f32 accumulation, f16 output: the default of the standard sweep.
pub const F16_F32_F16: Types = Types { input: Element::F16, accumulator: Element::F32, output: Element::F16 };

/// Default types for an input element type: 16-bit inputs accumulate in f32 and store the
/// input type; f32 runs as tf32 and stores f32.
pub fn default_types(input: Element) -> Types {
    Types { input, accumulator: Element::F32, output: input }
}

/// Parses `f16`, `bf16`, `f32` (also `fp16`, `half`, `tf32`, `float`).
pub fn parse_element(s: &str) -> Option<Element> {
    match s.to_ascii_lowercase().as_str() {
        "f16" | "fp16" | "half" | "float16" => Some(Element::F16),
        "bf16" | "bfloat16" => Some(Element::BF16),
        "f32" | "fp32" | "float" | "float32" | "tf32" => Some(Element::F32),
        _ => None,
    }
}

/// Parses a 3-letter layout string of A, B, C: `r` row-major, `c` column-major (`rrr`, `rcr`, ...).
pub fn parse_layouts(s: &str) -> Option<[Layout; 3]> {
    let l: Vec<Layout> = s
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            'r' | 'n' => Some(Layout::RowMajor),
            'c' | 't' => Some(Layout::ColumnMajor),
            _ => None,
        })
        .collect::<Option<_>>()?;
    l.try_into().ok()
}

pub fn layouts_name(l: &[Layout; 3]) -> String {
    l.iter().map(|l| if *l == Layout::RowMajor { 'r' } else { 'c' }).collect()
}

/// Parses the epilogue names of the workload files: `bias+relu`, `bias+gelu`,
/// `bias+residual`, `relu`, `plain`/`none`, ... (`+`-separated: `betac`, `bias`, `residual`
/// (added before the activation), `residual-after`, and one activation name).
pub fn parse_epilogue(s: &str) -> Option<Epilogue> {
    let mut form = NormalForm { beta_source: false, bias: false, activation: Activation::Identity, residual: None };
    for part in s.split('+').map(|p| p.trim().to_ascii_lowercase()) {
        match part.as_str() {
            "" | "plain" | "none" | "identity" | "linear" => {}
            "bias" => form.bias = true,
            "betac" | "beta_c" | "c" => form.beta_source = true,
            "residual" | "res" | "residual-before" => form.residual = Some(ResidualAt::BeforeActivation),
            "residual-after" | "res-after" => form.residual = Some(ResidualAt::AfterActivation),
            other => {
                let act = match other {
                    "gelu" => Activation::GeluErf,
                    "swish" => Activation::Silu,
                    "relu6" => Activation::Clip { min: 0.0.into(), max: 6.0.into() },
                    _ => *Activation::all().iter().find(|a| a.name() == other)?,
                };
                if form.activation != Activation::Identity {
                    return None;
                }
                form.activation = act;
            }
        }
    }
    Epilogue::new(form).ok()
}

/// The largest alignment (elements, 8/4/2/1, at most one 16-byte access) a problem permits.
/// An extension of [`Alignment`], which lives in `bolt_codegen`.
pub trait MaxAlignment: Sized {
    /// GEMM with packed operands in `layouts` (A, B, C/D): each operand's leading dimension
    /// (and batch stride) must be a multiple of the alignment.
    fn for_gemm(m: i64, n: i64, k: i64, layouts: [Layout; 3], types: Types) -> Self;
    /// Conv2d fprop NHWC/KRSC/NPQK: channels per group of the input, the filter and the output.
    fn for_conv2d(c: i64, k: i64, groups: i64, types: Types) -> Self;
}

/// Largest of 8/4/2/1 dividing every value, capped at 16 bytes of `e`.
fn max_align(values: &[i64], e: Element) -> u32 {
    let cap = (16 / e.size_bytes()) as u32;
    [8u32, 4, 2, 1].into_iter().find(|&a| a <= cap && values.iter().all(|v| v % a as i64 == 0)).unwrap_or(1)
}

impl MaxAlignment for Alignment {
    fn for_gemm(m: i64, n: i64, k: i64, layouts: [Layout; 3], types: Types) -> Alignment {
        let ld = |l: Layout, rows: i64, cols: i64| if l == Layout::RowMajor { cols } else { rows };
        Alignment {
            a: max_align(&[ld(layouts[0], m, k)], types.input),
            b: max_align(&[ld(layouts[1], k, n)], types.input),
            c: max_align(&[ld(layouts[2], m, n)], types.output),
        }
    }

    fn for_conv2d(c: i64, k: i64, groups: i64, types: Types) -> Alignment {
        let g = groups.max(1);
        if c == g && k == g {
            // Depthwise: the direct kernel reads whole channel vectors of C and writes K.
            return Alignment { a: max_align(&[c], types.input), b: 1, c: max_align(&[k], types.output) };
        }
        Alignment {
            a: max_align(&[c, c / g], types.input),
            b: max_align(&[c / g], types.input),
            c: max_align(&[k, k / g], types.output),
        }
    }
}

/// Output size of a convolution along one axis.
pub fn conv_out(size: i64, pad: i64, filter: i64, stride: i64, dilation: i64) -> i64 {
    let span = size as i128 + 2 * pad as i128 - dilation as i128 * (filter as i128 - 1) - 1;
    if span < 0 || stride <= 0 {
        return 0;
    }
    (span / stride as i128 + 1).min(i64::MAX as i128) as i64
}

/// A Conv2d description before output sizes are derived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dShape {
    pub n: i64,
    pub h: i64,
    pub w: i64,
    pub c: i64,
    pub k: i64,
    pub r: i64,
    pub s: i64,
    pub pad: (i64, i64),
    pub stride: (i64, i64),
    pub dilation: (i64, i64),
    pub groups: i64,
}

impl Conv2dShape {
    pub fn new(n: i64, h: i64, w: i64, c: i64, k: i64, r: i64, s: i64) -> Conv2dShape {
        Conv2dShape { n, h, w, c, k, r, s, pad: (0, 0), stride: (1, 1), dilation: (1, 1), groups: 1 }
    }
}

impl Workload {
    /// A GEMM `D[M,N] = epilogue(A[M,K] B[K,N])` (batched when `batch > 1`), packed operands.
    pub fn gemm(
        name: &str,
        (m, n, k, batch): (i64, i64, i64, i64),
        types: Types,
        layouts: [Layout; 3],
        epilogue: Epilogue,
    ) -> Result<Workload, WorkloadError> {
        for (dim, v) in [("M", m), ("N", n), ("K", k), ("batch", batch)] {
            if v <= 0 {
                return Err(invalid(name, format!("{dim} = {v}: every dimension must be positive")));
            }
        }
        // Operand sizes and strides are i64 in the ABI; FLOP counts stay within f64 precision.
        let (m128, n128, k128, b128) = (m as i128, n as i128, k as i128, batch as i128);
        let largest = (m128 * k128).max(k128 * n128).max(m128 * n128) * b128;
        if largest > i64::MAX as i128 / 8 || m128 * n128 * k128 * b128 > 1i128 << 62 {
            return Err(invalid(name, format!("{m}x{n}x{k} (batch {batch}) is too large")));
        }
        let mut problem = BoltGemmProblem::packed(m, n, k, layouts);
        problem.batch = batch;
        let family = if batch > 1 { Family::BatchedGemm } else { Family::Gemm };
        let mut alignment = Alignment::for_gemm(m, n, k, layouts, types);
        if batch > 1 {
            // Batch strides (the operand sizes) must keep every member aligned too.
            alignment = Alignment {
                a: alignment.a.min(max_align(&[m * k], types.input)),
                b: alignment.b.min(max_align(&[k * n], types.input)),
                c: alignment.c.min(max_align(&[m * n], types.output)),
            };
        }
        Ok(Workload { name: name.into(), family, types, layouts, alignment, epilogue, problem: Problem::Gemm(problem) })
    }

    /// A Conv2d fprop (NHWC activations, KRSC filters). Strided kernels (CUTLASS's
    /// `Strided` iterator, which the pre-generated library holds) serve every stride.
    pub fn conv2d(name: &str, s: Conv2dShape, types: Types, epilogue: Epilogue) -> Result<Workload, WorkloadError> {
        for (dim, v) in [("N", s.n), ("H", s.h), ("W", s.w), ("C", s.c), ("K", s.k), ("R", s.r), ("S", s.s)] {
            if v <= 0 {
                return Err(invalid(name, format!("{dim} = {v}: every dimension must be positive")));
            }
        }
        for (what, (a, b), min) in [("stride", s.stride, 1), ("dilation", s.dilation, 1), ("pad", s.pad, 0)] {
            if a < min || b < min {
                return Err(invalid(name, format!("{what} ({a}, {b}) must be at least {min}")));
            }
        }
        let g = s.groups;
        if g <= 0 || s.c % g != 0 || s.k % g != 0 {
            return Err(invalid(name, format!("groups = {g} must be positive and divide C = {} and K = {}", s.c, s.k)));
        }
        let scalars =
            [s.n, s.h, s.w, s.c, s.k, s.r, s.s, s.pad.0, s.pad.1, s.stride.0, s.stride.1, s.dilation.0, s.dilation.1];
        if let Some(v) = scalars.iter().find(|&&v| v > i32::MAX as i64) {
            return Err(invalid(name, format!("{v} does not fit the conv ABI's 32-bit sizes")));
        }
        let p = conv_out(s.h, s.pad.0, s.r, s.stride.0, s.dilation.0);
        let q = conv_out(s.w, s.pad.1, s.s, s.stride.1, s.dilation.1);
        if p <= 0 || q <= 0 {
            return Err(invalid(
                name,
                format!("the {}x{} filter does not fit the padded {}x{} input", s.r, s.s, s.h, s.w),
            ));
        }
        // Every size is an i32 in the ABI (so the products below cannot overflow i128).
        let i = |v: i64| v as i128;
        let tensors =
            [i(s.n) * i(s.h) * i(s.w) * i(s.c), i(s.n) * i(p) * i(q) * i(s.k), i(s.k) * i(s.r) * i(s.s) * i(s.c / g)];
        let too_big = tensors.iter().any(|&v| v > i32::MAX as i128);
        if too_big {
            return Err(invalid(name, "a tensor has more than 2^31 elements (the conv ABI takes 32-bit sizes)"));
        }
        let groups = if g == 1 {
            GroupMode::None
        } else if s.c / g == 1 && s.k / g == 1 {
            GroupMode::Depthwise
        } else if (s.k / g) % 64 == 0 {
            // A threadblock tile of N output channels stays within one group.
            GroupMode::SingleGroup
        } else {
            GroupMode::MultipleGroup
        };
        // Filters past the optimized iterators' 32-tap masks take the analytic ones.
        let max_taps = bolt_codegen::spec::OPTIMIZED_ITERATOR_MAX_TAPS as i64;
        let analytic = matches!(groups, GroupMode::None | GroupMode::SingleGroup) && (s.r > max_taps || s.s > max_taps);
        let family = Family::Conv2dFprop(ConvFeatures { unit_stride: false, groups, analytic });
        let alignment = Alignment::for_conv2d(s.c, s.k, g, types);
        let c32 = |v: i64| v as i32;
        let problem = BoltConv2dProblem {
            n: c32(s.n),
            h: c32(s.h),
            w: c32(s.w),
            c: c32(s.c),
            k: c32(s.k),
            r: c32(s.r),
            s: c32(s.s),
            p: c32(p),
            q: c32(q),
            pad_h: c32(s.pad.0),
            pad_w: c32(s.pad.1),
            stride_h: c32(s.stride.0),
            stride_w: c32(s.stride.1),
            dilation_h: c32(s.dilation.0),
            dilation_w: c32(s.dilation.1),
            groups: c32(g),
        };
        Ok(Workload {
            name: name.into(),
            family,
            types,
            layouts: [Layout::RowMajor; 3],
            alignment,
            epilogue,
            problem: Problem::Conv2d(problem),
        })
    }

    /// The implicit-GEMM view: conv M = N·P·Q, N = K/groups, K = C/groups·R·S, batch = groups.
    /// Depthwise convs run CUTLASS's depthwise kernel, whose tiles span channels: M = N·P·Q,
    /// N = K (channels), K = R·S, batch 1 (the same FLOPs).
    pub fn gemm_view(&self) -> GemmView {
        let depthwise = matches!(self.family, Family::Conv2dFprop(f) if f.groups == GroupMode::Depthwise);
        match self.problem {
            Problem::Gemm(p) => GemmView { m: p.m as u64, n: p.n as u64, k: p.k as u64, batch: p.batch.max(1) as u64 },
            Problem::Conv2d(p) if depthwise => GemmView {
                m: p.n as u64 * p.p as u64 * p.q as u64,
                n: p.k as u64,
                k: p.r as u64 * p.s as u64,
                batch: 1,
            },
            Problem::Conv2d(p) => {
                let g = p.groups.max(1) as u64;
                GemmView {
                    m: p.n as u64 * p.p as u64 * p.q as u64,
                    n: p.k as u64 / g,
                    k: (p.c as u64 / g) * p.r as u64 * p.s as u64,
                    batch: g,
                }
            }
        }
    }

    /// Multiply-add FLOPs (2 per MAC).
    pub fn flops(&self) -> f64 {
        let v = self.gemm_view();
        2.0 * v.m as f64 * v.n as f64 * v.k as f64 * v.batch as f64
    }

    /// Bytes of the distinct tensors read and written once: A, B, D, plus C when the
    /// epilogue reads it and the bias vector (compulsory traffic).
    pub fn bytes(&self) -> f64 {
        let (i, o) = (self.types.input.size_bytes() as f64, self.types.output.size_bytes() as f64);
        let (a, b, d, bias) = match self.problem {
            Problem::Gemm(p) => {
                let bt = p.batch.max(1) as f64;
                ((p.m * p.k) as f64 * bt, (p.k * p.n) as f64 * bt, (p.m * p.n) as f64 * bt, p.n as f64)
            }
            Problem::Conv2d(p) => {
                let g = p.groups.max(1) as f64;
                (
                    p.n as f64 * p.h as f64 * p.w as f64 * p.c as f64,
                    p.k as f64 * p.r as f64 * p.s as f64 * p.c as f64 / g,
                    p.n as f64 * p.p as f64 * p.q as f64 * p.k as f64,
                    p.k as f64,
                )
            }
        };
        let source = if self.epilogue.expr.reads_source() { d } else { 0.0 };
        let bias = if self.epilogue.expr.reads_bias() { bias } else { 0.0 };
        (a + b) * i + (d + source + bias) * o
    }

    /// The shape as a list of integers (the database key's shape): GEMM `[m, n, k, batch]`,
    /// conv `[n, h, w, c, k, r, s, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups]`.
    pub fn shape(&self) -> Vec<i64> {
        match self.problem {
            Problem::Gemm(p) => vec![p.m, p.n, p.k, p.batch],
            Problem::Conv2d(p) => [
                p.n,
                p.h,
                p.w,
                p.c,
                p.k,
                p.r,
                p.s,
                p.pad_h,
                p.pad_w,
                p.stride_h,
                p.stride_w,
                p.dilation_h,
                p.dilation_w,
                p.groups,
            ]
            .iter()
            .map(|&v| v as i64)
            .collect(),
        }
    }

    /// Short description for tables, e.g. `gemm 1280x3072x768` or `conv 32x56x56x64 k64 3x3 s1`.
    pub fn describe(&self) -> String {
        match self.problem {
            Problem::Gemm(p) if p.batch > 1 => format!("gemm {}x{}x{} b{}", p.m, p.n, p.k, p.batch),
            Problem::Gemm(p) => format!("gemm {}x{}x{}", p.m, p.n, p.k),
            Problem::Conv2d(p) => {
                let g = if p.groups > 1 { format!(" g{}", p.groups) } else { String::new() };
                format!("conv {}x{}x{}x{} k{} {}x{} s{}{g}", p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.stride_h)
            }
        }
    }
}

// ================================================================================================
// Shapes files
// ================================================================================================

/// Loads every problem of a shapes file in the formats of `../shared/workloads`:
///
/// * any object with `M`, `N`, `K` (optional `batch`, `name`, `epilogue` or an `epilogues`
///   list, which expands to one workload per epilogue) is a GEMM;
/// * any object with `N`, `H`, `W`, `C`, `K`, `R`, `S` (optional `stride`, `pad`, `dilation`,
///   `groups`, scalars or `[h, w]` pairs) is a Conv2d;
/// * an object whose integer lists are MLP layer widths (`dlrm_mlps`: `bottom`, `top`;
///   b2b.json's `mlp_chains`: `widths`) with `M`/`batch`/`batches` or a note "batch 2048 and
///   16384" becomes one GEMM per layer and batch (the unfused layers);
/// * back-to-back pairs (`N0`/`K0`/`N1` or `K0`/`K1` keys, b2b.json) are not single kernels
///   and are skipped.
///
/// Names are the JSON path (`bert_base_b32_s40/ffn1`). `types` and `layouts` apply to all
/// problems (GEMM: default row-major A, B, C as the files say).
pub fn load_shapes_file(path: &Path, types: Types, layouts: [Layout; 3]) -> Result<Vec<Workload>, WorkloadError> {
    let file_err = |reason: String| WorkloadError::File { path: path.into(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(format!("cannot read: {e}")))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| file_err(format!("not valid JSON: {e}")))?;
    let mut out = Vec::new();
    walk(&value, "", types, layouts, &mut out).map_err(|e| match e {
        WorkloadError::Invalid { name, reason } => file_err(format!("`{name}`: {reason}")),
        other => other,
    })?;
    if out.is_empty() {
        return Err(file_err("no GEMM (M, N, K) or Conv2d (N, H, W, C, K, R, S) problem found in it".into()));
    }
    Ok(out)
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}/{key}")
    }
}

fn int(obj: &serde_json::Map<String, Value>, key: &str, name: &str) -> Result<Option<i64>, WorkloadError> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| invalid(name, format!("`{key}` = {v} is not an integer"))),
    }
}

/// A scalar or `[h, w]` pair.
fn pair(
    obj: &serde_json::Map<String, Value>,
    key: &str,
    name: &str,
    default: i64,
) -> Result<(i64, i64), WorkloadError> {
    match obj.get(key) {
        None => Ok((default, default)),
        Some(Value::Array(a)) if a.len() == 2 && a.iter().all(|v| v.as_i64().is_some()) => {
            Ok((a[0].as_i64().unwrap_or(default), a[1].as_i64().unwrap_or(default)))
        }
        Some(v) => v
            .as_i64()
            .map(|x| (x, x))
            .ok_or_else(|| invalid(name, format!("`{key}` = {v} is not an integer or [h, w]"))),
    }
}

fn epilogues(obj: &serde_json::Map<String, Value>, name: &str) -> Result<Vec<(String, Epilogue)>, WorkloadError> {
    let parse = |s: &str| {
        parse_epilogue(s)
            .ok_or_else(|| invalid(name, format!("unknown epilogue `{s}` (e.g. bias+relu, bias+gelu, bias+residual)")))
    };
    match (obj.get("epilogue"), obj.get("epilogues")) {
        (Some(Value::String(s)), _) => Ok(vec![(String::new(), parse(s)?)]),
        (_, Some(Value::Array(list))) => list
            .iter()
            .map(|v| {
                let s = v.as_str().ok_or_else(|| invalid(name, format!("epilogue {v} is not a string")))?;
                Ok((format!("/{s}"), parse(s)?))
            })
            .collect(),
        (Some(v), _) | (_, Some(v)) => Err(invalid(name, format!("epilogue {v} is not a string or a list of strings"))),
        (None, None) => Ok(vec![(String::new(), Epilogue::plain())]),
    }
}

fn walk(
    v: &Value,
    path: &str,
    types: Types,
    layouts: [Layout; 3],
    out: &mut Vec<Workload>,
) -> Result<(), WorkloadError> {
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let name = item
                    .get("name")
                    .and_then(Value::as_str)
                    .map(|n| join(path, n))
                    .unwrap_or_else(|| join(path, &i.to_string()));
                walk_item(item, &name, types, layouts, out)?;
            }
            Ok(())
        }
        Value::Object(obj) => {
            for (key, child) in obj {
                walk_item(child, &join(path, key), types, layouts, out)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn walk_item(
    v: &Value,
    name: &str,
    types: Types,
    layouts: [Layout; 3],
    out: &mut Vec<Workload>,
) -> Result<(), WorkloadError> {
    let Value::Object(obj) = v else {
        return walk(v, name, types, layouts, out);
    };
    let has = |keys: &[&str]| keys.iter().all(|k| obj.contains_key(*k));
    // Back-to-back chains belong to the fusion work, not to single-kernel tuning.
    if has(&["N0", "K0"]) || has(&["K0", "K1"]) {
        return Ok(());
    }
    if has(&["N", "H", "W", "C", "K", "R", "S"]) {
        let get = |k: &str| int(obj, k, name).map(|v| v.unwrap_or(0));
        let mut shape = Conv2dShape::new(get("N")?, get("H")?, get("W")?, get("C")?, get("K")?, get("R")?, get("S")?);
        shape.pad = pair(obj, "pad", name, 0)?;
        shape.stride = pair(obj, "stride", name, 1)?;
        shape.dilation = pair(obj, "dilation", name, 1)?;
        shape.groups = int(obj, "groups", name)?.unwrap_or(1);
        for (suffix, epilogue) in epilogues(obj, name)? {
            out.push(Workload::conv2d(&format!("{name}{suffix}"), shape, types, epilogue)?);
        }
        return Ok(());
    }
    if has(&["M", "N", "K"]) {
        let get = |k: &str| int(obj, k, name).map(|v| v.unwrap_or(0));
        let (m, n, k) = (get("M")?, get("N")?, get("K")?);
        let batch = int(obj, "batch", name)?.unwrap_or(1);
        for (suffix, epilogue) in epilogues(obj, name)? {
            out.push(Workload::gemm(&format!("{name}{suffix}"), (m, n, k, batch), types, layouts, epilogue)?);
        }
        return Ok(());
    }
    // MLP layer widths: lists of integers with a batch list (or a note naming the batches).
    let is_widths = |v: &Value| v.as_array().is_some_and(|a| a.len() >= 2 && a.iter().all(|x| x.as_i64().is_some()));
    if obj.values().any(is_widths) {
        let batch = obj.get("batch").or_else(|| obj.get("M"));
        let batches: Vec<i64> = match (obj.get("batches"), batch, obj.get("note")) {
            (Some(Value::Array(b)), _, _) => b.iter().filter_map(Value::as_i64).collect(),
            (_, Some(b), _) => b.as_i64().into_iter().collect(),
            (_, _, Some(Value::String(note))) => note
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|t| t.parse::<i64>().ok())
                .filter(|&b| b > 0)
                .collect(),
            _ => vec![],
        };
        if batches.is_empty() {
            return Err(invalid(name, "MLP layer widths without a batch size (`M`, `batch`, `batches` or a note)"));
        }
        for (key, widths) in obj.iter().filter(|(_, v)| is_widths(v)) {
            let widths: Vec<i64> = widths.as_array().into_iter().flatten().filter_map(Value::as_i64).collect();
            for &batch in &batches {
                for (i, w) in widths.windows(2).enumerate() {
                    let wname = format!("{name}/{key}{i}_b{batch}");
                    out.push(Workload::gemm(&wname, (batch, w[1], w[0], 1), types, layouts, Epilogue::plain())?);
                }
            }
        }
        return Ok(());
    }
    walk(v, name, types, layouts, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RRR: [Layout; 3] = [Layout::RowMajor; 3];

    #[test]
    fn alignment_follows_leading_dimensions() {
        let a = Alignment::for_gemm(8, 4096, 4095, RRR, F16_F32_F16);
        assert_eq!(a, Alignment { a: 1, b: 8, c: 8 });
        let a = Alignment::for_gemm(8, 4096, 4092, RRR, F16_F32_F16);
        assert_eq!(a, Alignment { a: 4, b: 8, c: 8 });
        // f32: at most 4 elements (16 bytes).
        let a = Alignment::for_gemm(64, 64, 64, RRR, default_types(Element::F32));
        assert_eq!(a, Alignment { a: 4, b: 4, c: 4 });
        assert_eq!(Alignment::for_conv2d(46, 32, 1, F16_F32_F16), Alignment { a: 2, b: 2, c: 8 });
        assert_eq!(Alignment::for_conv2d(3, 64, 1, F16_F32_F16), Alignment { a: 1, b: 1, c: 8 });
    }

    #[test]
    fn epilogue_names_parse() {
        assert_eq!(parse_epilogue("bias+gelu").unwrap().name(), "bias_gelu_erf");
        assert_eq!(parse_epilogue("bias+residual").unwrap().name(), "bias_res_identity");
        assert_eq!(parse_epilogue("plain").unwrap(), Epilogue::plain());
        assert!(parse_epilogue("bias+wobble").is_none());
        assert!(parse_epilogue("relu+gelu").is_none());
    }

    #[test]
    fn conv_views() {
        let mut s = Conv2dShape::new(32, 224, 224, 3, 64, 7, 7);
        s.pad = (3, 3);
        s.stride = (2, 2);
        let w = Workload::conv2d("stem", s, F16_F32_F16, Epilogue::plain()).unwrap();
        assert_eq!(w.gemm_view(), GemmView { m: 32 * 112 * 112, n: 64, k: 3 * 49, batch: 1 });
        assert!(Workload::conv2d("bad", Conv2dShape::new(1, 2, 2, 8, 8, 5, 5), F16_F32_F16, Epilogue::plain()).is_err());
        let dw = Conv2dShape { groups: 32, pad: (1, 1), ..Conv2dShape::new(8, 14, 14, 32, 32, 3, 3) };
        let w = Workload::conv2d("dw", dw, F16_F32_F16, Epilogue::plain()).unwrap();
        assert_eq!(w.gemm_view(), GemmView { m: 8 * 14 * 14, n: 32, k: 9, batch: 1 });
        assert_eq!(w.flops(), 2.0 * (8 * 14 * 14 * 32 * 9) as f64);
        // Absurd sizes are errors, not overflows.
        let huge = Conv2dShape { pad: (i64::MAX, i64::MAX), ..Conv2dShape::new(1, i64::MAX, 8, 8, 8, 3, 3) };
        assert!(Workload::conv2d("huge", huge, F16_F32_F16, Epilogue::plain()).is_err());
        let rrr = [Layout::RowMajor; 3];
        assert!(Workload::gemm("huge", (i64::MAX, i64::MAX, 2, 1), F16_F32_F16, rrr, Epilogue::plain()).is_err());
        assert!(Workload::gemm("neg", (-1, 8, 8, 1), F16_F32_F16, rrr, Epilogue::plain()).is_err());
    }

    #[test]
    fn shapes_files_in_every_supported_form() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shapes.json");
        std::fs::write(
            &path,
            r#"{
              "note": "free text is ignored",
              "bert": {"tokens": 1280, "problems": [
                  {"name": "ffn1", "M": 1280, "N": 3072, "K": 768, "epilogue": "bias+gelu"},
                  {"M": 64, "N": 64, "K": 64, "batch": 12}]},
              "fig9": {"M": 8, "N": 16, "K": 32, "epilogues": ["bias+relu", "bias+softplus"]},
              "convs": [{"name": "down", "N": 2, "H": 9, "W": 9, "C": 8, "K": 16, "R": 3, "S": 3, "stride": [2, 1], "pad": 1, "groups": 2}],
              "mlp": {"note": "batch 4 and 8", "bottom": [16, 32, 8]},
              "chains": {"problems": [{"M": 128, "widths": [64, 64, 64]}]},
              "pairs": {"problems": [{"M": 2464, "N0": 1, "K0": 4, "N1": 4}, {"H": 56, "W": 56, "C": 48, "K0": 48, "K1": 48}]}
            }"#,
        )
        .unwrap();
        let ws = load_shapes_file(&path, F16_F32_F16, [Layout::RowMajor; 3]).unwrap();
        let names: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bert/problems/ffn1",
                "bert/problems/1",
                "chains/problems/0/widths0_b128",
                "chains/problems/0/widths1_b128",
                "convs/down",
                "fig9/bias+relu",
                "fig9/bias+softplus",
                "mlp/bottom0_b4",
                "mlp/bottom1_b4",
                "mlp/bottom0_b8",
                "mlp/bottom1_b8",
            ]
        );
        assert_eq!(ws[0].epilogue.name(), "bias_gelu_erf");
        assert_eq!(ws[1].family, Family::BatchedGemm);
        assert_eq!(ws[1].shape(), vec![64, 64, 64, 12]);
        let conv = &ws[4];
        assert_eq!(conv.shape(), vec![2, 9, 9, 8, 16, 3, 3, 1, 1, 2, 1, 1, 1, 2]);
        assert!(matches!(conv.problem, Problem::Conv2d(p) if p.p == 5 && p.q == 9));
        assert_eq!(ws[6].epilogue.name(), "bias_softplus");
        // MLP layers: M = batch, K = width in, N = width out.
        assert_eq!(ws[9].shape(), vec![8, 32, 16, 1]);

        // Errors name the file and the problem.
        for (text, want) in [
            (r#"{"a": [{"M": 8, "N": 8.5, "K": 8}]}"#, "`a/0`: `N` = 8.5 is not an integer"),
            (r#"{"a": {"M": 8, "N": 8, "K": 8, "epilogue": "bias+magic"}}"#, "unknown epilogue `bias+magic`"),
            (r#"{"a": {"N": 1, "H": 4, "W": 4, "C": 8, "K": 8, "R": 3, "S": 3, "stride": "two"}}"#, "`stride`"),
            (r#"{"mlp": {"top": [4, 8]}}"#, "without a batch size"),
            (r#"[1, 2, 3]"#, "no GEMM"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = load_shapes_file(&path, F16_F32_F16, [Layout::RowMajor; 3]).unwrap_err().to_string();
            assert!(e.contains("shapes.json") && e.contains(want), "{e}");
        }
    }
}
