//! What a host framework hands to Bolt: groups of the model's nodes, each run as one fused
//! node. A group is a connected set of nodes that Bolt's plan runs on the device (GEMM/conv
//! partitions, stitched regions, fused attention cores, recurrent layers, pools and transposes with glue kernels, and the views and
//! concatenations between them: device copies), so that data stays on the GPU from one Bolt kernel to the next instead of
//! crossing to the host framework at every partition boundary.
//!
//! A group must be convex (no path leaves it through a host node and comes back: one fused
//! node would feed itself): connected device work is cut where host nodes lie between its
//! parts (by host depth, below). A group must also plan on its own; one that does not falls
//! back to its partitions, one fused node each, and the reason is kept.

use super::edit;
use crate::ir::{Graph, Op, Tensor};
use crate::partition::Partition;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// One fused node for the host: the model's nodes it takes, in model order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub nodes: Vec<String>,
    /// The GEMM/conv partitions inside (their anchors), for logs.
    pub anchors: Vec<String>,
}

/// The groups, and why nodes Bolt could run were left to the host or split.
#[derive(Clone, Debug, Default)]
pub struct Offload {
    pub groups: Vec<Group>,
    pub notes: Vec<String>,
}

/// Groups `g`'s device nodes. `claimable` says whether the host may take a partition at all
/// (e.g. its residual must have the output's shape); a partition that is not claimable stays
/// with the host and splits groups.
pub fn offload(g: &Graph, claimable: &dyn Fn(&Partition) -> Result<(), String>) -> Offload {
    let mut out = Offload::default();
    let plan = match super::plan(g) {
        Ok(p) => p,
        Err(e) => {
            out.notes.push(format!("the whole model does not plan ({e}): partitions are offloaded one by one"));
            per_partition(g, &crate::partition::partition(g).partitions, claimable, &mut out);
            return out;
        }
    };
    let mut partitions = Vec::new();
    for p in &plan.partitioning.partitions {
        match claimable(p) {
            Ok(()) => partitions.push(p.clone()),
            Err(why) => out.notes.push(format!("partition {} stays with the host: {why}", p.anchor)),
        }
    }
    // Nodes on the device, by the plan's decisions on the whole model.
    let mut device: HashSet<String> = partitions.iter().flat_map(|p| p.nodes.iter().cloned()).collect();
    device.extend(plan.stitched.iter().filter(|d| d.stitched.is_some()).flat_map(|d| d.nodes.iter().cloned()));
    device.extend(plan.glue.iter().filter(|d| d.kernel.is_some()).map(|d| d.node.clone()));
    device.extend(plan.attention.iter().filter(|d| d.fused.is_some()).flat_map(|d| d.model_nodes().cloned()));
    // Recurrent layers the planner split into a projection GEMM and a scan a kernel takes (the
    // scan keeps the layer's name).
    device.extend(
        plan.graph
            .nodes
            .iter()
            .filter(|n| super::lower::recurrent_scan_kernel(&plan.graph, n).is_ok())
            .map(|n| n.name.clone()),
    );
    // A model node the planner expanded into several (ONNX's function operators: Attention,
    // RMSNormalization, GroupNormalization; its nodes are named after it, the first keeps its
    // name) runs on the device where its expansion does: every node of it a device node, a
    // copy or host work by design (shape arithmetic), some on the device.
    let by_design: HashSet<&str> = plan
        .partitioning
        .host
        .iter()
        .filter(|h| h.reason == crate::partition::SHAPE_COMPUTATION)
        .map(|h| h.node.as_str())
        .collect();
    let c = &plan.canonical;
    // The canonical graph holds fused attention cores as one node of their own name.
    let fused_attention: HashSet<&str> = plan.attention.iter().filter_map(|d| d.fused.as_deref()).collect();
    // Each canonical node's model node: the longest model node name that is its name or a
    // dotted prefix of it (so that `attn.out_proj`, a model node of its own, is not a part of
    // `attn`'s expansion).
    let model_names: HashSet<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut parts_of: HashMap<&str, Vec<&crate::ir::Node>> = HashMap::new();
    for m in &c.nodes {
        let mut name = m.name.as_str();
        loop {
            if model_names.contains(name) {
                parts_of.entry(name).or_default().push(m);
                break;
            }
            match name.rfind('.') {
                Some(dot) => name = &name[..dot],
                None => break,
            }
        }
    }
    let mut expanded_on_device = Vec::new();
    for n in g.nodes.iter().filter(|n| !device.contains(&n.name) && matches!(n.op, Op::Opaque { .. })) {
        let parts = parts_of.get(n.name.as_str()).map(Vec::as_slice).unwrap_or_default();
        let on_device = |m: &&crate::ir::Node| device.contains(&m.name) || fused_attention.contains(m.name.as_str());
        let fine = |m: &&crate::ir::Node| {
            on_device(m) || by_design.contains(m.name.as_str()) || super::lower::is_copy_node(c, m)
        };
        let expanded = parts.iter().any(|m| m.name != n.name) && parts.iter().all(|m| m.op.op_type() != n.op.op_type());
        if expanded && parts.iter().all(fine) && parts.iter().any(on_device) {
            expanded_on_device.push(n.name.clone());
        }
    }
    device.extend(expanded_on_device);
    // Copy ops (views, Concat) reading a device tensor stay with it (model order: chains of
    // them follow).
    let producer: HashMap<&str, &str> =
        g.nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n.name.as_str()))).collect();
    // So do model nodes the planner made copies of, or constants (a CastLike of a constant: the
    // tensor it reads gives only its type; left outside, the node would sit between a group
    // and itself).
    let copies_only = |n: &crate::ir::Node| {
        let parts = parts_of.get(n.name.as_str()).map(Vec::as_slice).unwrap_or_default();
        n.op.is_opaque() && parts.iter().all(|m| super::lower::is_copy_node(c, m))
    };
    for n in &g.nodes {
        let reads_device =
            n.inputs.iter().flatten().any(|x| producer.get(x.as_str()).is_some_and(|p| device.contains(*p)));
        if (super::lower::is_copy_node(g, n) || copies_only(n)) && reads_device {
            device.insert(n.name.clone());
        }
    }
    // Units that must stay whole: each partition, each stitched region, each fused attention
    // core (with its packed projections); other nodes alone.
    let attention: Vec<Vec<String>> =
        plan.attention.iter().filter(|d| d.fused.is_some()).map(|d| d.model_nodes().cloned().collect()).collect();
    let index: HashMap<&str, usize> = g.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut unit: Vec<usize> = (0..g.nodes.len()).collect();
    let whole = partitions
        .iter()
        .map(|p| &p.nodes)
        .chain(plan.stitched.iter().filter(|d| d.stitched.is_some()).map(|d| &d.nodes))
        .chain(attention.iter());
    for names in whole {
        let ids: Vec<usize> = names.iter().filter_map(|n| index.get(n.as_str()).copied()).collect();
        if let Some(&first) = ids.first() {
            for i in ids {
                unit[i] = first;
            }
        }
    }
    // Host depth of each unit: the most host nodes on a path from the graph's inputs into it.
    // A group takes device units of one depth only, so no path between two of its members
    // passes a host node (it would raise the depth): every group is convex.
    let is_device = |i: usize| device.contains(&g.nodes[i].name);
    let mut depth = vec![0usize; g.nodes.len()];
    let mut settled = false;
    for _ in 0..=g.nodes.len() {
        let mut changed = false;
        for (i, n) in g.nodes.iter().enumerate() {
            for x in n.inputs.iter().flatten() {
                let Some(&p) = producer.get(x.as_str()) else { continue };
                let p = index[p];
                if unit[p] == unit[i] {
                    continue;
                }
                let d = depth[unit[p]] + usize::from(!is_device(p));
                if d > depth[unit[i]] {
                    depth[unit[i]] = d;
                    changed = true;
                }
            }
        }
        if !changed {
            settled = true;
            break;
        }
    }
    if !settled {
        out.notes.push("its partitions and regions depend on each other in a cycle: offloaded one by one".into());
        per_partition(g, &partitions, &|_| Ok(()), &mut out);
        return out;
    }
    // Groups: device units of one depth joined through tensors.
    let mut parent: Vec<usize> = (0..g.nodes.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    for (i, n) in g.nodes.iter().enumerate().filter(|&(i, _)| is_device(i)) {
        let (a, b) = (root(&mut parent, unit[i]), root(&mut parent, i));
        parent[a] = b;
        for x in n.inputs.iter().flatten() {
            let Some(&p) = producer.get(x.as_str()) else { continue };
            let p = index[p];
            if is_device(p) && depth[unit[p]] == depth[unit[i]] {
                let (a, b) = (root(&mut parent, p), root(&mut parent, i));
                parent[a] = b;
            }
        }
    }
    let mut components: Vec<(usize, Vec<String>)> = Vec::new();
    let mut of_root: HashMap<usize, usize> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if device.contains(&n.name) {
            let r = root(&mut parent, i);
            let k = *of_root.entry(r).or_insert_with(|| {
                components.push((i, Vec::new()));
                components.len() - 1
            });
            components[k].1.push(n.name.clone());
        }
    }
    for (_, nodes) in components {
        let members: HashSet<String> = nodes.iter().cloned().collect();
        let inside: Vec<Partition> =
            partitions.iter().filter(|p| p.nodes.iter().all(|n| members.contains(n))).cloned().collect();
        let recurrent =
            nodes.iter().any(|n| index.get(n.as_str()).is_some_and(|&i| matches!(g.nodes[i].op, Op::Recurrent(_))));
        // Stitched or glue work alone between host ops is not worth a fused node of its own
        // (two crossings for one kernel); a recurrent layer is (its projection GEMM and scan),
        // and so is such work that no host op feeds or reads: the whole model, or an island
        // of it between its inputs and outputs.
        let touches_host = nodes.iter().any(|name| {
            let n = &g.nodes[index[name.as_str()]];
            let fed =
                n.inputs.iter().flatten().any(|x| producer.get(x.as_str()).is_some_and(|p| !members.contains(*p)));
            let read = n.outputs.iter().any(|y| {
                g.nodes.iter().any(|m| !members.contains(&m.name) && m.inputs.iter().flatten().any(|x| x == y))
            });
            fed || read
        });
        if inside.is_empty() && !recurrent && touches_host {
            continue;
        }
        let anchors = inside.iter().map(|p| p.anchor.clone()).collect::<Vec<_>>();
        let why = if !edit::convex(g, &members) {
            Some("a path leaves it through a host op and comes back".to_string())
        } else {
            super::plan(&subgraph(g, &nodes)).err().map(|e| format!("it does not plan on its own: {e}"))
        };
        match why {
            None => out.groups.push(Group { nodes, anchors }),
            Some(why) => {
                out.notes.push(format!("group of {} is split into its partitions: {why}", anchors.join(", ")));
                per_partition(g, &inside, &|_| Ok(()), &mut out);
            }
        }
    }
    out
}

/// Each claimable partition that plans on its own as a group of its own.
fn per_partition(
    g: &Graph,
    partitions: &[Partition],
    claimable: &dyn Fn(&Partition) -> Result<(), String>,
    out: &mut Offload,
) {
    for p in partitions {
        let ok = claimable(p).and_then(|()| super::plan(&subgraph(g, &p.nodes)).map(|_| ()).map_err(|e| e.to_string()));
        match ok {
            Ok(()) => out.groups.push(Group { nodes: p.nodes.clone(), anchors: vec![p.anchor.clone()] }),
            Err(why) => out.notes.push(format!("partition {} stays with the host: {why}", p.anchor)),
        }
    }
}

/// The nodes of `g` named in `names`, as a standalone graph: what the fused node will run.
/// Values read from outside become inputs (constants stay constants), values used outside
/// or graph outputs become outputs.
pub fn subgraph(g: &Graph, names: &[String]) -> Graph {
    let set: HashSet<&str> = names.iter().map(String::as_str).collect();
    let nodes: Vec<_> = g.nodes.iter().filter(|n| set.contains(n.name.as_str())).cloned().collect();
    let produced: HashSet<&str> = nodes.iter().flat_map(|n| n.outputs.iter().map(String::as_str)).collect();
    let constants: HashMap<&str, &Arc<Tensor>> = g
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::Constant { value } => Some((n.outputs[0].as_str(), value)),
            _ => None,
        })
        .collect();
    let mut sub = Graph { name: format!("{}.bolt", g.name), opset: g.opset, ..Default::default() };
    for n in &nodes {
        for x in n.inputs.iter().flatten() {
            if produced.contains(x.as_str()) || sub.initializers.contains_key(x) || sub.inputs.contains(x) {
                continue;
            }
            if let Some(t) = g.initializers.get(x) {
                sub.initializers.insert(x.clone(), t.clone());
            } else if let Some(t) = constants.get(x.as_str()) {
                sub.initializers.insert(x.clone(), (*t).clone());
            } else {
                sub.inputs.push(x.clone());
            }
        }
    }
    let used_outside: HashSet<&str> = g
        .nodes
        .iter()
        .filter(|n| !set.contains(n.name.as_str()))
        .flat_map(|n| n.inputs.iter().flatten().map(String::as_str))
        .chain(g.outputs.iter().map(String::as_str))
        .collect();
    for n in &nodes {
        for o in &n.outputs {
            if !o.is_empty() && used_outside.contains(o.as_str()) {
                sub.outputs.push(o.clone());
            }
        }
    }
    let names: HashSet<&String> =
        sub.inputs.iter().chain(sub.initializers.keys()).chain(nodes.iter().flat_map(|n| n.outputs.iter())).collect();
    for n in names {
        if let Some(t) = g.types.get(n) {
            sub.types.insert(n.clone(), t.clone());
        }
    }
    sub.nodes = nodes;
    sub
}
