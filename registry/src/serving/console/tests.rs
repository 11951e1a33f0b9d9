//! The console's routes, driven in process over the registry's own parts:
//! who may see what, sign-in and sign-out, CSRF, escaping, headers.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use toolmesh_proto::pb;
use tower::ServiceExt as _;

use super::*;
use crate::catalog::store::memory::{Limits, MemoryStore};

const KEY: &str = "k-console-123";
const OTHER_KEY: &str = "k-console-456";

struct Fixture {
    router: Router,
    _dir: tempfile::TempDir,
}

/// A console over a catalog of `tools`, agents holding [`KEY`] (ops,
/// who sees everything) and [`OTHER_KEY`] (billing, who sees `billing.*`).
async fn fixture(tools: &[(&str, &str)]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.yaml");
    std::fs::write(
        &keys,
        format!(
            "keys:\n  - caller: ops\n    sha256: {}\n  - caller: billing\n    sha256: {}\n",
            crate::access::auth::api_keys::hash_key(KEY),
            crate::access::auth::api_keys::hash_key(OTHER_KEY),
        ),
    )
    .unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "rules:\n  - callers: [ops]\n    tools: [\"*\"]\n  - callers: [billing]\n    tools: [\"billing.*\"]\n",
    )
    .unwrap();
    let config = crate::Config {
        api_keys_file: Some(keys),
        policy_file: Some(policy),
        ..crate::Config::default()
    };
    let access = Arc::new(crate::serving::server::access(&config).unwrap());
    let catalog = Arc::new(Catalog::new(MemoryStore::new(
        Duration::from_secs(30),
        Limits::default(),
    )));
    catalog
        .announce(pb::AnnounceRequest {
            instance_id: "sidecar-1".into(),
            endpoint: "http://127.0.0.1:9".into(),
            tools: tools
                .iter()
                .map(|(name, description)| pb::ToolDescriptor {
                    name: (*name).into(),
                    description: (*description).into(),
                    input_schema_json: r#"{"type":"object","required":["amount"],"properties":{"amount":{"type":"number","description":"How much"}}}"#.into(),
                    ..Default::default()
                })
                .collect(),
            execute_key: Vec::new(),
        })
        .await
        .unwrap();
    let search = Arc::new(ToolSearch::default());
    search.replace_all(catalog.list().iter().map(|t| &*t.descriptor));
    let console = Console {
        catalog,
        access,
        search,
        sealer: Sealer::random(),
        session_ttl: Duration::from_secs(3600),
        tls: false,
    };
    Fixture {
        router: console.router(),
        _dir: dir,
    }
}

async fn send(router: &Router, request: Request<Body>) -> (StatusCode, http::HeaderMap, String) {
    let response = router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 22).await.unwrap();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn get(path: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::empty()).unwrap()
}

fn post(path: &str, cookie: &str, form: &str) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, cookie)
        .body(Body::from(form.to_owned()))
        .unwrap()
}

/// The `name=value` of each `Set-Cookie`.
fn cookies(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .collect()
}

/// Signs in with `key` through the form, as a browser would; the session
/// cookie.
async fn sign_in(router: &Router, key: &str) -> String {
    let (status, headers, page) = send(router, get("/login", &[])).await;
    assert_eq!(status, StatusCode::OK);
    let login_cookie = cookies(&headers).remove(0);
    let token = login_cookie.split_once('=').unwrap().1.to_owned();
    assert!(page.contains(&token), "the form carries the token");
    let (status, headers, _) = send(
        router,
        post(
            "/login",
            &login_cookie,
            &format!("csrf={token}&credential={key}"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let set = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .next()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    cookies(&headers)
        .into_iter()
        .find(|c| c.starts_with(session::COOKIE) && !c.ends_with('='))
        .unwrap()
}

#[tokio::test]
async fn without_a_credential_a_page_sends_to_sign_in_and_a_post_is_refused() {
    let f = fixture(&[("billing.refund", "Refund a payment")]).await;
    let (status, headers, _) = send(&f.router, get("/tools", &[])).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], "/login");
    let (status, _, _) = send(&f.router, post("/logout", "", "csrf=x")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = send(
        &f.router,
        get("/tools", &[("authorization", "Bearer wrong")]),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn a_viewer_sees_only_the_tools_its_policy_shows() {
    let f = fixture(&[
        ("billing.refund", "Refund a payment"),
        ("ops.restart", "Restart a service"),
    ])
    .await;
    let bearer = format!("Bearer {OTHER_KEY}");
    let (status, _, page) = send(&f.router, get("/tools", &[("authorization", &bearer)])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("billing.refund") && !page.contains("ops.restart"),
        "{page}"
    );
    // A tool it may not see reads as one that does not exist.
    let (hidden, _, hidden_page) = send(
        &f.router,
        get("/tools/ops.restart", &[("authorization", &bearer)]),
    )
    .await;
    let (missing, _, missing_page) =
        send(&f.router, get("/tools/nope", &[("authorization", &bearer)])).await;
    assert_eq!(
        (hidden, missing),
        (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND)
    );
    assert_eq!(
        hidden_page.replace("ops.restart", "X"),
        missing_page.replace("nope", "X")
    );
    let (_, _, instances) = send(&f.router, get("/instances", &[("authorization", &bearer)])).await;
    assert!(instances.contains("sidecar-1") && !instances.contains("ops.restart"));
    // Search ranks within the scope too.
    let (_, _, found) = send(
        &f.router,
        get("/tools?q=restart+a+service", &[("authorization", &bearer)]),
    )
    .await;
    assert!(!found.contains("ops.restart"), "{found}");
}

#[tokio::test]
async fn a_tool_page_draws_its_schema_and_escapes_what_the_tool_says() {
    let f = fixture(&[("billing.refund", "<script>alert('x')</script> Refund")]).await;
    let bearer = format!("Bearer {KEY}");
    let (status, headers, page) = send(
        &f.router,
        get("/tools/billing.refund", &[("authorization", &bearer)]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(page.contains("&lt;script&gt;"));
    assert!(page.contains("<code>amount</code>") && page.contains("How much"));
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
}

#[tokio::test]
async fn sign_in_then_out_with_the_session_token() {
    let f = fixture(&[("billing.refund", "Refund a payment")]).await;
    let session = sign_in(&f.router, KEY).await;
    let (status, _, page) = send(&f.router, get("/tools", &[("cookie", &session)])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("ops") && page.contains("Sign out"));
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    // A forged or missing token is refused; the session stays.
    for forged in ["csrf=forged", ""] {
        let (status, _, _) = send(&f.router, post("/logout", &session, forged)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{forged:?}");
    }
    let (status, headers, _) = send(
        &f.router,
        post("/logout", &session, &format!("csrf={csrf}")),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        cookies(&headers).contains(&format!("{}=", session::COOKIE)),
        "the cookie is cleared"
    );
}

#[tokio::test]
async fn sign_in_refuses_a_wrong_key_and_a_forged_form() {
    let f = fixture(&[("billing.refund", "Refund a payment")]).await;
    let (_, headers, _) = send(&f.router, get("/login", &[])).await;
    let login_cookie = cookies(&headers).remove(0);
    let token = login_cookie.split_once('=').unwrap().1.to_owned();
    let (status, _, page) = send(
        &f.router,
        post(
            "/login",
            &login_cookie,
            &format!("csrf={token}&credential=wrong"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(page.contains("not accepted"));
    let (status, _, _) = send(
        &f.router,
        post(
            "/login",
            &login_cookie,
            &format!("csrf=other&credential={KEY}"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A cookie sealed elsewhere, or altered, signs nobody in.
    let foreign = Sealer::random().seal(&Session::new(KEY.into(), Duration::from_secs(60)));
    let (status, _, _) = send(
        &f.router,
        get(
            "/tools",
            &[("cookie", &format!("{}={foreign}", session::COOKIE))],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
}
