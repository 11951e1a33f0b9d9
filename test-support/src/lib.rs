//! What toolmesh's test suites share: real servers and processes on
//! loopback, and the patterns that keep timing-dependent tests honest on a
//! busy machine. Dev-only: no product code depends on it.
//!
//! # Layout
//! - [`suite`]: the full-suite switch. Under `scripts/test.sh` a test whose
//!   dependency is missing fails; under a plain `cargo test` it says so in
//!   one line that the test harness does not swallow, and returns.
//! - [`wait`]: [`wait::eventually`] and [`wait::wait_until`], polling with a
//!   deadline that names what was awaited, and [`wait::stays`].
//! - [`catalog`]: the registry's catalog through its public API: `GetTool`
//!   and `ListTools` helpers that never mistake an error for an absence.
//! - [`ports`]: loopback ports outside the kernel's ephemeral range, for
//!   servers that cannot be handed an already-bound listener.
//! - [`server`]: a server future on a bound loopback listener, stopped
//!   through a oneshot with its result checked; the registry and the
//!   sidecar served that way.
//! - [`grants`]: `Execute` straight on those sidecars, signed as the
//!   registry signs it.
//! - [`process`]: the workspace's binaries, a `toolmesh-sidecar` process
//!   with its log and ready signal, and "is this pid dead?".
//! - [`registry_process`]: the `toolmesh-registry` binary as a process,
//!   its address read from its own "listening" line.
//! - [`http2`]: what a server advertises in its HTTP/2 SETTINGS.
//! - [`tools`]: the SDK tools the suites call (`add`, `sleep`).
//! - [`mcp`]: the third-party MCP peers of the interop tests.
//! - [`redis`]: real `redis-server` processes: standalone, TLS, Cluster.
//! - [`search`]: the search's evaluation sets (tools, tasks, distractors)
//!   and how a ranking is scored on them.
//! - [`tls`]: a CA made for one test, and the certificates it signs.
//! - [`otlp`]: an OTLP trace receiver (gRPC and HTTP), and a trace drawn
//!   as a text waterfall.

pub mod catalog;
pub mod grants;
pub mod http2;
pub mod keys;
pub mod mcp;
pub mod otlp;
pub mod ports;
pub mod process;
pub mod redis;
pub mod registry_process;
pub mod search;
pub mod server;
pub mod suite;
pub mod tls;
pub mod tools;
pub mod wait;
