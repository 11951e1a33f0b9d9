//! The commands that talk to the registry, each one call (or one stream)
//! through [`Registry`], printing through [`Output`].

use futures::StreamExt as _;
use serde_json::{Value, json};
use toolmesh_proto::pb;

use crate::arguments;
use crate::connect::Registry;
use crate::failure::{Exit, Failure};
use crate::output::{Output, clip, note, pretty, print, table};

/// A tool as JSON: its descriptor with the schemas parsed, and its
/// instance count.
pub(crate) fn tool_json(tool: &pb::Tool) -> Value {
    let d = tool.descriptor.clone().unwrap_or_default();
    let schema = |text: &str| -> Value {
        if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
        }
    };
    let limit = |l: &Option<pb::RateLimit>| {
        l.as_ref()
            .map(|l| json!({"rate": l.rate, "burst": l.burst}))
    };
    json!({
        "name": d.name,
        "title": d.title,
        "description": d.description,
        "version": d.version,
        "tags": d.tags,
        "instances": tool.instances,
        "digest": tool.digest,
        "input_schema": schema(&d.input_schema_json),
        "output_schema": schema(&d.output_schema_json),
        "rate_limit": limit(&d.rate_limit),
        "per_caller_rate_limit": limit(&d.per_caller_rate_limit),
        "timeout_seconds": d.timeout.map(|t| t.seconds as f64 + f64::from(t.nanos) / 1e9),
        "idempotent": d.idempotent,
        "read_only": d.read_only,
        "destructive": d.destructive,
        "open_world": d.open_world,
    })
}

fn rate_text(limit: Option<&pb::RateLimit>) -> String {
    limit.map_or_else(
        || "-".to_owned(),
        |l| format!("{}/s burst {}", l.rate, l.burst),
    )
}

/// `tools list`: every live tool, page after page.
pub(crate) async fn list(
    registry: &mut Registry,
    tags: Vec<String>,
    prefix: String,
    output: Output,
) -> Result<(), Failure> {
    let mut tools = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = registry.request(pb::ListToolsRequest {
            tags: tags.clone(),
            name_prefix: prefix.clone(),
            page_token,
            page_size: 0,
            ..Default::default()
        });
        let page = registry.call(async |c| c.list_tools(request).await).await?;
        tools.extend(page.tools);
        page_token = page.next_page_token;
        if page_token.is_empty() {
            break;
        }
    }
    match output {
        Output::Json => print(Value::Array(tools.iter().map(tool_json).collect()))?,
        Output::Text => {
            let rows: Vec<Vec<String>> = tools
                .iter()
                .map(|t| {
                    let d = t.descriptor.clone().unwrap_or_default();
                    vec![
                        d.name,
                        t.instances.to_string(),
                        rate_text(d.rate_limit.as_ref()),
                        t.digest.get(..12).unwrap_or(&t.digest).to_owned(),
                        clip(&d.description, 60),
                    ]
                })
                .collect();
            print(table(
                &["NAME", "INSTANCES", "RATE LIMIT", "DIGEST", "DESCRIPTION"],
                &rows,
            ))?;
        }
    }
    Ok(())
}

/// `tools get NAME`: one tool, whole.
pub(crate) async fn get(
    registry: &mut Registry,
    name: String,
    output: Output,
) -> Result<(), Failure> {
    let request = registry.request(pb::GetToolRequest {
        name,
        ..Default::default()
    });
    let tool = registry.call(async |c| c.get_tool(request).await).await?;
    let json = tool_json(&tool);
    match output {
        Output::Json => print(json)?,
        Output::Text => {
            let d = tool.descriptor.clone().unwrap_or_default();
            let mut lines = vec![format!("name:        {}", d.name)];
            if !d.title.is_empty() {
                lines.push(format!("title:       {}", d.title));
            }
            lines.push(format!("description: {}", d.description));
            lines.push(format!("instances:   {}", tool.instances));
            if !d.tags.is_empty() {
                lines.push(format!("tags:        {}", d.tags.join(", ")));
            }
            if !d.version.is_empty() {
                lines.push(format!("version:     {}", d.version));
            }
            lines.push(format!("digest:      {}", tool.digest));
            lines.push(format!("rate limit:  {}", rate_text(d.rate_limit.as_ref())));
            if let Some(seconds) = json["timeout_seconds"].as_f64() {
                lines.push(format!("timeout:     {seconds}s"));
            }
            lines.push(format!("idempotent:  {}", d.idempotent));
            for (hint, value) in [
                ("read only", d.read_only),
                ("destructive", d.destructive),
                ("open world", d.open_world),
            ] {
                if let Some(value) = value {
                    lines.push(format!("{:<12} {value}", format!("{hint}:")));
                }
            }
            lines.push(format!("input schema:\n{}", pretty(&json["input_schema"])));
            if !json["output_schema"].is_null() {
                lines.push(format!(
                    "output schema:\n{}",
                    pretty(&json["output_schema"])
                ));
            }
            print(lines.join("\n"))?;
        }
    }
    Ok(())
}

/// `search QUERY`: the tools most relevant to a task in words.
pub(crate) async fn search(
    registry: &mut Registry,
    query: String,
    limit: u32,
    tags: Vec<String>,
    prefix: String,
    output: Output,
) -> Result<(), Failure> {
    let request = registry.request(pb::SearchToolsRequest {
        query,
        limit,
        tags,
        name_prefix: prefix,
        ..Default::default()
    });
    let found = registry
        .call(async |c| c.search_tools(request).await)
        .await?;
    match output {
        Output::Json => {
            let matches: Vec<Value> = found
                .matches
                .iter()
                .map(|m| {
                    let mut tool = m.tool.as_ref().map(tool_json).unwrap_or_default();
                    tool["score"] = m.score.into();
                    tool
                })
                .collect();
            print(Value::Array(matches))?;
        }
        Output::Text => {
            let rows: Vec<Vec<String>> = found
                .matches
                .iter()
                .map(|m| {
                    let d = m
                        .tool
                        .as_ref()
                        .and_then(|t| t.descriptor.clone())
                        .unwrap_or_default();
                    vec![format!("{:.2}", m.score), d.name, clip(&d.description, 60)]
                })
                .collect();
            if rows.is_empty() {
                note("no tool matches; try other words, or `toolmesh tools list`");
            } else {
                print(table(&["SCORE", "NAME", "DESCRIPTION"], &rows))?;
            }
        }
    }
    Ok(())
}

/// `export --format F`: the tools as an LLM API's `tools` parameter.
pub(crate) async fn export(
    registry: &mut Registry,
    format: pb::ExportFormat,
    tags: Vec<String>,
    prefix: String,
    names: Vec<String>,
    output: Output,
) -> Result<(), Failure> {
    let request = registry.request(pb::ExportToolsRequest {
        format: format.into(),
        tags,
        name_prefix: prefix,
        names,
    });
    let answer = registry
        .call(async |c| c.export_tools(request).await)
        .await?;
    let tools: Value = serde_json::from_str(&answer.tools_json).map_err(|e| {
        Failure::plain(
            Exit::Other,
            format!("the registry's export is not JSON: {e}"),
        )
    })?;
    let issues: Vec<Value> = answer
        .issues
        .iter()
        .map(|i| json!({"tool": i.tool, "omitted": i.omitted, "message": i.message}))
        .collect();
    match output {
        Output::Json => print(json!({"tools": tools, "issues": issues}))?,
        Output::Text => {
            print(pretty(&tools))?;
            for issue in &answer.issues {
                let what = if issue.omitted {
                    "left out"
                } else {
                    "exported without all of it"
                };
                note(format_args!(
                    "warning: {} {what}: {}",
                    issue.tool, issue.message
                ));
            }
        }
    }
    Ok(())
}

/// `watch`: the current tools, then every change, until interrupted or
/// nobody reads any more (or, with `once`, until the current tools are
/// listed).
pub(crate) async fn watch(
    registry: &mut Registry,
    once: bool,
    output: Output,
) -> Result<(), Failure> {
    let mut request = registry.request(pb::WatchToolsRequest {
        ..Default::default()
    });
    // A stream lasts as long as the user wants: no deadline.
    request.metadata_mut().remove("grpc-timeout");
    let mut stream = registry
        .call(async |c| c.watch_tools(request).await)
        .await?;
    // Between changes nothing is written: notice a reader gone meanwhile.
    let closed = crate::pipe::stdout_closed();
    tokio::pin!(closed);
    loop {
        let event = tokio::select! {
            event = stream.next() => event,
            () = &mut closed => return Err(Failure::broken_pipe()),
        };
        let Some(event) = event else { break };
        let event = event.map_err(|s| registry.failed(&s))?;
        let kind = event
            .kind()
            .as_str_name()
            .trim_start_matches("KIND_")
            .to_owned();
        match output {
            Output::Json => {
                let tool = event.tool.as_ref().map(tool_json);
                print(json!({"kind": kind, "tool": tool}))?;
            }
            Output::Text => match &event.tool {
                Some(tool) => {
                    let name = tool
                        .descriptor
                        .as_ref()
                        .map(|d| d.name.as_str())
                        .unwrap_or_default();
                    let plural = if tool.instances == 1 { "" } else { "s" };
                    print(format_args!(
                        "{kind:<8} {name} ({} instance{plural})",
                        tool.instances
                    ))?;
                }
                None => print(&kind)?,
            },
        }
        if once && event.kind() == pb::tool_event::Kind::Synced {
            break;
        }
    }
    Ok(())
}

/// `invoke NAME [JSON] [--arg k=v ...]`.
pub(crate) async fn invoke(
    registry: &mut Registry,
    call: pb::InvokeRequest,
    output: Output,
) -> Result<(), Failure> {
    let name = call.tool.clone();
    let request = registry.request(call);
    let response = registry.call(async |c| c.invoke(request).await).await?;
    answer(&name, &response, output)
}

/// The call `invoke NAME [JSON] [--arg k=v ...]` makes: the arguments
/// built from `json_arguments` and `pairs` (typed by the tool's schema,
/// which is asked for only when there are pairs).
pub(crate) async fn invoke_request(
    registry: &mut Registry,
    name: String,
    json_arguments: Option<String>,
    pairs: Vec<String>,
    idempotency_key: Option<String>,
) -> Result<pb::InvokeRequest, Failure> {
    let schema = if pairs.is_empty() {
        Value::Null
    } else {
        // Typing --arg values needs the tool's schema.
        let request = registry.request(pb::GetToolRequest {
            name: name.clone(),
            ..Default::default()
        });
        let tool = registry.call(async |c| c.get_tool(request).await).await?;
        tool_json(&tool)["input_schema"].take()
    };
    let arguments = arguments::build(json_arguments.as_deref(), &pairs, &schema)
        .map_err(|e| Failure::plain(Exit::Usage, e.0))?;
    Ok(pb::InvokeRequest {
        tool: name,
        arguments_json: arguments.to_string(),
        idempotency_key: idempotency_key.unwrap_or_default(),
        tool_digest: String::new(),
        ..Default::default()
    })
}

/// A tool's answer as JSON: `invoke --output json`'s document.
pub(crate) fn answer_json(response: &pb::InvokeResponse) -> Value {
    json!({
        "result": result_of(response),
        "is_error": response.is_error,
        "instance_id": response.instance_id,
        "attempts": response.attempts,
    })
}

/// The result of `response`: its JSON, or its text when it is not JSON.
fn result_of(response: &pb::InvokeResponse) -> Value {
    serde_json::from_str(&response.result_json)
        .unwrap_or_else(|_| Value::String(response.result_json.clone()))
}

/// Prints what tool `name` answered, as `invoke` does: the result (pretty
/// JSON, or with `--output json` [`answer_json`]); a tool that ran and
/// failed is [`Exit::ToolFailed`] with its message.
pub(crate) fn answer(
    name: &str,
    response: &pb::InvokeResponse,
    output: Output,
) -> Result<(), Failure> {
    let result = result_of(response);
    match output {
        Output::Json => print(answer_json(response))?,
        Output::Text if !response.is_error => print(pretty(&result))?,
        Output::Text => {}
    }
    if response.is_error {
        return Err(Failure {
            exit: Exit::ToolFailed,
            message: format!("{name} ran and failed: {}", tool_error(&result)),
            details: Vec::new(),
            json: Value::Null,
        });
    }
    Ok(())
}

/// A tool's error (`is_error`'s result) in words.
pub(crate) fn tool_error(result: &Value) -> String {
    match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
