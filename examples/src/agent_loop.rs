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
//!
//! Each call carries the digest of the definition the model was shown
//! (`InvokeRequest.tool_digest`, from the search's matches). If the tool
//! changed since, the registry refuses the call (`FAILED_PRECONDITION`,
//! `ErrorInfo` `TOOL_DIGEST_MISMATCH`, read by [`ToolChanged::from_status`])
//! and nothing runs: the loop records which fields changed, fetches the
//! definitions again and shows them to the model, which calls again with
//! the new digest (within the same `MAX_TURNS` calls).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Map, Value};
use tonic::{Code, Status};
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
    /// The registry refused the call: the tool is no longer the definition
    /// the model was shown. Nothing ran; the loop fetches the definitions
    /// again (a new [`Step::Search`]).
    Changed {
        /// The tool.
        tool: String,
        /// The fields that changed, as the registry names them
        /// (`description`, `input_schema_json`, ...).
        fields: Vec<String>,
    },
    /// The tool's result.
    Result(Value),
}

/// The `ErrorInfo` reason of a call bound to a definition the tool no
/// longer has.
pub const TOOL_DIGEST_MISMATCH: &str = "TOOL_DIGEST_MISMATCH";

/// What the registry says of a tool that changed since the agent was shown
/// it: `FAILED_PRECONDITION` with `ErrorInfo` [`TOOL_DIGEST_MISMATCH`]
/// (metadata `tool`, `shown_digest`, `live_digest`, `changed`) and a
/// `PreconditionFailure` violation (type `TOOL_CHANGED`) per difference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolChanged {
    /// The tool.
    pub tool: String,
    /// The digest the call carried: the definition the model was shown.
    pub shown_digest: String,
    /// The digest of the tool's live definition.
    pub live_digest: String,
    /// The fields that changed (`description`, `input_schema_json`, ...);
    /// `["unknown"]` when the registry never served the shown definition.
    pub changed: Vec<String>,
    /// How each field changed, one line each
    /// (`description: shown "..." != live "..."`).
    pub differences: Vec<String>,
}

impl ToolChanged {
    /// The change `status` reports, or `None` if it is any other status
    /// (another `FAILED_PRECONDITION`, such as an approval, included).
    pub fn from_status(status: &Status) -> Option<Self> {
        if status.code() != Code::FailedPrecondition {
            return None;
        }
        let details = status.get_error_details();
        let info = details
            .error_info()
            .filter(|i| i.reason == TOOL_DIGEST_MISMATCH)?;
        let field = |key: &str| info.metadata.get(key).cloned().unwrap_or_default();
        let changed = field("changed")
            .split(',')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        let differences = details
            .precondition_failure()
            .map(|p| {
                p.violations
                    .iter()
                    .filter(|v| v.r#type == "TOOL_CHANGED")
                    .map(|v| v.description.clone())
                    .collect()
            })
            .unwrap_or_default();
        Some(Self {
            tool: field("tool"),
            shown_digest: field("shown_digest"),
            live_digest: field("live_digest"),
            changed,
            differences,
        })
    }
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

    /// `call` again, once the model is shown `tools` anew (its tool had
    /// changed): the same call if its tool is still offered (the registry
    /// checks its arguments against the new schema, and its violations
    /// say what to fix), else a first call among the tools now offered.
    pub fn revise(&self, task: &str, call: &Call, tools: &[Value]) -> anyhow::Result<Call> {
        let offered = tools
            .iter()
            .any(|t| t["function"]["name"].as_str() == Some(call.tool.as_str()));
        if offered {
            Ok(call.clone())
        } else {
            self.first_call(task, tools)
        }
    }
}

/// The tools shown to the model: as the LLM API takes them, and the
/// digest of each definition, by name.
struct Offer {
    names: Vec<String>,
    tools: Vec<Value>,
    digests: HashMap<String, String>,
}

impl Offer {
    /// Searches the catalog for `task` (`SearchTools`) and exports the
    /// tools found as OpenAI Chat Completions definitions (`ExportTools`).
    async fn fetch(client: &mut Client, task: &str) -> anyhow::Result<Self> {
        let found = client
            .search_tools(pb::SearchToolsRequest {
                query: task.into(),
                limit: 3,
                ..Default::default()
            })
            .await?
            .into_inner();
        let mut names = Vec::new();
        let mut digests = HashMap::new();
        for tool in found.matches.into_iter().filter_map(|m| m.tool) {
            if let Some(descriptor) = tool.descriptor {
                names.push(descriptor.name.clone());
                digests.insert(descriptor.name, tool.digest);
            }
        }
        let exported = client
            .export_tools(pb::ExportToolsRequest {
                format: pb::ExportFormat::OpenaiChat.into(),
                names: names.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        Ok(Self {
            names,
            tools: serde_json::from_str(&exported.tools_json)?,
            digests,
        })
    }

    /// The digest of `tool` as shown (empty if it was not: the call is
    /// then bound to no definition).
    fn digest(&self, tool: &str) -> String {
        self.digests.get(tool).cloned().unwrap_or_default()
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
    let mut offer = Offer::fetch(client, task).await?;
    transcript.push(Step::Search(offer.names.clone()));
    let mut call = model.first_call(task, &offer.tools)?;
    let mut waited = Duration::ZERO;
    for _ in 0..MAX_TURNS {
        transcript.push(Step::Call(call.clone()));
        let request = pb::InvokeRequest {
            tool: call.tool.clone(),
            arguments_json: Value::Object(call.arguments.clone()).to_string(),
            tool_digest: offer.digest(&call.tool),
            ..Default::default()
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
        if let Some(change) = ToolChanged::from_status(&status) {
            // Nothing ran: show the model the definitions as they are now.
            transcript.push(Step::Changed {
                tool: change.tool,
                fields: change.changed,
            });
            offer = Offer::fetch(client, task).await?;
            transcript.push(Step::Search(offer.names.clone()));
            call = model.revise(task, &call, &offer.tools)?;
            continue;
        }
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
    use tonic_types::ErrorDetails;

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

    /// A refusal built the way the registry builds it
    /// (`RegistryError::ToolChanged`).
    fn digest_mismatch(reason: &str) -> Status {
        let metadata = [
            ("tool", "word_count"),
            ("shown_digest", &"a".repeat(64)),
            ("live_digest", &"b".repeat(64)),
            ("changed", "description,input_schema_json"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect::<HashMap<_, _>>();
        let mut details = ErrorDetails::with_error_info(reason, "toolmesh.dev", metadata);
        details.add_precondition_failure_violation(
            "TOOL_CHANGED",
            "tool:word_count",
            r#"description: shown "Count words" != live "Count the words""#,
        );
        details.add_precondition_failure_violation(
            "TOOL_CHANGED",
            "tool:word_count",
            "input_schema_json: shown {} != live {\"type\":\"object\"}",
        );
        Status::with_error_details(
            Code::FailedPrecondition,
            "tool \"word_count\" is not the definition the agent was shown",
            details,
        )
    }

    #[test]
    fn a_digest_mismatch_names_the_tool_both_digests_and_the_changed_fields() {
        let change = ToolChanged::from_status(&digest_mismatch(TOOL_DIGEST_MISMATCH))
            .expect("a changed tool");
        assert_eq!(change.tool, "word_count");
        assert_eq!(change.shown_digest, "a".repeat(64));
        assert_eq!(change.live_digest, "b".repeat(64));
        assert_eq!(change.changed, ["description", "input_schema_json"]);
        assert_eq!(change.differences.len(), 2, "{change:?}");
        assert!(
            change.differences[0].starts_with("description: shown"),
            "{change:?}"
        );
    }

    #[test]
    fn other_refusals_are_no_change() {
        assert_eq!(
            ToolChanged::from_status(&digest_mismatch("APPROVAL_REQUIRED")),
            None
        );
        let details = ErrorDetails::with_error_info(
            TOOL_DIGEST_MISMATCH,
            "toolmesh.dev",
            HashMap::<String, String>::new(),
        );
        let wrong_code = Status::with_error_details(Code::InvalidArgument, "no", details);
        assert_eq!(ToolChanged::from_status(&wrong_code), None);
        assert_eq!(
            ToolChanged::from_status(&Status::failed_precondition("no details")),
            None
        );
    }

    #[test]
    fn shown_the_new_definitions_the_model_keeps_a_call_whose_tool_is_still_offered() {
        let model = ScriptedModel::default();
        let task = r#"How many words in "a b c"?"#;
        let word_count = json!({"type": "function", "function": {"name": "word_count"}});
        let call = Call {
            tool: "word_count".into(),
            arguments: json!({"text": "a b c"})
                .as_object()
                .cloned()
                .expect("an object"),
        };
        let kept = model
            .revise(task, &call, std::slice::from_ref(&word_count))
            .expect("a call");
        assert_eq!(kept, call);
        let other = [json!({"type": "function", "function": {"name": "count_words"}})];
        let anew = model.revise(task, &call, &other).expect("a call");
        assert_eq!(anew.tool, "count_words");
        assert_eq!(Value::Object(anew.arguments), json!({"input": "a b c"}));
    }
}
