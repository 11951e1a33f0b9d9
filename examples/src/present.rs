//! How the agent shows things to a person: tools with their schemas, the
//! same tools as LLM function-calling definitions, results, and gRPC errors
//! with their google.rpc details decoded.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tonic::Status;
use tonic_types::StatusExt as _;
use toolmesh_proto::pb;

/// A section title, with a blank line before and a rule under it.
pub fn heading(title: &str) -> String {
    format!("\n{title}\n{}", "=".repeat(title.chars().count()))
}

/// `text` with every line but the first indented by `indent` spaces.
fn indent_rest(text: &str, indent: usize) -> String {
    text.lines()
        .collect::<Vec<_>>()
        .join(&format!("\n{}", " ".repeat(indent)))
}

/// JSON text pretty-printed (as is when it is not JSON), every line
/// indented by `indent` spaces.
pub fn pretty_json(text: &str, indent: usize) -> String {
    let pretty = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned());
    format!("{}{}", " ".repeat(indent), indent_rest(&pretty, indent))
}

/// JSON text on one line (as is when it is not JSON).
pub fn compact_json(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| text.to_owned())
}

/// How many hex digits of a digest [`short_digest`] keeps.
const SHORT_DIGEST: usize = 12;

/// A digest's first [`SHORT_DIGEST`] hex digits, as a person compares them.
pub fn short_digest(digest: &str) -> &str {
    digest.get(..SHORT_DIGEST).unwrap_or(digest)
}

/// A tool as a person reads it: name, live instances, limits, digest (its
/// first 12 hex digits), description, tags and input schema.
pub fn describe_tool(tool: &pb::Tool) -> String {
    let Some(d) = &tool.descriptor else {
        return "(a tool without a descriptor)".to_owned();
    };
    let mut facts = vec![format!(
        "{} instance{}",
        tool.instances,
        if tool.instances == 1 { "" } else { "s" }
    )];
    if !d.version.is_empty() {
        facts.push(format!("version {}", d.version));
    }
    if let Some(timeout) = d
        .timeout
        .and_then(|t| std::time::Duration::try_from(t).ok())
    {
        facts.push(format!("timeout {timeout:?}"));
    }
    if let Some(limit) = &d.rate_limit {
        facts.push(format!("rate limit {}/s burst {}", limit.rate, limit.burst));
    }
    if d.idempotent {
        facts.push("idempotent".to_owned());
    }
    if !tool.digest.is_empty() {
        facts.push(format!("digest {}", short_digest(&tool.digest)));
    }
    let mut out = format!("{}  ({})\n  {}\n", d.name, facts.join(", "), d.description);
    if !d.tags.is_empty() {
        out.push_str(&format!("  tags: {}\n", d.tags.join(", ")));
    }
    out.push_str("  input schema:\n");
    out.push_str(&pretty_json(&d.input_schema_json, 4));
    out
}

/// The tool as a function definition in the shape the major LLM APIs take
/// (`{"type": "function", "function": {name, description, parameters}}`),
/// with the JSON Schema keywords those APIs reject (`$schema`, `title`)
/// left out of the top level.
pub fn function_definition(descriptor: &pb::ToolDescriptor) -> Value {
    let mut parameters = serde_json::from_str::<Value>(&descriptor.input_schema_json)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"type": "object"}));
    if let Some(object) = parameters.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    json!({
        "type": "function",
        "function": {
            "name": descriptor.name,
            "description": descriptor.description,
            "parameters": parameters,
        }
    })
}

/// A status as lines: code and message, then every google.rpc detail the
/// registry attached, decoded with `tonic_types`.
pub fn describe_status(status: &Status) -> Vec<String> {
    let mut lines = vec![format!(
        "{}: {}",
        toolmesh_proto::code::name(status.code()),
        status.message()
    )];
    let details = status.get_error_details();
    if let Some(bad_request) = details.bad_request() {
        for v in &bad_request.field_violations {
            lines.push(format!(
                "BadRequest field violation  {:?}: {}",
                v.field, v.description
            ));
        }
    }
    if let Some(info) = details.resource_info() {
        lines.push(format!(
            "ResourceInfo  type {:?}, name {:?}: {}",
            info.resource_type, info.resource_name, info.description
        ));
    }
    if let Some(retry) = details.retry_info() {
        match retry.retry_delay {
            Some(delay) => lines.push(format!("RetryInfo  retry in {delay:?}")),
            None => lines.push("RetryInfo  (no delay given)".to_owned()),
        }
    }
    if let Some(quota) = details.quota_failure() {
        for v in &quota.violations {
            lines.push(format!(
                "QuotaFailure  subject {:?}: {}",
                v.subject, v.description
            ));
        }
    }
    if let Some(precondition) = details.precondition_failure() {
        for v in &precondition.violations {
            lines.push(format!(
                "PreconditionFailure  {} {:?}: {}",
                v.r#type, v.subject, v.description
            ));
        }
    }
    if let Some(info) = details.error_info() {
        let mut line = format!("ErrorInfo  {} ({})", info.reason, info.domain);
        let metadata: BTreeMap<_, _> = info.metadata.iter().collect();
        for (key, value) in metadata {
            line.push_str(&format!("  {key}={value:?}"));
        }
        lines.push(line);
    }
    lines
}

/// A response as one line: the result (or the tool's error) and where it ran.
pub fn describe_response(response: &pb::InvokeResponse) -> String {
    let label = if response.is_error {
        "is_error: true, tool error"
    } else {
        "result"
    };
    format!(
        "{label} {}   (instance {}, {} attempt{})",
        compact_json(&response.result_json),
        response.instance_id,
        response.attempts,
        if response.attempts == 1 { "" } else { "s" }
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tonic_types::ErrorDetails;

    #[test]
    fn function_definition_drops_schema_meta_keywords() {
        let descriptor = pb::ToolDescriptor {
            name: "divide".into(),
            description: "Divide".into(),
            input_schema_json: r#"{"$schema":"x","title":"DivideArgs","type":"object"}"#.into(),
            ..Default::default()
        };
        let def = function_definition(&descriptor);
        assert_eq!(def["function"]["name"], "divide");
        assert_eq!(def["function"]["parameters"], json!({"type": "object"}));
    }

    #[test]
    fn an_empty_schema_means_any_object() {
        let def = function_definition(&pb::ToolDescriptor::default());
        assert_eq!(def["function"]["parameters"], json!({"type": "object"}));
    }

    #[test]
    fn status_details_are_decoded() {
        let mut details =
            ErrorDetails::with_retry_info(Some(std::time::Duration::from_millis(500)));
        details.add_quota_failure_violation("tool:t", "1/s");
        let status =
            Status::with_error_details(tonic::Code::ResourceExhausted, "slow down", details);
        let lines = describe_status(&status);
        assert_eq!(lines[0], "RESOURCE_EXHAUSTED: slow down");
        assert!(
            lines.iter().any(|l| l == "RetryInfo  retry in 500ms"),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("QuotaFailure  subject \"tool:t\""))
        );
    }

    #[test]
    fn a_tool_shows_its_digest_short() {
        let tool = pb::Tool {
            descriptor: Some(pb::ToolDescriptor {
                name: "divide".into(),
                ..Default::default()
            }),
            digest: "0123456789abcdef".repeat(4),
            ..Default::default()
        };
        let text = describe_tool(&tool);
        assert!(
            text.starts_with("divide  (0 instances, digest 0123456789ab)"),
            "{text}"
        );
        assert_eq!(short_digest("abc"), "abc");
    }

    #[test]
    fn error_info_metadata_is_shown_sorted() {
        let details = ErrorDetails::with_error_info(
            "TOOL_DIGEST_MISMATCH",
            "toolmesh.dev",
            [
                ("tool".to_owned(), "divide".to_owned()),
                ("changed".to_owned(), "description".to_owned()),
            ]
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>(),
        );
        let status =
            Status::with_error_details(tonic::Code::FailedPrecondition, "changed", details);
        let lines = describe_status(&status);
        assert_eq!(
            lines.last().map(String::as_str),
            Some(
                r#"ErrorInfo  TOOL_DIGEST_MISMATCH (toolmesh.dev)  changed="description"  tool="divide""#
            )
        );
    }

    #[test]
    fn pretty_json_indents_every_line() {
        assert_eq!(pretty_json(r#"{"a":1}"#, 2), "  {\n    \"a\": 1\n  }");
        assert_eq!(pretty_json("not json", 2), "  not json");
    }
}
