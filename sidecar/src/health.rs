//! The sidecar's `grpc.health.v1.Health`, served on its `ToolRuntime`
//! port for the service names in [`SERVICE_NAMES`]: whether the registry
//! knows this sidecar, so that a Kubernetes readiness probe keeps its pod
//! out of rotation while it does not.
//!
//! - `NOT_SERVING` from the start until the first announce succeeded;
//! - `SERVING` from then on, **also while a lost lease is announced again**
//!   (registry restarted, lease expired during a network partition): losing
//!   the lease is the registry's event, felt by every sidecar at once, and
//!   the registry routes by lease, not by this status. Turning every tool
//!   pod NotReady together for a blip that heals within a heartbeat
//!   interval would only empty the tools' own Services, count every pod as
//!   disrupted in its PodDisruptionBudget, and make readiness flap;
//! - `NOT_SERVING` again once it has withdrawn (its `Withdraw` answered,
//!   or given up on after a couple of seconds): on shutdown, or on a
//!   withdraw request (SIGUSR1, `toolmesh-sidecar withdraw`). It turns
//!   after the withdraw rather than before, so that a watcher seeing it
//!   (the `withdraw` command) knows the registry no longer routes here.
//!
//! When the drain starts, open `Watch` streams are ended (after they saw
//! `NOT_SERVING`): a watcher would otherwise hold the drain open until its
//! grace period is over. The drain accepts no new connections or calls,
//! so probes then fail to connect, which fails them as `NOT_SERVING` does.

use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::server::{HealthReporter, health_reporter};
use toolmesh_proto::pb::tool_runtime_server::SERVICE_NAME as TOOL_RUNTIME;

/// The service names the sidecar reports on, all with the same status:
/// `""` (the whole server, what probes ask by default) and
/// `toolmesh.v1.ToolRuntime`.
pub const SERVICE_NAMES: [&str; 2] = ["", TOOL_RUNTIME];

/// Sets the status of every name in [`SERVICE_NAMES`] at once.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    reporter: HealthReporter,
}

impl Readiness {
    /// A reporter saying `NOT_SERVING`, and the service serving it.
    pub(crate) async fn new() -> (Self, HealthServer<impl Health>) {
        let (reporter, service) = health_reporter();
        let readiness = Self { reporter };
        // tonic-health starts `""` as SERVING.
        readiness.set(ServingStatus::NotServing).await;
        (readiness, service)
    }

    /// The registry knows this sidecar.
    pub(crate) async fn serving(&self) {
        self.set(ServingStatus::Serving).await;
    }

    /// The registry no longer knows this sidecar.
    pub(crate) async fn not_serving(&self) {
        self.set(ServingStatus::NotServing).await;
    }

    /// Ends the open `Watch` streams (each sees the last status first);
    /// the status stays `NOT_SERVING`.
    pub(crate) async fn end_watches(&mut self) {
        for name in SERVICE_NAMES {
            // Dropping a status's channel ends the streams watching it.
            self.reporter.clear_service_status(name).await;
            self.reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
    }

    async fn set(&self, status: ServingStatus) {
        for name in SERVICE_NAMES {
            self.reporter.set_service_status(name, status).await;
        }
    }
}
