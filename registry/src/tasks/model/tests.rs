//! The task model's changes.

use super::*;
use crate::tasks::store::conformance::held;

fn task(id: &str, caller: &str) -> Task {
    crate::tasks::store::conformance::task(id, caller, 0)
}

fn response() -> Outcome {
    Outcome::Response {
        result_json: "42".into(),
        is_error: false,
        instance_id: "s1".into(),
        content_json: String::new(),
    }
}

fn holder(instance: &str) -> Holder {
    Holder {
        instance: instance.into(),
        endpoint: format!("http://{instance}"),
        key_tag: String::new(),
    }
}

#[test]
fn only_an_idempotent_working_task_still_held_by_the_lost_instance_moves() {
    let mut t = task("a", "c");
    t.holder = Some(holder("s1"));
    assert!(
        !t.rerun_on("s1", holder("s2"), "d2".into(), 2_000),
        "not idempotent"
    );
    t.rerun = Some(Rerun {
        arguments_json: "{}".into(),
        reruns: 0,
    });
    assert!(
        !t.rerun_on("s9", holder("s2"), "d2".into(), 2_000),
        "held by another"
    );
    let revision = t.revision;
    assert!(t.rerun_on("s1", holder("s2"), "d2".into(), 2_000));
    assert_eq!(t.holder.as_ref().map(|h| h.instance.as_str()), Some("s2"));
    assert_eq!(
        t.report_digest, "d2",
        "the lost instance's token no longer reports"
    );
    assert_eq!(t.rerun.as_ref().map(|r| r.reruns), Some(1));
    assert!(t.revision > revision);
    assert!(
        !t.rerun_on("s1", holder("s3"), "d3".into(), 3_000),
        "moved already"
    );
    assert!(t.cancel(4_000));
    assert!(!t.rerun_on("s2", holder("s3"), "d3".into(), 5_000), "over");
}

#[test]
fn a_task_ends_once_and_never_changes_after() {
    let mut t = task("a", "c");
    assert!(t.progress(
        Progress {
            fraction: Some(0.5),
            message: "half".into()
        },
        2_000
    ));
    assert!(t.finish(response(), 3_000));
    assert_eq!(t.state, State::Completed);
    assert_eq!(t.expires_ms, 3_000 + 3_600_000);
    let ended = t.clone();
    assert!(!t.cancel(4_000));
    assert!(!t.finish(Outcome::of_status(&tonic::Status::internal("x")), 4_000));
    assert!(!t.progress(
        Progress {
            fraction: None,
            message: "late".into()
        },
        4_000
    ));
    assert_eq!(t, ended);
}

#[test]
fn every_change_bumps_the_revision() {
    let mut t = task("a", "c");
    let p = Progress {
        fraction: Some(0.1),
        message: String::new(),
    };
    assert!(t.progress(p.clone(), 2_000));
    assert_eq!(t.revision, 2);
    assert!(!t.progress(p, 2_500), "the same progress is no change");
    assert!(t.cancel(3_000));
    assert_eq!((t.revision, t.state), (3, State::Cancelled));
    assert_eq!(
        t.outcome.as_ref().and_then(Outcome::code),
        Some(tonic::Code::Cancelled)
    );
}

#[test]
fn reports_are_bounded() {
    let p = Progress::from_report(&pb::TaskProgress {
        fraction: Some(f64::NAN),
        message: "é".repeat(MAX_PROGRESS_MESSAGE),
    });
    assert_eq!(p.fraction, None);
    assert!(p.message.len() <= MAX_PROGRESS_MESSAGE);
    let p = Progress::from_report(&pb::TaskProgress {
        fraction: Some(7.0),
        message: String::new(),
    });
    assert_eq!(p.fraction, Some(1.0));
}

#[test]
fn only_the_holders_token_reports() {
    let t = task("a", "c");
    assert!(t.reported_by(b"token"));
    assert!(!t.reported_by(b"other"));
    assert!(!t.reported_by(b""));
}

#[test]
fn the_wire_form_carries_the_outcome_and_its_details() {
    let mut t = task("a", "c");
    let status = crate::error::RegistryError::ToolNotFound { tool: "x".into() }.to_status();
    t.finish(Outcome::of_status(&status), 2_000);
    let wire = t.to_proto();
    assert_eq!(wire.state, pb::TaskState::Failed as i32);
    let Some(pb::task::Outcome::Error(error)) = wire.outcome else {
        panic!("no error: {wire:?}");
    };
    assert_eq!(error.code, tonic::Code::NotFound as i32);
    assert_eq!(error.details.as_slice(), status.details());
    let back: Task =
        serde_json::from_str(&serde_json::to_string(&t).expect("round trip")).expect("round trip");
    assert_eq!(back, t);
}

// Approvals: the decisions a held call's task takes.

fn run_on() -> RunOn {
    RunOn {
        holder: Holder {
            instance: "s1".into(),
            endpoint: "http://s1".into(),
            key_tag: String::new(),
        },
        report_digest: "r".into(),
        expires_ms: 99_000,
    }
}

fn denied() -> Outcome {
    Outcome::of_status(&tonic::Status::permission_denied("no"))
}

#[test]
fn one_decision_stands() {
    let mut task = held("t", "bot", 0, 10_000);
    assert!(task.approve("alice", "ok", run_on(), 2_000));
    assert_eq!(task.state, State::Working);
    assert_eq!(task.expires_ms, 99_000);
    assert!(!task.approve("alice", "again", run_on(), 2_500), "replayed");
    assert!(!task.close_approval(Verdict::Denied, "alice", "no", denied(), 3_000));
    let wire = task.approval_to_proto().expect("an approval");
    assert_eq!(wire.state, pb::ApprovalState::Approved as i32);
    assert_eq!(
        (wire.decided_by.as_str(), wire.comment.as_str()),
        ("alice", "ok")
    );

    let mut task = held("t", "bot", 0, 10_000);
    assert!(task.close_approval(Verdict::Denied, "alice", "too much", denied(), 2_000));
    assert_eq!(task.state, State::Failed);
    assert!(
        !task.approve("alice", "", run_on(), 2_500),
        "denied already"
    );
}

#[test]
fn an_expired_approval_cannot_be_approved() {
    let mut task = held("t", "bot", 0, 10_000);
    assert!(!task.approve("alice", "", run_on(), 10_000));
    assert!(task.close_approval(Verdict::Expired, "", "", denied(), 10_000));
    assert_eq!(
        task.approval_to_proto().map(|a| a.state),
        Some(pb::ApprovalState::Expired as i32)
    );
}

#[test]
fn a_cancelled_held_call_reads_as_cancelled() {
    let mut task = held("t", "bot", 0, 10_000);
    assert!(task.cancel(2_000));
    assert!(!task.approve("alice", "", run_on(), 2_500));
    assert_eq!(
        task.approval_to_proto().map(|a| a.state),
        Some(pb::ApprovalState::Cancelled as i32)
    );
}
