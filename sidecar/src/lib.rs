//! The toolmesh sidecar: runs tools next to the services that implement
//! them, and keeps them announced to the registry.
//!
//! A sidecar serves `ToolRuntime.Execute` for its tools (and runs them as
//! tasks, `RunTask`), announces them to
//! the registry (`Registration.Announce`), heartbeats every TTL/3, announces
//! again when the registry forgets the lease, and withdraws on shutdown. Use
//! it as the `toolmesh-sidecar` binary with a YAML config ([`config`]), or
//! embed it with Rust tools ([`sdk`]).
//!
//! # Layout
//! - [`tool`]: [`Tool`] (descriptor + backend), the [`Backend`] trait,
//!   [`Outcome`] and [`BackendError`] (with its gRPC status mapping).
//! - [`context`]: [`CallContext`], who made a call and which call it is,
//!   and how each kind of backend hands it to the tool.
//! - [`arguments`]: the `arguments` shorthand compiled to JSON Schema.
//! - [`config`]: the YAML config file, its checks (every mistake said in
//!   the user's words), and building tools from it.
//! - `schema` (private): JSON Schemas compiled as the registry compiles them.
//! - [`backend`]: HTTP endpoint (a JSON body, or an answer streamed as
//!   Server-Sent Events) and command backends.
//! - [`mcp`]: MCP servers as backends: their tools listed, published and
//!   called, the servers restarted with backoff.
//! - [`toolset`]: the tools served now, fixed and from MCP servers.
//! - [`runtime`]: `ToolRuntime.Execute`: deadlines, result normalization,
//!   output caps, the tonic service; `RunTask` and `StopTask` checked the
//!   same way.
//! - `tasks` (private): the tasks this instance runs, bounded
//!   (`--max-tasks`), their progress and end reported to the registry
//!   (`Registration.ReportTask`) with backoff.
//! - [`progress`]: how a task's tool reports its progress: the
//!   [`progress::Progress`] handle of its [`CallContext`], a command's
//!   `toolmesh-progress` stderr lines, an HTTP backend's `progress`
//!   events.
//! - `announcer` (private): announce / heartbeat / re-announce / withdraw,
//!   with backoff and jitter.
//! - [`refusal`]: which announce refusals are final, and the error that
//!   ends the sidecar on one.
//! - [`health`]: `grpc.health.v1.Health` on the runtime's port: whether
//!   the registry knows this sidecar (for readiness probes); the admin
//!   port's `/readyz` says the same.
//! - [`metrics`]: the Prometheus metrics of the admin port's `/metrics`:
//!   executions, announces, heartbeats, the lease.
//! - [`server`]: [`server::serve`], which ties the runtime, health and
//!   announcer to a listener, a shutdown future and (with
//!   [`server::serve_with_withdraw`]) a withdraw request.
//! - [`shutdown`]: the signals a sidecar process acts on: SIGTERM / SIGINT
//!   (stop), SIGUSR1 (withdraw, keep serving).
//! - [`withdraw`]: `toolmesh-sidecar withdraw` (Kubernetes' `preStop`):
//!   signal the running sidecar, wait until its health says it withdrew.
//! - [`sdk`]: Rust tools with schemas derived from their types, and an
//!   embedded [`sdk::Sidecar`].

pub mod admin;
mod announcer;
pub mod arguments;
pub mod backend;
pub mod config;
pub mod context;
pub mod health;
pub mod launch;
pub mod mcp;
pub mod metrics;
pub mod progress;
pub mod refusal;
pub mod runtime;
pub mod sdk;
pub mod server;
pub mod settings;
pub mod shutdown;
mod tasks;
pub mod tool;
pub mod toolset;
pub mod withdraw;

pub use context::CallContext;
pub use tool::{Backend, BackendError, Outcome, Tool};

/// Why a sidecar could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// The tool set is unusable (empty, duplicate or invalid names).
    #[error(transparent)]
    Tools(#[from] runtime::ToolSetError),
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The registry address is not usable.
    #[error("registry: {0}")]
    InvalidRegistry(toolmesh_proto::endpoint::EndpointError),
    /// The registry address passed [`toolmesh_proto::endpoint::url`] but
    /// is not a URI the gRPC client takes.
    #[error("registry: {url:?} is not a usable URI ({reason})")]
    RegistryUri {
        /// The URL.
        url: String,
        /// The client's reason.
        reason: String,
    },
    /// The advertised address is not usable.
    #[error("advertise: {0}")]
    InvalidAdvertise(toolmesh_proto::endpoint::EndpointError),
    /// The advertised scheme is not how the sidecar serves.
    #[error(
        "advertise: {url:?} does not match how this sidecar serves ({serves}): advertise https:// with --tls-cert-file, http:// without"
    )]
    AdvertiseScheme {
        /// The advertised URL.
        url: String,
        /// How it serves: `TLS` or `plaintext`.
        serves: &'static str,
    },
    /// TLS files are unusable.
    #[error("TLS: {0}")]
    Tls(#[from] toolmesh_proto::tls::TlsError),
    /// TLS settings do not go together.
    #[error("TLS: {0}")]
    TlsSettings(&'static str),
    /// No execute key could be made for this instance.
    #[error("execute key: {0}")]
    ExecuteKey(#[from] toolmesh_proto::grant::KeyError),
    /// The registry refused the announce for good.
    #[error(transparent)]
    Refused(#[from] refusal::AnnounceRefused),
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(std::io::Error),
    /// The admin port could not be bound.
    #[error("cannot listen on {addr} (--admin-listen)")]
    AdminListen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why it was refused.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The gRPC server stopped before shutdown was requested.
    #[error("the gRPC server stopped unexpectedly")]
    Stopped,
}
