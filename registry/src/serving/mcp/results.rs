//! What a refused or failed call is to an MCP client (a call the tool
//! answered is [`super::content`]'s).
//!
//! MCP has two ways to fail a `tools/call`: a JSON-RPC error, which
//! clients seldom show a model, and a result with `isError: true`, which
//! they do. Everything a model can act on is the second: the tool's own
//! failure, arguments that break the schema (each field named, with what
//! is allowed), a rate limit (with the delay), an instance that is down or
//! slow. Only an unknown tool (the spec's `-32602`), and what cannot
//! happen on a call at all, are JSON-RPC errors.
//!
//! Refusals carry what a program needs in `_meta`, under the keys below.

use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, MetaObject};
use serde_json::{Value, json};
use toolmesh_telemetry::shown::{QUOTED_MAX, Quoted, clip};

use crate::error::{DETAILED_VIOLATIONS, RegistryError, Violation};

/// `_meta` key of a refused call: the gRPC status code `Invoke` would have
/// answered, by name (`INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`,
/// `UNAVAILABLE`, `DEADLINE_EXCEEDED`, ...).
pub(crate) const CODE_KEY: &str = "toolmesh/code";
/// `_meta` key of a rate-limited call: milliseconds until a call may pass.
pub(crate) const RETRY_AFTER_MS_KEY: &str = "toolmesh/retryAfterMs";
/// `_meta` key of a call whose arguments break the schema: the violations,
/// `[{"field": <JSON pointer>, "description": <what is wrong>}]`.
pub(crate) const VIOLATIONS_KEY: &str = "toolmesh/violations";

/// Most bytes of one violation's description shown.
const VIOLATION_MAX: usize = 256;

/// The JSON-RPC error for a tool that does not exist, or that the caller
/// may not see (the two are told apart by no one).
pub(crate) fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(format!("Unknown tool: {}", clip(name, QUOTED_MAX)), None)
}

/// The answer to a call of `tool` the registry refused or could not
/// complete.
pub(crate) fn from_error(tool: &str, error: &RegistryError) -> Result<CallToolResult, ErrorData> {
    use RegistryError as E;
    match error {
        E::ToolNotFound { .. } | E::PermissionDenied { .. } => Err(unknown_tool(tool)),
        E::VersionNotFound { .. } => Ok(refusal(error.to_string(), "not_found")),
        E::ArgumentsInvalid { tool, violations } => Ok(invalid_arguments(tool, violations)),
        E::RateLimited {
            tool,
            caller,
            retry_after,
            rate,
            burst,
        } => Ok(rate_limited(
            tool,
            caller.as_deref(),
            *retry_after,
            *rate,
            *burst,
        )),
        E::Replayed { code, message } => {
            Ok(refusal(message.clone(), toolmesh_proto::code::name(*code)))
        }
        E::ArgumentsNotJson { .. }
        | E::ArgumentsDuplicateKey { .. }
        | E::ArgumentsTooLarge { .. }
        | E::InvalidRequest { .. }
        | E::NoHealthyInstance { .. }
        | E::DeadlineExceeded { .. }
        | E::Cancelled { .. }
        | E::Upstream { .. }
        | E::StoreUnavailable { .. }
        | E::LimiterUnavailable { .. }
        | E::CatalogFull(_)
        | E::IdempotencyFull
        | E::TasksFull { .. }
        | E::ApprovalRequired(_)
        | E::ToolChanged(_)
        | E::PinsOff
        | E::ApprovalDenied { .. }
        | E::ApprovalExpired { .. }
        | E::ApprovalVoid { .. }
        | E::ApprovalClosed { .. }
        | E::ApprovalDigestMismatch { .. }
        | E::IdempotencyKeyReused { .. } => Ok(refusal(
            error.to_string(),
            toolmesh_proto::code::name(error.code()),
        )),
        E::Unauthenticated { .. } => Err(ErrorData::invalid_request(error.to_string(), None)),
        E::InvalidDescriptor { .. }
        | E::InvalidSchema { .. }
        | E::DescriptorConflict { .. }
        | E::LeaseNotFound { .. }
        | E::TaskNotFound { .. }
        | E::TaskReportRefused { .. }
        | E::TooManyWatchers { .. }
        | E::WatchInterrupted { .. }
        | E::WatchOutdated { .. } => Err(ErrorData::internal_error(error.to_string(), None)),
    }
}

/// The answer to a call that ran as a task and failed with `code` and
/// `message` (the status `Invoke` would have answered): what `tools/call`
/// answers for the same failure, an `isError` result, except for what
/// only a fault of the registry's own can be (`INTERNAL`, `UNKNOWN`,
/// `DATA_LOSS`), a JSON-RPC error.
pub(crate) fn from_task_error(
    code: tonic::Code,
    message: &str,
) -> Result<CallToolResult, ErrorData> {
    use tonic::Code as C;
    match code {
        C::Internal | C::Unknown | C::DataLoss => Err(ErrorData::internal_error(
            message.to_owned(),
            Some(json!({ CODE_KEY: toolmesh_proto::code::name(code) })),
        )),
        _ => Ok(refusal(
            message.to_owned(),
            toolmesh_proto::code::name(code),
        )),
    }
}

/// An `isError` result saying `text`, with the status code in `_meta`.
fn refusal(text: String, code: &str) -> CallToolResult {
    let mut meta = MetaObject::new();
    meta.insert(CODE_KEY.into(), code.into());
    CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(meta))
}

/// Every violation (up to [`DETAILED_VIOLATIONS`]) as a line naming the
/// field and what is wrong with it, and in `_meta`.
fn invalid_arguments(tool: &str, violations: &[Violation]) -> CallToolResult {
    let mut text = format!(
        "The arguments do not match the input schema of {}. Fix each of these and call again:",
        Quoted(tool)
    );
    let shown = &violations[..violations.len().min(DETAILED_VIOLATIONS)];
    for violation in shown {
        let field = if violation.pointer.is_empty() {
            "(the arguments object)".to_owned()
        } else {
            clip(&violation.pointer, QUOTED_MAX)
        };
        text.push_str(&format!(
            "\n- {field}: {}",
            clip(&violation.message, VIOLATION_MAX)
        ));
    }
    if violations.len() > shown.len() {
        text.push_str(&format!("\n- and {} more", violations.len() - shown.len()));
    }
    let listed: Vec<Value> = shown
        .iter()
        .map(|v| {
            json!({
                "field": clip(&v.pointer, QUOTED_MAX),
                "description": clip(&v.message, VIOLATION_MAX),
            })
        })
        .collect();
    let mut result = refusal(text, "INVALID_ARGUMENT");
    if let Some(meta) = result.meta.as_mut() {
        meta.insert(VIOLATIONS_KEY.into(), Value::Array(listed));
    }
    result
}

/// The limit, and the delay in seconds (in `_meta` in milliseconds).
fn rate_limited(
    tool: &str,
    caller: Option<&str>,
    retry_after: Duration,
    rate: f64,
    burst: u32,
) -> CallToolResult {
    let millis = u64::try_from(retry_after.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    let whose = caller.map_or_else(String::new, |c| format!(" for caller {}", Quoted(c)));
    let seconds = millis.div_ceil(100) as f64 / 10.0;
    let text = format!(
        "Rate limit of {}{whose} reached ({rate} calls/s, burst {burst}). Retry in {seconds:.1} s.",
        Quoted(tool),
    );
    let mut result = refusal(text, "RESOURCE_EXHAUSTED");
    if let Some(meta) = result.meta.as_mut() {
        meta.insert(RETRY_AFTER_MS_KEY.into(), millis.into());
    }
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rmcp::model::ErrorCode;

    use super::*;

    fn text(result: &CallToolResult) -> String {
        let value = serde_json::to_value(result).unwrap();
        value["content"][0]["text"].as_str().unwrap().to_owned()
    }

    fn meta(result: &CallToolResult, key: &str) -> Value {
        result.meta.as_ref().unwrap().get(key).cloned().unwrap()
    }

    #[test]
    fn violations_name_each_field() {
        let error = RegistryError::ArgumentsInvalid {
            tool: "add".into(),
            violations: vec![
                Violation {
                    pointer: "/a".into(),
                    message: "\"two\" is not of type \"integer\"".into(),
                },
                Violation {
                    pointer: "/b".into(),
                    message: "required property is missing".into(),
                },
            ],
        };
        let result = from_error("add", &error).unwrap();
        assert_eq!(result.is_error, Some(true));
        let said = text(&result);
        assert!(
            said.contains("\n- /a: \"two\" is not of type \"integer\""),
            "{said}"
        );
        assert!(
            said.contains("\n- /b: required property is missing"),
            "{said}"
        );
        assert_eq!(meta(&result, CODE_KEY), "INVALID_ARGUMENT");
        assert_eq!(meta(&result, VIOLATIONS_KEY)[1]["field"], "/b");
    }

    #[test]
    fn many_violations_are_bounded() {
        let violations = (0..20)
            .map(|i| Violation {
                pointer: format!("/{i}"),
                message: "x".repeat(1000),
            })
            .collect();
        let error = RegistryError::ArgumentsInvalid {
            tool: "t".into(),
            violations,
        };
        let result = from_error("t", &error).unwrap();
        let said = text(&result);
        assert!(said.ends_with("- and 12 more"), "{said}");
        assert!(said.len() < 4096, "{}", said.len());
        assert_eq!(
            meta(&result, VIOLATIONS_KEY).as_array().unwrap().len(),
            DETAILED_VIOLATIONS
        );
    }

    #[test]
    fn rate_limits_say_the_limit_and_the_delay() {
        let error = RegistryError::RateLimited {
            tool: "limited".into(),
            caller: None,
            retry_after: Duration::from_millis(4_210),
            rate: 0.2,
            burst: 2,
        };
        let result = from_error("limited", &error).unwrap();
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            text(&result),
            "Rate limit of \"limited\" reached (0.2 calls/s, burst 2). Retry in 4.3 s."
        );
        assert_eq!(meta(&result, RETRY_AFTER_MS_KEY), 4_210);
        assert_eq!(meta(&result, CODE_KEY), "RESOURCE_EXHAUSTED");
    }

    #[test]
    fn unknown_and_hidden_tools_are_invalid_params() {
        for error in [
            RegistryError::ToolNotFound { tool: "x".into() },
            RegistryError::PermissionDenied {
                reason: "policy".into(),
            },
        ] {
            let error = from_error("x", &error).unwrap_err();
            assert_eq!(error.code, ErrorCode::INVALID_PARAMS);
            assert_eq!(error.message, "Unknown tool: x");
        }
    }

    #[test]
    fn outages_are_results_a_model_can_read() {
        let error = RegistryError::NoHealthyInstance {
            tool: "add".into(),
            detail: "connection refused".into(),
        };
        let result = from_error("add", &error).unwrap();
        assert_eq!(result.is_error, Some(true));
        assert_eq!(meta(&result, CODE_KEY), "UNAVAILABLE");
        assert!(text(&result).contains("no healthy instance"));

        let error = RegistryError::DeadlineExceeded {
            tool: "slow".into(),
            deadline: Duration::from_secs(1),
        };
        let result = from_error("slow", &error).unwrap();
        assert_eq!(meta(&result, CODE_KEY), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn what_cannot_happen_on_a_call_is_an_internal_error() {
        let error = RegistryError::LeaseNotFound { lease: "l".into() };
        let error = from_error("t", &error).unwrap_err();
        assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
    }
}
