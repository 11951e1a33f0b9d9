//! `inventory-service`: the example HTTP service (`POST /lookup`), with no
//! knowledge of toolmesh. SIGTERM / SIGINT stop it gracefully.

use std::{net::SocketAddr, process::ExitCode};

use clap::Parser;
use toolmesh_examples::inventory;
use toolmesh_sidecar::shutdown;

/// A tiny stock inventory over HTTP.
#[derive(Debug, Parser)]
#[command(name = "inventory-service", version, about)]
struct Cli {
    /// Address to listen on (the port `examples/demo/sidecar.yaml` calls).
    #[arg(long, env = "INVENTORY_LISTEN", default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
}

#[tokio::main]
async fn main() -> ExitCode {
    match serve(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(cli: Cli) -> anyhow::Result<()> {
    let _telemetry = toolmesh_telemetry::init(
        &toolmesh_telemetry::LogArgs::default(),
        env!("CARGO_BIN_NAME"),
    )?;
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .map_err(|error| {
            let hint = if error.kind() == std::io::ErrorKind::AddrInUse {
                "; another process listens there: stop it or choose another port with --listen (and the same port in the sidecar's url)"
            } else {
                ""
            };
            anyhow::anyhow!("cannot listen on {}: {error}{hint}", cli.listen)
        })?;
    tracing::info!(addr = %listener.local_addr()?, "inventory service listening");
    inventory::serve(listener, shutdown::signal_received()).await?;
    tracing::info!("inventory service stopped");
    Ok(())
}
