//! `toolmesh-sidecar`: serves the tools of a YAML config and keeps them
//! announced to the registry. SIGTERM / SIGINT shut it down gracefully.
//!
//! Everything is checked before the port is bound: the config (every key,
//! every schema, every command's program), the registry, advertise and
//! listen addresses. Any error ends it with exit code 1 and one line on
//! stderr, `error: ...`, each cause said once.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _, Parser};
use toolmesh_proto::endpoint;
use toolmesh_proto::listen::ListenAddr;
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
    /// Registry address, host:port or http://host:port [default: http://127.0.0.1:50051].
    #[arg(long, env = "TOOLMESH_REGISTRY")]
    registry: Option<String>,
    /// Address to serve ToolRuntime on: IP:port, or host:port if the name
    /// resolves [default: 127.0.0.1:50061].
    #[arg(long, env = "TOOLMESH_SIDECAR_LISTEN")]
    listen: Option<String>,
    /// Address the registry dials to reach this sidecar, host:port or
    /// http://host:port [default: http://<listen>].
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
async fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match run(cli, &matches).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", said_once(&error));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli, matches: &ArgMatches) -> anyhow::Result<()> {
    toolmesh_telemetry::init(&cli.log)?;

    // Config first, ports second.
    let config = SidecarConfig::load(&cli.config)?;
    let tools = config.build_tools(cli.config.parent().unwrap_or(Path::new("")))?;
    let setting = Setting {
        matches,
        config_file: &cli.config,
    };
    let (registry, from) = setting.pick(
        "registry",
        "--registry",
        "TOOLMESH_REGISTRY",
        cli.registry,
        config.registry,
    );
    let registry = endpoint::url(&registry.unwrap_or_else(|| DEFAULT_REGISTRY.to_owned()))
        .map_err(|e| anyhow!("{from}: {e}"))?;
    let (advertise, from) = setting.pick(
        "advertise",
        "--advertise",
        "TOOLMESH_ADVERTISE",
        cli.advertise,
        config.advertise,
    );
    let advertise = advertise
        .map(|a| endpoint::url(&a))
        .transpose()
        .map_err(|e| anyhow!("{from}: {e}"))?;
    let (listen, from) = setting.pick(
        "listen",
        "--listen",
        "TOOLMESH_SIDECAR_LISTEN",
        cli.listen,
        config.listen,
    );
    let listen = listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let resolved = listen
        .parse::<ListenAddr>()
        .and_then(|l| l.resolve())
        .map_err(|e| anyhow!("{from}: {e}"))?;
    let addr = resolved.addr;
    if !resolved.candidates.is_empty() {
        tracing::info!(
            %listen,
            %addr,
            addresses = resolved.candidates.len(),
            "host name resolved; listening on its first address"
        );
    }

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(addr = %listener.local_addr()?, tools = tools.len(), "bound");
    let opts = ServeOptions {
        registry,
        advertise,
        instance_id: cli.instance_id.or(config.instance_id),
    };
    serve(
        listener,
        tools,
        opts,
        toolmesh_sidecar::shutdown::signal_received(),
    )
    .await?;
    Ok(())
}

/// Where each setting comes from, to name it in an error the way the user
/// set it: the flag, its environment variable, or the config file's key.
struct Setting<'a> {
    matches: &'a ArgMatches,
    config_file: &'a Path,
}

impl Setting<'_> {
    /// The value that wins (flag or env, else the YAML key), and its name.
    fn pick(
        &self,
        id: &str,
        flag: &str,
        env: &str,
        command_line: Option<String>,
        yaml: Option<String>,
    ) -> (Option<String>, String) {
        match (command_line, yaml) {
            (Some(value), _) => {
                let name = match self.matches.value_source(id) {
                    Some(ValueSource::EnvVariable) => env,
                    _ => flag,
                };
                (Some(value), name.to_owned())
            }
            (None, Some(value)) => (Some(value), format!("{}: {id}", self.config_file.display())),
            (None, None) => (None, flag.to_owned()),
        }
    }
}

/// `error` and its causes on one line, each said once: a cause whose text
/// is already part of the line is left out.
fn said_once(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line
}
