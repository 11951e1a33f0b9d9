//! `calculator-tool`: the `divide` tool, written in Rust with the sidecar
//! SDK, serving and announcing itself (heartbeats included) until SIGTERM /
//! SIGINT, then withdrawing.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use toolmesh_examples::calculator;
use toolmesh_sidecar::shutdown;

/// A Rust SDK tool: divide.
#[derive(Debug, Parser)]
#[command(name = "calculator-tool", version, about)]
// The fields' comments are `--help`'s text, written for a terminal.
#[allow(rustdoc::invalid_html_tags)]
struct Cli {
    /// Registry URL.
    #[arg(
        long,
        env = "TOOLMESH_REGISTRY",
        default_value = "http://127.0.0.1:50051"
    )]
    registry: String,
    /// Address to serve ToolRuntime on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Stable instance id [default: <hostname>-<random>].
    #[arg(long, env = "TOOLMESH_INSTANCE_ID")]
    instance_id: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = toolmesh_telemetry::init(
        &toolmesh_telemetry::LogArgs::default(),
        env!("CARGO_BIN_NAME"),
    )?;
    let cli = Cli::parse();
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    tracing::info!(addr = %listener.local_addr()?, registry = %cli.registry, "calculator tool serving");
    calculator::serve(
        &cli.registry,
        cli.instance_id,
        listener,
        shutdown::signal_received(),
    )
    .await?;
    tracing::info!("calculator tool stopped");
    Ok(())
}
