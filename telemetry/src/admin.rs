//! The admin HTTP port: `GET /metrics` (OpenMetrics text, which Prometheus
//! scrapes), `GET /livez` (200 while the process answers) and `GET /readyz`
//! (200 when ready to take traffic, 503 with the reason otherwise). Kept
//! off the gRPC port, so scrapes and probes never compete with calls and
//! the port can be left out of what agents reach.

use std::{
    future::Future,
    sync::{Arc, Mutex},
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::registry::Registry;

/// The content type of the OpenMetrics text format.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether the process is ready to take traffic, and if not, why. Shared
/// by everything that decides it (start-up, Redis, draining) and what
/// reports it (`/readyz`, gRPC health).
#[derive(Debug, Clone)]
pub struct Readiness(Arc<Mutex<Option<String>>>);

impl Readiness {
    /// Not ready, for `reason`, until [`Readiness::ready`].
    pub fn not_ready(reason: impl Into<String>) -> Self {
        Self(Arc::new(Mutex::new(Some(reason.into()))))
    }

    /// Ready from the start.
    pub fn ready_now() -> Self {
        Self(Arc::new(Mutex::new(None)))
    }

    /// Marks it ready.
    pub fn ready(&self) {
        *self.lock() = None;
    }

    /// Marks it not ready, for `reason`.
    pub fn unready(&self, reason: impl Into<String>) {
        *self.lock() = Some(reason.into());
    }

    /// `None` when ready, else why not.
    pub fn reason(&self) -> Option<String> {
        self.lock().clone()
    }

    /// Whether it is ready.
    pub fn is_ready(&self) -> bool {
        self.lock().is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A panic while holding it cannot leave a torn `Option`.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Clone)]
struct Admin {
    metrics: Arc<Registry>,
    readiness: Readiness,
}

/// Serves the admin endpoints on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Registry>,
    readiness: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, readiness))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The admin endpoints, for embedding in another server.
pub fn router(metrics: Arc<Registry>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Admin { metrics, readiness })
}

async fn scrape(State(admin): State<Admin>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &admin.metrics) {
        Ok(()) => (
            StatusCode::OK,
            [(http::header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "metrics could not be encoded\n".to_owned(),
        ),
    }
}

async fn ready(State(admin): State<Admin>) -> impl IntoResponse {
    match admin.readiness.reason() {
        None => (StatusCode::OK, "ready\n".to_owned()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}
