//! Approvals end to end (docs/approvals.md), with the real registry and
//! sidecar binaries: a destructive call waits, is approved by an approver
//! and runs once with the approved arguments; a denial reaches the agent
//! with its comment; an undecided call expires; nobody decides their own
//! call or one outside their rule; in Redis mode a call held on one replica
//! is decided on another, raced by two approvers, and runs once.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use tonic::{Code, Request};
use tonic_types::StatusExt as _;
use toolmesh_proto::pb::{
    self, approvals_client::ApprovalsClient, tasks_client::TasksClient,
    tool_registry_client::ToolRegistryClient,
};
use toolmesh_test_support::{
    process::{SidecarProcess, binaries},
    registry_process::RegistryProcess,
};

use crate::common::*;

const BOT: &str = "bot-key-0123456789";
const ALICE: &str = "alice-key-0123456789";
const CAROL: &str = "carol-key-0123456789";
const EVE: &str = "eve-key-0123456789";

/// Every caller may call every tool; refunds wait for finance (and may be
/// approved by bot too, except its own), posted to `hook`; huge ones
/// expire in two seconds, posted to `hanging`.
fn policy(hook: &str, hanging: &str) -> String {
    format!(
        r#"rules:
  - callers: ["*"]
    tools: ["*"]
approvals:
  - name: huge-refunds
    tools: [refund]
    when: ["/amount > 1000"]
    approvers: {{groups: [finance]}}
    expires_after: 2s
    webhook: {hanging}
  - name: refunds
    destructive: true
    approvers: {{groups: [finance], callers: [bot]}}
    reason: refunds move money
    webhook: {hook}
"#
    )
}

/// A webhook that takes every post: the bodies it took.
async fn hook() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
) {
    use axum::{Router, routing::post};
    let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let app = Router::new().route(
        "/hook",
        post({
            let taken = taken.clone();
            move |body: String| async move {
                if let Ok(json) = serde_json::from_str(&body) {
                    taken.lock().expect("not poisoned").push(json);
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, taken)
}

/// A webhook that takes connections and never answers.
async fn hanging_hook() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    (url, held)
}

fn tools_yaml(runs: &Path) -> String {
    format!(
        r#"tools:
  - name: refund
    description: Refunds a card payment
    destructive: true
    task_timeout: 30s
    input_schema:
      type: object
      properties:
        amount: {{type: number}}
        card: {{type: string, x-sensitive: true}}
      required: [amount]
    backend:
      command: ["sh", "-c", "cat >> {runs}; echo >> {runs}; echo '{{\"refunded\": true}}'"]
  - name: payout
    description: Pays a seller out, once a minute at most
    destructive: true
    rate_limit: {{rate: 0.016, burst: 1}}
    backend:
      command: ["sh", "-c", "echo '{{\"paid\": true}}'"]
  - name: lookup
    description: Looks a payment up
    read_only: true
    backend:
      command: ["sh", "-c", "echo '{{\"found\": true}}'"]
"#,
        runs = runs.display()
    )
}

/// The registry's files and the runs the refund tool made.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new(policy: &str) -> Self {
        let dir = tempfile::tempdir().expect("a directory");
        toolmesh_test_support::keys::api_keys_file(
            dir.path(),
            &[
                ("bot", BOT, &["agents"]),
                ("alice", ALICE, &["finance"]),
                ("carol", CAROL, &["finance"]),
                ("eve", EVE, &[]),
            ],
        );
        std::fs::write(dir.path().join("policy.yaml"), policy).expect("write the policy");
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn runs_file(&self) -> PathBuf {
        self.dir.path().join("runs.jsonl")
    }

    /// The arguments of every refund that ran, one per line.
    fn runs(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.runs_file())
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }

    fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "--listen",
            "127.0.0.1:0",
            "--api-keys-file",
            &self.path("keys.yaml"),
            "--policy-file",
            &self.path("policy.yaml"),
            "--audit-log",
            &self.path("audit.jsonl"),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        args.extend(extra.iter().map(ToString::to_string));
        args
    }

    fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

fn authed<T>(message: T, key: &str) -> Request<T> {
    toolmesh_test_support::keys::bearer(message, key)
}

fn refund(amount: i64, key: &str) -> pb::InvokeRequest {
    pb::InvokeRequest {
        tool: "refund".into(),
        arguments_json: format!(r#"{{"amount": {amount}, "card": "4111-1111"}}"#),
        idempotency_key: key.into(),
        tool_digest: String::new(),
        ..Default::default()
    }
}

struct Clients {
    agents: ToolRegistryClient<tonic::transport::Channel>,
    tasks: TasksClient<tonic::transport::Channel>,
    approvals: ApprovalsClient<tonic::transport::Channel>,
}

async fn clients(addr: std::net::SocketAddr) -> Clients {
    let url = format!("http://{addr}");
    Clients {
        agents: ToolRegistryClient::connect(url.clone())
            .await
            .expect("connect"),
        tasks: TasksClient::connect(url.clone()).await.expect("connect"),
        approvals: ApprovalsClient::connect(url).await.expect("connect"),
    }
}

/// Invokes `request` as bot, expecting it held: the task id its refusal
/// names.
async fn held(clients: &mut Clients, request: pb::InvokeRequest) -> String {
    let status = clients
        .agents
        .invoke(authed(request, BOT))
        .await
        .expect_err("held for approval");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let details = status.get_error_details();
    let info = details.error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "APPROVAL_REQUIRED");
    let task = info.metadata.get("task_id").expect("the task id").clone();
    assert!(status.message().contains(&task), "{}", status.message());
    assert!(
        status.message().contains("awaits") || status.message().contains("waits for approval"),
        "{}",
        status.message()
    );
    task
}

/// Waits on `task` (as bot) until it is over.
async fn ended(clients: &mut Clients, task: &str) -> pb::Task {
    let mut request = authed(pb::WatchTaskRequest { id: task.into() }, BOT);
    request.set_timeout(Duration::from_secs(30));
    let mut stream = clients
        .tasks
        .watch_task(request)
        .await
        .expect("watch")
        .into_inner();
    let mut last = None;
    while let Some(task) = stream.message().await.expect("the watch goes on") {
        last = Some(task);
    }
    last.expect("the task")
}

fn decide(task: &str, comment: &str, digest: &str) -> pb::ApproveRequest {
    pb::ApproveRequest {
        task_id: task.into(),
        comment: comment.into(),
        digest: digest.into(),
    }
}

async fn wait_for_refund(addr: std::net::SocketAddr) {
    let mut client = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    eventually(Duration::from_secs(20), "the sidecar's tools", || {
        let mut client = client.clone();
        async move {
            client
                .get_tool(authed(
                    pb::GetToolRequest {
                        name: "refund".into(),
                        ..Default::default()
                    },
                    BOT,
                ))
                .await
                .is_ok()
        }
    })
    .await;
    let _ = &mut client;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_runs_once_as_approved_a_denial_reaches_the_agent_and_silence_expires() {
    let Some((registry_binary, sidecar_binary)) = binaries() else {
        return;
    };
    let (hook_url, posted) = hook().await;
    let (hanging_url, _hanging) = hanging_hook().await;
    let files = Files::new(&policy(&hook_url, &hanging_url));
    let args = files.args(&["--admin-listen", "127.0.0.1:0"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (registry, addr) = RegistryProcess::start(&registry_binary, &args, &[]).await;
    let admin = crate::metrics::admin_address(&registry.log()).expect("the admin address");
    let _sidecar = SidecarProcess::start(
        &sidecar_binary,
        &format!("http://{addr}"),
        "payments",
        &tools_yaml(&files.runs_file()),
    )
    .await;
    wait_for_refund(addr).await;
    let mut c = clients(addr).await;
    let mut watch = c
        .approvals
        .watch_approvals(authed(pb::WatchApprovalsRequest {}, ALICE))
        .await
        .expect("a watch")
        .into_inner();
    let synced = watch.message().await.expect("the watch").expect("an event");
    assert_eq!(
        synced.kind,
        pb::approval_event::Kind::Synced as i32,
        "nothing pending yet"
    );

    // What no rule holds runs as before.
    let found = c
        .agents
        .invoke(authed(
            pb::InvokeRequest {
                tool: "lookup".into(),
                ..Default::default()
            },
            BOT,
        ))
        .await
        .expect("not held");
    assert_eq!(found.get_ref().result_json.trim(), r#"{"found": true}"#);

    // 1. Held, then approved by an approver: it runs once, as held.
    let task = held(&mut c, refund(250, "refund-1")).await;
    assert!(files.runs().is_empty(), "nothing ran yet");
    let waiting = c
        .tasks
        .get_task(authed(pb::GetTaskRequest { id: task.clone() }, BOT))
        .await
        .expect("its task")
        .into_inner();
    assert_eq!(waiting.state, pb::TaskState::InputRequired as i32);
    assert!(
        waiting
            .status_message
            .contains("awaits approval by callers bot or groups finance"),
        "{}",
        waiting.status_message
    );

    // Eve is no approver: she sees nothing, and cannot decide it.
    let listed = c
        .approvals
        .list_approvals(authed(pb::ListApprovalsRequest::default(), EVE))
        .await
        .expect("a listing")
        .into_inner();
    assert!(listed.approvals.is_empty(), "{listed:?}");
    let refused = c
        .approvals
        .approve(authed(decide(&task, "", ""), EVE))
        .await
        .expect_err("an outsider");
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    // Bot is an approver of the rule, but this is its own call.
    let refused = c
        .approvals
        .approve(authed(decide(&task, "", ""), BOT))
        .await
        .expect_err("its own call");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("its own call"), "{refused:?}");
    // A forged id is unknown.
    let forged = c
        .approvals
        .approve(authed(
            decide("00000000-0000-4000-8000-000000000000", "", ""),
            ALICE,
        ))
        .await
        .expect_err("forged");
    assert_eq!(forged.code(), Code::NotFound);

    let pending = c
        .approvals
        .list_approvals(authed(pb::ListApprovalsRequest::default(), ALICE))
        .await
        .expect("a listing")
        .into_inner()
        .approvals;
    assert_eq!(pending.len(), 1, "{pending:?}");
    let shown = &pending[0];
    assert_eq!(
        (
            shown.task_id.as_str(),
            shown.tool.as_str(),
            shown.caller.as_str()
        ),
        (task.as_str(), "refund", "bot")
    );
    assert_eq!(shown.rule, "refunds");
    assert_eq!(shown.reason, "refunds move money");
    assert!(shown.arguments_redacted);
    let arguments: serde_json::Value =
        serde_json::from_str(&shown.arguments_json).expect("JSON arguments");
    assert_eq!(arguments["amount"], 250);
    assert_ne!(arguments["card"], "4111-1111", "redacted: {arguments}");

    let wrong = c
        .approvals
        .approve(authed(decide(&task, "", &"0".repeat(64)), ALICE))
        .await
        .expect_err("another call's digest");
    assert_eq!(wrong.code(), Code::FailedPrecondition);
    assert_eq!(
        wrong
            .get_error_details()
            .error_info()
            .map(|i| i.reason.clone()),
        Some("APPROVAL_DIGEST_MISMATCH".into())
    );
    let approved = c
        .approvals
        .approve(authed(decide(&task, "looks right", &shown.digest), ALICE))
        .await
        .expect("approved")
        .into_inner();
    assert_eq!(approved.state, pb::ApprovalState::Approved as i32);
    assert_eq!(approved.decided_by, "alice");
    // Alice's watch saw it come and go; the webhook was told of both.
    let added = watch.message().await.expect("the watch").expect("an event");
    assert_eq!(added.kind, pb::approval_event::Kind::Added as i32);
    assert_eq!(
        added.approval.as_ref().map(|a| a.task_id.as_str()),
        Some(task.as_str())
    );
    let removed = watch.message().await.expect("the watch").expect("an event");
    assert_eq!(removed.kind, pb::approval_event::Kind::Removed as i32);
    assert_eq!(
        removed.approval.as_ref().map(|a| a.state),
        Some(pb::ApprovalState::Approved as i32)
    );
    wait_until(Duration::from_secs(10), "the webhook's two posts", || {
        posted.lock().expect("not poisoned").len() >= 2
    })
    .await;
    {
        let posts = posted.lock().expect("not poisoned");
        assert_eq!(posts[0]["event"], "approval.requested");
        assert_eq!(posts[0]["task_id"], task.as_str());
        assert_eq!(posts[0]["caller"], "bot");
        assert_ne!(posts[0]["arguments"]["card"], "4111-1111", "redacted");
        assert!(posts[0]["text"].as_str().is_some_and(|t| t.contains(&task)));
        assert_eq!(posts[1]["event"], "approval.approved");
        assert_eq!(posts[1]["decided_by"], "alice");
    }
    let replayed = c
        .approvals
        .approve(authed(decide(&task, "", ""), CAROL))
        .await
        .expect_err("decided already");
    assert_eq!(replayed.code(), Code::FailedPrecondition);
    assert!(replayed.message().contains("approved by"), "{replayed:?}");

    let done = ended(&mut c, &task).await;
    assert_eq!(done.state, pb::TaskState::Completed as i32, "{done:?}");
    let Some(pb::task::Outcome::Response(response)) = &done.outcome else {
        panic!("no response: {done:?}");
    };
    assert_eq!(response.result_json.trim(), r#"{"refunded": true}"#);
    let runs = files.runs();
    assert_eq!(runs.len(), 1, "ran once: {runs:?}");
    assert_eq!(runs[0]["amount"], 250);
    assert_eq!(runs[0]["card"], "4111-1111", "the arguments as held");
    // The agent's retry with its key reads the answer.
    let again = c
        .agents
        .invoke(authed(refund(250, "refund-1"), BOT))
        .await
        .expect("the first call's answer");
    assert_eq!(again.get_ref().result_json, response.result_json);
    assert_eq!(files.runs().len(), 1, "never twice");

    // 2. Denied: the agent reads the comment; nothing ran.
    let task = held(&mut c, refund(300, "")).await;
    let denied = c
        .approvals
        .deny(authed(
            pb::DenyRequest {
                task_id: task.clone(),
                comment: "the card is flagged for fraud".into(),
                digest: String::new(),
            },
            CAROL,
        ))
        .await
        .expect("denied")
        .into_inner();
    assert_eq!(denied.state, pb::ApprovalState::Denied as i32);
    let done = ended(&mut c, &task).await;
    assert_eq!(done.state, pb::TaskState::Failed as i32);
    let Some(pb::task::Outcome::Error(error)) = &done.outcome else {
        panic!("no error: {done:?}");
    };
    assert_eq!(error.code, Code::PermissionDenied as i32);
    assert!(
        error.message.contains("the card is flagged for fraud"),
        "{error:?}"
    );
    assert!(error.message.contains("carol"), "{error:?}");

    // 3. A task-aware agent gets the task itself; silence expires it.
    let started = c
        .tasks
        .start_task(authed(
            pb::StartTaskRequest {
                call: Some(refund(5000, "")),
            },
            BOT,
        ))
        .await
        .expect("a held task")
        .into_inner();
    assert_eq!(started.state, pb::TaskState::InputRequired as i32);
    let done = ended(&mut c, &started.id).await;
    assert_eq!(done.state, pb::TaskState::Failed as i32);
    let Some(pb::task::Outcome::Error(error)) = &done.outcome else {
        panic!("no error: {done:?}");
    };
    assert_eq!(error.code, Code::DeadlineExceeded as i32);
    assert!(error.message.contains("expired"), "{error:?}");
    let late = c
        .approvals
        .approve(authed(decide(&started.id, "", ""), ALICE))
        .await
        .expect_err("expired");
    assert_eq!(late.code(), Code::FailedPrecondition);
    assert!(late.message().contains("expired"), "{late:?}");
    assert_eq!(files.runs().len(), 1, "only the approved call ran");

    // Metrics count each outcome.
    let metrics = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .expect("a scrape")
        .text()
        .await
        .expect("a body");
    for outcome in ["approved", "denied", "expired"] {
        let line =
            format!("toolmesh_approvals_decided_total{{tool=\"refund\",outcome=\"{outcome}\"}} 1");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    assert!(
        metrics.contains("toolmesh_approvals_requested_total{tool=\"refund\"} 3"),
        "{metrics}"
    );

    // The audit log has each request and decision, who and when (written
    // behind the decision, so read until it has them).
    let mut approvals = Vec::new();
    wait_until(
        Duration::from_secs(10),
        "the four approval events audited",
        || {
            approvals = files
                .audit()
                .into_iter()
                .filter(|r| r["kind"] == "approval")
                .collect();
            ["requested", "approved", "denied", "expired"]
                .iter()
                .all(|event| approvals.iter().any(|r| r["event"] == *event))
        },
    )
    .await;
    let approved = approvals
        .iter()
        .find(|r| r["event"] == "approved")
        .expect("the approval");
    assert_eq!(approved["by"], "alice");
    assert_eq!(approved["caller"], "bot");
    assert!(approved["ts"].is_string(), "{approved}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_redis_mode_a_call_held_on_one_replica_is_decided_on_another_and_runs_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let Some((registry_binary, sidecar_binary)) = binaries() else {
        return;
    };
    let files = Files::new(&policy(
        "http://127.0.0.1:9/unused",
        "http://127.0.0.1:9/unused",
    ));
    let url = redis.url();
    let args = files.args(&["--redis", &url, "--redis-prefix", "approvals-race"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_a, a_addr) = RegistryProcess::start(&registry_binary, &args, &[]).await;
    let (_b, b_addr) = RegistryProcess::start(&registry_binary, &args, &[]).await;
    let _sidecar = SidecarProcess::start(
        &sidecar_binary,
        &format!("http://{a_addr}"),
        "payments",
        &tools_yaml(&files.runs_file()),
    )
    .await;
    wait_for_refund(a_addr).await;
    wait_for_refund(b_addr).await;
    let mut on_a = clients(a_addr).await;
    let mut on_b = clients(b_addr).await;

    for round in 0..3 {
        let task = held(&mut on_a, refund(100 + round, "")).await;
        // Replica B sees it...
        let listed = on_b
            .approvals
            .list_approvals(authed(pb::ListApprovalsRequest::default(), ALICE))
            .await
            .expect("a listing")
            .into_inner();
        assert!(
            listed.approvals.iter().any(|a| a.task_id == task),
            "{listed:?}"
        );
        // ...and two approvers decide at once, one on each replica.
        let (mut approvals_a, mut approvals_b) = (on_a.approvals.clone(), on_b.approvals.clone());
        let (first, second) = tokio::join!(
            approvals_a.approve(authed(decide(&task, "a", ""), ALICE)),
            approvals_b.approve(authed(decide(&task, "b", ""), CAROL)),
        );
        let outcomes = [first.map(|_| ()), second.map(|_| ())];
        let stood = outcomes.iter().filter(|o| o.is_ok()).count();
        assert_eq!(stood, 1, "one decision stands: {outcomes:?}");
        for refused in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        }
        let done = ended(&mut on_b, &task).await;
        assert_eq!(done.state, pb::TaskState::Completed as i32, "{done:?}");
    }
    let runs = files.runs();
    assert_eq!(runs.len(), 3, "each call ran once: {runs:?}");
    let mut amounts: Vec<i64> = runs.iter().filter_map(|r| r["amount"].as_i64()).collect();
    amounts.sort_unstable();
    assert_eq!(amounts, [100, 101, 102]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_rate_limit_defers_an_approval_and_a_changed_tool_voids_it() {
    let Some((registry_binary, sidecar_binary)) = binaries() else {
        return;
    };
    let files = Files::new(&policy(
        "http://127.0.0.1:9/unused",
        "http://127.0.0.1:9/unused",
    ));
    let args = files.args(&["--lease-ttl", "2s"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_registry, addr) = RegistryProcess::start(&registry_binary, &args, &[]).await;
    let registry_url = format!("http://{addr}");
    let yaml = tools_yaml(&files.runs_file());
    let sidecar = SidecarProcess::start(&sidecar_binary, &registry_url, "payments", &yaml).await;
    wait_for_refund(addr).await;
    let mut c = clients(addr).await;
    let task = held(&mut c, refund(70, "")).await;

    // The rate limit is checked again at the run: its one token went to
    // the request, so the approval is refused and the call waits on.
    let payout = held(
        &mut c,
        pb::InvokeRequest {
            tool: "payout".into(),
            ..Default::default()
        },
    )
    .await;
    let limited = c
        .approvals
        .approve(authed(decide(&payout, "", ""), ALICE))
        .await
        .expect_err("no token left");
    assert_eq!(limited.code(), Code::ResourceExhausted, "{limited:?}");
    assert!(limited.get_error_details().retry_info().is_some());
    let still = c
        .approvals
        .get_approval(authed(pb::GetApprovalRequest { task_id: payout }, ALICE))
        .await
        .expect("the approval")
        .into_inner();
    assert_eq!(still.state, pb::ApprovalState::Pending as i32);

    // The tool leaves: an approval finds no instance, and the call waits on.
    sidecar.kill().await;
    eventually(Duration::from_secs(20), "the tool leaves", || {
        let mut agents = c.agents.clone();
        async move {
            agents
                .get_tool(authed(
                    pb::GetToolRequest {
                        name: "refund".into(),
                        ..Default::default()
                    },
                    BOT,
                ))
                .await
                .is_err_and(|s| s.code() == Code::NotFound)
        }
    })
    .await;
    let absent = c
        .approvals
        .approve(authed(decide(&task, "", ""), ALICE))
        .await
        .expect_err("no instance");
    assert_eq!(absent.code(), Code::Unavailable, "{absent:?}");
    let still = c
        .approvals
        .get_approval(authed(
            pb::GetApprovalRequest {
                task_id: task.clone(),
            },
            ALICE,
        ))
        .await
        .expect("the approval")
        .into_inner();
    assert_eq!(still.state, pb::ApprovalState::Pending as i32);

    // It comes back saying something else: the approval is void.
    let changed = yaml.replace("Refunds a card payment", "Refunds a card payment, twice");
    let _sidecar =
        SidecarProcess::start(&sidecar_binary, &registry_url, "payments", &changed).await;
    wait_for_refund(addr).await;
    let void = c
        .approvals
        .approve(authed(decide(&task, "", ""), ALICE))
        .await
        .expect_err("void");
    assert_eq!(void.code(), Code::FailedPrecondition, "{void:?}");
    assert_eq!(
        void.get_error_details()
            .error_info()
            .map(|i| i.reason.clone()),
        Some("APPROVAL_VOID".into())
    );
    assert!(void.message().contains("descriptor changed"), "{void:?}");
    let done = ended(&mut c, &task).await;
    assert_eq!(done.state, pb::TaskState::Failed as i32, "{done:?}");
    assert!(files.runs().is_empty(), "nothing ran");
}
