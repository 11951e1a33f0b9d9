//! The toolmesh sidecar: runs tools next to the services that implement
//! them, and keeps them announced to the registry.
//!
//! A sidecar serves `ToolRuntime.Execute` for its tools, announces them to
//! the registry (`Registration.Announce`), heartbeats every TTL/3, announces
//! again when the registry forgets the lease, and withdraws on shutdown. Use
//! it as the `toolmesh-sidecar` binary with a YAML config ([`config`]), or
//! embed it with Rust tools ([`sdk`]).
//!
//! # Layout
//! - [`tool`]: [`Tool`] (descriptor + backend), the [`Backend`] trait,
//!   [`Outcome`] and [`BackendError`] (with its gRPC status mapping).
//! - [`arguments`]: the `arguments` shorthand compiled to JSON Schema.
//! - [`config`]: the YAML config file and building tools from it.
//! - [`backend`]: HTTP endpoint and command backends.
//! - [`runtime`]: `ToolRuntime.Execute`: deadlines, result normalization,
//!   output caps, the tonic service.
//! - `announcer` (private): announce / heartbeat / re-announce / withdraw,
//!   with backoff and jitter.
//! - [`server`]: [`server::serve`], which ties the runtime and announcer
//!   to a listener and a shutdown future.
//! - [`shutdown`]: the SIGTERM / SIGINT future a sidecar process stops on.
//! - [`sdk`]: Rust tools with schemas derived from their types, and an
//!   embedded [`sdk::Sidecar`].

mod announcer;
pub mod arguments;
pub mod backend;
pub mod config;
pub mod runtime;
pub mod sdk;
pub mod server;
pub mod shutdown;
pub mod tool;

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
    /// The registry URL is not a valid endpoint.
    #[error("invalid registry URL {url:?}: {source}")]
    InvalidRegistry {
        /// The URL given.
        url: String,
        /// Why it was refused.
        #[source]
        source: tonic::transport::Error,
    },
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(#[source] std::io::Error),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The gRPC server stopped before shutdown was requested.
    #[error("the gRPC server stopped unexpectedly")]
    Stopped,
}
