//! The playground's form, read from a tool's input schema, and the
//! arguments read back from what was submitted.
//!
//! Each property becomes a field named by its JSON pointer (`arg:/a/b`):
//! a text box for a string, a number box for a number or integer, a
//! choice for an enum or a boolean (with "unset"), a text area with one
//! item a line for an array of strings, numbers or enums, a group of
//! fields for a nested object with properties. A property of any other
//! shape (`$ref`, `oneOf`, a list of types, an array of objects, an open
//! object) is a JSON text area of its own; a schema whose top is not an
//! object with properties, or past [`MAX_FIELDS`] or [`MAX_DEPTH`], has
//! no form, only the raw JSON.

use serde_json::{Map, Number, Value};

use crate::catalog::validate::escape_pointer_token;

/// Most fields drawn.
const MAX_FIELDS: usize = 200;
/// Deepest nesting of objects drawn as fields.
const MAX_DEPTH: usize = 6;
/// The prefix of every argument field's name.
pub(crate) const PREFIX: &str = "arg:";

/// A scalar's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    String,
    Number,
    Integer,
    Boolean,
}

/// How one property is drawn and read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// One value of a type.
    Scalar(Scalar),
    /// One of listed values.
    Choice(Vec<Value>),
    /// Items one a line; each of the scalar type, or one of the choices.
    List(Scalar, Vec<Value>),
    /// Nested fields.
    Object(Vec<Field>),
    /// JSON written by hand.
    Json,
}

/// One property of the form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    /// Its JSON pointer from the arguments' top (`/a/b`).
    pub pointer: String,
    /// The property's name.
    pub name: String,
    pub required: bool,
    pub description: String,
    pub kind: Kind,
    /// The schema's `default`, shown as the field's starting value.
    pub default: Option<Value>,
}

/// The form of `schema`, or `None` when it can only be given as raw JSON.
pub(crate) fn fields(schema: &Value) -> Option<Vec<Field>> {
    let mut budget = MAX_FIELDS;
    let fields = object_fields(schema, "", 0, &mut budget)?;
    (!fields.is_empty()).then_some(fields)
}

fn object_fields(schema: &Value, at: &str, depth: usize, budget: &mut usize) -> Option<Vec<Field>> {
    if depth > MAX_DEPTH || !is_plain(schema) || type_of(schema) != Some("object") {
        return None;
    }
    let properties = schema.get("properties")?.as_object()?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields = Vec::with_capacity(properties.len());
    for (name, property) in properties {
        *budget = budget.checked_sub(1)?;
        let pointer = format!("{at}/{}", escape_pointer_token(name));
        let kind = kind(property, &pointer, depth, budget);
        fields.push(Field {
            required: required.contains(&name.as_str()),
            description: property
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            default: property.get("default").cloned(),
            name: name.clone(),
            pointer,
            kind,
        });
    }
    Some(fields)
}

/// Whether the schema says what it is itself, with nothing the form
/// cannot follow.
fn is_plain(schema: &Value) -> bool {
    schema.is_object()
        && [
            "$ref",
            "$dynamicRef",
            "oneOf",
            "anyOf",
            "allOf",
            "not",
            "if",
        ]
        .iter()
        .all(|keyword| schema.get(keyword).is_none())
}

fn type_of(schema: &Value) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => Some(t),
        // Objects are often written with properties and no type.
        None if schema.get("properties").is_some() => Some("object"),
        _ => None,
    }
}

fn scalar(schema: &Value) -> Option<Scalar> {
    match type_of(schema)? {
        "string" => Some(Scalar::String),
        "number" => Some(Scalar::Number),
        "integer" => Some(Scalar::Integer),
        "boolean" => Some(Scalar::Boolean),
        _ => None,
    }
}

fn choices(schema: &Value) -> Option<Vec<Value>> {
    let options = schema.get("enum")?.as_array()?;
    options
        .iter()
        .all(|o| o.is_string() || o.is_number() || o.is_boolean())
        .then(|| options.clone())
}

fn kind(schema: &Value, pointer: &str, depth: usize, budget: &mut usize) -> Kind {
    if !is_plain(schema) {
        return Kind::Json;
    }
    if let Some(options) = choices(schema) {
        return Kind::Choice(options);
    }
    match type_of(schema) {
        Some("object") => object_fields(schema, pointer, depth + 1, budget)
            .filter(|fields| !fields.is_empty())
            .map_or(Kind::Json, Kind::Object),
        Some("array") => {
            let items = schema.get("items").filter(|items| is_plain(items));
            match items.map(|items| (scalar(items), choices(items))) {
                Some((_, Some(options))) => Kind::List(Scalar::String, options),
                Some((Some(item), None)) if item != Scalar::Boolean => Kind::List(item, Vec::new()),
                _ => Kind::Json,
            }
        }
        Some("boolean") => Kind::Choice(vec![Value::Bool(true), Value::Bool(false)]),
        _ => scalar(schema).map_or(Kind::Json, Kind::Scalar),
    }
}

/// A field's text in the form for `value` (the value sent, or the
/// default): what reading it back gives `value` again.
pub(crate) fn text_of(kind: &Kind, value: &Value) -> String {
    match (kind, value) {
        (_, Value::String(s)) if !matches!(kind, Kind::Json) => s.clone(),
        (Kind::List(..), Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        (Kind::Json, value) => serde_json::to_string_pretty(value).unwrap_or_default(),
        (_, value) => value.to_string(),
    }
}

/// Why a field's text could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable {
    pub pointer: String,
    pub message: String,
}

/// The arguments the submitted `values` (field name, text) give, fields
/// left empty omitted. A number that does not read as one is sent as the
/// text, so that the schema's own check names it at its field; only JSON
/// that does not parse is refused here.
pub(crate) fn arguments(
    fields: &[Field],
    values: &[(String, String)],
) -> Result<Value, Vec<Unreadable>> {
    let mut problems = Vec::new();
    let object = read_object(fields, values, &mut problems);
    if problems.is_empty() {
        Ok(Value::Object(object))
    } else {
        Err(problems)
    }
}

/// The text submitted for the field at `pointer`, if any.
pub(crate) fn submitted<'a>(values: &'a [(String, String)], pointer: &str) -> Option<&'a str> {
    values
        .iter()
        .find(|(name, _)| name.strip_prefix(PREFIX) == Some(pointer))
        .map(|(_, value)| value.as_str())
}

fn read_object(
    fields: &[Field],
    values: &[(String, String)],
    problems: &mut Vec<Unreadable>,
) -> Map<String, Value> {
    let mut object = Map::new();
    for field in fields {
        let value = match &field.kind {
            Kind::Object(nested) if !field.required && !filled(nested, values) => None,
            Kind::Object(nested) => Some(Value::Object(read_object(nested, values, problems))),
            kind => {
                let text = submitted(values, &field.pointer).unwrap_or_default();
                read(kind, text, field.required).unwrap_or_else(|message| {
                    problems.push(Unreadable {
                        pointer: field.pointer.clone(),
                        message,
                    });
                    None
                })
            }
        };
        if let Some(value) = value {
            object.insert(field.name.clone(), value);
        }
    }
    object
}

/// Whether any field of `fields` (nested ones too) was given text.
fn filled(fields: &[Field], values: &[(String, String)]) -> bool {
    fields.iter().any(|field| match &field.kind {
        Kind::Object(nested) => filled(nested, values),
        _ => submitted(values, &field.pointer).is_some_and(|t| !t.trim().is_empty()),
    })
}

fn read(kind: &Kind, text: &str, required: bool) -> Result<Option<Value>, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        // An empty required string is a value; anything else empty is
        // left out, and the schema says whether it had to be there.
        return Ok((required && *kind == Kind::Scalar(Scalar::String))
            .then(|| Value::String(String::new())));
    }
    Ok(Some(match kind {
        Kind::Scalar(scalar) => read_scalar(*scalar, text),
        Kind::Choice(options) => options
            .iter()
            .find(|o| text_of(kind, o) == text)
            .cloned()
            .unwrap_or_else(|| Value::String(text.to_owned())),
        Kind::List(item, options) => Value::Array(
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(|line| {
                    options
                        .iter()
                        .find(|o| text_of(&Kind::Choice(Vec::new()), o) == line)
                        .cloned()
                        .unwrap_or_else(|| read_scalar(*item, line))
                })
                .collect(),
        ),
        Kind::Json => serde_json::from_str(trimmed).map_err(|e| format!("not JSON: {e}"))?,
        Kind::Object(_) => Value::Null,
    }))
}

fn read_scalar(scalar: Scalar, text: &str) -> Value {
    let trimmed = text.trim();
    let number = match scalar {
        Scalar::String => return Value::String(text.to_owned()),
        Scalar::Boolean => match trimmed {
            "true" => return Value::Bool(true),
            "false" => return Value::Bool(false),
            _ => None,
        },
        Scalar::Integer => trimmed.parse::<i64>().ok().map(Number::from),
        Scalar::Number => trimmed
            .parse::<i64>()
            .ok()
            .map(Number::from)
            .or_else(|| trimmed.parse::<f64>().ok().and_then(Number::from_f64)),
    };
    number.map_or_else(|| Value::String(trimmed.to_owned()), Value::Number)
}

/// The field a violation at `pointer` belongs to: the deepest field whose
/// pointer is `pointer` or one of its ancestors.
pub(crate) fn owner<'a>(fields: &'a [Field], pointer: &str) -> Option<&'a Field> {
    let mut found = None;
    for field in fields {
        let inside = pointer == field.pointer
            || pointer
                .strip_prefix(field.pointer.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        if inside {
            found = Some(field);
            if let Kind::Object(nested) = &field.kind
                && let Some(deeper) = owner(nested, pointer)
            {
                found = Some(deeper);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn booking() -> Value {
        json!({
            "type": "object",
            "properties": {
                "room": {"type": "string", "description": "Which room"},
                "people": {"type": "integer", "minimum": 1},
                "floor": {"enum": ["ground", "first"]},
                "projector": {"type": "boolean"},
                "guests": {"type": "array", "items": {"type": "string"}},
                "when": {"type": "object", "properties": {
                    "day": {"type": "string"}, "hour": {"type": "number"}
                }, "required": ["day"]},
                "extra": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "a/b": {"type": "string"}
            },
            "required": ["room", "people"]
        })
    }

    fn submit(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{PREFIX}{k}"), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_shape_gets_its_field() {
        let fields = fields(&booking()).expect("a form");
        let kind = |pointer: &str| {
            owner(&fields, pointer)
                .filter(|f| f.pointer == pointer)
                .map(|f| f.kind.clone())
        };
        assert_eq!(kind("/room"), Some(Kind::Scalar(Scalar::String)));
        assert_eq!(kind("/people"), Some(Kind::Scalar(Scalar::Integer)));
        assert!(matches!(kind("/floor"), Some(Kind::Choice(o)) if o.len() == 2));
        assert!(matches!(kind("/projector"), Some(Kind::Choice(_))));
        assert_eq!(kind("/guests"), Some(Kind::List(Scalar::String, vec![])));
        assert_eq!(kind("/when/day"), Some(Kind::Scalar(Scalar::String)));
        assert_eq!(kind("/extra"), Some(Kind::Json));
        assert!(kind("/a~1b").is_some(), "pointer tokens escaped");
    }

    #[test]
    fn submitted_text_reads_back_as_typed_arguments() {
        let fields = fields(&booking()).expect("a form");
        let args = arguments(
            &fields,
            &submit(&[
                ("/room", "Blue"),
                ("/people", " 4 "),
                ("/floor", "first"),
                ("/projector", "true"),
                ("/guests", "ann\n\n bob \n"),
                ("/when/day", "mon"),
                ("/when/hour", "9.5"),
                ("/extra", "3"),
            ]),
        )
        .expect("readable");
        assert_eq!(
            args,
            json!({"room": "Blue", "people": 4, "floor": "first", "projector": true,
                   "guests": ["ann", "bob"], "when": {"day": "mon", "hour": 9.5}, "extra": 3})
        );
        for field in &fields {
            if let Some(value) = args.pointer(&field.pointer)
                && !matches!(field.kind, Kind::Object(_))
            {
                let again = read(&field.kind, &text_of(&field.kind, value), field.required);
                assert_eq!(again, Ok(Some(value.clone())), "{}", field.pointer);
            }
        }
    }

    #[test]
    fn empty_fields_are_left_out_and_bad_numbers_go_to_the_schema() {
        let fields = fields(&booking()).expect("a form");
        let args = arguments(&fields, &submit(&[("/people", "many")])).expect("readable");
        assert_eq!(args, json!({"room": "", "people": "many"}));
        let bad = arguments(&fields, &submit(&[("/extra", "{")])).expect_err("not JSON");
        assert_eq!(bad[0].pointer, "/extra");
    }

    #[test]
    fn violations_find_their_field() {
        let fields = fields(&booking()).expect("a form");
        let at = |p: &str| owner(&fields, p).map(|f| f.pointer.as_str());
        assert_eq!(at("/when/hour"), Some("/when/hour"));
        assert_eq!(at("/guests/3"), Some("/guests"));
        assert_eq!(at("/when"), Some("/when"));
        assert_eq!(at("/roomy"), None);
        assert_eq!(at(""), None);
    }

    #[test]
    fn shapes_the_form_cannot_draw_are_raw_json() {
        for schema in [
            json!({"type": "string"}),
            json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}),
            json!({"type": "object"}),
            json!({"oneOf": [{"type": "object", "properties": {"a": {}}}]}),
            json!(true),
        ] {
            assert_eq!(fields(&schema), None, "{schema}");
        }
        let mut deep = json!({"type": "string"});
        for _ in 0..50 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let drawn = fields(&deep).expect("the top levels");
        let mut field = &drawn[0];
        let mut levels = 1;
        while let Kind::Object(nested) = &field.kind {
            field = &nested[0];
            levels += 1;
        }
        assert_eq!(field.kind, Kind::Json, "deeper than the form draws");
        assert!(levels <= MAX_DEPTH + 2);
        let wide: Map<String, Value> = (0..1000)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        assert_eq!(fields(&json!({"type": "object", "properties": wide})), None);
    }
}
