//! `docs/mcp-endpoint.md` as written: its Python snippet run against a
//! registry, its registry command started (on ports the kernel picks
//! instead of the doc's), its host configurations parsed, and its flags
//! table compared with `toolmesh-registry --help`. What cannot run here (VS
//! Code, Claude Code, `npx mcp-remote`) is checked for the URL and header
//! it would send.

use std::{process::Stdio, time::Duration};

use serde_json::{Value, json};
use toolmesh_registry::Config;
use toolmesh_test_support::{
    mcp::python_with_sdk, process::binary, registry_process::RegistryProcess,
};

use crate::mcp::{McpRegistry, Rpc, config, logged_mcp_address, standard_sidecar};
use crate::mcp_access::write_keys;

const DOC: &str = include_str!("../../../docs/mcp-endpoint.md");

/// Every fenced block of the doc: its language and its text.
fn fenced() -> Vec<(&'static str, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(&str, String)> = None;
    for line in DOC.lines() {
        match (open.take(), line.strip_prefix("```")) {
            (None, Some(language)) => open = Some((language.trim(), String::new())),
            (Some((language, text)), Some(_)) => blocks.push((language, text)),
            (Some((language, mut text)), None) => {
                text.push_str(line);
                text.push('\n');
                open = Some((language, text));
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a block is not closed");
    blocks
}

/// The blocks in `language`.
fn blocks(language: &str) -> Vec<String> {
    fenced()
        .into_iter()
        .filter(|(l, _)| *l == language)
        .map(|(_, text)| text)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_snippet_runs_as_written() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let snippets = blocks("python");
    assert_eq!(snippets.len(), 1, "one Python snippet");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("snippet.py");
    std::fs::write(&script, &snippets[0]).unwrap();
    let keys = write_keys(dir.path(), &[("doc-agent", "doc-key-0123456789")]);
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        ..config()
    })
    .await;
    let rpc = Rpc::new(&registry.mcp).with("authorization", "Bearer doc-key-0123456789");
    let _sidecar = standard_sidecar(&registry, &rpc).await;

    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .env("TOOLMESH_MCP_URL", &registry.mcp)
        .env("TOOLMESH_KEY", "doc-key-0123456789")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("the snippet ends")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.trim().is_empty(), "{stderr}");
    // Two tools a page (the tests' --mcp-page-size), then the call.
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "['add', 'limited']",
            "['toolmesh.search_tools']",
            "False {'calls': 1, 'sum': 42}",
        ],
        "{stdout}"
    );
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_command_serves_mcp_where_it_says() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let first = blocks("sh").into_iter().next().expect("an sh block");
    let (command, comment) = first.trim().split_once('#').expect("a comment");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[0], "toolmesh-registry", "{first}");
    let url = comment
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the URL it serves");
    let (doc_address, path) = url["http://".len()..].split_once('/').unwrap();
    // The doc's address, on a port the kernel picks.
    let args: Vec<String> = words[1..]
        .iter()
        .map(|w| {
            if *w == doc_address {
                "127.0.0.1:0".to_owned()
            } else {
                (*w).to_owned()
            }
        })
        .chain(["--listen".to_owned(), "127.0.0.1:0".to_owned()])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (registry, _grpc) = RegistryProcess::start(&binary, &args, &[]).await;
    let url = format!("http://{}/{path}", logged_mcp_address(&registry).await);
    let reply = Rpc::new(&url).modern(1, "server/discover", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let result = &reply.message.expect("an answer")["result"];
    assert!(result["supportedVersions"].is_array(), "{result}");
    drop(registry);
}

/// The `/mcp` URL and the `Authorization` value a host configuration
/// sends, wherever in it they are.
fn url_and_authorization(config: &Value) -> (Vec<String>, Vec<String>) {
    let mut strings = Vec::new();
    let mut stack = vec![config];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(text) => strings.push(text.clone()),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (key, item) in map {
                    if key == "Authorization" {
                        strings.push(format!("Authorization:{}", item.as_str().unwrap_or("")));
                    }
                    stack.push(item);
                }
            }
            _ => {}
        }
    }
    let urls = strings
        .iter()
        .filter(|s| s.starts_with("https://") && s.ends_with("/mcp"))
        .cloned()
        .collect();
    let authorizations = strings
        .iter()
        .filter_map(|s| s.strip_prefix("Authorization:"))
        .map(|s| s.trim().to_owned())
        .collect();
    (urls, authorizations)
}

#[test]
fn the_host_configurations_send_the_url_and_the_credential() {
    let configs = blocks("json");
    assert_eq!(configs.len(), 2, "VS Code and Claude Desktop");
    for text in &configs {
        let config: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let (urls, authorizations) = url_and_authorization(&config);
        assert_eq!(urls.len(), 1, "{text}");
        assert_eq!(authorizations.len(), 1, "{text}");
        let authorization = &authorizations[0];
        assert!(
            authorization.starts_with("Bearer ") || authorization.starts_with("${"),
            "{text}"
        );
    }
    // Claude Desktop's bridge gets the header's value from its environment.
    let desktop: Value = serde_json::from_str(&configs[1]).unwrap();
    let server = &desktop["mcpServers"]["toolmesh"];
    assert_eq!(server["command"], "npx");
    assert!(
        server["env"]["TOOLMESH_AUTH"]
            .as_str()
            .is_some_and(|v| v.starts_with("Bearer ")),
        "{server}"
    );

    let claude = blocks("sh")
        .into_iter()
        .find(|b| b.contains("claude mcp add"))
        .expect("the Claude Code command");
    assert!(claude.contains("--transport http"), "{claude}");
    assert!(
        claude.contains("--header \"Authorization: Bearer $TOOLMESH_KEY\""),
        "{claude}"
    );
    assert!(
        claude
            .split_whitespace()
            .any(|w| w.starts_with("https://") && w.ends_with("/mcp")),
        "{claude}"
    );
}

/// One row of the doc's flags table.
struct Flag {
    flag: String,
    variable: String,
    default: String,
}

fn flag_rows() -> Vec<Flag> {
    let code = |cell: &str| cell.trim().trim_matches('`').to_owned();
    DOC.lines()
        .filter(|line| line.starts_with("| `--mcp-"))
        .map(|line| {
            let line = line.replace("\\|", "/");
            let cells: Vec<&str> = line.split('|').collect();
            Flag {
                flag: code(cells[1])
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                variable: code(cells[2]),
                default: code(cells[3]),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flags_table_is_what_the_binary_takes() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let output = tokio::process::Command::new(&binary)
        .arg("--help")
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    let rows = flag_rows();
    assert_eq!(rows.len(), 9, "every --mcp-* flag");
    for row in rows {
        let start = help
            .find(&format!("      {} ", row.flag))
            .unwrap_or_else(|| panic!("{} is not in --help", row.flag));
        let rest = &help[start..];
        let entry = &rest[..rest[6..].find("\n      --").map_or(rest.len(), |i| i + 6)];
        assert!(
            entry.contains(&format!("[env: {}=]", row.variable)),
            "{}: {entry}",
            row.flag
        );
        let default = match row.default.as_str() {
            "off" | "none" | "see text" => None,
            value => Some(format!("[default: {value}]")),
        };
        match default {
            Some(default) => assert!(entry.contains(&default), "{}: {entry}", row.flag),
            None => assert!(!entry.contains("[default:"), "{}: {entry}", row.flag),
        }
    }
}
