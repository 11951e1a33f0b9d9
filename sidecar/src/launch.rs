//! The binary's way in: its flags, each setting resolved from the flag, its
//! environment variable or the config file's key ([`crate::settings`]),
//! the port bound, and the sidecar served until a signal; and `withdraw`,
//! the preStop hook's command.
//!
//! Everything is checked before the port is bound: the config (every key,
//! every schema, every command's program), the registry, advertise and
//! listen addresses.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ArgMatches;
use clap::parser::ValueSource;
use toolmesh_proto::endpoint;
use toolmesh_proto::listen::ListenAddr;
use toolmesh_proto::tls::{ClientFiles, ClientTls, ServerFiles, ServerTls};
use toolmesh_proto::token::Token;
use toolmesh_telemetry::admin::Readiness;

use crate::SidecarError;
use crate::config::{ConfigError, SidecarConfig};
use crate::metrics::Metrics;
use crate::server::{ServeOptions, serve_with_withdraw};
use crate::settings::{Setting, admin_address};
use crate::withdraw::{self, WithdrawError, Withdrawn};

/// Where the registry is when neither `--registry` nor the config says.
pub const DEFAULT_REGISTRY: &str = "http://127.0.0.1:50051";
/// Where `ToolRuntime` listens when neither `--listen` nor the config says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50061";

/// The flags of `toolmesh-sidecar` serving; each may also come from its
/// environment variable. Precedence: flag/env, then the config file, then
/// the default.
// The fields' comments are `--help`'s text, written for a terminal.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, clap::Args)]
pub struct Flags {
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
    /// Most tasks (RunTask) this instance holds at once, running or with
    /// an end the registry has not taken yet; more are RESOURCE_EXHAUSTED.
    #[arg(long, env = "TOOLMESH_SIDECAR_MAX_TASKS", default_value_t = crate::server::DEFAULT_MAX_TASKS, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..), |n| usize::try_from(n).unwrap_or(usize::MAX)))]
    max_tasks: usize,
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
    pub log: toolmesh_telemetry::LogArgs,
}

/// The flags of `toolmesh-sidecar withdraw`.
#[derive(Debug, clap::Args)]
pub struct WithdrawFlags {
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

/// Why the sidecar could not start or stopped. Each message names the
/// setting as the user set it (flag, environment variable or config key).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A setting is unusable; the message says which and why.
    #[error("{0}")]
    Setting(String),
    /// The config file is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The `ToolRuntime` port could not be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it was refused.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error(transparent)]
    Serve(#[from] SidecarError),
    /// The withdraw request failed.
    #[error(transparent)]
    Withdraw(#[from] WithdrawError),
}

fn setting(from: &str, error: impl std::fmt::Display) -> LaunchError {
    LaunchError::Setting(format!("{from}: {error}"))
}

/// Serves the tools of `flags`' config until `shutdown` (the binary: SIGTERM
/// or SIGINT), withdrawing from the registry first when `withdraw`
/// completes (SIGUSR1). `matches` tell a flag from its environment
/// variable, so that an error names the one the user set.
pub async fn run(
    flags: Flags,
    matches: &ArgMatches,
    withdraw: impl Future<Output = ()> + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), LaunchError> {
    // Config first, ports second.
    let Some(config_file) = flags.config else {
        return Err(LaunchError::Setting("--config is required".into()));
    };
    let config = SidecarConfig::load(&config_file)?;
    for warning in config.warnings(&config_file) {
        tracing::warn!(%warning, "config");
    }
    let config_dir = config_file.parent().unwrap_or(Path::new(""));
    let tools = config.build_tools(config_dir)?;
    let mcp_servers = config.mcp_servers(config_dir)?;
    if flags.execute_token_file.is_some() {
        tracing::warn!(
            "--execute-token-file is deprecated and ignored: every Execute carries a grant the registry signs with this instance's own key (docs/security.md); remove the flag"
        );
    }
    if flags.insecure {
        tracing::warn!(
            "--insecure is deprecated and ignored: Execute always needs the registry's grant; remove the flag"
        );
    }
    let registration_token = flags
        .registration_token_file
        .as_deref()
        .map(Token::load)
        .transpose()
        .map_err(|e| LaunchError::Setting(format!("--registration-token-file {e}")))?;
    let tls = match (flags.tls_cert_file, flags.tls_key_file) {
        (Some(cert), Some(key)) => Some(
            ServerTls::load(ServerFiles {
                cert,
                key,
                client_ca: flags.tls_client_ca_file,
                require_client_cert: false,
            })
            .map_err(|e| setting("--tls-cert-file / --tls-key-file / --tls-client-ca-file", e))?,
        ),
        _ => None,
    };
    let registry_tls = ClientTls::load(ClientFiles {
        ca: flags.registry_ca_file,
        cert: flags.registry_cert_file,
        key: flags.registry_key_file,
    })
    .map_err(|e| {
        setting(
            "--registry-ca-file / --registry-cert-file / --registry-key-file",
            e,
        )
    })?;
    let setting_of = Setting {
        matches,
        config_file: &config_file,
    };
    let (registry, from) = setting_of.pick(
        "registry",
        "--registry",
        "TOOLMESH_REGISTRY",
        flags.registry,
        config.registry,
    );
    let registry = endpoint::url(&registry.unwrap_or_else(|| DEFAULT_REGISTRY.to_owned()))
        .map_err(|e| setting(&from, e))?;
    let (advertise, from) = setting_of.pick(
        "advertise",
        "--advertise",
        "TOOLMESH_ADVERTISE",
        flags.advertise,
        config.advertise,
    );
    let default_scheme = if tls.is_some() { "https" } else { "http" };
    let advertise = advertise
        .map(|a| endpoint::url_or(&a, default_scheme))
        .transpose()
        .map_err(|e| setting(&from, e))?;
    let (listen, from) = setting_of.pick(
        "listen",
        "--listen",
        "TOOLMESH_SIDECAR_LISTEN",
        flags.listen,
        config.listen,
    );
    let listen = listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let resolved = listen
        .parse::<ListenAddr>()
        .and_then(|l| l.resolve())
        .map_err(|e| setting(&from, e))?;
    let addr = resolved.addr;
    let admin = flags
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
        .map_err(|source| LaunchError::Listen { addr, source })?;
    let opts = ServeOptions {
        registry,
        advertise,
        instance_id: flags.instance_id.or(config.instance_id),
        max_concurrent_streams: flags.max_concurrent_streams,
        execute_key: None,
        grant_max_age: Some(flags.grant_max_age),
        registration_token,
        tls,
        registry_tls: Some(registry_tls),
        registry_identity: flags.registry_identity,
        metrics: Some(Metrics::new()),
        readiness: Some(Readiness::not_ready("starting")),
        admin,
        mcp_servers,
        max_tasks: Some(flags.max_tasks),
    };
    serve_with_withdraw(listener, tools, opts, withdraw, shutdown).await?;
    Ok(())
}

/// `toolmesh-sidecar withdraw`: tells the sidecar `flags` name to withdraw
/// and waits until it has. Returns what to print.
pub async fn request_withdraw(
    flags: WithdrawFlags,
    matches: &ArgMatches,
) -> Result<String, LaunchError> {
    let (listen, from) = match (flags.listen, &flags.config) {
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
    let addr = withdraw::target(&listen).map_err(|e| setting(&from, e))?;
    let tls = flags
        .tls_cert_file
        .map(ClientTls::pinned)
        .transpose()
        .map_err(|e| LaunchError::Setting(format!("--tls-cert-file {e}")))?;
    let pid = flags.pid;
    Ok(
        match withdraw::request(pid, addr, flags.timeout, tls).await? {
            Withdrawn::Now => format!(
                "the sidecar on {addr} (pid {pid}) withdrew from the registry; it serves calls until SIGTERM"
            ),
            Withdrawn::NotServingBefore => format!(
                "the sidecar on {addr} (pid {pid}) was not serving (not announced yet, or withdrawn already); it was told to withdraw"
            ),
        },
    )
}
