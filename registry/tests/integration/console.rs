//! The console of the real registry binary (`--console-listen`): pages
//! answered with their security headers, a live tool on the catalog page,
//! the playground calling it through the real sidecar, sign-ins good on
//! every replica in Redis mode, and no console beyond loopback with agents
//! unauthenticated.

use std::time::Duration;

use toolmesh_test_support::{
    keys::api_keys_file,
    process,
    redis::RedisServer,
    registry_process::{RegistryProcess, run_to_exit},
};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_the_console_with_a_live_tool() {
    let Some(binary) = process::binary("toolmesh-registry") else {
        return;
    };
    let port = reserved_port();
    let console = format!("127.0.0.1:{port}");
    let (registry, addr) = RegistryProcess::start(
        &binary,
        &["--listen", "127.0.0.1:0", "--console-listen", &console],
        &[],
    )
    .await;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let _sidecar = start_sidecar(
        &format!("http://{addr}"),
        "s1",
        vec![add_tool(calls.clone())],
    )
    .await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let base = format!("http://{console}");
    eventually(
        Duration::from_secs(20),
        "the sidecar's tools on the catalog page",
        || {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let Ok(page) = client.get(format!("{base}/tools")).send().await else {
                    return false;
                };
                page.text().await.is_ok_and(|text| text.contains("add"))
            }
        },
    )
    .await;
    let page = client
        .get(format!("{base}/tools/add"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(
        page.text().await.unwrap().contains("s1"),
        "its instance is listed"
    );
    let css = client
        .get(format!("{base}/assets/console.css"))
        .send()
        .await
        .unwrap();
    assert!(
        css.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    assert!(
        registry.log().contains("console listening"),
        "{}",
        registry.log()
    );
    try_add(&client, &base, &calls).await;
}

/// The playground on `add`, as the anonymous viewer: a value of the wrong
/// type is shown at its field and never reaches the tool; fixed, the
/// sidecar's answer is shown; both calls are in the tail.
async fn try_add(client: &reqwest::Client, base: &str, calls: &std::sync::atomic::AtomicUsize) {
    let form = client
        .get(format!("{base}/tools/add/try"))
        .send()
        .await
        .unwrap();
    let cookie = set_cookie(&form, "toolmesh_console_form");
    let page = form.text().await.unwrap();
    assert!(page.contains(r#"name="arg:/a""#), "{page}");
    let token = page
        .split_once(r#"name="csrf" value=""#)
        .unwrap()
        .1
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let post = |pairs: Vec<(&'static str, String)>| {
        client
            .post(format!("{base}/tools/add/try"))
            .header("cookie", &cookie)
            .form(&pairs)
            .send()
    };
    let forged = post(vec![("csrf", "forged".into()), ("arg:/a", "1".into())])
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    let bad = post(vec![
        ("csrf", token.clone()),
        ("arg:/a", "1".into()),
        ("arg:/b", "two".into()),
    ])
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(bad.contains(r#"data-outcome="invalid_argument""#), "{bad}");
    assert!(
        bad.contains(r#"<p class="violation" data-pointer="/b">"#),
        "{bad}"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    let good = post(vec![
        ("csrf", token),
        ("arg:/a", "1".into()),
        ("arg:/b", "2".into()),
    ])
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(good.contains(r#"data-outcome="ok""#), "{good}");
    assert!(good.contains("&quot;sum&quot;: 3"), "{good}");
    let tail = client
        .get(format!("{base}/calls?live=0"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        tail.matches(r#"<td class="tool"><a href="/tools/add">"#)
            .count()
            >= 2,
        "{tail}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_redis_mode_a_sign_in_on_one_replica_is_good_on_another() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let Some(binary) = process::binary("toolmesh-registry") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let keys = api_keys_file(dir.path(), &[("ops", "k-console-ops", &[])]);
    let keys = keys.to_str().unwrap();
    let url = redis.url();
    let mut consoles = Vec::new();
    let mut replicas = Vec::new();
    let mut agents = Vec::new();
    for _ in 0..2 {
        let console = format!("127.0.0.1:{}", reserved_port());
        let (replica, addr) = RegistryProcess::start(
            &binary,
            &[
                "--listen",
                "127.0.0.1:0",
                "--redis",
                &url,
                "--redis-prefix",
                "console-key",
                "--api-keys-file",
                keys,
                "--console-listen",
                &console,
            ],
            &[],
        )
        .await;
        replicas.push(replica);
        agents.push(addr);
        consoles.push(format!("http://{console}"));
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let login = client
        .get(format!("{}/login", consoles[0]))
        .send()
        .await
        .unwrap();
    let login_cookie = set_cookie(&login, "toolmesh_console_login");
    let token = login_cookie.split_once('=').unwrap().1.to_owned();
    let signed = client
        .post(format!("{}/login", consoles[0]))
        .header("cookie", &login_cookie)
        .form(&[("csrf", token.as_str()), ("credential", "k-console-ops")])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 303);
    let session = set_cookie(&signed, "toolmesh_console");
    for console in &consoles {
        let page = client
            .get(format!("{console}/tools"))
            .header("cookie", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200, "{console}");
        assert!(page.text().await.unwrap().contains("ops"));
    }
    // A call answered by the first replica shows in the second's tail.
    let mut agent = toolmesh_proto::pb::tool_registry_client::ToolRegistryClient::connect(format!(
        "http://{}",
        agents[0]
    ))
    .await
    .unwrap();
    let refused = agent
        .invoke(toolmesh_test_support::keys::bearer(
            toolmesh_proto::pb::InvokeRequest {
                tool: "no_such_tool_anywhere".into(),
                arguments_json: "{}".into(),
                ..Default::default()
            },
            "k-console-ops",
        ))
        .await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::NotFound);
    eventually(
        Duration::from_secs(20),
        "the first replica's call on the second's calls page",
        || {
            let (client, url, session) = (
                client.clone(),
                format!("{}/calls?live=0", consoles[1]),
                session.clone(),
            );
            async move {
                let Ok(page) = client.get(url).header("cookie", session).send().await else {
                    return false;
                };
                page.text().await.is_ok_and(|text| {
                    text.contains("no_such_tool_anywhere") && text.contains("every replica")
                })
            }
        },
    )
    .await;
    // The key is the one in Redis, set once.
    let stored = redis_cli(&url, &["GET", "{console-key:console}:key"]);
    assert_eq!(stored.trim().len(), 44, "32 bytes in base64: {stored:?}");
}

/// The `name=value` of the non-empty cookie `name` that `response` sets.
fn set_cookie(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_owned())
        .find(|c| {
            c.split_once('=')
                .is_some_and(|(n, value)| n == name && !value.is_empty())
        })
        .unwrap_or_else(|| panic!("no cookie {name} set"))
}

fn redis_cli(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .arg("-u")
        .arg(url)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn no_console_beyond_loopback_with_agents_unauthenticated() {
    let Some(binary) = process::binary("toolmesh-registry") else {
        return;
    };
    let finished = run_to_exit(
        &binary,
        &["--listen", "127.0.0.1:0", "--console-listen", "0.0.0.0:0"],
        &[],
    )
    .await;
    assert!(!finished.status.success());
    assert!(
        finished.stderr.contains("--console-listen") && finished.stderr.contains("--insecure"),
        "{}",
        finished.stderr
    );
}
