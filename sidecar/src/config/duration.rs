//! The `timeout` and `task_timeout` keys: a duration with a unit (`2s`, `500ms`, `1m 30s`). A
//! bare number is refused with the example that fixes it, rather than
//! guessed to be seconds.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

use super::allowed::DURATION;

/// Deserializes an optional duration (a YAML null is `None`).
pub(super) fn optional<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    deserializer.deserialize_any(DurationVisitor)
}

fn no_unit(number: impl fmt::Display) -> String {
    format!("found {number} (a number without a unit), expected {DURATION}")
}

struct DurationVisitor;

impl<'de> Visitor<'de> for DurationVisitor {
    type Value = Option<Duration>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DURATION)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        match humantime::parse_duration(text) {
            Ok(duration) => Ok(Some(duration)),
            Err(humantime::DurationError::UnknownUnit { unit, value, .. }) if unit.is_empty() => {
                Err(E::custom(no_unit(value)))
            }
            Err(humantime::DurationError::UnknownUnit { unit, .. }) => Err(E::custom(format!(
                "found {text:?} (unknown unit {unit:?}), expected {DURATION}; units: ms, s, m, h"
            ))),
            Err(_) => Err(E::custom(format!("found {text:?}, expected {DURATION}"))),
        }
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Self::Value, E> {
        Err(E::custom(no_unit(number)))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Self::Value, E> {
        Err(E::custom(no_unit(number)))
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Self::Value, E> {
        Err(E::custom(no_unit(number)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}
