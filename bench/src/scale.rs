//! `toolmesh-bench scale`: a large catalog announced to one registry over
//! gRPC, as many sidecars would: `tools` tools spread over `instances`
//! instances (tool names are unique, so each tool has one instance).
//! Measures announce and heartbeat throughput at `concurrency` calls in
//! flight and the time of a full `ListTools`, and checks that the catalog
//! lists every tool announced. Prints one JSON line; `scripts/scale.sh`
//! adds the registry's memory.

use std::time::{Duration, Instant};

use futures::{StreamExt as _, stream};
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb::{
    self, registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};

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
    /// Full `ListTools` calls timed.
    #[arg(long, default_value_t = 10)]
    lists: usize,
    /// The registry's process id, when on this machine: its resident memory
    /// is read before, after the announces, and after the lists.
    #[arg(long)]
    pid: Option<u32>,
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
/// lease ids.
pub(crate) async fn announce_all(
    registration: &RegistrationClient<Channel>,
    requests: Vec<pb::AnnounceRequest>,
    concurrency: usize,
) -> Result<Vec<String>, tonic::Status> {
    stream::iter(requests)
        .map(|request| {
            let mut client = registration.clone();
            async move { client.announce(request).await }
        })
        .buffer_unordered(concurrency.max(1))
        .map(|answer| answer.map(|a| a.into_inner().lease_id))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let channel: Channel = Endpoint::from_shared(args.target.clone())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60))
        .connect()
        .await?;
    let registration = RegistrationClient::new(channel.clone());
    let registry = ToolRegistryClient::new(channel).max_decoding_message_size(64 << 20);

    // A first announce and withdraw, so that connecting and the registry's
    // first-call work are not in the figures.
    let warm_up = pb::AnnounceRequest {
        instance_id: "scale-warm-up".into(),
        endpoint: "http://127.0.0.1:19999".into(),
        tools: vec![pb::ToolDescriptor {
            name: "scale_warm_up".into(),
            ..descriptor(0)
        }],
        execute_key: Vec::new(),
    };
    let lease_id = registration
        .clone()
        .announce(warm_up)
        .await?
        .into_inner()
        .lease_id;
    registration
        .clone()
        .withdraw(pb::WithdrawRequest { lease_id })
        .await?;
    let rss_before = rss_kib(args.pid);

    let requests = announces(args.tools, args.instances);
    let instances = requests.len();
    let started = Instant::now();
    let leases = announce_all(&registration, requests, args.concurrency).await?;
    let announce_took = started.elapsed();
    let rss_announced = rss_kib(args.pid);

    let stop_at = Instant::now() + Duration::from_secs_f64(args.seconds);
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
        .buffer_unordered(args.concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    let heartbeat_took = started.elapsed();
    let heartbeats = beats.len();
    if let Some(Err(status)) = beats.into_iter().find(Result::is_err) {
        anyhow::bail!("a heartbeat failed: {status}");
    }

    let mut list_times = Vec::with_capacity(args.lists);
    let mut listed = 0;
    for _ in 0..args.lists.max(1) {
        let started = Instant::now();
        let answer = registry
            .clone()
            .list_tools(pb::ListToolsRequest::default())
            .await?
            .into_inner();
        list_times.push(started.elapsed());
        listed = answer.tools.len();
        if answer.truncated {
            anyhow::bail!(
                "ListTools was truncated at {listed} of {} tools",
                args.tools
            );
        }
    }
    if listed != args.tools {
        anyhow::bail!(
            "ListTools listed {listed} tools, {} were announced",
            args.tools
        );
    }
    let rss_listed = rss_kib(args.pid);
    list_times.sort();
    let millis = |d: Duration| d.as_secs_f64() * 1e3;
    let line = serde_json::json!({
        "tools": args.tools,
        "instances": instances,
        "announces_per_s": rate(instances, announce_took),
        "tools_announced_per_s": rate(args.tools, announce_took),
        "heartbeats_per_s": rate(heartbeats, heartbeat_took),
        "list_tools_p50_ms": list_times.get(list_times.len() / 2).copied().map_or(0.0, millis),
        "list_tools_max_ms": list_times.last().copied().map_or(0.0, millis),
        "listed": listed,
        "rss_before_kib": rss_before,
        "rss_announced_kib": rss_announced,
        "rss_listed_kib": rss_listed,
    });
    println!("{line}");
    Ok(())
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
