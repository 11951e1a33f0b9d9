//! The embedded catalog at scale, at the store (no gRPC): announce and
//! heartbeat throughput, and what one expiry sweep costs, from 100 to
//! 10,000 leases (one tool each, ten tools per lease at the largest).
//!
//! ```sh
//! cargo bench -p toolmesh-registry --bench lease_sweep
//! ```
//!
//! The sweep runs every tenth of the lease TTL (at most every second),
//! holding the catalog lock: its cost is what every announce, heartbeat and
//! lookup may wait behind.
#![allow(missing_docs, clippy::unwrap_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use toolmesh_proto::pb::ToolDescriptor;
use toolmesh_registry::access::registrants::Owner;
use toolmesh_registry::catalog::Announcement;
use toolmesh_registry::catalog::store::CatalogStore as _;
use toolmesh_registry::catalog::store::memory::{Limits, MemoryStore};

fn announcement(instance: usize, tools_per_instance: usize) -> Announcement {
    Announcement {
        instance_id: format!("instance-{instance}"),
        endpoint: format!("http://10.0.{}.{}:50052", instance / 250, instance % 250),
        execute_key: None,
        tools: (0..tools_per_instance)
            .map(|t| ToolDescriptor {
                name: format!("tool_{instance}_{t}"),
                description: "a tool of the scale benchmark".into(),
                input_schema_json: r#"{"type":"object","properties":{"q":{"type":"string"}}}"#
                    .into(),
                ..Default::default()
            })
            .collect(),
        owner: Owner::default(),
    }
}

async fn run(instances: usize, tools_per_instance: usize) {
    let limits = Limits {
        max_instances: instances + 1,
        max_tools: instances * tools_per_instance + 1,
    };
    // A TTL no lease reaches during the run: the sweeps measured find
    // nothing to expire, as almost every sweep of a healthy fleet does.
    let store = MemoryStore::new(Duration::from_secs(3600), limits);

    let started = Instant::now();
    let mut leases = Vec::with_capacity(instances);
    for i in 0..instances {
        leases.push(
            store
                .announce(announcement(i, tools_per_instance))
                .await
                .unwrap()
                .id,
        );
    }
    let announce = started.elapsed();

    let started = Instant::now();
    for lease in &leases {
        store.heartbeat(lease, "").await.unwrap();
    }
    let heartbeat = started.elapsed();

    let sweeps = 1000;
    let started = Instant::now();
    for _ in 0..sweeps {
        assert_eq!(store.expire(tokio::time::Instant::now()), 0);
    }
    let sweep = started.elapsed() / sweeps;

    let per_second = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "| {instances} | {} | {:.0} | {:.0} | {:.2} µs |",
        instances * tools_per_instance,
        per_second(instances, announce),
        per_second(instances, heartbeat),
        sweep.as_secs_f64() * 1e6,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("| leases | tools | announces/s | heartbeats/s | one sweep, nothing expired |");
    println!("|---|---|---|---|---|");
    for instances in [100, 1_000, 10_000] {
        run(instances, 1).await;
    }
    run(1_000, 10).await;
}
