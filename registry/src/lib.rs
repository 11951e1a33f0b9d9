//! The toolmesh registry: agents discover and invoke tools through it; it
//! validates every call against the tool's JSON Schema, applies the tool's
//! rate limit, and proxies the call to a healthy sidecar.
//!
//! # Layout
//! By part (the whole picture, and one `Invoke` file by file:
//! `docs/architecture.md`). The binary builds a [`Registry`] from
//! [`Config`] and [`serve`](Registry::serve)s it.
//!
//! Serving:
//! - [`server`]: builds every part from [`Config`] and wires them; serves
//!   them (with health and reflection) and drains; the janitor.
//! - [`api`]: the two tonic services, thin over the types below.
//! - [`mcp`]: the MCP endpoint (`--mcp-listen`): the catalog for MCP
//!   clients over Streamable HTTP, calls through [`invoke`].
//! - [`watch`]: `WatchTools` streams of bounded memory, and their caps.
//! - [`connections`]: accepted sockets, cut off when the shutdown grace
//!   period is over.
//! - [`readiness`]: NOT_SERVING until the catalog is loaded and while
//!   draining, told to gRPC health, `/readyz` and `toolmesh_ready`.
//! - [`probe`]: `toolmesh-registry health`, a health check of a running
//!   registry.
//!
//! The call path:
//! - [`invoke`]: the `Invoke` path from lookup to answer.
//! - [`retry`]: schedules attempts on instances: retries, hedging, the
//!   retry budget.
//! - [`proxy`]: `ToolRuntime.Execute` on sidecars over pooled connections;
//!   what a failure means ([`proxy::ProxyError`]).
//! - [`balance`]: picks an instance (power of two choices on calls in
//!   flight), ejects outliers.
//! - [`ratelimit`]: GCRA per tool behind the [`ratelimit::RateLimiter`] trait.
//! - [`idempotency`]: idempotency keys, in memory or shared through Redis.
//! - [`validate`]: JSON Schema compilation and argument validation;
//!   [`strict_json`]: argument parsing that refuses duplicate keys.
//! - [`call_log`]: the one `info` line every call writes, its metrics and
//!   audit record.
//!
//! The catalog:
//! - [`catalog`]: checks announces; one compiled [`catalog::Entry`] per
//!   call.
//! - [`store`]: the engines under the catalog and the model they store
//!   ([`store::model`]): [`store::memory`] (embedded) and [`store::redis`]
//!   (shared by replicas), both serving reads from a local [`store::view`].
//! - [`redis_pool`]: Redis connections, call deadlines, the circuit breaker.
//! - [`descriptor`]: rules for tool descriptors, and how two differ.
//! - [`listing`]: `ListTools` pages, by name, with page tokens.
//! - [`export`]: `ExportTools`, the catalog in the LLM APIs' formats.
//! - [`search`]: `SearchTools`, BM25 over what a model reads of a tool.
//!
//! Access:
//! - [`access`]: who an agent is and which tools it may see and call.
//! - [`auth`]: who a caller is (API keys, JWTs) and which tools the call
//!   policy lets them call; the files reload when they change.
//! - [`registrants`]: who may register which tools (`--registrants-file`),
//!   by the same tool-name patterns as the call policy
//!   ([`auth::pattern`]).
//! - [`endpoint_policy`]: which announced endpoints the registry dials.
//! - [`audit`]: the audit log: a JSON line per call and registration
//!   change, arguments redacted by the tool's schema, written off the
//!   request path.
//!
//! Process:
//! - [`config`]: command-line flags and their environment fallbacks.
//! - [`metrics`]: the Prometheus metrics the admin port serves.
//! - [`error`]: the error type and its one mapping to `tonic::Status`.

pub mod access;
pub mod api;
pub mod audit;
pub mod auth;
pub mod balance;
pub mod call_log;
pub mod catalog;
pub mod config;
pub mod connections;
pub mod descriptor;
pub mod endpoint_policy;
pub mod error;
pub mod export;
pub mod idempotency;
pub mod invoke;
pub mod listing;
pub mod mcp;
pub mod metrics;
pub mod probe;
pub mod proxy;
pub mod ratelimit;
pub mod readiness;
pub mod redis_pool;
pub mod registrants;
pub mod retry;
pub mod search;
pub mod server;
pub mod store;
pub mod strict_json;
pub mod validate;
pub mod watch;

pub use config::Config;
pub use error::RegistryError;
pub use server::{Registry, ServeError, run, run_with_admin};
