//! Control flow: ONNX `If`, whose branches are graphs that read the enclosing graph's values
//! by name.
//!
//! A branch is a [`Graph`] whose `inputs` are the enclosing values it reads (ONNX declares
//! none; import computes them), so the graph machinery (ordering checks, inference, the
//! reference executor) works on branches unchanged. The `If` node lists the same values after
//! its condition. What happens to an `If`:
//! - inference types its outputs from the branch the condition takes when the condition is
//!   known, else from both (dims they disagree on become unknown);
//! - the planner inlines the branch a known condition takes ([`inline_if`]): PyTorch writes
//!   `x.squeeze(d)` as `If(Shape(x)[d] == 1, Squeeze, Identity)`, decided by static shapes;
//! - an `If` decided at run time stays with the host, which runs the branch it takes.
//!
//! ONNX `Loop` is the same kind of node: its body is a graph whose inputs are the iteration
//! number, the condition and the carried values, then the enclosing values it reads (listed
//! on the node too). The host runs it ([`eval_loop`]); inference types its outputs from one
//! pass of the body ([`infer_loop`]).

use super::infer::InputInfo;
use super::{Dim, Graph, Node, Op, Shape, Tensor, TensorType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The values `g` reads that neither its nodes nor its initializers define, in first-use
/// order (outputs naming an enclosing value included).
pub fn captured(g: &Graph) -> Vec<String> {
    let mut defined: HashSet<&str> = g.initializers.keys().map(String::as_str).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for n in &g.nodes {
        for x in n.inputs.iter().flatten() {
            if !defined.contains(x.as_str()) && seen.insert(x.clone()) {
                out.push(x.clone());
            }
        }
        defined.extend(n.outputs.iter().map(String::as_str));
    }
    for o in &g.outputs {
        if !defined.contains(o.as_str()) && seen.insert(o.clone()) {
            out.push(o.clone());
        }
    }
    out
}

/// Every node of `g` and, recursively, of its `If` branches.
pub fn nodes_deep(g: &Graph) -> Vec<&Node> {
    let mut out = Vec::new();
    for n in &g.nodes {
        out.push(n);
        match &n.op {
            Op::If { then_branch, else_branch } => {
                out.extend(nodes_deep(then_branch));
                out.extend(nodes_deep(else_branch));
            }
            Op::Loop { body, .. } => out.extend(nodes_deep(body)),
            Op::Scan(s) => out.extend(nodes_deep(&s.body)),
            _ => {}
        }
    }
    out
}

/// Which branch a condition value takes: ONNX's condition is a single bool (tensors of one
/// element are accepted, as onnxruntime does).
pub fn takes_then(cond: &Tensor) -> Result<bool, String> {
    if cond.len() != 1 {
        return Err(format!("the condition has {} elements; If takes a single bool", cond.len()));
    }
    let v = cond.to_f64_vec();
    Ok(v[0] != 0.0)
}

/// Infers `probe` (a branch or body whose own inputs are typed already) with the enclosing
/// values it reads typed as the node's inputs from `skip` on say, small known values folded in
/// as they are outside it. `which` names it in errors.
fn infer_with_enclosing(
    mut probe: Graph,
    inputs: &[Option<String>],
    infos: &[Option<InputInfo>],
    skip: usize,
    which: &str,
) -> Result<Graph, String> {
    for (name, info) in inputs.iter().zip(infos).skip(skip) {
        let (Some(name), Some(info)) = (name, info) else { continue };
        if !probe.inputs.contains(name) {
            continue;
        }
        if let Some(ty) = info.ty {
            probe.types.insert(name.clone(), ty.clone());
        }
        if let Some(v) = info.value.filter(|v| v.len() <= 1 << 16) {
            probe.inputs.retain(|x| x != name);
            probe.initializers.insert(name.clone(), Arc::new(v.clone()));
        }
    }
    let declared = probe.types.clone();
    super::infer::infer_branch(&mut probe, &declared).map_err(|e| format!("{which}: {e}"))?;
    Ok(probe)
}

/// The type of a value carried through iterations (a Loop's carried value, a Scan's state)
/// entering as `first` and leaving the body as `last`: the dims the body keeps.
fn carried_type(first: Option<TensorType>, last: Option<TensorType>, what: &str) -> Result<Option<TensorType>, String> {
    match (first, last) {
        (Some(a), Some(b)) if a.dtype == b.dtype => {
            Ok(Some(TensorType { dtype: a.dtype, shape: either_shape(a.shape, b.shape) }))
        }
        (Some(a), Some(b)) => Err(format!("{what} enters as {} and leaves the body as {}", a.dtype, b.dtype)),
        _ => Ok(None),
    }
}

/// Output types of an `If` node (`inputs`: its input names; `infos`: what inference knows of
/// them). Each branch is inferred with the types (and small constant values) of the enclosing
/// values it reads.
pub fn infer_if(
    inputs: &[Option<String>],
    infos: &[Option<InputInfo>],
    then_branch: &Graph,
    else_branch: &Graph,
    outputs: usize,
) -> Result<Vec<Option<TensorType>>, String> {
    let cond = match infos.first().copied().flatten() {
        Some(InputInfo { value: Some(v), .. }) => Some(takes_then(v)?),
        _ => None,
    };
    let infer = |b: &Graph, which: &str| -> Result<Vec<Option<TensorType>>, String> {
        if b.outputs.len() != outputs {
            return Err(format!("{which} has {} outputs; the node has {outputs}", b.outputs.len()));
        }
        let probe = infer_with_enclosing(b.clone(), inputs, infos, 1, which)?;
        Ok(probe.outputs.iter().map(|o| probe.types.get(o).cloned()).collect())
    };
    Ok(match cond {
        Some(true) => infer(then_branch, "then_branch")?,
        Some(false) => infer(else_branch, "else_branch")?,
        None => {
            // A branch that cannot run on these shapes is not the one a valid run takes
            // (silero VAD's 8 kHz branch on a 16 kHz window): the other decides the types.
            let (t, e) = match (infer(then_branch, "then_branch"), infer(else_branch, "else_branch")) {
                (Ok(t), Ok(e)) => (t, e),
                (Ok(t), Err(why)) | (Err(why), Ok(t)) => {
                    tracing::debug!("If: {why}; typed by the other branch");
                    return Ok(t);
                }
                (Err(a), Err(b)) => return Err(format!("{a}; {b}")),
            };
            t.into_iter()
                .zip(e)
                .enumerate()
                .map(|(k, (t, e))| match (t, e) {
                    (Some(t), Some(e)) if t.dtype != e.dtype => {
                        Err(format!("output {k} is {} in then_branch but {} in else_branch", t.dtype, e.dtype))
                    }
                    (Some(t), Some(e)) => {
                        Ok(Some(TensorType { dtype: t.dtype, shape: either_shape(t.shape, e.shape) }))
                    }
                    _ => Ok(None),
                })
                .collect::<Result<_, String>>()?
        }
    })
}

/// The shape a Loop body takes its iteration number (k = 0) or condition (k = 1) in: a scalar,
/// as ONNX specifies, or `[1]` where the body declares one dim (paddle2onnx does); onnxruntime
/// feeds each in the rank the body declares.
fn counter_shape(body: &Graph, k: usize) -> Vec<usize> {
    match body.inputs.get(k).and_then(|x| body.types.get(x)).and_then(|t| t.shape.as_ref()) {
        Some(s) if s.rank() == 1 => vec![1],
        _ => vec![],
    }
}

/// Output types of a `Loop` node from one pass of its body: the iteration number an int64
/// scalar, the condition a bool scalar, the carried values typed as their initial values, the
/// enclosing values as they are. A carried value keeps the dims the body does not change; a
/// scan output gains a leading axis of unknown length (the trip count is a run-time value).
pub fn infer_loop(
    inputs: &[Option<String>],
    infos: &[Option<InputInfo>],
    body: &Graph,
    carried: usize,
    outputs: usize,
) -> Result<Vec<Option<TensorType>>, String> {
    if body.outputs.len() != 1 + outputs || body.inputs.len() < 2 + carried {
        return Err(format!(
            "the body has {} inputs and {} outputs for a node of {carried} carried values and {outputs} outputs",
            body.inputs.len(),
            body.outputs.len()
        ));
    }
    let mut probe = body.clone();
    let counter = |k: usize, dtype| TensorType::new(dtype, Shape::from_static(&counter_shape(body, k)));
    probe.types.insert(body.inputs[0].clone(), counter(0, super::DType::I64));
    probe.types.insert(body.inputs[1].clone(), counter(1, super::DType::Bool));
    let info = |k: usize| infos.get(k).copied().flatten();
    for i in 0..carried {
        match info(2 + i).and_then(|x| x.ty) {
            Some(ty) => probe.types.insert(body.inputs[2 + i].clone(), ty.clone()),
            None => return Ok(vec![None; outputs]),
        };
    }
    let probe = infer_with_enclosing(probe, inputs, infos, 2 + carried, "body")?;
    let out = |k: usize| probe.types.get(&probe.outputs[k]).cloned();
    let mut types = Vec::with_capacity(outputs);
    for i in 0..carried {
        let first = info(2 + i).and_then(|x| x.ty).cloned();
        types.push(carried_type(first, out(1 + i), &format!("carried value {i}"))?);
    }
    let trips = fixed_trip_count(&probe, info(0), info(1));
    for k in 1 + carried..1 + outputs {
        types.push(out(k).map(|t| TensorType {
            dtype: t.dtype,
            shape: t.shape.map(|s| Shape(std::iter::once(trips.map_or(Dim::Unknown, Dim::Known)).chain(s.0).collect())),
        }));
    }
    Ok(types)
}

/// Output types of a `Scan` node from one pass of its body: the states typed as their initial
/// values, each scan input's slice as the input without its scan axis, the enclosing values
/// as they are. A scan output gains, at its axis, the scan inputs' length along theirs.
pub fn infer_scan(
    inputs: &[Option<String>],
    infos: &[Option<InputInfo>],
    s: &super::ScanAttrs,
    outputs: usize,
) -> Result<Vec<Option<TensorType>>, String> {
    let body = &s.body;
    let scans = s.input_axes.len();
    let own = s.states + scans;
    if body.outputs.len() != outputs || body.inputs.len() < own {
        return Err(format!("the body has {} inputs and {} outputs", body.inputs.len(), body.outputs.len()));
    }
    let info = |k: usize| infos.get(k).copied().flatten();
    let norm = |axis: i64, rank: usize| -> Result<usize, String> {
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        usize::try_from(a).ok().filter(|&a| a < rank).ok_or_else(|| format!("axis {axis} out of range for rank {rank}"))
    };
    let mut probe = body.clone();
    for i in 0..s.states {
        match info(i).and_then(|x| x.ty) {
            Some(ty) => probe.types.insert(body.inputs[i].clone(), ty.clone()),
            None => return Ok(vec![None; outputs]),
        };
    }
    let mut length = None;
    for j in 0..scans {
        let Some(ty) = info(s.states + j).and_then(|x| x.ty) else { return Ok(vec![None; outputs]) };
        let Some(shape) = &ty.shape else { return Ok(vec![None; outputs]) };
        let axis = norm(s.input_axes[j], shape.rank())?;
        let d = shape.0[axis].clone();
        match (&length, &d) {
            (Some(Dim::Known(a)), Dim::Known(b)) if a != b => {
                return Err(format!("scan inputs of lengths {a} and {b} along their scan axes"))
            }
            (None, _) | (Some(Dim::Unknown), _) => length = Some(d),
            _ => {}
        }
        let mut slice = shape.0.clone();
        slice.remove(axis);
        probe.types.insert(body.inputs[s.states + j].clone(), TensorType::new(ty.dtype, Shape(slice)));
    }
    let probe = infer_with_enclosing(probe, inputs, infos, own, "body")?;
    let out = |k: usize| probe.types.get(&probe.outputs[k]).cloned();
    let mut types = Vec::with_capacity(outputs);
    for i in 0..s.states {
        let first = info(i).and_then(|x| x.ty).cloned();
        types.push(carried_type(first, out(i), &format!("state {i}"))?);
    }
    for (k, axis) in s.output_axes.iter().enumerate() {
        let Some(t) = out(s.states + k) else {
            types.push(None);
            continue;
        };
        let shape = match t.shape {
            Some(sh) => {
                let at = norm(*axis, sh.rank() + 1)?;
                let mut dims = sh.0;
                dims.insert(at, length.clone().unwrap_or(Dim::Unknown));
                Some(Shape(dims))
            }
            None => None,
        };
        types.push(Some(TensorType { dtype: t.dtype, shape }));
    }
    Ok(types)
}

/// The number of iterations a `Loop` runs when planning can tell: a known trip count, with no
/// condition or a known true one, and a body (its known enclosing values folded in) that
/// passes its condition through unchanged (`for i in range(n)` as PyTorch and tf2onnx export
/// it) or makes it a constant true.
fn fixed_trip_count(body: &Graph, trips: Option<InputInfo>, cond: Option<InputInfo>) -> Option<usize> {
    let m = trips?.value?.as_i64_vec().filter(|v| v.len() == 1)?[0];
    if let Some(c) = cond {
        if !takes_then(c.value?).ok()? {
            return Some(0);
        }
    }
    let (cond_in, cond_out) = (body.inputs.get(1)?, body.outputs.first()?);
    let mut x: &str = cond_out;
    // Follow Identities back from the body's condition output.
    while let Some(n) =
        body.nodes.iter().find(|n| n.outputs.first().map(String::as_str) == Some(x) && n.op == Op::Identity)
    {
        x = n.input(0)?;
    }
    let always = x == cond_in || body.initializers.get(x).is_some_and(|t| takes_then(t).unwrap_or(false));
    always.then(|| m.max(0) as usize)
}

/// Runs a `Loop` node on its inputs (by position, as the node lists them) with `run`
/// executing one pass of the body; returns the final carried values, and each scan output's
/// per-iteration values (of one shape; the caller stacks them on a new leading axis).
pub fn eval_loop(
    node: &Node,
    inputs: &[Option<&Tensor>],
    body: &Graph,
    carried: usize,
    mut run: impl FnMut(&Graph, &HashMap<String, Tensor>) -> crate::error::Result<HashMap<String, Tensor>>,
) -> Result<(Vec<Tensor>, Vec<Vec<Tensor>>), String> {
    let input = |k: usize| inputs.get(k).copied().flatten();
    let trips = match input(0) {
        Some(m) if m.len() == 1 => Some(m.as_i64_vec().ok_or("the trip count is not an integer")?[0]),
        Some(m) => return Err(format!("the trip count has {} elements; Loop takes a scalar", m.len())),
        None => None,
    };
    let mut cond = match input(1) {
        Some(c) => takes_then(c)?,
        None => true,
    };
    let mut values: Vec<Tensor> = (0..carried)
        .map(|i| input(2 + i).cloned().ok_or_else(|| format!("carried value {i} has no initial value")))
        .collect::<Result<_, String>>()?;
    let captured: HashMap<String, Tensor> = node
        .inputs
        .iter()
        .zip(inputs)
        .skip(2 + carried)
        .filter_map(|(name, t)| Some((name.clone()?, (*t)?.clone())))
        .filter(|(name, _)| body.inputs.contains(name))
        .collect();
    let scans = body.outputs.len() - 1 - carried;
    let mut stacked: Vec<Vec<Tensor>> = vec![Vec::new(); scans];
    let mut i: i64 = 0;
    while cond && trips.is_none_or(|m| i < m) {
        let mut feeds = captured.clone();
        feeds.insert(body.inputs[0].clone(), Tensor::from_i64(counter_shape(body, 0), vec![i]));
        feeds.insert(
            body.inputs[1].clone(),
            Tensor { shape: counter_shape(body, 1), data: super::TensorData::Bool(vec![cond]) },
        );
        for (k, v) in values.iter().enumerate() {
            feeds.insert(body.inputs[2 + k].clone(), v.clone());
        }
        let mut outs = run(body, &feeds).map_err(|e| format!("iteration {i}: {e}"))?;
        let mut take = |o: &String| outs.remove(o).ok_or_else(|| format!("body output '{o}' was not computed"));
        cond = takes_then(&take(&body.outputs[0])?)?;
        for k in 0..carried {
            values[k] = take(&body.outputs[1 + k])?;
        }
        for (j, s) in stacked.iter_mut().enumerate() {
            s.push(take(&body.outputs[1 + carried + j])?);
        }
        i += 1;
    }
    for (j, s) in stacked.iter().enumerate() {
        let first = s
            .first()
            .ok_or_else(|| format!("scan output {j}: the loop ran no iteration, so its element shape is unknown"))?;
        if let Some(t) = s.iter().find(|t| t.shape != first.shape || t.dtype() != first.dtype()) {
            return Err(format!("scan output {j} changes from {:?} to {:?} between iterations", first.shape, t.shape));
        }
    }
    Ok((values, stacked))
}

/// The shape both branches' outputs fit: equal dims kept, the others unknown; no rank when
/// the ranks differ.
fn either_shape(a: Option<Shape>, b: Option<Shape>) -> Option<Shape> {
    let (a, b) = (a?, b?);
    if a.rank() != b.rank() {
        return None;
    }
    Some(Shape(a.0.into_iter().zip(b.0).map(|(x, y)| if x == y { x } else { Dim::Unknown }).collect()))
}

/// Runs an `If` node on its inputs (by position, as the node lists them) with `run` executing
/// the branch it takes; returns the node's outputs.
pub fn eval_if(
    node: &Node,
    inputs: &[Option<&Tensor>],
    then_branch: &Graph,
    else_branch: &Graph,
    run: impl FnOnce(&Graph, &HashMap<String, Tensor>) -> crate::error::Result<HashMap<String, Tensor>>,
) -> Result<Vec<Tensor>, String> {
    let cond = inputs.first().copied().flatten().ok_or("the condition is missing")?;
    let branch = if takes_then(cond)? { then_branch } else { else_branch };
    let values: HashMap<String, Tensor> = node
        .inputs
        .iter()
        .zip(inputs)
        .skip(1)
        .filter_map(|(name, t)| Some((name.clone()?, (*t)?.clone())))
        .filter(|(name, _)| branch.inputs.contains(name))
        .collect();
    let mut outs = run(branch, &values).map_err(|e| format!("in {}: {e}", branch.name))?;
    branch
        .outputs
        .iter()
        .map(|o| outs.remove(o).ok_or_else(|| format!("branch output '{o}' was not computed")))
        .collect()
}

/// Moves the constants of the graphs of `g`'s control-flow nodes (If branches, Loop and Scan
/// bodies; initializers and Constant nodes, nested graphs' included) into `g`'s initializers,
/// read by the node as enclosing values: a model's weights are stored once, with the others,
/// whichever graph uses them. A name `g` already defines otherwise stays in its graph. Returns
/// how many moved.
pub fn hoist_constants(g: &mut Graph) -> usize {
    let mut moved = 0;
    for i in 0..g.nodes.len() {
        let mut graphs: Vec<Graph> = match &g.nodes[i].op {
            Op::If { then_branch, else_branch } => vec![(**then_branch).clone(), (**else_branch).clone()],
            Op::Loop { body, .. } => vec![(**body).clone()],
            Op::Scan(s) => vec![s.body.clone()],
            _ => continue,
        };
        let mut lifted: Vec<String> = Vec::new();
        for b in graphs.iter_mut() {
            moved += hoist_constants(b);
            let mut constants = Vec::new();
            b.nodes.retain(|n| match &n.op {
                Op::Constant { value } if n.outputs.len() == 1 => {
                    constants.push((n.outputs[0].clone(), value.clone()));
                    false
                }
                _ => true,
            });
            b.initializers.extend(constants);
            let names: Vec<String> = b.initializers.keys().cloned().collect();
            for name in names {
                let value = b.initializers[&name].clone();
                let clash = g.types.contains_key(&name) && g.initializers.get(&name) != Some(&value);
                let produced = g.nodes.iter().any(|n| n.outputs.contains(&name));
                if clash || produced {
                    continue;
                }
                b.initializers.remove(&name);
                b.inputs.push(name.clone());
                g.types.insert(name.clone(), TensorType::new(value.dtype(), Shape::from_static(&value.shape)));
                g.initializers.insert(name.clone(), value);
                if !lifted.contains(&name) {
                    lifted.push(name);
                }
                moved += 1;
            }
        }
        let node = &mut g.nodes[i];
        for name in lifted {
            // Graph-defined names are unique across scopes: none is the node's own input yet.
            if !node.inputs.contains(&Some(name.clone())) {
                node.inputs.push(Some(name));
            }
        }
        let mut graphs = graphs.into_iter().map(Arc::new);
        let mut next = || graphs.next().expect("one graph per slot");
        node.op = match &node.op {
            Op::If { .. } => Op::If { then_branch: next(), else_branch: next() },
            Op::Loop { carried, .. } => Op::Loop { body: next(), carried: *carried },
            Op::Scan(s) => Op::Scan(Arc::new(super::ScanAttrs { body: (*next()).clone(), ..(**s).clone() })),
            other => other.clone(),
        };
    }
    moved
}

/// Replaces node `i` of `g`, an `If`, with the nodes of the branch `take_then` selects. Node
/// names get the `If`'s name as a prefix (node names are unique per graph only); the branch's
/// outputs are renamed to the `If`'s (an output that is an enclosing value or an initializer
/// becomes an Identity). Returns false, changing nothing, when a tensor the branch defines
/// already exists in `g` (a malformed model: ONNX names are unique across scopes).
pub fn inline_if(g: &mut Graph, i: usize, take_then: bool) -> bool {
    let node = g.nodes[i].clone();
    let Op::If { then_branch, else_branch } = &node.op else { return false };
    let b: &Graph = if take_then { then_branch } else { else_branch };
    if b.outputs.len() != node.outputs.len() {
        return false;
    }
    let defined: Vec<&String> = b.initializers.keys().chain(b.nodes.iter().flat_map(|n| &n.outputs)).collect();
    let produced_outside: HashSet<&str> = g
        .nodes
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .flat_map(|(_, n)| n.outputs.iter().map(String::as_str))
        .chain(g.inputs.iter().map(String::as_str))
        .chain(g.initializers.keys().map(String::as_str))
        .collect();
    if defined.iter().any(|d| !d.is_empty() && produced_outside.contains(d.as_str())) {
        return false;
    }
    // Branch outputs its nodes produce are renamed to the If's outputs; the rest are copied.
    let produced: HashSet<&str> = b.nodes.iter().flat_map(|n| n.outputs.iter().map(String::as_str)).collect();
    let mut rename: HashMap<String, String> = HashMap::new();
    let mut copies: Vec<(String, String)> = Vec::new();
    for (bo, out) in b.outputs.iter().zip(&node.outputs) {
        if produced.contains(bo.as_str()) && !rename.contains_key(bo) {
            rename.insert(bo.clone(), out.clone());
        } else {
            copies.push((rename.get(bo).unwrap_or(bo).clone(), out.clone()));
        }
    }
    let names: HashSet<String> = g.nodes.iter().map(|n| n.name.clone()).collect();
    let mut taken = names;
    let mut fresh = |base: String| super::graph::unique_name(&mut taken, &base);
    let re = |x: &String| rename.get(x).unwrap_or(x).clone();
    let mut spliced: Vec<Node> = b
        .nodes
        .iter()
        .map(|n| Node {
            name: fresh(format!("{}/{}", node.name, n.name)),
            op: n.op.clone(),
            inputs: n.inputs.iter().map(|x| x.as_ref().map(re)).collect(),
            outputs: n.outputs.iter().map(re).collect(),
        })
        .collect();
    for (from, to) in copies {
        spliced.push(Node {
            name: fresh(format!("{}/{to}", node.name)),
            op: Op::Identity,
            inputs: vec![Some(from)],
            outputs: vec![to],
        });
    }
    for (name, t) in &b.initializers {
        g.types.insert(name.clone(), TensorType::new(t.dtype(), Shape::from_static(&t.shape)));
        g.initializers.insert(name.clone(), t.clone());
    }
    for (name, ty) in &b.types {
        if produced.contains(name.as_str()) {
            g.types.entry(re(name)).or_insert_with(|| ty.clone());
        }
    }
    g.nodes.splice(i..=i, spliced);
    true
}
