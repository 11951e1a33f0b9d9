//! Real servers on loopback for the integration tests: the registry and
//! sidecars as their library servers, each on 127.0.0.1:0, each stopped
//! through a oneshot (or aborted, to play a crash).
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod processes;
pub mod redis_server;

use std::{future::Future, net::SocketAddr, sync::Arc, sync::atomic::AtomicUsize, time::Duration};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use tonic::transport::Channel;
use toolmesh_proto::pb::{
    self, registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};
use toolmesh_registry::Config;
use toolmesh_sidecar::{
    Tool,
    sdk::{self, ToolError},
    server::ServeOptions,
};

/// A registry serving on loopback.
pub struct TestRegistry {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl TestRegistry {
    pub async fn start(config: Config) -> Self {
        Self::start_at("127.0.0.1:0".parse().unwrap(), config).await
    }

    pub async fn start_at(addr: SocketAddr, config: Config) -> Self {
        let listener = bind_retrying(addr).await;
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            toolmesh_registry::run(listener, config, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn client(&self) -> ToolRegistryClient<Channel> {
        ToolRegistryClient::connect(self.url()).await.unwrap()
    }

    pub async fn registration(&self) -> RegistrationClient<Channel> {
        RegistrationClient::connect(self.url()).await.unwrap()
    }

    /// Graceful stop, waiting for the server to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), &mut self.task).await;
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A sidecar serving on loopback.
pub struct TestSidecar {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl TestSidecar {
    pub async fn start(registry: &str, instance_id: &str, tools: Vec<Tool>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let options = ServeOptions {
            registry: registry.to_owned(),
            advertise: None,
            instance_id: Some(instance_id.to_owned()),
        };
        let task = tokio::spawn(async move {
            toolmesh_sidecar::server::serve(listener, tools, options, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    /// Withdraws and stops.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), &mut self.task).await;
    }

    /// Stops without withdrawing, like a crash.
    pub fn kill(self) {
        self.task.abort();
    }
}

impl Drop for TestSidecar {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn bind_retrying(addr: SocketAddr) -> TcpListener {
    for _ in 0..50 {
        if let Ok(listener) = TcpListener::bind(addr).await {
            return listener;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot bind {addr}");
}

/// A registry config with a short lease, for tests that wait on expiry.
pub fn config_with_ttl(ttl: Duration) -> Config {
    Config {
        lease_ttl: ttl,
        shutdown_grace: Duration::from_secs(2),
        ..Config::default()
    }
}

/// Polls `check` every 20 ms until it is true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Names of the tools `ListTools` shows.
pub async fn tool_names(client: &mut ToolRegistryClient<Channel>) -> Vec<String> {
    client
        .list_tools(pb::ListToolsRequest::default())
        .await
        .map(|r| {
            r.into_inner()
                .tools
                .into_iter()
                .filter_map(|t| t.descriptor.map(|d| d.name))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `ListTools` shows `tool` with `instances` live instances.
pub async fn wait_for_instances(registry: &TestRegistry, tool: &str, instances: u32) {
    let mut client = registry.client().await;
    eventually(
        Duration::from_secs(20),
        &format!("{tool} with {instances} instances"),
        || {
            let mut client = client.clone();
            let tool = tool.to_owned();
            async move {
                client
                    .get_tool(pb::GetToolRequest { name: tool })
                    .await
                    .is_ok_and(|t| t.into_inner().instances == instances)
            }
        },
    )
    .await;
    let _ = &mut client;
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArgs {
    /// First addend.
    pub a: i64,
    /// Second addend.
    pub b: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct AddResult {
    pub sum: i64,
    pub calls: usize,
}

/// `add`, counting its executions in `calls`.
pub fn add_tool(calls: Arc<AtomicUsize>) -> Tool {
    sdk::tool("add", "Add two integers", move |args: AddArgs| {
        let calls = calls.clone();
        async move {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if args.a == 13 {
                return Err(ToolError::new("13 is unlucky"));
            }
            Ok(AddResult {
                sum: args.a + args.b,
                calls: n,
            })
        }
    })
    .idempotent(true)
    .build()
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SleepArgs {
    pub millis: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Slept {
    pub slept: u64,
}

/// `sleep`, sleeping as long as asked, limited to `timeout`.
pub fn sleep_tool(timeout: Duration) -> Tool {
    sdk::tool("sleep", "Sleep a while", |args: SleepArgs| async move {
        tokio::time::sleep(Duration::from_millis(args.millis)).await;
        Ok(Slept { slept: args.millis })
    })
    .timeout(timeout)
    .build()
}
