//! Builds the GPU benchmark package: the kernel libraries every suite of `bench/harness` runs,
//! and `package.json`, which says per workload which kernels to run (the analytic top-k of
//! `bolt-profiler`, the "light profiler" of the paper: the harness times them on the GPU and
//! keeps the fastest), the exact C ABI problem and the epilogue.
//!
//! Run through `bash bench/package.sh` (which also copies the scripts and checks the 64 MiB
//! limit); directly:
//!
//! ```sh
//! cargo run --release --example bench_package -- --workloads ../shared/workloads --out target/bench-pkg \
//!     [--profile dry|full] [--arch sm90|sm80 (dry: sm80, full: sm90)] [--top-k 3] [--models testdata/models]
//! ```
//!
//! Profiles: `full` builds every kernel the GPU suites need (sm_90a for GEMM/conv, sm80 kernels
//! for what only sm80 has: alignment-2 convs, b2b chains, the whole epilogue matrix);
//! `dry` builds a handful of sm80 kernels so that CI can check the harness end to end on the
//! host (`can_implement`) in about a minute of nvcc. Both list every workload of the shapes
//! files; a workload without a built kernel says why.
//!
//! sm80 kernels are built for the H100 the package runs on: sm_90 SASS compiled from their
//! compute_80 PTX (codegen's `Arch::targets_for`), plus the PTX. Not the PTX alone: the H100
//! machines' CUDA 13.0 driver cannot JIT the pinned nvcc's newer PTX.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bolt_codegen::abi::{BoltAttentionProblem, BoltB2bConv2dProblem, BoltConv2dProblem, BoltGemmProblem};
use bolt_codegen::attention::{AttentionSpec, OutputLayout};
use bolt_codegen::b2b::{self, B2bFamily, B2bProblem};
use bolt_codegen::builder::{BuildOptions, Builder, Templates};
use bolt_codegen::candidates::tile_name;
use bolt_codegen::epilogue::{Activation, Epilogue, EvalEnv, NormalForm, ResidualAt};
use bolt_codegen::render::symbol_for;
use bolt_codegen::spec::{Arch, ConvFeatures, Element, Family, GroupMode, KernelSpec, Layout, Types};
use bolt_profiler::analytic::rank_all;
use bolt_profiler::device::DeviceSpec;
use bolt_profiler::workload::{load_shapes_file, parse_epilogue, Conv2dShape, Problem, Workload, F16_F32_F16};
use serde_json::{json, Value};

const FORMAT: u32 = 1;
/// Weights as `[N, K]` arrays (nn.Linear / ONNX Gemm transB): the layout of the candidate
/// library and of `torch.nn.functional.linear`.
const RCR: [Layout; 3] = [Layout::RowMajor, Layout::ColumnMajor, Layout::RowMajor];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Profile {
    Dry,
    Full,
}

struct Opts {
    workloads: PathBuf,
    out: PathBuf,
    profile: Profile,
    arch: Arch,
    top_k: usize,
    models: Option<PathBuf>,
    /// Write package.json only (to see what a profile would build), no nvcc.
    no_build: bool,
}

fn parse_args() -> Result<Opts> {
    let mut o = Opts {
        workloads: PathBuf::from("../shared/workloads"),
        out: PathBuf::from("target/bench-pkg"),
        profile: Profile::Dry,
        arch: Arch::Sm90,
        top_k: 3,
        models: None,
        no_build: false,
    };
    let mut arch_given = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--workloads" => o.workloads = value()?.into(),
            "--out" => o.out = value()?.into(),
            "--profile" => {
                o.profile = match value()?.as_str() {
                    "dry" => Profile::Dry,
                    "full" => Profile::Full,
                    p => bail!("--profile {p}: expected dry or full"),
                }
            }
            "--arch" => {
                arch_given = Some(());
                o.arch = match value()?.as_str() {
                    "sm90" | "sm90a" => Arch::Sm90,
                    "sm80" => Arch::Sm80,
                    x => bail!("--arch {x}: expected sm90 or sm80"),
                }
            }
            "--top-k" => o.top_k = value()?.parse().context("--top-k")?,
            "--models" => o.models = Some(value()?.into()),
            "--no-build" => o.no_build = true,
            "-h" | "--help" => {
                println!("bench_package --workloads DIR --out DIR [--profile dry|full] [--arch sm90|sm80 (dry: sm80, full: sm90)] [--top-k N] [--models DIR] [--no-build]");
                std::process::exit(0);
            }
            x => bail!("unknown argument {x} (see --help)"),
        }
    }
    if o.top_k == 0 {
        bail!("--top-k must be at least 1");
    }
    if o.profile == Profile::Dry && arch_given.is_none() {
        // sm90 kernels cost ~45 s and 3.3 GB of nvcc each: the dry package stays on sm80.
        o.arch = Arch::Sm80;
    }
    Ok(o)
}

/// Workloads the dry profile builds a kernel for (suite, workload name); everything else is
/// listed with its analytic ranking only.
const DRY_BUILDS: &[(&str, &str)] = &[
    ("gemm", "square/0"),
    ("conv", "resnet50_b32/s1_3x3"),
    ("epilogue", "epilogue_fusion_bolt_fig9/bias+relu"),
    ("epilogue", "bolt_fig9_epilogue/bias+relu"),
    ("padding", "problems/0"),
    ("b2b", "gemm_pairs_bolt_table1/problems/1"),
];

struct Pack {
    o: Opts,
    device: DeviceSpec,
    /// sm80 specs (built with PTX) and sm90 specs, by symbol.
    specs: BTreeMap<String, KernelSpec>,
    b2b: BTreeMap<String, b2b::B2bSpec>,
    /// Fused attention kernels (sm80 and sm90), by symbol.
    attention: BTreeMap<String, AttentionSpec>,
}

fn lib_for(arch: Arch) -> &'static str {
    match arch {
        Arch::Sm80 => "kernels/libbolt_bench_sm80.so",
        Arch::Sm90 => "kernels/libbolt_bench_sm90.so",
    }
}

fn family_name(f: &Family) -> &'static str {
    match f {
        Family::Gemm => "gemm",
        Family::BatchedGemm => "batched_gemm",
        Family::GemmSoftmax => "gemm_softmax",
        Family::Conv2dFprop(ConvFeatures { groups: GroupMode::Depthwise, .. }) => "conv2d_depthwise",
        Family::Conv2dFprop(ConvFeatures { groups: GroupMode::SingleGroup, .. }) => "conv2d_group_single",
        Family::Conv2dFprop(ConvFeatures { groups: GroupMode::MultipleGroup, .. }) => "conv2d_group_multiple",
        Family::Conv2dFprop(ConvFeatures { unit_stride: true, .. }) => "conv2d_fprop_unit_stride",
        Family::Conv2dFprop(_) => "conv2d_fprop",
    }
}

fn problem_json(p: &Problem) -> Value {
    match p {
        Problem::Gemm(g) => gemm_json(g),
        Problem::Conv2d(c) => conv_json(c),
    }
}

fn gemm_json(g: &BoltGemmProblem) -> Value {
    json!({"kind": "gemm", "m": g.m, "n": g.n, "k": g.k, "batch": g.batch, "lda": g.lda, "ldb": g.ldb,
           "ldc": g.ldc, "ldd": g.ldd, "batch_stride_a": g.batch_stride_a, "batch_stride_b": g.batch_stride_b,
           "batch_stride_c": g.batch_stride_c, "batch_stride_d": g.batch_stride_d})
}

fn conv_json(c: &BoltConv2dProblem) -> Value {
    json!({"kind": "conv2d", "n": c.n, "h": c.h, "w": c.w, "c": c.c, "k": c.k, "r": c.r, "s": c.s, "p": c.p,
           "q": c.q, "pad_h": c.pad_h, "pad_w": c.pad_w, "stride_h": c.stride_h, "stride_w": c.stride_w,
           "dilation_h": c.dilation_h, "dilation_w": c.dilation_w, "groups": c.groups})
}

/// The epilogue as the Python reference reads it: the normal form with the activation's name
/// and parameters.
fn epilogue_json(e: &Epilogue) -> Value {
    let f = e.normal_form().expect("workload epilogues are in normal form");
    let (name, params) = match f.activation {
        Activation::HardSigmoid { alpha, beta } => ("hardsigmoid", json!({"alpha": alpha.0, "beta": beta.0})),
        Activation::LeakyRelu { alpha } => ("leaky_relu", json!({"alpha": alpha.0})),
        Activation::Clip { min, max } => ("clip", json!({"min": min.0, "max": max.0})),
        a => (a.name(), json!({})),
    };
    json!({
        "name": e.name(), "beta_source": f.beta_source, "bias": f.bias, "activation": name,
        "activation_params": params,
        "residual": match f.residual { None => Value::Null, Some(ResidualAt::BeforeActivation) => "before".into(),
                                       Some(ResidualAt::AfterActivation) => "after".into() },
    })
}

/// Points of `Expr::eval` (Bolt's reference semantics of the epilogue) for the Python
/// reference to reproduce: acc, alpha, beta, source, bias -> value.
fn epilogue_samples(e: &Epilogue) -> Value {
    let mut points = Vec::new();
    for i in 0..24 {
        let t = i as f64 / 23.0;
        let env = EvalEnv { acc: -7.0 + 14.0 * t, alpha: 0.75, beta: 0.5, source: 1.5 - 3.0 * t * t, bias: 0.25 - t };
        points.push(json!([env.acc, env.alpha, env.beta, env.source, env.bias, e.expr.eval(&env)]));
    }
    json!({"form": epilogue_json(e), "points": points})
}

fn dtype_json(t: Types) -> Value {
    let n = |e: Element| match e {
        Element::F16 => "f16",
        Element::BF16 => "bf16",
        Element::F32 => "f32",
    };
    json!({"input": n(t.input), "accumulator": n(t.accumulator), "output": n(t.output)})
}

impl Pack {
    fn add(&mut self, spec: KernelSpec) -> Value {
        let symbol = symbol_for(&spec);
        let v = json!({"symbol": symbol, "library": lib_for(spec.arch), "arch": format!("{:?}", spec.arch).to_lowercase(),
                       "tile": tile_name(&spec.tile), "ptx_jit": false,
                       "sm90_sass_from_compute_80": spec.arch == Arch::Sm80});
        self.specs.insert(symbol, spec);
        v
    }

    /// The analytic top-k of `w` on `arch`: specs (built when `build`) and the ranking.
    fn ranked(&mut self, w: &Workload, arch: Arch, k: usize, build: bool) -> (Vec<Value>, Value) {
        let ranking = rank_all(w, &self.device, arch);
        let mut kernels = Vec::new();
        let mut analytic = Vec::new();
        for (i, r) in ranking.ranked.iter().take(k).enumerate() {
            analytic.push(json!({"rank": i, "tile": r.candidate.name, "symbol": symbol_for(&r.spec),
                                 "estimate_us": r.estimate.time_s * 1e6, "estimate_pct_peak": r.estimate.pct_peak}));
            if build {
                kernels.push(self.add(r.spec.clone()));
            }
        }
        let excluded = if ranking.ranked.is_empty() {
            let reasons: Vec<String> =
                ranking.excluded.iter().take(3).map(|e| format!("{}: {}", e.name, e.reason)).collect();
            format!("no {arch:?} candidate ({} excluded; e.g. {})", ranking.excluded.len(), reasons.join("; "))
        } else {
            String::new()
        };
        (kernels, json!({"arch": format!("{arch:?}").to_lowercase(), "top": analytic, "no_candidate": excluded}))
    }

    fn dry_builds(&self, suite: &str, name: &str) -> bool {
        self.o.profile == Profile::Full || DRY_BUILDS.contains(&(suite, name))
    }

    /// One case of a single-kernel suite: the workload, its top-k kernels on the primary arch
    /// (falling back to sm80 when the primary arch has no candidate).
    fn case(&mut self, suite: &str, source: &str, w: &Workload, build: bool, arch: Arch) -> Value {
        let k = if self.o.profile == Profile::Dry { 1 } else { self.o.top_k };
        let (mut kernels, mut analytic) = self.ranked(w, arch, k, build);
        let mut fallback = Value::Null;
        if analytic["top"].as_array().is_some_and(Vec::is_empty) && arch != Arch::Sm80 {
            let (k80, a80) = self.ranked(w, Arch::Sm80, k, build);
            fallback = analytic;
            kernels = k80;
            analytic = a80;
        }
        // Bolt's planner pads unaligned channels / K (src/plan/padding.rs) before picking a
        // kernel: without a candidate at the shape's alignment, rank the padded problem.
        let mut padded = Value::Null;
        if kernels.is_empty() && analytic["top"].as_array().is_some_and(Vec::is_empty) {
            if let Some(pw) = pad_to_8(w) {
                let (kp, ap) = self.ranked(&pw, arch, k, build);
                let (kp, ap) = if ap["top"].as_array().is_some_and(Vec::is_empty) && arch != Arch::Sm80 {
                    self.ranked(&pw, Arch::Sm80, k, build)
                } else {
                    (kp, ap)
                };
                if ap["top"].as_array().is_some_and(|t| !t.is_empty()) {
                    padded = json!({"problem": problem_json(&pw.problem),
                                    "alignment": [pw.alignment.a, pw.alignment.b, pw.alignment.c],
                                    "note": "unaligned dimensions zero-padded to a multiple of 8, as Bolt's planner does; timings exclude the padding copy"});
                    fallback = json!({"unpadded": analytic, "primary_arch_ranking": fallback});
                    kernels = kp;
                    analytic = ap;
                }
            }
        }
        let (status, reason) = if !kernels.is_empty() {
            ("ready", String::new())
        } else if !build && analytic["top"].as_array().is_some_and(|t| !t.is_empty()) {
            ("not-built", "not in the dry package (analytic ranking only)".to_string())
        } else {
            ("not-available", analytic["no_candidate"].as_str().unwrap_or_default().to_string())
        };
        json!({
            "id": format!("{suite}:{}", w.name), "suite": suite, "workload": w.name, "source": source,
            "family": family_name(&w.family), "problem": problem_json(&w.problem), "types": dtype_json(w.types),
            "layouts": bolt_profiler::workload::layouts_name(&w.layouts),
            "alignment": [w.alignment.a, w.alignment.b, w.alignment.c],
            "epilogue": epilogue_json(&w.epilogue), "flops": w.flops(), "bytes": w.bytes(),
            "kernels": kernels, "analytic": analytic, "primary_arch_ranking": fallback, "padded": padded,
            "status": status, "reason": reason,
        })
    }
}

/// `w` with GEMM N, K / conv C, K rounded up to a multiple of 8; None when already aligned.
fn pad_to_8(w: &Workload) -> Option<Workload> {
    let up = |x: i64| (x + 7) / 8 * 8;
    match w.problem {
        Problem::Gemm(g) if g.batch == 1 && (g.n % 8 != 0 || g.k % 8 != 0) => {
            Workload::gemm(&w.name, (g.m, up(g.n), up(g.k), 1), w.types, w.layouts, w.epilogue.clone()).ok()
        }
        Problem::Conv2d(c) if c.groups == 1 && (c.c % 8 != 0 || c.k % 8 != 0) => {
            let mut s = Conv2dShape::new(
                c.n as i64,
                c.h as i64,
                c.w as i64,
                up(c.c as i64),
                up(c.k as i64),
                c.r as i64,
                c.s as i64,
            );
            s.pad = (c.pad_h as i64, c.pad_w as i64);
            s.stride = (c.stride_h as i64, c.stride_w as i64);
            s.dilation = (c.dilation_h as i64, c.dilation_w as i64);
            Workload::conv2d(&w.name, s, w.types, w.epilogue.clone()).ok()
        }
        _ => None,
    }
}

fn load(path: &Path, layouts: [Layout; 3]) -> Result<Vec<Workload>> {
    load_shapes_file(path, F16_F32_F16, layouts).map_err(|e| anyhow::anyhow!("{e}"))
}

fn with_epilogue(w: &Workload, e: Epilogue) -> Workload {
    Workload { epilogue: e, ..w.clone() }
}

/// Suites 2 and 3: gemm.json / conv2d.json, the Fig. 9 entries going to the epilogue suite
/// (fused kernel plus the same tiles with the plain epilogue for the unfused baseline).
fn gemm_conv_epilogue(p: &mut Pack, suites: &mut BTreeMap<&'static str, Vec<Value>>) -> Result<()> {
    let arch = p.o.arch;
    for (file, layouts, suite, fig9) in [
        ("gemm.json", RCR, "gemm", "epilogue_fusion_bolt_fig9/"),
        ("conv2d.json", [Layout::RowMajor; 3], "conv", "bolt_fig9_epilogue/"),
    ] {
        for w in load(&p.o.workloads.join(file), layouts)? {
            if w.name.starts_with(fig9) {
                let build = p.dry_builds("epilogue", &w.name);
                let mut c = p.case("epilogue", file, &w, build, arch);
                // The unfused baseline: the same tiles with the plain epilogue, then a separate
                // element-wise kernel (bias + activation) on the GPU.
                let plain = with_epilogue(&w, Epilogue::plain());
                let picked: Vec<KernelSpec> = c["kernels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| p.specs[k["symbol"].as_str().unwrap()].clone())
                    .collect();
                let unfused: Vec<Value> =
                    picked.into_iter().map(|s| p.add(KernelSpec { epilogue: plain.epilogue.clone(), ..s })).collect();
                c["unfused_kernels"] = json!(unfused);
                suites.entry("epilogue").or_default().push(c);
            } else {
                let build = p.dry_builds(suite, &w.name);
                let c = p.case(suite, file, &w, build, arch);
                suites.entry(if suite == "gemm" { "gemm" } else { "conv" }).or_default().push(c);
            }
        }
    }
    Ok(())
}

/// Suite 5: padding.json, unpadded (alignment the shape allows, sm80: sm90 needs 16-byte rows)
/// against C padded to a multiple of 8 on sm80 (same arch: the paper's comparison) and on the
/// primary arch.
fn padding(p: &mut Pack, suites: &mut BTreeMap<&'static str, Vec<Value>>) -> Result<()> {
    for w in load(&p.o.workloads.join("padding.json"), [Layout::RowMajor; 3])? {
        let build = p.dry_builds("padding", &w.name);
        let mut c = p.case("padding", "padding.json", &w, build, Arch::Sm80);
        let Problem::Conv2d(u) = w.problem else { bail!("padding.json: `{}` is not a conv", w.name) };
        let mut shape =
            Conv2dShape::new(u.n as i64, u.h as i64, u.w as i64, u.c as i64, u.k as i64, u.r as i64, u.s as i64);
        shape.pad = (u.pad_h as i64, u.pad_w as i64);
        shape.stride = (u.stride_h as i64, u.stride_w as i64);
        shape.c = (shape.c + 7) / 8 * 8;
        shape.k = (shape.k + 7) / 8 * 8;
        let padded = Workload::conv2d(&format!("{}/padded", w.name), shape, w.types, w.epilogue.clone())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut pad80 = p.case("padding", "padding.json", &padded, build, Arch::Sm80);
        pad80["note"] = json!("input channels zero-padded to a multiple of 8 (filter too): alignment 8");
        c["padded_sm80"] = pad80;
        if p.o.arch == Arch::Sm90 {
            let build90 = build && p.o.profile == Profile::Full;
            c["padded_primary"] = p.case("padding", "padding.json", &padded, build90, Arch::Sm90);
        }
        suites.entry("padding").or_default().push(c);
    }
    Ok(())
}

fn conv_problem([n, h, w, c]: [i32; 4], k: i32, r: i32, pad: i32, stride: i32) -> BoltConv2dProblem {
    let out = |x: i32| (x + 2 * pad - r) / stride + 1;
    BoltConv2dProblem {
        n,
        h,
        w,
        c,
        k,
        r,
        s: r,
        p: out(h),
        q: out(w),
        pad_h: pad,
        pad_w: pad,
        stride_h: stride,
        stride_w: stride,
        dilation_h: 1,
        dilation_w: 1,
        groups: 1,
    }
}

fn b2b_problem_json(p: &B2bProblem) -> Value {
    match p {
        B2bProblem::Gemm(g) => json!({"kind": "b2b_gemm", "layers": g.layers, "m": g.m, "k": g.k, "n": g.n,
                                      "lda": g.lda, "ldc": g.ldc, "ldd": g.ldd}),
        B2bProblem::Conv2d(c) => json!({"kind": "b2b_conv2d", "layers": c.layers,
            "conv": c.conv[..c.layers as usize].iter().map(conv_json).collect::<Vec<_>>()}),
    }
}

/// Suite 4: every chain of b2b.json: the fused kernel `b2b::candidates` picks (sm80, PTX) and,
/// for the best unfused pair, each layer's top-k single kernels with bias + ReLU.
fn back_to_back(p: &mut Pack, suites: &mut BTreeMap<&'static str, Vec<Value>>) -> Result<()> {
    let path = p.o.workloads.join("b2b.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let w: Value = serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
    let relu = parse_epilogue("bias+relu").expect("bias+relu parses");
    let g = |v: &Value, key: &str, name: &str| -> Result<i64> {
        v[key].as_i64().with_context(|| format!("{}: `{name}` has no integer `{key}`", path.display()))
    };
    let mut chains: Vec<(String, B2bFamily, B2bProblem, Value)> = Vec::new();
    for (group, list) in [
        ("gemm_pairs_bolt_table1", &w["gemm_pairs_bolt_table1"]["problems"]),
        ("cutlass_example_shapes", &w["cutlass_example_shapes"]),
    ] {
        for (i, v) in list.as_array().into_iter().flatten().enumerate() {
            let name = if group == "cutlass_example_shapes" {
                format!("{group}/{i}")
            } else {
                format!("{group}/problems/{i}")
            };
            let problem =
                B2bProblem::gemm(g(v, "M", &name)?, g(v, "K0", &name)?, &[g(v, "N0", &name)?, g(v, "N1", &name)?]);
            chains.push((name, B2bFamily::Gemm, problem, v.clone()));
        }
    }
    for (i, v) in w["conv_pairs_bolt_table2"]["problems"].as_array().into_iter().flatten().enumerate() {
        let name = format!("conv_pairs_bolt_table2/problems/{i}");
        let int = |k: &str| g(v, k, &name).map(|x| x as i32);
        let c0 = conv_problem([32, int("H")?, int("W")?, int("C")?], int("K0")?, 3, 1, int("stride")?);
        let c1 = conv_problem([32, c0.p, c0.q, c0.k], int("K1")?, 1, 0, 1);
        let mut problem = BoltB2bConv2dProblem { layers: 2, ..Default::default() };
        problem.conv[0] = c0;
        problem.conv[1] = c1;
        chains.push((name, B2bFamily::Conv2dFprop, B2bProblem::Conv2d(problem), v.clone()));
    }
    for (i, v) in w["mlp_chains"]["problems"].as_array().into_iter().flatten().enumerate() {
        let name = format!("mlp_chains/problems/{i}");
        let widths: Vec<i64> = v["widths"].as_array().into_iter().flatten().filter_map(Value::as_i64).collect();
        if widths.len() < 3 {
            bail!("{}: `{name}` needs at least 3 widths", path.display());
        }
        let m = g(v, "M", &name)?;
        let layers = widths.len() - 1;
        let reason = if layers > bolt_codegen::abi::B2B_MAX_LAYERS {
            format!(
                "{layers} layers: the ABI holds at most {} (BOLT_B2B_MAX_LAYERS)",
                bolt_codegen::abi::B2B_MAX_LAYERS
            )
        } else {
            let problem = B2bProblem::gemm(m, widths[0], &widths[1..]);
            match b2b::candidates(B2bFamily::Gemm, F16_F32_F16, &problem, &vec![relu.clone(); layers]) {
                Ok(_) => "unexpected: a fused kernel exists".into(),
                Err(e) => e.to_string(),
            }
        };
        suites.entry("b2b").or_default().push(json!({
            "id": format!("b2b:{name}"), "suite": "b2b", "workload": name, "source": "b2b.json", "family": "b2b_gemm",
            "layers": layers, "widths": widths, "m": m, "status": "not-available",
            "reason": format!("no fused kernel: {reason}"), "kernels": [], "workload_entry": v,
        }));
    }

    for (name, family, problem, source) in chains {
        let build = p.dry_builds("b2b", &name);
        let mut case = json!({
            "id": format!("b2b:{name}"), "suite": "b2b", "workload": name, "source": "b2b.json",
            "family": if family == B2bFamily::Gemm { "b2b_gemm" } else { "b2b_conv2d" },
            "original_problem": b2b_problem_json(&problem), "workload_entry": source,
            "epilogues": [epilogue_json(&relu), epilogue_json(&relu)], "kernels": [],
        });
        match b2b::candidates(family, F16_F32_F16, &problem, &[relu.clone(), relu.clone()]) {
            Ok(c) => {
                let (spec, cost) = c.specs[0].clone();
                let symbol = b2b::symbol_for(&spec);
                case["problem"] = b2b_problem_json(&c.problem);
                case["padded_input_channels"] = json!(c.padded_input_channels);
                case["cost"] = json!(cost);
                case["residency"] = json!(format!("{:?}", spec.residency));
                if build {
                    case["kernels"] = json!([{"symbol": symbol, "library": "b2b/libbolt_bench_b2b.so", "arch": "sm80", "ptx_jit": false, "sm90_sass_from_compute_80": true}]);
                    p.b2b.insert(symbol, spec);
                    case["status"] = json!("ready");
                    case["reason"] = json!("");
                } else {
                    case["status"] = json!("not-built");
                    case["reason"] = json!(format!("{symbol}: not in the dry package"));
                }
            }
            Err(e) => {
                case["status"] = json!("not-available");
                case["reason"] = json!(format!("no fused kernel: {e}"));
            }
        }
        // The best unfused pair: each layer as its own kernel with bias + ReLU.
        let layers: Vec<Workload> = match &problem {
            B2bProblem::Gemm(gp) => (0..2)
                .map(|l| {
                    let k = if l == 0 { gp.k } else { gp.n[0] };
                    Workload::gemm(&format!("{name}/layer{l}"), (gp.m, gp.n[l], k, 1), F16_F32_F16, RCR, relu.clone())
                })
                .collect::<Result<_, _>>(),
            B2bProblem::Conv2d(cp) => (0..2)
                .map(|l| {
                    let c = cp.conv[l];
                    let mut s = Conv2dShape::new(
                        c.n as i64, c.h as i64, c.w as i64, c.c as i64, c.k as i64, c.r as i64, c.s as i64,
                    );
                    s.pad = (c.pad_h as i64, c.pad_w as i64);
                    s.stride = (c.stride_h as i64, c.stride_w as i64);
                    Workload::conv2d(&format!("{name}/layer{l}"), s, F16_F32_F16, relu.clone())
                })
                .collect::<Result<_, _>>(),
        }
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let build_layers = p.o.profile == Profile::Full;
        case["unfused_layers"] =
            json!(layers.iter().map(|l| p.case("b2b", "b2b.json", l, build_layers, Arch::Sm80)).collect::<Vec<_>>());
        suites.entry("b2b").or_default().push(case);
    }
    Ok(())
}

/// Suite 1: every kernel family x epilogue kind, on shapes from the Fig. 9 entries of the
/// workload files (the families those files lack are derived from them, and say so).
fn kernels(p: &mut Pack, suites: &mut BTreeMap<&'static str, Vec<Value>>) -> Result<()> {
    let gemm_fig9 = load(&p.o.workloads.join("gemm.json"), RCR)?
        .into_iter()
        .find(|w| w.name.starts_with("epilogue_fusion_bolt_fig9/"))
        .context("gemm.json has no epilogue_fusion_bolt_fig9 entry")?;
    let conv_fig9 = load(&p.o.workloads.join("conv2d.json"), [Layout::RowMajor; 3])?
        .into_iter()
        .find(|w| w.name.starts_with("bolt_fig9_epilogue/"))
        .context("conv2d.json has no bolt_fig9_epilogue entry")?;
    let Problem::Gemm(g) = gemm_fig9.problem else { bail!("fig9 GEMM is not a GEMM") };
    let Problem::Conv2d(c) = conv_fig9.problem else { bail!("fig9 conv is not a conv") };
    let shape = |groups: i64, ch: i64| {
        let mut s = Conv2dShape::new(c.n as i64, c.h as i64, c.w as i64, ch, ch, c.r as i64, c.s as i64);
        s.pad = (c.pad_h as i64, c.pad_w as i64);
        s.groups = groups;
        s
    };
    let plain = Epilogue::plain();
    let mk_conv = |name: &str, s: Conv2dShape| Workload::conv2d(name, s, F16_F32_F16, plain.clone());
    let err = |e: bolt_profiler::workload::WorkloadError| anyhow::anyhow!("{e}");
    // (family label, base workload, derived-from note, unit stride)
    let mut bases: Vec<(Workload, String, bool)> = vec![
        (with_epilogue(&gemm_fig9, plain.clone()), "gemm.json epilogue_fusion_bolt_fig9".into(), false),
        (
            Workload::gemm("batched", (g.m / 4, g.n, g.k, 4), F16_F32_F16, RCR, plain.clone()).map_err(err)?,
            "gemm.json epilogue_fusion_bolt_fig9 as 4 batches of M/4".into(),
            false,
        ),
        (
            Workload { family: Family::GemmSoftmax, ..with_epilogue(&gemm_fig9, plain.clone()) },
            "gemm.json epilogue_fusion_bolt_fig9, softmax along its rows".into(),
            false,
        ),
        (with_epilogue(&conv_fig9, plain.clone()), "conv2d.json bolt_fig9_epilogue".into(), false),
        (with_epilogue(&conv_fig9, plain.clone()), "conv2d.json bolt_fig9_epilogue (stride 1)".into(), true),
        (
            mk_conv("group_single", shape(2, 128)).map_err(err)?,
            "bolt_fig9_epilogue with C = K = 128, 2 groups".into(),
            false,
        ),
        (mk_conv("group_multiple", shape(4, 64)).map_err(err)?, "bolt_fig9_epilogue with 4 groups".into(), false),
        (
            mk_conv("depthwise", shape(64, 64)).map_err(err)?,
            "bolt_fig9_epilogue depthwise (groups = C = 64)".into(),
            false,
        ),
    ];
    let full = p.o.profile == Profile::Full;
    let all_forms = |a: Activation| {
        let e = |beta_source, bias, residual| {
            Epilogue::new(NormalForm { beta_source, bias, activation: a, residual }).unwrap()
        };
        vec![
            e(false, false, None),
            e(false, true, None),
            e(true, false, None),
            e(false, true, Some(ResidualAt::BeforeActivation)),
            e(false, true, Some(ResidualAt::AfterActivation)),
        ]
    };
    let matrix: Vec<Epilogue> = Activation::all().into_iter().flat_map(all_forms).collect();
    let small: Vec<Epilogue> = ["plain", "bias+relu"].iter().map(|s| parse_epilogue(s).unwrap()).collect();
    let sm90_acts = [
        Activation::Identity,
        Activation::Relu,
        Activation::GeluErf,
        Activation::HardSwish,
        Activation::HardSigmoid { alpha: 0.2.into(), beta: 0.5.into() },
        Activation::Clip { min: 0.0.into(), max: 6.0.into() },
    ];
    let sm90_matrix: Vec<Epilogue> = sm90_acts.into_iter().flat_map(all_forms).collect();
    let mut arches = vec![Arch::Sm80];
    if full && p.o.arch == Arch::Sm90 {
        arches.push(Arch::Sm90);
    }
    for arch in arches {
        for (base, note, unit_stride) in bases.iter_mut() {
            let fam_is_main = matches!(base.family, Family::Gemm)
                || matches!(base.family, Family::Conv2dFprop(f) if f.groups == GroupMode::None && !*unit_stride);
            let epilogues = match (full, arch, fam_is_main) {
                (false, _, true) => small.clone(),
                (false, _, false) => vec![],
                (true, Arch::Sm80, true) => matrix.clone(),
                (true, Arch::Sm90, true) => sm90_matrix.clone(),
                (true, _, false) => small.clone(),
            };
            // One tile per family: the analytic top-1 of the plain problem (the epilogue does
            // not change the mainloop).
            let ranking = rank_all(base, &p.device, arch);
            let fam = if *unit_stride {
                if let Family::Conv2dFprop(f) = base.family {
                    Family::Conv2dFprop(ConvFeatures { unit_stride: true, ..f })
                } else {
                    base.family
                }
            } else {
                base.family
            };
            let label = family_name(&fam);
            if arch == Arch::Sm90
                && !matches!(
                    fam,
                    Family::Gemm
                        | Family::BatchedGemm
                        | Family::Conv2dFprop(ConvFeatures { groups: GroupMode::None, unit_stride: false, analytic: false })
                )
            {
                suites.entry("kernels").or_default().push(json!({
                    "id": format!("kernels:{:?}/{label}", arch).to_lowercase(), "suite": "kernels", "workload": label,
                    "arch": "sm90", "family": label, "status": "not-available", "kernels": [],
                    "reason": "Bolt's sm90 templates have no kernel of this family (sm80 covers it, JIT on sm_90)",
                    "derived_from": note,
                }));
                continue;
            }
            let listed = if epilogues.is_empty() { small.clone() } else { epilogues.clone() };
            let mut seen = std::collections::HashSet::new();
            for e in listed {
                let w = with_epilogue(base, e.clone());
                let name = format!("{}/{label}/{}", format!("{arch:?}").to_lowercase(), e.name());
                let build = !epilogues.is_empty();
                let mut case = json!({
                    "id": format!("kernels:{name}"), "suite": "kernels", "workload": name, "arch": format!("{arch:?}").to_lowercase(),
                    "family": label, "derived_from": note, "problem": problem_json(&w.problem), "types": dtype_json(w.types),
                    "layouts": bolt_profiler::workload::layouts_name(&w.layouts), "epilogue": epilogue_json(&e),
                    "flops": w.flops(), "bytes": w.bytes(), "kernels": [],
                });
                match ranking.ranked.first() {
                    Some(top) => {
                        let spec = KernelSpec { family: fam, epilogue: e.clone(), ..top.spec.clone() };
                        let symbol = symbol_for(&spec);
                        if !seen.insert(symbol.clone()) {
                            continue; // equal forms (identity: residual before = after)
                        }
                        if let Err(r) = bolt_codegen::validate::validate(&spec) {
                            case["status"] = json!("not-available");
                            case["reason"] = json!(format!("{symbol}: rejected by validation: {r}"));
                        } else if build {
                            case["kernels"] = json!([p.add(spec)]);
                            case["status"] = json!("ready");
                            case["reason"] = json!("");
                        } else {
                            case["status"] = json!("not-built");
                            case["reason"] = json!("not in the dry package");
                        }
                    }
                    None => {
                        case["status"] = json!("not-available");
                        case["reason"] = json!(format!("no {arch:?} candidate for this family"));
                    }
                }
                suites.entry("kernels").or_default().push(case);
            }
        }
    }
    Ok(())
}

/// Suite 6's host part: Bolt's tuning of each model (plan, lower, analytic ranking of every
/// kernel), timed here. GPU-measured tuning needs `bolt-tune --features cuda` on the device.
fn e2e(p: &mut Pack) -> Value {
    let models =
        [("resnet50", "resnet50", vec![("N", 32usize)]), ("bert_base", "bert_base", vec![("batch", 32), ("seq", 128)])];
    let mut out = Vec::new();
    for (name, dir, dims) in models {
        let Some(root) = &p.o.models else {
            out.push(json!({"model": name, "status": "not-available", "reason": "no --models directory given"}));
            continue;
        };
        let path = root.join(dir).join("model.onnx");
        if !path.exists() {
            out.push(
                json!({"model": name, "status": "not-available", "reason": format!("{} not found", path.display())}),
            );
            continue;
        }
        let start = Instant::now();
        let result = (|| -> Result<Value> {
            let graph = bolt::import::load(&path)?.graph;
            let opts = bolt::plan::PlanOptions {
                bindings: dims.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                ..Default::default()
            };
            let plan = bolt::plan::plan_with(&graph, &opts)?;
            let planned = start.elapsed().as_secs_f64();
            let (uses, skipped) = bolt::plan::lower::workloads(&plan.graph, &opts.bindings);
            let mut ranked = 0;
            let mut distinct: Vec<(Family, Problem, String)> = Vec::new();
            for u in &uses {
                let key = (u.workload.family, u.workload.problem, u.workload.epilogue.name());
                if !distinct.contains(&key) {
                    distinct.push(key);
                    ranked += usize::from(!rank_all(&u.workload, &p.device, p.o.arch).ranked.is_empty());
                }
            }
            Ok(
                json!({"model": name, "status": "ok", "dims": dims.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
                      "kernels": uses.len(), "distinct_workloads": distinct.len(), "with_candidate": ranked,
                      "not_lowered": skipped.len(), "plan_seconds": planned,
                      "analytic_tuning_seconds": start.elapsed().as_secs_f64(), "arch": format!("{:?}", p.o.arch).to_lowercase()}),
            )
        })();
        out.push(result.unwrap_or_else(|e| json!({"model": name, "status": "error", "reason": format!("{e:#}")})));
    }
    json!(out)
}

fn build(p: &Pack) -> Result<Value> {
    let mut libs = Vec::new();
    for arch in [Arch::Sm80, Arch::Sm90] {
        let specs: Vec<KernelSpec> = p.specs.values().filter(|s| s.arch == arch).cloned().collect();
        if specs.is_empty() {
            continue;
        }
        let out_dir = p.o.out.join("kernels");
        let mut options = BuildOptions::new(&out_dir);
        options.name = Path::new(lib_for(arch)).file_stem().unwrap().to_string_lossy().trim_start_matches("lib").into();
        options.archs = Some(vec![arch]);
        options.run_on = vec![Arch::Sm90];
        let builder = Builder::discover(options).map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!("bench_package: building {} {arch:?} kernels with {}", specs.len(), builder.toolchain());
        let report = builder.build(&Templates, &specs).map_err(|e| anyhow::anyhow!("{e}"))?;
        if !report.rejected.is_empty() {
            let r: Vec<String> = report.rejected.iter().map(|r| format!("{}: {}", r.symbol, r.reason)).collect();
            bail!("{} kernels rejected (the packer validates first, so this is a bug):\n{}", r.len(), r.join("\n"));
        }
        eprintln!(
            "bench_package: {} ({} kernels, {} units, nvcc ran {} times, {:.1}s)",
            report.library.display(),
            report.symbols.len(),
            report.units.len(),
            report.nvcc_invocations,
            report.total_seconds
        );
        libs.push(json!({"library": lib_for(arch), "arch": format!("{arch:?}").to_lowercase(), "kernels": report.symbols.len(),
                         "nvcc_invocations": report.nvcc_invocations, "seconds": report.total_seconds,
                         "ptx_jit_on_sm90": false, "sm90_sass_from_compute_80": arch == Arch::Sm80}));
    }
    if !p.b2b.is_empty() {
        let specs: Vec<b2b::B2bSpec> = p.b2b.values().cloned().collect();
        let start = Instant::now();
        let lib = b2b::build_library(&specs, &p.o.out.join("b2b"), "bolt_bench_b2b", None, &[Arch::Sm90])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!(
            "bench_package: {} ({} chain kernels, {:.1}s)",
            lib.library.display(),
            lib.symbols.len(),
            start.elapsed().as_secs_f64()
        );
        libs.push(json!({"library": "b2b/libbolt_bench_b2b.so", "arch": "sm80", "kernels": lib.symbols.len(),
                         "seconds": start.elapsed().as_secs_f64(), "ptx_jit_on_sm90": false, "sm90_sass_from_compute_80": true}));
    }
    if !p.attention.is_empty() {
        let specs: Vec<AttentionSpec> = p.attention.values().copied().collect();
        let out_dir = p.o.out.join("attention");
        let mut options = BuildOptions::new(&out_dir);
        options.name = "bolt_bench_attention".into();
        options.run_on = vec![Arch::Sm90];
        let builder = Builder::discover(options).map_err(|e| anyhow::anyhow!("{e}"))?;
        let report =
            builder.build_all(&Templates, &[], &[], &[], &[], &specs, &[]).map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!(
            "bench_package: {} ({} attention kernels, nvcc ran {} times, {:.1}s)",
            report.library.display(),
            report.symbols.len(),
            report.nvcc_invocations,
            report.total_seconds
        );
        libs.push(json!({"library": ATTENTION_LIB, "arch": "sm80+sm90", "kernels": report.symbols.len(),
                         "nvcc_invocations": report.nvcc_invocations, "seconds": report.total_seconds,
                         "ptx_jit_on_sm90": false, "sm90_sass_from_compute_80": "sm80 kernels"}));
    }
    Ok(json!(libs))
}

const ATTENTION_LIB: &str = "attention/libbolt_bench_attention.so";

/// Suite 6: fused attention (softmax(scale Q Kᵀ + mask) V per batch and head) on the shapes of
/// the test transformers and a long-context one, dense `[B, H, S, D]` operands. Each case lists
/// the sm80 kernel (example 41, every case; PTX on an H100) and, where it takes the case, the
/// Hopper kernel (example 88: f16/bf16, no mask); the harness checks each against the f32
/// reference and times them against `torch.nn.functional.scaled_dot_product_attention`. The dry
/// profile builds the sm80 kernels of the first case only.
fn attention(p: &mut Pack, suites: &mut BTreeMap<&'static str, Vec<Value>>) {
    // (name, source, batch, heads, seq, head dim, element, key-padding mask, causal)
    type Case = (&'static str, &'static str, i64, i64, i64, i64, Element, bool, bool);
    let cases: [Case; 7] = [
        ("bert_base_b32_s128", "BERT-base 32x128, padding mask", 32, 12, 128, 64, Element::F16, true, false),
        ("bert_base_b32_s128_nomask", "BERT-base 32x128 without a mask", 32, 12, 128, 64, Element::F16, false, false),
        ("bert_base_b1_s128_nomask", "BERT-base 1x128 without a mask", 1, 12, 128, 64, Element::F16, false, false),
        ("long_b4_h16_s2048_d128", "long context, head dim 128", 4, 16, 2048, 128, Element::F16, false, false),
        ("bf16_b8_h16_s512_d64", "bf16, head dim 64", 8, 16, 512, 64, Element::BF16, false, false),
        ("causal_b8_h16_s1024_d64", "decoder prefill, causal", 8, 16, 1024, 64, Element::F16, false, true),
        // The romanizer decoder's head dim: past 128 the kernel accumulates in its workspace.
        ("d256_b8_h4_s256_mask", "head dim 256, padding mask", 8, 4, 256, 256, Element::F16, true, false),
    ];
    for (i, (name, source, b, h, s, d, element, mask, causal)) in cases.into_iter().enumerate() {
        let mut problem = BoltAttentionProblem::dense(b, h, s, s, d, d, 1.0 / (d as f64).sqrt());
        if mask {
            problem.bias_strides = [s, 0, 0]; // [B, 1, 1, S_k]
        }
        let build = p.o.profile == Profile::Full || i == 0;
        let mut kernels = Vec::new();
        let mut notes = Vec::new();
        let portable = AttentionSpec::for_head_dims(element, d, d, mask, OutputLayout::Bhsd)
            .map(|spec| AttentionSpec { causal, ..spec })
            .expect("the case's head dims have an sm80 kernel");
        let hopper = portable.hopper(d, d).and_then(|h| h.check(&problem).map(|()| h));
        let mut listed = vec![portable];
        match hopper {
            Ok(h) if p.o.profile == Profile::Full => listed.push(h),
            Ok(_) => notes.push("the dry profile builds no sm90 attention kernel".to_string()),
            Err(why) => notes.push(format!("no Hopper kernel: {why}")),
        }
        for spec in listed {
            let symbol = bolt_codegen::attention::symbol_for(&spec);
            let arch = format!("{:?}", spec.arch).to_lowercase();
            if build {
                p.attention.insert(symbol.clone(), spec);
                kernels.push(
                    json!({"symbol": symbol, "library": ATTENTION_LIB, "arch": arch, "ptx_jit": false, "sm90_sass_from_compute_80": spec.arch == Arch::Sm80,
                                    "workspace_bytes": spec.workspace_bytes(&problem)}),
                );
            }
        }
        // Causal: about half the scores are computed.
        let flops = if causal { 2 * b * h * s * (s + 1) * d } else { 4 * b * h * s * s * d };
        suites.entry("attention").or_default().push(json!({
            "id": format!("attention:{name}"), "suite": "attention", "workload": name, "source": source,
            "family": "attention", "dtype": element.name(),
            "mask": if mask { json!("key_padding") } else if causal { json!("causal") } else { Value::Null },
            "problem": {"kind": "attention", "batch": b, "heads": h, "seq_q": s, "seq_k": s, "head_dim": d, "head_dim_v": d,
                        "q_strides": problem.q_strides, "k_strides": problem.k_strides, "v_strides": problem.v_strides,
                        "bias_strides": problem.bias_strides, "scale": problem.scale},
            "flops": flops,
            "status": if kernels.is_empty() { "not-built" } else { "ready" },
            "reason": if kernels.is_empty() { "the dry profile builds the first attention case only".to_string() } else { notes.join("; ") },
            "kernels": kernels,
        }));
    }
}

fn main() -> Result<()> {
    let o = parse_args()?;
    for f in ["gemm.json", "conv2d.json", "b2b.json", "padding.json"] {
        if !o.workloads.join(f).is_file() {
            bail!("{}: missing (--workloads must name ../shared/workloads)", o.workloads.join(f).display());
        }
    }
    let start = Instant::now();
    let mut p = Pack {
        device: DeviceSpec::h100_sxm5_80gb(),
        o,
        specs: BTreeMap::new(),
        b2b: BTreeMap::new(),
        attention: BTreeMap::new(),
    };
    let mut suites: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
    kernels(&mut p, &mut suites)?;
    gemm_conv_epilogue(&mut p, &mut suites)?;
    back_to_back(&mut p, &mut suites)?;
    padding(&mut p, &mut suites)?;
    attention(&mut p, &mut suites);
    let e2e = e2e(&mut p);
    let mut samples = BTreeMap::new();
    for s in p.specs.values() {
        samples.entry(s.epilogue.name()).or_insert_with(|| epilogue_samples(&s.epilogue));
    }
    for s in suites.values().flatten() {
        for key in ["epilogue"] {
            if let Some(name) = s[key]["name"].as_str() {
                if !samples.contains_key(name) {
                    // Every epilogue a case names gets samples, built or not.
                    let e = parse_named(name).with_context(|| format!("epilogue {name} of {}", s["id"]))?;
                    samples.insert(name.to_string(), epilogue_samples(&e));
                }
            }
        }
    }
    std::fs::create_dir_all(&p.o.out).with_context(|| format!("creating {}", p.o.out.display()))?;
    let libraries = if p.o.no_build { json!("not built (--no-build)") } else { build(&p)? };
    let package = json!({
        "format": FORMAT,
        "profile": format!("{:?}", p.o.profile).to_lowercase(),
        "arch": format!("{:?}", p.o.arch).to_lowercase(),
        "top_k": if p.o.profile == Profile::Dry { 1 } else { p.o.top_k },
        "ranking_device": p.device.name,
        "workloads_dir": p.o.workloads.display().to_string(),
        "libraries": libraries,
        "epilogue_samples": samples,
        "suites": suites,
        "e2e_tuning": e2e,
        "packaging_seconds": start.elapsed().as_secs_f64(),
        "commit": std::env::var("BOLT_BENCH_COMMIT").ok(),
    });
    let path = p.o.out.join("package.json");
    std::fs::write(&path, serde_json::to_string_pretty(&package)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    let count: usize = package["suites"].as_object().unwrap().values().map(|v| v.as_array().unwrap().len()).sum();
    println!(
        "bench_package: {count} cases, {} kernels + {} chain kernels -> {}",
        p.specs.len(),
        p.b2b.len(),
        path.display()
    );
    Ok(())
}

/// An epilogue from its `Epilogue::name()` (e.g. `bias_relu`, `betac_sigmoid`,
/// `bias_res_gelu_tanh`): only needed for names that no built kernel carries.
fn parse_named(name: &str) -> Option<Epilogue> {
    let candidates = Activation::all().into_iter().flat_map(|a| {
        [false, true].into_iter().flat_map(move |beta_source| {
            [false, true].into_iter().flat_map(move |bias| {
                [None, Some(ResidualAt::BeforeActivation), Some(ResidualAt::AfterActivation)].into_iter().filter_map(
                    move |residual| Epilogue::new(NormalForm { beta_source, bias, activation: a, residual }).ok(),
                )
            })
        })
    });
    candidates.into_iter().find(|e| e.name() == name)
}
