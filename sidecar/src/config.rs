//! The sidecar's YAML config file: where the registry is, where to listen,
//! and the tools (descriptor + backend) to serve.
//!
//! Every struct denies unknown fields, so a typo is an error naming the field.
//! [`SidecarConfig::from_yaml_str`] parses and validates;
//! [`SidecarConfig::build_tools`] turns the tools into [`Tool`]s.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::Value;
use toolmesh_proto::pb;

use crate::arguments::{self, Argument, ArgumentsError};
use crate::backend::{CommandBackend, HttpBackend};
use crate::tool::{DEFAULT_MAX_OUTPUT_BYTES, Tool, validate_tool_name};

/// The whole config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarConfig {
    /// Registry URL, e.g. `http://127.0.0.1:50051`.
    #[serde(default)]
    pub registry: Option<String>,
    /// Address to serve `ToolRuntime` on, e.g. `127.0.0.1:50061`.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// URL the registry dials to reach this sidecar (default `http://<listen>`).
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
    /// Tool name: 1 to 64 characters of `[A-Za-z0-9_.-]`.
    pub name: String,
    /// What the tool does, for the LLM.
    pub description: String,
    /// Shorthand argument list (exclusive with `input_schema`).
    #[serde(default)]
    pub arguments: Option<Vec<Argument>>,
    /// JSON Schema of the arguments (exclusive with `arguments`).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// JSON Schema of a successful result (informational).
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Free-form version, e.g. `1.2.0`.
    #[serde(default)]
    pub version: Option<String>,
    /// Labels for filtering.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Rate limit across all instances.
    #[serde(default)]
    pub rate_limit: Option<RateLimitConfig>,
    /// Longest a call may run, e.g. `2s`, `500ms`.
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    /// Whether running twice equals running once.
    #[serde(default)]
    pub idempotent: bool,
    /// Largest result in bytes (default 4 MiB).
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
    /// What runs the tool: exactly one of `http` or `command`.
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

/// A tool's backend: set exactly one of `http` and `command`.
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
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed or has unknown/missing fields (the message names them).
    #[error("invalid config: {0}")]
    Parse(#[from] serde_yaml_ng::Error),
    /// A tool name breaks the naming rule.
    #[error("tool #{index}: {source}")]
    InvalidName {
        /// Position in `tools` (0-based).
        index: usize,
        /// The rule broken.
        #[source]
        source: crate::tool::InvalidToolName,
    },
    /// Two tools share a name.
    #[error("tool {0:?} is declared twice")]
    DuplicateTool(String),
    /// The `arguments` shorthand does not compile.
    #[error("tool {tool:?}: {source}")]
    Arguments {
        /// The tool.
        tool: String,
        /// Why.
        #[source]
        source: ArgumentsError,
    },
    /// The config file's directory cannot be made absolute.
    #[error("cannot resolve the config directory {path:?}: {source}")]
    ConfigDir {
        /// The directory given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Any other problem with a tool's settings.
    #[error("tool {tool:?}: {problem}")]
    Tool {
        /// The tool.
        tool: String,
        /// What is wrong.
        problem: String,
    },
}

fn problem(tool: &ToolConfig, problem: impl Into<String>) -> ConfigError {
    ConfigError::Tool {
        tool: tool.name.clone(),
        problem: problem.into(),
    }
}

impl SidecarConfig {
    /// Parses and validates a config.
    pub fn from_yaml_str(yaml: &str) -> Result<Self, ConfigError> {
        let config: Self = serde_yaml_ng::from_str(yaml)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads, parses and validates a config file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let yaml = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml_str(&yaml)
    }

    /// Checks every rule serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut names = HashSet::new();
        for (index, tool) in self.tools.iter().enumerate() {
            validate_tool_name(&tool.name)
                .map_err(|source| ConfigError::InvalidName { index, source })?;
            if !names.insert(tool.name.as_str()) {
                return Err(ConfigError::DuplicateTool(tool.name.clone()));
            }
            tool.validate()?;
        }
        Ok(())
    }

    /// Builds the tools. A relative `base_dir` (the config file's
    /// directory; empty means the current one) is made absolute first, so
    /// that command programs and `cwd` resolve against it however the
    /// working directory changes later. All HTTP backends share one client.
    pub fn build_tools(&self, base_dir: &Path) -> Result<Vec<Tool>, ConfigError> {
        self.validate()?;
        let base_dir = absolute_dir(base_dir)?;
        let client = reqwest::Client::new();
        self.tools
            .iter()
            .map(|t| t.build(&base_dir, &client))
            .collect()
    }
}

impl ToolConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        self.input_schema()?;
        for (key, schema) in [
            ("input_schema", &self.input_schema),
            ("output_schema", &self.output_schema),
        ] {
            if let Some(schema) = schema
                && !(schema.is_object() || schema.is_boolean())
            {
                return Err(problem(
                    self,
                    format!("`{key}` must be a JSON Schema object"),
                ));
            }
        }
        if let Some(limit) = self.rate_limit
            && !(limit.rate.is_finite() && limit.rate > 0.0)
        {
            return Err(problem(self, "`rate_limit.rate` must be a number > 0"));
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(problem(self, "`timeout` must be longer than 0"));
        }
        if self.max_output_bytes == Some(0) {
            return Err(problem(self, "`max_output_bytes` must be > 0"));
        }
        let backend = &self.backend;
        match (&backend.http, &backend.command) {
            (Some(_), Some(_)) => {
                return Err(problem(
                    self,
                    "`backend` must have exactly one of `http` and `command`, not both",
                ));
            }
            (None, None) => {
                return Err(problem(self, "`backend` needs one of `http` or `command`"));
            }
            (Some(http), None) => {
                if backend.env.is_some() || backend.cwd.is_some() {
                    return Err(problem(
                        self,
                        "`env` and `cwd` only apply to a `command` backend",
                    ));
                }
                reqwest::Url::parse(&http.url).map_err(|e| {
                    problem(self, format!("invalid `http.url` {:?}: {e}", http.url))
                })?;
                http_headers(&http.headers).map_err(|p| problem(self, p))?;
            }
            (None, Some(command)) => {
                if command.first().is_none_or(|p| p.is_empty()) {
                    return Err(problem(self, "`command` needs at least a program"));
                }
            }
        }
        Ok(())
    }

    /// The input schema: compiled `arguments`, `input_schema`, or any object.
    fn input_schema(&self) -> Result<Value, ConfigError> {
        match (&self.arguments, &self.input_schema) {
            (Some(_), Some(_)) => Err(problem(self, "set `arguments` or `input_schema`, not both")),
            (Some(args), None) => {
                arguments::compile(args).map_err(|source| ConfigError::Arguments {
                    tool: self.name.clone(),
                    source,
                })
            }
            (None, Some(schema)) => Ok(schema.clone()),
            (None, None) => Ok(serde_json::json!({"type": "object"})),
        }
    }

    fn descriptor(&self) -> Result<pb::ToolDescriptor, ConfigError> {
        let timeout = self
            .timeout
            .map(prost_types::Duration::try_from)
            .transpose()
            .map_err(|e| problem(self, format!("`timeout` out of range: {e}")))?;
        Ok(pb::ToolDescriptor {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema_json: self.input_schema()?.to_string(),
            output_schema_json: self
                .output_schema
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            version: self.version.clone().unwrap_or_default(),
            tags: self.tags.clone(),
            rate_limit: self.rate_limit.map(|r| pb::RateLimit {
                rate: r.rate,
                burst: r.burst,
            }),
            timeout,
            idempotent: self.idempotent,
        })
    }

    /// The tool, with command paths resolved against `base_dir` (absolute).
    fn build(&self, base_dir: &Path, client: &reqwest::Client) -> Result<Tool, ConfigError> {
        let max_output = self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES);
        let backend: Arc<dyn crate::Backend> = match (&self.backend.http, &self.backend.command) {
            (Some(http), _) => {
                let url =
                    reqwest::Url::parse(&http.url).map_err(|e| problem(self, e.to_string()))?;
                let headers = http_headers(&http.headers).map_err(|p| problem(self, p))?;
                Arc::new(HttpBackend::new(client.clone(), url, headers, max_output))
            }
            (None, Some(command)) => {
                let (program, args) = command
                    .split_first()
                    .ok_or_else(|| problem(self, "`command` needs at least a program"))?;
                let program = if program.contains('/') {
                    base_dir.join(program)
                } else {
                    PathBuf::from(program)
                };
                let cwd = base_dir.join(self.backend.cwd.as_deref().unwrap_or(Path::new("")));
                Arc::new(CommandBackend::new(
                    program,
                    args.to_vec(),
                    self.backend.env.clone().unwrap_or_default(),
                    Some(cwd),
                    max_output,
                ))
            }
            (None, None) => {
                return Err(problem(self, "`backend` needs one of `http` or `command`"));
            }
        };
        Ok(Tool::new(self.descriptor()?, backend).with_max_output_bytes(max_output))
    }
}

/// `dir` against the current directory; empty is the current directory.
fn absolute_dir(dir: &Path) -> Result<PathBuf, ConfigError> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::path::absolute(dir).map_err(|source| ConfigError::ConfigDir {
        path: dir.to_owned(),
        source,
    })
}

fn http_headers(headers: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|e| format!("invalid header name {name:?}: {e}"))?;
        let value = HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("invalid value for header {name}: {e}"))?;
        map.insert(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests;
