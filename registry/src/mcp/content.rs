//! What a tool's answer is to an MCP client: the content blocks its MCP
//! server sent when the answer carries them, else the result as text.
//!
//! `InvokeResponse.result_json` is JSON text in one of these forms, tried
//! in this order (`docs/mcp-endpoint.md`, "What a call answers"):
//!
//! 1. The envelope [`ENVELOPE_KEY`]: an object with that one key, holding
//!    `content` (MCP content blocks, as the server sent them) and
//!    optionally `structuredContent`. The blocks pass as they are: text,
//!    image and audio (with `mimeType` and `data`), resource links,
//!    embedded resources, their annotations.
//! 2. An array of MCP content blocks, one of them at least not text: what
//!    a sidecar sends for an MCP server's answer with images, audio or
//!    resources.
//! 3. A JSON string: its text, unquoted (a wrapped MCP server's text, a
//!    command's plain output, a tool's error message).
//! 4. Any other JSON: its text, and `structuredContent` too when it is an
//!    object and the call succeeded.
//!
//! `isError` is the response's `is_error`.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Deserialize;
use serde_json::Value;
use toolmesh_proto::pb::InvokeResponse;

/// The one key of a result that carries an MCP server's answer whole.
pub const ENVELOPE_KEY: &str = "toolmesh/mcpResult";

/// The MCP answer to a call the tool answered.
pub fn from_response(response: &InvokeResponse) -> CallToolResult {
    let text = &response.result_json;
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return answer(
            vec![ContentBlock::text(text.clone())],
            None,
            response.is_error,
        );
    };
    if let Some(carried) = envelope(&value, text) {
        return answer(
            carried.content,
            carried.structured_content,
            response.is_error,
        );
    }
    if let Some(blocks) = mixed_blocks(&value, text) {
        return answer(blocks, None, response.is_error);
    }
    match value {
        Value::String(said) => answer(vec![ContentBlock::text(said)], None, response.is_error),
        object @ Value::Object(_) if !response.is_error => {
            answer(vec![ContentBlock::text(text.clone())], Some(object), false)
        }
        _ => answer(
            vec![ContentBlock::text(text.clone())],
            None,
            response.is_error,
        ),
    }
}

fn answer(content: Vec<ContentBlock>, structured: Option<Value>, is_error: bool) -> CallToolResult {
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = structured;
    result
}

/// What the envelope carries.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Carried {
    content: Vec<ContentBlock>,
    #[serde(default)]
    structured_content: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    #[serde(rename = "toolmesh/mcpResult")]
    carried: Carried,
}

/// What `value` (parsed from `text`) carries, if it is the envelope; a
/// malformed one is an ordinary object.
fn envelope(value: &Value, text: &str) -> Option<Carried> {
    let object = value.as_object()?;
    if object.len() != 1 || !object.contains_key(ENVELOPE_KEY) {
        return None;
    }
    serde_json::from_str::<Envelope>(text)
        .ok()
        .map(|envelope| envelope.carried)
}

/// The blocks of `value` (parsed from `text`), if it is an array of MCP
/// content blocks not all text. An array of text blocks alone is taken for
/// what it says, JSON: no sidecar sends that form (it joins the texts).
fn mixed_blocks(value: &Value, text: &str) -> Option<Vec<ContentBlock>> {
    let not_text = |item: &Value| {
        item.get("type")
            .and_then(Value::as_str)
            .is_some_and(|kind| kind != "text")
    };
    if !value.as_array()?.iter().any(not_text) {
        return None;
    }
    serde_json::from_str::<Vec<ContentBlock>>(text).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn answered(result_json: &str, is_error: bool) -> Value {
        serde_json::to_value(from_response(&InvokeResponse {
            result_json: result_json.into(),
            is_error,
            ..Default::default()
        }))
        .unwrap()
    }

    #[test]
    fn a_string_is_its_text() {
        let result = answered(r#""Echo: hi""#, false);
        assert_eq!(
            result["content"],
            json!([{"type": "text", "text": "Echo: hi"}])
        );
        assert_eq!(result["isError"], false);
        assert!(result.get("structuredContent").is_none());

        let failed = answered(r#""13 is unlucky""#, true);
        assert_eq!(failed["content"][0]["text"], "13 is unlucky");
        assert_eq!(failed["isError"], true);
    }

    #[test]
    fn objects_are_structured_too_and_other_json_is_text() {
        let result = answered(r#"{"sum":3}"#, false);
        assert_eq!(result["content"][0]["text"], r#"{"sum":3}"#);
        assert_eq!(result["structuredContent"], json!({"sum": 3}));

        for plain in [
            "[1,2]",
            "42",
            "true",
            "null",
            r#"[{"type":"text","text":"x"}]"#,
        ] {
            let result = answered(plain, false);
            assert_eq!(result["content"], json!([{"type": "text", "text": plain}]));
            assert!(result.get("structuredContent").is_none(), "{plain}");
        }

        let failed = answered(r#"{"error":"withheld"}"#, true);
        assert_eq!(failed["content"][0]["text"], r#"{"error":"withheld"}"#);
        assert!(failed.get("structuredContent").is_none());
        assert_eq!(
            answered("not json", false)["content"][0]["text"],
            "not json"
        );
    }

    #[test]
    fn a_sidecars_mixed_content_passes_as_blocks() {
        let blocks = json!([
            {"type": "text", "text": "Here's the image you requested:"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "text", "text": "The image above is the MCP logo."},
        ]);
        let result = answered(&blocks.to_string(), false);
        assert_eq!(result["content"], blocks);
        assert_eq!(result["isError"], false);
        assert!(result.get("structuredContent").is_none());
    }

    #[test]
    fn the_envelope_carries_every_kind_of_block_as_sent() {
        let content = json!([
            {"type": "text", "text": "{\"looks\":\"like JSON\"}"},
            {"type": "text", "text": "second", "annotations": {"audience": ["user"], "priority": 0.5}},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "demo://resource/1", "name": "Text Resource 1", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "demo://resource/2", "mimeType": "text/plain", "text": "inside"}},
        ]);
        let envelope = json!({ENVELOPE_KEY: {"content": content}});
        let result = answered(&envelope.to_string(), false);
        assert_eq!(result["content"], content);
        assert!(result.get("structuredContent").is_none());

        let failed = json!({ENVELOPE_KEY: {
            "content": [{"type": "text", "text": "no such city"}],
            "structuredContent": {"city": "Atlantis"},
        }});
        let result = answered(&failed.to_string(), true);
        assert_eq!(result["isError"], true);
        assert_eq!(result["content"][0]["text"], "no such city");
        assert_eq!(result["structuredContent"], json!({"city": "Atlantis"}));
    }

    #[test]
    fn anything_short_of_the_envelope_is_an_ordinary_object() {
        for object in [
            json!({ENVELOPE_KEY: {"content": "not blocks"}}),
            json!({ENVELOPE_KEY: {"content": [{"type": "text"}]}}),
            json!({ENVELOPE_KEY: {"content": []}, "other": 1}),
        ] {
            let text = object.to_string();
            let result = answered(&text, false);
            assert_eq!(result["content"][0]["text"], text.as_str());
            assert_eq!(result["structuredContent"], object);
        }
        let broken = json!([{"type": "image", "data": "AA=="}]).to_string();
        assert_eq!(
            answered(&broken, false)["content"][0]["text"],
            broken.as_str()
        );
    }
}
