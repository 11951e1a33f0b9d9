#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn arg(name: &str, kind: &str, required: bool) -> Argument {
    Argument {
        name: name.into(),
        kind: kind.into(),
        description: String::new(),
        required,
        enum_values: None,
        items: None,
    }
}

#[test]
fn compiles_the_documented_shape() {
    let mut text = arg("text", "string", true);
    text.description = "The text".into();
    let schema = compile(&[text, arg("n", "integer", false)]).unwrap();
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The text"},
                "n": {"type": "integer"},
            },
            "required": ["text"],
            "additionalProperties": false,
        })
    );
}

#[test]
fn empty_list_is_an_empty_object() {
    let schema = compile(&[]).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&json!({})));
    assert!(!validator.is_valid(&json!({"x": 1})));
}

#[test]
fn rejects_duplicates_unknown_types_and_bad_items() {
    let err = compile(&[arg("a", "string", false), arg("a", "integer", false)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "arguments[1].name: \"a\" is already the name of arguments[0]; each argument needs a name of its own"
    );
    let err = compile(&[arg("a", "strnig", false)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "arguments[0].type: found \"strnig\", expected one of string, integer, number, boolean, array, object"
    );
    let err = compile(&[arg("", "string", false)]).unwrap_err();
    assert_eq!((err.index, err.key), (0, "name"));

    let mut items_on_string = arg("a", "string", false);
    items_on_string.items = Some(json!("string"));
    let err = compile(&[arg("b", "string", false), items_on_string]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "arguments[1].items: only applies to arguments of type array, not string"
    );

    let mut bad_items = arg("a", "array", false);
    bad_items.items = Some(json!("float"));
    let err = compile(&[bad_items]).unwrap_err();
    assert_eq!((err.index, err.key), (0, "items"));
    assert!(err.problem.contains("found \"float\""), "{err}");
}

#[test]
fn enum_values_must_match_the_type() {
    let mut mode = arg("mode", "string", true);
    mode.enum_values = Some(vec![json!("fast"), json!(3)]);
    let err = compile(&[mode.clone()]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "arguments[0].enum: value 3 is not of type string"
    );

    mode.enum_values = Some(vec![]);
    let err = compile(&[mode.clone()]).unwrap_err();
    assert_eq!((err.index, err.key), (0, "enum"));

    mode.enum_values = Some(vec![json!("fast"), json!("exact")]);
    let schema = compile(&[mode]).unwrap();
    assert!(jsonschema::is_valid(&schema, &json!({"mode": "fast"})));
    assert!(!jsonschema::is_valid(&schema, &json!({"mode": "slow"})));
}

#[test]
fn array_items_by_name_or_schema() {
    let mut ids = arg("ids", "array", true);
    ids.items = Some(json!("integer"));
    let mut tags = arg("tags", "array", false);
    tags.items = Some(json!({"type": "string", "minLength": 1}));
    let schema = compile(&[ids, tags]).unwrap();
    assert!(jsonschema::is_valid(
        &schema,
        &json!({"ids": [1, 2], "tags": ["a"]})
    ));
    assert!(!jsonschema::is_valid(&schema, &json!({"ids": ["x"]})));
    assert!(!jsonschema::is_valid(
        &schema,
        &json!({"ids": [], "tags": [""]})
    ));
}

/// A value of the given argument type.
fn sample(kind: &str) -> Value {
    match kind {
        "string" => json!("s"),
        "integer" => json!(7),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "array" => json!([1, "x"]),
        _ => json!({"k": null}),
    }
}

/// A value of a different type than `kind`.
fn wrong(kind: &str) -> Value {
    if kind == "string" {
        json!(1)
    } else {
        json!("not that type")
    }
}

fn arguments() -> impl Strategy<Value = Vec<Argument>> {
    proptest::collection::btree_map(
        "[a-zA-Z_][a-zA-Z0-9_]{0,10}",
        (
            proptest::sample::select(TYPES.to_vec()),
            any::<bool>(),
            ".{0,20}",
        ),
        0..8,
    )
    .prop_map(|map| {
        map.into_iter()
            .map(|(name, (kind, required, description))| Argument {
                name,
                kind: kind.into(),
                description,
                required,
                enum_values: None,
                items: None,
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn every_argument_list_compiles_to_a_valid_schema(args in arguments()) {
        let schema = compile(&args).unwrap();
        prop_assert!(jsonschema::meta::is_valid(&schema));
        let validator = jsonschema::validator_for(&schema).unwrap();

        let full: serde_json::Map<String, Value> =
            args.iter().map(|a| (a.name.clone(), sample(&a.kind))).collect();
        prop_assert!(validator.is_valid(&Value::Object(full.clone())));

        let only_required: serde_json::Map<String, Value> = args
            .iter()
            .filter(|a| a.required)
            .map(|a| (a.name.clone(), sample(&a.kind)))
            .collect();
        prop_assert!(validator.is_valid(&Value::Object(only_required)));

        for a in &args {
            let mut without = full.clone();
            without.remove(&a.name);
            prop_assert_eq!(validator.is_valid(&Value::Object(without)), !a.required);

            let mut mistyped = full.clone();
            mistyped.insert(a.name.clone(), wrong(&a.kind));
            prop_assert!(!validator.is_valid(&Value::Object(mistyped)));
        }

        let mut extra = full;
        extra.insert("not-an-argument!".into(), json!(1));
        prop_assert!(!validator.is_valid(&Value::Object(extra)));
    }
}
