//! The sidecar's `arguments` shorthand: a list of `Argument`s, read from
//! YAML as the sidecar reads `tools[].arguments`, compiled by
//! `arguments::compile`. What compiles must be a schema for an object whose
//! properties are exactly the arguments, and, unless an argument brings a
//! schema of its own in `items`, one the registry accepts at announce.
//!
//! Input: a YAML list of arguments, UTF-8, e.g.
//! `- {name: text, type: string, required: true}`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolmesh_registry::catalog::validate;
use toolmesh_sidecar::arguments::{self, Argument};

fuzz_target!(|data: &[u8]| {
    let Ok(yaml) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(args) = serde_yaml_ng::from_str::<Vec<Argument>>(yaml) else {
        return;
    };
    let schema = match arguments::compile(&args) {
        Ok(schema) => schema,
        Err(error) => {
            assert!(error.index < args.len(), "{error}");
            return;
        }
    };
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .expect("a compiled schema has properties");
    assert_eq!(properties.len(), args.len());
    for arg in &args {
        assert!(
            properties.contains_key(&arg.name),
            "{} is missing",
            arg.name
        );
    }
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .expect("a compiled schema has required");
    assert_eq!(required.len(), args.iter().filter(|a| a.required).count());
    if args
        .iter()
        .all(|a| matches!(a.items, None | Some(Value::String(_))))
        && let Err(error) = validate::compile(&schema.to_string())
    {
        panic!("the registry refuses a compiled shorthand: {error}\n{schema}");
    }
});
