//! The `bolt` command line.

use anyhow::{bail, Context, Result};
use bolt::artifact::format::DimRange;
use bolt::artifact::{Artifact, CompileOptions, Precision};
use bolt::cases::{self, ExpectedFailures, Tolerance, Verdict};
use bolt::compile::{self, DimBindings};
use clap::{Parser, Subcommand};
use rayon::prelude::*;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "bolt", version, about = "Compile the GEMM/Conv-centric parts of ONNX models to CUTLASS kernels")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import a model, validate it, plan it, check the plan on the CPU reference, summarise it,
    /// and write a deployable artifact (plan, weights in kernel layout, one kernel library; see
    /// docs/artifact.md). With no MODEL, uses the built-in default model (a small CNN + MLP).
    Compile {
        model: Option<PathBuf>,
        /// Artifact directory (default: <model name>.bolt).
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
        /// GPU archs to build kernels for, comma-separated: sm80, sm90.
        #[arg(long, default_value = "sm80", value_delimiter = ',', value_parser = parse_arch)]
        arch: Vec<bolt_codegen::spec::Arch>,
        /// f32 | tf32 | f16 | bf16 (default: the model's type; f32 models run in tf32).
        #[arg(long, value_parser = parse_precision)]
        precision: Option<Precision>,
        /// Size or range of a symbolic dim, e.g. --dim N=8 or --dim N=1..64 (repeatable;
        /// default 1). A range gets kernels per shape bucket; the reference run uses its max.
        #[arg(long = "dim", value_name = "NAME=SIZE|MIN..MAX", value_parser = DimRange::parse)]
        dims: Vec<DimRange>,
        /// Tuning database to take kernels from (default: bolt-tune's, when it exists).
        #[arg(long)]
        tuning_db: Option<PathBuf>,
        /// Inputs for the reference run, as numpy .npz (one array per model input); their
        /// shapes size the symbolic dims `--dim` leaves unset. Default: seeded uniform [-1, 1)
        /// floats and ones, which a model valid only for some values (a sample rate) rejects.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Fix a model input to a constant, e.g. --bind sr=16000 (repeatable; one number fills
        /// the input's static shape, or one per element, comma-separated): control flow and
        /// shape arithmetic that depend on it fold at compile time. The artifact does not take
        /// it.
        #[arg(long = "bind", value_name = "NAME=VALUES", value_parser = parse_bind)]
        bind: Vec<(String, String)>,
        /// When a Softmax after a GEMM runs inside it (CUTLASS's GemmSoftmax): where the cost
        /// model says it pays, always (to time it on a GPU), or never.
        #[arg(long, value_enum, default_value_t = bolt::plan::row_epilogue::RowEpilogueMode::Cost)]
        row_epilogue: bolt::plan::row_epilogue::RowEpilogueMode,
        /// Types of the artifact's inputs and outputs when --precision narrows the model's:
        /// the precision's, or the model's (cast on the device, for a host that hands over
        /// tensors of the model's types through the runtime's enqueue).
        #[arg(long, value_enum, default_value_t = bolt::artifact::IoTypes::Precision)]
        io_types: bolt::artifact::IoTypes,
        /// Specialise to one size per symbolic dim (TensorRT's static shapes): each fixed at its
        /// --dim size or the --inputs' shape before planning, so control flow and shape
        /// arithmetic on the sizes fold (PyTorch's squeeze(dim) Ifs). The artifact then takes
        /// only those sizes.
        #[arg(long = "static")]
        static_shapes: bool,
        /// Skip the reference run.
        #[arg(long, conflicts_with = "inputs")]
        no_run: bool,
        /// Only summarise; write no artifact (no nvcc).
        #[arg(long)]
        no_artifact: bool,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run an artifact on a device: `reference` (CPU, the oracle) or `cuda`.
    Run {
        artifact: PathBuf,
        #[arg(long, default_value = "reference")]
        device: String,
        /// Inputs as numpy .npz (one array per model input); default: seeded uniform [-1, 1).
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Sizes of symbolic dims for generated inputs, e.g. --dim N=8 (default 1).
        #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_binding)]
        dims: Vec<(String, usize)>,
        /// Compare with the original model on the CPU reference at the precision's written
        /// tolerance; exit non-zero on a mismatch.
        #[arg(long)]
        check: bool,
        /// What `--check` compares with: `original` (the model the artifact was compiled from,
        /// on the CPU reference), `reference` (this artifact's plan on the reference device:
        /// needs no model file, so it checks a GPU's kernels where the model did not travel),
        /// or a FILE.npz of outputs recorded elsewhere (e.g. onnxruntime's, by output name).
        #[arg(long, default_value = "original", value_name = "original|reference|FILE.npz")]
        oracle: String,
        /// Print per-kernel and total device time and host overhead per launch.
        #[arg(long)]
        bench: bool,
        /// Capture the launch sequence in a CUDA graph (cuda).
        #[arg(long)]
        graph: bool,
        /// With `--check --oracle reference`: keep every tensor the plan computes and compare
        /// each with the reference device's, in run order; the first that differs names the
        /// node (and kernel) to look at.
        #[arg(long)]
        every_tensor: bool,
    },
    /// Plan a model and report what Bolt fuses, pads, transposes and leaves to the host, and
    /// why, with hints for the model's author. Markdown by default. With no MODEL, uses the
    /// built-in default model.
    Report {
        model: Option<PathBuf>,
        /// Size of a symbolic dim for cost estimates, e.g. --dim N=32 (repeatable; default 1).
        #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_binding)]
        dims: Vec<(String, usize)>,
        /// Fix a model input to a constant, as `bolt compile --bind` does.
        #[arg(long = "bind", value_name = "NAME=VALUES", value_parser = parse_bind)]
        bind: Vec<(String, String)>,
        /// GPU whose numbers the cost model uses: h100 or a100.
        #[arg(long, default_value = "h100")]
        device: String,
        /// Print JSON instead of Markdown.
        #[arg(long)]
        json: bool,
        /// Keep NCHW (no layout pass).
        #[arg(long)]
        no_nhwc: bool,
        /// No alignment padding.
        #[arg(long)]
        no_pad: bool,
        /// No back-to-back fusion.
        #[arg(long)]
        no_b2b: bool,
        /// Leave element-wise ops and row reductions between kernels on the host (no stitching).
        #[arg(long)]
        no_stitch: bool,
        /// Run attention cores as their batched GEMMs and a stitched softmax (no fused attention).
        #[arg(long)]
        no_attention: bool,
        /// When a Softmax after a GEMM runs inside it (CUTLASS's GemmSoftmax): where the cost
        /// model says it pays, always, or never.
        #[arg(long, value_enum, default_value_t = bolt::plan::row_epilogue::RowEpilogueMode::Cost)]
        row_epilogue: bolt::plan::row_epilogue::RowEpilogueMode,
    },
    /// Run ONNX test cases (model.onnx + test_data_set_*/) through the reference executor and
    /// compare with their expected outputs.
    Check {
        /// Case directories, or directories holding them.
        paths: Vec<PathBuf>,
        /// Only cases whose name contains this (case-insensitive).
        #[arg(long)]
        filter: Option<String>,
        #[arg(long, default_value_t = Tolerance::ONNX_BACKEND.rtol)]
        rtol: f64,
        #[arg(long, default_value_t = Tolerance::ONNX_BACKEND.atol)]
        atol: f64,
        /// File listing known failures with their reasons; unlisted failures fail the command.
        #[arg(long)]
        expected_failures: Option<PathBuf>,
        /// Run each case's planned graph (Bolt's fused kernels on the reference executor)
        /// instead of the model.
        #[arg(long)]
        planned: bool,
    },
    /// Install or inspect the pinned CUDA (nvcc) + CUTLASS toolchain Bolt builds kernels with.
    Toolchain {
        #[command(subcommand)]
        action: ToolchainAction,
    },
}

#[derive(Subcommand)]
enum ToolchainAction {
    /// Install what is missing (from hash-checked PyPI wheels); no network if nothing is.
    Install,
    /// Show which nvcc and CUTLASS Bolt uses and the state of the pinned installs.
    Status,
}

fn parse_binding(s: &str) -> Result<(String, usize), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("'{s}' is not NAME=SIZE"))?;
    let v = v.parse().map_err(|_| format!("'{v}' is not a size"))?;
    Ok((k.to_string(), v))
}

fn parse_arch(s: &str) -> Result<bolt_codegen::spec::Arch, String> {
    bolt_codegen::spec::Arch::parse(s).ok_or_else(|| format!("'{s}' is not an arch Bolt builds for (sm80, sm90)"))
}

fn parse_bind(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("'{s}' is not NAME=VALUES"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

fn parse_precision(s: &str) -> Result<Precision, String> {
    Precision::parse(s).ok_or_else(|| format!("'{s}' is not one of f32, tf32, f16, bf16"))
}

/// Sizes of the symbolic dims of `g`'s inputs that `given` leaves unset, read from `feed`'s
/// shapes; an input missing from `feed`, or of another rank, is an error naming it.
fn dims_of_inputs(
    g: &bolt::ir::Graph,
    feed: &std::collections::HashMap<String, bolt::ir::Tensor>,
    given: &[DimRange],
) -> Result<Vec<DimRange>> {
    let mut out: Vec<DimRange> = Vec::new();
    for name in &g.inputs {
        let t = feed.get(name).ok_or_else(|| anyhow::anyhow!("--inputs: no array for model input '{name}'"))?;
        let Some(shape) = g.types.get(name).and_then(|t| t.shape.as_ref()) else { continue };
        if shape.rank() != t.shape.len() {
            bail!("--inputs: model input '{name}' is declared {shape} but the array has shape {:?}", t.shape);
        }
        for (d, &n) in shape.0.iter().zip(&t.shape) {
            if let bolt::ir::Dim::Sym(s) = d {
                if n > 0 && !given.iter().chain(&out).any(|r| &r.name == s) {
                    out.push(DimRange { name: s.clone(), min: n, max: n });
                }
            }
        }
    }
    Ok(out)
}

/// Symbolic dims of `g`'s inputs that `bindings` leaves at their default of 1.
fn defaulted_dims(g: &bolt::ir::Graph, bindings: &DimBindings) -> Vec<String> {
    let mut names: Vec<String> = g
        .inputs
        .iter()
        .filter_map(|i| g.types.get(i)?.shape.as_ref())
        .flat_map(|s| s.0.iter())
        .filter_map(|d| match d {
            bolt::ir::Dim::Sym(n) if !bindings.contains_key(n) => Some(n.clone()),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

fn main() -> ExitCode {
    // A closed stdout (`bolt report | head`) ends the process as it does any Unix tool,
    // instead of a panic in println!.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BOLT_LOG"))
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Compile {
            model,
            out,
            arch,
            precision,
            mut dims,
            tuning_db,
            inputs,
            bind,
            row_epilogue,
            io_types,
            static_shapes,
            no_run,
            no_artifact,
            json,
        } => {
            let graph = match &model {
                Some(p) => bolt::import::load(p)?.graph,
                None => bolt::models::default_model()?,
            };
            let bound_inputs: std::collections::BTreeMap<String, String> = bind.into_iter().collect();
            let graph = compile::bind_input_values(&graph, &bound_inputs)?;
            let feed = match &inputs {
                Some(p) => {
                    let feed = bolt::runtime::npz::read_npz(p).map_err(anyhow::Error::msg)?;
                    dims.extend(dims_of_inputs(&graph, &feed, &dims)?);
                    Some(feed)
                }
                None => None,
            };
            let bindings: DimBindings = dims.iter().map(|d| (d.name.clone(), d.max)).collect();
            let graph = if static_shapes {
                if let Some(r) = dims.iter().find(|d| d.min != d.max) {
                    bail!("--static takes one size per dim, not the range {}={}..{}", r.name, r.min, r.max);
                }
                compile::specialize(&graph, &bindings)?
            } else {
                graph
            };
            // Unbound symbolic dims run at 1, which a detector's 1x1 image cannot pass through:
            // say so with the error.
            let defaulted = defaulted_dims(&graph, &bindings);
            let hint = |e: bolt::Error| -> anyhow::Error {
                if defaulted.is_empty() {
                    return e.into();
                }
                anyhow::Error::from(e).context(format!(
                    "the model's symbolic dims {} were 1 (the default); give real sizes with --dim NAME=SIZE or NAME=MIN..MAX",
                    defaulted.join(", ")
                ))
            };
            let run = match (&feed, no_run) {
                (Some(feed), _) => compile::RunOn::Inputs(feed),
                (None, true) => compile::RunOn::Skip,
                (None, false) => compile::RunOn::Synthetic,
            };
            let summary = compile::summarize(&graph, &bindings, run).map_err(hint)?;
            if !json {
                if model.is_none() {
                    println!("(no model given: using the built-in default model)\n");
                }
                print!("{summary}");
            }
            // A plan that changes the model's answer is a bug, never a result.
            if let Some((o, why)) = summary.plan.as_ref().and_then(|p| p.mismatches.first()) {
                bail!("the planned graph differs from the model on output '{o}': {why}");
            }
            // A narrower float type whose range the model leaves on these inputs loses its answer
            // (inf, then NaN): say where, before any kernel is built.
            if !no_artifact {
                let (p, _) = bolt::artifact::resolve_precision(&graph, precision)?;
                let storage = p.storage();
                let narrower = graph
                    .inputs
                    .iter()
                    .chain(&graph.outputs)
                    .any(|t| graph.types.get(t).is_some_and(|ty| ty.dtype.is_float() && ty.dtype != storage));
                let sample = match (&feed, no_run) {
                    (Some(feed), _) => Some(feed.clone()),
                    (None, true) => None,
                    (None, false) => Some(compile::synthetic_inputs(&graph, &bindings, 0)?),
                };
                if let (true, Some(sample), true) = (narrower, sample, storage != bolt::ir::DType::F32) {
                    let converted = bolt::ir::precision::convert_floats(&graph, storage)?;
                    let sample = bolt::runtime::prepare_inputs(&graph, &sample)?;
                    if let Some(o) = bolt::ir::precision::first_overflow(&graph, &converted, &sample)? {
                        bail!(
                            "--precision {}: tensor '{}' (node '{}') reaches {:.3e} on these inputs, beyond {storage}'s \
                             largest value {:.0}: in {storage} it is inf or NaN and the model's answer is lost. Compile with \
                             --precision bf16 (f32's range) or tf32",
                            p.name(),
                            o.tensor,
                            o.node,
                            o.original_max_abs,
                            bolt::ir::precision::max_finite(storage)
                        );
                    }
                }
            }
            let report = if no_artifact {
                None
            } else {
                let stem = model.as_ref().and_then(|p| p.file_stem()).map(|s| s.to_string_lossy().to_string());
                let dir =
                    out.unwrap_or_else(|| PathBuf::from(format!("{}.bolt", stem.as_deref().unwrap_or("default"))));
                let tuning_db = tuning_db.or_else(|| {
                    let p = bolt_profiler::db::Db::default_path();
                    p.exists().then_some(p)
                });
                // Building kernels needs nvcc + CUTLASS: install the pinned ones into the user's
                // cache on first use (no network when they are there), so the main job sets
                // itself up on a fresh machine.
                let config = bolt_cutlass::Config::from_env();
                if bolt_cutlass::Toolchain::discover_with(&config).is_err() {
                    eprintln!("installing the pinned CUDA + CUTLASS toolchain (first run only)");
                    bolt_cutlass::Toolchain::install(&config, &mut |p| eprintln!("{p}"))
                        .context("installing the CUDA + CUTLASS toolchain the kernel library is built with")?;
                }
                let opts = CompileOptions {
                    archs: arch,
                    precision,
                    dims,
                    tuning_db,
                    source: model.clone().map_or(bolt::artifact::Source::Builtin, bolt::artifact::Source::File),
                    bound_inputs,
                    row_epilogue,
                    io_types,
                    ..CompileOptions::new(dir)
                };
                Some(bolt::artifact::compile(&graph, &opts).map_err(hint)?)
            };
            if json {
                let v = serde_json::json!({ "summary": summary, "artifact": report });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if let Some(r) = report {
                print!("\n{r}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { artifact, device, inputs, dims, check, oracle, bench, graph, every_tensor } => {
            if !matches!(oracle.as_str(), "original" | "reference") && !oracle.ends_with(".npz") {
                bail!("--oracle {oracle}: expected original, reference or a FILE.npz of outputs");
            }
            if every_tensor && !(check && oracle == "reference") {
                bail!("--every-tensor compares with the reference device's tensors: give --check --oracle reference");
            }
            let check = check.then_some(oracle.as_str());
            run_artifact(&artifact, &device, inputs.as_deref(), dims, check, bench, graph, every_tensor)
        }
        Command::Report {
            model,
            dims,
            bind,
            device,
            json,
            no_nhwc,
            no_pad,
            no_b2b,
            no_stitch,
            no_attention,
            row_epilogue,
        } => {
            let (graph, name) = match &model {
                Some(p) => (bolt::import::load(p)?.graph, p.display().to_string()),
                None => (bolt::models::default_model()?, "built-in default model".to_string()),
            };
            let graph = compile::bind_input_values(&graph, &bind.into_iter().collect())?;
            let device = bolt::plan::DeviceSpec::builtin(&device)
                .ok_or_else(|| anyhow::anyhow!("--device {device}: unknown GPU (known: h100, a100)"))?;
            let opts = bolt::plan::PlanOptions {
                device,
                bindings: dims.into_iter().collect(),
                nhwc: !no_nhwc,
                pad: !no_pad,
                b2b: !no_b2b,
                stitch: !no_stitch,
                attention: !no_attention,
                row_epilogue,
            };
            let plan = bolt::plan::plan_with(&graph, &opts).with_context(|| format!("planning {name}"))?;
            let report = bolt::plan::report::report(&name, &graph, &plan, &opts);
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.to_markdown());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Toolchain { action } => {
            let config = bolt_cutlass::Config::from_env();
            match action {
                ToolchainAction::Install => {
                    let installed = bolt_cutlass::Toolchain::install(&config, &mut |p| println!("{p}"))?;
                    print!("{installed}");
                    Ok(ExitCode::SUCCESS)
                }
                ToolchainAction::Status => {
                    let report = bolt_cutlass::status(&config)?;
                    println!("{report}");
                    Ok(if report.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
                }
            }
        }
        Command::Check { paths, filter, rtol, atol, expected_failures, planned } => {
            if paths.is_empty() {
                bail!("give at least one case directory");
            }
            let mut dirs = Vec::new();
            for p in &paths {
                if !p.exists() {
                    bail!("{}: no such directory", p.display());
                }
                dirs.extend(cases::find_cases(p));
            }
            if let Some(f) = &filter {
                let f = f.to_lowercase();
                dirs.retain(|d| d.file_name().is_some_and(|n| n.to_string_lossy().to_lowercase().contains(&f)));
            }
            let expected = match &expected_failures {
                Some(f) => ExpectedFailures::parse(
                    &std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?,
                )
                .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?,
                None => ExpectedFailures::default(),
            };
            let tol = Tolerance { rtol, atol };
            let run = if planned { cases::run_planned_case } else { cases::run_case };
            let results: Vec<_> = dirs.par_iter().map(|d| run(d, tol)).collect();
            for r in &results {
                let err = r.outputs.iter().map(|o| o.max_abs_err).fold(0.0, f64::max);
                match r.reason() {
                    None => println!("PASS {:<60} max abs err {err:.2e}  {:.2}s", r.name, r.seconds),
                    Some(why) => println!("FAIL {:<60} {why}", r.name),
                }
            }
            let v = Verdict::judge(&results, &expected);
            println!(
                "\n{} cases: {} passed, {} failed as expected (listed with a reason), {} failed unexpectedly, {} listed but passed",
                results.len(),
                v.passed.len(),
                v.expected.len(),
                v.unexpected.len(),
                v.stale.len()
            );
            // Any failure not listed (with --expected-failures) or any failure at all fails the run.
            Ok(if v.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}

/// `bolt run`: open, run once (or time), and with `--check` compare with the original model.
fn run_artifact(
    dir: &std::path::Path,
    device: &str,
    inputs: Option<&std::path::Path>,
    dims: Vec<(String, usize)>,
    check: Option<&str>,
    bench: bool,
    graph: bool,
    every_tensor: bool,
) -> Result<ExitCode> {
    use bolt::runtime::{self, DeviceKind, RunOptions};
    let kind = DeviceKind::parse(device)
        .ok_or_else(|| anyhow::anyhow!("--device {device}: unknown device (reference, cuda)"))?;
    let mut art = Artifact::open(dir)?;
    let model_outputs = art.plan.outputs.clone();
    let observed = if every_tensor { runtime::observe_every_tensor(&mut art)? } else { Vec::new() };
    let art = art;
    let m = &art.manifest;
    println!(
        "artifact {} ({}, precision {}, archs {:?}): {} kernel nodes, {} chain nodes, {} glue nodes, {} stitched nodes, {} device copies, {} aliased views, {} host ops",
        dir.display(),
        m.model,
        m.precision.name(),
        m.archs,
        art.plan.kernels.len(),
        art.plan.chains.len(),
        art.plan.glue.len(),
        art.plan.stitch.len(),
        art.plan.device_data_movement().0,
        art.plan.device_data_movement().1,
        art.plan.host_ops.iter().filter(|h| !h.on_device).count()
    );
    let plan_graph = art.graph();
    let feed = match inputs {
        Some(p) => runtime::npz::read_npz(p).map_err(anyhow::Error::msg)?,
        None => compile::synthetic_inputs(&plan_graph, &dims.into_iter().collect(), 0)?,
    };
    let mut exec = runtime::open(&art, kind, &RunOptions { graph, timing: bench, stream: None, device: 0 })?;
    println!("device {}", exec.describe());
    let t0 = std::time::Instant::now();
    let outs = runtime::outputs_as_f32(exec.run(&feed)?);
    let first = t0.elapsed().as_secs_f64();
    for name in &model_outputs {
        let t = &outs[name];
        let v = t.to_f64_vec();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        println!("  {name}: {:?} mean {mean:.5}", t.shape);
    }
    println!("run: {first:.4} s");
    if bench {
        let reps = 10;
        let t0 = std::time::Instant::now();
        for _ in 0..reps {
            exec.run(&feed)?;
        }
        println!(
            "mean of {reps} runs: {:.4} s (wall, including input/output copies)",
            t0.elapsed().as_secs_f64() / reps as f64
        );
        match exec.timings() {
            Some(t) => {
                for (node, symbol, s) in &t.kernels {
                    println!("  {node:<28} {:>10.1} us  {symbol}", s * 1e6);
                }
                println!(
                    "device time {:.1} us over {} launches; host overhead {:.2} us per launch",
                    t.device_seconds * 1e6,
                    t.launches,
                    t.host_seconds * 1e6 / t.launches.max(1) as f64
                );
                if let Some((median, p10, p90)) = t.whole_run_spread() {
                    println!(
                        "whole run {:.1} us median of {} (p10 {:.1}, p90 {:.1}), inputs on the device{}",
                        median * 1e6,
                        t.whole_run_seconds.len(),
                        p10 * 1e6,
                        p90 * 1e6,
                        if graph { ", one CUDA graph" } else { "" }
                    );
                }
            }
            None => println!("(the {device} device measures no per-kernel time)"),
        }
    }
    let Some(oracle) = check else {
        return Ok(ExitCode::SUCCESS);
    };
    let (rtol, atol) = m.precision.tolerance();
    // Outputs recorded elsewhere, or the same plan and weights on the CPU reference (what
    // the device's kernels must give): compared by the artifact's output names.
    let recorded = match oracle {
        "reference" => {
            let mut reference = runtime::open(&art, DeviceKind::Reference, &RunOptions::default())?;
            Some((reference.run(&feed)?, "the reference device".to_string()))
        }
        npz if npz.ends_with(".npz") => {
            Some((runtime::npz::read_npz(std::path::Path::new(npz)).map_err(anyhow::Error::msg)?, npz.to_string()))
        }
        _ => None,
    };
    if let Some((want, what)) = recorded {
        let want = runtime::outputs_as_f32(want);
        let what = format!("{}, vs {what}", m.precision.name());
        let ok = compare_outputs(&model_outputs, &outs, &want, rtol, atol, &what);
        let tensors_ok = observed.is_empty() || compare_every_tensor(&art, &observed, &outs, &want, rtol, atol);
        return Ok(if ok && tensors_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let original = if m.source == bolt::artifact::format::BUILTIN_DEFAULT {
        bolt::models::default_model()?
    } else if let Some(label) = m.source.strip_prefix(bolt::artifact::format::HOST_SOURCE) {
        bail!(
            "--check reruns the original model, but this artifact was compiled from a subgraph a host \
             framework handed over ({label}; manifest field 'source'): there is no file to rerun"
        );
    } else {
        let p = std::path::Path::new(&m.source);
        let bytes = std::fs::read(p)
            .with_context(|| format!("--check needs the original model {} (manifest field 'source')", p.display()))?;
        if m.source_blake3.as_deref() != Some(blake3::hash(&bytes).to_hex().as_str()) {
            bail!("{}: the model changed since the artifact was built (manifest field 'source_blake3')", p.display());
        }
        bolt::import::load(p)?.graph
    };
    // The inputs the artifact was compiled with fixed (manifest field 'bound_inputs').
    let original = compile::bind_input_values(&original, &m.bound_inputs)?;
    let feed32: std::collections::HashMap<_, _> = feed
        .iter()
        .map(|(k, t)| {
            let t = if t.dtype().is_float() {
                bolt::ir::Tensor::from_f32(t.shape.clone(), t.to_f32_vec())
            } else {
                t.clone()
            };
            (k.clone(), t)
        })
        .collect();
    let want = bolt::reference::run(&original, &runtime::prepare_inputs(&original, &feed32)?)?;
    let ok = compare_outputs(&original.outputs, &outs, &want, rtol, atol, m.precision.name());
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `--every-tensor`: each intermediate tensor against the oracle's, in run order. Prints the
/// ones outside the tolerance with the node and kernel that computed them, and the first (its
/// inputs agreed, so its own kernel or copy differs); true when every tensor agrees.
fn compare_every_tensor(
    art: &Artifact,
    observed: &[(String, String)],
    outs: &std::collections::HashMap<String, bolt::ir::Tensor>,
    want: &std::collections::HashMap<String, bolt::ir::Tensor>,
    rtol: f64,
    atol: f64,
) -> bool {
    let p = &art.plan;
    let runs = |node: &str| -> String {
        if let Some(k) = p.kernels.iter().find(|k| k.node == node) {
            let symbols: std::collections::BTreeSet<&str> =
                k.buckets.iter().flatten().map(|c| c.symbol.as_str()).collect();
            return symbols.into_iter().collect::<Vec<_>>().join(" | ");
        }
        if let Some(c) = p.chains.iter().find(|c| c.node == node) {
            return c
                .buckets
                .iter()
                .map(|b| b.symbol.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(" | ");
        }
        p.glue
            .iter()
            .find(|g| g.node == node)
            .map(|g| g.symbol.clone())
            .or_else(|| p.stitch.iter().find(|s| s.node == node).map(|s| s.symbol.clone()))
            .or_else(|| p.attention.iter().find(|a| a.node == node).map(|a| a.symbol.clone()))
            .or_else(|| p.recurrent.iter().find(|r| r.node == node).map(|r| r.symbol.clone()))
            .or_else(|| p.host_ops.iter().find(|h| h.node == node).map(|h| format!("host {}", h.op_type)))
            .unwrap_or_else(|| "copy or host".into())
    };
    let mut bad = Vec::new();
    for (name, node) in observed {
        let (Some(a), Some(b)) = (outs.get(name), want.get(name)) else {
            bad.push((
                name,
                node,
                format!("missing from the {}", if outs.contains_key(name) { "oracle" } else { "run" }),
            ));
            continue;
        };
        let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
        if a.len() != b.len() {
            bad.push((name, node, format!("{} values, the reference has {}", a.len(), b.len())));
            continue;
        }
        let mut worst = 0.0f64;
        let mut outside = 0usize;
        for (x, y) in a.iter().zip(&b) {
            let d = (x - y).abs();
            if !(d <= atol + rtol * y.abs()) {
                outside += 1;
            }
            if !(d <= worst) {
                worst = d;
            }
        }
        if outside > 0 {
            bad.push((name, node, format!("max abs diff {worst:.3e}, {outside} of {} outside", a.len())));
        }
    }
    println!("every tensor: {} compared, {} outside atol {atol} + rtol {rtol} x |ref|", observed.len(), bad.len());
    for (name, node, why) in bad.iter().take(40) {
        println!("  TENSOR {name} (node {node}, {}): {why}", runs(node));
    }
    if let Some((name, node, _)) = bad.first() {
        println!("first differing tensor: {name}, computed by node {node} ({})", runs(node));
    }
    // Where the first ones differ, by position along the last axis (channels, columns) and
    // along the rows before it: a kernel bug shows a pattern (one warp's columns, the rows
    // past a tile), rounding does not.
    let shown: Vec<_> = bad.iter().filter(|(_, _, why)| why.starts_with("max abs diff")).take(6).collect();
    for (name, node, _) in shown {
        let (a, b) = (&outs[*name], &want[*name]);
        let cols = a.shape.last().copied().unwrap_or(1).max(1);
        let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
        let mut per_col = vec![0usize; cols];
        let mut rows = std::collections::BTreeSet::new();
        let mut first = Vec::new();
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            if !((p - q).abs() <= atol + rtol * q.abs()) {
                per_col[i % cols] += 1;
                rows.insert(i / cols);
                if first.len() < 6 {
                    first.push(format!("[{}, {}] {p:.4} vs {q:.4}", i / cols, i % cols));
                }
            }
        }
        let cols_bad: Vec<String> =
            per_col.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, c)| format!("{i}:{c}")).collect();
        println!(
            "  PATTERN {name} (node {node}) shape {:?}: {} of {} rows differ (rows {}..={}), columns (index:count) {}; first: {}",
            a.shape,
            rows.len(),
            x.len() / cols,
            rows.first().copied().unwrap_or(0),
            rows.last().copied().unwrap_or(0),
            cols_bad.join(" "),
            first.join("; ")
        );
    }
    bad.is_empty()
}

/// Prints one verdict line per output (`ok` / `MISMATCH`, the worst difference and how many
/// values fall outside `atol + rtol x |want|`); true when every output is within.
fn compare_outputs(
    names: &[String],
    outs: &std::collections::HashMap<String, bolt::ir::Tensor>,
    want: &std::collections::HashMap<String, bolt::ir::Tensor>,
    rtol: f64,
    atol: f64,
    what: &str,
) -> bool {
    let mut ok = true;
    for name in names {
        let (Some(a), Some(b)) = (outs.get(name), want.get(name)) else {
            println!("MISMATCH {name}: missing from the {}", if outs.contains_key(name) { "oracle" } else { "run" });
            ok = false;
            continue;
        };
        let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
        if a.len() != b.len() {
            println!("MISMATCH {name}: {} values, the model gives {}", a.len(), b.len());
            ok = false;
            continue;
        }
        let mut worst = (0.0f64, 0usize);
        let mut bad = 0usize;
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let d = (x - y).abs();
            if !(d <= atol + rtol * y.abs()) {
                bad += 1;
            }
            if !(d <= worst.0) {
                worst = (d, i);
            }
        }
        let verdict = if bad == 0 { "ok" } else { "MISMATCH" };
        println!(
            "{verdict} {name}: max abs diff {:.3e} at {} ({} of {} outside atol {atol} + rtol {rtol} x |ref|, {what})",
            worst.0,
            worst.1,
            bad,
            a.len(),
        );
        ok &= bad == 0;
    }
    ok
}
