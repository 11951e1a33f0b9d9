//! Whether the registry should be sent traffic, told the same way to
//! everything that asks: gRPC health (the server, `""`, and both toolmesh
//! services), the admin port's `/readyz`, and the `toolmesh_ready` gauge.
//!
//! Readiness gates start-up and drain, nothing else. The registry is not
//! ready until its catalog is loaded (at once in embedded mode; in Redis
//! mode once Redis answered a full resync), and not ready again from
//! SIGTERM on, so load balancers stop sending before the listener closes.
//!
//! A Redis outage later does not make it unready: every replica shares
//! that Redis, so readiness tied to it would take the whole fleet out of
//! every load balancer at once, turning a partial outage (reads and
//! `Invoke` keep working from each replica's view) into a total one, and
//! flapping with every blip. What calls get while Redis is away is the
//! `--redis-outage` policy's decision, and the Redis pool's `WARN` lines
//! ([`crate::redis_pool::outage`]), `toolmesh_redis_circuit_open` and
//! `toolmesh_redis_errors_total` say that it is away (the practice of
//! Envoy and Linkerd: readiness reflects this process, not its
//! dependencies).

use std::sync::Arc;

use tokio::sync::Mutex;
use tonic_health::{ServingStatus, server::HealthReporter};
use toolmesh_proto::pb::{
    registration_server::SERVICE_NAME as REGISTRATION,
    tool_registry_server::SERVICE_NAME as TOOL_REGISTRY,
};
use toolmesh_telemetry::admin::Readiness;

use crate::metrics::Metrics;

/// The services whose health follows readiness; `""` is the whole server.
const SERVICES: [&str; 3] = ["", TOOL_REGISTRY, REGISTRATION];

/// Reports readiness changes to gRPC health, `/readyz` and the gauge.
pub(crate) struct Reporter {
    health: HealthReporter,
    readiness: Readiness,
    metrics: Arc<Metrics>,
    draining: Mutex<bool>,
}

impl Reporter {
    /// A reporter that first reports NOT_SERVING everywhere, for `reason`.
    pub(crate) async fn new(
        health: HealthReporter,
        readiness: Readiness,
        metrics: Arc<Metrics>,
        reason: &str,
    ) -> Self {
        let reporter = Self {
            health,
            readiness,
            metrics,
            draining: Mutex::new(false),
        };
        reporter.set(Some(reason)).await;
        reporter
    }

    /// Ready: SERVING everywhere, unless draining has begun.
    pub(crate) async fn ready(&self) {
        let draining = self.draining.lock().await;
        if !*draining {
            self.set(None).await;
        }
    }

    /// Draining: NOT_SERVING everywhere from now on.
    pub(crate) async fn drain(&self) {
        let mut draining = self.draining.lock().await;
        *draining = true;
        self.set(Some("draining: shutting down")).await;
    }

    async fn set(&self, unready: Option<&str>) {
        let status = match unready {
            None => ServingStatus::Serving,
            Some(_) => ServingStatus::NotServing,
        };
        for service in SERVICES {
            self.health.set_service_status(service, status).await;
        }
        match unready {
            None => self.readiness.ready(),
            Some(reason) => self.readiness.unready(reason),
        }
        self.metrics.ready(unready.is_none());
    }
}
