//! Pass 5: GEMM epilogues over whole rows (Bolt's epilogue fusion beyond element-wise ops). A
//! GEMM kernel whose only reader is a Softmax along the last axis can run as CUTLASS's
//! GemmSoftmax (example 35, [`bolt_codegen::spec::Family::GemmSoftmax`]): the GEMM's epilogue
//! also writes each row's partial max and sum of exponentials, so the softmax that follows
//! reads D once instead of once per phase of a stitched row reduction.
//!
//! The one cost model decides, arch-aware: unfused, the GEMM runs its best kernel for the
//! device (wgmma on Hopper) and the softmax a stitched kernel (three passes over each row:
//! max, sum, write); fused, GemmSoftmax is a CUTLASS 2.x (`mma.sync`) kernel, which on an
//! H100 runs through compute_80 PTX at the mma.sync rate, plus its two small kernels. Wide
//! rows and memory-bound GEMMs tend to pay; a compute-bound GEMM on Hopper does not.

use super::edit::{bound_shape, consumers, finish};
use super::PlanOptions;
use crate::error::Result;
use crate::ir::{DType, FusedKernel, Graph, Op, RowEpilogue};
use bolt_codegen::spec::{Arch, Family};
use serde::Serialize;
use std::sync::Arc;

/// Whether the planner folds a Softmax into the GEMM before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum RowEpilogueMode {
    /// Never: the softmax stays a stitched kernel.
    Off,
    /// Where the cost model says it pays.
    #[default]
    Cost,
    /// Wherever a kernel takes it, whatever the estimate (to time it against the unfused pair
    /// on a GPU, as Bolt's own results do to check the model).
    Always,
}

/// Fusing must win by this margin: the model is coarse (as for back-to-back chains).
pub const MIN_GAIN: f64 = super::b2b::MIN_GAIN;

/// Passes a stitched softmax makes over each row: the max, the sum of exponentials, the
/// normalised write.
const STITCHED_SOFTMAX_PASSES: u32 = 3;

/// One GEMM kernel read only by a last-axis Softmax, and what the planner decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowEpilogueDecision {
    /// The GEMM kernel node (after fusion it computes the softmax too).
    pub kernel: String,
    /// The Softmax node it would absorb.
    pub softmax: String,
    pub fused: bool,
    pub reason: String,
    /// Estimates: the GEMM's best kernel plus a stitched softmax, and GemmSoftmax.
    pub unfused_seconds: Option<f64>,
    pub fused_seconds: Option<f64>,
}

/// Finds GEMM kernels whose only reader is a Softmax over the last axis, decides each with
/// the analytic model on `opts.device` at `opts.bindings`, and folds the Softmax into the
/// kernels that pay ([`FusedKernel::row`]), or into every one that takes it under
/// [`RowEpilogueMode::Always`].
pub fn fuse_softmax(g: &mut Graph, opts: &PlanOptions) -> Result<Vec<RowEpilogueDecision>> {
    let readers = consumers(g);
    // Shapes under the bindings (symbolic inference leaves some dims unknown that static
    // inputs decide), made once when there is something to cost.
    let mut bound: Option<std::result::Result<Graph, String>> = None;
    let mut decisions = Vec::new();
    let mut folds: Vec<(usize, usize)> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let Op::Fused(k) = &n.op else { continue };
        if k.row.is_some() || matches!(*k.anchor, Op::Conv { .. }) {
            continue;
        }
        let Some(y) = n.outputs.first() else { continue };
        let Some(&[(s, 0)]) = readers.get(y).map(Vec::as_slice) else { continue };
        let Op::Softmax { axis } = g.nodes[s].op else { continue };
        let rank = g.types.get(y).and_then(|t| t.shape.as_ref()).map(|s| s.rank());
        let last_axis = rank.is_some_and(|r| axis == -1 || axis == r as i64 - 1);
        let mut d = RowEpilogueDecision {
            kernel: n.name.clone(),
            softmax: g.nodes[s].name.clone(),
            fused: false,
            reason: String::new(),
            unfused_seconds: None,
            fused_seconds: None,
        };
        if !last_axis {
            continue;
        }
        if g.outputs.contains(y) {
            d.reason = "the GEMM's own output is a model output: GemmSoftmax keeps it in its workspace".into();
            decisions.push(d);
            continue;
        }
        let bound = bound.get_or_insert_with(|| super::edit::bind_inputs(g, &opts.bindings).map_err(|e| e.to_string()));
        let costed = match bound {
            Ok(b) => costs(b, i, k, opts),
            Err(e) => Err(format!("the model's shapes do not bind at the cost dims: {e}")),
        };
        match costed {
            Err(why) => d.reason = why,
            Ok((unfused, fused)) => {
                d.unfused_seconds = Some(unfused);
                d.fused_seconds = Some(fused);
                let pays = unfused > fused * MIN_GAIN;
                d.fused = pays || opts.row_epilogue == RowEpilogueMode::Always;
                let verdict = match (pays, d.fused) {
                    (true, _) => "fused",
                    (false, true) => "fused as asked (the estimate says it does not pay)",
                    (false, false) => "does not pay",
                };
                d.reason = format!(
                    "{verdict}: est {:.1} us (best GEMM kernel + stitched softmax) vs {:.1} us (GemmSoftmax, mma.sync{})",
                    unfused * 1e6,
                    fused * 1e6,
                    if opts.device.arch == Arch::Sm90 { " via compute_80 PTX" } else { "" }
                );
                if d.fused {
                    folds.push((i, s));
                }
            }
        }
        decisions.push(d);
    }
    if folds.is_empty() {
        return Ok(decisions);
    }
    for &(i, s) in &folds {
        let Op::Fused(k) = &g.nodes[i].op else { unreachable!("chosen above") };
        let kernel = FusedKernel { row: Some(RowEpilogue::Softmax), ..(**k).clone() };
        g.nodes[i].op = Op::Fused(Arc::new(kernel));
        g.nodes[i].outputs = g.nodes[s].outputs.clone();
    }
    let gone: std::collections::HashSet<usize> = folds.iter().map(|&(_, s)| s).collect();
    let mut idx = 0;
    g.nodes.retain(|_| {
        idx += 1;
        !gone.contains(&(idx - 1))
    });
    finish(g)?;
    Ok(decisions)
}

/// (unfused, fused) estimated seconds of kernel node `i` followed by its softmax.
fn costs(g: &Graph, i: usize, k: &FusedKernel, opts: &PlanOptions) -> std::result::Result<(f64, f64), String> {
    let n = &g.nodes[i];
    let dev = &opts.device;
    let a = n.input(0).ok_or("the kernel has no input")?;
    let a_shape = bound_shape(g, a, &opts.bindings).ok_or_else(|| format!("'{a}' has an unknown shape"))?;
    let a_type = g.types.get(a).map(|t| t.dtype).ok_or("untyped input")?;
    let (plain, ..) =
        super::lower::lower_one(g, &n.name, k, (a_shape.clone(), a_type), (n.input(1), n.input(2)), &opts.bindings)?;
    if plain.family != Family::Gemm {
        return Err(format!("a {:?} kernel: GemmSoftmax takes one unbatched GEMM", plain.family));
    }
    let with_row = FusedKernel { row: Some(RowEpilogue::Softmax), ..k.clone() };
    let (fused, ..) =
        super::lower::lower_one(g, &n.name, &with_row, (a_shape, a_type), (n.input(1), n.input(2)), &opts.bindings)?;
    let best = |w, arch| bolt_profiler::analytic::rank(w, dev, arch).into_iter().next().map(|r| r.estimate.time_s);
    let gemm = best(&plain, dev.arch).ok_or("the GEMM has no kernel")?;
    let fused_s = best(&fused, Arch::Sm80).ok_or_else(|| {
        format!("no GemmSoftmax kernel takes it (N = {} must be a whole number of vectors)", fused.gemm_view().n)
    })?;
    let v = plain.gemm_view();
    let bytes = match k.output_dtype {
        DType::F16 | DType::BF16 => 2.0,
        _ => 4.0,
    };
    let softmax = bolt_profiler::analytic::stitched_rows_seconds(
        v.m as f64,
        v.n as f64,
        bytes,
        bytes,
        STITCHED_SOFTMAX_PASSES,
        dev,
    );
    Ok((gemm + softmax, fused_s))
}
