//! Fused attention kernels (CUTLASS's memory-efficient attention behind the C ABI). Needs the
//! toolchain, no GPU:
//!
//! - every spec of the family is built into one library by the builder (its own units, the
//!   example's headers on the include path) and loaded; each kernel's `can_implement` agrees
//!   with `AttentionSpec::check` on a table of problems, and `initialize` / `update` refuse
//!   null and misaligned pointers (set-up with fake pointers needs no device, except for the
//!   one kernel whose shared memory needs an attribute set);
//! - an executable replays the kernel's addressing on the host (the generated batch hook, then
//!   `advance_to_block`'s offsets as kernel_forward.h writes them) and every element a block
//!   reads or writes is checked against the problem's strides and the output layout.
//!
//! The kernels' arithmetic itself runs only on a GPU: unverified here.

mod build_support;
mod common;

use std::collections::BTreeSet;
use std::ffi::c_void;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use bolt_codegen::abi::{BoltAttentionArgs, BoltAttentionProblem, CanImplementFn, Status};
use bolt_codegen::attention::{self, AttentionSpec, OutputLayout, GRID_LIMIT};
use bolt_codegen::builder::Templates;
use bolt_codegen::loader::KernelLibrary;
use bolt_codegen::spec::{Arch, Element};
use build_support::{builder, init_tracing, toolchain};

fn dense(b: i64, h: i64, sq: i64, sk: i64, d: i64, dv: i64) -> BoltAttentionProblem {
    BoltAttentionProblem::dense(b, h, sq, sk, d, dv, 0.125)
}

/// Problems around everything `AttentionSpec::check` looks at, for a kernel of alignment `a`
/// and largest head dim `m`.
fn problems(a: i64, m: i64) -> Vec<(String, BoltAttentionProblem)> {
    let p = dense(2, 12, 128, 128, m, m);
    let mut v: Vec<(String, BoltAttentionProblem)> = vec![
        ("dense".into(), p),
        ("small head dims, odd queries".into(), dense(3, 5, 77, 96, a, m - a)),
        ("one query, one key".into(), dense(1, 1, 1, 1, a, a)),
        ("ragged keys".into(), dense(1, 2, 33, 77, m, m)),
        (
            // The same with the bias rows padded to whole vectors (what Bolt's runtime stages).
            "ragged keys, padded bias rows".into(),
            BoltAttentionProblem { bias_strides: [2 * 33 * 80, 33 * 80, 80], ..dense(1, 2, 33, 77, m, m) },
        ),
        (
            // Q and K read in place from [B, S, H, D] (a transposed view), K and V shared by the
            // heads, the bias a key-padding mask [B, 1, 1, S_k].
            "strided and broadcast".into(),
            BoltAttentionProblem {
                q_strides: [128 * 12 * m, m, 12 * m],
                k_strides: [128 * m, 0, m],
                v_strides: [128 * m, 0, m],
                bias_strides: [128, 0, 0],
                ..p
            },
        ),
        // One batch and head given as broadcast views (stride 0): a mode of extent 1.
        (
            "one batch and head, zero strides".into(),
            BoltAttentionProblem {
                q_strides: [0, 0, m],
                k_strides: [0, 0, m],
                v_strides: [0, 0, m],
                ..dense(1, 1, 64, 40, m, m)
            },
        ),
        ("negative scale".into(), BoltAttentionProblem { scale: -0.5, ..p }),
        ("head dim too big".into(), BoltAttentionProblem { head_dim: m + a, ..p }),
        ("value head dim too big".into(), BoltAttentionProblem { head_dim_v: m + a, ..p }),
        ("misaligned head dim".into(), BoltAttentionProblem { head_dim: m - a / 2, ..p }),
        ("misaligned value head dim".into(), BoltAttentionProblem { head_dim_v: a / 2, ..p }),
        ("negative head dim".into(), BoltAttentionProblem { head_dim: -a, ..p }),
        ("grid: batches".into(), BoltAttentionProblem { batch: GRID_LIMIT + 1, ..p }),
        ("grid: heads".into(), BoltAttentionProblem { heads: GRID_LIMIT + 1, ..p }),
        ("huge heads".into(), BoltAttentionProblem { heads: i64::MAX, ..p }),
        ("huge keys".into(), BoltAttentionProblem { seq_k: i64::MAX, ..p }),
        ("32-bit queries".into(), BoltAttentionProblem { seq_q: 1 << 31, ..p }),
        ("32-bit key offsets".into(), BoltAttentionProblem { seq_k: 1 << 20, k_strides: [0, 0, 1 << 12], ..p }),
        ("32-bit value offsets".into(), BoltAttentionProblem { seq_k: 1 << 20, v_strides: [0, 0, 1 << 12], ..p }),
        ("32-bit bias offsets".into(), BoltAttentionProblem { seq_q: 1 << 20, bias_strides: [0, 0, 1 << 12], ..p }),
        ("32-bit q stride".into(), BoltAttentionProblem { q_strides: [0, 0, 1 << 31], ..p }),
        ("32-bit k head stride".into(), BoltAttentionProblem { k_strides: [0, 1 << 31, m], ..p }),
        ("bias strides, odd".into(), BoltAttentionProblem { bias_strides: [-1, 3, 1 << 40], ..p }),
    ];
    for (what, value) in
        [("batch", 0), ("heads", 0), ("seq_q", 0), ("seq_k", 0), ("head_dim", 0), ("head_dim_v", 0), ("seq_q", -1)]
    {
        let mut q = p;
        *match what {
            "batch" => &mut q.batch,
            "heads" => &mut q.heads,
            "seq_q" => &mut q.seq_q,
            "seq_k" => &mut q.seq_k,
            "head_dim" => &mut q.head_dim,
            _ => &mut q.head_dim_v,
        } = value;
        v.push((format!("{what} = {value}"), q));
    }
    for (name, strides) in [("q", 0), ("k", 1), ("v", 2), ("bias", 3)] {
        for axis in 0..3 {
            for (kind, delta) in [("misaligned", a / 2), ("negative", -p.q_strides[0] - a)] {
                let mut q = p;
                let s = match strides {
                    0 => &mut q.q_strides,
                    1 => &mut q.k_strides,
                    2 => &mut q.v_strides,
                    _ => &mut q.bias_strides,
                };
                s[axis] += delta;
                v.push((format!("{kind} {name} stride {axis}"), q));
            }
        }
    }
    v
}

/// Golden renders (BOLT_BLESS=1 rewrites them): one kernel of each tile, layout and bias, and
/// a Hopper kernel.
#[test]
fn renders_match_the_golden_files() {
    let cases = [
        (
            "attention_f16_d64_bias_bhsd",
            AttentionSpec {
                arch: Arch::Sm80,
                element: Element::F16,
                head_dim_max: 64,
                bias: true,
                causal: false,
                output: OutputLayout::Bhsd,
            },
        ),
        (
            "attention_f32_d128_nobias_bshd",
            AttentionSpec {
                arch: Arch::Sm80,
                element: Element::F32,
                head_dim_max: 128,
                bias: false,
                causal: false,
                output: OutputLayout::Bshd,
            },
        ),
        (
            "attention_f16_d256_bias_bhsd",
            AttentionSpec {
                arch: Arch::Sm80,
                element: Element::F16,
                head_dim_max: 256,
                bias: true,
                causal: false,
                output: OutputLayout::Bhsd,
            },
        ),
        (
            "attention_bf16_d64_nobias_causal_bhsd",
            AttentionSpec {
                arch: Arch::Sm80,
                element: Element::BF16,
                head_dim_max: 64,
                bias: false,
                causal: true,
                output: OutputLayout::Bhsd,
            },
        ),
        (
            "sm90_attention_f16_d128_nobias_causal_bshd",
            AttentionSpec {
                arch: Arch::Sm90,
                element: Element::F16,
                head_dim_max: 128,
                bias: false,
                causal: true,
                output: OutputLayout::Bshd,
            },
        ),
        (
            "sm90_attention_f16_d64_nobias_bhsd",
            AttentionSpec {
                arch: Arch::Sm90,
                element: Element::F16,
                head_dim_max: 64,
                bias: false,
                causal: false,
                output: OutputLayout::Bhsd,
            },
        ),
    ];
    common::assert_golden(cases.into_iter().map(|(name, spec)| {
        let symbol = attention::symbol_for(&spec);
        let text = attention::render_unit(&[(&spec, &symbol)]).unwrap_or_else(|e| panic!("{name}: {e}"));
        (name.to_string(), text)
    }));
}

/// Every sm80 kernel with the output in registers (head dims 64 and 128), one accumulating
/// kernel (head dim 256) per element between them a mask, both layouts and a causal one.
#[test]
fn every_attention_kernel_builds_loads_and_answers_the_abi() {
    let all: Vec<AttentionSpec> = attention::all_specs().into_iter().filter(|s| s.arch == Arch::Sm80).collect();
    assert_eq!(all.len(), 36);
    let mut specs: Vec<AttentionSpec> = all.iter().copied().filter(|s| !s.accumulates()).collect();
    assert_eq!(specs.len(), 24);
    // A causal kernel (example 41's CausalFromTopLeft), with a mask too.
    specs.push(AttentionSpec { causal: true, ..specs[3] });
    assert!(specs[24].bias);
    let wide = |element, bias, output| AttentionSpec {
        arch: Arch::Sm80,
        element,
        head_dim_max: 256,
        bias,
        causal: false,
        output,
    };
    specs.extend([
        wide(Element::F16, true, OutputLayout::Bhsd),
        wide(Element::BF16, false, OutputLayout::Bshd),
        wide(Element::F32, true, OutputLayout::Bshd),
        AttentionSpec { causal: true, ..wide(Element::F16, false, OutputLayout::Bhsd) },
    ]);
    assert!(specs[25..].iter().all(|s| s.accumulates() && all.contains(&AttentionSpec { causal: false, ..*s })));
    builds_loads_and_answers_the_abi(&specs);
}

/// The Hopper kernels (CUTLASS's example 88) take ≈45 s of nvcc each: two of the eight, one per
/// head-dim tile, element and output layout between them, and a causal one.
#[test]
fn hopper_attention_kernels_build_load_and_answer_the_abi() {
    let all = attention::all_specs();
    let sm90: Vec<&AttentionSpec> = all.iter().filter(|s| s.arch == Arch::Sm90).collect();
    assert_eq!(sm90.len(), 8, "f16/bf16 x head dims 64/128 x 2 layouts, no bias");
    let specs = [
        AttentionSpec {
            arch: Arch::Sm90,
            element: Element::F16,
            head_dim_max: 64,
            bias: false,
            causal: false,
            output: OutputLayout::Bshd,
        },
        AttentionSpec {
            arch: Arch::Sm90,
            element: Element::BF16,
            head_dim_max: 128,
            bias: false,
            causal: false,
            output: OutputLayout::Bhsd,
        },
        // Causal (the example's CausalFusion).
        AttentionSpec {
            arch: Arch::Sm90,
            element: Element::F16,
            head_dim_max: 128,
            bias: false,
            causal: true,
            output: OutputLayout::Bshd,
        },
    ];
    assert!(specs[..2].iter().all(|s| all.contains(s)));
    builds_loads_and_answers_the_abi(&specs);
}

/// Builds `specs` (one arch) into one library, loads it, and checks every kernel's answers
/// through the ABI: can_implement is `AttentionSpec::check`, the workspace size is
/// `AttentionSpec::workspace_bytes`, set-up refuses bad pointers and a short workspace before
/// any CUDA call; a second build comes from the cache.
fn builds_loads_and_answers_the_abi(specs: &[AttentionSpec]) {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let arch = specs[0].arch;
    assert!(specs.iter().all(|s| s.arch == arch));
    let build = |out: &str| {
        builder(dir.path().join(out), dir.path().join("cache"))
            .build_all(&Templates, &[], &[], &[], &[], specs, &[])
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let t = Instant::now();
    let cold = build("cold");
    eprintln!(
        "{} attention kernels in {} units: nvcc {:.1}s compile ({}) + {:.1}s link, {:.1}s wall",
        cold.symbols.len(),
        cold.units.len(),
        cold.compile_seconds,
        cold.units
            .iter()
            .map(|u| format!("{}: {:.1}s", u.symbols.len(), u.nvcc_seconds.unwrap_or(0.0)))
            .collect::<Vec<_>>()
            .join(", "),
        cold.link_seconds.unwrap_or(0.0),
        t.elapsed().as_secs_f64()
    );
    let n = specs.len();
    assert_eq!(cold.symbols.len(), n);
    assert!(cold.units.iter().all(|u| u.symbols.len() <= attention::kernels_per_unit(arch)));

    let lib = KernelLibrary::open(&cold.library).unwrap();
    let manifest = lib.manifest();
    assert!(manifest.kernels.is_empty() && manifest.stitch.is_empty());
    assert_eq!((manifest.attention.len(), lib.attention_kernels().len()), (n, n));
    let (nvcc_arch, target) = match arch {
        Arch::Sm80 => ("sm_80", "arch=compute_80,code=compute_80"),
        Arch::Sm90 => ("sm_90a", "arch=compute_90a,code=sm_90a"),
    };
    let flags = &manifest.nvcc_flags[&format!("{nvcc_arch} attention")];
    let example = attention::include_dir(&toolchain(), arch);
    assert!(flags.iter().any(|f| *f == format!("-I{}", example.display())), "{flags:?}");
    assert!(flags.iter().any(|f| f.ends_with(attention::SUPPORT_DIR)), "{flags:?}");
    assert!(flags.iter().any(|f| f == target), "{flags:?}");
    for entry in &manifest.attention {
        assert!(manifest.units[entry.unit].symbols.contains(&entry.symbol));
        assert_eq!(manifest.units[entry.unit].nvcc_arch, nvcc_arch);
        assert_eq!(entry.symbol, attention::symbol_for(&entry.spec));
    }
    let raw = unsafe { libloading::Library::new(&cold.library) }.unwrap();

    let mut seen = BTreeSet::new();
    for spec in specs {
        let kernel = lib.attention(spec).unwrap_or_else(|| panic!("{spec:?} not in the library"));
        let symbol = kernel.symbol();
        assert_eq!((kernel.spec(), symbol), (spec, attention::symbol_for(spec).as_str()));
        let size = kernel.params_size();
        assert!(size > 0 && size <= 4096, "{symbol}: params {size} bytes");

        // can_implement is AttentionSpec::check.
        let (a, m) = (spec.alignment(), i64::from(spec.head_dim_max));
        for (name, p) in problems(a, m) {
            let want = spec.check(&p).map_or_else(|r| r.status(), |()| Status::Ok);
            assert_eq!(kernel.can_implement(&p), want, "{symbol}, {name}: {:?}", spec.check(&p));
            seen.insert(format!("{want:?}"));
        }
        let can_implement =
            *unsafe { raw.get::<CanImplementFn>(format!("{symbol}_can_implement").as_bytes()) }.unwrap();
        assert_eq!(unsafe { can_implement(std::ptr::null()) }.status(), Status::NullArgument);

        // Set-up: pointers and the workspace are checked before any CUDA call.
        // (The Hopper kernel takes whole-vector query counts; its causal one no more queries than keys.)
        let (sq, sk) = if arch == Arch::Sm90 { (96, 128) } else { (100, 64) };
        let p = dense(2, 3, sq, sk, m, m);
        assert_eq!(kernel.can_implement(&p), Status::Ok);
        let ws = kernel.workspace_size(&p);
        assert_eq!(ws, spec.workspace_bytes(&p), "{symbol}");
        if arch == Arch::Sm90 {
            assert_eq!(ws, 2 * 3 * 96 * 4, "{symbol}: one f32 log-sum-exp per query row");
        }
        assert_eq!(kernel.workspace_size(&BoltAttentionProblem { head_dim: m + a, ..p }), 0);
        let at = |x: usize| x as *const c_void;
        let fake = BoltAttentionArgs {
            q: at(0x10000),
            k: at(0x20000),
            v: at(0x30000),
            bias: if spec.bias { at(0x40000) } else { std::ptr::null() },
            o: 0x50000 as *mut c_void,
        };
        let null = std::ptr::null_mut();
        let workspace = if ws > 0 { 0x80000 as *mut c_void } else { null };
        let init = |args: &BoltAttentionArgs| {
            unsafe { kernel.initialize(&p, args, workspace, ws, null) }.map(drop).map_err(|e| e.status)
        };
        assert_eq!(init(&BoltAttentionArgs::default()), Err(Status::NullArgument), "{symbol}");
        assert_eq!(init(&BoltAttentionArgs { v: std::ptr::null(), ..fake }), Err(Status::NullArgument));
        assert_eq!(init(&BoltAttentionArgs { o: null, ..fake }), Err(Status::NullArgument));
        let no_bias = init(&BoltAttentionArgs { bias: std::ptr::null(), ..fake });
        let with_bias = init(&BoltAttentionArgs { bias: at(0x40000), ..fake });
        for (ptr, args) in [
            ("q", BoltAttentionArgs { q: at(0x10008), ..fake }),
            ("k", BoltAttentionArgs { k: at(0x20004), ..fake }),
            ("v", BoltAttentionArgs { v: at(0x30008), ..fake }),
            ("o", BoltAttentionArgs { o: 0x50002 as *mut c_void, ..fake }),
        ] {
            assert_eq!(init(&args), Err(Status::MisalignedOperand), "{symbol}: {ptr}");
        }
        if spec.bias {
            assert_eq!(no_bias, Err(Status::NullArgument), "{symbol}");
            assert_eq!(init(&BoltAttentionArgs { bias: at(0x40008), ..fake }), Err(Status::MisalignedOperand));
        } else {
            // The kernel takes no bias: whatever is given is ignored.
            assert_eq!(no_bias, with_bias, "{symbol}");
        }
        if ws > 0 {
            let short = unsafe { kernel.initialize(&p, &fake, workspace, ws - 1, null) }.unwrap_err();
            assert_eq!(short.status, Status::WorkspaceTooSmall, "{symbol}");
            let none = unsafe { kernel.initialize(&p, &fake, null, ws, null) }.unwrap_err();
            assert_eq!(none.status, Status::WorkspaceTooSmall, "{symbol}");
        }
        let bad = BoltAttentionProblem { head_dim: m + a, ..p };
        let err = unsafe { kernel.initialize(&bad, &fake, workspace, ws, null) }.unwrap_err();
        assert_eq!(err.status, Status::UnsupportedProblem);
        assert_eq!(err.to_string(), format!("{symbol}_initialize: unsupported problem"));
        // Above 48 KiB of shared memory (sm80: f32, head dim 128; head dim 256; every sm90
        // kernel) initialize sets the kernel's attribute first: without a GPU, CUTLASS_INTERNAL
        // rather than a crash.
        let big_smem =
            arch == Arch::Sm90 || (spec.element == Element::F32 && spec.head_dim_max == 128) || spec.accumulates();
        match unsafe { kernel.initialize(&p, &fake, workspace, ws, null) } {
            Ok(mut params) => {
                assert_eq!(params.symbol(), symbol);
                assert!(params.bytes() >= size);
                let moved = BoltAttentionArgs { q: at(0x60000), o: 0x70000 as *mut c_void, ..fake };
                unsafe { params.update(&moved) }.unwrap();
                let err = unsafe { params.update(&BoltAttentionArgs { q: at(0x60008), ..moved }) }.unwrap_err();
                assert_eq!((err.status, err.function), (Status::MisalignedOperand, "_update"));
                let err = unsafe { params.update(&BoltAttentionArgs::default()) }.unwrap_err();
                assert_eq!(err.status, Status::NullArgument);
            }
            Err(e) => {
                assert!(big_smem, "{e}");
                assert_eq!(e.status, Status::CutlassInternal, "{e}");
            }
        }
    }
    for status in ["Ok", "MisalignedOperand", "UnsupportedProblem"] {
        assert!(seen.contains(status), "no problem of the table gives {status}: {seen:?}");
    }

    // A second build of the same specs comes from the cache.
    let warm = build("warm");
    assert_eq!(warm.nvcc_invocations, 0, "{warm:?}");
    assert_eq!(warm.symbols, cold.symbols);
}

/// A host `main` replaying, for each case, every block's addressing: the generated hook
/// (`ToBatchHook::to_batch`), then kernel_forward.h's `advance_to_block` after it and the
/// offsets `attention_kernel` reads and writes at. Prints `case operand b h row col offset`
/// (operand `a`: the f32 output accumulator in the workspace, where a kernel has one).
fn replay_main(cases: &[(String, BoltAttentionProblem)]) -> String {
    let mut m = String::from(
        r#"
#include <cstdio>

// kernel_forward.h (CUTLASS 4.2, examples/41), AttentionKernel::Params::advance_to_block after
// the hook (q_start = k_start = 0), and where attention_kernel's iterators then point.
template <typename Kernel, typename Hook, typename Element>
static void replay(int c, BoltAttentionProblem const &problem, int kQ, bool bias) {
  uintptr_t const base[6] = {1ull << 40, 2ull << 40, 3ull << 40, 4ull << 40, 5ull << 40, 6ull << 40};
  BoltAttentionArgs args = {(void const *)base[0], (void const *)base[1], (void const *)base[2],
                            bias ? (void const *)base[3] : nullptr, (void *)base[4]};
  auto const params = Kernel::Operator::make_params(Kernel::make_arguments(problem, args), (void *)base[5]);
  auto off = [&](void const *ptr, int i) {
    return (long long)(((intptr_t)ptr - (intptr_t)base[i]) / (intptr_t)sizeof(Element));
  };
  auto off_accum = [&](float const *ptr) { return (long long)(((intptr_t)ptr - (intptr_t)base[5]) / 4); };
  dim3 const grid = params.getBlocksGrid();
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        auto p = params;
        Hook::to_batch(p, z, y);
        int64_t const query_start = int64_t(x) * kQ;
        p.query_ptr += query_start * p.q_strideM + int64_t(y) * p.q_strideH;
        p.key_ptr += int64_t(y) * p.k_strideH;
        p.value_ptr += int64_t(y) * p.v_strideH;
        p.output_ptr += query_start * p.o_strideM + int64_t(y) * p.head_dim_value;
        if (bias) {
          p.attn_bias_ptr += int64_t(z) * p.bias_strideB + int64_t(y) * p.bias_strideH;
        }
        bool const accumulates = p.output_accum_ptr != nullptr;
        if (accumulates) {
          p.output_accum_ptr += query_start * (p.head_dim_value * p.num_heads) + int64_t(y) * p.head_dim_value;
        }
        int32_t num_queries = p.num_queries - int32_t(query_start);
        if (num_queries == 1 && p.k_strideH == 0 && p.v_strideH == 0) {
          if (y % kQ != 0) {
            continue;
          }
          p.q_strideM = p.q_strideH;
          num_queries = p.num_heads;
          p.o_strideM = p.head_dim_value;
        }
        int const rows = num_queries < kQ ? num_queries : kQ;
        for (int i = 0; i < rows; ++i) {
          long long const row = query_start + i;
          for (int col : {0, p.head_dim - 1}) {
            printf("%d q %u %u %lld %d %lld\n", c, z, y, row, col, off(p.query_ptr + int64_t(i) * p.q_strideM + col, 0));
          }
          for (int col : {0, p.head_dim_value - 1}) {
            printf("%d o %u %u %lld %d %lld\n", c, z, y, row, col, off(p.output_ptr + int64_t(i) * p.o_strideM + col, 4));
            if (accumulates) {
              int64_t const accum_stride = int64_t(p.head_dim_value) * p.num_heads;
              printf("%d a %u %u %lld %d %lld\n", c, z, y, row, col, off_accum(p.output_accum_ptr + i * accum_stride + col));
            }
          }
          if (bias) {
            for (int key : {0, p.num_keys - 1}) {
              printf("%d m %u %u %lld %d %lld\n", c, z, y, row, key,
                     off(p.attn_bias_ptr + query_start * p.bias_strideM + int64_t(i) * p.bias_strideM + key, 3));
            }
          }
        }
        for (int key = 0; key < p.num_keys; ++key) {
          for (int col : {0, p.head_dim - 1}) {
            printf("%d k %u %u %d %d %lld\n", c, z, y, key, col, off(p.key_ptr + int64_t(key) * p.k_strideM + col, 1));
          }
          for (int col : {0, p.head_dim_value - 1}) {
            printf("%d v %u %u %d %d %lld\n", c, z, y, key, col, off(p.value_ptr + int64_t(key) * p.v_strideM + col, 2));
          }
        }
      }
    }
  }
}

int main() {
"#,
    );
    for (c, (symbol, p)) in cases.iter().enumerate() {
        let list = |s: [i64; 3]| format!("{{{}, {}, {}}}", s[0], s[1], s[2]);
        m += &format!(
            "  {{\n    BoltAttentionProblem p = {{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}};\n",
            p.batch,
            p.heads,
            p.seq_q,
            p.seq_k,
            p.head_dim,
            p.head_dim_v,
            list(p.q_strides),
            list(p.k_strides),
            list(p.v_strides),
            list(p.bias_strides),
            p.scale
        );
        m += &format!(
            "    replay<{symbol}::Kernel, {symbol}::ToBatchHook, {symbol}::Element>({c}, p, {symbol}::kQueriesPerBlock, {symbol}::Attention::kSupportsBias);\n  }}\n"
        );
    }
    m + "  return 0;\n}\n"
}

#[test]
fn blocks_address_their_batch_head_and_queries_in_both_layouts() {
    let tc = toolchain();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("attention");
    std::fs::create_dir_all(&dir).unwrap();
    let include = dir.join("include");
    std::fs::create_dir_all(&include).unwrap();
    std::fs::write(include.join(bolt_codegen::abi::HEADER_NAME), bolt_codegen::abi::HEADER).unwrap();
    attention::write_support_files(&include).unwrap();

    // 64 queries per block with a bias into [B, H, S_q, D_v]; 32 per block into [B, S_q, H, D_v];
    // 32 per block accumulating in the workspace, with a bias, into [B, H, S_q, D_v].
    let specs = [
        AttentionSpec {
            arch: Arch::Sm80,
            element: Element::F16,
            head_dim_max: 64,
            bias: true,
            causal: false,
            output: OutputLayout::Bhsd,
        },
        AttentionSpec {
            arch: Arch::Sm80,
            element: Element::BF16,
            head_dim_max: 128,
            bias: false,
            causal: false,
            output: OutputLayout::Bshd,
        },
        AttentionSpec {
            arch: Arch::Sm80,
            element: Element::F16,
            head_dim_max: 256,
            bias: true,
            causal: false,
            output: OutputLayout::Bhsd,
        },
    ];
    let (b, h, sq, sk, d) = (2, 3, 65, 16, 16);
    let problems = [
        ("dense", dense(b, h, sq, sk, d, 2 * d)),
        (
            // Q from [B, S_q, H, D] in place, K and V shared by the heads (multi-query), one
            // query in the last block: the case where the kernel would run heads as rows.
            "multi-query",
            BoltAttentionProblem {
                q_strides: [sq * h * d, d, h * d],
                k_strides: [sk * d, 0, d],
                v_strides: [sk * 2 * d, 0, 2 * d],
                bias_strides: [sk, 0, 0],
                ..dense(b, h, sq, sk, d, 2 * d)
            },
        ),
        (
            // Decoding one token with more heads than a block has queries.
            "decode",
            BoltAttentionProblem {
                k_strides: [sk * d, 0, d],
                v_strides: [sk * d, 0, d],
                bias_strides: [0, 0, 0],
                ..dense(1, 70, 1, sk, d, d)
            },
        ),
    ];
    let mut cases = Vec::new();
    for spec in &specs {
        for (name, p) in &problems {
            assert_eq!(spec.check(p), Ok(()), "{name}");
            cases.push((attention::symbol_for(spec), *p, *spec, *name));
        }
    }
    let symbols: Vec<String> = specs.iter().map(attention::symbol_for).collect();
    let pairs: Vec<(&AttentionSpec, &str)> = specs.iter().zip(&symbols).map(|(s, n)| (s, n.as_str())).collect();
    let main: Vec<(String, BoltAttentionProblem)> = cases.iter().map(|(s, p, ..)| (s.clone(), *p)).collect();
    let source = dir.join("replay.cu");
    std::fs::write(&source, attention::render_unit(&pairs).unwrap() + &replay_main(&main)).unwrap();
    let object = dir.join("replay.o");
    let compiled =
        attention::compile_command(&tc, Arch::Sm80, &source, &object, &include).run().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{} attention kernels + the replay compiled in {:.1}s", specs.len(), compiled.elapsed.as_secs_f64());
    let exe = dir.join("replay");
    let link = Command::new(tc.nvcc()).args(["-cudart", "static", "-o"]).arg(&exe).arg(&object).output().unwrap();
    assert!(link.status.success(), "link: {}", String::from_utf8_lossy(&link.stderr));
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let text = String::from_utf8(out.stdout).unwrap();
    let mut seen: Vec<BTreeSet<(String, [i64; 4])>> = vec![BTreeSet::new(); cases.len()];
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| f[i].parse::<i64>().unwrap();
        let (c, op, at, offset) = (n(0) as usize, f[1], [n(2), n(3), n(4), n(5)], n(6));
        let (_, p, spec, name) = &cases[c];
        let strided = |s: [i64; 3]| at[0] * s[0] + at[1] * s[1] + at[2] * s[2] + at[3];
        let want = match op {
            "q" => strided(p.q_strides),
            "k" => strided(p.k_strides),
            "v" => strided(p.v_strides),
            "m" => strided(p.bias_strides),
            "o" => {
                let s = spec.output_strides(p);
                at[0] * s[0] + at[1] * s[1] + at[2] * s[2] + at[3]
            }
            // The accumulator is [B, S_q, H, D_v] whatever the output's layout.
            "a" => ((at[0] * p.seq_q + at[2]) * p.heads + at[1]) * p.head_dim_v + at[3],
            _ => panic!("{line}"),
        };
        assert_eq!(offset, want, "{:?} {name}: {op} at {at:?}", spec);
        seen[c].insert((op.to_string(), at));
    }
    // Every row of every (batch, head) is reached, each by one block for Q and O.
    for (c, (_, p, spec, name)) in cases.iter().enumerate() {
        let mut want = BTreeSet::new();
        for bi in 0..p.batch {
            for hi in 0..p.heads {
                for (op, rows, cols) in [
                    ("q", p.seq_q, p.head_dim),
                    ("o", p.seq_q, p.head_dim_v),
                    ("a", if spec.accumulates() { p.seq_q } else { 0 }, p.head_dim_v),
                    ("k", p.seq_k, p.head_dim),
                    ("v", p.seq_k, p.head_dim_v),
                    ("m", if spec.bias { p.seq_q } else { 0 }, p.seq_k),
                ] {
                    for r in 0..rows {
                        for col in [0, cols - 1] {
                            want.insert((op.to_string(), [bi, hi, r, col]));
                        }
                    }
                }
            }
        }
        assert_eq!(seen[c], want, "{spec:?} {name}");
        let o_lines = text.lines().filter(|l| l.split(' ').take(2).eq([c.to_string().as_str(), "o"])).count() as i64;
        assert_eq!(o_lines, p.batch * p.heads * p.seq_q * 2, "{spec:?} {name}: a row written twice");
    }
}
