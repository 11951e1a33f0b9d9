//! Shared helpers: the real registry in-process, a fake registry for the few
//! faults the real one cannot produce, and a `ToolRuntime` client. Polling,
//! ports, loopback servers and processes come from `toolmesh-test-support`.

#![allow(dead_code, unreachable_pub, unused_imports, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Code;
use tonic::transport::Channel;
use toolmesh_proto::pb;
use toolmesh_proto::pb::registration_server::{Registration, RegistrationServer};
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;

pub use toolmesh_test_support::{
    catalog,
    ports::reserved_port,
    process::{SidecarProcess, binary, is_dead, send},
    server::{LoopbackServer, listener_at, loopback_listener, sidecar, sidecar_on},
    wait::{eventually, stays, wait_until},
};

/// The real registry (the library's `run`) on loopback. The catalog
/// helpers it delegates to are test-support's; only starting the registry
/// is here, since test-support does not depend on the registry.
pub struct TestRegistry {
    /// Where it listens.
    pub addr: SocketAddr,
    server: LoopbackServer,
    channel: Channel,
}

impl TestRegistry {
    /// On 127.0.0.1 and a port the kernel chose, granting leases of `ttl`.
    pub async fn start(ttl: Duration) -> Self {
        Self::start_on(loopback_listener().await, ttl)
    }

    /// On `addr` (from [`reserved_port`], for a registry restarted on the
    /// same address).
    pub async fn start_at(addr: SocketAddr, ttl: Duration) -> Self {
        Self::start_on(listener_at(addr).await, ttl)
    }

    fn start_on(listener: TcpListener, ttl: Duration) -> Self {
        let config = toolmesh_registry::Config {
            lease_ttl: ttl,
            shutdown_grace: Duration::from_secs(2),
            ..toolmesh_registry::Config::default()
        };
        let server = toolmesh_test_support::server::registry(listener, config);
        let channel = tonic::transport::Endpoint::from_shared(server.url())
            .unwrap()
            .connect_lazy();
        Self {
            addr: server.addr,
            server,
            channel,
        }
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// A `ToolRegistry` client (one connection, shared).
    pub fn client(&self) -> ToolRegistryClient<Channel> {
        ToolRegistryClient::new(self.channel.clone())
    }

    /// A `Tasks` client (the same connection).
    pub fn tasks(&self) -> pb::tasks_client::TasksClient<Channel> {
        pb::tasks_client::TasksClient::new(self.channel.clone())
    }

    /// `GetTool(name)`, or `None` when the registry answers NOT_FOUND
    /// (any other error panics).
    pub async fn tool(&self, name: &str) -> Option<pb::Tool> {
        catalog::tool(&mut self.client(), name).await
    }

    /// Live instances of `name` (0 when it is not in the catalog).
    pub async fn instances(&self, name: &str) -> u32 {
        self.tool(name).await.map_or(0, |t| t.instances)
    }

    /// The descriptor of `name` the catalog holds.
    pub async fn descriptor(&self, name: &str) -> Option<pb::ToolDescriptor> {
        self.tool(name).await.and_then(|t| t.descriptor)
    }

    /// Waits up to `within` until `name` has exactly `count` live instances.
    pub async fn wait_for_instances(&self, name: &str, count: u32, within: Duration) {
        catalog::wait_for_instances(&self.client(), name, count, within).await;
    }

    /// `Invoke(tool, arguments)`, without an idempotency key.
    pub async fn invoke(
        &self,
        tool: &str,
        arguments: &str,
    ) -> Result<pb::InvokeResponse, tonic::Status> {
        self.client()
            .invoke(catalog::invoke(tool, arguments))
            .await
            .map(tonic::Response::into_inner)
    }

    /// Graceful stop; panics if the registry fails or hangs.
    pub async fn stop(self) {
        self.server.stop().await;
    }
}

/// One call the fake registry received.
#[derive(Debug, Clone)]
pub enum Call {
    Announce {
        at: Instant,
        request: pb::AnnounceRequest,
        lease: String,
    },
    Heartbeat {
        at: Instant,
        lease: String,
        known: bool,
    },
    Withdraw {
        at: Instant,
        lease: String,
    },
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    live: Vec<String>,
    next: u32,
    /// Statuses the next announces fail with, in order.
    failures: std::collections::VecDeque<tonic::Status>,
    /// Announces answered with one of `failures`.
    failed: usize,
}

/// Records every call; heartbeats for unknown leases answer NOT_FOUND;
/// never expires a lease, and refuses an announce only as told
/// ([`FakeRegistry::fail_next_announces`]). Only for what the real registry
/// cannot show: each use says why.
#[derive(Debug, Clone)]
pub struct FakeRegistry {
    state: Arc<Mutex<State>>,
    ttl: Duration,
    /// Held by a test to keep announces unanswered (their leases granted).
    answers: Arc<tokio::sync::Mutex<()>>,
}

impl FakeRegistry {
    pub fn new(ttl: Duration) -> Self {
        Self {
            state: Arc::default(),
            ttl,
            answers: Arc::default(),
        }
    }

    /// Until the guard is dropped, every announce is granted (its lease
    /// recorded and live) but not answered.
    pub async fn hold_answers(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.answers.clone().lock_owned().await
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn announces(&self) -> Vec<(Instant, pb::AnnounceRequest, String)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Announce { at, request, lease } => Some((at, request, lease)),
                _ => None,
            })
            .collect()
    }

    pub fn heartbeats(&self) -> Vec<(Instant, String, bool)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Heartbeat { at, lease, known } => Some((at, lease, known)),
                _ => None,
            })
            .collect()
    }

    pub fn withdrawals(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Withdraw { lease, .. } => Some(lease),
                _ => None,
            })
            .collect()
    }

    /// The next announces fail with `statuses`, one each, in order.
    pub fn fail_next_announces(&self, statuses: Vec<tonic::Status>) {
        self.state.lock().unwrap().failures.extend(statuses);
    }

    /// How many announces were answered with a failure.
    pub fn failed_announces(&self) -> usize {
        self.state.lock().unwrap().failed
    }

    /// Forgets every lease, like a restarted registry.
    pub fn forget_leases(&self) {
        self.state.lock().unwrap().live.clear();
    }

    /// Serves on `listener` until stopped.
    pub fn start(&self, listener: TcpListener) -> LoopbackServer {
        let service = RegistrationServer::new(self.clone());
        LoopbackServer::spawn(listener, move |listener, shutdown| {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        })
    }
}

fn ttl(d: Duration) -> Option<prost_types::Duration> {
    Some(prost_types::Duration::try_from(d).unwrap())
}

#[tonic::async_trait]
impl Registration for FakeRegistry {
    async fn announce(
        &self,
        request: tonic::Request<pb::AnnounceRequest>,
    ) -> Result<tonic::Response<pb::AnnounceResponse>, tonic::Status> {
        let lease = {
            let mut state = self.state.lock().unwrap();
            if let Some(status) = state.failures.pop_front() {
                state.failed += 1;
                return Err(status);
            }
            state.next += 1;
            let lease = format!("lease-{}", state.next);
            state.live.push(lease.clone());
            state.calls.push(Call::Announce {
                at: Instant::now(),
                request: request.into_inner(),
                lease: lease.clone(),
            });
            lease
        };
        drop(self.answers.lock().await);
        Ok(tonic::Response::new(pb::AnnounceResponse {
            lease_id: lease,
            ttl: ttl(self.ttl),
            held: Vec::new(),
        }))
    }

    async fn heartbeat(
        &self,
        request: tonic::Request<pb::HeartbeatRequest>,
    ) -> Result<tonic::Response<pb::HeartbeatResponse>, tonic::Status> {
        let mut state = self.state.lock().unwrap();
        let lease = request.into_inner().lease_id;
        let known = state.live.contains(&lease);
        state.calls.push(Call::Heartbeat {
            at: Instant::now(),
            lease,
            known,
        });
        if known {
            Ok(tonic::Response::new(pb::HeartbeatResponse {
                ttl: ttl(self.ttl),
            }))
        } else {
            Err(tonic::Status::not_found("unknown lease"))
        }
    }

    async fn withdraw(
        &self,
        request: tonic::Request<pb::WithdrawRequest>,
    ) -> Result<tonic::Response<pb::WithdrawResponse>, tonic::Status> {
        let mut state = self.state.lock().unwrap();
        let lease = request.into_inner().lease_id;
        state.live.retain(|l| *l != lease);
        state.calls.push(Call::Withdraw {
            at: Instant::now(),
            lease,
        });
        Ok(tonic::Response::new(pb::WithdrawResponse {}))
    }

    async fn report_task(
        &self,
        _request: tonic::Request<pb::ReportTaskRequest>,
    ) -> Result<tonic::Response<pb::ReportTaskResponse>, tonic::Status> {
        Err(tonic::Status::not_found(
            "this fake registry keeps no tasks",
        ))
    }
}

/// A fake registry on loopback granting leases of `ttl`; returns it and
/// its server (whose `url()` the sidecar dials).
pub async fn fake_registry(ttl: Duration) -> (FakeRegistry, LoopbackServer) {
    let registry = FakeRegistry::new(ttl);
    let server = registry.start(loopback_listener().await);
    (registry, server)
}

/// A `ToolRuntime` client for the library sidecar at `url`, announced as
/// `instance`, signing its calls as the registry does.
pub async fn runtime_client(url: String, instance: &str) -> toolmesh_test_support::grants::Runtime {
    toolmesh_test_support::grants::Runtime::connect(url, instance).await
}

/// Tools built from a YAML config whose directory is `dir`.
pub fn tools_from_yaml(yaml: &str, dir: &std::path::Path) -> Vec<toolmesh_sidecar::Tool> {
    toolmesh_sidecar::config::SidecarConfig::from_yaml_str(yaml)
        .unwrap()
        .build_tools(dir)
        .unwrap()
}

/// The sidecar's health on `addr`: a client for `grpc.health.v1.Health`.
pub async fn health_client(
    addr: SocketAddr,
) -> tonic_health::pb::health_client::HealthClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic_health::pb::health_client::HealthClient::new(channel)
}

/// `Health/Check(service)` of the sidecar on `addr`.
pub async fn health_check(addr: SocketAddr, service: &str) -> ServingStatus {
    health_client(addr)
        .await
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status()
}

/// A `Health/Watch(service)` stream of the sidecar on `addr`.
pub struct HealthWatch {
    stream: tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
}

pub use tonic_health::pb::health_check_response::ServingStatus;

impl HealthWatch {
    pub async fn start(addr: SocketAddr, service: &str) -> Self {
        let stream = health_client(addr)
            .await
            .watch(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        Self { stream }
    }

    /// The next status, within `within`; panics if none comes.
    pub async fn next(&mut self, within: Duration) -> ServingStatus {
        match tokio::time::timeout(within, self.stream.message()).await {
            Ok(Ok(Some(response))) => response.status(),
            Ok(Ok(None)) => panic!("the health stream ended"),
            Ok(Err(status)) => panic!("the health stream failed: {status:?}"),
            Err(_) => panic!("no health status within {within:?}"),
        }
    }

    /// Asserts that no status comes for `period`.
    pub async fn quiet_for(&mut self, period: Duration, why: &str) {
        if let Ok(message) = tokio::time::timeout(period, self.stream.message()).await {
            panic!("{why}, but the health stream said {message:?}");
        }
    }

    /// Asserts that the stream ends (without an error) within `within`.
    pub async fn ends(&mut self, within: Duration) {
        match tokio::time::timeout(within, self.stream.message()).await {
            Ok(Ok(None)) => {}
            other => panic!("the health stream did not end within {within:?}: {other:?}"),
        }
    }
}

/// How long a test waits for what must happen.
const PATIENCE: Duration = Duration::from_secs(20);

/// The YAML of a tool `slow` (indented as an item of `tools:`): run in the
/// config's folder, it creates `started`, waits for a `release` file there,
/// then answers `{"done": true}`. [`SlowCall`] drives it.
pub const SLOW_TOOL: &str = r#"  - name: slow
    description: Waits for the release file
    timeout: 60s
    backend:
      command: [sh, -c, 'touch started; while [ ! -e release ]; do sleep 0.02; done; echo "{\"done\": true}"']
"#;

/// A call to [`SLOW_TOOL`] through a registry, running in the tool.
pub struct SlowCall {
    dir: std::path::PathBuf,
    call: tokio::task::JoinHandle<Result<tonic::Response<pb::InvokeResponse>, tonic::Status>>,
}

impl SlowCall {
    /// Invokes `slow` through `registry`, and waits until the tool runs in
    /// `dir` (the sidecar config's folder).
    pub async fn start(registry: &TestRegistry, dir: &std::path::Path) -> Self {
        let mut client = registry.client();
        let call = tokio::spawn(async move {
            client
                .invoke(toolmesh_test_support::catalog::invoke("slow", "{}"))
                .await
        });
        toolmesh_test_support::wait::wait_until(PATIENCE, "the call to start", || {
            dir.join("started").exists()
        })
        .await;
        Self {
            dir: dir.to_owned(),
            call,
        }
    }

    /// Whether the call has ended.
    pub fn is_finished(&self) -> bool {
        self.call.is_finished()
    }

    /// Lets the tool answer; asserts that the call succeeds with its answer.
    pub async fn release(self) -> pb::InvokeResponse {
        std::fs::write(self.dir.join("release"), "").expect("write the release file");
        let response = tokio::time::timeout(PATIENCE, self.call)
            .await
            .expect("the call completes")
            .expect("the call's task")
            .expect("the call succeeds")
            .into_inner();
        assert_eq!(
            (response.result_json.as_str(), response.is_error),
            (r#"{"done": true}"#, false)
        );
        response
    }
}

/// Watches the task `id` on `tasks` until it is as `wanted` says, within
/// `within`; returns it then, and panics naming `what` otherwise.
pub async fn watch_until(
    mut tasks: pb::tasks_client::TasksClient<Channel>,
    id: &str,
    what: &str,
    within: Duration,
    wanted: impl Fn(&pb::Task) -> bool,
) -> pb::Task {
    let mut stream = tasks
        .watch_task(pb::WatchTaskRequest { id: id.into() })
        .await
        .expect("watch")
        .into_inner();
    let mut last = None;
    let found = tokio::time::timeout(within, async {
        while let Some(task) = stream.message().await.expect("the stream goes on") {
            if wanted(&task) {
                return Some(task);
            }
            last = Some(task);
        }
        None
    })
    .await;
    match found {
        Ok(Some(task)) => task,
        Ok(None) => panic!("the task ended before {what}: {last:?}"),
        Err(_) => panic!("not within {within:?}: {what}; the task was {last:?}"),
    }
}
