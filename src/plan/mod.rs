//! The planner: from a partitioned graph to the kernels Bolt runs, as a rewritten graph the
//! reference executor can run (so every plan is checked against the model it came from,
//! tests/plan.rs), plus the decisions taken and why ([`report`]).
//!
//! Passes, in order:
//! 1. [`fuse`]: each partition becomes one kernel node (BN folded, biases summed, scalars in
//!    alpha).
//! 2. [`layout`]: conv kernels run NHWC; transposes only where a region of consecutive conv
//!    kernels meets the rest of the model; conv weights converted to OHWI and GEMM weights
//!    to K-major once.
//! 3. [`padding`]: channel / K / N sizes padded to the 128-bit vector width so aligned kernels
//!    apply; weights padded once, activation padding fused into the producing kernel when it
//!    is one of ours.
//! 4. [`b2b`]: back-to-back GEMM / conv->1x1 conv chains fused into one kernel when the
//!    threadblock-residence rules hold and the traffic model says it pays.
//! 5. [`stitch`]: regions of element-wise ops and row reductions left between the kernels
//!    become stitched kernels (AStitch), so they run on the device too.

pub mod b2b;
pub mod cost;
pub mod edit;
mod fuse;
pub mod layout;
pub mod lower;
pub mod padding;
pub mod report;
pub mod stitch;

use crate::compile::DimBindings;
use crate::error::Result;
use crate::ir::Graph;
use crate::partition::{partition, Partitioning};
pub use cost::DeviceSpec;

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
        }
    }
}

/// A planned model: the rewritten graph plus every decision that made it.
pub struct Plan {
    pub graph: Graph,
    pub partitioning: Partitioning,
    pub layout: Vec<layout::Transform>,
    /// GEMM kernels whose constant weight the planner stored K-major.
    pub k_major_weights: Vec<String>,
    pub padding: Vec<padding::Padding>,
    pub chains: Vec<b2b::ChainDecision>,
    pub stitched: Vec<stitch::StitchDecision>,
}

/// Plans `g` with the default options (H100 costs, every pass on).
pub fn plan(g: &Graph) -> Result<Plan> {
    plan_with(g, &PlanOptions::default())
}

pub fn plan_with(g: &Graph, opts: &PlanOptions) -> Result<Plan> {
    let partitioning = partition(g);
    let mut graph = fuse::fuse_partitions(g, &partitioning)?;
    let layout = if opts.nhwc { layout::to_nhwc(&mut graph)? } else { Vec::new() };
    let k_major_weights = if opts.nhwc { layout::weights_k_major(&mut graph)? } else { Vec::new() };
    let padding = if opts.pad { padding::pad(&mut graph, opts)? } else { Vec::new() };
    let chains = if opts.b2b { b2b::fuse_chains(&mut graph, opts)? } else { Vec::new() };
    let stitched = if opts.stitch { stitch::stitch(&mut graph)? } else { Vec::new() };
    Ok(Plan { graph, partitioning, layout, k_major_weights, padding, chains, stitched })
}
