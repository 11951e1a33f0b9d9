//! A stdio server's stderr, logged line by line as the sidecar's own
//! events (`server` names it), so `--log-format json` stays one JSON
//! object per line and a crashing server's last words land in the same
//! log, bounded and escaped.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use toolmesh_telemetry::shown;

/// Longest line logged; the rest of a longer one is counted, not kept.
pub(crate) const MAX_LINE: usize = 4096;

/// Logs every line `stderr` carries until it ends (the server exited).
pub(crate) async fn forward(stderr: impl AsyncRead + Unpin, label: Arc<str>) {
    read_lines(stderr, |line, dropped| {
        if dropped == 0 {
            tracing::info!(server = %label, "{line}");
        } else {
            tracing::info!(server = %label, "{line}… (+{dropped} bytes)");
        }
    })
    .await;
}

/// Calls `emit` with each non-empty line (without its `\n` or `\r\n`, at
/// most [`MAX_LINE`] bytes of it, control characters escaped) and the
/// count of bytes cut from it. Memory stays bounded by [`MAX_LINE`] however
/// long a line is. A read error ends it like the end of the stream.
async fn read_lines(reader: impl AsyncRead + Unpin, mut emit: impl FnMut(&str, usize)) {
    let mut reader = BufReader::new(reader);
    let mut line = Vec::with_capacity(256);
    let mut dropped = 0;
    let mut flush = |line: &mut Vec<u8>, dropped: &mut usize| {
        if line.last() == Some(&b'\r') && *dropped == 0 {
            line.pop();
        }
        if !line.is_empty() || *dropped > 0 {
            let text = String::from_utf8_lossy(line);
            emit(&shown::clip(&text, text.len()), *dropped);
        }
        line.clear();
        *dropped = 0;
    };
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => buf,
            _ => break,
        };
        let end = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..end.unwrap_or(buf.len())];
        let room = MAX_LINE - line.len();
        let kept = chunk.len().min(room);
        line.extend_from_slice(&chunk[..kept]);
        dropped += chunk.len() - kept;
        let used = chunk.len() + usize::from(end.is_some());
        reader.consume(used);
        if end.is_some() {
            flush(&mut line, &mut dropped);
        }
    }
    flush(&mut line, &mut dropped);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::*;

    async fn lines(input: &[u8]) -> Vec<(String, usize)> {
        let mut seen = Vec::new();
        read_lines(input, |line, dropped| seen.push((line.to_owned(), dropped))).await;
        seen
    }

    fn run<T>(future: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn splits_on_newlines_and_keeps_a_last_line_without_one() {
        let seen = run(lines(b"Starting server...\r\n\nlistening\npanic: boom"));
        assert_eq!(
            seen,
            [
                ("Starting server...".to_owned(), 0),
                ("listening".to_owned(), 0),
                ("panic: boom".to_owned(), 0)
            ]
        );
    }

    #[test]
    fn escapes_control_characters_and_replaces_bad_utf8() {
        let seen = run(lines(b"\x1b[31mred\x1b[0m \xff\n"));
        assert_eq!(seen, [("\\u{1b}[31mred\\u{1b}[0m \u{fffd}".to_owned(), 0)]);
    }

    #[test]
    fn a_long_line_is_cut_and_the_rest_counted() {
        let mut input = vec![b'a'; MAX_LINE + 10];
        input.extend_from_slice(b"\nnext\n");
        let seen = run(lines(&input));
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].0.len(), MAX_LINE);
        assert_eq!(seen[0].1, 10);
        assert_eq!(seen[1], ("next".to_owned(), 0));
    }

    proptest! {
        /// Whatever the bytes, every line shown is bounded and holds no
        /// control character (an escape is at most six bytes for one), and
        /// lines of printable text come out as they went in.
        #[test]
        fn lines_are_bounded_and_short_text_is_kept(
            raw in proptest::collection::vec(any::<u8>(), 0..20_000),
            text in proptest::collection::vec("[ -~]{0,300}", 0..20),
        ) {
            for (line, _) in run(lines(&raw)) {
                prop_assert!(line.len() <= 6 * MAX_LINE);
                prop_assert!(!line.chars().any(char::is_control));
            }
            let joined = text.join("\n");
            let expected: Vec<(String, usize)> = text
                .iter()
                .filter(|t| !t.is_empty())
                .map(|t| (t.clone(), 0))
                .collect();
            prop_assert_eq!(run(lines(joined.as_bytes())), expected);
        }
    }
}
