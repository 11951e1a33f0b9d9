//! `invoke`'s arguments: a JSON object, and `--arg key=value` pairs typed
//! through the tool's input schema, so `--arg days=3` sends the number 3
//! to a tool whose `days` is an integer and the string "3" to one whose
//! `days` is a string.

use serde_json::{Map, Value};

/// Why the arguments cannot be built.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadArgument(pub(crate) String);

/// `json` (an object; empty means `{}`) with each `key=value` of `pairs`
/// set, typed by `schema`'s `properties`.
pub(crate) fn build(
    json: Option<&str>,
    pairs: &[String],
    schema: &Value,
) -> Result<Value, BadArgument> {
    let mut object = match json.map(str::trim) {
        None | Some("") => Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(object)) => object,
            Ok(_) => {
                return Err(BadArgument(
                    "the arguments must be a JSON object, e.g. '{\"text\": \"a b c\"}'".into(),
                ));
            }
            Err(e) => return Err(BadArgument(format!("the arguments are not JSON: {e}"))),
        },
    };
    for pair in pairs {
        let Some((key, text)) = pair.split_once('=') else {
            return Err(BadArgument(format!("--arg {pair:?}: write key=value")));
        };
        if key.is_empty() {
            return Err(BadArgument(format!("--arg {pair:?}: the key is empty")));
        }
        let property = schema.get("properties").and_then(|p| p.get(key));
        object.insert(key.to_owned(), typed(key, text, property)?);
    }
    Ok(Value::Object(object))
}

/// `text` as the JSON value `property` declares.
fn typed(key: &str, text: &str, property: Option<&Value>) -> Result<Value, BadArgument> {
    let kinds: Vec<&str> = match property.and_then(|p| p.get("type")) {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let bad = |what: &str| BadArgument(format!("--arg {key}={text}: {key} is {what}"));
    if kinds.is_empty() {
        // Undeclared: JSON if it reads as JSON, else a string.
        return Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())));
    }
    for kind in &kinds {
        let value = match *kind {
            "string" => Some(Value::String(text.to_owned())),
            "integer" => text.parse::<i64>().ok().map(Value::from),
            "number" => serde_json::from_str::<serde_json::Number>(text)
                .ok()
                .map(Value::Number),
            "boolean" => text.parse::<bool>().ok().map(Value::Bool),
            "null" => (text == "null").then_some(Value::Null),
            "array" => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_array),
            "object" => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object),
            _ => None,
        };
        if let Some(value) = value {
            return Ok(value);
        }
    }
    Err(bad(&match kinds.as_slice() {
        ["integer"] => "an integer, e.g. 3".to_owned(),
        ["number"] => "a number, e.g. 2.5".to_owned(),
        ["boolean"] => "true or false".to_owned(),
        ["array"] => "a JSON array, e.g. [1,2]".to_owned(),
        ["object"] => "a JSON object, e.g. {\"a\":1}".to_owned(),
        kinds => format!("one of the types {}", kinds.join(", ")),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "ratio": {"type": "number"},
            "metric": {"type": "boolean"},
            "tags": {"type": "array"},
            "when": {"type": ["string", "null"]},
        }})
    }

    fn pairs(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn pairs_are_typed_by_the_schema() {
        let args = build(
            None,
            &pairs(&[
                "city=42",
                "days=3",
                "ratio=0.5",
                "metric=true",
                "tags=[\"a\"]",
                "when=null",
                "extra={\"k\":1}",
                "note=hi",
            ]),
            &schema(),
        )
        .unwrap();
        assert_eq!(
            args,
            json!({"city": "42", "days": 3, "ratio": 0.5, "metric": true, "tags": ["a"], "when": "null", "extra": {"k": 1}, "note": "hi"})
        );
    }

    #[test]
    fn pairs_override_the_json_object() {
        let args = build(
            Some(r#"{"city": "Oslo", "days": 1}"#),
            &pairs(&["days=2"]),
            &schema(),
        )
        .unwrap();
        assert_eq!(args, json!({"city": "Oslo", "days": 2}));
        assert_eq!(build(Some(" "), &[], &schema()).unwrap(), json!({}));
    }

    #[test]
    fn mistakes_say_what_is_wanted() {
        let error =
            |json: Option<&str>, p: &[&str]| build(json, &pairs(p), &schema()).unwrap_err().0;
        assert_eq!(
            error(None, &["days=three"]),
            "--arg days=three: days is an integer, e.g. 3"
        );
        assert_eq!(
            error(None, &["metric=yes"]),
            "--arg metric=yes: metric is true or false"
        );
        assert_eq!(
            error(None, &["novalue"]),
            "--arg \"novalue\": write key=value"
        );
        assert!(error(Some("[1]"), &[]).contains("a JSON object"));
        assert!(error(Some("{"), &[]).contains("not JSON"));
    }
}
