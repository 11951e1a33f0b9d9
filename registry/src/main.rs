//! The `toolmesh-registry` binary: parse flags, bind, serve until SIGTERM or
//! SIGINT; or, as `toolmesh-registry health`, check a running registry's
//! health ([`toolmesh_registry::serving::probe`]). A failure is printed once, as one
//! `error:` line on stderr, and the exit code is 1 (2 for a flag clap
//! refuses).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use toolmesh_registry::Config;

/// glibc's malloc serializes the many small allocations of gRPC serving on
/// its arena locks; mimalloc does not (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The command line: the registry's flags, or another command.
#[derive(Debug, Parser)]
#[command(
    name = "toolmesh-registry",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: Config,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a running registry's gRPC health and exit 0 only if every
    /// service asked about is SERVING (for `helm test` and exec probes: the
    /// image has no shell and no grpcurl).
    Health(HealthArgs),
    /// Read a token or API key from stdin (one line) and print its SHA-256,
    /// as `--registrants-file` and `--api-keys-file` store it.
    HashKey,
}

/// `toolmesh-registry health`.
#[derive(Debug, clap::Args)]
struct HealthArgs {
    /// The registry: host:port or http://host:port, or https://host:port
    /// for a registry serving TLS.
    #[arg(long, default_value = "127.0.0.1:50051")]
    address: String,
    /// PEM CA certificates the https:// registry's certificate is
    /// verified with [default: the public roots].
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// PEM client certificate to present (a registry started with
    /// --tls-require-client-cert); with --key-file.
    #[arg(long, requires = "key_file")]
    cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(long, requires = "cert_file")]
    key_file: Option<PathBuf>,
    /// A service to check, repeatable: "" (the whole server),
    /// toolmesh.v1.ToolRegistry, toolmesh.v1.Registration [default: ""].
    #[arg(long = "service")]
    services: Vec<String>,
    /// Longest the whole check may take, e.g. 5s or 500ms.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| {
            runtime.block_on(async {
                match cli.command {
                    Some(Command::Health(args)) => health(args).await,
                    Some(Command::HashKey) => hash_key(),
                    None => serve(cli.config).await,
                }
            })
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn hash_key() -> anyhow::Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let key = toolmesh_registry::access::auth::api_keys::key_from_input(&line)
        .filter(|key| !key.is_empty())
        .ok_or_else(|| anyhow::anyhow!("no key on stdin: give it one line"))?;
    println!(
        "{}",
        toolmesh_registry::access::auth::api_keys::hash_key(key)
    );
    Ok(())
}

async fn health(args: HealthArgs) -> anyhow::Result<()> {
    let services = if args.services.is_empty() {
        vec![String::new()]
    } else {
        args.services
    };
    let tls = toolmesh_proto::tls::ClientTls::load(toolmesh_proto::tls::ClientFiles {
        ca: args.ca_file,
        cert: args.cert_file,
        key: args.key_file,
    })?;
    toolmesh_registry::serving::probe::check(&args.address, &services, args.timeout, tls).await?;
    let names: Vec<String> = services.iter().map(|s| format!("{s:?}")).collect();
    println!("{}: SERVING ({})", args.address, names.join(", "));
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    // rmcp (the MCP endpoint) would log each client's handshake whole.
    let log = toolmesh_telemetry::LogArgs {
        filter: toolmesh_telemetry::filter::quieting(&config.log.filter, "rmcp"),
        ..config.log.clone()
    };
    let _telemetry = toolmesh_telemetry::init(&log, "toolmesh-registry")?;
    toolmesh_registry::listen_and_serve(config, toolmesh_proto::shutdown::signal_received())
        .await?;
    tracing::info!("toolmesh registry stopped");
    Ok(())
}
