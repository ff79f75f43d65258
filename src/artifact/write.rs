//! `bolt compile`'s back half: from a model to an artifact directory (docs/artifact.md).
//!
//! precision -> plan (for the largest shape bucket) -> one workload per kernel node and bucket
//! -> a kernel per workload and arch (tuning database, else the analytic top pick) -> one
//! library through the codegen cache -> weights in kernel layout -> arena plan -> manifest.

use super::format::*;
use crate::compile::DimBindings;
use crate::error::{Error, Result};
use crate::ir::{DType, Graph, Op};
use bolt_codegen::builder::{BuildOptions, Builder, KernelSource, Templates};
use bolt_codegen::glue::GlueSpec;
use bolt_codegen::spec::{Arch, KernelSpec};
use bolt_codegen::stitch::StitchSpec;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What to build.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    pub out_dir: PathBuf,
    /// GPU archs to build kernels for; empty: a reference-only artifact (no kernel library,
    /// no nvcc), which only the reference device runs.
    pub archs: Vec<Arch>,
    /// `None`: the model's own float type, with f32 models in TF32 (the documented default).
    pub precision: Option<Precision>,
    /// Symbolic dims and their ranges (`--dim N=1..64`; `N=8` is the range 8..8). Unlisted
    /// symbolic dims are fixed at 1.
    pub dims: Vec<DimRange>,
    /// Tuning database to take kernels from when it has the workload.
    pub tuning_db: Option<PathBuf>,
    /// Kernel cache root (`None`: ~/.cache/bolt).
    pub cache_dir: Option<PathBuf>,
    /// Most nvcc processes at once (`None`: the CPU count).
    pub jobs: Option<usize>,
    /// Where the model came from; recorded for `bolt run --check`.
    pub source: Source,
    /// Inputs the model was bound to constants with ([`crate::compile::bind_inputs`]), as
    /// given; recorded for `bolt run --check`.
    pub bound_inputs: std::collections::BTreeMap<String, String>,
    /// When a Softmax after a GEMM runs inside it (CUTLASS's GemmSoftmax).
    pub row_epilogue: crate::plan::row_epilogue::RowEpilogueMode,
    /// The types of the artifact's inputs and outputs when the precision narrows the model's.
    pub io_types: IoTypes,
}

/// The types an artifact takes and returns when its precision narrows the model's floats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum IoTypes {
    /// The precision's (an f32 model at f16 takes and returns f16; `bolt run` converts).
    #[default]
    Precision,
    /// The model's declared types, cast on the device where they enter and leave: what a host
    /// framework hands over and takes back (ONNX Runtime, TVM).
    Model,
}

/// Where a compiled model came from (the manifest's `source`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The built-in default model.
    Builtin,
    /// An ONNX file (`bolt run --check` reruns it).
    File(PathBuf),
    /// A subgraph a host framework handed over (an ORT fused node, a TVM function), named by
    /// the label: there is no file to rerun.
    Host(String),
}

impl CompileOptions {
    pub fn new(out_dir: impl Into<PathBuf>) -> CompileOptions {
        CompileOptions {
            out_dir: out_dir.into(),
            archs: vec![Arch::Sm80],
            precision: None,
            dims: Vec::new(),
            tuning_db: None,
            cache_dir: None,
            jobs: None,
            source: Source::Builtin,
            bound_inputs: Default::default(),
            row_epilogue: Default::default(),
            io_types: IoTypes::Precision,
        }
    }
}

/// What [`compile`] did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CompileReport {
    pub dir: PathBuf,
    pub precision: Precision,
    /// Whether the precision was the default (not `--precision`).
    pub precision_defaulted: bool,
    pub numerics: String,
    pub buckets: Vec<BTreeMap<String, usize>>,
    pub kernel_nodes: usize,
    /// Fused back-to-back chains, each one chain kernel.
    pub chain_nodes: usize,
    /// Why chains the planner fused run unfused (some shape bucket has no chain kernel).
    pub chains_unfused: Option<String>,
    /// Layout transposes, channel padding and casts run by glue kernels.
    pub glue_nodes: usize,
    /// Regions of element-wise ops and row reductions run by stitched kernels.
    pub stitch_nodes: usize,
    /// Attention cores run by fused attention kernels.
    pub attention_nodes: usize,
    /// Recurrent layers' scans run by recurrent scan kernels.
    pub recurrent_nodes: usize,
    /// Distinct kernels in the library (all archs).
    pub kernels: usize,
    /// Nodes the host computes (the cuda device copies data to and from it around them).
    pub host_ops: usize,
    /// Copies the cuda device enqueues itself (concatenations, slices, views it cannot alias).
    pub device_copies: usize,
    /// Views that alias their input's bytes: nothing runs for them.
    pub aliased_views: usize,
    /// The host ops by op type and reason, with their counts.
    pub host: Vec<(String, String, usize)>,
    /// The GEMM/conv kernels of the largest shape bucket as built (each arch's pick and how it
    /// was chosen), with how many nodes run each.
    pub picks: Vec<(String, usize)>,
    pub nvcc_invocations: usize,
    pub build_seconds: f64,
    pub total_seconds: f64,
    pub weights_bytes: u64,
    pub arena_bytes: u64,
    pub arena_naive_bytes: u64,
    pub library: Option<PathBuf>,
}

impl std::fmt::Display for CompileReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.precision_defaulted { " (default for this model)" } else { "" };
        writeln!(f, "Artifact {}", self.dir.display())?;
        writeln!(f, "  precision {}{how}: {}", self.precision.name(), self.numerics)?;
        let b: Vec<String> = self
            .buckets
            .iter()
            .map(|b| b.iter().map(|(k, v)| format!("{k}<={v}")).collect::<Vec<_>>().join(","))
            .filter(|s| !s.is_empty())
            .collect();
        if !b.is_empty() {
            writeln!(f, "  shape buckets: {}", b.join(" | "))?;
        }
        writeln!(
            f,
            "  {} kernel nodes, {} chain nodes, {} glue nodes, {} stitched nodes, {} attention nodes, {} recurrent nodes, {} device copies, {} aliased views, {} kernels in the library, {} host ops; {} nvcc runs, build {:.1} s, total {:.1} s",
            self.kernel_nodes,
            self.chain_nodes,
            self.glue_nodes,
            self.stitch_nodes,
            self.attention_nodes,
            self.recurrent_nodes,
            self.device_copies,
            self.aliased_views,
            self.kernels,
            self.host_ops,
            self.nvcc_invocations,
            self.build_seconds,
            self.total_seconds
        )?;
        for (op, why, count) in &self.host {
            writeln!(f, "  on the host: {op} x{count}: {why}")?;
        }
        if !self.picks.is_empty() {
            writeln!(f, "  kernels of the largest bucket:")?;
            for (pick, count) in &self.picks {
                writeln!(f, "    {pick} x{count}")?;
            }
        }
        if let Some(why) = &self.chains_unfused {
            writeln!(f, "  back-to-back chains run unfused: {why}")?;
        }
        writeln!(
            f,
            "  weights {} bytes; activation arena {} bytes (one allocation per tensor: {} bytes)",
            self.weights_bytes, self.arena_bytes, self.arena_naive_bytes
        )
    }
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::File { path: path.to_path_buf(), reason: e.to_string() }
}

/// The model's float storage type (the first float graph input's, else f32).
fn model_float(g: &Graph) -> DType {
    g.inputs.iter().filter_map(|i| g.types.get(i)).map(|t| t.dtype).find(|d| d.is_float()).unwrap_or(DType::F32)
}

/// Resolves the precision: an explicit one, else the model's float type with f32 -> TF32.
pub fn resolve_precision(g: &Graph, asked: Option<Precision>) -> Result<(Precision, bool)> {
    let p = match asked {
        Some(p) => (p, false),
        None => match model_float(g) {
            DType::F16 => (Precision::F16, true),
            DType::BF16 => (Precision::Bf16, true),
            _ => (Precision::Tf32, true),
        },
    };
    if p.0 == Precision::F32 {
        return Err(Error::Model(
            "--precision f32: Bolt's f32 GEMM/conv kernels multiply on tensor cores in TF32 and no exact-f32 kernel family exists; ask for --precision tf32 (the default for f32 models) or f16/bf16".into(),
        ));
    }
    Ok(p)
}

/// Bucket bounds of a range: min, then x4 steps, then max (1..64 -> 1, 4, 16, 64). A few
/// schedules cover most sizes (BladeDISC); each bound is the largest size of its bucket.
fn bounds(r: &DimRange) -> Vec<usize> {
    let mut v = vec![r.min.max(1)];
    while *v.last().unwrap() < r.max {
        let next = (v.last().unwrap() * 4).min(r.max);
        v.push(next);
    }
    v
}

/// Buckets of all ranged dims, stepped together (bucket i binds each dim to its i-th bound,
/// or its max when it has fewer).
pub fn buckets(dims: &[DimRange]) -> Vec<BTreeMap<String, usize>> {
    let b: Vec<(String, Vec<usize>)> = dims.iter().map(|d| (d.name.clone(), bounds(d))).collect();
    let n = b.iter().map(|(_, v)| v.len()).max().unwrap_or(1);
    (0..n).map(|i| b.iter().map(|(k, v)| (k.clone(), v[i.min(v.len() - 1)])).collect()).collect()
}

fn hash_file(path: &Path) -> Result<FileEntry> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    Ok(FileEntry { bytes: bytes.len() as u64, blake3: blake3::hash(&bytes).to_hex().to_string() })
}

/// Kernel choices of a planned graph, per node, per bucket, per arch: GEMM/conv kernels
/// (tuning database, else the analytic pick) and chain kernels (codegen's first fused
/// candidate; sm80 units, which run on Hopper through PTX). A node that fails in any bucket
/// or arch gets a host reason instead.
struct Chosen {
    kernels: BTreeMap<String, NodeKernels>,
    chains: BTreeMap<String, NodeChain>,
    host_reason: HashMap<String, String>,
}

fn choose_kernels(
    graph: &Graph,
    buckets: &[BTreeMap<String, usize>],
    archs: &[Arch],
    db: Option<&bolt_profiler::db::Db>,
) -> Chosen {
    let mut choices: BTreeMap<String, NodeKernels> = BTreeMap::new();
    let mut host_reason: HashMap<String, String> = HashMap::new();
    let mut chains: BTreeMap<String, NodeChain> = BTreeMap::new();
    for (bi, bucket) in buckets.iter().enumerate() {
        let bindings: DimBindings = bucket.clone().into_iter().collect();
        let (uses, skipped) = crate::plan::lower::workloads(graph, &bindings);
        let (chain_uses, unlowered) = crate::plan::lower::chains(graph, &uses, &skipped);
        for s in skipped.into_iter().filter(|s| !s.node.contains('#')).chain(unlowered) {
            host_reason.entry(s.node).or_insert(s.reason);
        }
        for c in chain_uses {
            match c.kernel() {
                Ok(spec) => {
                    let nc = chains.entry(c.node.clone()).or_insert_with(|| NodeChain {
                        node: c.node.clone(),
                        scalars: c.scalars.clone(),
                        buckets: Vec::new(),
                    });
                    if nc.buckets.len() == bi {
                        let symbol = bolt_codegen::b2b::symbol_for(&spec);
                        nc.buckets.push(ChainChoice { symbol, spec, source: "analytic (first b2b candidate)".into() });
                    }
                }
                Err(why) => {
                    host_reason.entry(c.node).or_insert(format!("no chain kernel: {why}"));
                }
            }
        }
        // Chain layers (`node#i`) run inside their chain's kernel.
        for u in uses.into_iter().filter(|u| u.chain.is_none()) {
            let mut per_arch = Vec::new();
            for &arch in archs {
                match crate::compile::pick_kernel(&u.workload, arch, db) {
                    // The kernel's own arch: a GemmSoftmax picked for sm90 is an sm80 build.
                    Ok(p) if !per_arch.iter().any(|c: &KernelChoice| c.spec == p.spec) => per_arch.push(KernelChoice {
                        arch: p.spec.arch,
                        symbol: Templates.symbol(&p.spec),
                        source: format!("{} ({})", p.name, p.how),
                        spec: p.spec,
                    }),
                    Ok(_) => {}
                    Err(why) => {
                        host_reason.entry(u.node.clone()).or_insert(why);
                    }
                }
            }
            let nk = choices.entry(u.node.clone()).or_insert_with(|| NodeKernels {
                node: u.node.clone(),
                alpha: u.alpha,
                beta: u.beta,
                buckets: Vec::new(),
            });
            nk.buckets.resize(bi, Vec::new());
            nk.buckets.push(per_arch);
        }
    }
    choices.retain(|n, k| !host_reason.contains_key(n) && k.buckets.len() == buckets.len());
    chains.retain(|n, c| !host_reason.contains_key(n) && c.buckets.len() == buckets.len());
    Chosen { kernels: choices, chains, host_reason }
}

/// `model` at the build's precision: `(graph, precision, whether it was the model's default)`.
fn at_precision(model: &Graph, opts: &CompileOptions) -> Result<(Graph, Precision, bool)> {
    let (precision, precision_defaulted) = resolve_precision(model, opts.precision)?;
    let g = if precision.storage() != model_float(model) {
        match opts.io_types {
            IoTypes::Precision => crate::ir::precision::convert_floats(model, precision.storage())?,
            IoTypes::Model => crate::ir::precision::convert_floats_keeping_io(model, precision.storage())?,
        }
    } else {
        model.clone()
    };
    Ok((g, precision, precision_defaulted))
}

/// The planner's options of a build; back-to-back chains are fused where the planner's
/// traffic model says they pay.
/// [`crate::plan::Plan::host_reasons`], owned (the plan's graph moves on).
fn owned_reasons(plan: &crate::plan::Plan) -> HashMap<String, String> {
    plan.host_reasons().into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn plan_options(opts: &CompileOptions, bindings: DimBindings) -> crate::plan::PlanOptions {
    crate::plan::PlanOptions { bindings, b2b: true, row_epilogue: opts.row_epilogue, ..Default::default() }
}

/// The GEMM/conv workloads [`compile`] picks kernels for under `opts` (its precision, plan and
/// shape buckets), once per bucket: what `bolt-tune model` tunes, so that the tuning database
/// holds the keys the build looks up. Nodes that lower to no workload come with the reason.
pub fn kernel_workloads(
    model: &Graph,
    opts: &CompileOptions,
) -> Result<(Vec<bolt_profiler::workload::Workload>, Vec<crate::plan::lower::Unlowered>)> {
    let (g, _, _) = at_precision(model, opts)?;
    let buckets = buckets(&opts.dims);
    let largest: DimBindings = buckets.last().cloned().unwrap_or_default().into_iter().collect();
    let graph = crate::plan::plan_with(&g, &plan_options(opts, largest))?.graph;
    let (mut workloads, mut skipped) = (Vec::new(), Vec::new());
    for bucket in &buckets {
        let (uses, s) = crate::plan::lower::workloads(&graph, &bucket.clone().into_iter().collect());
        // Chain layers too: a build that cannot fuse a chain runs its layers as kernels.
        workloads.extend(uses.into_iter().map(|u| u.workload));
        skipped.extend(s);
    }
    Ok((workloads, skipped))
}

/// Compiles `model` into an artifact at `opts.out_dir` (created or overwritten).
pub fn compile(model: &Graph, opts: &CompileOptions) -> Result<CompileReport> {
    let t0 = Instant::now();
    let (g, precision, precision_defaulted) = at_precision(model, opts)?;
    let buckets = buckets(&opts.dims);
    let largest: DimBindings = buckets.last().cloned().unwrap_or_default().into_iter().collect();
    let db = match &opts.tuning_db {
        Some(p) => Some(bolt_profiler::db::Db::open(p).map_err(|e| io_err(p, e))?),
        None => None,
    };
    let mut plan_opts = plan_options(opts, largest.clone());
    let planned = crate::plan::plan_with(&g, &plan_opts)?;
    let mut planner_reasons = owned_reasons(&planned);
    let mut graph = planned.graph;
    let mut chosen = choose_kernels(&graph, &buckets, &opts.archs, db.as_ref());
    // A chain is planned at the largest bucket; a smaller one may have no fused kernel (e.g.
    // one row has no aligned tiling). Its layers then run as kernels of their own rather than
    // the whole chain on the host: the plan is redone without fusion.
    let unfusable: Vec<String> = graph
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::FusedChain(_)))
        .filter_map(|n| chosen.host_reason.get(&n.name).map(|why| format!("{}: {why}", n.name)))
        .collect();
    let chains_unfused = if unfusable.is_empty() {
        None
    } else {
        tracing::warn!("back-to-back chains not fused: {}", unfusable.join("; "));
        plan_opts.b2b = false;
        let planned = crate::plan::plan_with(&g, &plan_opts)?;
        planner_reasons = owned_reasons(&planned);
        graph = planned.graph;
        chosen = choose_kernels(&graph, &buckets, &opts.archs, db.as_ref());
        Some(unfusable.join("; "))
    };
    let Chosen { kernels: mut choices, chains, mut host_reason } = chosen;
    let mut b2b_specs: Vec<bolt_codegen::b2b::B2bSpec> = Vec::new();
    for c in chains.values().flat_map(|c| &c.buckets) {
        if !b2b_specs.contains(&c.spec) {
            b2b_specs.push(c.spec.clone());
        }
    }

    // Glue kernels for the data movement the plan inserted (and the model's own transposes /
    // casts of the same kinds): one kernel per spec serves every bucket and arch.
    let mut glue: BTreeMap<String, NodeGlue> = BTreeMap::new();
    let mut no_glue: HashMap<String, String> = HashMap::new();
    for bucket in &buckets {
        let bindings: DimBindings = bucket.clone().into_iter().collect();
        // Shapes inference leaves symbolic (Reshape -1, Resize) are known once inputs are bound.
        let bound = crate::plan::edit::bind_inputs(&graph, &bindings)?;
        for n in &bound.nodes {
            match crate::plan::lower::glue(&bound, n, &bindings) {
                None => {}
                Some(Ok(u)) => {
                    let symbol = bolt_codegen::glue::symbol_for(&u.spec);
                    glue.insert(n.name.clone(), NodeGlue { node: n.name.clone(), symbol, spec: u.spec });
                }
                Some(Err(why)) => {
                    no_glue.entry(n.name.clone()).or_insert(format!("no glue kernel: {why}"));
                }
            }
        }
    }
    // A node some bucket cannot take stays on the host in all.
    glue.retain(|n, _| !no_glue.contains_key(n));
    host_reason.extend(no_glue);
    // Stitched kernels for the regions the planner stitched: one kernel per spec likewise.
    let mut stitch: BTreeMap<String, NodeStitch> = BTreeMap::new();
    for n in graph.nodes.iter().filter(|n| matches!(n.op, Op::Stitched(_))) {
        match crate::plan::lower::stitch_spec(&graph, n) {
            Ok(spec) => {
                let symbol = bolt_codegen::stitch::symbol_for(&spec);
                stitch.insert(n.name.clone(), NodeStitch { node: n.name.clone(), symbol, spec });
            }
            Err(why) => {
                host_reason.insert(n.name.clone(), format!("no stitched kernel: {why}"));
            }
        }
    }
    // Attention kernels for the fused attention cores: one kernel per spec likewise; a node
    // some bucket's shapes do not fit stays on the host in all.
    let mut attention: BTreeMap<String, NodeAttention> = BTreeMap::new();
    for n in graph.nodes.iter().filter(|n| matches!(n.op, Op::Attention(_))) {
        match attention_for_buckets(&graph, n, &buckets, opts.archs.contains(&Arch::Sm90)) {
            Ok((spec, sm90)) => {
                let symbol = bolt_codegen::attention::symbol_for(&spec);
                attention.insert(n.name.clone(), NodeAttention { node: n.name.clone(), symbol, spec, sm90 });
            }
            Err(why) => {
                host_reason.insert(n.name.clone(), format!("no attention kernel: {why}"));
            }
        }
    }
    // Recurrent scans likewise: one kernel per spec, every bucket's problem checked.
    let mut recurrent: BTreeMap<String, NodeRecurrent> = BTreeMap::new();
    for n in graph.nodes.iter().filter(|n| matches!(n.op, Op::RecurrentScan(_))) {
        match recurrent_for_buckets(&graph, n, &buckets) {
            Ok(spec) => {
                let symbol = bolt_codegen::recurrent::symbol_for(&spec);
                recurrent.insert(n.name.clone(), NodeRecurrent { node: n.name.clone(), symbol, spec });
            }
            Err(why) => {
                host_reason.insert(n.name.clone(), format!("no recurrent kernel: {why}"));
            }
        }
    }
    let mut recurrent_specs: Vec<bolt_codegen::recurrent::RecurrentSpec> = recurrent.values().map(|a| a.spec).collect();
    recurrent_specs.sort_by_key(bolt_codegen::recurrent::symbol_for);
    recurrent_specs.dedup();
    let mut attention_specs: Vec<bolt_codegen::attention::AttentionSpec> =
        attention.values().flat_map(|a| std::iter::once(a.spec).chain(a.sm90)).collect();
    attention_specs.sort_by_key(bolt_codegen::attention::symbol_for);
    attention_specs.dedup();
    let mut stitch_specs: Vec<StitchSpec> = Vec::new();
    for s in stitch.values() {
        if !stitch_specs.contains(&s.spec) {
            stitch_specs.push(s.spec.clone());
        }
    }
    let mut glue_specs: Vec<GlueSpec> = glue.values().map(|g| g.spec).collect();
    glue_specs.sort_by_key(bolt_codegen::glue::symbol_for);
    glue_specs.dedup();

    // One library for every kernel of every bucket and arch, and the glue kernels.
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| io_err(&opts.out_dir, e))?;
    let kernels_dir = opts.out_dir.join(KERNELS_DIR);
    let _ = std::fs::remove_dir_all(&kernels_dir);
    let mut specs: Vec<KernelSpec> = Vec::new();
    let mut seen = HashSet::new();
    for c in choices.values().flat_map(|k| k.buckets.iter().flatten()) {
        if seen.insert(c.symbol.clone()) {
            specs.push(c.spec.clone());
        }
    }
    let (mut cuda_version, mut cutlass_version) = ("none".to_string(), "none".to_string());
    let (mut nvcc_invocations, mut build_seconds, mut library) = (0, 0.0, None);
    let mut built_symbols = 0;
    // No archs: a reference-only artifact (plan and weights; its kernel nodes run by their
    // meaning on the reference device), built without nvcc.
    if !opts.archs.is_empty()
        && (!specs.is_empty()
            || !b2b_specs.is_empty()
            || !glue_specs.is_empty()
            || !stitch_specs.is_empty()
            || !attention_specs.is_empty()
            || !recurrent_specs.is_empty())
    {
        // Build files (sources, logs) stay out of the artifact, next to it.
        let mut bo = BuildOptions::new(opts.out_dir.join(".build"));
        bo.name = "bolt_model".into();
        // The asked archs, and sm80 where a kernel exists only as CUTLASS 2.x (GemmSoftmax
        // picked for Hopper runs its sm80 build through PTX).
        let mut archs = opts.archs.clone();
        for s in &specs {
            if !archs.contains(&s.arch) {
                archs.push(s.arch);
            }
        }
        bo.archs = Some(archs);
        // The asked archs are the GPUs the artifact runs on: its sm80 kernels get SASS for
        // each (an sm90 build's chains, glue and sm80 attention run on the H100 as sm_90 SASS).
        bo.run_on = opts.archs.clone();
        bo.cache_dir = opts.cache_dir.clone();
        bo.jobs = opts.jobs;
        let builder = Builder::discover(bo).map_err(|e| Error::Model(format!("kernel build: {e}")))?;
        let report = builder
            .build_all(&Templates, &specs, &b2b_specs, &glue_specs, &stitch_specs, &attention_specs, &recurrent_specs)
            .map_err(|e| Error::Model(format!("kernel build: {e}")))?;
        for r in &report.rejected {
            for k in choices.values() {
                if k.buckets.iter().flatten().any(|c| c.symbol == r.symbol) {
                    host_reason.insert(k.node.clone(), format!("kernel {} rejected: {}", r.symbol, r.reason));
                }
            }
        }
        choices.retain(|n, _| !host_reason.contains_key(n));
        std::fs::create_dir_all(&kernels_dir).map_err(|e| io_err(&kernels_dir, e))?;
        for from in [&report.library, &report.manifest] {
            let to = kernels_dir.join(from.file_name().expect("library file name"));
            std::fs::copy(from, &to).map_err(|e| io_err(&to, e))?;
        }
        let lib_manifest =
            bolt_codegen::manifest::Manifest::read(&report.manifest).map_err(|e| io_err(&report.manifest, e))?;
        cuda_version = lib_manifest.cuda_version;
        cutlass_version = lib_manifest.cutlass_version;
        nvcc_invocations = report.nvcc_invocations;
        build_seconds = report.total_seconds;
        built_symbols = report.symbols.len();
        library = Some(kernels_dir.join(report.library.file_name().expect("library file name")));
    }

    // Weights in kernel layout (the planner converted and padded them), 256-byte aligned.
    let mut names: Vec<&String> = graph.initializers.keys().collect();
    names.sort();
    let mut blob = Vec::new();
    let mut weights = Vec::new();
    for name in names {
        let t = &graph.initializers[name];
        let offset = align_up(blob.len() as u64, TENSOR_ALIGN as u64);
        blob.resize(offset as usize, 0);
        let bytes = encode(t);
        weights.push(WeightEntry {
            name: name.clone(),
            dtype: t.dtype(),
            shape: t.shape.clone(),
            offset,
            bytes: bytes.len() as u64,
        });
        blob.extend_from_slice(&bytes);
    }
    let weights_path = opts.out_dir.join(WEIGHTS_FILE);
    std::fs::write(&weights_path, &blob).map_err(|e| io_err(&weights_path, e))?;

    let arena = crate::runtime::memory::plan_arena(&graph, &largest).map_err(Error::Model)?;
    let host_ops = graph
        .nodes
        .iter()
        .filter(|n| {
            !choices.contains_key(&n.name)
                && !chains.contains_key(&n.name)
                && !glue.contains_key(&n.name)
                && !stitch.contains_key(&n.name)
                && !attention.contains_key(&n.name)
                && !recurrent.contains_key(&n.name)
        })
        .map(|n| {
            let (reason, on_device) = match (host_reason.get(&n.name), &n.op) {
                (Some(why), _) => (why.clone(), false),
                (None, Op::Fused(_) | Op::FusedChain(_)) => ("no kernel for this node".to_string(), false),
                (None, op) if op.is_view() => (
                    "a view (same bytes, another shape): an alias of its input in the activation arena (nothing \
                     runs), or a device copy of a graph input or weight"
                        .to_string(),
                    true,
                ),
                (None, _) if crate::plan::lower::is_copy_node(&graph, n) => (
                    "a concatenation, split, slice, single-index gather, truncation or broadcast: the cuda device \
                     copies its rectangles on the stream, no host round trip"
                        .to_string(),
                    true,
                ),
                (None, _) => match planner_reasons.get(&n.name) {
                    Some(why) => (why.clone(), false),
                    None => ("no kernel family for this op: runs on the host (CPU reference)".to_string(), false),
                },
            };
            HostOp { node: n.name.clone(), op_type: n.op.op_type().to_string(), reason, on_device }
        })
        .collect::<Vec<_>>();
    let plan = PlanFile {
        name: graph.name.clone(),
        opset: graph.opset,
        nodes: graph.nodes.clone(),
        types: graph.types.clone(),
        inputs: graph.inputs.clone(),
        outputs: graph.outputs.clone(),
        weights,
        buckets: buckets.clone(),
        kernels: choices.into_values().collect(),
        chains: chains.into_values().collect(),
        glue: glue.into_values().collect(),
        stitch: stitch.into_values().collect(),
        attention: attention.into_values().collect(),
        recurrent: recurrent.into_values().collect(),
        host_ops,
        arena,
    };
    let plan_path = opts.out_dir.join(PLAN_FILE);
    let json = serde_json::to_vec(&plan).map_err(|e| io_err(&plan_path, e))?;
    std::fs::write(&plan_path, json).map_err(|e| io_err(&plan_path, e))?;

    let mut files = BTreeMap::new();
    files.insert(PLAN_FILE.to_string(), hash_file(&plan_path)?);
    files.insert(WEIGHTS_FILE.to_string(), hash_file(&weights_path)?);
    if kernels_dir.is_dir() {
        for e in std::fs::read_dir(&kernels_dir).map_err(|e| io_err(&kernels_dir, e))? {
            let p = e.map_err(|e| io_err(&kernels_dir, e))?.path();
            let name = format!("{KERNELS_DIR}/{}", p.file_name().unwrap_or_default().to_string_lossy());
            files.insert(name, hash_file(&p)?);
        }
    }
    let manifest = Manifest {
        format: FORMAT_NAME.into(),
        format_version: FORMAT_VERSION,
        abi_version: bolt_codegen::abi::ABI_VERSION,
        bolt_version: env!("CARGO_PKG_VERSION").into(),
        model: model.name.clone(),
        source: match &opts.source {
            Source::File(p) => std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()).display().to_string(),
            Source::Builtin => BUILTIN_DEFAULT.to_string(),
            Source::Host(label) => format!("{HOST_SOURCE}{label}"),
        },
        source_blake3: match &opts.source {
            Source::File(p) => Some(hash_file(p)?.blake3),
            Source::Builtin | Source::Host(_) => None,
        },
        cuda_version,
        cutlass_version,
        archs: opts.archs.clone(),
        precision,
        numerics: precision.numerics().into(),
        dims: opts.dims.clone(),
        bound_inputs: opts.bound_inputs.clone(),
        files,
    };
    let manifest_path = opts.out_dir.join(MANIFEST_FILE);
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| io_err(&manifest_path, e))?;
    std::fs::write(&manifest_path, json).map_err(|e| io_err(&manifest_path, e))?;

    Ok(CompileReport {
        dir: opts.out_dir.clone(),
        precision,
        precision_defaulted,
        numerics: precision.numerics().into(),
        buckets,
        kernel_nodes: plan.kernels.len(),
        chains_unfused,
        chain_nodes: plan.chains.len(),
        glue_nodes: plan.glue.len(),
        stitch_nodes: plan.stitch.len(),
        attention_nodes: plan.attention.len(),
        recurrent_nodes: plan.recurrent.len(),
        kernels: built_symbols,
        host_ops: plan.host_ops.iter().filter(|h| !h.on_device).count(),
        device_copies: plan.device_data_movement().0,
        aliased_views: plan.device_data_movement().1,
        host: plan.host_ops.iter().filter(|h| !h.on_device).fold(Vec::new(), |mut groups, h| {
            match groups.iter_mut().find(|(o, w, _): &&mut (String, String, usize)| *o == h.op_type && *w == h.reason) {
                Some(g) => g.2 += 1,
                None => groups.push((h.op_type.clone(), h.reason.clone(), 1)),
            }
            groups
        }),
        picks: plan.kernels.iter().filter_map(|k| k.buckets.last()).flatten().fold(Vec::new(), |mut picks, c| {
            let pick = format!("{}: {}", c.symbol, c.source);
            match picks.iter_mut().find(|(p, _): &&mut (String, usize)| *p == pick) {
                Some(p) => p.1 += 1,
                None => picks.push((pick, 1)),
            }
            picks
        }),
        nvcc_invocations,
        build_seconds,
        total_seconds: t0.elapsed().as_secs_f64(),
        weights_bytes: blob.len() as u64,
        arena_bytes: plan.arena.bytes,
        arena_naive_bytes: plan.arena.naive_bytes,
        library,
    })
}

/// The recurrent kernel of scan node `n`, checked against every bucket's shapes.
fn recurrent_for_buckets(
    graph: &Graph,
    n: &crate::ir::Node,
    buckets: &[BTreeMap<String, usize>],
) -> std::result::Result<bolt_codegen::recurrent::RecurrentSpec, String> {
    let spec = crate::plan::lower::recurrent_scan_kernel(graph, n)?;
    let Op::RecurrentScan(r) = &n.op else { return Err("not a recurrent scan".into()) };
    let (xw, rt) = (n.input(0).ok_or("no XW")?, n.input(1).ok_or("no Rᵀ")?);
    for bucket in buckets {
        let bindings: DimBindings = bucket.clone().into_iter().collect();
        let bound = crate::plan::edit::bind_inputs(graph, &bindings).map_err(|e| e.to_string())?;
        let shape = |x: &str| {
            crate::plan::edit::bound_shape(&bound, x, &bindings).ok_or_else(|| format!("'{x}' has no known shape"))
        };
        crate::plan::lower::recurrent_problem(r, &shape(xw)?, &shape(rt)?)
            .map_err(|why| format!("bucket {bucket:?}: {why}"))?;
    }
    Ok(spec)
}

/// The attention kernel of node `n`, checked against every bucket's shapes, and with `hopper`
/// (an sm90 build) the Hopper kernel too where it takes some bucket's problem.
fn attention_for_buckets(
    graph: &Graph,
    n: &crate::ir::Node,
    buckets: &[BTreeMap<String, usize>],
    hopper: bool,
) -> std::result::Result<(bolt_codegen::attention::AttentionSpec, Option<bolt_codegen::attention::AttentionSpec>), String>
{
    let Op::Attention(a) = &n.op else { return Err("not an attention node".into()) };
    let spec = crate::plan::lower::attention_spec(graph, n)?;
    let mut sm90 = None;
    for bucket in buckets {
        let bindings: DimBindings = bucket.clone().into_iter().collect();
        let bound = crate::plan::edit::bind_inputs(graph, &bindings).map_err(|e| e.to_string())?;
        let shapes: Vec<Vec<usize>> = n
            .inputs
            .iter()
            .flatten()
            .map(|x| {
                crate::plan::edit::bound_shape(&bound, x, &bindings).ok_or_else(|| format!("'{x}' has no known shape"))
            })
            .collect::<std::result::Result<_, _>>()?;
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let (problem, _) = crate::plan::lower::attention_problem(a, &spec, &refs)
            .map_err(|why| format!("bucket {bucket:?}: {why}"))?;
        if hopper && sm90.is_none() {
            sm90 = spec.hopper(problem.head_dim, problem.head_dim_v).ok().filter(|h| h.check(&problem).is_ok());
        }
    }
    Ok((spec, sm90))
}
