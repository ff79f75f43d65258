//! Stitched kernels (AStitch): one kernel for a region of memory-intensive ops (element-wise
//! ops, broadcasts, and reductions along the last axis such as Softmax and LayerNorm), every
//! intermediate kept in registers. The region is a small typed DAG of [`Step`]s over an
//! iteration space of `rows` x `width`; one template (`templates/stitch.cu.tera`) lowers it.
//!
//! Schemes: a region without reductions is AStitch's *independent* scheme (each element on its
//! own); with reductions it is the *regional* scheme: a group of threads owns a row, each
//! reduction is a group-wide reduction (warp shuffles, then shared memory across warps), and
//! the values a later phase reads again (LayerNorm's residual sum, softmax's masked scores)
//! stay in registers from phase 0 on: the *row cache*, up to 32 elements per thread, so the row
//! is read from memory once. Columns past the cache (rows wider than a group can hold, or
//! regions with too many such values) recompute their values from the (cache-resident) row in
//! every phase. Steps constant along the row (a LayerNorm's `sqrt(var + eps)`, a per-row
//! mask's load) run once per row when their phase's reductions are done. A thread's columns
//! come in chunks of up to 16 bytes of adjacent elements, moved as one vector load or store
//! for each tensor whose run-time layout allows it (contiguous along the row, rows starting on
//! whole chunks, aligned; `vector_mask`), element by element otherwise.
//! The thread mapping adapts to the problem at initialise time: with many rows,
//! rows up to 1024 wide take at most one warp (shuffles only, no block barrier; narrow rows at
//! 4 elements per thread) and wider rows a power of two >= width / 32 threads, up to 256; with
//! few rows the group grows (down to 4 elements per thread) until the launch has enough
//! threads to fill the GPU; a block of at least 128 threads holds several rows.
//!
//! Values are typed ([`Kind`]): floats compute in f32, integers in int64 and bools as bools, so
//! the masks exporters write around attention and padding (`Equal`, `Not`, `Where`, `Cast`
//! of bools and token ids) stitch with the float ops they feed, exactly, and so does the
//! integer arithmetic of lengths and frame counts ([`BinaryFn::apply_int`]).
//!
//! The element code and each thread's share of a row are `__host__ __device__`: `host_run`
//! executes every thread's share of a row in turn on the host, the device's own column mapping
//! and row cache included; the kernel's body is a template on its thread, so tests also run the
//! operator's own launch on the host's emulation (`bolt_host_launch.h`: a thread per CUDA
//! thread, the group reductions' shuffles and barriers real, races caught by ThreadSanitizer).

use ordered_float::OrderedFloat;
use serde::{Deserialize, Serialize};

use crate::abi::{BoltStitchProblem, STITCH_MAX_INPUTS, STITCH_MAX_OUTPUTS, STITCH_MAX_RANK};
use crate::epilogue::Activation;
use crate::render::RenderError;
use crate::spec::Element;

/// What a stitched kernel reads and writes: the float types it computes with, and the integer
/// and bool tensors of masks and token ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Storage {
    F16,
    BF16,
    F32,
    I32,
    I64,
    /// One byte per element, 0 or 1 (ONNX bool).
    Bool,
}

impl Storage {
    pub fn size_bytes(self) -> usize {
        match self {
            Storage::Bool => 1,
            Storage::F16 | Storage::BF16 => 2,
            Storage::F32 | Storage::I32 => 4,
            Storage::I64 => 8,
        }
    }

    fn cpp(self) -> &'static str {
        match self {
            Storage::F16 => "cutlass::half_t",
            Storage::BF16 => "cutlass::bfloat16_t",
            Storage::F32 => "float",
            Storage::I32 => "int32_t",
            Storage::I64 => "int64_t",
            Storage::Bool => "bool",
        }
    }

    /// The type a kernel computes a value of this storage in.
    pub fn kind(self) -> Kind {
        match self {
            Storage::F16 | Storage::BF16 | Storage::F32 => Kind::Float,
            Storage::I32 | Storage::I64 => Kind::Int,
            Storage::Bool => Kind::Bool,
        }
    }

    /// `v` (of kind `from`) converted to this storage and back to its kind, as the kernel
    /// does: floats round to the type's precision, floats to integers truncate toward zero
    /// (saturating, NaN to 0: the GPU's conversion) and narrow integers wrap.
    pub fn convert(self, v: Scalar) -> Scalar {
        let float = |x: f64| match self {
            Storage::F16 => half::f16::from_f64(x).to_f64(),
            Storage::BF16 => half::bf16::from_f64(x).to_f64(),
            _ => x as f32 as f64,
        };
        match (self.kind(), v) {
            (Kind::Float, Scalar::F(x)) => Scalar::F(float(x)),
            (Kind::Float, Scalar::I(i)) => Scalar::F(float(i as f64)),
            (Kind::Bool, Scalar::F(x)) => Scalar::I(i64::from(x != 0.0)),
            (Kind::Bool, Scalar::I(i)) => Scalar::I(i64::from(i != 0)),
            (Kind::Int, v) => {
                let i = match v {
                    Scalar::F(x) => x as i64,
                    Scalar::I(i) => i,
                };
                Scalar::I(if self == Storage::I32 { i as i32 as i64 } else { i })
            }
        }
    }
}

impl From<Element> for Storage {
    fn from(e: Element) -> Storage {
        match e {
            Element::F16 => Storage::F16,
            Element::BF16 => Storage::BF16,
            Element::F32 => Storage::F32,
        }
    }
}

/// The type a step computes in: f32, int64 or bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Float,
    Int,
    Bool,
}

impl Kind {
    fn cpp(self) -> &'static str {
        match self {
            Kind::Float => "float",
            Kind::Int => "int64_t",
            Kind::Bool => "bool",
        }
    }
}

/// One value on the host: floats in f64, integers and bools (0 / 1) in i64 (exactly).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F(f64),
    I(i64),
}

impl Scalar {
    /// The float of a float step (an integer where a float is expected is a validation bug).
    pub fn f(self) -> f64 {
        match self {
            Scalar::F(x) => x,
            Scalar::I(i) => i as f64,
        }
    }

    fn truth(self) -> bool {
        match self {
            Scalar::F(x) => x != 0.0,
            Scalar::I(i) => i != 0,
        }
    }
}

/// An input's elements on the host, in its own shape.
#[derive(Clone, Copy, Debug)]
pub enum HostInput<'a> {
    Float(&'a [f64]),
    /// Integers and bools (0 / 1).
    Int(&'a [i64]),
}

impl HostInput<'_> {
    fn at(&self, i: usize) -> Scalar {
        match self {
            HostInput::Float(v) => Scalar::F(v[i]),
            HostInput::Int(v) => Scalar::I(v[i]),
        }
    }
}

/// Element-wise comparisons (bool results).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompareFn {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareFn {
    pub fn apply(self, a: Scalar, b: Scalar) -> bool {
        fn cmp<T: PartialOrd>(f: CompareFn, a: T, b: T) -> bool {
            match f {
                CompareFn::Eq => a == b,
                CompareFn::Lt => a < b,
                CompareFn::Le => a <= b,
                CompareFn::Gt => a > b,
                CompareFn::Ge => a >= b,
            }
        }
        match (a, b) {
            (Scalar::I(x), Scalar::I(y)) => cmp(self, x, y),
            (a, b) => cmp(self, a.f(), b.f()),
        }
    }

    fn cpp(self) -> &'static str {
        match self {
            CompareFn::Eq => "==",
            CompareFn::Lt => "<",
            CompareFn::Le => "<=",
            CompareFn::Gt => ">",
            CompareFn::Ge => ">=",
        }
    }
}

/// Logic on bools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogicFn {
    And,
    Or,
    Xor,
}

impl LogicFn {
    pub fn apply(self, a: bool, b: bool) -> bool {
        match self {
            LogicFn::And => a && b,
            LogicFn::Or => a || b,
            LogicFn::Xor => a != b,
        }
    }

    fn cpp(self) -> &'static str {
        match self {
            LogicFn::And => "&&",
            LogicFn::Or => "||",
            LogicFn::Xor => "!=",
        }
    }
}

/// Element-wise functions of one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryFn {
    Exp,
    Sqrt,
    Erf,
    Neg,
    Abs,
    Reciprocal,
    Log,
    Ceil,
    Floor,
    /// Halves to even (rintf under the default rounding mode).
    Round,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    /// -1, 0 or 1; NaN and -0 stay.
    Sign,
    /// `x < 0 ? alpha * (exp(x) - 1) : x`.
    Elu {
        #[serde(with = "crate::json_float::ordered_f32")]
        alpha: OrderedFloat<f32>,
    },
    /// `gamma * (x > 0 ? x : alpha * (exp(x) - 1))`.
    Selu {
        #[serde(with = "crate::json_float::ordered_f32")]
        alpha: OrderedFloat<f32>,
        #[serde(with = "crate::json_float::ordered_f32")]
        gamma: OrderedFloat<f32>,
    },
    /// `max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`.
    Celu {
        #[serde(with = "crate::json_float::ordered_f32")]
        alpha: OrderedFloat<f32>,
    },
    /// `x > alpha ? x : 0`.
    ThresholdedRelu {
        #[serde(with = "crate::json_float::ordered_f32")]
        alpha: OrderedFloat<f32>,
    },
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `x < -lambd ? x + bias : x > lambd ? x - bias : 0`.
    Shrink {
        #[serde(with = "crate::json_float::ordered_f32")]
        bias: OrderedFloat<f32>,
        #[serde(with = "crate::json_float::ordered_f32")]
        lambd: OrderedFloat<f32>,
    },
    Activation(Activation),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryFn {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    /// A NaN in either gives NaN (numpy's maximum / minimum).
    Max,
    Min,
    /// `a < 0 ? a * b : a` (ONNX PRelu, b the slope).
    PRelu,
}

/// A reduction along the row (the last axis of the iteration space), in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reduction {
    Sum,
    Mean,
    Max,
}

/// One value of the region, from earlier steps (by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The spec's input `i`.
    Input(usize),
    Const(#[serde(with = "crate::json_float::ordered_f32")] OrderedFloat<f32>),
    Unary(UnaryFn, usize),
    Binary(BinaryFn, usize, usize),
    /// One value per row (broadcast back along the row).
    Reduce(Reduction, usize),
    /// A comparison of two values of one kind.
    Compare(CompareFn, usize, usize),
    Logic(LogicFn, usize, usize),
    Not(usize),
    /// `cond ? a : b` (cond a bool; a and b of one kind).
    Select(usize, usize, usize),
    /// The value converted to the storage type (and computed on in that type's kind).
    Cast(Storage, usize),
    /// Row `index` (an int step, one value per row; negative counts from the end) of table
    /// input `.0` at the column: an embedding lookup. An index outside the table gives NaN.
    Gather(usize, usize),
}

/// How an input is addressed: `Dense` when its shape is the iteration space (index =
/// row * width + col), else through the problem's strides (broadcasts); `Row` likewise, for
/// an input with one value per row (broadcast along it: a mask unsqueezed on the last axis),
/// so values computed from it alone are per-row outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Dense,
    Strided,
    Row,
    /// An embedding table read by row through [`Step::Gather`] (row stride at the space's
    /// `rank - 2`, column stride at `rank - 1`, `table_rows` rows); never broadcast.
    Table,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Input {
    pub element: Storage,
    pub access: Access,
}

/// An output: the step it holds, its element type, and whether it has one value per row (a
/// reduction's result kept as a length-1 last axis) or one per element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Output {
    pub step: usize,
    pub element: Storage,
    pub per_row: bool,
}

/// One stitched kernel. Computes floats in f32 whatever their inputs' and outputs' types.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StitchSpec {
    pub inputs: Vec<Input>,
    pub steps: Vec<Step>,
    pub outputs: Vec<Output>,
}

/// Why a stitch spec is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StitchRejection {
    #[error("{0} inputs: stitched kernels take 1..={STITCH_MAX_INPUTS}")]
    Inputs(usize),
    #[error("{0} outputs: stitched kernels write 1..={STITCH_MAX_OUTPUTS}")]
    Outputs(usize),
    #[error("step {0} reads step {1}, which is not before it")]
    Order(usize, usize),
    #[error("step {0} reads input {1}, which the spec does not have")]
    NoInput(usize, usize),
    #[error("step {0}: constant {1} is not a number")]
    NotANumber(usize, f32),
    #[error("output {0} holds step {1}, which does not exist")]
    NoStep(usize, usize),
    #[error("output {0} is per row but step {1} varies along the row")]
    NotPerRow(usize, usize),
    #[error("step {0}: {1}")]
    Kind(usize, String),
    #[error("output {0} stores {1:?} but step {2} computes a {3:?}")]
    OutputKind(usize, Storage, usize, Kind),
}

impl StitchSpec {
    /// Steps each step reads.
    fn args(s: &Step) -> Vec<usize> {
        match *s {
            Step::Input(_) | Step::Const(_) => vec![],
            Step::Unary(_, a) | Step::Reduce(_, a) | Step::Not(a) | Step::Cast(_, a) | Step::Gather(_, a) => vec![a],
            Step::Binary(_, a, b) | Step::Compare(_, a, b) | Step::Logic(_, a, b) => vec![a, b],
            Step::Select(c, a, b) => vec![c, a, b],
        }
    }

    /// The type each step computes in, or the first step whose arguments do not fit it
    /// (reductions take floats, arithmetic floats or integers (add, subtract, multiply,
    /// divide, max, min, negate, abs), logic bools, a comparison or a select two values of one
    /// kind). Steps must be in order.
    pub fn kinds(&self) -> Result<Vec<Kind>, StitchRejection> {
        let mut k: Vec<Kind> = Vec::with_capacity(self.steps.len());
        for (j, s) in self.steps.iter().enumerate() {
            let bad = |why: String| Err(StitchRejection::Kind(j, why));
            let of = |a: usize| k.get(a).copied().ok_or(StitchRejection::Order(j, a));
            let kind = match *s {
                Step::Input(i) => self.inputs.get(i).ok_or(StitchRejection::NoInput(j, i))?.element.kind(),
                Step::Const(_) => Kind::Float,
                Step::Unary(f, a) => match (of(a)?, f) {
                    (Kind::Float, _) => Kind::Float,
                    (Kind::Int, f) if f.on_ints() => Kind::Int,
                    (other, _) => return bad(format!("{f:?} of a {other:?} value (step {a})")),
                },
                Step::Reduce(_, a) => match of(a)? {
                    Kind::Float => Kind::Float,
                    other => return bad(format!("a reduction of a {other:?} value (step {a})")),
                },
                Step::Binary(f, a, b) => match (of(a)?, of(b)?) {
                    (Kind::Float, Kind::Float) => Kind::Float,
                    (Kind::Int, Kind::Int) if f.on_ints() => Kind::Int,
                    (p, q) => return bad(format!("{f:?} of {p:?} and {q:?} values")),
                },
                Step::Compare(_, a, b) => match (of(a)?, of(b)?) {
                    (p, q) if p == q => Kind::Bool,
                    (p, q) => return bad(format!("compares a {p:?} with a {q:?}")),
                },
                Step::Logic(_, a, b) => match (of(a)?, of(b)?) {
                    (Kind::Bool, Kind::Bool) => Kind::Bool,
                    (p, q) => return bad(format!("logic on {p:?} and {q:?} values")),
                },
                Step::Not(a) => match of(a)? {
                    Kind::Bool => Kind::Bool,
                    other => return bad(format!("negates a {other:?} value")),
                },
                Step::Select(c, a, b) => match (of(c)?, of(a)?, of(b)?) {
                    (Kind::Bool, p, q) if p == q => p,
                    (c, p, q) => return bad(format!("selects by a {c:?} between {p:?} and {q:?}")),
                },
                Step::Cast(to, a) => {
                    of(a)?;
                    to.kind()
                }
                Step::Gather(t, a) => {
                    let table = self.inputs.get(t).ok_or(StitchRejection::NoInput(j, t))?;
                    match (table.access, table.element.kind(), of(a)?) {
                        (Access::Table, Kind::Float, Kind::Int) => Kind::Float,
                        (access, kind, index) => {
                            return bad(format!(
                                "gathers from a {access:?} input of {kind:?} by a {index:?} index (a float table by an int)"
                            ))
                        }
                    }
                }
            };
            k.push(kind);
        }
        Ok(k)
    }

    /// Phase of each step: how many reductions lie on its longest path (a reduction is
    /// available from the phase after its argument's). Phase k's loop accumulates the
    /// reductions of phase k + 1.
    pub fn phases(&self) -> Vec<usize> {
        let mut p = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let base = Self::args(s).iter().map(|&a| p[a]).max().unwrap_or(0);
            p.push(if matches!(s, Step::Reduce(..)) { base + 1 } else { base });
        }
        p
    }

    /// Whether each step varies along the row (reads an input and no reduction cuts it off).
    fn varies(&self) -> Vec<bool> {
        let mut v = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            v.push(match *s {
                Step::Input(i) => self.inputs.get(i).is_none_or(|x| x.access != Access::Row),
                Step::Gather(..) => true,
                Step::Const(_) | Step::Reduce(..) => false,
                Step::Unary(_, a) | Step::Not(a) | Step::Cast(_, a) => v[a],
                Step::Binary(_, a, b) | Step::Compare(_, a, b) | Step::Logic(_, a, b) => v[a] || v[b],
                Step::Select(c, a, b) => v[c] || v[a] || v[b],
            });
        }
        v
    }

    pub fn reduces(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Reduce(..)))
    }

    /// The run-time problem for an iteration space `shape` whose inputs have the shapes
    /// `inputs`, checked against the spec (dense inputs must have the space's shape).
    pub fn problem(&self, shape: &[usize], inputs: &[&[usize]]) -> Result<BoltStitchProblem, String> {
        let strides: Vec<Vec<i64>> = inputs.iter().map(|s| crate::abi::contiguous_strides(s)).collect();
        let views: Vec<(&[usize], &[i64])> = inputs.iter().zip(&strides).map(|(s, t)| (*s, t.as_slice())).collect();
        self.problem_of_views(shape, &views)
    }

    /// [`StitchSpec::problem`] for inputs read as (shape, element strides) views (a transpose
    /// read in place); dense inputs must be contiguous views of the space's shape.
    pub fn problem_of_views(
        &self,
        shape: &[usize],
        inputs: &[(&[usize], &[i64])],
    ) -> Result<BoltStitchProblem, String> {
        if inputs.len() != self.inputs.len() {
            return Err(format!("{} inputs for a kernel of {}", inputs.len(), self.inputs.len()));
        }
        if shape.is_empty() || shape.len() > STITCH_MAX_RANK {
            return Err(format!(
                "an iteration space of rank {} (stitched kernels take 1..={STITCH_MAX_RANK})",
                shape.len()
            ));
        }
        for (i, (x, (s, st))) in self.inputs.iter().zip(inputs).enumerate() {
            if x.access == Access::Dense && (*s != shape || *st != crate::abi::contiguous_strides(s)) {
                return Err(format!("input {i} of shape {s:?} (strides {st:?}) is read densely over {shape:?}"));
            }
        }
        // Tables are read by row, not broadcast: a scalar here, their strides set below.
        let broadcast: Vec<(&[usize], &[i64])> = self
            .inputs
            .iter()
            .zip(inputs)
            .map(|(x, &v)| if x.access == Access::Table { (&[][..], &[][..]) } else { v })
            .collect();
        let mut p = BoltStitchProblem::with_strides(shape, &broadcast)
            .ok_or_else(|| format!("inputs {inputs:?} do not broadcast to {shape:?}"))?;
        for (i, (x, (s, st))) in self.inputs.iter().zip(inputs).enumerate() {
            if x.access != Access::Table {
                continue;
            }
            let rank = shape.len();
            if s.len() != 2 || s[1] != shape[rank - 1] || rank < 2 {
                return Err(format!("table input {i} of shape {s:?} for rows of {shape:?}"));
            }
            p.strides[i][rank - 2] = st[0];
            p.strides[i][rank - 1] = st[1];
            p.table_rows[i] = s[0] as i64;
        }
        for (i, x) in self.inputs.iter().enumerate() {
            if x.access == Access::Row && p.strides[i][shape.len() - 1] != 0 {
                return Err(format!("input {i} of shape {:?} varies along rows of {shape:?}", inputs[i].0));
            }
        }
        self.rows_spanned(&p, shape)?;
        Ok(p)
    }

    /// Checks that what the kernel computes over whole rows spans them at run time: each
    /// reduction's argument and each output of the space's shape must read an input that
    /// varies along the row. A planner proves this where row lengths are known; where they are
    /// not (a length computed at run time), an input of one element along the row would make
    /// ONNX reduce an axis of 1, or write a narrower output, where the kernel spans `width`:
    /// refused here rather than computed wrong.
    fn rows_spanned(&self, p: &BoltStitchProblem, shape: &[usize]) -> Result<(), String> {
        let last = shape.len() - 1;
        if shape[last] <= 1 {
            return Ok(());
        }
        let varies = self.varies();
        let mut spans: Vec<bool> = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            spans.push(match *s {
                Step::Input(i) => self.inputs[i].access == Access::Table || p.strides[i][last] != 0,
                Step::Gather(..) => true,
                Step::Const(_) | Step::Reduce(..) => false,
                Step::Unary(_, a) | Step::Not(a) | Step::Cast(_, a) => spans[a],
                Step::Binary(_, a, b) | Step::Compare(_, a, b) | Step::Logic(_, a, b) => spans[a] || spans[b],
                Step::Select(c, a, b) => spans[c] || spans[a] || spans[b],
            });
        }
        for (j, s) in self.steps.iter().enumerate() {
            if let Step::Reduce(_, a) = *s {
                if !spans[a] {
                    return Err(format!(
                        "step {j} would reduce rows of {} elements of a value that is one element along them",
                        shape[last]
                    ));
                }
            }
        }
        for (k, o) in self.outputs.iter().enumerate() {
            if !o.per_row && varies[o.step] && !spans[o.step] {
                return Err(format!(
                    "output {k} would be written over rows of {} elements but is one element along them",
                    shape[last]
                ));
            }
        }
        Ok(())
    }

    /// The spec's meaning on host data (per row; each float step rounded to f32, integers and bools exactly),
    /// for tests of the rendered code and of callers' lowerings: `inputs[i]` holds input i's
    /// elements in its own shape, addressed through `problem`'s strides. Returns each
    /// output's values (rows x width, or rows), converted to the output's storage.
    pub fn eval(&self, p: &BoltStitchProblem, inputs: &[HostInput]) -> Vec<Vec<Scalar>> {
        let (rows, width, rank) = (p.rows as usize, p.width as usize, p.rank as usize);
        let mut outs: Vec<Vec<Scalar>> =
            self.outputs.iter().map(|o| Vec::with_capacity(if o.per_row { rows } else { rows * width })).collect();
        let phases = self.phases();
        for row in 0..rows {
            // Coordinates of the row's first element.
            let mut coord = vec![0usize; rank];
            let mut r = row;
            for d in (0..rank.saturating_sub(1)).rev() {
                coord[d] = r % p.shape[d] as usize;
                r /= p.shape[d] as usize;
            }
            let index = |i: usize, col: usize| -> usize {
                let mut at = col as i64 * p.strides[i][rank - 1];
                for d in 0..rank - 1 {
                    at += coord[d] as i64 * p.strides[i][d];
                }
                at as usize
            };
            let mut reduced = vec![0.0f64; self.steps.len()];
            let max_phase = phases.iter().copied().max().unwrap_or(0);
            let value = |col: usize, reduced: &[f64]| -> Vec<Scalar> {
                let mut v: Vec<Scalar> = Vec::with_capacity(self.steps.len());
                for (j, s) in self.steps.iter().enumerate() {
                    let x = match *s {
                        Step::Input(i) => inputs[i].at(index(i, col)),
                        Step::Const(c) => Scalar::F(c.0 as f64),
                        // Every float step rounds to f32, as the kernel's registers do;
                        // integer steps exactly.
                        Step::Unary(f, a) => match v[a] {
                            Scalar::I(x) => Scalar::I(f.apply_int(x)),
                            x => Scalar::F(f.apply(x.f()) as f32 as f64),
                        },
                        Step::Binary(f, a, b) => match (v[a], v[b]) {
                            (Scalar::I(x), Scalar::I(y)) => Scalar::I(f.apply_int(x, y)),
                            // Every float step rounds to f32, as the kernel's registers do.
                            (x, y) => Scalar::F(f.apply(x.f(), y.f()) as f32 as f64),
                        },
                        Step::Reduce(..) => Scalar::F(reduced[j] as f32 as f64),
                        Step::Compare(f, a, b) => Scalar::I(i64::from(f.apply(v[a], v[b]))),
                        Step::Logic(f, a, b) => Scalar::I(i64::from(f.apply(v[a].truth(), v[b].truth()))),
                        Step::Not(a) => Scalar::I(i64::from(!v[a].truth())),
                        Step::Select(c, a, b) => {
                            if v[c].truth() {
                                v[a]
                            } else {
                                v[b]
                            }
                        }
                        Step::Cast(to, a) => to.convert(v[a]),
                        Step::Gather(t, a) => {
                            let rows = p.table_rows[t];
                            let Scalar::I(mut k) = v[a] else { unreachable!("validated: an int index") };
                            if k < 0 {
                                k += rows;
                            }
                            if k < 0 || k >= rows {
                                Scalar::F(f64::NAN)
                            } else {
                                let at = k * p.strides[t][rank - 2] + col as i64 * p.strides[t][rank - 1];
                                inputs[t].at(at as usize)
                            }
                        }
                    };
                    v.push(x);
                }
                v
            };
            for phase in 1..=max_phase {
                let cols: Vec<Vec<Scalar>> = (0..width).map(|c| value(c, &reduced)).collect();
                for (j, s) in self.steps.iter().enumerate() {
                    if let (Step::Reduce(kind, a), true) = (s, phases[j] == phase) {
                        let it = cols.iter().map(|v| v[*a].f());
                        reduced[j] = match kind {
                            Reduction::Sum => it.sum(),
                            Reduction::Mean => it.sum::<f64>() / width as f64,
                            Reduction::Max => it.fold(f64::NEG_INFINITY, |m, v| BinaryFn::Max.apply(m, v)),
                        };
                    }
                }
            }
            for col in 0..width {
                let v = value(col, &reduced);
                for (o, out) in self.outputs.iter().zip(outs.iter_mut()) {
                    if !o.per_row || col == 0 {
                        out.push(o.element.convert(v[o.step]));
                    }
                }
            }
        }
        outs
    }
}

impl UnaryFn {
    /// Whether it is defined on integers (the arithmetic of lengths and indices).
    pub fn on_ints(&self) -> bool {
        matches!(self, UnaryFn::Neg | UnaryFn::Abs)
    }

    /// On int64 values as a kernel computes them: wrapping (the negation and the absolute
    /// value of INT64_MIN are INT64_MIN).
    pub fn apply_int(&self, x: i64) -> i64 {
        match self {
            UnaryFn::Neg => x.wrapping_neg(),
            UnaryFn::Abs => x.wrapping_abs(),
            _ => unreachable!("validated: not on integers"),
        }
    }

    pub fn apply(&self, x: f64) -> f64 {
        match self {
            UnaryFn::Exp => x.exp(),
            UnaryFn::Sqrt => x.sqrt(),
            UnaryFn::Erf => libm::erf(x),
            UnaryFn::Neg => -x,
            UnaryFn::Abs => x.abs(),
            UnaryFn::Reciprocal => 1.0 / x,
            UnaryFn::Log => x.ln(),
            UnaryFn::Ceil => x.ceil(),
            UnaryFn::Floor => x.floor(),
            UnaryFn::Round => x.round_ties_even(),
            UnaryFn::Sin => x.sin(),
            UnaryFn::Cos => x.cos(),
            UnaryFn::Tan => x.tan(),
            UnaryFn::Asin => x.asin(),
            UnaryFn::Acos => x.acos(),
            UnaryFn::Atan => x.atan(),
            UnaryFn::Sinh => x.sinh(),
            UnaryFn::Cosh => x.cosh(),
            UnaryFn::Asinh => x.asinh(),
            UnaryFn::Acosh => x.acosh(),
            UnaryFn::Atanh => x.atanh(),
            UnaryFn::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    x
                }
            }
            UnaryFn::Elu { alpha } => {
                if x < 0.0 {
                    alpha.0 as f64 * x.exp_m1()
                } else {
                    x
                }
            }
            UnaryFn::Selu { alpha, gamma } => gamma.0 as f64 * if x > 0.0 { x } else { alpha.0 as f64 * x.exp_m1() },
            UnaryFn::Celu { alpha } => x.max(0.0) + (alpha.0 as f64 * (x / alpha.0 as f64).exp_m1()).min(0.0),
            UnaryFn::ThresholdedRelu { alpha } => {
                if x > alpha.0 as f64 {
                    x
                } else {
                    0.0
                }
            }
            UnaryFn::Softsign => x / (1.0 + x.abs()),
            UnaryFn::Mish => x * (x.max(0.0) + (-x.abs()).exp().ln_1p()).tanh(),
            UnaryFn::Shrink { bias, lambd } => {
                let (b, l) = (bias.0 as f64, lambd.0 as f64);
                if x < -l {
                    x + b
                } else if x > l {
                    x - b
                } else {
                    0.0
                }
            }
            UnaryFn::Activation(a) => a.apply(x),
        }
    }

    /// The function in f32 C++ on the value `x` (a variable name).
    pub(crate) fn cpp(&self, x: &str) -> String {
        let f = |v: f32| format!("{v:e}f");
        match *self {
            UnaryFn::Exp => format!("expf({x})"),
            UnaryFn::Sqrt => format!("sqrtf({x})"),
            UnaryFn::Erf => format!("erff({x})"),
            UnaryFn::Neg => format!("-{x}"),
            UnaryFn::Abs => format!("fabsf({x})"),
            UnaryFn::Reciprocal => format!("1.f / {x}"),
            UnaryFn::Log => format!("logf({x})"),
            UnaryFn::Ceil => format!("ceilf({x})"),
            UnaryFn::Floor => format!("floorf({x})"),
            UnaryFn::Round => format!("rintf({x})"),
            UnaryFn::Sin => format!("sinf({x})"),
            UnaryFn::Cos => format!("cosf({x})"),
            UnaryFn::Tan => format!("tanf({x})"),
            UnaryFn::Asin => format!("asinf({x})"),
            UnaryFn::Acos => format!("acosf({x})"),
            UnaryFn::Atan => format!("atanf({x})"),
            UnaryFn::Sinh => format!("sinhf({x})"),
            UnaryFn::Cosh => format!("coshf({x})"),
            UnaryFn::Asinh => format!("asinhf({x})"),
            UnaryFn::Acosh => format!("acoshf({x})"),
            UnaryFn::Atanh => format!("atanhf({x})"),
            // Comparisons with NaN are false: NaN (and -0) pass through.
            UnaryFn::Sign => format!("({x} > 0.f ? 1.f : ({x} < 0.f ? -1.f : {x}))"),
            UnaryFn::Elu { alpha } => format!("({x} < 0.f ? {} * expm1f({x}) : {x})", f(alpha.0)),
            UnaryFn::Selu { alpha, gamma } => {
                format!("{} * ({x} > 0.f ? {x} : {} * expm1f({x}))", f(gamma.0), f(alpha.0))
            }
            UnaryFn::Celu { alpha } => {
                format!("fmaxf({x}, 0.f) + fminf(0.f, {a} * expm1f({x} / {a}))", a = f(alpha.0))
            }
            UnaryFn::ThresholdedRelu { alpha } => format!("({x} > {} ? {x} : 0.f)", f(alpha.0)),
            UnaryFn::Softsign => format!("{x} / (1.f + fabsf({x}))"),
            UnaryFn::Mish => format!("{x} * tanhf(fmaxf({x}, 0.f) + log1pf(expf(-fabsf({x}))))"),
            UnaryFn::Shrink { bias, lambd } => {
                format!("({x} < -{l} ? {x} + {b} : ({x} > {l} ? {x} - {b} : 0.f))", l = f(lambd.0), b = f(bias.0))
            }
            UnaryFn::Activation(a) => match a {
                Activation::Identity => x.to_string(),
                Activation::Relu => format!("fmaxf({x}, 0.f)"),
                Activation::GeluErf => format!("0.5f * {x} * (1.f + erff({x} * 0.70710678118654752f))"),
                Activation::GeluTanh => {
                    format!("0.5f * {x} * (1.f + tanhf(0.79788456080286536f * ({x} + 0.044715f * {x} * {x} * {x})))")
                }
                Activation::HardSwish => format!("{x} * fminf(fmaxf({x} / 6.f + 0.5f, 0.f), 1.f)"),
                Activation::HardSigmoid { alpha, beta } => {
                    format!("fminf(fmaxf({} * {x} + {}, 0.f), 1.f)", f(alpha.0), f(beta.0))
                }
                // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
                Activation::Softplus => format!("fmaxf({x}, 0.f) + log1pf(expf(-fabsf({x})))"),
                Activation::Sigmoid => format!("1.f / (1.f + expf(-{x}))"),
                Activation::Silu => format!("{x} / (1.f + expf(-{x}))"),
                Activation::Tanh => format!("tanhf({x})"),
                Activation::LeakyRelu { alpha } => format!("({x} >= 0.f ? {x} : {} * {x})", f(alpha.0)),
                Activation::Clip { min, max } => format!("fminf(fmaxf({x}, {}), {})", f(min.0), f(max.0)),
            },
        }
    }
}

impl BinaryFn {
    pub fn apply(&self, a: f64, b: f64) -> f64 {
        match self {
            BinaryFn::Add => a + b,
            BinaryFn::Sub => a - b,
            BinaryFn::Mul => a * b,
            BinaryFn::Div => a / b,
            BinaryFn::Pow => a.powf(b),
            BinaryFn::Max | BinaryFn::Min if a.is_nan() || b.is_nan() => f64::NAN,
            BinaryFn::Max => a.max(b),
            BinaryFn::Min => a.min(b),
            BinaryFn::PRelu if a < 0.0 => a * b,
            BinaryFn::PRelu => a,
        }
    }

    /// Whether it is defined on integers: the arithmetic of lengths and indices.
    pub fn on_ints(&self) -> bool {
        matches!(self, BinaryFn::Add | BinaryFn::Sub | BinaryFn::Mul | BinaryFn::Div | BinaryFn::Max | BinaryFn::Min)
    }

    /// On int64 values as a kernel computes them: wrapping (two's complement), division
    /// truncating toward zero (C++'s, onnxruntime's) and by zero giving 0 (a kernel cannot
    /// stop; onnxruntime's CPU provider traps).
    pub fn apply_int(&self, a: i64, b: i64) -> i64 {
        match self {
            BinaryFn::Add => a.wrapping_add(b),
            BinaryFn::Sub => a.wrapping_sub(b),
            BinaryFn::Mul => a.wrapping_mul(b),
            BinaryFn::Div if b == 0 => 0,
            BinaryFn::Div => a.wrapping_div(b),
            BinaryFn::Max => a.max(b),
            BinaryFn::Min => a.min(b),
            BinaryFn::Pow | BinaryFn::PRelu => unreachable!("validated: not on integers"),
        }
    }

    /// The int64 expression (see [`BinaryFn::apply_int`]): unsigned arithmetic wraps where
    /// signed overflow would be undefined.
    fn cpp_int(&self, a: &str, b: &str) -> String {
        match self {
            BinaryFn::Add => format!("int64_t(uint64_t({a}) + uint64_t({b}))"),
            BinaryFn::Sub => format!("int64_t(uint64_t({a}) - uint64_t({b}))"),
            BinaryFn::Mul => format!("int64_t(uint64_t({a}) * uint64_t({b}))"),
            BinaryFn::Div => format!("int_div({a}, {b})"),
            BinaryFn::Max => format!("({a} > {b} ? {a} : {b})"),
            BinaryFn::Min => format!("({a} < {b} ? {a} : {b})"),
            BinaryFn::Pow | BinaryFn::PRelu => unreachable!("validated: not on integers"),
        }
    }

    fn cpp(&self, a: &str, b: &str) -> String {
        match self {
            BinaryFn::Add => format!("f32_add({a}, {b})"),
            BinaryFn::Sub => format!("f32_sub({a}, {b})"),
            BinaryFn::Mul => format!("f32_mul({a}, {b})"),
            BinaryFn::Div => format!("{a} / {b}"),
            BinaryFn::Pow => format!("powf({a}, {b})"),
            BinaryFn::Max => format!("nan_max({a}, {b})"),
            BinaryFn::Min => format!("nan_min({a}, {b})"),
            BinaryFn::PRelu => format!("({a} < 0 ? {a} * {b} : {a})"),
        }
    }
}

pub fn validate(spec: &StitchSpec) -> Result<(), StitchRejection> {
    if spec.inputs.is_empty() || spec.inputs.len() > STITCH_MAX_INPUTS {
        return Err(StitchRejection::Inputs(spec.inputs.len()));
    }
    if spec.outputs.is_empty() || spec.outputs.len() > STITCH_MAX_OUTPUTS {
        return Err(StitchRejection::Outputs(spec.outputs.len()));
    }
    for (j, s) in spec.steps.iter().enumerate() {
        if let Some(&a) = StitchSpec::args(s).iter().find(|&&a| a >= j) {
            return Err(StitchRejection::Order(j, a));
        }
        match *s {
            Step::Input(i) if i >= spec.inputs.len() => return Err(StitchRejection::NoInput(j, i)),
            // Infinities are fine (a Max with -inf); a NaN constant is a model bug to report.
            Step::Const(c) if c.0.is_nan() => return Err(StitchRejection::NotANumber(j, c.0)),
            _ => {}
        }
    }
    let kinds = spec.kinds()?;
    let varies = spec.varies();
    for (j, s) in spec.steps.iter().enumerate() {
        match *s {
            Step::Gather(_, a) if varies[a] => {
                return Err(StitchRejection::Kind(j, format!("the index (step {a}) varies along the row")))
            }
            Step::Input(i) if spec.inputs[i].access == Access::Table => {
                return Err(StitchRejection::Kind(j, format!("table input {i} is read only by a gather")))
            }
            _ => {}
        }
    }
    for (i, o) in spec.outputs.iter().enumerate() {
        if o.step >= spec.steps.len() {
            return Err(StitchRejection::NoStep(i, o.step));
        }
        if o.element.kind() != kinds[o.step] {
            return Err(StitchRejection::OutputKind(i, o.element, o.step, kinds[o.step]));
        }
        if o.per_row && varies[o.step] {
            return Err(StitchRejection::NotPerRow(i, o.step));
        }
    }
    Ok(())
}

/// A unique readable symbol: `bolt_stitch_<r|e><inputs>x<outputs>_<hash>` (r: with row
/// reductions, e: element-wise only), the hash over the whole spec.
pub fn symbol_for(spec: &StitchSpec) -> String {
    let json = serde_json::to_string(spec).expect("stitch spec serialises");
    let hash = blake3::hash(json.as_bytes()).to_hex();
    let kind = if spec.reduces() { "r" } else { "e" };
    format!("bolt_stitch_{kind}{}x{}_{}", spec.inputs.len(), spec.outputs.len(), &hash[..16])
}

pub const TEMPLATE: &str = "stitch.cu.tera";

#[derive(Serialize)]
struct InputContext {
    element: &'static str,
    /// The type it is loaded as.
    kind: &'static str,
    dense: bool,
    table: bool,
    /// Read along the row, a chunk at a time (dense or strided; not per row, not a table).
    chunked: bool,
    /// Its bit in the load masks and in the kernel's mask of vector accesses.
    bit: u32,
}

#[derive(Serialize)]
struct OutputContext {
    element: &'static str,
    step: usize,
    per_row: bool,
    /// Its bit in the kernel's mask of vector accesses (after the inputs').
    bit: u32,
}

/// A step as the template writes it: `<ty> const v<index> = <expr>;`.
#[derive(Serialize)]
struct StepContext {
    index: usize,
    phase: usize,
    ty: &'static str,
    expr: String,
}

/// A reduction finished at the start of `phase`, of step `arg`'s values.
#[derive(Serialize)]
struct ReduceContext {
    index: usize,
    arg: usize,
    /// Its slot in the row's `red` array.
    slot: usize,
    phase: usize,
    op: &'static str,
    identity: &'static str,
    mean: bool,
}

#[derive(Serialize)]
struct Context<'a> {
    symbol: &'a str,
    summary: String,
    inputs: Vec<InputContext>,
    outputs: Vec<OutputContext>,
    /// `phase_steps[k]`: the steps `accumulate_k` computes (what phase k + 1's reductions read).
    phase_steps: Vec<Vec<StepContext>>,
    /// The steps `store` computes (what the outputs hold).
    store_steps: Vec<StepContext>,
    reductions: Vec<ReduceContext>,
    /// The steps that compute the row cache's values (`row_values`), the values it holds, and
    /// how many elements of its row each thread keeps (0: none, every phase recomputes).
    row_values: Vec<StepContext>,
    cache_values: Vec<CachedContext>,
    cache: usize,
    /// Elements per chunk (`kVec`): a thread's columns come in chunks of this many adjacent
    /// elements, loaded and stored as one vector where the run-time layout allows.
    vector: usize,
    /// The inputs `accumulate_k`, `values` and `store` load, as masks of input bits.
    phase_loads: Vec<u32>,
    values_loads: u32,
    store_loads: u32,
    /// `row_steps[k]`: the steps computed once per row when phase k starts (after the
    /// reductions of phase k), and those the row's state keeps (`row_state`: all phases').
    row_steps: Vec<RowPhaseContext>,
    row_state: Vec<CachedContext>,
    max_group: usize,
}

/// Inputs read along the row, a chunk of adjacent elements at a time.
fn chunked(access: Access) -> bool {
    matches!(access, Access::Dense | Access::Strided)
}

/// The per-row steps of one phase: what `hoist_k` computes, and the values it keeps.
#[derive(Serialize)]
struct RowPhaseContext {
    steps: Vec<StepContext>,
    assign: Vec<CachedContext>,
}

/// A value the row cache holds: step `index`'s, of type `ty`.
#[derive(Serialize)]
struct CachedContext {
    index: usize,
    ty: &'static str,
}

/// Registers per thread the row cache may take (a value of 64 bits takes two), and the bounds
/// on the elements per thread it holds: up to 32 (what the thread mapping gives a thread when
/// rows are many), at least 4 or none (too many values to keep: recomputed, as without a cache).
const CACHE_REGISTERS: usize = 64;
const CACHE_MAX: usize = 32;
const CACHE_MIN: usize = 4;
/// Threads per row at most (a block of 256 may use 255 registers each: room for the cache).
const MAX_GROUP: usize = 256;
/// The columns of a row whose values the row cache holds when it holds one value per element
/// (a softmax's scores): wider rows recompute (re-read) the rest in every phase.
pub const ROW_CACHE_COLUMNS: usize = CACHE_MAX * MAX_GROUP;

/// One stitched kernel's block (relies on the unit prologue, like [`crate::render::render`]).
pub fn render(spec: &StitchSpec, symbol: &str) -> Result<String, RenderError> {
    crate::render::check_symbol(symbol)?;
    validate(spec).map_err(|r| RenderError::Unsupported { field: "stitch", reason: r.to_string() })?;
    let phases = spec.phases();
    let kinds = spec.kinds().map_err(|r| RenderError::Unsupported { field: "stitch", reason: r.to_string() })?;
    let v = |j: usize| format!("v{j}");
    let mut exprs = Vec::new();
    let mut reductions = Vec::new();
    for (j, s) in spec.steps.iter().enumerate() {
        exprs.push(match *s {
            Step::Input(i) => format!("load_{i}(k, e)"),
            Step::Const(c) if c.0.is_infinite() => (if c.0 > 0.0 { "INFINITY" } else { "-INFINITY" }).to_string(),
            Step::Const(c) => format!("{:e}f", c.0),
            Step::Unary(UnaryFn::Neg, x) if kinds[x] == Kind::Int => format!("int64_t(0 - uint64_t({}))", v(x)),
            Step::Unary(UnaryFn::Abs, x) if kinds[x] == Kind::Int => {
                format!("({0} < 0 ? int64_t(0 - uint64_t({0})) : {0})", v(x))
            }
            Step::Unary(f, x) => f.cpp(&v(x)),
            Step::Binary(f, x, y) if kinds[x] == Kind::Int => f.cpp_int(&v(x), &v(y)),
            Step::Binary(f, x, y) => f.cpp(&v(x), &v(y)),
            Step::Reduce(kind, x) => {
                let slot = reductions.len();
                let (op, identity) = match kind {
                    Reduction::Sum | Reduction::Mean => ("sum", "0.f"),
                    Reduction::Max => ("max", "-INFINITY"),
                };
                reductions.push(ReduceContext {
                    index: j,
                    arg: x,
                    slot,
                    phase: phases[j],
                    op,
                    identity,
                    mean: kind == Reduction::Mean,
                });
                format!("q.red[{slot}]")
            }
            Step::Compare(f, x, y) => format!("{} {} {}", v(x), f.cpp(), v(y)),
            Step::Logic(f, x, y) => format!("{} {} {}", v(x), f.cpp(), v(y)),
            Step::Not(x) => format!("!{}", v(x)),
            Step::Select(c, x, y) => format!("{} ? {} : {}", v(c), v(x), v(y)),
            Step::Gather(t, x) => format!("gather_{t}(p, a, col, {})", v(x)),
            Step::Cast(to, x) => match (to, kinds[x]) {
                (Storage::F32, _) => format!("float({})", v(x)),
                (Storage::Bool, Kind::Float) => format!("{} != 0.f", v(x)),
                (Storage::F16 | Storage::BF16, _) => format!("float({}(float({})))", to.cpp(), v(x)),
                (Storage::Bool, _) => format!("{} != 0", v(x)),
                (Storage::I64, _) => format!("static_cast<int64_t>({})", v(x)),
                // Through int64 then wrapped, as the host's meaning (`Storage::convert`).
                (Storage::I32, _) => format!("int64_t(int32_t(static_cast<int64_t>({})))", v(x)),
            },
        });
    }
    // The steps a set of roots needs, in order; `leaf` steps are computed elsewhere (a finished
    // reduction, a value the row cache holds) and not followed.
    let reach = |roots: &[usize], leaf: &dyn Fn(usize) -> bool| -> Vec<bool> {
        let mut live = vec![false; spec.steps.len()];
        let mut stack = roots.to_vec();
        while let Some(j) = stack.pop() {
            if !std::mem::replace(&mut live[j], true) && !leaf(j) {
                stack.extend(StitchSpec::args(&spec.steps[j]));
            }
        }
        live
    };
    let is_reduce = |j: usize| matches!(spec.steps[j], Step::Reduce(..));
    // Steps that do not vary along the row (a LayerNorm's sqrt(var + eps), a per-row mask's
    // load) run once per row, when their phase's reductions are done, not once per element:
    // the per-element code reads them from the row's state like the reductions.
    let varies = spec.varies();
    let hoisted: Vec<bool> = (0..spec.steps.len())
        .map(|j| !varies[j] && !matches!(spec.steps[j], Step::Const(_) | Step::Reduce(..)))
        .collect();
    let max_phase = phases.iter().copied().max().unwrap_or(0);
    let roots_of_phase = |k: usize| reductions.iter().filter(|r| r.phase == k + 1).map(|r| r.arg).collect::<Vec<_>>();
    let output_roots: Vec<usize> = spec.outputs.iter().map(|o| o.step).collect();
    // The row cache: the values phase 0 computes that a later phase reads again (LayerNorm's
    // residual sum, softmax's masked scores). Each is computed once per element and kept in
    // registers, so later phases read no input again and recompute nothing below them.
    let live0 = if max_phase > 0 { reach(&roots_of_phase(0), &is_reduce) } else { vec![false; spec.steps.len()] };
    // Walking down from every later root, the first steps phase 0 computed (constants aside).
    let kept = |j: usize| live0[j] && varies[j];
    let later: Vec<usize> = (1..max_phase).flat_map(roots_of_phase).chain(output_roots.iter().copied()).collect();
    let reached = reach(&later, &|j| is_reduce(j) || hoisted[j] || kept(j));
    let cached: Vec<bool> = (0..spec.steps.len()).map(|j| reached[j] && kept(j)).collect();
    // `read(j)`: how code reads step j computed elsewhere (None: computes it in place).
    let contexts = |live: Vec<bool>, read: &dyn Fn(usize) -> Option<String>| -> Vec<StepContext> {
        (0..spec.steps.len())
            .filter(|&j| live[j])
            .map(|j| StepContext {
                index: j,
                phase: phases[j],
                ty: kinds[j].cpp(),
                expr: read(j).unwrap_or_else(|| exprs[j].clone()),
            })
            .collect()
    };
    let per_row = |j: usize| hoisted[j].then(|| format!("q.v{j}"));
    let per_element = |j: usize| if cached[j] { Some(format!("f.v{j}")) } else { per_row(j) };
    let leaf = |j: usize| is_reduce(j) || hoisted[j] || cached[j];
    let phase_steps: Vec<Vec<StepContext>> =
        (0..max_phase).map(|k| contexts(reach(&roots_of_phase(k), &leaf), &per_element)).collect();
    let store_steps = contexts(reach(&output_roots, &leaf), &per_element);
    let cache_roots: Vec<usize> = (0..spec.steps.len()).filter(|&j| cached[j]).collect();
    let row_values = contexts(reach(&cache_roots, &|j| is_reduce(j) || hoisted[j]), &per_row);
    // The per-row steps any code reads, by phase: phase k's once its reductions are done, each
    // computed from the reductions and the earlier phases' per-row steps.
    let everything: Vec<usize> = (0..max_phase).flat_map(roots_of_phase).chain(output_roots.iter().copied()).collect();
    let needed = reach(&everything, &is_reduce);
    // A per-row step the row's state keeps: one that per-element code or a later phase's
    // per-row steps read (or a root), not one only its own phase's per-row steps read.
    let read_later = |j: usize| {
        everything.contains(&j)
            || (0..spec.steps.len()).any(|m| {
                needed[m] && StitchSpec::args(&spec.steps[m]).contains(&j) && (!hoisted[m] || phases[m] > phases[j])
            })
    };
    let row_steps: Vec<RowPhaseContext> = (0..=max_phase)
        .map(|k| {
            let mine: Vec<usize> =
                (0..spec.steps.len()).filter(|&j| needed[j] && hoisted[j] && phases[j] == k).collect();
            let earlier = |j: usize| hoisted[j] && phases[j] < k;
            let live = reach(&mine, &|j| is_reduce(j) || earlier(j));
            // Inputs read here are per-row ones (no chunk of the row): read at the row's start.
            let read = |j: usize| match spec.steps[j] {
                _ if earlier(j) => Some(format!("q.v{j}")),
                Step::Input(i) => Some(format!("{}(a.x{i}[r.base[{i}]])", kinds[j].cpp())),
                _ => None,
            };
            RowPhaseContext {
                steps: contexts(live, &read),
                assign: mine
                    .iter()
                    .filter(|&&j| read_later(j))
                    .map(|&j| CachedContext { index: j, ty: kinds[j].cpp() })
                    .collect(),
            }
        })
        .collect();
    let row_state: Vec<CachedContext> =
        row_steps.iter().flat_map(|k| k.assign.iter().map(|c| CachedContext { index: c.index, ty: c.ty })).collect();
    let cache_values: Vec<CachedContext> =
        cache_roots.iter().map(|&j| CachedContext { index: j, ty: kinds[j].cpp() }).collect();
    let registers: usize = cache_roots.iter().map(|&j| if kinds[j] == Kind::Int { 2 } else { 1 }).sum();
    let cache = match registers {
        0 => 0,
        n => match (CACHE_REGISTERS / n).min(CACHE_MAX) {
            e if e < CACHE_MIN => 0,
            e => 1 << e.ilog2(),
        },
    };
    // Elements per chunk: 16 bytes of the widest element a thread loads or stores along the
    // row (at most 8, and no more than the row cache holds per thread).
    let widest = spec
        .inputs
        .iter()
        .filter(|i| chunked(i.access))
        .map(|i| i.element.size_bytes())
        .chain(spec.outputs.iter().filter(|o| !o.per_row).map(|o| o.element.size_bytes()))
        .max();
    let vector = match (widest, cache) {
        (None, _) => 1,
        (Some(b), 0) => (16 / b).min(8),
        (Some(b), c) => (16 / b).min(8).min(c),
    };
    // The inputs each function loads (as a mask of their bits).
    let loads = |list: &[StepContext]| -> u32 {
        list.iter()
            .filter(|c| c.expr == exprs[c.index])
            .filter_map(|c| match spec.steps[c.index] {
                Step::Input(i) => Some(1u32 << i),
                _ => None,
            })
            .fold(0, |m, b| m | b)
    };
    let phase_loads: Vec<u32> = phase_steps.iter().map(|l| loads(l)).collect();
    let values_loads = loads(&row_values);
    let store_loads = loads(&store_steps);
    let context = Context {
        symbol,
        summary: serde_json::to_string(spec).expect("stitch spec serialises"),
        inputs: spec
            .inputs
            .iter()
            .enumerate()
            .map(|(n, i)| InputContext {
                element: i.element.cpp(),
                kind: i.element.kind().cpp(),
                dense: i.access == Access::Dense,
                table: i.access == Access::Table,
                chunked: chunked(i.access),
                bit: 1 << n,
            })
            .collect(),
        outputs: spec
            .outputs
            .iter()
            .enumerate()
            .map(|(n, o)| OutputContext {
                element: o.element.cpp(),
                step: o.step,
                per_row: o.per_row,
                bit: 1 << (STITCH_MAX_INPUTS + n),
            })
            .collect(),
        phase_steps,
        store_steps,
        reductions,
        row_values,
        cache_values,
        cache,
        vector,
        phase_loads,
        values_loads,
        store_loads,
        row_steps,
        row_state,
        max_group: MAX_GROUP,
    };
    crate::render::render_template(TEMPLATE, &crate::render::to_context(&context)?)
}

/// Headers a unit with stitched kernels needs.
pub fn includes() -> [&'static str; 5] {
    ["cmath", "vector", "cutlass/cutlass.h", "cutlass/half.h", "cutlass/bfloat16.h"]
}

/// Stitched kernels as one `.cu` unit: the shared prologue, then each block.
pub fn render_unit(kernels: &[(&StitchSpec, &str)]) -> Result<String, RenderError> {
    crate::render::assemble_unit(kernels, &includes(), render)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// softmax(x + mask) over rows, mask broadcast per row.
    fn softmax() -> StitchSpec {
        StitchSpec {
            inputs: vec![
                Input { element: Storage::F16, access: Access::Dense },
                Input { element: Storage::F32, access: Access::Strided },
            ],
            steps: vec![
                Step::Input(0),
                Step::Input(1),
                Step::Binary(BinaryFn::Add, 0, 1),
                Step::Reduce(Reduction::Max, 2),
                Step::Binary(BinaryFn::Sub, 2, 3),
                Step::Unary(UnaryFn::Exp, 4),
                Step::Reduce(Reduction::Sum, 5),
                Step::Binary(BinaryFn::Div, 5, 6),
            ],
            outputs: vec![Output { step: 7, element: Storage::F16, per_row: false }],
        }
    }

    #[test]
    fn phases_count_reductions_on_the_path() {
        assert_eq!(softmax().phases(), vec![0, 0, 0, 1, 1, 1, 2, 2]);
    }

    #[test]
    fn validation_names_the_broken_step_or_output() {
        assert!(validate(&softmax()).is_ok());
        let mut s = softmax();
        s.steps[2] = Step::Binary(BinaryFn::Add, 0, 3);
        assert_eq!(validate(&s), Err(StitchRejection::Order(2, 3)));
        let mut s = softmax();
        s.outputs[0].per_row = true;
        assert_eq!(validate(&s), Err(StitchRejection::NotPerRow(0, 7)));
        let mut s = softmax();
        s.steps[1] = Step::Const(f32::NAN.into());
        assert!(matches!(validate(&s), Err(StitchRejection::NotANumber(1, _))));
        s.steps[1] = Step::Const(f32::NEG_INFINITY.into());
        assert!(validate(&s).is_ok(), "an infinity is a constant like another");
        let mut s = softmax();
        s.outputs.clear();
        assert_eq!(validate(&s), Err(StitchRejection::Outputs(0)));
    }

    #[test]
    fn steps_are_typed_and_mismatches_name_the_step() {
        // mask (bool), ids (i64): where(!mask && ids == ids, x, -inf) in f16.
        let spec = StitchSpec {
            inputs: vec![
                Input { element: Storage::F16, access: Access::Dense },
                Input { element: Storage::Bool, access: Access::Strided },
                Input { element: Storage::I64, access: Access::Strided },
            ],
            steps: vec![
                Step::Input(0),
                Step::Input(1),
                Step::Input(2),
                Step::Not(1),
                Step::Compare(CompareFn::Eq, 2, 2),
                Step::Logic(LogicFn::And, 3, 4),
                Step::Const(f32::NEG_INFINITY.into()),
                Step::Select(5, 0, 6),
                Step::Cast(Storage::I32, 7),
            ],
            outputs: vec![
                Output { step: 7, element: Storage::F16, per_row: false },
                Output { step: 8, element: Storage::I32, per_row: false },
                Output { step: 5, element: Storage::Bool, per_row: false },
            ],
        };
        assert!(validate(&spec).is_ok(), "{:?}", validate(&spec));
        use Kind::*;
        assert_eq!(spec.kinds().unwrap(), vec![Float, Bool, Int, Bool, Bool, Bool, Float, Float, Int]);
        let mut s = spec.clone();
        s.steps[3] = Step::Unary(UnaryFn::Exp, 1);
        assert!(matches!(validate(&s), Err(StitchRejection::Kind(3, _))), "exp of a bool");
        let mut s = spec.clone();
        s.steps[4] = Step::Compare(CompareFn::Eq, 2, 0);
        assert!(matches!(validate(&s), Err(StitchRejection::Kind(4, _))), "an int compared with a float");
        let mut s = spec.clone();
        s.steps[7] = Step::Select(0, 0, 6);
        assert!(matches!(validate(&s), Err(StitchRejection::Kind(7, _))), "a float condition");
        let mut s = spec.clone();
        s.outputs[1].element = Storage::F32;
        assert_eq!(validate(&s), Err(StitchRejection::OutputKind(1, Storage::F32, 8, Int)));
        // Casts as the kernel does them: truncation, wrapping, rounding, truth.
        assert_eq!(Storage::I64.convert(Scalar::F(-2.7)), Scalar::I(-2));
        assert_eq!(Storage::I32.convert(Scalar::I(1 << 32 | 5)), Scalar::I(5));
        assert_eq!(Storage::F16.convert(Scalar::I(2049)), Scalar::F(2048.0));
        assert_eq!(Storage::Bool.convert(Scalar::F(f64::NAN)), Scalar::I(1));
        let code = render(&spec, &symbol_for(&spec)).unwrap();
        assert!(code.contains("bool const v3 = !v1;") && code.contains("int64_t const v8"), "{code}");
    }

    #[test]
    fn the_row_cache_holds_what_later_phases_read_again() {
        // Softmax: the masked scores (step 2) are read by all three phases; only phase 0 loads.
        let code = render(&softmax(), "k").unwrap();
        assert!(code.contains("struct Values {\n  float v2;\n};"), "{code}");
        assert!(code.contains("constexpr int kCache = 32;"));
        let phase_1 = &code[code.find("inline void accumulate_1").unwrap()..code.find("inline void store").unwrap()];
        assert!(phase_1.contains("float const v2 = f.v2;") && !phase_1.contains("load_"), "{phase_1}");

        // Seventeen values phase 0 computes and the output reads: too many to keep (64
        // registers at 4 elements each at least); every phase recomputes them. x, max(x),
        // e1 = exp(x), e2 = exp(e1), ..., the output sum_i(e_i - max) (then the sum of e17, so
        // that phase 0 computes every e_i).
        let mut steps = vec![Step::Input(0), Step::Reduce(Reduction::Max, 0), Step::Const(0.0.into())];
        let (mut last, mut total) = (0, 2);
        let mut e = Vec::new();
        for _ in 0..17 {
            steps.push(Step::Unary(UnaryFn::Exp, last));
            last = steps.len() - 1;
            e.push(last);
            steps.push(Step::Binary(BinaryFn::Sub, last, 1));
            steps.push(Step::Binary(BinaryFn::Add, total, last + 1));
            total = steps.len() - 1;
        }
        steps.push(Step::Reduce(Reduction::Sum, last));
        let outputs = vec![Output { step: total, element: Storage::F32, per_row: false }];
        let wide = StitchSpec { inputs: vec![Input { element: Storage::F32, access: Access::Dense }], steps, outputs };
        assert!(validate(&wide).is_ok(), "{:?}", validate(&wide));
        let code = render(&wide, "k").unwrap();
        assert!(code.contains("constexpr int kCache = 0;"), "{code}");
        // Four of them (the output reads e1..e4, phase 0's sum e4) fit at 16 elements per thread.
        let mut four = wide.clone();
        four.outputs[0].step = e[3] + 2;
        four.steps[e[16] + 3] = Step::Reduce(Reduction::Sum, e[3]);
        let code = render(&four, "k").unwrap();
        assert!(code.contains("constexpr int kCache = 16;"), "{code}");
    }

    #[test]
    fn steps_constant_along_the_row_run_once_per_row() {
        // LayerNorm with a per-row input (a mask unsqueezed on the last axis) scaling it:
        // sqrt(var + eps) and the mask's load run in the row's set-up, not per element.
        let i = |access| Input { element: Storage::F16, access };
        let spec = StitchSpec {
            inputs: vec![i(Access::Dense), i(Access::Row)],
            steps: vec![
                Step::Input(0),
                Step::Reduce(Reduction::Mean, 0),
                Step::Binary(BinaryFn::Sub, 0, 1),
                Step::Binary(BinaryFn::Mul, 2, 2),
                Step::Reduce(Reduction::Mean, 3),
                Step::Const(1e-5.into()),
                Step::Binary(BinaryFn::Add, 4, 5),
                Step::Unary(UnaryFn::Sqrt, 6),
                Step::Input(1),
                Step::Binary(BinaryFn::Mul, 7, 8),
                Step::Binary(BinaryFn::Div, 2, 9),
            ],
            outputs: vec![Output { step: 10, element: Storage::F16, per_row: false }],
        };
        let code = render(&spec, "k").unwrap();
        let between = |a: &str, b: &str| &code[code.find(a).unwrap()..code.find(b).unwrap()];
        let store = between("inline void store", "constexpr int kCache");
        assert!(store.contains("float const v9 = q.v9;") && !store.contains("sqrtf"), "{store}");
        let hoist = between("inline void hoist_0", "inline void hoist_1");
        assert!(hoist.contains("float const v8 = float(a.x1[r.base[1]]);\n  q.v8 = v8;"), "{hoist}");
        // What only its own phase's per-row steps read stays local.
        let hoist = between("inline void hoist_2", "struct Values");
        assert!(hoist.contains("sqrtf(v6)") && hoist.contains("q.v9 = v9;"), "{hoist}");
        assert!(!hoist.contains("q.v7 =") && !hoist.contains("q.v6 ="), "{hoist}");
        // Only the varying input is read along the row, in chunks of 8 f16.
        assert!(code.contains("constexpr int kVec = 8;") && code.contains("constexpr unsigned kStoreLoads = 0u;"));
        assert!(!code.contains("Vec<ElementX1>"), "{code}");
    }

    #[test]
    fn problems_broadcast_inputs_through_zero_strides() {
        let p = softmax().problem(&[2, 3, 5], &[&[2, 3, 5], &[2, 1, 5]]).unwrap();
        assert_eq!((p.rows, p.width, p.rank), (6, 5, 3));
        assert_eq!(p.strides[0][..3], [15, 5, 1]);
        assert_eq!(p.strides[1][..3], [5, 0, 1]);
        assert!(softmax().problem(&[2, 3, 5], &[&[2, 3, 1], &[5]]).unwrap_err().contains("densely"));
        assert!(softmax().problem(&[2, 3, 5], &[&[2, 3, 5], &[3]]).is_err());
    }

    #[test]
    fn problems_refuse_rows_a_reduction_or_output_would_not_span() {
        // mean(x * m) and x * m over rows of x: where a planner could not prove the row
        // lengths (known only at run time), an x of one element along a row of m's width
        // would have ONNX reduce an axis of 1 (and write a narrower output); the kernel would
        // sum m's width of copies. The problem refuses it.
        let strided = Input { element: Storage::F32, access: Access::Strided };
        let steps = vec![
            Step::Input(0),
            Step::Input(1),
            Step::Binary(BinaryFn::Mul, 0, 1),
            Step::Reduce(Reduction::Mean, 0),
            Step::Binary(BinaryFn::Sub, 2, 3),
        ];
        let spec = |outputs| StitchSpec { inputs: vec![strided, strided], steps: steps.clone(), outputs };
        let out = |step, per_row| Output { step, element: Storage::F32, per_row };
        let mean = spec(vec![out(3, true)]);
        assert!(validate(&mean).is_ok(), "{:?}", validate(&mean));
        assert!(mean.problem(&[2, 5], &[&[2, 5], &[2, 5]]).is_ok());
        let e = mean.problem(&[2, 5], &[&[2, 1], &[2, 5]]).unwrap_err();
        assert!(e.contains("step 3 would reduce rows of 5 elements"), "{e}");
        // Rows of one element are the same either way.
        assert!(mean.problem(&[2, 1], &[&[2, 1], &[1, 1]]).is_ok());
        // An output of the space's shape that reads only x: ONNX's would be [2, 1].
        let x_only = StitchSpec { steps: steps[..3].to_vec(), ..spec(vec![out(0, false)]) };
        assert!(x_only.problem(&[2, 5], &[&[2, 5], &[2, 5]]).is_ok());
        let e = x_only.problem(&[2, 5], &[&[2, 1], &[2, 5]]).unwrap_err();
        assert!(e.contains("output 0 would be written over rows of 5"), "{e}");
        // x * m spans m's rows whatever x's.
        assert!(spec(vec![out(4, false)]).problem(&[2, 5], &[&[2, 5], &[2, 5]]).is_ok());
        let product = StitchSpec { steps: steps[..3].to_vec(), ..spec(vec![out(2, false)]) };
        assert!(product.problem(&[2, 5], &[&[2, 1], &[2, 5]]).is_ok());
    }

    #[test]
    fn eval_is_softmax_of_the_masked_row() {
        let s = softmax();
        let p = s.problem(&[2, 3], &[&[2, 3], &[3]]).unwrap();
        let x = [1.0, 2.0, 3.0, 0.0, 0.0, 0.0];
        let mask = [0.0, 0.0, -1e4];
        let out: Vec<f64> =
            s.eval(&p, &[HostInput::Float(&x), HostInput::Float(&mask)])[0].iter().map(|v| v.f()).collect();
        let e = [1f64.exp(), 2f64.exp()];
        // The output is f16: 3 significant digits.
        assert!((out[0] - e[0] / (e[0] + e[1])).abs() < 1e-3);
        assert!(out[2].abs() < 1e-4);
        assert!(out[3] == 0.5 && out[4] == 0.5);
    }

    #[test]
    fn symbols_and_rendering_follow_the_spec() {
        let s = softmax();
        let sym = symbol_for(&s);
        assert!(sym.starts_with("bolt_stitch_r2x1_"), "{sym}");
        let code = render(&s, &sym).unwrap();
        assert!(code.contains("accumulate_0") && code.contains("accumulate_1"), "{code}");
        assert!(code.contains("expf(v4)"));
        let mut e = s.clone();
        e.steps.truncate(3);
        e.outputs[0].step = 2;
        assert!(symbol_for(&e).starts_with("bolt_stitch_e2x1_"));
    }
}
