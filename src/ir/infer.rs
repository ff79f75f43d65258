//! Shape and dtype inference for every supported op, with static and symbolic dims.
//!
//! Shape-computing subgraphs (`Shape -> Gather -> Concat -> Reshape`, as exporters write for
//! dynamic batch) are followed through "shape values": 1-D integer tensors whose elements are
//! known as [`Dim`]s. Nodes whose inputs are all small constants are folded with the reference
//! executor, so constant shape arithmetic of any form resolves.

use super::*;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Largest constant (in elements) folded at import; bigger ones are weights, not shapes.
const FOLD_LIMIT: usize = 1 << 16;

/// What inference knows about one input of the node being inferred.
#[derive(Clone, Copy)]
pub struct InputInfo<'a> {
    pub ty: Option<&'a TensorType>,
    pub value: Option<&'a Tensor>,
    pub dims: Option<&'a [Dim]>,
    /// Per element of `dims`: its value where it is a known negative constant (the `-1`
    /// placeholders of a shape the model computes), which no dim holds (`dims` says Unknown).
    pub negative: Option<&'a [Option<i64>]>,
}

impl<'a> InputInfo<'a> {
    pub fn shape(&self) -> Option<&'a Shape> {
        self.ty.and_then(|t| t.shape.as_ref())
    }
}

/// Infers the types of all node outputs, in place. `declared` holds the types the file
/// records for intermediates and outputs; they fill dims inference cannot know. Where the file
/// contradicts what the computation gives (exporters leave stale output shapes; onnxruntime
/// only warns), inference wins and the conflict is logged.
///
/// A node whose output types cannot be known (an input of unknown type, a host-only op
/// inference has no rule for, `If`/`Loop` bodies) gets unknown outputs rather than an error:
/// the partitioner leaves anchors that read them to the host and says why. Errors remain for
/// what no run can satisfy (a MatMul whose known inner dims differ).
pub fn infer_graph(graph: &mut Graph, declared: &HashMap<String, TensorType>) -> Result<()> {
    infer_with_values(graph, declared, false, FOLD_LIMIT).map(|_| ())
}

/// [`infer_graph`] for an `If` branch: an `If` inside it whose branches both fail is an error
/// of this branch (which then cannot be the one a valid run takes), not untyped outputs.
pub(crate) fn infer_branch(graph: &mut Graph, declared: &HashMap<String, TensorType>) -> Result<()> {
    infer_with_values(graph, declared, true, FOLD_LIMIT).map(|_| ())
}

/// The values inference knows of `g`'s node outputs: small constant computations and shape
/// arithmetic on known dims (each a node output; initializers are not repeated).
pub fn known_values(g: &Graph) -> Result<HashMap<String, Arc<Tensor>>> {
    let mut g = g.clone();
    let declared = g.types.clone();
    infer_with_values(&mut g, &declared, false, FOLD_LIMIT)
}

/// [`known_values`], also folding computations of weights of any size up to
/// [`WEIGHT_FOLD_LIMIT`] elements that do not grow their constant inputs (paddle2onnx slices
/// and concatenates LSTM gate weights, onnx's caffe2 models fill them with ConstantOfShape):
/// the planner's constants, which import keeps small.
pub fn known_weights(g: &Graph) -> Result<HashMap<String, Arc<Tensor>>> {
    let mut g = g.clone();
    let declared = g.types.clone();
    infer_with_values(&mut g, &declared, false, WEIGHT_FOLD_LIMIT)
}

/// The largest weight the planner folds (f32: 256 MiB).
pub const WEIGHT_FOLD_LIMIT: usize = 1 << 26;

/// [`infer_graph`], returning [`known_values`].
fn infer_with_values(
    graph: &mut Graph,
    declared: &HashMap<String, TensorType>,
    branch: bool,
    limit: usize,
) -> Result<HashMap<String, Arc<Tensor>>> {
    let mut consts: HashMap<String, Arc<Tensor>> = graph.initializers.clone();
    let mut shape_vals: HashMap<String, Vec<Dim>> = HashMap::new();
    let mut negatives: HashMap<String, Vec<Option<i64>>> = HashMap::new();
    for i in 0..graph.nodes.len() {
        let node = &graph.nodes[i];
        let infos: Vec<Option<InputInfo>> = node
            .inputs
            .iter()
            .map(|x| {
                x.as_ref().map(|name| InputInfo {
                    ty: graph.types.get(name),
                    value: consts.get(name).map(|t| t.as_ref()),
                    dims: shape_vals.get(name).map(|v| v.as_slice()),
                    negative: negatives.get(name).map(|v| v.as_slice()),
                })
            })
            .collect();

        let mut host = None;
        let mut branches = None;
        let inferred: Vec<TensorType> = match &node.op {
            Op::If { then_branch, else_branch } => {
                // A branch inference cannot type leaves the outputs unknown (the host runs the
                // If); it may be the branch no run takes.
                match super::control::infer_if(&node.inputs, &infos, then_branch, else_branch, node.outputs.len()) {
                    Ok(t) => branches = Some(t),
                    Err(r) if branch => return Err(Error::node(node, r)),
                    Err(r) => tracing::warn!("node '{}' (If): {r}; its outputs stay untyped", node.name),
                }
                vec![]
            }
            Op::Scan(s) => {
                match super::control::infer_scan(&node.inputs, &infos, s, node.outputs.len()) {
                    Ok(t) => branches = Some(t),
                    Err(r) if branch => return Err(Error::node(node, r)),
                    Err(r) => tracing::warn!("node '{}' (Scan): {r}; its outputs stay untyped", node.name),
                }
                vec![]
            }
            Op::Loop { body, carried } => {
                match super::control::infer_loop(&node.inputs, &infos, body, *carried, node.outputs.len()) {
                    Ok(t) => branches = Some(t),
                    Err(r) if branch => return Err(Error::node(node, r)),
                    Err(r) => tracing::warn!("node '{}' (Loop): {r}; its outputs stay untyped", node.name),
                }
                vec![]
            }
            Op::Opaque { domain, op_type, attrs, .. } => {
                let h = super::infer_host::infer_host(domain, op_type, attrs, &infos, node.outputs.len());
                host = Some(h);
                vec![]
            }
            op => match infer_node(op, &infos) {
                Ok(v) => v,
                // Unknown input types propagate as unknown outputs.
                Err(_) if infos.iter().flatten().any(|x| x.ty.is_none_or(|t| t.shape.is_none())) => vec![],
                Err(r) => return Err(Error::node(node, r)),
            },
        };
        // Fold only when inference proves every output small: a 10-element Resize input with
        // scales of 1e9 must not allocate at import.
        // Above FOLD_LIMIT (when allowed), only outputs no larger than the constant inputs
        // together: weights rearranged, not a Tile or Expand blowing a constant up.
        let constant_in: usize = infos.iter().flatten().filter_map(|x| x.value).map(Tensor::len).sum();
        let small = matches!(node.op, Op::Constant { .. })
            || !inferred.is_empty()
                && inferred.iter().all(|t| {
                    t.shape.as_ref().and_then(Shape::as_static).is_some_and(|d| {
                        d.iter()
                            .try_fold(1usize, |a, &x| a.checked_mul(x))
                            .is_some_and(|n| n <= FOLD_LIMIT || (n <= limit && n <= constant_in))
                    })
                });
        let mut folded = if small { try_fold(node, &infos, limit) } else { None };
        let mut out_types: Vec<Option<TensorType>> = match &folded {
            Some(ts) => ts.iter().map(|t| Some(TensorType::new(t.dtype(), Shape::from_static(&t.shape)))).collect(),
            None => inferred.into_iter().map(Some).collect(),
        };
        let mut new_dims = if folded.is_none() { shape_value(&node.op, &infos) } else { None };
        let new_negatives = new_dims.as_ref().and_then(|_| negative_value(&node.op, &infos));
        if let Op::Compare(_) | Op::Where = node.op {
            // Shape arithmetic through a comparison or a select (torch's `Where(Equal(shape,
            // -1), 1, shape)`) folds with symbolic dims too.
            let h = super::infer_host::infer_host("", node.op.op_type(), &[], &infos, 1);
            if folded.is_none() {
                if let Some(v) = h.value {
                    out_types[0] = Some(TensorType::new(v.dtype(), Shape::from_static(&v.shape)));
                    folded = Some(vec![v]);
                }
            }
            if folded.is_none() {
                new_dims = h.dims;
            }
        }
        if let Some(t) = branches {
            out_types = t;
        }
        if let Some(h) = host {
            out_types = h.types;
            if let Some(v) = h.value {
                out_types[0] = Some(TensorType::new(v.dtype(), Shape::from_static(&v.shape)));
                folded = Some(vec![v]);
            } else if let Some(ts) = fold_host(node, &infos, &out_types, limit) {
                out_types = ts.iter().map(|t| Some(TensorType::new(t.dtype(), Shape::from_static(&t.shape)))).collect();
                folded = Some(ts);
            }
            new_dims = h.dims;
        }
        out_types.resize(node.outputs.len(), None);

        let node = graph.nodes[i].clone();
        for (k, out) in node.outputs.iter().enumerate() {
            if out.is_empty() {
                continue;
            }
            let ty = match merge_declared(out_types[k].clone(), declared.get(out)) {
                Ok(t) => t,
                Err(r) => {
                    tracing::warn!("node '{}' output '{out}': {r}; using the inferred type", node.name);
                    out_types[k].take()
                }
            };
            if let Some(ty) = ty {
                graph.types.insert(out.clone(), ty);
            }
        }
        if let Some(ts) = folded {
            for (out, t) in node.outputs.iter().zip(ts) {
                if let Some(d) = t.as_i64_vec().filter(|_| t.rank() <= 1) {
                    shape_vals.insert(
                        out.clone(),
                        d.iter().map(|&x| if x >= 0 { Dim::Known(x as usize) } else { Dim::Unknown }).collect(),
                    );
                }
                consts.insert(out.clone(), Arc::new(t));
            }
        }
        if let Some(d) = new_dims {
            // Shape arithmetic whose every entry is known is a constant (torch's `chunk` and
            // `split` compute Slice bounds as Shape(x)[1] / 3 * k): later nodes fold on it,
            // and a Slice with such bounds has a known shape.
            let out = &node.outputs[0];
            if !consts.contains_key(out) {
                if let Some(t) = known_value(&d, graph.types.get(out)) {
                    consts.insert(out.clone(), Arc::new(t));
                }
            }
            shape_vals.entry(out.clone()).or_insert(d);
            if let Some(n) = new_negatives.filter(|n| n.iter().any(Option::is_some)) {
                negatives.entry(out.clone()).or_insert(n);
            }
        }
    }
    consts.retain(|k, _| !graph.initializers.contains_key(k));
    Ok(consts)
}

/// The integer tensor whose elements are `dims`, when every dim is known and the value's type
/// (integer, static shape of as many elements) says how to lay them out.
fn known_value(dims: &[Dim], ty: Option<&TensorType>) -> Option<Tensor> {
    let ty = ty.filter(|t| t.dtype.is_integer())?;
    let shape = ty.shape.as_ref()?.as_static()?;
    if shape.len() > 1 || shape.iter().product::<usize>() != dims.len() {
        return None;
    }
    let v: Vec<i64> = dims.iter().map(|d| d.known().map(|x| x as i64)).collect::<Option<_>>()?;
    Tensor::from_i64_as(ty.dtype, shape, &v)
}

/// Evaluates a node whose inputs are all small constants.
fn try_fold(node: &Node, infos: &[Option<InputInfo>], limit: usize) -> Option<Vec<Tensor>> {
    if node.op.is_opaque() {
        return None;
    }
    if let Op::Constant { value } = &node.op {
        return Some(vec![value.as_ref().clone()]);
    }
    let mut inputs = Vec::with_capacity(infos.len());
    for info in infos {
        match info {
            None => inputs.push(None),
            Some(i) => match i.value {
                Some(t) if t.len() <= limit => inputs.push(Some(t)),
                _ => return None,
            },
        }
    }
    // Shape of a static input is a constant even though the input is not.
    crate::reference::eval_op(&node.op, &inputs).ok()
}

/// A host-only op the reference computes (Mod in a frame count `n - (n - win) % hop`, a
/// DequantizeLinear of a quantized model's int8 weight) of constant inputs, computed by the
/// reference when inference proves its outputs small, as [`try_fold`] does for the others
/// (up to `limit` elements where they do not outgrow the constant inputs): shape arithmetic
/// then folds once the input sizes are bound, and dequantized weights are weights.
fn fold_host(
    node: &Node,
    infos: &[Option<InputInfo>],
    types: &[Option<TensorType>],
    limit: usize,
) -> Option<Vec<Tensor>> {
    let inputs: Vec<Option<&Tensor>> =
        infos.iter().map(|i| i.map(|i| i.value.ok_or(())).transpose()).collect::<Result<_, ()>>().ok()?;
    if inputs.iter().all(Option::is_none) || types.len() != node.outputs.len() {
        return None;
    }
    let constant_in: usize = inputs.iter().flatten().map(|t| t.len()).sum();
    let proven_small = types.iter().all(|t| {
        t.as_ref().and_then(|t| t.shape.as_ref()?.as_static()).is_some_and(|d| {
            let n: usize = d.iter().product();
            n <= FOLD_LIMIT || (n <= limit && n <= constant_in)
        })
    });
    if !proven_small {
        return None;
    }
    crate::reference::eval_node(node, &inputs).ok()
}

fn merge_declared(inferred: Option<TensorType>, declared: Option<&TensorType>) -> Result<Option<TensorType>, String> {
    let (inf, dec) = match (inferred, declared) {
        (None, d) => return Ok(d.cloned()),
        (Some(i), None) => return Ok(Some(i)),
        (Some(i), Some(d)) => (i, d),
    };
    if matches!(dec.dtype, DType::Other(0)) || inf.dtype == dec.dtype {
        // ok
    } else {
        return Err(format!("inferred as {inf} but the model declares {dec}"));
    }
    let shape = match (inf.shape, &dec.shape) {
        (None, d) => d.clone(),
        (Some(s), None) => Some(s),
        (Some(s), Some(d)) if d.rank() == 0 && s.rank() != 0 && d.0.is_empty() => Some(s),
        (Some(s), Some(d)) => {
            if s.rank() != d.rank() {
                return Err(format!(
                    "inferred as {} but the model declares {}",
                    TensorType { dtype: inf.dtype, shape: Some(s) },
                    dec
                ));
            }
            let mut dims = Vec::with_capacity(s.rank());
            for (a, b) in s.0.iter().zip(&d.0) {
                if !a.compatible(b) {
                    return Err(format!("inferred shape {} but the model declares {}", s, d));
                }
                dims.push(match (a, b) {
                    (Dim::Known(_), _) => a.clone(),
                    (_, Dim::Known(_)) | (Dim::Unknown, Dim::Sym(_)) => b.clone(),
                    _ => a.clone(),
                });
            }
            Some(Shape(dims))
        }
    };
    Ok(Some(TensorType { dtype: inf.dtype, shape }))
}

/// Normalises a possibly negative axis against `rank` (`allow_end` permits `rank` itself).
pub fn norm_axis(axis: i64, rank: usize, allow_end: bool) -> Result<usize, String> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    let max = if allow_end { rank as i64 } else { rank as i64 - 1 };
    if a < 0 || a > max {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(a as usize)
}

fn input<'a>(infos: &[Option<InputInfo<'a>>], i: usize) -> Result<InputInfo<'a>, String> {
    infos.get(i).copied().flatten().ok_or_else(|| format!("missing required input {i}"))
}

fn ty<'a>(infos: &[Option<InputInfo<'a>>], i: usize) -> Result<&'a TensorType, String> {
    input(infos, i)?.ty.ok_or_else(|| format!("type of input {i} is unknown"))
}

/// Integer contents of an optional constant input: Ok(None) when absent, Err when present but
/// not constant (shape then depends on run-time values).
fn const_ints(infos: &[Option<InputInfo>], i: usize) -> Result<Option<Vec<i64>>, ()> {
    match infos.get(i).copied().flatten() {
        None => Ok(None),
        Some(info) => match info.value.and_then(|t| t.as_i64_vec()) {
            Some(v) => Ok(Some(v)),
            None => Err(()),
        },
    }
}

/// Pad's (begin, end) per axis of a rank-`rank` input when its pads (input 1) and axes
/// (input 3) are constants; `Ok(None)` when they are not known here.
pub fn pad_amounts(infos: &[Option<InputInfo>], rank: usize) -> Result<Option<Vec<(i64, i64)>>, String> {
    let Ok(Some(pads)) = const_ints(infos, 1) else { return Ok(None) };
    let Ok(axes) = const_ints(infos, 3) else { return Ok(None) };
    pads_per_axis(&pads, axes.as_deref(), rank).map(Some)
}

/// ONNX Pad's `pads` (all begins, then all ends, over `axes` or every axis) as (begin, end)
/// per axis of a rank-`rank` tensor.
pub fn pads_per_axis(pads: &[i64], axes: Option<&[i64]>, rank: usize) -> Result<Vec<(i64, i64)>, String> {
    let axes: Vec<usize> = match axes {
        Some(a) => a.iter().map(|&x| norm_axis(x, rank, false)).collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(format!("{} pads for {} axes (begins then ends)", pads.len(), axes.len()));
    }
    let mut out = vec![(0, 0); rank];
    for (k, &a) in axes.iter().enumerate() {
        out[a] = (pads[k], pads[k + axes.len()]);
    }
    Ok(out)
}

fn same(t: &TensorType) -> Vec<TensorType> {
    vec![t.clone()]
}

fn unknown_dims(rank: usize) -> Shape {
    Shape(vec![Dim::Unknown; rank])
}

/// Product of dims when all known; a symbol when exactly one symbol and the rest are 1.
fn dim_product(dims: &[Dim]) -> Dim {
    let mut known = 1usize;
    let mut sym = None;
    for d in dims {
        match d {
            Dim::Known(n) => known *= n,
            Dim::Sym(_) if sym.is_none() => sym = Some(d.clone()),
            _ => return Dim::Unknown,
        }
    }
    match sym {
        None => Dim::Known(known),
        Some(s) if known == 1 => s,
        Some(_) => Dim::Unknown,
    }
}

/// Output types of one node from its inputs' types and constant values.
pub fn infer_node(op: &Op, infos: &[Option<InputInfo>]) -> Result<Vec<TensorType>, String> {
    let x = ty(infos, 0);
    Ok(match op {
        Op::MatMul => {
            let (a, b) = (x?, ty(infos, 1)?);
            if a.dtype != b.dtype {
                return Err(format!("input types differ: {} vs {}", a.dtype, b.dtype));
            }
            let shape = match (&a.shape, &b.shape) {
                (Some(sa), Some(sb)) => Some(matmul_shape(sa, sb)?),
                _ => None,
            };
            vec![TensorType { dtype: a.dtype, shape }]
        }
        Op::Gemm { trans_a, trans_b, .. } => {
            let (a, b) = (x?, ty(infos, 1)?);
            let (sa, sb) = (a.shape.as_ref(), b.shape.as_ref());
            let (m, ka) = match sa {
                Some(s) if s.rank() == 2 => {
                    if *trans_a {
                        (s.0[1].clone(), s.0[0].clone())
                    } else {
                        (s.0[0].clone(), s.0[1].clone())
                    }
                }
                Some(s) => return Err(format!("A must be 2-D, has shape {s}")),
                None => (Dim::Unknown, Dim::Unknown),
            };
            let (kb, n) = match sb {
                Some(s) if s.rank() == 2 => {
                    if *trans_b {
                        (s.0[1].clone(), s.0[0].clone())
                    } else {
                        (s.0[0].clone(), s.0[1].clone())
                    }
                }
                Some(s) => return Err(format!("B must be 2-D, has shape {s}")),
                None => (Dim::Unknown, Dim::Unknown),
            };
            if !ka.compatible(&kb) {
                return Err(format!("inner dimensions differ: A gives K={ka}, B gives K={kb}"));
            }
            let out = Shape(vec![m, n]);
            if let Some(c) = infos.get(2).copied().flatten().and_then(|c| c.shape()) {
                match broadcast_shapes(c, &out) {
                    Some(b) if b.rank() == 2 && b.0.iter().zip(&out.0).all(|(p, q)| p.compatible(q)) => {}
                    _ => return Err(format!("C of shape {c} does not broadcast to the output {out}")),
                }
            }
            vec![TensorType::new(a.dtype, out)]
        }
        Op::Conv { window, group } => {
            let (xt, wt) = (x?, ty(infos, 1)?);
            let shape = match (&xt.shape, &wt.shape) {
                (Some(xs), Some(ws)) => Some(conv_shape(xs, ws, window, *group)?),
                _ => None,
            };
            if let (Some(ws), Some(b)) = (&wt.shape, infos.get(2).copied().flatten().and_then(|b| b.shape())) {
                if b.rank() != 1 || !b.0[0].compatible(&ws.0[0]) {
                    return Err(format!("bias of shape {b} must be [M] = [{}]", ws.0[0]));
                }
            }
            vec![TensorType { dtype: xt.dtype, shape }]
        }
        Op::ConvTranspose { window, group, output_padding, output_shape } => {
            let (xt, wt) = (x?, ty(infos, 1)?);
            let shape = match (&xt.shape, &wt.shape) {
                (Some(xs), Some(ws)) => {
                    if xs.rank() < 3 || ws.rank() != xs.rank() {
                        return Err(format!("input {xs} and weight {ws} must have the same rank >= 3"));
                    }
                    if !xs.0[1].compatible(&ws.0[0]) {
                        return Err(format!("input has {} channels but weight {ws} expects {}", xs.0[1], ws.0[0]));
                    }
                    // A window of symbolic size (weights computed at run time) leaves the
                    // output's spatial sizes unknown.
                    let kernel: Option<Vec<usize>> = match &window.kernel_shape {
                        Some(k) => Some(k.clone()),
                        None => ws.0[2..].iter().map(Dim::known).collect(),
                    };
                    let channels = match ws.0[1] {
                        Dim::Known(c) => Dim::Known(c * group),
                        _ => Dim::Unknown,
                    };
                    let mut out = vec![xs.0[0].clone(), channels];
                    match (xs.0[2..].iter().map(Dim::known).collect::<Option<Vec<_>>>(), kernel) {
                        (Some(sp), Some(kernel)) => out.extend(
                            window
                                .resolve_transposed(&sp, &kernel, output_padding.as_deref(), output_shape.as_deref())?
                                .output
                                .into_iter()
                                .map(Dim::Known),
                        ),
                        _ => out.extend(std::iter::repeat_n(Dim::Unknown, xs.rank() - 2)),
                    }
                    Some(Shape(out))
                }
                _ => None,
            };
            vec![TensorType { dtype: xt.dtype, shape }]
        }
        Op::BatchNormalization { training_mode, .. } => {
            let xt = x?;
            if let Some(s) = &xt.shape {
                if s.rank() < 2 {
                    return Err(format!("input must have rank >= 2, has shape {s}"));
                }
                for i in 1..5 {
                    if let Some(p) = infos.get(i).copied().flatten().and_then(|p| p.shape()) {
                        if p.rank() != 1 || !p.0[0].compatible(&s.0[1]) {
                            return Err(format!("input {i} has shape {p}, expected [C] = [{}]", s.0[1]));
                        }
                    }
                }
            }
            let mut v = same(xt);
            if *training_mode {
                let c = xt.shape.as_ref().map(|s| Shape(vec![s.0[1].clone()]));
                let stat_dtype =
                    infos.get(3).copied().flatten().and_then(|m| m.ty).map(|t| t.dtype).unwrap_or(xt.dtype);
                v.push(TensorType { dtype: stat_dtype, shape: c.clone() });
                v.push(TensorType { dtype: stat_dtype, shape: c });
            }
            v
        }
        Op::Binary(b) => {
            let (a, c) = (x?, ty(infos, 1)?);
            if *b != Binary::Pow && a.dtype != c.dtype {
                return Err(format!("input types differ: {} vs {}", a.dtype, c.dtype));
            }
            let shape = match (&a.shape, &c.shape) {
                (Some(sa), Some(sc)) => {
                    Some(broadcast_shapes(sa, sc).ok_or_else(|| format!("shapes {sa} and {sc} do not broadcast"))?)
                }
                _ => None,
            };
            vec![TensorType { dtype: a.dtype, shape }]
        }
        Op::Unary(_) | Op::Clip | Op::Identity | Op::Softmax { .. } | Op::LogSoftmax { .. } => {
            let t = x?;
            if let Op::Softmax { axis } | Op::LogSoftmax { axis } = op {
                if let Some(s) = &t.shape {
                    norm_axis(*axis, s.rank(), false)?;
                }
            }
            same(t)
        }
        Op::Cast { to, .. } => vec![TensorType { dtype: *to, shape: x?.shape.clone() }],
        Op::Transpose { perm } => {
            let t = x?;
            let shape = match &t.shape {
                None => None,
                Some(s) => {
                    let p = match perm {
                        Some(p) => {
                            check_perm(p, s.rank())?;
                            p.clone()
                        }
                        None => (0..s.rank()).rev().collect(),
                    };
                    Some(Shape(p.iter().map(|&i| s.0[i].clone()).collect()))
                }
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Reshape { allowzero } => {
            let t = x?;
            let target = input(infos, 1)?;
            let shape = match (target.dims, target.value) {
                (Some(d), v) => Some(reshape_shape(t.shape.as_ref(), d, v, *allowzero)?),
                // A constant target (an initializer, as exporters fold it).
                (None, Some(v)) => Some(reshape_shape(t.shape.as_ref(), &[], Some(v), *allowzero)?),
                (None, None) => target.shape().and_then(|s| s.0.first()).and_then(Dim::known).map(unknown_dims),
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Flatten { axis } => {
            let t = x?;
            let shape = match &t.shape {
                None => Some(unknown_dims(2)),
                Some(s) => {
                    let a = norm_axis(*axis, s.rank(), true)?;
                    Some(Shape(vec![dim_product(&s.0[..a]), dim_product(&s.0[a..])]))
                }
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Squeeze => {
            let t = x?;
            let shape = match (&t.shape, const_ints(infos, 1)) {
                (Some(s), Ok(Some(axes))) => {
                    let mut drop = vec![false; s.rank()];
                    for &a in &axes {
                        let a = norm_axis(a, s.rank(), false)?;
                        if let Dim::Known(n) = s.0[a] {
                            if n != 1 {
                                return Err(format!("cannot squeeze axis {a} of size {n}"));
                            }
                        }
                        drop[a] = true;
                    }
                    Some(Shape(s.0.iter().zip(&drop).filter(|(_, &d)| !d).map(|(x, _)| x.clone()).collect()))
                }
                (Some(s), Ok(None)) if s.is_static() => {
                    Some(Shape(s.0.iter().filter(|d| **d != Dim::Known(1)).cloned().collect()))
                }
                _ => None,
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Unsqueeze => {
            let t = x?;
            let shape = match (&t.shape, const_ints(infos, 1)) {
                (Some(s), Ok(Some(axes))) => {
                    let r = s.rank() + axes.len();
                    let mut ins = vec![false; r];
                    for &a in &axes {
                        let a = norm_axis(a, r, false)?;
                        if ins[a] {
                            return Err(format!("axis {a} repeated"));
                        }
                        ins[a] = true;
                    }
                    let mut it = s.0.iter();
                    Some(Shape(
                        ins.iter()
                            .map(|&i| if i { Dim::Known(1) } else { it.next().cloned().unwrap_or(Dim::Unknown) })
                            .collect(),
                    ))
                }
                (_, Err(())) => None,
                (None, _) => None,
                (Some(_), Ok(None)) => return Err("missing required input 1 (axes)".into()),
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Split { axis, outputs } => {
            let t = x?;
            let Some(s) = &t.shape else { return Ok(vec![TensorType { dtype: t.dtype, shape: None }; *outputs]) };
            let a = norm_axis(*axis, s.rank(), false)?;
            let sizes: Option<Vec<usize>> = match const_ints(infos, 1) {
                Ok(Some(v)) => Some(
                    v.iter()
                        .map(|&x| usize::try_from(x).map_err(|_| format!("split size {x} is negative")))
                        .collect::<Result<_, _>>()?,
                ),
                Ok(None) => s.0[a].known().map(|d| split_sizes(d, *outputs)),
                Err(()) => None,
            };
            match sizes {
                Some(z) => {
                    if z.len() != *outputs {
                        return Err(format!("{} split sizes for {outputs} outputs", z.len()));
                    }
                    if let Some(d) = s.0[a].known() {
                        if z.iter().sum::<usize>() != d {
                            return Err(format!("split sizes {z:?} do not add up to dim {a} = {d}"));
                        }
                    }
                    z.iter()
                        .map(|&n| {
                            let mut d = s.0.clone();
                            d[a] = Dim::Known(n);
                            TensorType { dtype: t.dtype, shape: Some(Shape(d)) }
                        })
                        .collect()
                }
                None => {
                    let mut d = s.0.clone();
                    d[a] = Dim::Unknown;
                    vec![TensorType { dtype: t.dtype, shape: Some(Shape(d)) }; *outputs]
                }
            }
        }
        Op::Concat { axis } => {
            let first = x?;
            let mut shape: Option<Shape> = first.shape.clone();
            let rank = first.shape.as_ref().map(|s| s.rank());
            let a = match rank {
                Some(r) => Some(norm_axis(*axis, r, false)?),
                None => None,
            };
            for i in 1..infos.len() {
                let t = ty(infos, i)?;
                if t.dtype != first.dtype {
                    return Err(format!("input {i} is {} but input 0 is {}", t.dtype, first.dtype));
                }
                shape = match (shape, &t.shape, a) {
                    (Some(acc), Some(s), Some(a)) => {
                        if s.rank() != acc.rank() {
                            return Err(format!("input {i} has rank {}, input 0 has rank {}", s.rank(), acc.rank()));
                        }
                        let mut d = acc.0.clone();
                        #[allow(clippy::needless_range_loop)] // indexes d and s.0 together
                        for k in 0..d.len() {
                            if k == a {
                                d[k] = match (&d[k], &s.0[k]) {
                                    (Dim::Known(p), Dim::Known(q)) => Dim::Known(p + q),
                                    _ => Dim::Unknown,
                                };
                            } else if !d[k].compatible(&s.0[k]) {
                                return Err(format!(
                                    "input {i} has shape {s}, incompatible with {acc} off the concat axis"
                                ));
                            } else if d[k].known().is_none() {
                                d[k] = s.0[k].clone();
                            }
                        }
                        Some(Shape(d))
                    }
                    _ => None,
                };
            }
            vec![TensorType { dtype: first.dtype, shape }]
        }
        Op::Slice => {
            let t = x?;
            // A constant step of 0 slices nothing in any direction (onnxruntime refuses it).
            if const_ints(infos, 4).ok().flatten().is_some_and(|steps| steps.contains(&0)) {
                return Err("a step of 0".into());
            }
            let shape = match &t.shape {
                None => None,
                Some(s) => match slice_params(infos, s.rank()) {
                    Some(p) => Some(Shape(
                        s.0.iter()
                            .enumerate()
                            .map(|(i, d)| match (d, p.iter().find(|q| q.axis == i)) {
                                (_, None) => d.clone(),
                                (Dim::Known(n), Some(q)) => Dim::Known(q.resolve(*n).len),
                                (_, Some(q)) if q.is_full() => d.clone(),
                                _ => Dim::Unknown,
                            })
                            .collect(),
                    )),
                    None => Some(symbolic_slice(infos, s).unwrap_or_else(|| unknown_dims(s.rank()))),
                },
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Gather { axis } => {
            let (d, idx) = (x?, ty(infos, 1)?);
            if !idx.dtype.is_integer() {
                return Err(format!("indices must be integers, are {}", idx.dtype));
            }
            let shape = match (&d.shape, &idx.shape) {
                (Some(ds), Some(is)) => {
                    let a = norm_axis(*axis, ds.rank(), false)?;
                    let mut v = ds.0[..a].to_vec();
                    v.extend(is.0.iter().cloned());
                    v.extend(ds.0[a + 1..].iter().cloned());
                    Some(Shape(v))
                }
                _ => None,
            };
            vec![TensorType { dtype: d.dtype, shape }]
        }
        Op::Shape { start, end } => {
            let t = x?;
            let len = t.shape.as_ref().map(|s| {
                let (b, e) = shape_range(s.rank(), *start, *end);
                Dim::Known(e.saturating_sub(b))
            });
            vec![TensorType { dtype: DType::I64, shape: Some(Shape(vec![len.unwrap_or(Dim::Unknown)])) }]
        }
        Op::Constant { value } => vec![TensorType::new(value.dtype(), Shape::from_static(&value.shape))],
        Op::MaxPool { window, ceil_mode, .. } | Op::AveragePool { window, ceil_mode, .. } => {
            let t = x?;
            let kernel = window.kernel_shape.as_ref().ok_or("missing required attribute 'kernel_shape'")?;
            let shape = match &t.shape {
                None => None,
                Some(s) => {
                    if s.rank() != kernel.len() + 2 {
                        return Err(format!("input of shape {s} does not match a {}-D kernel", kernel.len()));
                    }
                    Some(window_shape(s, kernel, window, *ceil_mode, s.0[1].clone())?)
                }
            };
            let mut v = vec![TensorType { dtype: t.dtype, shape: shape.clone() }];
            if matches!(op, Op::MaxPool { .. }) {
                v.push(TensorType { dtype: DType::I64, shape });
            }
            v
        }
        Op::Pad { .. } => {
            let t = x?;
            let shape = t.shape.as_ref().map(|s| match pad_amounts(infos, s.rank()) {
                Ok(Some(pads)) => Shape(
                    s.0.iter()
                        .zip(&pads)
                        .map(|(d, &(b, e))| match d {
                            Dim::Known(n) => Dim::Known((*n as i64 + b + e).max(0) as usize),
                            _ if b == 0 && e == 0 => d.clone(),
                            _ => Dim::Unknown,
                        })
                        .collect(),
                ),
                _ => unknown_dims(s.rank()),
            });
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::DepthToSpace { blocksize, .. } => {
            let t = x?;
            let b = *blocksize;
            let shape = match &t.shape {
                None => None,
                Some(s) if s.rank() != 4 => return Err(format!("input must have rank 4, has shape {s}")),
                Some(s) => {
                    let c = match s.0[1] {
                        Dim::Known(c) if c % (b * b) != 0 => {
                            return Err(format!("{c} channels are not a multiple of blocksize^2 = {}", b * b))
                        }
                        Dim::Known(c) => Dim::Known(c / (b * b)),
                        _ => Dim::Unknown,
                    };
                    let grow = |d: &Dim| match d {
                        Dim::Known(n) => Dim::Known(n * b),
                        _ => Dim::Unknown,
                    };
                    Some(Shape(vec![s.0[0].clone(), c, grow(&s.0[2]), grow(&s.0[3])]))
                }
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => {
            let t = x?;
            let shape = t.shape.as_ref().map(|s| {
                Shape(s.0.iter().enumerate().map(|(i, d)| if i < 2 { d.clone() } else { Dim::Known(1) }).collect())
            });
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::LayerNormalization { axis, stash_type, .. } => {
            let t = x?;
            let stat_shape = match &t.shape {
                Some(s) => {
                    let a = norm_axis(*axis, s.rank(), false)?;
                    Some(Shape(
                        s.0.iter().enumerate().map(|(i, d)| if i < a { d.clone() } else { Dim::Known(1) }).collect(),
                    ))
                }
                None => None,
            };
            vec![
                same(t).remove(0),
                TensorType { dtype: *stash_type, shape: stat_shape.clone() },
                TensorType { dtype: *stash_type, shape: stat_shape },
            ]
        }
        Op::Reduce { axes, keepdims, noop_with_empty_axes, .. } => {
            let t = x?;
            let axes = match axes {
                Some(a) => Ok(Some(a.clone())),
                None => const_ints(infos, 1),
            };
            let shape = match (&t.shape, axes) {
                (Some(s), Ok(axes)) => {
                    let axes = axes.unwrap_or_default();
                    let mut reduce = vec![axes.is_empty() && !*noop_with_empty_axes; s.rank()];
                    for a in axes {
                        reduce[norm_axis(a, s.rank(), false)?] = true;
                    }
                    Some(Shape(
                        s.0.iter()
                            .zip(&reduce)
                            .filter_map(|(d, &r)| {
                                if !r {
                                    Some(d.clone())
                                } else if *keepdims {
                                    Some(Dim::Known(1))
                                } else {
                                    None
                                }
                            })
                            .collect(),
                    ))
                }
                (Some(s), Err(())) if *keepdims => Some(unknown_dims(s.rank())),
                _ => None,
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Resize(attrs) => {
            let t = x?;
            let shape = match &t.shape {
                Some(s) if s.is_static() => {
                    let dims = s.as_static().expect("static");
                    let scales = infos.get(2).copied().flatten().map(|i| i.value.map(|v| v.to_f32_vec()));
                    let sizes = const_ints(infos, 3);
                    match (scales, sizes) {
                        (Some(None), _) | (_, Err(())) => Some(unknown_dims(s.rank())),
                        (scales, Ok(sizes)) => {
                            let scales = scales.flatten().filter(|v| !v.is_empty());
                            let (out, _) = resize_output(&dims, attrs, scales.as_deref(), sizes.as_deref())?;
                            Some(Shape::from_static(&out))
                        }
                    }
                }
                Some(s) => {
                    // The sizes come at run time; constant scales or sizes are checked now (their
                    // count, signs, one of the two), with stand-in sizes of 1.
                    let scales = infos.get(2).copied().flatten().map(|i| i.value.map(|v| v.to_f32_vec()));
                    if let (Some(Some(_)) | None, Ok(sizes)) = (&scales, const_ints(infos, 3)) {
                        let scales = scales.flatten().filter(|v| !v.is_empty());
                        resize_output(&vec![1; s.rank()], attrs, scales.as_deref(), sizes.as_deref())?;
                    }
                    Some(unknown_dims(s.rank()))
                }
                None => None,
            };
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Recurrent(r) | Op::RecurrentScan(r) => {
            let t = x?;
            if !t.dtype.is_float() {
                return Err(format!("X must be a float tensor, is {}", t.dtype));
            }
            if t.shape.as_ref().is_some_and(|s| s.rank() != 3) {
                return Err(format!("X must have rank 3, has rank {}", t.shape.as_ref().map_or(0, Shape::rank)));
            }
            let scan = matches!(op, Op::RecurrentScan(_));
            let weights: &[(usize, &str)] = if scan { &[(1, "Rᵀ")] } else { &[(1, "W"), (2, "R")] };
            for &(i, name) in weights {
                let w = ty(infos, i)?;
                if w.dtype != t.dtype {
                    return Err(format!("{name} is {}, X is {}", w.dtype, t.dtype));
                }
                if w.shape.as_ref().is_some_and(|s| s.rank() != 3) {
                    return Err(format!("{name} must have rank 3"));
                }
            }
            // R is [D, G*H, H]; Rᵀ [D, H, G*H].
            let hidden = match (r.hidden_size, scan) {
                (Some(h), _) => Dim::Known(h),
                (None, false) => ty(infos, 2)?.shape.as_ref().map_or(Dim::Unknown, |s| s.0[2].clone()),
                (None, true) => ty(infos, 1)?.shape.as_ref().map_or(Dim::Unknown, |s| s.0[1].clone()),
            };
            let lstm = matches!(r.cell, Cell::Lstm { .. });
            super::infer_host::recurrent_types(t, r.direction.count(), hidden, r.batch_major, lstm)
                .into_iter()
                .map(|t| t.expect("recurrent outputs are typed"))
                .collect()
        }
        Op::Fused(k) => vec![fused_type(k, x?, ty(infos, 1)?)?],
        Op::FusedChain(layers) => {
            let mut cur = x?.clone();
            for (i, k) in layers.iter().enumerate() {
                let w = ty(infos, 1 + 2 * i)?;
                cur = fused_type(k, &cur, w).map_err(|e| format!("chain layer {i}: {e}"))?;
            }
            vec![cur]
        }
        Op::Stitched(r) => {
            let tys: Option<Vec<&TensorType>> = (0..r.inputs.len()).map(|i| ty(infos, i).ok()).collect();
            r.output_types(&tys.ok_or("an input has no type")?)?
        }
        Op::Attention(a) => vec![attention_type(a, ty(infos, 0)?, ty(infos, 1)?, ty(infos, 2)?)?],
        Op::ChannelsLast(inner) => {
            let t = x?;
            if t.shape.as_ref().is_some_and(|s| s.rank() != 4) {
                return Err(format!("channels-last data must have rank 4, has shape {}", t.shape.as_ref().unwrap()));
            }
            let nchw = permute4(t, TO_NCHW);
            let info = Some(InputInfo { ty: Some(&nchw), value: None, dims: None, negative: None });
            let mut v = infer_node(inner, &[info])?;
            vec![permute4(&v.swap_remove(0), TO_NHWC)]
        }
        Op::FitLastAxis { to } => {
            let t = x?;
            let shape = t.shape.as_ref().map(|s| {
                let mut d = s.0.clone();
                if let Some(last) = d.last_mut() {
                    *last = Dim::Known(*to);
                }
                Shape(d)
            });
            vec![TensorType { dtype: t.dtype, shape }]
        }
        Op::Compare(_) | Op::Logic(_) | Op::Not | Op::Where | Op::Expand => {
            let same = |i: usize, j: usize| -> Result<(), String> {
                let (a, b) = (ty(infos, i)?, ty(infos, j)?);
                match a.dtype == b.dtype {
                    true => Ok(()),
                    false => Err(format!("inputs {i} and {j} differ in type: {} vs {}", a.dtype, b.dtype)),
                }
            };
            let bool_input = |i: usize| -> Result<(), String> {
                match ty(infos, i)?.dtype {
                    DType::Bool => Ok(()),
                    t => Err(format!("input {i} is {t}, not bool")),
                }
            };
            match op {
                Op::Compare(_) => same(0, 1)?,
                Op::Logic(_) => {
                    bool_input(0)?;
                    bool_input(1)?
                }
                Op::Not => bool_input(0)?,
                Op::Where => {
                    bool_input(0)?;
                    same(1, 2)?
                }
                _ => {
                    if !ty(infos, 1)?.dtype.is_integer() {
                        return Err("the target shape (input 1) is not an integer tensor".into());
                    }
                }
            }
            if !matches!(op, Op::Expand) {
                let shapes: Option<Vec<&Shape>> = infos.iter().flatten().map(|i| i.shape()).collect();
                if let Some(shapes) = shapes {
                    let mut acc = shapes[0].clone();
                    for s in &shapes[1..] {
                        acc = broadcast_shapes(&acc, s)
                            .ok_or_else(|| format!("input shapes {shapes:?} do not broadcast"))?;
                    }
                }
            }
            // One place for these ops' shapes and the shape values they fold: the host rules.
            let h = super::infer_host::infer_host("", op.op_type(), &[], infos, 1);
            match h.types.into_iter().next().flatten() {
                Some(t) => vec![t],
                None => return Err("inputs do not broadcast".into()),
            }
        }
        // One place for their shapes and folds: the host rules (which also fold small
        // integer fills and know symbolic dims of the shape operand).
        Op::ConstantOfShape { value } => {
            let attrs: Vec<(String, AttrValue)> =
                value.iter().map(|v| ("value".to_string(), AttrValue::Tensor(v.clone()))).collect();
            let h = super::infer_host::infer_host("", op.op_type(), &attrs, infos, 1);
            vec![h.types.into_iter().next().flatten().ok_or("the shape operand has no type")?]
        }
        Op::Range => {
            let h = super::infer_host::infer_host("", op.op_type(), &[], infos, 1);
            vec![h.types.into_iter().next().flatten().ok_or("start has no type")?]
        }
        // Typed where the graph is known (infer_with_values, control::infer_if).
        Op::Opaque { .. } | Op::If { .. } | Op::Loop { .. } | Op::Scan(_) => vec![],
    })
}

/// Output type of a planned kernel from its A and weight types (NHWC convs are inferred as
/// the NCHW conv they equal, then permuted back).
fn fused_type(k: &FusedKernel, a: &TensorType, w: &TensorType) -> Result<TensorType, String> {
    let nhwc = k.layout == ConvLayout::Nhwc && matches!(*k.anchor, Op::Conv { .. });
    let permute = permute4;
    let (a, mut w) = if nhwc { (permute(a, TO_NCHW), permute(w, TO_NCHW)) } else { (a.clone(), w.clone()) };
    if k.weight_transposed {
        if let Some(s) = &mut w.shape {
            s.0.reverse();
        }
    }
    let info = |t| Some(InputInfo { ty: Some(t), value: None, dims: None, negative: None });
    let mut v = infer_node(&k.anchor, &[info(&a), info(&w)])?;
    let mut out = v.swap_remove(0);
    out.dtype = k.output_dtype;
    Ok(if nhwc { permute(&out, TO_NHWC) } else { out })
}

const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

/// `t` with a rank-4 shape permuted by `p` (other ranks as they are).
fn permute4(t: &TensorType, p: [usize; 4]) -> TensorType {
    TensorType {
        dtype: t.dtype,
        shape: t.shape.as_ref().map(|s| {
            if s.rank() == 4 {
                Shape(p.iter().map(|&i| s.0[i].clone()).collect())
            } else {
                s.clone()
            }
        }),
    }
}

/// `outputs` parts of a dim of `d`: equal, the last smaller when they do not divide (opset
/// 18's num_outputs; earlier opsets require them to divide, which this includes).
pub fn split_sizes(d: usize, outputs: usize) -> Vec<usize> {
    let each = d.div_ceil(outputs.max(1));
    (0..outputs).map(|i| each.min(d.saturating_sub(i * each))).collect()
}

fn check_perm(p: &[usize], rank: usize) -> Result<(), String> {
    let mut seen = vec![false; rank];
    if p.len() != rank {
        return Err(format!("perm {p:?} has {} entries for rank {rank}", p.len()));
    }
    for &i in p {
        if i >= rank || seen[i] {
            return Err(format!("perm {p:?} is not a permutation of 0..{rank}"));
        }
        seen[i] = true;
    }
    Ok(())
}

/// Numpy matmul shape rules, including 1-D promotion.
pub fn matmul_shape(a: &Shape, b: &Shape) -> Result<Shape, String> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err("MatMul inputs must have rank >= 1".into());
    }
    let a2 = if a.rank() == 1 { Shape(vec![Dim::Known(1), a.0[0].clone()]) } else { a.clone() };
    let b2 = if b.rank() == 1 { Shape(vec![b.0[0].clone(), Dim::Known(1)]) } else { b.clone() };
    let (ra, rb) = (a2.rank(), b2.rank());
    let k1 = &a2.0[ra - 1];
    let k2 = &b2.0[rb - 2];
    if !k1.compatible(k2) {
        return Err(format!("inner dimensions differ: {a} x {b}"));
    }
    let batch = broadcast_shapes(&Shape(a2.0[..ra - 2].to_vec()), &Shape(b2.0[..rb - 2].to_vec()))
        .ok_or_else(|| format!("batch dimensions of {a} and {b} do not broadcast"))?;
    let mut out = batch.0;
    if a.rank() > 1 {
        out.push(a2.0[ra - 2].clone());
    }
    if b.rank() > 1 {
        out.push(b2.0[rb - 1].clone());
    }
    Ok(Shape(out))
}

pub(super) fn conv_shape(x: &Shape, w: &Shape, window: &Window, group: usize) -> Result<Shape, String> {
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(format!("input {x} and weight {w} must have the same rank >= 3"));
    }
    if let (Dim::Known(c), Dim::Known(cw)) = (&x.0[1], &w.0[1]) {
        if *c != cw * group {
            return Err(format!("input has {c} channels but weight {w} with group {group} expects {}", cw * group));
        }
    }
    if let Dim::Known(m) = w.0[0] {
        if m % group != 0 {
            return Err(format!("{m} output channels are not divisible by group {group}"));
        }
    }
    let kernel: Vec<usize> = match &window.kernel_shape {
        Some(k) => k.clone(),
        None => match w.0[2..].iter().map(Dim::known).collect::<Option<_>>() {
            Some(k) => k,
            // Weights computed at run time, their window's size unknown until then (valid ONNX):
            // so are the output's spatial sizes.
            None => {
                let mut out = vec![x.0[0].clone(), w.0[0].clone()];
                out.extend(std::iter::repeat_n(Dim::Unknown, x.rank() - 2));
                return Ok(Shape(out));
            }
        },
    };
    if let Some(ws) = w.as_static() {
        if ws[2..] != kernel[..] {
            return Err(format!("kernel_shape {kernel:?} differs from weight {w}"));
        }
    }
    window_shape(x, &kernel, window, false, w.0[0].clone())
}

fn window_shape(x: &Shape, kernel: &[usize], window: &Window, ceil_mode: bool, channels: Dim) -> Result<Shape, String> {
    let mut out = vec![x.0[0].clone(), channels];
    // Each spatial axis on its own: a known size gives its output size; a symbolic one keeps
    // its name where the window gives back the size it reads (stride 1, padded by the
    // window's reach: a 1-D conv over an audio length), which two probe sizes show.
    let spatial = &x.0[2..];
    let probe = |size: usize| -> Result<Vec<usize>, String> {
        let sizes: Vec<usize> = spatial.iter().map(|d| d.known().unwrap_or(size)).collect();
        Ok(window.resolve(&sizes, kernel, ceil_mode)?.output)
    };
    let (a, b) = (probe(1 << 20)?, probe((1 << 20) + 7)?);
    for (i, d) in spatial.iter().enumerate() {
        out.push(match d {
            Dim::Known(_) => Dim::Known(a[i]),
            Dim::Sym(_) if a[i] == 1 << 20 && b[i] == (1 << 20) + 7 => d.clone(),
            _ => Dim::Unknown,
        });
    }
    Ok(Shape(out))
}

/// Reshape target from its elements as dims (0 copies, -1 infers) and the input's shape.
fn reshape_shape(
    input: Option<&Shape>,
    target: &[Dim],
    value: Option<&Tensor>,
    allowzero: bool,
) -> Result<Shape, String> {
    let raw: Vec<i64> = match value.and_then(|t| t.as_i64_vec()) {
        Some(v) => v,
        // Symbolic target: elements are dims. A known 0 copies the input's dim; one unknown
        // entry (a -1, or a run-time size) is what the element count leaves.
        None => {
            let mut out: Vec<Dim> = target
                .iter()
                .enumerate()
                .map(|(i, d)| match (d, input) {
                    (Dim::Known(0), Some(s)) if !allowzero && i < s.rank() => s.0[i].clone(),
                    _ => d.clone(),
                })
                .collect();
            let unknown: Vec<usize> = (0..out.len()).filter(|&i| out[i] == Dim::Unknown).collect();
            if let ([pos], Some(s)) = (unknown.as_slice(), input) {
                out[*pos] = infer_minus_one(&s.0, &out, *pos);
            }
            return Ok(Shape(out));
        }
    };
    if raw.iter().filter(|&&v| v == -1).count() > 1 {
        return Err(format!("shape {raw:?} has more than one -1"));
    }
    if let Some(&bad) = raw.iter().find(|&&v| v < -1) {
        return Err(format!("shape {raw:?} has invalid entry {bad}"));
    }
    if allowzero && raw.contains(&0) && raw.contains(&-1) {
        return Err(format!("shape {raw:?} mixes 0 and -1 with allowzero"));
    }
    let mut out: Vec<Dim> = Vec::with_capacity(raw.len());
    for (i, &v) in raw.iter().enumerate() {
        out.push(match v {
            0 if !allowzero => match input {
                Some(s) if i < s.rank() => s.0[i].clone(),
                Some(s) => return Err(format!("shape {raw:?} copies dim {i} but the input {s} has rank {}", s.rank())),
                None => Dim::Unknown,
            },
            -1 => Dim::Unknown,
            v => Dim::Known(v as usize),
        });
    }
    if let Some(pos) = raw.iter().position(|&v| v == -1) {
        // A -1 beside a size 0 could be any size (onnxruntime refuses it at load).
        if out.iter().enumerate().any(|(i, d)| i != pos && *d == Dim::Known(0)) {
            return Err(format!("shape {raw:?} puts -1 beside a dim of size 0: the -1 could be any size"));
        }
    }
    if let (Some(pos), Some(s)) = (raw.iter().position(|&v| v == -1), input) {
        out[pos] = infer_minus_one(&s.0, &out, pos);
    } else if let Some(s) = input.and_then(Shape::as_static) {
        let total: usize = s.iter().product();
        if let Some(o) = Shape(out.clone()).as_static() {
            if o.iter().product::<usize>() != total {
                return Err(format!("cannot reshape {s:?} ({total} elements) to {raw:?}"));
            }
        }
    }
    Ok(Shape(out))
}

/// The -1 entry of a reshape: cancels common factors (numbers and symbols) between the
/// input's dims and the other target dims.
fn infer_minus_one(input: &[Dim], target: &[Dim], pos: usize) -> Dim {
    let mut num = 1usize;
    let mut syms: Vec<&str> = Vec::new();
    for d in input {
        match d {
            Dim::Known(n) => num *= n,
            Dim::Sym(s) => syms.push(s),
            Dim::Unknown => return Dim::Unknown,
        }
    }
    let mut den = 1usize;
    for (i, d) in target.iter().enumerate() {
        if i == pos {
            continue;
        }
        match d {
            Dim::Known(n) => den *= n,
            Dim::Sym(s) => match syms.iter().position(|x| x == s) {
                Some(k) => {
                    syms.remove(k);
                }
                None => return Dim::Unknown,
            },
            Dim::Unknown => return Dim::Unknown,
        }
    }
    if den == 0 || !num.is_multiple_of(den) {
        return Dim::Unknown;
    }
    match (num / den, syms.as_slice()) {
        (n, []) => Dim::Known(n),
        (1, [s]) => Dim::Sym(s.to_string()),
        _ => Dim::Unknown,
    }
}

/// Clamped [begin, end) of the Shape op's start/end attributes.
pub fn shape_range(rank: usize, start: i64, end: Option<i64>) -> (usize, usize) {
    let clamp = |v: i64| -> usize {
        let v = if v < 0 { v + rank as i64 } else { v };
        v.clamp(0, rank as i64) as usize
    };
    (clamp(start), clamp(end.unwrap_or(rank as i64)))
}

/// One axis of a Slice with its raw parameters.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SliceAxis {
    pub axis: usize,
    pub start: i64,
    pub end: i64,
    pub step: i64,
}

/// A slice resolved against a concrete dim size.
pub struct ResolvedSlice {
    pub start: i64,
    pub step: i64,
    pub len: usize,
}

impl SliceAxis {
    fn is_full(&self) -> bool {
        self.start == 0 && self.step == 1 && self.end >= i32::MAX as i64
    }

    /// ONNX Slice clamping rules for a dim of size `n`.
    pub fn resolve(&self, n: usize) -> ResolvedSlice {
        if n == 0 {
            // Nothing to take, in either direction (a backward range would clamp into [0, -1]).
            return ResolvedSlice { start: 0, step: self.step, len: 0 };
        }
        let n = n as i64;
        let norm = |v: i64| if v < 0 { v + n } else { v };
        let (start, end) = (norm(self.start), norm(self.end));
        let (start, end) = if self.step > 0 {
            (start.clamp(0, n), end.clamp(0, n))
        } else {
            (start.clamp(0, n - 1), end.clamp(-1, n - 1))
        };
        let len = if self.step > 0 {
            if end > start {
                (end - start + self.step - 1) / self.step
            } else {
                0
            }
        } else if start > end {
            (start - end + (-self.step) - 1) / (-self.step)
        } else {
            0
        };
        ResolvedSlice { start, step: self.step, len: len.max(0) as usize }
    }
}

/// Slice parameters when starts/ends (and optional axes/steps) are constants.
/// A Slice whose ends are run-time sizes, from 0 in steps of 1 (HF's position ids:
/// `Slice(position_ids, 0, Shape(input_ids)[1])`): each such axis has the end's size, taken
/// to lie within the axis as onnxruntime's symbolic inference does (beyond it, the model's
/// own broadcasts fail at run time, where shapes are concrete). Other sliced axes: unknown.
fn symbolic_slice(infos: &[Option<InputInfo>], s: &Shape) -> Option<Shape> {
    let starts = const_ints(infos, 1).ok()??;
    let ends = dims_operand(infos, 2)?;
    let axes = const_ints(infos, 3).ok()?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = const_ints(infos, 4).ok()?.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return None;
    }
    let mut out = s.clone();
    for (((&start, end), &axis), &step) in starts.iter().zip(&ends).zip(&axes).zip(&steps) {
        let a = norm_axis(axis, s.rank(), false).ok()?;
        out.0[a] = match end {
            Dim::Sym(_) if start == 0 && step == 1 => end.clone(),
            _ => Dim::Unknown,
        };
    }
    Some(out)
}

fn slice_params(infos: &[Option<InputInfo>], rank: usize) -> Option<Vec<SliceAxis>> {
    let starts = const_ints(infos, 1).ok()??;
    let ends = const_ints(infos, 2).ok()??;
    let axes = const_ints(infos, 3).ok()?;
    let steps = const_ints(infos, 4).ok()?;
    slice_axes(rank, &starts, &ends, axes.as_deref(), steps.as_deref()).ok()
}

/// Validates and pairs Slice's inputs per axis.
pub fn slice_axes(
    rank: usize,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<SliceAxis>, String> {
    let k = starts.len();
    if ends.len() != k || axes.is_some_and(|a| a.len() != k) || steps.is_some_and(|s| s.len() != k) {
        return Err("starts, ends, axes and steps must have the same length".into());
    }
    let mut seen = vec![false; rank];
    (0..k)
        .map(|i| {
            let axis = match axes {
                Some(a) => norm_axis(a[i], rank, false)?,
                None if i < rank => i,
                None => return Err(format!("{k} starts for rank {rank}")),
            };
            if std::mem::replace(&mut seen[axis], true) {
                return Err(format!("axis {axis} repeated"));
            }
            let step = steps.map_or(1, |s| s[i]);
            if step == 0 {
                return Err("slice step cannot be 0".into());
            }
            Ok(SliceAxis { axis, start: starts[i], end: ends[i], step })
        })
        .collect()
}

/// Output sizes of Resize and the per-dim scales used for coordinate mapping, in f64 as the
/// ONNX reference implementation computes them. Empty `scales`/`sizes` count as absent.
pub fn resize_output(
    input: &[usize],
    attrs: &ResizeAttrs,
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
) -> Result<(Vec<usize>, Vec<f64>), String> {
    let rank = input.len();
    let axes: Vec<usize> = match &attrs.axes {
        Some(a) => a.iter().map(|&x| norm_axis(x, rank, false)).collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    if (1..axes.len()).any(|i| axes[..i].contains(&axes[i])) {
        return Err(format!("axes {:?} has a repeated axis", attrs.axes));
    }
    let mut out = input.to_vec();
    let mut sc = vec![1.0f64; rank];
    match (scales.filter(|s| !s.is_empty()), sizes.filter(|s| !s.is_empty())) {
        (Some(s), None) => {
            if s.len() != axes.len() {
                return Err(format!("scales has {} entries for {} axes", s.len(), axes.len()));
            }
            for (&a, &v) in axes.iter().zip(s) {
                if !(v > 0.0 && v.is_finite()) {
                    return Err(format!("scale {v} must be positive and finite"));
                }
                sc[a] = v as f64;
                out[a] = (input[a] as f64 * v as f64).floor() as usize;
            }
        }
        (None, Some(z)) => {
            if z.len() != axes.len() {
                return Err(format!("sizes has {} entries for {} axes", z.len(), axes.len()));
            }
            if let Some(v) = z.iter().find(|&&v| v < 0) {
                return Err(format!("size {v} must be non-negative"));
            }
            let target: Vec<f64> = axes.iter().zip(z).map(|(&a, &v)| v as f64 / input[a] as f64).collect();
            let pick = match attrs.aspect {
                AspectPolicy::Stretch => None,
                AspectPolicy::NotLarger => Some(target.iter().copied().fold(f64::INFINITY, f64::min)),
                AspectPolicy::NotSmaller => Some(target.iter().copied().fold(0.0, f64::max)),
            };
            for (i, &a) in axes.iter().enumerate() {
                (sc[a], out[a]) = match pick {
                    None => (target[i], z[i] as usize),
                    // Rounds half up, as the reference implementation does.
                    Some(p) => (p, (p * input[a] as f64 + 0.5).floor() as usize),
                };
            }
        }
        (Some(_), Some(_)) => return Err("only one of scales and sizes may be given".into()),
        (None, None) => return Err("one of scales and sizes must be given".into()),
    }
    Ok((out, sc))
}

/// Operand `i` of shape arithmetic as dims: propagated dims or a small integer constant.
pub(super) fn dims_operand(infos: &[Option<InputInfo>], i: usize) -> Option<Vec<Dim>> {
    let x = infos.get(i).copied().flatten()?;
    if let Some(d) = x.dims {
        return Some(d.to_vec());
    }
    let v = x.value.filter(|t| t.rank() <= 1 && t.len() <= 64)?.as_i64_vec()?;
    Some(v.iter().map(|&n| if n >= 0 { Dim::Known(n as usize) } else { Dim::Unknown }).collect())
}

/// Operand `i`'s known negative elements (as [`InputInfo::negative`]), aligned with
/// [`dims_operand`].
fn negative_operand(infos: &[Option<InputInfo>], i: usize) -> Option<Vec<Option<i64>>> {
    let x = infos.get(i).copied().flatten()?;
    if let Some(d) = x.dims {
        return Some(x.negative.map_or_else(|| vec![None; d.len()], <[_]>::to_vec));
    }
    let v = x.value.filter(|t| t.rank() <= 1 && t.len() <= 64)?.as_i64_vec()?;
    Some(v.into_iter().map(|n| (n < 0).then_some(n)).collect())
}

/// The known negative elements of a shape value [`shape_value`] computes, through the ops that
/// move elements without arithmetic (a `-1` concatenated into a target shape and selected
/// out of it again); arithmetic results stay unknown.
fn negative_value(op: &Op, infos: &[Option<InputInfo>]) -> Option<Vec<Option<i64>>> {
    moved(op, infos, |x| x.negative, |i| negative_operand(infos, i))?
}

/// The elements of a 1-D shape value that `op` moves without arithmetic (identity-like ops,
/// Gather of constant indices, Concat, a constant Slice), from each input's per-element facts
/// (`of`: dims, known negatives; `operand`: input `i`'s, constants included). `None`: not such
/// an op; `Some(None)`: such an op whose inputs' facts are unknown.
#[allow(clippy::option_option)]
fn moved<'a, T: Clone + 'a>(
    op: &Op,
    infos: &[Option<InputInfo<'a>>],
    of: impl Fn(&InputInfo<'a>) -> Option<&'a [T]>,
    operand: impl Fn(usize) -> Option<Vec<T>>,
) -> Option<Option<Vec<T>>> {
    let first = infos.first().copied().flatten();
    let facts = || first.as_ref().and_then(&of);
    Some(match op {
        Op::Identity | Op::Cast { .. } | Op::Unsqueeze | Op::Squeeze | Op::Reshape { .. } | Op::Flatten { .. } => {
            facts().map(<[_]>::to_vec)
        }
        Op::Gather { axis: 0 } => (|| {
            let d = facts()?;
            let idx = infos.get(1).copied().flatten()?.value?.as_i64_vec()?;
            idx.iter()
                .map(|&i| {
                    let i = if i < 0 { i + d.len() as i64 } else { i };
                    d.get(usize::try_from(i).ok()?).cloned()
                })
                .collect()
        })(),
        Op::Concat { .. } => (0..infos.len()).map(&operand).collect::<Option<Vec<Vec<T>>>>().map(|v| v.concat()),
        Op::Slice => (|| {
            let d = facts()?;
            let p = slice_params(infos, 1)?;
            let r = p.first()?.resolve(d.len());
            Some((0..r.len).map(|k| d[(r.start + k as i64 * r.step) as usize].clone()).collect())
        })(),
        _ => return None,
    })
}

/// One element of integer shape arithmetic. Symbols survive identities (`n * 1`, `n + 0`,
/// `n / 1`); anything else with a symbol is unknown.
fn dim_arith(op: Binary, a: &Dim, b: &Dim) -> Dim {
    match (op, a, b) {
        (_, Dim::Known(p), Dim::Known(q)) => {
            let (p, q) = (*p as i64, *q as i64);
            let r = match op {
                Binary::Add => Some(p + q),
                Binary::Sub => Some(p - q),
                Binary::Mul => Some(p * q),
                Binary::Div if q != 0 => Some(p / q),
                _ => None,
            };
            r.filter(|&r| r >= 0).map_or(Dim::Unknown, |r| Dim::Known(r as usize))
        }
        (Binary::Mul, d, Dim::Known(1)) | (Binary::Mul, Dim::Known(1), d) => d.clone(),
        (Binary::Add, d, Dim::Known(0)) | (Binary::Add, Dim::Known(0), d) => d.clone(),
        (Binary::Sub | Binary::Div, d, Dim::Known(k)) if *k == usize::from(op == Binary::Div) => d.clone(),
        _ => Dim::Unknown,
    }
}

/// Shape-value propagation: the elements of 1-D integer outputs as dims.
fn shape_value(op: &Op, infos: &[Option<InputInfo>]) -> Option<Vec<Dim>> {
    let first = infos.first().copied().flatten()?;
    match op {
        Op::Shape { start, end } => {
            let s = first.shape()?;
            let (b, e) = shape_range(s.rank(), *start, *end);
            Some(s.0[b..e.max(b)].to_vec())
        }
        Op::Binary(b) => {
            let int =
                |i: usize| infos.get(i).copied().flatten().and_then(|x| x.ty).is_some_and(|t| t.dtype.is_integer());
            if !(int(0) && int(1)) {
                return None;
            }
            let (x, y) = (dims_operand(infos, 0)?, dims_operand(infos, 1)?);
            let pairs: Vec<(Dim, Dim)> = match (x.len(), y.len()) {
                (p, q) if p == q => x.into_iter().zip(y).collect(),
                (1, _) => y.into_iter().map(|d| (x[0].clone(), d)).collect(),
                (_, 1) => x.into_iter().map(|d| (d, y[0].clone())).collect(),
                _ => return None,
            };
            Some(pairs.into_iter().map(|(p, q)| dim_arith(*b, &p, &q)).collect())
        }
        op => moved(op, infos, |x| x.dims, |i| dims_operand(infos, i))?,
    }
}

/// The output of a fused attention: batch dims broadcast over Q, K and V, then [S_q, D_v].
fn attention_type(
    a: &crate::partition::attention::FusedAttention,
    q: &TensorType,
    k: &TensorType,
    v: &TensorType,
) -> Result<TensorType, String> {
    let r = a.rank();
    let view = |i: usize, t: &TensorType, perm: &[usize], what: &str| -> Result<Option<Vec<Dim>>, String> {
        let Some(s) = &t.shape else { return Ok(None) };
        let s = a.source_dims(i, &s.0, |d| Dim::Known(d));
        if s.len() != r {
            return Err(format!("{what} has rank {}, the op's views rank {r}", s.len()));
        }
        Ok(Some(perm.iter().map(|&p| s[p].clone()).collect()))
    };
    let dtype = q.dtype;
    let (q, k, v) = (view(0, q, &a.q_perm, "Q")?, view(1, k, &a.k_perm, "K")?, view(2, v, &a.v_perm, "V")?);
    let shape = match (q, k, v) {
        (Some(q), Some(k), Some(v)) => {
            let one = |d: &Dim| matches!(d, Dim::Known(1));
            let mut out: Vec<Dim> = (0..r - 2)
                .map(|i| [&q[i], &k[i], &v[i]].into_iter().find(|d| !one(d)).unwrap_or(&q[i]).clone())
                .collect();
            out.push(q[r - 2].clone());
            out.push(v[r - 1].clone());
            if a.merge_heads {
                if r != 4 {
                    return Err(format!("heads merged in a rank-{r} attention (needs rank 4)"));
                }
                out.swap(1, 2);
            }
            Some(Shape(out))
        }
        _ => None,
    };
    Ok(TensorType { dtype, shape })
}
