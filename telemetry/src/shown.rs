//! How text that came from a client (tool names, instance ids, keys,
//! argument values, peers' messages) is shown in errors and log lines:
//! bounded, whatever its size, and escaped, so that it can neither start a
//! log line of its own nor make an error too large for a client's metadata
//! limit.
//!
//! - [`Quoted`]: a name or id, in double quotes, at most [`QUOTED_MAX`]
//!   bytes of it.
//! - [`Clipped`]: free text (a message that may quote a value), at most
//!   [`CLIPPED_MAX`] bytes of it, control characters escaped.
//! - [`clip`]: the same as an owned string, with a limit of the caller's.
//! - [`secret_tag`]: how a secret (a lease id) is named: never whole.

use std::fmt;

/// Most bytes of a name or id shown.
pub const QUOTED_MAX: usize = 128;

/// Most bytes of free text shown.
pub const CLIPPED_MAX: usize = 512;

/// A name or id as Rust's `{:?}` writes a string (quotes, escapes), cut
/// after [`QUOTED_MAX`] bytes with the size of the rest:
/// `"aaaa…"(+1048448 bytes)`.
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (head, rest) = split(self.0, QUOTED_MAX);
        write!(f, "{head:?}")?;
        if rest > 0 {
            write!(f, "(+{rest} bytes)")?;
        }
        Ok(())
    }
}

/// Free text with control characters escaped (`\n`, `\u{1b}`), cut after
/// [`CLIPPED_MAX`] bytes with the size of the rest: `text… (+N bytes)`.
#[derive(Debug, Clone, Copy)]
pub struct Clipped<'a>(pub &'a str);

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_clipped(f, self.0, CLIPPED_MAX)
    }
}

/// How logs name a secret such as a lease id (a bearer token: whoever holds
/// it can heartbeat or withdraw the instance): the first 8 hex digits of
/// its SHA-256, enough to tell one lease's lines from another's.
pub fn secret_tag(secret: &str) -> String {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(secret.as_bytes())
        .iter()
        .take(4)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `text` as [`Clipped`] shows it, but cut after `max` bytes.
pub fn clip(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 24);
    // Writing to a String cannot fail.
    let _ = write_clipped(&mut out, text, max);
    out
}

fn write_clipped(out: &mut impl fmt::Write, text: &str, max: usize) -> fmt::Result {
    let (head, rest) = split(text, max);
    for c in head.chars() {
        if c.is_control() {
            write!(out, "{}", c.escape_default())?;
        } else {
            out.write_char(c)?;
        }
    }
    if rest > 0 {
        write!(out, "… (+{rest} bytes)")?;
    }
    Ok(())
}

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary, and how many bytes are left after it.
fn split(text: &str, max: usize) -> (&str, usize) {
    if text.len() <= max {
        return (text, 0);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn short_text_is_shown_whole() {
        assert_eq!(Quoted("lookup").to_string(), r#""lookup""#);
        assert_eq!(Clipped("no such tool").to_string(), "no such tool");
    }

    #[test]
    fn long_text_is_cut_and_says_how_much_is_left() {
        let long = "a".repeat(1 << 20);
        let quoted = Quoted(&long).to_string();
        assert_eq!(
            quoted,
            format!(
                "\"{}\"(+{} bytes)",
                "a".repeat(QUOTED_MAX),
                (1 << 20) - QUOTED_MAX
            )
        );
        let clipped = Clipped(&long).to_string();
        assert!(clipped.ends_with(&format!("… (+{} bytes)", (1 << 20) - CLIPPED_MAX)));
        assert_eq!(clip("abcdef", 3), "abc… (+3 bytes)");
    }

    #[test]
    fn line_breaks_and_escapes_cannot_start_a_line() {
        let forged = "x\n2026-11-30T00:00:00Z  INFO forged\r\u{1b}[2J";
        for shown in [Quoted(forged).to_string(), Clipped(forged).to_string()] {
            assert!(!shown.contains(['\n', '\r', '\u{1b}']), "{shown}");
            assert!(shown.contains(r"\n"), "{shown}");
        }
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let text = "é".repeat(100);
        assert_eq!(clip(&text, 3), "é… (+198 bytes)");
    }

    proptest! {
        #[test]
        fn shown_text_is_bounded_and_single_line(text in ".{0,400}", max in 0usize..300) {
            let clipped = clip(&text, max);
            prop_assert!(!clipped.contains(['\n', '\r']));
            // Each byte kept may become an escape of at most 10 bytes.
            prop_assert!(clipped.len() <= max * 10 + 32);
            let quoted = Quoted(&text).to_string();
            prop_assert!(!quoted.contains(['\n', '\r']));
            prop_assert!(quoted.len() <= QUOTED_MAX * 10 + 32);
        }
    }
}
