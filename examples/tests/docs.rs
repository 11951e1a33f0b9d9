//! The code of the guides a newcomer follows, run as written:
//! `docs/tools-in-any-language.md`, `docs/export.md` and
//! `docs/observability.md`.
//!
//! A runnable block (shell, Python, JavaScript, TypeScript) says on the
//! line above its fence which test runs it (`<!-- test: FILE -->`, a file
//! that names the doc) or why none can (`<!-- not run: REASON -->`):
//! [`every_runnable_block_says_how_it_is_tested`] holds the docs to that.
//! The tests here run the blocks marked for this file, and fail when their
//! number changes:
//! - the `command` backend's YAML with its Python program, and the Node
//!   program, served by the real sidecar and called through the registry;
//! - the `http` backend's YAML, against `examples/tools/node/server.mjs`;
//! - `docs/export.md`'s grpcurl command, against a registry of its own
//!   (the only change: the registry's address).
//!
//! `examples/agents/python/test_docs.py` runs the blocks that need the
//! Python agent and its stubs, which the agents' suite installs.
#![allow(clippy::unwrap_used)]

#[path = "common/markdown.rs"]
mod markdown;
#[path = "common/mesh.rs"]
mod mesh;

use std::path::{Path, PathBuf};

use markdown::Block;
use mesh::{Mesh, NodeServer, SHIPPED_HTTP_URL, node, on_path};
use serde_json::json;
use tokio::process::Command;

/// The docs whose blocks are held to a marker.
const DOCS: [&str; 3] = [
    "docs/tools-in-any-language.md",
    "docs/export.md",
    "docs/observability.md",
];

/// The fence languages of blocks that a reader runs.
const RUNNABLE: [&str; 11] = [
    "sh",
    "bash",
    "shell",
    "console",
    "python",
    "py",
    "js",
    "javascript",
    "mjs",
    "ts",
    "typescript",
];

/// The marker of the blocks this file runs.
const HERE: &str = "test: examples/tests/docs.rs";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn doc_blocks(doc: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    markdown::blocks(&text)
}

/// The blocks of `doc` marked for this file, in order; there must be
/// `count`, in these `languages`.
fn marked_here<const N: usize>(doc: &str, languages: [&str; N]) -> [Block; N] {
    let found: Vec<Block> = doc_blocks(doc)
        .into_iter()
        .filter(|block| block.marker.as_deref() == Some(HERE))
        .collect();
    let shown: Vec<&str> = found.iter().map(|b| b.language.as_str()).collect();
    assert_eq!(shown, languages, "the blocks of {doc} marked `{HERE}`");
    found.try_into().unwrap()
}

#[test]
fn every_runnable_block_says_how_it_is_tested() {
    let mut wrong = Vec::new();
    for doc in DOCS {
        for block in doc_blocks(doc) {
            let marker = block.marker.as_deref();
            let ok = match marker {
                Some(marker) if marker.starts_with("test: ") => {
                    let file = repo().join(&marker["test: ".len()..]);
                    std::fs::read_to_string(&file).is_ok_and(|test| test.contains(doc))
                }
                Some(marker) if marker.starts_with("not run: ") => {
                    !marker["not run: ".len()..].trim().is_empty()
                }
                Some(_) => false,
                None => !RUNNABLE.contains(&block.language.as_str()),
            };
            if !ok {
                wrong.push(format!(
                    "{doc}:{}: ```{} under {marker:?}",
                    block.line, block.language
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a runnable block has `<!-- test: FILE -->` (FILE names the doc) or `<!-- not run: REASON -->` on the line above its fence:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn blocks_keep_their_language_line_and_marker() {
    let text = "intro\n<!-- test: here -->\n```sh\necho hi\n```\n\n```\nplain\n```\n";
    let found = markdown::blocks(text);
    assert_eq!(found.len(), 2);
    assert_eq!(
        (
            found[0].language.as_str(),
            found[0].body.as_str(),
            found[0].line
        ),
        ("sh", "echo hi\n", 3)
    );
    assert_eq!(found[0].marker.as_deref(), Some("test: here"));
    assert_eq!(
        (found[1].language.as_str(), found[1].marker.as_deref()),
        ("", None)
    );
    assert_eq!(markdown::bodies(text, "sh"), ["echo hi\n"]);
}

/// The guide's `command` YAML runs its Python program as `word_stats.py`,
/// and a `slugify` tool beside it runs the Node program as `slugify.mjs`,
/// both written where each tool's `cwd` points (the YAML itself lives in
/// the sidecar's temp dir).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_command_tools_run_as_written() {
    let [yaml, python, js, _] = marked_here(
        "docs/tools-in-any-language.md",
        ["yaml", "python", "js", "yaml"],
    );
    if on_path("python3", "install Python 3").is_none() || node().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("word_stats.py"), &python.body).unwrap();
    std::fs::write(dir.path().join("slugify.mjs"), &js.body).unwrap();
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml.body).unwrap();
    let tools = config["tools"].as_sequence_mut().unwrap();
    tools.push(
        serde_yaml_ng::from_str(
            "{name: slugify, description: Turn a text into a URL slug., input_schema: {type: object, properties: {text: {type: string}}, required: [text]}, backend: {command: [node, slugify.mjs]}}",
        )
        .unwrap(),
    );
    for tool in tools {
        tool["backend"]["cwd"] = dir.path().display().to_string().into();
    }
    let yaml = serde_yaml_ng::to_string(&config).unwrap();
    let Some(mesh) = Mesh::serve("docs-commands", &yaml, &["word_stats", "slugify"]).await else {
        return;
    };
    assert_eq!(
        mesh.succeeds("word_stats", json!({"text": "The cat and the hat"}))
            .await,
        json!({"words": 5})
    );
    assert_eq!(
        mesh.fails("word_stats", json!({"text": "..."})).await,
        json!(
            "command failed (exit code 1): the text has no words: give a text with at least one word"
        )
    );
    assert_eq!(
        mesh.succeeds("slugify", json!({"text": "Hello, World!"}))
            .await,
        json!({"slug": "hello-world"})
    );
    assert_eq!(
        mesh.fails("slugify", json!({"text": "!!!"})).await,
        json!(
            "command failed (exit code 1): nothing to make a slug of: the text has no letters or digits"
        )
    );
}

/// The guide's `http` YAML, its URL's origin moved to where
/// `examples/tools/node/server.mjs` listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_http_tool_runs_as_written() {
    let [.., http] = marked_here(
        "docs/tools-in-any-language.md",
        ["yaml", "python", "js", "yaml"],
    );
    let Some(server) = NodeServer::start().await else {
        return;
    };
    let yaml = http.body.replace(SHIPPED_HTTP_URL, &server.url);
    assert_ne!(yaml, http.body, "the guide's URL is {SHIPPED_HTTP_URL}");
    let Some(mesh) = Mesh::serve("docs-http", &yaml, &["slugify_http"]).await else {
        return;
    };
    assert_eq!(
        mesh.succeeds("slugify_http", json!({"text": "Hello, World!"}))
            .await,
        json!({"slug": "hello-world"})
    );
}

/// `ExportTools` in Anthropic's format gives `word_stats` with its input
/// schema, as the Python example's YAML declares it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_command_runs_as_written() {
    let [command] = marked_here("docs/export.md", ["sh"]);
    if on_path("grpcurl", "scripts/test.sh installs it").is_none() {
        return;
    }
    let Some(mesh) = Mesh::start("python", None, &["word_stats"]).await else {
        return;
    };
    let line = command.body.trim();
    let ours = line.replace("127.0.0.1:50051", &mesh._registry.addr.to_string());
    assert_ne!(ours, line, "the doc's command names 127.0.0.1:50051");
    let output = Command::new("sh")
        .args(["-c", &ours])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{ours}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let tools: serde_json::Value =
        serde_json::from_str(answer["toolsJson"].as_str().unwrap()).unwrap();
    let shipped: serde_json::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(mesh::tools_dir().join("python/sidecar.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(tools[0]["name"], "word_stats", "{tools}");
    assert_eq!(
        tools[0]["input_schema"], shipped["tools"][0]["input_schema"],
        "{tools}"
    );
    assert_eq!(tools.as_array().map(Vec::len), Some(1), "{tools}");
}
