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
    let args =
        json!({"a":"z","p":"abc","n":7,"c":4,"o":{"zz":1},"e":{"k":1,"j":2},"extra":1,"more~/":2});
    let mut found: Vec<(String, String)> = validator
        .check(&args)
        .unwrap_err()
        .into_iter()
        .map(|v| (v.pointer, v.message))
        .collect();
    found.sort();
    let allowed = r#"not allowed here; the allowed properties are "a", "c", "e", "n", "o", "p""#;
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
