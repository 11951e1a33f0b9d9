//! `agent`: the demo's Rust agent on its own, against any registry that
//! serves the demo's tools. Exits 0 only when every expected outcome was
//! observed.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use toolmesh_examples::agent::{self, Options};

/// Discovers the demo's tools, calls them, and shows every error case with
/// its decoded google.rpc details.
#[derive(Debug, Parser)]
#[command(name = "agent", version, about)]
struct Cli {
    /// Registry URL.
    #[arg(
        long,
        env = "TOOLMESH_REGISTRY",
        default_value = "http://127.0.0.1:50051"
    )]
    registry: String,
    /// Seconds to wait for the registry and every tool.
    #[arg(long, default_value_t = 30)]
    wait_secs: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let options = Options {
        registry: cli.registry,
        wait_for_tools: Duration::from_secs(cli.wait_secs),
    };
    match agent::run(&options).await {
        Ok(report) if report.passed() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("agent: {error:#}");
            ExitCode::from(2)
        }
    }
}
