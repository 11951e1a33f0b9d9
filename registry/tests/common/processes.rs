//! A counting HTTP backend for the fault tests' sidecar processes, and the
//! YAML that serves it.

pub use toolmesh_test_support::process::{SidecarProcess, binary};

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, extract::State, routing::post};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Work {
    id: String,
    #[serde(default)]
    sleep_ms: u64,
}

/// An HTTP backend counting executions per request id.
#[derive(Clone, Default)]
pub struct Counter {
    total: Arc<AtomicUsize>,
    by_id: Arc<Mutex<HashMap<String, usize>>>,
}

impl Counter {
    /// Serves `POST /work` on a loopback port; returns its URL.
    pub async fn serve(&self) -> String {
        let app = Router::new()
            .route("/work", post(work))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}/work")
    }

    /// Executions so far.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// The most executions any one request id had.
    pub fn max_per_id(&self) -> usize {
        self.by_id
            .lock()
            .expect("lock")
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Executions of one request id.
    pub fn of(&self, id: &str) -> usize {
        self.by_id
            .lock()
            .expect("lock")
            .get(id)
            .copied()
            .unwrap_or(0)
    }
}

async fn work(State(counter): State<Counter>, Json(work): Json<Work>) -> Json<serde_json::Value> {
    counter.total.fetch_add(1, Ordering::SeqCst);
    let n = {
        let mut by_id = counter.by_id.lock().expect("lock");
        let n = by_id.entry(work.id.clone()).or_default();
        *n += 1;
        *n
    };
    tokio::time::sleep(Duration::from_millis(work.sleep_ms)).await;
    Json(serde_json::json!({"id": work.id, "n": n}))
}

/// A sidecar config with one HTTP tool `name` calling `url`.
pub fn work_tool_yaml(name: &str, url: &str, idempotent: bool, timeout: &str) -> String {
    format!(
        r#"tools:
  - name: {name}
    description: Does some work and counts it
    input_schema:
      type: object
      properties: {{id: {{type: string}}, sleep_ms: {{type: integer, minimum: 0}}}}
      required: [id]
    idempotent: {idempotent}
    timeout: {timeout}
    backend:
      http: {{url: "{url}"}}
"#
    )
}
