//! The partitioner: GEMM/Conv anchors with their epilogue chains become partitions (one kernel
//! each); everything else stays with the host framework, with the reason.
//!
//! An anchor (MatMul, Gemm, Conv) absorbs what follows it when each op's input is read by
//! nobody else and is not a graph output: a BatchNormalization right after a conv and Mul/Div
//! by per-channel constants (folded into the weights at plan time), then in any order scalar
//! Mul/Div, per-column / per-channel constant bias Adds, a residual Add and one activation in
//! any spelling (see [`activation`]), as long as the kernel can compute the result exactly
//! (see [`epilogue`]), then a Cast.

pub mod activation;
pub mod attention;
pub mod epilogue;
pub mod stitch;

pub use crate::ir::ResidualAt;
use crate::ir::{Binary, DType, Graph, Op, Tensor, TensorType, Window};
pub use activation::Activation;
pub use epilogue::{BiasTerm, ChannelFold, FusedEpilogue, KernelForm, SourceTerm, Step};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The kernel-level operation a partition's anchor computes.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum AnchorKind {
    /// ONNX Gemm: 2-D A and B, optionally transposed.
    Gemm { trans_a: bool, trans_b: bool },
    /// MatMul of [..., M, K] by a 2-D [K, N]: one GEMM with M = all leading dims.
    MatMul,
    /// MatMul of two tensors with the same batch dims: a batched GEMM.
    BatchedMatMul,
    /// 2-D convolution (NCHW in the model; NHWC inside Bolt's kernels). `one_d`: a 1-D
    /// convolution on [N, C, L] (audio, sequence models), planned as the 2-D convolution of
    /// [N, C, 1, L] with H = 1; `window` stays the model's 1-D one.
    Conv2d { window: Window, group: usize, one_d: bool },
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Partition {
    /// The anchor node's name (names the partition).
    pub anchor: String,
    pub kind: AnchorKind,
    /// Names of the nodes fused into this partition, anchor first.
    pub nodes: Vec<String>,
    /// Activation (A) and weight (B) operands.
    pub a: String,
    pub b: String,
    pub epilogue: FusedEpilogue,
    /// The tensor the partition produces.
    pub output: String,
    pub output_type: Option<TensorType>,
}

/// A node left to the host framework and why.
#[derive(Clone, Debug, serde::Serialize)]
pub struct HostNode {
    pub node: String,
    pub op_type: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Partitioning {
    pub partitions: Vec<Partition>,
    pub host: Vec<HostNode>,
}

/// Element types CUTLASS tensor-op kernels take.
fn kernel_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

struct Ctx<'g> {
    g: &'g Graph,
    consumers: HashMap<&'g str, Vec<usize>>,
    consts: HashMap<String, Arc<Tensor>>,
    taken: Vec<bool>,
}

impl<'g> Ctx<'g> {
    fn new(g: &'g Graph) -> Ctx<'g> {
        let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            for x in n.inputs.iter().flatten() {
                consumers.entry(x.as_str()).or_default().push(i);
            }
        }
        // Constants: initializers plus Constant nodes (PP-OCR-style exports keep weights there).
        let mut consts = g.initializers.clone();
        for n in &g.nodes {
            if let Op::Constant { value } = &n.op {
                consts.insert(n.outputs[0].clone(), value.clone());
            }
        }
        Ctx { g, consumers, consts, taken: vec![false; g.nodes.len()] }
    }

    /// The only reader of `t`, when `t` is not also a graph output and that reader is free.
    fn sole_consumer(&self, t: &str) -> Option<usize> {
        match self.consumers.get(t).map(Vec::as_slice) {
            Some([n]) if !self.g.outputs.iter().any(|o| o == t) && !self.taken[*n] => Some(*n),
            _ => None,
        }
    }

    fn shape(&self, t: &str) -> Option<&'g [crate::ir::Dim]> {
        self.g.types.get(t).and_then(|ty| ty.shape.as_ref()).map(|s| s.0.as_slice())
    }

    fn scalar(&self, t: &str) -> Option<f32> {
        self.consts.get(t).filter(|c| c.len() == 1 && c.dtype().is_float()).map(|c| c.to_f32_vec()[0])
    }

    /// Whether constant `t` broadcasts as one value per output column (GEMM: last dim N,
    /// every other dim 1) or per channel (conv: [C,1,1] or [1,C,1,1]).
    fn is_channel_vector(&self, t: &str, kind: &AnchorKind, channels: Option<usize>) -> bool {
        let Some(c) = self.consts.get(t) else { return false };
        // A single value is a bias too (the plan expands it per channel); the chain checks
        // that the Add does not raise the output's rank.
        if c.len() == 1 {
            return channels.is_some();
        }
        let Some(n) = channels else { return false };
        let s = &c.shape;
        match kind {
            // [C, 1, 1] or [1, C, 1, 1]; for a 1-D conv [C, 1] or [1, C, 1].
            AnchorKind::Conv2d { one_d, .. } => {
                let spatial = if *one_d { 1 } else { 2 };
                let ones = |d: &[usize]| d.len() == spatial && d.iter().all(|&x| x == 1);
                (s.len() == spatial + 1 && s[0] == n && ones(&s[1..]))
                    || (s.len() == spatial + 2 && s[0] == 1 && s[1] == n && ones(&s[2..]))
            }
            _ => !s.is_empty() && s[s.len() - 1] == n && s[..s.len() - 1].iter().all(|&d| d == 1),
        }
    }
}

/// Partitions a graph.
pub fn partition(g: &Graph) -> Partitioning {
    let mut cx = Ctx::new(g);
    let mut out = Partitioning::default();
    let mut host_reason: HashMap<usize, String> = HashMap::new();
    for i in 0..g.nodes.len() {
        if cx.taken[i] {
            continue;
        }
        match anchor(&cx, i) {
            Ok(Some((kind, a, b))) => {
                let p = grow(&mut cx, i, kind, a, b);
                out.partitions.push(p);
            }
            Ok(None) => {}
            Err(reason) => {
                host_reason.insert(i, reason);
            }
        }
    }
    let metadata = shape_computations(g);
    for (i, n) in g.nodes.iter().enumerate() {
        if cx.taken[i] {
            continue;
        }
        let reason = match (&n.op, host_reason.remove(&i)) {
            (_, Some(r)) => r,
            _ if metadata.contains(&i) => SHAPE_COMPUTATION.into(),
            (Op::Opaque { why, .. }, _) => why.to_string(),
            (Op::If { .. }, _) => "control flow decided at run time: the host runs the branch the condition takes \
                 (an If whose condition is known when planning is inlined)"
                .into(),
            (Op::Loop { .. }, _) => "control flow: a Loop, whose trip count and condition are run-time values; \
                                     the host runs its body"
                .into(),
            (Op::Scan(_), _) => "control flow: a Scan; the host runs its body once per slice".into(),
            (Op::Constant { .. }, _) => "constant (weights are read by the partitions that use them)".into(),
            (Op::Recurrent(_) | Op::RecurrentScan(_), _) => {
                "a recurrent layer (RNN/GRU/LSTM) whose weights are not constants: its input projection cannot be \
                 made a GEMM ahead of the scan"
                    .into()
            }
            _ => NOT_AN_ANCHOR.into(),
        };
        out.host.push(HostNode { node: n.name.clone(), op_type: n.op.op_type().to_string(), reason });
    }
    out
}

/// Why an op no kernel's partition took stays with the host (the stitcher may still take it:
/// the report then gives the stitcher's reason where it did not).
pub const NOT_AN_ANCHOR: &str = "not a GEMM/Conv anchor, nor fusable into one's epilogue";

/// Why an op stays with the host that computes metadata only.
pub const SHAPE_COMPUTATION: &str =
    "a shape computation: from tensor shapes and constants only (no activation data is read), host work by design";

/// Nodes that compute from tensor shapes and constants only: `Shape` itself, and ops all of
/// whose inputs are such values, initializers or constants. They are the model's metadata
/// (dynamic Reshape targets, slice bounds, a detector's anchor grid made with Range and
/// Expand from the feature map's size), which a GPU backend leaves to the host by design
/// (BladeDISC), not work Bolt failed to take; the stitcher leaves them too, so that a
/// metadata chain is not cut into host and device pieces.
pub fn shape_computations(g: &Graph) -> HashSet<usize> {
    // Constants and shape-derived values; `shaped`: the latter alone.
    let mut meta: HashSet<&str> = g.initializers.keys().map(String::as_str).collect();
    let mut shaped: HashSet<&str> = HashSet::new();
    let mut out = HashSet::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let inputs = || n.inputs.iter().flatten();
        let (from_metadata, from_shape) = match &n.op {
            Op::Shape { .. } => (true, true),
            // Control flow (If, Loop, Scan) runs subgraphs that may read any outer value.
            _ if n.op.attrs().hold_graph() => (false, false),
            _ => (inputs().all(|x| meta.contains(x.as_str())), inputs().any(|x| shaped.contains(x.as_str()))),
        };
        if !from_metadata || n.outputs.is_empty() {
            continue;
        }
        // A lookup in a weight table by shape-derived indices (position embeddings by
        // `Slice(position_ids, 0, Shape(x)[1])`) makes activation-sized floats: device work.
        let table =
            n.input(0).and_then(|t| g.initializers.get(t)).is_some_and(|t| t.dtype().is_float() && t.rank() >= 2);
        if matches!(n.op, Op::Gather { .. }) && table {
            continue;
        }
        meta.extend(n.outputs.iter().map(String::as_str));
        // Arithmetic on constants alone (outside canonical's folding) counts when integral.
        let integral = n.outputs.iter().all(|t| g.types.get(t).is_some_and(|ty| !ty.dtype.is_float()));
        if from_shape {
            shaped.extend(n.outputs.iter().map(String::as_str));
        }
        if from_shape || (integral && !matches!(n.op, Op::Constant { .. })) {
            out.insert(i);
        }
    }
    out
}

/// Whether node `i` is an anchor Bolt can build a kernel for: Ok(None) if it is not an
/// anchor op at all, Err(reason) if it is one that must stay with the host.
fn anchor(cx: &Ctx, i: usize) -> Result<Option<(AnchorKind, String, String)>, String> {
    let n = &cx.g.nodes[i];
    let (a, b) = match (n.input(0), n.input(1)) {
        (Some(a), Some(b)) => (a.to_string(), b.to_string()),
        _ => return Ok(None),
    };
    let kind = match &n.op {
        Op::Gemm { trans_a, trans_b, .. } => AnchorKind::Gemm { trans_a: *trans_a, trans_b: *trans_b },
        Op::MatMul => {
            let (sa, sb) = (cx.shape(&a), cx.shape(&b));
            match (sa, sb) {
                (Some(sa), Some(sb)) if sa.len() >= 2 && sb.len() == 2 => AnchorKind::MatMul,
                (Some(sa), Some(sb))
                    if sa.len() >= 3 && sa.len() == sb.len() && sa[..sa.len() - 2] == sb[..sb.len() - 2] =>
                {
                    AnchorKind::BatchedMatMul
                }
                (Some(_), Some(_)) => {
                    return Err("MatMul whose operand ranks or batch dims do not map to a (batched) GEMM".into())
                }
                _ => return Err("MatMul with operands of unknown rank".into()),
            }
        }
        // Its output channels size the bias and the kernel: unknown (a weight an op shape
        // inference cannot type computed it), the conv stays with the host.
        Op::Conv { .. }
            if cx.shape(&a).is_some()
                && cx.shape(&n.outputs[0]).and_then(|s| s.get(1)).and_then(|d| d.known()).is_none() =>
        {
            return Err("Conv whose output channel count is not known (its weight's shape is not)".into())
        }
        // A kernel is built for one window size.
        Op::Conv { window, .. }
            if window.kernel_shape.is_none()
                && cx.shape(&b).is_some_and(|w| w.iter().skip(2).any(|d| d.known().is_none())) =>
        {
            return Err("Conv whose window size (its weight's spatial dims) is known only at run time".into())
        }
        // The bias joins the epilogue as per-channel constants (`plan::fuse` folds it).
        Op::Conv { .. } if n.input(2).is_some_and(|c| !cx.consts.contains_key(c)) => {
            return Err("Conv whose bias is computed at run time (or a graph input)".into())
        }
        Op::Conv { window, group } => match cx.shape(&a) {
            Some(s) if s.len() == 4 => AnchorKind::Conv2d { window: window.clone(), group: *group, one_d: false },
            // The plan reshapes the weight to [M, C/g, 1, k]: it must be a constant.
            Some(s) if s.len() == 3 && cx.consts.contains_key(&b) => {
                AnchorKind::Conv2d { window: window.clone(), group: *group, one_d: true }
            }
            Some(s) if s.len() == 3 => return Err("1-D convolution whose weight is computed at run time".into()),
            Some(s) => {
                return Err(format!("{}-D convolution: Bolt's kernels do 2-D convolutions", s.len().saturating_sub(2)))
            }
            None => return Err("Conv input of unknown rank".into()),
        },
        // Those whose windows tile the output are 1x1 convs by now (`plan::canonical`).
        Op::ConvTranspose { .. } => {
            return Err("a ConvTranspose whose windows overlap or are padded: Bolt has no transposed-convolution \
                        (dgrad) kernel, only the 1x1-conv form of kernel = stride without padding"
                .into())
        }
        _ => return Ok(None),
    };
    // Gemm's C joins the epilogue as a per-column bias (constant) or as a source tensor of
    // the output's shape; a broadcast non-constant C has no epilogue form.
    if let (Op::Gemm { .. }, Some(c)) = (&n.op, n.input(2)) {
        let out = cx.shape(&n.outputs[0]);
        let channels = out.and_then(|s| s.last()).and_then(|d| d.known());
        let full = matches!((cx.shape(c), out), (Some(p), Some(q)) if p == q && p.iter().all(|d| !matches!(d, crate::ir::Dim::Unknown)));
        if !cx.is_channel_vector(c, &kind, channels) && !full {
            return Err(format!(
                "Gemm's C '{c}' is neither a constant per-column bias nor a tensor of the output's shape"
            ));
        }
    }
    let dtype = cx.g.types.get(&a).map(|t| t.dtype);
    match dtype {
        Some(d) if kernel_dtype(d) => Ok(Some((kind, a, b))),
        Some(d) => Err(format!("element type {d}: Bolt's kernels take f16, bf16 or f32")),
        None => Err("operand type unknown".into()),
    }
}

/// Whether broadcasting `cur` against constant `c` keeps `cur`'s shape: a fused kernel writes
/// the anchor's output shape, so a constant that raises the rank (a `[1, 1, N]` bias on a
/// 2-D GEMM) or widens a dim of size 1 stays with the host.
fn const_keeps_shape(cx: &Ctx, cur: &str, c: &str) -> bool {
    use crate::ir::Dim;
    let (Some(s), Some(c)) = (cx.shape(cur), cx.consts.get(c)) else { return false };
    c.rank() <= s.len()
        && c.shape.iter().rev().zip(s.iter().rev()).all(|(&k, d)| k == 1 || matches!(d, Dim::Known(n) if *n == k))
}

/// Whether `to` has `from`'s rank: element-wise activations keep every dim, but a scalar
/// constant inside a decomposed one may still raise the rank.
fn keeps_rank(cx: &Ctx, from: &str, to: &str) -> bool {
    matches!((cx.shape(from), cx.shape(to)), (Some(p), Some(q)) if p.len() == q.len())
}

/// Whether tensor `t` has exactly the shape of `cur` (a residual read element by element).
fn same_shape(cx: &Ctx, t: &str, cur: &str) -> bool {
    use crate::ir::Dim;
    matches!((cx.shape(t), cx.shape(cur)), (Some(p), Some(q)) if p == q && p.iter().all(|d| !matches!(d, Dim::Unknown)))
}

/// Absorbs the epilogue chain after anchor `i`: any sequence of scalar Mul/Div, bias Add,
/// residual Add and one activation whose result the kernel can compute (see [`epilogue`]),
/// then a Cast.
fn grow(cx: &mut Ctx, i: usize, kind: AnchorKind, a: String, b: String) -> Partition {
    let g = cx.g;
    let n = &g.nodes[i];
    cx.taken[i] = true;
    let mut nodes = vec![n.name.clone()];
    let mut cur = n.outputs[0].clone();
    let out_dtype = g.types.get(&cur).map(|t| t.dtype).unwrap_or(DType::F32);
    let mut e = FusedEpilogue::new(out_dtype);
    let channels = g.types.get(&cur).and_then(|t| t.shape.as_ref()).and_then(|s| match kind {
        AnchorKind::Conv2d { .. } => s.0.get(1).and_then(|d| d.known()),
        _ => s.0.last().and_then(|d| d.known()),
    });
    // The anchor's own alpha and bias / C operand: Gemm is alpha*A*B + beta*C.
    let own = match &n.op {
        Op::Gemm { alpha, beta, .. } => {
            let c = n.input(2).map(|c| {
                let tensor = c.to_string();
                if cx.is_channel_vector(c, &kind, channels) {
                    Step::Bias { tensor, scale: *beta }
                } else {
                    Step::Source { tensor, scale: *beta }
                }
            });
            [(*alpha != 1.0).then_some(Step::Scale(*alpha)), c]
        }
        Op::Conv { .. } => [None, n.input(2).map(|b| Step::Bias { tensor: b.to_string(), scale: 1.0 })],
        _ => [None, None],
    };
    for step in own.into_iter().flatten() {
        e.push(step).expect("an anchor's own alpha and C have a kernel form");
    }

    let take = |cx: &mut Ctx, ni: usize, nodes: &mut Vec<String>, cur: &mut String| {
        cx.taken[ni] = true;
        nodes.push(cx.g.nodes[ni].name.clone());
        *cur = cx.g.nodes[ni].outputs[0].clone();
    };
    let other = |ni: usize, cur: &str| -> Option<String> {
        let n = &g.nodes[ni];
        match (n.input(0), n.input(1)) {
            (Some(x), Some(y)) if x == cur && y != cur => Some(y.to_string()),
            (Some(x), Some(y)) if y == cur && x != cur => Some(x.to_string()),
            _ => None,
        }
    };

    // Folds scale the weights: they must be constants (a weight the model computes at run time,
    // or one too large for inference to fold, leaves the BatchNormalization or scale to run
    // after the kernel).
    let weights_fold = match &kind {
        AnchorKind::Conv2d { .. } => cx.consts.contains_key(&b),
        AnchorKind::Gemm { .. } | AnchorKind::MatMul => cx.consts.get(&b).is_some_and(|w| w.rank() == 2),
        AnchorKind::BatchedMatMul => false,
    };
    // BatchNormalization right after a conv, inference mode, constant statistics.
    if let (AnchorKind::Conv2d { .. }, Some(ni), true) = (&kind, cx.sole_consumer(&cur), weights_fold) {
        let bn = &g.nodes[ni];
        if let Op::BatchNormalization { training_mode: false, .. } = bn.op {
            if bn.inputs[1..].iter().all(|x| x.as_ref().is_some_and(|x| cx.consts.contains_key(x)))
                && bn.outputs.len() == 1
            {
                e.folds.push(ChannelFold::BatchNorm(bn.name.clone()));
                take(cx, ni, &mut nodes, &mut cur);
            }
        }
    }
    // Mul / Div by a constant per-channel vector (a BatchNormalization frozen into constants,
    // a layer scale): folded into the weights too, when they are constants with the output
    // channels on one axis and nothing read element by element comes before.
    while weights_fold && e.form().source.is_none() {
        let Some(ni) = cx.sole_consumer(&cur) else { break };
        let node = &g.nodes[ni];
        let divide = match node.op {
            Op::Binary(Binary::Mul) => false,
            Op::Binary(Binary::Div) if node.input(0) == Some(cur.as_str()) => true,
            _ => break,
        };
        let Some(t) = other(ni, &cur) else { break };
        // One value is a scalar step of the chain, below.
        let vector = cx.consts.get(&t).is_some_and(|c| {
            let v = c.to_f64_vec();
            c.dtype().is_float() && v.len() > 1 && !(divide && v.contains(&0.0))
        });
        if node.outputs.len() != 1
            || !vector
            || !cx.is_channel_vector(&t, &kind, channels)
            || !const_keeps_shape(cx, &cur, &t)
        {
            break;
        }
        e.folds.push(ChannelFold::Scale { node: node.name.clone(), tensor: t, divide });
        take(cx, ni, &mut nodes, &mut cur);
    }

    // The chain, one op at a time, in the model's order.
    loop {
        // An activation in any spelling. Decomposed forms read `cur` more than once, so the
        // region matcher checks who reads what itself; prefer the larger decomposed form
        // (x * Sigmoid(x) starts with a Sigmoid reading x but is SiLU).
        let single = cx.sole_consumer(&cur).and_then(|ni| {
            let a = match &g.nodes[ni].op {
                Op::Unary(u) => Activation::of_unary(*u),
                Op::Clip => {
                    match (g.nodes[ni].input(1).map(|t| cx.scalar(t)), g.nodes[ni].input(2).map(|t| cx.scalar(t))) {
                        (Some(Some(min)), Some(Some(max))) => Some(Activation::Clip { min, max }),
                        (Some(Some(min)), None) => Some(Activation::Clip { min, max: f32::INFINITY }),
                        (None, Some(Some(max))) => Some(Activation::Clip { min: f32::NEG_INFINITY, max }),
                        _ => None,
                    }
                }
                _ => None,
            };
            a.filter(|_| keeps_rank(cx, &cur, &g.nodes[ni].outputs[0])).map(|a| (ni, a))
        });
        let region = activation::match_activation(g, &cur, &cx.consumers, &cx.consts)
            .filter(|m| m.nodes.iter().all(|&k| !cx.taken[k]) && keeps_rank(cx, &cur, &m.output));
        let activation = match (region, single) {
            (Some(m), s) if m.nodes.len() > 1 || s.is_none() => Some((m.activation, m.nodes, m.output)),
            (_, Some((ni, a))) => Some((a, vec![ni], g.nodes[ni].outputs[0].clone())),
            _ => None,
        };
        if let Some((a, region, output)) = activation {
            if e.push(Step::Activation(a)).is_ok() {
                for &k in &region {
                    cx.taken[k] = true;
                    nodes.push(g.nodes[k].name.clone());
                }
                cur = output;
                continue;
            }
            break;
        }
        // A scalar, a bias or a residual.
        let Some(ni) = cx.sole_consumer(&cur) else { break };
        let node = &g.nodes[ni];
        if node.outputs.len() != 1 {
            break;
        }
        let Some(t) = other(ni, &cur) else { break };
        if cx.consts.contains_key(&t) && !const_keeps_shape(cx, &cur, &t) {
            break;
        }
        let step = match &node.op {
            Op::Binary(Binary::Mul) => cx.scalar(&t).map(Step::Scale),
            // Only x / s: s / x is not linear in x.
            Op::Binary(Binary::Div) if node.input(0) == Some(cur.as_str()) => {
                cx.scalar(&t).filter(|&s| s != 0.0).map(|s| Step::Scale(1.0 / s))
            }
            Op::Binary(Binary::Add) if cx.is_channel_vector(&t, &kind, channels) => {
                Some(Step::Bias { tensor: t, scale: 1.0 })
            }
            Op::Binary(Binary::Add) if !cx.consts.contains_key(&t) && same_shape(cx, &t, &cur) => {
                Some(Step::Source { tensor: t, scale: 1.0 })
            }
            _ => None,
        };
        match step.map(|s| e.push(s)) {
            Some(Ok(())) => take(cx, ni, &mut nodes, &mut cur),
            _ => break,
        }
    }
    // Output conversion. The kernels read a source (C) and the bias in the output's type
    // (ElementC is ElementD), so a cast past a residual of another type stays a separate node,
    // and so does one to a type the bias does not fit: the model adds the bias before it
    // rounds, and a bias rounded to f16 is off by up to half its own unit in the last place,
    // far more than the output's where the sum cancels.
    if let Some(ni) = cx.sole_consumer(&cur) {
        if let Op::Cast { to, .. } = g.nodes[ni].op {
            let source_of_another_type = e
                .steps()
                .iter()
                .any(|s| matches!(s, Step::Source { tensor, .. } if g.types.get(tensor).map(|t| t.dtype) != Some(to)));
            let bias_fits = || {
                let terms = channels.map(|c| epilogue::channel_terms(g, n, &kind, &e, c));
                match terms {
                    Some(Ok(epilogue::ChannelTerms { bias: None, .. })) => true,
                    Some(Ok(epilogue::ChannelTerms { bias: Some(b), .. })) => {
                        let round = |t: DType| Tensor::from_f64_as(t, vec![b.len()], &b).map(|x| x.to_f64_vec());
                        round(to).is_some() && round(to) == round(e.output_dtype)
                    }
                    // The fused node will say what is wrong.
                    _ => true,
                }
            };
            if kernel_dtype(to) && !source_of_another_type && bias_fits() {
                e.output_dtype = to;
                take(cx, ni, &mut nodes, &mut cur);
            }
        }
    }
    let output_type = g.types.get(&cur).cloned();
    Partition { anchor: g.nodes[i].name.clone(), kind, nodes, a, b, epilogue: e, output: cur, output_type }
}
