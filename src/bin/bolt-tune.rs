//! `bolt-tune`: tunes single GEMM / Conv2d problems or a shapes file, analytically or (with
//! the `cuda` feature, a GPU and a kernel library) by timing the analytic top-k.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bolt_codegen::epilogue::Epilogue;
use bolt_codegen::spec::{Arch, Layout, Types};
use bolt_profiler::db::Db;
use bolt_profiler::device::{detect, Detection, DeviceSpec};
use bolt_profiler::timing::Timer;
use bolt_profiler::tune::{tune, Event, Outcome, TuneOptions, TuneResult};
use bolt_profiler::workload::{
    default_types, load_shapes_file, parse_element, parse_epilogue, parse_layouts, Conv2dShape, Workload,
};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(name = "bolt-tune", version, about = "Tune Bolt's CUTLASS kernel configurations for GEMM/Conv2d problems")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand)]
enum Command {
    /// One GEMM D[M,N] = epilogue(A[M,K] B[K,N]) (batched with --batch).
    Gemm {
        /// Rows of A and D.
        #[arg(long)]
        m: i64,
        /// Columns of B and D.
        #[arg(long)]
        n: i64,
        /// The reduction dimension.
        #[arg(long)]
        k: i64,
        /// Independent GEMMs of this shape (batched GEMM).
        #[arg(long, default_value_t = 1)]
        batch: i64,
        #[command(flatten)]
        gemm: GemmOpts,
    },
    /// One Conv2d fprop, NHWC activations and KRSC filters.
    Conv2d {
        /// Batch.
        #[arg(long)]
        n: i64,
        /// Input height.
        #[arg(long)]
        h: i64,
        /// Input width.
        #[arg(long)]
        w: i64,
        /// Input channels.
        #[arg(long)]
        c: i64,
        /// Output channels (filters).
        #[arg(long)]
        k: i64,
        /// Filter height.
        #[arg(long)]
        r: i64,
        /// Filter width.
        #[arg(long)]
        s: i64,
        /// Zero padding on each side (both axes).
        #[arg(long, default_value_t = 0)]
        pad: i64,
        #[arg(long, default_value_t = 1)]
        stride: i64,
        #[arg(long, default_value_t = 1)]
        dilation: i64,
        /// Groups (C and K divisible by it; groups = C = K is depthwise).
        #[arg(long, default_value_t = 1)]
        groups: i64,
        /// Input element type: f16, bf16 or f32 (tf32 math); accumulation is f32.
        #[arg(long, default_value = "f16")]
        dtype: String,
        /// Epilogue, e.g. bias+relu, bias+gelu, bias+residual.
        #[arg(long, default_value = "plain")]
        epilogue: String,
    },
    /// Every kernel an ONNX model needs after Bolt's planner (also `bolt-tune MODEL.onnx`).
    /// Repeated identical kernels are tuned once.
    Model {
        model: PathBuf,
        /// Size of a symbolic dim, e.g. --dim N=32 (repeatable; unbound dims are 1).
        /// Size or range of a symbolic dim as `bolt compile` takes it, e.g. --dim N=32 or
        /// --dim N=1..32 (every shape bucket of the range is tuned; unbound dims are 1).
        #[arg(long = "dim", value_name = "NAME=SIZE|MIN..MAX", value_parser = bolt::artifact::format::DimRange::parse)]
        dims: Vec<bolt::artifact::format::DimRange>,
        /// The precision of the build to tune for (f16, bf16, tf32; default: the model's, as
        /// `bolt compile`): the workloads are exactly those `bolt compile` with the same
        /// --dim and --precision looks up in the database.
        #[arg(long)]
        precision: Option<String>,
    },
    /// Every problem of a shapes file (the formats of ../shared/workloads/{gemm,conv2d,padding}.json).
    Shapes {
        file: PathBuf,
        #[command(flatten)]
        gemm: GemmOpts,
    },
}

#[derive(Args)]
struct GemmOpts {
    /// Input element type: f16, bf16 or f32 (tf32 math); accumulation is f32.
    #[arg(long, default_value = "f16")]
    dtype: String,
    /// Layouts of A, B, C: r (row-major) or c (column-major) each, e.g. rrr, rcr.
    #[arg(long, default_value = "rrr")]
    layout: String,
    /// Epilogue, e.g. plain, bias+relu, bias+gelu, bias+residual (shapes files name their own).
    #[arg(long, default_value = "plain")]
    epilogue: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum ArchArg {
    Sm80,
    Sm90,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    A100,
    H100,
}

#[derive(Args)]
struct Common {
    /// Kernel architecture (default: the device's; sm90 without --device).
    #[arg(long, global = true)]
    arch: Option<ArchArg>,
    /// Device description for the analytic model (default: the live GPU, else by --arch).
    #[arg(long, global = true)]
    device: Option<DeviceArg>,
    /// Candidates timed per workload on a GPU.
    #[arg(long, global = true, default_value_t = bolt_profiler::timing::DEFAULT_TOP_K)]
    top_k: usize,
    /// Stop timing after this many seconds; remaining workloads get the analytic pick.
    #[arg(long, global = true)]
    time_budget: Option<f64>,
    /// Pick from the analytic model only (the default when no GPU is present).
    #[arg(long, global = true)]
    analytic_only: bool,
    /// Skip workloads already in the database.
    #[arg(long, global = true)]
    resume: bool,
    /// GEMM M / conv batch is dynamic: key results by its power-of-two bucket.
    #[arg(long, global = true)]
    dynamic_m: bool,
    /// Tuning database (default: $BOLT_TUNING_DB, else ~/.cache/bolt/tuning.json).
    #[arg(long, global = true)]
    db: Option<PathBuf>,
    /// Kernel library to time (default: $BOLT_KERNEL_LIBRARY, else the analytic top-k built
    /// here with nvcc before timing); GPU mode only.
    #[arg(long, global = true)]
    library: Option<PathBuf>,
    /// Only build the analytic top-k of every workload into a kernel library (nvcc, no GPU)
    /// and print its path: time it on a GPU machine with --library.
    #[arg(long, global = true)]
    build_candidates: bool,
    /// Write the results as CSV.
    #[arg(long, global = true)]
    csv: Option<PathBuf>,
    /// Write the results as JSON.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    // `bolt-tune MODEL.onnx ...` is `bolt-tune model MODEL.onnx ...`.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| Path::new(a).extension().is_some_and(|e| e == "onnx")) {
        args.insert(1, "model".into());
    }
    let cli = Cli::parse_from(args);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bolt-tune: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn types_of(dtype: &str) -> Result<Types> {
    let e = parse_element(dtype).with_context(|| format!("unknown --dtype `{dtype}` (f16, bf16 or f32)"))?;
    Ok(default_types(e))
}

fn epilogue_of(s: &str) -> Result<Epilogue> {
    parse_epilogue(s)
        .with_context(|| format!("unknown --epilogue `{s}` (e.g. plain, bias+relu, bias+gelu, bias+residual)"))
}

fn layouts_of(s: &str) -> Result<[Layout; 3]> {
    parse_layouts(s).with_context(|| format!("bad --layout `{s}`: three letters r/c for A, B, C (e.g. rrr, rcr)"))
}

fn workloads(cmd: &Command) -> Result<Vec<Workload>> {
    Ok(match cmd {
        Command::Gemm { m, n, k, batch, gemm } => {
            let name = if *batch > 1 { format!("gemm_{m}x{n}x{k}_b{batch}") } else { format!("gemm_{m}x{n}x{k}") };
            vec![Workload::gemm(
                &name,
                (*m, *n, *k, *batch),
                types_of(&gemm.dtype)?,
                layouts_of(&gemm.layout)?,
                epilogue_of(&gemm.epilogue)?,
            )?]
        }
        Command::Conv2d { n, h, w, c, k, r, s, pad, stride, dilation, groups, dtype, epilogue } => {
            let mut shape = Conv2dShape::new(*n, *h, *w, *c, *k, *r, *s);
            shape.pad = (*pad, *pad);
            shape.stride = (*stride, *stride);
            shape.dilation = (*dilation, *dilation);
            shape.groups = *groups;
            let name = format!("conv_{n}x{h}x{w}x{c}_k{k}_{r}x{s}_s{stride}");
            vec![Workload::conv2d(&name, shape, types_of(dtype)?, epilogue_of(epilogue)?)?]
        }
        Command::Model { model, dims, precision } => {
            let graph = bolt::import::load(model)?.graph;
            let precision = match precision {
                Some(p) => Some(
                    bolt::artifact::Precision::parse(p)
                        .ok_or_else(|| anyhow::anyhow!("--precision {p}: expected f16, bf16 or tf32"))?,
                ),
                None => None,
            };
            let opts = bolt::artifact::CompileOptions {
                dims: dims.clone(),
                precision,
                ..bolt::artifact::CompileOptions::new(std::env::temp_dir())
            };
            let (uses, skipped) = bolt::artifact::kernel_workloads(&graph, &opts)
                .with_context(|| format!("planning {}", model.display()))?;
            for s in &skipped {
                eprintln!("bolt-tune: {}: not tuned: {}", s.node, s.reason);
            }
            let mut unique: Vec<(Workload, usize)> = Vec::new();
            for u in uses {
                let same = |w: &Workload| {
                    (w.family, w.types, w.layouts, w.alignment, &w.epilogue, w.problem)
                        == (u.family, u.types, u.layouts, u.alignment, &u.epilogue, u.problem)
                };
                match unique.iter_mut().find(|(w, _)| same(w)) {
                    Some((_, n)) => *n += 1,
                    None => unique.push((u, 1)),
                }
            }
            eprintln!(
                "bolt-tune: {}: {} kernels, {} distinct",
                model.display(),
                unique.iter().map(|(_, n)| n).sum::<usize>(),
                unique.len()
            );
            unique
                .into_iter()
                .map(|(mut w, n)| {
                    if n > 1 {
                        w.name = format!("{} (x{n})", w.name);
                    }
                    w
                })
                .collect()
        }
        Command::Shapes { file, gemm } => {
            let mut ws = load_shapes_file(file, types_of(&gemm.dtype)?, layouts_of(&gemm.layout)?)?;
            // A non-default --epilogue applies to problems that name none.
            if gemm.epilogue != "plain" {
                let e = epilogue_of(&gemm.epilogue)?;
                for w in ws.iter_mut().filter(|w| w.epilogue == Epilogue::plain()) {
                    w.epilogue = e.clone();
                }
            }
            ws
        }
    })
}

fn run(cli: Cli) -> Result<()> {
    let c = &cli.common;
    let workloads = workloads(&cli.command)?;
    if c.top_k == 0 {
        bail!("--top-k must be at least 1");
    }
    if let Some(b) = c.time_budget {
        if !(b.is_finite() && b >= 0.0) {
            bail!("--time-budget {b}: must be a non-negative number of seconds");
        }
    }

    // Device and mode.
    let detection = if c.analytic_only { Detection::NoGpu("--analytic-only".into()) } else { detect() };
    let arch_of = |a: ArchArg| match a {
        ArchArg::Sm80 => Arch::Sm80,
        ArchArg::Sm90 => Arch::Sm90,
    };
    let device = match (c.device, &detection) {
        (Some(DeviceArg::A100), _) => DeviceSpec::a100_sxm4_80gb(),
        (Some(DeviceArg::H100), _) => DeviceSpec::h100_sxm5_80gb(),
        (None, Detection::Found(d)) => d.clone(),
        (None, Detection::NoGpu(_)) => DeviceSpec::for_arch(c.arch.map(arch_of).unwrap_or(Arch::Sm90)),
    };
    let arch = c.arch.map(arch_of).unwrap_or(device.arch);
    if arch == Arch::Sm90 && device.arch == Arch::Sm80 {
        bail!("--arch sm90 on {}: sm90a kernels (wgmma, TMA) need a Hopper GPU", device.name);
    }
    if c.build_candidates {
        let lib = build_candidates(&workloads, &device, arch, c.top_k)?;
        println!("{}", lib.display());
        return Ok(());
    }
    let mut opts = TuneOptions::new(arch, device.clone());
    opts.top_k = c.top_k;
    opts.time_budget = c.time_budget.map(Duration::from_secs_f64);
    opts.resume = c.resume;
    opts.dynamic_leading_dim = c.dynamic_m;

    let mut timer = make_timer(c, &detection, &device, arch, &workloads)?;
    let mode = match &timer {
        Some(t) => format!("measuring the analytic top-{} on {}", c.top_k, t.describe()),
        None => {
            let why = match &detection {
                Detection::NoGpu(r) => r.clone(),
                Detection::Found(_) => "no kernel library (--library or BOLT_KERNEL_LIBRARY)".into(),
            };
            format!("no GPU: analytic only ({why})")
        }
    };
    eprintln!("bolt-tune: {mode}");
    eprintln!(
        "bolt-tune: {} workload(s), {arch:?} kernels, device model {} ({} SMs)",
        workloads.len(),
        device.name,
        device.sm_count
    );

    let db_path = c.db.clone().unwrap_or_else(Db::default_path);
    let mut db = Db::open(&db_path)?;

    let bar = ProgressBar::new(workloads.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} ETA {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut progress = |e: Event| match e {
        Event::Workload { name, .. } => bar.set_message(name.to_string()),
        Event::Done { .. } => bar.inc(1),
        Event::Finish => bar.finish_and_clear(),
        Event::Start { .. } => {}
    };
    let timer_ref: Option<&mut dyn Timer> = match timer.as_mut() {
        Some(t) => Some(t.as_mut()),
        None => None,
    };
    let results = tune(&workloads, &opts, &mut db, timer_ref, &mut progress)?;
    bar.finish_and_clear();

    print_summary(&results, &mut std::io::stdout().lock())?;
    if timer.is_none() {
        // What a measured run would cost (the target: a whole model in minutes).
        let mut plan = bolt_profiler::timing::TimingPlan::new(&device);
        plan.top_k = c.top_k;
        let seconds: f64 = workloads
            .iter()
            .zip(&results)
            .filter_map(|(w, r)| {
                let e = r.entry.as_ref()?;
                let mut est: Vec<f64> = e.tried.iter().map(|t| t.analytic_s).collect();
                est.sort_by(f64::total_cmp);
                Some(plan.estimated_seconds(w, &est))
            })
            .sum();
        eprintln!(
            "bolt-tune: timing these on a GPU (top-{}, {} warm-up + {} timed runs each) would take about {seconds:.1} s plus CUDA context and library load",
            plan.top_k, plan.warmup, plan.repeats
        );
    }
    eprintln!("bolt-tune: database {} ({} entries)", db.path().display(), db.len());
    if let Some(p) = &c.csv {
        write_csv(p, &results)?;
    }
    if let Some(p) = &c.json {
        let doc = serde_json::json!({
            "mode": mode,
            "arch": format!("{arch:?}").to_ascii_lowercase(),
            "device": device,
            "db": db.path(),
            "results": results,
        });
        let text = serde_json::to_string_pretty(&doc).context("serialising results")?;
        std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

#[cfg(feature = "cuda")]
fn make_timer(
    c: &Common,
    detection: &Detection,
    device: &DeviceSpec,
    arch: Arch,
    workloads: &[Workload],
) -> Result<Option<Box<dyn Timer>>> {
    use bolt_profiler::timing::{cuda::CudaTimer, TimingPlan};
    if !matches!(detection, Detection::Found(_)) {
        return Ok(None);
    }
    let lib = match c.library.clone().or_else(|| std::env::var_os("BOLT_KERNEL_LIBRARY").map(PathBuf::from)) {
        Some(lib) => lib,
        None => build_candidates(workloads, device, arch, c.top_k)?,
    };
    let mut plan = TimingPlan::new(device);
    plan.top_k = c.top_k;
    let t = CudaTimer::new(&lib, plan).map_err(|e| anyhow::anyhow!("cannot time on the GPU: {e}"))?;
    Ok(Some(Box::new(t)))
}

/// The analytic top-k of every workload built (nvcc through the kernel cache: a rerun compiles
/// nothing) into a library of its own under the cache: what a GPU run with no --library times.
/// Candidates codegen rejects are reported and left untimed.
fn build_candidates(workloads: &[Workload], device: &DeviceSpec, arch: Arch, top_k: usize) -> Result<PathBuf> {
    use bolt_codegen::builder::{BuildOptions, Builder, Templates};
    let mut specs: Vec<bolt_codegen::spec::KernelSpec> = Vec::new();
    for w in workloads {
        for r in bolt_profiler::analytic::rank_all(w, device, arch).ranked.into_iter().take(top_k) {
            if !specs.contains(&r.spec) {
                specs.push(r.spec);
            }
        }
    }
    let root = bolt_codegen::cache::Cache::default_dir()
        .map(|d| d.with_file_name("tune"))
        .unwrap_or_else(|| std::env::temp_dir().join("bolt-tune"));
    let mut options = BuildOptions::new(root.join(format!("{arch:?}").to_ascii_lowercase()));
    options.name = "bolt_tune_candidates".into();
    options.archs = Some(vec![arch]);
    let builder = Builder::discover(options).context("building the candidates to time (nvcc and CUTLASS)")?;
    eprintln!(
        "bolt-tune: building {} candidate kernels (top-{top_k} of each workload) with {}",
        specs.len(),
        builder.toolchain()
    );
    let report = builder.build(&Templates, &specs).map_err(|e| anyhow::anyhow!("building the candidates: {e}"))?;
    for r in &report.rejected {
        eprintln!("bolt-tune: candidate {} not built: {}", r.symbol, r.reason);
    }
    eprintln!(
        "bolt-tune: built {} kernels in {:.1} s (nvcc ran {} times): {}",
        report.symbols.len(),
        report.total_seconds,
        report.nvcc_invocations,
        report.library.display()
    );
    Ok(report.library)
}

#[cfg(not(feature = "cuda"))]
fn make_timer(
    c: &Common,
    _detection: &Detection,
    _device: &DeviceSpec,
    _arch: Arch,
    _workloads: &[Workload],
) -> Result<Option<Box<dyn Timer>>> {
    if c.library.is_some() && !c.analytic_only {
        eprintln!("bolt-tune: --library ignored: this build has no GPU support (feature `cuda`)");
    }
    Ok(None)
}

fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Analytic => "analytic".into(),
        Outcome::Measured => "measured".into(),
        Outcome::AnalyticFallback(why) => format!("analytic ({why})"),
        Outcome::Resumed => "from db".into(),
        Outcome::NoCandidate(why) => format!("no candidate: {why}"),
    }
}

fn print_summary(results: &[TuneResult], out: &mut dyn Write) -> Result<()> {
    let name_w = results.iter().map(|r| r.workload.len()).max().unwrap_or(8).clamp(8, 48);
    let problem = |r: &TuneResult| match r.key.epilogue.as_str() {
        "identity" => r.description.clone(),
        e => format!("{} +{e}", r.description),
    };
    let prob_w = results.iter().map(|r| problem(r).len()).max().unwrap_or(8).clamp(8, 56);
    writeln!(
        out,
        "{:<name_w$}  {:<prob_w$}  {:<38}  {:>10}  {:>8}  {:>6}  {:>7}  source",
        "workload", "problem", "best config", "time (us)", "TFLOP/s", "% peak", "gap %"
    )?;
    for r in results {
        let best = r.entry.as_ref().map(|e| e.best.as_str()).unwrap_or("-");
        let f = |v: Option<f64>, p: usize| v.map(|x| format!("{x:.p$}")).unwrap_or_else(|| "-".into());
        writeln!(
            out,
            "{:<name_w$}  {:<prob_w$}  {:<38}  {:>10}  {:>8}  {:>6}  {:>7}  {}",
            r.workload,
            problem(r),
            best,
            f(r.time_s().map(|t| t * 1e6), 2),
            f(r.tflops(), 1),
            f(r.pct_peak(), 1),
            f(r.gap_to_analytic_pct(), 1),
            outcome_text(&r.outcome)
        )?;
    }
    let tuned = results.iter().filter(|r| r.entry.is_some()).count();
    writeln!(out, "{tuned}/{} workloads have a configuration", results.len())?;
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write_csv(path: &Path, results: &[TuneResult]) -> Result<()> {
    let mut text = String::from("workload,problem,best,source,time_us,tflops,pct_peak,gap_to_analytic_pct,outcome\n");
    for r in results {
        let f = |v: Option<f64>| v.map(|x| format!("{x:.4}")).unwrap_or_default();
        let row = [
            csv_field(&r.workload),
            csv_field(&r.description),
            csv_field(r.entry.as_ref().map(|e| e.best.as_str()).unwrap_or("")),
            r.entry.as_ref().map(|e| format!("{:?}", e.source).to_ascii_lowercase()).unwrap_or_default(),
            f(r.time_s().map(|t| t * 1e6)),
            f(r.tflops()),
            f(r.pct_peak()),
            f(r.gap_to_analytic_pct()),
            csv_field(&outcome_text(&r.outcome)),
        ];
        text.push_str(&row.join(","));
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
