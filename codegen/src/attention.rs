//! Fused attention kernels: `O = softmax(scale · Q·Kᵀ + bias) · V` per (batch, head) in one
//! kernel, the scores never leaving the chip, behind the same C ABI as every kernel
//! (`BoltAttentionProblem`, `BoltAttentionArgs`). Two kernels, by [`AttentionSpec::arch`]:
//!
//! - **sm80**: CUTLASS's memory-efficient attention (examples/41_fused_multi_head_attention,
//!   `AttentionKernel`: mma.sync, runs on Hopper too), f32/f16/bf16, any D and D_v up to 256,
//!   an optional additive bias (the mask). Up to 128 the output stays in registers and there is
//!   no workspace; past a block's 128 keys the output is accumulated over the key blocks in an
//!   f32 buffer, the workspace. Template `templates/attention.cu.tera`.
//! - **sm90**: CUTLASS's Hopper FMHA (examples/88_hopper_fmha: TMA, wgmma, warp-specialized
//!   cooperative consumers, FlashAttention-3's schedule), f16/bf16, D = D_v, no bias, query
//!   counts of whole vectors, a positive scale; its workspace takes the rows' log-sum-exp the
//!   kernel also writes. Template `templates/sm90_attention.cu.tera`. What it cannot take, the
//!   sm80 kernel does: a planner records both and the runtime picks per problem.
//!
//! Operands are strided 4-D views `[batch, heads, seq, dim]` whose last axis is contiguous:
//! Q `[B, H, S_q, D]`, K `[B, H, S_k, D]` (K, not Kᵀ: a model's Kᵀ is usually a transpose of
//! such a tensor, read in place), V `[B, H, S_k, D_v]`. The optional additive bias (the
//! attention mask) is `[B, H, S_q, S_k]` by strides with the key axis contiguous; a stride of
//! 0 broadcasts. The output is dense in the spec's [`OutputLayout`].
//!
//! Each sm80 kernel instantiates `AttentionKernel<T, Sm80, aligned, queries, keys, head_dim_max,
//! no dropout, bias, ToBatchHook>`: the generated hook moves Q, K and V to the block's batch and
//! the output to its batch (and, for `Bhsd`, head) so that the kernel's own head and query
//! offsets land in the spec's layout; with K and V shared by all heads it also keeps the kernel
//! off its one-query "heads as rows" path, which assumes CUTLASS's own `[B, S, H, D]` layouts.
//! Each sm90 kernel instantiates the example's `FmhaBuilder` with `(seq, dim, (batch, head))`
//! strides for every operand and the output, so both layouts are strides only.
//! [`render_unit`] writes the units (one arch each), [`crate::builder::Builder::build_all`]
//! compiles them in units of their own ([`KERNELS_PER_UNIT`]) with the arch's example directory
//! ([`include_dir`]) and [`SUPPORT_FILES`] on the include path ([`compile_command`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::abi::{BoltAttentionProblem, Status};
use crate::render::RenderError;
use crate::spec::{Arch, Element};

/// How the output `[B, H, S_q, D_v]` is laid out in memory (dense).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputLayout {
    /// `[B, H, S_q, D_v]`: the attention output as the model's MatMul writes it.
    Bhsd,
    /// `[B, S_q, H, D_v]`: heads interleaved, what the usual head-merge transpose makes of it
    /// (so a planner can write the transposed tensor directly).
    Bshd,
}

/// One fused attention kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttentionSpec {
    /// Which kernel: sm80 (example 41, runs on every arch Bolt targets) or sm90 (example 88,
    /// Hopper only). Plans written before the sm90 kernel existed hold sm80 ones.
    #[serde(default = "sm80")]
    pub arch: Arch,
    /// Q, K, V, bias and output type; f32 multiplies on tensor cores with 3xTF32 (f32 accuracy),
    /// f16/bf16 accumulate in f32.
    pub element: Element,
    /// The largest head dim (D and D_v) the kernel takes: 64 (64 queries x 64 keys per block),
    /// 128 (32 x 128; the output stays in registers either way) or 256 (32 x 128, sm80 only: the
    /// output accumulates in the workspace, [`AttentionSpec::accumulates`]).
    pub head_dim_max: u32,
    /// Whether the kernel reads an additive bias (mask).
    pub bias: bool,
    /// Query `i` sees keys `j <= i` only (causal from the top left), masked in the kernel,
    /// which skips the tiles above the diagonal. The sm90 kernel needs `seq_q <= seq_k` (its
    /// causal masking also hides keys past `seq_k`).
    #[serde(default)]
    pub causal: bool,
    pub output: OutputLayout,
}

fn sm80() -> Arch {
    Arch::Sm80
}

/// The vector width (elements) of attention kernels on `element` data (128-bit accesses).
pub fn alignment(element: Element) -> i64 {
    16 / element.size_bytes() as i64
}

/// Head dims the kernels are instantiated for.
pub const HEAD_DIM_MAX: [u32; 3] = [64, 128, 256];

/// The most batches and heads a problem may have: they are the launch grid's z and y.
pub const GRID_LIMIT: i64 = 65535;

/// Why an attention spec or problem is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttentionRejection {
    #[error("head_dim_max {0}: attention kernels are built for 64, 128 or 256")]
    HeadDimMax(u32),
    #[error("head dim {0} (D or D_v) above the kernel's {1}")]
    HeadDim(i64, u32),
    #[error("{what} {value}: must be positive")]
    Extent { what: &'static str, value: i64 },
    #[error("{what} is {value}: the kernel needs a multiple of {alignment} elements")]
    Misaligned { what: &'static str, value: i64, alignment: i64 },
    #[error("{what} stride {value}: negative")]
    Stride { what: &'static str, value: i64 },
    #[error("{what} {value}: above the kernel's index range")]
    Range { what: &'static str, value: i64 },
    #[error("the Hopper kernel takes {0}")]
    Hopper(&'static str),
}

impl AttentionRejection {
    /// The status `<symbol>_can_implement` answers for the problem: misalignment is
    /// [`Status::MisalignedOperand`], everything else [`Status::UnsupportedProblem`].
    pub fn status(&self) -> Status {
        match self {
            AttentionRejection::Misaligned { .. } => Status::MisalignedOperand,
            _ => Status::UnsupportedProblem,
        }
    }
}

pub fn validate(spec: &AttentionSpec) -> Result<(), AttentionRejection> {
    if !HEAD_DIM_MAX.contains(&spec.head_dim_max) {
        return Err(AttentionRejection::HeadDimMax(spec.head_dim_max));
    }
    if spec.arch == Arch::Sm90 {
        if !matches!(spec.element, Element::F16 | Element::BF16) {
            return Err(AttentionRejection::Hopper("f16 and bf16 data only"));
        }
        if spec.bias {
            return Err(AttentionRejection::Hopper("no additive mask (bias)"));
        }
        if spec.head_dim_max > 128 {
            return Err(AttentionRejection::Hopper("head dims up to 128"));
        }
    }
    Ok(())
}

impl AttentionSpec {
    /// The kernel for head dims `d` and `d_v`, if one is built for them.
    pub fn for_head_dims(
        element: Element,
        d: i64,
        d_v: i64,
        bias: bool,
        output: OutputLayout,
    ) -> Option<AttentionSpec> {
        let need = d.max(d_v);
        let head_dim_max = *HEAD_DIM_MAX.iter().find(|&&m| need >= 1 && need <= i64::from(m))?;
        Some(AttentionSpec { arch: Arch::Sm80, element, head_dim_max, bias, causal: false, output })
    }

    /// The Hopper kernel for what this (sm80) kernel computes, or why there is none: the
    /// element, the mask, and head dims D = D_v (`d`, `d_v`) decide; the problem's own limits
    /// ([`AttentionSpec::check`]) are the runtime's to meet, problem by problem.
    pub fn hopper(&self, d: i64, d_v: i64) -> Result<AttentionSpec, AttentionRejection> {
        let spec = AttentionSpec { arch: Arch::Sm90, ..*self };
        validate(&spec)?;
        if d != d_v {
            return Err(AttentionRejection::Hopper("one head dim for Q, K and V (D = D_v)"));
        }
        Ok(spec)
    }

    /// Vector width (elements) of the operands' loads: every stride but the contiguous axes'
    /// and D, D_v must be a multiple of it (128-bit accesses).
    pub fn alignment(&self) -> i64 {
        alignment(self.element)
    }

    /// Queries and keys per thread block (as CUTLASS's examples pick them).
    pub fn tile(&self) -> (u32, u32) {
        match (self.arch, self.head_dim_max <= 64) {
            (Arch::Sm80, true) => (64, 64),
            (Arch::Sm80, false) => (32, 128),
            (Arch::Sm90, true) => (128, 64),
            (Arch::Sm90, false) => (128, 128),
        }
    }

    /// Whether the output outgrows the registers: head dims past a block's keys are computed
    /// in column blocks, and the output of each key block is accumulated (rescaled by the
    /// online softmax) in an f32 buffer `[B, S_q, H, D_v]`, the workspace.
    pub fn accumulates(&self) -> bool {
        self.arch == Arch::Sm80 && self.head_dim_max > self.tile().1
    }

    /// Device workspace bytes `<symbol>_workspace_size` answers for `p` (checked): sm80
    /// kernels, none, or the f32 output accumulator where they [accumulate](Self::accumulates);
    /// sm90 kernels, one f32 log-sum-exp per query row.
    pub fn workspace_bytes(&self, p: &BoltAttentionProblem) -> usize {
        match self.arch {
            Arch::Sm80 if self.accumulates() => (p.batch * p.seq_q * p.heads * p.head_dim_v) as usize * 4,
            Arch::Sm80 => 0,
            Arch::Sm90 => (p.batch * p.heads * p.seq_q) as usize * 4,
        }
    }

    /// What `<symbol>_can_implement` checks, on the host (the generated code checks the same).
    pub fn check(&self, p: &BoltAttentionProblem) -> Result<(), AttentionRejection> {
        validate(self)?;
        self.check_extents(p)?;
        if self.arch == Arch::Sm90 {
            return self.check_sm90(p);
        }
        let a = self.alignment();
        let q = p.q_strides;
        let k = p.k_strides;
        let v = p.v_strides;
        let m = p.bias_strides;
        let mut strided: Vec<(&'static str, i64)> = vec![
            ("q batch stride", q[0]),
            ("q head stride", q[1]),
            ("q seq stride", q[2]),
            ("k batch stride", k[0]),
            ("k head stride", k[1]),
            ("k seq stride", k[2]),
            ("v batch stride", v[0]),
            ("v head stride", v[1]),
            ("v seq stride", v[2]),
        ];
        if self.bias {
            strided.extend([("bias batch stride", m[0]), ("bias head stride", m[1]), ("bias query stride", m[2])]);
        }
        for &(what, value) in &strided {
            if value < 0 {
                return Err(AttentionRejection::Stride { what, value });
            }
        }
        for (what, value) in [("head_dim", p.head_dim), ("head_dim_v", p.head_dim_v)].into_iter().chain(strided) {
            if value % a != 0 {
                return Err(AttentionRejection::Misaligned { what, value, alignment: a });
            }
        }
        // The bias tile is loaded in vectors of `a` elements, each guarded by its first
        // column only: with a ragged S_k the last vector of a row reads past the row, so the
        // rows must be padded to whole vectors (every row of the buffer, the last one too: the
        // caller's part) and every row stride must step over a padded row.
        // (A seq_k past 32 bits is refused below; its padded length could overflow.)
        if self.bias && p.seq_k % a != 0 && p.seq_k <= i64::from(i32::MAX) {
            let padded = (p.seq_k + a - 1) / a * a;
            if let Some(&value) = p.bias_strides.iter().find(|&&s| s != 0 && s < padded) {
                return Err(AttentionRejection::Misaligned {
                    what: "bias row stride (rows of a ragged seq_k padded to whole vectors)",
                    value,
                    alignment: padded,
                });
            }
        }
        // The kernel indexes rows and heads with 32-bit strides, and offsets a block's keys
        // (and bias rows) by 32-bit products; batches and heads are the grid's z and y.
        let mut ranges = vec![
            ("q seq stride", p.q_strides[2], i64::from(i32::MAX)),
            ("k seq stride", p.k_strides[2], i64::from(i32::MAX)),
            ("v seq stride", p.v_strides[2], i64::from(i32::MAX)),
            ("q head stride", p.q_strides[1], i64::from(i32::MAX)),
            ("k head stride", p.k_strides[1], i64::from(i32::MAX)),
            ("v head stride", p.v_strides[1], i64::from(i32::MAX)),
            ("seq_q", p.seq_q, i64::from(i32::MAX)),
            ("seq_k", p.seq_k, i64::from(i32::MAX)),
            ("batch", p.batch, GRID_LIMIT),
            ("heads", p.heads, GRID_LIMIT),
            ("heads x head_dim_v", p.heads.saturating_mul(p.head_dim_v), i64::from(i32::MAX)),
            ("seq_k x k seq stride", p.seq_k.saturating_mul(p.k_strides[2]), i64::from(i32::MAX)),
            ("seq_k x v seq stride", p.seq_k.saturating_mul(p.v_strides[2]), i64::from(i32::MAX)),
        ];
        if self.bias {
            ranges.push(("bias query stride", p.bias_strides[2], i64::from(i32::MAX)));
            ranges.push(("seq_q x bias query stride", p.seq_q.saturating_mul(p.bias_strides[2]), i64::from(i32::MAX)));
        }
        for (what, value, limit) in ranges {
            if value > limit {
                return Err(AttentionRejection::Range { what, value });
            }
        }
        Ok(())
    }

    /// Every kernel's first checks: positive extents, head dims within the tile.
    fn check_extents(&self, p: &BoltAttentionProblem) -> Result<(), AttentionRejection> {
        for (what, value) in [
            ("batch", p.batch),
            ("heads", p.heads),
            ("seq_q", p.seq_q),
            ("seq_k", p.seq_k),
            ("head_dim", p.head_dim),
            ("head_dim_v", p.head_dim_v),
        ] {
            if value < 1 {
                return Err(AttentionRejection::Extent { what, value });
            }
        }
        for d in [p.head_dim, p.head_dim_v] {
            if d > i64::from(self.head_dim_max) {
                return Err(AttentionRejection::HeadDim(d, self.head_dim_max));
            }
        }
        Ok(())
    }

    /// [`AttentionSpec::check`] for the Hopper kernel (templates/sm90_attention.cu.tera's
    /// `check_problem`, in its order): every stride, the output's and the log-sum-exp's too, is
    /// a 32-bit TMA stride of whole 16-byte vectors.
    fn check_sm90(&self, p: &BoltAttentionProblem) -> Result<(), AttentionRejection> {
        if p.head_dim != p.head_dim_v {
            return Err(AttentionRejection::Hopper("one head dim for Q, K and V (D = D_v)"));
        }
        if !(p.scale > 0.0) {
            return Err(AttentionRejection::Hopper("a positive scale (its online softmax maxes unscaled scores)"));
        }
        if self.causal && p.seq_q > p.seq_k {
            return Err(AttentionRejection::Hopper(
                "causal masking with seq_q <= seq_k (keys past seq_k are hidden by it)",
            ));
        }
        let all = [p.q_strides, p.k_strides, p.v_strides];
        let strided: [(&'static str, i64); 9] = [
            ("q batch stride", p.q_strides[0]),
            ("q head stride", p.q_strides[1]),
            ("q seq stride", p.q_strides[2]),
            ("k batch stride", p.k_strides[0]),
            ("k head stride", p.k_strides[1]),
            ("k seq stride", p.k_strides[2]),
            ("v batch stride", p.v_strides[0]),
            ("v head stride", p.v_strides[1]),
            ("v seq stride", p.v_strides[2]),
        ];
        for &(what, value) in &strided {
            if value < 0 {
                return Err(AttentionRejection::Stride { what, value });
            }
        }
        for (axis, extent) in [(0, p.batch), (1, p.heads)] {
            if extent > 1 && all.iter().any(|s| s[axis] == 0) {
                return Err(AttentionRejection::Hopper(
                    "no operand shared by several batches or heads (stride 0): not a TMA view",
                ));
            }
        }
        let a = self.alignment();
        if p.head_dim % a != 0 {
            return Err(AttentionRejection::Misaligned { what: "head_dim", value: p.head_dim, alignment: a });
        }
        for &(what, value) in &strided {
            if value % a != 0 {
                return Err(AttentionRejection::Misaligned { what, value, alignment: a });
            }
        }
        if p.seq_q % a != 0 {
            return Err(AttentionRejection::Misaligned {
                what: "seq_q (the kernel's query count)",
                value: p.seq_q,
                alignment: a,
            });
        }
        let int = i64::from(i32::MAX);
        for &(what, value) in &strided {
            if value > int {
                return Err(AttentionRejection::Range { what, value });
            }
        }
        for (what, value, limit) in [
            ("seq_q", p.seq_q, int),
            ("seq_k", p.seq_k, int),
            ("batch", p.batch, GRID_LIMIT),
            ("heads", p.heads, GRID_LIMIT),
        ] {
            if value > limit {
                return Err(AttentionRejection::Range { what, value });
            }
        }
        let out = p.heads.saturating_mul(p.seq_q).saturating_mul(p.head_dim_v);
        if out > int {
            return Err(AttentionRejection::Range {
                what: "heads x seq_q x head_dim_v (output batch stride)",
                value: out,
            });
        }
        Ok(())
    }

    /// The output's element strides over `[B, H, S_q, D_v]` (dense in the spec's layout).
    pub fn output_strides(&self, p: &BoltAttentionProblem) -> [i64; 4] {
        match self.output {
            OutputLayout::Bhsd => [p.heads * p.seq_q * p.head_dim_v, p.seq_q * p.head_dim_v, p.head_dim_v, 1],
            OutputLayout::Bshd => [p.seq_q * p.heads * p.head_dim_v, p.head_dim_v, p.heads * p.head_dim_v, 1],
        }
    }

    /// The kernel's meaning on host buffers (f64), for the reference device and as the oracle
    /// of tests: `q`, `k`, `v`, `bias` addressed by the problem's strides, the output dense in
    /// the spec's layout. Rows whose every score is -inf give NaN, as a softmax does.
    pub fn eval(&self, p: &BoltAttentionProblem, q: &[f64], k: &[f64], v: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
        let (b, h, sq, sk, d, dv) = (
            p.batch as usize,
            p.heads as usize,
            p.seq_q as usize,
            p.seq_k as usize,
            p.head_dim as usize,
            p.head_dim_v as usize,
        );
        let at = |s: [i64; 3], bi: usize, hi: usize, si: usize| {
            (s[0] * bi as i64 + s[1] * hi as i64 + s[2] * si as i64) as usize
        };
        let os = self.output_strides(p);
        let mut out = vec![0.0; b * h * sq * dv];
        let mut scores = vec![0.0; sk];
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..sq {
                    let qo = at(p.q_strides, bi, hi, i);
                    for (j, s) in scores.iter_mut().enumerate() {
                        if self.causal && j > i {
                            *s = f64::NEG_INFINITY;
                            continue;
                        }
                        let ko = at(p.k_strides, bi, hi, j);
                        let dot: f64 = (0..d).map(|x| q[qo + x] * k[ko + x]).sum();
                        *s = dot * p.scale;
                        if let (true, Some(bias)) = (self.bias, bias) {
                            *s += bias[at(p.bias_strides, bi, hi, i) + j];
                        }
                    }
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    let o = bi * os[0] as usize + hi * os[1] as usize + i * os[2] as usize;
                    for x in 0..dv {
                        let acc: f64 = e.iter().enumerate().map(|(j, w)| w * v[at(p.v_strides, bi, hi, j) + x]).sum();
                        out[o + x] = acc / sum;
                    }
                }
            }
        }
        out
    }
}

/// A unique readable symbol: `bolt_attention_<element>_d<max>_<bias|nobias>_<layout>` for
/// sm80 kernels, `bolt_sm90_attention_...` for sm90 ones.
pub fn symbol_for(spec: &AttentionSpec) -> String {
    let layout = match spec.output {
        OutputLayout::Bhsd => "bhsd",
        OutputLayout::Bshd => "bshd",
    };
    let prefix = match spec.arch {
        Arch::Sm80 => "bolt_attention",
        Arch::Sm90 => "bolt_sm90_attention",
    };
    format!(
        "{prefix}_{}_d{}_{}{}_{layout}",
        spec.element.name(),
        spec.head_dim_max,
        if spec.bias { "bias" } else { "nobias" },
        if spec.causal { "_causal" } else { "" }
    )
}

// ================================================================================================
// Rendering and compiling
// ================================================================================================

pub const TEMPLATE: &str = "attention.cu.tera";
/// The Hopper kernel's template.
pub const SM90_TEMPLATE: &str = "sm90_attention.cu.tera";

/// The sm80 kernel's example directory in the CUTLASS tree (`kernel_forward.h` and the headers
/// it includes), added to the include path of sm80 attention units only.
pub const EXAMPLE_DIR: &str = "examples/41_fused_multi_head_attention";
/// The sm90 kernel's (`kernel/fmha_kernel_builder.hpp` and its collectives).
pub const SM90_EXAMPLE_DIR: &str = "examples/88_hopper_fmha";

/// `<cutlass>/examples/41_fused_multi_head_attention` for sm80, `.../88_hopper_fmha` for sm90.
pub fn include_dir(toolchain: &bolt_cutlass::Toolchain, arch: Arch) -> PathBuf {
    toolchain.cutlass_dir().join(match arch {
        Arch::Sm80 => EXAMPLE_DIR,
        Arch::Sm90 => SM90_EXAMPLE_DIR,
    })
}

/// Subdirectory of a build's include directory holding [`SUPPORT_FILES`], on the include path
/// of attention units only.
pub const SUPPORT_DIR: &str = "attention_support";

/// Headers attention units need besides `bolt_kernel.h` (file name, content), written into
/// `<include>/`[`SUPPORT_DIR`]. `kernel_forward.h` includes `<curand_kernel.h>` for its dropout,
/// which it only compiles with PyTorch (`HAS_PYTORCH`); the pinned CUDA has no cuRAND, so an
/// empty header stands in (it also shadows a real one, unused all the same).
pub const SUPPORT_FILES: &[(&str, &str)] = &[(
    "curand_kernel.h",
    "// Written by Bolt for CUTLASS's fused attention kernel (examples/41): kernel_forward.h\n\
     // includes <curand_kernel.h> for dropout, which it compiles only with HAS_PYTORCH.\n\
     #pragma once\n",
)];

/// Writes [`SUPPORT_FILES`] into `<include>/`[`SUPPORT_DIR`] (unchanged files are left alone).
pub fn write_support_files(include: &Path) -> std::io::Result<()> {
    let dir = include.join(SUPPORT_DIR);
    std::fs::create_dir_all(&dir)?;
    for (name, content) in SUPPORT_FILES {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*content) {
            crate::cache::write_atomic(&path, content.as_bytes())?;
        }
    }
    Ok(())
}

/// An nvcc invocation for a rendered attention unit of `arch`'s kernels: sm_80 SASS +
/// compute_80 PTX or sm_90a, `include` (with `bolt_kernel.h` and, after
/// [`write_support_files`], the support headers) and the example's headers on the include path.
pub fn compile_command<'a>(
    toolchain: &'a bolt_cutlass::Toolchain,
    arch: Arch,
    source: &Path,
    output: &Path,
    include: &Path,
) -> bolt_cutlass::Compile<'a> {
    arch.targets(toolchain.compile(source, output))
        .include(include)
        .include(include.join(SUPPORT_DIR))
        .include(include_dir(toolchain, arch))
}

/// sm80 attention kernels per translation unit. Measured on 2 cores: a unit of one kernel
/// takes 9 s of nvcc (mostly the headers), one of all 24 specs 48 s and 0.74 GB (≈1.7 s per
/// kernel), so several share the headers while units still compile in parallel.
pub const KERNELS_PER_UNIT: usize = 8;

/// Attention kernels per translation unit for `arch`: an sm90 kernel takes 45-80 s of nvcc of
/// its own (the headers are a small part), so two to a unit keep units compiling in parallel.
pub fn kernels_per_unit(arch: Arch) -> usize {
    match arch {
        Arch::Sm80 => KERNELS_PER_UNIT,
        Arch::Sm90 => 2,
    }
}

#[derive(Serialize)]
struct Context<'a> {
    symbol: &'a str,
    summary: String,
    element: &'static str,
    alignment: i64,
    queries_per_block: u32,
    keys_per_block: u32,
    head_dim_max: u32,
    bias: bool,
    causal: bool,
    bshd: bool,
    accumulates: bool,
    grid_limit: i64,
    // The sm90 template's names for the tile.
    block_q: u32,
    block_k: u32,
}

/// One attention kernel's block (relies on the unit prologue, like [`crate::render::render`]).
pub fn render(spec: &AttentionSpec, symbol: &str) -> Result<String, RenderError> {
    crate::render::check_symbol(symbol)?;
    validate(spec).map_err(|r| RenderError::Unsupported { field: "attention", reason: r.to_string() })?;
    let (queries_per_block, keys_per_block) = spec.tile();
    let context = Context {
        symbol,
        summary: serde_json::to_string(spec).expect("attention spec serialises"),
        element: spec.element.cpp(),
        alignment: spec.alignment(),
        queries_per_block,
        keys_per_block,
        head_dim_max: spec.head_dim_max,
        bias: spec.bias,
        causal: spec.causal,
        bshd: spec.output == OutputLayout::Bshd,
        accumulates: spec.accumulates(),
        grid_limit: GRID_LIMIT,
        block_q: queries_per_block,
        block_k: keys_per_block,
    };
    let template = match spec.arch {
        Arch::Sm80 => TEMPLATE,
        Arch::Sm90 => SM90_TEMPLATE,
    };
    crate::render::render_template(template, &crate::render::to_context(&context)?)
}

/// Headers a unit of `arch`'s attention kernels needs (from [`include_dir`]).
pub fn includes(arch: Arch) -> &'static [&'static str] {
    match arch {
        Arch::Sm80 => &["cutlass/cutlass.h", "kernel_forward.h"],
        Arch::Sm90 => &[
            "cute/tensor.hpp",
            "cutlass/cutlass.h",
            "cutlass/cluster_launch.hpp",
            "cutlass/device_kernel.h",
            "cutlass/kernel_hardware_info.h",
            "collective/fmha_fusion.hpp",
            "kernel/fmha_kernel_builder.hpp",
        ],
    }
}

/// Attention kernels of one arch as one `.cu` unit: the shared prologue, then each block.
/// Compile it with [`compile_command`].
pub fn render_unit(kernels: &[(&AttentionSpec, &str)]) -> Result<String, RenderError> {
    let arch = kernels.first().map_or(Arch::Sm80, |(s, _)| s.arch);
    if kernels.iter().any(|(s, _)| s.arch != arch) {
        return Err(RenderError::Unsupported {
            field: "attention",
            reason: "sm80 and sm90 attention kernels in one unit (each arch compiles apart)".into(),
        });
    }
    crate::render::assemble_unit(kernels, includes(arch), render)
}

/// Every spec the family has without causal masking (each has a causal twin): sm80, 3
/// elements x 2 head dims x bias or not x 2 output layouts; sm90, f16 and bf16 x 2 head dims x
/// 2 output layouts (no bias).
pub fn all_specs() -> Vec<AttentionSpec> {
    let mut specs = Vec::new();
    for arch in [Arch::Sm80, Arch::Sm90] {
        for element in [Element::F16, Element::BF16, Element::F32] {
            for head_dim_max in HEAD_DIM_MAX {
                for bias in [false, true] {
                    for output in [OutputLayout::Bhsd, OutputLayout::Bshd] {
                        let spec = AttentionSpec { arch, element, head_dim_max, bias, causal: false, output };
                        if validate(&spec).is_ok() {
                            specs.push(spec);
                        }
                    }
                }
            }
        }
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    type Dense = Vec<Vec<Vec<Vec<f64>>>>;

    /// `[b][h][row][col]` read from `buf` through (batch, head, row) strides, columns contiguous.
    fn gather(buf: &[f64], s: [i64; 3], dims: [usize; 4]) -> Dense {
        let [b, h, rows, cols] = dims;
        (0..b)
            .map(|bi| {
                (0..h)
                    .map(|hi| {
                        (0..rows)
                            .map(|r| {
                                let base = bi as i64 * s[0] + hi as i64 * s[1] + r as i64 * s[2];
                                buf[base as usize..base as usize + cols].to_vec()
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    /// Attention written independently of `eval`: dense copies of the operands, the whole
    /// score matrix, a two-pass softmax, P·V, and the output layouts spelled out.
    fn naive(
        p: &BoltAttentionProblem,
        output: OutputLayout,
        q: &[f64],
        k: &[f64],
        v: &[f64],
        bias: Option<&[f64]>,
    ) -> Vec<f64> {
        let (b, h, sq, sk, d, dv) = (
            p.batch as usize,
            p.heads as usize,
            p.seq_q as usize,
            p.seq_k as usize,
            p.head_dim as usize,
            p.head_dim_v as usize,
        );
        let qd = gather(q, p.q_strides, [b, h, sq, d]);
        let kd = gather(k, p.k_strides, [b, h, sk, d]);
        let vd = gather(v, p.v_strides, [b, h, sk, dv]);
        let md = bias.map(|m| gather(m, p.bias_strides, [b, h, sq, sk]));
        let mut out = vec![f64::NAN; b * h * sq * dv];
        for bi in 0..b {
            for hi in 0..h {
                let scores: Vec<Vec<f64>> = (0..sq)
                    .map(|i| {
                        (0..sk)
                            .map(|j| {
                                let dot: f64 = qd[bi][hi][i].iter().zip(&kd[bi][hi][j]).map(|(x, y)| x * y).sum();
                                p.scale * dot + md.as_ref().map_or(0.0, |m| m[bi][hi][i][j])
                            })
                            .collect()
                    })
                    .collect();
                for (i, row) in scores.iter().enumerate() {
                    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = row.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    for x in 0..dv {
                        let o: f64 = weights.iter().zip(&vd[bi][hi]).map(|(w, value)| w / total * value[x]).sum();
                        let at = match output {
                            OutputLayout::Bhsd => ((bi * h + hi) * sq + i) * dv + x,
                            OutputLayout::Bshd => ((bi * sq + i) * h + hi) * dv + x,
                        };
                        out[at] = o;
                    }
                }
            }
        }
        out
    }

    /// Elements a buffer read through `strides` over `[b, h, rows, cols]` spans.
    fn span(s: [i64; 3], dims: [i64; 4]) -> usize {
        (s[0] * (dims[0] - 1) + s[1] * (dims[1] - 1) + s[2] * (dims[2] - 1) + dims[3]) as usize
    }

    fn problem(b: i64, h: i64, sq: i64, sk: i64, d: i64, dv: i64) -> BoltAttentionProblem {
        BoltAttentionProblem::dense(b, h, sq, sk, d, dv, 0.35)
    }

    fn assert_close(got: &[f64], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{what}[{i}]: {g} vs {w}");
        }
    }

    #[test]
    fn eval_is_softmax_attention_for_both_layouts_broadcast_bias_and_strided_k() {
        let (b, h, sq, sk, d, dv) = (2, 3, 5, 7, 4, 6);
        let dense = problem(b, h, sq, sk, d, dv);
        // K stored [B, S_k, H, D] and read as [B, H, S_k, D]; Q likewise [B, S_q, H, D].
        let transposed =
            BoltAttentionProblem { q_strides: [sq * h * d, d, h * d], k_strides: [sk * h * d, d, h * d], ..dense };
        // One [S_q, S_k] mask for every batch and head; a key-padding mask [B, 1, 1, S_k].
        let shared_mask = BoltAttentionProblem { bias_strides: [0, 0, sk], ..transposed };
        let key_padding = BoltAttentionProblem { bias_strides: [sk, 0, 0], ..dense };
        let cases = [
            ("dense", dense),
            ("transposed q and k", transposed),
            ("shared mask", shared_mask),
            ("key padding", key_padding),
        ];
        for (name, p) in cases {
            let q = values(span(p.q_strides, [b, h, sq, d]), 1);
            let k = values(span(p.k_strides, [b, h, sk, d]), 2);
            let v = values(span(p.v_strides, [b, h, sk, dv]), 3);
            let mut bias: Vec<f64> = values(span(p.bias_strides, [b, h, sq, sk]), 4).iter().map(|x| 3.0 * x).collect();
            bias[1] = -1e30; // a masked key
            for output in [OutputLayout::Bhsd, OutputLayout::Bshd] {
                let with = AttentionSpec {
                    arch: Arch::Sm80,
                    element: Element::F16,
                    head_dim_max: 64,
                    bias: true,
                    causal: false,
                    output,
                };
                let without = AttentionSpec { bias: false, ..with };
                let got = with.eval(&p, &q, &k, &v, Some(&bias));
                assert_close(&got, &naive(&p, output, &q, &k, &v, Some(&bias)), &format!("{name} {output:?} bias"));
                // A kernel without a bias ignores one given.
                let got = without.eval(&p, &q, &k, &v, Some(&bias));
                assert_close(&got, &naive(&p, output, &q, &k, &v, None), &format!("{name} {output:?} no bias"));
            }
        }
    }

    #[test]
    fn causal_eval_is_attention_with_keys_past_the_query_masked() {
        for (sq, sk) in [(5, 5), (3, 7)] {
            let (b, h, d) = (2, 3, 4);
            let p = problem(b, h, sq, sk, d, d);
            let q = values(span(p.q_strides, [b, h, sq, d]), 11);
            let k = values(span(p.k_strides, [b, h, sk, d]), 12);
            let v = values(span(p.v_strides, [b, h, sk, d]), 13);
            // The same as an explicit [S_q, S_k] mask of -inf past the diagonal (top left).
            let mask: Vec<f64> = (0..sq * sk).map(|x| if x % sk > x / sk { f64::NEG_INFINITY } else { 0.0 }).collect();
            let masked = BoltAttentionProblem { bias_strides: [0, 0, sk], ..p };
            for output in [OutputLayout::Bhsd, OutputLayout::Bshd] {
                let spec = AttentionSpec {
                    arch: Arch::Sm80,
                    element: Element::F16,
                    head_dim_max: 64,
                    bias: false,
                    causal: true,
                    output,
                };
                let got = spec.eval(&p, &q, &k, &v, None);
                assert_close(&got, &naive(&masked, output, &q, &k, &v, Some(&mask)), &format!("{sq}x{sk} {output:?}"));
                let plain = AttentionSpec { causal: false, ..spec }.eval(&p, &q, &k, &v, None);
                assert!(got.iter().zip(&plain).any(|(a, b)| (a - b).abs() > 1e-3), "causal changes the answer");
            }
        }
        // The Hopper kernel's causal masking also hides keys past S_k: more queries than keys
        // are the sm80 kernel's.
        let sm90 = AttentionSpec {
            arch: Arch::Sm90,
            element: Element::F16,
            head_dim_max: 64,
            bias: false,
            causal: true,
            output: OutputLayout::Bhsd,
        };
        assert_eq!(sm90.check(&problem(1, 2, 64, 64, 64, 64)), Ok(()));
        assert!(matches!(sm90.check(&problem(1, 2, 128, 64, 64, 64)), Err(AttentionRejection::Hopper(_))));
        assert_eq!(AttentionSpec { causal: false, ..sm90 }.check(&problem(1, 2, 128, 64, 64, 64)), Ok(()));
        assert_eq!(AttentionSpec { arch: Arch::Sm80, ..sm90 }.check(&problem(1, 2, 128, 64, 64, 64)), Ok(()));
        assert!(symbol_for(&sm90).ends_with("_nobias_causal_bhsd"));
    }

    #[test]
    fn eval_of_a_fully_masked_row_is_nan() {
        let p = problem(1, 1, 2, 3, 8, 8);
        let spec = AttentionSpec {
            arch: Arch::Sm80,
            element: Element::F32,
            head_dim_max: 64,
            bias: true,
            causal: false,
            output: OutputLayout::Bhsd,
        };
        let (q, k, v) = (values(16, 5), values(24, 6), values(24, 7));
        let bias = [f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0, 0.0, 0.0];
        let out = spec.eval(&p, &q, &k, &v, Some(&bias));
        assert!(out[..8].iter().all(|x| x.is_nan()), "{out:?}");
        assert!(out[8..].iter().all(|x| x.is_finite()), "{out:?}");
    }

    #[test]
    fn check_refuses_what_the_kernel_cannot_do() {
        let f16 = AttentionSpec {
            arch: Arch::Sm80,
            element: Element::F16,
            head_dim_max: 64,
            bias: true,
            causal: false,
            output: OutputLayout::Bshd,
        };
        let f32 = AttentionSpec { arch: Arch::Sm80, element: Element::F32, ..f16 };
        let p = problem(2, 4, 100, 48, 64, 64);
        assert_eq!(f16.check(&p), Ok(()));
        assert_eq!((f16.alignment(), f32.alignment()), (8, 4));
        let reject = |spec: &AttentionSpec, p: BoltAttentionProblem| spec.check(&p).unwrap_err();
        assert!(matches!(
            reject(&f16, BoltAttentionProblem { seq_q: 0, ..p }),
            AttentionRejection::Extent { what: "seq_q", .. }
        ));
        assert_eq!(reject(&f16, BoltAttentionProblem { head_dim: 72, ..p }), AttentionRejection::HeadDim(72, 64));
        let r = reject(&f16, BoltAttentionProblem { head_dim: 60, head_dim_v: 60, ..p });
        assert_eq!(r.status(), Status::MisalignedOperand);
        assert_eq!(f32.check(&BoltAttentionProblem { head_dim: 60, head_dim_v: 60, ..p }), Ok(()));
        let r = reject(&f16, BoltAttentionProblem { k_strides: [p.k_strides[0], p.k_strides[1], -64], ..p });
        assert_eq!((r.status(), matches!(r, AttentionRejection::Stride { .. })), (Status::UnsupportedProblem, true));
        // A bias's rows are read in whole vectors: a ragged key count needs rows padded to
        // whole vectors (strides of at least 48 for 45 keys); without a bias any key count goes.
        let ragged = BoltAttentionProblem { seq_k: 45, bias_strides: [0, 0, 45], ..p };
        assert_eq!(reject(&f16, ragged).status(), Status::MisalignedOperand);
        let padded = BoltAttentionProblem { seq_k: 45, bias_strides: [100 * 48, 0, 48], ..p };
        assert_eq!(f16.check(&padded), Ok(()));
        assert_eq!(f16.check(&BoltAttentionProblem { bias_strides: [48, 0, 0], ..padded }), Ok(()));
        assert_eq!(AttentionSpec { bias: false, ..f16 }.check(&ragged), Ok(()));
        // Bias strides matter only to a kernel reading a bias.
        let odd_bias = BoltAttentionProblem { bias_strides: [-1, 3, i64::MAX], ..p };
        assert_eq!(AttentionSpec { bias: false, ..f16 }.check(&odd_bias), Ok(()));
        assert_eq!(reject(&f16, odd_bias).status(), Status::UnsupportedProblem);
        for big in [
            BoltAttentionProblem { batch: GRID_LIMIT + 1, ..p },
            BoltAttentionProblem { heads: 1 << 40, ..p },
            BoltAttentionProblem { seq_k: 1 << 31, ..p },
            BoltAttentionProblem { seq_k: 1 << 24, k_strides: [0, 0, 1 << 8], ..p },
            BoltAttentionProblem { seq_q: 1 << 30, bias_strides: [0, 0, 64], ..p },
        ] {
            assert!(matches!(reject(&f16, big), AttentionRejection::Range { .. }), "{big:?}");
        }
        assert!(matches!(
            validate(&AttentionSpec { head_dim_max: 96, ..f16 }),
            Err(AttentionRejection::HeadDimMax(96))
        ));
    }

    #[test]
    fn renders_one_block_per_spec_behind_the_abi() {
        let all = all_specs();
        // sm80: 3 elements x 3 head dims x bias or not x 2 layouts; sm90: 2 x 2 x 2 (no bias,
        // no 256).
        assert_eq!(all.len(), 44);
        let mut unique: Vec<String> = all.iter().map(symbol_for).collect();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 44);
        let specs: Vec<AttentionSpec> = all.iter().copied().filter(|s| s.arch == Arch::Sm80).collect();
        assert_eq!(specs.len(), 36);
        let symbols: Vec<String> = specs.iter().map(symbol_for).collect();
        let spec = AttentionSpec {
            arch: Arch::Sm80,
            element: Element::BF16,
            head_dim_max: 128,
            bias: false,
            causal: false,
            output: OutputLayout::Bshd,
        };
        let symbol = symbol_for(&spec);
        assert_eq!(symbol, "bolt_attention_bf16_d128_nobias_bshd");
        let code = render(&spec, &symbol).unwrap();
        for needle in [
            "using Element = cutlass::bfloat16_t;",
            "constexpr int kQueriesPerBlock = 32;",
            "constexpr int kKeysPerBlock = 128;",
            "constexpr int kMaxK = 128;",
            "/*kSupportsBias=*/false, ToBatchHook>",
            "params.o_strideM = int32_t(p.heads * p.head_dim_v);",
            "extern \"C\" BoltStatus bolt_attention_bf16_d128_nobias_bshd_initialize(",
            "const BoltAttentionArgs *args",
        ] {
            assert!(code.contains(needle), "missing {needle}:\n{code}");
        }
        assert!(!code.contains("attn_bias_ptr = const_cast"));
        let bhsd = AttentionSpec {
            arch: Arch::Sm80,
            element: Element::F32,
            head_dim_max: 64,
            bias: true,
            causal: false,
            output: OutputLayout::Bhsd,
        };
        let code = render(&bhsd, "k").unwrap();
        assert!(code.contains("params.o_strideM = int32_t(p.head_dim_v);") && code.contains("using Element = float;"));
        assert!(code.contains("p.seq_k % kAlignment != 0") && code.contains("constexpr int kAlignment = 4;"));
        let pairs: Vec<(&AttentionSpec, &str)> = specs.iter().zip(&symbols).map(|(s, n)| (s, n.as_str())).collect();
        let unit = render_unit(&pairs).unwrap();
        assert!(unit.contains("#include <kernel_forward.h>"));
        assert_eq!(unit.matches("_launch(void *params, void *stream)").count(), 36);
        assert!(render(&AttentionSpec { head_dim_max: 96, ..spec }, "k").is_err());
        assert!(render_unit(&[(&spec, "k"), (&bhsd, "k")]).is_err());
        // Head dims past a block's keys: the output accumulates in the f32 workspace, laid out
        // [B, S_q, H, D_v] whatever the output's layout (f32 output too).
        let wide = AttentionSpec { head_dim_max: 256, ..bhsd };
        assert!(wide.accumulates() && !spec.accumulates() && !bhsd.accumulates());
        let code = render(&wide, "k").unwrap();
        for needle in [
            "constexpr int kMaxK = 256;",
            "static_assert(!Attention::kKeepOutputInRF",
            "params.output_accum_ptr = static_cast<float *>(workspace);",
            "p.output_accum_ptr += batch_id * p.num_queries * p.num_heads * p.head_dim_value;",
            "return size_t(p.batch) * size_t(p.seq_q) * size_t(p.heads) * size_t(p.head_dim_v) * sizeof(float);",
        ] {
            assert!(code.contains(needle), "missing {needle}:\n{code}");
        }
        assert!(!render(&bhsd, "k").unwrap().contains("output_accum_ptr +="));

        // The Hopper kernel: its own template, headers and symbols; one arch per unit.
        let hopper = AttentionSpec { arch: Arch::Sm90, ..spec };
        let symbol = symbol_for(&hopper);
        assert_eq!(symbol, "bolt_sm90_attention_bf16_d128_nobias_bshd");
        let unit = render_unit(&[(&hopper, &symbol)]).unwrap();
        for needle in [
            "#include <kernel/fmha_kernel_builder.hpp>",
            "using TileShape = Shape<_128, _128, _128>;",
            "cutlass::fmha::collective::ResidualFusion",
            "Stride const stride_o{h * int(p.head_dim_v), _1{}, cute::make_tuple(sq * h * int(p.head_dim_v), int(p.head_dim_v))};",
            "params_.mainloop.scale_softmax = scale;",
            "extern \"C\" size_t bolt_sm90_attention_bf16_d128_nobias_bshd_workspace_size(",
        ] {
            assert!(unit.contains(needle), "missing {needle}:\n{unit}");
        }
        assert!(!unit.contains("kernel_forward.h"));
        let d64 = AttentionSpec { head_dim_max: 64, output: OutputLayout::Bhsd, ..hopper };
        assert!(render(&d64, "k").unwrap().contains("using TileShape = Shape<_128, _64, _64>;"));
        assert!(render_unit(&[(&hopper, "a"), (&spec, "b")]).is_err());
        for bad in [AttentionSpec { bias: true, ..hopper }, AttentionSpec { element: Element::F32, ..hopper }] {
            assert!(matches!(validate(&bad), Err(AttentionRejection::Hopper(_))), "{bad:?}");
            assert!(render(&bad, "k").is_err());
        }
    }

    #[test]
    fn the_hopper_kernel_takes_what_its_template_checks() {
        let sm80 = AttentionSpec {
            arch: Arch::Sm80,
            element: Element::F16,
            head_dim_max: 64,
            bias: false,
            causal: false,
            output: OutputLayout::Bshd,
        };
        let sm90 = sm80.hopper(64, 64).unwrap();
        assert_eq!(sm90, AttentionSpec { arch: Arch::Sm90, ..sm80 });
        assert!(matches!(sm80.hopper(64, 32), Err(AttentionRejection::Hopper(_))));
        assert!(AttentionSpec { bias: true, ..sm80 }.hopper(64, 64).is_err());
        assert!(AttentionSpec { element: Element::F32, ..sm80 }.hopper(64, 64).is_err());
        let p = problem(2, 4, 128, 77, 64, 64);
        assert_eq!(sm90.check(&p), Ok(()));
        assert_eq!(sm90.workspace_bytes(&p), 2 * 4 * 128 * 4);
        assert_eq!(sm80.workspace_bytes(&p), 0);
        let wide = AttentionSpec { head_dim_max: 256, ..sm80 };
        assert_eq!(wide.workspace_bytes(&problem(2, 4, 128, 77, 200, 160)), 2 * 128 * 4 * 160 * 4);
        assert!(matches!(wide.hopper(256, 256), Err(AttentionRejection::Hopper(_))));
        let rejected = |q: BoltAttentionProblem| sm90.check(&q).unwrap_err();
        // What the sm80 kernel takes and this one does not: ragged query counts, D != D_v,
        // a negative scale, K and V shared by the heads.
        assert_eq!(sm80.check(&problem(2, 4, 100, 77, 64, 64)), Ok(()));
        assert_eq!(rejected(problem(2, 4, 100, 77, 64, 64)).status(), Status::MisalignedOperand);
        assert!(matches!(rejected(problem(2, 4, 128, 77, 64, 32)), AttentionRejection::Hopper(_)));
        assert!(matches!(rejected(BoltAttentionProblem { scale: -1.0, ..p }), AttentionRejection::Hopper(_)));
        let shared = BoltAttentionProblem { k_strides: [77 * 64, 0, 64], v_strides: [77 * 64, 0, 64], ..p };
        assert_eq!(sm80.check(&shared), Ok(()));
        assert!(matches!(rejected(shared), AttentionRejection::Hopper(_)));
        // One batch or head read through a zero stride is a mode of extent 1: taken.
        let single = BoltAttentionProblem {
            q_strides: [0, 0, 64],
            k_strides: [0, 0, 64],
            v_strides: [0, 0, 64],
            ..problem(1, 1, 64, 9, 64, 64)
        };
        assert_eq!(sm90.check(&single), Ok(()));
        // 32-bit strides, the output's batch stride too.
        assert!(matches!(
            rejected(BoltAttentionProblem { q_strides: [1 << 31, 64, 256], ..p }),
            AttentionRejection::Range { .. }
        ));
        let long = BoltAttentionProblem { heads: 4096, seq_q: 1 << 14, ..p };
        assert!(matches!(sm90.check(&long), Err(AttentionRejection::Range { .. })));
    }
}
