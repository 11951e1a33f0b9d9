//! One text per JSON value, whatever its key order or spacing: object keys
//! sorted by their UTF-8 bytes, no whitespace, strings and numbers as
//! `serde_json` writes them. What digests over JSON are taken of.

use serde_json::Value;

/// The SHA-256 of `value`'s canonical text, as lowercase hex.
pub(crate) fn sha256_hex(value: &Value) -> String {
    use sha2::Digest as _;
    let mut text = Vec::new();
    write(value, &mut text);
    let mut hex = String::with_capacity(64);
    toolmesh_proto::digits::push_hex(&mut hex, &sha2::Sha256::digest(&text));
    hex
}

/// The canonical text of `value`.
pub(crate) fn json(value: &Value) -> String {
    let mut text = Vec::new();
    write(value, &mut text);
    // serde_json writes UTF-8 only.
    String::from_utf8(text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes `value` with its objects' keys in byte order and no space; keys,
/// strings and numbers as serde_json writes them.
fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                scalar(key, out);
                out.push(b':');
                write(value, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        other => scalar(other, out),
    }
}

fn scalar<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing to a `Vec` cannot fail, nor can serializing a string or a
    // JSON scalar.
    let _ = serde_json::to_writer(out, value);
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

    #[test]
    fn strings_and_numbers_are_written_as_serde_json_writes_them() {
        let value: Value = serde_json::from_str(
            r#"{"é\"\\\n\u0001":[-1.5e-7,12345678901234567890,0.1,-0,1e300,"😀\t✓"],"":{}}"#,
        )
        .expect("json");
        assert_eq!(
            json(&value),
            r#"{"":{},"é\"\\\n\u0001":[-1.5e-7,12345678901234567890,0.1,-0.0,1e+300,"😀\t✓"]}"#
        );
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
