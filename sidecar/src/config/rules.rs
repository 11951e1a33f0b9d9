//! The rules of a config that serde cannot express: tool names unique and
//! well formed, schemas that compile, limits above 0, one backend per tool,
//! addresses that parse. Each broken rule is a [`Problem`] at its key.

use std::collections::HashMap;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;
use toolmesh_proto::endpoint;
use toolmesh_proto::listen::ListenAddr;

use super::key::KeyPath;
use super::problem::Problem;
use super::{SidecarConfig, ToolConfig};
use crate::context::{
    CALLER_ENV, CALLER_HEADER, CONFIG_ENV, CONFIG_HEADER, INVOCATION_ID_ENV, INVOCATION_ID_HEADER,
};
use crate::tool::validate_tool_name;
use crate::{arguments, schema};

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
        if validate_tool_name(&tool.name).is_err() {
            return Err(Problem::found(at.key("name"), format!("{:?}", tool.name)));
        }
        if let Some(first) = names.insert(tool.name.as_str(), index) {
            return Err(Problem::new(
                at.key("name"),
                format!(
                    "{:?} is already the name of tools[{first}]; each tool needs a name of its own",
                    tool.name
                ),
            ));
        }
        check_tool(tool, &at)?;
    }
    Ok(())
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
    if let Some(timeout) = tool.timeout
        && timeout.is_zero()
    {
        return Err(Problem::found(at.key("timeout"), "0s"));
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

/// Longest tool title, as the registry accepts it.
const MAX_TITLE_BYTES: usize = 256;
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
    match (&backend.http, &backend.command) {
        (Some(_), Some(_)) => Err(Problem::new(
            at.clone(),
            "has both http and command; keep one of them",
        )),
        (None, None) => Err(Problem::found(at.clone(), "neither http nor command")),
        (Some(http), None) => {
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
            let at = at.key("http");
            http_url(&http.url)
                .map_err(|why| Problem::found(at.key("url"), format!("{:?} ({why})", http.url)))?;
            for (name, value) in &http.headers {
                let header = at.key("headers").key(name.clone());
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
        (None, Some(command)) => match command.first() {
            None => Err(Problem::found(at.key("command"), "an empty list")),
            Some(program) if program.is_empty() => {
                Err(Problem::found(at.key("command"), "an empty program name"))
            }
            Some(_) => {
                let env = backend.env.iter().flatten();
                match env.map(|(name, _)| name).find(|name| {
                    [CALLER_ENV, INVOCATION_ID_ENV, CONFIG_ENV].contains(&name.as_str())
                        || name.starts_with(&format!("{CONFIG_ENV}_"))
                }) {
                    Some(name) => Err(Problem::new(at.key("env").key(name.clone()), SET_PER_CALL)),
                    None => Ok(()),
                }
            }
        },
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
