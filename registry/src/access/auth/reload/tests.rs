use std::fs;
use std::time::Duration;

use super::*;
use crate::access::auth::Caller;
use crate::access::auth::policy::Policy;

const ALLOW_PING: &str = "rules:\n  - callers: ['*']\n    tools: [ping]\n";
const ALLOW_PING_AND_ECHO: &str = "rules:\n  - callers: ['*']\n    tools: [ping, echo]\n";

fn anyone() -> Caller {
    Caller {
        id: "anyone".into(),
        groups: Vec::new(),
    }
}

fn policy_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("policy.yaml");
    fs::write(&path, text).expect("write");
    (dir, path)
}

#[test]
fn check_picks_up_a_changed_policy() {
    let (_dir, path) = policy_file(ALLOW_PING);
    let policy = Watched::<Policy>::open(&path).expect("policy");
    assert!(matches!(policy.check(), CheckOutcome::Unchanged));
    assert!(!policy.with(|p| p.allows(&anyone(), "echo")));

    fs::write(&path, ALLOW_PING_AND_ECHO).expect("write");
    assert!(matches!(policy.check(), CheckOutcome::Reloaded));
    assert!(policy.current().allows(&anyone(), "echo"));
    assert!(matches!(policy.check(), CheckOutcome::Unchanged));
}

#[test]
fn a_broken_file_keeps_the_old_contents() {
    let (_dir, path) = policy_file(ALLOW_PING);
    let policy = Watched::<Policy>::open(&path).expect("policy");

    fs::write(&path, "rules:\n  - callers: ['*']\n    tool: [echo]\n").expect("write");
    match policy.check() {
        CheckOutcome::Kept(error) => assert!(
            error.to_string().contains("unknown field `tool`"),
            "{error}"
        ),
        other => panic!("expected the old policy kept, got {other:?}"),
    }
    assert!(policy.current().allows(&anyone(), "ping"));
    assert!(
        matches!(policy.check(), CheckOutcome::Unchanged),
        "one warning per change"
    );

    fs::remove_file(&path).expect("remove");
    assert!(matches!(
        policy.check(),
        CheckOutcome::Kept(AuthFileError::Read { .. })
    ));
    assert!(matches!(policy.check(), CheckOutcome::Unchanged));
    assert!(policy.current().allows(&anyone(), "ping"));

    fs::write(&path, ALLOW_PING_AND_ECHO).expect("write");
    assert!(matches!(policy.check(), CheckOutcome::Reloaded));
    assert!(policy.current().allows(&anyone(), "echo"));
}

#[test]
fn a_replaced_file_is_noticed() {
    let (dir, path) = policy_file(ALLOW_PING);
    let policy = Watched::<Policy>::open(&path).expect("policy");
    let next = dir.path().join("next.yaml");
    fs::write(&next, "rules:\n  - callers: ['*']\n    tools: [pong]\n").expect("write");
    fs::rename(&next, &path).expect("rename");
    assert!(matches!(policy.check(), CheckOutcome::Reloaded));
    assert!(policy.current().allows(&anyone(), "pong"));
}

#[tokio::test]
async fn the_task_reloads_until_stopped() {
    let (_dir, path) = policy_file(ALLOW_PING);
    let policy = Arc::new(Watched::<Policy>::open(&path).expect("policy"));
    let task = spawn(vec![policy.clone()], Duration::from_millis(10));

    fs::write(&path, ALLOW_PING_AND_ECHO).expect("write");
    toolmesh_test_support::wait::wait_until(Duration::from_secs(5), "the new policy", || {
        policy.current().allows(&anyone(), "echo")
    })
    .await;

    task.stop().await;
    fs::write(&path, ALLOW_PING).expect("write");
    assert!(
        matches!(policy.check(), CheckOutcome::Reloaded),
        "the stopped task left the change alone"
    );
}
