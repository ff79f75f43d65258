//! The artifact's files as types (see docs/artifact.md for the format in words). Everything
//! here is (de)serialised as is; a change that an older reader would misread bumps
//! [`FORMAT_VERSION`].

use crate::ir::{DType, Node, Tensor, TensorData, TensorType};
use bolt_codegen::b2b::B2bSpec;
use bolt_codegen::glue::GlueSpec;
use bolt_codegen::spec::{Arch, KernelSpec};
use bolt_codegen::stitch::StitchSpec;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// `manifest.json`'s `format` field: what kind of directory this is.
pub const FORMAT_NAME: &str = "bolt-artifact";
/// Version of the artifact format (manifest, plan, weights layout). Readers refuse others.
pub const FORMAT_VERSION: u32 = 10;
/// Byte alignment of every tensor in `weights.bin` and in the activation arena: the widest
/// vector access of a kernel (16 B) and a GPU's allocation granularity for coalescing (256 B).
pub const TENSOR_ALIGN: usize = 256;

/// [`Manifest::source`] of an artifact of the built-in default model.
pub const BUILTIN_DEFAULT: &str = "builtin:default";
/// Prefix of [`Manifest::source`] for a subgraph a host framework handed over (no file).
pub const HOST_SOURCE: &str = "host:";

pub const MANIFEST_FILE: &str = "manifest.json";
pub const PLAN_FILE: &str = "plan.json";
pub const WEIGHTS_FILE: &str = "weights.bin";
/// The kernel library and its codegen manifest live under this directory.
pub const KERNELS_DIR: &str = "kernels";

/// The precision GEMM/conv kernels compute in (`bolt compile --precision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Exact f32 math. Bolt has no exact-f32 tensor-core kernel, so `compile` refuses it.
    F32,
    /// f32 storage; tensor-core products with TF32 inputs (10-bit mantissa), f32 accumulation.
    Tf32,
    F16,
    Bf16,
}

impl Precision {
    pub fn parse(s: &str) -> Option<Precision> {
        match s {
            "f32" => Some(Precision::F32),
            "tf32" => Some(Precision::Tf32),
            "f16" => Some(Precision::F16),
            "bf16" => Some(Precision::Bf16),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Tf32 => "tf32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }

    /// Storage type of the model's float tensors under this precision.
    pub fn storage(self) -> DType {
        match self {
            Precision::F32 | Precision::Tf32 => DType::F32,
            Precision::F16 => DType::F16,
            Precision::Bf16 => DType::BF16,
        }
    }

    /// The tolerance `bolt run --check` compares this precision's outputs with the f32
    /// reference on the original model at: |x - ref| <= atol + rtol * |ref|. TF32 keeps 10
    /// mantissa bits like f16 but f32 range; bf16 keeps 7. Reductions over K ~ 1e3 with
    /// inputs in [-1, 1) accumulate in f32, so the error is dominated by input rounding.
    pub fn tolerance(self) -> (f64, f64) {
        match self {
            Precision::F32 => (1e-4, 1e-4),
            Precision::Tf32 => (1e-2, 1e-2),
            Precision::F16 => (2e-2, 2e-2),
            Precision::Bf16 => (8e-2, 8e-2),
        }
    }

    /// The numerics sentence the manifest and the compile report carry.
    pub fn numerics(self) -> &'static str {
        match self {
            Precision::F32 => "f32 everywhere",
            Precision::Tf32 => {
                "f32 tensors; GEMM/conv kernels multiply on tensor cores in TF32 (inputs rounded to a 10-bit mantissa), accumulate and apply epilogues in f32; host ops run in f32"
            }
            Precision::F16 => {
                "f16 tensors (weights cast at compile time); GEMM/conv kernels accumulate in f32 and round once to f16"
            }
            Precision::Bf16 => {
                "bf16 tensors (weights cast at compile time); GEMM/conv kernels accumulate in f32 and round once to bf16"
            }
        }
    }
}

/// One file of the artifact as the manifest records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub bytes: u64,
    pub blake3: String,
}

/// A symbolic dim and the bucket bounds kernels were picked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DimRange {
    pub name: String,
    pub min: usize,
    pub max: usize,
}

impl DimRange {
    /// `NAME=SIZE` (the range SIZE..SIZE) or `NAME=MIN..MAX` (`--dim`, and the hosts' `dims`
    /// option); 1 <= MIN <= MAX.
    pub fn parse(s: &str) -> Result<DimRange, String> {
        let (k, v) = s.split_once('=').ok_or_else(|| format!("'{s}' is not NAME=SIZE or NAME=MIN..MAX"))?;
        let num = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("'{x}' is not a size"));
        let (min, max) = match v.split_once("..") {
            Some((a, b)) => (num(a)?, num(b.trim_start_matches('='))?),
            None => (num(v)?, num(v)?),
        };
        if min == 0 || min > max {
            return Err(format!("'{v}': a range needs 1 <= MIN <= MAX"));
        }
        Ok(DimRange { name: k.trim().to_string(), min, max })
    }
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The kernels' C ABI version (`BOLT_ABI_VERSION`).
    pub abi_version: u32,
    /// Version of the `bolt` that wrote it.
    pub bolt_version: String,
    pub model: String,
    /// Where the model came from, so `bolt run --check` can run the original on the
    /// reference: the absolute path of the ONNX file, or `builtin:default`.
    pub source: String,
    /// blake3 of the ONNX file (checked before `--check` trusts it).
    pub source_blake3: Option<String>,
    /// `nvcc --version` and CUTLASS of the build ("none" when the plan needs no kernel).
    pub cuda_version: String,
    pub cutlass_version: String,
    pub archs: Vec<Arch>,
    pub precision: Precision,
    /// In words: what the precision means for each kind of op.
    pub numerics: String,
    pub dims: Vec<DimRange>,
    /// Model inputs fixed to constants at compile time (`--bind NAME=VALUES`): the artifact
    /// does not take them; `bolt run --check` feeds them to the original model.
    #[serde(default)]
    pub bound_inputs: BTreeMap<String, String>,
    /// Every other file of the artifact (path relative to the directory, '/'-separated).
    pub files: BTreeMap<String, FileEntry>,
}

/// Where one weight lives in `weights.bin`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeightEntry {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Byte offset, a multiple of [`TENSOR_ALIGN`].
    pub offset: u64,
    pub bytes: u64,
}

/// The kernel one node runs on one arch in one shape bucket, and why it was chosen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelChoice {
    pub arch: Arch,
    /// Prefix of the library's `<symbol>_run` etc.
    pub symbol: String,
    pub spec: KernelSpec,
    /// How it was chosen: `<candidate> (tuning db, Measured 12.3 us)` or `<candidate> (est 12.3 us)`.
    pub source: String,
}

/// One kernel node of the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeKernels {
    pub node: String,
    pub alpha: f32,
    pub beta: f32,
    /// `buckets[i]`: the choices (one per arch) for [`PlanFile::buckets`]`[i]`.
    pub buckets: Vec<Vec<KernelChoice>>,
}

/// The back-to-back chain kernel one fused chain node runs in one shape bucket (an sm80 kernel:
/// SASS for the artifact's GPUs, Hopper's too, + compute_80 PTX), and why it was chosen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChainChoice {
    /// Prefix of the library's `<symbol>_run` etc.
    pub symbol: String,
    pub spec: B2bSpec,
    pub source: String,
}

/// One fused chain node of the plan (`Op::FusedChain`): every layer in one kernel, the
/// intermediate activations never leaving the threadblock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeChain {
    pub node: String,
    /// (alpha, beta) of each layer.
    pub scalars: Vec<(f32, f32)>,
    /// `buckets[i]`: the kernel for [`PlanFile::buckets`]`[i]`.
    pub buckets: Vec<ChainChoice>,
}

/// A planned data-movement node (layout transpose, channel padding, float cast) that a glue
/// kernel of the library runs. One kernel serves every shape bucket and arch (its problem comes
/// from the shapes at run time; it carries SASS for the artifact's GPUs and compute_80 PTX).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeGlue {
    pub node: String,
    /// Prefix of the library's `<symbol>_run` etc.
    pub symbol: String,
    pub spec: GlueSpec,
}

/// A planned stitched node (`Op::Stitched`: a region of element-wise ops and row reductions)
/// that a stitched kernel of the library runs. One kernel serves every shape bucket and arch
/// (its problem comes from the input shapes at run time; SASS for the artifact's GPUs and
/// compute_80 PTX).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeStitch {
    pub node: String,
    /// Prefix of the library's `<symbol>_run` etc.
    pub symbol: String,
    pub spec: StitchSpec,
}

/// A planned recurrent scan (`Op::RecurrentScan`) that a recurrent kernel of the library runs.
/// One kernel serves every shape bucket and arch (the problem comes from the input shapes at
/// run time; SASS for the artifact's GPUs and compute_80 PTX).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRecurrent {
    pub node: String,
    /// Prefix of the library's `<symbol>_run` etc.
    pub symbol: String,
    pub spec: bolt_codegen::recurrent::RecurrentSpec,
}

/// A planned fused attention node (`Op::Attention`) that an attention kernel of the library
/// runs. One kernel serves every shape bucket and arch (the problem comes from the input shapes
/// at run time; SASS for the artifact's GPUs and compute_80 PTX); on an sm90 GPU the Hopper kernel runs instead
/// where the artifact has one and it takes the run's problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeAttention {
    pub node: String,
    /// Prefix of the library's `<symbol>_run` etc.
    pub symbol: String,
    pub spec: bolt_codegen::attention::AttentionSpec,
    /// The Hopper kernel (CUTLASS's example 88), when the artifact is built for sm90 and the
    /// node suits it (f16/bf16, no mask, D = D_v) in some bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm90: Option<bolt_codegen::attention::AttentionSpec>,
}

/// A planned node the host runs (the runtime's CPU reference), and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostOp {
    pub node: String,
    pub op_type: String,
    pub reason: String,
    /// A data-movement node the cuda device runs itself (a view: an alias of its input or a
    /// copy; a concatenation, slice, split...: copies on the stream), with no host round trip;
    /// `false`: the host computes it.
    #[serde(default)]
    pub on_device: bool,
}

/// The activation arena: every intermediate tensor's byte range, planned by liveness for the
/// largest bucket (shapes only shrink in smaller ones, so the offsets stay valid).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ArenaPlan {
    pub bytes: u64,
    /// What one allocation per tensor would take (the sum of tensor sizes).
    pub naive_bytes: u64,
    pub tensors: Vec<ArenaTensor>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArenaTensor {
    pub name: String,
    pub offset: u64,
    pub bytes: u64,
    /// Index of the node that writes it.
    pub first: usize,
    /// Index of the last node that reads it (the node count for graph outputs).
    pub last: usize,
    /// A view's output (Reshape, Flatten, Squeeze, Unsqueeze, Identity) that is the same bytes
    /// as this arena tensor, its view chain's first tensor: same offset, no copy; that tensor
    /// lives as long as every view of it is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<String>,
}

/// `plan.json`: the planned graph without its weights, plus what runs where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanFile {
    pub name: String,
    pub opset: i64,
    pub nodes: Vec<Node>,
    pub types: HashMap<String, TensorType>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub weights: Vec<WeightEntry>,
    /// Shape buckets: each binds every symbolic dim; kernels were picked for its sizes. A run
    /// takes the first bucket whose sizes all cover the input's ([`PlanFile::bucket_for`]).
    pub buckets: Vec<BTreeMap<String, usize>>,
    pub kernels: Vec<NodeKernels>,
    pub chains: Vec<NodeChain>,
    pub glue: Vec<NodeGlue>,
    pub stitch: Vec<NodeStitch>,
    #[serde(default)]
    pub attention: Vec<NodeAttention>,
    /// Recurrent scans run by recurrent scan kernels.
    #[serde(default)]
    pub recurrent: Vec<NodeRecurrent>,
    pub host_ops: Vec<HostOp>,
    pub arena: ArenaPlan,
}

impl PlanFile {
    /// Data-movement nodes the cuda device runs itself: (copies it enqueues, views that alias
    /// their input's bytes and launch nothing).
    pub fn device_data_movement(&self) -> (usize, usize) {
        let on_device = self.host_ops.iter().filter(|h| h.on_device).count();
        let aliases = self.arena.tensors.iter().filter(|t| t.alias_of.is_some()).count();
        (on_device.saturating_sub(aliases), aliases)
    }

    /// The run-time rule: the first (smallest) bucket covering `bindings`; the last when none
    /// does (kernels take any size at run time; the bucket only picks the schedule).
    pub fn bucket_for(&self, bindings: &HashMap<String, usize>) -> usize {
        self.buckets
            .iter()
            .position(|b| b.iter().all(|(k, &v)| bindings.get(k).is_none_or(|&x| x <= v)))
            .unwrap_or(self.buckets.len().saturating_sub(1))
    }

    /// The sizes the artifact's arena was planned for: the largest bucket's (a dim no bucket
    /// lists was planned at 1).
    pub fn arena_dims(&self) -> BTreeMap<String, usize> {
        self.buckets.last().cloned().unwrap_or_default()
    }

    /// Whether a run's symbolic dims fit the memory the artifact planned ([`exceeding`] on
    /// [`PlanFile::arena_dims`]). `Err` names the dim and the largest size.
    pub fn check_fits(&self, bindings: &HashMap<String, usize>) -> Result<(), String> {
        match exceeding(&self.arena_dims(), bindings) {
            None => Ok(()),
            Some((k, v, most)) => Err(format!(
                "symbolic dim '{k}' is {v}, but the artifact's memory was planned for {k} <= {most} (compile with \
                 --dim {k}={v}, or a range up to it, to plan for it)"
            )),
        }
    }
}

/// The first dim (by name) of `bindings` larger than `planned` has it (1 when `planned` lacks
/// it), with both sizes: a run at these sizes would write past an arena planned at `planned`.
pub fn exceeding(
    planned: &BTreeMap<String, usize>,
    bindings: &HashMap<String, usize>,
) -> Option<(String, usize, usize)> {
    let mut dims: Vec<(&String, &usize)> = bindings.iter().collect();
    dims.sort();
    dims.into_iter().find_map(|(k, &v)| {
        let most = planned.get(k).copied().unwrap_or(1);
        (v > most).then(|| (k.clone(), v, most))
    })
}

/// Little-endian bytes of a tensor's elements (bool as one byte).
pub fn encode(t: &Tensor) -> Vec<u8> {
    macro_rules! le {
        ($v:expr) => {
            $v.iter().flat_map(|x| x.to_le_bytes()).collect()
        };
    }
    match &t.data {
        TensorData::F32(v) => le!(v),
        TensorData::F16(v) => le!(v),
        TensorData::BF16(v) => le!(v),
        TensorData::F64(v) => le!(v),
        TensorData::I64(v) => le!(v),
        TensorData::I32(v) => le!(v),
        TensorData::I16(v) => le!(v),
        TensorData::I8(v) => le!(v),
        TensorData::U8(v) => v.clone(),
        TensorData::U16(v) => le!(v),
        TensorData::U32(v) => le!(v),
        TensorData::U64(v) => le!(v),
        TensorData::Bool(v) => v.iter().map(|&b| b as u8).collect(),
    }
}

/// The inverse of [`encode`]; `None` when `bytes` does not hold `shape` elements of `dtype`.
pub fn decode(dtype: DType, shape: &[usize], bytes: &[u8]) -> Option<Tensor> {
    let n: usize = shape.iter().product();
    macro_rules! de {
        ($t:ty, $variant:ident) => {{
            let w = std::mem::size_of::<$t>();
            if bytes.len() != n * w {
                return None;
            }
            TensorData::$variant(bytes.chunks_exact(w).map(|c| <$t>::from_le_bytes(c.try_into().unwrap())).collect())
        }};
    }
    let data = match dtype {
        DType::F32 => de!(f32, F32),
        DType::F16 => de!(half::f16, F16),
        DType::BF16 => de!(half::bf16, BF16),
        DType::F64 => de!(f64, F64),
        DType::I64 => de!(i64, I64),
        DType::I32 => de!(i32, I32),
        DType::I16 => de!(i16, I16),
        DType::I8 => de!(i8, I8),
        DType::U8 => de!(u8, U8),
        DType::U16 => de!(u16, U16),
        DType::U32 => de!(u32, U32),
        DType::U64 => de!(u64, U64),
        DType::Bool => {
            if bytes.len() != n {
                return None;
            }
            TensorData::Bool(bytes.iter().map(|&b| b != 0).collect())
        }
        _ => return None,
    };
    Tensor::new(shape.to_vec(), data).ok()
}

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}
