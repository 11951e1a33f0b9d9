//! The `toolmesh-registry` binary: parse flags, bind, serve until SIGTERM or
//! SIGINT. A failure is printed once, as one `error:` line on stderr, and
//! the exit code is 1 (2 for a flag clap refuses).

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use tokio::{
    net::TcpListener,
    signal::unix::{SignalKind, signal},
};
use toolmesh_registry::Config;

/// glibc's malloc serializes the many small allocations of gRPC serving on
/// its arena locks; mimalloc does not (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse();
    match serve(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    toolmesh_telemetry::init(&config.log)?;
    let listener = bind(&config).await?;
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

/// Binds `--listen`: the IP given, or the first address its host name
/// resolves to.
async fn bind(config: &Config) -> anyhow::Result<TcpListener> {
    let resolved = config.listen.resolve()?;
    if !resolved.candidates.is_empty() {
        let all: Vec<String> = resolved
            .candidates
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::info!(
            listen = %config.listen,
            address = %resolved.addr,
            resolved = %all.join(", "),
            "--listen host name resolved; binding its first address"
        );
    }
    TcpListener::bind(resolved.addr).await.map_err(|error| {
        let hint = match error.kind() {
            std::io::ErrorKind::AddrInUse => {
                "; another process listens there: stop it or choose another port with --listen"
            }
            std::io::ErrorKind::PermissionDenied => {
                "; ports below 1024 need privileges: choose a higher port with --listen"
            }
            std::io::ErrorKind::AddrNotAvailable => {
                "; that address is not one of this machine's: use 127.0.0.1, 0.0.0.0 or one of its own"
            }
            _ => "",
        };
        anyhow::anyhow!("cannot listen on {}: {error}{hint}", resolved.addr)
    })
}
