//! Who calls the MCP endpoint: the same credentials as gRPC, in the same
//! header (`Authorization: Bearer <API key or JWT>`), checked on every
//! HTTP request before anything MCP is read. A request without a
//! credential the registry accepts is answered HTTP 401 with a
//! `WWW-Authenticate` challenge (RFC 6750) and a JSON-RPC error body (code
//! [`UNAUTHENTICATED`], `id` null: the body is not read), and never
//! reaches a session. The caller found travels in the request's
//! extensions.
//!
//! Every 401 is logged, counted and audited as a refused `Invoke` is
//! ([`Invoker::refused`]: the same `invoke` record, outcome
//! `unauthenticated`, caller empty, with the peer address), so that
//! credentials sprayed at `/mcp` leave the trace they leave over gRPC. The
//! tool is the `Mcp-Name` header of a `tools/call` (2026-07-28 clients send
//! it), else empty; the credential is never written.

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{ConnectInfo, Request, State},
    middleware::Next,
    response::Response,
};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use tonic::metadata::MetadataMap;
use toolmesh_proto::pb::InvokeRequest;

use crate::serving::http_listener::PeerAddr;
use crate::{access::Access, access::auth::Caller, calls::invoke::Invoker, error::RegistryError};

/// The JSON-RPC error code of a 401's body (implementation-defined range).
pub(crate) const UNAUTHENTICATED: i32 = -32001;

/// The realm of the challenge.
const REALM: &str = "toolmesh";

/// Most bytes of the reason in `error_description`.
const DESCRIPTION_MAX: usize = 200;

/// The caller `headers` prove under `access`.
pub(crate) fn caller(access: &Access, headers: &HeaderMap) -> Result<Caller, RegistryError> {
    let mut metadata = HeaderMap::new();
    for value in headers.get_all(header::AUTHORIZATION) {
        metadata.append(header::AUTHORIZATION, value.clone());
    }
    access.caller(&MetadataMap::from_headers(metadata))
}

/// The `Mcp-Method` header, and `Mcp-Name`, that name a call's method and
/// tool (2026-07-28).
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";

/// What the authentication layer needs: who may call, and where refusals
/// are logged and audited.
#[derive(Clone)]
pub(crate) struct Gate {
    /// The credentials accepted.
    pub access: Arc<Access>,
    /// Logs, counts and audits each refusal as a refused `Invoke`.
    pub invoker: Arc<Invoker>,
}

/// Axum middleware: puts the caller in the request's extensions, or
/// answers 401 and audits the refusal.
pub(crate) async fn authenticate(
    State(gate): State<Gate>,
    mut request: Request,
    next: Next,
) -> Response {
    match caller(&gate.access, request.headers()) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(error) => {
            let headers = request.headers();
            let presented = headers.contains_key(header::AUTHORIZATION);
            let peer = request
                .extensions()
                .get::<ConnectInfo<PeerAddr>>()
                .and_then(|info| info.0.0);
            tracing::debug!(%error, ?peer, "MCP request refused");
            let refused = InvokeRequest {
                tool: named_tool(headers).to_owned(),
                ..InvokeRequest::default()
            };
            gate.invoker.refused(&refused, "", peer, &error);
            unauthorized(&error, presented)
        }
    }
}

/// The tool a `tools/call` names in its headers; empty for any other
/// request, or a header that is not text.
fn named_tool(headers: &HeaderMap) -> &str {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    match text(METHOD_HEADER) {
        Some("tools/call") => text(NAME_HEADER).unwrap_or_default(),
        _ => "",
    }
}

/// HTTP 401 with the challenge: a bare one when no credential was
/// presented, `error="invalid_token"` and the reason otherwise.
pub(crate) fn unauthorized(error: &RegistryError, presented: bool) -> Response {
    let reason = match error {
        RegistryError::Unauthenticated { reason } => reason.as_str(),
        _ => "unauthenticated",
    };
    let challenge = if presented {
        format!(
            "Bearer realm=\"{REALM}\", error=\"invalid_token\", error_description=\"{}\"",
            quotable(reason)
        )
    } else {
        format!("Bearer realm=\"{REALM}\"")
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": UNAUTHENTICATED, "message": format!("unauthenticated: {reason}")},
    })
    .to_string();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        headers.insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// `text` as an RFC 6750 quoted-string may carry it: visible ASCII and
/// spaces, no `"` or `\`, bounded.
fn quotable(text: &str) -> String {
    text.chars()
        .take(DESCRIPTION_MAX)
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if c == ' ' || c.is_ascii_graphic() => c,
            _ => ' ',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn headers(authorization: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in authorization {
            headers.append(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers.insert(header::COOKIE, HeaderValue::from_static("ignored=1"));
        headers
    }

    fn access_with_key(key: &str, caller: &str) -> (Access, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys.yaml");
        std::fs::write(
            &file,
            format!(
                "keys:\n  - caller: {caller}\n    sha256: {}\n",
                crate::access::auth::api_keys::hash_key(key)
            ),
        )
        .unwrap();
        let config = crate::Config {
            api_keys_file: Some(file),
            ..crate::Config::default()
        };
        (crate::serving::server::access(&config).unwrap(), dir)
    }

    #[test]
    fn anonymous_when_agents_are_not_authenticated() {
        let access = Access::default();
        assert_eq!(caller(&access, &headers(&[])).unwrap().id, "");
        assert_eq!(
            caller(&access, &headers(&["Bearer whatever"])).unwrap().id,
            ""
        );
    }

    #[tokio::test]
    async fn the_bearer_header_names_the_caller() {
        let (access, _dir) = access_with_key("k-123", "billing-agent");
        assert_eq!(
            caller(&access, &headers(&["Bearer k-123"])).unwrap().id,
            "billing-agent"
        );
        assert_eq!(
            caller(&access, &headers(&["bearer   k-123"])).unwrap().id,
            "billing-agent"
        );
        for refused in [
            &[][..],
            &["Bearer wrong"][..],
            &["Basic azp4"][..],
            &["Bearer k-123", "Bearer k-123"][..],
        ] {
            let error = caller(&access, &headers(refused)).unwrap_err();
            assert!(
                matches!(error, RegistryError::Unauthenticated { .. }),
                "{refused:?}: {error}"
            );
        }
    }

    #[test]
    fn only_a_call_names_a_tool() {
        let mut call = headers(&[]);
        call.insert(METHOD_HEADER, HeaderValue::from_static("tools/call"));
        call.insert(NAME_HEADER, HeaderValue::from_static("add"));
        assert_eq!(named_tool(&call), "add");
        call.insert(METHOD_HEADER, HeaderValue::from_static("tools/list"));
        assert_eq!(named_tool(&call), "");
        call.insert(METHOD_HEADER, HeaderValue::from_static("tools/call"));
        call.insert(NAME_HEADER, HeaderValue::from_bytes(b"caf\xe9").unwrap());
        assert_eq!(named_tool(&call), "");
        assert_eq!(named_tool(&headers(&[])), "");
    }

    #[test]
    fn the_challenge_says_why_without_breaking_the_header() {
        let error = RegistryError::Unauthenticated {
            reason: "unknown API key \"x\"\n".into(),
        };
        let response = unauthorized(&error, true);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let challenge = response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap();
        assert_eq!(
            challenge,
            "Bearer realm=\"toolmesh\", error=\"invalid_token\", error_description=\"unknown API key 'x' \""
        );
        let response = unauthorized(&error, false);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"toolmesh\""
        );
    }
}
