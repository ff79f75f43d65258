//! The runtime: runs an [`Artifact`] on a device. Two devices, one interface ([`Executor`]):
//!
//! - `reference`: the CPU reference executor over the artifact's own plan and weights, so the
//!   artifact is its own oracle (and runs in CI without a GPU);
//! - `cuda` (feature `cuda`): the artifact's kernel library on a GPU through the driver API,
//!   loaded at run time ([`cuda`]).

pub mod attention;
pub mod glue;
pub mod memory;
pub mod npz;
pub mod stitch;

#[cfg(feature = "cuda")]
pub mod cuda;

use crate::artifact::Artifact;
use crate::ir::{DType, Graph, Tensor};
use std::collections::HashMap;

/// Which device runs the artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Reference,
    Cuda,
}

impl DeviceKind {
    pub fn parse(s: &str) -> Option<DeviceKind> {
        match s {
            "reference" => Some(DeviceKind::Reference),
            "cuda" => Some(DeviceKind::Cuda),
            _ => None,
        }
    }
}

/// Why a run could not happen. CUDA errors name the kernel, its problem and the arch.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("input '{name}': {reason}")]
    Input { name: String, reason: String },
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    #[error("no GPU: {0}")]
    NoGpu(String),
    #[error("kernel {kernel}: the artifact has no kernel image for this GPU ({arch}); it was built for {built:?}")]
    NoKernelImage { kernel: String, arch: String, built: Vec<String> },
    #[error("kernel {kernel} on {arch}, problem {problem}: {reason}")]
    Kernel { kernel: String, problem: String, arch: String, reason: String },
    #[error("CUDA: {0}")]
    Cuda(String),
    #[error("the executor is poisoned by an earlier CUDA error ({0}); open a new one (the CUDA context may need a process restart)")]
    Poisoned(String),
    /// The node's error in the message and not again as a source (error chains print once).
    #[error("host op: {0}")]
    Host(crate::Error),
    #[error("{0}")]
    Unsupported(String),
}

impl From<crate::Error> for RuntimeError {
    fn from(e: crate::Error) -> RuntimeError {
        RuntimeError::Host(e)
    }
}

/// Per-kernel device time and host overhead of the last timed run (`bolt run --bench`).
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// (node, kernel symbol, device seconds).
    pub kernels: Vec<(String, String, f64)>,
    pub device_seconds: f64,
    pub host_seconds: f64,
    pub launches: usize,
    /// Whole runs, inputs on the device, each timed by events around it (one per repeat).
    pub whole_run_seconds: Vec<f64>,
}

impl Timings {
    /// Median, 10th and 90th percentile of [`Timings::whole_run_seconds`] (nearest rank).
    pub fn whole_run_spread(&self) -> Option<(f64, f64, f64)> {
        let mut v = self.whole_run_seconds.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some((at(0.5), at(0.1), at(0.9)))
    }
}

/// One device running one artifact.
pub trait Executor {
    /// In words, e.g. "reference (CPU)" or "NVIDIA H100 80GB HBM3 (sm90)".
    fn describe(&self) -> String;
    /// Runs the plan on `inputs` (the model's inputs, by name).
    fn run(&mut self, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>, RuntimeError>;
    /// Per-kernel times of the last run, when the device measures them.
    fn timings(&self) -> Option<Timings> {
        None
    }
}

/// Makes every tensor a node computes an output of `artifact` (after its own outputs, in run
/// order), with its memory planned again so that none is overwritten: a device's run can then
/// be compared tensor by tensor with another's (`bolt run --check --oracle reference
/// --every-tensor`), and the first node whose output differs is the one to look at. Returns
/// the added names with the node that computes each.
pub fn observe_every_tensor(artifact: &mut Artifact) -> Result<Vec<(String, String)>, RuntimeError> {
    let plan = &mut artifact.plan;
    let mut added = Vec::new();
    for n in &plan.nodes {
        for o in n.outputs.iter().filter(|o| !o.is_empty()) {
            if !plan.outputs.contains(o) && !added.iter().any(|(x, _): &(String, String)| x == o) {
                added.push((o.clone(), n.name.clone()));
            }
        }
    }
    plan.outputs.extend(added.iter().map(|(o, _)| o.clone()));
    let dims: crate::compile::DimBindings = plan.arena_dims().into_iter().collect();
    let arena = memory::plan_arena(&artifact.graph(), &dims)
        .map_err(|e| RuntimeError::Unsupported(format!("planning memory for every tensor: {e}")))?;
    artifact.plan.arena = arena;
    Ok(added)
}

/// Options of a device.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Capture the launch sequence in a CUDA graph and replay it (cuda only).
    pub graph: bool,
    /// Record per-kernel events (cuda only).
    pub timing: bool,
    /// A `CUstream` (as an integer) of the device's primary context to run on, e.g. the host
    /// framework's; `None`: the executor owns one (cuda only).
    pub stream: Option<usize>,
    /// The CUDA device ordinal (cuda only; 0 by default).
    pub device: usize,
}

/// Opens `artifact` on `kind`.
pub fn open(artifact: &Artifact, kind: DeviceKind, opts: &RunOptions) -> Result<Box<dyn Executor>, RuntimeError> {
    match kind {
        DeviceKind::Reference => Ok(Box::new(Reference::new(artifact))),
        #[cfg(feature = "cuda")]
        DeviceKind::Cuda => Ok(Box::new(cuda::CudaExecutor::new(artifact, opts)?)),
        #[cfg(not(feature = "cuda"))]
        DeviceKind::Cuda => {
            let _ = opts;
            Err(RuntimeError::Unsupported(
                "this bolt was built without the `cuda` feature (cargo build --release --features cuda)".into(),
            ))
        }
    }
}

/// The inputs as the plan takes them: every declared input present, floats cast to the
/// plan's storage type (an f16 artifact takes the model's f32 inputs), ranks checked.
pub fn prepare_inputs(g: &Graph, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>, RuntimeError> {
    let mut out = HashMap::new();
    for name in &g.inputs {
        let t = inputs.get(name).ok_or_else(|| RuntimeError::Input { name: name.clone(), reason: "missing".into() })?;
        let ty = &g.types[name];
        if let Some(s) = &ty.shape {
            if s.0.len() != t.rank() {
                return Err(RuntimeError::Input {
                    name: name.clone(),
                    reason: format!("has shape {:?}, the model declares {}", t.shape, s),
                });
            }
            for (i, (d, &n)) in s.0.iter().zip(&t.shape).enumerate() {
                if d.known().is_some_and(|k| k != n) {
                    return Err(RuntimeError::Input {
                        name: name.clone(),
                        reason: format!("dim {i} is {n}, the model declares {}", s),
                    });
                }
            }
        }
        let t = if t.dtype() != ty.dtype && t.dtype().is_float() && ty.dtype.is_float() {
            Tensor::from_f64_as(ty.dtype, t.shape.clone(), &t.to_f64_vec()).expect("float dtype")
        } else if t.dtype() != ty.dtype {
            return Err(RuntimeError::Input {
                name: name.clone(),
                reason: format!("is {}, the model takes {}", t.dtype(), ty.dtype),
            });
        } else {
            t.clone()
        };
        out.insert(name.clone(), t);
    }
    Ok(out)
}

/// Sizes of the symbolic dims as `inputs` bind them.
pub fn bindings_of(g: &Graph, inputs: &HashMap<String, Tensor>) -> HashMap<String, usize> {
    bindings_of_shapes(g, |name| inputs.get(name).map(|t| t.shape.as_slice()))
}

/// [`bindings_of`] from the inputs' shapes alone (tensors that live elsewhere, e.g. on a GPU).
pub fn bindings_of_shapes<'a>(g: &Graph, shape: impl Fn(&str) -> Option<&'a [usize]>) -> HashMap<String, usize> {
    let mut b = HashMap::new();
    for name in &g.inputs {
        if let (Some(Some(s)), Some(t)) = (g.types.get(name).map(|t| &t.shape), shape(name)) {
            for (d, &n) in s.0.iter().zip(t) {
                if let crate::ir::Dim::Sym(k) = d {
                    b.insert(k.clone(), n);
                }
            }
        }
    }
    b
}

/// Outputs in f32 (what a caller compares; f16/bf16 artifacts compute in their type).
pub fn outputs_as_f32(outs: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    outs.into_iter()
        .map(|(k, t)| {
            let t = if matches!(t.dtype(), DType::F16 | DType::BF16) {
                Tensor::from_f32(t.shape.clone(), t.to_f32_vec())
            } else {
                t
            };
            (k, t)
        })
        .collect()
}

/// The reference device: the CPU reference executor on the artifact's planned graph, with the
/// plan's glue nodes run by the host implementation of their glue kernels ([`glue`]) and its
/// stitched nodes by their kernel specs' meaning ([`stitch`]), its attention nodes likewise
/// ([`attention`]), its recurrent scans by the reference's recurrence once their kernel's spec
/// and problem are checked as the cuda device derives them.
pub struct Reference {
    graph: Graph,
    glue: HashMap<String, bolt_codegen::glue::GlueSpec>,
    stitch: HashMap<String, bolt_codegen::stitch::StitchSpec>,
    attention: HashMap<String, bolt_codegen::attention::AttentionSpec>,
    recurrent: HashMap<String, bolt_codegen::recurrent::RecurrentSpec>,
}

impl Reference {
    pub fn new(artifact: &Artifact) -> Reference {
        let glue = artifact.plan.glue.iter().map(|g| (g.node.clone(), g.spec)).collect();
        let stitch = artifact.plan.stitch.iter().map(|s| (s.node.clone(), s.spec.clone())).collect();
        let attention = artifact.plan.attention.iter().map(|a| (a.node.clone(), a.spec)).collect();
        let recurrent = artifact.plan.recurrent.iter().map(|r| (r.node.clone(), r.spec)).collect();
        Reference { graph: artifact.graph(), glue, stitch, attention, recurrent }
    }
}

impl Executor for Reference {
    fn describe(&self) -> String {
        "reference (CPU)".into()
    }

    fn run(&mut self, inputs: &HashMap<String, Tensor>) -> Result<HashMap<String, Tensor>, RuntimeError> {
        let inputs = prepare_inputs(&self.graph, inputs)?;
        let types = &self.graph.types;
        let outs = crate::reference::run_with(&self.graph, &inputs, |node, args| {
            if let Some(spec) = self.stitch.get(&node.name) {
                let xs: Option<Vec<&Tensor>> = args.iter().copied().collect();
                let xs = xs.ok_or_else(|| crate::Error::node(node, "a stitched node's input is missing"))?;
                let out_types: Vec<DType> =
                    node.outputs.iter().map(|o| types.get(o).map_or(DType::F32, |t| t.dtype)).collect();
                let crate::ir::Op::Stitched(region) = &node.op else {
                    return Err(crate::Error::node(
                        node,
                        "the plan records a stitched kernel for a node that is not one",
                    ));
                };
                return stitch::run(spec, region, &xs, &out_types)
                    .map_err(|why| crate::Error::node(node, format!("stitched kernel: {why}")));
            }
            if let Some(spec) = self.recurrent.get(&node.name) {
                let crate::ir::Op::RecurrentScan(r) = &node.op else {
                    return Err(crate::Error::node(
                        node,
                        "the plan records a recurrent kernel for a node that is not a scan",
                    ));
                };
                let (xw, rt) = match (args.first().copied().flatten(), args.get(1).copied().flatten()) {
                    (Some(xw), Some(rt)) => (xw, rt),
                    _ => return Err(crate::Error::node(node, "a recurrent scan's XW or Rᵀ is missing")),
                };
                let needs =
                    crate::plan::lower::recurrent_spec(r, xw.dtype()).map_err(|why| crate::Error::node(node, why))?;
                if needs != *spec {
                    return Err(crate::Error::node(
                        node,
                        format!("the plan records {spec:?}, the node needs {needs:?}"),
                    ));
                }
                crate::plan::lower::recurrent_problem(r, &xw.shape, &rt.shape)
                    .map_err(|why| crate::Error::node(node, format!("recurrent kernel: {why}")))?;
                return crate::reference::eval_node(node, args);
            }
            if let Some(spec) = self.attention.get(&node.name) {
                let crate::ir::Op::Attention(op) = &node.op else {
                    return Err(crate::Error::node(
                        node,
                        "the plan records an attention kernel for a node that is not one",
                    ));
                };
                let xs: Option<Vec<&Tensor>> = args.iter().copied().collect();
                let xs = xs.ok_or_else(|| crate::Error::node(node, "an attention node's input is missing"))?;
                let y = attention::run(spec, op, &xs)
                    .map_err(|why| crate::Error::node(node, format!("attention kernel: {why}")))?;
                return Ok(vec![y]);
            }
            let Some(spec) = self.glue.get(&node.name) else {
                return crate::reference::eval_node(node, args);
            };
            // The kernel's problem from the actual shapes, as the cuda device derives it.
            let x =
                args.first().copied().flatten().ok_or_else(|| crate::Error::node(node, "glue node without input"))?;
            let yt = types.get(&node.outputs[0]).map_or(x.dtype(), |t| t.dtype);
            let (s, problem) = crate::plan::lower::glue_for(&node.op, &x.shape, x.dtype(), yt, args)
                .unwrap_or_else(|| Err("not a glue op".into()))
                .map_err(|why| crate::Error::node(node, format!("glue kernel {spec:?}: {why}")))?;
            if s != *spec {
                return Err(crate::Error::node(node, format!("the plan records glue {spec:?}, the node needs {s:?}")));
            }
            Ok(vec![glue::run_op(&node.op, spec, &problem, args).map_err(|why| crate::Error::node(node, why))?])
        })?;
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::Timings;

    #[test]
    fn whole_run_spread_is_median_and_nearest_rank_deciles() {
        assert_eq!(Timings::default().whole_run_spread(), None, "no whole runs timed: no spread");
        let t = Timings { whole_run_seconds: (1..=11).rev().map(f64::from).collect(), ..Timings::default() };
        assert_eq!(t.whole_run_spread(), Some((6.0, 2.0, 10.0)));
    }
}
