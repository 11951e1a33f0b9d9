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
//!
//! The admin port's `/readyz` ([`toolmesh_telemetry::admin::Readiness`])
//! follows the same status, and turns unready a little earlier on the way
//! out: as the withdraw starts, not once it is answered (nothing waits on
//! it to learn that the registry stopped routing here).

use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::server::{HealthReporter, health_reporter};
use toolmesh_proto::pb::tool_runtime_server::SERVICE_NAME as TOOL_RUNTIME;
use toolmesh_telemetry::admin::Readiness as AdminReadiness;

/// Why the sidecar is not ready before its first announce succeeded.
const NOT_ANNOUNCED: &str = "not announced to the registry yet";

/// The service names the sidecar reports on, all with the same status:
/// `""` (the whole server, what probes ask by default) and
/// `toolmesh.v1.ToolRuntime`.
pub const SERVICE_NAMES: [&str; 2] = ["", TOOL_RUNTIME];

/// Sets the status of every name in [`SERVICE_NAMES`] at once, and the
/// admin port's readiness.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    reporter: HealthReporter,
    admin: AdminReadiness,
}

impl Readiness {
    /// A reporter saying `NOT_SERVING` (and `admin` not ready), and the
    /// service serving it.
    pub(crate) async fn new(admin: Option<AdminReadiness>) -> (Self, HealthServer<impl Health>) {
        let (reporter, service) = health_reporter();
        let admin = admin.unwrap_or_else(|| AdminReadiness::not_ready(NOT_ANNOUNCED));
        admin.unready(NOT_ANNOUNCED);
        let readiness = Self { reporter, admin };
        // tonic-health starts `""` as SERVING.
        readiness.set(ServingStatus::NotServing).await;
        (readiness, service)
    }

    /// The registry knows this sidecar.
    pub(crate) async fn serving(&self) {
        self.set(ServingStatus::Serving).await;
        self.admin.ready();
    }

    /// The sidecar is leaving the registry: the admin port says so at once.
    pub(crate) fn withdrawing(&self) {
        self.admin.unready("withdrawing from the registry");
    }

    /// The registry no longer knows this sidecar.
    pub(crate) async fn not_serving(&self) {
        self.admin.unready("withdrawn from the registry");
        self.set(ServingStatus::NotServing).await;
    }

    /// Ends the open `Watch` streams (each sees the last status first);
    /// the status stays `NOT_SERVING`. Called as the drain starts.
    pub(crate) async fn end_watches(&mut self) {
        self.admin
            .unready("draining: finishing the calls in flight");
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
