//! Shared by the `build_*` tests: a stand-in kernel source (plain CUDA implementing the
//! bolt_kernel.h ABI, no CUTLASS) so the build pipeline is tested independently of the
//! templates, plus spec helpers.
#![allow(dead_code)]

use std::path::PathBuf;

use bolt_codegen::builder::{BuildOptions, Builder, KernelSource};
use bolt_codegen::cache::KeyHasher;
use bolt_codegen::epilogue::{Activation, Epilogue, NormalForm};
use bolt_codegen::spec::*;

/// Renders each kernel as a few lines of CUDA: `can_implement` checks sizes and leading-
/// dimension alignment on the host (no GPU needed), `initialize` keeps D's pointer (wants a
/// 256-byte workspace), `launch` launches a trivial kernel.
#[derive(Default)]
pub struct StandIn {
    /// Symbols whose source contains an `#error` (to test failure reports).
    pub broken: Vec<String>,
    /// Rejects specs with split-K > 1 when set.
    pub reject_split_k: bool,
    /// Added to every unit (changes every cache key).
    pub salt: String,
}

impl KernelSource for StandIn {
    fn symbol(&self, spec: &KernelSpec) -> String {
        let json = serde_json::to_string(spec).unwrap();
        format!("bolt_standin_{}", &KeyHasher::new("standin").str("spec", &json).finish().hex()[..16])
    }

    fn validate(&self, spec: &KernelSpec) -> Result<(), String> {
        match spec.tile {
            TileConfig::Sm80(t) if self.reject_split_k && t.split_k > 1 => Err("split-K not supported".into()),
            _ => Ok(()),
        }
    }

    fn render_unit(&self, kernels: &[(&KernelSpec, &str)]) -> Result<String, String> {
        let mut s = format!(
            "// stand-in unit {}\n#include \"bolt_kernel.h\"\n#include <cuda_runtime.h>\n#include <stdint.h>\n",
            self.salt
        );
        for (spec, sym) in kernels {
            if self.broken.iter().any(|b| b == sym) {
                s.push_str(&format!("#error \"{sym} is deliberately broken\"\n"));
            }
            let check = match spec.family {
                Family::Conv2dFprop(_) => format!(
                    "const BoltConv2dProblem* p = (const BoltConv2dProblem*)problem;\n  \
                     if (p->n <= 0 || p->c <= 0 || p->k <= 0) return BOLT_ERR_UNSUPPORTED_PROBLEM;\n  \
                     if (p->c % {a} || p->k % {c}) return BOLT_ERR_MISALIGNED_OPERAND;",
                    a = spec.alignment.a,
                    c = spec.alignment.c
                ),
                _ => format!(
                    "const BoltGemmProblem* p = (const BoltGemmProblem*)problem;\n  \
                     if (p->m <= 0 || p->n <= 0 || p->k <= 0 || p->batch < 1) return BOLT_ERR_UNSUPPORTED_PROBLEM;\n  \
                     if (p->lda % {a} || p->ldb % {b} || p->ldc % {c}) return BOLT_ERR_MISALIGNED_OPERAND;",
                    a = spec.alignment.a,
                    b = spec.alignment.b,
                    c = spec.alignment.c
                ),
            };
            s.push_str(&format!(
                r#"
__global__ void {sym}_kernel(float* d) {{ d[threadIdx.x] = 1.0f; }}

extern "C" BoltStatus {sym}_can_implement(const void* problem) {{
  if (!problem) return BOLT_ERR_NULL_ARGUMENT;
  {check}
  return BOLT_OK;
}}

extern "C" size_t {sym}_workspace_size(const void* problem) {{
  return problem ? 256 : 0;
}}

struct {sym}_state {{ uintptr_t tag; float* d; }};
static char const {sym}_tag = 0;

extern "C" size_t {sym}_params_size(void) {{ return sizeof({sym}_state); }}

extern "C" BoltStatus {sym}_initialize(const void* problem, const BoltArgs* args, void* workspace,
                                       size_t workspace_bytes, void* params, size_t params_bytes, void* stream) {{
  if (!params || params_bytes < sizeof({sym}_state)) return BOLT_ERR_INVALID_PARAMS;
  {sym}_state* s = ({sym}_state*)params;
  s->tag = 0;
  BoltStatus status = {sym}_can_implement(problem);
  if (status != BOLT_OK) return status;
  if (!args || !args->d) return BOLT_ERR_NULL_ARGUMENT;
  if (!workspace || workspace_bytes < 256) return BOLT_ERR_WORKSPACE_TOO_SMALL;
  s->d = (float*)args->d;
  s->tag = (uintptr_t)&{sym}_tag;
  return BOLT_OK;
}}

extern "C" BoltStatus {sym}_update(void* params, const BoltArgs* args) {{
  {sym}_state* s = ({sym}_state*)params;
  if (!s || s->tag != (uintptr_t)&{sym}_tag) return BOLT_ERR_INVALID_PARAMS;
  if (!args || !args->d) return BOLT_ERR_NULL_ARGUMENT;
  s->d = (float*)args->d;
  return BOLT_OK;
}}

extern "C" BoltStatus {sym}_launch(void* params, void* stream) {{
  {sym}_state* s = ({sym}_state*)params;
  if (!s || s->tag != (uintptr_t)&{sym}_tag) return BOLT_ERR_INVALID_PARAMS;
  {sym}_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(s->d);
  return cudaGetLastError() == cudaSuccess ? BOLT_OK : BOLT_ERR_LAUNCH_FAILED;
}}
"#
            ));
        }
        Ok(s)
    }
}

pub fn toolchain() -> bolt_cutlass::Toolchain {
    bolt_cutlass::Toolchain::discover().unwrap_or_else(|e| panic!("{e}"))
}

/// A builder into `<dir>/out` with its cache at `cache`.
pub fn builder(out: PathBuf, cache: PathBuf) -> Builder {
    let mut options = BuildOptions::new(out);
    options.cache_dir = Some(cache);
    Builder::new(toolchain(), options)
}

pub fn builder_with(out: PathBuf, cache: PathBuf, f: impl FnOnce(&mut BuildOptions)) -> Builder {
    let mut options = BuildOptions::new(out);
    options.cache_dir = Some(cache);
    f(&mut options);
    Builder::new(toolchain(), options)
}

/// An sm80 f16 GEMM spec with a bias + `activation` epilogue.
pub fn gemm(threadblock: [u32; 3], activation: Activation) -> KernelSpec {
    KernelSpec {
        family: Family::Gemm,
        arch: Arch::Sm80,
        types: Types { input: Element::F16, accumulator: Element::F32, output: Element::F16 },
        layouts: [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor],
        alignment: Alignment { a: 8, b: 8, c: 8 },
        tile: TileConfig::Sm80(Sm80Tile {
            threadblock,
            warp: [64, 64, 32],
            instruction: [16, 8, 16],
            stages: 3,
            swizzle: Swizzle::Identity(8),
            split_k: 1,
        }),
        epilogue: Epilogue::new(NormalForm { beta_source: false, bias: true, activation, residual: None }).unwrap(),
    }
}

/// `n` distinct sm80 GEMM specs.
pub fn gemms(n: usize) -> Vec<KernelSpec> {
    let tiles = [[128, 128, 32], [128, 256, 32], [256, 128, 32], [64, 64, 64], [128, 64, 32]];
    let acts = Activation::all();
    (0..n).map(|i| gemm(tiles[i % tiles.len()], acts[i / tiles.len() % acts.len()])).collect()
}

pub fn conv(unit_stride: bool) -> KernelSpec {
    KernelSpec {
        family: Family::Conv2dFprop(ConvFeatures { unit_stride, groups: GroupMode::None, analytic: false }),
        ..gemm([128, 128, 32], Activation::Relu)
    }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "bolt_codegen=info".into()),
        )
        .with_test_writer()
        .try_init();
}
