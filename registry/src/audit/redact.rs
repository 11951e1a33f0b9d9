//! Redaction of logged arguments by the tool's input schema: every value a
//! schema node marks `"writeOnly": true` or `"x-sensitive": true` becomes
//! `"[redacted]"`.
//!
//! The walk follows the arguments, and at each value gathers every schema
//! node that may apply to it: `properties`, `patternProperties`,
//! `additionalProperties`, `unevaluatedProperties`, `items`, `prefixItems`,
//! `additionalItems`, `contains`, `unevaluatedItems`, through `allOf`,
//! `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas` and
//! local `$ref`s (`#`, `#/$defs/...`, `#/definitions/...`). Where a
//! keyword's reach depends on matching (patterns, which branch of `anyOf`
//! holds) it is taken to reach everything it might: a value is redacted if
//! any node that could apply marks it.
//!
//! Whatever the walk cannot decide, it redacts: a `$ref` it cannot resolve,
//! `$dynamicRef`, more than [`MAX_NODES`] nodes on one value, arguments
//! deeper than [`MAX_DEPTH`], a schema that is not JSON, and (the whole
//! arguments) a schema with markers and a nested `$id`.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

/// What a redacted value is replaced by.
pub const REDACTED: &str = "[redacted]";

/// Most bytes of (redacted) arguments written in one record.
pub const ARGUMENTS_MAX: usize = 64 * 1024;

/// Arguments nested deeper than this are redacted below it, if any schema
/// node still applies there.
pub const MAX_DEPTH: usize = 64;

/// Most schema nodes gathered for one value; past it the value is redacted.
pub const MAX_NODES: usize = 256;

/// Keywords whose subschema applies to the value itself.
const IN_PLACE_ONE: [&str; 4] = ["not", "if", "then", "else"];
const IN_PLACE_LIST: [&str; 3] = ["allOf", "anyOf", "oneOf"];
const IN_PLACE_MAP: [&str; 2] = ["dependentSchemas", "dependencies"];

/// A tool's input schema, prepared for redacting arguments. Build it once
/// per schema (beside the compiled validator) and share it.
#[derive(Debug, Clone)]
pub struct Redactor {
    rules: Rules,
}

#[derive(Debug, Clone)]
enum Rules {
    /// The schema marks nothing: arguments are logged as they are.
    Nothing,
    /// Walk the arguments with this schema.
    Walk(Value),
    /// Redact the arguments whole.
    Everything,
}

impl Redactor {
    /// Prepares `schema`. A schema without any marker is never walked.
    pub fn new(schema: &Value) -> Self {
        let scan = scan(schema);
        let rules = if !scan.marked {
            Rules::Nothing
        } else if scan.nested_id {
            Rules::Everything
        } else {
            Rules::Walk(schema.clone())
        };
        Self { rules }
    }

    /// Prepares the schema in a descriptor's `input_schema_json`: empty
    /// means any object (nothing to redact); text that is not JSON redacts
    /// everything.
    pub fn from_schema_json(schema_json: &str) -> Self {
        if schema_json.trim().is_empty() {
            return Self {
                rules: Rules::Nothing,
            };
        }
        match serde_json::from_str::<Value>(schema_json) {
            Ok(schema) => Self::new(&schema),
            Err(_) => Self {
                rules: Rules::Everything,
            },
        }
    }

    /// True if the schema may redact some value.
    pub fn redacts_anything(&self) -> bool {
        !matches!(self.rules, Rules::Nothing)
    }

    /// `arguments` with every sensitive value replaced by [`REDACTED`].
    pub fn redact(&self, arguments: &Value) -> Value {
        match &self.rules {
            Rules::Nothing => arguments.clone(),
            Rules::Everything => redacted(),
            Rules::Walk(schema) => Walk { root: schema }.value(vec![schema], arguments, 0),
        }
    }
}

/// `arguments` redacted by `schema` (see [`Redactor`]).
pub fn redact(schema: &Value, arguments: &Value) -> Value {
    Redactor::new(schema).redact(arguments)
}

/// `arguments` as written: itself if its JSON is at most [`ARGUMENTS_MAX`]
/// bytes, else `{"truncated": true, "bytes": N}`.
pub fn bounded(arguments: Value) -> Value {
    let bytes = json_len(&arguments);
    if bytes <= ARGUMENTS_MAX {
        arguments
    } else {
        json!({"truncated": true, "bytes": bytes})
    }
}

fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        // Cannot happen for a Value; count it as too large to show.
        Err(_) => usize::MAX,
    }
}

fn redacted() -> Value {
    Value::String(REDACTED.to_owned())
}

fn marks(node: &Value) -> bool {
    let set = |keyword| node.get(keyword).is_some_and(|v| *v != Value::Bool(false));
    set("writeOnly") || set("x-sensitive")
}

struct Scan {
    marked: bool,
    nested_id: bool,
}

/// Whether any object in `schema` carries a marker, and whether any but the
/// root has an `$id` (which would change what `#` means under it).
fn scan(schema: &Value) -> Scan {
    let mut result = Scan {
        marked: false,
        nested_id: false,
    };
    let mut stack = vec![(schema, true)];
    while let Some((node, is_root)) = stack.pop() {
        match node {
            Value::Object(map) => {
                result.marked |= marks(node);
                result.nested_id |= !is_root && map.contains_key("$id");
                stack.extend(map.values().map(|v| (v, false)));
            }
            Value::Array(items) => stack.extend(items.iter().map(|v| (v, false))),
            _ => {}
        }
    }
    result
}

struct Walk<'s> {
    root: &'s Value,
}

impl<'s> Walk<'s> {
    fn value(&self, seeds: Vec<&'s Value>, value: &Value, depth: usize) -> Value {
        let Some(nodes) = self.applicable(seeds) else {
            return redacted();
        };
        if nodes.is_empty() {
            return value.clone();
        }
        if nodes.iter().any(|node| marks(node)) || depth >= MAX_DEPTH {
            return redacted();
        }
        match value {
            Value::Object(map) => {
                let mut out = Map::with_capacity(map.len());
                for (key, child) in map {
                    let seeds = nodes.iter().flat_map(|n| for_property(n, key)).collect();
                    out.insert(key.clone(), self.value(seeds, child, depth + 1));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(index, child)| {
                        let seeds = nodes.iter().flat_map(|n| for_item(n, index)).collect();
                        self.value(seeds, child, depth + 1)
                    })
                    .collect(),
            ),
            scalar => scalar.clone(),
        }
    }

    /// The object schemas that apply to one value: `seeds` and every node
    /// reached from them in place. `None` when that cannot be known.
    fn applicable(&self, seeds: Vec<&'s Value>) -> Option<Vec<&'s Value>> {
        let mut seen: HashSet<*const Value> = HashSet::new();
        let mut found = Vec::new();
        let mut stack = seeds;
        while let Some(node) = stack.pop() {
            let Value::Object(map) = node else {
                continue;
            };
            if !seen.insert(std::ptr::from_ref(node)) {
                continue;
            }
            if seen.len() > MAX_NODES || map.contains_key("$dynamicRef") {
                return None;
            }
            if let Some(reference) = map.get("$ref").or_else(|| map.get("$recursiveRef")) {
                stack.push(self.resolve(reference)?);
            }
            stack.extend(IN_PLACE_ONE.iter().filter_map(|k| map.get(*k)));
            for keyword in IN_PLACE_LIST {
                if let Some(Value::Array(branches)) = map.get(keyword) {
                    stack.extend(branches);
                }
            }
            for keyword in IN_PLACE_MAP {
                if let Some(Value::Object(schemas)) = map.get(keyword) {
                    stack.extend(schemas.values());
                }
            }
            found.push(node);
        }
        Some(found)
    }

    fn resolve(&self, reference: &Value) -> Option<&'s Value> {
        let reference = reference.as_str()?;
        let fragment = reference.strip_prefix('#')?;
        if fragment.contains('%') {
            return None;
        }
        if fragment.is_empty() {
            return Some(self.root);
        }
        if !fragment.starts_with('/') {
            return None;
        }
        self.root.pointer(fragment)
    }
}

/// Schemas under `node` that may apply to its property `key`.
fn for_property<'s>(node: &'s Value, key: &str) -> Vec<&'s Value> {
    let mut out = Vec::new();
    let properties = node.get("properties").and_then(Value::as_object);
    if let Some(schema) = properties.and_then(|p| p.get(key)) {
        out.push(schema);
    }
    if let Some(Value::Object(patterns)) = node.get("patternProperties") {
        out.extend(patterns.values());
    }
    if !properties.is_some_and(|p| p.contains_key(key))
        && let Some(schema) = node.get("additionalProperties")
    {
        out.push(schema);
    }
    out.extend(node.get("unevaluatedProperties"));
    out
}

/// Schemas under `node` that may apply to its item at `index`.
fn for_item(node: &Value, index: usize) -> Vec<&Value> {
    let mut out = Vec::new();
    if let Some(Value::Array(prefix)) = node.get("prefixItems") {
        out.extend(prefix.get(index));
    }
    match node.get("items") {
        Some(Value::Array(tuple)) => out.extend(tuple.get(index)),
        Some(schema) => out.push(schema),
        None => {}
    }
    for keyword in ["additionalItems", "contains", "unevaluatedItems"] {
        out.extend(node.get(keyword));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::*;

    const R: &str = REDACTED;

    #[test]
    fn marked_properties_are_redacted_at_any_depth() {
        let schema = json!({
            "type": "object",
            "properties": {
                "user": {"type": "string"},
                "password": {"type": "string", "writeOnly": true},
                "auth": {"type": "object", "properties": {
                    "token": {"type": "string", "x-sensitive": true},
                    "scheme": {"type": "string"}
                }},
                "vault": {"type": "object", "x-sensitive": true}
            }
        });
        let arguments = json!({
            "user": "ann", "password": "hunter2",
            "auth": {"token": "t0k", "scheme": "bearer"},
            "vault": {"a": 1, "b": [2]},
            "extra": "kept"
        });
        assert_eq!(
            redact(&schema, &arguments),
            json!({"user": "ann", "password": R, "auth": {"token": R, "scheme": "bearer"},
                   "vault": R, "extra": "kept"})
        );
    }

    #[test]
    fn items_prefix_items_and_tuples() {
        let schema = json!({"properties": {
            "keys": {"type": "array", "items": {"type": "string", "writeOnly": true}},
            "pairs": {"type": "array", "items": {"properties": {"secret": {"x-sensitive": true}}}},
            "tuple": {"prefixItems": [{"type": "string"}, {"x-sensitive": true}]},
            "old": {"items": [{"writeOnly": true}, {"type": "integer"}]}
        }});
        let arguments = json!({
            "keys": ["a", "b"],
            "pairs": [{"secret": "s", "name": "n"}, {"name": "m"}],
            "tuple": ["visible", "hidden", "beyond"],
            "old": ["hidden", 2, 3]
        });
        assert_eq!(
            redact(&schema, &arguments),
            json!({
                "keys": [R, R],
                "pairs": [{"secret": R, "name": "n"}, {"name": "m"}],
                "tuple": ["visible", R, "beyond"],
                "old": [R, 2, 3]
            })
        );
    }

    #[test]
    fn local_refs_are_followed() {
        let schema = json!({
            "properties": {
                "a": {"$ref": "#/$defs/credentials"},
                "b": {"$ref": "#/definitions/credentials"},
                "c": {"$ref": "#/$defs/plain"}
            },
            "$defs": {
                "credentials": {"properties": {"key": {"writeOnly": true}}},
                "plain": {"type": "object"}
            },
            "definitions": {"credentials": {"properties": {"pin": {"x-sensitive": true}}}}
        });
        let arguments = json!({
            "a": {"key": "k1", "id": 1}, "b": {"pin": "0000", "key": "kept"},
            "c": {"key": "kept"}
        });
        assert_eq!(
            redact(&schema, &arguments),
            json!({"a": {"key": R, "id": 1}, "b": {"pin": R, "key": "kept"},
                   "c": {"key": "kept"}})
        );
    }

    #[test]
    fn a_mark_in_any_branch_redacts() {
        let schema = json!({"properties": {
            "any": {"anyOf": [{"type": "integer"}, {"type": "string", "writeOnly": true}]},
            "one": {"oneOf": [{"properties": {"k": {"x-sensitive": true}}}, {"type": "null"}]},
            "all": {"allOf": [{"type": "object"}, {"properties": {"k": {"writeOnly": true}}}]},
            "cond": {"if": {"type": "object"}, "then": {"properties": {"k": {"writeOnly": true}}}}
        }});
        let arguments = json!({
            "any": 5, "one": {"k": "s", "j": 1}, "all": {"k": "s", "j": 1},
            "cond": {"k": "s", "j": 1}
        });
        assert_eq!(
            redact(&schema, &arguments),
            json!({"any": R, "one": {"k": R, "j": 1}, "all": {"k": R, "j": 1},
                   "cond": {"k": R, "j": 1}})
        );
    }

    #[test]
    fn pattern_and_additional_properties_redact_every_key_they_may_reach() {
        let schema = json!({
            "properties": {"name": {"type": "string"}},
            "patternProperties": {"^secret_": {"writeOnly": true}},
        });
        let arguments = json!({"name": "n", "secret_a": "s", "other": "o"});
        // A pattern is not matched: it may reach any key, "name" included.
        assert_eq!(
            redact(&schema, &arguments),
            json!({"name": R, "secret_a": R, "other": R})
        );
        let schema = json!({
            "properties": {"name": {"type": "string"}},
            "additionalProperties": {"x-sensitive": true}
        });
        let arguments = json!({"name": "n", "headers": {"a": "b"}});
        assert_eq!(
            redact(&schema, &arguments),
            json!({"name": "n", "headers": R})
        );
    }

    #[test]
    fn recursive_schemas_end() {
        let schema = json!({
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {"properties": {
                    "secret": {"writeOnly": true},
                    "children": {"items": {"$ref": "#/$defs/node"}},
                    "loop": {"$ref": "#/$defs/a"}
                }},
                "a": {"allOf": [{"$ref": "#/$defs/b"}]},
                "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"$ref": "#"}]}
            }
        });
        let mut arguments = json!({"secret": "s0", "name": "leaf"});
        for depth in 1..10 {
            arguments = json!({"secret": format!("s{depth}"), "children": [arguments]});
        }
        let shown = redact(&schema, &arguments).to_string();
        for depth in 0..10 {
            assert!(!shown.contains(&format!("\"s{depth}\"")), "{shown}");
        }
        assert!(shown.contains("leaf"), "{shown}");
        let looped = redact(&schema, &json!({"loop": {"secret": "x", "name": "y"}}));
        assert_eq!(looped, json!({"loop": {"secret": R, "name": "y"}}));
    }

    #[test]
    fn arguments_deeper_than_the_bound_are_redacted_below_it() {
        let schema = json!({"$defs": {"n": {"properties": {"next": {"$ref": "#/$defs/n"},
            "pin": {"writeOnly": true}}}}, "$ref": "#/$defs/n"});
        let mut arguments = json!({"pin": "deep"});
        for _ in 0..(MAX_DEPTH + 10) {
            arguments = json!({"next": arguments});
        }
        let shown = redact(&schema, &arguments).to_string();
        assert!(!shown.contains("deep"));
        assert!(shown.contains(R));
    }

    #[test]
    fn what_cannot_be_decided_is_redacted() {
        let unresolved = json!({"properties": {
            "a": {"$ref": "#/$defs/missing"},
            "b": {"$ref": "#anchor"},
            "c": {"$ref": "other.json"},
            "d": {"type": "string", "x-sensitive": "yes"},
            "e": {"type": "string", "writeOnly": false}
        }});
        let arguments = json!({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6});
        assert_eq!(
            redact(&unresolved, &arguments),
            json!({"a": R, "b": R, "c": R, "d": R, "e": 5, "f": 6})
        );
        let nested_id = json!({"properties": {"x": {"$id": "https://e.invalid/x",
            "properties": {"k": {"writeOnly": true}}}}});
        assert_eq!(redact(&nested_id, &arguments), json!(R));
        assert_eq!(
            Redactor::from_schema_json("{not json").redact(&arguments),
            json!(R)
        );
    }

    #[test]
    fn a_schema_without_marks_shows_arguments_as_they_are() {
        for text in [
            "",
            r##"{"type":"object","properties":{"a":{"$ref":"#/nowhere"}}}"##,
        ] {
            let redactor = Redactor::from_schema_json(text);
            assert!(!redactor.redacts_anything());
            let arguments = json!({"a": [1, {"b": "c"}]});
            assert_eq!(redactor.redact(&arguments), arguments);
        }
    }

    #[test]
    fn large_arguments_are_replaced_by_their_size() {
        let small = json!({"a": "x".repeat(100)});
        assert_eq!(bounded(small.clone()), small);
        let large = json!({"a": "x".repeat(ARGUMENTS_MAX)});
        let size = large.to_string().len();
        assert_eq!(bounded(large), json!({"truncated": true, "bytes": size}));
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            "[a-z ]{0,12}".prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
        ]
    }

    fn arguments() -> impl Strategy<Value = std::collections::BTreeMap<&'static str, Value>> {
        let value = leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map(
            prop::sample::select(vec!["user", "pass", "nested", "list", "other"]),
            value,
            0..5,
        )
    }

    proptest! {
        #[test]
        fn no_sensitive_text_reaches_the_line(
            base in arguments(),
            secrets in prop::collection::vec("SECRET[A-Z0-9]{6}", 4),
        ) {
            let schema = json!({
                "properties": {
                    "pass": {"writeOnly": true},
                    "nested": {"properties": {"key": {"$ref": "#/$defs/secret"}}},
                    "list": {"items": {"anyOf": [{"type": "integer"},
                        {"properties": {"pin": {"x-sensitive": true}}},
                        {"type": "string", "writeOnly": true}]}}
                },
                "$defs": {"secret": {"x-sensitive": true}}
            });
            let mut arguments: Map<String, Value> =
                base.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            arguments.insert("pass".into(), json!({"deep": [secrets[0].clone()]}));
            let nested = arguments.entry("nested").or_insert_with(|| json!({}));
            if let Value::Object(nested) = nested {
                nested.insert("key".into(), json!(secrets[1].clone()));
            }
            let list = arguments.entry("list").or_insert_with(|| json!([]));
            if let Value::Array(list) = list {
                list.push(json!({"pin": secrets[2].clone()}));
                list.push(json!(secrets[3].clone()));
            }
            let shown = bounded(redact(&schema, &Value::Object(arguments))).to_string();
            prop_assert!(!shown.contains("SECRET"), "{}", shown);
        }
    }
}
