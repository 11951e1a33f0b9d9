//! What a tool's answer is to an MCP client: the content blocks its MCP
//! server sent when the answer carries them, else the result as text.
//!
//! Tried in this order (`docs/mcp-endpoint.md`, "A tool's content"):
//!
//! 1. `InvokeResponse.content_json`: the blocks an MCP server sent, passed
//!    as they are (text, image and audio with `mimeType` and `data`,
//!    resource links, embedded resources, annotations), with
//!    `result_json` as `structuredContent` when it is an object and the
//!    call succeeded (a sidecar puts the server's structured content
//!    there).
//! 2. `result_json` an array of MCP content blocks, one of them at least
//!    not text: what a sidecar that does not fill `content_json` sends for
//!    an answer with images, audio or resources.
//! 3. `result_json` a JSON string: its text, unquoted (a wrapped MCP
//!    server's text, a command's plain output, a tool's error message).
//! 4. Any other JSON: its text, and `structuredContent` too when it is an
//!    object and the call succeeded.
//!
//! `isError` is the response's `is_error`.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;
use toolmesh_proto::pb::InvokeResponse;

/// The MCP answer to a call the tool answered.
pub(crate) fn from_response(response: &InvokeResponse) -> CallToolResult {
    let text = &response.result_json;
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        if let Some(blocks) = server_blocks(&response.content_json) {
            return answer(blocks, None, response.is_error);
        }
        return answer(
            vec![ContentBlock::text(text.clone())],
            None,
            response.is_error,
        );
    };
    if let Some(blocks) = server_blocks(&response.content_json) {
        let structured = (!response.is_error && value.is_object()).then_some(value);
        return answer(blocks, structured, response.is_error);
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

/// The blocks of `content_json`, if a sidecar sent them (a malformed
/// array is none: the result then speaks for itself).
fn server_blocks(content_json: &str) -> Option<Vec<ContentBlock>> {
    if content_json.is_empty() {
        return None;
    }
    serde_json::from_str(content_json).ok()
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

    fn answered_with_blocks(result_json: &str, content_json: &str, is_error: bool) -> Value {
        serde_json::to_value(from_response(&InvokeResponse {
            result_json: result_json.into(),
            is_error,
            content_json: content_json.into(),
            ..Default::default()
        }))
        .unwrap()
    }

    #[test]
    fn a_servers_blocks_pass_as_sent() {
        let content = json!([
            {"type": "text", "text": "{\"looks\":\"like JSON\"}"},
            {"type": "text", "text": "second", "annotations": {"audience": ["user"], "priority": 0.5}},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "demo://resource/1", "name": "Text Resource 1", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "demo://resource/2", "mimeType": "text/plain", "text": "inside"}},
        ]);
        let result = answered_with_blocks(r#""joined text""#, &content.to_string(), false);
        assert_eq!(result["content"], content);
        assert!(result.get("structuredContent").is_none());

        let structured = answered_with_blocks(
            r#"{"temperature":22.5}"#,
            &json!([{"type": "text", "text": "22.5 degrees"}, {"type": "text", "text": "sunny"}])
                .to_string(),
            false,
        );
        assert_eq!(structured["content"][1]["text"], "sunny");
        assert_eq!(
            structured["structuredContent"],
            json!({"temperature": 22.5})
        );

        let failed = answered_with_blocks(
            r#"{"city":"Atlantis"}"#,
            &json!([{"type": "text", "text": "no such city"}, {"type": "text", "text": "try again"}]).to_string(),
            true,
        );
        assert_eq!(failed["isError"], true);
        assert_eq!(failed["content"][0]["text"], "no such city");
        assert!(failed.get("structuredContent").is_none());
    }

    #[test]
    fn malformed_blocks_leave_the_result_to_speak() {
        let broken = json!([{"type": "image", "data": "AA=="}]).to_string();
        let result = answered_with_blocks(r#""fallback""#, &broken, false);
        assert_eq!(
            result["content"],
            json!([{"type": "text", "text": "fallback"}])
        );
        assert_eq!(
            answered(&broken, false)["content"][0]["text"],
            broken.as_str()
        );
    }
}
