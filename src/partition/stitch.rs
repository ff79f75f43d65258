//! Memory-intensive regions for stitching (AStitch): maximal connected groups of element-wise
//! ops, last-axis reductions and the composites built from them (Softmax, LayerNormalization,
//! PyTorch's decomposed LayerNorm, erf GELU) that no GEMM/Conv epilogue absorbed, each as a
//! small typed DAG of [`Step`]s over row-major tensors whose reductions all run along the last
//! axis (one row length per region: AStitch's row-reduction schemes).
//!
//! [`find`] groups them and says why other ops are not stitchable; [`Region::eval`] states a
//! region's meaning on host tensors (f64, rounded once to each output's type, as a stitched
//! kernel keeping intermediates on chip would), checked against the reference executor
//! running the original ops (tests/stitch.rs). The planner turns each into one stitched
//! kernel (`plan::stitch`). A group that would feed itself through an op outside it is split
//! where the path leaves (`convex_parts`); an op a region cannot take leaves it alone.

use super::attention;
use crate::ir::infer::SliceAxis;
use crate::ir::{Binary, Compare, DType, Graph, Logic, Op, ReduceKind, Tensor, TensorData, Unary};
use crate::ir::{Dim, Shape, TensorType};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A reduction along the last axis, kept as a length-1 axis (it broadcasts back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
}

/// One value of a region, computed from earlier steps (by index).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// Region input `i` (a tensor from outside: activation or non-scalar constant).
    Input(usize),
    Const(#[serde(with = "bolt_codegen::json_float::f64")] f64),
    Unary(Unary, usize),
    Binary(Binary, usize, usize),
    Reduce(Reduce, usize),
    /// A comparison (bool result) of two values of one type.
    Compare(Compare, usize, usize),
    Logic(Logic, usize, usize),
    Not(usize),
    /// `cond ? a : b` (ONNX Where).
    Select(usize, usize, usize),
    /// ONNX Cast to the type.
    Cast(DType, usize),
    /// Rows of table input `.0` (a constant [rows, width] embedding table) by the int indices
    /// of step `.1` (a row-index input: one per row of the result): ONNX Gather on axis 0.
    Gather(usize, usize),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Region {
    /// The ONNX nodes it stands for, in model order.
    pub nodes: Vec<String>,
    pub inputs: Vec<String>,
    /// Per input: the permutation a Transpose of the region applies to it (read as a strided
    /// view, never copied), or `None`.
    #[serde(default)]
    pub views: Vec<Option<Vec<usize>>>,
    /// Per input: the constant, forward-stepping Slice of the region it is read through (a
    /// strided window read in place, never copied), or `None`.
    #[serde(default)]
    pub slices: Vec<Option<Vec<SliceAxis>>>,
    pub steps: Vec<Step>,
    /// Tensors read outside the region (or graph outputs), with the step computing each.
    pub outputs: Vec<(String, usize)>,
    /// Each output's element type (a mask region reads bools and writes floats).
    pub dtypes: Vec<DType>,
    /// Per input: whether it holds a gather's row indices, read as one value per row of the
    /// iteration space (its shape with a 1 appended).
    #[serde(default)]
    pub row_index: Vec<bool>,
}

impl Region {
    /// The AStitch scheme a kernel would use: independent (element-wise only) or row
    /// reduction.
    pub fn reduces(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Reduce(..)))
    }

    /// Every step's shape given the inputs' (numpy broadcasting; a reduction keeps its last
    /// axis as 1), or why they do not fit.
    pub fn shapes(&self, inputs: &[&Shape]) -> Result<Vec<Shape>, String> {
        let mut out: Vec<Shape> = Vec::with_capacity(self.steps.len());
        for (j, s) in self.steps.iter().enumerate() {
            let shape = match *s {
                Step::Input(i) => {
                    let s = inputs.get(i).ok_or_else(|| format!("step {j} reads a missing input {i}"))?;
                    self.viewed_shape(i, s)?
                }
                Step::Gather(t, a) => {
                    let table = inputs.get(t).ok_or_else(|| format!("step {j} reads a missing table {t}"))?;
                    let (Some(w), Some(_)) = (table.0.get(1).filter(|_| table.rank() == 2), out[a].0.last()) else {
                        return Err(format!("step {j} gathers from a table of shape {table}"));
                    };
                    let mut d = out[a].0.clone();
                    *d.last_mut().expect("checked") = w.clone();
                    Shape(d)
                }
                Step::Const(_) => Shape(vec![]),
                Step::Unary(_, a) | Step::Not(a) | Step::Cast(_, a) => out[a].clone(),
                Step::Binary(_, a, b) | Step::Compare(_, a, b) | Step::Logic(_, a, b) => {
                    crate::ir::broadcast_shapes(&out[a], &out[b])
                        .ok_or_else(|| format!("step {j}: {} and {} do not broadcast", out[a], out[b]))?
                }
                Step::Select(c, a, b) => crate::ir::broadcast_shapes(&out[c], &out[a])
                    .and_then(|s| crate::ir::broadcast_shapes(&s, &out[b]))
                    .ok_or_else(|| format!("step {j}: {}, {} and {} do not broadcast", out[c], out[a], out[b]))?,
                Step::Reduce(_, a) => {
                    let mut d = out[a].0.clone();
                    match d.last_mut() {
                        Some(l) => *l = crate::ir::Dim::Known(1),
                        None => return Err(format!("step {j} reduces a scalar")),
                    }
                    Shape(d)
                }
            };
            out.push(shape);
        }
        Ok(out)
    }

    /// Input `i`'s view (the permutation of a Transpose read through strides), if any.
    pub fn view(&self, i: usize) -> Option<&[usize]> {
        self.views.get(i).and_then(|v| v.as_deref())
    }

    /// Input `i`'s slice (a strided window read in place), if any.
    pub fn slice(&self, i: usize) -> Option<&[SliceAxis]> {
        self.slices.get(i).and_then(|v| v.as_deref())
    }

    /// Whether input `i` holds a gather's row indices.
    pub fn row_index(&self, i: usize) -> bool {
        self.row_index.get(i).copied().unwrap_or(false)
    }

    /// Whether input `i` is a gather's table (read by row, never broadcast).
    pub fn is_table(&self, i: usize) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Gather(t, _) if *t == i))
    }

    /// Input `i` of shape `s` as the region reads it: through its permutation or its slice
    /// (a sliced dim of unknown or symbolic size has an unknown size), or with a 1 appended
    /// (a gather's row indices).
    pub fn viewed_shape(&self, i: usize, s: &Shape) -> Result<Shape, String> {
        if self.row_index(i) {
            let mut d = s.0.clone();
            d.push(Dim::Known(1));
            return Ok(Shape(d));
        }
        if let Some(p) = self.view(i) {
            return match p.len() == s.rank() && p.iter().all(|&d| d < s.rank()) {
                true => Ok(Shape(p.iter().map(|&d| s.0[d].clone()).collect())),
                false => Err(format!("input {i} of rank {} viewed through {p:?}", s.rank())),
            };
        }
        let mut out = s.clone();
        for a in self.slice(i).unwrap_or_default() {
            let d = out
                .0
                .get_mut(a.axis)
                .ok_or_else(|| format!("input {i} of rank {} sliced on axis {}", s.rank(), a.axis))?;
            *d = match d {
                Dim::Known(n) => Dim::Known(a.resolve(*n).len),
                _ => Dim::Unknown,
            };
        }
        Ok(out)
    }

    /// Each input's window on a stored tensor of shape `shape`: per axis (first element, step,
    /// extent) in elements of that axis.
    pub fn window(&self, i: usize, shape: &[usize]) -> Vec<(usize, usize, usize)> {
        let mut w: Vec<(usize, usize, usize)> = shape.iter().map(|&d| (0, 1, d)).collect();
        for a in self.slice(i).unwrap_or_default() {
            if let Some(x) = w.get_mut(a.axis) {
                let r = a.resolve(x.2);
                // Forward steps only (`find_with`): the start is inside the dim.
                *x = (r.start.max(0) as usize, r.step.max(1) as usize, r.len);
            }
        }
        w
    }

    /// The outputs' types given the inputs' (their element types are the region's).
    pub fn output_types(&self, inputs: &[&TensorType]) -> Result<Vec<TensorType>, String> {
        let shapes: Option<Vec<&Shape>> = inputs.iter().map(|t| t.shape.as_ref()).collect();
        let steps = match shapes {
            Some(s) => Some(self.shapes(&s)?),
            None => None,
        };
        Ok(self
            .outputs
            .iter()
            .enumerate()
            .map(|(k, (_, j))| TensorType { dtype: self.dtype(k), shape: steps.as_ref().map(|s| s[*j].clone()) })
            .collect())
    }

    /// Output `k`'s element type.
    pub fn dtype(&self, k: usize) -> DType {
        self.dtypes.get(k).copied().unwrap_or(DType::F32)
    }
}

/// Why a memory-intensive node is not in a region.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NotStitched {
    pub node: String,
    pub reason: String,
}

/// The node's steps given its inputs' step indices, or why it cannot be stitched.
fn lower(op: &Op, args: &[usize], steps: &mut Vec<Step>, rank: usize) -> Result<usize, String> {
    let last = |axis: i64| axis == -1 || axis == rank as i64 - 1;
    let push = |s: Step, steps: &mut Vec<Step>| {
        steps.push(s);
        steps.len() - 1
    };
    Ok(match op {
        Op::Unary(u) => push(Step::Unary(*u, args[0]), steps),
        Op::Binary(b) => push(Step::Binary(*b, args[0], args[1]), steps),
        Op::Compare(c) => push(Step::Compare(*c, args[0], args[1]), steps),
        Op::Logic(l) => push(Step::Logic(*l, args[0], args[1]), steps),
        Op::Not => push(Step::Not(args[0]), steps),
        Op::Where => push(Step::Select(args[0], args[1], args[2]), steps),
        Op::Cast { to, .. } => push(Step::Cast(*to, args[0]), steps),
        // min(max(x, lo), hi): NaN stays NaN, and lo > hi gives hi, as ONNX's Clip. A bound
        // left out (an infinite constant) is no step: integers have no infinity.
        Op::Clip => {
            let given = |a: usize, none: f64| !matches!(steps[a], Step::Const(c) if c == none);
            let (lo, hi) = (given(args[1], f64::NEG_INFINITY), given(args[2], f64::INFINITY));
            let mut y = args[0];
            if lo {
                y = push(Step::Binary(Binary::Max, y, args[1]), steps);
            }
            if hi {
                y = push(Step::Binary(Binary::Min, y, args[2]), steps);
            }
            y
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } if last(*axis) => {
            let m = push(Step::Reduce(Reduce::Max, args[0]), steps);
            let d = push(Step::Binary(Binary::Sub, args[0], m), steps);
            let e = push(Step::Unary(Unary::Exp, d), steps);
            let s = push(Step::Reduce(Reduce::Sum, e), steps);
            if let Op::LogSoftmax { .. } = op {
                // (x - max) - log(sum): never the log of an underflowed quotient.
                let l = push(Step::Unary(Unary::Log, s), steps);
                push(Step::Binary(Binary::Sub, d, l), steps)
            } else {
                push(Step::Binary(Binary::Div, e, s), steps)
            }
        }
        Op::LayerNormalization { axis, epsilon, .. } if last(*axis) && args.len() >= 2 => {
            let mean = push(Step::Reduce(Reduce::Mean, args[0]), steps);
            let d = push(Step::Binary(Binary::Sub, args[0], mean), steps);
            let sq = push(Step::Binary(Binary::Mul, d, d), steps);
            let var = push(Step::Reduce(Reduce::Mean, sq), steps);
            let eps = push(Step::Const(*epsilon as f64), steps);
            let ve = push(Step::Binary(Binary::Add, var, eps), steps);
            let sd = push(Step::Unary(Unary::Sqrt, ve), steps);
            let n = push(Step::Binary(Binary::Div, d, sd), steps);
            let y = push(Step::Binary(Binary::Mul, n, args[1]), steps);
            match args.get(2) {
                Some(&b) => push(Step::Binary(Binary::Add, y, b), steps),
                None => y,
            }
        }
        Op::Reduce { kind, axes: Some(axes), keepdims: true, .. } if axes.len() == 1 && last(axes[0]) => match kind {
            ReduceKind::Mean => push(Step::Reduce(Reduce::Mean, args[0]), steps),
            ReduceKind::Sum => push(Step::Reduce(Reduce::Sum, args[0]), steps),
            ReduceKind::Max => push(Step::Reduce(Reduce::Max, args[0]), steps),
            // min(x) = -max(-x): the kernels reduce by sum and max.
            ReduceKind::Min => {
                let minus = push(Step::Const(-1.0), steps);
                let neg = push(Step::Binary(Binary::Mul, args[0], minus), steps);
                let max = push(Step::Reduce(Reduce::Max, neg), steps);
                push(Step::Binary(Binary::Mul, max, minus), steps)
            }
            ReduceKind::L1 => {
                let abs = push(Step::Unary(Unary::Abs, args[0]), steps);
                push(Step::Reduce(Reduce::Sum, abs), steps)
            }
            ReduceKind::L2 | ReduceKind::SumSquare => {
                let sq = push(Step::Binary(Binary::Mul, args[0], args[0]), steps);
                let sum = push(Step::Reduce(Reduce::Sum, sq), steps);
                match kind {
                    ReduceKind::L2 => push(Step::Unary(Unary::Sqrt, sum), steps),
                    _ => sum,
                }
            }
            ReduceKind::LogSum => {
                let sum = push(Step::Reduce(Reduce::Sum, args[0]), steps);
                push(Step::Unary(Unary::Log, sum), steps)
            }
            // max + log(sum(exp(x - max))), as the stitched LogSoftmax.
            ReduceKind::LogSumExp => {
                let max = push(Step::Reduce(Reduce::Max, args[0]), steps);
                let d = push(Step::Binary(Binary::Sub, args[0], max), steps);
                let e = push(Step::Unary(Unary::Exp, d), steps);
                let s = push(Step::Reduce(Reduce::Sum, e), steps);
                let l = push(Step::Unary(Unary::Log, s), steps);
                push(Step::Binary(Binary::Add, max, l), steps)
            }
            ReduceKind::Prod => return Err("ReduceProd: stitched kernels reduce by sum and max".into()),
        },
        Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LayerNormalization { .. } => {
            return Err("not over the last axis".into())
        }
        Op::Reduce { .. } => return Err("not a keepdims reduction over the last axis alone".into()),
        _ => return Err("not a stitchable op".into()),
    })
}

/// The bound a Clip without input `pos` (1: min, 2: max) has: none.
fn clip_unbounded(pos: usize) -> f64 {
    if pos == 1 {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    }
}

/// Whether `n` is integer arithmetic a stitched kernel computes exactly (lengths and indices
/// computed from data: an ASR front end's frame counts, a recogniser's widths): every tensor
/// int64 (or every one int32, wrapped after the op) of known rank, the op one the kernels
/// define on integers (wrapping; division truncating toward zero).
fn int_arithmetic(g: &Graph, n: &crate::ir::Node) -> bool {
    let Some(dtype) = n.outputs.first().and_then(|y| g.types.get(y)).map(|t| t.dtype) else { return false };
    let same_int = |t: &String| {
        g.types
            .get(t)
            .is_some_and(|ty| ty.dtype == dtype && matches!(dtype, DType::I64 | DType::I32) && ty.shape.is_some())
    };
    let op = match &n.op {
        Op::Binary(b) => crate::plan::lower::binary_fn(*b).on_ints(),
        Op::Unary(u) => crate::plan::lower::unary_fn(*u).on_ints(),
        Op::Clip => true,
        _ => false,
    };
    op && n.inputs.iter().flatten().chain(&n.outputs).all(same_int)
}

/// Ops a region reads its input through (strides and an offset), never computing them.
fn is_view(op: &Op) -> bool {
    matches!(op, Op::Transpose { perm: Some(_) } | Op::Slice)
}

/// A Slice's constant bounds per axis, when every step is positive.
fn slice_view(g: &Graph, n: &crate::ir::Node) -> Option<Vec<SliceAxis>> {
    crate::plan::lower::constant_slice(g, n).filter(|axes| axes.iter().all(|a| a.step > 0))
}

fn stitchable(op: &Op) -> bool {
    use crate::plan::layout::{TO_NCHW, TO_NHWC};
    match op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Clip
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LayerNormalization { .. }
        | Op::Reduce { .. }
        | Op::Compare(_)
        | Op::Logic(_)
        | Op::Not
        | Op::Where
        | Op::Cast { .. }
        | Op::Gather { .. } => true,
        // A transpose of a region input is a strided read. The planner's own NCHW <-> NHWC
        // transforms are glue kernels' (tiled for coalescing).
        Op::Transpose { perm: Some(p) } => p[..] != TO_NHWC && p[..] != TO_NCHW,
        Op::Slice => true,
        _ => false,
    }
}

/// Regions of `g` outside the nodes in `taken` (the GEMM/Conv partitions), and the
/// memory-intensive nodes left out with why. Attention cores (their Softmax, mask Add and
/// scales) are left to attention fusion.
pub fn find(g: &Graph, taken: &HashSet<String>) -> (Vec<Region>, Vec<NotStitched>) {
    find_with(g, taken, true)
}

/// [`find`], with attention cores' memory-intensive ops stitched too unless
/// `leave_attention` (the fallback when no fused attention kernel takes them: a stitched
/// softmax between the two batched GEMMs).
pub fn find_with(g: &Graph, taken: &HashSet<String>, leave_attention: bool) -> (Vec<Region>, Vec<NotStitched>) {
    let mut not = Vec::new();
    let attention_nodes: HashSet<String> =
        if leave_attention { attention::find(g).0.into_iter().flat_map(|a| a.nodes).collect() } else { HashSet::new() };
    let float = |t: &str| g.types.get(t).is_some_and(|ty| ty.dtype.is_float() && ty.shape.is_some());
    // What mask ops (comparisons, logic, selects, casts) may read and write besides floats.
    let typed = |t: &str| {
        g.types.get(t).is_some_and(|ty| {
            ty.shape.is_some() && (ty.dtype.is_float() || matches!(ty.dtype, DType::I32 | DType::I64 | DType::Bool))
        })
    };
    // Shape computations stay whole on the host (see `partition::shape_computations`).
    let metadata = super::shape_computations(g);
    let mut cand: Vec<bool> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if !stitchable(&n.op) || taken.contains(&n.name) || metadata.contains(&i) {
                return false;
            }
            if attention_nodes.contains(&n.name) {
                not.push(NotStitched {
                    node: n.name.clone(),
                    reason: "attention core: left for attention fusion".into(),
                });
                return false;
            }
            if let Op::Gather { axis } = n.op {
                // An embedding lookup: rows of a constant float table [rows, width] by indices
                // computed at run time (constant indices are device copies).
                let table = n.input(0).and_then(|t| g.initializers.get(t)).filter(|t| t.rank() == 2);
                let ids = n.input(1).filter(|x| !g.initializers.contains_key(*x));
                let int = ids.and_then(|x| g.types.get(x)).is_some_and(|t| {
                    matches!(t.dtype, DType::I32 | DType::I64) && t.shape.as_ref().is_some_and(|s| s.rank() >= 1)
                });
                return table.is_some_and(|t| t.dtype().is_float())
                    && (axis == 0 || axis == -2)
                    && int
                    && n.outputs.len() == 1
                    && float(&n.outputs[0]);
            }
            if matches!(n.op, Op::Slice) {
                // Read in place: its bounds are constants, its data a float tensor.
                return n.outputs.len() == 1 && float(&n.outputs[0]) && n.input(0).is_some_and(float);
            }
            if let (Op::Cast { .. }, Some(x)) = (&n.op, n.input(0)) {
                // Casts between floats alone are glue kernels' (vectorised, and what the
                // planner's own precision changes use; next to a region they join it, below);
                // casts of masks and ids are stitched.
                if float(x) && n.outputs.first().is_some_and(|y| float(y)) {
                    return false;
                }
            }
            if matches!(n.op, Op::Compare(_) | Op::Logic(_) | Op::Not | Op::Where | Op::Cast { .. }) {
                return n.outputs.len() == 1 && typed(&n.outputs[0]) && n.inputs.iter().flatten().all(|x| typed(x));
            }
            if n.outputs.len() != 1 {
                return false;
            }
            if int_arithmetic(g, n) {
                return true;
            }
            // Arithmetic: floats of known rank. Why not, for the report (views and copies that
            // are not taken are device copies, not host work).
            let tensors = || n.inputs.iter().flatten().chain(&n.outputs);
            let untyped = tensors().find(|t| g.types.get(t.as_str()).is_none_or(|ty| ty.shape.is_none()));
            let integer = tensors().find(|t| !float(t));
            // Without tensor names: the report groups its host ops by reason.
            let why = match (untyped, integer) {
                (Some(_), _) => {
                    "a tensor of rank unknown when planning (after control flow, or a Squeeze without axes)"
                }
                (None, Some(_)) => {
                    "integer arithmetic other than int64 / int32 add, subtract, multiply, divide, max, min, \
                     negate, abs and clip"
                }
                (None, None) => return true,
            };
            if !matches!(n.op, Op::Gather { .. } | Op::Slice | Op::Transpose { .. }) {
                not.push(NotStitched { node: n.name.clone(), reason: why.into() });
            }
            false
        })
        .collect();
    let producer: HashMap<&str, usize> =
        g.nodes.iter().enumerate().flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.as_str(), i))).collect();
    let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for x in n.inputs.iter().flatten() {
            consumers.entry(x.as_str()).or_default().push(i);
        }
    }
    // A cast between floats joins a region it touches: an f16 model's softmax computed in f32
    // (Cast -> Softmax -> Cast) is one kernel.
    for (i, n) in g.nodes.iter().enumerate() {
        let (Op::Cast { .. }, Some(x), [y]) = (&n.op, n.input(0), &n.outputs[..]) else { continue };
        if cand[i] || taken.contains(&n.name) || metadata.contains(&i) || attention_nodes.contains(&n.name) {
            continue;
        }
        if float(x) && float(y) {
            let from_region = producer.get(x).is_some_and(|&p| cand[p]);
            let into_region = consumers.get(y.as_str()).is_some_and(|r| r.iter().any(|&c| cand[c]));
            cand[i] = from_region || into_region;
        }
    }
    // A slice joins only as a view of what a region reads: one of constant bounds stepping
    // forwards, with a stepped axis (a copy kernel is worth it) or a reader in some region.
    for (i, n) in g.nodes.iter().enumerate() {
        if cand[i] && matches!(n.op, Op::Slice) {
            let readers = n.outputs.first().and_then(|y| consumers.get(y.as_str()));
            let read_in_region = readers.is_some_and(|r| r.iter().any(|&c| cand[c]));
            cand[i] = match slice_view(g, n) {
                Some(axes) => axes.iter().any(|a| a.step != 1) || read_in_region,
                None => false,
            };
        }
    }
    let scalar = |t: &str| -> Option<f64> {
        let c = g.initializers.get(t).cloned().or_else(|| match &g.nodes[*producer.get(t)?].op {
            Op::Constant { value } => Some(value.clone()),
            _ => None,
        })?;
        (c.len() == 1 && c.dtype().is_float()).then(|| c.to_f64_vec()[0])
    };
    // Regions, then again without each node a region cannot take (it stays on the host with
    // why; the rest of its region may still stitch), until every region lowers.
    // A reduction over rows of another length first starts a region of its own (`cut`).
    let mut cut: HashSet<usize> = HashSet::new();
    loop {
        let mut regions = Vec::new();
        let mut evicted = false;
        let parts = groups(g, &cand, &cut, &producer, &consumers);
        for members in parts.into_iter().flat_map(|m| convex_parts(g, &m, &producer)) {
            match region(g, &members, &producer, &consumers, &scalar) {
                Ok(r) => regions.push(r),
                // The node starts a region of its own; if it already did, it stays out.
                Err(RegionError::Cut(i, _)) if cut.insert(i) => evicted = true,
                Err(RegionError::Cut(i, why)) => {
                    cand[i] = false;
                    not.push(NotStitched { node: g.nodes[i].name.clone(), reason: why.to_string() });
                    evicted = true;
                }
                Err(RegionError::Node(i, reason)) => {
                    cand[i] = false;
                    not.push(NotStitched { node: g.nodes[i].name.clone(), reason });
                    evicted = true;
                }
            }
        }
        if !evicted {
            return (regions, not);
        }
    }
}

/// Candidates joined through tensors every reader of which is a candidate, each group in
/// model order.
fn groups(
    g: &Graph,
    cand: &[bool],
    cut: &HashSet<usize>,
    producer: &HashMap<&str, usize>,
    consumers: &HashMap<&str, Vec<usize>>,
) -> Vec<Vec<usize>> {
    let mut parent: Vec<usize> = (0..g.nodes.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    for (i, n) in g.nodes.iter().enumerate() {
        if !cand[i] {
            continue;
        }
        // A transpose or slice is a view of a region *input*, never of a value the region
        // computes: one of a stitched value starts a region of its own, reading its output.
        if is_view(&n.op) || cut.contains(&i) {
            continue;
        }
        for x in n.inputs.iter().flatten() {
            let Some(&p) = producer.get(x.as_str()) else { continue };
            if cut.contains(&p) {
                continue;
            }
            let inner = consumers.get(x.as_str()).is_some_and(|c| c.iter().all(|&c| cand[c]));
            if cand[p] && inner && !g.outputs.contains(x) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, p));
                parent[a] = b;
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..g.nodes.len() {
        if cand[i] {
            let r = root(&mut parent, i);
            groups.entry(r).or_default().push(i);
        }
    }
    groups.into_values().collect()
}

/// `members` (a group joined through tensors only they read) split into parts no path leaves
/// and re-enters: a group can join ops on both sides of a kernel (a transformer block's
/// LayerNorm, the GEMMs it feeds and the residual Add after them), and one stitched kernel for
/// it would feed itself. Each member's *stage* is the most times a path from another member
/// to it leaves the group; stages never decrease along a path and grow on every exit, so a
/// stage's connected parts are convex and the parts' own graph is acyclic. A transpose of a
/// member's value counts as an exit too (it reads stored memory through a view).
fn convex_parts(g: &Graph, members: &[usize], producer: &HashMap<&str, usize>) -> Vec<Vec<usize>> {
    let set: HashSet<usize> = members.iter().copied().collect();
    let first = *members.iter().min().expect("groups are not empty");
    // stage[i]: a member's stage; for other nodes, 1 + the highest stage of a member reaching
    // them (-1: none does). Model order is topological.
    let mut stage = vec![-1i64; g.nodes.len()];
    for i in first..g.nodes.len() {
        let inner = set.contains(&i);
        let mut s = if inner { 0 } else { -1 };
        for x in g.nodes[i].inputs.iter().flatten() {
            let Some(&p) = producer.get(x.as_str()) else { continue };
            if p < first || stage[p] < 0 {
                continue;
            }
            // A transpose reads its input as a view of stored memory: a member's value it
            // reads must be written out first, as if it left the group.
            let view = inner && is_view(&g.nodes[i].op);
            let leaves = set.contains(&p) && (!inner || view);
            s = s.max(stage[p] + i64::from(leaves));
        }
        stage[i] = s;
    }
    // Connected parts of each stage, through edges between members of the same stage.
    let mut part: HashMap<usize, usize> = HashMap::new();
    let mut parts: Vec<Vec<usize>> = Vec::new();
    for &i in members {
        let joined: Vec<usize> = g.nodes[i]
            .inputs
            .iter()
            .flatten()
            .filter_map(|x| producer.get(x.as_str()))
            .filter(|&&p| set.contains(&p) && stage[p] == stage[i])
            .map(|p| part[p])
            .collect();
        let k = match joined.first() {
            None => {
                parts.push(Vec::new());
                parts.len() - 1
            }
            Some(&k) => {
                // Merge every other part this member joins into the first.
                for &o in &joined[1..] {
                    if o != k && !parts[o].is_empty() {
                        let moved = std::mem::take(&mut parts[o]);
                        for &m in &moved {
                            part.insert(m, k);
                        }
                        parts[k].extend(moved);
                    }
                }
                k
            }
        };
        parts[k].push(i);
        part.insert(i, k);
    }
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|mut p| {
            p.sort_unstable();
            p
        })
        .collect()
}

/// Why a group is not one region: node `.0` cannot be stitched at all, or its reduction runs
/// over rows of another length than the group's.
enum RegionError {
    Node(usize, String),
    /// The region cannot hold the node with the nodes before it (why, should the node still
    /// not fit once it starts a region of its own): its rows are of another length, its
    /// output is narrower than the region's space ([`narrow_output`]), or the region would
    /// read more inputs or write more outputs than a kernel does.
    Cut(usize, &'static str),
}

fn region(
    g: &Graph,
    members: &[usize],
    producer: &HashMap<&str, usize>,
    consumers: &HashMap<&str, Vec<usize>>,
    scalar: &dyn Fn(&str) -> Option<f64>,
) -> Result<Region, RegionError> {
    let set: HashSet<usize> = members.iter().copied().collect();
    let mut r = Region {
        nodes: Vec::new(),
        inputs: Vec::new(),
        views: Vec::new(),
        slices: Vec::new(),
        steps: Vec::new(),
        outputs: Vec::new(),
        dtypes: Vec::new(),
        row_index: Vec::new(),
    };
    let mut value: HashMap<String, usize> = HashMap::new();
    // Node `n` joined the region with its output at step `out`: an output of the region too
    // when read outside it (or by the graph).
    let joined = |r: &mut Region, value: &mut HashMap<String, usize>, n: &crate::ir::Node, out: usize| {
        let y = &n.outputs[0];
        value.insert(y.clone(), out);
        r.nodes.push(n.name.clone());
        let read_outside = consumers.get(y.as_str()).is_some_and(|c| c.iter().any(|c| !set.contains(c)));
        if read_outside || g.outputs.contains(y) {
            r.outputs.push((y.clone(), out));
            r.dtypes.push(g.types.get(y).map_or(DType::F32, |ty| ty.dtype));
        }
    };
    let mut row: Option<crate::ir::Dim> = None;
    // Inputs every reduction of rows of unknown length reads along its rows.
    let mut unknown_row: Option<BTreeSet<usize>> = None;
    // Per member, how many inputs the region had before it joined.
    let mut inputs_from: Vec<usize> = Vec::with_capacity(members.len());
    for &i in members {
        inputs_from.push(r.inputs.len());
        let n = &g.nodes[i];
        let rank = g.types[&n.outputs[0]].shape.as_ref().map_or(0, |s| s.0.len());
        if is_view(&n.op) {
            // Its input comes from outside (see `find_with`): a viewed region input.
            let x = n.input(0).ok_or_else(|| RegionError::Node(i, format!("'{}' has no input", n.name)))?;
            r.inputs.push(x.to_string());
            r.views.push(match &n.op {
                Op::Transpose { perm } => perm.clone(),
                _ => None,
            });
            r.slices.push(slice_view(g, n));
            r.row_index.push(false);
            r.steps.push(Step::Input(r.inputs.len() - 1));
            let out = r.steps.len() - 1;
            joined(&mut r, &mut value, n, out);
            continue;
        }
        if let Op::Gather { .. } = n.op {
            // The table and the indices are inputs of their own: the indices read per row.
            let (Some(table), Some(ids)) = (n.input(0), n.input(1)) else {
                return Err(RegionError::Node(i, format!("'{}' lacks an input", n.name)));
            };
            if producer.get(ids).is_some_and(|p| set.contains(p)) {
                // Indices are read one per row from memory (tf2onnx's Cast of float ids to
                // int64 before an embedding): the lookup starts a region of its own.
                return Err(RegionError::Cut(i, "a Gather whose indices the region computes"));
            }
            for (x, rows) in [(table, false), (ids, true)] {
                r.inputs.push(x.to_string());
                r.views.push(None);
                r.slices.push(None);
                r.row_index.push(rows);
            }
            let k = r.inputs.len();
            r.steps.push(Step::Input(k - 1));
            r.steps.push(Step::Gather(k - 2, r.steps.len() - 1));
            let out = r.steps.len() - 1;
            joined(&mut r, &mut value, n, out);
            continue;
        }
        let mut args = Vec::new();
        for (pos, x) in n.inputs.iter().enumerate() {
            let Some(x) = x else {
                if let Op::Clip = n.op {
                    r.steps.push(Step::Const(clip_unbounded(pos)));
                    args.push(r.steps.len() - 1);
                }
                continue;
            };
            if let Some(&s) = value.get(x) {
                args.push(s);
                continue;
            }
            let inside = producer.get(x.as_str()).is_some_and(|p| set.contains(p));
            debug_assert!(!inside, "model order is topological");
            let s = match scalar(x) {
                Some(c) => Step::Const(c),
                None => {
                    r.inputs.push(x.clone());
                    r.views.push(None);
                    r.slices.push(None);
                    r.row_index.push(false);
                    Step::Input(r.inputs.len() - 1)
                }
            };
            r.steps.push(s);
            value.insert(x.clone(), r.steps.len() - 1);
            args.push(r.steps.len() - 1);
        }
        if let Op::Clip = n.op {
            // Bounds left out at the end: none.
            while args.len() < 3 {
                r.steps.push(Step::Const(clip_unbounded(args.len())));
                args.push(r.steps.len() - 1);
            }
        }
        let mut out = lower(&n.op, &args, &mut r.steps, rank)
            .map_err(|e| RegionError::Node(i, format!("{} '{}': {e}", n.op.op_type(), n.name)))?;
        if g.types[&n.outputs[0]].dtype == DType::I32 && int_arithmetic(g, n) {
            // Kernels compute integers in int64: int32 arithmetic wraps after every op.
            r.steps.push(Step::Cast(DType::I32, out));
            out = r.steps.len() - 1;
        }
        if matches!(
            n.op,
            Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::LayerNormalization { .. } | Op::Reduce { .. }
        ) {
            // One row length per region: every reduction runs along the same last axis.
            let x = n.input(0).expect("reductions have an input");
            let len = g.types.get(x).and_then(|t| t.shape.as_ref()?.0.last().cloned());
            match (&row, len) {
                (_, None) => return Err(RegionError::Node(i, format!("'{}': its rank is not known", n.name))),
                (Some(a), Some(b)) if *a != b => {
                    return Err(RegionError::Cut(i, "its rows are of another length than those of the region it joins"))
                }
                (_, Some(crate::ir::Dim::Unknown)) => {
                    // A length known only at run time (computed from a symbolic one): the
                    // same for every such reduction only where all read one input along
                    // their rows. The kernel refuses at run time a row that input broadcasts.
                    let reads = row_inputs(&r.steps, args[0]);
                    let common: BTreeSet<usize> = match &unknown_row {
                        Some(c) => c.intersection(&reads).copied().collect(),
                        None => reads,
                    };
                    if common.is_empty() {
                        return Err(RegionError::Node(
                            i,
                            format!(
                                "'{}': its row length is not known, nor shared with the region's other reductions",
                                n.name
                            ),
                        ));
                    }
                    unknown_row = Some(common);
                    row = Some(crate::ir::Dim::Unknown);
                }
                (_, Some(b)) => row = Some(b),
            }
        }
        joined(&mut r, &mut value, n, out);
        let ranked = r.inputs.iter().all(|x| g.types.get(x).is_some_and(|t| t.shape.is_some()));
        if ranked && inputs_from.last().is_some_and(|&k| k < r.inputs.len()) {
            // Inputs of another space than the region's, or whose last axis is not the
            // region's rows (a value per row of one length applied to rows of another:
            // attention's guard of fully masked rows over its output): the node starts a
            // region of its own.
            // Rows of a length known or named (a symbol) against a space whose last axis is
            // another: two symbols, or a symbol and a size, are not proved equal.
            let fits = match (space(g, &r), &row) {
                (None, _) => false,
                (Some(s), Some(len)) if *len != Dim::Unknown => match s.0.last() {
                    Some(w) if *w != Dim::Unknown => w == len,
                    _ => true,
                },
                (Some(_), _) => true,
            };
            if !fits {
                return Err(RegionError::Cut(i, "its inputs do not broadcast with the region's rows"));
            }
        }
    }
    if r.inputs.len() > bolt_codegen::abi::STITCH_MAX_INPUTS {
        // Cut at the member whose inputs take the region past what a kernel reads.
        let after = |k: usize| inputs_from.get(k + 1).copied().unwrap_or(r.inputs.len());
        let at = (0..members.len()).find(|&k| after(k) > bolt_codegen::abi::STITCH_MAX_INPUTS).unwrap_or(0);
        let why = "with the region it joins it reads more inputs than a stitched kernel takes";
        return Err(RegionError::Cut(members[at], why));
    }
    if r.outputs.len() > bolt_codegen::abi::STITCH_MAX_OUTPUTS {
        // Cut at the member whose outputs take the region past what a kernel writes.
        let mut written = 0;
        let at = members.iter().copied().find(|&i| {
            written += r.outputs.iter().filter(|(y, _)| g.nodes[i].outputs.contains(y)).count();
            written > bolt_codegen::abi::STITCH_MAX_OUTPUTS
        });
        let why = "with the region it joins it writes more outputs than a stitched kernel does";
        return Err(RegionError::Cut(at.unwrap_or(members[0]), why));
    }
    if let Some(y) = narrow_output(g, &r) {
        let i = members.iter().copied().find(|&i| g.nodes[i].outputs.iter().any(|o| *o == y));
        let i = i.expect("region outputs are members' outputs");
        return Err(RegionError::Cut(i, "its output is narrower than the region it joins, and read outside it"));
    }
    Ok(r)
}

/// The region's iteration space: the broadcast of its inputs as it reads them (a gather's
/// table by its rows' width), `None` when they do not broadcast (or a shape is unknown).
fn space(g: &Graph, r: &Region) -> Option<Shape> {
    r.inputs.iter().enumerate().try_fold(Shape(vec![]), |acc, (i, x)| {
        let s = r.viewed_shape(i, g.types.get(x)?.shape.as_ref()?).ok()?;
        let s = if r.is_table(i) { Shape(s.0.last().cloned().into_iter().collect()) } else { s };
        crate::ir::broadcast_shapes(&acc, &s)
    })
}

/// A region output narrower than the region's iteration space (the broadcast of its inputs),
/// or `None`: one missing an axis of the space, or of one element where the space has more
/// (other than the row, for a value the region's reductions make per row). A kernel over the
/// space writes a value per element or per row: a masked SE block's count of valid positions
/// ([B, 1, 1] in a region over [B, C, T]) is its own kernel's output instead.
fn narrow_output(g: &Graph, r: &Region) -> Option<String> {
    let shapes: Vec<Shape> = r.inputs.iter().map(|x| g.types.get(x)?.shape.clone()).collect::<Option<_>>()?;
    let refs: Vec<&Shape> = shapes.iter().collect();
    let steps = r.shapes(&refs).ok()?;
    let viewed: Vec<Shape> =
        shapes.iter().enumerate().map(|(i, s)| r.viewed_shape(i, s)).collect::<Result<_, _>>().ok()?;
    let space = viewed
        .iter()
        .enumerate()
        .filter(|(i, _)| !r.is_table(*i))
        .try_fold(Shape(vec![]), |acc, (_, s)| crate::ir::broadcast_shapes(&acc, s))?;
    let one = Dim::Known(1);
    r.outputs.iter().find_map(|(y, step)| {
        let s = &steps[*step].0;
        let per_row = r.reduces() && row_inputs(&r.steps, *step).is_empty();
        let last = space.rank().saturating_sub(1);
        let narrow = s.len() < space.rank()
            || space.0.iter().enumerate().any(|(k, d)| {
                let o = &s[s.len() - space.rank() + k];
                *o == one && *d != one && !(per_row && k == last)
            });
        (narrow && space.rank() > 0).then(|| y.clone())
    })
}

/// The region inputs step `j` reads along its rows: those no reduction cuts off.
fn row_inputs(steps: &[Step], j: usize) -> BTreeSet<usize> {
    let mut reads: Vec<BTreeSet<usize>> = Vec::with_capacity(j + 1);
    for s in &steps[..=j] {
        let of = |args: &[usize]| args.iter().flat_map(|&a| reads[a].iter().copied()).collect();
        let set = match *s {
            Step::Input(i) => [i].into(),
            Step::Const(_) | Step::Reduce(..) => BTreeSet::new(),
            Step::Gather(t, a) => reads[a].iter().copied().chain([t]).collect(),
            Step::Unary(_, a) | Step::Not(a) | Step::Cast(_, a) => of(&[a]),
            Step::Binary(_, a, b) | Step::Compare(_, a, b) | Step::Logic(_, a, b) => of(&[a, b]),
            Step::Select(c, a, b) => of(&[c, a, b]),
        };
        reads.push(set);
    }
    reads.pop().unwrap_or_default()
}

/// A value during evaluation, row-major with its shape: floats in f64, integers and bools
/// (0 / 1) exactly in i64.
#[derive(Clone)]
struct Value {
    shape: Vec<usize>,
    data: Data,
}

#[derive(Clone)]
enum Data {
    F(Vec<f64>),
    I(Vec<i64>),
}

impl Value {
    fn of(t: &Tensor) -> Value {
        let data = match &t.data {
            TensorData::Bool(b) => Data::I(b.iter().map(|&x| i64::from(x)).collect()),
            _ => match t.as_i64_vec() {
                Some(v) => Data::I(v),
                None => Data::F(t.to_f64_vec()),
            },
        };
        Value { shape: t.shape.clone(), data }
    }

    fn floats(&self) -> Vec<f64> {
        match &self.data {
            Data::F(v) => v.clone(),
            Data::I(v) => v.iter().map(|&i| i as f64).collect(),
        }
    }

    fn truths(&self) -> Vec<bool> {
        match &self.data {
            Data::F(v) => v.iter().map(|&x| x != 0.0).collect(),
            Data::I(v) => v.iter().map(|&i| i != 0).collect(),
        }
    }

    /// The value at every index of `shape` (which it broadcasts to).
    fn expand(&self, shape: &[usize]) -> Data {
        let idx = crate::ir::broadcast_index(&self.shape, shape);
        match &self.data {
            Data::F(v) => Data::F(idx.into_iter().map(|i| v[i]).collect()),
            Data::I(v) => Data::I(idx.into_iter().map(|i| v[i]).collect()),
        }
    }

    /// As a tensor of its own precision (f64 or i64), for the reference's ops.
    fn tensor(&self) -> Tensor {
        match &self.data {
            Data::F(v) => Tensor { shape: self.shape.clone(), data: TensorData::F64(v.clone()) },
            Data::I(v) => Tensor::from_i64(self.shape.clone(), v.clone()),
        }
    }
}

/// `x` rounded to f32 (held in f64).
fn f32r(x: f64) -> f64 {
    x as f32 as f64
}

fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    crate::ir::broadcast_static(a, b).ok_or_else(|| format!("{a:?} and {b:?} do not broadcast"))
}

impl Region {
    /// Every output of the region on `inputs` (by the region's input order), each converted
    /// to its type ([`Region::dtypes`]): every float step rounds to f32, as ONNX's f32 ops and
    /// a stitched kernel's registers do (an f16 model's intermediates stay f32 on chip);
    /// a reduction sums in f64 and rounds once (the kernel's order of summation is its own);
    /// integers and bools are exact.
    pub fn eval(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, String> {
        if inputs.len() != self.inputs.len() {
            return Err(format!("{} inputs for {} region inputs", inputs.len(), self.inputs.len()));
        }
        let mut vals: Vec<Value> = Vec::with_capacity(self.steps.len());
        for s in &self.steps {
            let v = match *s {
                Step::Input(i) if self.slice(i).is_some() => {
                    // ONNX Slice on the host: the reference executor's own op.
                    let axes = self.slice(i).unwrap_or_default();
                    let ints = |f: &dyn Fn(&SliceAxis) -> i64| {
                        Tensor::from_i64(vec![axes.len()], axes.iter().map(f).collect())
                    };
                    let (starts, ends) = (ints(&|a| a.start), ints(&|a| a.end));
                    let (ax, steps) = (ints(&|a| a.axis as i64), ints(&|a| a.step));
                    let t = crate::reference::eval_op(
                        &Op::Slice,
                        &[Some(inputs[i]), Some(&starts), Some(&ends), Some(&ax), Some(&steps)],
                    )
                    .map_err(|e| format!("input {i}: {e}"))?
                    .remove(0);
                    Value::of(&t)
                }
                Step::Input(i) if self.row_index(i) => {
                    let mut v = Value::of(inputs[i]);
                    v.shape.push(1);
                    v
                }
                Step::Input(i) => match self.view(i) {
                    None => Value::of(inputs[i]),
                    Some(perm) => {
                        let t = crate::reference::ops::layout::transpose(inputs[i], Some(perm))
                            .map_err(|e| format!("input {i}: {e}"))?
                            .remove(0);
                        Value::of(&t)
                    }
                },
                Step::Const(c) => Value { shape: vec![], data: Data::F(vec![f32r(c)]) },
                // Integer steps (int64 arithmetic) exactly, as the kernels compute them.
                Step::Unary(u, a) if matches!(vals[a].data, Data::I(_)) => {
                    let Data::I(v) = &vals[a].data else { unreachable!("matched") };
                    let f = crate::plan::lower::unary_fn(u);
                    Value { shape: vals[a].shape.clone(), data: Data::I(v.iter().map(|&x| f.apply_int(x)).collect()) }
                }
                Step::Unary(u, a) => {
                    let f = crate::reference::unary_fn(u);
                    let v = vals[a].floats().into_iter().map(|x| f32r(f(x))).collect();
                    Value { shape: vals[a].shape.clone(), data: Data::F(v) }
                }
                Step::Binary(b, x, y) if matches!((&vals[x].data, &vals[y].data), (Data::I(_), Data::I(_))) => {
                    let shape = broadcast(&vals[x].shape, &vals[y].shape)?;
                    let f = crate::plan::lower::binary_fn(b);
                    let v = match (vals[x].expand(&shape), vals[y].expand(&shape)) {
                        (Data::I(p), Data::I(q)) => p.iter().zip(&q).map(|(&p, &q)| f.apply_int(p, q)).collect(),
                        _ => unreachable!("matched"),
                    };
                    Value { shape, data: Data::I(v) }
                }
                Step::Binary(b, x, y) => {
                    let shape = broadcast(&vals[x].shape, &vals[y].shape)?;
                    let (p, q) = (Value::floats_at(&vals[x], &shape), Value::floats_at(&vals[y], &shape));
                    let v = p.iter().zip(&q).map(|(&p, &q)| f32r(b.apply(p, q))).collect();
                    Value { shape, data: Data::F(v) }
                }
                Step::Reduce(kind, a) => {
                    let x = &vals[a];
                    let len = x.shape.last().copied().unwrap_or(1).max(1);
                    let v = x
                        .floats()
                        .chunks(len)
                        .map(|row| {
                            f32r(match kind {
                                Reduce::Sum => row.iter().sum(),
                                Reduce::Mean => row.iter().sum::<f64>() / len as f64,
                                // A NaN in the row gives NaN, as the kernels' and ONNX's ReduceMax
                                // (f64::max would drop it).
                                Reduce::Max => row.iter().copied().fold(f64::NEG_INFINITY, |a, v| {
                                    if a.is_nan() || v.is_nan() {
                                        f64::NAN
                                    } else {
                                        a.max(v)
                                    }
                                }),
                            })
                        })
                        .collect();
                    let mut shape = x.shape.clone();
                    if let Some(l) = shape.last_mut() {
                        *l = 1;
                    }
                    Value { shape, data: Data::F(v) }
                }
                Step::Compare(c, x, y) => {
                    let shape = broadcast(&vals[x].shape, &vals[y].shape)?;
                    let v: Vec<i64> = match (vals[x].expand(&shape), vals[y].expand(&shape)) {
                        (Data::I(p), Data::I(q)) => p.iter().zip(&q).map(|(&p, &q)| i64::from(c.apply(p, q))).collect(),
                        _ => {
                            let (p, q) = (Value::floats_at(&vals[x], &shape), Value::floats_at(&vals[y], &shape));
                            p.iter().zip(&q).map(|(&p, &q)| i64::from(c.apply(p, q))).collect()
                        }
                    };
                    Value { shape, data: Data::I(v) }
                }
                Step::Logic(l, x, y) => {
                    let shape = broadcast(&vals[x].shape, &vals[y].shape)?;
                    let (p, q) = (vals[x].truths(), vals[y].truths());
                    let (ip, iq) = (
                        crate::ir::broadcast_index(&vals[x].shape, &shape),
                        crate::ir::broadcast_index(&vals[y].shape, &shape),
                    );
                    let v = ip.iter().zip(&iq).map(|(&i, &j)| i64::from(l.apply(p[i], q[j]))).collect();
                    Value { shape, data: Data::I(v) }
                }
                Step::Not(a) => Value {
                    shape: vals[a].shape.clone(),
                    data: Data::I(vals[a].truths().into_iter().map(|t| i64::from(!t)).collect()),
                },
                Step::Select(c, x, y) => {
                    let shape = broadcast(&broadcast(&vals[c].shape, &vals[x].shape)?, &vals[y].shape)?;
                    let cond: Vec<bool> = {
                        let t = vals[c].truths();
                        crate::ir::broadcast_index(&vals[c].shape, &shape).into_iter().map(|i| t[i]).collect()
                    };
                    let data = match (vals[x].expand(&shape), vals[y].expand(&shape)) {
                        (Data::I(p), Data::I(q)) => Data::I(
                            cond.iter().zip(p.iter().zip(&q)).map(|(&c, (&p, &q))| if c { p } else { q }).collect(),
                        ),
                        _ => {
                            let (p, q) = (Value::floats_at(&vals[x], &shape), Value::floats_at(&vals[y], &shape));
                            Data::F(
                                cond.iter().zip(p.iter().zip(&q)).map(|(&c, (&p, &q))| if c { p } else { q }).collect(),
                            )
                        }
                    };
                    Value { shape, data }
                }
                Step::Gather(t, a) => {
                    // The reference executor's Gather on the indices (their appended 1 dropped).
                    let mut idx = vals[a].tensor();
                    idx.shape.pop();
                    let y =
                        crate::reference::eval_op(&Op::Gather { axis: 0 }, &[Some(inputs[t]), Some(&idx)])?.remove(0);
                    Value::of(&y)
                }
                Step::Cast(to, a) => {
                    // The reference executor's Cast, from the value's exact f64 / i64.
                    let t = crate::reference::eval_op(&Op::Cast { to, saturate: true }, &[Some(&vals[a].tensor())])?
                        .remove(0);
                    Value::of(&t)
                }
            };
            vals.push(v);
        }
        self.outputs
            .iter()
            .enumerate()
            .map(|(k, (name, s))| {
                let dt = self.dtype(k);
                let v = &vals[*s];
                let t = match &v.data {
                    Data::I(i) if !dt.is_float() => Tensor::from_i64_as(dt, v.shape.clone(), i),
                    _ => Tensor::from_f64_as(dt, v.shape.clone(), &v.floats()),
                };
                t.ok_or_else(|| format!("output '{name}': cannot hold {dt}"))
            })
            .collect()
    }
}

impl Value {
    fn floats_at(&self, shape: &[usize]) -> Vec<f64> {
        match self.expand(shape) {
            Data::F(v) => v,
            Data::I(v) => v.into_iter().map(|i| i as f64).collect(),
        }
    }
}
