use serde_json::{Value, json};

use super::*;
use crate::tasks::model::{Outcome, Progress};

fn task() -> Task {
    crate::tasks::store::conformance::task("t-1", "alice", 0)
}

fn wire<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

fn ended(outcome: Outcome) -> Task {
    let mut t = task();
    let at = t.created_ms + 5_000;
    assert!(t.finish(outcome, at));
    t
}

#[test]
fn a_working_task_shows_its_progress_and_how_long_it_may_be_kept() {
    let mut t = task();
    assert!(t.progress(
        Progress {
            fraction: Some(0.25),
            message: "step 1 of 4".into(),
        },
        t.created_ms + 1_000,
    ));
    let shown = wire(&detailed(&t));
    assert_eq!(shown["resultType"], "complete");
    assert_eq!(shown["taskId"], "t-1");
    assert_eq!(shown["status"], "working");
    assert_eq!(shown["statusMessage"], "step 1 of 4");
    // The timeout (60 s) and then the retention (1 h).
    assert_eq!(shown["ttlMs"], 60_000 + 3_600_000);
    assert_eq!(shown["pollIntervalMs"], POLL_INTERVAL_MS);
    assert_eq!(shown["_meta"][PROGRESS_KEY]["fraction"], 0.25);
    assert_eq!(shown["_meta"][REVISION_KEY], 2);
    assert!(shown.get("result").is_none() && shown.get("error").is_none());
    let created_at = shown["createdAt"].as_str().expect("a time");
    assert!(humantime::parse_rfc3339(created_at).is_ok(), "{created_at}");
}

#[test]
fn the_handle_is_a_task_result() {
    let shown = wire(&created(&task()));
    assert_eq!(shown["resultType"], "task");
    assert_eq!(shown["status"], "working");
    assert_eq!(shown["taskId"], "t-1");
}

#[test]
fn a_completed_task_carries_what_tools_call_would_have_answered() {
    let t = ended(Outcome::Response {
        result_json: r#"{"lines":3}"#.into(),
        is_error: false,
        instance_id: "s1".into(),
        content_json: String::new(),
    });
    let shown = wire(&detailed(&t));
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["result"]["structuredContent"], json!({"lines": 3}));
    assert_eq!(shown["result"]["isError"], false);
    // Kept for the retention from its end.
    assert_eq!(shown["ttlMs"], 5_000 + 3_600_000);
}

#[test]
fn a_call_that_timed_out_completed_with_an_error_result() {
    let status = tonic::Status::deadline_exceeded("the task ran past its task_timeout");
    let shown = wire(&detailed(&ended(Outcome::of_status(&status))));
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["result"]["isError"], true);
    assert_eq!(
        shown["result"]["_meta"][results::CODE_KEY],
        "DEADLINE_EXCEEDED"
    );
    assert_eq!(
        shown["result"]["content"][0]["text"],
        "the task ran past its task_timeout"
    );
    // The seed shape agrees.
    assert_eq!(
        wire(&created(&ended(Outcome::of_status(&status))))["status"],
        "completed"
    );
}

#[test]
fn a_fault_of_the_registry_fails_the_task_with_a_json_rpc_error() {
    let status = tonic::Status::internal("the store lost it");
    let shown = wire(&detailed(&ended(Outcome::of_status(&status))));
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["error"]["code"], -32603);
    assert_eq!(shown["error"]["message"], "the store lost it");
}

#[test]
fn a_cancelled_task_carries_nothing_else() {
    let mut t = task();
    assert!(t.cancel(t.created_ms + 10));
    let shown = wire(&detailed(&t));
    assert_eq!(shown["status"], "cancelled");
    assert!(shown.get("result").is_none() && shown.get("error").is_none());
}

#[test]
fn only_a_long_tool_called_by_a_client_that_offers_tasks_runs_as_one() {
    let long = pb::ToolDescriptor {
        task_timeout: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
        ..Default::default()
    };
    assert!(runs_as_task(&long, true));
    assert!(!runs_as_task(&long, false));
    assert!(!runs_as_task(&pb::ToolDescriptor::default(), true));
}

#[test]
fn an_unknown_task_is_invalid_params() {
    let error = unknown_task("nope");
    assert_eq!(error.code.0, -32602);
    assert_eq!(error.data, Some(json!({"taskId": "nope"})));
}
