//! What every [`TaskStore`] does, as scenarios each engine's tests run.

use std::sync::Arc;

use super::{Cursor, Full, Limits, StoreError, TaskStore};
use crate::access::auth::approval_rules::Approvers;
use crate::tasks::approval::Approval;
use crate::tasks::model::{Outcome, Progress, State, Task, report_digest};

/// `offset` milliseconds after the scenarios' start: times near the real
/// clock, since an engine may expire what is over by it.
pub(crate) fn at(offset: u64) -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(crate::tasks::model::now_ms) + offset
}

/// A working task of `caller`, created `created` ms after the start
/// ([`at`]), running for a minute.
pub(crate) fn task(id: &str, caller: &str, created: u64) -> Task {
    let created_ms = at(created);
    Task {
        id: id.into(),
        tool: "slow".into(),
        caller: caller.into(),
        state: State::Working,
        status_message: String::new(),
        created_ms,
        updated_ms: created_ms,
        expires_ms: created_ms + 60_000,
        retention_ms: 3_600_000,
        progress: None,
        revision: 1,
        outcome: None,
        holder: None,
        report_digest: report_digest(b"token"),
        rerun: None,
        approval: None,
    }
}

/// A call of `caller` held `created` ms after the scenarios' start
/// until `until_ms`, for alice to decide.
pub(crate) fn held(id: &str, caller: &str, created: u64, until_ms: u64) -> Task {
    let mut task = task(id, caller, created);
    task.state = State::InputRequired;
    task.holder = None;
    task.approval = Some(Approval {
        rule: "r".into(),
        reason: String::new(),
        approvers: Approvers {
            callers: vec!["alice".into()],
            groups: Vec::new(),
        },
        self_approval: false,
        until_ms,
        arguments_json: "{}".into(),
        shown_arguments: "{}".into(),
        redacted: false,
        descriptor_digest: "d".into(),
        digest: "x".into(),
        webhook: None,
        decision: None,
    });
    task
}

const ROOMY: Limits = Limits {
    all: 100,
    per_caller: 100,
};

fn response() -> Outcome {
    Outcome::Response {
        result_json: "{\"ok\":true}".into(),
        is_error: false,
        instance_id: "s1".into(),
        content_json: String::new(),
    }
}

/// Runs every scenario, each on a fresh store from `fresh`.
pub(crate) async fn run_all<S: TaskStore>(fresh: impl Fn() -> S) {
    a_task_reads_back_as_written(&fresh()).await;
    an_id_is_created_once(&fresh()).await;
    live_tasks_are_bounded_in_all_and_per_caller(&fresh()).await;
    an_ended_task_frees_its_place(&fresh()).await;
    racing_ends_end_a_task_once(Arc::new(fresh())).await;
    a_callers_listing_pages_newest_first(&fresh()).await;
    live_lists_only_what_runs(&fresh()).await;
    the_sweep_forgets_ended_tasks_past_retention(&fresh()).await;
    held_calls_are_listed_until_decided(&fresh()).await;
}

async fn held_calls_are_listed_until_decided(store: &impl TaskStore) {
    for (n, id) in ["h1", "h2", "h3"].into_iter().enumerate() {
        let held = held(id, "bot", 1_000 + n as u64, at(600_000));
        store.create(&held, ROOMY).await.expect("the store answers");
    }
    store
        .create(&task("w1", "bot", 500), ROOMY)
        .await
        .expect("the store answers");
    let ids = |tasks: Vec<Task>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let all = store.pending(None, 10).await.expect("the store answers");
    assert_eq!(
        ids(all.clone()),
        ["h3", "h2", "h1"],
        "newest first, no working task"
    );
    assert_eq!(store.pending_count().await.expect("the store answers"), 3);
    let page = store.pending(None, 2).await.expect("the store answers");
    let after = Cursor::after(page.last().expect("two"));
    let rest = store
        .pending(Some(&after), 2)
        .await
        .expect("the store answers");
    assert_eq!(ids(rest), ["h1"]);
    let now = at(2_000);
    store
        .update("h2", &move |t: &mut Task| t.cancel(now))
        .await
        .expect("the store answers");
    let left = store.pending(None, 10).await.expect("the store answers");
    assert_eq!(ids(left), ["h3", "h1"], "a closed one leaves the listing");
    assert_eq!(store.pending_count().await.expect("the store answers"), 2);
}

async fn a_task_reads_back_as_written(store: &impl TaskStore) {
    let t = task("t1", "alice", 1_000);
    store.create(&t, ROOMY).await.expect("the store answers");
    assert_eq!(store.get("t1").await.expect("the store answers"), Some(t));
    assert_eq!(store.get("nope").await.expect("the store answers"), None);
    let changed = store
        .update("t1", &|t: &mut Task| {
            t.progress(
                Progress {
                    fraction: Some(0.25),
                    message: "a quarter".into(),
                },
                at(2_000),
            )
        })
        .await
        .expect("the store answers");
    let (after, changed) = changed.expect("the store answers");
    assert!(changed);
    assert_eq!(after.revision, 2);
    assert_eq!(
        store.get("t1").await.expect("the store answers"),
        Some(after)
    );
    assert!(
        store
            .update("nope", &|_| true)
            .await
            .expect("the store answers")
            .is_none()
    );
}

async fn an_id_is_created_once(store: &impl TaskStore) {
    store
        .create(&task("t1", "alice", 1), ROOMY)
        .await
        .expect("the store answers");
    let again = store.create(&task("t1", "bob", 2), ROOMY).await;
    assert!(matches!(again, Err(StoreError::Exists)), "{again:?}");
    assert_eq!(
        store
            .get("t1")
            .await
            .expect("the store answers")
            .expect("the store answers")
            .caller,
        "alice"
    );
}

async fn live_tasks_are_bounded_in_all_and_per_caller(store: &impl TaskStore) {
    let limits = Limits {
        all: 3,
        per_caller: 2,
    };
    store
        .create(&task("a1", "alice", 1), limits)
        .await
        .expect("the store answers");
    store
        .create(&task("a2", "alice", 2), limits)
        .await
        .expect("the store answers");
    let third = store.create(&task("a3", "alice", 3), limits).await;
    assert!(
        matches!(third, Err(StoreError::Full(Full::Caller))),
        "{third:?}"
    );
    store
        .create(&task("b1", "bob", 4), limits)
        .await
        .expect("the store answers");
    let fourth = store.create(&task("c1", "carol", 5), limits).await;
    assert!(
        matches!(fourth, Err(StoreError::Full(Full::All))),
        "{fourth:?}"
    );
}

async fn an_ended_task_frees_its_place(store: &impl TaskStore) {
    let limits = Limits {
        all: 1,
        per_caller: 1,
    };
    store
        .create(&task("a1", "alice", 1), limits)
        .await
        .expect("the store answers");
    store
        .update("a1", &|t: &mut Task| t.finish(response(), at(2)))
        .await
        .expect("the store answers");
    store
        .create(&task("a2", "alice", 3), limits)
        .await
        .expect("the store answers");
}

async fn racing_ends_end_a_task_once<S: TaskStore>(store: Arc<S>) {
    store
        .create(&task("t1", "alice", 1), ROOMY)
        .await
        .expect("the store answers");
    let ends = (0..8).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            let change = move |t: &mut Task| {
                if n % 2 == 0 {
                    t.cancel(at(10 + n))
                } else {
                    t.finish(response(), at(10 + n))
                }
            };
            store
                .update("t1", &change)
                .await
                .expect("the store answers")
                .expect("the store answers")
                .1
        })
    });
    let mut ended = 0;
    for end in ends {
        ended += usize::from(end.await.expect("the store answers"));
    }
    assert_eq!(ended, 1, "exactly one end was written");
    let t = store
        .get("t1")
        .await
        .expect("the store answers")
        .expect("the store answers");
    assert!(t.state.is_terminal());
    assert_eq!(t.revision, 2);
}

async fn a_callers_listing_pages_newest_first(store: &impl TaskStore) {
    for n in 0..5u64 {
        store
            .create(&task(&format!("a{n}"), "alice", 100 + n), ROOMY)
            .await
            .expect("the store answers");
    }
    // The same creation time twice: ties go by id.
    store
        .create(&task("a9", "alice", 104), ROOMY)
        .await
        .expect("the store answers");
    store
        .create(&task("b0", "bob", 200), ROOMY)
        .await
        .expect("the store answers");
    let mut seen = Vec::new();
    let mut after: Option<Cursor> = None;
    loop {
        let page = store
            .list("alice", after.as_ref(), 2)
            .await
            .expect("the store answers");
        if page.is_empty() {
            break;
        }
        after = page.last().map(Cursor::after);
        seen.extend(page.into_iter().map(|t| t.id));
    }
    assert_eq!(seen, ["a9", "a4", "a3", "a2", "a1", "a0"]);
    let bob = store
        .list("bob", None, 10)
        .await
        .expect("the store answers");
    assert_eq!(bob.len(), 1);
    assert!(
        store
            .list("carol", None, 10)
            .await
            .expect("the store answers")
            .is_empty()
    );
}

async fn live_lists_only_what_runs(store: &impl TaskStore) {
    store
        .create(&task("t1", "alice", 1), ROOMY)
        .await
        .expect("the store answers");
    store
        .create(&task("t2", "bob", 2), ROOMY)
        .await
        .expect("the store answers");
    store
        .update("t1", &|t: &mut Task| t.cancel(at(3)))
        .await
        .expect("the store answers");
    let live: Vec<String> = store
        .live(10)
        .await
        .expect("the store answers")
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(live, ["t2"]);
}

async fn the_sweep_forgets_ended_tasks_past_retention(store: &impl TaskStore) {
    let now = crate::tasks::model::now_ms();
    let mut short = task("t1", "alice", 0);
    short.retention_ms = 1;
    store
        .create(&short, ROOMY)
        .await
        .expect("the store answers");
    store
        .create(&task("t2", "alice", 0), ROOMY)
        .await
        .expect("the store answers");
    store
        .update("t1", &move |t: &mut Task| t.cancel(now))
        .await
        .expect("the store answers");
    store.sweep(now + 10_000).await.expect("the store answers");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(store.get("t1").await.expect("the store answers"), None);
    assert!(
        store.get("t2").await.expect("the store answers").is_some(),
        "a live task stays"
    );
}
