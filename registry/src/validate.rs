//! JSON Schema compilation (once, at announce) and argument validation (every
//! `Invoke`).
//!
//! Schemas are compiled offline: a `$ref` to anything outside the schema is
//! refused at compile time, never fetched. Patterns use the linear-time
//! `regex` engine with a size limit, so a hostile `pattern` cannot stall a
//! validation.

use jsonschema::{PatternOptions, Validator, error::ValidationErrorKind};
use serde_json::Value;

use crate::error::{RegistryError, Violation};
use crate::strict_json::{self, StrictJsonError};

/// At most this many violations are reported for one call.
pub const MAX_VIOLATIONS: usize = 32;

/// Compiled regexes in a schema may use at most this much memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A tool's compiled input schema.
#[derive(Debug)]
pub struct ArgumentValidator {
    validator: Validator,
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
    Ok(ArgumentValidator { validator })
}

/// Parses `arguments_json` (empty means `{}`), bounded by `max_bytes`. An
/// object with the same key twice, at any depth, is refused
/// ([`crate::strict_json`]): the value validated is then the only value a
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
            .take(MAX_VIOLATIONS)
            .map(|error| {
                let mut pointer = error.instance_path().as_str().to_owned();
                if let ValidationErrorKind::Required { property } = error.kind()
                    && let Some(name) = property.as_str()
                {
                    pointer.push('/');
                    pointer.push_str(&escape_pointer_token(name));
                }
                Violation {
                    pointer,
                    message: error.to_string(),
                }
            })
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

/// Escapes one reference token per RFC 6901 (`~` → `~0`, `/` → `~1`).
fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn schema() -> ArgumentValidator {
        compile(
            r#"{"type":"object","properties":{"text":{"type":"string","minLength":1},
                "n":{"type":"integer","maximum":10},
                "items":{"type":"array","items":{"type":"integer"}}},
               "required":["text"],"additionalProperties":false}"#,
        )
        .unwrap()
    }

    #[test]
    fn valid_arguments_pass() {
        assert!(schema().check(&json!({"text": "hi", "n": 3})).is_ok());
    }

    #[test]
    fn every_violation_has_a_pointer() {
        let errors = schema()
            .check(&json!({"n": 11, "items": [1, "x"]}))
            .unwrap_err();
        let pointers: Vec<_> = errors.iter().map(|v| v.pointer.as_str()).collect();
        assert!(pointers.contains(&"/text"), "{errors:?}");
        assert!(pointers.contains(&"/n"), "{errors:?}");
        assert!(pointers.contains(&"/items/1"), "{errors:?}");
    }

    #[test]
    fn remote_refs_are_refused_not_fetched() {
        let err = compile(r#"{"$ref":"https://example.invalid/schema.json"}"#).unwrap_err();
        assert!(!err.is_empty());
    }

    #[test]
    fn broken_schemas_are_refused() {
        assert!(compile(r#"{"type":"strang"}"#).is_err());
        assert!(compile("[1,2]").is_err());
        assert!(compile("{not json").is_err());
        assert!(compile(r#"{"type":"string","pattern":"(unclosed"}"#).is_err());
    }

    #[test]
    fn empty_schema_means_any_object() {
        let v = compile("").unwrap();
        assert!(v.check(&json!({"anything": [1, 2]})).is_ok());
        assert!(v.check(&json!("a string")).is_err());
    }

    #[test]
    fn parse_reports_line_and_column() {
        match parse_arguments("{\n  \"a\": x\n}", 1024) {
            Err(RegistryError::ArgumentsNotJson { line, message, .. }) => {
                assert_eq!(line, 2);
                assert!(!message.contains("line"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            parse_arguments(&"x".repeat(2000), 1024),
            Err(RegistryError::ArgumentsTooLarge { .. })
        ));
        assert_eq!(parse_arguments("  ", 10).unwrap(), json!({}));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert!(parse_arguments(&deep, usize::MAX).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(input in ".{0,200}") {
            let _ = parse_arguments(&input, 1 << 20);
        }

        #[test]
        fn integers_within_bounds_validate(n in -1000i64..1000, text in "[a-z]{1,10}") {
            let result = schema().check(&json!({"text": text, "n": n}));
            prop_assert_eq!(result.is_ok(), n <= 10);
        }

        #[test]
        fn missing_property_pointer_is_escaped(name in "[a-z~/]{1,8}") {
            let v = compile(&json!({"type": "object", "required": [name.clone()]}).to_string()).unwrap();
            let errors = v.check(&json!({})).unwrap_err();
            let expected = format!("/{}", name.replace('~', "~0").replace('/', "~1"));
            prop_assert_eq!(&errors[0].pointer, &expected);
        }
    }
}
