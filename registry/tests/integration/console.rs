//! The console of the real registry binary (`--console-listen`): pages
//! answered with their security headers, a live tool on the catalog page,
//! and no console beyond loopback with agents unauthenticated.

use std::time::Duration;

use toolmesh_test_support::{
    process,
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
    let _sidecar = start_sidecar(&format!("http://{addr}"), "s1", vec![add_tool(calls)]).await;
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
