//! A command's stderr, split into what is kept for an error message and
//! its progress lines ([`crate::progress`]), which are reported and never
//! kept.

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::progress::{MAX_LINE_BYTES, PREFIX, Progress, Update};

/// Reads `reader` to its end: at most `limit + 1` bytes of it are kept
/// (the rest discarded, so the command never blocks on a full pipe), and
/// each progress line is reported to `progress`.
pub(super) async fn read(
    mut reader: impl AsyncRead + Unpin,
    limit: usize,
    progress: Option<&Progress>,
) -> std::io::Result<Vec<u8>> {
    let mut stderr = Stderr::new(limit, progress);
    let mut buf = [0u8; 8192];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(stderr.finish());
        }
        stderr.feed(&buf[..n]);
    }
}

/// Stderr as it arrives, line by line.
struct Stderr<'a> {
    kept: Vec<u8>,
    limit: usize,
    /// The line so far, while it may be a progress line.
    line: Vec<u8>,
    /// The line so far is not a progress line: the rest of it is kept as
    /// it comes.
    passing: bool,
    progress: Option<&'a Progress>,
}

impl<'a> Stderr<'a> {
    fn new(limit: usize, progress: Option<&'a Progress>) -> Self {
        Self {
            kept: Vec::new(),
            limit,
            line: Vec::new(),
            passing: false,
            progress,
        }
    }

    fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let (part, rest, ended) = match chunk.iter().position(|&b| b == b'\n') {
                Some(end) => (&chunk[..=end], &chunk[end + 1..], true),
                None => (chunk, &[][..], false),
            };
            chunk = rest;
            if self.passing {
                self.keep(part);
                self.passing = !ended;
                continue;
            }
            self.line.extend_from_slice(part);
            if ended {
                self.end_line();
            } else if !self.may_be_progress() {
                let line = std::mem::take(&mut self.line);
                self.keep(&line);
                self.passing = true;
            }
        }
    }

    /// Whether the line so far starts as a progress line does, within its
    /// length.
    fn may_be_progress(&self) -> bool {
        let prefix = PREFIX.as_bytes();
        self.line.len() <= MAX_LINE_BYTES
            && (self.line.starts_with(prefix) || prefix.starts_with(&self.line))
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        if text.len() > MAX_LINE_BYTES {
            self.keep(&line);
            return;
        }
        match Update::from_line(&String::from_utf8_lossy(text)) {
            Some(Ok(update)) => {
                if let Some(progress) = self.progress {
                    progress.update(update);
                }
            }
            Some(Err(error)) => tracing::debug!(%error, "progress line ignored"),
            None => self.keep(&line),
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = (self.limit + 1).saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn finish(mut self) -> Vec<u8> {
        if !self.passing && !self.line.is_empty() {
            self.end_line();
        }
        self.kept
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    /// What `chunks` leave kept, and the last progress reported.
    fn split(chunks: &[&[u8]], limit: usize) -> (Vec<u8>, Option<Update>) {
        let (progress, latest) = Progress::channel();
        let mut stderr = Stderr::new(limit, Some(&progress));
        for chunk in chunks {
            stderr.feed(chunk);
        }
        let kept = stderr.finish();
        let update = latest.borrow().clone();
        (kept, update)
    }

    #[test]
    fn progress_lines_are_reported_and_not_kept() {
        let text = b"starting\ntoolmesh-progress {\"fraction\":0.5,\"message\":\"step 2 of 4\"}\nwarning: slow\ntoolmesh-progress {\"fraction\": 0.75}";
        let (kept, update) = split(&[text], 1024);
        assert_eq!(kept, b"starting\nwarning: slow\n");
        assert_eq!(update, Some(Update::new(Some(0.75), "")));
    }

    #[test]
    fn malformed_progress_lines_are_dropped() {
        let (kept, update) = split(&[b"toolmesh-progress oops\nreal error\n"], 1024);
        assert_eq!(kept, b"real error\n");
        assert_eq!(update, None);
    }

    #[test]
    fn an_overlong_progress_line_is_kept_as_stderr() {
        let long = format!(
            "{PREFIX} {{\"message\": \"{}\"}}\n",
            "x".repeat(MAX_LINE_BYTES)
        );
        let (kept, update) = split(&[long.as_bytes()], 64 * 1024);
        assert_eq!(kept, long.as_bytes());
        assert_eq!(update, None);
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let (kept, _) = split(&[&[b'x'; 100], b"\n", &[b'y'; 100]], 10);
        assert_eq!(kept.len(), 11);
    }

    #[tokio::test]
    async fn a_command_reports_progress_and_its_error_leaves_it_out() {
        use crate::tool::Backend as _;

        let script = r#"echo 'toolmesh-progress {"fraction": 0.5, "message": "half"}' >&2; echo boom >&2; exit 1"#;
        let backend = super::super::CommandBackend::new(
            "sh".into(),
            vec!["-c".into(), script.into()],
            Default::default(),
            None,
            1024,
        );
        let (progress, latest) = Progress::channel();
        let context = crate::CallContext::new("alice", "t-1").with_progress(progress);
        let deadline =
            toolmesh_proto::deadline::Deadline::after(std::time::Duration::from_secs(10));
        let outcome = backend.call("{}", &context, deadline).await.unwrap();
        assert!(outcome.is_error);
        assert_eq!(
            outcome.result_json,
            r#""command failed (exit code 1): boom""#
        );
        assert_eq!(*latest.borrow(), Some(Update::new(Some(0.5), "half")));
    }

    proptest! {
        #[test]
        fn any_stderr_splits_the_same_however_it_arrives(
            lines in proptest::collection::vec(
                prop_oneof![
                    "[^\n]{0,40}",
                    "toolmesh-progress [^\n]{0,40}",
                    Just(r#"toolmesh-progress {"fraction":0.5,"message":"half"}"#.to_owned()),
                ],
                0..8,
            ),
            cut in proptest::collection::vec(0usize..400, 0..6),
            limit in 0usize..300,
        ) {
            let text = lines.join("\n").into_bytes();
            let (whole, whole_update) = split(&[&text], limit);
            prop_assert!(whole.len() <= limit + 1);
            let mut cuts: Vec<usize> = cut.into_iter().map(|c| c.min(text.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut start = 0;
            for end in cuts {
                chunks.push(&text[start..end]);
                start = end;
            }
            chunks.push(&text[start..]);
            let (pieces, pieces_update) = split(&chunks, limit);
            prop_assert_eq!(whole, pieces);
            prop_assert_eq!(whole_update, pieces_update);
        }
    }
}
