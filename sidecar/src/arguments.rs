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

use std::collections::HashSet;

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

/// Why an argument list does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentsError {
    /// An argument has an empty name.
    #[error("argument #{0} has an empty name")]
    EmptyName(usize),
    /// Two arguments share a name.
    #[error("argument {0:?} is declared twice")]
    Duplicate(String),
    /// An argument's type is not one of [`TYPES`].
    #[error("argument {name:?} has unknown type {kind:?} (expected one of {expected})", expected = TYPES.join(", "))]
    UnknownType {
        /// The argument.
        name: String,
        /// The type it declared.
        kind: String,
    },
    /// `items` was given for an argument that is not an array, or is invalid.
    #[error("argument {name:?}: {problem}")]
    InvalidItems {
        /// The argument.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// `enum` is empty or holds a value of the wrong type.
    #[error("argument {name:?}: {problem}")]
    InvalidEnum {
        /// The argument.
        name: String,
        /// What is wrong.
        problem: String,
    },
}

/// Compiles an argument list to a JSON Schema for an object with exactly
/// those properties.
pub fn compile(args: &[Argument]) -> Result<Value, ArgumentsError> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut seen = HashSet::new();
    for (index, arg) in args.iter().enumerate() {
        if arg.name.is_empty() {
            return Err(ArgumentsError::EmptyName(index));
        }
        if !seen.insert(arg.name.as_str()) {
            return Err(ArgumentsError::Duplicate(arg.name.clone()));
        }
        properties.insert(arg.name.clone(), property(arg)?);
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

fn property(arg: &Argument) -> Result<Value, ArgumentsError> {
    if !TYPES.contains(&arg.kind.as_str()) {
        return Err(ArgumentsError::UnknownType {
            name: arg.name.clone(),
            kind: arg.kind.clone(),
        });
    }
    let mut schema = Map::new();
    schema.insert("type".into(), Value::String(arg.kind.clone()));
    if !arg.description.is_empty() {
        schema.insert("description".into(), Value::String(arg.description.clone()));
    }
    if let Some(items) = &arg.items {
        if arg.kind != "array" {
            return Err(ArgumentsError::InvalidItems {
                name: arg.name.clone(),
                problem: format!("`items` is only allowed on arrays, not on {}", arg.kind),
            });
        }
        schema.insert("items".into(), items_schema(&arg.name, items)?);
    }
    if let Some(values) = &arg.enum_values {
        if values.is_empty() {
            return Err(ArgumentsError::InvalidEnum {
                name: arg.name.clone(),
                problem: "`enum` must list at least one value".into(),
            });
        }
        if let Some(bad) = values.iter().find(|v| !has_type(v, &arg.kind)) {
            return Err(ArgumentsError::InvalidEnum {
                name: arg.name.clone(),
                problem: format!("enum value {bad} is not of type {}", arg.kind),
            });
        }
        schema.insert("enum".into(), Value::Array(values.clone()));
    }
    Ok(Value::Object(schema))
}

fn items_schema(name: &str, items: &Value) -> Result<Value, ArgumentsError> {
    match items {
        Value::String(kind) if TYPES.contains(&kind.as_str()) => Ok(json!({ "type": kind })),
        Value::String(kind) => Err(ArgumentsError::UnknownType {
            name: format!("{name}[]"),
            kind: kind.clone(),
        }),
        Value::Object(_) | Value::Bool(_) => Ok(items.clone()),
        other => Err(ArgumentsError::InvalidItems {
            name: name.to_owned(),
            problem: format!("`items` must be a type name or a JSON Schema, not {other}"),
        }),
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
