//! The agent loop (`toolmesh_examples::agent_loop` and the `agent-loop`
//! binary) against a real `toolmesh-registry` and a sidecar serving an SDK
//! `word_count`: the scripted model searches, calls with a misnamed
//! argument, reads the violations, corrects the call, and gets the result;
//! a call bound to a digest the registry did not show is refused, and read
//! as a changed tool.
#![allow(clippy::unwrap_used)]

#[path = "common/mesh.rs"]
mod mesh;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolmesh_examples::agent::{self, Access};
use toolmesh_examples::agent_loop::{self, ScriptedModel, Step, ToolChanged};
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};
use toolmesh_sidecar::sdk::{self, ToolError};
use toolmesh_test_support::{catalog, process::binary, server::sidecar};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Text {
    /// The text to count the words of.
    text: String,
}

#[derive(Serialize, JsonSchema)]
struct Count {
    words: usize,
}

fn word_count() -> toolmesh_sidecar::Tool {
    sdk::tool(
        "word_count",
        "Count the words in a text",
        |args: Text| async move {
            Ok::<_, ToolError>(Count {
                words: args.text.split_whitespace().count(),
            })
        },
    )
    .build()
}

fn other() -> toolmesh_sidecar::Tool {
    sdk::tool("add", "Add two integers", |args: Value| async move {
        Ok::<_, ToolError>(args)
    })
    .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_model_repairs_its_call_from_the_violations() {
    let Some(registry_binary) = binary("toolmesh-registry") else {
        return;
    };
    let registry = mesh::Registry::start(&registry_binary).await;
    let _sidecar = sidecar(&registry.url(), "loop", vec![word_count(), other()]).await;
    let probe = ToolRegistryClient::connect(registry.url()).await.unwrap();
    catalog::wait_for_instances(&probe, "word_count", 1, mesh::STARTUP).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut client = agent::connect(&registry.url(), &Access::default(), deadline)
        .await
        .unwrap();
    let task = r#"How many words are in "the quick brown fox jumps"?"#;
    // The search index follows the catalog a moment after it changes.
    let started = tokio::time::Instant::now();
    let transcript = loop {
        match agent_loop::run(&mut client, task, &ScriptedModel::default()).await {
            Ok(steps) => break steps,
            Err(error) if started.elapsed() < Duration::from_secs(10) => {
                eprintln!("not yet: {error:#}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("{error:#}"),
        }
    };

    let Step::Search(found) = &transcript[0] else {
        panic!("{transcript:?}")
    };
    assert_eq!(found[0], "word_count");
    let Step::Call(first) = &transcript[1] else {
        panic!("{transcript:?}")
    };
    assert_eq!(
        Value::Object(first.arguments.clone()),
        json!({"input": "the quick brown fox jumps"})
    );
    let Step::Refused(violations) = &transcript[2] else {
        panic!("{transcript:?}")
    };
    assert!(
        violations
            .iter()
            .any(|(f, m)| f == "/input" && m.starts_with("unexpected property")),
        "{violations:?}"
    );
    assert!(
        violations.iter().any(|(f, _)| f == "/text"),
        "{violations:?}"
    );
    let Step::Call(second) = &transcript[3] else {
        panic!("{transcript:?}")
    };
    assert_eq!(
        Value::Object(second.arguments.clone()),
        json!({"text": "the quick brown fox jumps"})
    );
    assert_eq!(transcript.last(), Some(&Step::Result(json!({"words": 5}))));

    // The binary prints the same steps.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agent-loop"))
        .args(["--registry", &registry.url()])
        .env_remove("TOOLMESH_TOKEN")
        .env_remove("TOOLMESH_TOKEN_FILE")
        .env_remove("TOOLMESH_CA_FILE")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.lines()
            .next()
            .unwrap()
            .starts_with("Search([\"word_count\""),
        "{text}"
    );
    assert!(
        text.contains("Refused")
            && text
                .lines()
                .last()
                .unwrap()
                .contains("\"words\": Number(5)"),
        "{text}"
    );

    // A call bound to a definition the registry did not show is refused,
    // nothing runs, and the loop reads the refusal as a changed tool.
    let listed = client
        .list_tools(pb::ListToolsRequest::default())
        .await
        .expect("ListTools")
        .into_inner()
        .tools;
    let live = listed
        .iter()
        .find(|t| {
            t.descriptor
                .as_ref()
                .is_some_and(|d| d.name == "word_count")
        })
        .map(|t| t.digest.clone())
        .expect("word_count is listed");
    let stale = "0".repeat(64);
    let refused = client
        .invoke(pb::InvokeRequest {
            tool: "word_count".into(),
            arguments_json: r#"{"text": "a b"}"#.into(),
            tool_digest: stale.clone(),
            ..Default::default()
        })
        .await
        .expect_err("a stale digest is refused");
    let change = ToolChanged::from_status(&refused).unwrap_or_else(|| panic!("{refused:?}"));
    assert_eq!(change.tool, "word_count");
    assert_eq!(change.shown_digest, stale);
    assert_eq!(change.live_digest, live);
    assert!(!change.changed.is_empty(), "{change:?}");
}
