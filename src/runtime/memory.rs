//! The activation arena: one buffer for every intermediate tensor, offsets planned ahead of
//! time from tensor liveness so a run allocates nothing. Greedy by size (TFLite's
//! "greedy by size" offset planner): largest tensors first, each at the lowest aligned offset
//! that no already-placed tensor with an overlapping lifetime occupies.

use crate::artifact::format::{align_up, ArenaPlan, ArenaTensor, TENSOR_ALIGN};
use crate::compile::DimBindings;
use crate::ir::Graph;
use crate::plan::edit::bound_shape;
use std::collections::HashMap;

/// Plans every node output of `g` (shapes under `bindings`) that is not a weight. Graph
/// outputs live to the end; a tensor no node reads lives through its producer only.
pub fn plan_arena(g: &Graph, bindings: &DimBindings) -> Result<ArenaPlan, String> {
    // Re-infer under the bindings: dims symbolic inference cannot name (Reshape -1, Resize)
    // become known once the inputs are.
    let bound = crate::plan::edit::bind_inputs(g, bindings).map_err(|e| e.to_string())?;
    let g = &bound;
    let end = g.nodes.len();
    let mut last_use: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for x in n.inputs.iter().flatten() {
            last_use.insert(x.as_str(), i);
        }
    }
    for o in &g.outputs {
        last_use.insert(o.as_str(), end);
    }
    let mut tensors: Vec<ArenaTensor> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            let ty = g.types.get(o).ok_or_else(|| format!("tensor '{o}' (output of '{}') has no type", n.name))?;
            let shape = bound_shape(g, o, bindings).ok_or_else(|| {
                let why = match &n.op {
                    crate::ir::Op::Opaque { op_type, why, .. } => format!(
                        " ({op_type}: {why}): its size is not known ahead of the run, and a standalone artifact \
                         plans every tensor's memory (ONNX Runtime with the Bolt provider runs such models)"
                    ),
                    crate::ir::Op::If { .. } => {
                        ": the If's branches give outputs of different shapes, decided at run time".to_string()
                    }
                    crate::ir::Op::Loop { .. } => ": a Loop's scan outputs grow with its trip count, a run-time \
                                                  value, and a standalone artifact plans every tensor's memory \
                                                  (ONNX Runtime with the Bolt provider runs such models)"
                        .to_string(),
                    _ => String::new(),
                };
                format!("tensor '{o}' (output of '{}') has no known shape{why}", n.name)
            })?;
            let elem = ty.dtype.size_bytes().ok_or_else(|| format!("tensor '{o}' has type {} of no size", ty.dtype))?;
            let bytes = (shape.iter().product::<usize>() * elem) as u64;
            let last = last_use.get(o.as_str()).copied().unwrap_or(i).max(i);
            // A view of an arena tensor of the same size is that tensor's bytes: an alias of
            // its chain's first tensor, which then lives as long as any view of it is read.
            let alias_of = n.op.is_view().then(|| n.input(0)).flatten().and_then(|x| {
                let at = *index.get(x)?;
                let root: &ArenaTensor = &tensors[at];
                (root.bytes == bytes).then(|| root.alias_of.clone().unwrap_or_else(|| root.name.clone()))
            });
            if let Some(root) = &alias_of {
                let r = index[root.as_str()];
                tensors[r].last = tensors[r].last.max(last);
            }
            index.insert(o.as_str(), tensors.len());
            tensors.push(ArenaTensor { name: o.clone(), offset: 0, bytes, first: i, last, alias_of });
        }
    }
    // Aliases take their root's offset after placement; only roots are placed.
    let mut order: Vec<usize> = (0..tensors.len()).filter(|&t| tensors[t].alias_of.is_none()).collect();
    // Largest first; ties by definition order so plans are deterministic.
    order.sort_by(|&a, &b| tensors[b].bytes.cmp(&tensors[a].bytes).then(a.cmp(&b)));
    let mut placed: Vec<usize> = Vec::new();
    let mut arena = 0u64;
    for &t in &order {
        let (first, last, bytes) = (tensors[t].first, tensors[t].last, tensors[t].bytes);
        // Ranges of live-overlapping tensors already placed, by offset.
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .map(|&p| &tensors[p])
            .filter(|p| p.first <= last && first <= p.last)
            .map(|p| (p.offset, p.offset + p.bytes))
            .collect();
        busy.sort();
        let mut offset = 0u64;
        for (lo, hi) in busy {
            if offset + bytes <= lo {
                break;
            }
            offset = offset.max(align_up(hi, TENSOR_ALIGN as u64));
        }
        tensors[t].offset = offset;
        arena = arena.max(offset + bytes);
        placed.push(t);
    }
    for t in 0..tensors.len() {
        if let Some(root) = tensors[t].alias_of.clone() {
            tensors[t].offset = tensors[index[root.as_str()]].offset;
        }
    }
    let naive_bytes = tensors.iter().map(|t| align_up(t.bytes, TENSOR_ALIGN as u64)).sum();
    Ok(ArenaPlan { bytes: align_up(arena, TENSOR_ALIGN as u64), naive_bytes, tensors })
}

/// The first pair of tensors whose lifetimes and byte ranges both overlap, if any (what the
/// planner must never produce; tests check real plans with it). A view and the tensor it
/// aliases are one buffer, not a pair; an alias must sit at its root's offset, and its root
/// must live as long as it.
pub fn find_overlap(plan: &ArenaPlan) -> Option<(&ArenaTensor, &ArenaTensor)> {
    let t = &plan.tensors;
    let root = |a: &ArenaTensor| a.alias_of.clone().unwrap_or_else(|| a.name.clone());
    for a in t.iter().filter(|a| a.alias_of.is_some()) {
        match t.iter().find(|r| r.name == root(a)) {
            Some(r) if r.offset == a.offset && r.first <= a.first && a.last <= r.last => {}
            Some(r) => return Some((a, r)),
            None => return Some((a, a)),
        }
    }
    for i in 0..t.len() {
        for j in i + 1..t.len() {
            let (a, b) = (&t[i], &t[j]);
            if root(a) == root(b) {
                continue;
            }
            let live = a.first <= b.last && b.first <= a.last;
            let bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
            if live && bytes && a.bytes > 0 && b.bytes > 0 {
                return Some((a, b));
            }
        }
    }
    None
}
