//! What the planner did and why, for people (Markdown) and tools (JSON): per partition the
//! ops fused, kernel family, epilogue, layout and padding; back-to-back decisions with their
//! reasons; layout transforms; host ops grouped by reason; and system-friendly model hints
//! (Bolt section 3.3): changes to the model that would let more of it run fast.

use super::b2b::ChainDecision;
use super::layout::{Direction, Transform};
use super::padding::{ActivationPadding, PaddedDim, Padding};
use super::{Plan, PlanOptions};
use crate::ir::{Graph, Op};
use crate::partition::AnchorKind;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub model: String,
    pub device: String,
    /// Symbolic dim values the cost estimates assumed.
    pub bindings: BTreeMap<String, usize>,
    pub nodes: usize,
    pub planned_nodes: usize,
    pub partitions: Vec<PartitionReport>,
    pub chains: Vec<ChainDecision>,
    /// GEMM kernels read only by a Softmax: folded into one GemmSoftmax kernel, or why not.
    pub row_epilogues: Vec<super::row_epilogue::RowEpilogueDecision>,
    pub layout: Vec<Transform>,
    pub padding: Vec<Padding>,
    pub host: Vec<HostGroup>,
    /// How many of the host table's nodes are views / concatenations (device copies on the
    /// GPU, no host round trip).
    pub device_copies: usize,
    /// How many are shape computations (integer metadata, host work by design).
    pub shape_computations: usize,
    pub hints: Vec<Hint>,
    /// Attention cores recognised in the model, and Softmaxes that are not cores, with why.
    pub attention: Vec<crate::partition::attention::Attention>,
    pub not_attention: Vec<crate::partition::attention::NotAttention>,
    /// Each core: the fused attention node that runs it, or why it stays two batched GEMMs
    /// and a stitched softmax.
    pub attention_fused: Vec<super::attention::AttentionDecision>,
    /// On a Hopper device, per fused attention node: `None` when the Hopper kernel (CUTLASS's
    /// example 88) takes its problem at the report's sizes, else why the sm80 kernel runs it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hopper_attention: BTreeMap<String, Option<String>>,
    /// Memory-intensive regions between the kernels (AStitch): each a stitched kernel, or left
    /// on the host with why.
    pub stitched: Vec<super::stitch::StitchDecision>,
    /// The model's pools and transposes: each a glue kernel, or on the host with why.
    pub glue: Vec<super::GlueDecision>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PartitionReport {
    pub anchor: String,
    pub family: String,
    /// `node (OpType)` of every node fused, anchor first.
    pub fused: Vec<String>,
    pub epilogue: String,
    pub output_dtype: String,
    /// The fused back-to-back chain it runs in, if any.
    pub chain: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct HostGroup {
    pub reason: String,
    /// Op type -> count.
    pub ops: BTreeMap<String, usize>,
    pub examples: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum HintKind {
    ChannelsNotMultipleOf8,
    ActivationBreaksFusion,
    ChainCouldFuse,
    LayoutBoundary,
}

#[derive(Clone, Debug, Serialize)]
pub struct Hint {
    pub kind: HintKind,
    pub nodes: Vec<String>,
    pub message: String,
}

fn family(kind: &AnchorKind) -> String {
    match kind {
        AnchorKind::Gemm { trans_a, trans_b } => format!("GEMM (Gemm, transA={trans_a}, transB={trans_b})"),
        AnchorKind::MatMul => "GEMM (MatMul)".into(),
        AnchorKind::BatchedMatMul => "batched GEMM".into(),
        AnchorKind::Conv2d { group: 1, .. } => "Conv2d fprop".into(),
        AnchorKind::Conv2d { group, .. } => format!("Conv2d fprop, {group} groups"),
    }
}

pub fn report(model: &str, original: &Graph, plan: &Plan, opts: &PlanOptions) -> Report {
    // The planner's own nodes (a packed Q/K/V projection) are named in the canonical graph.
    let node_op = |name: &str| {
        original
            .nodes
            .iter()
            .chain(&plan.canonical.nodes)
            .find(|n| n.name == name)
            .map_or("?".to_string(), |n| n.op.op_type().to_string())
    };
    let chain_of = |anchor: &str| {
        plan.chains
            .iter()
            .find(|c| c.fused && c.layers.iter().any(|l| l.node == anchor))
            .map(|c| c.names().join(" -> "))
    };
    let partitions = plan
        .partitioning
        .partitions
        .iter()
        .map(|p| PartitionReport {
            anchor: p.anchor.clone(),
            family: family(&p.kind),
            fused: p.nodes.iter().map(|n| format!("{n} ({})", node_op(n))).collect(),
            epilogue: crate::compile::describe(&p.epilogue),
            output_dtype: p.epilogue.output_dtype.to_string(),
            chain: chain_of(&p.anchor),
        })
        .collect();
    let mut groups: BTreeMap<String, HostGroup> = BTreeMap::new();
    let on_device: std::collections::HashSet<&String> = plan
        .stitched
        .iter()
        .filter(|d| d.stitched.is_some())
        .flat_map(|d| &d.nodes)
        .chain(plan.glue.iter().filter(|p| p.kernel.is_some()).map(|p| &p.node))
        .chain(plan.attention.iter().filter_map(|d| d.fused.as_ref()))
        .chain(plan.attention.iter().flat_map(|d| &d.padding))
        .collect();
    // Recurrent scans: a scan kernel runs each whose spec lowers and whose hidden size a block
    // holds; the others stay on the host, with why.
    let mut scan_reason: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
    let mut on_device = on_device;
    for n in plan.graph.nodes.iter().filter(|n| matches!(n.op, crate::ir::Op::RecurrentScan(_))) {
        match super::lower::recurrent_scan_kernel(&plan.graph, n) {
            Ok(_) => {
                on_device.insert(&n.name);
            }
            Err(why) => {
                scan_reason.insert(n.name.as_str(), format!("no recurrent kernel: {why}"));
            }
        }
    }
    // Host ops the planner removed (a transpose the layout pass cancelled) run nowhere.
    let planned: std::collections::HashSet<&str> = plan.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    // The canonical graph: the planner's own views (a reduction's Squeeze) are in it.
    let c = &plan.canonical;
    let copies: std::collections::HashSet<&str> =
        c.nodes.iter().filter(|n| super::lower::is_copy_node(c, n)).map(|n| n.name.as_str()).collect();
    let host_reasons = plan.host_reasons();
    let mut device_copies = 0;
    for h in plan.partitioning.host.iter().filter(|h| !on_device.contains(&h.node) && planned.contains(h.node.as_str()))
    {
        let glue_reason = plan.glue.iter().find(|p| p.node == h.node).and_then(|p| p.reason.as_ref());
        let is_copy = copies.contains(h.node.as_str());
        let reason = match glue_reason {
            _ if h.reason == crate::partition::SHAPE_COMPUTATION => h.reason.clone(),
            _ if scan_reason.contains_key(h.node.as_str()) => scan_reason[h.node.as_str()].clone(),
            Some(why) => format!("no glue kernel: {why}"),
            None if is_copy => {
                device_copies += 1;
                "a view, concatenation, split, slice, single-index gather, truncation or broadcast (Expand): device-to-device copies on the GPU, no kernel"
                    .into()
            }
            None => host_reasons[h.node.as_str()].clone(),
        };
        let h = crate::partition::HostNode { reason, ..h.clone() };
        let h = &h;
        let g = groups.entry(h.reason.clone()).or_insert_with(|| HostGroup {
            reason: h.reason.clone(),
            ops: BTreeMap::new(),
            examples: Vec::new(),
        });
        *g.ops.entry(h.op_type.clone()).or_default() += 1;
        if g.examples.len() < 3 {
            g.examples.push(h.node.clone());
        }
    }
    let shape_computations = groups.get(crate::partition::SHAPE_COMPUTATION).map_or(0, |g| g.ops.values().sum());
    let (attention, not_attention) = crate::partition::attention::find(original);
    Report {
        model: model.to_string(),
        device: opts.device.name.clone(),
        bindings: opts.bindings.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        nodes: original.nodes.len(),
        planned_nodes: plan.graph.nodes.len(),
        partitions,
        chains: plan.chains.clone(),
        row_epilogues: plan.row_epilogues.clone(),
        layout: plan.layout.clone(),
        padding: plan.padding.clone(),
        host: groups.into_values().collect(),
        device_copies,
        shape_computations,
        hints: hints(original, plan),
        attention,
        not_attention,
        attention_fused: plan.attention.clone(),
        hopper_attention: if opts.device.arch == bolt_codegen::spec::Arch::Sm90 {
            plan.attention
                .iter()
                .filter_map(|d| d.fused.as_ref())
                .filter_map(|node| Some((node.clone(), hopper_attention(&plan.graph, node, &opts.bindings)?.err())))
                .collect()
        } else {
            BTreeMap::new()
        },
        stitched: plan.stitched.clone(),
        glue: plan.glue.clone(),
    }
}

/// Model hints: what the model's author could change.
fn hints(g: &Graph, plan: &Plan) -> Vec<Hint> {
    let mut out = Vec::new();
    // Channels / K / N not multiples of 8: f16 kernels then need padding or narrow loads.
    for p in &plan.partitioning.partitions {
        let shape = |t: &str| g.types.get(t).and_then(|t| t.shape.as_ref()).and_then(|s| s.as_static());
        let dims: Vec<(&str, usize)> = match (&p.kind, shape(&p.b)) {
            (AnchorKind::Conv2d { group, .. }, Some(w)) => {
                vec![("output channels", w[0]), ("input channels", w[1] * group)]
            }
            (AnchorKind::Gemm { trans_b, .. }, Some(w)) if w.len() == 2 => {
                let (k, n) = if *trans_b { (w[1], w[0]) } else { (w[0], w[1]) };
                vec![("K", k), ("N", n)]
            }
            (AnchorKind::MatMul, Some(w)) if w.len() == 2 => vec![("K", w[0]), ("N", w[1])],
            _ => vec![],
        };
        let odd: Vec<String> =
            dims.iter().filter(|(_, d)| d % 8 != 0).map(|(what, d)| format!("{what} = {d}")).collect();
        if !odd.is_empty() {
            out.push(Hint {
                kind: HintKind::ChannelsNotMultipleOf8,
                nodes: vec![p.anchor.clone()],
                message: format!(
                    "{}: {}; multiples of 8 let f16 kernels use 128-bit accesses without padding",
                    p.anchor,
                    odd.join(", ")
                ),
            });
        }
    }
    // Elementwise ops right after a kernel that stayed on the host: a round trip through memory.
    let cons = super::edit::consumers(g);
    for p in &plan.partitioning.partitions {
        let Some(readers) = cons.get(&p.output) else { continue };
        for &(i, _) in readers {
            let n = &g.nodes[i];
            let elementwise = matches!(n.op, Op::Unary(_) | Op::Clip | Op::Binary(_));
            if !elementwise || plan.partitioning.host.iter().all(|h| h.node != n.name) {
                continue;
            }
            let why = if readers.len() > 1 {
                format!("{} is read by {} nodes, so it cannot stay inside the kernel", p.output, readers.len())
            } else if p.epilogue.form().activation.is_some() {
                "the kernel's epilogue already applies an activation".to_string()
            } else {
                "not an epilogue Bolt fuses".to_string()
            };
            // Left out of the epilogue, the op may still run on the device in a stitched kernel:
            // one more round trip through memory rather than a trip to the host.
            let stitched = plan.stitched.iter().any(|d| d.stitched.is_some() && d.nodes.contains(&n.name));
            let runs = if stitched { "runs in a stitched kernel of its own" } else { "runs on the host" };
            out.push(Hint {
                kind: HintKind::ActivationBreaksFusion,
                nodes: vec![p.anchor.clone(), n.name.clone()],
                message: format!("{} ({}) after kernel {} {runs}: {why}", n.name, n.op.op_type(), p.anchor),
            });
        }
    }
    for c in &plan.chains {
        if !c.fused {
            out.push(Hint {
                kind: HintKind::ChainCouldFuse,
                nodes: c.names().iter().map(|s| s.to_string()).collect(),
                message: c.reason.clone(),
            });
        }
    }
    // Layout boundaries: each one is a transpose kernel; host ops between convs cause them.
    let mut by_region: BTreeMap<usize, usize> = BTreeMap::new();
    for t in &plan.layout {
        *by_region.entry(t.region).or_default() += 1;
    }
    let regions = by_region.len();
    if regions > 1 {
        out.push(Hint {
            kind: HintKind::LayoutBoundary,
            nodes: vec![],
            message: format!(
                "{} layout transposes around {regions} NHWC regions: host ops between convs split the regions",
                plan.layout.len()
            ),
        });
    }
    out
}

impl Report {
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let fused_chains = self.chains.iter().filter(|c| c.fused).count();
        let _ = writeln!(s, "# Bolt plan: {}\n", self.model);
        let _ = writeln!(
            s,
            "{} nodes -> {} planned nodes: {} GEMM/conv kernels ({} back-to-back chains fused), {} attention kernels, {} layout transforms, {} paddings, {} host nodes, {} shape computations and {} device copies. Costs for {}{}.\n",
            self.nodes,
            self.planned_nodes,
            self.partitions.len(),
            fused_chains,
            self.attention_fused.iter().filter(|d| d.fused.is_some()).count(),
            self.layout.len(),
            self.padding.len(),
            self.host.iter().map(|h| h.ops.values().sum::<usize>()).sum::<usize>()
                - self.device_copies
                - self.shape_computations,
            self.shape_computations,
            self.device_copies,
            self.device,
            if self.bindings.is_empty() {
                ", symbolic dims = 1".to_string()
            } else {
                format!(", {:?}", self.bindings)
            }
        );
        let _ = writeln!(
            s,
            "## Partitions\n\n| kernel | family | fused ops | epilogue | out | chain |\n|---|---|---|---|---|---|"
        );
        for p in &self.partitions {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                p.anchor,
                p.family,
                p.fused.join(", "),
                p.epilogue,
                p.output_dtype,
                p.chain.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(s, "\n## Back-to-back chains\n");
        if self.chains.is_empty() {
            let _ = writeln!(s, "No GEMM -> GEMM or conv -> conv pairs where one kernel's only reader is the next.");
        }
        for c in &self.chains {
            match (&c.kernel, c.fused) {
                (Some(k), true) => {
                    let _ = writeln!(s, "- **fused** as `{k}`: {}", c.reason);
                }
                _ => {
                    let _ = writeln!(s, "- not fused: {}", c.reason);
                }
            }
        }
        if !self.row_epilogues.is_empty() {
            let _ = writeln!(s, "\n## GEMM + softmax\n");
            for r in &self.row_epilogues {
                let what = if r.fused { "**fused** (GemmSoftmax)" } else { "not fused" };
                let _ = writeln!(s, "- `{}` -> `{}`: {what}: {}", r.kernel, r.softmax, r.reason);
            }
        }
        let _ = writeln!(s, "\n## Layout transforms\n");
        if self.layout.is_empty() {
            let _ = writeln!(s, "None (no conv kernels).");
        } else {
            let _ = writeln!(s, "| region | tensor | transform | next to kernel |\n|---|---|---|---|");
            for t in &self.layout {
                let dir = match t.direction {
                    Direction::NchwToNhwc => "NCHW -> NHWC (entry)",
                    Direction::NhwcToNchw => "NHWC -> NCHW (exit)",
                };
                let _ = writeln!(s, "| {} | {} | {dir} | {} |", t.region, t.tensor, t.kernel);
            }
        }
        let _ = writeln!(s, "\n## Padding\n");
        if self.padding.is_empty() {
            let _ = writeln!(s, "None needed: every channel / K / N size is a multiple of the vector width.");
        } else {
            let _ = writeln!(s, "| kernel | dim | from -> to | extra weight bytes | activation | extra MMA work |\n|---|---|---|---|---|---|");
            for p in &self.padding {
                let dim = match p.dim {
                    PaddedDim::InputChannels => "input channels / K",
                    PaddedDim::OutputChannels => "output channels / N",
                };
                let act = match &p.activation {
                    ActivationPadding::FusedIntoProducer { producer } => format!("fused: {producer} writes it padded"),
                    ActivationPadding::Standalone { node, extra_bytes, est_seconds } => {
                        format!("standalone pad `{node}`: {extra_bytes} B, est {:.1} us", est_seconds * 1e6)
                    }
                    ActivationPadding::WrittenByKernel => "written padded by this kernel".into(),
                };
                let _ = writeln!(
                    s,
                    "| {} | {dim} | {} -> {} | {} | {act} | {:.0}% |",
                    p.kernel,
                    p.from,
                    p.to,
                    p.weight_extra_bytes,
                    p.extra_flops_fraction * 100.0
                );
            }
        }
        if !self.attention.is_empty() || !self.not_attention.is_empty() {
            let fused = self.attention_fused.iter().filter(|d| d.fused.is_some()).count();
            let _ = writeln!(
                s,
                "\n## Attention cores\n\n{} recognised (MatMul -> scale -> mask -> Softmax -> MatMul), {fused} run as \
                 fused attention kernels (scores stay on chip); the others run as two batched GEMMs with the mask and \
                 Softmax stitched between them.\n",
                self.attention.len()
            );
            for a in &self.attention {
                let mut masks: Vec<String> = a.mask.iter().map(|(m, k)| format!("mask {m} ({k:?})")).collect();
                masks.extend(a.select.iter().map(|m| {
                    let when = if m.masked_when { "true" } else { "false" };
                    format!("selection mask {} ({:?}; {when} masks, filling {})", m.cond, m.kind, m.fill)
                }));
                let mask = if masks.is_empty() { "no mask".to_string() } else { masks.join(" and ") };
                let how = match self.attention_fused.iter().find(|d| d.nodes.contains(&a.nodes[0])) {
                    Some(d) if d.fused.is_some() => {
                        let absorbed: Vec<&String> = d.nodes.iter().filter(|n| !a.nodes.contains(n)).collect();
                        let mut how = if absorbed.is_empty() {
                            "fused".to_string()
                        } else {
                            let names: Vec<&str> = absorbed.iter().map(|n| n.as_str()).collect();
                            format!("fused with its head transposes {} (read or written in place)", names.join(", "))
                        };
                        if !d.padding.is_empty() {
                            how.push_str("; head dims zero-padded to whole vectors");
                        }
                        if !d.mask.is_empty() {
                            how.push_str(&format!(
                                "; the selection read as an additive mask made by {}",
                                d.mask.join(", ")
                            ));
                        }
                        if let Some(p) = d.packed.as_ref().filter(|p| p.split) {
                            how.push_str(&format!(
                                "; Q, K and V read as windows of the model's fused projection ({}'s output), \
                                 its split {} gone",
                                p.gemm,
                                p.replaced.join(", ")
                            ));
                        } else if let Some(p) = &d.packed {
                            how.push_str(&format!(
                                "; Q, K and V from one packed GEMM {} (replacing {}), read as windows of its output",
                                p.gemm,
                                p.replaced.join(", ")
                            ));
                        }
                        match d.fused.as_ref().and_then(|f| self.hopper_attention.get(f)) {
                            Some(None) => how.push_str("; on Hopper: the Hopper kernel (CUTLASS example 88)"),
                            Some(Some(why)) => how.push_str(&format!("; on Hopper: the sm80 kernel ({why})")),
                            None => {}
                        }
                        if d.causal {
                            how.push_str("; the constant mask is causal: masked in the kernel, which skips the tiles past the diagonal");
                        }
                        how
                    }
                    Some(d) => format!("not fused: {}", d.reason.as_deref().unwrap_or("?")),
                    None => "not fused (attention fusion off)".to_string(),
                };
                let _ = writeln!(s, "- {}: scale {:.6}, {mask}; {how}", a.nodes.join(" -> "), a.scale);
            }
            for n in &self.not_attention {
                let _ = writeln!(s, "- {} is not an attention core: {}", n.softmax, n.reason);
            }
        }
        if !self.stitched.is_empty() {
            let done: Vec<_> = self.stitched.iter().filter(|d| d.stitched.is_some()).collect();
            let ops: usize = done.iter().map(|d| d.nodes.len()).sum();
            let rows = done.iter().filter(|d| d.reduces).count();
            let _ = writeln!(
                s,
                "\n## Stitched regions\n\n{} of {} regions of element-wise ops and last-axis reductions between the \
                 kernels run as stitched kernels ({ops} ops; {rows} with row reductions).\n",
                done.len(),
                self.stitched.len()
            );
            for d in self.stitched.iter().filter(|d| d.stitched.is_none()) {
                let why = d.reason.as_deref().unwrap_or("-");
                let _ = writeln!(s, "- host: {}: {why}", d.nodes.join(", "));
            }
            for d in done.iter().take(8) {
                let _ = writeln!(s, "- {}", d.nodes.join(", "));
            }
            if done.len() > 8 {
                let _ = writeln!(s, "- ... {} more", done.len() - 8);
            }
        }
        let pooled: Vec<_> = self.glue.iter().filter(|p| p.kernel.is_some()).collect();
        if !pooled.is_empty() {
            let _ = writeln!(
                s,
                "\n## Pools and transposes of the model\n\n{} of {} run as glue kernels.\n",
                pooled.len(),
                self.glue.len()
            );
            for p in &pooled {
                let _ = writeln!(s, "- {} ({}): `{}`", p.node, p.op_type, p.kernel.as_deref().unwrap_or("-"));
            }
        }
        let _ = writeln!(s, "\n## Left to the host\n");
        if self.host.is_empty() {
            let _ = writeln!(s, "Nothing: every op runs on the device.");
        } else {
            let _ = writeln!(s, "| reason | ops | e.g. |\n|---|---|---|");
        }
        for h in &self.host {
            let ops: Vec<String> = h.ops.iter().map(|(k, v)| format!("{k} x{v}")).collect();
            let _ = writeln!(s, "| {} | {} | {} |", h.reason, ops.join(", "), h.examples.join(", "));
        }
        let _ = writeln!(s, "\n## Model hints\n");
        if self.hints.is_empty() {
            let _ = writeln!(s, "None.");
        }
        for h in &self.hints {
            let _ = writeln!(s, "- {:?}: {}", h.kind, h.message);
        }
        s
    }
}

/// Whether the Hopper attention kernel takes fused attention node `node` at `bindings`' sizes,
/// or why not (what an sm90 build records and its runtime decides per problem); `None` when
/// the sizes give the node no problem (a model whose shapes do not bind at them).
fn hopper_attention(
    g: &Graph,
    node: &str,
    bindings: &crate::compile::DimBindings,
) -> Option<std::result::Result<(), String>> {
    let n = g.nodes.iter().find(|n| n.name == node)?;
    let Op::Attention(op) = &n.op else { return None };
    let spec = super::lower::attention_spec(g, n).ok()?;
    let bound = super::edit::bind_inputs(g, bindings).ok()?;
    let shapes: Vec<Vec<usize>> =
        n.inputs.iter().flatten().map(|x| super::edit::bound_shape(&bound, x, bindings)).collect::<Option<_>>()?;
    let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let (p, _) = super::lower::attention_problem(op, &spec, &refs).ok()?;
    Some(spec.hopper(p.head_dim, p.head_dim_v).and_then(|h| h.check(&p)).map_err(|r| r.to_string()))
}
