//! JSON Schema compilation (once, at announce) and argument validation (every
//! `Invoke`).
//!
//! Schemas are compiled offline: a `$ref` to anything outside the schema is
//! refused at compile time, never fetched. Patterns use the linear-time
//! `regex` engine with a size limit, so a hostile `pattern` cannot stall a
//! validation.

use jsonschema::{PatternOptions, Validator, error::ValidationErrorKind};
use serde_json::Value;
use toolmesh_telemetry::shown::clip;

use crate::catalog::strict_json::{self, StrictJsonError};
use crate::error::{RegistryError, Violation};

/// At most this many violations are reported for one call.
pub const MAX_VIOLATIONS: usize = 32;

/// Most alternatives of an `anyOf` or `oneOf`, or values of an `enum`, a
/// violation describes.
const MAX_FORMS: usize = 8;

/// Most bytes of one value (of an `enum`, or the one given) a violation
/// quotes.
const VALUE_MAX: usize = 48;

/// Most bytes of an `enum`'s values a violation lists: with the value
/// given, the message stays within what a status shows of it (256 bytes).
const VALUES_MAX: usize = 160;

/// Compiled regexes in a schema may use at most this much memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A tool's compiled input schema.
#[derive(Debug)]
pub struct ArgumentValidator {
    validator: Validator,
    /// The schema as written, to name what a violated keyword allows.
    schema: Value,
}

/// Compiles `schema_json`; an empty text means "any JSON object".
///
/// The error is the compiler's message, for the announcer to fix its schema.
pub fn compile(schema_json: &str) -> Result<ArgumentValidator, String> {
    let schema: Value = if schema_json.trim().is_empty() {
        serde_json::json!({"type": "object"})
    } else {
        serde_json::from_str(schema_json).map_err(|e| format!("not JSON: {e}"))?
    };
    if !(schema.is_object() || schema.is_boolean()) {
        return Err("a JSON Schema must be an object or a boolean".into());
    }
    let validator = jsonschema::options()
        .offline()
        .with_pattern_options(PatternOptions::regex().size_limit(REGEX_SIZE_LIMIT))
        .build(&schema)
        .map_err(|e| e.to_string())?;
    Ok(ArgumentValidator { validator, schema })
}

/// Parses `arguments_json` (empty means `{}`), bounded by `max_bytes`. An
/// object with the same key twice, at any depth, is refused
/// (`crate::catalog::strict_json`): the value validated is then the only value a
/// tool can read from the text it is sent.
///
/// serde_json's recursion limit (128 levels) bounds the nesting depth.
pub fn parse_arguments(arguments_json: &str, max_bytes: usize) -> Result<Value, RegistryError> {
    if arguments_json.len() > max_bytes {
        return Err(RegistryError::ArgumentsTooLarge {
            size: arguments_json.len(),
            limit: max_bytes,
        });
    }
    if toolmesh_proto::rules::no_arguments(arguments_json) {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    strict_json::from_str(arguments_json).map_err(|error| {
        let e = match error {
            StrictJsonError::DuplicateKey { pointer, key } => {
                return RegistryError::ArgumentsDuplicateKey { pointer, key };
            }
            StrictJsonError::Syntax(e) => e,
        };
        let (line, column) = (e.line(), e.column());
        let full = e.to_string();
        let position = format!(" at line {line} column {column}");
        RegistryError::ArgumentsNotJson {
            message: full.strip_suffix(&position).unwrap_or(&full).to_owned(),
            line,
            column,
        }
    })
}

impl ArgumentValidator {
    /// Checks `arguments`, returning every violation (up to
    /// [`MAX_VIOLATIONS`]) with a JSON Pointer to where it is.
    pub fn check(&self, arguments: &Value) -> Result<(), Vec<Violation>> {
        if self.validator.is_valid(arguments) {
            return Ok(());
        }
        let violations: Vec<Violation> = self
            .validator
            .iter_errors(arguments)
            .flat_map(|error| self.violations(&error, arguments))
            .scan(std::collections::HashSet::new(), |seen, violation| {
                // One error per extra property can name them all.
                let fresh = seen.insert((violation.pointer.clone(), violation.message.clone()));
                Some(fresh.then_some(violation))
            })
            .flatten()
            .take(MAX_VIOLATIONS)
            .collect();
        if violations.is_empty() {
            // is_valid and iter_errors disagreeing would be a validator bug;
            // refuse rather than let an unchecked call through.
            return Err(vec![Violation {
                pointer: String::new(),
                message: "arguments do not match the input schema".into(),
            }]);
        }
        Err(violations)
    }
}

impl ArgumentValidator {
    /// What `error` asks to fix, each at the value to change: a missing
    /// property at where it belongs, an unexpected one at itself (one
    /// violation each), with what the schema allows there.
    fn violations(
        &self,
        error: &jsonschema::ValidationError<'_>,
        arguments: &Value,
    ) -> Vec<Violation> {
        let at = error.instance_path().as_str();
        let child = |name: &str| format!("{at}/{}", escape_pointer_token(name));
        let keyword = error.schema_path().as_str();
        match error.kind() {
            // `additionalProperties: false` on an object with no
            // `properties` is reported as a false schema at the object:
            // name the properties it has.
            ValidationErrorKind::FalseSchema
                if keyword.ends_with("/additionalProperties")
                    && let Some(object) = arguments.pointer(at).and_then(Value::as_object)
                    && self.declares_nothing(keyword) =>
            {
                unexpected(object.keys(), &self.allowed_properties(keyword), child)
            }
            ValidationErrorKind::Required { property } if property.is_string() => {
                let name = property.as_str().unwrap_or_default();
                vec![Violation {
                    pointer: child(name),
                    message: format!("{property} is a required property"),
                }]
            }
            ValidationErrorKind::AdditionalProperties { unexpected: names }
            | ValidationErrorKind::UnevaluatedProperties { unexpected: names } => {
                unexpected(names, &self.allowed_properties(keyword), child)
            }
            ValidationErrorKind::Constant { expected_value } => vec![Violation {
                pointer: at.to_owned(),
                message: format!(
                    "{} is not allowed: the only allowed value is {expected_value}",
                    error.instance()
                ),
            }],
            ValidationErrorKind::Enum { options } => vec![Violation {
                pointer: at.to_owned(),
                message: not_one_of(error.instance(), options),
            }],
            ValidationErrorKind::AnyOf { .. } | ValidationErrorKind::OneOfNotValid { .. } => {
                vec![Violation {
                    pointer: at.to_owned(),
                    message: match self.alternatives(keyword) {
                        Some(forms) => {
                            format!("{} is none of the allowed forms: {forms}", error.instance())
                        }
                        None => error.to_string(),
                    },
                }]
            }
            ValidationErrorKind::OneOfMultipleValid { .. } => vec![Violation {
                pointer: at.to_owned(),
                message: match self.alternatives(keyword) {
                    Some(forms) => format!(
                        "{} fits more than one of the forms {forms}; it must fit exactly one",
                        error.instance()
                    ),
                    None => error.to_string(),
                },
            }],
            ValidationErrorKind::Pattern { pattern } => vec![Violation {
                pointer: at.to_owned(),
                message: format!(
                    "{} does not match the pattern {} (a regular expression)",
                    error.instance(),
                    Value::String(pattern.clone())
                ),
            }],
            _ => vec![Violation {
                pointer: at.to_owned(),
                message: error.to_string(),
            }],
        }
    }

    /// The forms an `anyOf` or `oneOf` at `keyword_path` allows, in words
    /// (`a string (format date), or null`); `None` when they cannot be
    /// read (through a `$ref`).
    fn alternatives(&self, keyword_path: &str) -> Option<String> {
        let forms = self.schema.pointer(keyword_path)?.as_array()?;
        let mut described: Vec<String> = forms
            .iter()
            .take(MAX_FORMS)
            .map(|form| self.form(form, 0))
            .collect();
        if forms.len() > MAX_FORMS {
            described.push(format!("{} more", forms.len() - MAX_FORMS));
        }
        Some(match described.as_slice() {
            [] => return None,
            [one] => one.clone(),
            [init @ .., last] => format!("{}, or {last}", init.join(", ")),
        })
    }

    /// One schema in a few words: its constant, its values, its type.
    fn form(&self, schema: &Value, depth: usize) -> String {
        let Some(object) = schema.as_object() else {
            return if schema == &Value::Bool(true) {
                "anything".into()
            } else {
                "nothing".into()
            };
        };
        if let Some(constant) = object.get("const") {
            return constant.to_string();
        }
        if let Some(Value::Array(values)) = object.get("enum") {
            let (mut shown, rest) = listed(values);
            if rest > 0 {
                shown.push(format!("{rest} more"));
            }
            return format!("one of {}", shown.join(", "));
        }
        if let Some(Value::String(reference)) = object.get("$ref")
            && depth < 2
            && let Some(target) = reference
                .strip_prefix('#')
                .and_then(|p| self.schema.pointer(p))
        {
            return self.form(target, depth + 1);
        }
        let kind = match object.get("type") {
            Some(Value::String(kind)) => article(kind),
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .map(article)
                .collect::<Vec<_>>()
                .join(" or "),
            _ => "a value matching its schema".into(),
        };
        let mut extra = Vec::new();
        if let Some(Value::String(format)) = object.get("format") {
            extra.push(format!("format {format}"));
        }
        if let Some(Value::Array(required)) = object.get("required") {
            let names: Vec<&str> = required.iter().filter_map(Value::as_str).collect();
            if !names.is_empty() {
                extra.push(format!("with {}", names.join(", ")));
            }
        }
        if extra.is_empty() {
            kind
        } else {
            format!("{kind} ({})", extra.join(", "))
        }
    }

    /// Whether the object schema owning `keyword_path` declares no
    /// properties at all (so every property it is given is unexpected).
    fn declares_nothing(&self, keyword_path: &str) -> bool {
        let object = keyword_path
            .rsplit_once('/')
            .and_then(|(parent, _)| self.schema.pointer(parent));
        object.is_some_and(|o| {
            ["properties", "patternProperties"].iter().all(|k| {
                o.get(k)
                    .and_then(Value::as_object)
                    .is_none_or(serde_json::Map::is_empty)
            })
        })
    }

    /// The properties an object may have, read from the schema that
    /// refused one (`keyword_path` points at its `additionalProperties` or
    /// `unevaluatedProperties`); a general hint when it cannot be read
    /// (through a `$ref`).
    fn allowed_properties(&self, keyword_path: &str) -> String {
        let object = keyword_path
            .rsplit_once('/')
            .and_then(|(parent, _)| self.schema.pointer(parent));
        let names: Vec<String> = object
            .and_then(|o| o.get("properties"))
            .and_then(Value::as_object)
            .map(|p| {
                p.keys()
                    .map(|k| Value::String(k.clone()).to_string())
                    .collect()
            })
            .unwrap_or_default();
        let patterns = object
            .and_then(|o| o.get("patternProperties"))
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        match (names.is_empty(), patterns) {
            (true, false) if object.is_some() => {
                "this object takes no properties; remove it".into()
            }
            (true, _) => "not allowed here; remove it".into(),
            (false, false) => format!(
                "not allowed here; the allowed properties are {}",
                names.join(", ")
            ),
            (false, true) => format!(
                "not allowed here; the allowed properties are {} and names matching the schema's patternProperties",
                names.join(", ")
            ),
        }
    }
}

/// What an `enum` of `options` says of `given`, a value it does not
/// hold: `"Q5" is not one of "Q1", "Q2", "Q3" or "Q4"`, the values bounded
/// ([`listed`]).
fn not_one_of(given: &Value, options: &Value) -> String {
    let given = clip(&given.to_string(), VALUE_MAX);
    let values = options.as_array().map(Vec::as_slice).unwrap_or_default();
    let (mut shown, rest) = listed(values);
    if rest > 0 {
        shown.push(format!("{rest} more"));
    }
    match shown.as_slice() {
        [] => format!("{given} is not allowed: the enum allows no value"),
        [only] if rest == 0 => {
            format!("{given} is not allowed: the only allowed value is {only}")
        }
        [only] => format!("{given} is not one of {only}"),
        [init @ .., last] => format!("{given} is not one of {} or {last}", init.join(", ")),
    }
}

/// The first of `values` as JSON, each cut at [`VALUE_MAX`] bytes, at most
/// [`MAX_FORMS`] of them and [`VALUES_MAX`] bytes in all (one at least),
/// and how many are left out.
fn listed(values: &[Value]) -> (Vec<String>, usize) {
    let mut shown = Vec::new();
    let mut bytes = 0;
    for value in values.iter().take(MAX_FORMS) {
        let text = clip(&value.to_string(), VALUE_MAX);
        bytes += text.len() + 2;
        if bytes > VALUES_MAX && !shown.is_empty() {
            break;
        }
        shown.push(text);
    }
    let rest = values.len() - shown.len();
    (shown, rest)
}

/// A JSON type with its article: `a string`, `an integer`, `null`.
fn article(kind: &str) -> String {
    match kind {
        "null" => "null".into(),
        "integer" | "object" | "array" => format!("an {kind}"),
        other => format!("a {other}"),
    }
}

/// One violation per property in `names`, each at `child(name)`, saying
/// what `allowed` says is allowed there.
fn unexpected<'a>(
    names: impl IntoIterator<Item = &'a String>,
    allowed: &str,
    child: impl Fn(&str) -> String,
) -> Vec<Violation> {
    names
        .into_iter()
        .map(|name| Violation {
            pointer: child(name),
            message: format!(
                "unexpected property {}: {allowed}",
                Value::String(name.clone())
            ),
        })
        .collect()
}

/// Escapes one reference token per RFC 6901 (`~` → `~0`, `/` → `~1`).
pub(crate) fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests;
