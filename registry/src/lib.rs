//! The toolmesh registry: agents discover and invoke tools through it; it
//! validates every call against the tool's JSON Schema, applies the tool's
//! rate limit, and proxies the call to a healthy sidecar.
//!
//! # Layout
//! One folder per part (the whole picture, and one `Invoke` file by file:
//! `docs/architecture.md`). The binary builds a [`Registry`] from
//! [`Config`] and [`serve`](Registry::serve)s it.
//!
//! - [`serving`]: the process on the network. `server` builds every part
//!   from [`Config`], serves them with health and reflection, drains, and
//!   runs the janitor; `api` holds the two tonic services, thin over the
//!   parts below; `mcp` the MCP endpoint (`--mcp-listen`); `watch` the
//!   `WatchTools` streams; `connections` the accepted sockets, cut off when
//!   the grace period is over; `readiness` NOT_SERVING until the catalog is
//!   loaded and while draining; [`serving::probe`] the `health` subcommand.
//! - [`calls`]: the call path. `invoke` from lookup to answer; `retry`
//!   schedules attempts and hedges; [`calls::proxy`] runs
//!   `ToolRuntime.Execute` on sidecars and says what a failure means;
//!   `balance` picks an instance and ejects outliers;
//!   [`calls::ratelimit`] (GCRA per tool), [`calls::idempotency`], and
//!   `call_log`, the one line every call writes with its metrics and audit
//!   record.
//! - [`catalog`]: checks announces and hands a call one compiled
//!   [`catalog::Entry`]; [`catalog::store`] holds the engines (embedded
//!   memory, Redis shared by replicas) and the model they store;
//!   [`catalog::descriptor`] the descriptor rules; [`catalog::validate`]
//!   JSON Schema compilation and argument checks (over `strict_json`'s
//!   parsing that refuses duplicate keys); `listing`, `export` and
//!   [`catalog::search`] (BM25) the three ways to read it.
//!
//! No two parts use each other: serving uses every other part; tasks use
//! the call path and the catalog; the call path uses the catalog, access and the process concerns; the catalog uses
//! access and the process concerns; access uses only the error type.
//! `config` names the flag value types of the parts it configures.
//! - `tasks`: calls that outlive one request (docs/tasks.md): started
//!   through `Invoke`'s front door, run by a sidecar with no request open,
//!   reported to any replica, kept in memory or in Redis.
//! - [`access`]: who a caller is and what they may see and call:
//!   [`access::auth`] (API keys, JWTs, the call policy, files that reload),
//!   [`access::registrants`] (who may register which tools),
//!   `endpoint_policy` (which endpoints the registry dials) and `audit`
//!   (a JSON line per call and registration change, written off the
//!   request path).
//! - Process concerns: [`config`] (flags and their environment fallbacks),
//!   `metrics` (what the admin port serves), [`redis_pool`] (Redis
//!   connections, call deadlines, the circuit breaker, shared by the
//!   engines), `lanes` (which serving thread a call runs on, so that the
//!   connections it uses are that thread's own), and [`error`] (the error type and its one mapping to
//!   `tonic::Status`).

pub mod access;
pub mod calls;
pub mod catalog;
pub mod config;
pub mod error;
pub(crate) mod lanes;
pub(crate) mod metrics;
pub mod redis_pool;
pub mod serving;
pub(crate) mod tasks;

pub use config::Config;
pub use error::RegistryError;
pub use serving::server::{Registry, ServeError, listen_and_serve, run};
