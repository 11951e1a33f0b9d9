//! Load generator for the whole `Invoke` path: an embedded registry and an
//! SDK sidecar on loopback, driven by N concurrent agents over gRPC for a
//! fixed time. Prints throughput and latency percentiles.
//!
//! ```sh
//! cargo bench -p toolmesh-registry --bench invoke_load -- [--concurrency 32] [--seconds 10] [--rate-limited] [--redis redis://127.0.0.1:6379]
//! ```
//!
//! With `--redis` the registry runs in distributed mode on that Redis, and
//! the run reports the Redis commands issued per call (from
//! `INFO commandstats`: top-level `EVALSHA`s, the one round trip a
//! rate-limited call makes).
//!
//! With `--telemetry`, logs go through the binaries' own subscriber (at
//! `warn`) and spans are exported as the `OTEL_*` variables say; with
//! `--collector ADDR` the run also starts an OTLP gRPC receiver there that
//! counts what it is sent. Tracing's cost at 100 % and 1 % sampling:
//!
//! ```sh
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc \
//! OTEL_TRACES_SAMPLER=parentbased_traceidratio OTEL_TRACES_SAMPLER_ARG=0.01 \
//! cargo bench -p toolmesh-registry --bench invoke_load -- --telemetry --collector 127.0.0.1:4317
//! ```
//!
//! Client, registry and sidecar share the machine, so the figures are the
//! whole system's on it, not the registry's alone.
#![allow(missing_docs, clippy::unwrap_used)]

// The allocator the binaries use, so the figures are theirs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::{net::TcpListener, sync::oneshot};
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};
use toolmesh_registry::Config;
use toolmesh_sidecar::{sdk, server::ServeOptions};

#[derive(Deserialize, JsonSchema)]
struct Args {
    text: String,
    #[allow(dead_code)]
    count: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
struct Words {
    words: usize,
}

struct Options {
    concurrency: usize,
    seconds: u64,
    rate_limited: bool,
    redis: Option<String>,
    telemetry: bool,
    collector: Option<String>,
}

fn options() -> Options {
    let mut options = Options {
        concurrency: 32,
        seconds: 10,
        rate_limited: false,
        redis: None,
        telemetry: false,
        collector: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--concurrency" => {
                options.concurrency = args.next().and_then(|v| v.parse().ok()).unwrap_or(32)
            }
            "--seconds" => options.seconds = args.next().and_then(|v| v.parse().ok()).unwrap_or(10),
            "--rate-limited" => options.rate_limited = true,
            "--redis" => options.redis = args.next(),
            "--telemetry" => options.telemetry = true,
            "--collector" => options.collector = args.next(),
            // cargo bench passes --bench; ignore what is not ours.
            _ => {}
        }
    }
    options
}

#[tokio::main]
async fn main() {
    let options = options();
    let collector = match &options.collector {
        Some(addr) => Some(toolmesh_test_support::otlp::Collector::counting(addr).await),
        None => None,
    };
    let _telemetry = options.telemetry.then(|| {
        toolmesh_telemetry::init(
            &toolmesh_telemetry::LogArgs {
                filter: "warn".into(),
                ..toolmesh_telemetry::LogArgs::default()
            },
            "invoke-load",
        )
        .unwrap()
    });
    let registry_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let registry_addr = registry_listener.local_addr().unwrap();
    let (stop_registry, registry_stopped) = oneshot::channel::<()>();
    let config = Config {
        redis: options.redis.clone(),
        redis_prefix: format!("bench{}", std::process::id()),
        ..Config::default()
    };
    let registry = tokio::spawn(toolmesh_registry::run(registry_listener, config, async {
        let _ = registry_stopped.await;
    }));

    let mut tool = sdk::tool("word_count", "Count words", |args: Args| async move {
        Ok(Words {
            words: args.text.split_whitespace().count(),
        })
    })
    .idempotent(true);
    if options.rate_limited {
        // High enough never to deny: measures the limiter's cost, not its effect.
        tool = tool.rate_limit(1e6, 1_000_000);
    }
    let sidecar_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop_sidecar, sidecar_stopped) = oneshot::channel::<()>();
    let sidecar = tokio::spawn(toolmesh_sidecar::server::serve(
        sidecar_listener,
        vec![tool.build()],
        ServeOptions {
            registry: format!("http://{registry_addr}"),
            instance_id: Some("bench".into()),
            ..ServeOptions::default()
        },
        async {
            let _ = sidecar_stopped.await;
        },
    ));

    let client = ToolRegistryClient::connect(format!("http://{registry_addr}"))
        .await
        .unwrap();
    let ready = Instant::now();
    while client
        .clone()
        .get_tool(pb::GetToolRequest {
            name: "word_count".into(),
            ..Default::default()
        })
        .await
        .is_err()
    {
        assert!(
            ready.elapsed() < Duration::from_secs(10),
            "sidecar never announced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let request = pb::InvokeRequest {
        tool: "word_count".into(),
        arguments_json: r#"{"text": "the quick brown fox jumps over the lazy dog", "count": 3}"#
            .into(),
        idempotency_key: String::new(),
        tool_digest: String::new(),
        ..Default::default()
    };
    // Warm up connections and caches.
    for _ in 0..200 {
        client.clone().invoke(request.clone()).await.unwrap();
    }

    let evalsha_before = match &options.redis {
        Some(url) => evalsha_calls(url).await,
        None => 0,
    };
    let stop_at = Instant::now() + Duration::from_secs(options.seconds);
    let request = Arc::new(request);
    let workers: Vec<_> = (0..options.concurrency)
        .map(|_| {
            let mut client = client.clone();
            let request = request.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(100_000);
                let mut errors = 0u64;
                while Instant::now() < stop_at {
                    let started = Instant::now();
                    match client.invoke(request.as_ref().clone()).await {
                        Ok(_) => latencies.push(started.elapsed()),
                        Err(_) => errors += 1,
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (l, e) = worker.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let percentile = |p: f64| {
        let index = ((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1));
        latencies.get(index).copied().unwrap_or_default()
    };
    println!(
        "invoke_load: concurrency {} for {:?}{}",
        options.concurrency,
        elapsed,
        if options.rate_limited {
            " (rate-limited tool)"
        } else {
            ""
        }
    );
    println!(
        "  calls ok {}  errors {}  throughput {:.0} calls/s",
        latencies.len(),
        errors,
        latencies.len() as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  latency p50 {:?}  p90 {:?}  p99 {:?}  max {:?}",
        percentile(0.50),
        percentile(0.90),
        percentile(0.99),
        latencies.last().copied().unwrap_or_default()
    );

    if let Some(collector) = &collector {
        // The last batch leaves within the exporter's schedule delay.
        tokio::time::sleep(Duration::from_secs(6)).await;
        println!(
            "  spans exported {} = {:.2} per call",
            collector.count(),
            collector.count() as f64 / latencies.len().max(1) as f64
        );
    }

    if let Some(url) = &options.redis {
        let scripts = evalsha_calls(url).await - evalsha_before;
        println!(
            "  redis: {scripts} EVALSHA during the run = {:.3} per call (catalog reads never go to redis)",
            scripts as f64 / latencies.len().max(1) as f64
        );
    }

    let _ = stop_sidecar.send(());
    let _ = sidecar.await;
    let _ = stop_registry.send(());
    let _ = registry.await;
}

/// Top-level `EVALSHA` calls the Redis server has answered so far.
async fn evalsha_calls(url: &str) -> u64 {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
