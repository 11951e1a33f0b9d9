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

const HER_KEY: &str = "astronomer-key-4c1e77a9d2";
const ADMIN_KEY: &str = "admin-key-90b3f6e2c8d1";

/// Her tools; the policy gives her `astro.*` only.
const HER_TOOLS: &str = r#"
tools:
  - name: astro.observe_quasar
    description: Point the telescope at a quasar and record its spectrum
    backend: {command: [cat]}
  - name: astro.telescope_status
    description: Status of the telescope mount and dome
    backend: {command: [cat]}
  - name: astro.star_chart
    description: A chart of the stars visible tonight
    backend: {command: [cat]}
"#;

/// A tool she may not see, saying her word three times.
const HIDDEN_TOOL: &str = r#"
tools:
  - name: lab.quasar_catalog
    description: Quasar catalog, every known quasar with its quasar redshift
    backend: {command: [cat]}
"#;

/// The names and scores `key`'s caller gets for `query`, best first.
async fn scores(addr: std::net::SocketAddr, key: &str, query: &str) -> Vec<(String, f64)> {
    let mut client =
        pb::tool_registry_client::ToolRegistryClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
    let mut request = tonic::Request::new(pb::SearchToolsRequest {
        query: query.into(),
        limit: 10,
        ..Default::default()
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {key}").parse().expect("ascii"),
    );
    client
        .search_tools(request)
        .await
        .expect("search")
        .into_inner()
        .matches
        .into_iter()
        .filter_map(|m| Some((m.tool?.descriptor?.name, m.score)))
        .collect()
}

/// The issue's case against the binary: a caller's scores and ranks for a
/// query are the same before, while and after a tool she may not see
/// mentions its words; a caller who sees that tool scores differently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hidden_tool_moves_no_score_or_rank_of_a_caller_who_cannot_see_it() {
    let Some(binary) = toolmesh_test_support::process::binary("toolmesh-registry") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.to_str().expect("utf-8").to_owned()
    };
    let keys = toolmesh_test_support::keys::api_keys_file(
        dir.path(),
        &[("her", HER_KEY, &[]), ("admin", ADMIN_KEY, &[])],
    );
    let keys = keys.to_str().expect("utf-8").to_owned();
    let policy = path(
        "policy.yaml",
        "rules:\n  - {callers: [her], tools: [\"astro.*\"]}\n  - {callers: [admin], tools: [\"*\"]}\n"
            .into(),
    );
    let (_registry, addr) = toolmesh_test_support::registry_process::RegistryProcess::start(
        &binary,
        &[
            "--listen",
            "127.0.0.1:0",
            "--api-keys-file",
            &keys,
            "--policy-file",
            &policy,
        ],
        &[],
    )
    .await;
    let url = format!("http://{addr}");
    let _hers = TestSidecar::start(&url, "hers", command_tools(HER_TOOLS)).await;
    let query = "quasar telescope";
    let found = |key: &'static str, name: &'static str| async move {
        scores(addr, key, query)
            .await
            .iter()
            .any(|(n, _)| n == name)
    };
    eventually(Duration::from_secs(20), "her tools are indexed", || {
        found(HER_KEY, "astro.telescope_status")
    })
    .await;
    let alone = scores(addr, HER_KEY, query).await;
    assert_eq!(alone.len(), 2, "{alone:?}");
    assert_eq!(alone, scores(addr, ADMIN_KEY, query).await);

    let hidden = TestSidecar::start(&url, "hidden", command_tools(HIDDEN_TOOL)).await;
    eventually(
        Duration::from_secs(20),
        "the hidden tool is indexed",
        || found(ADMIN_KEY, "lab.quasar_catalog"),
    )
    .await;
    assert_eq!(scores(addr, HER_KEY, query).await, alone);
    let admin = scores(addr, ADMIN_KEY, query).await;
    let score = |found: &[(String, f64)], name: &str| {
        found.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
    };
    assert_ne!(
        score(&admin, "astro.observe_quasar"),
        score(&alone, "astro.observe_quasar"),
        "a caller who sees the hidden tool scores with it: {admin:?}"
    );

    hidden.stop().await;
    eventually(
        Duration::from_secs(20),
        "the hidden tool leaves",
        || async { !found(ADMIN_KEY, "lab.quasar_catalog").await },
    )
    .await;
    assert_eq!(scores(addr, HER_KEY, query).await, alone);
}
