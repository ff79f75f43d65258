//! Pass 3: alignment padding (Bolt section 3.2.3, Table 3). A channel / K / N size that is not
//! a multiple of the 128-bit vector width (8 f16 / bf16, 4 f32 elements) forces narrow, slow
//! memory accesses on the kernel. Weights are padded with zeros once, here; activations:
//! - output channels (N) are padded only when every reader is a kernel of ours that takes the
//!   padded tensor as its input: the producer writes the extra zero-weight channels itself
//!   ("fused" padding, no extra pass over memory);
//! - input channels (K) read from a producer that already padded are matched by padding the
//!   weight; otherwise a standalone zero-pad of the activation is inserted and its cost
//!   estimated.
//!
//! Grouped and depthwise convs, batched GEMMs and transposed A operands are left as they are.

use super::edit::{bound_shape, constant, consumers, finish, fresh_name, node};
use super::DeviceSpec;
use super::PlanOptions;
use crate::error::{Error, Result};
use crate::ir::{ConvLayout, Graph, Node, Op, Tensor};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum PaddedDim {
    /// GEMM K / conv input channels C.
    InputChannels,
    /// GEMM N / conv output channels K.
    OutputChannels,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum ActivationPadding {
    /// The producing kernel already writes the padded channels (zeros times zero weights).
    FusedIntoProducer { producer: String },
    /// A standalone zero-pad of the activation.
    Standalone { node: String, extra_bytes: usize, est_seconds: f64 },
    /// Output channels: the kernel writes them; readers take the padded tensor.
    WrittenByKernel,
}

/// One padding decision.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Padding {
    pub kernel: String,
    pub dim: PaddedDim,
    pub from: usize,
    pub to: usize,
    /// Zero bytes added to the weight (once, at plan time).
    pub weight_extra_bytes: usize,
    pub activation: ActivationPadding,
    /// Extra MMA work of the padded kernel, as a fraction of its work.
    pub extra_flops_fraction: f64,
}

/// Elements per 128-bit access.
pub fn vector_elements(elem_bytes: usize) -> usize {
    16 / elem_bytes.max(1)
}

fn round_up(x: usize, m: usize) -> usize {
    x.div_ceil(m) * m
}

/// Axes of a kernel's weight: (input-channel axis, output-channel axis), when Bolt pads it.
fn weight_axes(g: &Graph, n: &Node) -> Option<(usize, usize)> {
    let Op::Fused(k) = &n.op else { return None };
    let w = constant(g, n.input(1)?)?;
    // A 2-D weight is [K, N], or [N, K] when stored transposed (either by the model's transB
    // or by the planner).
    let gemm = |transposed: bool| Some(if transposed { (1, 0) } else { (0, 1) });
    match &*k.anchor {
        Op::Conv { group: 1, .. } if k.layout == ConvLayout::Nhwc => Some((3, 0)),
        Op::MatMul if w.rank() == 2 => gemm(k.weight_transposed),
        Op::Gemm { trans_a: false, trans_b, .. } if w.rank() == 2 => gemm(*trans_b != k.weight_transposed),
        _ => None,
    }
}

/// `t` zero-padded along `axis` to `to`.
pub fn pad_axis(t: &Tensor, axis: usize, to: usize) -> Option<Tensor> {
    let from = t.shape[axis];
    let outer: usize = t.shape[..axis].iter().product();
    let inner: usize = t.shape[axis + 1..].iter().product();
    let v = t.to_f64_vec();
    let mut out = vec![0.0; outer * to * inner];
    for o in 0..outer {
        let src = &v[o * from * inner..(o + 1) * from * inner];
        out[o * to * inner..o * to * inner + from * inner].copy_from_slice(src);
    }
    let mut shape = t.shape.clone();
    shape[axis] = to;
    Tensor::from_f64_as(t.dtype(), shape, &out)
}

pub fn pad(g: &mut Graph, opts: &PlanOptions) -> Result<Vec<Padding>> {
    let (mut decisions, padded) = pad_outputs(g)?;
    decisions.extend(pad_inputs(g, &padded, &opts.device, &opts.bindings)?);
    Ok(decisions)
}

fn elem_bytes(g: &Graph, t: &str) -> Option<usize> {
    g.types.get(t).and_then(|t| t.dtype.size_bytes())
}

/// Output channels, padded where every reader is one of our kernels taking it as input.
/// Returns the decisions and the padded tensors with their channel counts (types are not
/// re-inferred until the readers' weights match).
fn pad_outputs(g: &mut Graph) -> Result<(Vec<Padding>, HashMap<String, usize>)> {
    let old = g.clone();
    let cons = consumers(&old);
    let mut taken = HashSet::new();
    let mut decisions = Vec::new();
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut padded_channels = HashMap::new();
    for (i, n) in old.nodes.iter().enumerate() {
        let Some((_, out_axis)) = weight_axes(&old, n) else { continue };
        let Some(w) = constant(&old, n.input(1).expect("weight")) else { continue };
        let Some(elem) = elem_bytes(&old, &n.outputs[0]) else { continue };
        let (from, align) = (w.shape[out_axis], vector_elements(elem));
        let out = &n.outputs[0];
        let readers = cons.get(out).map(Vec::as_slice).unwrap_or(&[]);
        let all_kernels = !readers.is_empty()
            && !old.outputs.contains(out)
            && readers.iter().all(|&(j, k)| k == 0 && weight_axes(&old, &old.nodes[j]).is_some());
        if from % align == 0 || !all_kernels || n.input(3).is_some() {
            continue;
        }
        let to = round_up(from, align);
        let err = |e: &str| Error::node(n, format!("padding output channels {from} -> {to}: {e}"));
        let wp = pad_axis(&w, out_axis, to).ok_or_else(|| err("weight is not a float tensor"))?;
        let wname = fresh_name(&old, &mut taken, &format!("{}.padded", n.input(1).expect("weight")));
        g.initializers.insert(wname.clone(), Arc::new(wp));
        let mut inputs = n.inputs.clone();
        inputs[1] = Some(wname);
        if let Some(b) = n.input(2) {
            let bias = constant(&old, b).ok_or_else(|| err("bias is not constant"))?;
            let bname = fresh_name(&old, &mut taken, &format!("{b}.padded"));
            g.initializers.insert(bname.clone(), Arc::new(pad_axis(&bias, 0, to).ok_or_else(|| err("bias"))?));
            inputs[2] = Some(bname);
        }
        let padded = fresh_name(&old, &mut taken, &format!("{out}.padded"));
        renamed.insert(out.clone(), padded.clone());
        padded_channels.insert(padded.clone(), to);
        g.nodes[i].inputs = inputs;
        g.nodes[i].outputs[0] = padded;
        decisions.push(Padding {
            kernel: n.name.clone(),
            dim: PaddedDim::OutputChannels,
            from,
            to,
            weight_extra_bytes: (wp_len(&w, out_axis, to) - w.len()) * elem,
            activation: ActivationPadding::WrittenByKernel,
            extra_flops_fraction: (to - from) as f64 / from as f64,
        });
    }
    for n in &mut g.nodes {
        for x in n.inputs.iter_mut().flatten() {
            if let Some(p) = renamed.get(x.as_str()) {
                *x = p.clone();
            }
        }
    }
    Ok((decisions, padded_channels))
}

fn wp_len(w: &Tensor, axis: usize, to: usize) -> usize {
    w.len() / w.shape[axis] * to
}

/// Input channels: match a producer's padding, or pad the activation.
fn pad_inputs(
    g: &mut Graph,
    padded: &HashMap<String, usize>,
    dev: &DeviceSpec,
    bindings: &HashMap<String, usize>,
) -> Result<Vec<Padding>> {
    let old = g.clone();
    let producer: HashMap<&str, &Node> =
        old.nodes.iter().flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n))).collect();
    let mut taken = HashSet::new();
    let mut decisions = Vec::new();
    let mut pads: HashMap<(String, usize), String> = HashMap::new();
    let mut inserted = Vec::new();
    for (i, n) in old.nodes.iter().enumerate() {
        let Some((in_axis, _)) = weight_axes(&old, n) else { continue };
        let (a, wn) = (n.input(0).expect("A").to_string(), n.input(1).expect("weight").to_string());
        let Some(w) = constant(&old, &wn) else { continue };
        // The weight's own element type: pad_outputs may have renamed it to a padded
        // initializer whose type is not inferred yet.
        let Some(elem) = w.dtype().size_bytes() else { continue };
        let last = old.types.get(&a).and_then(|t| t.shape.as_ref()).and_then(|s| s.0.last()?.known());
        let Some(ca) = padded.get(&a).copied().or(last) else { continue };
        let (kw, align) = (w.shape[in_axis], vector_elements(elem));
        let err = |e: &str| Error::node(n, format!("padding input channels {kw}: {e}"));
        let (to, activation) = if ca > kw {
            let p = producer.get(a.as_str()).map_or(String::new(), |p| p.name.clone());
            (ca, ActivationPadding::FusedIntoProducer { producer: p })
        } else if kw % align != 0 {
            let to = round_up(kw, align);
            let key = (a.clone(), to);
            let padded = match pads.get(&key) {
                Some(p) => p.clone(),
                None => {
                    let p = fresh_name(&old, &mut taken, &format!("{a}.pad{to}"));
                    let name = fresh_name(&old, &mut taken, &format!("{a}.pad{to}.node"));
                    inserted.push(node(name, Op::FitLastAxis { to }, vec![Some(a.clone())], p.clone()));
                    pads.insert(key, p.clone());
                    p
                }
            };
            let elems = bound_shape(&old, &a, bindings).map_or(0, |s| s.iter().product::<usize>());
            let extra_bytes = elems / kw.max(1) * to * elem;
            // The pad kernel reads A and writes the padded copy; the consumer then reads
            // the padded copy instead of A.
            let est_seconds = bolt_profiler::analytic::copy_seconds((elems * elem + 2 * extra_bytes) as f64, dev);
            g.nodes[i].inputs[0] = Some(padded.clone());
            (to, ActivationPadding::Standalone { node: padded, extra_bytes, est_seconds })
        } else {
            continue;
        };
        let wp = pad_axis(&w, in_axis, to).ok_or_else(|| err("weight is not a float tensor"))?;
        let wname = fresh_name(&old, &mut taken, &format!("{wn}.kpad"));
        g.initializers.insert(wname.clone(), Arc::new(wp));
        g.nodes[i].inputs[1] = Some(wname);
        decisions.push(Padding {
            kernel: n.name.clone(),
            dim: PaddedDim::InputChannels,
            from: kw,
            to,
            weight_extra_bytes: (wp_len(&w, in_axis, to) - w.len()) * elem,
            activation,
            extra_flops_fraction: (to - kw) as f64 / kw as f64,
        });
    }
    g.nodes.extend(inserted);
    if !decisions.is_empty() {
        finish(g)?;
    }
    Ok(decisions)
}
