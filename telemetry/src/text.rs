//! The text format's fields and timestamps, byte for byte as
//! tracing-subscriber's `DefaultFields` (without colours) and `SystemTime`
//! write them, at a fraction of their cost: the registry writes a line for
//! every call, and formatting it through `dyn Debug` and colour wrappers
//! that paint nothing was most of the line's cost.
//!
//! What is not plain (the message, whose ANSI escapes are escaped; errors;
//! a string that needs escaping; `log.` fields) is handed to
//! tracing-subscriber's own `DefaultVisitor`, so the output stays its.

use std::{
    cell::Cell,
    fmt,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use toolmesh_proto::digits::Digits;
use tracing::field::{Field, Visit};
use tracing_subscriber::{
    field::{RecordFields, VisitOutput as _},
    fmt::{
        FormatFields,
        format::{DefaultVisitor, Writer},
        time::{self, FormatTime},
    },
};

/// Fields as `DefaultFields` writes them with colours off: `name=value`,
/// space-separated, strings quoted, the message bare.
#[derive(Debug, Default, Clone, Copy)]
pub struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

impl TextVisitor<'_> {
    /// Writes `name=` (a raw identifier's `r#` dropped), then the value.
    fn field(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = self.pad().and_then(|()| {
            let name = field.name();
            self.writer
                .write_str(name.strip_prefix("r#").unwrap_or(name))?;
            self.writer.write_char('=')?;
            value(&mut self.writer)
        });
    }

    /// A space before every field but the first.
    fn pad(&mut self) -> fmt::Result {
        if self.is_empty {
            self.is_empty = false;
            Ok(())
        } else {
            self.writer.write_char(' ')
        }
    }

    /// A field tracing-subscriber's own visitor writes: it pads before
    /// every field it does not skip (`log.` fields), even one it writes
    /// as nothing (an empty message).
    fn delegate(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut text = String::new();
        let mut visitor = DefaultVisitor::new(Writer::new(&mut text), true);
        record(&mut visitor);
        self.result = visitor.finish().and_then(|()| {
            if text.is_empty() && field.name().starts_with("log.") {
                return Ok(());
            }
            self.pad()?;
            self.writer.write_str(&text)
        });
    }
}

/// `value` as `k / 1000` for a whole `k`, when it is the `f64` nearest to
/// that fraction and below 10⁹: then its `Debug` (the shortest decimal that
/// reads back as it, never in exponent form at that size) is `k / 1000`'s
/// decimal, which [`write_thousandths`] writes without the float formatter. Every
/// call's line has one: the call log's `latency_ms`, in microseconds.
fn thousandths(value: f64) -> Option<u64> {
    if value.is_sign_negative() || value.is_nan() || value >= 1e9 {
        return None;
    }
    let k = (value * 1000.0).round();
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "0 <= k < 10^12, a whole number"
    )]
    (k / 1000.0 == value).then_some(k as u64)
}

/// `k / 1000` in decimal as `f64`'s `Debug` writes it: `1.42`, `0.005`,
/// `2.0`.
fn write_thousandths(w: &mut impl fmt::Write, k: u64) -> fmt::Result {
    w.write_str(&Digits::of(k / 1000))?;
    w.write_char('.')?;
    // Three places with their leading zeros (`1005` → `005`), less the
    // trailing ones, but one.
    let places = Digits::of(1000 + k % 1000);
    let fraction = places[1..].trim_end_matches('0');
    w.write_str(if fraction.is_empty() { "0" } else { fraction })
}

/// Whether `value`'s `Debug` is itself in quotes: printable ASCII with no
/// quote or backslash.
fn is_plain(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() != "message" && !field.name().starts_with("log.") && is_plain(value) {
            self.field(field, |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            });
        } else {
            self.delegate(field, |v| v.record_str(field, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field, |w| write!(w, "{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field, |w| write!(w, "{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.field(field, |w| match thousandths(value) {
            Some(k) => write_thousandths(w, k),
            None => write!(w, "{value:?}"),
        });
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(field, |v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" || field.name().starts_with("log.") {
            self.delegate(field, |v| v.record_debug(field, value));
        } else {
            self.field(field, |w| write!(w, "{value:?}"));
        }
    }
}

/// The first second `SystemTime`'s format no longer writes with four
/// digits of year (10000-01-01).
const YEAR_10000: u64 = 253_402_300_800;

thread_local! {
    /// The last second this thread wrote, and its `YYYY-MM-DDTHH:MM:SS`.
    static SECOND: Cell<Option<(u64, [u8; 19])>> = const { Cell::new(None) };
}

/// Timestamps as tracing-subscriber's `SystemTime` writes them (RFC 3339,
/// UTC, microseconds: `2026-12-07T18:30:59.123456Z`), the date and time of
/// day worked out once a second per thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct LineTime;

impl FormatTime for LineTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let Ok(since) = SystemTime::now().duration_since(UNIX_EPOCH) else {
            return time::SystemTime.format_time(w);
        };
        let secs = since.as_secs();
        if secs >= YEAR_10000 {
            return time::SystemTime.format_time(w);
        }
        let prefix = match SECOND.try_with(Cell::get) {
            Ok(Some((second, prefix))) if second == secs => prefix,
            _ => {
                let prefix = second_prefix(secs);
                let _ = SECOND.try_with(|cell| cell.set(Some((secs, prefix))));
                prefix
            }
        };
        let mut fraction = *b".000000Z";
        let mut micros = since.subsec_micros();
        for digit in fraction[1..7].iter_mut().rev() {
            *digit = b'0' + u8::try_from(micros % 10).unwrap_or(0);
            micros /= 10;
        }
        w.write_str(std::str::from_utf8(&prefix).map_err(|_| fmt::Error)?)?;
        w.write_str(std::str::from_utf8(&fraction).map_err(|_| fmt::Error)?)
    }
}

/// `YYYY-MM-DDTHH:MM:SS` of `secs` after the epoch (before year 10000).
fn second_prefix(secs: u64) -> [u8; 19] {
    let text =
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string();
    let mut prefix = [b'0'; 19];
    for (to, from) in prefix.iter_mut().zip(text.bytes()) {
        *to = from;
    }
    prefix
}

#[cfg(test)]
mod tests;
