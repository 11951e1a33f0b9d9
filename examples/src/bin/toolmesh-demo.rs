//! `toolmesh-demo`: the whole toolmesh demo in one command (see
//! `examples/README.md`). Exits 0 only when every expected outcome was
//! observed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use toolmesh_examples::launcher::{self, BIN_DIR_ENV, Options};

/// Starts a registry, a config-driven sidecar, an HTTP service and a Rust
/// SDK tool, runs an agent through every success and error case, stops
/// everything.
#[derive(Debug, Parser)]
#[command(name = "toolmesh-demo", version, about)]
struct Cli {
    /// Dir holding toolmesh-registry and toolmesh-sidecar [default: this binary's dir].
    #[arg(long, env = BIN_DIR_ENV)]
    bin_dir: Option<PathBuf>,
    /// Dir holding sidecar.yaml and its scripts [default: examples/demo in the source tree].
    #[arg(long, env = "TOOLMESH_DEMO_DIR")]
    demo_dir: Option<PathBuf>,
    /// The registry's lease TTL.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    lease_ttl: Duration,
    /// How long the agent waits for every tool to be live.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    wait_for_tools: Duration,
    /// Keep the child processes' logs even when the demo passes.
    #[arg(long)]
    keep_logs: bool,
    /// Serve the registry's console on this address (e.g. 127.0.0.1:8095),
    /// and after the agent's run keep everything up until Ctrl-C.
    #[arg(long, value_name = "ADDR")]
    console: Option<std::net::SocketAddr>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let options = Options {
        bin_dir: cli.bin_dir,
        demo_dir: cli.demo_dir.unwrap_or_else(Options::default_demo_dir),
        lease_ttl: cli.lease_ttl,
        wait_for_tools: cli.wait_for_tools,
        keep_logs: cli.keep_logs,
        console: cli.console,
    };
    match launcher::run(&options).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("toolmesh-demo: {error:#}");
            ExitCode::from(2)
        }
    }
}
