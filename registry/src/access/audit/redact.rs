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
pub(crate) const REDACTED: &str = "[redacted]";

/// Most bytes of (redacted) arguments written in one record.
pub(crate) const ARGUMENTS_MAX: usize = 64 * 1024;

/// Arguments nested deeper than this are redacted below it, if any schema
/// node still applies there.
pub(crate) const MAX_DEPTH: usize = 64;

/// Most schema nodes gathered for one value; past it the value is redacted.
pub(crate) const MAX_NODES: usize = 256;

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
#[cfg(test)]
pub(crate) fn redact(schema: &Value, arguments: &Value) -> Value {
    Redactor::new(schema).redact(arguments)
}

/// `arguments` as written: itself if its JSON is at most [`ARGUMENTS_MAX`]
/// bytes, else `{"truncated": true, "bytes": N}`.
pub(crate) fn bounded(arguments: Value) -> Value {
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
mod tests;
