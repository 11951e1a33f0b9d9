//! MCP servers as backends: every tool an MCP server lists becomes a tool
//! of this sidecar, announced to the registry like the others.
//!
//! A server is started as a command and spoken to over stdio, or reached
//! at a URL over streamable HTTP ([`McpTransport`]). The sidecar lists its
//! tools (every page), publishes those the [`Selection`] keeps under their
//! prefixed names, and lists again when the server sends
//! `notifications/tools/list_changed` and every `relist_interval`. A call
//! becomes `tools/call` under the server's own name; a task's, to a server
//! that hosts tasks (the Tasks extension on 2026-07-28), may become the
//! server's own task, followed with `tasks/get` to its end.
//!
//! A server that exits, or stops answering, has its tools withdrawn at once
//! (the announcer re-announces without them, or leaves the registry when
//! nothing is left) and is started or reached again with backoff; its tools
//! come back once it lists them. What tells (a ping, a change stream, or
//! only listing again) follows what the server speaks and advertises.
//!
//! # Layout
//! - `convert`: an MCP tool as a descriptor; a `tools/call` result as an
//!   [`Outcome`](crate::Outcome).
//! - `environment`: what a stdio server sees of the environment.
//! - `progress`: a task's `tools/call`: the server's progress passed on,
//!   the call cancelled when dropped.
//! - `session`: one connection to a server: start or reach it, list, call.
//! - `supervise`: the loop that keeps a server's tools published, and
//!   `Sources`, every server's loop.
//! - `tasks`: a call the server runs as its own task (the Tasks
//!   extension), followed by `tasks/get` and cancelled by `tasks/cancel`.
//! - `watch`: how that loop hears of changes and of the server's end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use toolmesh_proto::pattern::Pattern;
use toolmesh_proto::pb;

mod convert;
mod environment;
mod progress;
mod session;
mod stderr;
mod supervise;
mod tasks;
mod watch;

pub(crate) use environment::is_variable_name;
pub use environment::{INHERITED, LOCALE_PREFIX};
pub use session::{CALLER_META, INVOCATION_ID_META};
pub(crate) use supervise::Sources;

/// How often a server's tools are listed again by default, besides when
/// it says they changed.
pub const DEFAULT_RELIST_INTERVAL: Duration = Duration::from_secs(30);

/// One MCP server whose tools this sidecar serves.
#[derive(Debug, Clone)]
pub struct McpServer {
    /// How the server is named in logs: its program or URL.
    pub label: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Which of its tools are published, and under which names.
    pub selection: Selection,
    /// How often its tools are listed again besides when it says they
    /// changed.
    pub relist_interval: Duration,
    /// What every published tool's descriptor carries besides what the
    /// server says: tags, rate limits, timeout, audit, version.
    pub defaults: pb::ToolDescriptor,
    /// Largest result, in bytes, of each of its tools.
    pub max_output_bytes: usize,
}

/// How the sidecar reaches an MCP server.
#[derive(Debug, Clone)]
pub enum McpTransport {
    /// Start `program` with `args` in `cwd`, and speak over its stdin and
    /// stdout; each line of its stderr is logged as the sidecar's own
    /// event, naming the server. Its environment is not the sidecar's:
    /// only the variables [`INHERITED`] (and `LC_*`), those named in `pass`
    /// and those `env` sets.
    Stdio {
        /// The program, resolved as the command backend resolves one.
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set in its environment (over any passed).
        env: BTreeMap<String, String>,
        /// Variables passed through from the sidecar's environment, by
        /// name, besides [`INHERITED`].
        pass: Vec<String>,
        /// Its working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at `url`, with `headers` on every request.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:8000/mcp`.
        url: String,
        /// Extra request headers, e.g. `Authorization`.
        headers: BTreeMap<String, String>,
    },
}

/// Which of a server's tools are published, and under which names.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Put before each server-side name.
    pub prefix: String,
    /// Publish only names matching one of these; empty: every name.
    pub allow: Vec<Pattern>,
    /// Never publish names matching one of these (wins over `allow`).
    pub deny: Vec<Pattern>,
}

impl Selection {
    /// The catalog name of the server's tool `name`, if it is published.
    pub fn publish(&self, name: &str) -> Option<String> {
        let allowed = self.allow.is_empty() || self.allow.iter().any(|p| p.matches(name));
        let denied = self.deny.iter().any(|p| p.matches(name));
        (allowed && !denied).then(|| format!("{}{name}", self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_wins_over_allow_and_the_prefix_goes_first() {
        let selection = Selection {
            prefix: "everything.".to_owned(),
            allow: vec![Pattern::new("get-*"), Pattern::new("echo")],
            deny: vec![Pattern::new("get-secret*")],
        };
        assert_eq!(
            selection.publish("echo").as_deref(),
            Some("everything.echo")
        );
        assert_eq!(
            selection.publish("get-sum").as_deref(),
            Some("everything.get-sum")
        );
        assert_eq!(selection.publish("get-secret-env"), None);
        assert_eq!(selection.publish("trigger-long-running-operation"), None);
        let everything = Selection::default();
        assert_eq!(everything.publish("x").as_deref(), Some("x"));
    }
}
