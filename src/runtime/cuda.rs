//! The `cuda` device: the artifact's kernel library on GPU 0 through the driver API (cudarc,
//! libcuda loaded at run time, so builds need no GPU).
//!
//! Steps: GEMM/conv kernels, back-to-back chain kernels and glue kernels (layout transposes,
//! channel padding, casts) of the one library, each set up once per input shape (CUTLASS
//! Params built by `initialize`) and launched on the stream.
//!
//! Memory: the weights are uploaded once (one buffer, `weights.bin` as written); activations
//! live in one arena at the offsets the artifact planned by liveness; each kernel and chain gets its own
//! zeroed workspace range sized for its problem (split-K / stream-K semaphores must not be
//! shared). All of it is allocated at set-up, once per input shape; a run only copies inputs
//! in, launches, and copies outputs out, so the launch sequence can be captured in a CUDA
//! graph (`RunOptions::graph`). Nodes the plan leaves to the host run on the CPU reference
//! with copies (correct, not fast; they make a run synchronise, so no graph then).
//!
//! A failed launch poisons the executor: CUDA errors are sticky in a context, so later runs
//! refuse with the first error instead of computing garbage.

use super::{bindings_of_shapes, prepare_inputs, Executor, RunOptions, RuntimeError, Timings};
use crate::artifact::format::{KernelChoice, PlanFile};
use crate::artifact::Artifact;
use crate::ir::{DType, Graph, Tensor};
use crate::plan::lower::CopyBlock;
use bolt_codegen::abi::{
    BoltArgs, BoltAttentionArgs, BoltAttentionProblem, BoltB2bArgs, BoltGlueArgs, BoltGlueProblem, BoltRecurrentArgs,
    BoltRecurrentProblem, BoltStitchArgs, BoltStitchProblem, KernelArgs, Status,
};
use bolt_codegen::b2b::{B2bKernel, B2bProblem};
use bolt_codegen::loader::{AttentionKernel, GlueKernel, Kernel, KernelLibrary, Params, RecurrentKernel, StitchKernel};
use bolt_codegen::spec::Arch;
use bolt_profiler::workload::Problem;
use cudarc::driver::{result, sys, CudaContext, CudaSlice, CudaStream, DevicePtr};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

fn drv<T>(what: &str, r: Result<T, cudarc::driver::DriverError>) -> Result<T, RuntimeError> {
    r.map_err(|e| RuntimeError::Cuda(format!("{what}: {e}")))
}

/// One step of a run.
enum Step {
    /// CUTLASS's Params built once for this shape (ABI v2 `initialize`); a run only launches.
    Kernel {
        node: String,
        problem: Problem,
        params: Params<BoltArgs>,
    },
    /// A glue kernel (transpose, channel padding, cast); its Params built once likewise.
    Glue {
        node: String,
        problem: BoltGlueProblem,
        params: Params<BoltGlueArgs>,
    },
    /// A stitched kernel (a region of element-wise ops and row reductions); Params likewise.
    Stitch {
        node: String,
        problem: BoltStitchProblem,
        params: Params<BoltStitchArgs>,
    },
    /// A fused attention kernel; Params likewise. A mask whose rows are not whole vectors is
    /// first copied into padded rows of the node's scratch (`stage`), which the kernel reads.
    Attention {
        node: String,
        problem: Box<BoltAttentionProblem>,
        params: Params<BoltAttentionArgs>,
        stage: Option<(u64, u64, CopyBlock)>,
    },
    /// A recurrent scan kernel; Params likewise.
    Recurrent {
        node: String,
        problem: BoltRecurrentProblem,
        params: Params<BoltRecurrentArgs>,
    },
    /// A back-to-back chain kernel; its Params built once likewise.
    Chain {
        node: String,
        problem: B2bProblem,
        params: Params<BoltB2bArgs>,
    },
    /// A copy op (a view: Reshape, Flatten, Squeeze, Unsqueeze, Identity; or Concat): its
    /// rectangles copied device to device on the stream (no host round trip).
    Copy {
        node: String,
        blocks: Vec<(u64, u64, CopyBlock)>,
    },
    Host {
        node: usize,
    },
}

/// What one node of the plan becomes before the workspaces are laid out.
enum Planned {
    Host,
    Copy(String, Vec<(u64, u64, CopyBlock)>),
    Kernel(String, Kernel, Problem, BoltArgs, usize),
    Chain(String, B2bKernel, B2bProblem, BoltB2bArgs, usize),
    Glue(String, GlueKernel, BoltGlueProblem, BoltGlueArgs),
    Stitch(String, StitchKernel, Box<BoltStitchProblem>, BoltStitchArgs),
    /// The kernel, problem, arguments (bias set at layout when staged), the mask staging (the
    /// mask's address, the copy) and the scratch: staged mask rows first, then the kernel's
    /// workspace (sm90: the rows' log-sum-exp).
    Attention(
        String,
        AttentionKernel,
        Box<BoltAttentionProblem>,
        BoltAttentionArgs,
        Option<(u64, CopyBlock)>,
        AttentionScratch,
    ),
    Recurrent(String, RecurrentKernel, BoltRecurrentProblem, BoltRecurrentArgs),
}

/// An attention node's scratch bytes: its staged mask rows, then (256-byte aligned) its
/// kernel's workspace.
#[derive(Clone, Copy, Debug)]
struct AttentionScratch {
    staging: usize,
    workspace: usize,
}

impl AttentionScratch {
    fn workspace_offset(&self) -> usize {
        self.staging.div_ceil(256) * 256
    }

    fn bytes(&self) -> usize {
        if self.workspace == 0 {
            self.staging
        } else {
            self.workspace_offset() + self.workspace
        }
    }
}

/// An instantiated CUDA graph of one run's launches (raw handles: it may live on a stream the
/// caller owns).
struct Graphed {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Drop for Graphed {
    fn drop(&mut self) {
        // SAFETY: handles created by end_capture / instantiate and destroyed once, here.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

/// What is set up for one set of input shapes.
struct Prepared {
    shapes: Vec<Vec<usize>>,
    graph: Graph,
    steps: Vec<Step>,
    inputs: HashMap<String, (u64, usize)>,
    _input_buf: Option<CudaSlice<u8>>,
    _workspace: Option<CudaSlice<u8>>,
    cuda_graph: Option<Graphed>,
}

pub struct CudaExecutor {
    ctx: Arc<CudaContext>,
    _own_stream: Arc<CudaStream>,
    stream: sys::CUstream,
    library: KernelLibrary,
    arch: Arch,
    name: String,
    plan: PlanFile,
    graph: Graph,
    weights: CudaSlice<u8>,
    arena: CudaSlice<u8>,
    opts: RunOptions,
    prepared: Option<Prepared>,
    /// The sizes `arena` holds every tensor at ([`CudaExecutor::grow_arena`]).
    arena_dims: std::collections::BTreeMap<String, usize>,
    poisoned: Option<String>,
    timings: Option<Timings>,
    /// Recorded after each [`CudaExecutor::enqueue`]: the next one, maybe on another stream,
    /// waits for it (runs share the arena).
    done: Option<Event>,
}

/// A CUDA event without timing, destroyed on drop.
struct Event(sys::CUevent);

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by event::create, destroyed once.
        unsafe {
            let _ = result::event::destroy(self.0);
        }
    }
}

/// A tensor in the executor GPU's memory (a host framework's buffer).
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Its device address (`CUdeviceptr`).
    pub ptr: u64,
}

// SAFETY: the raw handles (streams, events, graphs, Params) belong to one context, which every
// entry point binds to the calling thread before using them; `&mut self` serialises their use.
unsafe impl Send for CudaExecutor {}

fn base(s: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

impl CudaExecutor {
    /// Opens the primary context of GPU `opts.device`. Runs go on `opts.stream` when given (a
    /// `CUstream` of that context, e.g. the host framework's), else on a stream of the
    /// executor's own.
    pub fn new(artifact: &Artifact, opts: &RunOptions) -> Result<CudaExecutor, RuntimeError> {
        // SAFETY: only tries to dlopen libcuda; cudarc's own loader panics when it is absent.
        if !unsafe { sys::is_culib_present() } {
            return Err(RuntimeError::NoDriver("no CUDA driver library (libcuda.so) on this machine".into()));
        }
        if let bolt_profiler::device::Detection::NoGpu(why) = bolt_profiler::device::detect() {
            return Err(RuntimeError::NoGpu(why));
        }
        let ctx = drv(&format!("cannot open GPU {}", opts.device), CudaContext::new(opts.device))?;
        let stream = drv("new stream", ctx.new_stream())?;
        let (major, minor) = drv("compute capability", ctx.compute_capability())?;
        let arch = match major {
            8 => Arch::Sm80,
            9 => Arch::Sm90,
            _ => {
                return Err(RuntimeError::NoKernelImage {
                    kernel: "(any)".into(),
                    arch: format!("sm{major}{minor}"),
                    built: artifact.manifest.archs.iter().map(|a| format!("{a:?}")).collect(),
                })
            }
        };
        let library = match &artifact.library {
            Some(p) => KernelLibrary::open(p).map_err(|e| RuntimeError::Cuda(format!("kernel library: {e}")))?,
            None if artifact.manifest.archs.is_empty() => {
                return Err(RuntimeError::Unsupported(
                    "the artifact is reference-only (built for no GPU arch): it has no kernels to run".into(),
                ))
            }
            None => return Err(RuntimeError::Unsupported("the artifact has no kernel library".into())),
        };
        let name = format!("{} (sm{major}{minor})", ctx.name().unwrap_or_else(|_| format!("GPU {}", opts.device)));
        let weights = drv("upload weights", stream.clone_htod(artifact.weights_blob.as_slice()))?;
        let arena = drv("alloc activation arena", stream.alloc_zeros::<u8>(artifact.plan.arena.bytes.max(1) as usize))?;
        Ok(CudaExecutor {
            stream: opts.stream.map_or(stream.cu_stream(), |s| s as sys::CUstream),
            ctx,
            _own_stream: stream,
            library,
            arch,
            name,
            arena_dims: artifact.plan.arena_dims(),
            plan: artifact.plan.clone(),
            graph: artifact.graph(),
            weights,
            arena,
            opts: opts.clone(),
            prepared: None,
            poisoned: None,
            timings: None,
            done: None,
        })
    }

    /// Device address of tensor `t` (weight, arena tensor or graph input).
    fn address(&self, t: &str, inputs: &HashMap<String, (u64, usize)>) -> Option<u64> {
        let s = &*self._own_stream;
        if let Some(w) = self.plan.weights.iter().find(|w| w.name == t) {
            return Some(base(&self.weights, s) + w.offset);
        }
        if let Some(a) = self.plan.arena.tensors.iter().find(|a| a.name == t) {
            return Some(base(&self.arena, s) + a.offset);
        }
        inputs.get(t).map(|(p, _)| *p)
    }

    /// Sizes beyond those the arena was planned for (the artifact's largest bucket; dims no
    /// bucket lists at 1) would write past it: the arena is planned again for the larger sizes
    /// and reallocated, here in preparation (runs allocate nothing). Kernels take any size;
    /// the last bucket's choices run. Compile-once for dynamic shapes: nothing is rebuilt.
    fn grow_arena(&mut self, bindings: &HashMap<String, usize>) -> Result<(), RuntimeError> {
        let mut dims = self.arena_dims.clone();
        for (k, &v) in bindings {
            let d = dims.entry(k.clone()).or_insert(v);
            *d = (*d).max(v);
        }
        let bound: crate::compile::DimBindings = dims.iter().map(|(k, &v)| (k.clone(), v)).collect();
        let plan = crate::runtime::memory::plan_arena(&self.graph, &bound)
            .map_err(|e| RuntimeError::Unsupported(format!("planning memory for {dims:?}: {e}")))?;
        // Earlier runs, maybe on other streams, may still read the old arena.
        drv("synchronise before growing the arena", self.ctx.synchronize())?;
        self.arena = drv("alloc activation arena", self._own_stream.alloc_zeros::<u8>(plan.bytes.max(1) as usize))?;
        // Zeroed on this executor's stream; runs may enqueue on another.
        drv("synchronise the new arena", self._own_stream.synchronize())?;
        self.plan.arena = plan;
        self.arena_dims = dims;
        Ok(())
    }

    /// Sets up every launch for the inputs' shapes and types (`inputs`: graph input name ->
    /// (shape, dtype)): allocations happen here, not in runs.
    fn prepare(&mut self, inputs: &HashMap<String, (Vec<usize>, DType)>) -> Result<(), RuntimeError> {
        let shapes: Vec<Vec<usize>> = self.graph.inputs.iter().map(|n| inputs[n].0.clone()).collect();
        if self.prepared.as_ref().is_some_and(|p| p.shapes == shapes) {
            return Ok(());
        }
        self.prepared = None;
        let bindings = bindings_of_shapes(&self.graph, |n| inputs.get(n).map(|(s, _)| s.as_slice()));
        if crate::artifact::format::exceeding(&self.arena_dims, &bindings).is_some() {
            self.grow_arena(&bindings)?;
        }
        let graph = crate::plan::edit::bind_inputs(&self.graph, &bindings)?;
        let bucket = self.plan.bucket_for(&bindings);
        let (uses, skipped) = crate::plan::lower::workloads(&graph, &bindings);
        let problems: HashMap<&str, Problem> = uses.iter().map(|u| (u.node.as_str(), u.workload.problem)).collect();
        let (chain_uses, _) = crate::plan::lower::chains(&graph, &uses, &skipped);
        let chain_problems: HashMap<&str, B2bProblem> =
            chain_uses.iter().map(|c| (c.node.as_str(), c.problem)).collect();
        let stream = self._own_stream.clone();

        // Graph inputs: one buffer, 256-byte aligned ranges.
        let mut offs = HashMap::new();
        let mut total = 0u64;
        for (n, s) in self.graph.inputs.iter().zip(&shapes) {
            let bytes = s.iter().product::<usize>() * inputs[n].1.size_bytes().unwrap_or(1);
            offs.insert(n.clone(), (total, bytes));
            total = crate::artifact::format::align_up(total + bytes as u64, 256);
        }
        let input_buf =
            if total > 0 { Some(drv("alloc inputs", stream.alloc_zeros::<u8>(total as usize))?) } else { None };
        let ib = input_buf.as_ref().map_or(0, |b| base(b, &stream));
        let input_addr: HashMap<String, (u64, usize)> = offs.into_iter().map(|(k, (o, b))| (k, (ib + o, b))).collect();

        // Per node: host, a glue kernel, or a kernel with its problem, arguments and
        // workspace bytes.
        let mut planned: Vec<Planned> = Vec::new();
        let mut ws_total = 0u64;
        let mut ws_offsets = Vec::new();
        for n in &graph.nodes {
            if let Some(g) = self.plan.glue.iter().find(|g| g.node == n.name) {
                planned.push(self.plan_glue(&graph, n, g, &bindings, &input_addr)?);
                continue;
            }
            if let Some(st) = self.plan.stitch.iter().find(|s| s.node == n.name) {
                planned.push(self.plan_stitch(&graph, n, st, &input_addr)?);
                continue;
            }
            if let Some(r) = self.plan.recurrent.iter().find(|r| r.node == n.name) {
                planned.push(self.plan_recurrent(&graph, n, r, &input_addr)?);
                continue;
            }
            if let Some(a) = self.plan.attention.iter().find(|a| a.node == n.name) {
                let p = self.plan_attention(&graph, n, a, &input_addr)?;
                if let Planned::Attention(.., scratch) = &p {
                    ws_offsets.push(ws_total);
                    ws_total = crate::artifact::format::align_up(ws_total + scratch.bytes() as u64, 256);
                }
                planned.push(p);
                continue;
            }
            if let Some(c) = self.plan.chains.iter().find(|c| c.node == n.name) {
                let problem = chain_problems.get(n.name.as_str()).copied();
                let (kernel, problem, args, ws) = self.plan_chain(n, c, bucket, problem, &input_addr)?;
                ws_offsets.push(ws_total);
                ws_total = crate::artifact::format::align_up(ws_total + ws as u64, 256);
                planned.push(Planned::Chain(n.name.clone(), kernel, problem, args, ws));
                continue;
            }
            let Some(nk) = self.plan.kernels.iter().find(|k| k.node == n.name) else {
                planned.push(self.plan_copy(&graph, n, &input_addr).unwrap_or(Planned::Host));
                continue;
            };
            // An sm80 kernel runs on an H100 too: as sm_90 SASS where the artifact was built for
            // it, else through its compute_80 PTX, which the driver JIT-compiles when it is no
            // newer than the driver (slower than sm90 kernels either way).
            let on_this_gpu = |c: &&KernelChoice| c.arch == self.arch;
            let via_ptx = |c: &&KernelChoice| self.arch == Arch::Sm90 && c.arch == Arch::Sm80;
            let choice: &KernelChoice = nk.buckets[bucket]
                .iter()
                .find(on_this_gpu)
                .or_else(|| nk.buckets[bucket].iter().find(via_ptx))
                .ok_or_else(|| RuntimeError::NoKernelImage {
                    kernel: n.name.clone(),
                    arch: self.name.clone(),
                    built: self.plan.kernels[0].buckets[bucket].iter().map(|c| format!("{:?}", c.arch)).collect(),
                })?;
            let kernel = self.library.get(&choice.symbol).cloned().ok_or_else(|| RuntimeError::Kernel {
                kernel: choice.symbol.clone(),
                problem: "-".into(),
                arch: self.name.clone(),
                reason: "not in the kernel library".into(),
            })?;
            let problem = *problems.get(n.name.as_str()).ok_or_else(|| RuntimeError::Kernel {
                kernel: choice.symbol.clone(),
                problem: "-".into(),
                arch: self.name.clone(),
                reason: format!("node '{}' has no problem at these shapes", n.name),
            })?;
            let describe = || format!("{problem:?}");
            let (status, ws) = match &problem {
                Problem::Gemm(p) => (kernel.can_implement(p), kernel.workspace_size(p)),
                Problem::Conv2d(p) => (kernel.can_implement(p), kernel.workspace_size(p)),
            };
            if status != Status::Ok {
                return Err(RuntimeError::Kernel {
                    kernel: choice.symbol.clone(),
                    problem: describe(),
                    arch: self.name.clone(),
                    reason: format!("can_implement: {status}"),
                });
            }
            let addr = |j: usize| -> Result<*const c_void, RuntimeError> {
                match n.input(j) {
                    None => Ok(std::ptr::null()),
                    Some(t) => self.address(t, &input_addr).map(|p| p as *const c_void).ok_or_else(|| {
                        RuntimeError::Unsupported(format!("node '{}': tensor '{t}' has no device address", n.name))
                    }),
                }
            };
            let d = self.address(&n.outputs[0], &input_addr).ok_or_else(|| {
                RuntimeError::Unsupported(format!("node '{}': output '{}' is not in the arena", n.name, n.outputs[0]))
            })?;
            let args = BoltArgs {
                a: addr(0)?,
                b: addr(1)?,
                bias: addr(2)?,
                c: addr(3)?,
                d: d as *mut c_void,
                alpha: nk.alpha,
                beta: nk.beta,
            };
            ws_offsets.push(ws_total);
            ws_total = crate::artifact::format::align_up(ws_total + ws as u64, 256);
            planned.push(Planned::Kernel(n.name.clone(), kernel, problem, args, ws));
        }
        let workspace = if ws_total > 0 {
            Some(drv("alloc workspaces", stream.alloc_zeros::<u8>(ws_total as usize))?)
        } else {
            None
        };
        let wb = workspace.as_ref().map_or(0, |w| base(w, &stream));
        let mut steps = Vec::new();
        // Workspace ranges in the order they were laid out (one per kernel and chain).
        let mut next_ws = ws_offsets.into_iter();
        let mut ws_ptr = |ws: usize| {
            let offset = next_ws.next().expect("one workspace range per kernel");
            if ws == 0 {
                std::ptr::null_mut()
            } else {
                (wb + offset) as *mut c_void
            }
        };
        let s = self.stream as *mut c_void;
        // SAFETY (every initialize below): device pointers into the weights, arena and input
        // buffers, sized for the problem; a zeroed workspace of `ws` bytes (none for glue);
        // all live as long as the steps.
        for (i, p) in planned.into_iter().enumerate() {
            let step = match p {
                Planned::Host => Step::Host { node: i },
                Planned::Copy(node, blocks) => Step::Copy { node, blocks },
                Planned::Glue(node, kernel, problem, args) => {
                    let params = unsafe { kernel.initialize(&problem, &args, s) }
                        .map_err(|e| self.call_error(kernel.symbol(), &node, &problem, e))?;
                    Step::Glue { node, problem, params }
                }
                Planned::Stitch(node, kernel, problem, args) => {
                    let params = unsafe { kernel.initialize(&problem, &args, s) }
                        .map_err(|e| self.call_error(kernel.symbol(), &node, &problem, e))?;
                    Step::Stitch { node, problem: *problem, params }
                }
                Planned::Recurrent(node, kernel, problem, args) => {
                    let params = unsafe { kernel.initialize(&problem, &args, s) }
                        .map_err(|e| self.call_error(kernel.symbol(), &node, &problem, e))?;
                    Step::Recurrent { node, problem, params }
                }
                Planned::Attention(node, kernel, problem, mut args, stage, scratch) => {
                    let w = ws_ptr(scratch.bytes());
                    let stage = stage.map(|(src, block)| {
                        args.bias = w as *const c_void;
                        (src, w as u64, block)
                    });
                    let workspace = if scratch.workspace == 0 {
                        std::ptr::null_mut()
                    } else {
                        (w as u64 + scratch.workspace_offset() as u64) as *mut c_void
                    };
                    let params = unsafe { kernel.initialize(&problem, &args, workspace, scratch.workspace, s) }
                        .map_err(|e| self.call_error(kernel.symbol(), &node, &problem, e))?;
                    Step::Attention { node, problem, params, stage }
                }
                Planned::Chain(node, kernel, problem, args, ws) => {
                    let w = ws_ptr(ws);
                    let params = unsafe { kernel.initialize(&problem, &args, w, ws, s) }
                        .map_err(|e| self.call_error(&kernel.symbol, &node, &problem, e))?;
                    Step::Chain { node, problem, params }
                }
                Planned::Kernel(node, kernel, problem, args, ws) => {
                    let w = ws_ptr(ws);
                    let params = unsafe {
                        match &problem {
                            Problem::Gemm(p) => kernel.initialize(p, &args, w, ws, s),
                            Problem::Conv2d(p) => kernel.initialize(p, &args, w, ws, s),
                        }
                    }
                    .map_err(|e| self.call_error(kernel.symbol(), &node, &problem, e))?;
                    Step::Kernel { node, problem, params }
                }
            };
            steps.push(step);
        }
        drv("synchronize", stream.synchronize())?;
        self.prepared = Some(Prepared {
            shapes,
            graph,
            steps,
            inputs: input_addr,
            _input_buf: input_buf,
            _workspace: workspace,
            cuda_graph: None,
        });
        // The allocations' zeroing ran on the executor's own stream; runs may use another.
        drv("synchronize", stream.synchronize())?;
        Ok(())
    }

    /// A chain node's kernel (this bucket's), problem, arguments and workspace bytes. Inputs:
    /// A, then each layer's weight and bias, then the last layer's source.
    fn plan_chain(
        &self,
        n: &crate::ir::Node,
        c: &crate::artifact::format::NodeChain,
        bucket: usize,
        problem: Option<B2bProblem>,
        input_addr: &HashMap<String, (u64, usize)>,
    ) -> Result<(B2bKernel, B2bProblem, BoltB2bArgs, usize), RuntimeError> {
        let choice = &c.buckets[bucket];
        let fail = |problem: String, reason: String| RuntimeError::Kernel {
            kernel: format!("{} (node {})", choice.symbol, n.name),
            problem,
            arch: self.name.clone(),
            reason,
        };
        let kernel = self
            .library
            .b2b(&choice.symbol)
            .cloned()
            .ok_or_else(|| fail("-".into(), "not in the kernel library".into()))?;
        let problem = problem.ok_or_else(|| fail("-".into(), "the chain has no problem at these shapes".into()))?;
        let status = kernel.can_implement(&problem);
        if status != Status::Ok {
            return Err(fail(format!("{problem:?}"), format!("can_implement: {status}")));
        }
        let at = |j: usize| -> Result<*const c_void, RuntimeError> {
            match n.input(j) {
                None => Ok(std::ptr::null()),
                Some(t) => self.address(t, input_addr).map(|p| p as *const c_void).ok_or_else(|| {
                    RuntimeError::Unsupported(format!("node '{}': tensor '{t}' has no device address", n.name))
                }),
            }
        };
        let layers = c.scalars.len();
        let mut args = BoltB2bArgs { a: at(0)?, c: at(1 + 2 * layers)?, ..Default::default() };
        args.d = self.address(&n.outputs[0], input_addr).ok_or_else(|| {
            RuntimeError::Unsupported(format!("node '{}': output '{}' is not in the arena", n.name, n.outputs[0]))
        })? as *mut c_void;
        if layers > args.layer.len() {
            return Err(fail(format!("{problem:?}"), format!("{layers} layers")));
        }
        for (i, &(alpha, beta)) in c.scalars.iter().enumerate() {
            args.layer[i].b = at(1 + 2 * i)?;
            args.layer[i].bias = at(2 + 2 * i)?;
            args.layer[i].alpha = alpha;
            args.layer[i].beta = beta;
        }
        let ws = kernel.workspace_size(&problem);
        Ok((kernel, problem, args, ws))
    }

    /// A glue node's kernel, problem (from the bound shapes) and arguments.
    fn plan_glue(
        &self,
        graph: &Graph,
        n: &crate::ir::Node,
        g: &crate::artifact::format::NodeGlue,
        bindings: &HashMap<String, usize>,
        input_addr: &HashMap<String, (u64, usize)>,
    ) -> Result<Planned, RuntimeError> {
        let fail = |problem: String, reason: String| RuntimeError::Kernel {
            kernel: format!("{} (node {})", g.symbol, n.name),
            problem,
            arch: self.name.clone(),
            reason,
        };
        let kernel =
            self.library.glue(&g.spec).cloned().ok_or_else(|| fail("-".into(), "not in the kernel library".into()))?;
        let u = crate::plan::lower::glue(graph, n, bindings)
            .unwrap_or_else(|| Err("not a glue op".into()))
            .map_err(|why| fail("-".into(), why))?;
        if u.spec != g.spec {
            return Err(fail(format!("{:?}", u.problem), format!("the node needs glue {:?}", u.spec)));
        }
        let status = kernel.can_implement(&u.problem);
        if status != Status::Ok {
            return Err(fail(format!("{:?}", u.problem), format!("can_implement: {status}")));
        }
        let at = |t: Option<&str>| {
            t.and_then(|t| self.address(t, input_addr))
                .ok_or_else(|| RuntimeError::Unsupported(format!("node '{}': a tensor has no device address", n.name)))
        };
        let args = BoltGlueArgs {
            x: at(n.input(0))? as *const c_void,
            y: at(n.outputs.first().map(|s| s.as_str()))? as *mut c_void,
        };
        Ok(Planned::Glue(n.name.clone(), kernel, u.problem, args))
    }

    /// A copy op (view, Concat) as device-to-device copies, when every tensor lives on the
    /// device and the shapes are known at these inputs; `None`: a host step.
    fn plan_copy(
        &self,
        graph: &Graph,
        n: &crate::ir::Node,
        input_addr: &HashMap<String, (u64, usize)>,
    ) -> Option<Planned> {
        if !crate::plan::lower::is_copy_node(graph, n) {
            return None;
        }
        // A view the arena planned as an alias of its input: the same bytes, nothing to copy.
        let out = n.outputs.first()?;
        if n.op.is_view() && self.plan.arena.tensors.iter().any(|a| &a.name == out && a.alias_of.is_some()) {
            return Some(Planned::Copy(n.name.clone(), Vec::new()));
        }
        let shape = |t: &str| graph.types.get(t)?.shape.as_ref()?.as_static();
        let elem = graph.types.get(n.outputs.first()?)?.dtype.size_bytes()?;
        // A view reads only its data input (Reshape's shape input is a host value), a Split,
        // Slice or Gather only its input 0 (the sizes, bounds and index are host values).
        let data: Vec<&str> = match n.op {
            crate::ir::Op::Concat { .. } => n.inputs.iter().flatten().map(String::as_str).collect(),
            _ => vec![n.input(0)?],
        };
        let outs: Vec<&str> = n.outputs.iter().map(String::as_str).collect();
        let shapes: Vec<Vec<usize>> = data.iter().map(|x| shape(x)).collect::<Option<_>>()?;
        let out_shapes: Vec<Vec<usize>> = outs.iter().map(|y| shape(y)).collect::<Option<_>>()?;
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let out_refs: Vec<&[usize]> = out_shapes.iter().map(Vec::as_slice).collect();
        let blocks = match n.op {
            crate::ir::Op::Slice => crate::plan::lower::slice_blocks(graph, n, refs.first()?, elem)?,
            crate::ir::Op::Gather { .. } => crate::plan::lower::gather_blocks(graph, n, refs.first()?, elem)?,
            crate::ir::Op::FitLastAxis { to } => crate::plan::lower::fit_blocks(refs.first()?, to, elem)?,
            _ => crate::plan::lower::copy_blocks(&n.op, &refs, &out_refs, elem)?,
        };
        let blocks = blocks
            .into_iter()
            .map(|b| {
                let (src, dst) = (self.address(data[b.input], input_addr)?, self.address(outs[b.output], input_addr)?);
                Some((src + b.src as u64, dst + b.dst as u64, b))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Planned::Copy(n.name.clone(), blocks))
    }

    /// A recurrent scan's kernel, problem (from its inputs' bound shapes) and arguments: the
    /// optional inputs and outputs the node lacks are null.
    fn plan_recurrent(
        &self,
        graph: &Graph,
        n: &crate::ir::Node,
        r: &crate::artifact::format::NodeRecurrent,
        input_addr: &HashMap<String, (u64, usize)>,
    ) -> Result<Planned, RuntimeError> {
        let fail = |problem: String, reason: String| RuntimeError::Kernel {
            kernel: format!("{} (node {})", r.symbol, n.name),
            problem,
            arch: self.name.clone(),
            reason,
        };
        let kernel = self
            .library
            .recurrent(&r.spec)
            .cloned()
            .ok_or_else(|| fail("-".into(), "not in the kernel library".into()))?;
        let crate::ir::Op::RecurrentScan(op) = &n.op else {
            return Err(fail("-".into(), "the plan records a recurrent kernel for a node that is not a scan".into()));
        };
        // The problem comes from XW and Rᵀ alone; the optional inputs after them (bias,
        // lengths, initial states) may be absent.
        let shape = |i: usize| {
            n.input(i)
                .and_then(|x| graph.types.get(x)?.shape.as_ref()?.as_static())
                .ok_or_else(|| fail("-".into(), format!("input {i} ({:?}) has no static shape", n.input(i))))
        };
        let (xw, rt) = (shape(0)?, shape(1)?);
        let problem = crate::plan::lower::recurrent_problem(op, &xw, &rt).map_err(|why| fail("-".into(), why))?;
        let status = kernel.can_implement(&problem);
        if status != Status::Ok {
            return Err(fail(format!("{problem:?}"), format!("can_implement: {status}")));
        }
        let at = |i: usize| -> Result<u64, RuntimeError> {
            match n.input(i) {
                None => Ok(0),
                Some(t) => self.address(t, input_addr).ok_or_else(|| {
                    RuntimeError::Unsupported(format!("node '{}': tensor '{t}' has no device address", n.name))
                }),
            }
        };
        let out = |k: usize| {
            n.outputs.get(k).filter(|o| !o.is_empty()).and_then(|o| self.address(o, input_addr)).unwrap_or(0)
        };
        let args = BoltRecurrentArgs {
            xw: at(0)? as *const c_void,
            rt: at(1)? as *const c_void,
            bias: at(2)? as *const c_void,
            lens: at(3)? as *const i32,
            h0: at(4)? as *const c_void,
            c0: at(5)? as *const c_void,
            peepholes: at(6)? as *const c_void,
            y: at_output(self, n, input_addr)? as *mut c_void,
            yh: out(1) as *mut c_void,
            yc: out(2) as *mut c_void,
        };
        Ok(Planned::Recurrent(n.name.clone(), kernel, problem, args))
    }

    /// An attention node's kernel, problem (from its inputs' bound shapes), arguments and mask
    /// staging.
    fn plan_attention(
        &self,
        graph: &Graph,
        n: &crate::ir::Node,
        a: &crate::artifact::format::NodeAttention,
        input_addr: &HashMap<String, (u64, usize)>,
    ) -> Result<Planned, RuntimeError> {
        let fail = |problem: String, reason: String| RuntimeError::Kernel {
            kernel: format!("{} (node {})", a.symbol, n.name),
            problem,
            arch: self.name.clone(),
            reason,
        };
        let crate::ir::Op::Attention(op) = &n.op else {
            return Err(fail("-".into(), "the plan records an attention kernel for a node that is not one".into()));
        };
        let shapes = static_input_shapes(graph, n).map_err(|why| fail("-".into(), why))?;
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let (spec, problem, staging) =
            super::attention::choose(a, op, self.arch, &refs).map_err(|why| fail("-".into(), why))?;
        let kernel = self.library.attention(&spec).cloned().ok_or_else(|| {
            fail("-".into(), format!("{} not in the kernel library", bolt_codegen::attention::symbol_for(&spec)))
        })?;
        let status = kernel.can_implement(&problem);
        if status != Status::Ok {
            return Err(fail(format!("{problem:?}"), format!("can_implement: {status}")));
        }
        let at = |i: usize| {
            let t = n.input(i).unwrap_or_default();
            self.address(t, input_addr).ok_or_else(|| {
                RuntimeError::Unsupported(format!("node '{}': tensor '{t}' has no device address", n.name))
            })
        };
        // A packed operand starts at its window's first column.
        let e = spec.element.size_bytes() as u64;
        let operand = |i: usize| -> Result<*const c_void, RuntimeError> {
            let (_, _, offset) = op.source_view(i, &shapes[i]);
            Ok((at(i)? + offset as u64 * e) as *const c_void)
        };
        let mut args = BoltAttentionArgs {
            q: operand(0)?,
            k: operand(1)?,
            v: operand(2)?,
            o: at_output(self, n, input_addr)? as *mut c_void,
            ..Default::default()
        };
        if op.mask {
            args.bias = at(3)? as *const c_void;
        }
        let stage = match staging {
            Some(m) => {
                let block = CopyBlock {
                    input: 3,
                    output: 0,
                    src: 0,
                    dst: 0,
                    width: m.width,
                    height: m.rows,
                    src_pitch: m.src_pitch,
                    dst_pitch: m.dst_pitch,
                };
                Some((at(3)?, block))
            }
            None => None,
        };
        let scratch =
            AttentionScratch { staging: staging.map_or(0, |m| m.bytes), workspace: kernel.workspace_size(&problem) };
        Ok(Planned::Attention(n.name.clone(), kernel, Box::new(problem), args, stage, scratch))
    }

    /// A stitched node's kernel, problem (from its inputs' bound shapes) and arguments.
    fn plan_stitch(
        &self,
        graph: &Graph,
        n: &crate::ir::Node,
        st: &crate::artifact::format::NodeStitch,
        input_addr: &HashMap<String, (u64, usize)>,
    ) -> Result<Planned, RuntimeError> {
        let fail = |problem: String, reason: String| RuntimeError::Kernel {
            kernel: format!("{} (node {})", st.symbol, n.name),
            problem,
            arch: self.name.clone(),
            reason,
        };
        let kernel = self
            .library
            .stitch(&st.symbol)
            .cloned()
            .ok_or_else(|| fail("-".into(), "not in the kernel library".into()))?;
        let shapes = static_input_shapes(graph, n).map_err(|why| fail("-".into(), why))?;
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let crate::ir::Op::Stitched(region) = &n.op else {
            return Err(fail("-".into(), "the plan records a stitched kernel for a node that is not one".into()));
        };
        let launch =
            crate::plan::lower::stitch_problem(&st.spec, region, &refs).map_err(|why| fail("-".into(), why))?;
        let problem = launch.problem;
        let status = kernel.can_implement(&problem);
        if status != Status::Ok {
            return Err(fail(format!("{problem:?}"), format!("can_implement: {status}")));
        }
        let at = |t: &str| {
            self.address(t, input_addr).ok_or_else(|| {
                RuntimeError::Unsupported(format!("node '{}': tensor '{t}' has no device address", n.name))
            })
        };
        let mut args = BoltStitchArgs::default();
        if n.inputs.len() > args.inputs.len() || n.outputs.len() > args.outputs.len() {
            return Err(fail(format!("{problem:?}"), "more tensors than the ABI carries".into()));
        }
        for (i, x) in n.inputs.iter().enumerate() {
            // A sliced input is read from its window's first element.
            let skip = launch.offsets[i] * st.spec.inputs[i].element.size_bytes();
            args.inputs[i] = (at(x.as_deref().unwrap_or_default())? + skip as u64) as *const c_void;
        }
        for (o, y) in n.outputs.iter().enumerate() {
            args.outputs[o] = at(y)? as *mut c_void;
        }
        Ok(Planned::Stitch(n.name.clone(), kernel, Box::new(problem), args))
    }

    /// A kernel call's error, naming the kernel, its node, the problem and the GPU.
    fn call_error(
        &self,
        symbol: &str,
        node: &str,
        problem: &dyn std::fmt::Debug,
        e: impl std::fmt::Display,
    ) -> RuntimeError {
        RuntimeError::Kernel {
            kernel: format!("{symbol} (node {node})"),
            problem: format!("{problem:?}"),
            arch: self.name.clone(),
            reason: e.to_string(),
        }
    }

    /// Launches a device step (kernel, chain or glue kernel): its node and kernel symbol, or
    /// `None` for a host step (which it leaves alone).
    fn launch_step<'s>(&self, step: &'s mut Step) -> Result<Option<(&'s str, &'s str)>, RuntimeError> {
        Ok(match step {
            Step::Kernel { node, problem, params } => {
                self.launch(node, problem, params)?;
                Some((&**node, params.symbol()))
            }
            Step::Chain { node, problem, params } => {
                self.launch(node, problem, params)?;
                Some((&**node, params.symbol()))
            }
            Step::Glue { node, problem, params } => {
                self.launch(node, problem, params)?;
                Some((&**node, params.symbol()))
            }
            Step::Stitch { node, problem, params } => {
                self.launch(node, problem, params)?;
                Some((&**node, params.symbol()))
            }
            Step::Recurrent { node, problem, params } => {
                self.launch(node, problem, params)?;
                Some((&**node, params.symbol()))
            }
            Step::Attention { node, problem, params, stage } => {
                if let Some(copy) = stage {
                    self.copy_rects(node, std::slice::from_ref(copy))?;
                }
                self.launch(node, problem, params)?;
                Some((&**node, params.symbol()))
            }
            // An aliased view: no launch.
            Step::Copy { blocks, .. } if blocks.is_empty() => None,
            Step::Copy { node, blocks } => {
                self.copy_rects(node, blocks)?;
                Some((&**node, "memcpy"))
            }
            Step::Host { .. } => None,
        })
    }

    /// Enqueues device-to-device copies of rectangles (source, destination, shape).
    fn copy_rects(&self, node: &str, blocks: &[(u64, u64, CopyBlock)]) -> Result<(), RuntimeError> {
        for &(src, dst, b) in blocks.iter() {
            // SAFETY: every rectangle lies inside its tensors (the arena / weights /
            // input buffers planned for these shapes, `copy_blocks`), which live as
            // long as the steps.
            let r = if b.height == 1 {
                unsafe { result::memcpy_dtod_async(dst, src, b.width, self.stream) }
            } else {
                // Every field spelled out: the struct holds an enum without a zero variant,
                // so `mem::zeroed` for the rest is undefined behaviour (Rust aborts on it).
                let copy = sys::CUDA_MEMCPY2D {
                    srcXInBytes: 0,
                    srcY: 0,
                    srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                    srcHost: std::ptr::null(),
                    srcDevice: src,
                    srcArray: std::ptr::null_mut(),
                    srcPitch: b.src_pitch,
                    dstXInBytes: 0,
                    dstY: 0,
                    dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                    dstHost: std::ptr::null_mut(),
                    dstDevice: dst,
                    dstArray: std::ptr::null_mut(),
                    dstPitch: b.dst_pitch,
                    WidthInBytes: b.width,
                    Height: b.height,
                };
                unsafe { sys::cuMemcpy2DAsync_v2(&copy, self.stream) }.result()
            };
            drv("copy", r).map_err(|e| RuntimeError::Cuda(format!("node '{node}': {e}")))?;
        }
        Ok(())
    }

    fn launch<A: KernelArgs>(
        &self,
        node: &str,
        problem: &dyn std::fmt::Debug,
        params: &mut Params<A>,
    ) -> Result<(), RuntimeError> {
        // SAFETY: the params point into buffers that live as long as `self.prepared`; the
        // stream belongs to the context they were initialised on.
        unsafe { params.launch(self.stream as *mut c_void) }
            .map_err(|e| self.call_error(params.symbol(), node, problem, e))
    }

    /// Runs a host step: copies its inputs down, runs the reference op, copies outputs up.
    fn host_step(&self, p: &Prepared, i: usize) -> Result<(), RuntimeError> {
        let node = &p.graph.nodes[i];
        let mut args: Vec<Option<Arc<Tensor>>> = Vec::new();
        // SAFETY: a live stream of this context.
        drv("synchronize", unsafe { result::stream::synchronize(self.stream) })?;
        for x in &node.inputs {
            let Some(name) = x else {
                args.push(None);
                continue;
            };
            if let Some(w) = self.graph.initializers.get(name) {
                args.push(Some(w.clone()));
                continue;
            }
            let ty = &p.graph.types[name];
            let shape = crate::plan::edit::bound_shape(&p.graph, name, &HashMap::new())
                .ok_or_else(|| RuntimeError::Unsupported(format!("tensor '{name}' has no known shape")))?;
            let elem = ty.dtype.size_bytes().unwrap_or(1);
            let mut bytes = vec![0u8; shape.iter().product::<usize>() * elem];
            let src = self
                .address(name, &p.inputs)
                .ok_or_else(|| RuntimeError::Unsupported(format!("tensor '{name}' has no device address")))?;
            // SAFETY: `src` addresses at least `bytes.len()` bytes (planned for the largest bucket).
            drv("copy to host", unsafe { result::memcpy_dtoh_async(&mut bytes, src, self.stream) })?;
            drv("synchronize", unsafe { result::stream::synchronize(self.stream) })?;
            let t = crate::artifact::format::decode(ty.dtype, &shape, &bytes).ok_or_else(|| {
                RuntimeError::Unsupported(format!("tensor '{name}' of type {} cannot be copied", ty.dtype))
            })?;
            args.push(Some(Arc::new(t)));
        }
        let refs: Vec<Option<&Tensor>> = args.iter().map(|a| a.as_deref()).collect();
        let outs = crate::reference::eval_node(node, &refs)?;
        for (name, t) in node.outputs.iter().zip(outs) {
            if name.is_empty() {
                continue;
            }
            let dst = self
                .address(name, &p.inputs)
                .ok_or_else(|| RuntimeError::Unsupported(format!("tensor '{name}' is not in the arena")))?;
            let bytes = crate::artifact::format::encode(&t);
            // SAFETY: the arena range of `name` holds its bytes; the copy completes before
            // `bytes` drops (synchronised below).
            drv("copy to device", unsafe { result::memcpy_htod_async(dst, &bytes, self.stream) })?;
            drv("synchronize", unsafe { result::stream::synchronize(self.stream) })?;
        }
        Ok(())
    }

    fn run_steps_of(&self, p: &mut Prepared) -> Result<(), RuntimeError> {
        if let Some(g) = &p.cuda_graph {
            // SAFETY: an instantiated graph of this context, launched on its stream.
            return drv("graph launch", unsafe { result::graph::launch(g.exec, self.stream) });
        }
        for i in 0..p.steps.len() {
            if let Step::Host { node } = p.steps[i] {
                self.host_step(p, node)?;
            } else {
                self.launch_step(&mut p.steps[i])?;
            }
        }
        Ok(())
    }

    /// Times each kernel with events (one extra run).
    fn time_kernels(&self, p: &mut Prepared) -> Result<Timings, RuntimeError> {
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let mut t = Timings::default();
        let mut host = 0.0;
        let start = drv("event", result::event::create(flags))?;
        let end = drv("event", result::event::create(flags))?;
        struct Events(sys::CUevent, sys::CUevent);
        impl Drop for Events {
            fn drop(&mut self) {
                // SAFETY: events created above, destroyed once.
                unsafe {
                    let _ = result::event::destroy(self.0);
                    let _ = result::event::destroy(self.1);
                }
            }
        }
        let _events = Events(start, end);
        // Kernels, chains and glue kernels alike. Host steps are not device time, but they
        // run: this run's outputs are the ones returned, and later kernels read what the host
        // steps write (the arena reuses their memory within a run).
        for i in 0..p.steps.len() {
            if let Step::Host { node } = p.steps[i] {
                self.host_step(p, node)?;
                continue;
            }
            // SAFETY: live events and stream of this context.
            drv("record", unsafe { result::event::record(start, self.stream) })?;
            let h0 = Instant::now();
            let Some((node, symbol)) = self.launch_step(&mut p.steps[i])? else { continue };
            host += h0.elapsed().as_secs_f64();
            drv("record", unsafe { result::event::record(end, self.stream) })?;
            drv("event synchronize", unsafe { result::event::synchronize(end) })?;
            let ms = drv("elapsed", unsafe { result::event::elapsed(start, end) })? as f64;
            t.kernels.push((node.to_string(), symbol.to_string(), ms * 1e-3));
            t.device_seconds += ms * 1e-3;
            t.launches += 1;
        }
        t.host_seconds = host;
        // The whole run with its inputs already on the device, timed by events around it as
        // a framework's forward pass is timed: what a host that enqueues Bolt on its own
        // stream sees (launch gaps and host steps included; the CUDA graph when one is used).
        for i in 0..WHOLE_RUN_WARMUP + WHOLE_RUN_REPEATS {
            drv("record", unsafe { result::event::record(start, self.stream) })?;
            self.launch_all(p)?;
            drv("record", unsafe { result::event::record(end, self.stream) })?;
            drv("event synchronize", unsafe { result::event::synchronize(end) })?;
            if i >= WHOLE_RUN_WARMUP {
                t.whole_run_seconds.push(drv("elapsed", unsafe { result::event::elapsed(start, end) })? as f64 * 1e-3);
            }
        }
        Ok(t)
    }
}

/// Runs before, and runs timed by, [`Timings::whole_run_seconds`].
const WHOLE_RUN_WARMUP: usize = 3;
const WHOLE_RUN_REPEATS: usize = 20;

impl CudaExecutor {
    /// Inputs in, every step (or the captured graph), outputs out.
    fn run_prepared(
        &self,
        p: &mut Prepared,
        inputs: &HashMap<String, Tensor>,
    ) -> Result<(HashMap<String, Tensor>, Option<Timings>), RuntimeError> {
        for (n, (addr, bytes)) in &p.inputs {
            let data = crate::artifact::format::encode(&inputs[n]);
            debug_assert_eq!(data.len(), *bytes);
            // SAFETY: the input range holds `bytes`; synchronised before `data` drops.
            drv("copy input", unsafe { result::memcpy_htod_async(*addr, &data, self.stream) })?;
        }
        // SAFETY: a live stream of this context.
        drv("synchronize", unsafe { result::stream::synchronize(self.stream) })?;
        self.launch_all(p)?;
        let timings = if self.opts.timing { Some(self.time_kernels(p)?) } else { None };
        drv("synchronize", unsafe { result::stream::synchronize(self.stream) })?;
        let mut outs = HashMap::new();
        for o in &self.plan.outputs {
            let ty = &p.graph.types[o];
            let shape = crate::plan::edit::bound_shape(&p.graph, o, &HashMap::new())
                .ok_or_else(|| RuntimeError::Unsupported(format!("output '{o}' has no known shape")))?;
            let mut bytes = vec![0u8; shape.iter().product::<usize>() * ty.dtype.size_bytes().unwrap_or(1)];
            let src = self
                .address(o, &p.inputs)
                .ok_or_else(|| RuntimeError::Unsupported(format!("output '{o}' is not in the arena")))?;
            // SAFETY: the output's arena range holds `bytes.len()` bytes; synchronised below.
            drv("copy output", unsafe { result::memcpy_dtoh_async(&mut bytes, src, self.stream) })?;
            drv("synchronize", unsafe { result::stream::synchronize(self.stream) })?;
            let t = crate::artifact::format::decode(ty.dtype, &shape, &bytes)
                .ok_or_else(|| RuntimeError::Unsupported(format!("output '{o}' cannot be decoded")))?;
            outs.insert(o.clone(), t);
        }
        Ok((outs, timings))
    }
}

impl CudaExecutor {
    /// Every step, or with `RunOptions::graph` the CUDA graph of them (captured on first use).
    fn launch_all(&self, p: &mut Prepared) -> Result<(), RuntimeError> {
        let all_kernels = p.steps.iter().all(|s| !matches!(s, Step::Host { .. }));
        if self.opts.graph && !all_kernels {
            return Err(RuntimeError::Unsupported(
                "--graph: the plan has host ops, which synchronise; a CUDA graph needs every node on the device".into(),
            ));
        }
        if self.opts.graph && p.cuda_graph.is_none() {
            let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
            // SAFETY: capture of this executor's launches on its stream; ended on every path.
            drv("begin capture", unsafe { result::stream::begin_capture(self.stream, mode) })?;
            let r = self.run_steps_of(p);
            let graph = drv("end capture", unsafe { result::stream::end_capture(self.stream) })?;
            r?;
            let exec = drv("instantiate graph", unsafe {
                result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0))
            })?;
            p.cuda_graph = Some(Graphed { graph, exec });
        }
        self.run_steps_of(p)
    }

    /// Runs on tensors already in this GPU's memory with every piece of work queued on
    /// `stream` (a `CUstream` of this GPU's primary context, e.g. ONNX Runtime's compute
    /// stream): inputs copied device to device into the input buffer, every step launched,
    /// outputs copied into `outputs`. Nothing waits on the host, except the first run at new
    /// input shapes (set-up allocates) and plans with host steps. Runs on different streams
    /// are ordered by an event: they share the activation arena.
    ///
    /// # Safety
    /// Every `ptr` addresses its tensor's bytes on this GPU and stays valid until the queued
    /// work has run; `stream` is a live stream of this GPU's primary context.
    pub unsafe fn enqueue(
        &mut self,
        inputs: &[DeviceTensor],
        outputs: &[DeviceTensor],
        stream: usize,
    ) -> Result<(), RuntimeError> {
        if let Some(e) = &self.poisoned {
            return Err(RuntimeError::Poisoned(e.clone()));
        }
        // Host frameworks call from any thread.
        drv("bind context", self.ctx.bind_to_thread())?;
        let mut meta = HashMap::new();
        for name in &self.graph.inputs {
            let t = inputs
                .iter()
                .find(|t| &t.name == name)
                .ok_or_else(|| RuntimeError::Input { name: name.clone(), reason: "missing".into() })?;
            let want = &self.graph.types[name];
            let rank_ok = want.shape.as_ref().is_none_or(|s| {
                s.rank() == t.shape.len() && s.0.iter().zip(&t.shape).all(|(d, &n)| d.known().is_none_or(|k| k == n))
            });
            if t.dtype != want.dtype || !rank_ok {
                return Err(RuntimeError::Input {
                    name: name.clone(),
                    reason: format!(
                        "is {}{:?}, the model declares {}{}",
                        t.dtype,
                        t.shape,
                        want.dtype,
                        want.shape.as_ref().map_or("[?]".to_string(), |s| s.to_string())
                    ),
                });
            }
            meta.insert(name.clone(), (t.shape.clone(), t.dtype));
        }
        let own = self.stream;
        self.stream = stream as sys::CUstream;
        let r = self.prepare(&meta).and_then(|()| {
            let mut p = self.prepared.take().expect("prepared");
            let r = self.enqueue_prepared(&mut p, inputs, outputs);
            self.prepared = Some(p);
            r
        });
        self.stream = own;
        if let Err(RuntimeError::Cuda(e)) = &r {
            self.poisoned = Some(e.clone());
        } else if r.is_err() && self.ctx.check_err().is_err() {
            self.poisoned = r.as_ref().err().map(|e| e.to_string());
        }
        r
    }

    fn enqueue_prepared(
        &mut self,
        p: &mut Prepared,
        inputs: &[DeviceTensor],
        outputs: &[DeviceTensor],
    ) -> Result<(), RuntimeError> {
        if self.done.is_none() {
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
            self.done = Some(Event(drv("event", result::event::create(flags))?));
        }
        let done = self.done.as_ref().expect("created above").0;
        // SAFETY: a live event and stream of this context (waiting on a never-recorded
        // event is a no-op).
        drv("wait for the previous run", unsafe {
            result::stream::wait_event(self.stream, done, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        })?;
        for t in inputs {
            let Some(&(addr, bytes)) = p.inputs.get(&t.name) else { continue };
            // SAFETY: the caller's buffer and the input range both hold `bytes` (same shape
            // and dtype, checked by `enqueue`). A generic copy: unified addressing also takes
            // a host pointer (host frameworks leave some inputs in CPU memory).
            drv("copy input", unsafe { sys::cuMemcpyAsync(addr, t.ptr, bytes, self.stream).result() })?;
        }
        self.launch_all(p)?;
        for t in outputs {
            let ty = p.graph.types.get(&t.name).ok_or_else(|| RuntimeError::Input {
                name: t.name.clone(),
                reason: "is not an output of this model".into(),
            })?;
            let shape = crate::plan::edit::bound_shape(&p.graph, &t.name, &HashMap::new())
                .ok_or_else(|| RuntimeError::Unsupported(format!("output '{}' has no known shape", t.name)))?;
            if shape != t.shape || ty.dtype != t.dtype {
                return Err(RuntimeError::Input {
                    name: t.name.clone(),
                    reason: format!(
                        "output buffer is {}{:?}, this run computes {}{shape:?}",
                        t.dtype, t.shape, ty.dtype
                    ),
                });
            }
            let bytes = shape.iter().product::<usize>() * ty.dtype.size_bytes().unwrap_or(1);
            let src = self
                .address(&t.name, &p.inputs)
                .ok_or_else(|| RuntimeError::Unsupported(format!("output '{}' has no device address", t.name)))?;
            if bytes > 0 {
                // SAFETY: both ranges hold `bytes` (shape and dtype checked above).
                drv("copy output", unsafe { result::memcpy_dtod_async(t.ptr, src, bytes, self.stream) })?;
            }
        }
        // SAFETY: a live event and stream of this context.
        drv("record", unsafe { result::event::record(done, self.stream) })
    }
}

impl Executor for CudaExecutor {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn run(&mut self, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>, RuntimeError> {
        if let Some(e) = &self.poisoned {
            return Err(RuntimeError::Poisoned(e.clone()));
        }
        drv("bind context", self.ctx.bind_to_thread())?;
        let inputs = prepare_inputs(&self.graph, inputs)?;
        let meta = inputs.iter().map(|(n, t)| (n.clone(), (t.shape.clone(), t.dtype()))).collect();
        let r = self.prepare(&meta).and_then(|()| {
            let mut p = self.prepared.take().expect("prepared");
            let r = self.run_prepared(&mut p, &inputs);
            self.prepared = Some(p);
            r
        });
        let r = r.map(|(outs, timings)| {
            if timings.is_some() {
                self.timings = timings;
            }
            outs
        });
        if let Err(e @ (RuntimeError::Cuda(_) | RuntimeError::Kernel { .. })) = &r {
            // A failed launch or copy may leave a sticky error in the context.
            if self.ctx.check_err().is_err() || matches!(e, RuntimeError::Cuda(_)) {
                self.poisoned = Some(e.to_string());
            }
        }
        r
    }

    fn timings(&self) -> Option<Timings> {
        self.timings.clone()
    }
}

/// Node `n`'s input shapes, all static once the run's input shapes are bound.
fn static_input_shapes(graph: &Graph, n: &crate::ir::Node) -> Result<Vec<Vec<usize>>, String> {
    n.inputs
        .iter()
        .map(|x| {
            x.as_deref()
                .and_then(|x| graph.types.get(x)?.shape.as_ref()?.as_static())
                .ok_or_else(|| format!("input {x:?} has no static shape at these input shapes"))
        })
        .collect()
}

/// The arena address of node `n`'s output.
fn at_output(
    x: &CudaExecutor,
    n: &crate::ir::Node,
    input_addr: &HashMap<String, (u64, usize)>,
) -> Result<u64, RuntimeError> {
    x.address(&n.outputs[0], input_addr).ok_or_else(|| {
        RuntimeError::Unsupported(format!("node '{}': output '{}' is not in the arena", n.name, n.outputs[0]))
    })
}
