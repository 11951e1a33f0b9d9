//! The `arguments` shorthand (TrustGraph / MCP style: a list of named, typed
//! arguments) and its compilation to a JSON Schema.
//!
//! ```yaml
//! arguments:
//!   - {name: text, type: string, description: The text, required: true}
//!   - {name: mode, type: string, enum: [fast, exact]}
//!   - {name: ids, type: array, items: integer}
//! ```
//! compiles to `{"type":"object","properties":{...},"required":["text"],
//! "additionalProperties":false}`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The types an argument may have.
pub const TYPES: [&str; 6] = ["string", "integer", "number", "boolean", "array", "object"];

/// One declared argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Argument {
    /// The property name.
    pub name: String,
    /// One of [`TYPES`].
    #[serde(rename = "type")]
    pub kind: String,
    /// What the argument means, for the LLM.
    #[serde(default)]
    pub description: String,
    /// Whether the argument must be present (default false).
    #[serde(default)]
    pub required: bool,
    /// The allowed values, if restricted; each must have the argument's type.
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub enum_values: Option<Vec<Value>>,
    /// For `array` arguments: the element type, either a type name
    /// (`items: string`) or a JSON Schema (`items: {type: string, minLength: 1}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Value>,
}

/// Why an argument list does not compile: which argument, which of its
/// keys, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("arguments[{index}].{key}: {problem}")]
pub struct ArgumentsError {
    /// The argument's position in the list (0-based).
    pub index: usize,
    /// The key at fault: `name`, `type`, `enum` or `items`.
    pub key: &'static str,
    /// What is wrong, and what is allowed.
    pub problem: String,
}

fn error(index: usize, key: &'static str, problem: impl Into<String>) -> ArgumentsError {
    ArgumentsError {
        index,
        key,
        problem: problem.into(),
    }
}

fn unknown_type(kind: &str) -> String {
    format!("found {kind:?}, expected one of {}", TYPES.join(", "))
}

/// Compiles an argument list to a JSON Schema for an object with exactly
/// those properties.
pub fn compile(args: &[Argument]) -> Result<Value, ArgumentsError> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut seen = HashMap::new();
    for (index, arg) in args.iter().enumerate() {
        if arg.name.is_empty() {
            return Err(error(
                index,
                "name",
                "found an empty name, expected the argument's name, e.g. text",
            ));
        }
        if let Some(first) = seen.insert(arg.name.as_str(), index) {
            return Err(error(
                index,
                "name",
                format!(
                    "{:?} is already the name of arguments[{first}]; each argument needs a name of its own",
                    arg.name
                ),
            ));
        }
        properties.insert(arg.name.clone(), property(index, arg)?);
        if arg.required {
            required.push(Value::String(arg.name.clone()));
        }
    }
    Ok(json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }))
}

fn property(index: usize, arg: &Argument) -> Result<Value, ArgumentsError> {
    if !TYPES.contains(&arg.kind.as_str()) {
        return Err(error(index, "type", unknown_type(&arg.kind)));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), Value::String(arg.kind.clone()));
    if !arg.description.is_empty() {
        schema.insert("description".into(), Value::String(arg.description.clone()));
    }
    if let Some(items) = &arg.items {
        if arg.kind != "array" {
            return Err(error(
                index,
                "items",
                format!("only applies to arguments of type array, not {}", arg.kind),
            ));
        }
        schema.insert("items".into(), items_schema(index, items)?);
    }
    if let Some(values) = &arg.enum_values {
        if values.is_empty() {
            return Err(error(
                index,
                "enum",
                "found an empty list, expected the allowed values, e.g. [fast, exact]",
            ));
        }
        if let Some(bad) = values.iter().find(|v| !has_type(v, &arg.kind)) {
            return Err(error(
                index,
                "enum",
                format!("value {bad} is not of type {}", arg.kind),
            ));
        }
        schema.insert("enum".into(), Value::Array(values.clone()));
    }
    Ok(Value::Object(schema))
}

fn items_schema(index: usize, items: &Value) -> Result<Value, ArgumentsError> {
    match items {
        Value::String(kind) if TYPES.contains(&kind.as_str()) => Ok(json!({ "type": kind })),
        Value::String(kind) => Err(error(
            index,
            "items",
            format!("{}, or a JSON Schema", unknown_type(kind)),
        )),
        Value::Object(_) | Value::Bool(_) => Ok(items.clone()),
        other => Err(error(
            index,
            "items",
            format!("found {other}, expected a type name, e.g. string, or a JSON Schema"),
        )),
    }
}

/// Whether `value` is an instance of the JSON Schema type `kind`.
fn has_type(value: &Value, kind: &str) -> bool {
    match kind {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
