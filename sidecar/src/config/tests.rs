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
    per_caller_rate_limit: {rate: 1, burst: 3}
    timeout: 2s
    idempotent: true
    audit_arguments: true
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
    assert_eq!(config.listen.as_deref(), Some("127.0.0.1:50061"));
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
    assert_eq!(
        wc.per_caller_rate_limit,
        Some(pb::RateLimit {
            rate: 1.0,
            burst: 3
        })
    );
    assert!(wc.idempotent);
    assert!(wc.audit_arguments);
    let schema: Value = serde_json::from_str(&wc.input_schema_json).unwrap();
    assert_eq!(schema["required"], json!(["text"]));
    assert_eq!(schema["additionalProperties"], json!(false));

    let lookup = tools[1].descriptor();
    let schema: Value = serde_json::from_str(&lookup.input_schema_json).unwrap();
    assert_eq!(schema["properties"]["key"]["minLength"], json!(1));
    assert_eq!(lookup.timeout, None);
    assert!(!lookup.idempotent);
    assert!(!lookup.audit_arguments);
}

/// An executable file at `dir/name` (written by a child process, so that
/// no descriptor of this test process is open on it when it runs).
fn executable(dir: &Path, name: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            "printf '#!/bin/sh\\n' > \"$1\" && chmod 755 \"$1\"",
            "sh",
        ])
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn optional_fields() {
    let dir = tempfile::tempdir().unwrap();
    executable(dir.path(), "bin/tool");
    std::fs::create_dir(dir.path().join("work")).unwrap();
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
    task_timeout: 2h
    max_output_bytes: 1024
    backend:
      command: [./bin/tool, --flag]
      env: {MODE: fast}
      cwd: work
"#,
    )
    .unwrap();
    assert_eq!(config.instance_id.as_deref(), Some("pod-1"));
    let tools = config.build_tools(dir.path()).unwrap();
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
    assert_eq!(
        d.task_timeout,
        Some(prost_types::Duration {
            seconds: 7200,
            nanos: 0
        })
    );
    assert_eq!(tools[0].max_output_bytes(), 1024);
    assert_eq!(d.per_caller_rate_limit, None);
    assert!(
        !d.audit_arguments,
        "arguments stay out of the audit log by default"
    );
}

#[test]
fn per_caller_rate_limit_and_audit_arguments_reach_the_descriptor() {
    let config = SidecarConfig::from_yaml_str(
        r#"
tools:
  - name: t
    description: d
    rate_limit: {rate: 50, burst: 100}
    per_caller_rate_limit: {rate: 0.5}
    audit_arguments: true
    backend: {command: [cat]}
  - name: u
    description: d
    per_caller_rate_limit: {rate: 2, burst: 4}
    audit_arguments: false
    backend: {command: [cat]}
"#,
    )
    .unwrap();
    let tools = config.build_tools(Path::new("")).unwrap();
    let t = tools[0].descriptor();
    assert_eq!(
        (t.rate_limit, t.per_caller_rate_limit, t.audit_arguments),
        (
            Some(pb::RateLimit {
                rate: 50.0,
                burst: 100
            }),
            Some(pb::RateLimit {
                rate: 0.5,
                burst: 0
            }),
            true
        )
    );
    let u = tools[1].descriptor();
    assert_eq!(
        (u.rate_limit, u.per_caller_rate_limit, u.audit_arguments),
        (
            None,
            Some(pb::RateLimit {
                rate: 2.0,
                burst: 4
            }),
            false
        )
    );
}

/// The error for a config holding one tool with `body` (YAML lines of the
/// tool), as the library reports it without a file.
fn tool_error(body: &str) -> String {
    let yaml = format!("tools:\n  - name: t\n    description: d\n{body}");
    SidecarConfig::from_yaml_str(&yaml).unwrap_err().to_string()
}

const CMD: &str = "    backend: {command: [echo]}\n";

#[test]
fn every_problem_names_the_key_the_value_and_what_is_allowed() {
    let mut wrong = Vec::new();
    for (body, expected) in [
        (
            format!("    timout: 2s\n{CMD}"),
            "line 4, column 5: tools[0].timout: unknown key, did you mean timeout? (allowed here: name, description, title, read_only, destructive, open_world, config, arguments, input_schema, output_schema, version, tags, rate_limit, per_caller_rate_limit, timeout, task_timeout, idempotent, audit_arguments, max_output_bytes, backend)",
        ),
        (
            "    backend: {comand: [echo]}\n".into(),
            "line 4, column 15: tools[0].backend.comand: unknown key, did you mean command? (allowed here: http, command, env, cwd, mcp)",
        ),
        (
            format!("    arguments: [{{name: a, type: string, requird: true}}]\n{CMD}"),
            "line 4, column 41: tools[0].arguments[0].requird: unknown key, did you mean required? (allowed here: name, type, description, required, enum, items)",
        ),
        (
            format!("    rate_limit: {{rate: 1, brust: 2}}\n{CMD}"),
            "line 4, column 27: tools[0].rate_limit.brust: unknown key, did you mean burst? (allowed here: rate, burst)",
        ),
        (
            String::new(),
            "line 2, column 5: tools[0].backend: missing, expected a mapping with one of http, command or mcp, e.g. {command: [./tool.py]}, {http: {url: http://127.0.0.1:8080/lookup}} or {mcp: {command: [mcp-server-everything]}}",
        ),
        (
            format!("    rate_limit: {{rate: fast}}\n{CMD}"),
            "line 4, column 24: tools[0].rate_limit.rate: found \"fast\", expected a number of calls per second above 0, e.g. 5 or 0.5",
        ),
        (
            format!("    rate_limit: 5\n{CMD}"),
            "line 4, column 17: tools[0].rate_limit: found 5, expected a mapping with rate and burst, e.g. {rate: 5, burst: 10}",
        ),
        (
            format!("    rate_limit: {{rate: 1, burst: -1}}\n{CMD}"),
            "line 4, column 34: tools[0].rate_limit.burst: found -1, expected a whole number of calls at once, e.g. 10",
        ),
        (
            format!("    timeout: 2\n{CMD}"),
            "line 4, column 14: tools[0].timeout: found 2 (a number without a unit), expected a duration above 0 with a unit, e.g. 2s or 500ms",
        ),
        (
            format!("    timeout: 2 parsecs\n{CMD}"),
            "line 4, column 14: tools[0].timeout: found \"2 parsecs\" (unknown unit \"parsecs\"), expected a duration above 0 with a unit, e.g. 2s or 500ms; units: ms, s, m, h",
        ),
        (
            format!("    timeout: 0s\n{CMD}"),
            "line 4, column 14: tools[0].timeout: found 0s, expected a duration above 0 with a unit, e.g. 2s or 500ms",
        ),
        (
            format!("    task_timeout: 0s\n{CMD}"),
            "line 4, column 19: tools[0].task_timeout: found 0s, expected a duration above 0 with a unit, e.g. 2s or 500ms",
        ),
        (
            format!("    task_timeout: 8 days\n{CMD}"),
            "line 4, column 19: tools[0].task_timeout: found 8days, expected a duration of at most 7 days (168h): the registry runs no task longer",
        ),
        (
            format!("    task_timeout: 3\n{CMD}"),
            "line 4, column 19: tools[0].task_timeout: found 3 (a number without a unit), expected a duration above 0 with a unit, e.g. 2s or 500ms",
        ),
        (
            format!("    rate_limit: {{rate: 0}}\n{CMD}"),
            "line 4, column 24: tools[0].rate_limit.rate: found 0, expected a number of calls per second above 0, e.g. 5 or 0.5",
        ),
        (
            format!("    per_caller_rate_limit: {{rate: 0}}\n{CMD}"),
            "line 4, column 35: tools[0].per_caller_rate_limit.rate: found 0, expected a number of calls per second of each caller above 0, e.g. 1 or 0.5",
        ),
        (
            format!("    per_caller_rate_limit: {{rate: .nan}}\n{CMD}"),
            "line 4, column 35: tools[0].per_caller_rate_limit.rate: found NaN, expected a number of calls per second of each caller above 0, e.g. 1 or 0.5",
        ),
        (
            format!("    per_caller_rate_limit: {{rate: fast}}\n{CMD}"),
            "line 4, column 35: tools[0].per_caller_rate_limit.rate: found \"fast\", expected a number of calls per second of each caller above 0, e.g. 1 or 0.5",
        ),
        (
            format!("    per_caller_rate_limit: 1/s\n{CMD}"),
            "line 4, column 28: tools[0].per_caller_rate_limit: found \"1/s\", expected a mapping with rate and burst for each caller, e.g. {rate: 1, burst: 5}",
        ),
        (
            format!("    per_caller_rate_limit: {{rate: 1, burst: 2.5}}\n{CMD}"),
            "line 4, column 45: tools[0].per_caller_rate_limit.burst: found 2.5, expected a whole number of calls of each caller at once, e.g. 5",
        ),
        (
            format!("    per_caller_rate_limit: {{rate: 1, brust: 2}}\n{CMD}"),
            "line 4, column 38: tools[0].per_caller_rate_limit.brust: unknown key, did you mean burst? (allowed here: rate, burst)",
        ),
        (
            format!("    per_caller_ratelimit: {{rate: 1}}\n{CMD}"),
            "line 4, column 5: tools[0].per_caller_ratelimit: unknown key, did you mean per_caller_rate_limit? (allowed here: name, description, title, read_only, destructive, open_world, config, arguments, input_schema, output_schema, version, tags, rate_limit, per_caller_rate_limit, timeout, task_timeout, idempotent, audit_arguments, max_output_bytes, backend)",
        ),
        (
            format!("    audit_arguments: yes\n{CMD}"),
            "line 4, column 22: tools[0].audit_arguments: found \"yes\", expected true or false",
        ),
        (
            format!("    audit_arguments: [name]\n{CMD}"),
            "line 4, column 22: tools[0].audit_arguments: found a list, expected true or false",
        ),
        (
            "    backend: {command: [env], env: {TOOLMESH_CALLER: root}}\n".into(),
            "line 4, column 54: tools[0].backend.env.TOOLMESH_CALLER: the sidecar sets it for each call (the registry's caller and invocation id, the tool's config); remove it, and put settings under the tool's config",
        ),
        (
            "    backend: {http: {url: 'http://x', headers: {X-Toolmesh-Invocation-Id: i}}}\n"
                .into(),
            "line 4, column 75: tools[0].backend.http.headers.X-Toolmesh-Invocation-Id: the sidecar sets it for each call (the registry's caller and invocation id, the tool's config); remove it, and put settings under the tool's config",
        ),
        (
            format!("    max_output_bytes: 0\n{CMD}"),
            "line 4, column 23: tools[0].max_output_bytes: found 0, expected a whole number of bytes above 0, e.g. 1048576",
        ),
        (
            format!("    idempotent: yes\n{CMD}"),
            "line 4, column 17: tools[0].idempotent: found \"yes\", expected true or false",
        ),
        (
            format!("    tags: math\n{CMD}"),
            "line 4, column 11: tools[0].tags: found \"math\", expected a list of labels, e.g. [math, read-only]",
        ),
        (
            "    backend: {}\n".into(),
            "line 4, column 14: tools[0].backend: found none of http, command or mcp, expected a mapping with one of http, command or mcp, e.g. {command: [./tool.py]}, {http: {url: http://127.0.0.1:8080/lookup}} or {mcp: {command: [mcp-server-everything]}}",
        ),
        (
            "    backend: {command: [echo], http: {url: 'http://x'}}\n".into(),
            "line 4, column 14: tools[0].backend: has both http and command; keep one of them",
        ),
        (
            "    backend: {command: []}\n".into(),
            "line 4, column 24: tools[0].backend.command: found an empty list, expected a list: the program, then its arguments, e.g. [python3, word_count.py]",
        ),
        (
            "    backend: {command: python3 wc.py}\n".into(),
            "line 4, column 24: tools[0].backend.command: found \"python3 wc.py\", expected a list: the program, then its arguments, e.g. [python3, word_count.py]",
        ),
        (
            "    backend: {http: {url: 'not a url'}}\n".into(),
            "line 4, column 27: tools[0].backend.http.url: found \"not a url\" (relative URL without a base), expected an http:// or https:// URL, e.g. http://127.0.0.1:8080/lookup",
        ),
        (
            "    backend: {http: {url: 'localhost:8080/lookup'}}\n".into(),
            "line 4, column 27: tools[0].backend.http.url: found \"localhost:8080/lookup\" (it does not start with http:// or https://), expected an http:// or https:// URL, e.g. http://127.0.0.1:8080/lookup",
        ),
        (
            "    backend: {http: {url: 'http://x', headers: {'a b': c}}}\n".into(),
            "line 4, column 56: tools[0].backend.http.headers.a b: \"a b\" is not a valid header name",
        ),
        (
            "    backend: {http: {url: 'http://x'}, cwd: /tmp}\n".into(),
            "line 4, column 45: tools[0].backend.cwd: only applies to a command backend; remove it",
        ),
        (
            format!("    input_schema: [1]\n{CMD}"),
            "line 4, column 19: tools[0].input_schema: found a list, expected a JSON Schema written as a mapping, e.g. {type: object, properties: {key: {type: string}}}",
        ),
        (
            format!("    input_schema: {{type: objekt}}\n{CMD}"),
            "line 4, column 26: tools[0].input_schema.type: found \"objekt\", expected a JSON type: one of string, integer, number, boolean, array, object, null",
        ),
        (
            format!("    output_schema: {{$ref: 'https://example.com/s.json'}}\n{CMD}"),
            "line 4, column 27: tools[0].output_schema.$ref: \"https://example.com/s.json\" is outside the schema, and schemas are never fetched; copy it under $defs and refer to it as #/$defs/NAME",
        ),
        (
            format!("    arguments: []\n    input_schema: {{type: object}}\n{CMD}"),
            "line 5, column 19: tools[0].input_schema: set arguments or input_schema, not both",
        ),
        (
            format!("    arguments: [{{name: a, type: strnig}}]\n{CMD}"),
            "line 4, column 33: tools[0].arguments[0].type: found \"strnig\", expected one of string, integer, number, boolean, array, object",
        ),
        (
            format!(
                "    arguments: [{{name: a, type: string}}, {{name: a, type: integer}}]\n{CMD}"
            ),
            "line 4, column 49: tools[0].arguments[1].name: \"a\" is already the name of arguments[0]; each argument needs a name of its own",
        ),
        (
            format!("    config: {{style: pun, 2fast: x}}\n{CMD}"),
            "line 4, column 33: tools[0].config.2fast: \"2fast\" is not a config key: 1 to 64 letters, digits or '_', not starting with a digit (it names the environment variable TOOLMESH_CONFIG_<KEY>)",
        ),
        (
            format!("    config: {{style: pun, STYLE: joke}}\n{CMD}"),
            "line 4, column 21: tools[0].config.style: \"style\" and \"STYLE\" name the same environment variable; rename one",
        ),
        (
            "    backend: {command: [env], env: {TOOLMESH_CONFIG_STYLE: pun}}\n".into(),
            "line 4, column 60: tools[0].backend.env.TOOLMESH_CONFIG_STYLE: the sidecar sets it for each call (the registry's caller and invocation id, the tool's config); remove it, and put settings under the tool's config",
        ),
        (
            "    backend: {http: {url: 'http://x', headers: {x-toolmesh-config: '{}'}}}\n".into(),
            "line 4, column 68: tools[0].backend.http.headers.x-toolmesh-config: the sidecar sets it for each call (the registry's caller and invocation id, the tool's config); remove it, and put settings under the tool's config",
        ),
        (
            format!("    title: \"two\\nlines\"\n{CMD}"),
            "line 4, column 12: tools[0].title: must be at most 256 bytes, on one line",
        ),
        (
            format!("    arguments: [{{name: ids, type: array, items: {{type: integr}}}}]\n{CMD}"),
            "line 4, column 56: tools[0].arguments[0].items.type: found \"integr\", expected a JSON type: one of string, integer, number, boolean, array, object, null",
        ),
    ] {
        let error = tool_error(&body);
        if error != expected {
            wrong.push(format!(
                "for {body:?}\n  got      {error}\n  expected {expected}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn top_level_mistakes_have_a_position_too() {
    for (yaml, expected) in [
        (
            "regsitry: http://x:1\n",
            "line 1, column 1: regsitry: unknown key, did you mean registry? (allowed here: registry, listen, advertise, instance_id, tools)",
        ),
        (
            "tools:\n  name: x\n",
            "line 2, column 3: tools: found a mapping, expected a list of tools, each item starting with a dash, e.g. - name: word_count",
        ),
        (
            "registry: grpc://127.0.0.1:50051\n",
            "line 1, column 11: registry: \"grpc://127.0.0.1:50051\" is not a server address: the scheme must be http:// or https://; write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051",
        ),
        (
            "listen: localhost\n",
            "line 1, column 9: listen: \"localhost\" is not a listen address: the port is missing; write IP:port or host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::1]:50051 or localhost:50051",
        ),
        (
            "tools: [\n",
            "line 2, column 1: not valid YAML: did not find expected node content, while parsing a flow node",
        ),
    ] {
        let error = SidecarConfig::from_yaml_str(yaml).unwrap_err().to_string();
        assert_eq!(error, expected, "for {yaml:?}");
    }
}

#[test]
fn addresses_as_host_port_and_host_names_are_valid() {
    let config = SidecarConfig::from_yaml_str(
        "registry: 127.0.0.1:50051\nlisten: localhost:50061\nadvertise: 10.0.0.7:50061\n",
    )
    .unwrap();
    assert_eq!(config.listen.as_deref(), Some("localhost:50061"));
}

#[test]
fn names_are_checked() {
    let err = SidecarConfig::from_yaml_str(
        "tools:\n  - {name: 'bad name', description: d, backend: {command: [x]}}\n",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "line 2, column 12: tools[0].name: found \"bad name\", expected a tool name of 1 to 64 letters, digits, _, - or ., e.g. word_count"
    );
    let err = SidecarConfig::from_yaml_str(
        "tools:\n  - {name: a, description: d, backend: {command: [x]}}\n  - {name: a, description: d, backend: {command: [y]}}\n",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(
        err,
        "line 3, column 12: tools[1].name: \"a\" is already the name of tools[0]; each tool needs a name of its own"
    );
}

#[test]
fn load_names_the_missing_file() {
    let err = SidecarConfig::load("/nonexistent/sidecar.yaml")
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "cannot read /nonexistent/sidecar.yaml: No such file or directory (os error 2)"
    );
}

/// The error `load` gives for a config file in `dir` declaring one tool
/// with `backend`, named as `config` (relative to the working directory).
fn load_error(dir: &Path, backend: &str) -> String {
    let path = dir.join("sidecar.yaml");
    std::fs::write(
        &path,
        format!("tools:\n  - name: t\n    description: d\n    backend: {backend}\n"),
    )
    .unwrap();
    SidecarConfig::load(&path).unwrap_err().to_string()
}

#[test]
fn load_checks_programs_against_the_file_s_folder_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    assert_eq!(
        load_error(dir.path(), "{command: [./wc.py]}"),
        format!(
            "{d}/sidecar.yaml:4:24: tools[0].backend.command: program \"./wc.py\" not found in {d} (relative paths are resolved against the config file's folder)"
        )
    );
    std::fs::write(dir.path().join("plain.sh"), "echo hi").unwrap();
    assert_eq!(
        load_error(dir.path(), "{command: [./plain.sh]}"),
        format!(
            "{d}/sidecar.yaml:4:24: tools[0].backend.command: program \"./plain.sh\" is not executable; run chmod +x {d}/plain.sh"
        )
    );
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    assert_eq!(
        load_error(dir.path(), "{command: [./sub]}"),
        format!(
            "{d}/sidecar.yaml:4:24: tools[0].backend.command: program \"./sub\" is a folder, not a program"
        )
    );
    assert_eq!(
        load_error(
            dir.path(),
            "{command: [no-such-program-here], env: {PATH: /nowhere}}"
        ),
        format!(
            "{d}/sidecar.yaml:4:24: tools[0].backend.command: program \"no-such-program-here\" not found in PATH (/nowhere)"
        )
    );
    assert_eq!(
        load_error(dir.path(), "{command: [cat], cwd: work}"),
        format!(
            "{d}/sidecar.yaml:4:36: tools[0].backend.cwd: folder {d}/work does not exist (relative paths are resolved against the config file's folder)"
        )
    );
    executable(dir.path(), "ok.sh");
    let path = dir.path().join("sidecar.yaml");
    std::fs::write(
        &path,
        "tools:\n  - {name: t, description: d, backend: {command: [./ok.sh]}}\n",
    )
    .unwrap();
    SidecarConfig::load(&path).unwrap();
}

#[test]
fn build_tools_runs_the_same_checks() {
    let config = SidecarConfig::from_yaml_str(
        "tools:\n  - {name: t, description: d, backend: {command: [./missing]}}\n",
    )
    .unwrap();
    let err = config.build_tools(Path::new("/nonexistent")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tools[0].backend.command: program \"./missing\" not found in /nonexistent (relative paths are resolved against the config file's folder)"
    );
    let problem = err.problem().unwrap();
    assert_eq!(problem.key.to_string(), "tools[0].backend.command");
    let empty = SidecarConfig::from_yaml_str("tools: []\n").unwrap();
    assert_eq!(
        empty.check(Path::new("")).unwrap_err().to_string(),
        "tools: no tools declared; add at least one, e.g. - {name: echo, description: Echo, backend: {command: [cat]}}"
    );
}

fn mcp_error(entry: &str) -> String {
    let yaml = format!("tools:\n  - {entry}\n");
    SidecarConfig::from_yaml_str(&yaml).unwrap_err().to_string()
}

#[test]
fn an_mcp_entry_stands_for_the_servers_tools() {
    let yaml = "tools:\n  - backend: {mcp: {command: [sh, server.sh], env: {A: b}, env_pass: [GITHUB_TOKEN], prefix: everything., allow: [get-*, echo], deny: [get-env], relist_interval: 10s}}\n    tags: [demo]\n    rate_limit: {rate: 5, burst: 2}\n    timeout: 3s\n    task_timeout: 1h\n  - backend: {mcp: {url: 'http://127.0.0.1:8000/mcp', headers: {Authorization: Bearer x}}}\n  - {name: wc, description: Count words, backend: {command: [wc]}}\n";
    let config = SidecarConfig::from_yaml_str(yaml).expect("valid");
    let servers = config.mcp_servers(Path::new("")).expect("servers");
    assert_eq!(servers.len(), 2);
    let everything = &servers[0];
    assert!(matches!(
        &everything.transport,
        crate::mcp::McpTransport::Stdio { program, env, pass, .. }
            if program == Path::new("sh") && env.get("A").map(String::as_str) == Some("b")
                && pass == &["GITHUB_TOKEN"]
    ));
    assert_eq!(
        everything.selection.publish("get-sum").as_deref(),
        Some("everything.get-sum")
    );
    assert_eq!(everything.selection.publish("get-env"), None);
    assert_eq!(everything.selection.publish("add"), None);
    assert_eq!(
        everything.relist_interval,
        std::time::Duration::from_secs(10)
    );
    assert_eq!(everything.defaults.tags, ["demo"]);
    assert_eq!(everything.defaults.rate_limit.map(|l| l.burst), Some(2));
    assert_eq!(everything.defaults.timeout.map(|t| t.seconds), Some(3));
    assert_eq!(
        everything.defaults.task_timeout.map(|t| t.seconds),
        Some(3600)
    );
    assert!(matches!(
        &servers[1].transport,
        crate::mcp::McpTransport::Http { url, headers }
            if url == "http://127.0.0.1:8000/mcp" && headers.contains_key("Authorization")
    ));
    assert_eq!(
        servers[1].relist_interval,
        crate::mcp::DEFAULT_RELIST_INTERVAL
    );
    let tools = config.build_tools(Path::new("")).expect("tools");
    let names: Vec<_> = tools.iter().map(|t| t.descriptor().name.clone()).collect();
    assert_eq!(names, ["wc"]);
}

#[test]
fn an_mcp_entry_says_what_is_wrong_in_the_users_words() {
    let mut wrong = Vec::new();
    for (entry, expected) in [
        (
            "{name: t, backend: {mcp: {command: [x]}}}",
            "line 2, column 12: tools[0].name: the MCP server says this of each of its tools; remove it (backend.mcp.prefix, allow and deny choose what is published)",
        ),
        (
            "{backend: {mcp: {}}}",
            "line 2, column 21: tools[0].backend.mcp: found neither command nor url, expected an MCP server: a mapping with one of command or url, e.g. {command: [mcp-server-everything]} or {url: http://127.0.0.1:8000/mcp}",
        ),
        (
            "{backend: {mcp: {command: [x], url: 'http://y'}}}",
            "line 2, column 21: tools[0].backend.mcp: has both command and url; keep one of them",
        ),
        (
            "{backend: {mcp: {url: 'ftp://y'}}}",
            "line 2, column 27: tools[0].backend.mcp.url: found \"ftp://y\" (it does not start with http:// or https://), expected the server's streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp",
        ),
        (
            "{backend: {mcp: {url: 'http://y', env: {A: b}}}}",
            "line 2, column 44: tools[0].backend.mcp.env: only applies to a command; remove it",
        ),
        (
            "{backend: {mcp: {command: [x], prefix: 'my tools/'}}}",
            "line 2, column 44: tools[0].backend.mcp.prefix: \"my tools/\" cannot begin a tool name: use letters, digits, '_', '-' and '.', shorter than 64",
        ),
        (
            "{backend: {mcp: {command: [x], relist: 5s}}}",
            "line 2, column 36: tools[0].backend.mcp.relist: unknown key (allowed here: command, env, env_pass, cwd, url, headers, prefix, allow, deny, relist_interval)",
        ),
        (
            "{backend: {mcp: {command: [x], env_pass: [HOME, 'A-B']}}}",
            "line 2, column 53: tools[0].backend.mcp.env_pass[1]: found \"A-B\", expected a variable name: letters, digits and _, not starting with a digit, e.g. GITHUB_TOKEN",
        ),
        (
            "{backend: {mcp: {url: 'http://y', env_pass: [TOKEN]}}}",
            "line 2, column 49: tools[0].backend.mcp.env_pass: only applies to a command; remove it",
        ),
        (
            "{backend: {mcp: {command: [x]}, command: [y]}}",
            "line 2, column 15: tools[0].backend: has both command and mcp; keep one of them",
        ),
        (
            "{description: d, backend: {command: [y]}}",
            "line 2, column 5: tools[0].name: missing, expected a tool name of 1 to 64 letters, digits, _, - or ., e.g. word_count",
        ),
        (
            "{name: t, backend: {command: [y]}}",
            "line 2, column 5: tools[0].description: missing, expected a text that tells the LLM what the tool does",
        ),
    ] {
        let error = mcp_error(entry);
        if error != expected {
            wrong.push(format!(
                "for {entry:?}\n  got      {error}\n  expected {expected}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn an_mcp_servers_program_is_checked_against_this_machine() {
    let config =
        SidecarConfig::from_yaml_str("tools:\n  - backend: {mcp: {command: [./no-such-server]}}\n")
            .expect("valid");
    let error = config
        .check(Path::new("/nonexistent"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "tools[0].backend.mcp.command: program \"./no-such-server\" not found in /nonexistent (relative paths are resolved against the config file's folder)"
    );
}
