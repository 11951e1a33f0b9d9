use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use tracing_subscriber::{
    fmt::{MakeWriter, format::DefaultFields},
    layer::SubscriberExt as _,
};

use super::*;

/// A writer into a shared buffer.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Self;

    fn make_writer(&'a self) -> Self {
        self.clone()
    }
}

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().map(|b| b.clone()).unwrap_or_default()).unwrap_or_default()
    }
}

/// What `emit` logs, as the text format writes it with `fields` (no
/// timestamps, no colours).
fn written<N>(fields: N, emit: &dyn Fn()) -> String
where
    N: for<'w> FormatFields<'w> + Send + Sync + 'static,
{
    let buffer = Buffer::default();
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .without_time()
        .fmt_fields(fields)
        .with_writer(buffer.clone());
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("call", tool = "echo", r#type = 3_u64, ratio = 0.5);
        let _entered = span.enter();
        emit();
    });
    buffer.text()
}

fn same_as_default_fields(emit: &dyn Fn()) {
    let ours = written(TextFields, emit);
    let theirs = written(DefaultFields::new(), emit);
    assert!(!ours.is_empty());
    assert_eq!(ours, theirs);
}

#[derive(Debug)]
struct Outer(std::io::Error);

impl fmt::Display for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("outer failed")
    }
}

impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn every_kind_of_field_is_written_as_default_fields_writes_it() {
    same_as_default_fields(&|| {
        tracing::info!(
            tool = "echo",
            latency_ms = 0.125,
            whole = 2.0,
            huge = 1e300,
            attempts = 1_u32,
            below = -4_i64,
            replayed = true,
            missing = None::<&str>,
            present = Some("v1"),
            shown = %"display text",
            debugged = ?vec![1, 2],
            r#type = "raw",
            "call"
        );
    });
    same_as_default_fields(&|| {
        let error = Outer(std::io::Error::other("inner \"quoted\""));
        tracing::warn!(
            error = &error as &(dyn std::error::Error + 'static),
            "it failed: {}",
            3
        );
    });
    same_as_default_fields(&|| {
        tracing::info!(
            quoted = "say \"hi\"",
            slash = "a\\b",
            unicode = "café ☕",
            control = "tab\there\nline\u{1b}[31m",
            empty = "",
            message_first = "x",
            "escapes \u{1b}[2J in the message"
        );
    });
    same_as_default_fields(&|| tracing::info!(only = 1_u64));
    same_as_default_fields(&|| tracing::info!("only a message"));
}

proptest! {
    #[test]
    fn any_string_field_is_written_as_default_fields_writes_it(value in ".{0,40}", message in ".{0,20}") {
        let emit = || tracing::info!(value = value.as_str(), other = 7_u64, "{}", message);
        let ours = written(TextFields, &emit);
        let theirs = written(DefaultFields::new(), &emit);
        prop_assert_eq!(ours, theirs);
    }
}

#[test]
fn timestamps_read_as_system_times_do() {
    let mut ours = String::new();
    let mut theirs = String::new();
    let before = SystemTime::now();
    LineTime
        .format_time(&mut Writer::new(&mut ours))
        .expect("writes");
    time::SystemTime
        .format_time(&mut Writer::new(&mut theirs))
        .expect("writes");
    let after = SystemTime::now();
    assert_eq!(ours.len(), theirs.len(), "{ours} {theirs}");
    assert_eq!(ours.len(), "2026-12-07T18:30:59.123456Z".len());
    let at = humantime::parse_rfc3339(&ours).expect("RFC 3339");
    let whole = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0)
    };
    assert!(
        whole(before) <= whole(at) && whole(at) <= whole(after),
        "{ours}"
    );
    // Same minute (the two were taken microseconds apart).
    assert!(
        theirs.starts_with(&ours[..14]) || ours[17..19] == *"59",
        "{ours} {theirs}"
    );
}

#[test]
fn a_seconds_prefix_is_its_date_and_time_of_day() {
    assert_eq!(&second_prefix(0), b"1970-01-01T00:00:00");
    assert_eq!(&second_prefix(1_796_236_259), b"2026-12-02T18:30:59");
    assert_eq!(&second_prefix(YEAR_10000 - 1), b"9999-12-31T23:59:59");
}

fn thousandths_text(k: u64) -> String {
    let mut text = String::new();
    write_thousandths(&mut text, k).unwrap_or_default();
    text
}

proptest! {
    #[test]
    fn thousandths_are_written_as_debug_writes_them(micros in 0u64..10_000_000_000, any in any::<f64>()) {
        #[allow(clippy::cast_precision_loss, reason = "below 2^53")]
        let latency = micros as f64 / 1000.0;
        for value in [latency, any, -latency] {
            let written = thousandths(value).map(thousandths_text);
            if let Some(written) = written {
                prop_assert_eq!(written, format!("{value:?}"));
            }
        }
        prop_assert!(latency >= 1e9 || thousandths(latency).is_some(), "{latency} not taken");
    }
}

#[test]
fn thousandths_at_their_edges() {
    for (value, text) in [
        (0.0, "0.0"),
        (0.001, "0.001"),
        (1.5, "1.5"),
        (2.0, "2.0"),
        (999_999_999.999, "999999999.999"),
    ] {
        assert_eq!(
            thousandths(value).map(thousandths_text).as_deref(),
            Some(text)
        );
    }
    for value in [-0.0, -1.0, 1e9, f64::NAN, f64::INFINITY, 0.0001, 1.2345] {
        assert_eq!(thousandths(value), None, "{value}");
    }
}
