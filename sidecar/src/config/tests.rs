#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

const EXAMPLE: &str = r#"
registry: http://127.0.0.1:50051
listen: 127.0.0.1:50061
tools:
  - name: word_count
    description: Count the words in a text
    arguments:
      - {name: text, type: string, description: The text, required: true}
    rate_limit: {rate: 5, burst: 10}
    timeout: 2s
    idempotent: true
    backend:
      command: ["python3", "word_count.py"]
  - name: lookup
    description: Look a key up in the inventory service
    input_schema:
      type: object
      properties: {key: {type: string, minLength: 1}}
      required: [key]
    backend:
      http: {url: "http://127.0.0.1:8080/lookup"}
"#;

#[test]
fn parses_the_documented_example() {
    let config = SidecarConfig::from_yaml_str(EXAMPLE).unwrap();
    assert_eq!(config.registry.as_deref(), Some("http://127.0.0.1:50051"));
    assert_eq!(config.listen, Some("127.0.0.1:50061".parse().unwrap()));
    let tools = config.build_tools(Path::new("/srv/tools")).unwrap();
    assert_eq!(tools.len(), 2);

    let wc = tools[0].descriptor();
    assert_eq!(wc.name, "word_count");
    assert_eq!(
        wc.rate_limit,
        Some(pb::RateLimit {
            rate: 5.0,
            burst: 10
        })
    );
    assert_eq!(
        wc.timeout,
        Some(prost_types::Duration {
            seconds: 2,
            nanos: 0
        })
    );
    assert!(wc.idempotent);
    let schema: Value = serde_json::from_str(&wc.input_schema_json).unwrap();
    assert_eq!(schema["required"], json!(["text"]));
    assert_eq!(schema["additionalProperties"], json!(false));

    let lookup = tools[1].descriptor();
    let schema: Value = serde_json::from_str(&lookup.input_schema_json).unwrap();
    assert_eq!(schema["properties"]["key"]["minLength"], json!(1));
    assert_eq!(lookup.timeout, None);
    assert!(!lookup.idempotent);
}

#[test]
fn optional_fields() {
    let config = SidecarConfig::from_yaml_str(
        r#"
advertise: http://10.0.0.7:50061
instance_id: pod-1
tools:
  - name: t
    description: d
    output_schema: {type: integer}
    version: 1.2.0
    tags: [math, read-only]
    timeout: 500ms
    max_output_bytes: 1024
    backend:
      command: [./bin/tool, --flag]
      env: {MODE: fast}
      cwd: work
"#,
    )
    .unwrap();
    assert_eq!(config.instance_id.as_deref(), Some("pod-1"));
    let tools = config.build_tools(Path::new("/srv")).unwrap();
    let d = tools[0].descriptor();
    assert_eq!(d.input_schema_json, r#"{"type":"object"}"#);
    assert_eq!(d.output_schema_json, r#"{"type":"integer"}"#);
    assert_eq!(d.version, "1.2.0");
    assert_eq!(d.tags, ["math", "read-only"]);
    assert_eq!(
        d.timeout,
        Some(prost_types::Duration {
            seconds: 0,
            nanos: 500_000_000
        })
    );
    assert_eq!(tools[0].max_output_bytes(), 1024);
}

/// The error for a config holding one tool with `body` (YAML lines of the tool).
fn tool_error(body: &str) -> String {
    let yaml = format!("tools:\n  - name: t\n    description: d\n{body}");
    SidecarConfig::from_yaml_str(&yaml).unwrap_err().to_string()
}

fn assert_error(body: &str, expected: &str) {
    let err = tool_error(body);
    assert!(err.contains(expected), "expected {expected:?} in {err:?}");
}

const CMD: &str = "    backend: {command: [echo]}\n";

#[test]
fn typos_name_the_field() {
    assert_error(&format!("    timout: 2s\n{CMD}"), "unknown field `timout`");
    assert_error("    backend: {comand: [echo]}\n", "unknown field `comand`");
    assert_error(
        &format!("    arguments: [{{name: a, type: string, requird: true}}]\n{CMD}"),
        "unknown field `requird`",
    );
    assert_error(
        &format!("    rate_limit: {{rate: 1, brust: 2}}\n{CMD}"),
        "unknown field `brust`",
    );
    let err = SidecarConfig::from_yaml_str("registy: http://x\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `registy`"), "{err}");
}

#[test]
fn every_tool_error_has_a_clear_message() {
    assert_error("", "missing field `backend`");
    assert_error("    backend: {}\n", "needs one of `http` or `command`");
    assert_error(
        "    backend: {command: [echo], http: {url: 'http://x'}}\n",
        "not both",
    );
    assert_error("    backend: {command: []}\n", "needs at least a program");
    assert_error(
        "    backend: {http: {url: 'not a url'}}\n",
        "invalid `http.url`",
    );
    assert_error(
        "    backend: {http: {url: 'http://x', headers: {'a b': c}}}\n",
        "invalid header name",
    );
    assert_error(
        "    backend: {http: {url: 'http://x'}, cwd: /tmp}\n",
        "only apply to a `command`",
    );
    assert_error(&format!("    timeout: 2 parsecs\n{CMD}"), "timeout");
    assert_error(
        &format!("    timeout: 0s\n{CMD}"),
        "`timeout` must be longer than 0",
    );
    assert_error(
        &format!("    rate_limit: {{rate: 0}}\n{CMD}"),
        "`rate_limit.rate` must be a number > 0",
    );
    assert_error(
        &format!("    max_output_bytes: 0\n{CMD}"),
        "`max_output_bytes` must be > 0",
    );
    assert_error(
        &format!("    input_schema: [1]\n{CMD}"),
        "`input_schema` must be a JSON Schema object",
    );
    assert_error(
        &format!("    arguments: []\n    input_schema: {{type: object}}\n{CMD}"),
        "set `arguments` or `input_schema`, not both",
    );
    assert_error(
        &format!("    arguments: [{{name: a, type: strnig}}]\n{CMD}"),
        "tool \"t\": argument \"a\" has unknown type \"strnig\"",
    );
    assert_error(
        &format!("    arguments: [{{name: a, type: string}}, {{name: a, type: integer}}]\n{CMD}"),
        "argument \"a\" is declared twice",
    );
}

#[test]
fn names_are_checked() {
    let err = SidecarConfig::from_yaml_str(
        "tools:\n  - {name: 'bad name', description: d, backend: {command: [x]}}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("tool #0: invalid tool name \"bad name\""),
        "{err}"
    );
    let err = SidecarConfig::from_yaml_str(
        "tools:\n  - {name: a, description: d, backend: {command: [x]}}\n  - {name: a, description: d, backend: {command: [y]}}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("tool \"a\" is declared twice"), "{err}");
}

#[test]
fn load_names_the_missing_file() {
    let err = SidecarConfig::load("/nonexistent/sidecar.yaml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/sidecar.yaml"), "{err}");
}
