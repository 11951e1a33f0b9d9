//! The example HTTP service: a tiny stock inventory.
//!
//! `POST /lookup` with `{"key": "widget"}` answers `{"key": "widget",
//! "quantity": 42}`; an unknown key answers 404 with a JSON error body that
//! lists the known keys, so an LLM shown the error can re-plan. The service
//! knows nothing about toolmesh: the sidecar's `http` backend makes it a
//! tool.

use std::future::Future;

use axum::{Json, Router, http::StatusCode, routing::post};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

/// The stock: product key and quantity.
pub const STOCK: [(&str, u64); 3] = [("widget", 42), ("gadget", 7), ("sprocket", 0)];

/// Body of `POST /lookup`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct LookupRequest {
    /// The product key.
    pub key: String,
}

/// Answer of `POST /lookup` for a known key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct Item {
    /// The product key.
    pub key: String,
    /// Units in stock.
    pub quantity: u64,
}

/// Body of the 404 answer for an unknown key.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct NotFound {
    /// What went wrong.
    pub error: String,
    /// The keys that exist.
    pub known_keys: Vec<String>,
}

/// Looks `key` up in [`STOCK`].
pub fn lookup(key: &str) -> Option<Item> {
    STOCK
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(k, quantity)| Item {
            key: (*k).to_owned(),
            quantity: *quantity,
        })
}

async fn lookup_handler(
    Json(request): Json<LookupRequest>,
) -> Result<Json<Item>, (StatusCode, Json<NotFound>)> {
    lookup(&request.key).map(Json).ok_or_else(|| {
        let body = NotFound {
            error: format!("no product with key {:?}", request.key),
            known_keys: STOCK.iter().map(|(k, _)| (*k).to_owned()).collect(),
        };
        (StatusCode::NOT_FOUND, Json(body))
    })
}

/// The service's routes.
pub fn router() -> Router {
    Router::new().route("/lookup", post(lookup_handler))
}

/// Serves [`router`] on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router())
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    async fn start() -> (String, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/lookup", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, async {
            let _ = stopped.await;
        }));
        (url, stop)
    }

    async fn post(url: &str, body: &str) -> (u16, serde_json::Value) {
        let response = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (
            status,
            serde_json::from_str(&response.text().await.unwrap()).unwrap(),
        )
    }

    #[tokio::test]
    async fn known_key_answers_its_quantity() {
        let (url, _stop) = start().await;
        let (status, body) = post(&url, r#"{"key": "widget"}"#).await;
        assert_eq!(status, 200);
        assert_eq!(body, serde_json::json!({"key": "widget", "quantity": 42}));
    }

    #[tokio::test]
    async fn unknown_key_answers_404_with_a_json_error() {
        let (url, _stop) = start().await;
        let (status, body) = post(&url, r#"{"key": "gizmo"}"#).await;
        assert_eq!(status, 404);
        assert_eq!(body["error"], "no product with key \"gizmo\"");
        assert_eq!(body["known_keys"][0], "widget");
    }
}
