//! The example tools of `examples/tools/` (Python, Node, shell), each run
//! through the real `toolmesh-sidecar` and `toolmesh-registry` binaries and
//! called as an agent calls them (`Invoke`): per language a success, a tool
//! error (`is_error`, carrying the tool's message) and a timeout
//! (`DEADLINE_EXCEEDED`, with the tool's processes gone). Every shipped
//! `sidecar.yaml` is also checked with the sidecar's own config code.
//!
//! These are the contracts `docs/tools-in-any-language.md` states: a change
//! that breaks one fails here.
//!
//! The binaries come from `TOOLMESH_BIN_DIR` (see
//! `toolmesh_test_support::process::bin_dir`); without them the tests fail
//! under the test command and say they skipped under a plain `cargo test`.

#[path = "common/mesh.rs"]
mod mesh;

use serde_json::json;
use tonic::Code;
use toolmesh_sidecar::config::SidecarConfig;

use mesh::*;

#[test]
fn every_shipped_config_is_valid_and_builds() {
    for language in ["python", "node", "shell"] {
        let dir = tools_dir().join(language);
        let config = SidecarConfig::load(dir.join("sidecar.yaml"))
            .unwrap_or_else(|e| panic!("{language}/sidecar.yaml: {e}"));
        let tools = config
            .build_tools(&dir)
            .unwrap_or_else(|e| panic!("{language}/sidecar.yaml: {e}"));
        assert!(
            !tools.is_empty(),
            "{language}/sidecar.yaml declares no tool"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_word_stats() {
    let Some(mesh) = Mesh::start("python", None, &["word_stats"]).await else {
        return;
    };
    assert_eq!(
        mesh.succeeds(
            "word_stats",
            json!({"text": "The cat and the hat", "top": 1})
        )
        .await,
        json!({"words": 5, "distinct": 4, "top": [{"word": "the", "count": 2}]})
    );
    assert_eq!(
        mesh.fails("word_stats", json!({"text": " ... "})).await,
        json!(
            "command failed (exit code 1): the text has no words: give a text with at least one word"
        )
    );
    mesh.times_out(
        "word_stats",
        json!({"text": "slow", "delay": 30}),
        &["word_stats.py"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_slugify_command() {
    if node().is_none() {
        return;
    }
    let Some(mesh) = Mesh::start("node", Some("http://127.0.0.1:9"), &["slugify"]).await else {
        return;
    };
    assert_eq!(
        mesh.succeeds("slugify", json!({"text": "Héllo, World!"}))
            .await,
        json!({"slug": "hello-world"})
    );
    assert_eq!(
        mesh.succeeds("slugify", json!({"text": "a b", "separator": "_"}))
            .await,
        json!({"slug": "a_b"})
    );
    assert_eq!(
        mesh.fails("slugify", json!({"text": "!!!"})).await,
        json!(
            "command failed (exit code 1): nothing to make a slug of: the text has no letters or digits"
        )
    );
    mesh.times_out(
        "slugify",
        json!({"text": "slow", "delay": 30}),
        &["slugify.mjs"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_slugify_over_http() {
    let Some(server) = NodeServer::start().await else {
        return;
    };
    let Some(mesh) = Mesh::start("node", Some(&server.url), &["slugify_http"]).await else {
        return;
    };
    // The x-tool-key header of the YAML reached the server (it answers 401 without).
    assert_eq!(
        mesh.succeeds("slugify_http", json!({"text": "Héllo, World!"}))
            .await,
        json!({"slug": "hello-world"})
    );
    // A 422 with a JSON body: the body is the error result, as it is.
    assert_eq!(
        mesh.fails("slugify_http", json!({"text": "!!!"})).await,
        json!({"error": "nothing to make a slug of: the text has no letters or digits"})
    );
    mesh.times_out("slugify_http", json!({"text": "slow", "delay": 30}), &[])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_disk_free_and_utc_now() {
    let Some(mesh) = Mesh::start("shell", None, &["disk_free", "utc_now"]).await else {
        return;
    };
    let free = mesh.succeeds("disk_free", json!({"path": "/"})).await;
    assert_eq!(free["path"], json!("/"), "{free}");
    for field in ["total_kb", "used_kb", "available_kb", "used_percent"] {
        assert!(free[field].is_u64(), "{field} in {free}");
    }
    let error = mesh
        .fails("disk_free", json!({"path": "/no/such/dir"}))
        .await;
    let error = error.as_str().unwrap_or_default();
    assert!(
        error.starts_with("command failed (exit code 1): df: ")
            && error.ends_with("No such file or directory"),
        "{error}"
    );
    // The schema keeps what the script cannot parse out: the registry refuses it.
    let refused = mesh
        .invoke("disk_free", json!({"path": "/tmp/\"quoted\""}))
        .await
        .expect_err("a quote in path");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    // Plain text output is passed on as a JSON string, newline included.
    let now = mesh.succeeds("utc_now", json!({})).await;
    let now = now.as_str().unwrap_or_default();
    assert!(
        now.len() == "2026-01-31T12:00:00Z\n".len() && now.ends_with("Z\n"),
        "{now:?}"
    );
    // The script and the `sleep` it started are killed together.
    mesh.times_out(
        "disk_free",
        json!({"path": "/", "delay": 30}),
        &["disk_free.sh", "sleep 30"],
    )
    .await;
}
