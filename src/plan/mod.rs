//! The planner: from a partitioned graph to the kernels Bolt runs, as a rewritten graph the
//! reference executor can run (so every plan is checked against the model it came from,
//! tests/plan.rs), plus the decisions taken and why ([`report`]).
//!
//! Passes, in order:
//! 0. [`canonical`]: ops Bolt runs as other ops are rewritten first (a ConvTranspose whose
//!    windows tile the output: a 1x1 conv and a DepthToSpace); then [`attention`]: each
//!    attention core a fused attention kernel takes becomes one node, before its MatMuls
//!    could become batched-GEMM partitions, and where its Q, K and V are three projections of
//!    one input, one GEMM computes them (read in place as windows of its output).
//! 1. [`fuse`]: each partition becomes one kernel node (BN folded, biases summed, scalars in
//!    alpha); a BatchNormalization no kernel absorbed becomes a per-channel multiply-add.
//! 2. [`layout`]: conv kernels run NHWC; transposes only where a region of consecutive conv
//!    kernels meets the rest of the model; conv weights converted to OHWI and GEMM weights
//!    to K-major once.
//! 3. [`padding`]: channel / K / N sizes padded to the 128-bit vector width so aligned kernels
//!    apply; weights padded once, activation padding fused into the producing kernel when it
//!    is one of ours.
//! 4. [`b2b`]: back-to-back GEMM / conv->1x1 conv chains fused into one kernel when the
//!    threadblock-residence rules hold and the profiler's analytic model (the one cost model)
//!    says codegen's fused kernel beats the layers' best single kernels.
//! 5. [`row_epilogue`]: a GEMM kernel read only by a last-axis Softmax computes the softmax
//!    too (CUTLASS's GemmSoftmax) where the one cost model says it pays.
//! 6. [`stitch`]: regions of element-wise ops and row reductions left between the kernels
//!    become stitched kernels (AStitch), so they run on the device too.
//!
//! The model's own 2-D pools (inside conv regions channels-last) and NCHW <-> NHWC transposes
//! run as glue kernels ([`lower::glue`]): the plan records which ([`GlueDecision`]).

pub mod attention;
pub mod b2b;
pub mod canonical;
pub mod edit;
pub mod expand;
mod fuse;
pub mod layout;
pub mod lower;
pub mod offload;
pub mod padding;
pub mod report;
pub mod row_epilogue;
pub mod stitch;

use crate::compile::DimBindings;
use crate::error::Result;
use crate::ir::Graph;
use crate::partition::{partition, Partitioning};
/// The one device description, shared with the profiler's cost model.
pub use bolt_profiler::device::DeviceSpec;

/// What the planner may do and for which device and shapes it estimates costs.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    pub device: DeviceSpec,
    /// Values of symbolic dims for cost estimates (unbound dims count as 1).
    pub bindings: DimBindings,
    pub nhwc: bool,
    pub pad: bool,
    pub b2b: bool,
    /// Stitch memory-intensive regions into kernels.
    pub stitch: bool,
    /// Run attention cores as fused attention kernels.
    pub attention: bool,
    /// When to fold a Softmax into the GEMM kernel before it.
    pub row_epilogue: row_epilogue::RowEpilogueMode,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            device: DeviceSpec::h100_sxm5_80gb(),
            bindings: DimBindings::new(),
            nhwc: true,
            pad: true,
            b2b: true,
            stitch: true,
            attention: true,
            row_epilogue: row_epilogue::RowEpilogueMode::Cost,
        }
    }
}

/// A planned model: the rewritten graph plus every decision that made it.
pub struct Plan {
    pub graph: Graph,
    /// The model as partitioned: after [`canonical`]'s rewrites and attention fusion (node
    /// names kept where a model node became another op; new nodes derive theirs from it).
    pub canonical: Graph,
    pub attention: Vec<attention::AttentionDecision>,
    pub partitioning: Partitioning,
    pub layout: Vec<layout::Transform>,
    /// GEMM kernels whose constant weight the planner stored K-major.
    pub k_major_weights: Vec<String>,
    pub padding: Vec<padding::Padding>,
    pub chains: Vec<b2b::ChainDecision>,
    /// GEMM kernels read only by a Softmax, and whether the softmax was folded in.
    pub row_epilogues: Vec<row_epilogue::RowEpilogueDecision>,
    pub stitched: Vec<stitch::StitchDecision>,
    pub glue: Vec<GlueDecision>,
}

impl Plan {
    /// Why each op the partitioner left to the host stays there, by node: the partitioner's
    /// reason, or the stitcher's where the partitioner's is only that no kernel took it.
    pub fn host_reasons(&self) -> std::collections::HashMap<&str, String> {
        let stitcher: std::collections::HashMap<&str, &str> = self
            .stitched
            .iter()
            .filter(|d| d.stitched.is_none())
            .flat_map(|d| d.nodes.iter().filter_map(|n| Some((n.as_str(), d.reason.as_deref()?))))
            .collect();
        let canonical: std::collections::HashMap<&str, &crate::ir::Node> =
            self.canonical.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        self.partitioning
            .host
            .iter()
            .map(|h| {
                let expandable = || {
                    let n = canonical.get(h.node.as_str())?;
                    Some(format!("{} not expanded: {}", n.op.op_type(), expand::why_left(&self.canonical, n)?))
                };
                let why = match stitcher.get(h.node.as_str()) {
                    Some(why) if h.reason == crate::partition::NOT_AN_ANCHOR => format!("no stitched kernel: {why}"),
                    _ => expandable().unwrap_or_else(|| h.reason.clone()),
                };
                (h.node.as_str(), why)
            })
            .collect()
    }
}

/// A pool or transpose of the model: the glue kernel that runs it, or why it stays on the
/// host.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GlueDecision {
    pub node: String,
    pub op_type: String,
    /// The glue kernel's symbol, when one takes it.
    pub kernel: Option<String>,
    pub reason: Option<String>,
}

impl GlueDecision {
    fn new(
        n: &crate::ir::Node,
        op_type: String,
        spec: std::result::Result<bolt_codegen::glue::GlueSpec, String>,
    ) -> Self {
        let (kernel, reason) = match spec {
            Ok(s) => (Some(bolt_codegen::glue::symbol_for(&s)), None),
            Err(why) => (None, Some(why)),
        };
        GlueDecision { node: n.name.clone(), op_type, kernel, reason }
    }
}

/// Every pool, transpose, resize, DepthToSpace and Pad of the model in `g` (the planner's own
/// transforms are reported as layout transforms) and whether a glue kernel takes it: pools
/// and transposes whatever their input size, resizes, DepthToSpace and pads at `bindings`.
fn glue_decisions(g: &Graph, model: &Graph, bindings: &DimBindings) -> Vec<GlueDecision> {
    use crate::ir::Op;
    let own: std::collections::HashSet<&str> = model.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut out = Vec::new();
    for n in g.nodes.iter().filter(|n| lower::is_pool(&n.op)) {
        let op_type = match &n.op {
            Op::ChannelsLast(inner) => format!("{} (NHWC)", inner.op_type()),
            op => op.op_type().to_string(),
        };
        let element = n.input(0).and_then(|x| g.types.get(x)).map(|t| t.dtype);
        let spec = match element.and_then(lower::element) {
            None => Err(format!("the input is {element:?}: pool kernels take f32, f16 and bf16")),
            Some(_) if lower::indices_used(n) => Err(lower::INDICES_USED.into()),
            Some(e) => lower::pool_spec(&n.op, e).map(bolt_codegen::glue::GlueSpec::Pool),
        };
        out.push(GlueDecision::new(n, op_type, spec));
    }
    for n in g.nodes.iter().filter(|n| own.contains(n.name.as_str()) && matches!(n.op, Op::Transpose { .. })) {
        let (x, y) = (n.input(0).and_then(|x| g.types.get(x)), n.outputs.first().and_then(|y| g.types.get(y)));
        let rank = x.and_then(|t| t.shape.as_ref()).map(|s| s.rank());
        // A transpose's kernel does not depend on the sizes, only on the rank.
        let spec = match (x, y, rank) {
            (Some(x), Some(y), Some(r)) => lower::glue_for(&n.op, &vec![1; r], x.dtype, y.dtype, &[]),
            _ => Some(Err("its input has no known rank".into())),
        };
        let spec = spec
            .unwrap_or_else(|| Err("only NCHW <-> NHWC permutations of rank-4 tensors have a transpose kernel".into()));
        out.push(GlueDecision::new(n, "Transpose".into(), spec.map(|(s, _)| s)));
    }
    // Resizes, DepthToSpace and Pads: their lowering reads constants and shapes.
    let shaped = |op: &Op| match op {
        Op::Resize(_) | Op::DepthToSpace { .. } | Op::Pad { .. } => true,
        Op::ChannelsLast(inner) => matches!(**inner, Op::DepthToSpace { .. }),
        _ => false,
    };
    let shaped: Vec<&crate::ir::Node> = g.nodes.iter().filter(|n| shaped(&n.op)).collect();
    if shaped.is_empty() {
        return out;
    }
    // Shapes of unknown size (some exporters drop them) become known once the inputs are bound.
    // Symbolic dims of 1 can make a model inconsistent (an image of side 1, an audio clip
    // shorter than its STFT window): a resize by constant scales and a pad by constant pads do
    // not need the sizes (any input of the op's rank decides them; the kernels take the sizes
    // at run time).
    let (bound, placeholder) = match edit::bind_inputs(g, bindings) {
        Ok(b) => (Ok(b), None),
        Err(e) => {
            let mut p = g.clone();
            for x in shaped.iter().filter_map(|n| n.input(0)) {
                let t = g.types.get(x);
                let dtype = t.map_or(crate::ir::DType::F32, |t| t.dtype);
                let rank = t.and_then(|t| t.shape.as_ref()).map_or(4, |s| s.rank());
                p.types.insert(
                    x.to_string(),
                    crate::ir::TensorType::new(dtype, crate::ir::Shape::from_static(&vec![2; rank])),
                );
            }
            (Err(e.to_string()), Some(p))
        }
    };
    for n in shaped {
        let lowered = match (&bound, &placeholder) {
            (Ok(b), _) => lower::glue(b, n, bindings).unwrap_or_else(|| Err("not a glue op".into())),
            (Err(e), Some(p)) => match lower::glue(p, n, bindings) {
                Some(Ok(u)) if size_free(&u.spec) => Ok(u),
                _ => Err(format!("the model's shapes do not bind: {e}")),
            },
            (Err(e), None) => Err(format!("the model's shapes do not bind: {e}")),
        };
        out.push(GlueDecision::new(n, n.op.op_type().into(), lowered.map(|u| u.spec)));
    }
    out
}

/// Whether a glue kernel's spec holds at any input size (its constants decide it, the sizes
/// come with the problem at run time): a resize by scales, a pad.
fn size_free(spec: &bolt_codegen::glue::GlueSpec) -> bool {
    use bolt_codegen::glue::GlueSpec;
    match spec {
        GlueSpec::Resize(r) => r.scales.is_some(),
        GlueSpec::Pad(_) => true,
        _ => false,
    }
}

/// Plans `g` with the default options (H100 costs, every pass on).
pub fn plan(g: &Graph) -> Result<Plan> {
    plan_with(g, &PlanOptions::default())
}

pub fn plan_with(model: &Graph, opts: &PlanOptions) -> Result<Plan> {
    let (mut canonical, _) = canonical::canonical(model)?;
    let attention = if opts.attention {
        let mut decisions = attention::fuse(&mut canonical)?;
        attention::pack_projections(&mut canonical, &mut decisions)?;
        decisions
    } else {
        Vec::new()
    };
    let g = &canonical;
    let partitioning = partition(g);
    let mut graph = fuse::fuse_partitions(g, &partitioning)?;
    fuse::decompose_batch_norms(&mut graph)?;
    let layout = if opts.nhwc { layout::to_nhwc(&mut graph)? } else { Vec::new() };
    let k_major_weights = if opts.nhwc { layout::weights_k_major(&mut graph)? } else { Vec::new() };
    let padding = if opts.pad { padding::pad(&mut graph, opts)? } else { Vec::new() };
    let chains = if opts.b2b { b2b::fuse_chains(&mut graph, opts)? } else { Vec::new() };
    let row_epilogues = match opts.row_epilogue {
        row_epilogue::RowEpilogueMode::Off => Vec::new(),
        _ => row_epilogue::fuse_softmax(&mut graph, opts)?,
    };
    let stitched = if opts.stitch { stitch::stitch(&mut graph)? } else { Vec::new() };
    let glue = glue_decisions(&graph, g, &opts.bindings);
    Ok(Plan {
        graph,
        canonical,
        attention,
        partitioning,
        layout,
        k_major_weights,
        padding,
        chains,
        row_epilogues,
        stitched,
        glue,
    })
}
