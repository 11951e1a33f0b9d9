//! An agent loop, runnable offline: a scripted stand-in plays the LLM
//! (the Rust twin of `examples/agents/python/agent_loop.py`).
//!
//! It searches the catalog for the task (`SearchTools`), gives the model
//! the few tools found as the LLM API takes them (`ExportTools`), runs the
//! call the model makes, and when the registry refuses the arguments hands
//! the model the violations (each names the field to fix and what is
//! allowed) so that it corrects the call; a rate-limited call waits the
//! delay the registry gives. The stand-in slips the way models do (the
//! right value under the wrong name) and repairs its call from the
//! violations alone.

use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Map, Value};
use tonic::Code;
use tonic_types::StatusExt as _;
use toolmesh_proto::pb;

use crate::agent::Client;

/// Most calls one task may take.
const MAX_TURNS: usize = 4;
/// Longest the loop waits, in all, on rate limits.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// A tool call the model asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Map<String, Value>,
}

/// One turn of the transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The tools the search found, best first.
    Search(Vec<String>),
    /// A call made.
    Call(Call),
    /// The registry refused the arguments: (field, what is wrong) pairs.
    Refused(Vec<(String, String)>),
    /// Rate limited; waited this long.
    Limited(Duration),
    /// The tool's result.
    Result(Value),
}

/// Plays the LLM: takes the first tool offered and, as models do, puts the
/// value it means (the task's quoted text) under a name the tool does not
/// declare; given violations, moves the unexpected value to the missing
/// required field and drops any other unexpected one.
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    /// The wrong name its first call uses.
    pub slip: String,
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self {
            slip: "input".into(),
        }
    }
}

impl ScriptedModel {
    /// The first call for `task`, given `tools` as OpenAI Chat Completions
    /// definitions.
    pub fn first_call(&self, task: &str, tools: &[Value]) -> anyhow::Result<Call> {
        let name = tools
            .first()
            .and_then(|t| t["function"]["name"].as_str())
            .context("no tool offered")?;
        let quoted = task.split('"').nth(1).unwrap_or(task);
        let mut arguments = Map::new();
        arguments.insert(self.slip.clone(), quoted.into());
        Ok(Call {
            tool: name.to_owned(),
            arguments,
        })
    }

    /// `call` corrected from `violations`, or `None` if they leave nothing
    /// to change.
    pub fn repair(&self, call: &Call, violations: &[(String, String)]) -> Option<Call> {
        let field = |path: &str| path.trim_start_matches('/').to_owned();
        let missing: Vec<String> = violations
            .iter()
            .filter(|(_, m)| m.ends_with("is a required property"))
            .map(|(p, _)| field(p))
            .collect();
        let unexpected: Vec<String> = violations
            .iter()
            .filter(|(_, m)| m.starts_with("unexpected property"))
            .map(|(p, _)| field(p))
            .collect();
        let mut arguments = call.arguments.clone();
        if let ([to], [from]) = (missing.as_slice(), unexpected.as_slice()) {
            let value = arguments.remove(from)?;
            arguments.insert(to.clone(), value);
        } else {
            for name in &unexpected {
                arguments.remove(name);
            }
        }
        (arguments != call.arguments).then(|| Call {
            tool: call.tool.clone(),
            arguments,
        })
    }
}

/// Runs the loop for `task`; returns the transcript, ending with the
/// result.
pub async fn run(
    client: &mut Client,
    task: &str,
    model: &ScriptedModel,
) -> anyhow::Result<Vec<Step>> {
    let mut transcript = Vec::new();
    let found = client
        .search_tools(pb::SearchToolsRequest {
            query: task.into(),
            limit: 3,
            ..Default::default()
        })
        .await?
        .into_inner();
    let names: Vec<String> = found
        .matches
        .iter()
        .filter_map(|m| m.tool.as_ref()?.descriptor.as_ref().map(|d| d.name.clone()))
        .collect();
    transcript.push(Step::Search(names.clone()));
    let exported = client
        .export_tools(pb::ExportToolsRequest {
            format: pb::ExportFormat::OpenaiChat.into(),
            names,
            ..Default::default()
        })
        .await?
        .into_inner();
    let tools: Vec<Value> = serde_json::from_str(&exported.tools_json)?;
    let mut call = model.first_call(task, &tools)?;
    let mut waited = Duration::ZERO;
    for _ in 0..MAX_TURNS {
        transcript.push(Step::Call(call.clone()));
        let request = pb::InvokeRequest {
            tool: call.tool.clone(),
            arguments_json: Value::Object(call.arguments.clone()).to_string(),
            idempotency_key: String::new(),
        };
        let status = match client.invoke(request).await {
            Ok(response) => {
                let response = response.into_inner();
                let result = serde_json::from_str(&response.result_json)
                    .unwrap_or(Value::String(response.result_json));
                transcript.push(Step::Result(result));
                return Ok(transcript);
            }
            Err(status) => status,
        };
        let details = status.get_error_details();
        match status.code() {
            Code::InvalidArgument => {
                let violations: Vec<(String, String)> = details
                    .bad_request()
                    .map(|b| {
                        b.field_violations
                            .iter()
                            .map(|v| (v.field.clone(), v.description.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                transcript.push(Step::Refused(violations.clone()));
                match model.repair(&call, &violations) {
                    Some(repaired) => call = repaired,
                    None => bail!("the model cannot fix {status:?}"),
                }
            }
            Code::ResourceExhausted => {
                let delay = details
                    .retry_info()
                    .and_then(|r| r.retry_delay)
                    .unwrap_or(Duration::from_secs(1));
                if waited + delay > MAX_WAIT {
                    bail!("rate limited for too long: {status:?}");
                }
                transcript.push(Step::Limited(delay));
                tokio::time::sleep(delay).await;
                waited += delay;
            }
            _ => bail!("{status:?}"),
        }
    }
    bail!("no result in {MAX_TURNS} turns: {transcript:?}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn the_model_moves_the_misnamed_value_to_the_missing_field() {
        let model = ScriptedModel::default();
        let tools = [json!({"type": "function", "function": {"name": "word_count"}})];
        let call = model
            .first_call(r#"How many words in "a b c"?"#, &tools)
            .unwrap();
        assert_eq!(
            Value::Object(call.arguments.clone()),
            json!({"input": "a b c"})
        );
        let violations = [
            ("/input".to_owned(), r#"unexpected property "input": not allowed here; the allowed properties are "text""#.to_owned()),
            ("/text".to_owned(), r#""text" is a required property"#.to_owned()),
        ];
        let repaired = model.repair(&call, &violations).unwrap();
        assert_eq!(
            Value::Object(repaired.arguments.clone()),
            json!({"text": "a b c"})
        );
        assert_eq!(
            model.repair(&repaired, &[]),
            None,
            "nothing to fix, no new call"
        );
    }
}
