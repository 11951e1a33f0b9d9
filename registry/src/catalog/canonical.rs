//! One text per JSON value, whatever its key order or spacing: object keys
//! sorted by their UTF-8 bytes, no whitespace, strings and numbers as
//! `serde_json` writes them. What digests over JSON are taken of.

use std::fmt::Write as _;

use serde_json::Value;

/// The SHA-256 of `value`'s canonical text, as lowercase hex.
pub(crate) fn sha256_hex(value: &Value) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(json(value).as_bytes()).iter().fold(
        String::with_capacity(64),
        |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        },
    )
}

/// The canonical text of `value`.
pub(crate) fn json(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}", Value::String(key.clone()));
                out.push(':');
                write(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        scalar => {
            let _ = write!(out, "{scalar}");
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_and_spacing_do_not_matter() {
        let a: Value =
            serde_json::from_str(r#"{"b": {"y": 1, "x": [2, "é"]}, "a": null}"#).expect("json");
        let b: Value = serde_json::from_str(r#"{"a":null,"b":{"x":[2,"é"],"y":1}}"#).expect("json");
        assert_eq!(json(&a), json(&b));
        assert_eq!(json(&a), r#"{"a":null,"b":{"x":[2,"é"],"y":1}}"#);
        assert_ne!(json(&json!([1, 2])), json(&json!([2, 1])));
    }

    proptest! {
        #[test]
        fn the_text_parses_back_to_the_value(keys in proptest::collection::vec("[a-z\"\\\\]{0,4}", 0..6)) {
            let value = Value::Object(
                keys.iter().enumerate().map(|(i, k)| (k.clone(), json!(i))).collect(),
            );
            let back: Value = serde_json::from_str(&json(&value)).expect("parses");
            prop_assert_eq!(back, value);
        }
    }
}
