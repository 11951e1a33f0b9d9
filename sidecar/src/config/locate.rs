//! Where a key's value starts in the YAML text, for the problems found
//! after parsing (a bad schema, a missing program): the YAML is walked again
//! down to the key, and the parser's own position of that value is taken.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::key::{KeyPath, Segment};

/// A 1-based line and column in the YAML text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

/// The error raised on reaching the value: the parser adds its position.
const HERE: &str = "toolmesh: the value sought";

/// The line and column where the value at `key` starts in `yaml`; `None`
/// if the YAML has no such key (a default) or does not parse.
pub(crate) fn position(yaml: &str, key: &KeyPath) -> Option<Position> {
    let error = Find(key.segments())
        .deserialize(serde_yaml_ng::Deserializer::from_str(yaml))
        .err()?;
    if !error.to_string().contains(HERE) {
        return None;
    }
    let location = error.location()?;
    Some(Position {
        line: location.line(),
        column: location.column(),
    })
}

/// Walks down `.0`; fails with [`HERE`] on the value it leads to.
struct Find<'a>(&'a [Segment]);

impl Find<'_> {
    fn leaf<E: de::Error>(self) -> Result<(), E> {
        if self.0.is_empty() {
            Err(E::custom(HERE))
        } else {
            // A scalar where the path goes on: no such key.
            Ok(())
        }
    }
}

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Find<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.leaf()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.leaf()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.leaf()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.leaf()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.leaf()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let Segment::Key(wanted) = first else {
            return Ok(());
        };
        while let Some(key) = map.next_key::<serde_yaml_ng::Value>()? {
            let matches = match &key {
                serde_yaml_ng::Value::String(key) => key == wanted,
                serde_yaml_ng::Value::Number(key) => key.to_string() == *wanted,
                serde_yaml_ng::Value::Bool(key) => key.to_string() == *wanted,
                _ => false,
            };
            if matches {
                return map.next_value_seed(Find(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let Segment::Index(wanted) = *first else {
            return Ok(());
        };
        for _ in 0..wanted {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Find(rest)).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "\
registry: http://x:1
tools:
  - name: a
    backend: {command: [./a.sh, -v]}
  - name: b
    input_schema:
      type: object
      properties: {n: {type: integr}}
";

    fn at(key: &KeyPath) -> Option<(usize, usize)> {
        position(YAML, key).map(|p| (p.line, p.column))
    }

    #[test]
    fn finds_values_in_block_and_flow_style() {
        let tools = KeyPath::root().key("tools");
        assert_eq!(at(&KeyPath::root().key("registry")), Some((1, 11)));
        assert_eq!(at(&tools.index(0).key("name")), Some((3, 11)));
        assert_eq!(
            at(&tools.index(0).key("backend").key("command")),
            Some((4, 24))
        );
        assert_eq!(
            at(&tools.index(0).key("backend").key("command").index(1)),
            Some((4, 33))
        );
        assert_eq!(
            at(&tools
                .index(1)
                .key("input_schema")
                .key("properties")
                .key("n")
                .key("type")),
            Some((8, 30))
        );
        assert_eq!(at(&tools.index(1).key("input_schema")), Some((7, 7)));
    }

    #[test]
    fn a_key_that_is_not_there_has_no_position() {
        let tools = KeyPath::root().key("tools");
        assert_eq!(at(&tools.index(2)), None);
        assert_eq!(at(&tools.index(0).key("timeout")), None);
        assert_eq!(at(&KeyPath::root().key("registry").key("x")), None);
        assert_eq!(position("{not yaml", &KeyPath::root().key("a")), None);
    }
}
