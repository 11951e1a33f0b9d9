//! Shared helpers: a fake registry (a real tonic server on loopback), a
//! sidecar started with `serve()`, and polling.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::TcpListenerStream;
use toolmesh_proto::pb;
use toolmesh_proto::pb::registration_server::{Registration, RegistrationServer};
use toolmesh_sidecar::server::{ServeOptions, serve};
use toolmesh_sidecar::{SidecarError, Tool};

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
}

/// Records every call; heartbeats for unknown leases answer NOT_FOUND.
#[derive(Debug, Clone)]
pub struct FakeRegistry {
    state: Arc<Mutex<State>>,
    ttl: Duration,
}

impl FakeRegistry {
    pub fn new(ttl: Duration) -> Self {
        Self {
            state: Arc::default(),
            ttl,
        }
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

    /// Forgets every lease, like a restarted registry.
    pub fn forget_leases(&self) {
        self.state.lock().unwrap().live.clear();
    }

    /// Serves on `listener` until the returned sender fires (or is dropped).
    pub fn start(&self, listener: TcpListener) -> (oneshot::Sender<()>, JoinHandle<()>) {
        let (tx, rx) = oneshot::channel::<()>();
        let service = RegistrationServer::new(self.clone());
        let handle = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        (tx, handle)
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
        let mut state = self.state.lock().unwrap();
        state.next += 1;
        let lease = format!("lease-{}", state.next);
        state.live.push(lease.clone());
        state.calls.push(Call::Announce {
            at: Instant::now(),
            request: request.into_inner(),
            lease: lease.clone(),
        });
        Ok(tonic::Response::new(pb::AnnounceResponse {
            lease_id: lease,
            ttl: ttl(self.ttl),
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
}

/// A fake registry on 127.0.0.1:0; returns it, its URL and its stopper.
pub async fn registry(ttl: Duration) -> (FakeRegistry, String, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let registry = FakeRegistry::new(ttl);
    let (stop, _handle) = registry.start(listener);
    (registry, url, stop)
}

/// A running sidecar.
pub struct Sidecar {
    pub addr: SocketAddr,
    pub stop: oneshot::Sender<()>,
    pub handle: JoinHandle<Result<(), SidecarError>>,
}

impl Sidecar {
    /// Asks for a graceful shutdown and waits for `serve` to return.
    pub async fn shutdown(self) -> Result<(), SidecarError> {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.handle)
            .await
            .expect("serve did not return after shutdown")
            .expect("serve panicked")
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Runs `serve()` for `tools` on 127.0.0.1:0 announcing to `registry`.
pub async fn sidecar(tools: Vec<Tool>, registry: &str) -> Sidecar {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, rx) = oneshot::channel::<()>();
    let opts = ServeOptions {
        registry: registry.to_owned(),
        advertise: None,
        instance_id: Some("test-instance".into()),
    };
    let handle = tokio::spawn(serve(listener, tools, opts, async {
        let _ = rx.await;
    }));
    Sidecar { addr, stop, handle }
}

/// Polls `condition` every 20 ms until it holds; panics after `within`.
pub async fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether process `pid` is gone (or a zombie: dead, not yet reaped by its
/// parent, which may be a container's init).
pub fn process_is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// A `ToolRuntime` client for the sidecar at `url`.
pub async fn runtime_client(
    url: String,
) -> pb::tool_runtime_client::ToolRuntimeClient<tonic::transport::Channel> {
    pb::tool_runtime_client::ToolRuntimeClient::connect(url)
        .await
        .unwrap()
}
