//! `toolmesh-sidecar`: serves the tools of a YAML config and keeps them
//! announced to the registry. SIGTERM / SIGINT shut it down gracefully.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Parser;
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_sidecar::server::{ServeOptions, serve};

const DEFAULT_REGISTRY: &str = "http://127.0.0.1:50051";
const DEFAULT_LISTEN: &str = "127.0.0.1:50061";

/// glibc's malloc serializes the many small allocations of gRPC serving on
/// its arena locks; mimalloc does not (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line; each flag may also come from its environment variable.
/// Precedence: flag/env, then the config file, then the default.
#[derive(Debug, Parser)]
#[command(name = "toolmesh-sidecar", version, about)]
struct Cli {
    /// YAML file declaring the tools.
    #[arg(long, env = "TOOLMESH_SIDECAR_CONFIG")]
    config: PathBuf,
    /// Registry URL [default: http://127.0.0.1:50051].
    #[arg(long, env = "TOOLMESH_REGISTRY")]
    registry: Option<String>,
    /// Address to serve ToolRuntime on [default: 127.0.0.1:50061].
    #[arg(long, env = "TOOLMESH_SIDECAR_LISTEN")]
    listen: Option<SocketAddr>,
    /// URL the registry dials to reach this sidecar [default: http://<listen>].
    #[arg(long, env = "TOOLMESH_ADVERTISE")]
    advertise: Option<String>,
    /// Stable instance id [default: <hostname>-<random 8 hex>].
    #[arg(long, env = "TOOLMESH_INSTANCE_ID")]
    instance_id: Option<String>,
    /// Logging: `--log` and `--log-format`.
    #[command(flatten)]
    log: toolmesh_telemetry::LogArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    toolmesh_telemetry::init(&cli.log)?;

    // Config first, ports second.
    let config = SidecarConfig::load(&cli.config)?;
    let base_dir = cli.config.parent().unwrap_or(Path::new("."));
    let tools = config.build_tools(base_dir)?;
    let listen = match cli.listen.or(config.listen) {
        Some(addr) => addr,
        None => DEFAULT_LISTEN.parse().context("default listen address")?,
    };
    let opts = ServeOptions {
        registry: cli
            .registry
            .or(config.registry)
            .unwrap_or_else(|| DEFAULT_REGISTRY.to_owned()),
        advertise: cli.advertise.or(config.advertise),
        instance_id: cli.instance_id.or(config.instance_id),
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(addr = %listener.local_addr()?, tools = tools.len(), "bound");
    serve(
        listener,
        tools,
        opts,
        toolmesh_sidecar::shutdown::signal_received(),
    )
    .await?;
    Ok(())
}
