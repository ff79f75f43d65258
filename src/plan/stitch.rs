//! Stitching (AStitch): each region of element-wise ops and row reductions the partitioner
//! left outside the kernels ([`crate::partition::stitch`]) becomes one [`Op::Stitched`] node
//! that a stitched kernel runs, when the kernel can take it ([`super::lower::stitch_spec`]);
//! otherwise its ops stay on the host and the decision says why.
//!
//! Attention cores that no fused attention kernel took (`plan::attention`) are stitched too:
//! their mask add and softmax between the two batched GEMMs.

use super::edit;
use crate::error::Result;
use crate::ir::{Graph, Node, Op};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;

/// What happened to one region.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StitchDecision {
    /// The ONNX nodes of the region, in model order.
    pub nodes: Vec<String>,
    /// The stitched node that replaced them, or `None` when they stay on the host.
    pub stitched: Option<String>,
    /// Why not, when they stay.
    pub reason: Option<String>,
    /// Whether the region reduces along rows (AStitch's regional scheme) or is element-wise.
    pub reduces: bool,
}

/// Replaces every region a stitched kernel takes with one stitched node.
pub fn stitch(g: &mut Graph) -> Result<Vec<StitchDecision>> {
    let (regions, not) = crate::partition::stitch::find_with(g, &HashSet::new(), false);
    let mut decisions: Vec<StitchDecision> = not
        .into_iter()
        .map(|n| StitchDecision { nodes: vec![n.node], stitched: None, reason: Some(n.reason), reduces: false })
        .collect();
    let mut names: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut changed = false;
    for r in regions {
        let reduces = r.reduces();
        let members: HashSet<String> = r.nodes.iter().cloned().collect();
        if !edit::convex(g, &members) {
            let reason = "a path leaves the region through another op and comes back: one kernel for it would feed \
                          itself"
                .to_string();
            decisions.push(StitchDecision { nodes: r.nodes, stitched: None, reason: Some(reason), reduces });
            continue;
        }
        let name = edit::fresh_name(g, &mut names, &format!("{}.stitched", r.nodes[0]));
        let node = Node {
            name: name.clone(),
            inputs: r.inputs.iter().cloned().map(Some).collect(),
            outputs: r.outputs.iter().map(|(t, _)| t.clone()).collect(),
            op: Op::Stitched(Arc::new(r.clone())),
        };
        match super::lower::stitch_spec(g, &node) {
            Ok(_) => {
                // Replaced at once, so the next region's convexity sees this one as one node.
                g.nodes.retain(|n| !members.contains(&n.name));
                g.nodes.push(node);
                changed = true;
                decisions.push(StitchDecision { nodes: r.nodes, stitched: Some(name), reason: None, reduces });
            }
            Err(why) => decisions.push(StitchDecision { nodes: r.nodes, stitched: None, reason: Some(why), reduces }),
        }
    }
    if changed {
        edit::finish(g)?;
    }
    Ok(decisions)
}
