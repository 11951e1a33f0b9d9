//! `toolmesh-bench scale`: a large catalog announced to one registry over
//! gRPC, as many sidecars would: `tools` tools spread over `instances`
//! instances (tool names are unique, so each tool has one instance).
//! Measures announce and heartbeat throughput at `concurrency` calls in
//! flight; then, the leases kept alive, the whole catalog listed page after
//! page (checking that it lists every tool announced), pages of 100 at the
//! start and deep in the catalog, `GetTool` and `SearchTools`
//! ([`reads`]); then lets every lease expire and measures what the sweep
//! cost the registry ([`expiry`]). With `--pid`, the registry's resident
//! memory along the way and its CPU time ([`cpu`]). Prints one JSON line
//! (`scripts/scale.sh` renders it with `bench/plot_scale.py`).

use std::time::{Duration, Instant};

use futures::{StreamExt as _, stream};
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb::{
    self, registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};

mod cpu;
mod expiry;
mod keeper;
mod reads;
mod sweep_metric;
pub(crate) mod timing;

use timing::Summary;

/// `toolmesh-bench scale`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The registry: `http://HOST:PORT`.
    #[arg(long)]
    target: String,
    /// Tools announced in all.
    #[arg(long, default_value_t = 10_000)]
    tools: usize,
    /// Instances they are spread over (one announce each).
    #[arg(long, default_value_t = 1_000)]
    instances: usize,
    /// Calls in flight while announcing and heartbeating.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds of heartbeats measured.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Walks of the whole catalog timed (`ListTools` pages at the largest
    /// size the registry sends, until the last).
    #[arg(long, default_value_t = 10)]
    lists: usize,
    /// Calls timed of each read: a page of 100 at the start, one 90 % of
    /// the way in, `GetTool`, `SearchTools`.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// The registry's process id, when on this machine: its resident memory
    /// is read before, after the announces, after the lists and after the
    /// other reads, and its CPU time while the leases expire.
    #[arg(long)]
    pid: Option<u32>,
    /// The registry's admin port (`HOST:PORT`): in Redis mode, its own
    /// timing of the lease sweep is read from `/metrics`.
    #[arg(long)]
    admin: Option<String>,
}

/// `pid`'s resident memory in KiB (Linux), if it can be read.
pub(crate) fn rss_kib(pid: Option<u32>) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One generated tool, shaped like a real one: a description, two tags,
/// and an input schema with two described properties.
pub(crate) fn descriptor(index: usize) -> pb::ToolDescriptor {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": format!("what tool {index} looks up")},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        },
        "required": ["query"],
        "additionalProperties": false,
    });
    pb::ToolDescriptor {
        name: format!("tool_{index:05}"),
        description: format!("Generated tool number {index}, for the scale benchmark."),
        input_schema_json: schema.to_string(),
        tags: vec![format!("group{}", index % 10), "scale".into()],
        ..Default::default()
    }
}

/// `tools` tools spread over `instances` announces (one per instance).
pub(crate) fn announces(tools: usize, instances: usize) -> Vec<pb::AnnounceRequest> {
    let instances = instances.clamp(1, tools.max(1));
    let mut requests: Vec<pb::AnnounceRequest> = (0..instances)
        .map(|i| pb::AnnounceRequest {
            instance_id: format!("scale-{i:05}"),
            endpoint: format!("http://127.0.0.1:{}", 20_000 + i),
            tools: Vec::new(),
            execute_key: Vec::new(),
        })
        .collect();
    for tool in 0..tools {
        requests[tool % instances].tools.push(descriptor(tool));
    }
    requests
}

/// Calls per second of `calls` calls that took `took`.
#[allow(clippy::cast_precision_loss)]
fn rate(calls: usize, took: Duration) -> f64 {
    calls as f64 / took.as_secs_f64().max(f64::EPSILON)
}

/// Sends every announce in `requests`, `concurrency` at a time; their
/// lease ids, in the order of `requests`.
pub(crate) async fn announce_all(
    registration: &RegistrationClient<Channel>,
    requests: Vec<pb::AnnounceRequest>,
    concurrency: usize,
) -> Result<Vec<String>, tonic::Status> {
    let mut leases = stream::iter(requests.into_iter().enumerate())
        .map(|(index, request)| {
            let mut client = registration.clone();
            async move { (index, client.announce(request).await) }
        })
        .buffer_unordered(concurrency.max(1))
        .map(|(index, answer)| answer.map(|a| (index, a.into_inner().lease_id)))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    leases.sort_unstable();
    Ok(leases.into_iter().map(|(_, lease)| lease).collect())
}

/// One announce and withdraw, so that connecting and the registry's
/// first-call work are not in the figures: the lease TTL it granted.
async fn warm_up(registration: &RegistrationClient<Channel>) -> anyhow::Result<Duration> {
    let request = pb::AnnounceRequest {
        instance_id: "scale-warm-up".into(),
        endpoint: "http://127.0.0.1:19999".into(),
        tools: vec![pb::ToolDescriptor {
            name: "scale_warm_up".into(),
            ..descriptor(0)
        }],
        execute_key: Vec::new(),
    };
    let answer = registration.clone().announce(request).await?.into_inner();
    registration
        .clone()
        .withdraw(pb::WithdrawRequest {
            lease_id: answer.lease_id,
        })
        .await?;
    let ttl = answer.ttl.unwrap_or_default();
    Ok(Duration::new(
        u64::try_from(ttl.seconds).unwrap_or(0),
        u32::try_from(ttl.nanos).unwrap_or(0),
    ))
}

/// Heartbeats over `leases`, round after round, `concurrency` in flight,
/// for `seconds`: how many, and how many per second.
async fn heartbeat_for(
    registration: &RegistrationClient<Channel>,
    leases: &[String],
    concurrency: usize,
    seconds: f64,
) -> anyhow::Result<(usize, f64)> {
    let stop_at = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let beats = stream::iter(leases.iter().cycle())
        .take_while(|_| std::future::ready(Instant::now() < stop_at))
        .map(|lease_id| {
            let mut client = registration.clone();
            let request = pb::HeartbeatRequest {
                lease_id: lease_id.clone(),
            };
            async move { client.heartbeat(request).await }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let took = started.elapsed();
    if let Some(Err(status)) = beats.iter().find(|b| b.is_err()) {
        anyhow::bail!("a heartbeat failed: {status}");
    }
    Ok((beats.len(), rate(beats.len(), took)))
}

/// The whole catalog listed `walks` times: the times of each walk, and the
/// pages of the last; fails unless each lists `tools` tools.
async fn time_walks(
    registry: &mut reads::Registry,
    keeper: &mut keeper::Keeper,
    tools: usize,
    walks: usize,
) -> anyhow::Result<(Summary, usize)> {
    let mut times = Vec::with_capacity(walks);
    let mut pages = 0;
    for _ in 0..walks.max(1) {
        keeper.tend().await?;
        let started = Instant::now();
        let (listed, walked) = reads::list_all(registry).await?;
        times.push(started.elapsed());
        pages = walked;
        anyhow::ensure!(
            listed == tools,
            "ListTools listed {listed} tools, {tools} were announced"
        );
    }
    Ok((Summary::of(times), pages))
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.tools > 0, "--tools must be at least 1");
    let channel: Channel = Endpoint::from_shared(args.target.clone())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60))
        .connect()
        .await?;
    let registration = RegistrationClient::new(channel.clone());
    let mut registry = ToolRegistryClient::new(channel).max_decoding_message_size(64 << 20);

    let ttl = warm_up(&registration).await?;
    let rss_before = rss_kib(args.pid);

    let requests = announces(args.tools, args.instances);
    let instances = requests.len();
    let started = Instant::now();
    let leases = announce_all(&registration, requests, args.concurrency).await?;
    let announce_took = started.elapsed();
    let rss_announced = rss_kib(args.pid);
    // The registry's search index takes the tools after the answers: the
    // heartbeats are measured once it is done.
    let settled_after = match args.pid {
        Some(pid) => {
            let (quiet, _) = cpu::settle(pid, Duration::from_secs(300)).await?;
            Some((quiet - started).saturating_sub(announce_took))
        }
        None => None,
    };

    let beating = Instant::now();
    let (heartbeats, heartbeats_per_s) =
        heartbeat_for(&registration, &leases, args.concurrency, args.seconds).await?;
    // Every lease had a heartbeat since `beating`, or must have one now.
    let last_round = if heartbeats >= leases.len() {
        beating
    } else {
        started
    };
    let mut keeper = keeper::Keeper::new(registration.clone(), leases.clone(), ttl / 3, last_round);
    let (walks, pages) = time_walks(&mut registry, &mut keeper, args.tools, args.lists).await?;
    let rss_listed = rss_kib(args.pid);

    let page_size = 100.min(args.tools);
    let deep_after = (args.tools * 9 / 10).min(args.tools - page_size);
    let page_first = reads::time_page(
        &mut registry,
        &mut keeper,
        "",
        page_size_u32(page_size),
        args.calls,
    )
    .await?;
    keeper.tend().await?;
    let deep_token = reads::token_after(&mut registry, deep_after).await?;
    let page_deep = reads::time_page(
        &mut registry,
        &mut keeper,
        &deep_token,
        page_size_u32(page_size),
        args.calls,
    )
    .await?;
    let get_tool = reads::time_get_tool(&mut registry, &mut keeper, args.tools, args.calls).await?;
    let search = reads::time_search(&mut registry, &mut keeper, args.calls).await?;
    let rss_read = rss_kib(args.pid);

    let expired = expiry::let_go(
        &registration,
        &mut registry,
        &leases,
        |lease| descriptor(lease).name,
        ttl,
        args.pid,
        args.admin.as_deref(),
    )
    .await?;

    let line = serde_json::json!({
        "tools": args.tools,
        "instances": instances,
        "lease_ttl_s": ttl.as_secs_f64(),
        "announces_per_s": rate(instances, announce_took),
        "tools_announced_per_s": rate(args.tools, announce_took),
        "quiet_after_announces_ms": settled_after.map(|d| d.as_secs_f64() * 1e3),
        "heartbeats_per_s": heartbeats_per_s,
        "list_tools_p50_ms": walks.p50_ms,
        "list_tools_max_ms": walks.max_ms,
        "list_pages": pages,
        "page_size": page_size,
        "page_first": page_first,
        "page_deep": page_deep,
        "page_deep_after": deep_after,
        "get_tool": get_tool,
        "search": search,
        "expiry": expired,
        "rss_before_kib": rss_before,
        "rss_announced_kib": rss_announced,
        "rss_listed_kib": rss_listed,
        "rss_read_kib": rss_read,
    });
    println!("{line}");
    Ok(())
}

fn page_size_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_is_announced_once() {
        let requests = announces(10, 3);
        let mut names: Vec<String> = requests
            .iter()
            .flat_map(|r| r.tools.iter().map(|t| t.name.clone()))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 10);
        assert_eq!(requests.len(), 3);
        assert!(requests.iter().all(|r| !r.tools.is_empty()));
    }

    #[test]
    fn more_instances_than_tools_leaves_none_empty() {
        assert_eq!(announces(2, 5).len(), 2);
    }
}
