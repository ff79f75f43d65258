//! Pass 4: back-to-back fusion (Bolt section 3.1.1). GEMM -> GEMM and conv -> 1x1 conv chains
//! run as one persistent kernel whose intermediate activations never leave the threadblock:
//! in registers (RF-resident) or in shared memory.
//!
//! Threadblock residence: every layer has the same M (rows; N*P*Q for convs), so one
//! threadblock can own a row block through the whole chain if it holds all N columns of every
//! layer. Later convs must be 1x1, stride 1, no padding (so layer i+1's rows are layer i's
//! rows). Only the last layer may read a residual tensor. The chain is kept only when the one
//! cost model (the profiler's analytic model, [`bolt_profiler::analytic`]) says codegen's
//! fused kernel for it is faster than each layer's best single kernel. A fused kernel runs two
//! layers ([`MAX_CHAIN_LAYERS`]): longer chains are split into pairs.

use super::edit::{bound_shape, constant, finish};
use super::DeviceSpec;
use super::PlanOptions;
use crate::error::Result;
use crate::ir::{ConvLayout, DType, FusedKernel, Graph, Node, Op};
use bolt_profiler::analytic::Estimate;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The widest N a threadblock holds for every layer (codegen's rule: CUTLASS's fused examples
/// go to 256).
pub const MAX_RESIDENT_N: usize = bolt_codegen::b2b::MAX_RESIDENT_N as usize;
/// Fusing must win by this margin: the model is coarse.
pub const MIN_GAIN: f64 = 1.05;
/// Layers one fused kernel runs: CUTLASS's back-to-back mainloops chain two GEMMs / convs; a
/// longer chain is split into consecutive pairs, each decided on its own.
pub const MAX_CHAIN_LAYERS: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Residency {
    Registers,
    SharedMemory,
}

/// One GEMM-like layer of a candidate chain.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Layer {
    pub node: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Bytes of the A operand as stored (a conv reads its input tensor, not M x K).
    pub input_bytes: usize,
    pub weight_bytes: usize,
    pub output_bytes: usize,
    pub source_bytes: usize,
}

impl Layer {
    fn unfused_bytes(&self) -> usize {
        self.input_bytes + self.weight_bytes + self.output_bytes + self.source_bytes
    }
}

/// A candidate chain and what the planner decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChainDecision {
    pub layers: Vec<Layer>,
    pub fused: bool,
    /// The fused kernel codegen picked for a fused chain (its symbol), from
    /// `bolt_codegen::b2b::candidates`.
    pub kernel: Option<String>,
    pub residency: Option<Residency>,
    pub reason: String,
    /// Each layer's best single kernel by the analytic model (symbol) and its estimate.
    pub unfused: Vec<(String, Estimate)>,
    /// The analytic estimate of codegen's fused kernel.
    pub fused_estimate: Option<Estimate>,
    pub unfused_seconds: f64,
    pub fused_seconds: f64,
}

impl ChainDecision {
    pub fn names(&self) -> Vec<&str> {
        self.layers.iter().map(|l| l.node.as_str()).collect()
    }
}

fn kernel(n: &Node) -> Option<&FusedKernel> {
    match &n.op {
        Op::Fused(k) => Some(k),
        _ => None,
    }
}

#[derive(PartialEq)]
enum Family {
    Gemm,
    Conv,
}

fn family(k: &FusedKernel) -> Option<Family> {
    match &*k.anchor {
        Op::MatMul | Op::Gemm { trans_a: false, .. } => Some(Family::Gemm),
        Op::Conv { group: 1, .. } => Some(Family::Conv),
        _ => None,
    }
}

/// M, N, K and byte counts of a kernel node under `bindings`.
pub fn layer(g: &Graph, n: &Node, bindings: &HashMap<String, usize>) -> Option<Layer> {
    let k = kernel(n)?;
    let a = bound_shape(g, n.input(0)?, bindings)?;
    let w = bound_shape(g, n.input(1)?, bindings)?;
    let out = bound_shape(g, &n.outputs[0], bindings)?;
    let elem = g.types.get(&n.outputs[0])?.dtype.size_bytes()?.max(1);
    let count = |s: &[usize]| s.iter().product::<usize>();
    let (m, nn, kk) = match &*k.anchor {
        Op::Conv { .. } => {
            let (ch, spatial) = match k.layout {
                ConvLayout::Nhwc => (out[3], out[0] * out[1] * out[2]),
                ConvLayout::Nchw => (out[1], out[0] * out[2] * out[3]),
            };
            (spatial, ch, count(&w) / ch)
        }
        Op::Gemm { trans_b, .. } => {
            let (kk, nn) = if *trans_b != k.weight_transposed { (w[1], w[0]) } else { (w[0], w[1]) };
            (count(&out) / nn, nn, kk)
        }
        _ => {
            let nn = *out.last()?;
            (count(&out) / nn, nn, *a.last()?)
        }
    };
    Some(Layer {
        node: n.name.clone(),
        m,
        n: nn,
        k: kk,
        input_bytes: count(&a) * elem,
        weight_bytes: (count(&w) + n.input(2).map_or(0, |_| nn)) * elem,
        output_bytes: count(&out) * elem,
        source_bytes: n.input(3).map_or(0, |_| count(&out) * elem),
    })
}

/// Whether `y` may follow `x` in a chain: None when they are not a GEMM/GEMM or conv/conv
/// pair at all, Some(Err(reason)) when they are but a residence rule forbids it.
fn link(g: &Graph, x: &Node, y: &Node) -> Option<std::result::Result<(), String>> {
    let (kx, ky) = (kernel(x)?, kernel(y)?);
    let (fx, fy) = (family(kx)?, family(ky)?);
    if fx != fy || y.input(0) != Some(x.outputs[0].as_str()) {
        return None;
    }
    let dtype = g.types.get(&x.outputs[0]).map(|t| t.dtype);
    let pair = format!("{} -> {}", x.name, y.name);
    // CUTLASS's fused mainloops read every GEMM weight as an [N, K] array (column-major B)
    // and every conv as NHWC activations with OHWI weights; a layer stored otherwise would be
    // read transposed.
    let weight_layout = |n: &Node, k: &FusedKernel| -> std::result::Result<(), String> {
        let rank = n.input(1).and_then(|w| g.types.get(w)).and_then(|t| t.shape.as_ref()).map(|s| s.0.len());
        let ok = match &*k.anchor {
            Op::MatMul => k.weight_transposed && rank == Some(2),
            Op::Gemm { trans_b, .. } => *trans_b != k.weight_transposed && rank == Some(2),
            Op::Conv { .. } => k.layout == ConvLayout::Nhwc && rank == Some(4),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{pair}: {}'s weight is not stored as the fused kernel reads it (2-D [N, K] GEMM weights, OHWI conv weights with NHWC activations)",
                n.name
            ))
        }
    };
    let rule = if let Err(e) = weight_layout(x, kx).and_then(|()| weight_layout(y, ky)) {
        Err(e)
    } else if kx.source.is_some() {
        Err(format!("{pair}: {} adds a residual tensor; only the last layer of a chain may read one", x.name))
    } else if y.input(1).and_then(|w| constant(g, w)).is_none() {
        Err(format!("{pair}: {}'s weight is not constant", y.name))
    } else if let Op::Conv { window, .. } = &*ky.anchor {
        let ones = |v: &Option<Vec<usize>>| v.as_ref().is_none_or(|v| v.iter().all(|&s| s == 1));
        let zeros = window.pads.as_ref().is_none_or(|p| p.iter().all(|&p| p == 0));
        let w = y.input(1).and_then(|w| g.types.get(w)).and_then(|t| t.shape.as_ref()).and_then(|s| s.as_static());
        let one_by_one = w.is_some_and(|w| match ky.layout {
            ConvLayout::Nhwc => w[1] == 1 && w[2] == 1,
            ConvLayout::Nchw => w[2] == 1 && w[3] == 1,
        });
        if one_by_one
            && ones(&window.strides)
            && ones(&window.dilations)
            && zeros
            && window.auto_pad == crate::ir::AutoPad::NotSet
        {
            Ok(())
        } else {
            Err(format!("{pair}: later layers of a conv chain must be 1x1, stride 1, no padding"))
        }
    } else {
        Ok(())
    };
    Some(rule.and_then(|()| match dtype {
        Some(DType::F16 | DType::BF16) => Ok(()),
        other => Err(format!(
            "{pair}: back-to-back kernels are f16/bf16 (CUTLASS's fused tensor-core mainloops); this chain is {}",
            other.map_or("untyped".into(), |d| d.to_string())
        )),
    }))
}

/// Decides one chain of kernel nodes of `g`. Unfused, each layer runs its best single kernel
/// (wgmma on Hopper); fused, the chain is codegen's first candidate, a CUTLASS 2.x (`mma.sync`)
/// kernel: on Hopper, fusion must win back the wgmma rate too. Both sides are costed by the
/// profiler's analytic model on `dev`.
fn decide(g: &Graph, chain: &[usize], layers: Vec<Layer>, opts: &PlanOptions) -> ChainDecision {
    let dev = &opts.device;
    let names = layers.iter().map(|l| l.node.as_str()).collect::<Vec<_>>().join(" -> ");
    let mut d = ChainDecision {
        layers: layers.clone(),
        fused: false,
        kernel: None,
        residency: None,
        reason: String::new(),
        unfused: Vec::new(),
        fused_estimate: None,
        unfused_seconds: 0.0,
        fused_seconds: 0.0,
    };
    let fused = match fused_kernel(g, chain, &opts.bindings) {
        Ok(f) => f,
        Err(why) => {
            d.reason = format!("{names}: no fused kernel: {why}");
            return d;
        }
    };
    for &i in chain {
        match best_single_kernel(g, &g.nodes[i], &opts.bindings, dev) {
            Ok(k) => d.unfused.push(k),
            Err(why) => {
                d.reason = format!("{names}: {} has no single kernel to compare with: {why}", g.nodes[i].name);
                return d;
            }
        }
    }
    let estimate = bolt_profiler::analytic::estimate_b2b(&fused.0, &fused.1, dev);
    let unfused_s: f64 = d.unfused.iter().map(|(_, e)| e.time_s).sum();
    let fused_s = estimate.time_s;
    let mb = |b: f64| b / 1e6;
    let unfused_mb = mb(layers.iter().map(Layer::unfused_bytes).sum::<usize>() as f64);
    let detail = format!(
        "{unfused_mb:.1} MB -> {:.1} MB DRAM traffic, {} threadblocks on {} SMs, est {:.1} us unfused vs {:.1} us fused ({:.2}x)",
        mb(estimate.dram_bytes),
        estimate.tiles,
        dev.sm_count,
        unfused_s * 1e6,
        fused_s * 1e6,
        unfused_s / fused_s
    );
    let residency = match fused.0.residency {
        bolt_codegen::b2b::Residency::Registers => Residency::Registers,
        bolt_codegen::b2b::Residency::SharedMemory => Residency::SharedMemory,
    };
    d.fused = unfused_s > fused_s * MIN_GAIN;
    d.reason = if d.fused {
        format!("{names}: {residency:?}-resident: {detail}")
    } else if (estimate.tiles as f64) < dev.sm_count as f64 {
        format!("{names}: too few row blocks to fill the GPU: {detail}")
    } else {
        format!("{names}: does not pay: {detail}")
    };
    if d.fused {
        d.kernel = Some(bolt_codegen::b2b::symbol_for(&fused.0));
        d.residency = Some(residency);
    }
    d.fused_estimate = Some(estimate);
    d.unfused_seconds = unfused_s;
    d.fused_seconds = fused_s;
    d
}

/// The analytic model's best single kernel for kernel node `n` on `dev`'s arch: its symbol
/// and estimate (what the profiler would pick without timing).
fn best_single_kernel(
    g: &Graph,
    n: &Node,
    bindings: &HashMap<String, usize>,
    dev: &DeviceSpec,
) -> std::result::Result<(String, Estimate), String> {
    let k = kernel(n).ok_or("not a kernel node")?;
    let a = n.input(0).ok_or("no input")?;
    let a_shape = bound_shape(g, a, bindings).ok_or_else(|| format!("'{a}' has an unknown shape"))?;
    let a_type = g.types.get(a).map(|t| t.dtype).ok_or("untyped input")?;
    let (workload, ..) = super::lower::lower_one(g, &n.name, k, (a_shape, a_type), (n.input(1), n.input(2)), bindings)?;
    let best = bolt_profiler::analytic::rank(&workload, dev, dev.arch).into_iter().next().ok_or("no candidate")?;
    Ok((bolt_codegen::render::symbol_for(&best.spec), best.estimate))
}

/// Finds chains among the kernel nodes of `g`, decides each, and rewrites the fused ones
/// into [`Op::FusedChain`] nodes. Returns every decision, rejected links included (their
/// reasons are model hints).
pub fn fuse_chains(g: &mut Graph, opts: &PlanOptions) -> Result<Vec<ChainDecision>> {
    let producers: HashMap<&str, usize> =
        g.nodes.iter().enumerate().flat_map(|(i, n)| n.outputs.iter().map(move |o| (o.as_str(), i))).collect();
    let cons = super::edit::consumers(g);
    // next[i] = j when j may follow i.
    let mut next: HashMap<usize, usize> = HashMap::new();
    let mut has_prev: HashSet<usize> = HashSet::new();
    let mut decisions = Vec::new();
    for (j, y) in g.nodes.iter().enumerate() {
        let Some(&i) = y.input(0).and_then(|a| producers.get(a)) else { continue };
        let x = &g.nodes[i];
        let only_reader = cons.get(&x.outputs[0]).is_some_and(|c| c.len() == 1) && !g.outputs.contains(&x.outputs[0]);
        // A layer wider than a threadblock holds ends the chain there.
        let verdict = link(g, x, y).map(|r| {
            r.and_then(|()| {
                let wide = [x, y].into_iter().find_map(|n| {
                    layer(g, n, &opts.bindings).filter(|l| l.n > MAX_RESIDENT_N).map(|l| (n.name.clone(), l.n))
                });
                match wide {
                    Some((name, n)) => Err(format!(
                        "{} -> {}: {name} has N = {n}; one threadblock must hold all N columns of every layer (at most {MAX_RESIDENT_N})",
                        x.name, y.name
                    )),
                    None => Ok(()),
                }
            })
        });
        match verdict {
            Some(Ok(())) if only_reader => {
                next.insert(i, j);
                has_prev.insert(j);
            }
            Some(Ok(())) => {}
            Some(Err(reason)) => {
                let layers = [x, y].iter().filter_map(|n| layer(g, n, &opts.bindings)).collect();
                decisions.push(ChainDecision {
                    layers,
                    fused: false,
                    kernel: None,
                    residency: None,
                    reason,
                    unfused: Vec::new(),
                    fused_estimate: None,
                    unfused_seconds: 0.0,
                    fused_seconds: 0.0,
                });
            }
            None => {}
        }
    }
    let mut replace: HashMap<usize, Node> = HashMap::new();
    let mut removed: HashSet<usize> = HashSet::new();
    for start in 0..g.nodes.len() {
        if has_prev.contains(&start) || !next.contains_key(&start) {
            continue;
        }
        let mut whole = vec![start];
        while let Some(&j) = next.get(whole.last().expect("non-empty")) {
            whole.push(j);
        }
        for chain in whole.chunks(MAX_CHAIN_LAYERS).filter(|c| c.len() > 1) {
            let Some(layers) = chain.iter().map(|&i| layer(g, &g.nodes[i], &opts.bindings)).collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let d = decide(g, chain, layers, opts);
            if d.fused {
                let nodes: Vec<&Node> = chain.iter().map(|&i| &g.nodes[i]).collect();
                let mut inputs = vec![nodes[0].inputs[0].clone()];
                for n in &nodes {
                    inputs.push(n.inputs.get(1).cloned().flatten());
                    inputs.push(n.inputs.get(2).cloned().flatten());
                }
                inputs.push(nodes.last().expect("non-empty").inputs.get(3).cloned().flatten());
                let layers: Vec<FusedKernel> = nodes.iter().map(|n| kernel(n).expect("kernel").clone()).collect();
                let last = *chain.last().expect("non-empty");
                replace.insert(
                    last,
                    Node {
                        name: format!("b2b[{}]", d.names().join(",")),
                        op: Op::FusedChain(Arc::new(layers)),
                        inputs,
                        outputs: g.nodes[last].outputs.clone(),
                    },
                );
                removed.extend(chain);
            }
            decisions.push(d);
        }
    }
    if !replace.is_empty() {
        let nodes = std::mem::take(&mut g.nodes);
        g.nodes = nodes
            .into_iter()
            .enumerate()
            .filter_map(|(i, n)| replace.remove(&i).or_else(|| (!removed.contains(&i)).then_some(n)))
            .collect();
        finish(g)?;
    }
    Ok(decisions)
}

/// The fused kernel codegen offers for the chain of kernel nodes `chain` (its first candidate)
/// with codegen's cost numbers for it, or why there is none.
fn fused_kernel(
    g: &Graph,
    chain: &[usize],
    bindings: &HashMap<String, usize>,
) -> std::result::Result<(bolt_codegen::b2b::B2bSpec, bolt_codegen::b2b::B2bCost), String> {
    use bolt_codegen::b2b::{self as cg, B2bFamily, B2bProblem};
    use bolt_codegen::spec::{Element, Types};
    let nodes: Vec<&Node> = chain.iter().map(|&i| &g.nodes[i]).collect();
    let kernels: Vec<&FusedKernel> = nodes.iter().filter_map(|n| kernel(n)).collect();
    let elem = |d: DType| match d {
        DType::F16 => Ok(Element::F16),
        DType::BF16 => Ok(Element::BF16),
        d => Err(format!("{d} chains have no fused kernel")),
    };
    let a = nodes[0].input(0).ok_or("no input")?;
    let dtype = g.types.get(a).map(|t| t.dtype).ok_or("untyped input")?;
    let input = elem(dtype)?;
    let output = elem(kernels.last().ok_or("empty chain")?.output_dtype)?;
    let types = Types { input, accumulator: Element::F32, output };
    let epilogues = nodes
        .iter()
        .zip(&kernels)
        .map(|(n, k)| super::lower::epilogue(k, n.input(2).is_some()).map(|(e, _, _)| e))
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let shapes = nodes
        .iter()
        .map(|n| layer(g, n, bindings).ok_or("unknown shapes"))
        .collect::<std::result::Result<Vec<Layer>, _>>()?;
    let (family, problem) = match &*kernels[0].anchor {
        Op::Conv { window, .. } => {
            let a = bound_shape(g, a, bindings).ok_or("unknown input shape")?;
            let w = bound_shape(g, nodes[0].input(1).ok_or("no weight")?, bindings).ok_or("unknown weight shape")?;
            if kernels[0].layout != ConvLayout::Nhwc {
                return Err("NCHW conv chains have no fused kernel (plan with the layout pass)".into());
            }
            let first = super::lower::conv2d_problem(&a, &w, window, 1)?;
            let ks: Vec<i32> = shapes[1..].iter().map(|l| l.n as i32).collect();
            (B2bFamily::Conv2dFprop, B2bProblem::conv(first, &ks))
        }
        _ => {
            let ns: Vec<i64> = shapes.iter().map(|l| l.n as i64).collect();
            (B2bFamily::Gemm, B2bProblem::gemm(shapes[0].m as i64, shapes[0].k as i64, &ns))
        }
    };
    let c = cg::candidates(family, types, &problem, &epilogues).map_err(|e| e.to_string())?;
    c.specs.into_iter().next().ok_or_else(|| "no candidate".to_string())
}
