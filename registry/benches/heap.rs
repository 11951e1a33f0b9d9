//! Where a large catalog's memory goes: the whole registry (gRPC, the MCP
//! endpoint, search) served in this process under dhat's heap profiler,
//! sent `--tools` tools over `--instances` announces (shaped as in
//! `toolmesh-bench scale`), then listed, fetched and searched, so that every
//! lazy structure is built. Prints the live heap after each stage, and
//! writes dhat's profile (`--out`, viewable in dhat's viewer) whose
//! allocation sites `bench/heap_sites.py` sums by owner.
//!
//! ```sh
//! cargo bench -p toolmesh-registry --bench heap -- --tools 10000 --instances 1000 --out /tmp/dhat-heap.json
//! python3 bench/heap_sites.py /tmp/dhat-heap.json
//! ```
//!
//! dhat's allocator stands in for mimalloc here: the figures are bytes
//! asked for, not the resident memory an allocator keeps around them.
#![allow(missing_docs, clippy::unwrap_used, clippy::cast_precision_loss)]

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

use std::{path::PathBuf, time::Duration};

use futures::{StreamExt as _, stream};
use tokio::{net::TcpListener, sync::oneshot};
use toolmesh_proto::pb::{
    self, registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};
use toolmesh_registry::Config;

struct Options {
    tools: usize,
    instances: usize,
    out: PathBuf,
    search_model: Option<PathBuf>,
}

fn options() -> Options {
    let mut options = Options {
        tools: 10_000,
        instances: 1_000,
        out: std::env::temp_dir().join("dhat-heap.json"),
        search_model: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tools" => options.tools = args.next().unwrap().parse().unwrap(),
            "--instances" => options.instances = args.next().unwrap().parse().unwrap(),
            "--out" => options.out = args.next().unwrap().into(),
            "--search-model" => options.search_model = Some(args.next().unwrap().into()),
            // cargo bench passes --bench.
            _ => {}
        }
    }
    options
}

/// One tool shaped as `toolmesh-bench scale` makes them.
fn descriptor(index: usize) -> pb::ToolDescriptor {
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
        name: format!("tool_{index:06}"),
        description: format!("Generated tool number {index}, for the scale benchmark."),
        input_schema_json: schema.to_string(),
        tags: vec![format!("group{}", index % 10), "scale".into()],
        ..Default::default()
    }
}

fn live(stage: &str, tools: usize, before: Option<u64>) -> u64 {
    let bytes = dhat::HeapStats::get().curr_bytes as u64;
    match before {
        Some(before) => println!(
            "{stage:<28} {:>9.1} MiB live, {:>6.0} B per tool more",
            bytes as f64 / 1_048_576.0,
            (bytes.saturating_sub(before)) as f64 / tools.max(1) as f64
        ),
        None => println!("{stage:<28} {:>9.1} MiB live", bytes as f64 / 1_048_576.0),
    }
    bytes
}

#[tokio::main]
async fn main() {
    let options = options();
    let profiler = dhat::Profiler::builder().file_name(&options.out).build();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let config = Config {
        mcp_listen: Some("127.0.0.1:0".parse().unwrap()),
        search_model: options.search_model.clone(),
        max_tools: options.tools + 1,
        max_instances: options.instances + 1,
        // No heartbeats are sent: the leases outlast the run.
        lease_ttl: Duration::from_secs(3600),
        ..Config::default()
    };
    let registry = tokio::spawn(toolmesh_registry::run(listener, config, async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Endpoint::from_shared(target)
        .unwrap()
        .connect_timeout(Duration::from_secs(5));
    let channel = loop {
        if let Ok(channel) = channel.connect().await {
            break channel;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let registration = RegistrationClient::new(channel.clone());
    let registry_client = ToolRegistryClient::new(channel).max_decoding_message_size(256 << 20);
    let empty = live("started", 0, None);

    let instances = options.instances.clamp(1, options.tools.max(1));
    let mut requests: Vec<pb::AnnounceRequest> = (0..instances)
        .map(|i| pb::AnnounceRequest {
            instance_id: format!("scale-{i:05}"),
            endpoint: format!("http://127.0.0.1:{}", 20_000 + i % 40_000),
            ..Default::default()
        })
        .collect();
    for tool in 0..options.tools {
        requests[tool % instances].tools.push(descriptor(tool));
    }
    let answers: Vec<_> = stream::iter(requests)
        .map(|request| {
            let mut client = registration.clone();
            async move { client.announce(request).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(answers.iter().all(Result::is_ok), "every announce is taken");
    let announced = live("announced", options.tools, Some(empty));

    let mut token = String::new();
    loop {
        let page = registry_client
            .clone()
            .list_tools(pb::ListToolsRequest {
                page_size: 1000,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    for index in (0..options.tools).step_by(97) {
        registry_client
            .clone()
            .get_tool(pb::GetToolRequest {
                name: descriptor(index).name,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    for query in [
        "look up tool 42",
        "generated scale benchmark",
        "limit query",
    ] {
        registry_client
            .clone()
            .search_tools(pb::SearchToolsRequest {
                query: query.into(),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // The search index is built off the call path: give it time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    live("listed, fetched, searched", options.tools, Some(announced));
    live("in all", options.tools, Some(empty));

    // The profile is written with the catalog still held.
    drop(profiler);
    let _ = stop.send(());
    let _ = registry.await;
}
