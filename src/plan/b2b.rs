//! Pass 4: back-to-back fusion (Bolt section 3.1.1). GEMM -> GEMM and conv -> 1x1 conv chains
//! run as one persistent kernel whose intermediate activations never leave the threadblock:
//! in registers (RF-resident) or in shared memory.
//!
//! Threadblock residence: every layer has the same M (rows; N*P*Q for convs), so one
//! threadblock can own a row block through the whole chain if it holds all N columns of every
//! layer. Later convs must be 1x1, stride 1, no padding (so layer i+1's rows are layer i's
//! rows). Only the last layer may read a residual tensor. The chain is kept only when the
//! traffic model ([`super::cost`]) says it is faster than the layers run one by one. A fused
//! kernel runs two layers ([`MAX_CHAIN_LAYERS`]): longer chains are split into pairs.

use super::cost::{ceil_div, DeviceSpec, KernelWork, Mma};
use super::edit::{bound_shape, constant, finish};
use super::PlanOptions;
use crate::error::Result;
use crate::ir::{ConvLayout, DType, FusedKernel, Graph, Node, Op};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The widest N a threadblock holds for every layer (CUTLASS's fused examples go to 256).
pub const MAX_RESIDENT_N: usize = 256;
/// Registers hold the whole warp tile row of each layer up to this N (warp N = threadblock N
/// = layer N; 16-row warps keep N/2 f32 accumulators per thread, 64 registers at N = 128).
pub const MAX_REGISTER_RESIDENT_N: usize = 128;
/// Threadblock rows of a fused kernel (as in CUTLASS's examples/13_two_tensor_op_fusion).
pub const FUSED_TB_M: usize = 64;
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
    fn flops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64
    }

    /// The layer as its own kernel: 128 x 128 tiles (two per SM) when they fill the GPU,
    /// else 64 x 64 (four per SM), as a tuned library would pick, on the arch's native
    /// tensor-core instructions (wgmma on Hopper).
    fn alone(&self, dev: &DeviceSpec) -> KernelWork {
        let large = ceil_div(self.m, 128) * ceil_div(self.n, 128);
        let (threadblocks, threadblocks_per_sm) =
            if large >= sms(dev) { (large, 2) } else { (ceil_div(self.m, 64) * ceil_div(self.n, 64), 4) };
        KernelWork {
            bytes: (self.input_bytes + self.weight_bytes + self.output_bytes + self.source_bytes) as f64,
            flops: self.flops(),
            threadblocks,
            threadblocks_per_sm,
            mma: Mma::native(dev),
        }
    }
}

fn sms(dev: &DeviceSpec) -> usize {
    dev.sm_count as usize
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
    pub unfused: Option<KernelWork>,
    pub fused_work: Option<KernelWork>,
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

/// Decides one maximal chain.
/// Unfused, each layer is its own kernel on the arch's native instructions; fused, the chain is
/// one CUTLASS 2.x (`mma.sync`) kernel: on Hopper, fusion must win back the wgmma rate too.
pub fn decide(layers: Vec<Layer>, dev: &DeviceSpec) -> ChainDecision {
    let names = layers.iter().map(|l| l.node.as_str()).collect::<Vec<_>>().join(" -> ");
    let mut d = ChainDecision {
        layers: layers.clone(),
        fused: false,
        kernel: None,
        residency: None,
        reason: String::new(),
        unfused: None,
        fused_work: None,
        unfused_seconds: 0.0,
        fused_seconds: 0.0,
    };
    if let Some(wide) = layers.iter().find(|l| l.n > MAX_RESIDENT_N) {
        d.reason = format!(
            "{names}: {} has N = {}; one threadblock must hold all N columns of every layer (at most {MAX_RESIDENT_N})",
            wide.node, wide.n
        );
        return d;
    }
    let residency = if layers.iter().all(|l| l.n <= MAX_REGISTER_RESIDENT_N) {
        Residency::Registers
    } else {
        Residency::SharedMemory
    };
    let first = &layers[0];
    let last = layers.last().expect("a chain has layers");
    let unfused = KernelWork {
        bytes: layers.iter().map(|l| l.alone(dev).bytes).sum(),
        flops: layers.iter().map(Layer::flops).sum(),
        threadblocks: first.alone(dev).threadblocks,
        threadblocks_per_sm: 2,
        mma: Mma::native(dev),
    };
    let unfused_s: f64 = layers.iter().map(|l| l.alone(dev).seconds(dev)).sum();
    let fused = KernelWork {
        bytes: (first.input_bytes
            + layers.iter().map(|l| l.weight_bytes).sum::<usize>()
            + last.output_bytes
            + last.source_bytes) as f64,
        flops: unfused.flops,
        threadblocks: ceil_div(first.m, FUSED_TB_M),
        threadblocks_per_sm: 1,
        mma: Mma::Sync,
    };
    let fused_s = fused.seconds(dev);
    let mb = |b: f64| b / 1e6;
    let detail = format!(
        "{:.1} MB -> {:.1} MB DRAM traffic, {} threadblocks on {} SMs, est {:.1} us unfused vs {:.1} us fused ({:.2}x)",
        mb(unfused.bytes),
        mb(fused.bytes),
        fused.threadblocks,
        dev.sm_count,
        unfused_s * 1e6,
        fused_s * 1e6,
        unfused_s / fused_s
    );
    d.fused = unfused_s > fused_s * MIN_GAIN;
    d.reason = if d.fused {
        format!("{names}: {residency:?}-resident: {detail}")
    } else if fused.threadblocks < sms(dev) {
        format!("{names}: too few row blocks to fill the GPU: {detail}")
    } else {
        format!("{names}: does not pay: {detail}")
    };
    d.residency = d.fused.then_some(residency);
    d.unfused = Some(unfused);
    d.fused_work = Some(fused);
    d.unfused_seconds = unfused_s;
    d.fused_seconds = fused_s;
    d
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
                    unfused: None,
                    fused_work: None,
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
            let mut d = decide(layers, &opts.device);
            if d.fused {
                // The traffic model says fuse: codegen must have a kernel for it.
                match fused_kernel(g, chain, &opts.bindings) {
                    Ok((symbol, residency)) => {
                        d.kernel = Some(symbol);
                        d.residency = Some(residency);
                    }
                    Err(why) => {
                        d.fused = false;
                        d.residency = None;
                        d.reason = format!("{}: no fused kernel: {why}", d.names().join(" -> "));
                    }
                }
            }
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

/// The fused kernel codegen offers for the chain of kernel nodes `chain`: its symbol and
/// residency, or why there is none.
fn fused_kernel(
    g: &Graph,
    chain: &[usize],
    bindings: &HashMap<String, usize>,
) -> std::result::Result<(String, Residency), String> {
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
    let (spec, _) = c.specs.first().ok_or("no candidate")?;
    let residency = match spec.residency {
        cg::Residency::Registers => Residency::Registers,
        cg::Residency::SharedMemory => Residency::SharedMemory,
    };
    Ok((cg::symbol_for(spec), residency))
}
