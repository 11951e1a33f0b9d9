//! Size limits on the Invoke path: `--max-arguments-bytes` and
//! `--max-message-bytes`, enforced before any sidecar sees the call.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use serde::{Deserialize, Serialize};
use tonic::Code;
use tonic_types::StatusExt;
use toolmesh_registry::Config;
use toolmesh_sidecar::sdk;

use crate::common::*;

#[derive(Deserialize, schemars::JsonSchema)]
struct Text {
    text: String,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Size {
    bytes: usize,
}

#[derive(Serialize, schemars::JsonSchema)]
struct Blob {
    blob: String,
}

/// `len` echoes the length of its text; `blob` returns a string of the
/// asked size. Both count their runs.
fn tools(runs: &Arc<AtomicUsize>) -> Vec<toolmesh_sidecar::Tool> {
    let (a, b) = (runs.clone(), runs.clone());
    vec![
        sdk::tool("len", "Length of a text", move |args: Text| {
            let runs = a.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(args.text.len())
            }
        })
        .build(),
        sdk::tool("blob", "A string of the asked size", move |args: Size| {
            let runs = b.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(Blob {
                    blob: "x".repeat(args.bytes),
                })
            }
        })
        .build(),
    ]
}

/// `{"text":"xxx…"}` of exactly `bytes` bytes.
fn text_of(bytes: usize) -> String {
    let overhead = r#"{"text":""}"#.len();
    format!(r#"{{"text":"{}"}}"#, "x".repeat(bytes - overhead))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_over_the_cap_never_reach_the_tool() {
    let registry = TestRegistry::start(Config {
        max_arguments_bytes: 1024,
        ..Config::default()
    })
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s", tools(&runs)).await;
    wait_for_instances(&registry, "len", 1).await;
    let mut client = registry.client().await;

    let at_cap = client.invoke(invoke("len", &text_of(1024))).await.unwrap();
    assert_eq!(at_cap.into_inner().result_json, (1024 - 11).to_string());
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let status = client
        .invoke(invoke("len", &text_of(1025)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let details = status.get_error_details();
    let violation = &details.bad_request().expect("BadRequest").field_violations[0];
    assert_eq!(violation.field, "arguments_json");
    assert!(
        violation.description.contains("1024"),
        "{}",
        violation.description
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool never saw it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_over_max_message_bytes_are_refused_both_ways() {
    let max = 64 * 1024;
    let registry = TestRegistry::start(Config {
        max_message_bytes: max,
        ..Config::default()
    })
    .await;
    let runs = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s", tools(&runs)).await;
    wait_for_instances(&registry, "len", 1).await;
    let mut client = registry.client().await;

    // A request over the cap is refused by the registry's decoder.
    let status = client
        .invoke(invoke("len", &text_of(max + 1)))
        .await
        .unwrap_err();
    eprintln!("request over --max-message-bytes: {status:?}");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // A result under the cap passes; one over it does not reach the agent.
    let small = client
        .invoke(invoke("blob", &format!(r#"{{"bytes":{}}}"#, max / 2)))
        .await
        .unwrap()
        .into_inner();
    assert!(!small.is_error);
    assert_eq!(small.result_json.len(), max / 2 + r#"{"blob":""}"#.len());
    let status = client
        .invoke(invoke("blob", &format!(r#"{{"bytes":{}}}"#, max * 2)))
        .await
        .unwrap_err();
    eprintln!("result over --max-message-bytes: {status:?}");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
