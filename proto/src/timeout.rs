//! The `grpc-timeout` request header (gRPC over HTTP/2 spec): at most eight
//! ASCII digits followed by a unit, `H`, `M`, `S`, `m` (ms), `u` (µs) or `n`
//! (ns); and the one rule both servers follow to answer within it.

use std::sync::LazyLock;
use std::time::Duration;

use tonic::metadata::AsciiMetadataKey;

/// The metadata key of the header.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";

/// [`GRPC_TIMEOUT`] parsed once: every call reads or writes it.
pub static GRPC_TIMEOUT_KEY: LazyLock<AsciiMetadataKey> =
    LazyLock::new(|| AsciiMetadataKey::from_static(GRPC_TIMEOUT));

/// Parses a `grpc-timeout` value; `None` if it is malformed.
pub fn parse(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `timeout` as a `grpc-timeout` value: in the finest unit whose eight
/// digits hold it (microseconds up to 100 s), rounded down, so the
/// deadline a server reads is never later than the caller's; capped at
/// 99,999,999 hours.
pub fn encode(timeout: Duration) -> String {
    const MAX: u64 = 99_999_999;
    // Every call sends one: written without `format!` (and its 128-bit
    // division), which was most of the cost of the call's headers.
    let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
    let (n, unit) = [
        (1, 'u'),
        (1_000, 'm'),
        (1_000_000, 'S'),
        (60_000_000, 'M'),
        (3_600_000_000, 'H'),
    ]
    .into_iter()
    .map(|(per_unit, unit)| (micros / per_unit, unit))
    .find(|&(n, _)| n <= MAX)
    .unwrap_or((MAX, 'H'));
    let mut text = String::with_capacity(9);
    crate::digits::push(&mut text, n);
    text.push(unit);
    text
}

/// Longest [`answer_margin`].
pub const MAX_ANSWER_MARGIN: Duration = Duration::from_millis(100);

/// How long before a caller's deadline a server answers `DEADLINE_EXCEEDED`
/// itself: a twentieth of the time the caller gave, at most
/// [`MAX_ANSWER_MARGIN`]. Both servers keep it back, so that their answer
/// (with its message) reaches the caller before the caller's own timer
/// fires, and before tonic's server-side `grpc-timeout` timer answers a bare
/// `CANCELLED`.
pub fn answer_margin(timeout: Duration) -> Duration {
    (timeout / 20).min(MAX_ANSWER_MARGIN)
}

/// What a server may spend of a caller's `timeout`: all but the
/// [`answer_margin`].
pub fn answer_within(timeout: Duration) -> Duration {
    timeout - answer_margin(timeout)
}

/// The remaining deadline a request carries, if it carries a valid one.
pub fn of<T>(request: &tonic::Request<T>) -> Option<Duration> {
    request
        .metadata()
        .get(&*GRPC_TIMEOUT_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(parse)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn round_trips_every_unit(n in 0u64..100_000_000, unit in proptest::sample::select(vec!['H', 'M', 'S', 'm', 'u', 'n'])) {
            let expected = match unit {
                'H' => Duration::from_secs(n * 3600),
                'M' => Duration::from_secs(n * 60),
                'S' => Duration::from_secs(n),
                'm' => Duration::from_millis(n),
                'u' => Duration::from_micros(n),
                _ => Duration::from_nanos(n),
            };
            prop_assert_eq!(parse(&format!("{n}{unit}")), Some(expected));
        }

        #[test]
        fn encodes_what_parses_back_no_later_and_within_a_unit(micros in 0u64..10_000_000_000_000) {
            let timeout = Duration::from_micros(micros);
            let encoded = encode(timeout);
            let parsed = parse(&encoded);
            prop_assert!(parsed.is_some(), "{encoded}");
            let parsed = parsed.unwrap_or_default();
            prop_assert!(parsed <= timeout, "{encoded}");
            // A coarser unit is chosen only past 1e8 of the finer one, so
            // at least 1e5 of it are sent: less than 1e-5 lost.
            prop_assert!((timeout - parsed).as_secs_f64() <= timeout.as_secs_f64() / 1e5 + 1e-6, "{encoded}");
        }

        #[test]
        fn never_panics(value in "\\PC{0,12}") {
            let _ = parse(&value);
        }
    }

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("10S"), Some(Duration::from_secs(10)));
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse("99999999n"), Some(Duration::from_nanos(99_999_999)));
    }

    #[test]
    fn refuses_malformed_values() {
        for bad in [
            "",
            "S",
            "10",
            "10s",
            "123456789S",
            "-1S",
            "1.5S",
            "1 S",
            "é",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_margin_is_a_twentieth_up_to_100ms() {
        assert_eq!(
            answer_within(Duration::from_millis(400)),
            Duration::from_millis(380)
        );
        assert_eq!(
            answer_within(Duration::from_secs(1)),
            Duration::from_millis(950)
        );
        assert_eq!(
            answer_within(Duration::from_secs(30)),
            Duration::from_millis(29_900)
        );
        assert_eq!(answer_within(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn round_trips_what_tonic_sends() {
        let mut request = tonic::Request::new(());
        request.set_timeout(Duration::from_millis(1500));
        let parsed = of(&request).expect("a timeout");
        assert!(parsed >= Duration::from_millis(1499) && parsed <= Duration::from_millis(1500));
    }
}
