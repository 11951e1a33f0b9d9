//! The sidecar's YAML config file: where the registry is, where to listen,
//! and the tools (descriptor + backend) to serve.
//!
//! Every struct denies unknown fields, so a typo is an error naming the
//! key. Every error is a [`Problem`] in the user's words: the file, line and
//! column, the key path (`tools[0].rate_limit.rate`), what was found and
//! what the key accepts, with an example.
//!
//! - [`SidecarConfig::from_yaml_str`] parses and checks the rules
//!   ([`SidecarConfig::validate`]);
//! - [`SidecarConfig::check`] also checks the config against this machine
//!   (every command's program exists and may be run);
//! - [`SidecarConfig::load`] reads a file and does both;
//! - [`SidecarConfig::build_tools`] checks, then turns the tools into
//!   [`Tool`](crate::Tool)s.
//!
//! # Layout
//! - `key`: [`KeyPath`], where a value sits.
//! - `problem`: [`Problem`] and [`Position`].
//! - `allowed`: what each key accepts, with an example.
//! - `parse`: serde's errors in the user's words.
//! - `duration`: the `timeout` and `task_timeout` keys.
//! - `rules`: the rules serde cannot express.
//! - `machine`: programs and folders on this machine.
//! - `locate`: the line and column of a key, for problems found after parsing.
//! - `keywords`: schema keys that are probably misspelt keywords, warned of.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use toolmesh_proto::pb;

use crate::arguments::Argument;

mod allowed;
mod build;
mod duration;
mod key;
mod keywords;
mod locate;
mod machine;
mod parse;
mod problem;
mod rules;
pub(crate) mod schema;

pub use key::{KeyPath, Segment};
pub use problem::{Position, Problem};

/// The whole config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarConfig {
    /// Registry address, `host:port` or `http://host:port`.
    #[serde(default)]
    pub registry: Option<String>,
    /// Address to serve `ToolRuntime` on: an IP address and port
    /// (`127.0.0.1:50061`), or a host name and port that resolves
    /// ([`toolmesh_proto::listen`]).
    #[serde(default)]
    pub listen: Option<String>,
    /// Address the registry dials to reach this sidecar, `host:port` or
    /// `http://host:port` (default `http://<listen>`).
    #[serde(default)]
    pub advertise: Option<String>,
    /// Stable instance id (default `<hostname>-<random>`).
    #[serde(default)]
    pub instance_id: Option<String>,
    /// The tools to serve.
    #[serde(default)]
    pub tools: Vec<ToolConfig>,
}

/// One tool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// Tool name: 1 to 64 characters of `[A-Za-z0-9_.-]`. Required, except
    /// with an MCP backend, whose server names its tools.
    #[serde(default)]
    pub name: Option<String>,
    /// What the tool does, for the LLM. Required, except with an MCP
    /// backend.
    #[serde(default)]
    pub description: Option<String>,
    /// A short human-readable name, e.g. `Word count`.
    #[serde(default)]
    pub title: Option<String>,
    /// Hint: the tool does not modify its environment.
    #[serde(default)]
    pub read_only: Option<bool>,
    /// Hint: a modifying tool may destroy or overwrite.
    #[serde(default)]
    pub destructive: Option<bool>,
    /// Hint: the tool reaches an open world of entities (the web, email).
    #[serde(default)]
    pub open_world: Option<bool>,
    /// Settings given to the backend with every call and never announced:
    /// one backend can serve several tools that differ by them (HTTP: the
    /// `x-toolmesh-config` header; command: `TOOLMESH_CONFIG` and
    /// `TOOLMESH_CONFIG_<KEY>`; see [`crate::context`]).
    #[serde(default)]
    pub config: serde_json::Map<String, Value>,
    /// Shorthand argument list (exclusive with `input_schema`).
    #[serde(default)]
    pub arguments: Option<Vec<Argument>>,
    /// JSON Schema of the arguments (exclusive with `arguments`).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// JSON Schema of a successful result; the registry withholds a result
    /// that does not match it (the agent gets an error result instead).
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// The version, semver (e.g. `1.2.0`): the registry serves several
    /// versions of one name side by side and refuses one that is not semver.
    #[serde(default)]
    pub version: Option<String>,
    /// Labels for filtering.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Rate limit across all instances.
    #[serde(default)]
    pub rate_limit: Option<RateLimitConfig>,
    /// Rate limit of each caller, across all instances, enforced by the
    /// registry beside `rate_limit` (callers are told apart only when the
    /// registry authenticates agents).
    #[serde(default)]
    pub per_caller_rate_limit: Option<RateLimitConfig>,
    /// Longest a call may run, e.g. `2s`, `500ms`.
    #[serde(default, deserialize_with = "duration::optional")]
    pub timeout: Option<Duration>,
    /// Longest a call started as a task may run, e.g. `2h`; unset means
    /// `timeout`.
    #[serde(default, deserialize_with = "duration::optional")]
    pub task_timeout: Option<Duration>,
    /// Whether running twice equals running once.
    #[serde(default)]
    pub idempotent: bool,
    /// Whether the registry's audit log may record the arguments (schema
    /// fields marked `writeOnly` or `x-sensitive` redacted even then).
    #[serde(default)]
    pub audit_arguments: bool,
    /// Largest result in bytes (default 4 MiB).
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
    /// What runs the tool: exactly one of `http`, `command` or `mcp` (an
    /// MCP server, whose tools the entry stands for).
    pub backend: BackendConfig,
}

/// A token bucket: `rate` calls per second, `burst` at once.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Calls per second, > 0, may be fractional.
    pub rate: f64,
    /// Calls at once after a quiet period (0 = registry default).
    #[serde(default)]
    pub burst: u32,
}

impl From<RateLimitConfig> for pb::RateLimit {
    fn from(limit: RateLimitConfig) -> Self {
        Self {
            rate: limit.rate,
            burst: limit.burst,
        }
    }
}

/// A tool's backend: set exactly one of `http`, `command` and `mcp`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// POST the arguments to an HTTP endpoint.
    #[serde(default)]
    pub http: Option<HttpConfig>,
    /// Run a command: program and its arguments. A program path containing
    /// `/` is relative to the config file's directory; a bare name is looked
    /// up in `PATH`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Extra environment variables for `command`.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Working directory for `command`, relative to the config file's
    /// directory (default: that directory).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// An MCP server: every tool it lists (selected by `allow`, `deny` and
    /// renamed by `prefix`) is served and announced ([`crate::mcp`]).
    #[serde(default)]
    pub mcp: Option<McpConfig>,
}

/// An MCP server whose tools the sidecar serves: started as a command
/// (stdio) or reached at a URL (streamable HTTP).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// Start the server: program and arguments, spoken to over stdio,
    /// restarted with backoff when it exits (exclusive with `url`).
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Variables set in `command`'s environment. The server does not
    /// inherit the sidecar's environment: it gets only these, those named
    /// in `env_pass`, and [`crate::mcp::INHERITED`] and `LC_*`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables `command` gets from the sidecar's environment, by name
    /// (left out when the sidecar does not have them), e.g. `[GITHUB_TOKEN]`.
    #[serde(default)]
    pub env_pass: Vec<String>,
    /// Working directory for `command`, relative to the config file's
    /// directory (default: that directory).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The server's streamable HTTP endpoint, e.g.
    /// `http://127.0.0.1:8000/mcp` (exclusive with `command`).
    #[serde(default)]
    pub url: Option<String>,
    /// Extra request headers for `url`, e.g. `Authorization`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Put before each tool's name in the catalog, e.g. `everything.`
    /// (calls reach the server under its own name).
    #[serde(default)]
    pub prefix: String,
    /// Publish only the tools whose server-side names match one of these
    /// patterns (`*` matches any run of characters); empty: all.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Never publish the tools whose server-side names match one of these
    /// patterns; wins over `allow`.
    #[serde(default)]
    pub deny: Vec<String>,
    /// How often to list the server's tools again, besides when it says
    /// they changed (`notifications/tools/list_changed`); default 30s.
    #[serde(default, deserialize_with = "duration::optional")]
    pub relist_interval: Option<Duration>,
}

/// An HTTP JSON endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The URL to POST to.
    pub url: String,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// Why a config is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (said in the message: not a separate cause).
        error: std::io::Error,
    },
    /// The config file's folder cannot be made absolute.
    #[error("cannot resolve the config folder {}: {error}", path.display())]
    ConfigDir {
        /// The folder given.
        path: PathBuf,
        /// Why (said in the message: not a separate cause).
        error: std::io::Error,
    },
    /// A key is unknown, missing, or has a value that is not allowed, or
    /// names something this machine does not have.
    #[error("{0}")]
    Invalid(Box<Problem>),
}

impl ConfigError {
    /// The problem, if the config (rather than reading it) is at fault.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Self::Invalid(problem) => Some(problem),
            Self::Read { .. } | Self::ConfigDir { .. } => None,
        }
    }
}

impl From<Problem> for ConfigError {
    fn from(problem: Problem) -> Self {
        Self::Invalid(Box::new(problem))
    }
}

impl SidecarConfig {
    /// Parses `yaml` and checks its rules ([`Self::validate`]); problems
    /// carry their line and column.
    pub fn from_yaml_str(yaml: &str) -> Result<Self, ConfigError> {
        let deserializer = serde_yaml_ng::Deserializer::from_str(yaml);
        let config: Self =
            serde_path_to_error::deserialize(deserializer).map_err(parse::problem)?;
        config.validate().map_err(|e| locate(e, yaml))?;
        Ok(config)
    }

    /// Reads the file at `path`, parses it, and checks it against its rules
    /// and this machine ([`Self::check`], relative paths against the file's
    /// folder). Problems name the file, line and column.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let yaml = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        let in_file = |error: ConfigError| match error {
            ConfigError::Invalid(mut problem) => {
                problem.file = Some(path.to_owned());
                ConfigError::Invalid(problem)
            }
            other => other,
        };
        let config = Self::from_yaml_str(&yaml).map_err(in_file)?;
        config
            .check(path.parent().unwrap_or(Path::new("")))
            .map_err(|e| in_file(locate(e, &yaml)))?;
        Ok(config)
    }

    /// Checks every rule serde cannot express: names, schemas (compiled as
    /// the registry compiles them), limits, backends, addresses.
    pub fn validate(&self) -> Result<(), ConfigError> {
        rules::check(self).map_err(ConfigError::from)
    }

    /// Everything a sidecar checks before it starts: [`Self::validate`],
    /// at least one tool, and, against this machine, that every command's
    /// program exists and may be run and every `cwd` is a folder. A program
    /// containing `/` and every `cwd` resolve against `base_dir`, the config
    /// file's folder (empty means the current one); a bare program name is
    /// looked up in `PATH`.
    pub fn check(&self, base_dir: &Path) -> Result<(), ConfigError> {
        self.validate()?;
        if self.tools.is_empty() {
            return Err(Problem::new(
                KeyPath::root().key("tools"),
                "no tools declared; add at least one, e.g. - {name: echo, description: Echo, backend: {command: [cat]}}",
            )
            .into());
        }
        let base_dir = absolute_dir(base_dir)?;
        machine::check_commands(self, &base_dir).map_err(ConfigError::from)
    }
}

impl SidecarConfig {
    /// What is legal but probably not meant: a key of a tool's schema one
    /// typo away from a JSON Schema keyword (`propertes`), which a
    /// validator ignores. Each names the file at `path`
    /// (this config's), and its line and column when the file reads.
    pub fn warnings(&self, path: &Path) -> Vec<Problem> {
        let yaml = std::fs::read_to_string(path).unwrap_or_default();
        let mut found = Vec::new();
        for (index, tool) in self.tools.iter().enumerate() {
            let at = KeyPath::root().key("tools").index(index);
            for (key, schema) in [
                ("input_schema", &tool.input_schema),
                ("output_schema", &tool.output_schema),
            ] {
                if let Some(schema) = schema {
                    found.extend(keywords::typos(schema, &at.key(key)));
                }
            }
            for (position, argument) in tool.arguments.iter().flatten().enumerate() {
                if let Some(items) = &argument.items {
                    let at = at.key("arguments").index(position).key("items");
                    found.extend(keywords::typos(items, &at));
                }
            }
        }
        found
            .into_iter()
            .map(|problem| {
                let mut problem = problem.located_in(&yaml);
                problem.file = Some(path.to_owned());
                problem
            })
            .collect()
    }
}

/// `error` with the line and column of its key in `yaml`.
fn locate(error: ConfigError, yaml: &str) -> ConfigError {
    match error {
        ConfigError::Invalid(problem) => ConfigError::Invalid(Box::new(problem.located_in(yaml))),
        other => other,
    }
}

/// `dir` against the current directory; empty is the current directory.
fn absolute_dir(dir: &Path) -> Result<PathBuf, ConfigError> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::path::absolute(dir).map_err(|error| ConfigError::ConfigDir {
        path: dir.to_owned(),
        error,
    })
}

#[cfg(test)]
mod tests;
