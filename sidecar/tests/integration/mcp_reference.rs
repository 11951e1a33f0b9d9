//! More of the official MCP reference servers, unmodified and offline,
//! wrapped by the `toolmesh-sidecar` binary over stdio and called through
//! the real registry's `Invoke`: `mcp-server-time` (PyPI, on 2026-07-28
//! without `tools.listChanged` or `subscriptions/listen`) and
//! `@modelcontextprotocol/server-filesystem` (npm, 2025-11-25). And the
//! docs' server-everything example, which must deny `get-env`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_test_support::mcp::python_with_sdk;
use toolmesh_test_support::suite;

use crate::common::{TestRegistry, binary};
use crate::mcp::{TTL, killed_and_restarted, ran, spawn, tool_error, violated, wait_for_all};

/// The time server's tools.
const TIME_TOOLS: [&str; 2] = ["time.get_current_time", "time.convert_time"];
/// The filesystem server's tools the test calls.
const FILESYSTEM_TOOLS: [&str; 2] = ["fs.list_directory", "fs.read_text_file"];

/// A Python interpreter (its real path, not a shim) that runs
/// `mcp-server-time` as `python -m mcp_server_time`, or `None` after
/// [`suite::skip`].
fn time_server() -> Option<String> {
    let python = python_with_sdk()?;
    let found = Command::new(&python)
        .args(["-c", "import sys, mcp_server_time; print(sys.executable)"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .filter(|path| !path.is_empty())
        .ok_or_else(|| {
            format!(
                "{python} cannot import mcp_server_time; run {python} -m pip install -r scripts/requirements.txt"
            )
        });
    suite::require("mcp-server-time", found)
}

/// The `mcp-server-filesystem` launcher (a Node script) from
/// `scripts/mcp/node_modules`, or `None` after [`suite::skip`].
fn filesystem_server() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts/mcp/node_modules/.bin/mcp-server-filesystem");
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    let found = match (path.exists(), node) {
        (true, true) => Ok(path),
        (false, _) => Err(format!(
            "{} does not exist; run npm ci in scripts/mcp",
            path.display()
        )),
        (true, false) => Err("node is not on PATH".to_owned()),
    };
    suite::require("@modelcontextprotocol/server-filesystem", found)
}

/// A 2026-07-28 server that advertises no change stream (and answers
/// `subscriptions/listen` with -32601) is served: listed, called, followed
/// by relisting, and restarted only when its process exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_time_is_listed_invoked_and_restarted_when_it_exits() {
    let (Some(bin), Some(python)) = (binary("toolmesh-sidecar"), time_server()) else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    // The local time zone is given: the server would read it from TZ or
    // /etc/localtime, which differ between machines.
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        command: [{python}, -m, mcp_server_time, --local-timezone, UTC]\n        prefix: time.\n    timeout: 20s\n"
    );
    let sidecar = spawn(&bin, &yaml, &registry, "time", &[], &[]);
    wait_for_all(&registry, &TIME_TOOLS).await;

    let current = registry
        .descriptor("time.get_current_time")
        .await
        .expect("listed");
    assert_eq!(current.read_only, Some(true));
    assert!(current.idempotent, "idempotentHint carried over");
    let schema: Value = serde_json::from_str(&current.input_schema_json).expect("JSON");
    assert_eq!(schema["required"], json!(["timezone"]));
    let hint = schema["properties"]["timezone"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(hint.contains("'UTC'"), "the local time zone given: {hint}");

    // Japan has no daylight saving time: the offset is always +09:00.
    let tokyo = registry
        .invoke("time.get_current_time", r#"{"timezone": "Asia/Tokyo"}"#)
        .await
        .expect("ran");
    assert!(!tokyo.is_error, "{}", tokyo.result_json);
    let tokyo = ran(&tokyo);
    assert_eq!(tokyo["timezone"], "Asia/Tokyo", "{tokyo}");
    assert_eq!(tokyo["is_dst"], false, "{tokyo}");
    assert!(
        tokyo["datetime"]
            .as_str()
            .is_some_and(|t| t.ends_with("+09:00")),
        "{tokyo}"
    );
    let converted = registry
        .invoke(
            "time.convert_time",
            r#"{"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Kolkata"}"#,
        )
        .await
        .expect("ran");
    assert!(!converted.is_error, "{}", converted.result_json);
    let converted = ran(&converted);
    assert_eq!(converted["time_difference"], "+5.5h", "{converted}");
    assert!(
        converted["target"]["datetime"]
            .as_str()
            .is_some_and(|t| t.ends_with("T17:30:00+05:30")),
        "{converted}"
    );
    let unknown = tool_error(
        &registry,
        "time.get_current_time",
        &json!({"timezone": "Mars/Olympus"}),
    )
    .await;
    assert!(unknown.contains("Invalid timezone"), "{unknown}");
    assert_eq!(
        violated(&registry, "time.get_current_time", r#"{"timezone": 9}"#).await,
        "/timezone"
    );

    // Served on the current revision, without a change stream, and never
    // taken for down.
    let log = sidecar.log();
    assert!(log.contains("protocol=2026-07-28"), "{log}");
    assert!(log.contains("follows=\"relisting\""), "{log}");
    assert!(!log.contains("MCP server unavailable"), "{log}");
    // Its exit is what says it is gone: its tools leave, and come back
    // with a new process.
    killed_and_restarted(&sidecar, &registry, &TIME_TOOLS).await;
    let again = registry
        .invoke("time.get_current_time", r#"{"timezone": "UTC"}"#)
        .await
        .expect("ran");
    assert_eq!(ran(&again)["timezone"], "UTC", "{}", again.result_json);
}

/// server-filesystem reads and lists inside the folder it is given, and
/// refuses (as a tool error the agent sees) a path outside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_reads_its_root_and_refuses_a_path_outside_it() {
    let (Some(bin), Some(filesystem)) = (binary("toolmesh-sidecar"), filesystem_server()) else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let root_path = root.path().canonicalize().expect("canonical root");
    std::fs::write(root_path.join("notes.txt"), "first line\nsecond line\n").expect("write");
    std::fs::create_dir(root_path.join("drafts")).expect("mkdir");
    let outside = tempfile::tempdir().expect("temp dir");
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "not for agents\n").expect("write");

    let registry = TestRegistry::start(TTL).await;
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        command: [{}, {}]\n        prefix: fs.\n        deny: [write_file, edit_file, create_directory, move_file]\n    timeout: 20s\n",
        filesystem.display(),
        root_path.display()
    );
    let sidecar = spawn(&bin, &yaml, &registry, "filesystem", &[], &[]);
    wait_for_all(&registry, &FILESYSTEM_TOOLS).await;
    assert!(registry.tool("fs.write_file").await.is_none(), "denied");

    let root_text = root_path.display().to_string();
    let listed = registry
        .invoke("fs.list_directory", &json!({"path": root_text}).to_string())
        .await
        .expect("ran");
    assert!(!listed.is_error, "{}", listed.result_json);
    let listing = ran(&listed)["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut lines: Vec<&str> = listing.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["[DIR] drafts", "[FILE] notes.txt"], "{listing}");

    let read = registry
        .invoke(
            "fs.read_text_file",
            &json!({"path": root_path.join("notes.txt"), "head": 1}).to_string(),
        )
        .await
        .expect("ran");
    assert!(!read.is_error, "{}", read.result_json);
    assert_eq!(ran(&read), json!({"content": "first line"}));

    let refused = tool_error(&registry, "fs.read_text_file", &json!({"path": secret})).await;
    assert!(refused.contains("Access denied"), "{refused}");
    assert!(!refused.contains("not for agents"), "{refused}");
    let log = sidecar.log();
    assert!(log.contains("protocol=2025-11-25"), "{log}");
}

/// The YAML of docs/mcp.md's first example (server-everything) parses,
/// and leaves `get-env`, which hands the server's environment to any
/// caller, unpublished.
#[test]
fn the_docs_server_everything_example_denies_get_env() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/mcp.md");
    let doc = std::fs::read_to_string(&path).expect("docs/mcp.md");
    let yaml = doc
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a yaml block in docs/mcp.md");
    let config = SidecarConfig::from_yaml_str(yaml).expect("the example is valid");
    let mcp = config.tools[0].backend.mcp.as_ref().expect("an MCP entry");
    assert!(
        mcp.command
            .iter()
            .flatten()
            .any(|arg| arg.contains("server-everything")),
        "{yaml}"
    );
    let denied = |name: &str| {
        mcp.deny
            .iter()
            .any(|pattern| toolmesh_proto::pattern::Pattern::new(pattern).matches(name))
    };
    assert!(denied("get-env"), "{yaml}");
    assert!(!denied("echo"), "{yaml}");
}
