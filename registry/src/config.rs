//! The registry's settings: command-line flags, each with an environment
//! fallback. Every default is usable: the registry starts with no flags.

use std::{path::PathBuf, time::Duration};

use clap::{ArgAction, CommandFactory as _, FromArgMatches as _, Parser};
use toolmesh_proto::listen::ListenAddr;

use toolmesh_proto::tls::{ClientTls, ServerTls};

use crate::access::endpoint_policy::Allowed;
use crate::calls::ratelimit::redis::OutagePolicy;

pub mod values;

/// toolmesh registry: validates, rate-limits and proxies agents' tool calls
/// to the sidecars that announced the tools.
#[derive(Debug, Clone, Parser)]
#[command(name = "toolmesh-registry", version, about, long_about = None)]
pub struct Config {
    /// Address the gRPC server listens on: `IP:port`, or `host:port` with
    /// a host name that resolves (the first address it resolves to is used,
    /// and logged). Port 0 lets the system choose.
    #[arg(long, env = "TOOLMESH_LISTEN", default_value = "127.0.0.1:50051", value_parser = values::listen())]
    pub listen: ListenAddr,

    /// Address of the admin HTTP port: `GET /metrics` (Prometheus),
    /// `/livez`, `/readyz`. Same forms as `--listen`, and not the same
    /// address. Unset: no admin port.
    #[arg(long, env = "TOOLMESH_ADMIN_LISTEN", value_parser = values::listen())]
    pub admin_listen: Option<ListenAddr>,

    /// Address of the MCP endpoint (Streamable HTTP at `/mcp`, see
    /// `docs/mcp-endpoint.md`): same forms as `--listen`, and neither the
    /// `--listen` nor the `--admin-listen` address. Served in TLS with the
    /// `--tls-*` settings. Unset: no MCP endpoint.
    #[arg(long, env = "TOOLMESH_MCP_LISTEN", value_parser = values::listen())]
    pub mcp_listen: Option<ListenAddr>,

    /// Address of the console (server-rendered web pages for operators,
    /// see `docs/console.md`): same forms as `--listen`, an address of its
    /// own. Served in TLS with the `--tls-*` settings. Viewers sign in with
    /// an agent's credential (API key or JWT); beyond loopback it needs
    /// agents authenticated, or `--insecure`. Unset: no console.
    #[arg(long, env = "TOOLMESH_CONSOLE_LISTEN", value_parser = values::listen())]
    pub console_listen: Option<ListenAddr>,

    /// How long a console sign-in lasts; the credential behind it is
    /// checked again on every page, so revoking it ends the session too.
    #[arg(long, env = "TOOLMESH_CONSOLE_SESSION_TTL", default_value = "8h", value_parser = values::duration())]
    pub console_session_ttl: Duration,

    /// Longest an MCP `tools/call` may take (MCP requests carry no
    /// deadline): a call's deadline is the tool's timeout, capped by this.
    #[arg(long, env = "TOOLMESH_MCP_CALL_TIMEOUT", default_value = "60s", value_parser = values::duration())]
    pub mcp_call_timeout: Duration,

    /// Most MCP sessions (protocol revisions before 2026-07-28) open at
    /// once, and, separately, most `subscriptions/listen` streams
    /// (2026-07-28); a new one beyond is refused (HTTP 503).
    #[arg(long, env = "TOOLMESH_MCP_MAX_SESSIONS", default_value_t = 1024)]
    pub mcp_max_sessions: usize,

    /// An MCP session without a request for this long is closed (its
    /// client starts a new one).
    #[arg(long, env = "TOOLMESH_MCP_SESSION_IDLE_TIMEOUT", default_value = "5m", value_parser = values::duration())]
    pub mcp_session_idle_timeout: Duration,

    /// Most tools on one page of MCP `tools/list`; the rest follow by
    /// cursor.
    #[arg(long, env = "TOOLMESH_MCP_PAGE_SIZE", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub mcp_page_size: u32,

    /// Offer MCP clients the registry's search as a tool,
    /// `toolmesh.search_tools` (a catalog tool of that name takes its
    /// place). `false` turns it off.
    #[arg(long, env = "TOOLMESH_MCP_SEARCH_TOOL", action = ArgAction::Set, default_value_t = true, value_name = "true|false")]
    pub mcp_search_tool: bool,

    /// What MCP `tools/list` lists: `full`, every tool the caller may
    /// see; `progressive`, only `toolmesh.search_tools` and
    /// `toolmesh.call_tool`, which calls the tool a search found (by name,
    /// with its own schema, limits and policy), for hosts with a small
    /// tool budget. Catalog tools stay callable by name in both.
    #[arg(long, env = "TOOLMESH_MCP_DISCOVERY", value_enum, default_value_t = McpDiscovery::Full)]
    pub mcp_discovery: McpDiscovery,

    /// A sentence-transformers model directory (`config.json`,
    /// `tokenizer.json`, `model.safetensors`, the pooling config) that
    /// `SearchTools` ranks with, blended with BM25 (`docs/search.md`).
    /// Loaded at start; a directory that does not load stops the registry
    /// with the file and the problem. Unset: BM25 alone.
    #[arg(long, env = "TOOLMESH_SEARCH_MODEL", value_name = "DIR")]
    pub search_model: Option<PathBuf>,

    /// Threads that embed search queries (with `--search-model`), at a
    /// lower priority than calls; at most four searches per thread are
    /// embedded at once, the rest are ranked by BM25.
    #[arg(long, env = "TOOLMESH_SEARCH_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub search_threads: u16,

    /// `Host` headers the MCP endpoint answers, comma-separated (`host` or
    /// `host:port`), against DNS rebinding. Empty: `localhost`,
    /// `127.0.0.1` and `::1` when `--mcp-listen` is on loopback, any host
    /// otherwise (beyond loopback, callers authenticate).
    #[arg(long, env = "TOOLMESH_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,

    /// Browser origins allowed to call the MCP endpoint, comma-separated
    /// (`https://app.example.com:443`, `http://localhost:*`). A request
    /// with any other `Origin` header is refused (HTTP 403); requests
    /// without one (every non-browser client) pass.
    #[arg(long, env = "TOOLMESH_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub mcp_allowed_origins: Vec<String>,

    /// Most distinct tool names with their own `tool` label value in the
    /// metrics; calls of later ones are counted under `(other)`.
    #[arg(long, env = "TOOLMESH_METRICS_MAX_TOOLS", default_value_t = crate::metrics::DEFAULT_MAX_TOOLS)]
    pub metrics_max_tools: usize,

    /// How long a sidecar's lease lasts without a heartbeat (sidecars
    /// heartbeat every third of it).
    #[arg(long, env = "TOOLMESH_LEASE_TTL", default_value = "10s", value_parser = values::duration())]
    pub lease_ttl: Duration,

    /// Timeout of tools whose descriptor declares none.
    #[arg(long, env = "TOOLMESH_DEFAULT_TIMEOUT", default_value = "30s", value_parser = values::duration())]
    pub default_timeout: Duration,

    /// Largest `arguments_json` an Invoke may carry, in bytes.
    #[arg(long, env = "TOOLMESH_MAX_ARGUMENTS_BYTES", default_value_t = 1 << 20)]
    pub max_arguments_bytes: usize,

    /// Largest gRPC message accepted or sent, in bytes (results included).
    #[arg(long, env = "TOOLMESH_MAX_MESSAGE_BYTES", default_value_t = 4 << 20)]
    pub max_message_bytes: usize,

    /// How long to wait for a sidecar connection before trying another instance.
    #[arg(long, env = "TOOLMESH_CONNECT_TIMEOUT", default_value = "2s", value_parser = values::duration())]
    pub connect_timeout: Duration,

    /// Most live sidecar instances the catalog holds.
    #[arg(long, env = "TOOLMESH_MAX_INSTANCES", default_value_t = 10_000)]
    pub max_instances: usize,

    /// Most distinct tools the catalog holds.
    #[arg(long, env = "TOOLMESH_MAX_TOOLS", default_value_t = 10_000)]
    pub max_tools: usize,

    /// How long the outcome of a call with an idempotency key is kept for
    /// repeats.
    #[arg(long, env = "TOOLMESH_IDEMPOTENCY_RETENTION", default_value = "24h", value_parser = values::duration())]
    pub idempotency_retention: Duration,

    /// Most idempotency records kept in memory (embedded mode); the oldest
    /// completed ones are evicted first.
    #[arg(long, env = "TOOLMESH_IDEMPOTENCY_CAPACITY", default_value_t = 100_000)]
    pub idempotency_capacity: usize,

    /// How long a task is kept once it is over (then GetTask answers
    /// NOT_FOUND).
    #[arg(long, env = "TOOLMESH_TASK_RETENTION", default_value = "1h", value_parser = values::duration())]
    pub task_retention: Duration,

    /// Most live tasks (working or waiting) in all; a start past it is
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "TOOLMESH_MAX_TASKS", default_value_t = 1000)]
    pub max_tasks: usize,

    /// Most live tasks of one caller.
    #[arg(long, env = "TOOLMESH_MAX_TASKS_PER_CALLER", default_value_t = 100)]
    pub max_tasks_per_caller: usize,

    /// Longest `timeout` a tool may declare; an announce with a longer one
    /// is refused.
    #[arg(long, env = "TOOLMESH_MAX_TOOL_TIMEOUT", default_value = "1h", value_parser = values::duration())]
    pub max_tool_timeout: Duration,

    /// Most bytes of descriptions and schemas one announce may carry, all
    /// its tools together: what one instance can add to every ListTools.
    #[arg(long, env = "TOOLMESH_MAX_ANNOUNCE_BYTES", default_value_t = 1 << 20)]
    pub max_announce_bytes: usize,

    /// Hosts announced endpoints may name, comma-separated: CIDRs and IP
    /// addresses (`10.0.0.0/8`), host names and `*.suffix` patterns
    /// (`*.svc.cluster.local`). Empty: any host. Set it in production:
    /// the registry sends agents' arguments wherever endpoints point.
    #[arg(long, env = "TOOLMESH_ENDPOINT_ALLOW", value_delimiter = ',')]
    pub endpoint_allow: Vec<Allowed>,

    /// Deprecated and ignored: every `Execute` carries a grant signed
    /// with the key its sidecar announced ([`toolmesh_proto::grant`]),
    /// which replaces the token this file held. Kept so that a command
    /// line that names it still starts, with a warning.
    #[arg(long, env = "TOOLMESH_EXECUTE_TOKEN_FILE", hide = true)]
    pub execute_token_file: Option<PathBuf>,

    /// YAML file of the credentials sidecars register with, each with the
    /// tool-name patterns it may announce (see `docs/security.md`). Unset:
    /// registration is open to any client that reaches the registry.
    #[arg(long, env = "TOOLMESH_REGISTRANTS_FILE")]
    pub registrants_file: Option<PathBuf>,

    /// YAML file of agents' API keys, stored as SHA-256 digests, each
    /// naming its caller (see `docs/auth.md`). Agents present a key as
    /// `authorization: Bearer <key>`.
    #[arg(long, env = "TOOLMESH_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Public keys that sign agents' JWTs (RS256, ES256, EdDSA): PEM public
    /// keys, or a JWKS JSON file.
    #[arg(long, env = "TOOLMESH_JWT_KEYS_FILE")]
    pub jwt_keys_file: Option<PathBuf>,

    /// The `iss` a JWT must carry; unset: any.
    #[arg(long, env = "TOOLMESH_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,

    /// The `aud` a JWT must carry; unset: any.
    #[arg(long, env = "TOOLMESH_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,

    /// Clock skew allowed on `exp` and `nbf`.
    #[arg(long, env = "TOOLMESH_JWT_LEEWAY", default_value = "60s", value_parser = values::duration())]
    pub jwt_leeway: Duration,

    /// The JWT claim naming the caller.
    #[arg(long, env = "TOOLMESH_JWT_CALLER_CLAIM", default_value = "sub")]
    pub jwt_caller_claim: String,

    /// The JWT claim listing the caller's groups.
    #[arg(long, env = "TOOLMESH_JWT_GROUPS_CLAIM", default_value = "groups")]
    pub jwt_groups_claim: String,

    /// YAML file of which callers and groups may call which tools; agents
    /// see only those (see `docs/auth.md`). Reloaded when it changes.
    /// Unset: every authenticated caller may call every tool.
    #[arg(long, env = "TOOLMESH_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,

    /// YAML file of the operator's say over tool versions: each tool's
    /// default version, a split of calls by weight between versions, the
    /// versions deprecated (see `docs/versions.md`). Reloaded when it
    /// changes. Unset: a call by name goes to the highest release.
    #[arg(long, env = "TOOLMESH_VERSIONS_FILE")]
    pub versions_file: Option<PathBuf>,

    /// YAML file pinning tools to approved definitions, with a mode per
    /// tool pattern (`enforce`, `warn`, `trust-on-first-use`): a definition
    /// that is not the pinned one is held in quarantine, not served (see
    /// `docs/versions.md`). Reloaded when it changes; pins made at run time
    /// live in Redis when `--redis` is set. Unset: no pins.
    #[arg(long, env = "TOOLMESH_PINS_FILE")]
    pub pins_file: Option<PathBuf>,

    /// Where the audit log goes: `-` for standard output, or a file
    /// (appended to). One JSON line per Invoke and per registration change
    /// (see `docs/audit.md`). Unset: no audit log.
    #[arg(long, env = "TOOLMESH_AUDIT_LOG")]
    pub audit_log: Option<String>,

    /// Listen beyond loopback even with agents or registration
    /// unauthenticated (and warn at start). Without it the registry refuses
    /// to.
    #[arg(long, env = "TOOLMESH_INSECURE")]
    pub insecure: bool,
    /// PEM certificate chain to serve TLS with (every service, on the one
    /// listener); with `--tls-key-file`. Unset: plaintext. Read again when
    /// it changes.
    #[arg(long, env = "TOOLMESH_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of `--tls-cert-file`.
    #[arg(long, env = "TOOLMESH_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,

    /// PEM CA certificates that agents' and sidecars' client certificates
    /// are verified with: a client certificate is asked for, and verified
    /// if presented (see `--tls-require-client-cert`).
    #[arg(long, env = "TOOLMESH_TLS_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub tls_client_ca_file: Option<PathBuf>,

    /// Refuse connections without a client certificate signed by
    /// `--tls-client-ca-file`.
    #[arg(
        long,
        env = "TOOLMESH_TLS_REQUIRE_CLIENT_CERT",
        requires = "tls_client_ca_file"
    )]
    pub tls_require_client_cert: bool,

    /// The listener's TLS settings: built from the `--tls-*` files by
    /// [`crate::Registry::from_config`], or set by a program embedding the
    /// registry. `None`: plaintext.
    #[arg(skip)]
    pub tls: Option<ServerTls>,

    /// PEM CA certificates that `https://` sidecars' certificates are
    /// verified with. Unset: the public roots (webpki-roots).
    #[arg(long, env = "TOOLMESH_SIDECAR_CA_FILE")]
    pub sidecar_ca_file: Option<PathBuf>,

    /// PEM client certificate the registry presents to `https://`
    /// sidecars (its identity for their `--registry-identity`); with
    /// `--sidecar-key-file`.
    #[arg(
        long,
        env = "TOOLMESH_SIDECAR_CERT_FILE",
        requires = "sidecar_key_file"
    )]
    pub sidecar_cert_file: Option<PathBuf>,

    /// PEM private key of `--sidecar-cert-file`.
    #[arg(
        long,
        env = "TOOLMESH_SIDECAR_KEY_FILE",
        requires = "sidecar_cert_file"
    )]
    pub sidecar_key_file: Option<PathBuf>,

    /// TLS settings for `https://` sidecars: built from the `--sidecar-*`
    /// files by [`crate::Registry::from_config`], or set by a program
    /// embedding the registry. `None`: the public roots, no client
    /// certificate.
    #[arg(skip)]
    pub sidecar_tls: Option<ClientTls>,

    /// Threads that serve agents' connections, each a runtime of its own
    /// that a call never leaves (see `serving::workers`) [default: one per
    /// CPU the process may use, its cgroup quota included].
    #[arg(long, env = "TOOLMESH_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: Option<u16>,

    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: most calls and streams one
    /// connection may have open at once.
    #[arg(long, env = "TOOLMESH_MAX_CONCURRENT_STREAMS", default_value_t = 256)]
    pub max_concurrent_streams: u32,

    /// Most WatchTools streams open at once.
    #[arg(long, env = "TOOLMESH_MAX_WATCHERS", default_value_t = 1024)]
    pub max_watchers: usize,

    /// Most WatchTools streams open at once on one connection.
    #[arg(
        long,
        env = "TOOLMESH_MAX_WATCHERS_PER_CONNECTION",
        default_value_t = 16
    )]
    pub max_watchers_per_connection: usize,

    /// A watcher this many events behind is ended with ABORTED (it watches
    /// again and gets the full list).
    #[arg(long, env = "TOOLMESH_WATCH_LAG_EVENTS", default_value_t = 512)]
    pub watch_lag_events: usize,

    /// A watcher this many bytes of events behind is ended with ABORTED.
    #[arg(long, env = "TOOLMESH_WATCH_LAG_BYTES", default_value_t = 16 << 20)]
    pub watch_lag_bytes: u64,

    /// On shutdown, how long health reports NOT_SERVING while calls are
    /// still taken, so load balancers stop sending new ones first (a few
    /// seconds on Kubernetes).
    #[arg(long, env = "TOOLMESH_SHUTDOWN_DELAY", default_value = "0s", value_parser = values::duration())]
    pub shutdown_delay: Duration,

    /// On shutdown, how long in-flight calls may take to finish.
    #[arg(long, env = "TOOLMESH_SHUTDOWN_GRACE", default_value = "10s", value_parser = values::duration())]
    pub shutdown_grace: Duration,

    /// Redis URL (`redis://host:port/db`, `rediss://` for TLS): replicas
    /// share the catalog and the rate limits there. Unset: embedded mode.
    /// The password never goes here: see `--redis-password-file` and
    /// `TOOLMESH_REDIS_PASSWORD`.
    #[arg(long, env = "TOOLMESH_REDIS_URL")]
    pub redis: Option<String>,

    /// `--redis` is a seed node of a Redis Cluster.
    #[arg(long, env = "TOOLMESH_REDIS_CLUSTER")]
    pub redis_cluster: bool,

    /// File holding the Redis password (else `TOOLMESH_REDIS_PASSWORD`).
    #[arg(long, env = "TOOLMESH_REDIS_PASSWORD_FILE")]
    pub redis_password_file: Option<PathBuf>,

    /// PEM file of the CA that signed the Redis server's certificate, for
    /// `rediss://` servers not signed by a public CA.
    #[arg(long, env = "TOOLMESH_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,

    /// Multiplexed Redis connections per serving thread (each thread calls
    /// Redis on its own, so a rate-limited call never changes threads), and
    /// as many for background work. One pipelines every call and batches
    /// best; more help only when one connection's I/O task is the
    /// bottleneck.
    #[arg(long, env = "TOOLMESH_REDIS_POOL_SIZE", default_value_t = 1)]
    pub redis_pool_size: usize,

    /// Deadline of every Redis call.
    #[arg(long, env = "TOOLMESH_REDIS_TIMEOUT", default_value = "250ms", value_parser = values::duration())]
    pub redis_timeout: Duration,

    /// Hash tag the catalog's keys live under, so deployments can share a
    /// Redis.
    #[arg(long, env = "TOOLMESH_REDIS_PREFIX", default_value = "toolmesh")]
    pub redis_prefix: String,

    /// While Redis is away: `fail-closed` refuses calls to rate-limited tools
    /// (UNAVAILABLE); `degrade` enforces each replica's share of the limit
    /// locally (rate / live replicas).
    #[arg(
        long,
        env = "TOOLMESH_REDIS_OUTAGE",
        value_enum,
        default_value = "fail-closed"
    )]
    pub redis_outage: OutagePolicy,

    /// Logging: `--log` and `--log-format`.
    #[command(flatten)]
    pub log: toolmesh_telemetry::LogArgs,

    /// One `info` line per Invoke (`toolmesh_registry::call_log`): tool,
    /// outcome, latency, instance, attempts, and whether it was an
    /// idempotency replay; never arguments or results. `false` turns it off.
    #[arg(long, env = "TOOLMESH_LOG_CALLS", action = ArgAction::Set, default_value_t = true, value_name = "true|false")]
    pub log_calls: bool,
}

/// What MCP `tools/list` lists (`--mcp-discovery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum McpDiscovery {
    /// Every tool the caller may see.
    Full,
    /// The search tool and the call tool alone.
    Progressive,
}

impl Default for Config {
    /// What `toolmesh-registry` runs with given no flag and no environment
    /// variable: each default is written once, in its flag's attribute.
    fn default() -> Self {
        let matches = Self::command()
            .mut_args(|arg| arg.env(None::<&str>))
            .try_get_matches_from(["toolmesh-registry"]);
        match matches.and_then(|matches| Self::from_arg_matches(&matches)) {
            Ok(config) => config,
            // The flags' own definitions, not anything a user gave.
            Err(error) => unreachable!("the registry's flags parse without values: {error}"),
        }
    }
}

/// The environment variable the Redis password may come from.
pub const REDIS_PASSWORD_ENV: &str = "TOOLMESH_REDIS_PASSWORD";

impl Config {
    /// What is open to anyone who reaches the listener: agents' calls
    /// without `--api-keys-file` or `--jwt-keys-file`, registration without
    /// `--registrants-file`.
    pub fn unauthenticated(&self) -> Vec<&'static str> {
        let mut open = Vec::new();
        if self.api_keys_file.is_none() && self.jwt_keys_file.is_none() {
            open.push("agents (no --api-keys-file or --jwt-keys-file)");
        }
        if self.registrants_file.is_none() {
            open.push("registration (no --registrants-file)");
        }
        open
    }

    /// The listener's TLS settings from the `--tls-*` files; `None`
    /// without `--tls-cert-file`.
    pub fn load_server_tls(&self) -> Result<Option<ServerTls>, String> {
        let (Some(cert), Some(key)) = (&self.tls_cert_file, &self.tls_key_file) else {
            return Ok(None);
        };
        ServerTls::load(toolmesh_proto::tls::ServerFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca_file.clone(),
            require_client_cert: self.tls_require_client_cert,
        })
        .map(Some)
        .map_err(|e| format!("--tls-cert-file / --tls-key-file / --tls-client-ca-file: {e}"))
    }

    /// The TLS settings for `https://` sidecars from the `--sidecar-*`
    /// files.
    pub fn load_sidecar_tls(&self) -> Result<ClientTls, String> {
        ClientTls::load(toolmesh_proto::tls::ClientFiles {
            ca: self.sidecar_ca_file.clone(),
            cert: self.sidecar_cert_file.clone(),
            key: self.sidecar_key_file.clone(),
        })
        .map_err(|e| format!("--sidecar-ca-file / --sidecar-cert-file / --sidecar-key-file: {e}"))
    }

    /// The Redis password: from `--redis-password-file`, else from
    /// `TOOLMESH_REDIS_PASSWORD`. A password inside `--redis` is refused, so
    /// it never shows in a process list.
    pub fn redis_password(&self) -> Result<Option<String>, String> {
        if let Some(url) = &self.redis {
            let parsed = url::Url::parse(url).map_err(|e| format!("--redis {url:?}: {e}"))?;
            if parsed.password().is_some() {
                return Err(format!(
                    "--redis must not carry a password; use --redis-password-file or {REDIS_PASSWORD_ENV}"
                ));
            }
        }
        if let Some(path) = &self.redis_password_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--redis-password-file {}: {e}", path.display()))?;
            return Ok(Some(text.trim_end_matches(['\r', '\n']).to_owned()));
        }
        Ok(std::env::var(REDIS_PASSWORD_ENV)
            .ok()
            .filter(|p| !p.is_empty()))
    }
}

#[cfg(test)]
mod tests;
