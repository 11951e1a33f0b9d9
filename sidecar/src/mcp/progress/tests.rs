#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use rmcp::model::NumberOrString;
use tokio::sync::Notify;
use toolmesh_proto::deadline::Deadline;

use super::*;
use crate::context::CallContext;
use crate::mcp::McpTransport;
use crate::mcp::session::{self, Handler, McpBackend};
use crate::progress::Update;
use crate::tool::Backend;

fn notification(token: i64, progress: f64, total: Option<f64>) -> ProgressNotificationParam {
    let mut params =
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), progress);
    params.total = total;
    params.message = Some(format!("at {progress}"));
    params
}

#[test]
fn progress_reaches_its_call_only_and_never_goes_back() {
    let routes = Routes::default();
    let (progress, latest) = Progress::channel();
    routes.routes().insert(
        ProgressToken(NumberOrString::Number(1)),
        Route::new(progress),
    );
    routes.deliver(&notification(2, 5.0, Some(10.0)));
    assert_eq!(*latest.borrow(), None, "another call's");
    routes.deliver(&notification(1, 5.0, Some(10.0)));
    assert_eq!(*latest.borrow(), Some(Update::new(Some(0.5), "at 5")));
    routes.deliver(&notification(1, 3.0, Some(10.0)));
    assert_eq!(latest.borrow().as_ref().unwrap().message, "at 5");
    routes.deliver(&notification(1, 7.0, None));
    assert_eq!(*latest.borrow(), Some(Update::new(None, "at 7")));
}

/// A legacy stdio MCP server with one tool, `slow`, that reports progress
/// and never answers; it writes the `notifications/cancelled` it gets to
/// the file its first argument names.
const SLOW_SERVER: &str = r#"
import json, sys
cancelled = sys.argv[1]
def send(message):
    sys.stdout.write(json.dumps(dict(jsonrpc="2.0", **message)) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    method, id = message.get("method"), message.get("id")
    if method == "initialize":
        send(dict(id=id, result=dict(
            protocolVersion=message["params"]["protocolVersion"],
            capabilities=dict(tools=dict()),
            serverInfo=dict(name="slow", version="1"))))
    elif method == "tools/call":
        token = message["params"]["_meta"]["progressToken"]
        send(dict(method="notifications/progress", params=dict(
            progressToken=token, progress=1, total=4, message="one of four")))
    elif method == "notifications/cancelled":
        with open(cancelled, "w") as out:
            json.dump(message["params"], out)
    elif id is not None:
        send(dict(id=id, error=dict(code=-32601, message="Method not found")))
"#;

fn python() -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let runs = std::process::Command::new(&python)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    toolmesh_test_support::suite::require(
        "python3",
        if runs {
            Ok(python)
        } else {
            Err(format!("{python} does not run"))
        },
    )
}

#[tokio::test]
async fn a_task_call_passes_progress_on_and_is_cancelled_when_dropped() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("slow.py");
    std::fs::write(&script, SLOW_SERVER).unwrap();
    let cancelled = dir.path().join("cancelled.json");
    let transport = McpTransport::Stdio {
        program: python.into(),
        args: vec![
            script.display().to_string(),
            cancelled.display().to_string(),
        ],
        env: BTreeMap::new(),
        pass: Vec::new(),
        cwd: None,
    };
    let routes = Arc::new(Routes::default());
    let tools_changed = Arc::new(Notify::new());
    let handler = Handler {
        tools_changed: tools_changed.clone(),
        progress: routes.clone(),
    };
    let session = session::connect(&transport, &Arc::from("slow.py"), handler)
        .await
        .unwrap();
    let backend = McpBackend {
        name: "slow".into(),
        label: Arc::from("slow.py"),
        peer: session.peer().clone(),
        tools_changed,
        progress: routes.clone(),
    };
    let (progress, mut latest) = Progress::channel();
    let context = CallContext::new("alice", "t-1").with_progress(progress);
    {
        let call = backend.call("{}", &context, Deadline::after(Duration::from_secs(30)));
        let reported = tokio::time::timeout(Duration::from_secs(10), latest.changed());
        tokio::select! {
            answer = call => panic!("the server never answers: {answer:?}"),
            changed = reported => changed.unwrap().unwrap(),
        }
    }
    assert_eq!(
        *latest.borrow(),
        Some(Update::new(Some(0.25), "one of four"))
    );
    assert!(routes.routes().is_empty(), "the dropped call is unrouted");
    let first = cancellation(&cancelled).await;
    assert!(first["requestId"].is_number(), "{first}");

    // A call an agent waits on is rmcp's own `call_tool`, which cancels
    // the same way when dropped.
    std::fs::remove_file(&cancelled).unwrap();
    let plain = CallContext::new("alice", "inv-2");
    let waited = backend.call("{}", &plain, Deadline::after(Duration::from_secs(30)));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waited)
            .await
            .is_err()
    );
    let second = cancellation(&cancelled).await;
    assert_ne!(first["requestId"], second["requestId"]);
    let _ = session.cancel().await;
}

/// The `notifications/cancelled` params the server wrote to `file`,
/// waiting up to 10 s for them.
async fn cancellation(file: &std::path::Path) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(params) = serde_json::from_str::<serde_json::Value>(&text)
        {
            return params;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no notifications/cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
