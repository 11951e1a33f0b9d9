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

use crate::error::{RegistryError, Violation};
use crate::strict_json::{self, StrictJsonError};

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
    fn each_violation_points_at_the_value_to_fix_and_says_what_is_allowed() {
        let validator = compile(
            r#"{"type":"object","properties":{
                "a":{"type":"string","enum":["x","y"]},
                "p":{"type":"string","pattern":"^[0-9]+$"},
                "n":{"type":"integer","maximum":5},
                "c":{"const":3},
                "o":{"type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false},
                "e":{"type":"object","additionalProperties":false}
            },"required":["r"],"additionalProperties":false}"#,
        )
        .unwrap();
        let args = json!({"a":"z","p":"abc","n":7,"c":4,"o":{"zz":1},"e":{"k":1,"j":2},"extra":1,"more~/":2});
        let mut found: Vec<(String, String)> = validator
            .check(&args)
            .unwrap_err()
            .into_iter()
            .map(|v| (v.pointer, v.message))
            .collect();
        found.sort();
        let allowed =
            r#"not allowed here; the allowed properties are "a", "c", "e", "n", "o", "p""#;
        let expected: Vec<(String, String)> = [
            ("/a", r#""z" is not one of "x" or "y""#),
            ("/c", "4 is not allowed: the only allowed value is 3"),
            (
                "/e/j",
                r#"unexpected property "j": this object takes no properties; remove it"#,
            ),
            (
                "/e/k",
                r#"unexpected property "k": this object takes no properties; remove it"#,
            ),
            (
                "/extra",
                &format!(r#"unexpected property "extra": {allowed}"#),
            ),
            (
                "/more~0~1",
                &format!(r#"unexpected property "more~/": {allowed}"#),
            ),
            ("/n", "7 is greater than the maximum of 5"),
            (
                "/o/zz",
                r#"unexpected property "zz": not allowed here; the allowed properties are "q""#,
            ),
            (
                "/p",
                r#""abc" does not match the pattern "^[0-9]+$" (a regular expression)"#,
            ),
            ("/r", r#""r" is a required property"#),
        ]
        .into_iter()
        .map(|(p, m)| (p.to_owned(), m.to_owned()))
        .collect();
        assert_eq!(found, expected);
    }

    fn enum_message(values: &serde_json::Value, given: &serde_json::Value) -> String {
        let schema = json!({"type": "object", "properties": {"q": {"enum": values}}});
        let violations = compile(&schema.to_string())
            .unwrap()
            .check(&json!({ "q": given }))
            .unwrap_err();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].pointer, "/q");
        violations[0].message.clone()
    }

    #[test]
    fn an_enum_violation_lists_the_values() {
        assert_eq!(
            enum_message(&json!(["Q1", "Q2", "Q3", "Q4"]), &json!("Q5")),
            r#""Q5" is not one of "Q1", "Q2", "Q3" or "Q4""#
        );
        assert_eq!(
            enum_message(&json!([1, null, "a\nb", {"k": true}]), &json!(2)),
            r#"2 is not one of 1, null, "a\nb" or {"k":true}"#
        );
        assert_eq!(
            enum_message(&json!(["on"]), &json!("off")),
            r#""off" is not allowed: the only allowed value is "on""#
        );
        let twelve: Vec<String> = (1..=12).map(|i| format!("v{i}")).collect();
        assert_eq!(
            enum_message(&json!(twelve), &json!("v0")),
            r#""v0" is not one of "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8" or 4 more"#
        );
    }

    #[test]
    fn an_enum_violation_stays_bounded() {
        let long: Vec<String> = (0..20).map(|i| format!("{i}{}", "x".repeat(100))).collect();
        let given = json!("y".repeat(10_000));
        let message = enum_message(&json!(long), &given);
        assert!(message.len() <= 256, "{} bytes: {message}", message.len());
        assert!(message.starts_with(r#""yyyy"#), "{message}");
        assert!(message.contains(r#""0xxx"#), "{message}");
        assert!(message.ends_with(" more"), "{message}");
    }

    #[test]
    fn a_value_fitting_no_alternative_hears_what_the_alternatives_are() {
        let validator = compile(
            r##"{"$defs":{"point":{"type":"object","required":["x","y"]}},
                "type":"object","properties":{
                "at":{"oneOf":[{"type":"string","format":"date"},{"type":"null"}]},
                "unit":{"anyOf":[{"const":"c"},{"enum":["f","k"]},{"$ref":"#/$defs/point"}]},
                "n":{"oneOf":[{"type":"integer"},{"type":["integer","string"]}]}
            }}"##,
        )
        .unwrap();
        let violations = validator
            .check(&json!({"at": 5, "unit": "x", "n": 3}))
            .unwrap_err();
        let message = |pointer: &str| {
            violations
                .iter()
                .find(|v| v.pointer == pointer)
                .map(|v| v.message.clone())
                .unwrap_or_else(|| panic!("no violation at {pointer}: {violations:?}"))
        };
        assert_eq!(
            message("/at"),
            "5 is none of the allowed forms: a string (format date), or null"
        );
        assert_eq!(
            message("/unit"),
            r#""x" is none of the allowed forms: "c", one of "f", "k", or an object (with x, y)"#
        );
        assert_eq!(
            message("/n"),
            "3 fits more than one of the forms an integer, or an integer or a string; it must fit exactly one"
        );
    }

    #[test]
    fn an_unexpected_property_under_a_ref_still_points_at_itself() {
        let validator = compile(
            r##"{"$defs":{"o":{"type":"object","properties":{"q":{}},"additionalProperties":false}},
                "type":"object","properties":{"o":{"$ref":"#/$defs/o"}}}"##,
        )
        .unwrap();
        let violations = validator.check(&json!({"o":{"z":1}})).unwrap_err();
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].pointer, "/o/z");
        assert!(
            violations[0]
                .message
                .starts_with(r#"unexpected property "z""#)
        );
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
        fn an_enum_violation_names_every_value_of_a_short_enum_and_stays_bounded(
            values in proptest::collection::btree_set("[a-z0-9 \"\\\\]{1,12}", 1..20),
            given in ".{0,300}",
        ) {
            prop_assume!(!values.contains(&given));
            let message = enum_message(&json!(values), &json!(given));
            prop_assert!(message.len() <= 256, "{} bytes: {}", message.len(), message);
            let bytes: usize = values.iter().map(|v| json!(v).to_string().len() + 2).sum();
            if values.len() <= MAX_FORMS && bytes <= VALUES_MAX {
                for value in &values {
                    let quoted = json!(value).to_string();
                    prop_assert!(message.contains(&quoted), "{} not in {}", quoted, message);
                }
            } else {
                prop_assert!(message.ends_with(" more"), "{}", message);
            }
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
