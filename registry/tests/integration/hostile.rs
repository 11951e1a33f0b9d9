//! The registry binary against a hostile client with no credentials: each
//! attack the hardening issue reproduced, as a regression test. None may
//! crash it, grow its memory without bound, make its errors too large for
//! a default client, forge its log lines, or let a value other than the one
//! validated reach a tool.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tonic::Code;
use tonic::transport::Channel;
use toolmesh_proto::pb;
use toolmesh_proto::pb::registration_client::RegistrationClient;
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_test_support::{process, registry_process::RegistryProcess};

const MIB: usize = 1 << 20;

/// A gRPC client with tonic's defaults, as an agent would have.
async fn clients(addr: SocketAddr) -> (ToolRegistryClient<Channel>, RegistrationClient<Channel>) {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect");
    (
        ToolRegistryClient::new(channel.clone()).max_encoding_message_size(8 * MIB),
        RegistrationClient::new(channel).max_encoding_message_size(8 * MIB),
    )
}

async fn registry(args: &[&str]) -> Option<(RegistryProcess, SocketAddr)> {
    let bin = process::binary("toolmesh-registry")?;
    let mut all = vec!["--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    Some(RegistryProcess::start(&bin, &all, &[]).await)
}

/// A tool whose input schema is about `size` bytes (a long description
/// inside it), named `name`.
fn big_tool(name: &str, size: usize) -> pb::ToolDescriptor {
    let filler = "x".repeat(size);
    pb::ToolDescriptor {
        name: name.into(),
        description: "a tool with a large schema".into(),
        input_schema_json: format!(r#"{{"type":"object","description":"{filler}"}}"#),
        ..Default::default()
    }
}

fn announce(instance: &str, tools: Vec<pb::ToolDescriptor>) -> pb::AnnounceRequest {
    pb::AnnounceRequest {
        instance_id: instance.into(),
        endpoint: "http://127.0.0.1:9".into(),
        tools,
        execute_key: Vec::new(),
    }
}

/// Resident memory of `pid`, from /proc.
fn rss_bytes(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Opens `streams` WatchTools streams on one raw HTTP/2 connection whose
/// flow-control window is 0: the registry may send headers, never data.
/// Returns the connection's handles, to keep it open.
async fn idle_watchers(
    addr: SocketAddr,
    streams: usize,
) -> (
    Vec<h2::client::ResponseFuture>,
    h2::client::SendRequest<Bytes>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::Builder::new()
        .initial_connection_window_size(65_535)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut send = send.ready().await.expect("ready");
    let mut responses = Vec::new();
    for _ in 0..streams {
        let request =
            http::Request::post(format!("http://{addr}/toolmesh.v1.ToolRegistry/WatchTools"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(())
                .expect("request");
        send = send.ready().await.expect("ready");
        let (response, mut body) = send.send_request(request, false).expect("send");
        // An empty WatchToolsRequest: no compression, length 0.
        body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
            .expect("send the message");
        responses.push(response);
    }
    (responses, send)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watchers_and_announce_churn_keep_memory_bounded() {
    let Some((registry, addr)) = registry(&[
        "--max-watchers",
        "600",
        "--max-watchers-per-connection",
        "50",
    ])
    .await
    else {
        return;
    };
    let (mut agent, mut sidecar) = clients(addr).await;
    let before = rss_bytes(registry.pid());

    assert_eq!(
        toolmesh_test_support::http2::advertised_max_concurrent_streams(addr).await,
        256,
        "MAX_CONCURRENT_STREAMS is advertised"
    );
    // 500 streams that never read, on 10 connections.
    let mut connections = Vec::new();
    for _ in 0..10 {
        let (responses, send) = idle_watchers(addr, 50).await;
        connections.push((responses, send));
    }
    // Every stream was admitted: the response headers arrive (no data).
    // The bodies are kept, never read: a dropped one would end its stream.
    let mut bodies = Vec::new();
    for (responses, _) in &mut connections {
        for response in responses.drain(..) {
            let response = tokio::time::timeout(Duration::from_secs(20), response)
                .await
                .expect("headers in time")
                .expect("a response");
            assert_eq!(response.status(), 200);
            bodies.push(response.into_body());
        }
    }

    // Three rounds of nine tools of about 100 KB announced and withdrawn.
    for round in 0..3 {
        let tools = (0..9)
            .map(|i| big_tool(&format!("big{i}"), 100_000))
            .collect();
        let lease = sidecar
            .announce(announce(&format!("churn-{round}"), tools))
            .await
            .expect("announce")
            .into_inner()
            .lease_id;
        sidecar
            .withdraw(pb::WithdrawRequest { lease_id: lease })
            .await
            .expect("withdraw");
    }
    // The registry still answers at once, and its memory stayed bounded.
    let listed = agent
        .list_tools(pb::ListToolsRequest::default())
        .await
        .expect("ListTools");
    assert!(listed.into_inner().tools.is_empty());
    let after = rss_bytes(registry.pid());
    eprintln!(
        "registry RSS: {} MiB before, {} MiB with 500 idle watchers after the churn",
        before / MIB,
        after / MIB
    );
    assert!(after < 256 * MIB, "RSS {} MiB", after / MIB);
    drop((bodies, connections));
}

#[tokio::test]
async fn watch_streams_are_capped_per_connection_and_in_total() {
    let Some((_registry, addr)) =
        registry(&["--max-watchers", "3", "--max-watchers-per-connection", "2"]).await
    else {
        return;
    };
    let watch = |mut client: ToolRegistryClient<Channel>| async move {
        client.watch_tools(pb::WatchToolsRequest::default()).await
    };
    let (one, _) = clients(addr).await;
    let _a = watch(one.clone()).await.expect("first");
    let _b = watch(one.clone()).await.expect("second");
    let refused = watch(one.clone())
        .await
        .expect_err("a third on one connection");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(
        refused.message().contains("--max-watchers-per-connection"),
        "{refused:?}"
    );

    let (other, _) = clients(addr).await;
    let _c = watch(other.clone()).await.expect("another connection");
    let refused = watch(other.clone()).await.expect_err("a fourth in all");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(refused.message().contains("--max-watchers)"), "{refused:?}");
}

/// A sidecar YAML with one tool, `text`, that takes `{"text": <string>}`
/// and appends the arguments text it receives to the file `seen`.
const RECORDING_TOOL: &str = r#"
tools:
  - name: text
    description: takes one string
    input_schema:
      type: object
      properties: {text: {type: string, maxLength: 10}}
      required: [text]
    backend:
      command: [sh, -c, 'cat >> seen; echo >> seen; echo "\"ok\""']
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_key_is_refused_and_never_forwarded() {
    let Some((_registry, addr)) = registry(&[]).await else {
        return;
    };
    let Some(sidecar_bin) = process::binary("toolmesh-sidecar") else {
        return;
    };
    let sidecar = process::SidecarProcess::start(
        &sidecar_bin,
        &format!("http://{addr}"),
        "recorder",
        RECORDING_TOOL,
    )
    .await;
    let (mut client, _) = clients(addr).await;
    toolmesh_test_support::catalog::wait_for_instances(&client, "text", 1, Duration::from_secs(20))
        .await;
    let seen = || std::fs::read_to_string(sidecar.dir().join("seen")).unwrap_or_default();
    for (arguments, field) in [
        (r#"{"text":5,"text":"second"}"#, "/text"),
        (
            r#"{"text":"a","nested":{"k":[{"x":1,"x":2}]}}"#,
            "/nested/k/0/x",
        ),
    ] {
        let refused = client
            .invoke(toolmesh_test_support::catalog::invoke("text", arguments))
            .await
            .expect_err(arguments);
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        let key = field.rsplit('/').next().unwrap();
        assert!(
            refused
                .message()
                .contains(&format!("the key \"{key}\" twice")),
            "{refused:?}"
        );
        let details = tonic_types::StatusExt::get_error_details(&refused);
        let violations = &details.bad_request().expect("bad request").field_violations;
        assert_eq!(violations[0].field, field);
    }
    assert_eq!(seen(), "", "nothing reached the tool");
    client
        .invoke(toolmesh_test_support::catalog::invoke(
            "text",
            r#"{"text":"once"}"#,
        ))
        .await
        .expect("the same call without the duplicate");
    assert_eq!(seen(), "{\"text\":\"once\"}\n");
}

/// Status size as it travels: the message plus the encoded details, which
/// go base64-encoded in `grpc-status-details-bin`.
fn wire_size(status: &tonic::Status) -> usize {
    status.message().len() + status.details().len() * 4 / 3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_quote_bounded_prefixes_of_a_mebibyte_input() {
    let Some((_registry, addr)) = registry(&["--max-arguments-bytes", "4194304"]).await else {
        return;
    };
    let (mut agent, mut sidecar) = clients(addr).await;
    let huge = "a".repeat(MIB);
    let strict = pb::ToolDescriptor {
        name: "strict".into(),
        description: "strict arguments".into(),
        input_schema_json: r#"{"type":"object","properties":{"list":{"type":"array","uniqueItems":true},"word":{"enum":["yes","no"]},"short":{"type":"string","maxLength":3}},"additionalProperties":false}"#.into(),
        ..Default::default()
    };
    sidecar
        .announce(announce("strict-1", vec![strict]))
        .await
        .expect("announce");
    let ones = format!("[{}]", vec!["1"; MIB / 2].join(","));
    let mut expected: Vec<(&str, tonic::Status)> = Vec::new();
    for (what, arguments) in [
        ("uniqueItems", format!(r#"{{"list":{ones}}}"#)),
        ("enum", format!(r#"{{"word":"{huge}"}}"#)),
        ("maxLength", format!(r#"{{"short":"{huge}"}}"#)),
        ("unknown key", format!(r#"{{"{huge}":1}}"#)),
        ("duplicate key", format!(r#"{{"{huge}":1,"{huge}":2}}"#)),
        ("not JSON", format!(r#"{{"short":"{huge}"#)),
    ] {
        let refused = agent
            .invoke(toolmesh_test_support::catalog::invoke("strict", &arguments))
            .await
            .expect_err(what);
        expected.push((what, refused));
    }
    let refused = agent
        .invoke(toolmesh_test_support::catalog::invoke(&huge, "{}"))
        .await
        .expect_err("unknown tool");
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    expected.push(("tool name", refused));
    let refused = agent
        .invoke(toolmesh_test_support::catalog::keyed(
            "strict",
            r#"{"short":"abc"}"#,
            &huge,
        ))
        .await
        .expect_err("idempotency key");
    expected.push(("idempotency key", refused));
    for (what, request) in [
        ("instance id", announce(&huge, vec![big_tool("t", 10)])),
        (
            "endpoint",
            pb::AnnounceRequest {
                endpoint: format!("http://{huge}:1"),
                ..announce("a", vec![big_tool("t", 10)])
            },
        ),
        (
            "tool name",
            announce(
                "a",
                vec![pb::ToolDescriptor {
                    name: huge.clone(),
                    ..big_tool("t", 10)
                }],
            ),
        ),
        (
            "version",
            announce(
                "a",
                vec![pb::ToolDescriptor {
                    version: huge.clone(),
                    ..big_tool("t", 10)
                }],
            ),
        ),
    ] {
        let refused = sidecar.announce(request).await.expect_err(what);
        expected.push((what, refused));
    }
    let refused = sidecar
        .heartbeat(pb::HeartbeatRequest {
            lease_id: huge.clone(),
        })
        .await
        .expect_err("lease");
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    expected.push(("lease id", refused));

    for (what, status) in expected {
        assert_ne!(status.code(), Code::ResourceExhausted, "{what}: {status:?}");
        assert_ne!(status.code(), Code::Internal, "{what}: {status:?}");
        assert!(
            wire_size(&status) < 4096,
            "{what}: {} bytes: {status:?}",
            wire_size(&status)
        );
    }
}

#[tokio::test]
async fn descriptors_with_impossible_durations_or_unbounded_strings_are_refused() {
    let Some((_registry, addr)) = registry(&[]).await else {
        return;
    };
    let (_, mut sidecar) = clients(addr).await;
    let timed = |seconds, nanos| pb::ToolDescriptor {
        timeout: Some(prost_types::Duration { seconds, nanos }),
        ..big_tool("timed", 10)
    };
    for (descriptor, field) in [
        (timed(1, -1), "tools[0].timeout.nanos"),
        (timed(1, 1_000_000_000), "tools[0].timeout.nanos"),
        (timed(-5, 0), "tools[0].timeout"),
        (timed(i64::MAX, 0), "tools[0].timeout"),
        (
            pb::ToolDescriptor {
                version: "v".repeat(MIB),
                ..big_tool("v", 10)
            },
            "tools[0].version",
        ),
        (
            pb::ToolDescriptor {
                tags: vec!["t".repeat(MIB)],
                ..big_tool("v", 10)
            },
            "tools[0].tags[0]",
        ),
    ] {
        let refused = sidecar
            .announce(announce("a", vec![descriptor]))
            .await
            .expect_err(field);
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        let details = tonic_types::StatusExt::get_error_details(&refused);
        assert_eq!(
            details.bad_request().expect("bad request").field_violations[0].field,
            field
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_announcer_cannot_break_listing_for_everyone() {
    // The default cap on what one announce carries keeps a listing far
    // below the message limit...
    let Some((_registry, addr)) = registry(&[]).await else {
        return;
    };
    let (mut agent, mut sidecar) = clients(addr).await;
    let tools: Vec<_> = (0..9)
        .map(|i| big_tool(&format!("huge{i}"), 247_000))
        .collect();
    let refused = sidecar
        .announce(announce("flooder", tools.clone()))
        .await
        .expect_err("2.2 MB of schemas in one announce");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused.message().contains("--max-announce-bytes"),
        "{refused:?}"
    );

    // ...and where an operator raised it, the list stops before the limit
    // and says so, rather than failing for every agent.
    let Some((_registry, addr)) = registry(&["--max-announce-bytes", "4194304"]).await else {
        return;
    };
    let (mut agent2, mut sidecar2) = clients(addr).await;
    sidecar2
        .announce(announce("flooder-1", tools))
        .await
        .expect("allowed here");
    let more: Vec<_> = (9..18)
        .map(|i| big_tool(&format!("huge{i}"), 247_000))
        .collect();
    sidecar2
        .announce(announce("flooder-2", more))
        .await
        .expect("allowed here");
    let listed = agent2
        .list_tools(pb::ListToolsRequest::default())
        .await
        .expect("ListTools answers")
        .into_inner();
    assert!(listed.truncated, "the answer says it is cut");
    assert!(
        !listed.tools.is_empty() && listed.tools.len() < 18,
        "{}",
        listed.tools.len()
    );
    // The pages after it read the rest: every tool once, in order.
    let mut names: Vec<String> = listed.tools.iter().map(name_of).collect();
    let mut token = listed.next_page_token;
    while !token.is_empty() {
        let page = agent2
            .list_tools(pb::ListToolsRequest {
                page_token: token,
                ..Default::default()
            })
            .await
            .expect("the next page")
            .into_inner();
        assert_eq!(page.total_size, 18);
        assert!(
            !page.tools.is_empty(),
            "a page that reads on lists something"
        );
        names.extend(page.tools.iter().map(name_of));
        token = page.next_page_token;
    }
    let mut expected: Vec<String> = (0..18).map(|i| format!("huge{i}")).collect();
    expected.sort();
    assert_eq!(names, expected);

    // An export of it all stops before the limit too, and names every tool
    // it left out.
    let exported = agent2
        .export_tools(pb::ExportToolsRequest {
            format: pb::ExportFormat::Mcp.into(),
            ..Default::default()
        })
        .await
        .expect("ExportTools answers")
        .into_inner();
    let tools: Vec<serde_json::Value> = serde_json::from_str(&exported.tools_json).unwrap();
    let left: Vec<&str> = exported
        .issues
        .iter()
        .filter(|i| i.omitted && i.message.contains("size limit"))
        .map(|i| i.tool.as_str())
        .collect();
    assert!(!tools.is_empty() && !left.is_empty(), "{}", left.len());
    assert_eq!(tools.len() + left.len(), 18);
    let unspecified = agent2
        .export_tools(pb::ExportToolsRequest::default())
        .await
        .expect_err("a format is required");
    assert_eq!(unspecified.code(), Code::InvalidArgument);
    let empty = agent
        .list_tools(pb::ListToolsRequest::default())
        .await
        .expect("ListTools");
    assert!(!empty.into_inner().truncated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_text_cannot_forge_or_flood_log_lines_and_leases_are_not_logged() {
    let Some((registry, addr)) = registry(&[]).await else {
        return;
    };
    let (mut agent, mut sidecar) = clients(addr).await;
    let forged = "x\n2026-11-30T00:00:00.000000Z  INFO toolmesh_registry: forged line";
    let refused = sidecar
        .announce(announce(forged, vec![big_tool("t", 10)]))
        .await
        .expect_err("a newline in the instance id");
    assert_eq!(refused.code(), Code::InvalidArgument);
    let _ = sidecar
        .announce(announce(&"i".repeat(MIB), vec![big_tool("t", 10)]))
        .await
        .expect_err("a 1 MiB instance id");
    let _ = agent
        .invoke(toolmesh_test_support::catalog::invoke(
            &format!("{}\nforged", "n".repeat(MIB)),
            "{}",
        ))
        .await
        .expect_err("a 1 MiB tool name with a newline");
    let lease = sidecar
        .announce(announce("honest", vec![big_tool("t", 10)]))
        .await
        .expect("announce")
        .into_inner()
        .lease_id;
    sidecar
        .withdraw(pb::WithdrawRequest {
            lease_id: lease.clone(),
        })
        .await
        .expect("withdraw");

    toolmesh_test_support::wait::wait_until(
        Duration::from_secs(10),
        "the withdraw in the log",
        || registry.log().contains("lease withdrawn"),
    )
    .await;
    let log = registry.log();
    assert!(
        !log.lines()
            .any(|l| l.starts_with("2026-11-30T00:00:00.000000Z")),
        "a forged line:\n{log}"
    );
    assert!(!log.contains(&lease), "the lease id is logged:\n{log}");
    for line in log.lines() {
        assert!(
            line.len() < 2048,
            "a {}-byte log line: {}…",
            line.len(),
            &line[..200]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_cannot_aim_the_registry_at_itself_or_tell_open_ports_from_closed() {
    let Some((process, addr)) = registry(&[]).await else {
        return;
    };
    let (mut agent, mut sidecar) = clients(addr).await;
    let port = addr.port();
    for own in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ] {
        let refused = sidecar
            .announce(pb::AnnounceRequest {
                endpoint: own.clone(),
                ..announce("loop", vec![big_tool("t", 10)])
            })
            .await
            .expect_err(&own);
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().contains("the registry's own address"),
            "{refused:?}"
        );
    }

    // A name that resolves to the registry itself (`127.1` is 127.0.0.1 to
    // the resolver) passes the check at announce, and is refused when the
    // registry would connect: nothing reaches its own port.
    let alias = format!("http://127.1:{port}");
    sidecar
        .announce(pb::AnnounceRequest {
            endpoint: alias,
            ..announce("alias", vec![big_tool("self", 10)])
        })
        .await
        .expect("a host name, taken at announce");
    let failed = agent
        .invoke(toolmesh_test_support::catalog::invoke("self", "{}"))
        .await
        .expect_err("the registry does not dial itself");
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert_eq!(
        failed.message(),
        r#"no healthy instance of "self" (instance unreachable)"#
    );
    toolmesh_test_support::wait::wait_until(
        Duration::from_secs(10),
        "the reason in the log",
        || {
            process
                .log()
                .contains("resolves only to addresses the registry does not dial")
        },
    )
    .await;

    // A closed port, and an open one that is not a sidecar: the agent
    // learns the same from both.
    let closed = toolmesh_test_support::ports::reserved_port();
    let open = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let open_port = open.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = open.accept().await {
            drop(socket);
        }
    });
    let mut messages = Vec::new();
    for (tool, port) in [("closed", closed), ("open", open_port)] {
        sidecar
            .announce(pb::AnnounceRequest {
                endpoint: format!("http://127.0.0.1:{port}"),
                ..announce(tool, vec![big_tool(tool, 10)])
            })
            .await
            .expect("announce");
        let failed = agent
            .invoke(toolmesh_test_support::catalog::invoke(tool, "{}"))
            .await
            .expect_err(tool);
        assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
        messages.push(failed.message().replace(tool, "TOOL"));
    }
    assert_eq!(messages[0], messages[1]);
    assert_eq!(
        messages[0],
        r#"no healthy instance of "TOOL" (instance unreachable)"#
    );

    // An allow-list refuses what it does not name.
    let Some((_listed, addr)) =
        registry(&["--endpoint-allow", "10.0.0.0/8,*.svc.cluster.local"]).await
    else {
        return;
    };
    let (_, mut sidecar) = clients(addr).await;
    let refused = sidecar
        .announce(announce("outsider", vec![big_tool("t", 10)]))
        .await
        .expect_err("127.0.0.1 is not listed");
    assert!(
        refused.message().contains("--endpoint-allow"),
        "{refused:?}"
    );
    sidecar
        .announce(pb::AnnounceRequest {
            endpoint: "http://inventory.tools.svc.cluster.local:50061".into(),
            ..announce("insider", vec![big_tool("t", 10)])
        })
        .await
        .expect("a listed name");
}

fn name_of(tool: &pb::Tool) -> String {
    tool.descriptor
        .as_ref()
        .map(|d| d.name.clone())
        .unwrap_or_default()
}
