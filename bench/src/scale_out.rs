//! `toolmesh-bench scale-out`: one tool called through every registry
//! replica at once, for a fixed window, counting per replica the calls
//! accepted (`OK`), refused by the rate limit (`RESOURCE_EXHAUSTED`) and
//! failed otherwise. For a rate-limited tool (`--rate`, `--burst`: the
//! limit its sidecar announced), the accepted calls are set against what
//! the global limit allows in the window, r·T + b. Prints one JSON line
//! (`scripts/scale.sh` drives it on a Redis Cluster).
//!
//! Every replica gets its own HTTP/2 connection and `concurrency` calls in
//! flight, all driven by this one thread. A call is sent only while the
//! window is open; the answers of calls still in flight when it closes are
//! counted.

use std::time::{Duration, Instant};

use tonic::{Code, transport::Endpoint};
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};

/// `toolmesh-bench scale-out`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The replicas, `http://HOST:PORT`, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    targets: Vec<String>,
    /// The tool called.
    #[arg(long, default_value = "echo")]
    tool: String,
    /// Calls in flight at each replica.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Seconds of the window.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seconds of calls before the window, not counted (0 for a limited
    /// tool: the window must start with its bucket full).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// The tool's rate limit, calls per second across every replica.
    #[arg(long)]
    rate: Option<f64>,
    /// The limit's burst.
    #[arg(long, default_value_t = 0, requires = "rate")]
    burst: u32,
}

/// What one replica answered in the window.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Tally {
    /// Calls that ran (`OK`).
    ok: u64,
    /// Calls the rate limit refused (`RESOURCE_EXHAUSTED`).
    limited: u64,
    /// Any other answer.
    failed: u64,
    /// The first other answer, described.
    first_failure: Option<String>,
}

impl Tally {
    fn add(&mut self, other: &Self) {
        self.ok += other.ok;
        self.limited += other.limited;
        self.failed += other.failed;
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&other.first_failure);
        }
    }
}

/// Calls a limit of `rate` per second and `burst` admits over `seconds`
/// from a full bucket: r·T + b (`b` = 0 meaning max(1, ⌈r⌉), as the
/// registry reads it).
fn allowed(rate: f64, burst: u32, seconds: f64) -> f64 {
    let burst = if burst == 0 {
        rate.ceil().max(1.0)
    } else {
        f64::from(burst)
    };
    rate * seconds + burst
}

/// How far `accepted` is from `allowed`, in percent of `allowed`.
#[allow(clippy::cast_precision_loss)]
fn error_pct(accepted: u64, allowed: f64) -> f64 {
    (accepted as f64 - allowed) / allowed.max(f64::EPSILON) * 100.0
}

#[allow(clippy::cast_precision_loss)]
fn per_second(calls: u64, seconds: f64) -> f64 {
    calls as f64 / seconds.max(f64::EPSILON)
}

/// One replica's `concurrency` loops, each calling until `stop_at`;
/// answers before `count_from` are not counted.
async fn drive(
    client: ToolRegistryClient<tonic::transport::Channel>,
    tool: String,
    concurrency: usize,
    count_from: Instant,
    stop_at: Instant,
) -> Tally {
    let loops = (0..concurrency.max(1)).map(|_| {
        let mut client = client.clone();
        let tool = tool.clone();
        async move {
            let mut tally = Tally::default();
            while Instant::now() < stop_at {
                let sent = Instant::now();
                let mut request = tonic::Request::new(pb::InvokeRequest {
                    tool: tool.clone(),
                    arguments_json: r#"{"text":"scale-out"}"#.into(),
                    ..Default::default()
                });
                request.set_timeout(Duration::from_secs(5));
                let answer = client.invoke(request).await;
                if sent < count_from {
                    continue;
                }
                match answer {
                    Ok(_) => tally.ok += 1,
                    Err(status) if status.code() == Code::ResourceExhausted => tally.limited += 1,
                    Err(status) => {
                        tally.failed += 1;
                        tally
                            .first_failure
                            .get_or_insert_with(|| status.to_string());
                    }
                }
            }
            tally
        }
    });
    let mut total = Tally::default();
    for tally in futures::future::join_all(loops).await {
        total.add(&tally);
    }
    total
}

/// Calls `tool` once at a time until the replica knows it: it runs the call
/// or the rate limit refuses it. Fails after `within`.
async fn await_ready(
    client: &mut ToolRegistryClient<tonic::transport::Channel>,
    tool: &str,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let request = pb::InvokeRequest {
            tool: tool.to_owned(),
            arguments_json: r#"{"text":"ready"}"#.into(),
            ..Default::default()
        };
        let status = match client.invoke(request).await {
            Ok(_) => return Ok(()),
            Err(status) if status.code() == Code::ResourceExhausted => return Ok(()),
            Err(status) => status,
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "{tool} was not callable within {within:?}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.rate.is_none() || args.warmup == 0.0,
        "a rate-limited window starts with its bucket full: --warmup 0 with --rate"
    );
    let mut clients = Vec::new();
    for target in &args.targets {
        let channel = Endpoint::from_shared(target.clone())?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await?;
        let mut client = ToolRegistryClient::new(channel);
        await_ready(&mut client, &args.tool, Duration::from_secs(20)).await?;
        clients.push(client);
    }
    if let Some(rate) = args.rate {
        // The readiness calls took tokens: the bucket refills before the window.
        let refill = allowed(rate, args.burst, 0.0) / rate;
        tokio::time::sleep(Duration::from_secs_f64(refill + 0.5)).await;
    }
    let started = Instant::now();
    let count_from = started + Duration::from_secs_f64(args.warmup);
    let stop_at = count_from + Duration::from_secs_f64(args.seconds);
    let tallies = futures::future::join_all(clients.into_iter().map(|client| {
        drive(
            client,
            args.tool.clone(),
            args.concurrency,
            count_from,
            stop_at,
        )
    }))
    .await;
    // The window as the answers saw it: from its opening to the last answer.
    let elapsed = started.elapsed().saturating_sub(count_from - started);

    let mut total = Tally::default();
    for tally in &tallies {
        total.add(tally);
    }
    let seconds = elapsed.as_secs_f64();
    let replicas: Vec<serde_json::Value> = args
        .targets
        .iter()
        .zip(&tallies)
        .map(|(target, tally)| {
            serde_json::json!({
                "target": target,
                "tally": tally,
                "ok_per_s": per_second(tally.ok, seconds),
                "answered_per_s": per_second(tally.ok + tally.limited, seconds),
            })
        })
        .collect();
    let limit = args.rate.map(|rate| {
        let in_window = allowed(rate, args.burst, args.seconds);
        let in_elapsed = allowed(rate, args.burst, seconds);
        serde_json::json!({
            "rate": rate,
            "burst": args.burst,
            "allowed": in_window,
            "allowed_in_elapsed": in_elapsed,
            "error_pct": error_pct(total.ok, in_window),
            "error_pct_elapsed": error_pct(total.ok, in_elapsed),
        })
    });
    let line = serde_json::json!({
        "tool": args.tool,
        "replicas": args.targets.len(),
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "elapsed_s": seconds,
        "total": total,
        "ok_per_s": per_second(total.ok, seconds),
        "answered_per_s": per_second(total.ok + total.limited, seconds),
        "per_replica": replicas,
        "limit": limit,
    });
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_allows_its_rate_over_the_window_and_its_burst() {
        assert!((allowed(2000.0, 100, 5.0) - 10_100.0).abs() < 1e-9);
        assert!(
            (allowed(2.5, 0, 2.0) - 8.0).abs() < 1e-9,
            "burst 0 reads ⌈2.5⌉"
        );
        assert!(
            (allowed(0.5, 0, 4.0) - 3.0).abs() < 1e-9,
            "burst 0 reads at least 1"
        );
    }

    #[test]
    fn the_error_is_signed_and_relative() {
        assert!((error_pct(10_201, 10_100.0) - 1.0).abs() < 1e-9);
        assert!((error_pct(9_999, 10_100.0) + 1.0).abs() < 1e-9);
        assert_eq!(error_pct(0, 0.0), 0.0);
    }

    #[test]
    fn tallies_add_up_and_keep_the_first_failure() {
        let mut total = Tally::default();
        let one = Tally {
            ok: 3,
            limited: 2,
            failed: 1,
            first_failure: Some("first".into()),
        };
        let two = Tally {
            first_failure: Some("second".into()),
            ..one.clone()
        };
        total.add(&one);
        total.add(&two);
        assert_eq!((total.ok, total.limited, total.failed), (6, 4, 2));
        assert_eq!(total.first_failure.as_deref(), Some("first"));
    }
}
