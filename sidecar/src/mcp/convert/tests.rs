use serde_json::json;
use toolmesh_proto::pattern::Pattern;

use super::*;

fn mcp_tool(value: Value) -> McpTool {
    serde_json::from_value(value).expect("an MCP tool")
}

fn result(value: Value) -> CallToolResult {
    serde_json::from_value(value).expect("a tools/call result")
}

fn defaults() -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        tags: vec!["mcp".to_owned()],
        rate_limit: Some(pb::RateLimit {
            rate: 5.0,
            burst: 1,
        }),
        ..Default::default()
    }
}

#[test]
fn a_tool_passes_through_with_its_schemas_title_and_hints() {
    let tool = mcp_tool(json!({
        "name": "get-sum",
        "title": "Sum",
        "description": "Adds two numbers",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]},
        "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
        "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}
    }));
    let selection = Selection {
        prefix: "everything.".to_owned(),
        ..Selection::default()
    };
    let descriptor = descriptor(&tool, &selection, &defaults()).expect("published");
    assert_eq!(descriptor.name, "everything.get-sum");
    assert_eq!(descriptor.title, "Sum");
    assert_eq!(descriptor.description, "Adds two numbers");
    let input: Value = serde_json::from_str(&descriptor.input_schema_json).expect("JSON");
    assert_eq!(input["required"], json!(["a"]));
    let output: Value = serde_json::from_str(&descriptor.output_schema_json).expect("JSON");
    assert_eq!(output["properties"]["sum"]["type"], "number");
    assert!(descriptor.idempotent);
    assert_eq!(descriptor.read_only, Some(true));
    assert_eq!(descriptor.destructive, None);
    assert_eq!(descriptor.open_world, Some(false));
    assert_eq!(descriptor.tags, ["mcp"]);
    assert_eq!(descriptor.rate_limit.map(|l| l.rate), Some(5.0));
}

#[test]
fn what_the_registry_would_refuse_is_fixed_or_left_out() {
    let long = mcp_tool(json!({
        "name": "t",
        "description": "é".repeat(MAX_DESCRIPTION_BYTES),
        "annotations": {"title": "two\nlines"},
        "inputSchema": {"type": "object"}
    }));
    let descriptor = descriptor(&long, &Selection::default(), &defaults()).expect("published");
    assert!(descriptor.description.len() <= MAX_DESCRIPTION_BYTES);
    assert!(descriptor.description.ends_with('…'));
    assert_eq!(descriptor.title, "two lines");

    let spaced = mcp_tool(json!({"name": "has space", "inputSchema": {"type": "object"}}));
    assert!(matches!(
        super::descriptor(&spaced, &Selection::default(), &defaults()),
        Err(Skipped::BadName(name)) if name == "has space"
    ));
    let broken = mcp_tool(
        json!({"name": "t", "inputSchema": {"type": "object", "properties": {"a": {"type": 7}}}}),
    );
    assert!(matches!(
        super::descriptor(&broken, &Selection::default(), &defaults()),
        Err(Skipped::BadSchema {
            key: "inputSchema",
            ..
        })
    ));
    let denied = Selection {
        deny: vec![Pattern::new("t")],
        ..Selection::default()
    };
    assert_eq!(
        super::descriptor(&broken, &denied, &defaults()),
        Err(Skipped::NotSelected)
    );
}

#[test]
fn results_become_outcomes() {
    // The blocks as JSON values: key order is serde's to choose.
    let with_blocks =
        |outcome: Outcome, blocks: Value| (outcome.result_json, outcome.is_error, blocks);
    let seen = |outcome: Outcome| {
        let blocks = serde_json::from_str(&outcome.content_json).expect("blocks");
        (outcome.result_json, outcome.is_error, blocks)
    };
    let structured = result(json!({
        "content": [{"type": "text", "text": "{\"sum\":3}"}],
        "structuredContent": {"sum": 3}
    }));
    assert_eq!(
        outcome(&structured),
        Outcome::ok("{\"sum\":3}"),
        "one plain text: no blocks"
    );

    let two = json!([{"type": "text", "text": "Echo: hi"}, {"type": "text", "text": "bye"}]);
    let text = result(json!({"content": two}));
    assert_eq!(
        seen(outcome(&text)),
        with_blocks(Outcome::ok("Echo: hi\nbye"), two)
    );

    let failed = result(json!({
        "content": [{"type": "text", "text": "no such city"}],
        "structuredContent": {"ignored": true},
        "isError": true
    }));
    assert_eq!(outcome(&failed), Outcome::error("no such city"));

    let annotated =
        json!([{"type": "text", "text": "for the user", "annotations": {"audience": ["user"]}}]);
    assert_eq!(
        seen(outcome(&result(json!({"content": annotated})))),
        with_blocks(Outcome::ok("for the user"), annotated),
        "an annotated text keeps its annotations"
    );

    let image = result(json!({"content": [
        {"type": "text", "text": "a pixel"},
        {"type": "image", "data": "AA==", "mimeType": "image/png"}
    ]}));
    let answer = outcome(&image);
    let blocks: Value = serde_json::from_str(&answer.result_json).expect("JSON");
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["mimeType"], "image/png");
    assert_eq!(
        serde_json::from_str::<Value>(&answer.content_json).expect("JSON"),
        blocks
    );

    let empty = result(json!({"content": []}));
    assert_eq!(
        seen(outcome(&empty)),
        with_blocks(Outcome::ok("null"), json!([]))
    );
}

#[test]
fn cuts_fall_on_character_boundaries() {
    assert_eq!(cut("ab", 2, true), "ab");
    assert_eq!(cut("abc", 2, false), "ab");
    let cut_text = cut(&"é".repeat(10), 6, true);
    assert!(cut_text.len() <= 6 && cut_text.ends_with('…'), "{cut_text}");
}
