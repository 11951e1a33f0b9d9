#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::model::{ServerCapabilities, ServerPeerInfo};
use serde_json::json;
use tokio::time::Instant;

use super::*;

fn task(status: TaskStatus, message: Option<&str>, poll_ms: Option<u64>) -> Task {
    let mut task = Task::new(
        "t-1",
        status,
        "2026-07-28T10:00:00Z",
        "2026-07-28T10:00:00Z",
    );
    task.status_message = message.map(str::to_owned);
    task.poll_interval_ms = poll_ms;
    task
}

fn working(message: &str) -> DetailedTask {
    DetailedTask::new(
        task(TaskStatus::Working, Some(message), Some(200)),
        TaskPayload::Working,
    )
}

fn completed(result: serde_json::Value) -> DetailedTask {
    let serde_json::Value::Object(result) = result else {
        panic!("a result is an object");
    };
    DetailedTask::new(
        task(TaskStatus::Completed, Some("done"), Some(200)),
        TaskPayload::Completed { result },
    )
}

/// A `tasks/get` that answers `answers` in turn (and fails once they run
/// out), counting its calls.
struct Script {
    answers: Mutex<VecDeque<Result<DetailedTask, ServiceError>>>,
    asked: Mutex<Vec<(String, Instant)>>,
}

impl Script {
    fn new(answers: Vec<Result<DetailedTask, ServiceError>>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into()),
            asked: Mutex::new(Vec::new()),
        })
    }

    fn get(
        self: &Arc<Self>,
    ) -> impl FnMut(String) -> std::future::Ready<Result<DetailedTask, ServiceError>> {
        let script = self.clone();
        move |id| {
            script.asked.lock().unwrap().push((id, Instant::now()));
            let next = script.answers.lock().unwrap().pop_front();
            std::future::ready(next.unwrap_or(Err(ServiceError::TransportClosed)))
        }
    }

    fn asked(&self) -> Vec<(String, Instant)> {
        self.asked.lock().unwrap().clone()
    }
}

fn refused() -> Result<DetailedTask, ServiceError> {
    Err(ServiceError::McpError(ErrorData::invalid_params(
        "Failed to retrieve task: Task not found",
        None,
    )))
}

#[test]
fn the_poll_interval_is_the_servers_within_bounds() {
    assert_eq!(poll_interval(None), Duration::from_secs(1));
    assert_eq!(poll_interval(Some(0)), Duration::from_millis(100));
    assert_eq!(poll_interval(Some(50)), Duration::from_millis(100));
    assert_eq!(poll_interval(Some(250)), Duration::from_millis(250));
    assert_eq!(poll_interval(Some(3_600_000)), Duration::from_secs(5));
    assert_eq!(poll_interval(Some(u64::MAX)), Duration::from_secs(5));
}

#[test]
fn only_a_2026_server_that_advertises_the_extension_hosts_tasks() {
    let capabilities =
        |value: serde_json::Value| -> ServerCapabilities { serde_json::from_value(value).unwrap() };
    let hosting = capabilities(json!({"tools": {}, "extensions": {TASKS_EXTENSION_ID: {}}}));
    let plain =
        capabilities(json!({"tools": {}, "extensions": {"io.modelcontextprotocol/ui": {}}}));
    let current = ProtocolVersion::V_2026_07_28;
    assert!(hosts_tasks(&ServerPeerInfo::new(
        current.clone(),
        hosting.clone()
    )));
    assert!(!hosts_tasks(&ServerPeerInfo::new(current, plain)));
    assert!(!hosts_tasks(&ServerPeerInfo::new(
        ProtocolVersion::V_2025_11_25,
        hosting
    )));
}

#[test]
fn the_offer_is_the_sessions_capabilities_and_the_extension() {
    let meta = serde_json::to_value(offered()).unwrap();
    assert_eq!(
        meta,
        json!({"io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }})
    );
    assert!(
        !super::super::session::capabilities().supports_tasks(),
        "never for the whole session"
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_is_polled_at_its_interval_and_its_messages_reported_until_it_completes() {
    let script = Script::new(vec![
        Ok(working("step 1 of 2")),
        Ok(working("step 1 of 2")),
        Ok(working("step 2 of 2")),
        Ok(completed(json!({
            "content": [{"type": "text", "text": "the report"}],
            "structuredContent": {"rows": 12},
            "isError": false,
            "resultType": "complete"
        }))),
    ]);
    let mut reported = Vec::new();
    let started = Instant::now();
    let seed = task(TaskStatus::Working, Some("queued"), Some(500));
    let answer = follow(seed, script.get(), |m| reported.push(m.to_owned()))
        .await
        .unwrap();
    let Answer::Result(result) = answer else {
        panic!("a result: {answer:?}");
    };
    assert_eq!(result.structured_content, Some(json!({"rows": 12})));
    assert_eq!(result.is_error, Some(false));
    assert_eq!(reported, ["queued", "step 1 of 2", "step 2 of 2"]);
    let asked = script.asked();
    assert!(asked.iter().all(|(id, _)| id == "t-1"));
    // The seed's interval first, then each poll's.
    let at: Vec<Duration> = asked.iter().map(|(_, at)| *at - started).collect();
    assert_eq!(
        at,
        [500, 700, 900, 1100].map(Duration::from_millis).to_vec()
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_or_cancelled_task_ends_the_call_with_its_reason() {
    let failed = DetailedTask::new(
        task(TaskStatus::Failed, Some("failed: gone"), None),
        TaskPayload::Failed {
            error: json!({"code": -32603, "message": "the data source is gone"})
                .as_object()
                .unwrap()
                .clone(),
        },
    );
    let seed = || task(TaskStatus::Working, None, None);
    let answer = follow(seed(), Script::new(vec![Ok(failed)]).get(), |_| {}).await;
    assert!(matches!(
        answer,
        Ok(Answer::Ended(Ended::Failed(ref m))) if m == "the data source is gone"
    ));

    let cancelled = DetailedTask::new(
        task(TaskStatus::Cancelled, Some("the operator stopped it"), None),
        TaskPayload::Cancelled,
    );
    let answer = follow(seed(), Script::new(vec![Ok(cancelled)]).get(), |_| {}).await;
    let Ok(Answer::Ended(ended)) = answer else {
        panic!("ended: {answer:?}");
    };
    assert_eq!(
        ended,
        Ended::Cancelled(Some("the operator stopped it".to_owned()))
    );
    assert_eq!(
        ended.outcome(),
        Outcome::error_message("the MCP server cancelled the task: the operator stopped it")
    );

    let asks = DetailedTask::new(
        task(TaskStatus::InputRequired, None, None),
        TaskPayload::InputRequired {
            input_requests: Default::default(),
        },
    );
    let answer = follow(seed(), Script::new(vec![Ok(asks)]).get(), |_| {}).await;
    assert!(matches!(answer, Ok(Answer::Ended(Ended::InputRequired))));
}

#[tokio::test(start_paused = true)]
async fn a_failed_get_is_tried_again_a_bounded_number_of_times() {
    // Two failures, then an answer: the task goes on.
    let script = Script::new(vec![
        refused(),
        Err(ServiceError::TransportClosed),
        Ok(completed(json!({"content": []}))),
    ]);
    let seed = task(TaskStatus::Working, None, Some(100));
    let answer = follow(seed.clone(), script.get(), |_| {}).await;
    assert!(matches!(answer, Ok(Answer::Result(_))), "{answer:?}");
    assert_eq!(script.asked().len(), 3);

    // The server no longer knows it: given up after the retries.
    let script = Script::new(vec![refused(), refused(), refused(), refused()]);
    let started = Instant::now();
    let answer = follow(seed.clone(), script.get(), |_| {}).await;
    let Err(lost) = answer else {
        panic!("lost: {answer:?}");
    };
    assert!(!lost.may_be_held());
    assert!(matches!(&lost, Lost::Unknown(m) if m.contains("Task not found")));
    assert_eq!(script.asked().len(), 1 + GET_RETRIES as usize);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        lost.to_backend_error("tasks.py"),
        BackendError::Internal(m) if m.starts_with("MCP server tasks.py: the server no longer knows its task")
    ));

    // No answer at all: each get has its deadline, and the task may still
    // be held (so it is cancelled).
    let started = Instant::now();
    let silent = |_: String| std::future::pending::<Result<DetailedTask, ServiceError>>();
    let lost = follow(seed, silent, |_| {}).await.unwrap_err();
    assert!(lost.may_be_held(), "{lost:?}");
    assert!(matches!(
        lost.to_backend_error("x"),
        BackendError::Unavailable(_)
    ));
    let took = started.elapsed();
    let most = GET_TIMEOUT * (GET_RETRIES + 1) + RETRY_CAP * GET_RETRIES + POLL_MIN;
    assert!(
        took >= GET_TIMEOUT * (GET_RETRIES + 1) && took <= most,
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_completed_task_whose_result_is_not_a_call_result_is_lost() {
    let script = Script::new(vec![Ok(completed(json!({"content": "not blocks"})))]);
    let seed = task(TaskStatus::Working, None, None);
    let lost = follow(seed, script.get(), |_| {}).await.unwrap_err();
    assert!(matches!(lost, Lost::Malformed(_)), "{lost:?}");
    assert!(!lost.may_be_held());
}

#[test]
fn a_tasks_end_is_a_tool_error_that_says_why() {
    let cases = [
        (
            Ended::Failed("rate limited".to_owned()),
            "the MCP server's task failed: rate limited",
        ),
        (Ended::Cancelled(None), "the MCP server cancelled the task"),
        (
            Ended::InputRequired,
            "the MCP server's task asked for input, which the sidecar cannot give; the task was cancelled",
        ),
    ];
    for (ended, message) in cases {
        assert_eq!(ended.outcome(), Outcome::error_message(message));
    }
    assert_eq!(
        failure(&JsonObject::new(), Some("it broke".to_owned())),
        "it broke"
    );
    assert_eq!(failure(&JsonObject::new(), None), "the task failed");
}
