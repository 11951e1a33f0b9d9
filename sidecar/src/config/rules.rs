//! The rules of a config that serde cannot express: tool names unique and
//! well formed, schemas that compile, limits above 0, one backend per tool,
//! addresses that parse. Each broken rule is a [`Problem`] at its key.

use std::collections::HashMap;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;
use toolmesh_proto::endpoint;
use toolmesh_proto::listen::ListenAddr;
use toolmesh_proto::rules::MAX_TITLE_BYTES;

use super::allowed::allowed;
use super::key::KeyPath;
use super::problem::Problem;
use super::schema;

/// Longest `task_timeout` the registry takes: a week.
const MAX_TASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
use super::{McpConfig, SidecarConfig, ToolConfig};
use crate::arguments;
use crate::context::{
    CALLER_ENV, CALLER_HEADER, CONFIG_ENV, CONFIG_HEADER, INVOCATION_ID_ENV, INVOCATION_ID_HEADER,
};
use crate::tool::validate_tool_name;

/// Checks every rule of `config`; the first broken one is the error.
pub(super) fn check(config: &SidecarConfig) -> Result<(), Problem> {
    let root = KeyPath::root();
    for (key, address) in [
        ("registry", &config.registry),
        ("advertise", &config.advertise),
    ] {
        if let Some(address) = address {
            endpoint::url(address).map_err(|e| Problem::new(root.key(key), e.to_string()))?;
        }
    }
    if let Some(address) = &config.listen {
        address
            .parse::<ListenAddr>()
            .map_err(|e| Problem::new(root.key("listen"), e.to_string()))?;
    }
    let mut names = HashMap::new();
    for (index, tool) in config.tools.iter().enumerate() {
        let at = root.key("tools").index(index);
        if tool.backend.mcp.is_some() {
            check_mcp_entry(tool, &at)?;
            check_tool(tool, &at)?;
            continue;
        }
        let name = required(tool.name.as_deref(), &at.key("name"))?;
        required(tool.description.as_deref(), &at.key("description"))?;
        if validate_tool_name(name).is_err() {
            return Err(Problem::found(at.key("name"), format!("{name:?}")));
        }
        if let Some(first) = names.insert(name, index) {
            return Err(Problem::new(
                at.key("name"),
                format!(
                    "{name:?} is already the name of tools[{first}]; each tool needs a name of its own"
                ),
            ));
        }
        check_tool(tool, &at)?;
    }
    Ok(())
}

/// `value`, or the problem of a missing key at `at`.
fn required<'a>(value: Option<&'a str>, at: &KeyPath) -> Result<&'a str, Problem> {
    value.ok_or_else(|| {
        let expected = allowed(at).unwrap_or("a value");
        Problem::new(at.clone(), format!("missing, expected {expected}"))
    })
}

/// An entry whose tools an MCP server lists: what the server says of its
/// tools may not be set here.
fn check_mcp_entry(tool: &ToolConfig, at: &KeyPath) -> Result<(), Problem> {
    let from_server = [
        ("name", tool.name.is_some()),
        ("description", tool.description.is_some()),
        ("title", tool.title.is_some()),
        ("arguments", tool.arguments.is_some()),
        ("input_schema", tool.input_schema.is_some()),
        ("output_schema", tool.output_schema.is_some()),
        ("read_only", tool.read_only.is_some()),
        ("destructive", tool.destructive.is_some()),
        ("open_world", tool.open_world.is_some()),
        ("idempotent", tool.idempotent),
        ("config", !tool.config.is_empty()),
    ];
    match from_server.iter().find(|(_, set)| *set) {
        Some((key, _)) => Err(Problem::new(
            at.key(*key),
            "the MCP server says this of each of its tools; remove it (backend.mcp.prefix, allow and deny choose what is published)",
        )),
        None => Ok(()),
    }
}

fn check_tool(tool: &ToolConfig, at: &KeyPath) -> Result<(), Problem> {
    if let Some(args) = &tool.arguments {
        if tool.input_schema.is_some() {
            return Err(Problem::new(
                at.key("input_schema"),
                "set arguments or input_schema, not both",
            ));
        }
        arguments::compile(args)
            .map_err(|e| Problem::new(at.key("arguments").index(e.index).key(e.key), e.problem))?;
        for (index, arg) in args.iter().enumerate() {
            if let Some(items @ (Value::Object(_) | Value::Bool(_))) = &arg.items {
                check_schema(items, &at.key("arguments").index(index).key("items"))?;
            }
        }
    }
    for key in ["input_schema", "output_schema"] {
        let schema = if key == "input_schema" {
            &tool.input_schema
        } else {
            &tool.output_schema
        };
        if let Some(schema) = schema {
            check_schema(schema, &at.key(key))?;
        }
    }
    for (key, limit) in [
        ("rate_limit", tool.rate_limit),
        ("per_caller_rate_limit", tool.per_caller_rate_limit),
    ] {
        if let Some(limit) = limit
            && !(limit.rate.is_finite() && limit.rate > 0.0)
        {
            return Err(Problem::found(at.key(key).key("rate"), limit.rate));
        }
    }
    for (key, timeout) in [
        ("timeout", tool.timeout),
        ("task_timeout", tool.task_timeout),
    ] {
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(Problem::found(at.key(key), "0s"));
        }
    }
    if let Some(task_timeout) = tool.task_timeout
        && task_timeout > MAX_TASK_TIMEOUT
    {
        return Err(Problem::new(
            at.key("task_timeout"),
            format!(
                "found {}, expected a duration of at most 7 days (168h): the registry runs no task longer",
                humantime::format_duration(task_timeout)
            ),
        ));
    }
    if let Some(title) = &tool.title
        && (title.len() > MAX_TITLE_BYTES || title.contains(char::is_control))
    {
        return Err(Problem::new(
            at.key("title"),
            format!("must be at most {MAX_TITLE_BYTES} bytes, on one line"),
        ));
    }
    check_config(&tool.config, &at.key("config"))?;
    if tool.max_output_bytes == Some(0) {
        return Err(Problem::found(at.key("max_output_bytes"), 0));
    }
    check_backend(tool, &at.key("backend"))
}

/// Largest `config` of one tool, as JSON: it travels in a header.
const MAX_CONFIG_BYTES: usize = 4096;
/// Longest `config` key.
const MAX_CONFIG_KEY: usize = 64;

/// A tool's `config`: keys that make environment variable names, no two
/// the same once upper-cased, and small enough for an HTTP header.
fn check_config(config: &serde_json::Map<String, Value>, at: &KeyPath) -> Result<(), Problem> {
    let mut upper = HashMap::new();
    for key in config.keys() {
        let valid = key.len() <= MAX_CONFIG_KEY
            && key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(Problem::new(
                at.key(key),
                format!(
                    "{key:?} is not a config key: 1 to {MAX_CONFIG_KEY} letters, digits or '_', not starting with a digit (it names the environment variable TOOLMESH_CONFIG_<KEY>)"
                ),
            ));
        }
        if let Some(other) = upper.insert(key.to_ascii_uppercase(), key) {
            return Err(Problem::new(
                at.key(key),
                format!("{key:?} and {other:?} name the same environment variable; rename one"),
            ));
        }
    }
    let size = crate::context::config_header(config).len();
    if size > MAX_CONFIG_BYTES {
        return Err(Problem::new(
            at.clone(),
            format!(
                "{size} bytes as JSON, more than {MAX_CONFIG_BYTES}: pass large settings as a file the backend reads"
            ),
        ));
    }
    Ok(())
}

fn check_schema(schema: &Value, at: &KeyPath) -> Result<(), Problem> {
    let kind = match schema {
        Value::Object(_) | Value::Bool(_) => None,
        Value::Array(_) => Some("a list".to_owned()),
        Value::Null => Some("nothing".to_owned()),
        other => Some(other.to_string()),
    };
    if let Some(kind) = kind {
        return Err(Problem::found(at.clone(), kind));
    }
    schema::check(schema).map_err(|e| Problem::new(at.join(&e.at), e.message))
}

fn check_backend(tool: &ToolConfig, at: &KeyPath) -> Result<(), Problem> {
    let backend = &tool.backend;
    let given: Vec<&str> = [
        ("http", backend.http.is_some()),
        ("command", backend.command.is_some()),
        ("mcp", backend.mcp.is_some()),
    ]
    .iter()
    .filter(|(_, set)| *set)
    .map(|(key, _)| *key)
    .collect();
    match given.as_slice() {
        [first, second] => {
            return Err(Problem::new(
                at.clone(),
                format!("has both {first} and {second}; keep one of them"),
            ));
        }
        [_, _, _] => {
            return Err(Problem::new(
                at.clone(),
                "has http, command and mcp; keep one of them",
            ));
        }
        _ => {}
    }
    if backend.command.is_none() {
        for (key, set) in [
            ("env", backend.env.is_some()),
            ("cwd", backend.cwd.is_some()),
        ] {
            if set {
                return Err(Problem::new(
                    at.key(key),
                    "only applies to a command backend; remove it",
                ));
            }
        }
    }
    if let Some(mcp) = &backend.mcp {
        return check_mcp(mcp, &at.key("mcp"));
    }
    match (&backend.http, &backend.command) {
        (None, None) => Err(Problem::found(at.clone(), "none of http, command or mcp")),
        (Some(http), _) => {
            let at = at.key("http");
            http_url(&http.url)
                .map_err(|why| Problem::found(at.key("url"), format!("{:?} ({why})", http.url)))?;
            check_headers(&http.headers, &at.key("headers"))
        }
        (None, Some(command)) => {
            check_command(command, &at.key("command"))?;
            check_env(backend.env.iter().flatten(), &at.key("env"))
        }
    }
}

fn check_headers(
    headers: &std::collections::BTreeMap<String, String>,
    at: &KeyPath,
) -> Result<(), Problem> {
    for (name, value) in headers {
        let header = at.key(name.clone());
        if HeaderName::try_from(name.as_str()).is_err() {
            return Err(Problem::new(
                header,
                format!("{name:?} is not a valid header name"),
            ));
        }
        if [CALLER_HEADER, INVOCATION_ID_HEADER, CONFIG_HEADER]
            .iter()
            .any(|own| name.eq_ignore_ascii_case(own))
        {
            return Err(Problem::new(header, SET_PER_CALL));
        }
        if HeaderValue::try_from(value.as_str()).is_err() {
            return Err(Problem::found(header, format!("{value:?}")));
        }
    }
    Ok(())
}

fn check_command(command: &[String], at: &KeyPath) -> Result<(), Problem> {
    match command.first() {
        None => Err(Problem::found(at.clone(), "an empty list")),
        Some(program) if program.is_empty() => {
            Err(Problem::found(at.clone(), "an empty program name"))
        }
        Some(_) => Ok(()),
    }
}

fn check_env<'a>(
    mut env: impl Iterator<Item = (&'a String, &'a String)>,
    at: &KeyPath,
) -> Result<(), Problem> {
    match env.find(|(name, _)| {
        [CALLER_ENV, INVOCATION_ID_ENV, CONFIG_ENV].contains(&name.as_str())
            || name.starts_with(&format!("{CONFIG_ENV}_"))
    }) {
        Some((name, _)) => Err(Problem::new(at.key(name.clone()), SET_PER_CALL)),
        None => Ok(()),
    }
}

/// An MCP server: one of `command` and `url`, and what goes with each.
fn check_mcp(mcp: &McpConfig, at: &KeyPath) -> Result<(), Problem> {
    match (&mcp.command, &mcp.url) {
        (Some(_), Some(_)) => {
            return Err(Problem::new(
                at.clone(),
                "has both command and url; keep one of them",
            ));
        }
        (None, None) => return Err(Problem::found(at.clone(), "neither command nor url")),
        (Some(command), None) => {
            check_command(command, &at.key("command"))?;
            check_env_pass(&mcp.env_pass, &at.key("env_pass"))?;
            if !mcp.headers.is_empty() {
                return Err(Problem::new(
                    at.key("headers"),
                    "only applies to a url; remove it",
                ));
            }
        }
        (None, Some(url)) => {
            http_url(url)
                .map_err(|why| Problem::found(at.key("url"), format!("{url:?} ({why})")))?;
            check_headers(&mcp.headers, &at.key("headers"))?;
            for (key, set) in [
                ("env", !mcp.env.is_empty()),
                ("env_pass", !mcp.env_pass.is_empty()),
                ("cwd", mcp.cwd.is_some()),
            ] {
                if set {
                    return Err(Problem::new(
                        at.key(key),
                        "only applies to a command; remove it",
                    ));
                }
            }
        }
    }
    if !mcp.prefix.is_empty() && validate_tool_name(&mcp.prefix).is_err() {
        return Err(Problem::new(
            at.key("prefix"),
            format!(
                "{:?} cannot begin a tool name: use letters, digits, '_', '-' and '.', shorter than 64",
                mcp.prefix
            ),
        ));
    }
    if mcp.relist_interval.is_some_and(|d| d.is_zero()) {
        return Err(Problem::found(at.key("relist_interval"), "0s"));
    }
    Ok(())
}

/// An MCP server's `env_pass`: portable variable names.
fn check_env_pass(names: &[String], at: &KeyPath) -> Result<(), Problem> {
    match names
        .iter()
        .enumerate()
        .find(|(_, name)| !crate::mcp::is_variable_name(name))
    {
        Some((index, name)) => Err(Problem::found(at.index(index), format!("{name:?}"))),
        None => Ok(()),
    }
}

/// Why the YAML may not set the caller's or invocation's header or variable.
const SET_PER_CALL: &str = "the sidecar sets it for each call (the registry's caller and invocation id, the tool's config); remove it, and put settings under the tool's config";

/// `url` parsed, if it is an `http://` or `https://` URL.
pub(super) fn http_url(url: &str) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        _ => Err("it does not start with http:// or https://".into()),
    }
}
