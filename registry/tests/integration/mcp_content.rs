//! A wrapped MCP server's answers reach MCP clients as the server sent
//! them: `@modelcontextprotocol/server-everything` (unmodified, over
//! stdio) behind the `toolmesh-sidecar` binary, called through the
//! registry's `/mcp`, beside the same server asked directly.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
};
use toolmesh_test_support::mcp::everything_server;
use toolmesh_test_support::process::{SidecarProcess, binary};

use crate::mcp::{HANDSHAKE, McpRegistry, REPLY_WITHIN, Rpc, config};

/// The tools asked for, and their arguments.
const CALLS: [(&str, &str); 4] = [
    ("echo", r#"{"message": "hi"}"#),
    ("get-tiny-image", "{}"),
    ("get-resource-links", r#"{"count": 2}"#),
    ("get-structured-content", r#"{"location": "Chicago"}"#),
];

/// server-everything over stdio, spoken to as an MCP client does: one
/// JSON-RPC message per line.
struct Direct {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Direct {
    async fn start(launcher: &std::path::Path) -> Self {
        let mut child = Command::new(launcher)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start server-everything");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut direct = Self {
            _child: child,
            stdin,
            lines,
        };
        direct
            .request(
                0,
                "initialize",
                json!({
                    "protocolVersion": HANDSHAKE[0],
                    "capabilities": {},
                    "clientInfo": {"name": "toolmesh-tests", "version": "1"},
                }),
            )
            .await;
        direct
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        direct
    }

    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The result of request `id`, skipping the server's notifications.
    async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let answer = async {
            loop {
                let line = self.lines.next_line().await.unwrap().expect("an answer");
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if message["id"] == id {
                    return message;
                }
            }
        };
        let message = tokio::time::timeout(REPLY_WITHIN, answer)
            .await
            .expect("server-everything answers");
        assert!(message.get("error").is_none(), "{message}");
        message["result"].clone()
    }
}

/// The `toolmesh-sidecar` binary serving server-everything's `tools` to
/// `registry`, each as `everything.<name>`, once all are listed; `None`
/// (the test skipped) when the binary or the server is missing.
pub(crate) async fn everything_behind_a_sidecar(
    registry: &McpRegistry,
    tools: &[&str],
) -> Option<SidecarProcess> {
    let (bin, everything) = (binary("toolmesh-sidecar")?, everything_server()?);
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        command: [{}]\n        prefix: everything.\n        allow: [{}]\n",
        everything.display(),
        tools.join(", ")
    );
    let sidecar = SidecarProcess::start(&bin, &registry.grpc, "everything", &yaml).await;
    let rpc = Rpc::new(&registry.mcp);
    for name in tools {
        rpc.wait_listed(&format!("everything.{name}"), true).await;
    }
    Some(sidecar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_blocks_pass_as_the_server_sent_them() {
    let Some(everything) = everything_server() else {
        return;
    };
    let registry = McpRegistry::start(config()).await;
    let names: Vec<&str> = CALLS.iter().map(|(name, _)| *name).collect();
    let Some(_sidecar) = everything_behind_a_sidecar(&registry, &names).await else {
        return;
    };
    let rpc = Rpc::new(&registry.mcp);
    let mut direct = Direct::start(&everything).await;

    for (id, (name, arguments)) in (1..).zip(CALLS) {
        let arguments: Value = serde_json::from_str(arguments).unwrap();
        let sent = direct
            .request(
                id,
                "tools/call",
                json!({"name": name, "arguments": arguments}),
            )
            .await;
        let reply = rpc
            .modern(
                id,
                "tools/call",
                json!({"name": format!("everything.{name}"), "arguments": arguments}),
            )
            .await;
        let message = reply.message.expect("a JSON-RPC answer");
        let received = &message["result"];
        assert_ne!(received["isError"], true, "{name}: {message}");
        match sent.get("structuredContent") {
            // A structured result travels as its JSON: the same value,
            // and its text.
            Some(structured) => {
                assert_eq!(&received["structuredContent"], structured, "{name}");
                let text = received["content"][0]["text"].as_str().unwrap_or_default();
                let parsed: Value = serde_json::from_str(text).unwrap_or_default();
                assert_eq!(&parsed, structured, "{name}: {received}");
            }
            None => {
                assert_eq!(received["content"], sent["content"], "{name}");
                assert!(received.get("structuredContent").is_none(), "{name}");
            }
        }
    }

    // What the assertions above compare, spelled out for two of them.
    let echoed = rpc
        .modern(
            9,
            "tools/call",
            json!({"name": "everything.echo", "arguments": {"message": "hi"}}),
        )
        .await;
    let echoed = echoed.message.unwrap()["result"]["content"].clone();
    assert_eq!(echoed, json!([{"type": "text", "text": "Echo: hi"}]));
    let image = rpc
        .modern(
            10,
            "tools/call",
            json!({"name": "everything.get-tiny-image", "arguments": {}}),
        )
        .await;
    let image = image.message.unwrap()["result"]["content"][1].clone();
    assert_eq!(image["type"], "image", "{image}");
    assert_eq!(image["mimeType"], "image/png", "{image}");
    assert!(
        image["data"]
            .as_str()
            .is_some_and(|d| d.starts_with("iVBORw0KGgo")),
        "a PNG, base64: {image}"
    );
    registry.stop().await;
}
