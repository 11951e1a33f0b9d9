//! A gRPC (or MCP) load generator over raw HTTP/2: `connections`
//! connections, `streams` calls in flight on each, every call the same
//! pre-encoded request, for a fixed time after a warm-up. Every gRPC answer
//! must be HTTP 200 with `grpc-status: 0` (in the trailers, or alone in the
//! headers); every MCP answer HTTP 200 with a JSON-RPC result that is not
//! `isError`; any other counts as an error. Prints one JSON line.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut as _, Bytes, BytesMut};
use prost::Message as _;
use toolmesh_proto::pb;

/// `toolmesh-bench load`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The server: `http://HOST:PORT`.
    #[arg(long)]
    target: String,
    #[command(flatten)]
    request: Request,
    /// Connections (h2load's `-c`).
    #[arg(short = 'c', long, default_value_t = 1)]
    connections: usize,
    /// Calls in flight per connection (h2load's `-m`).
    #[arg(short = 'm', long, default_value_t = 1)]
    streams: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seconds of warm-up first, not measured.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// A label copied into the output line.
    #[arg(long, default_value = "")]
    label: String,
}

/// The request every call sends (`toolmesh-bench frame`: written to stdout,
/// for another load generator, `h2load -d FILE`).
#[derive(Debug, clap::Args)]
pub(crate) struct Request {
    /// `execute` (a sidecar's `ToolRuntime.Execute`), `invoke` (the
    /// registry's `ToolRegistry.Invoke`), `mcp` (`tools/call` at 2026-07-28
    /// on the registry's `/mcp`, over HTTP/2 without TLS), `task-start`
    /// (`Tasks.StartTask` of the same call) or `task-get` (`Tasks.GetTask`
    /// of one task of it, started first).
    #[arg(long, value_parser = ["execute", "invoke", "mcp", "task-start", "task-get"])]
    method: String,
    /// For `task-get` with `frame`: the task's id (`load` starts one).
    #[arg(long, default_value = "")]
    task_id: String,
    /// The tool called.
    #[arg(long, default_value = "echo")]
    tool: String,
    /// Bytes of `arguments_json` per call.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// The argument the payload is the text of (`{"<field>": "xxx…"}`).
    #[arg(long, default_value = "text")]
    field: String,
}

/// Writes the frame `args` describe to stdout.
pub(crate) fn write_frame(args: &Request) -> anyhow::Result<()> {
    use std::io::Write as _;
    let frame = frame(args, &args.task_id);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&frame)?;
    stdout.flush()?;
    Ok(())
}

/// `{"<field>":"xxx…"}` of exactly `bytes` bytes (at least the braces).
fn arguments(field: &str, bytes: usize) -> String {
    let overhead = format!(r#"{{"{field}":""}}"#).len();
    format!(
        r#"{{"{field}":"{}"}}"#,
        "x".repeat(bytes.saturating_sub(overhead))
    )
}

/// A `tools/call` at 2026-07-28: the arguments in the per-request
/// envelope.
fn mcp_request(tool: &str, arguments_json: &str) -> Bytes {
    let arguments: serde_json::Value =
        serde_json::from_str(arguments_json).unwrap_or_else(|_| serde_json::json!({}));
    let request = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MCP_REVISION,
                "io.modelcontextprotocol/clientInfo": {"name": "toolmesh-bench", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    });
    Bytes::from(request.to_string())
}

/// The MCP revision `--method mcp` speaks.
const MCP_REVISION: &str = "2026-07-28";

/// The request message, in its gRPC frame (no compression, length
/// prefix); for `mcp`, the JSON-RPC request.
fn frame(request: &Request, task_id: &str) -> Bytes {
    let tool = request.tool.as_str();
    let arguments_json = arguments(&request.field, request.payload);
    let invoke = || pb::InvokeRequest {
        tool: tool.into(),
        arguments_json: arguments_json.clone(),
        idempotency_key: String::new(),
        tool_digest: String::new(),
        ..Default::default()
    };
    let message = match request.method.as_str() {
        "mcp" => return mcp_request(tool, &arguments_json),
        "execute" => pb::ExecuteRequest {
            tool: tool.into(),
            arguments_json: arguments_json.clone(),
            invocation_id: "bench".into(),
            caller: String::new(),
        }
        .encode_to_vec(),
        "task-start" => pb::StartTaskRequest {
            call: Some(invoke()),
        }
        .encode_to_vec(),
        "task-get" => pb::GetTaskRequest { id: task_id.into() }.encode_to_vec(),
        _ => invoke().encode_to_vec(),
    };
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0);
    frame.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    frame.put_slice(&message);
    frame.freeze()
}

fn path(method: &str) -> &'static str {
    match method {
        "execute" => "/toolmesh.v1.ToolRuntime/Execute",
        "mcp" => "/mcp",
        "task-start" => "/toolmesh.v1.Tasks/StartTask",
        "task-get" => "/toolmesh.v1.Tasks/GetTask",
        _ => "/toolmesh.v1.ToolRegistry/Invoke",
    }
}

/// Starts one task of the call `request` describes on the registry at
/// `authority`: its id, for `task-get`.
async fn one_task(authority: &str, request: &Request) -> anyhow::Result<String> {
    let mut client = pb::tasks_client::TasksClient::connect(format!("http://{authority}")).await?;
    let start = pb::StartTaskRequest {
        call: Some(pb::InvokeRequest {
            tool: request.tool.clone(),
            arguments_json: arguments(&request.field, request.payload),
            idempotency_key: String::new(),
            tool_digest: String::new(),
            ..Default::default()
        }),
    };
    let mut call = tonic::Request::new(start);
    call.set_timeout(Duration::from_secs(10));
    Ok(client.start_task(call).await?.into_inner().id)
}

/// What one stream's loop saw.
#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    errors: u64,
    first_error: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let authority = args
        .target
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let request = &args.request;
    let uri: http::Uri = format!("http://{authority}{}", path(&request.method)).parse()?;
    let task_id = if request.method == "task-get" {
        one_task(&authority, request).await?
    } else {
        String::new()
    };
    let body = frame(request, &task_id);
    let mcp = (request.method == "mcp").then(|| Arc::<str>::from(request.tool.as_str()));
    let started = Instant::now();
    let measure_from = started + Duration::from_secs_f64(args.warmup);
    let stop_at = measure_from + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let tcp = tokio::net::TcpStream::connect(&authority).await?;
        tcp.set_nodelay(true)?;
        let (client, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 24)
            .handshake::<_, Bytes>(tcp)
            .await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        for _ in 0..args.streams {
            let (client, uri, body, mcp) = (client.clone(), uri.clone(), body.clone(), mcp.clone());
            tasks.push(tokio::spawn(async move {
                let mut tally = Tally::default();
                while Instant::now() < stop_at {
                    let sent = Instant::now();
                    let outcome = match &mcp {
                        Some(tool) => call_mcp(client.clone(), &uri, tool, body.clone()).await,
                        None => call(client.clone(), &uri, body.clone()).await,
                    };
                    if sent < measure_from && outcome.is_ok() {
                        continue;
                    }
                    match outcome {
                        Ok(()) => tally.latencies.push(sent.elapsed()),
                        // A failed call fails the run: stop rather than spin.
                        Err(error) => {
                            tally.errors += 1;
                            tally.first_error.get_or_insert(error);
                            break;
                        }
                    }
                }
                tally
            }));
        }
    }
    let mut latencies = Vec::new();
    let (mut errors, mut first_error) = (0, None);
    for task in tasks {
        let tally = task.await?;
        latencies.extend(tally.latencies);
        errors += tally.errors;
        first_error = first_error.or(tally.first_error);
    }
    latencies.sort();
    let count = latencies.len();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let index = ((count as f64 * q) as usize).min(count.saturating_sub(1));
        latencies.get(index).copied().map_or(0.0, micros)
    };
    #[allow(clippy::cast_precision_loss)]
    let mean = if count == 0 {
        0.0
    } else {
        latencies.iter().map(|d| micros(*d)).sum::<f64>() / count as f64
    };
    #[allow(clippy::cast_precision_loss)]
    let first_error_shown = first_error.clone();
    let line = serde_json::json!({
        "label": args.label,
        "method": request.method,
        "tool": request.tool,
        "payload": request.payload,
        "connections": args.connections,
        "streams": args.streams,
        "calls": count,
        "errors": errors,
        "first_error": first_error_shown,
        "calls_per_s": count as f64 / args.seconds,
        "p50_us": at(0.50),
        "p99_us": at(0.99),
        "mean_us": mean,
    });
    println!("{line}");
    if errors > 0 {
        anyhow::bail!("{errors} calls did not succeed: {first_error:?}");
    }
    Ok(())
}

/// Sends `request` with `body` once the connection takes another stream,
/// and waits for the answer's headers.
async fn send(
    client: h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    body: Bytes,
) -> Result<http::Response<h2::RecvStream>, String> {
    let mut client = client.ready().await.map_err(|e| e.to_string())?;
    let (response, mut stream) = client
        .send_request(request, false)
        .map_err(|e| e.to_string())?;
    stream.send_data(body, true).map_err(|e| e.to_string())?;
    response.await.map_err(|e| e.to_string())
}

/// One call: the request, then the answer's headers, body and trailers;
/// `Err` with what was wrong unless it is HTTP 200 and `grpc-status: 0`.
async fn call(
    client: h2::client::SendRequest<Bytes>,
    uri: &http::Uri,
    body: Bytes,
) -> Result<(), String> {
    let request = http::Request::post(uri.clone())
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| e.to_string())?;
    let response = send(client, request, body).await?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("HTTP {}", response.status()));
    }
    if let Some(status) = response.headers().get("grpc-status") {
        // Trailers-only: the status came with the headers.
        return grpc_ok(status);
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no trailers")?;
    let status = trailers.get("grpc-status").ok_or("no grpc-status")?;
    grpc_ok(status)
}

/// One MCP `tools/call`; `Err` unless it is HTTP 200 with a JSON-RPC
/// result that is not `isError` (as JSON, or as the data of a server-sent
/// event).
async fn call_mcp(
    client: h2::client::SendRequest<Bytes>,
    uri: &http::Uri,
    tool: &str,
    body: Bytes,
) -> Result<(), String> {
    let request = http::Request::post(uri.clone())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MCP_REVISION)
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(())
        .map_err(|e| e.to_string())?;
    let response = send(client, request, body).await?;
    let status = response.status();
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&text);
    if status != http::StatusCode::OK {
        return Err(format!("HTTP {status}: {text}"));
    }
    let json = text
        .lines()
        .find_map(|line| line.strip_prefix("data:"))
        .unwrap_or(&text);
    let answer: serde_json::Value =
        serde_json::from_str(json.trim()).map_err(|e| format!("{e}: {text}"))?;
    match &answer["result"] {
        serde_json::Value::Object(result) if result.get("isError") != Some(&true.into()) => Ok(()),
        _ => Err(format!("not a successful result: {answer}")),
    }
}

fn grpc_ok(status: &http::HeaderValue) -> Result<(), String> {
    if status.as_bytes() == b"0" {
        Ok(())
    } else {
        Err(format!(
            "grpc-status {}",
            String::from_utf8_lossy(status.as_bytes())
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_have_the_size_asked_for() {
        for size in [100, 16 * 1024] {
            let json = arguments("text", size);
            assert_eq!(json.len(), size);
            serde_json::from_str::<serde_json::Value>(&json).expect("JSON");
        }
    }

    #[test]
    fn frames_carry_the_message_length() {
        let request = Request {
            method: "invoke".into(),
            tool: "echo".into(),
            payload: 100,
            field: "text".into(),
            task_id: String::new(),
        };
        let frame = frame(&request, "");
        let length = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
        assert_eq!((frame[0], length), (0, frame.len() - 5));
        pb::InvokeRequest::decode(&frame[5..]).expect("an InvokeRequest");
    }
}
