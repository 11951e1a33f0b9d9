//! The console's routes, driven in process over the registry's own parts:
//! who may see what, sign-in and sign-out, CSRF, escaping, headers.
#![allow(clippy::unwrap_used)]

use axum::body::Body;
use http::{Method, Request, StatusCode, header};
use toolmesh_proto::pb;
use tower::ServiceExt as _;

use super::*;

const KEY: &str = "k-console-123";
const OTHER_KEY: &str = "k-console-456";

struct Fixture {
    router: Router,
    _registry: crate::serving::server::Registry,
    _dir: tempfile::TempDir,
}

/// A console over a catalog of `tools`, agents holding [`KEY`] (ops,
/// who sees everything) and [`OTHER_KEY`] (billing, who sees `billing.*`).
async fn fixture(tools: &[(&str, &str)]) -> Fixture {
    fixture_with(tools, POLICY).await
}

const POLICY: &str = "rules:\n  - callers: [ops]\n    tools: [\"*\"]\n  - callers: [billing]\n    tools: [\"billing.*\"]\n";

/// [`fixture`] under the policy file `policy_yaml`.
async fn fixture_with(tools: &[(&str, &str)], policy_yaml: &str) -> Fixture {
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
    std::fs::write(&policy, policy_yaml).unwrap();
    let config = crate::Config {
        api_keys_file: Some(keys),
        policy_file: Some(policy),
        ..crate::Config::default()
    };
    let access = Arc::new(crate::serving::server::access(&config).unwrap());
    let registry = crate::serving::server::Registry::embedded(config)
        .with_access(access, crate::access::audit::AuditLog::disabled());
    registry
        .catalog()
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
    let console = registry.console(Sealer::random());
    console
        .search
        .replace_all(console.catalog.list().iter().map(|t| &*t.descriptor));
    Fixture {
        router: console.router(),
        _registry: registry,
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
    let csrf = form_token(&page);
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

/// The `csrf` value of the first form of `page`.
fn form_token(page: &str) -> String {
    page.split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned()
}

fn post_as(path: &str, bearer: &str, form: &str) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::AUTHORIZATION, bearer)
        .body(Body::from(form.to_owned()))
        .unwrap()
}

#[tokio::test]
async fn the_playground_shows_a_violation_at_its_field_and_the_call_in_the_tail() {
    let f = fixture(&[("billing.refund", "Refund a payment")]).await;
    let session = sign_in(&f.router, KEY).await;
    let (status, _, form) = send(
        &f.router,
        get("/tools/billing.refund/try", &[("cookie", &session)]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(form.contains(r#"name="arg:/amount""#), "{form}");
    let csrf = form_token(&form);
    // Without the form's token: refused, and nothing is called.
    let (status, _, _) = send(
        &f.router,
        post("/tools/billing.refund/try", &session, "arg%3A%2Famount=1"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, answer) = send(
        &f.router,
        post(
            "/tools/billing.refund/try",
            &session,
            &format!("csrf={csrf}&arg%3A%2Famount=lots"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        answer.contains(r#"data-outcome="invalid_argument""#),
        "{answer}"
    );
    let field = answer.split_once(r#"data-pointer="/amount""#).unwrap().1;
    let field = &field[..field.find("</div>").expect(answer.as_str())];
    assert!(
        field.contains("class=\"violation\""),
        "at its field: {field}"
    );
    assert!(
        answer.contains(r#"value="lots""#),
        "the form keeps the value"
    );
    let (_, _, calls) = send(&f.router, get("/calls", &[("cookie", &session)])).await;
    assert!(
        calls.contains("billing.refund") && calls.contains("invalid_argument"),
        "{calls}"
    );
}

#[tokio::test]
async fn console_roles_bound_what_a_viewer_may_do() {
    let policy = format!(
        "{POLICY}console:\n  - callers: [ops]\n    can: [view, invoke, approve]\n  - callers: [billing]\n    can: [view]\n"
    );
    let f = fixture_with(&[("billing.refund", "Refund a payment")], &policy).await;
    let viewer = format!("Bearer {OTHER_KEY}");
    let (status, _, page) = send(&f.router, get("/tools", &[("authorization", &viewer)])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("/approvals"), "no approvals link: {page}");
    let (status, _, _) = send(
        &f.router,
        post_as("/tools/billing.refund/try", &viewer, "arg%3A%2Famount=1"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "view only: no calls");
    let (status, _, _) = send(&f.router, get("/approvals", &[("authorization", &viewer)])).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let ops = format!("Bearer {KEY}");
    let (status, _, page) = send(&f.router, get("/approvals", &[("authorization", &ops)])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Nothing waits for you"), "{page}");
    // Named by no entry: no console at all.
    let nobody = "rules:\n  - callers: [\"*\"]\n    tools: [\"*\"]\nconsole:\n  - callers: [ops]\n    can: [view]\n";
    let f = fixture_with(&[("billing.refund", "Refund a payment")], nobody).await;
    let (status, _, _) = send(&f.router, get("/tools", &[("authorization", &viewer)])).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_post_from_another_origin_is_refused() {
    let f = fixture(&[("billing.refund", "Refund a payment")]).await;
    let mut request = post_as(
        "/tools/billing.refund/try",
        &format!("Bearer {KEY}"),
        "arg%3A%2Famount=1",
    );
    request
        .headers_mut()
        .insert(header::ORIGIN, "https://evil.example".parse().unwrap());
    request
        .headers_mut()
        .insert(header::HOST, "127.0.0.1:8090".parse().unwrap());
    let (status, _, _) = send(&f.router, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_tool_page_offers_the_playground_and_every_export() {
    let f = fixture(&[("refund_payment", "Refund a payment")]).await;
    let (_, _, page) = send(
        &f.router,
        get(
            "/tools/refund_payment",
            &[("authorization", &format!("Bearer {KEY}"))],
        ),
    )
    .await;
    assert!(page.contains(r#"id="try""#), "{page}");
    for id in [
        "openai-chat",
        "openai-responses",
        "anthropic",
        "gemini",
        "mcp",
    ] {
        assert!(
            page.contains(&format!("id=\"export-{id}\"")),
            "{id}: {page}"
        );
    }
    assert!(page.contains(r#"src="/assets/console.js""#));
    let (status, headers, script) = send(&f.router, get("/assets/console.js", &[])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(script.contains("clipboard"));
}

#[tokio::test]
async fn catalog_pages_walk_on_by_name_and_back() {
    let names: Vec<String> = (0..120).map(|i| format!("t{i:03}")).collect();
    let tools: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "A tool")).collect();
    let f = fixture(&tools).await;
    let bearer = format!("Bearer {KEY}");
    let page = |path: String| {
        let router = f.router.clone();
        let bearer = bearer.clone();
        async move {
            send(&router, get(&path, &[("authorization", &bearer)]))
                .await
                .2
        }
    };
    let first = page("/tools".into()).await;
    assert!(first.contains("120 tools"), "{first}");
    assert!(first.contains(">t000<") && first.contains(">t049<") && !first.contains(">t050<"));
    assert!(!first.contains(r#"rel="prev""#));
    let next = first
        .split_once(r#"rel="next" href=""#)
        .unwrap()
        .1
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    assert!(next.contains("after=t049"), "{next}");
    let second = page(next).await;
    assert!(second.contains(">t050<") && second.contains(">t099<") && !second.contains(">t049<"));
    let prev = second
        .split_once(r#"rel="prev" href=""#)
        .unwrap()
        .1
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    let back = page(prev).await;
    assert!(back.contains(">t000<") && back.contains(">t049<") && !back.contains(">t050<"));
    // A prefix walks only its names, and stops past them.
    let prefixed = page("/tools?prefix=t11".into()).await;
    assert_eq!(
        prefixed.matches("<tr><td><a href=").count(),
        10,
        "{prefixed}"
    );
    assert!(!prefixed.contains(r#"rel="next""#));
}
