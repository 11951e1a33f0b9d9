//! An unreachable Redis as the registry binary's log tells it: what is
//! unreachable and why, what that means meanwhile, again with backoff while
//! it lasts, and once when it is over; at start and mid-run.

use std::time::{Duration, Instant};

use toolmesh_test_support::registry_process::RegistryProcess;

use crate::common::{RedisServer, eventually, processes::binary};

/// The lines of `log` that report Redis unreachable.
fn reports(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains("WARN") && line.contains("is unreachable"))
        .collect()
}

/// The lines of `log` that say Redis is back.
fn returns(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|line| line.contains("answers again after"))
        .collect()
}

/// The pause each report announces before the next ("Said again in 2.0s").
fn pauses(reports: &[&str]) -> Vec<String> {
    reports
        .iter()
        .filter_map(|line| line.split("Said again in ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_reported_with_backoff_until_it_answers() {
    let Some(bin) = binary("toolmesh-registry") else {
        return;
    };
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    // Its port, with nothing listening there (refused).
    redis.kill();
    let url = format!("{}/0", redis.url());
    let started = Instant::now();
    let (registry, _addr) = RegistryProcess::start(
        &bin,
        &[
            "--listen",
            "127.0.0.1:0",
            "--redis",
            &url,
            "--redis-prefix",
            "unreachable",
        ],
        &[],
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the outage policy logged as the flag spells it",
        || async { registry.log().contains("outage=fail-closed") },
    )
    .await;

    // At start: within a few seconds (the breaker opens on the third
    // failed look, one a second), with the address, the reason, and what
    // each part does meanwhile.
    eventually(
        Duration::from_secs(15),
        "the outage is reported",
        || async { !reports(&registry.log()).is_empty() },
    )
    .await;
    eprintln!("first report {:?} after start", started.elapsed());
    let log = registry.log();
    let first = reports(&log)[0];
    for said in [
        format!("redis at {url} is unreachable"),
        "Connection refused".to_owned(),
        "the catalog is not loaded, so the registry is not ready".to_owned(),
        "rate-limited tools are refused with UNAVAILABLE (--redis-outage fail-closed)".to_owned(),
        "calls with an idempotency key are refused".to_owned(),
    ] {
        assert!(first.contains(&said), "{said:?} not in {first}");
    }

    // Said again after 1 s, 2 s, 4 s: 4 reports in 10 s (one a look would
    // be 10).
    let first_seen = Instant::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let log = registry.log();
    let so_far = reports(&log);
    eprintln!(
        "{} reports in {:?}: pauses {:?}",
        so_far.len(),
        first_seen.elapsed(),
        pauses(&so_far)
    );
    assert!((3..=5).contains(&so_far.len()), "{log}");
    assert_eq!(pauses(&so_far)[..3], ["1.0s", "2.0s", "4.0s"], "{log}");
    assert!(returns(&log).is_empty(), "{log}");

    // Back: said once, with how long it was gone; the catalog loads.
    redis.restart();
    eventually(Duration::from_secs(20), "the return is logged", || async {
        registry.log().contains("catalog loaded; ready")
    })
    .await;
    let log = registry.log();
    assert_eq!(returns(&log).len(), 1, "{log}");
    assert!(
        returns(&log)[0].contains(&format!("redis at {url} answers again after")),
        "{log}"
    );
    let before = reports(&log).len();

    // Lost mid-run: reported again (the catalog now serves from its view),
    // and again after a second.
    redis.kill();
    eventually(
        Duration::from_secs(15),
        "the loss mid-run is reported twice",
        || async { reports(&registry.log()).len() >= before + 2 },
    )
    .await;
    let log = registry.log();
    let mid_run = &reports(&log)[before..];
    assert!(
        mid_run[0].contains("the catalog is served from this replica's view"),
        "{}",
        mid_run[0]
    );
    assert_eq!(pauses(mid_run)[..2], ["1.0s", "2.0s"], "{log}");
    redis.restart();
    eventually(Duration::from_secs(20), "the second return", || async {
        returns(&registry.log()).len() == 2
    })
    .await;
}
