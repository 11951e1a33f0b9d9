//! Rules of the contract that both sides apply to the same fields, so a
//! registry and a sidecar never read one message two ways.

use std::time::Duration;

/// Largest schema text the registry accepts in a descriptor.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;
/// Longest title the registry accepts.
pub const MAX_TITLE_BYTES: usize = 256;
/// Longest description the registry accepts.
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// The arguments a call means: empty (or blank) `arguments_json` is `{}`,
/// a call with no arguments.
pub fn arguments(arguments_json: &str) -> &str {
    if no_arguments(arguments_json) {
        "{}"
    } else {
        arguments_json
    }
}

/// Whether `arguments_json` is blank: a call with no arguments.
pub fn no_arguments(arguments_json: &str) -> bool {
    arguments_json.trim().is_empty()
}

/// A `google.protobuf.Duration` field as a [`Duration`]: unset, zero,
/// negative or out of range is `None` (the field's default applies).
pub fn duration(field: Option<prost_types::Duration>) -> Option<Duration> {
    field
        .and_then(|d| Duration::try_from(d).ok())
        .filter(|d| !d.is_zero())
}

/// `duration` as a `google.protobuf.Duration` field (`None`: too long to
/// express, which no duration this contract carries is).
pub fn duration_field(duration: Duration) -> Option<prost_types::Duration> {
    prost_types::Duration::try_from(duration).ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn blank_arguments_are_an_empty_object() {
        for blank in ["", " ", "\n\t"] {
            assert_eq!(arguments(blank), "{}");
        }
        assert_eq!(arguments(r#"{"a":1}"#), r#"{"a":1}"#);
    }

    #[test]
    fn unset_zero_and_negative_durations_are_none() {
        assert_eq!(duration(None), None);
        assert_eq!(duration(Some(prost_types::Duration::default())), None);
        let negative = prost_types::Duration {
            seconds: -1,
            nanos: 0,
        };
        assert_eq!(duration(Some(negative)), None);
    }

    proptest! {
        #[test]
        fn durations_round_trip(nanos in 1u64..u64::MAX) {
            let d = Duration::from_nanos(nanos);
            prop_assert_eq!(duration(duration_field(d)), Some(d));
        }
    }
}
