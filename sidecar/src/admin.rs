//! The sidecar's admin port: `/metrics`, `/livez` and `/readyz`
//! ([`toolmesh_telemetry::admin`]), served in a task of its own until the
//! sidecar has drained.

use std::net::SocketAddr;
use std::time::Duration;

use toolmesh_telemetry::admin::Readiness;

use crate::metrics::Metrics;

/// The admin HTTP server, running in its own task; dropped, it stops at
/// once.
pub struct Admin {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Admin {
    /// Binds `addr` and serves `metrics` and `readiness` there until
    /// stopped.
    pub async fn start(
        addr: SocketAddr,
        metrics: Metrics,
        readiness: Readiness,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        tracing::info!(address = %listener.local_addr()?, "admin listening");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(error) =
                toolmesh_telemetry::admin::serve(listener, metrics.registry(), readiness, shutdown)
                    .await
            {
                tracing::error!(%error, "the admin port stopped");
            }
        });
        Ok(Admin {
            stop: Some(stop),
            task,
        })
    }

    /// Stops serving, once the sidecar has drained; a scrape still open
    /// after a second is cut.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(Duration::from_secs(1), &mut self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the admin port did not stop cleanly"),
            Err(_) => self.task.abort(),
        }
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.task.abort();
    }
}
