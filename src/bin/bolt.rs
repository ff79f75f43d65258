//! The `bolt` command line.

use anyhow::{bail, Context, Result};
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
    /// Import a model, validate it, run the CPU reference and summarise what Bolt will compile.
    /// With no MODEL, uses the built-in default model (a small CNN + MLP).
    Compile {
        model: Option<PathBuf>,
        /// Size of a symbolic dim for the reference run, e.g. --dim N=8 (repeatable; default 1).
        #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_binding)]
        dims: Vec<(String, usize)>,
        /// Skip the reference run.
        #[arg(long)]
        no_run: bool,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Plan a model and report what Bolt fuses, pads, transposes and leaves to the host, and
    /// why, with hints for the model's author. Markdown by default. With no MODEL, uses the
    /// built-in default model.
    Report {
        model: Option<PathBuf>,
        /// Size of a symbolic dim for cost estimates, e.g. --dim N=32 (repeatable; default 1).
        #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_binding)]
        dims: Vec<(String, usize)>,
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

fn main() -> ExitCode {
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
        Command::Compile { model, dims, no_run, json } => {
            let graph = match &model {
                Some(p) => bolt::import::load(p)?.graph,
                None => bolt::models::default_model()?,
            };
            let bindings: DimBindings = dims.into_iter().collect();
            let summary = compile::summarize(&graph, &bindings, !no_run)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                if model.is_none() {
                    println!("(no model given: using the built-in default model)\n");
                }
                print!("{summary}");
            }
            // A plan that changes the model's answer is a bug, never a result.
            if let Some((o, why)) = summary.plan.as_ref().and_then(|p| p.mismatches.first()) {
                bail!("the planned graph differs from the model on output '{o}': {why}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Report { model, dims, device, json, no_nhwc, no_pad, no_b2b } => {
            let (graph, name) = match &model {
                Some(p) => (bolt::import::load(p)?.graph, p.display().to_string()),
                None => (bolt::models::default_model()?, "built-in default model".to_string()),
            };
            let device = bolt::plan::Device::by_name(&device)
                .ok_or_else(|| anyhow::anyhow!("--device {device}: unknown GPU (known: h100, a100)"))?;
            let opts = bolt::plan::PlanOptions {
                device,
                bindings: dims.into_iter().collect(),
                nhwc: !no_nhwc,
                pad: !no_pad,
                b2b: !no_b2b,
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
