//! The `bolt compile` driver. Today: import, validate, run the reference, summarise what the
//! later stages (partition, plan, codegen) will take. Each stage extends this file's pipeline.

use crate::error::{Error, Result};
use crate::ir::{DType, Dim, Graph, Op, Tensor};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::HashMap;
use std::time::Instant;

/// Sizes for symbolic dims (`--dim N=8`); unnamed and unbound dims default to 1.
pub type DimBindings = HashMap<String, usize>;

/// Concrete shape of a declared input under the bindings.
pub fn bind_shape(dims: &[Dim], bindings: &DimBindings) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Known(n) => *n,
            Dim::Sym(s) => bindings.get(s).copied().unwrap_or(1),
            Dim::Unknown => 1,
        })
        .collect()
}

/// `g` specialised to one size per symbolic dim (`bolt compile --static`, TensorRT's static
/// shapes): every symbolic dim of its inputs fixed at `sizes`, types inferred again, so what
/// depends on the sizes only (PyTorch's `squeeze(dim)` Ifs, shape arithmetic) folds when
/// planning. The result declares static inputs: other sizes are refused when it runs. A dim
/// `sizes` lacks is an error naming it and the input.
pub fn specialize(g: &Graph, sizes: &DimBindings) -> Result<Graph> {
    for name in &g.inputs {
        let Some(shape) = g.types.get(name).and_then(|t| t.shape.as_ref()) else { continue };
        for (axis, d) in shape.0.iter().enumerate() {
            let missing = match d {
                crate::ir::Dim::Sym(s) if !sizes.contains_key(s) => Some(format!("symbolic dim '{s}'")),
                crate::ir::Dim::Unknown => Some("a dim of unknown size".to_string()),
                _ => None,
            };
            if let Some(what) = missing {
                return Err(crate::Error::Model(format!(
                    "static shapes: input '{name}' axis {axis} is {what} with no size: give it with --dim NAME=SIZE \
                     or --inputs"
                )));
            }
        }
    }
    crate::plan::edit::bind_inputs(g, sizes)
}

/// `g` with the inputs in `values` fixed to constants (`--bind NAME=V[,V...]`, as TVM's
/// `bind_params` and onnx-simplifier's input overwrites do): what depends on them only (an
/// `If` on a sample rate, shape arithmetic) folds when planning. A value is a number (`true`
/// / `false` for bools) filling the input's static shape, or one number per element.
pub fn bind_input_values(g: &Graph, values: &std::collections::BTreeMap<String, String>) -> Result<Graph> {
    let mut out = g.clone();
    if values.is_empty() {
        return Ok(out);
    }
    for (name, text) in values {
        if !g.inputs.contains(name) {
            return Err(Error::tensor(
                name,
                format!("--bind: not an input of the model (its inputs: {})", g.inputs.join(", ")),
            ));
        }
        let ty = g.types.get(name).ok_or_else(|| Error::tensor(name, "--bind: the input has no type"))?;
        let shape = ty
            .shape
            .as_ref()
            .and_then(|s| s.as_static())
            .ok_or_else(|| Error::tensor(name, format!("--bind: the input's shape {ty} is not static")))?;
        let parsed: std::result::Result<Vec<f64>, String> = text
            .split(',')
            .map(|v| match v.trim() {
                "true" => Ok(1.0),
                "false" => Ok(0.0),
                v => v.parse::<f64>().map_err(|_| format!("--bind: '{v}' is not a number")),
            })
            .collect();
        let mut vals = parsed.map_err(|r| Error::tensor(name, r))?;
        let n: usize = shape.iter().product();
        if vals.len() == 1 {
            vals = vec![vals[0]; n];
        }
        if vals.len() != n {
            return Err(Error::tensor(
                name,
                format!("--bind: {} values for an input of {ty} ({n} elements)", vals.len()),
            ));
        }
        let t = Tensor::from_f64_as(ty.dtype, shape, &vals)
            .ok_or_else(|| Error::tensor(name, format!("--bind: inputs of type {} cannot be bound", ty.dtype)))?;
        out.inputs.retain(|x| x != name);
        out.initializers.insert(name.clone(), std::sync::Arc::new(t));
    }
    let declared = out.types.clone();
    crate::ir::infer::infer_graph(&mut out, &declared)?;
    Ok(out)
}

/// Seeded inputs for every graph input: uniform [-1, 1) for floats, ones (true) otherwise: a
/// valid token id, and an attention mask that keeps every key (zeros would mask them all and
/// leave the scores to the rounding of the mask's -1e4, which no two evaluation orders agree on).
pub fn synthetic_inputs(g: &Graph, bindings: &DimBindings, seed: u64) -> Result<HashMap<String, Tensor>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = HashMap::new();
    for name in &g.inputs {
        let ty = g.types.get(name).ok_or_else(|| {
            Error::tensor(
                name,
                "graph input is no tensor (a sequence, optional or map): Bolt's runtime takes tensors; \
                 run the model through ONNX Runtime with Bolt's provider, which leaves it to ORT",
            )
        })?;
        let shape = ty.shape.as_ref().ok_or_else(|| Error::tensor(name, "graph input has no shape"))?;
        let dims = bind_shape(&shape.0, bindings);
        let n: usize = dims.iter().product();
        let vals: Vec<f64> =
            if ty.dtype.is_float() { (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect() } else { vec![1.0; n] };
        let t = Tensor::from_f64_as(ty.dtype, dims, &vals)
            .ok_or_else(|| Error::tensor(name, format!("graph input of type {} cannot be synthesised", ty.dtype)))?;
        out.insert(name.clone(), t);
    }
    Ok(out)
}

/// Floating-point operations of a GEMM/Conv anchor under the bindings (None if not one).
pub fn anchor_flops(g: &Graph, node: &crate::ir::Node, bindings: &DimBindings) -> Option<f64> {
    let shape = |i: usize| -> Option<Vec<usize>> {
        let s = g.types.get(node.input(i)?)?.shape.as_ref()?;
        Some(bind_shape(&s.0, bindings))
    };
    let out = {
        let s = g.types.get(&node.outputs[0])?.shape.as_ref()?;
        bind_shape(&s.0, bindings)
    };
    let out_elems: usize = out.iter().product();
    match &node.op {
        Op::MatMul => {
            let a = shape(0)?;
            Some(2.0 * out_elems as f64 * *a.last()? as f64)
        }
        Op::Gemm { trans_a, .. } => {
            let a = shape(0)?;
            let k = if *trans_a { a[0] } else { a[1] };
            Some(2.0 * out_elems as f64 * k as f64)
        }
        Op::Conv { .. } => {
            let w = shape(1)?;
            let per_out: usize = w[1..].iter().product();
            Some(2.0 * out_elems as f64 * per_out as f64)
        }
        _ => None,
    }
}

/// What `bolt compile` reports.
#[derive(Debug, serde::Serialize)]
pub struct Summary {
    pub model: String,
    pub opset: i64,
    pub nodes: usize,
    pub ops: Vec<(String, usize)>,
    pub inputs: Vec<(String, String)>,
    pub outputs: Vec<(String, String)>,
    /// GEMM/Conv anchors the partitioner will build kernels around.
    pub anchors: Vec<Anchor>,
    /// Nodes left to the host framework (node, op type, reason).
    pub opaque: Vec<(String, String, String)>,
    pub plan: Option<PlanSummary>,
    pub reference: Option<ReferenceRun>,
}

/// What the planner made of the model (`bolt report` has the details) and the kernel the
/// analytic model picks for each distinct workload (H100, sm90; `bolt-tune` times them).
#[derive(Debug, serde::Serialize)]
pub struct PlanSummary {
    pub milliseconds: f64,
    pub planned_nodes: usize,
    pub kernels: usize,
    pub chains_fused: usize,
    pub layout_transforms: usize,
    pub paddings: usize,
    /// (kernel, problem, analytic pick or why none).
    pub picks: Vec<(String, String, String)>,
    pub not_lowered: Vec<(String, String)>,
    /// Max abs difference between the planned and the original graph on the reference run.
    pub max_abs_diff: Option<f64>,
    /// Outputs where the planned graph differs from the model beyond [`plan_tolerance`]:
    /// (output, what differs). A plan must compute what the model does, so `bolt compile`
    /// fails when this is not empty.
    pub mismatches: Vec<(String, String)>,
}

/// How far the planned graph may differ from the model on the reference executor: folding
/// changes the rounding order (weights scaled before the GEMM, bias terms summed first), and
/// an f16/bf16 kernel rounds once where the model rounds after every op. The absolute part
/// scales with the output's magnitude.
pub fn plan_tolerance(dtype: DType, max_abs: f64) -> crate::cases::Tolerance {
    let (rtol, atol) = match dtype {
        DType::F16 => (1e-2, 1e-2),
        DType::BF16 => (4e-2, 4e-2),
        _ => (1e-3, 1e-4),
    };
    crate::cases::Tolerance { rtol, atol: atol * max_abs.max(1.0) }
}

/// One partition: a GEMM/Conv anchor and the epilogue ops fused into its kernel.
#[derive(Debug, serde::Serialize)]
pub struct Anchor {
    pub node: String,
    pub op_type: String,
    pub output_type: String,
    pub gflops: Option<f64>,
    /// The epilogue as the expression it computes, e.g. `relu(acc + bias + C)`.
    pub epilogue: String,
    pub fused_nodes: usize,
}

/// The epilogue as the expression its kernel computes, e.g. `relu(0.125*acc + bias) + residual`.
pub fn describe(e: &crate::partition::FusedEpilogue) -> String {
    e.to_string()
}

#[derive(Debug, serde::Serialize)]
pub struct ReferenceRun {
    pub bindings: DimBindings,
    pub seconds: f64,
    pub outputs: Vec<(String, Vec<usize>, f64, f64)>,
}

/// The kernel picked for one workload on one arch, and how.
#[derive(Clone, Debug)]
pub struct Pick {
    pub spec: bolt_codegen::spec::KernelSpec,
    /// Candidate name, e.g. `sm90_128x256x64_c2x1_coop_tma`.
    pub name: String,
    /// `tuning db, Measured 12.3 us` or `est 12.3 us`.
    pub how: String,
}

/// The kernel for `w` on `arch`: the tuning database's entry when `db` has one (measured or
/// analytic, as `bolt-tune` stored it), else the analytic model's top pick; `Err` says why
/// there is none.
pub fn pick_kernel(
    w: &bolt_profiler::workload::Workload,
    arch: bolt_codegen::spec::Arch,
    db: Option<&bolt_profiler::db::Db>,
) -> std::result::Result<Pick, String> {
    let device = bolt_profiler::device::DeviceSpec::for_arch(arch);
    // GemmSoftmax is a CUTLASS 2.x kernel only: a Hopper GPU runs its sm80 build, ranked with
    // the Hopper's numbers.
    let arch = if w.family == bolt_codegen::spec::Family::GemmSoftmax { bolt_codegen::spec::Arch::Sm80 } else { arch };
    let toolchain = bolt_profiler::db::Toolchain::pinned();
    // The tuning database's entry for `arch`, else the analytic model's top pick.
    let pick_for = |arch: bolt_codegen::spec::Arch| -> std::result::Result<Pick, String> {
        if let Some(e) = db.and_then(|db| db.lookup(w, &device, arch, &toolchain)) {
            let spec = bolt_codegen::spec::KernelSpec {
                family: w.family,
                arch,
                types: w.types,
                layouts: w.layouts,
                alignment: w.alignment,
                tile: e.tile,
                epilogue: w.epilogue.clone(),
            };
            let how = format!("tuning db, {:?} {:.1} us", e.source, e.time_s * 1e6);
            return Ok(Pick { spec, name: e.best.clone(), how });
        }
        let r = bolt_profiler::analytic::rank_all(w, &device, arch);
        match r.ranked.first() {
            Some(best) => Ok(Pick {
                spec: best.spec.clone(),
                name: best.candidate.name.clone(),
                how: format!("est {:.1} us", best.estimate.time_s * 1e6),
            }),
            None => Err(r.excluded.first().map_or("none".to_string(), |e| e.reason.clone())),
        }
    };
    match pick_for(arch) {
        Ok(p) => Ok(p),
        // What CUTLASS 3.x has no Hopper kernel for (depthwise and grouped convs, unaligned
        // operands) an H100 runs as an sm80 kernel (built as sm_90 SASS for it), ranked with
        // the Hopper's numbers: on the GPU, not on the host.
        Err(why) if arch == bolt_codegen::spec::Arch::Sm90 => match pick_for(bolt_codegen::spec::Arch::Sm80) {
            Ok(p) => Ok(Pick { how: format!("{}; sm80 kernel: {why}", p.how), ..p }),
            Err(_) => Err(format!("no candidate: {why}")),
        },
        Err(why) => Err(format!("no candidate: {why}")),
    }
}

/// The kernel for each distinct workload on H100 (sm90) by [`pick_kernel`]. Returns (kernel
/// node, problem, pick) per distinct problem.
pub fn kernel_picks(
    uses: &[crate::plan::lower::KernelUse],
    db: Option<&bolt_profiler::db::Db>,
) -> Vec<(String, String, String)> {
    let mut picks: Vec<(String, String, String)> = Vec::new();
    for u in uses {
        let problem = u.workload.describe();
        if picks.iter().any(|(_, p, _)| *p == problem) {
            continue;
        }
        let pick = match pick_kernel(&u.workload, bolt_codegen::spec::Arch::Sm90, db) {
            Ok(p) => format!("{} ({})", p.name, p.how),
            Err(why) => why,
        };
        picks.push((u.node.clone(), problem, pick));
    }
    picks
}

/// Summarises `g` and, when `run` is set, executes it once with the reference executor.
/// What `bolt compile`'s reference run computes on.
#[derive(Clone, Copy)]
pub enum RunOn<'a> {
    Skip,
    /// Seeded inputs ([`synthetic_inputs`]).
    Synthetic,
    /// The caller's (`--inputs`): models valid only for some values (a sample rate, token ids
    /// in range) need real ones.
    Inputs(&'a HashMap<String, Tensor>),
}

pub fn summarize(g: &Graph, bindings: &DimBindings, run: RunOn) -> Result<Summary> {
    let ty = |n: &str| g.types.get(n).map(|t| t.to_string()).unwrap_or_else(|| "?".into());
    let parts = crate::partition::partition(g);
    let by_name: HashMap<&str, &crate::ir::Node> = g.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let anchors = parts
        .partitions
        .iter()
        .map(|p| {
            let n = by_name[p.anchor.as_str()];
            Anchor {
                node: p.anchor.clone(),
                op_type: n.op.op_type().into(),
                output_type: ty(&p.output),
                gflops: anchor_flops(g, n, bindings).map(|f| f / 1e9),
                epilogue: describe(&p.epilogue),
                fused_nodes: p.nodes.len(),
            }
        })
        .collect();
    let opaque = parts
        .host
        .iter()
        .filter(|h| !matches!(by_name[h.node.as_str()].op, Op::Constant { .. }))
        .map(|h| (h.node.clone(), h.op_type.clone(), h.reason.clone()))
        .collect::<Vec<_>>();
    // Host-only ops the reference computes (TopK, Einsum, LRN, ...) do not stop the check.
    let runnable = crate::ir::control::nodes_deep(g).iter().all(|n| match &n.op {
        Op::Opaque { domain, op_type, why, .. } => {
            (domain.is_empty() || domain == "ai.onnx")
                && why == crate::ir::HOST_COMPUTED
                && crate::reference::ops::host::COMPUTED.contains(&op_type.as_str())
        }
        _ => true,
    });
    let t0 = Instant::now();
    let opts = crate::plan::PlanOptions { bindings: bindings.clone(), ..Default::default() };
    let planned = crate::plan::plan_with(g, &opts)?;
    let milliseconds = t0.elapsed().as_secs_f64() * 1e3;
    let (uses, skipped) = crate::plan::lower::workloads(&planned.graph, bindings);
    let picks = kernel_picks(&uses, None);
    let kernels = planned.graph.nodes.iter().filter(|n| matches!(n.op, Op::Fused(_) | Op::FusedChain(_))).count();
    let mut plan_summary = PlanSummary {
        milliseconds,
        planned_nodes: planned.graph.nodes.len(),
        kernels,
        chains_fused: planned.chains.iter().filter(|c| c.fused).count(),
        layout_transforms: planned.layout.len(),
        paddings: planned.padding.len(),
        picks,
        not_lowered: skipped.into_iter().map(|u| (u.node, u.reason)).collect(),
        max_abs_diff: None,
        mismatches: Vec::new(),
    };
    let given = match run {
        RunOn::Skip => None,
        RunOn::Synthetic => Some(synthetic_inputs(g, bindings, 0)?),
        RunOn::Inputs(x) => Some(x.clone()),
    };
    let reference = if let Some(inputs) = given.filter(|_| runnable) {
        let t0 = Instant::now();
        let outs = crate::reference::run(g, &inputs)?;
        let seconds = t0.elapsed().as_secs_f64();
        // The plan must compute what the model does; attention nodes as their kernels compute
        // them (the kernel's meaning on the problem lowered from the node's shapes).
        let pg = &planned.graph;
        let planned_outs = crate::reference::run_with(pg, &inputs, |node, args| {
            let Op::Attention(op) = &node.op else { return crate::reference::eval_node(node, args) };
            let Ok(spec) = crate::plan::lower::attention_spec(pg, node) else {
                return crate::reference::eval_node(node, args);
            };
            let xs: Option<Vec<&crate::ir::Tensor>> = args.iter().copied().collect();
            let xs = xs.ok_or_else(|| crate::Error::node(node, "an attention node's input is missing"))?;
            let y = crate::runtime::attention::run(&spec, op, &xs)
                .map_err(|why| crate::Error::node(node, format!("attention kernel: {why}")))?;
            Ok(vec![y])
        })?;
        let mut max_abs_diff = 0.0f64;
        // The coarsest float type the model computes in sets the tolerance (an f16 model may
        // cast its output to f32).
        let coarsest = g.types.values().map(|t| t.dtype).fold(None, |c, d| match (c, d) {
            (_, DType::BF16) | (Some(DType::BF16), _) => Some(DType::BF16),
            (_, DType::F16) | (Some(DType::F16), _) => Some(DType::F16),
            (c, _) => c,
        });
        for o in &g.outputs {
            let (want, got) = (&outs[o], &planned_outs[o]);
            let scale = want.to_f64_vec().iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let tol = plan_tolerance(coarsest.unwrap_or(want.dtype()), scale);
            let check = crate::cases::compare(o, got, want, tol);
            max_abs_diff = max_abs_diff.max(check.max_abs_err);
            if let Some(why) = check.failure {
                plan_summary
                    .mismatches
                    .push((o.clone(), format!("{why}; tolerance rtol {:e}, atol {:e}", tol.rtol, tol.atol)));
            }
        }
        plan_summary.max_abs_diff = Some(max_abs_diff);
        let outputs = g
            .outputs
            .iter()
            .map(|o| {
                let t = &outs[o];
                let v = t.to_f64_vec();
                let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
                let max_abs = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                (o.clone(), t.shape.clone(), mean, max_abs)
            })
            .collect();
        Some(ReferenceRun { bindings: bindings.clone(), seconds, outputs })
    } else {
        None
    };
    Ok(Summary {
        model: g.name.clone(),
        opset: g.opset,
        nodes: g.nodes.len(),
        ops: g.op_histogram(),
        inputs: g.inputs.iter().map(|n| (n.clone(), ty(n))).collect(),
        outputs: g.outputs.iter().map(|n| (n.clone(), ty(n))).collect(),
        anchors,
        opaque,
        plan: Some(plan_summary),
        reference,
    })
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "model   {} (ai.onnx opset {}, {} nodes)", self.model, self.opset, self.nodes)?;
        for (n, t) in &self.inputs {
            writeln!(f, "input   {n}: {t}")?;
        }
        for (n, t) in &self.outputs {
            writeln!(f, "output  {n}: {t}")?;
        }
        let ops: Vec<String> = self.ops.iter().map(|(o, c)| format!("{o} x{c}")).collect();
        writeln!(f, "ops     {}", ops.join(", "))?;
        let total: f64 = self.anchors.iter().filter_map(|a| a.gflops).sum();
        let fused: usize = self.anchors.iter().map(|a| a.fused_nodes).sum();
        writeln!(
            f,
            "\nBolt kernels: {} partitions covering {fused} nodes ({total:.3} GFLOP per run)",
            self.anchors.len()
        )?;
        for a in &self.anchors {
            let fl = a.gflops.map(|g| format!("{g:.4} GFLOP")).unwrap_or_else(|| "? GFLOP".into());
            writeln!(f, "  {:<24} {:<7} {:<40} -> {:<24} {fl}", a.node, a.op_type, a.epilogue, a.output_type)?;
        }
        if self.opaque.is_empty() {
            writeln!(f, "\nEvery node is in a GEMM/Conv partition.")?;
        } else {
            // Group by reason: real models leave hundreds of small ops to the host.
            let mut groups: Vec<(&str, &str, usize)> = Vec::new();
            for (_, o, why) in &self.opaque {
                match groups.iter_mut().find(|(go, gw, _)| go == o && gw == why) {
                    Some(g) => g.2 += 1,
                    None => groups.push((o, why, 1)),
                }
            }
            // The partitioner's view: the plan then runs regions, attention, pools and views on
            // the device where it can; the artifact's "on the host" lines say what is left.
            writeln!(f, "\nOutside GEMM/Conv partitions ({} nodes):", self.opaque.len())?;
            for (o, why, count) in groups {
                writeln!(f, "  {o} x{count}: {why}")?;
            }
        }
        if let Some(p) = &self.plan {
            writeln!(
                f,
                "\nPlan ({:.1} ms): {} nodes, {} kernels ({} back-to-back chains), {} layout transforms, {} paddings (bolt report shows why)",
                p.milliseconds, p.planned_nodes, p.kernels, p.chains_fused, p.layout_transforms, p.paddings
            )?;
            // The model as given: a build at another precision or with a tuning database picks
            // its own kernels (its report lists them).
            writeln!(f, "Kernel picks for the model as given (analytic, H100 sm90; bolt-tune times them on a GPU):")?;
            for (node, problem, pick) in &p.picks {
                writeln!(f, "  {node:<24} {problem:<44} {pick}")?;
            }
            for (node, why) in &p.not_lowered {
                writeln!(f, "  {node:<24} not lowered: {why}")?;
            }
            if let Some(d) = p.max_abs_diff {
                writeln!(f, "Planned graph vs model on the reference: max abs diff {d:.2e}")?;
            }
            for (o, why) in &p.mismatches {
                writeln!(f, "  PLANNED GRAPH DIFFERS FROM THE MODEL on output {o}: {why}")?;
            }
        }
        match &self.reference {
            Some(r) => {
                let mut b: Vec<String> = r.bindings.iter().map(|(k, v)| format!("{k}={v}")).collect();
                b.sort();
                let b = if b.is_empty() { String::new() } else { format!(" with {}", b.join(", ")) };
                writeln!(f, "\nReference run{b}: {:.3} s", r.seconds)?;
                for (n, s, mean, max) in &r.outputs {
                    writeln!(f, "  {n}: {s:?} mean {mean:.5} max|x| {max:.5}")?;
                }
            }
            None if self.opaque.iter().any(|(_, _, why)| why.contains("Bolt does not") || why.contains("outside")) => {
                writeln!(f, "\nReference run skipped: some nodes are ops the reference executor does not run.")?
            }
            None => {}
        }
        Ok(())
    }
}
