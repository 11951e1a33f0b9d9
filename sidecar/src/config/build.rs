//! Building the tools and MCP servers a config describes: descriptors,
//! backends, resolved paths and headers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use toolmesh_proto::pattern::Pattern;
use toolmesh_proto::pb;

use super::{
    ConfigError, KeyPath, McpConfig, Problem, SidecarConfig, ToolConfig, absolute_dir, rules,
};
use crate::arguments;
use crate::backend::{CommandBackend, HttpBackend};
use crate::mcp::{DEFAULT_RELIST_INTERVAL, McpServer, McpTransport, Selection};
use crate::tool::{DEFAULT_MAX_OUTPUT_BYTES, Tool};

impl SidecarConfig {
    /// [`Self::check`]s the config, then builds the tools. A relative
    /// `base_dir` (the config file's folder; empty means the current one) is
    /// made absolute first, so that command programs and `cwd` resolve
    /// against it however the working directory changes later. All HTTP
    /// backends share one client.
    pub fn build_tools(&self, base_dir: &Path) -> Result<Vec<Tool>, ConfigError> {
        self.check(base_dir)?;
        let base_dir = absolute_dir(base_dir)?;
        let client = reqwest::Client::new();
        self.tools
            .iter()
            .enumerate()
            .filter(|(_, tool)| tool.backend.mcp.is_none())
            .map(|(index, tool)| {
                tool.build(&base_dir, &client).map_err(|message| {
                    Problem::new(KeyPath::root().key("tools").index(index), message).into()
                })
            })
            .collect()
    }

    /// [`Self::check`]s the config, then gives the MCP servers of its
    /// `backend.mcp` entries, in order, command paths resolved against
    /// `base_dir` as [`Self::build_tools`] resolves them.
    pub fn mcp_servers(&self, base_dir: &Path) -> Result<Vec<McpServer>, ConfigError> {
        self.check(base_dir)?;
        let base_dir = absolute_dir(base_dir)?;
        Ok(self
            .tools
            .iter()
            .filter_map(|tool| Some(tool.mcp_server(tool.backend.mcp.as_ref()?, &base_dir)))
            .collect())
    }
}

impl ToolConfig {
    /// The MCP server of an entry whose backend is `mcp`: every tool it
    /// publishes carries this entry's tags, limits, timeouts and audit.
    pub(super) fn mcp_server(&self, mcp: &McpConfig, base_dir: &Path) -> McpServer {
        let transport = match (&mcp.command, &mcp.url) {
            (Some(command), _) => {
                let (program, args) = match command.split_first() {
                    Some((program, args)) => (program.as_str(), args),
                    None => ("", &[][..]),
                };
                McpTransport::Stdio {
                    program: if program.contains('/') {
                        resolve(base_dir, Path::new(program))
                    } else {
                        PathBuf::from(program)
                    },
                    args: args.to_vec(),
                    env: mcp.env.clone(),
                    pass: mcp.env_pass.clone(),
                    cwd: Some(resolve(
                        base_dir,
                        mcp.cwd.as_deref().unwrap_or(Path::new("")),
                    )),
                }
            }
            (None, url) => McpTransport::Http {
                url: url.clone().unwrap_or_default(),
                headers: mcp.headers.clone(),
            },
        };
        let label = match &transport {
            McpTransport::Stdio { program, .. } => program.display().to_string(),
            McpTransport::Http { url, .. } => url.clone(),
        };
        let patterns = |list: &[String]| list.iter().map(|p| Pattern::new(p)).collect();
        McpServer {
            label,
            transport,
            selection: Selection {
                prefix: mcp.prefix.clone(),
                allow: patterns(&mcp.allow),
                deny: patterns(&mcp.deny),
            },
            relist_interval: mcp.relist_interval.unwrap_or(DEFAULT_RELIST_INTERVAL),
            defaults: pb::ToolDescriptor {
                version: self.version.clone().unwrap_or_default(),
                tags: self.tags.clone(),
                rate_limit: self.rate_limit.map(pb::RateLimit::from),
                per_caller_rate_limit: self.per_caller_rate_limit.map(pb::RateLimit::from),
                timeout: self
                    .timeout
                    .and_then(|t| prost_types::Duration::try_from(t).ok()),
                task_timeout: self
                    .task_timeout
                    .and_then(|t| prost_types::Duration::try_from(t).ok()),
                audit_arguments: self.audit_arguments,
                ..Default::default()
            },
            max_output_bytes: self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES),
        }
    }

    /// The input schema: compiled `arguments`, `input_schema`, or any object.
    pub(super) fn input_schema(&self) -> Result<Value, String> {
        match (&self.arguments, &self.input_schema) {
            (Some(args), _) => arguments::compile(args).map_err(|e| e.to_string()),
            (None, Some(schema)) => Ok(schema.clone()),
            (None, None) => Ok(serde_json::json!({"type": "object"})),
        }
    }

    pub(super) fn descriptor(&self) -> Result<pb::ToolDescriptor, String> {
        let timeout = self
            .timeout
            .map(prost_types::Duration::try_from)
            .transpose()
            .map_err(|e| format!("timeout: out of range: {e}"))?;
        let task_timeout = self
            .task_timeout
            .map(prost_types::Duration::try_from)
            .transpose()
            .map_err(|e| format!("task_timeout: out of range: {e}"))?;
        Ok(pb::ToolDescriptor {
            name: self.name.clone().unwrap_or_default(),
            description: self.description.clone().unwrap_or_default(),
            input_schema_json: self.input_schema()?.to_string(),
            output_schema_json: self
                .output_schema
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            version: self.version.clone().unwrap_or_default(),
            tags: self.tags.clone(),
            rate_limit: self.rate_limit.map(pb::RateLimit::from),
            per_caller_rate_limit: self.per_caller_rate_limit.map(pb::RateLimit::from),
            timeout,
            idempotent: self.idempotent,
            audit_arguments: self.audit_arguments,
            title: self.title.clone().unwrap_or_default(),
            read_only: self.read_only,
            destructive: self.destructive,
            open_world: self.open_world,
            task_timeout,
        })
    }

    /// The tool, with command paths resolved against `base_dir` (absolute).
    /// Only called on a checked config: errors here are internal.
    pub(super) fn build(&self, base_dir: &Path, client: &reqwest::Client) -> Result<Tool, String> {
        let max_output = self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES);
        let backend: Arc<dyn crate::Backend> = match (&self.backend.http, &self.backend.command) {
            (Some(http), _) => {
                let url = rules::http_url(&http.url)?;
                let headers = http_headers(&http.headers)?;
                Arc::new(HttpBackend::new(client.clone(), url, headers, max_output))
            }
            (None, Some(command)) => {
                let (program, args) = command
                    .split_first()
                    .ok_or("backend.command: needs at least a program")?;
                let program = if program.contains('/') {
                    resolve(base_dir, Path::new(program))
                } else {
                    PathBuf::from(program)
                };
                let cwd = resolve(
                    base_dir,
                    self.backend.cwd.as_deref().unwrap_or(Path::new("")),
                );
                Arc::new(CommandBackend::new(
                    program,
                    args.to_vec(),
                    self.backend.env.clone().unwrap_or_default(),
                    Some(cwd),
                    max_output,
                ))
            }
            (None, None) => return Err("backend: needs one of http or command".into()),
        };
        Ok(Tool::new(self.descriptor()?, backend)
            .with_max_output_bytes(max_output)
            .with_config(self.config.clone()))
    }
}

/// `path` against `base_dir` (an absolute `path` stays as is), without
/// `.` steps: `./wc.py` in `/srv` is `/srv/wc.py`.
pub(super) fn resolve(base_dir: &Path, path: &Path) -> PathBuf {
    base_dir.join(
        path.components()
            .filter(|c| *c != std::path::Component::CurDir)
            .collect::<PathBuf>(),
    )
}

pub(super) fn http_headers(headers: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
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
