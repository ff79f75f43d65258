//! `bolt-toolchain install|status`: installs or reports Bolt's pinned CUDA + CUTLASS toolchain.
//! The test command runs `install` before the tests; `bolt toolchain ...` offers the same.

use std::process::ExitCode;

use bolt_cutlass::{status, Config, Toolchain};

const USAGE: &str = "usage: bolt-toolchain <install|status>

  install   install what is missing of the pinned CUDA + CUTLASS (no network if nothing is)
  status    show which nvcc and CUTLASS Bolt uses, and the state of the pinned installs

Environment: CUDA_HOME, CUTLASS_DIR, BOLT_CACHE_DIR, BOLT_WHEEL_DIR, HTTPS_PROXY, SSL_CERT_FILE,
RUST_LOG (e.g. RUST_LOG=bolt_cutlass=debug).";

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();

    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = Config::from_env();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["install"] => match Toolchain::install(&config, &mut |p| println!("{p}")) {
            Ok(installed) => {
                print!("{installed}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        ["status"] => match status(&config) {
            Ok(report) => {
                println!("{report}");
                if report.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        ["help" | "-h" | "--help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
