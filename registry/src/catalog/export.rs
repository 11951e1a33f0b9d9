//! `ExportTools`: the catalog as each LLM API takes it in its request's
//! `tools` field. One rule per format, documented in `docs/export.md`:
//!
//! - **Names** pass as they are or not at all: a tool whose name a format
//!   cannot express is left out and reported, never renamed (an agent
//!   must be able to call back the name the model picks).
//! - **Schemas** pass through unchanged, with one transformation where a
//!   format needs it: every format calls a tool with a JSON object, so an
//!   input schema with no `type` at its root (or the empty schema, or
//!   `true`) is given `"type": "object"`. A tool whose root schema is of
//!   another type is left out and reported.
//! - **What a format has no field for** (a title, the hints, an output
//!   schema) is left out of that format and reported, the tool kept.

use serde_json::{Map, Value, json};
use toolmesh_proto::pb::{self, ExportFormat};

/// Longest name OpenAI, Anthropic and Gemini take.
const MAX_FUNCTION_NAME: usize = 64;

/// What one export produced: the JSON array, and what did not fit.
#[derive(Debug, Default)]
pub(crate) struct Export {
    /// The value of the API's `tools` field.
    pub tools: Vec<Value>,
    /// One entry per tool and problem.
    pub issues: Vec<pb::ExportIssue>,
}

impl Export {
    fn omit(&mut self, tool: &str, message: impl Into<String>) {
        self.issues.push(pb::ExportIssue {
            tool: tool.to_owned(),
            omitted: true,
            message: message.into(),
        });
    }

    fn note(&mut self, tool: &str, message: impl Into<String>) {
        self.issues.push(pb::ExportIssue {
            tool: tool.to_owned(),
            omitted: false,
            message: message.into(),
        });
    }
}

/// The API a format is for, as messages name it.
fn api(format: ExportFormat) -> &'static str {
    match format {
        ExportFormat::OpenaiChat | ExportFormat::OpenaiResponses => "OpenAI",
        ExportFormat::Anthropic => "Anthropic",
        ExportFormat::Gemini => "Gemini",
        ExportFormat::Mcp => "MCP",
        ExportFormat::Unspecified => "no format",
    }
}

/// Whether `format` takes `name` as a function name: OpenAI and Anthropic
/// take `[A-Za-z0-9_-]{1,64}`; Gemini also takes `.` and `:` but must start
/// with a letter or `_`; MCP takes every toolmesh name.
fn name_allowed(format: ExportFormat, name: &str) -> Result<(), &'static str> {
    let short = !name.is_empty() && name.len() <= MAX_FUNCTION_NAME;
    match format {
        ExportFormat::OpenaiChat | ExportFormat::OpenaiResponses | ExportFormat::Anthropic => {
            if short
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                Ok(())
            } else {
                Err("takes only letters, digits, '_' and '-' in a function name (no '.')")
            }
        }
        ExportFormat::Gemini => {
            let first_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
            let rest_ok = name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
            if short && first_ok && rest_ok {
                Ok(())
            } else {
                Err("takes a function name starting with a letter or '_'")
            }
        }
        ExportFormat::Mcp | ExportFormat::Unspecified => Ok(()),
    }
}

/// The input schema as every format takes it: an object schema. `Err`
/// when the schema's root is of another type.
fn arguments_schema(descriptor: &pb::ToolDescriptor) -> Result<Value, String> {
    let text = descriptor.input_schema_json.trim();
    let schema = if text.is_empty() {
        Value::Bool(true)
    } else {
        serde_json::from_str(text).map_err(|e| format!("its input schema is not JSON: {e}"))?
    };
    match schema {
        Value::Bool(true) => Ok(json!({"type": "object"})),
        Value::Object(mut object) => match object.get("type") {
            None => {
                object.insert("type".into(), "object".into());
                Ok(Value::Object(object))
            }
            Some(Value::String(kind)) if kind == "object" => Ok(Value::Object(object)),
            Some(other) => Err(format!(
                "its arguments are declared {other}, not a JSON object, and every LLM API calls a tool with an object"
            )),
        },
        _ => Err("its input schema refuses every argument".into()),
    }
}

/// The output schema, if the tool declares one that is an object.
fn result_schema(descriptor: &pb::ToolDescriptor) -> Option<Value> {
    let text = descriptor.output_schema_json.trim();
    if text.is_empty() {
        return None;
    }
    serde_json::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

/// MCP's tool annotations, from the descriptor's title and hints; `None`
/// when it says nothing.
fn annotations(descriptor: &pb::ToolDescriptor) -> Option<Value> {
    let mut hints = Map::new();
    if !descriptor.title.is_empty() {
        hints.insert("title".into(), descriptor.title.clone().into());
    }
    for (key, hint) in [
        ("readOnlyHint", descriptor.read_only),
        ("destructiveHint", descriptor.destructive),
        // A plain bool in the descriptor: false is "not said", as MCP's
        // default.
        ("idempotentHint", descriptor.idempotent.then_some(true)),
        ("openWorldHint", descriptor.open_world),
    ] {
        if let Some(hint) = hint {
            hints.insert(key.into(), hint.into());
        }
    }
    (!hints.is_empty()).then_some(Value::Object(hints))
}

/// Whether the descriptor says anything only MCP has fields for.
fn has_hints(descriptor: &pb::ToolDescriptor) -> bool {
    !descriptor.title.is_empty()
        || descriptor.read_only.is_some()
        || descriptor.destructive.is_some()
        || descriptor.open_world.is_some()
        || descriptor.idempotent
}

/// What an export reads of a tool: its descriptor, and its digest where
/// the catalog knows it (MCP carries it in `_meta`).
pub(crate) trait Exported {
    /// The descriptor.
    fn descriptor(&self) -> &pb::ToolDescriptor;
    /// Its digest, if known.
    fn digest(&self) -> Option<&str> {
        None
    }
}

impl Exported for pb::ToolDescriptor {
    fn descriptor(&self) -> &pb::ToolDescriptor {
        self
    }
}

impl Exported for crate::catalog::ToolState {
    fn descriptor(&self) -> &pb::ToolDescriptor {
        &self.descriptor
    }

    fn digest(&self) -> Option<&str> {
        Some(&self.digest)
    }
}

impl Exported for pb::Tool {
    fn descriptor(&self) -> &pb::ToolDescriptor {
        static NONE: std::sync::LazyLock<pb::ToolDescriptor> =
            std::sync::LazyLock::new(pb::ToolDescriptor::default);
        self.descriptor.as_ref().unwrap_or(&NONE)
    }

    fn digest(&self) -> Option<&str> {
        (!self.digest.is_empty()).then_some(self.digest.as_str())
    }
}

impl<T: Exported> Exported for std::sync::Arc<T> {
    fn descriptor(&self) -> &pb::ToolDescriptor {
        T::descriptor(self)
    }

    fn digest(&self) -> Option<&str> {
        T::digest(self)
    }
}

/// The `_meta` key MCP entries carry the digest under.
pub(crate) const DIGEST_META: &str = "dev.toolmesh/digest";
/// The `_meta` key MCP entries carry the version under.
pub(crate) const VERSION_META: &str = "dev.toolmesh/version";

/// Exports `tools`, in order, as `format` takes them. Stops (and
/// reports each tool left) once the JSON would pass `limit_bytes`.
pub(crate) fn export<'a, T: Exported + 'a>(
    format: ExportFormat,
    tools: impl IntoIterator<Item = &'a T>,
    limit_bytes: usize,
) -> Export {
    let mut out = Export::default();
    let mut size = 2;
    let mut full = false;
    for tool in tools {
        let descriptor = tool.descriptor();
        let name = descriptor.name.as_str();
        if full {
            out.omit(
                name,
                "the answer reached the message size limit; narrow it with tags, name_prefix or names",
            );
            continue;
        }
        if let Err(why) = name_allowed(format, name) {
            out.omit(name, format!("{} {why}", api(format)));
            continue;
        }
        let parameters = match arguments_schema(descriptor) {
            Ok(schema) => schema,
            Err(why) => {
                out.omit(name, why);
                continue;
            }
        };
        let mut entry = entry(format, descriptor, parameters, &mut out);
        if format == ExportFormat::Mcp {
            meta(&mut entry, descriptor, tool.digest());
        }
        let cost = entry.to_string().len() + 1;
        if size + cost > limit_bytes {
            full = true;
            out.omit(
                name,
                "the answer reached the message size limit; narrow it with tags, name_prefix or names",
            );
            continue;
        }
        size += cost;
        out.tools.push(entry);
    }
    if format == ExportFormat::Gemini {
        out.tools = vec![json!({ "functionDeclarations": out.tools })];
    }
    out
}

/// MCP's `_meta` of one tool: its version and digest, when it has them.
fn meta(entry: &mut Value, descriptor: &pb::ToolDescriptor, digest: Option<&str>) {
    let mut meta = Map::new();
    if let Some(digest) = digest {
        meta.insert(DIGEST_META.into(), digest.into());
    }
    if !descriptor.version.is_empty() {
        meta.insert(VERSION_META.into(), descriptor.version.clone().into());
    }
    if let (Value::Object(tool), false) = (entry, meta.is_empty()) {
        tool.insert("_meta".into(), Value::Object(meta));
    }
}

/// One tool in `format`, noting in `out` what the format leaves out.
fn entry(
    format: ExportFormat,
    descriptor: &pb::ToolDescriptor,
    parameters: Value,
    out: &mut Export,
) -> Value {
    let name = descriptor.name.as_str();
    let description = descriptor.description.as_str();
    let output = result_schema(descriptor);
    if format != ExportFormat::Mcp && has_hints(descriptor) {
        out.note(
            name,
            format!(
                "{} has no field for the title and hints (read_only, destructive, idempotent, open_world); left out",
                api(format)
            ),
        );
    }
    let no_output = |out: &mut Export| {
        if output.is_some() {
            out.note(
                name,
                format!(
                    "{} has no field for the output schema; left out",
                    api(format)
                ),
            );
        }
    };
    match format {
        ExportFormat::OpenaiChat => {
            no_output(out);
            json!({
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": parameters,
                    "strict": false,
                },
            })
        }
        ExportFormat::OpenaiResponses => {
            no_output(out);
            json!({
                "type": "function",
                "name": name,
                "description": description,
                "parameters": parameters,
                "strict": false,
            })
        }
        ExportFormat::Anthropic => {
            no_output(out);
            json!({
                "name": name,
                "description": description,
                "input_schema": parameters,
            })
        }
        ExportFormat::Gemini => {
            let mut declaration = json!({
                "name": name,
                "description": description,
                "parametersJsonSchema": parameters,
            });
            if let Some(output) = output {
                declaration["responseJsonSchema"] = output;
            }
            declaration
        }
        ExportFormat::Mcp | ExportFormat::Unspecified => {
            let mut tool = Map::new();
            tool.insert("name".into(), name.into());
            if !descriptor.title.is_empty() {
                tool.insert("title".into(), descriptor.title.clone().into());
            }
            tool.insert("description".into(), description.into());
            tool.insert("inputSchema".into(), parameters);
            if let Some(output) = output {
                tool.insert("outputSchema".into(), output);
            }
            if let Some(annotations) = annotations(descriptor) {
                tool.insert("annotations".into(), annotations);
            }
            Value::Object(tool)
        }
    }
}

#[cfg(test)]
mod tests;
