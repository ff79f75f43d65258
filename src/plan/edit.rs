//! Small graph-editing helpers the plan passes share.

use crate::error::Result;
use crate::ir::{Graph, Node, Op, Shape, Tensor, TensorType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A constant tensor: an initializer or a Constant node's value.
pub fn constant(g: &Graph, name: &str) -> Option<Arc<Tensor>> {
    g.initializers.get(name).cloned().or_else(|| {
        g.nodes.iter().find_map(|n| match &n.op {
            Op::Constant { value } if n.outputs[0] == name => Some(value.clone()),
            _ => None,
        })
    })
}

/// Readers of every tensor: (node index, input position).
pub fn consumers(g: &Graph) -> HashMap<String, Vec<(usize, usize)>> {
    let mut m: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for (k, x) in n.inputs.iter().enumerate() {
            if let Some(x) = x {
                m.entry(x.clone()).or_default().push((i, k));
            }
        }
    }
    m
}

/// Static shape of a tensor, with unbound symbolic dims taken from `bindings` (1 when unbound).
pub fn bound_shape(g: &Graph, t: &str, bindings: &HashMap<String, usize>) -> Option<Vec<usize>> {
    let s = g.types.get(t)?.shape.as_ref()?;
    s.0.iter()
        .map(|d| match d {
            crate::ir::Dim::Known(n) => Some(*n),
            crate::ir::Dim::Sym(name) => Some(bindings.get(name).copied().unwrap_or(1)),
            crate::ir::Dim::Unknown => None,
        })
        .collect()
}

/// Every tensor something reads: a node's input or a graph output.
pub fn read_tensors(g: &Graph) -> HashSet<&str> {
    g.nodes
        .iter()
        .flat_map(|n| n.inputs.iter().flatten().map(String::as_str))
        .chain(g.outputs.iter().map(String::as_str))
        .collect()
}

/// A name not used by any tensor or node of `g`, derived from `base`.
pub fn fresh_name(g: &Graph, taken: &mut HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut i = 1;
    while taken.contains(&name) || g.types.contains_key(&name) || g.initializers.contains_key(&name) {
        i += 1;
        name = format!("{base}.{i}");
    }
    taken.insert(name.clone());
    name
}

pub fn node(name: String, op: Op, inputs: Vec<Option<String>>, output: String) -> Node {
    Node { name, op, inputs, outputs: vec![output] }
}

/// After a pass: drop weights nobody reads, type the new ones, order nodes and re-infer.
pub fn finish(g: &mut Graph) -> Result<()> {
    let used: HashSet<String> = read_tensors(g).into_iter().map(str::to_string).collect();
    g.initializers.retain(|k, _| used.contains(k));
    let produced: HashSet<&String> = g.nodes.iter().flat_map(|n| n.outputs.iter()).collect();
    let keep: HashSet<String> = used.iter().chain(produced).chain(g.inputs.iter()).cloned().collect();
    g.types.retain(|k, _| keep.contains(k));
    for (k, t) in &g.initializers {
        g.types.insert(k.clone(), TensorType::new(t.dtype(), Shape::from_static(&t.shape)));
    }
    g.sort_and_check()?;
    crate::ir::infer::infer_graph(g, &HashMap::new())
}

/// A 4-D OIHW conv weight as OHWI (KRSC), for NHWC kernels. Parallel over output channels:
/// ResNet-50 moves 25M weights through here.
pub fn oihw_to_ohwi(t: &Tensor) -> Option<Tensor> {
    use rayon::prelude::*;
    fn permute<T: Copy + Default + Send + Sync>(v: &[T], s: &[usize]) -> Vec<T> {
        let (i, h, w) = (s[1], s[2], s[3]);
        let per = i * h * w;
        let mut out = vec![T::default(); v.len()];
        out.par_chunks_mut(per.max(1)).zip(v.par_chunks(per.max(1))).for_each(|(dst, src)| {
            // Sequential writes; reads stride by h * w.
            for (p, row) in dst.chunks_mut(i.max(1)).enumerate() {
                for (c, d) in row.iter_mut().enumerate() {
                    *d = src[c * h * w + p];
                }
            }
        });
        out
    }
    if t.rank() != 4 {
        return None;
    }
    let s = t.shape.clone();
    let data = crate::map_data!(&t.data, v => permute(v, &s));
    Tensor::new(vec![s[0], s[2], s[3], s[1]], data).ok()
}

/// [`oihw_to_ohwi`] taking ownership: 1x1 kernels are the same bytes in both layouts, so
/// only the shape changes (no copy of ResNet-50's 14M 1x1 weights).
pub fn into_ohwi(t: Arc<Tensor>) -> Option<Tensor> {
    if t.rank() != 4 {
        return None;
    }
    let s = t.shape.clone();
    if s[2] * s[3] == 1 {
        let mut owned = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
        owned.shape = vec![s[0], 1, 1, s[1]];
        return Some(owned);
    }
    oihw_to_ohwi(&t)
}

/// `w` with every row (leading-axis slice) `r` multiplied by `scale[r]`, computed in f64
/// and rounded once to the weight's type; `None` for non-float tensors or rows of another
/// count.
pub fn scale_rows(w: &Tensor, scale: &[f64]) -> Option<Tensor> {
    if w.shape.first() != Some(&scale.len()) {
        return None;
    }
    let per = (w.len() / scale.len().max(1)).max(1);
    scale_elements(w, scale, |i| i / per)
}

/// `w` with every element of its last axis `j` multiplied by `scale[j]` (a GEMM's [K, N]
/// weights per output column), likewise.
pub fn scale_cols(w: &Tensor, scale: &[f64]) -> Option<Tensor> {
    if w.shape.last() != Some(&scale.len()) {
        return None;
    }
    scale_elements(w, scale, |i| i % scale.len())
}

/// `w` with element `i` (row-major) multiplied by `scale[at(i)]`. Parallel: ResNet-50 moves
/// 25M weights through here.
fn scale_elements(w: &Tensor, scale: &[f64], at: impl Fn(usize) -> usize + Sync) -> Option<Tensor> {
    use crate::ir::TensorData;
    use rayon::prelude::*;
    fn scaled<T: crate::ir::Element + Copy + Send + Sync>(
        v: &[T],
        scale: &[f64],
        at: &(impl Fn(usize) -> usize + Sync),
    ) -> Vec<T> {
        v.par_iter().enumerate().map(|(i, x)| T::from_f64(x.to_f64() * scale[at(i)])).collect()
    }
    let data = match &w.data {
        TensorData::F32(v) => TensorData::F32(scaled(v, scale, &at)),
        TensorData::F16(v) => TensorData::F16(scaled(v, scale, &at)),
        TensorData::BF16(v) => TensorData::BF16(scaled(v, scale, &at)),
        TensorData::F64(v) => TensorData::F64(scaled(v, scale, &at)),
        _ => return None,
    };
    Tensor::new(w.shape.clone(), data).ok()
}

/// `g` with every graph input's symbolic dims bound (unbound ones to 1) and shapes re-inferred.
pub fn bind_inputs(g: &Graph, bindings: &HashMap<String, usize>) -> Result<Graph> {
    let mut b = g.clone();
    for i in &g.inputs {
        if let Some(s) = bound_shape(g, i, bindings) {
            let dtype = g.types[i].dtype;
            b.types.insert(i.clone(), TensorType::new(dtype, Shape::from_static(&s)));
        }
    }
    let inputs: HashSet<&String> = g.inputs.iter().collect();
    let inits: HashSet<&String> = g.initializers.keys().collect();
    b.types.retain(|k, _| inputs.contains(k) || inits.contains(k));
    crate::ir::infer::infer_graph(&mut b, &HashMap::new())?;
    Ok(b)
}

/// A 2-D tensor transposed ([R, C] -> [C, R]), in parallel over output rows with blocked
/// reads: BERT-base moves 85M weights through here.
pub fn transpose_2d(t: &Tensor) -> Option<Tensor> {
    use rayon::prelude::*;
    fn tr<T: Copy + Default + Send + Sync>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
        let mut out = vec![T::default(); v.len()];
        const B: usize = 32;
        // Output row block [c0, c0 + B) x every input row.
        out.par_chunks_mut((B * rows).max(1)).enumerate().for_each(|(blk, dst)| {
            let c0 = blk * B;
            let cn = dst.len() / rows.max(1);
            for r0 in (0..rows).step_by(B) {
                for r in r0..(r0 + B).min(rows) {
                    let src = &v[r * cols + c0..r * cols + c0 + cn];
                    for (dc, x) in src.iter().enumerate() {
                        dst[dc * rows + r] = *x;
                    }
                }
            }
        });
        out
    }
    if t.rank() != 2 {
        return None;
    }
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let data = crate::map_data!(&t.data, v => tr(v, rows, cols));
    Tensor::new(vec![cols, rows], data).ok()
}

/// Whether `members` can become one node: no path leaves them through another node and
/// comes back (e.g. a region op feeding a GEMM whose output another region op reads).
pub fn convex(g: &Graph, members: &HashSet<String>) -> bool {
    let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for x in n.inputs.iter().flatten() {
            consumers.entry(x.as_str()).or_default().push(i);
        }
    }
    let next = |i: usize| -> Vec<usize> {
        g.nodes[i].outputs.iter().flat_map(|o| consumers.get(o.as_str()).into_iter().flatten().copied()).collect()
    };
    let inside = |i: usize| members.contains(&g.nodes[i].name);
    let mut stack: Vec<usize> =
        (0..g.nodes.len()).filter(|&i| inside(i)).flat_map(next).filter(|&i| !inside(i)).collect();
    let mut seen = HashSet::new();
    while let Some(i) = stack.pop() {
        if !seen.insert(i) {
            continue;
        }
        for c in next(i) {
            if inside(c) {
                return false;
            }
            stack.push(c);
        }
    }
    true
}
