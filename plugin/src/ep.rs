//! The OrtEp: GetCapability claims Bolt's partitions, Compile plans each claimed subgraph,
//! and the compute functions run the plans (reference device: Bolt's CPU reference executor).

use crate::abi::*;
use crate::api::{api, check, cstr, guard, guard_value, verbose, Res};
use crate::graph;
use crate::options::{Device, Options};
use bolt::ir::{Graph, Op, Tensor};
use ort_sys::{c_char, OrtGraph, OrtKernelContext, OrtLogger, OrtLoggingLevel, OrtNode, OrtValue};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_void, CString};
use std::sync::Arc;

#[repr(C)]
pub struct BoltEp {
    base: OrtEp,
    name: CString,
    compat: CString,
    pub options: Options,
    /// The session's logger (lives as long as the session, hence as long as this EP).
    logger: *const OrtLogger,
    /// Types Bolt inferred for the values of the graphs GetCapability saw: Compile gives them
    /// to fused subgraphs whose inputs ORT could not shape ([`graph::import`]).
    types: std::sync::Mutex<HashMap<String, bolt::ir::TensorType>>,
}

impl BoltEp {
    pub fn new(name: &str, options: Options, logger: *const OrtLogger) -> Box<BoltEp> {
        Box::new(BoltEp {
            base: OrtEp {
                ort_version_supported: EP_API_VERSION,
                GetName: Some(ep_get_name),
                GetCapability: Some(ep_get_capability),
                Compile: Some(ep_compile),
                ReleaseNodeComputeInfos: Some(ep_release_node_compute_infos),
                // Null members take ORT's documented defaults: NCHW, layout decisions left to
                // ORT, no dynamic options (ORT then ignores the keys it sends every EP), no
                // run hooks, and the factory's allocator / streams for every session.
                GetPreferredDataLayout: None,
                ShouldConvertDataLayoutForOp: None,
                SetDynamicOptions: None,
                OnRunStart: None,
                OnRunEnd: None,
                CreateAllocator: None,
                CreateSyncStreamForDevice: None,
                GetCompiledModelCompatibilityInfo: Some(ep_get_compiled_model_compatibility_info),
            },
            name: CString::new(name).expect("no NUL"),
            compat: CString::new(format!("{COMPAT_PREFIX}{} device={}", env!("CARGO_PKG_VERSION"), options.device))
                .expect("no NUL"),
            options,
            logger,
            types: Default::default(),
        })
    }

    fn name_str(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }

    pub fn into_raw(self: Box<BoltEp>) -> *mut OrtEp {
        Box::into_raw(self) as *mut OrtEp
    }

    /// # Safety
    /// `ep` came from [`BoltEp::into_raw`] and is not used afterwards.
    pub unsafe fn from_raw(ep: *mut OrtEp) -> Box<BoltEp> {
        Box::from_raw(ep as *mut BoltEp)
    }

    /// Logs through the session's ORT logger: at WARNING with EP option `verbose=1` (shown
    /// at ORT's default severity), else at VERBOSE (shown with the session's
    /// `log_severity_level=0`).
    fn log(&self, msg: impl FnOnce() -> String) {
        let level = if self.options.verbose {
            OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING
        } else {
            OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE
        };
        if self.logger.is_null() {
            return verbose(msg);
        }
        let ort = api().ort;
        let mut current = OrtLoggingLevel::ORT_LOGGING_LEVEL_FATAL;
        // SAFETY: the session's logger outlives its EP.
        unsafe {
            if check((ort.Logger_GetLoggingSeverityLevel)(self.logger, &mut current)).is_err()
                || (level as i32) < (current as i32)
            {
                return;
            }
            let text = CString::new(format!("[bolt-plugin] {}", msg()).replace('\0', " ")).unwrap_or_default();
            let _ = check((ort.Logger_LogMessage)(
                self.logger,
                level,
                text.as_ptr(),
                c"bolt-plugin".as_ptr(),
                0,
                c"BoltExecutionProvider".as_ptr(),
            ));
        }
    }
}

/// The start of the compatibility string ORT stores in compiled models (then the version and
/// the device): the factory accepts compiled models of this build's version.
pub const COMPAT_PREFIX: &str = "bolt-plugin ";

unsafe fn this<'a>(ep: *const OrtEp) -> &'a BoltEp {
    &*(ep as *const BoltEp)
}

unsafe extern "system" fn ep_get_name(ep: *const OrtEp) -> *const c_char {
    guard_value(std::ptr::null(), || this(ep).name.as_ptr())
}

// ------------------------------------------------------------------------- GetCapability

pub use bolt::plan::offload::subgraph;

/// The fused kernel adds its source operand (Gemm's C, a residual) element-wise at the
/// output's shape: a C that broadcasts (e.g. [1, N] read at runtime) cannot be fused, so the
/// partition stays with ORT.
pub fn source_fits(g: &Graph, p: &bolt::partition::Partition) -> Result<(), String> {
    let Some(src) = p.epilogue.form().source.as_ref().map(|s| &s.tensor) else { return Ok(()) };
    let shape = |t: &str| g.types.get(t).and_then(|ty| ty.shape.clone());
    match (shape(src), shape(&p.output)) {
        (Some(s), Some(o)) if s == o && !s.0.iter().any(|d| matches!(d, bolt::ir::Dim::Unknown)) => Ok(()),
        (s, o) => Err(format!(
            "source '{src}' of shape {} is not known to have the output's shape {}",
            s.map_or("?".into(), |s| s.to_string()),
            o.map_or("?".into(), |s| s.to_string())
        )),
    }
}

/// Whether a host may hand partition `p` of `g` to Bolt: its residual source has the output's
/// shape, and the partition plans on its own. ONNX Runtime's GetCapability and the TVM
/// patterns' check (through [`crate::capi::bolt_partition_json`]) both ask this, so both hosts
/// offload the same subgraphs.
pub fn claimable(g: &Graph, p: &bolt::partition::Partition) -> Result<(), String> {
    source_fits(g, p)?;
    bolt::plan::plan(&subgraph(g, &p.nodes)).map(|_| ()).map_err(|e| e.to_string())
}

unsafe extern "system" fn ep_get_capability(
    ep: *mut OrtEp,
    g: *const OrtGraph,
    info: *mut OrtEpGraphSupportInfo,
) -> Status {
    guard("GetCapability", || {
        let me = this(ep);
        let imported = match graph::import(g, None, None) {
            Ok(i) => i,
            Err(e) => {
                // A graph Bolt cannot read stays with ORT whole.
                me.log(|| format!("GetCapability: graph not imported, nothing claimed: {e}"));
                return Ok(());
            }
        };
        if let Ok(mut types) = me.types.lock() {
            types.extend(imported.graph.types.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let options = OrtNodeFusionOptions { ort_version_supported: EP_API_VERSION, drop_constant_initializers: true };
        // A compiled model's EPContext nodes written by this EP: each is one fused node.
        let ep_name = me.name_str();
        for n in imported.graph.nodes.iter().filter(|n| epcontext_of(&n.op, &ep_name).is_some()) {
            let node = imported
                .nodes
                .get(&n.name)
                .copied()
                .ok_or_else(|| format!("node '{}' is not in the ORT graph", n.name))?;
            me.log(|| format!("claim EPContext node {}", n.name));
            check((api().ep.EpGraphSupportInfo_AddNodesToFuse)(info, &node, 1, &options))?;
        }
        let parts = bolt::partition::partition(&imported.graph);
        for h in &parts.host {
            me.log(|| format!("host: {} ({}): {}", h.node, h.op_type, h.reason));
        }
        // Connected device work (partitions, stitched regions, pools, views) as one fused node
        // each, so activations stay on the device between Bolt's kernels.
        // Only the residual rule per partition: each group (or, where a group falls back, each
        // partition) is planned on its own by `offload`, once.
        let offload = bolt::plan::offload::offload(&imported.graph, &|p| source_fits(&imported.graph, p));
        for note in &offload.notes {
            me.log(|| note.clone());
        }
        // An ORT node the importer expanded into several is claimed once, by the first group
        // that holds any of them (its Compile imports the node whole again).
        let mut claimed: std::collections::HashSet<*const OrtNode> = std::collections::HashSet::new();
        for group in &offload.groups {
            let mut nodes: Vec<*const OrtNode> = group
                .nodes
                .iter()
                .map(|n| imported.nodes.get(n).copied().ok_or_else(|| format!("node '{n}' is not in the ORT graph")))
                .collect::<Res<_>>()?;
            let mut seen = std::collections::HashSet::new();
            nodes.retain(|n| seen.insert(*n));
            if nodes.iter().any(|n| claimed.contains(n)) {
                me.log(|| {
                    format!(
                        "partition {} shares a node ORT holds whole with another: left to ORT",
                        group.anchors.join(", ")
                    )
                });
                continue;
            }
            claimed.extend(nodes.iter().copied());
            me.log(|| {
                format!(
                    "claim partition {} ({} nodes: {})",
                    group.anchors.join(", "),
                    group.nodes.len(),
                    group.nodes.join(", ")
                )
            });
            check((api().ep.EpGraphSupportInfo_AddNodesToFuse)(info, nodes.as_ptr(), nodes.len(), &options))?;
        }
        Ok(())
    })
}

// ------------------------------------------------------------------------------- Compile

/// What a compiled fused node runs: its planned graph and the fused node's I/O names in
/// ORT's order.
pub struct Kernel {
    pub name: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub graph: Graph,
    /// Runs as work queued on ORT's compute stream (the test device), else at once.
    pub on_stream: bool,
    /// The CUDA ordinal (cuda device).
    pub device_id: usize,
    pub runner: Runner,
}

/// What runs a fused node's graph on the host.
pub enum Runner {
    /// The subgraph planned at Compile, run by the reference executor.
    Planned,
    /// A compiled Bolt artifact (compile once, EPContext): run as `bolt run` runs it, with its
    /// own plan, weights and precision; nothing is planned at session creation.
    Artifact(std::sync::Mutex<bolt::runtime::Reference>),
    /// A Bolt artifact on a GPU (the cuda device): its kernels launched on ORT's compute
    /// stream, on ORT's device buffers.
    Cuda(std::sync::Mutex<bolt::runtime::cuda::CudaExecutor>),
}

impl Runner {
    /// Runs on host tensors (`graph`: the planned graph [`Runner::Planned`] runs).
    pub fn run(&self, graph: &Graph, feeds: &HashMap<String, Tensor>) -> Res<HashMap<String, Tensor>> {
        use bolt::runtime::Executor;
        const POISONED: &str = "an earlier run panicked";
        match self {
            Runner::Planned => bolt::reference::run(graph, feeds).map_err(|e| e.to_string()),
            Runner::Artifact(x) => x.lock().map_err(|_| POISONED)?.run(feeds).map_err(|e| e.to_string()),
            Runner::Cuda(x) => x.lock().map_err(|_| POISONED)?.run(feeds).map_err(|e| e.to_string()),
        }
    }
}

impl Kernel {
    fn run(&self, feeds: &HashMap<String, Tensor>) -> Res<HashMap<String, Tensor>> {
        self.runner.run(&self.graph, feeds)
    }
}

#[repr(C)]
struct ComputeInfo {
    base: OrtNodeComputeInfo,
    kernel: Arc<Kernel>,
}

unsafe fn node_io(node: *const OrtNode) -> Res<(String, Vec<String>, Vec<String>)> {
    let ort = api().ort;
    let mut p: *const c_char = std::ptr::null();
    check((ort.Node_GetName)(node, &mut p))?;
    let name = cstr(p);
    let names = |count: unsafe extern "system" fn(*const OrtNode, *mut usize) -> Status,
                 get: unsafe extern "system" fn(*const OrtNode, *mut *const ort_sys::OrtValueInfo, usize) -> Status|
     -> Res<Vec<String>> {
        let mut n = 0usize;
        check(count(node, &mut n))?;
        let mut v = vec![std::ptr::null(); n];
        if n > 0 {
            check(get(node, v.as_mut_ptr(), n))?;
        }
        v.into_iter()
            .map(|vi| {
                if vi.is_null() {
                    return Ok(String::new());
                }
                let mut p: *const c_char = std::ptr::null();
                check((ort.GetValueInfoName)(vi, &mut p))?;
                Ok(cstr(p))
            })
            .collect()
    };
    let inputs = names(ort.Node_GetNumInputs, ort.Node_GetInputs)?;
    let outputs = names(ort.Node_GetNumOutputs, ort.Node_GetOutputs)?;
    Ok((name, inputs, outputs))
}

unsafe extern "system" fn ep_compile(
    ep: *mut OrtEp,
    graphs: *const *const OrtGraph,
    fused_nodes: *const *const OrtNode,
    count: usize,
    node_compute_infos: *mut *mut OrtNodeComputeInfo,
    ep_context_nodes: *mut *mut OrtNode,
) -> Status {
    guard("Compile", || {
        let me = this(ep);
        for i in 0..count {
            *node_compute_infos.add(i) = std::ptr::null_mut();
        }
        let mut made: Vec<*mut OrtNodeComputeInfo> = Vec::new();
        // The whole model's types, taken once for every fused node of this call.
        let hints = me.types.lock().map(|t| t.clone()).unwrap_or_default();
        let result = (|| -> Res<()> {
            for i in 0..count {
                let (name, inputs, outputs) = node_io(*fused_nodes.add(i))?;
                // Everything is copied out of the OrtGraph here: it is gone after Compile.
                let imported = graph::import(*graphs.add(i), Some(&outputs), Some(&hints))
                    .map_err(|e| format!("fused node '{name}': cannot read its graph: {e}"))?;
                let model_path = graph_model_path(*graphs.add(i))?;
                let (graph, runner) = if let Some(rel) = epcontext_artifact(&imported.graph, &me.name_str()) {
                    // A compiled model: open the artifact its EPContext node names; plan nothing.
                    let dir = model_path.as_deref().and_then(std::path::Path::parent).ok_or_else(|| {
                        format!(
                            "EPContext node '{name}': its artifact '{}' is relative to the model's file, but this \
                             model was not loaded from a file",
                            rel.display()
                        )
                    })?;
                    let (graph, runner) = open_artifact(&dir.join(&rel), &me.options)
                        .map_err(|e| format!("EPContext node '{name}': {e}"))?;
                    me.log(|| format!("compile {name}: loaded {} (EPContext), nothing planned", rel.display()));
                    (graph, runner)
                } else if let Some(c) = &me.options.context {
                    // Compile once: build the artifact beside the model ORT will save.
                    let (dir, rel) = context_location(c, model_path.as_deref(), &name)?;
                    let out = dir.join(&rel);
                    let mut opts = compile_options(&out, &me.options, format!("ONNX Runtime fused node {name}"));
                    // Kernels for the `arch` option, else this GPU's, else sm80's (the default:
                    // the artifact may move to a GPU machine later).
                    if !me.options.archs.is_empty() {
                        opts.archs = me.options.archs.clone();
                    } else if me.options.device == Device::Cuda {
                        opts.archs = vec![gpu_arch(me.options.device_id as usize)?];
                    }
                    let report = bolt::artifact::compile(&imported.graph, &opts).map_err(|e| {
                        // Symbolic dims the `dims` option leaves out are planned at 1, which
                        // some models cannot take (a pooling window larger than a 1-pixel image).
                        let symbolic: Vec<String> = imported
                            .graph
                            .inputs
                            .iter()
                            .filter_map(|i| imported.graph.types.get(i)?.shape.as_ref())
                            .flat_map(|s| s.0.iter())
                            .filter_map(|d| match d {
                                bolt::ir::Dim::Sym(k) if !opts.dims.iter().any(|r| &r.name == k) => Some(k.clone()),
                                _ => None,
                            })
                            .collect::<std::collections::BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        let hint = if symbolic.is_empty() {
                            String::new()
                        } else {
                            format!(
                                " (the input dims {} were planned at 1: give their ranges with the EP option dims, \
                                 e.g. dims={}=1..64)",
                                symbolic.join(", "),
                                symbolic[0]
                            )
                        };
                        format!("fused node '{name}': building its artifact {}: {e}{hint}", out.display())
                    })?;
                    me.log(|| {
                        format!(
                            "compile {name}: artifact {} ({}), {} kernel(s)",
                            out.display(),
                            report.numerics,
                            report.kernels
                        )
                    });
                    let (graph, runner) =
                        open_artifact(&out, &me.options).map_err(|e| format!("fused node '{name}': {e}"))?;
                    if ep_context_nodes.is_null() {
                        return Err("ep.context_enable=1 but ORT passed no EPContext node array".into());
                    }
                    *ep_context_nodes.add(i) = epcontext_node(&name, &inputs, &outputs, &rel, &me.name_str(), i == 0)?;
                    (graph, runner)
                } else if me.options.device == Device::Cuda {
                    let (graph, x) = build_for_gpu(&imported.graph, &me.options, &name)?;
                    me.log(|| format!("compile {name}: kernels for GPU {} ready", me.options.device_id));
                    (graph, Runner::Cuda(std::sync::Mutex::new(x)))
                } else {
                    // The `precision` option narrows what runs here too (the model's types at
                    // the node's edges), so the reference device answers as a GPU build would.
                    let narrowed = match me.options.precision.map(|p| p.storage()) {
                        Some(t) if t != bolt::ir::DType::F32 => {
                            bolt::ir::precision::convert_floats_keeping_io(&imported.graph, t)
                                .map_err(|e| format!("fused node '{name}': precision {t}: {e}"))?
                        }
                        _ => imported.graph.clone(),
                    };
                    let plan = bolt::plan::plan(&narrowed)
                        .map_err(|e| format!("fused node '{name}': planning failed: {e}"))?;
                    me.log(|| {
                        format!(
                            "compile {name}: {} node(s) -> {} planned node(s) [{}], inputs {inputs:?}, outputs {outputs:?}",
                            imported.graph.nodes.len(),
                            plan.graph.nodes.len(),
                            plan.graph.nodes.iter().map(|n| n.op.op_type()).collect::<Vec<_>>().join(", ")
                        )
                    });
                    (plan.graph, Runner::Planned)
                };
                let kernel = Arc::new(Kernel {
                    name,
                    inputs,
                    outputs,
                    graph,
                    on_stream: me.options.device == Device::HostGpu,
                    device_id: me.options.device_id as usize,
                    runner,
                });
                let info = Box::new(ComputeInfo {
                    base: OrtNodeComputeInfo {
                        ort_version_supported: EP_API_VERSION,
                        CreateState: Some(ci_create_state),
                        Compute: Some(ci_compute),
                        ReleaseState: Some(ci_release_state),
                    },
                    kernel,
                });
                let p = Box::into_raw(info) as *mut OrtNodeComputeInfo;
                made.push(p);
                *node_compute_infos.add(i) = p;
            }
            Ok(())
        })();
        if result.is_err() {
            for (i, p) in made.into_iter().enumerate() {
                drop(Box::from_raw(p as *mut ComputeInfo));
                *node_compute_infos.add(i) = std::ptr::null_mut();
            }
        }
        result
    })
}

// ------------------------------------------------------------------- Compile once (EPContext)

/// ORT's EPContext op (domain com.microsoft): a precompiled partition an EP loads instead of
/// compiling. Bolt's `ep_cache_context` is the path of a Bolt artifact (docs/artifact.md)
/// relative to the compiled model's file (`embed_mode` 0).
const EPCONTEXT: (&str, &str) = ("com.microsoft", "EPContext");

/// The artifact path of `g`'s node if `g` is one EPContext node written by the EP `ep_name`.
pub fn epcontext_artifact(g: &Graph, ep_name: &str) -> Option<std::path::PathBuf> {
    let [n] = g.nodes.as_slice() else { return None };
    epcontext_of(&n.op, ep_name)
}

fn epcontext_of(op: &Op, ep_name: &str) -> Option<std::path::PathBuf> {
    use bolt::ir::AttrValue;
    let Op::Opaque { domain, op_type, attrs, .. } = op else { return None };
    if (domain.as_str(), op_type.as_str()) != EPCONTEXT {
        return None;
    }
    let text = |key: &str| {
        attrs.iter().find(|(k, _)| k == key).and_then(|(_, v)| match v {
            AttrValue::String(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
    };
    let embed = attrs.iter().find(|(k, _)| k == "embed_mode").map(|(_, v)| v);
    let by_us = text("source").is_some_and(|s| s == ep_name);
    (by_us && matches!(embed, None | Some(AttrValue::Int(0))))
        .then(|| text("ep_cache_context").map(Into::into))
        .flatten()
}

/// Where compile once puts the artifact of fused node `node`: (the compiled model's
/// directory, the artifact's path relative to it: `<compiled model stem>.bolt/<node>`).
pub fn context_location(
    c: &crate::options::Context,
    model_path: Option<&std::path::Path>,
    node: &str,
) -> Res<(std::path::PathBuf, std::path::PathBuf)> {
    use std::path::{Path, PathBuf};
    let (dir, stem) = match (&c.file_path, model_path) {
        (Some(p), _) => {
            (p.parent().unwrap_or(Path::new("")).to_path_buf(), p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        }
        // ORT's default: `<model>_ctx.onnx` beside the source model.
        (None, Some(m)) => (
            m.parent().unwrap_or(Path::new("")).to_path_buf(),
            m.file_stem().map(|s| format!("{}_ctx", s.to_string_lossy())),
        ),
        (None, None) => (PathBuf::new(), None),
    };
    let stem = stem.ok_or_else(|| {
        "ep.context_enable=1: the model was not loaded from a file, so where ORT saves the compiled model is unknown; \
         set ep.context_file_path"
            .to_string()
    })?;
    let safe: String =
        node.chars().map(|ch| if ch.is_ascii_alphanumeric() || "-_.".contains(ch) { ch } else { '_' }).collect();
    Ok((dir, PathBuf::from(format!("{stem}.bolt")).join(safe)))
}

/// Numbers the cuda device's temporary artifact directories.
static NEXT_BUILD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The kernel architecture Bolt builds for GPU `ordinal` (sm80 for Ampere, sm90a for Hopper).
fn gpu_arch(ordinal: usize) -> Res<bolt_codegen::spec::Arch> {
    let ctx = crate::cuda::bind(ordinal)?;
    let (major, minor) = ctx.compute_capability().map_err(|e| format!("GPU {ordinal}: compute capability: {e}"))?;
    match major {
        8 => Ok(bolt_codegen::spec::Arch::Sm80),
        9 => Ok(bolt_codegen::spec::Arch::Sm90),
        _ => Err(format!("GPU {ordinal} is sm{major}{minor}: Bolt builds kernels for sm80 and sm90 only")),
    }
}

/// The archs an artifact built now carries kernels for: the `arch` option; else, for the cuda
/// device, the GPU of `device_id`, or sm80 when this machine has none (its PTX also runs on
/// Hopper); the reference device needs none (a reference-only artifact, no nvcc).
pub fn build_archs(options: &Options) -> Vec<bolt_codegen::spec::Arch> {
    if !options.archs.is_empty() {
        return options.archs.clone();
    }
    match options.device {
        Device::Cuda => vec![gpu_arch(options.device_id as usize).unwrap_or(bolt_codegen::spec::Arch::Sm80)],
        Device::Reference | Device::HostGpu => Vec::new(),
    }
}

/// What a host's subgraph is compiled with (both hosts): the EP's dims and precision, the
/// model's input and output types kept (the host hands over and takes back those), and the
/// host's name for it. Archs are the caller's.
pub fn compile_options(out: &std::path::Path, options: &Options, label: String) -> bolt::artifact::CompileOptions {
    bolt::artifact::CompileOptions {
        dims: options.dims.clone(),
        precision: options.precision,
        io_types: bolt::artifact::IoTypes::Model,
        source: bolt::artifact::Source::Host(label),
        ..bolt::artifact::CompileOptions::new(out)
    }
}

/// Builds `g` into an artifact for GPU `options.device_id` (through the kernel cache: a warm
/// cache runs no nvcc) and opens it on that GPU; the artifact's directory is removed once
/// open (the kernel library stays mapped, the weights are on the GPU). Both hosts use it.
pub fn build_for_gpu(g: &Graph, options: &Options, label: &str) -> Res<(Graph, bolt::runtime::cuda::CudaExecutor)> {
    let out = std::env::temp_dir().join(format!(
        "bolt-gpu-{}-{}",
        std::process::id(),
        NEXT_BUILD.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let built = (|| {
        let arch = gpu_arch(options.device_id as usize)?;
        let mut opts = compile_options(&out, options, label.to_string());
        opts.archs = vec![arch];
        bolt::artifact::compile(g, &opts).map_err(|e| format!("'{label}': building its kernels: {e}"))?;
        let a = bolt::artifact::Artifact::open(&out).map_err(|e| e.to_string())?;
        let run = bolt::runtime::RunOptions { device: options.device_id as usize, ..Default::default() };
        let x = bolt::runtime::cuda::CudaExecutor::new(&a, &run).map_err(|e| format!("'{label}': {e}"))?;
        Ok((a.graph(), x))
    })();
    let _ = std::fs::remove_dir_all(&out);
    built
}

/// Opens an artifact for the EP's device: its planned graph (what output shapes are inferred
/// on) and its runner (the reference executor, or the CUDA executor on GPU `device_id`).
pub fn open_artifact(dir: &std::path::Path, options: &Options) -> Res<(Graph, Runner)> {
    let a = bolt::artifact::Artifact::open(dir).map_err(|e| e.to_string())?;
    let runner = if options.device == Device::Cuda {
        let opts = bolt::runtime::RunOptions { device: options.device_id as usize, ..Default::default() };
        let x = bolt::runtime::cuda::CudaExecutor::new(&a, &opts).map_err(|e| e.to_string())?;
        Runner::Cuda(std::sync::Mutex::new(x))
    } else {
        Runner::Artifact(std::sync::Mutex::new(bolt::runtime::Reference::new(&a)))
    };
    Ok((a.graph(), runner))
}

/// The compiled model's path (the model ORT is loading), if it came from a file.
unsafe fn graph_model_path(g: *const OrtGraph) -> Res<Option<std::path::PathBuf>> {
    let mut p: *const ort_sys::os_char = std::ptr::null();
    check((api().ort.Graph_GetModelPath)(g, &mut p))?;
    let path = cstr(p as *const c_char);
    Ok((!path.is_empty()).then(|| path.into()))
}

/// A new EPContext node standing for fused node `name` (ORT takes ownership).
unsafe fn epcontext_node(
    name: &str,
    inputs: &[String],
    outputs: &[String],
    artifact: &std::path::Path,
    ep_name: &str,
    main: bool,
) -> Res<*mut OrtNode> {
    use ort_sys::{OrtOpAttr, OrtOpAttrType};
    let ort = api().ort;
    let editor = (ort.GetModelEditorApi)();
    if editor.is_null() {
        return Err("this ONNX Runtime has no model editor API (needed to write EPContext nodes)".into());
    }
    let editor = &*editor;
    let c = |s: &str| CString::new(s).map_err(|_| format!("'{s}' contains a NUL byte"));
    let mut attrs: Vec<*mut OrtOpAttr> = Vec::new();
    let result = (|| -> Res<*mut OrtNode> {
        let mut text = |key: &str, value: &str| -> Res<()> {
            let mut a: *mut OrtOpAttr = std::ptr::null_mut();
            let k = c(key)?;
            check((ort.CreateOpAttr)(
                k.as_ptr(),
                value.as_ptr() as *const c_void,
                value.len() as i32,
                OrtOpAttrType::ORT_OP_ATTR_STRING,
                &mut a,
            ))?;
            attrs.push(a);
            Ok(())
        };
        text("ep_cache_context", &artifact.to_string_lossy())?;
        text("source", ep_name)?;
        text("partition_name", name)?;
        text("ep_sdk_version", env!("CARGO_PKG_VERSION"))?;
        for (key, v) in [("embed_mode", 0i64), ("main_context", main as i64)] {
            let mut a: *mut OrtOpAttr = std::ptr::null_mut();
            let k = c(key)?;
            check((ort.CreateOpAttr)(
                k.as_ptr(),
                &v as *const i64 as *const c_void,
                1,
                OrtOpAttrType::ORT_OP_ATTR_INT,
                &mut a,
            ))?;
            attrs.push(a);
        }
        let ins: Vec<CString> = inputs.iter().map(|s| c(s)).collect::<Res<_>>()?;
        let outs: Vec<CString> = outputs.iter().map(|s| c(s)).collect::<Res<_>>()?;
        let ins_p: Vec<*const c_char> = ins.iter().map(|s| s.as_ptr()).collect();
        let outs_p: Vec<*const c_char> = outs.iter().map(|s| s.as_ptr()).collect();
        let (op, domain, node_name) = (c(EPCONTEXT.1)?, c(EPCONTEXT.0)?, c(name)?);
        let mut node: *mut OrtNode = std::ptr::null_mut();
        // CreateNode copies the attributes.
        check((editor.CreateNode)(
            op.as_ptr(),
            domain.as_ptr(),
            node_name.as_ptr(),
            ins_p.as_ptr(),
            ins_p.len(),
            outs_p.as_ptr(),
            outs_p.len(),
            attrs.as_mut_ptr(),
            attrs.len(),
            &mut node,
        ))?;
        Ok(node)
    })();
    for a in attrs {
        (ort.ReleaseOpAttr)(a);
    }
    result
}

unsafe extern "system" fn ep_release_node_compute_infos(
    _ep: *mut OrtEp,
    infos: *mut *mut OrtNodeComputeInfo,
    num: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        for i in 0..num {
            let p = *infos.add(i);
            if !p.is_null() {
                drop(Box::from_raw(p as *mut ComputeInfo));
            }
        }
    });
}

unsafe extern "system" fn ci_create_state(
    this: *mut OrtNodeComputeInfo,
    _ctx: *mut OrtNodeComputeContext,
    state: *mut *mut c_void,
) -> Status {
    guard("CreateState", || {
        // The kernel is immutable and shared: the state is the compute info itself.
        *state = this as *mut c_void;
        Ok(())
    })
}

unsafe extern "system" fn ci_release_state(_this: *mut OrtNodeComputeInfo, _state: *mut c_void) {}

unsafe extern "system" fn ci_compute(
    this: *mut OrtNodeComputeInfo,
    _state: *mut c_void,
    ctx: *mut OrtKernelContext,
) -> Status {
    let kernel = (*(this as *mut ComputeInfo)).kernel.clone();
    guard("Compute", || compute(&kernel, ctx).map_err(|e| format!("fused node '{}': {e}", kernel.name)))
}

/// Reads the fused node's inputs by name, runs the planned graph, writes the outputs with
/// the shapes this run produced (symbolic dims are resolved here, per call).
unsafe fn compute(k: &Arc<Kernel>, ctx: *mut OrtKernelContext) -> Res<()> {
    let ort = api().ort;
    if let Runner::Cuda(x) = &k.runner {
        return compute_cuda(k, x, ctx);
    }
    if k.on_stream {
        let mut handle: *mut c_void = std::ptr::null_mut();
        check((ort.KernelContext_GetGPUComputeStream)(ctx, &mut handle))?;
        if let Some(queue) = crate::host_gpu::queue_of_handle(handle) {
            return compute_on_stream(k, ctx, &queue);
        }
    }
    let mut inputs: HashMap<String, Tensor> = HashMap::new();
    for (name, v) in graph_inputs(k, ctx)? {
        inputs.insert(name.clone(), graph::value_to_tensor(v, &name)?);
    }
    let mut outs = k.run(&inputs)?;
    for (i, name) in k.outputs.iter().enumerate() {
        let t = outs.remove(name).ok_or_else(|| format!("output '{name}' was not computed"))?;
        let dims: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
        let mut v: *mut OrtValue = std::ptr::null_mut();
        check((ort.KernelContext_GetOutput)(ctx, i, dims.as_ptr(), dims.len(), &mut v))?;
        if v.is_null() {
            return Err(format!("ORT gave no buffer for output {i} ('{name}')"));
        }
        let (dtype, shape) = graph::tensor_meta(v)?;
        if dtype != t.dtype() || shape != t.shape {
            return Err(format!(
                "output '{name}': Bolt computed {}{:?} but ORT expects {dtype}{shape:?}",
                t.dtype(),
                t.shape
            ));
        }
        let mut data: *mut c_void = std::ptr::null_mut();
        check((ort.GetTensorMutableData)(v, &mut data))?;
        if data.is_null() && t.size_bytes() > 0 {
            return Err(format!("output '{name}' has no buffer"));
        }
        graph::write_tensor(&t, data);
    }
    Ok(())
}

/// The fused node's inputs that the planned graph reads, by name, each checked to be in the
/// node's device memory. (Constants Bolt copied at Compile time are skipped: the planned
/// weights are used instead.)
unsafe fn graph_inputs(k: &Kernel, ctx: *mut OrtKernelContext) -> Res<Vec<(String, *const OrtValue)>> {
    let ort = api().ort;
    let mut n_in = 0usize;
    check((ort.KernelContext_GetInputCount)(ctx, &mut n_in))?;
    let wanted: HashSet<&str> = k.graph.inputs.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for (i, name) in k.inputs.iter().enumerate().take(n_in) {
        if !wanted.contains(name.as_str()) {
            continue;
        }
        let mut v: *const OrtValue = std::ptr::null();
        check((ort.KernelContext_GetInput)(ctx, i, &mut v))?;
        if v.is_null() {
            return Err(format!("input {i} ('{name}') is missing"));
        }
        input_on_device(k, i, name, v)?;
        out.push((name.clone(), v));
    }
    Ok(out)
}

/// An input must be in the memory of the device the fused node runs on (ORT copies it there;
/// anything else would be read as the wrong kind of pointer).
unsafe fn input_on_device(k: &Kernel, i: usize, name: &str, v: *const OrtValue) -> Res<()> {
    let d = (api().ep.Value_GetMemoryDevice)(v);
    let gpu = if let Runner::Cuda(_) = k.runner { Some(k.device_id) } else { None };
    let (ok, device) = if let Some(ordinal) = gpu {
        // CPU inputs (ORT does not always copy them: see below) are uploaded by the run.
        (crate::cuda::ordinal_of_memory(d) == Some(ordinal) || crate::host_gpu::is_cpu(d), "GPU's or CPU")
    } else if k.on_stream {
        // ORT 1.31 hands some inputs of a device's fused node in CPU memory without a copy
        // (seen: a CPU Flatten's output feeding a Gemm); the host-backed device reads them
        // as they are. A real GPU device must upload those.
        (crate::host_gpu::is_mine(d) || crate::host_gpu::is_cpu(d), "host_gpu test device's or CPU")
    } else {
        (crate::host_gpu::is_cpu(d), "CPU")
    };
    if ok {
        return Ok(());
    }
    let ep = api().ep;
    let (ty, vendor) =
        if d.is_null() { (-1, 0) } else { ((ep.MemoryDevice_GetDeviceType)(d), (ep.MemoryDevice_GetVendorId)(d)) };
    Err(format!(
        "input {i} ('{name}') is in memory of device type {ty} (vendor {vendor:#x}), not in the {device} memory this \
         node runs on"
    ))
}

/// Compute as work queued on ORT's compute stream: the input buffers may still be filled by
/// copies queued before it, so they are read by the queued work, not here. Output shapes come
/// from shape inference on the input shapes (ORT allocates outputs before the work runs).
unsafe fn compute_on_stream(k: &Arc<Kernel>, ctx: *mut OrtKernelContext, queue: &crate::host_gpu::Queue) -> Res<()> {
    use crate::host_gpu::SendPtr;
    /// An input read now (CPU memory) or by the queued work (device memory).
    enum Feed {
        Staged(Tensor),
        Later(bolt::ir::DType, Vec<usize>, SendPtr),
    }
    let (ins, outs) = buffers(k, ctx)?;
    let mut inputs = Vec::new();
    for (name, dtype, dims, p, host) in ins {
        // A CPU input is staged before Compute returns, as `cuMemcpyAsync` stages pageable host
        // memory: ORT may free the buffer (and a concurrent run reuse it) as soon as Compute
        // returns, because CPU memory knows no stream. Device memory is read when the work runs.
        let feed = if host {
            Feed::Staged(graph::copy_tensor(dtype, dims, p, &name)?)
        } else {
            Feed::Later(dtype, dims, SendPtr(p))
        };
        inputs.push((name, feed));
    }
    let outputs: Vec<_> = outs.into_iter().map(|(n, t, d, p, _)| (n, t, d, SendPtr(p))).collect();
    let (kernel, node) = (k.clone(), k.name.clone());
    crate::host_gpu::count(crate::host_gpu::COMPUTES_QUEUED);
    queue.enqueue(move || {
        let mut feeds = HashMap::new();
        for (name, feed) in inputs {
            let t = match feed {
                Feed::Staged(t) => t,
                // SAFETY: ORT keeps device input buffers alive until the stream is synchronised.
                Feed::Later(dtype, dims, p) => unsafe { graph::copy_tensor(dtype, dims, p.0, &name)? },
            };
            feeds.insert(name, t);
        }
        let mut outs = kernel.run(&feeds).map_err(|e| format!("fused node '{node}': {e}"))?;
        for (name, dtype, dims, p) in outputs {
            let t =
                outs.remove(&name).ok_or_else(|| format!("fused node '{node}': output '{name}' was not computed"))?;
            if t.dtype() != dtype || t.shape != dims {
                return Err(format!(
                    "fused node '{node}': output '{name}' is {}{:?}, shape inference said {dtype}{dims:?}",
                    t.dtype(),
                    t.shape
                ));
            }
            // SAFETY: ORT allocated this output with these dims and dtype.
            unsafe { graph::write_tensor(&t, p.0) };
        }
        Ok(())
    });
    Ok(())
}

/// A tensor's name, type, dims, data pointer, and whether that pointer is CPU memory (ORT
/// leaves some inputs of a device's fused node there).
type Buffer = (String, bolt::ir::DType, Vec<usize>, *mut c_void, bool);

/// The fused node's input buffers, and its output buffers from ORT at the shapes inference
/// gives for these input shapes (ORT allocates outputs before any work runs).
unsafe fn buffers(k: &Kernel, ctx: *mut OrtKernelContext) -> Res<(Vec<Buffer>, Vec<Buffer>)> {
    use bolt::ir::{Shape, TensorType};
    let ort = api().ort;
    let mut graph = k.graph.clone();
    let mut inputs = Vec::new();
    for (name, v) in graph_inputs(k, ctx)? {
        let (dtype, dims) = graph::tensor_meta(v)?;
        let mut data: *const c_void = std::ptr::null();
        check((ort.GetTensorData)(v, &mut data))?;
        graph.types.insert(name.clone(), TensorType { dtype, shape: Some(Shape::from_static(&dims)) });
        let host = crate::host_gpu::is_cpu((api().ep.Value_GetMemoryDevice)(v));
        inputs.push((name, dtype, dims, data as *mut c_void, host));
    }
    let declared = graph.types.clone();
    bolt::ir::infer::infer_graph(&mut graph, &declared).map_err(|e| format!("output shapes: {e}"))?;
    let mut outputs = Vec::new();
    for (i, name) in k.outputs.iter().enumerate() {
        let ty = graph.types.get(name).ok_or_else(|| format!("output '{name}' has no inferred type"))?;
        let dims: Vec<usize> = ty
            .shape
            .as_ref()
            .and_then(|s| s.as_static())
            .ok_or_else(|| format!("output '{name}': shape not known from the input shapes"))?;
        let d64: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut v: *mut OrtValue = std::ptr::null_mut();
        check((ort.KernelContext_GetOutput)(ctx, i, d64.as_ptr(), d64.len(), &mut v))?;
        if v.is_null() {
            return Err(format!("ORT gave no buffer for output {i} ('{name}')"));
        }
        let mut data: *mut c_void = std::ptr::null_mut();
        check((ort.GetTensorMutableData)(v, &mut data))?;
        outputs.push((name.clone(), ty.dtype, dims, data, false));
    }
    Ok((inputs, outputs))
}

/// Compute on the cuda device: the artifact's steps queued on ORT's compute stream, reading
/// and writing ORT's buffers in place; no allocation and no host wait once this input shape
/// has been set up.
unsafe fn compute_cuda(
    k: &Kernel,
    x: &std::sync::Mutex<bolt::runtime::cuda::CudaExecutor>,
    ctx: *mut OrtKernelContext,
) -> Res<()> {
    use bolt::runtime::cuda::DeviceTensor;
    let mut stream: *mut c_void = std::ptr::null_mut();
    check((api().ort.KernelContext_GetGPUComputeStream)(ctx, &mut stream))?;
    let (ins, outs) = buffers(k, ctx)?;
    let tensor = |(name, dtype, shape, p, _): Buffer| DeviceTensor { name, dtype, shape, ptr: p as u64 };
    let ins: Vec<DeviceTensor> = ins.into_iter().map(tensor).collect();
    let outs: Vec<DeviceTensor> = outs.into_iter().map(tensor).collect();
    let mut x = x.lock().map_err(|_| "an earlier run of this node panicked".to_string())?;
    // SAFETY: ORT's buffers stay valid until its stream is synchronised; `stream` is ORT's
    // compute stream for this GPU (a Bolt stream of its primary context) or null (the
    // default stream).
    x.enqueue(&ins, &outs, stream as usize).map_err(|e| e.to_string())
}

unsafe extern "system" fn ep_get_compiled_model_compatibility_info(
    ep: *mut OrtEp,
    _graph: *const OrtGraph,
) -> *const c_char {
    guard_value(std::ptr::null(), || this(ep).compat.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_once_paths() {
        use crate::options::Context;
        use std::path::Path;
        // ep.context_file_path decides the directory and the artifact folder's name.
        let c = Context { file_path: Some("/out/model_ctx.onnx".into()) };
        let (dir, rel) = context_location(&c, Some(Path::new("/src/model.onnx")), "Bolt_fused/0").unwrap();
        assert_eq!((dir.as_path(), rel.as_path()), (Path::new("/out"), Path::new("model_ctx.bolt/Bolt_fused_0")));
        // Else ORT's default: <model>_ctx.onnx beside the model.
        let c = Context { file_path: None };
        let (dir, rel) = context_location(&c, Some(Path::new("/src/model.onnx")), "n").unwrap();
        assert_eq!((dir.as_path(), rel.as_path()), (Path::new("/src"), Path::new("model_ctx.bolt/n")));
        assert!(context_location(&c, None, "n").unwrap_err().contains("set ep.context_file_path"));
    }

    #[test]
    fn only_our_epcontext_nodes_with_a_path_are_ours() {
        use bolt::ir::AttrValue;
        let node = |source: &str, embed: i64| Op::Opaque {
            domain: "com.microsoft".into(),
            op_type: "EPContext".into(),
            attrs: vec![
                ("source".into(), AttrValue::String(source.as_bytes().to_vec())),
                ("embed_mode".into(), AttrValue::Int(embed)),
                ("ep_cache_context".into(), AttrValue::String(b"m_ctx.bolt/n".to_vec())),
            ],
            why: "".into(),
        };
        assert_eq!(epcontext_of(&node("Bolt", 0), "Bolt"), Some("m_ctx.bolt/n".into()));
        // Another EP's compiled partition, or an embedded blob Bolt never writes: not Bolt's.
        assert_eq!(epcontext_of(&node("QNNExecutionProvider", 0), "Bolt"), None);
        assert_eq!(epcontext_of(&node("Bolt", 1), "Bolt"), None);
    }
    use bolt::ir::builder::GraphBuilder;
    use bolt::ir::{DType, Dim, Shape, Unary};

    /// relu(a @ w + c) with a [m, 4] and C read at run time.
    fn gemm_graph(c_shape: Shape) -> Graph {
        let mut b = GraphBuilder::new("t");
        let a = b.input("a", DType::F32, Shape(vec![Dim::Sym("m".into()), Dim::Known(4)]));
        let c = b.input("c", DType::F32, c_shape);
        let w = b.initializer("w", Tensor::from_f32(vec![4, 5], vec![0.5; 20]));
        let y = b.node("g", Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: false }, &[&a, &w, &c]);
        let r = b.node("r", Op::Unary(Unary::Relu), &[&y]);
        b.output(&r);
        b.finish().unwrap()
    }

    #[test]
    fn subgraph_takes_constants_inputs_and_outputs() {
        let g = gemm_graph(Shape(vec![Dim::Sym("m".into()), Dim::Known(5)]));
        let parts = bolt::partition::partition(&g);
        assert_eq!(parts.partitions.len(), 1);
        let p = &parts.partitions[0];
        assert_eq!(p.nodes, ["g", "r"]);
        let sub = subgraph(&g, &p.nodes);
        assert_eq!(sub.inputs, ["a", "c"]);
        assert!(sub.initializers.contains_key("w"));
        assert_eq!(sub.outputs, ["r_out"]);
        assert!(source_fits(&g, p).is_ok());
        let plan = bolt::plan::plan(&sub).unwrap();
        assert_eq!(plan.graph.nodes.len(), 1);
    }

    #[test]
    fn broadcasting_source_is_left_to_ort() {
        // Bolt's partitioner keeps a Gemm whose runtime C broadcasts ([1, N]) on the host, so
        // GetCapability never claims it ([`source_fits`] guards the same rule).
        let g = gemm_graph(Shape::from_static(&[1, 5]));
        let parts = bolt::partition::partition(&g);
        assert!(parts.partitions.is_empty());
        assert!(parts.host.iter().any(|h| h.node == "g" && h.reason.contains("'c'")), "{:?}", parts.host);
    }
}
