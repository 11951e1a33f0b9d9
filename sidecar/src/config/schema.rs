//! JSON Schemas checked the way the registry compiles them at announce:
//! offline (a `$ref` outside the schema is refused, never fetched) and with
//! size-bounded regexes. A schema the registry would refuse is refused at
//! start instead, with the place in it at fault.

use jsonschema::PatternOptions;
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use super::key::Segment;

/// Compiled regexes in a schema may use at most this much memory (as in
/// the registry).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The JSON types a schema's `type` may name.
const JSON_TYPES: &str = "string, integer, number, boolean, array, object, null";

/// Why a schema does not compile, and where in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SchemaError {
    /// The steps from the schema's top to the value at fault.
    pub(crate) at: Vec<Segment>,
    /// What is wrong.
    pub(crate) message: String,
}

/// Compiles `schema` as the registry does.
pub(crate) fn check(schema: &Value) -> Result<(), SchemaError> {
    let error = match jsonschema::options()
        .offline()
        .with_pattern_options(PatternOptions::regex().size_limit(REGEX_SIZE_LIMIT))
        .build(schema)
    {
        Ok(_) => return Ok(()),
        Err(error) => error,
    };
    let pointer = error.instance_path().as_str().to_owned();
    let at = segments(schema, &pointer);
    let text = error.to_string();
    let message = match error.kind() {
        ValidationErrorKind::Referencing(_) => {
            return Err(bad_reference(schema, &text));
        }
        ValidationErrorKind::AnyOf { .. } if pointer.ends_with("/type") => {
            match error.instance().as_ref() {
                Value::String(kind) => {
                    format!("found {kind:?}, expected a JSON type: one of {JSON_TYPES}")
                }
                _ => format!("not a valid JSON Schema: {text}"),
            }
        }
        ValidationErrorKind::Format { format } if format == "regex" => {
            format!(
                "not a valid JSON Schema: {} is not a valid regular expression",
                error.instance()
            )
        }
        _ => format!("not a valid JSON Schema: {text}"),
    };
    Err(SchemaError { at, message })
}

/// A `$ref` that cannot be resolved offline: found in the schema by the
/// reference the compiler's message names.
fn bad_reference(schema: &Value, text: &str) -> SchemaError {
    let mut refs = Vec::new();
    find_refs(schema, &mut Vec::new(), &mut refs);
    let named = refs.into_iter().find(|(_, target)| {
        text.contains(&format!("'{target}'"))
            || target
                .strip_prefix('#')
                .is_some_and(|pointer| text.contains(&format!("'{pointer}'")))
    });
    let Some((mut at, target)) = named else {
        return SchemaError {
            at: Vec::new(),
            message: format!("not a valid JSON Schema: {text}"),
        };
    };
    at.push(Segment::Key("$ref".into()));
    let message = if target.starts_with('#') {
        format!("{target:?} points to nothing in the schema")
    } else {
        format!(
            "{target:?} is outside the schema, and schemas are never fetched; copy it under $defs and refer to it as #/$defs/NAME"
        )
    };
    SchemaError { at, message }
}

/// Every `$ref` in `value`, with where it is.
fn find_refs(value: &Value, at: &mut Vec<Segment>, out: &mut Vec<(Vec<Segment>, String)>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                out.push((at.clone(), target.clone()));
            }
            for (key, child) in map {
                at.push(Segment::Key(key.clone()));
                find_refs(child, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                at.push(Segment::Index(index));
                find_refs(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// The steps of JSON Pointer `pointer` in `schema`: a token is a list
/// position where the value there is a list.
fn segments(schema: &Value, pointer: &str) -> Vec<Segment> {
    let mut at = Vec::new();
    let mut value = Some(schema);
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        match (value, token.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(index)) => {
                value = items.get(index);
                at.push(Segment::Index(index));
            }
            (current, _) => {
                value = current.and_then(|v| v.get(&token));
                at.push(Segment::Key(token));
            }
        }
    }
    at
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn key(k: &str) -> Segment {
        Segment::Key(k.into())
    }

    #[test]
    fn valid_schemas_pass() {
        assert_eq!(check(&json!({"type": "object"})), Ok(()));
        assert_eq!(check(&json!(true)), Ok(()));
        assert_eq!(
            check(&json!({"$defs": {"a": {"type": "string"}}, "$ref": "#/$defs/a"})),
            Ok(())
        );
    }

    #[test]
    fn a_misspelt_type_names_the_types() {
        let error = check(&json!({"properties": {"n": {"type": "integr"}}})).unwrap_err();
        assert_eq!(error.at, [key("properties"), key("n"), key("type")]);
        assert_eq!(
            error.message,
            "found \"integr\", expected a JSON type: one of string, integer, number, boolean, array, object, null"
        );
    }

    #[test]
    fn references_outside_or_to_nothing_are_found() {
        let error = check(&json!({"properties": {"a": {"$ref": "https://example.com/a.json"}}}))
            .unwrap_err();
        assert_eq!(error.at, [key("properties"), key("a"), key("$ref")]);
        assert!(error.message.contains("never fetched"), "{}", error.message);
        let error = check(&json!({"allOf": [{"$ref": "#/$defs/missing"}]})).unwrap_err();
        assert_eq!(error.at, [key("allOf"), Segment::Index(0), key("$ref")]);
        assert!(
            error.message.contains("points to nothing"),
            "{}",
            error.message
        );
    }

    #[test]
    fn other_mistakes_keep_the_compilers_words() {
        let error = check(&json!({"type": "string", "pattern": "(unclosed"})).unwrap_err();
        assert_eq!(error.at, [key("pattern")]);
        assert!(
            error.message.contains("regular expression"),
            "{}",
            error.message
        );
        let error = check(&json!({"required": "a"})).unwrap_err();
        assert_eq!(error.at, [key("required")]);
        assert_eq!(
            error.message,
            "not a valid JSON Schema: \"a\" is not of type \"array\""
        );
    }
}
