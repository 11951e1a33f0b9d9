//! `toolmesh-sidecar`: serves the tools of a YAML config and keeps them
//! announced to the registry. SIGTERM / SIGINT shut it down gracefully;
//! SIGUSR1 makes it withdraw from the registry and keep serving until then.
//! `toolmesh-sidecar withdraw` sends that SIGUSR1, for Kubernetes' `preStop`
//! hook ([`toolmesh_sidecar::withdraw`]).
//!
//! Everything is checked before the port is bound: the config (every key,
//! every schema, every command's program), the registry, advertise and
//! listen addresses. Any error ends it with exit code 1 and one line on
//! stderr, `error: ...`, each cause said once.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use toolmesh_proto::endpoint;
use toolmesh_proto::listen::ListenAddr;
use toolmesh_proto::tls::{ClientFiles, ClientTls, ServerFiles, ServerTls};
use toolmesh_proto::token::Token;
use toolmesh_sidecar::admin::Admin;
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_sidecar::metrics::Metrics;
use toolmesh_sidecar::server::{ServeOptions, serve_with_withdraw};
use toolmesh_sidecar::settings::{Setting, admin_address};
use toolmesh_sidecar::withdraw::{self, Withdrawn};
use toolmesh_telemetry::admin::Readiness;

const DEFAULT_REGISTRY: &str = "http://127.0.0.1:50051";
const DEFAULT_LISTEN: &str = "127.0.0.1:50061";

/// glibc's malloc serializes the many small allocations of gRPC serving on
/// its arena locks; mimalloc does not (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line; each flag may also come from its environment variable.
/// Precedence: flag/env, then the config file, then the default.
#[derive(Debug, Parser)]
#[command(
    name = "toolmesh-sidecar",
    version,
    about,
    after_help = AFTER_HELP,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Another command instead of serving.
    #[command(subcommand)]
    command: Option<Command>,
    /// YAML file declaring the tools.
    #[arg(long, env = "TOOLMESH_SIDECAR_CONFIG", required = true)]
    config: Option<PathBuf>,
    /// Registry address, host:port or http://host:port, or
    /// https://host:port for a registry serving TLS [default: http://127.0.0.1:50051].
    #[arg(long, env = "TOOLMESH_REGISTRY")]
    registry: Option<String>,
    /// PEM CA certificates the https:// registry's certificate is verified
    /// with [default: the public roots].
    #[arg(long, env = "TOOLMESH_REGISTRY_CA_FILE")]
    registry_ca_file: Option<PathBuf>,
    /// PEM client certificate this sidecar presents to an https://
    /// registry; with --registry-key-file.
    #[arg(
        long,
        env = "TOOLMESH_REGISTRY_CERT_FILE",
        requires = "registry_key_file"
    )]
    registry_cert_file: Option<PathBuf>,
    /// PEM private key of --registry-cert-file.
    #[arg(
        long,
        env = "TOOLMESH_REGISTRY_KEY_FILE",
        requires = "registry_cert_file"
    )]
    registry_key_file: Option<PathBuf>,
    /// Address to serve ToolRuntime on: IP:port, or host:port if the name
    /// resolves [default: 127.0.0.1:50061].
    #[arg(long, env = "TOOLMESH_SIDECAR_LISTEN")]
    listen: Option<String>,
    /// Address the registry dials to reach this sidecar, host:port,
    /// http://host:port or https://host:port [default: http://<listen>,
    /// https://<listen> with --tls-cert-file].
    #[arg(long, env = "TOOLMESH_ADVERTISE")]
    advertise: Option<String>,
    /// Stable instance id [default: <hostname>-<random 8 hex>].
    #[arg(long, env = "TOOLMESH_INSTANCE_ID")]
    instance_id: Option<String>,
    /// HTTP/2 MAX_CONCURRENT_STREAMS: calls one connection may have in
    /// flight [default: 1024].
    #[arg(long, env = "TOOLMESH_SIDECAR_MAX_CONCURRENT_STREAMS", value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_streams: Option<u32>,
    /// Deprecated and ignored: every Execute carries a grant the registry
    /// signs with this instance's own key, which replaces the shared
    /// token. Kept so that a command line naming it still starts.
    #[arg(long, env = "TOOLMESH_EXECUTE_TOKEN_FILE", hide = true)]
    execute_token_file: Option<PathBuf>,
    /// Deprecated and ignored: Execute always needs the registry's grant,
    /// so there is nothing left for it to open.
    #[arg(long, env = "TOOLMESH_SIDECAR_INSECURE", hide = true)]
    insecure: bool,
    /// How far from this sidecar's clock the issue time of an Execute
    /// grant may be (the registry's and this host's clocks may differ by
    /// less than this).
    #[arg(long, env = "TOOLMESH_GRANT_MAX_AGE", value_parser = humantime::parse_duration, default_value = "60s")]
    grant_max_age: Duration,
    /// File holding the token this sidecar registers with: one of the
    /// registry's --registrants-file credentials.
    #[arg(long, env = "TOOLMESH_REGISTRATION_TOKEN_FILE")]
    registration_token_file: Option<PathBuf>,
    /// PEM certificate chain to serve ToolRuntime and health over TLS;
    /// with --tls-key-file. The advertised endpoint is then https://, and
    /// the certificate must name its host.
    #[arg(
        long,
        env = "TOOLMESH_SIDECAR_TLS_CERT_FILE",
        requires = "tls_key_file"
    )]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(
        long,
        env = "TOOLMESH_SIDECAR_TLS_KEY_FILE",
        requires = "tls_cert_file"
    )]
    tls_key_file: Option<PathBuf>,
    /// PEM CA certificates that client certificates (the registry's
    /// --sidecar-cert-file) are verified with.
    #[arg(
        long,
        env = "TOOLMESH_SIDECAR_TLS_CLIENT_CA_FILE",
        requires = "tls_cert_file"
    )]
    tls_client_ca_file: Option<PathBuf>,
    /// Take Execute calls only from a client certificate, verified with
    /// --tls-client-ca-file, that carries this identity (a URI SAN such
    /// as spiffe://..., or a DNS SAN), on top of the call's grant.
    #[arg(
        long,
        env = "TOOLMESH_REGISTRY_IDENTITY",
        requires = "tls_client_ca_file"
    )]
    registry_identity: Option<String>,
    /// Address of the admin HTTP port (GET /metrics, /livez, /readyz):
    /// IP:port, or host:port if the name resolves; must differ from
    /// --listen [default: off].
    #[arg(long, env = "TOOLMESH_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Logging: `--log` and `--log-format`.
    #[command(flatten)]
    log: toolmesh_telemetry::LogArgs,
}

const AFTER_HELP: &str = "\
Health: grpc.health.v1.Health on the --listen port, for the services \"\" and
toolmesh.v1.ToolRuntime: NOT_SERVING until the first announce succeeded,
SERVING from then on (also while a lost lease is announced again), and
NOT_SERVING again once withdrawn.

Admin port (--admin-listen): GET /metrics (OpenMetrics text), GET /livez
(200 while the process answers), GET /readyz (200 as health says SERVING, 503
from the start of a withdraw on).

Signals: SIGTERM or SIGINT: withdraw, finish the calls in flight (up to 10s),
exit. SIGUSR1: withdraw, keep serving calls until SIGTERM
(`toolmesh-sidecar withdraw` sends it).";

#[derive(Debug, Subcommand)]
enum Command {
    /// Make the sidecar running in this container withdraw from the
    /// registry, for Kubernetes' preStop hook.
    #[command(long_about = WITHDRAW_ABOUT)]
    Withdraw(WithdrawArgs),
}

const WITHDRAW_ABOUT: &str = "\
Make the sidecar running in this container withdraw from the registry, for
Kubernetes' preStop hook (the image has no shell: the hook runs this binary).

It checks that the sidecar's health answers on --listen, sends SIGUSR1 to
--pid, and waits until the sidecar reports NOT_SERVING, which it does once the
registry answered its Withdraw. The sidecar stops announcing, keeps serving
calls (those in flight, and any the registry still sends) until SIGTERM, then
finishes them and exits. Exit status 0 once withdrawn, 1 with one line on
stderr otherwise.";

/// `toolmesh-sidecar withdraw`.
#[derive(Debug, clap::Args)]
struct WithdrawArgs {
    /// The sidecar's process id: 1 is the sidecar in its own container.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
    pid: i32,
    /// Where the sidecar listens (its --listen); 0.0.0.0 is reached on
    /// 127.0.0.1 [default: the `listen` key of --config, else 127.0.0.1:50061].
    #[arg(long, env = "TOOLMESH_SIDECAR_LISTEN")]
    listen: Option<String>,
    /// The sidecar's YAML file, read only for its `listen` key when
    /// --listen is not set.
    #[arg(long, env = "TOOLMESH_SIDECAR_CONFIG")]
    config: Option<PathBuf>,
    /// Longest to wait for the sidecar to withdraw, e.g. 5s or 500ms.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// The sidecar's --tls-cert-file, when it serves TLS: its health is
    /// reached over TLS, trusting exactly that certificate.
    #[arg(long, env = "TOOLMESH_SIDECAR_TLS_CERT_FILE")]
    tls_cert_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    // Before anything else: until it is handled, SIGUSR1 ends the process.
    let withdraw = toolmesh_sidecar::shutdown::withdraw_requested();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::Withdraw(args)) => request_withdraw(args, &matches).await,
        None => run(cli, &matches, withdraw).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", toolmesh_telemetry::causes(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// `toolmesh-sidecar withdraw`.
async fn request_withdraw(args: WithdrawArgs, matches: &ArgMatches) -> anyhow::Result<()> {
    let matches = matches
        .subcommand_matches("withdraw")
        .context("no withdraw arguments")?;
    let (listen, from) = match (args.listen, &args.config) {
        (Some(listen), _) => {
            let from = match matches.value_source("listen") {
                Some(ValueSource::EnvVariable) => "TOOLMESH_SIDECAR_LISTEN",
                _ => "--listen",
            };
            (listen, from.to_owned())
        }
        (None, Some(file)) => match SidecarConfig::load(file)?.listen {
            Some(listen) => (listen, format!("{}: listen", file.display())),
            None => (DEFAULT_LISTEN.to_owned(), "--listen".to_owned()),
        },
        (None, None) => (DEFAULT_LISTEN.to_owned(), "--listen".to_owned()),
    };
    let addr = withdraw::target(&listen).map_err(|e| anyhow!("{from}: {e}"))?;
    let tls = args
        .tls_cert_file
        .map(ClientTls::pinned)
        .transpose()
        .map_err(|e| anyhow!("--tls-cert-file {e}"))?;
    match withdraw::request(args.pid, addr, args.timeout, tls).await? {
        Withdrawn::Now => println!(
            "the sidecar on {addr} (pid {}) withdrew from the registry; it serves calls until SIGTERM",
            args.pid
        ),
        Withdrawn::NotServingBefore => println!(
            "the sidecar on {addr} (pid {}) was not serving (not announced yet, or withdrawn already); it was told to withdraw",
            args.pid
        ),
    }
    Ok(())
}

async fn run(
    cli: Cli,
    matches: &ArgMatches,
    withdraw: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let log = toolmesh_telemetry::LogArgs {
        filter: toolmesh_telemetry::filter::quieting(&cli.log.filter, "rmcp"),
        ..cli.log.clone()
    };
    let _telemetry = toolmesh_telemetry::init(&log, "toolmesh-sidecar")?;

    // Config first, ports second.
    let Some(config_file) = cli.config else {
        anyhow::bail!("--config is required");
    };
    let config = SidecarConfig::load(&config_file)?;
    for warning in config.warnings(&config_file) {
        tracing::warn!(%warning, "config");
    }
    let config_dir = config_file.parent().unwrap_or(Path::new(""));
    let tools = config.build_tools(config_dir)?;
    let mcp_servers = config.mcp_servers(config_dir)?;
    if cli.execute_token_file.is_some() {
        tracing::warn!(
            "--execute-token-file is deprecated and ignored: every Execute carries a grant the registry signs with this instance's own key (docs/security.md); remove the flag"
        );
    }
    if cli.insecure {
        tracing::warn!(
            "--insecure is deprecated and ignored: Execute always needs the registry's grant; remove the flag"
        );
    }
    let registration_token = cli
        .registration_token_file
        .as_deref()
        .map(Token::load)
        .transpose()
        .map_err(|e| anyhow!("--registration-token-file {e}"))?;
    let tls = match (cli.tls_cert_file, cli.tls_key_file) {
        (Some(cert), Some(key)) => Some(
            ServerTls::load(ServerFiles {
                cert,
                key,
                client_ca: cli.tls_client_ca_file,
                require_client_cert: false,
            })
            .map_err(|e| anyhow!("--tls-cert-file / --tls-key-file / --tls-client-ca-file: {e}"))?,
        ),
        _ => None,
    };
    let registry_tls = ClientTls::load(ClientFiles {
        ca: cli.registry_ca_file,
        cert: cli.registry_cert_file,
        key: cli.registry_key_file,
    })
    .map_err(|e| anyhow!("--registry-ca-file / --registry-cert-file / --registry-key-file: {e}"))?;
    let setting = Setting {
        matches,
        config_file: &config_file,
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
    let default_scheme = if tls.is_some() { "https" } else { "http" };
    let advertise = advertise
        .map(|a| endpoint::url_or(&a, default_scheme))
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
    let admin_addr = cli
        .admin_listen
        .as_deref()
        .map(|admin| admin_address(admin, addr, matches))
        .transpose()?;
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
    let metrics = Metrics::new();
    let readiness = Readiness::not_ready("starting");
    let admin = match admin_addr {
        Some(admin_addr) => Some(
            Admin::start(admin_addr, metrics.clone(), readiness.clone())
                .await
                .with_context(|| format!("cannot listen on {admin_addr} (--admin-listen)"))?,
        ),
        None => None,
    };
    // Every port is bound before either says so.
    tracing::info!(addr = %listener.local_addr()?, tools = tools.len(), "bound");
    let opts = ServeOptions {
        registry,
        advertise,
        instance_id: cli.instance_id.or(config.instance_id),
        max_concurrent_streams: cli.max_concurrent_streams,
        execute_key: None,
        grant_max_age: Some(cli.grant_max_age),
        registration_token,
        tls,
        registry_tls: Some(registry_tls),
        registry_identity: cli.registry_identity,
        metrics: Some(metrics),
        readiness: Some(readiness),
        mcp_servers,
    };
    let served = serve_with_withdraw(
        listener,
        tools,
        opts,
        withdraw,
        toolmesh_sidecar::shutdown::signal_received(),
    )
    .await;
    if let Some(admin) = admin {
        admin.stop().await;
    }
    served?;
    Ok(())
}
