//! What commands print: text for people (tables, pretty JSON), or with
//! `--output json` one JSON document (one per line for `watch`) for scripts.
//! Everything goes through [`print()`] and [`note`]: a closed standard output
//! ends the command quietly ([`Exit::BrokenPipe`]), never with a panic.

use std::fmt::Display;
use std::io::Write as _;

use serde_json::Value;

use crate::failure::{Exit, Failure};

/// `text` and a newline on standard output. A reader that has gone (a pipe
/// into `head`) is [`Failure::broken_pipe`].
pub(crate) fn print(text: impl Display) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::BrokenPipe => Failure::broken_pipe(),
            _ => Failure::plain(
                Exit::Other,
                format!("cannot write to standard output: {error}"),
            ),
        })
}

/// `text` and a newline on standard error, for people; lost if standard
/// error is closed.
pub(crate) fn note(text: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// `--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Output {
    /// For people.
    #[default]
    Text,
    /// For scripts: JSON on stdout, errors included.
    Json,
}

/// `rows` as a table with `headers`, columns padded to their widest cell.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = vec![line(headers.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

/// `value` as indented JSON.
pub(crate) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// `text` cut to `max` characters, with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let rows = vec![
            vec!["add".into(), "Add two integers".into()],
            vec!["word_count".into(), "Count".into()],
        ];
        assert_eq!(
            table(&["NAME", "DESCRIPTION"], &rows),
            "NAME        DESCRIPTION\nadd         Add two integers\nword_count  Count"
        );
    }

    #[test]
    fn long_text_is_clipped_on_one_line() {
        assert_eq!(clip("a  b\nc", 10), "a b c");
        assert_eq!(clip("abcdefghij", 5), "abcd…");
    }
}
