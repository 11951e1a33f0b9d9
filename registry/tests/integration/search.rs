//! `SearchTools` end to end: tools announced by a real sidecar are found
//! by a task in words, filtered, and leave the results when their sidecar
//! leaves.

use std::time::Duration;

use tonic::Code;
use toolmesh_proto::pb;
use toolmesh_test_support::wait::eventually;

use crate::common::*;

const TOOLS: &str = r#"
tools:
  - name: weather_forecast
    description: Forecast of temperature, rain and wind for a city
    tags: [weather]
    arguments: [{name: city, type: string, description: City name}]
    backend: {command: [cat]}
  - name: send_email
    description: Send an email message to recipients
    tags: [email]
    backend: {command: [cat]}
  - name: search_email
    description: Search the mailbox for messages
    tags: [email]
    backend: {command: [cat]}
"#;

async fn search(
    registry: &TestRegistry,
    request: pb::SearchToolsRequest,
) -> Result<Vec<String>, tonic::Status> {
    let answer = registry
        .client()
        .await
        .search_tools(request)
        .await?
        .into_inner();
    assert!(answer.matches.windows(2).all(|w| w[0].score >= w[1].score));
    Ok(answer
        .matches
        .into_iter()
        .filter_map(|m| m.tool.and_then(|t| t.descriptor).map(|d| d.name))
        .collect())
}

fn query(text: &str) -> pb::SearchToolsRequest {
    pb::SearchToolsRequest {
        query: text.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_in_words_finds_live_tools_only() {
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(10))).await;
    let sidecar = TestSidecar::start(&registry.url(), "s1", command_tools(TOOLS)).await;
    wait_for_instances(&registry, "search_email", 1).await;

    eventually(
        Duration::from_secs(10),
        "the index has the tools",
        || async {
            search(&registry, query("will it rain in Paris"))
                .await
                .unwrap()
                .first()
                .map(String::as_str)
                == Some("weather_forecast")
        },
    )
    .await;
    let email = search(&registry, query("email a message")).await.unwrap();
    assert_eq!(email.len(), 2, "{email:?}");
    assert!(email.contains(&"send_email".to_owned()));
    let limited = search(
        &registry,
        pb::SearchToolsRequest {
            limit: 1,
            ..query("email a message")
        },
    )
    .await
    .unwrap();
    assert_eq!(limited.len(), 1);
    let filtered = search(
        &registry,
        pb::SearchToolsRequest {
            name_prefix: "search_".into(),
            ..query("email a message")
        },
    )
    .await
    .unwrap();
    assert_eq!(filtered, ["search_email"]);
    let tagged = search(
        &registry,
        pb::SearchToolsRequest {
            tags: vec!["weather".into()],
            ..query("email a message")
        },
    )
    .await
    .unwrap();
    assert!(tagged.is_empty(), "{tagged:?}");

    for bad in ["", "   ", &"x".repeat(2000)] {
        let status = search(&registry, query(bad)).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}");
    }

    sidecar.stop().await;
    eventually(
        Duration::from_secs(10),
        "the tools leave the results",
        || async {
            search(&registry, query("will it rain in Paris"))
                .await
                .unwrap()
                .is_empty()
        },
    )
    .await;
}
