//! JSON parsing that refuses an object with the same key twice, at any
//! depth.
//!
//! RFC 8259 leaves duplicate keys to the parser, and parsers disagree:
//! serde_json keeps the last value, others keep the first. If the registry
//! validated one value and the tool read another, a schema would check
//! nothing, so arguments with a repeated key are refused instead.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a text was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StrictJsonError {
    /// Not JSON.
    #[error(transparent)]
    Syntax(serde_json::Error),
    /// An object has `key` twice; `pointer` (RFC 6901) is the object.
    #[error("duplicate key {key:?} in the object at {pointer:?}")]
    DuplicateKey {
        /// JSON Pointer to the object holding the key twice (`""`: the top).
        pointer: String,
        /// The repeated key.
        key: String,
    },
}

/// Parses `text` as one JSON value, refusing duplicate keys.
pub(crate) fn from_str(text: &str) -> Result<Value, StrictJsonError> {
    let duplicate = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = StrictValue {
        path: &Path::Root,
        duplicate: &duplicate,
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value));
    match (parsed, duplicate.into_inner()) {
        (_, Some((pointer, key))) => Err(StrictJsonError::DuplicateKey { pointer, key }),
        (Ok(value), None) => Ok(value),
        (Err(error), None) => Err(StrictJsonError::Syntax(error)),
    }
}

/// Where a value is, as a chain back to the top; written out only when a
/// duplicate is found.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn pointer(&self) -> String {
        match self {
            Self::Root => String::new(),
            Self::Key(parent, key) => {
                format!(
                    "{}/{}",
                    parent.pointer(),
                    key.replace('~', "~0").replace('/', "~1")
                )
            }
            Self::Index(parent, index) => format!("{}/{index}", parent.pointer()),
        }
    }
}

/// The first duplicate found: the object's pointer and the key.
type Duplicate = RefCell<Option<(String, String)>>;

struct StrictValue<'a> {
    path: &'a Path<'a>,
    duplicate: &'a Duplicate,
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        loop {
            let path = Path::Index(self.path, items.len());
            let seed = StrictValue {
                path: &path,
                duplicate: self.duplicate,
            };
            match seq.next_element_seed(seed)? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let pointer = self.path.pointer();
                *self.duplicate.borrow_mut() = Some((pointer, key));
                return Err(de::Error::custom("duplicate key"));
            }
            let path = Path::Key(self.path, &key);
            let value = map.next_value_seed(StrictValue {
                path: &path,
                duplicate: self.duplicate,
            })?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn duplicate(text: &str) -> (String, String) {
        match from_str(text) {
            Err(StrictJsonError::DuplicateKey { pointer, key }) => (pointer, key),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_with_its_place() {
        assert_eq!(
            duplicate(r#"{"text":5,"text":"second"}"#),
            (String::new(), "text".into())
        );
        assert_eq!(
            duplicate(r#"{"a":[1,{"b":{"c":1,"c":2}}]}"#),
            ("/a/1/b".into(), "c".into())
        );
        assert_eq!(
            duplicate(r#"{"a/b~":{"x":1,"y":2,"x":3}}"#),
            ("/a~1b~0".into(), "x".into())
        );
        // The same key in sibling objects is not a duplicate.
        assert_eq!(
            from_str(r#"[{"a":1},{"a":2}]"#).unwrap(),
            json!([{"a":1},{"a":2}])
        );
        // Escapes are decoded before keys are compared.
        assert_eq!(
            duplicate(r#"{"a":1,"\u0061":2}"#),
            (String::new(), "a".into())
        );
    }

    #[test]
    fn syntax_errors_and_trailing_text_are_syntax_errors() {
        for text in ["{", "[1,]", "{} {}", "nul", r#"{"a":1}x"#] {
            assert!(
                matches!(from_str(text), Err(StrictJsonError::Syntax(_))),
                "{text}"
            );
        }
    }

    #[test]
    fn nesting_is_bounded_by_the_parser() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(matches!(from_str(&deep), Err(StrictJsonError::Syntax(_))));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Without duplicates it reads what serde_json reads.
        #[test]
        fn agrees_with_serde_json_on_texts_without_duplicates(value in json_value()) {
            let text = serde_json::to_string(&value).unwrap();
            prop_assert_eq!(from_str(&text).unwrap(), serde_json::from_str::<Value>(&text).unwrap());
        }
    }
}
