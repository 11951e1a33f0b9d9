//! Schema keywords that are probably typos: JSON Schema ignores a keyword
//! it does not know, so `propertes` or `requried` is legal and checks
//! nothing. A key of a schema that is not a keyword of any draft, and is
//! one typo away from one ([`super::parse::closest`]: `propertes`,
//! `requried`, `additonalProperties`, `readonly`), is reported; any other
//! unknown key (an annotation of the author's own, `x-...`, OpenAPI's
//! `example` or `nullable`) is left alone.

use serde_json::{Map, Value};

use super::key::KeyPath;
use super::parse::closest;
use super::problem::Problem;

/// The keywords of drafts 4 to 2020-12.
const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
    "items",
    "additionalItems",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
];

/// Keys that are no keyword but common on purpose (OpenAPI's): never
/// reported.
const ANNOTATIONS: &[&str] = &[
    "example",
    "nullable",
    "discriminator",
    "externalDocs",
    "xml",
];

/// Keywords whose value is one schema.
const SCHEMA: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "contains",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];

/// Keywords whose value is a list of schemas.
const SCHEMAS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value maps names to schemas.
const NAMED_SCHEMAS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Deepest schema read: deeper ones are not a config's.
const MAX_DEPTH: usize = 32;

/// A warning for each key of `schema` (at `at`), and of the schemas inside
/// it, that is probably a misspelt keyword.
pub(super) fn typos(schema: &Value, at: &KeyPath) -> Vec<Problem> {
    let mut found = Vec::new();
    walk(schema, at, 0, &mut found);
    found
}

fn walk(schema: &Value, at: &KeyPath, depth: usize, found: &mut Vec<Problem>) {
    let Value::Object(object) = schema else {
        return;
    };
    if depth >= MAX_DEPTH {
        return;
    }
    for (key, value) in object {
        let here = at.key(key.as_str());
        if !KEYWORDS.contains(&key.as_str()) {
            if let Some(meant) = meant(key) {
                found.push(Problem::new(
                    here,
                    format!(
                        "not a JSON Schema keyword, did you mean {meant}? (a keyword a schema does not know is ignored: this one checks nothing)"
                    ),
                ));
            }
            continue;
        }
        let key = key.as_str();
        match value {
            Value::Object(_) if SCHEMA.contains(&key) => walk(value, &here, depth + 1, found),
            Value::Object(named) if NAMED_SCHEMAS.contains(&key) => {
                each_named(named, &here, depth, found);
            }
            Value::Array(items) if SCHEMAS.contains(&key) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item, &here.index(index), depth + 1, found);
                }
            }
            _ => {}
        }
    }
}

fn each_named(named: &Map<String, Value>, at: &KeyPath, depth: usize, found: &mut Vec<Problem>) {
    for (name, schema) in named {
        walk(schema, &at.key(name.as_str()), depth + 1, found);
    }
}

/// The keyword `key` was probably meant to be, if it is no annotation
/// and one typo away from a keyword.
fn meant(key: &str) -> Option<&'static str> {
    if key.starts_with("x-") || ANNOTATIONS.contains(&key) {
        return None;
    }
    closest(key, KEYWORDS)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reported(schema: &Value) -> Vec<String> {
        typos(schema, &KeyPath::root().key("input_schema"))
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn a_misspelt_keyword_is_reported_with_the_one_meant() {
        let schema = json!({
            "type": "object",
            "propertes": {"city": {"type": "string"}},
            "requried": ["city"],
            "additonalProperties": false,
        });
        let found = reported(&schema);
        assert_eq!(found.len(), 3, "{found:?}");
        for (typo, meant) in [
            ("propertes", "properties"),
            ("requried", "required"),
            ("additonalProperties", "additionalProperties"),
        ] {
            assert!(
                found.iter().any(|f| f.starts_with(&format!(
                    "input_schema.{typo}: not a JSON Schema keyword, did you mean {meant}?"
                ))),
                "{typo}: {found:?}"
            );
        }
    }

    #[test]
    fn nested_schemas_are_read_and_property_names_are_not_keywords() {
        let schema = json!({
            "type": "object",
            "properties": {
                "typ": {"type": "string", "maxLenght": 3},
                "point": {"type": "object", "properties": {"x": {"minimun": 0}}},
                "list": {"type": "array", "items": {"enmu": ["a"]}},
            },
            "$defs": {"d": {"readonly": true}},
            "anyOf": [{"titel": "t"}],
        });
        let mut found = reported(&schema);
        found.sort();
        let keys: Vec<&str> = found.iter().filter_map(|f| f.split(": ").next()).collect();
        assert_eq!(
            keys,
            [
                "input_schema.$defs.d.readonly",
                "input_schema.anyOf[0].titel",
                "input_schema.properties.list.items.enmu",
                "input_schema.properties.point.properties.x.minimun",
                "input_schema.properties.typ.maxLenght",
            ],
            "{found:?}"
        );
    }

    #[test]
    fn other_unknown_keys_and_values_are_left_alone() {
        let schema = json!({
            "type": "object",
            "x-order": 1,
            "example": {"propertes": 1},
            "nullable": true,
            "units": "km",
            "propertes_of_mine": 1,
            "enum": [{"requried": 1}],
            "default": {"propertes": 2},
            "properties": {"requried": {"type": "string"}},
        });
        assert_eq!(reported(&schema), Vec::<String>::new());
        assert!(reported(&json!(true)).is_empty());
    }
}
