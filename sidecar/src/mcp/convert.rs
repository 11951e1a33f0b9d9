//! Between MCP and toolmesh: an MCP `Tool` as a descriptor the registry
//! takes, and a `tools/call` result as an [`Outcome`].
//!
//! The schemas, title and annotations pass through as the server gives
//! them. What the registry would refuse, and so would cost the whole
//! announce, is fixed where that loses nothing an LLM needs (a title
//! cut to its limit, on one line; a description cut with a mark) and
//! otherwise leaves the tool out, saying why.

use rmcp::model::{CallToolResult, ContentBlock, Tool as McpTool};
use serde_json::Value;
use toolmesh_proto::pb;
use toolmesh_proto::rules::{MAX_DESCRIPTION_BYTES, MAX_SCHEMA_BYTES, MAX_TITLE_BYTES};

use super::Selection;
use crate::tool::{Outcome, validate_tool_name};

/// Why a listed tool is not published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Skipped {
    /// The selection leaves it out: not a problem.
    #[error("not selected by allow and deny")]
    NotSelected,
    /// Its name (with the prefix) breaks the tool-name rule.
    #[error(
        "{0:?} is not a tool name the registry takes (1 to 64 letters, digits, '_', '-' or '.'); leave it out with deny, or pick a shorter prefix"
    )]
    BadName(String),
    /// A schema the registry would refuse.
    #[error("its {key}: {reason}")]
    BadSchema {
        /// `inputSchema` or `outputSchema`.
        key: &'static str,
        /// Why.
        reason: String,
    },
}

/// The descriptor of the server's `tool`, named as `selection` says, with
/// everything the server does not say taken from `defaults`.
pub(crate) fn descriptor(
    tool: &McpTool,
    selection: &Selection,
    defaults: &pb::ToolDescriptor,
) -> Result<pb::ToolDescriptor, Skipped> {
    let name = selection.publish(&tool.name).ok_or(Skipped::NotSelected)?;
    if validate_tool_name(&name).is_err() {
        return Err(Skipped::BadName(name));
    }
    let input = Value::Object(tool.input_schema.as_ref().clone());
    let input_schema_json = schema_text("inputSchema", &input)?;
    let output_schema_json = match &tool.output_schema {
        Some(schema) => schema_text("outputSchema", &Value::Object(schema.as_ref().clone()))?,
        None => String::new(),
    };
    let annotations = tool.annotations.as_ref();
    let title = tool
        .title
        .as_deref()
        .or_else(|| annotations.and_then(|a| a.title.as_deref()))
        .unwrap_or_default();
    let description = tool.description.as_deref().unwrap_or_default();
    Ok(pb::ToolDescriptor {
        name,
        description: cut(description, MAX_DESCRIPTION_BYTES, true),
        title: cut(&one_line(title), MAX_TITLE_BYTES, false),
        input_schema_json,
        output_schema_json,
        idempotent: annotations.and_then(|a| a.idempotent_hint) == Some(true),
        read_only: annotations.and_then(|a| a.read_only_hint),
        destructive: annotations.and_then(|a| a.destructive_hint),
        open_world: annotations.and_then(|a| a.open_world_hint),
        ..defaults.clone()
    })
}

fn schema_text(key: &'static str, schema: &Value) -> Result<String, Skipped> {
    let text = schema.to_string();
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(Skipped::BadSchema {
            key,
            reason: format!("{} bytes, more than {MAX_SCHEMA_BYTES}", text.len()),
        });
    }
    crate::config::schema::check(schema).map_err(|error| Skipped::BadSchema {
        key,
        reason: error.message,
    })?;
    Ok(text)
}

/// `text` with every run of control characters (newlines, tabs) as one
/// space.
fn one_line(text: &str) -> String {
    text.split(char::is_control)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` cut to at most `max` bytes at a character boundary, ending in
/// `…` when it was cut and `mark` is set.
fn cut(text: &str, max: usize, mark: bool) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = if mark { "…" } else { "" };
    let mut end = max - ellipsis.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &text[..end])
}

/// A `tools/call` result as the runtime's outcome: `isError` as is; the
/// structured content when the call succeeded and has one; else the text
/// when every content block is text (joined by newlines); else the content
/// blocks themselves, as MCP writes them.
pub(crate) fn outcome(result: &CallToolResult) -> Outcome {
    let is_error = result.is_error == Some(true);
    let result_json = match &result.structured_content {
        Some(structured) if !is_error => structured.to_string(),
        _ => content(&result.content).unwrap_or_else(|| {
            result
                .structured_content
                .as_ref()
                .map_or_else(|| "null".to_owned(), Value::to_string)
        }),
    };
    Outcome {
        result_json,
        is_error,
        content_json: blocks(&result.content),
    }
}

/// `content` as the JSON array an MCP client of the registry gets, unless
/// it is one plain text (no annotations, no `_meta`), which `result_json`
/// says whole.
fn blocks(content: &[ContentBlock]) -> String {
    let plain_text = |block: &ContentBlock| {
        block
            .as_text()
            .is_some_and(|text| text.annotations.is_none() && text.meta.is_none())
    };
    match content {
        [only] if plain_text(only) => String::new(),
        _ => serde_json::to_string(content).unwrap_or_default(),
    }
}

/// The content as text (all text blocks) or as JSON (any other), `None`
/// when there is none.
fn content(blocks: &[ContentBlock]) -> Option<String> {
    if blocks.is_empty() {
        return None;
    }
    let texts: Option<Vec<&str>> = blocks
        .iter()
        .map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect();
    Some(match texts {
        Some(texts) => texts.join("\n"),
        None => serde_json::to_string(blocks).unwrap_or_else(|_| "null".to_owned()),
    })
}

#[cfg(test)]
mod tests;
