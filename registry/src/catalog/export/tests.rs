#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use toolmesh_proto::pb::{self, ExportFormat};

use super::export;

/// Each format's tool entry as its API documents it, written as a JSON
/// Schema (field by field from the API reference; `additionalProperties:
/// false` so that a field the API does not know fails the test).
fn shape(format: ExportFormat) -> Value {
    let object_schema = json!({"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}}});
    let openai_name = json!({"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"});
    match format {
        // platform.openai.com/docs/api-reference/chat/create#tools
        ExportFormat::OpenaiChat => json!({
            "type": "object", "additionalProperties": false, "required": ["type", "function"],
            "properties": {
                "type": {"const": "function"},
                "function": {
                    "type": "object", "additionalProperties": false, "required": ["name"],
                    "properties": {
                        "name": openai_name,
                        "description": {"type": "string"},
                        "parameters": object_schema,
                        "strict": {"type": ["boolean", "null"]},
                    },
                },
            },
        }),
        // platform.openai.com/docs/api-reference/responses/create#tools (FunctionTool)
        ExportFormat::OpenaiResponses => json!({
            "type": "object", "additionalProperties": false,
            "required": ["type", "name", "parameters", "strict"],
            "properties": {
                "type": {"const": "function"},
                "name": openai_name,
                "description": {"type": "string"},
                "parameters": object_schema,
                "strict": {"type": ["boolean", "null"]},
            },
        }),
        // docs.anthropic.com/en/api/messages#body-tools (custom tool)
        ExportFormat::Anthropic => json!({
            "type": "object", "additionalProperties": false, "required": ["name", "input_schema"],
            "properties": {
                "name": openai_name,
                "description": {"type": "string"},
                "input_schema": object_schema,
            },
        }),
        // ai.google.dev/api/caching#Tool and #FunctionDeclaration
        ExportFormat::Gemini => json!({
            "type": "object", "additionalProperties": false, "required": ["functionDeclarations"],
            "properties": {
                "functionDeclarations": {"type": "array", "items": {
                    "type": "object", "additionalProperties": false, "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$"},
                        "description": {"type": "string"},
                        "parametersJsonSchema": object_schema,
                        "responseJsonSchema": {"type": "object"},
                    },
                }},
            },
        }),
        // modelcontextprotocol.io, schema 2026-07-28: Tool and ToolAnnotations
        ExportFormat::Mcp | ExportFormat::Unspecified => json!({
            "type": "object", "additionalProperties": false, "required": ["name", "inputSchema"],
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$"},
                "title": {"type": "string"},
                "description": {"type": "string"},
                "inputSchema": object_schema,
                "outputSchema": {"type": "object"},
                "annotations": {
                    "type": "object", "additionalProperties": false,
                    "properties": {
                        "title": {"type": "string"},
                        "readOnlyHint": {"type": "boolean"},
                        "destructiveHint": {"type": "boolean"},
                        "idempotentHint": {"type": "boolean"},
                        "openWorldHint": {"type": "boolean"},
                    },
                },
            },
        }),
    }
}

const FORMATS: [ExportFormat; 5] = [
    ExportFormat::OpenaiChat,
    ExportFormat::OpenaiResponses,
    ExportFormat::Anthropic,
    ExportFormat::Gemini,
    ExportFormat::Mcp,
];

fn tool(name: &str, schema: &str) -> pb::ToolDescriptor {
    pb::ToolDescriptor {
        name: name.into(),
        description: format!("The {name} tool"),
        input_schema_json: schema.into(),
        ..Default::default()
    }
}

/// A rich schema: refs, composition, formats, bounds.
const RICH: &str = r##"{"type":"object","$defs":{"unit":{"enum":["c","f"]}},"properties":{"city":{"type":"string","minLength":1,"description":"A city"},"unit":{"$ref":"#/$defs/unit"},"days":{"type":"integer","minimum":1,"maximum":14},"at":{"oneOf":[{"type":"string","format":"date"},{"type":"null"}]}},"required":["city"],"additionalProperties":false}"##;

fn catalog() -> Vec<pb::ToolDescriptor> {
    vec![
        tool("weather", RICH),
        tool(
            "search.web",
            r#"{"type":"object","properties":{"q":{"type":"string"}}}"#,
        ),
        tool("2fa_code", "{}"),
        tool("anything", ""),
        tool("loose", r#"{"properties":{"x":{"type":"number"}}}"#),
        tool("word", r#"{"type":"string"}"#),
        pb::ToolDescriptor {
            title: "Delete a file".into(),
            read_only: Some(false),
            destructive: Some(true),
            open_world: Some(false),
            idempotent: true,
            output_schema_json: r#"{"type":"object","properties":{"deleted":{"type":"boolean"}}}"#
                .into(),
            ..tool(
                "delete_file",
                r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#,
            )
        },
    ]
}

/// The entries of an export, as a flat list (Gemini nests them).
fn entries(format: ExportFormat, tools: &[Value]) -> Vec<Value> {
    if format == ExportFormat::Gemini {
        assert_eq!(tools.len(), 1, "one Tool holding every declaration");
        tools[0]["functionDeclarations"].as_array().unwrap().clone()
    } else {
        tools.to_vec()
    }
}

fn names(format: ExportFormat, tools: &[Value]) -> Vec<String> {
    entries(format, tools)
        .iter()
        .map(|e| {
            let name = match format {
                ExportFormat::OpenaiChat => &e["function"]["name"],
                _ => &e["name"],
            };
            name.as_str().unwrap().to_owned()
        })
        .collect()
}

fn omitted(export: &super::Export) -> Vec<&str> {
    export
        .issues
        .iter()
        .filter(|i| i.omitted)
        .map(|i| i.tool.as_str())
        .collect()
}

#[test]
fn every_format_matches_its_published_shape() {
    let catalog = catalog();
    for format in FORMATS {
        let out = export(format, &catalog, usize::MAX);
        let validator = jsonschema::validator_for(&shape(format)).unwrap();
        for entry in &out.tools {
            let errors: Vec<String> = validator
                .iter_errors(entry)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{format:?}: {entry}\n{errors:?}");
        }
        assert!(!entries(format, &out.tools).is_empty(), "{format:?}");
    }
}

#[test]
fn names_a_format_cannot_take_are_reported_never_renamed() {
    let catalog = catalog();
    for (format, left_out) in [
        (ExportFormat::OpenaiChat, vec!["search.web", "word"]),
        (ExportFormat::OpenaiResponses, vec!["search.web", "word"]),
        (ExportFormat::Anthropic, vec!["search.web", "word"]),
        (ExportFormat::Gemini, vec!["2fa_code", "word"]),
        (ExportFormat::Mcp, vec!["word"]),
    ] {
        let out = export(format, &catalog, usize::MAX);
        assert_eq!(omitted(&out), left_out, "{format:?}: {:?}", out.issues);
        let exported = names(format, &out.tools);
        let expected: Vec<String> = catalog
            .iter()
            .map(|t| t.name.clone())
            .filter(|n| !left_out.contains(&n.as_str()))
            .collect();
        assert_eq!(
            exported, expected,
            "{format:?}: the others, in order, unchanged"
        );
    }
    let out = export(ExportFormat::OpenaiChat, &catalog, usize::MAX);
    let dotted = out.issues.iter().find(|i| i.tool == "search.web").unwrap();
    assert!(dotted.message.contains("'.'"), "{}", dotted.message);
    let word = out.issues.iter().find(|i| i.tool == "word").unwrap();
    assert!(
        word.message.contains("not a JSON object"),
        "{}",
        word.message
    );
}

#[test]
fn schemas_pass_through_and_an_untyped_root_becomes_an_object() {
    let catalog = catalog();
    let rich: Value = serde_json::from_str(RICH).unwrap();
    for format in FORMATS {
        let out = export(format, &catalog, usize::MAX);
        let schema_of = |name: &str| -> Value {
            let entry = entries(format, &out.tools)
                .into_iter()
                .find(|e| e["name"] == name || e["function"]["name"] == name)
                .unwrap();
            match format {
                ExportFormat::OpenaiChat => entry["function"]["parameters"].clone(),
                ExportFormat::OpenaiResponses => entry["parameters"].clone(),
                ExportFormat::Anthropic => entry["input_schema"].clone(),
                ExportFormat::Gemini => entry["parametersJsonSchema"].clone(),
                _ => entry["inputSchema"].clone(),
            }
        };
        assert_eq!(schema_of("weather"), rich, "{format:?}: lossless");
        assert_eq!(
            schema_of("anything"),
            json!({"type": "object"}),
            "{format:?}"
        );
        assert_eq!(
            schema_of("loose"),
            json!({"type": "object", "properties": {"x": {"type": "number"}}}),
            "{format:?}"
        );
    }
}

#[test]
fn mcp_carries_title_hints_and_output_schema_and_the_others_say_they_cannot() {
    let catalog = catalog();
    let out = export(ExportFormat::Mcp, &catalog, usize::MAX);
    let delete = out
        .tools
        .iter()
        .find(|t| t["name"] == "delete_file")
        .unwrap();
    assert_eq!(delete["title"], "Delete a file");
    assert_eq!(
        delete["annotations"],
        json!({"title": "Delete a file", "readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(
        delete["outputSchema"]["properties"]["deleted"]["type"],
        "boolean"
    );
    let weather = out.tools.iter().find(|t| t["name"] == "weather").unwrap();
    assert!(
        weather.get("annotations").is_none(),
        "nothing said, nothing sent"
    );
    assert!(out.issues.iter().all(|i| i.omitted), "{:?}", out.issues);

    let gemini = export(ExportFormat::Gemini, &catalog, usize::MAX);
    let declarations = entries(ExportFormat::Gemini, &gemini.tools);
    let delete = declarations
        .iter()
        .find(|t| t["name"] == "delete_file")
        .unwrap();
    assert_eq!(
        delete["responseJsonSchema"]["properties"]["deleted"]["type"],
        "boolean"
    );

    for format in [
        ExportFormat::OpenaiChat,
        ExportFormat::Anthropic,
        ExportFormat::Gemini,
    ] {
        let out = export(format, &catalog, usize::MAX);
        let notes: Vec<&str> = out
            .issues
            .iter()
            .filter(|i| !i.omitted && i.tool == "delete_file")
            .map(|i| i.message.as_str())
            .collect();
        assert!(
            notes.iter().any(|m| m.contains("hints")),
            "{format:?}: {notes:?}"
        );
        assert_eq!(
            notes.iter().any(|m| m.contains("output schema")),
            format != ExportFormat::Gemini,
            "{format:?}: {notes:?}"
        );
    }
}

#[test]
fn an_export_stops_at_the_size_limit_and_names_what_it_left() {
    let catalog: Vec<pb::ToolDescriptor> = (0..10).map(|i| tool(&format!("t{i}"), "{}")).collect();
    let one = export(ExportFormat::Anthropic, &catalog[..1], usize::MAX).tools[0]
        .to_string()
        .len();
    let out = export(ExportFormat::Anthropic, &catalog, 2 + 3 * (one + 1));
    assert_eq!(out.tools.len(), 3);
    assert_eq!(omitted(&out), ["t3", "t4", "t5", "t6", "t7", "t8", "t9"]);
    assert!(out.issues[0].message.contains("size limit"));
}
