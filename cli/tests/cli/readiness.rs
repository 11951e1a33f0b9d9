//! A registry that has not loaded its catalog (here: its Redis is not
//! there) is not mistaken for an empty one: every command that asks it
//! says it is not ready and exits 8; once Redis answers, they work.

use std::time::Duration;

use toolmesh_registry::Config;
use toolmesh_test_support::redis::RedisServer;
use toolmesh_test_support::server::loopback_listener;
use toolmesh_test_support::wait::eventually;

use crate::{exits, json_of, stderr, stdout, toolmesh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_without_its_catalog_is_not_ready() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    redis.kill();
    let config = Config {
        redis: Some(redis.url()),
        redis_prefix: "cli-not-ready".into(),
        shutdown_grace: Duration::from_secs(1),
        ..Config::default()
    };
    let registry = toolmesh_test_support::server::registry(loopback_listener().await, config);
    let url = registry.url();
    let run = async |args: &[&str]| toolmesh(&url).args(args).output().await.unwrap();
    let not_ready = format!("error: the registry at {url} is not ready: its health is NOT_SERVING");
    for args in [
        &["tools", "list"][..],
        &["tools", "get", "forecast"],
        &["search", "rain"],
        &["export", "-f", "mcp"],
        &["watch", "--once"],
        &["invoke", "forecast", "{}"],
    ] {
        let output = run(args).await;
        exits(&output, 8);
        assert!(
            stderr(&output).starts_with(&not_ready),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(stdout(&output), "", "{args:?}: no empty table");
    }
    let json = json_of(&run(&["tools", "list", "-o", "json"]).await);
    assert_eq!(json["error"]["code"], "UNAVAILABLE", "{json}");
    assert_eq!(json["error"]["registry"], url.as_str(), "{json}");

    redis.restart();
    eventually(
        Duration::from_secs(20),
        "ready once Redis answers",
        || async { run(&["tools", "list"]).await.status.success() },
    )
    .await;
    assert_eq!(
        stdout(&run(&["tools", "list"]).await).trim(),
        "NAME  INSTANCES  RATE LIMIT  DIGEST  DESCRIPTION"
    );
}
