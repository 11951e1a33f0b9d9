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
    let mut line = Line::default();
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) if !buf.is_empty() => buf,
            _ => break,
        };
        let end = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..end.unwrap_or(buf.len())];
        line.push(chunk);
        let used = chunk.len() + usize::from(end.is_some());
        reader.consume(used);
        if end.is_some()
            && let Some((text, dropped)) = line.take()
        {
            emit(&text, dropped);
        }
    }
    if let Some((text, dropped)) = line.take() {
        emit(&text, dropped);
    }
}

/// The line being read: its first [`MAX_LINE`] bytes, and how many more.
#[derive(Default)]
struct Line {
    bytes: Vec<u8>,
    dropped: usize,
}

impl Line {
    fn push(&mut self, chunk: &[u8]) {
        let kept = chunk.len().min(MAX_LINE - self.bytes.len());
        self.bytes.extend_from_slice(&chunk[..kept]);
        self.dropped += chunk.len() - kept;
    }

    /// The line as shown (no `\r` before its `\n`, control characters
    /// escaped) and the bytes cut from it, unless it is empty; starts the
    /// next.
    fn take(&mut self) -> Option<(String, usize)> {
        if self.bytes.last() == Some(&b'\r') && self.dropped == 0 {
            self.bytes.pop();
        }
        let dropped = std::mem::take(&mut self.dropped);
        let shown = (!self.bytes.is_empty() || dropped > 0).then(|| {
            let text = String::from_utf8_lossy(&self.bytes);
            (shown::clip(&text, text.len()), dropped)
        });
        self.bytes.clear();
        shown
    }
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
