//! The CPU reference executor: Bolt's numerical oracle.
//!
//! Runs any imported graph made of the supported ops, in f32, f16 and bf16 (computed in f32
//! or f64 and rounded once per op, as a GPU epilogue does), plus the integer and bool
//! tensors that shape computations use. GEMM-like ops go through `matrixmultiply`; large
//! loops use rayon.

pub(crate) mod ops;

use crate::error::{Error, Result};
use crate::ir::{Graph, Node, Op, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

pub use ops::{eval_op, unary_fn};

/// Runs one node on its inputs (by position; `None` for omitted optional inputs). A kernel
/// bug surfaces as an error naming the node, never aborts the host process (the executor runs
/// inside ONNX Runtime, TVM and the CUDA runtime's host steps).
pub fn eval_node(node: &Node, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
    if let Op::Opaque { domain, op_type, attrs, why } = &node.op {
        // The host-only ops the reference computes (ArgMax, Tile, ...), by today's definitions
        // (older versions that differ stay opaque), and the shape arithmetic inference folds
        // (ConstantOfShape, Range, ...); nothing else.
        if (domain.is_empty() || domain == "ai.onnx") && why.as_ref() != crate::ir::OLDER_SEMANTICS {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ops::host::eval(op_type, attrs, inputs)))
                .unwrap_or_else(|p| {
                    Some(Err(format!("internal error in the reference kernel: {}", panic_message(&p))))
                });
            if let Some(r) = r {
                return r.map_err(|reason| Error::node(node, reason));
            }
        }
        return match crate::ir::fold_host(domain, op_type, attrs, inputs) {
            Some(t) if node.outputs.len() == 1 => Ok(vec![t]),
            _ => Err(Error::node(node, format!("the reference executor cannot run it: {why}"))),
        };
    }
    if let Op::If { then_branch, else_branch } = &node.op {
        return crate::ir::control::eval_if(node, inputs, then_branch, else_branch, run)
            .map_err(|r| Error::node(node, r));
    }
    if let Op::Loop { body, carried } = &node.op {
        let (mut values, scans) =
            crate::ir::control::eval_loop(node, inputs, body, *carried, run).map_err(|r| Error::node(node, r))?;
        // Each scan output: its iterations' values stacked on a new leading axis.
        for s in scans {
            let rows: Vec<Tensor> = s.iter().map(|t| t.reshaped([vec![1], t.shape.clone()].concat())).collect();
            let refs: Vec<Option<&Tensor>> = rows.iter().map(Some).collect();
            let stacked = eval_op(&Op::Concat { axis: 0 }, &refs).map_err(|r| Error::node(node, r))?;
            values.extend(stacked);
        }
        return Ok(values);
    }
    if let Op::Scan(s) = &node.op {
        return eval_scan(node, inputs, s).map_err(|r| Error::node(node, r));
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| eval_op(&node.op, inputs)))
        .unwrap_or_else(|p| Err(format!("internal error in the reference kernel: {}", panic_message(&p))))
        .map_err(|r| Error::node(node, r))
}

/// Runs a `Scan` node: the body once per slice of the scan inputs (each in its direction),
/// the states threaded through, each scan output's slices stacked along its axis (in its
/// direction).
fn eval_scan(
    node: &Node,
    inputs: &[Option<&Tensor>],
    s: &crate::ir::ScanAttrs,
) -> std::result::Result<Vec<Tensor>, String> {
    let body = &s.body;
    let scans = s.input_axes.len();
    let own = s.states + scans;
    let input = |k: usize| inputs.get(k).copied().flatten().ok_or_else(|| format!("input {k} is missing"));
    let norm = |axis: i64, rank: usize| -> std::result::Result<usize, String> {
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        usize::try_from(a).ok().filter(|&a| a < rank).ok_or_else(|| format!("axis {axis} out of range for rank {rank}"))
    };
    let mut axes = Vec::with_capacity(scans);
    let mut length = None;
    for j in 0..scans {
        let x = input(s.states + j)?;
        let a = norm(s.input_axes[j], x.rank())?;
        match length {
            Some(n) if n != x.shape[a] => return Err(format!("scan inputs of lengths {n} and {}", x.shape[a])),
            _ => length = Some(x.shape[a]),
        }
        axes.push(a);
    }
    let length = length.unwrap_or(0);
    let mut states: Vec<Tensor> = (0..s.states).map(|i| input(i).cloned()).collect::<std::result::Result<_, _>>()?;
    let captured: HashMap<String, Tensor> = node
        .inputs
        .iter()
        .zip(inputs)
        .skip(own)
        .filter_map(|(name, t)| Some((name.clone()?, (*t)?.clone())))
        .filter(|(name, _)| body.inputs.contains(name))
        .collect();
    let outs = s.output_axes.len();
    let mut slices: Vec<Vec<Tensor>> = vec![Vec::new(); outs];
    for t in 0..length {
        let mut feeds = captured.clone();
        for (i, v) in states.iter().enumerate() {
            feeds.insert(body.inputs[i].clone(), v.clone());
        }
        for j in 0..scans {
            let at = if s.input_reverse[j] { length - 1 - t } else { t };
            let index = Tensor::from_i64(vec![], vec![at as i64]);
            let slice = eval_op(&Op::Gather { axis: axes[j] as i64 }, &[Some(input(s.states + j)?), Some(&index)])?;
            feeds.insert(body.inputs[s.states + j].clone(), slice.into_iter().next().ok_or("empty slice")?);
        }
        let mut r = run(body, &feeds).map_err(|e| format!("iteration {t}: {e}"))?;
        let mut take = |o: &String| r.remove(o).ok_or_else(|| format!("body output '{o}' was not computed"));
        for i in 0..s.states {
            states[i] = take(&body.outputs[i])?;
        }
        for (k, v) in slices.iter_mut().enumerate() {
            v.push(take(&body.outputs[s.states + k])?);
        }
    }
    for (k, mut v) in slices.into_iter().enumerate() {
        if v.is_empty() {
            return Err(format!("scan output {k}: no iteration ran, so its slice shape is unknown"));
        }
        if s.output_reverse[k] {
            v.reverse();
        }
        let at = norm(s.output_axes[k], v[0].rank() + 1)?;
        let rows: Vec<Tensor> = v
            .iter()
            .map(|t| {
                let mut shape = t.shape.clone();
                shape.insert(at, 1);
                t.reshaped(shape)
            })
            .collect();
        let refs: Vec<Option<&Tensor>> = rows.iter().map(Some).collect();
        states.extend(eval_op(&Op::Concat { axis: at as i64 }, &refs)?);
    }
    Ok(states)
}

/// Runs `graph` on `inputs` (by graph input name) and returns every graph output by name.
pub fn run(graph: &Graph, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>> {
    run_with(graph, inputs, eval_node)
}

/// [`run`] with `eval` computing each node (a device runs some nodes its own way).
pub fn run_with(
    graph: &Graph,
    inputs: &HashMap<String, Tensor>,
    mut eval: impl FnMut(&Node, &[Option<&Tensor>]) -> Result<Vec<Tensor>>,
) -> Result<HashMap<String, Tensor>> {
    let mut env: HashMap<&str, Arc<Tensor>> = HashMap::new();
    for name in &graph.inputs {
        let t = inputs.get(name).ok_or_else(|| Error::tensor(name, "graph input was not provided"))?;
        if let Some(ty) = graph.types.get(name) {
            if ty.dtype != t.dtype() {
                return Err(Error::tensor(
                    name,
                    format!("graph input is declared {} but {} was provided", ty.dtype, t.dtype()),
                ));
            }
            if let Some(s) = &ty.shape {
                if !s.admits(&t.shape) {
                    return Err(Error::tensor(
                        name,
                        format!("graph input is declared {s} but shape {:?} was provided", t.shape),
                    ));
                }
            }
        }
        env.insert(name, Arc::new(t.clone()));
    }
    for (name, t) in &graph.initializers {
        env.insert(name, t.clone());
    }
    // Free each intermediate after its last use: real models do not fit otherwise.
    let mut last_use: HashMap<&str, usize> = HashMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        for x in n.inputs.iter().flatten() {
            last_use.insert(x, i);
        }
    }
    for o in &graph.outputs {
        last_use.insert(o, usize::MAX);
    }

    for (i, node) in graph.nodes.iter().enumerate() {
        let args: Vec<Option<Arc<Tensor>>> = node
            .inputs
            .iter()
            .map(|x| {
                x.as_ref().map(|name| env.get(name.as_str()).cloned().expect("sort_and_check guarantees producers"))
            })
            .collect();
        let refs: Vec<Option<&Tensor>> = args.iter().map(|a| a.as_deref()).collect();
        let outs = eval(node, &refs)?;
        drop(args);
        for (name, t) in node.outputs.iter().zip(outs) {
            if !name.is_empty() {
                env.insert(name, Arc::new(t));
            }
        }
        for x in node.inputs.iter().flatten() {
            if last_use.get(x.as_str()) == Some(&i) && !graph.initializers.contains_key(x) {
                env.remove(x.as_str());
            }
        }
    }
    graph
        .outputs
        .iter()
        .map(|o| {
            let t = env.get(o.as_str()).ok_or_else(|| Error::tensor(o, "graph output was not computed"))?;
            Ok((o.clone(), Arc::unwrap_or_clone(t.clone())))
        })
        .collect()
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
