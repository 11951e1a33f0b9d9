//! The `toolmesh-registry` binary: parse flags, bind, serve until SIGTERM or
//! SIGINT.

use anyhow::Context as _;
use clap::Parser as _;
use tokio::signal::unix::{SignalKind, signal};
use toolmesh_registry::Config;

/// glibc's malloc serializes the many small allocations of gRPC serving on
/// its arena locks; mimalloc does not (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    toolmesh_telemetry::init(&config.log)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(address = %listener.local_addr()?, lease_ttl = ?config.lease_ttl, "toolmesh registry listening");
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    toolmesh_registry::run(listener, config, shutdown).await?;
    tracing::info!("toolmesh registry stopped");
    Ok(())
}
