//! Approvals from the command line, with the real registry and sidecar
//! binaries, API keys and an `approvals:` rule: a call held for approval
//! is listed, watched and shown to its approver; its own caller may not
//! decide it; an approval runs it once, a denial fails its task with the
//! comment; every refusal ends with its status and exit code.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::ChildStdout;
use tonic::Code;
use tonic_types::StatusExt as _;
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};
use toolmesh_test_support::process::{SidecarProcess, binaries};
use toolmesh_test_support::registry_process::RegistryProcess;
use toolmesh_test_support::wait::eventually;

use crate::{exits, json_of, stderr, stdout, toolmesh};

const BOT: &str = "bot-key-0123456789";
const ALICE: &str = "alice-key-0123456789";

/// Every caller may call every tool; refunds wait for finance, or for
/// bot, except its own.
const POLICY: &str = r#"rules:
  - callers: ["*"]
    tools: ["*"]
approvals:
  - name: refunds
    tools: [refund]
    approvers: {groups: [finance], callers: [bot]}
    reason: refunds move money
"#;

/// How long any one step may take: generous, for a busy machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// A refund tool that appends the arguments of each run to `runs`.
fn tools_yaml(runs: &Path) -> String {
    format!(
        r#"tools:
  - name: refund
    description: Refunds a card payment
    destructive: true
    input_schema:
      type: object
      properties:
        amount: {{type: number}}
        card: {{type: string, x-sensitive: true}}
      required: [amount]
    backend:
      command: ["sh", "-c", "cat >> {runs}; echo >> {runs}; echo '{{\"refunded\": true}}'"]
"#,
        runs = runs.display()
    )
}

/// The arguments of each refund that ran.
fn runs(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `toolmesh args...` against `registry`, presenting `key`.
async fn run(registry: &str, key: &str, args: &[&str]) -> Output {
    let ran = toolmesh(registry)
        .env("TOOLMESH_TOKEN", key)
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(PATIENCE, ran)
        .await
        .unwrap_or_else(|_| panic!("toolmesh {args:?} still runs after {PATIENCE:?}"))
        .expect("toolmesh runs")
}

/// Invokes a refund of `amount` as bot, expecting it held: the task id
/// its refusal names.
async fn held(agent: &mut ToolRegistryClient<tonic::transport::Channel>, amount: u32) -> String {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        tool: "refund".into(),
        arguments_json: format!(r#"{{"amount": {amount}, "card": "4111-1111"}}"#),
        idempotency_key: String::new(),
        tool_digest: String::new(),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {BOT}").parse().expect("ascii"),
    );
    request.set_timeout(PATIENCE);
    let status = agent.invoke(request).await.expect_err("held for approval");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let details = status.get_error_details();
    let info = details.error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "APPROVAL_REQUIRED");
    info.metadata.get("task_id").expect("the task id").clone()
}

/// The next line of a watch, as JSON.
async fn next_event(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("an event in time")
        .expect("the watch's output")
        .expect("the watch goes on");
    serde_json::from_str(&line).expect("a JSON line")
}

/// Waits for task `id` (as bot) to be over, and returns it as `tasks get
/// -o json` shows it.
async fn ended(registry: &str, id: &str) -> Value {
    eventually(PATIENCE, "the task is over", || async {
        let state =
            json_of(&run(registry, BOT, &["tasks", "get", id, "-o", "json"]).await)["state"]
                .clone();
        state == "COMPLETED" || state == "FAILED"
    })
    .await;
    json_of(&run(registry, BOT, &["tasks", "get", id, "-o", "json"]).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvers_list_watch_approve_and_deny_held_calls() {
    let Some((registry_binary, sidecar_binary)) = binaries() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a directory");
    let keys = toolmesh_test_support::keys::api_keys_file(
        dir.path(),
        &[("bot", BOT, &["agents"]), ("alice", ALICE, &["finance"])],
    );
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("write the policy");
    let runs_file: PathBuf = dir.path().join("runs.jsonl");
    let (keys, policy) = (keys.display().to_string(), policy.display().to_string());
    let (_registry, addr) = RegistryProcess::start(
        &registry_binary,
        &[
            "--listen",
            "127.0.0.1:0",
            "--api-keys-file",
            &keys,
            "--policy-file",
            &policy,
        ],
        &[],
    )
    .await;
    let url = format!("http://{addr}");
    let _sidecar =
        SidecarProcess::start(&sidecar_binary, &url, "payments", &tools_yaml(&runs_file)).await;
    eventually(PATIENCE, "the refund tool is live", || async {
        run(&url, BOT, &["tools", "get", "refund"])
            .await
            .status
            .success()
    })
    .await;
    let mut agent = ToolRegistryClient::connect(url.clone())
        .await
        .expect("connect");

    // Alice watches from the start: nothing pending yet.
    let mut watching = toolmesh(&url)
        .env("TOOLMESH_TOKEN", ALICE)
        .args(["approvals", "watch", "-o", "json"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the watch");
    let mut events = BufReader::new(watching.stdout.take().expect("the watch's stdout")).lines();
    assert_eq!(next_event(&mut events).await["kind"], "SYNCED");

    // 1. Held, listed, shown; approved by alice, it runs once.
    let id = held(&mut agent, 250).await;
    let added = next_event(&mut events).await;
    assert_eq!(added["kind"], "ADDED", "{added}");
    assert_eq!(added["approval"]["id"], id.as_str(), "{added}");

    let listed = run(&url, ALICE, &["approvals", "list"]).await;
    exits(&listed, 0);
    let text = stdout(&listed);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "TOOL", "CALLER", "RULE", "EXPIRES", "ARGUMENTS"],
        "{text}"
    );
    assert!(
        lines[1].starts_with(&id)
            && lines[1].contains("refund")
            && lines[1].contains(" bot ")
            && lines[1].contains("refunds")
            && lines[1].contains(" in ")
            && lines[1].contains(r#""amount":250"#),
        "{text}"
    );
    assert!(!text.contains("4111-1111"), "the card is redacted: {text}");
    let listed = json_of(&run(&url, ALICE, &["approvals", "list", "-o", "json"]).await);
    let shown = &listed["approvals"][0];
    assert_eq!(shown["id"], id.as_str(), "{listed}");
    assert_eq!(shown["state"], "PENDING");
    assert_eq!(shown["caller"], "bot");
    assert_eq!(shown["rule"], "refunds");
    assert_eq!(shown["reason"], "refunds move money");
    assert_eq!(shown["arguments"]["amount"], 250);
    assert_eq!(shown["arguments_redacted"], true);
    assert_eq!(listed["more"], false);

    let got = json_of(&run(&url, ALICE, &["approvals", "get", &id, "-o", "json"]).await);
    assert_eq!(&got, shown, "get shows what list shows");
    let digest = got["digest"].as_str().expect("a digest").to_owned();
    assert_eq!(digest.len(), 64, "{got}");
    let text = stdout(&run(&url, ALICE, &["approvals", "get", &id]).await);
    assert!(
        text.contains(&format!("id:         {id}"))
            && text.contains("state:      PENDING")
            && text.contains("rule:       refunds: refunds move money")
            && text.contains(&format!("digest:     {digest}"))
            && text.contains("arguments (redacted):"),
        "{text}"
    );

    // Bot may decide refunds, but not its own.
    let own = run(&url, BOT, &["approvals", "approve", &id]).await;
    exits(&own, 9);
    assert!(
        stderr(&own).contains("PERMISSION_DENIED") && stderr(&own).contains("its own call"),
        "{}",
        stderr(&own)
    );
    // Another call's digest decides nothing; a malformed one never leaves.
    let other = "0".repeat(64);
    let wrong = run(
        &url,
        ALICE,
        &["approvals", "approve", &id, "--digest", &other],
    )
    .await;
    exits(&wrong, 1);
    assert!(
        stderr(&wrong).contains("FAILED_PRECONDITION"),
        "{}",
        stderr(&wrong)
    );
    exits(
        &run(
            &url,
            ALICE,
            &["approvals", "approve", &id, "--digest", "xyz"],
        )
        .await,
        2,
    );
    assert!(runs(&runs_file).is_empty(), "nothing ran yet");

    let approved = run(
        &url,
        ALICE,
        &[
            "approvals",
            "approve",
            &id,
            "--comment",
            "ok",
            "--digest",
            &digest,
        ],
    )
    .await;
    exits(&approved, 0);
    assert_eq!(stdout(&approved), format!("{id} APPROVED\n"));
    let removed = next_event(&mut events).await;
    assert_eq!(removed["kind"], "REMOVED", "{removed}");
    assert_eq!(removed["approval"]["id"], id.as_str(), "{removed}");
    assert_eq!(removed["approval"]["state"], "APPROVED", "{removed}");
    let done = ended(&url, &id).await;
    assert_eq!(done["state"], "COMPLETED", "{done}");
    assert_eq!(done["response"]["result"]["refunded"], true, "{done}");
    let ran = runs(&runs_file);
    assert_eq!(ran.len(), 1, "ran once: {ran:?}");
    assert_eq!(ran[0]["card"], "4111-1111", "with the arguments as held");

    // Decided once: a second decision is refused, naming the first.
    let again = run(&url, ALICE, &["approvals", "approve", &id]).await;
    exits(&again, 1);
    assert!(
        stderr(&again).contains("FAILED_PRECONDITION") && stderr(&again).contains("approved by"),
        "{}",
        stderr(&again)
    );
    let again = json_of(&run(&url, ALICE, &["approvals", "approve", &id, "-o", "json"]).await);
    assert_eq!(again["error"]["code"], "FAILED_PRECONDITION", "{again}");
    let decided = json_of(&run(&url, ALICE, &["approvals", "get", &id, "-o", "json"]).await);
    assert_eq!(decided["state"], "APPROVED", "{decided}");
    assert_eq!(decided["decided_by"], "alice");
    assert_eq!(decided["comment"], "ok");
    assert!(
        decided["decided_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{decided}"
    );

    // 2. Denied: the task fails with the comment; nothing ran.
    let id = held(&mut agent, 300).await;
    assert_eq!(next_event(&mut events).await["kind"], "ADDED");
    exits(&run(&url, ALICE, &["approvals", "deny", &id]).await, 2);
    exits(
        &run(&url, ALICE, &["approvals", "deny", &id, "--comment", " "]).await,
        2,
    );
    let denied = run(&url, ALICE, &["approvals", "deny", &id, "--comment", "no"]).await;
    exits(&denied, 0);
    assert_eq!(stdout(&denied), format!("{id} DENIED\n"));
    let removed = next_event(&mut events).await;
    assert_eq!(removed["approval"]["state"], "DENIED", "{removed}");
    assert_eq!(removed["approval"]["comment"], "no", "{removed}");
    let done = ended(&url, &id).await;
    assert_eq!(done["state"], "FAILED", "{done}");
    assert_eq!(done["error"]["code"], "PERMISSION_DENIED", "{done}");
    let message = done["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("denied by") && message.contains("alice") && message.ends_with(": no"),
        "{message}"
    );
    assert_eq!(runs(&runs_file).len(), 1, "the denied call never ran");
    watching.kill().await.expect("stop the watch");

    // An id nobody holds.
    let forged = "00000000-0000-4000-8000-000000000000";
    let missing = run(&url, ALICE, &["approvals", "get", forged]).await;
    exits(&missing, 6);
    assert!(
        stderr(&missing).contains("NOT_FOUND"),
        "{}",
        stderr(&missing)
    );
    let missing = json_of(&run(&url, ALICE, &["approvals", "get", forged, "-o", "json"]).await);
    assert_eq!(missing["error"]["code"], "NOT_FOUND", "{missing}");

    // 3. Two pending: a limit shows the newest, and says there are more;
    // a watch with a time limit shows both, then ends as done.
    let first = held(&mut agent, 10).await;
    // Held calls list by the millisecond they were made in, ties by id:
    // the second must come in a later millisecond to be the newest.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let newest = held(&mut agent, 20).await;
    let limited = json_of(
        &run(
            &url,
            ALICE,
            &["approvals", "list", "--limit", "1", "-o", "json"],
        )
        .await,
    );
    assert_eq!(
        limited["approvals"].as_array().map(Vec::len),
        Some(1),
        "{limited}"
    );
    assert_eq!(limited["approvals"][0]["id"], newest.as_str(), "{limited}");
    assert_eq!(limited["more"], true);
    let limited = run(&url, ALICE, &["approvals", "list", "-n", "1"]).await;
    exits(&limited, 0);
    assert!(
        stderr(&limited).contains("more approvals wait"),
        "{}",
        stderr(&limited)
    );
    let watched = run(&url, ALICE, &["approvals", "watch", "--timeout", "2s"]).await;
    exits(&watched, 0);
    let text = stdout(&watched);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with(&format!(
            "ADDED    {first} refund by bot (rule refunds, expires in "
        )),
        "{text}"
    );
    assert!(
        lines[1].starts_with(&format!("ADDED    {newest} ")),
        "{text}"
    );
    assert_eq!(lines[2], "SYNCED");
    // A limit of nothing is a bad command line.
    let nothing = run(&url, ALICE, &["approvals", "list", "--limit", "0"]).await;
    exits(&nothing, 2);
}
