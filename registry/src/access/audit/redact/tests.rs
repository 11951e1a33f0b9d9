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
