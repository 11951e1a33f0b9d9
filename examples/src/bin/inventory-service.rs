//! `inventory-service`: the example HTTP service (`POST /lookup`), with no
//! knowledge of toolmesh. SIGTERM / SIGINT stop it gracefully.

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use toolmesh_examples::inventory;
use toolmesh_sidecar::shutdown;

/// A tiny stock inventory over HTTP.
#[derive(Debug, Parser)]
#[command(name = "inventory-service", version, about)]
struct Cli {
    /// Address to listen on.
    #[arg(long, env = "INVENTORY_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
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
    tracing::info!(addr = %listener.local_addr()?, "inventory service listening");
    inventory::serve(listener, shutdown::signal_received()).await?;
    tracing::info!("inventory service stopped");
    Ok(())
}
