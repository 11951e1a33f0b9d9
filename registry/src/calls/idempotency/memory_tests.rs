//! Tests of [`MemoryIdempotency`], on paused time.
#![allow(clippy::unwrap_used)]

use std::{collections::HashMap, sync::Arc, time::Duration};

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;

const HOLD: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey {
        caller: "alice".into(),
        tool: "add".into(),
        key: name.into(),
    }
}

fn outcome(n: u32) -> StoredOutcome {
    StoredOutcome::Response {
        result_json: format!("{{\"sum\":{n}}}"),
        is_error: false,
        instance_id: "s1".into(),
        attempts: 1,
        content_json: String::new(),
    }
}

async fn claim(store: &MemoryIdempotency, name: &str, fp: &str, wait: Duration) -> Claim {
    store
        .claim(&key(name), fp, HOLD, Instant::now() + wait)
        .await
        .unwrap()
}

async fn run(store: &MemoryIdempotency, name: &str, fp: &str) -> Ticket {
    match claim(store, name, fp, Duration::ZERO).await {
        Claim::Run(ticket) => ticket,
        other => panic!("expected Run, got {other:?}"),
    }
}

async fn replay(store: &MemoryIdempotency, name: &str, fp: &str) -> StoredOutcome {
    match claim(store, name, fp, Duration::ZERO).await {
        Claim::Replay(outcome) => outcome,
        other => panic!("expected Replay, got {other:?}"),
    }
}

fn store(capacity: usize) -> MemoryIdempotency {
    MemoryIdempotency::new(Duration::from_secs(3600), capacity)
}

#[tokio::test(start_paused = true)]
async fn runs_once_then_replays_and_refuses_other_arguments() {
    let store = store(10);
    let ticket = run(&store, "k", "fp1").await;
    assert!(matches!(
        claim(&store, "k", "fp2", WAIT).await,
        Claim::ArgumentsDiffer
    ));
    let status = StoredOutcome::Status {
        code: tonic::Code::DeadlineExceeded,
        message: "deadline exceeded".into(),
    };
    ticket.complete(status.clone()).await;
    assert_eq!(replay(&store, "k", "fp1").await, status);
    assert!(matches!(
        claim(&store, "k", "fp2", WAIT).await,
        Claim::ArgumentsDiffer
    ));
    // Another caller's key of the same name is another key.
    let other = IdempotencyKey {
        caller: "bob".into(),
        ..key("k")
    };
    let claimed = store.claim(&other, "fp2", HOLD, Instant::now()).await;
    assert!(matches!(claimed, Ok(Claim::Run(_))));
}

#[tokio::test(start_paused = true)]
async fn waiting_claim_times_out_at_its_deadline() {
    let store = store(10);
    let _ticket = run(&store, "k", "fp").await;
    let started = Instant::now();
    let result = store
        .claim(&key("k"), "fp", HOLD, started + Duration::from_secs(2))
        .await;
    assert!(matches!(result, Err(IdempotencyError::WaitTimedOut)));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn release_and_drop_free_the_key_for_a_waiter() {
    let store = Arc::new(store(10));
    for by_drop in [false, true] {
        let ticket = run(&store, "k", "fp").await;
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move { claim(&store, "k", "fp", WAIT).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        if by_drop {
            drop(ticket);
        } else {
            ticket.release().await;
        }
        let Claim::Run(next) = waiter.await.unwrap() else {
            panic!("the waiter runs once the key is free");
        };
        drop(next);
        assert!(store.is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn outcomes_expire_after_the_retention() {
    let store = MemoryIdempotency::new(Duration::from_secs(60), 10);
    run(&store, "k", "fp").await.complete(outcome(1)).await;
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(replay(&store, "k", "fp").await, outcome(1));
    tokio::time::advance(Duration::from_secs(1)).await;
    let _ticket = run(&store, "k", "other").await;
    assert_eq!(store.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_forgotten_claim_frees_its_key_after_hold_for() {
    let store = Arc::new(store(10));
    std::mem::forget(run(&store, "k", "fp").await);
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move { claim(&store, "k", "fp", HOLD * 2).await })
    };
    let started = Instant::now();
    assert!(matches!(waiter.await.unwrap(), Claim::Run(_)));
    assert_eq!(started.elapsed(), HOLD);
}

#[tokio::test(start_paused = true)]
async fn full_store_evicts_the_oldest_outcomes_never_calls_in_progress() {
    let store = store(3);
    let _running = run(&store, "running", "fp").await;
    run(&store, "old", "fp").await.complete(outcome(1)).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    run(&store, "new", "fp").await.complete(outcome(2)).await;

    let third = run(&store, "third", "fp").await;
    assert_eq!(store.len(), 3);
    assert_eq!(replay(&store, "new", "fp").await, outcome(2));
    // The call in progress was not evicted: it still holds its key.
    let running = store
        .claim(&key("running"), "fp", HOLD, Instant::now())
        .await;
    assert!(matches!(running, Err(IdempotencyError::WaitTimedOut)));
    let _fourth = run(&store, "fourth", "fp").await;
    // Only calls in progress are left: no room.
    let full = store.claim(&key("fifth"), "fp", HOLD, Instant::now()).await;
    assert!(matches!(full, Err(IdempotencyError::Full)), "{full:?}");
    // "old" was evicted first: it runs again once there is room.
    drop(third);
    let _old = run(&store, "old", "fp").await;
}

/// One step of a random schedule on a few keys.
#[derive(Debug, Clone)]
enum Op {
    Claim { key: usize, fp: usize },
    Complete { ticket: usize, value: u32 },
    Release { ticket: usize },
    Drop { ticket: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize, 0..2usize).prop_map(|(key, fp)| Op::Claim { key, fp }),
        (0..4usize, 0..100u32).prop_map(|(ticket, value)| Op::Complete { ticket, value }),
        (0..4usize).prop_map(|ticket| Op::Release { ticket }),
        (0..4usize).prop_map(|ticket| Op::Drop { ticket }),
    ]
}

/// What a key should be in: free, run by a live ticket, or done.
#[derive(Debug, Clone, PartialEq)]
enum Model {
    Running { fp: usize },
    Done { fp: usize, outcome: StoredOutcome },
}

proptest! {
    /// Any schedule of claims, completions, releases and drops gives exactly
    /// the answers of a simple model, so a key never has two live Run
    /// tickets.
    #[test]
    fn a_key_never_has_two_live_runs(ops in proptest::collection::vec(op(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = store(100);
            let mut model: HashMap<usize, Model> = HashMap::new();
            // Live tickets, oldest first, with their key.
            let mut tickets: Vec<(usize, Ticket)> = Vec::new();
            for op in ops {
                match op {
                    Op::Claim { key: k, fp } => {
                        let got = store
                            .claim(&key(&k.to_string()), &fp.to_string(), HOLD, Instant::now())
                            .await;
                        match (model.get(&k), got) {
                            (None, Ok(Claim::Run(ticket))) => {
                                prop_assert!(tickets.iter().all(|(held, _)| *held != k));
                                model.insert(k, Model::Running { fp });
                                tickets.push((k, ticket));
                            }
                            (Some(Model::Running { fp: first }), Err(IdempotencyError::WaitTimedOut))
                                if *first == fp => {}
                            (Some(Model::Running { fp: first } | Model::Done { fp: first, .. }),
                                Ok(Claim::ArgumentsDiffer)) if *first != fp => {}
                            (Some(Model::Done { fp: first, outcome }), Ok(Claim::Replay(got)))
                                if *first == fp => prop_assert_eq!(outcome, &got),
                            (state, got) => prop_assert!(false, "{state:?} but {got:?}"),
                        }
                    }
                    Op::Complete { ticket, value } if ticket < tickets.len() => {
                        let (k, ticket) = tickets.remove(ticket);
                        let Some(Model::Running { fp }) = model.get(&k).cloned() else {
                            unreachable!("a live ticket's key is running");
                        };
                        ticket.complete(outcome(value)).await;
                        model.insert(k, Model::Done { fp, outcome: outcome(value) });
                    }
                    Op::Release { ticket } | Op::Drop { ticket } if ticket < tickets.len() => {
                        let (k, ticket) = tickets.remove(ticket);
                        if matches!(op, Op::Release { .. }) {
                            ticket.release().await;
                        } else {
                            drop(ticket);
                        }
                        model.remove(&k);
                    }
                    Op::Complete { .. } | Op::Release { .. } | Op::Drop { .. } => {}
                }
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}
