//! An HTTP backend's answer streamed as Server-Sent Events (a 2xx
//! response of `Content-Type: text/event-stream`): `progress` events
//! while it works, then one `result` or `error` event that ends the call.
//!
//! ```text
//! event: progress
//! data: {"fraction": 0.4, "message": "step 2 of 5"}
//!
//! event: result
//! data: {"rows": 12}
//!
//! ```
//!
//! - `progress`: data as a command's progress line's JSON
//!   ([`Update::from_json`]), at most [`MAX_LINE_BYTES`]; reported to the
//!   call's [`Progress`] when it runs as a task. A malformed or longer one
//!   is ignored (logged at debug).
//! - `result`: data is the tool's result, as a 2xx body is; `error`: data
//!   is its error result, as a non-2xx body is (JSON as it is, e.g.
//!   `{"message": "..."}`, other text as a JSON string). Either is bounded
//!   by the tool's output cap and ends the call: the response is dropped
//!   unread past it.
//! - Other events (unnamed ones, `ping`, ...) are ignored.
//! - The stream may carry at most [`MAX_STREAM_BYTES`] besides the
//!   result; a stream past that, or that ends without a result, is a
//!   backend error ([`BackendError::HttpStream`]).

use super::sse::{Event, Parser};
use crate::progress::{MAX_LINE_BYTES, Progress, Update};
use crate::runtime::output_too_large;
use crate::tool::{BackendError, Outcome};

/// The media type of a streamed answer.
pub(super) const EVENT_STREAM: &str = "text/event-stream";

/// Most bytes a stream may carry besides the result (64 MiB): progress
/// events, comments, events the sidecar ignores.
pub const MAX_STREAM_BYTES: usize = 64 * 1024 * 1024;

/// Whether a `Content-Type` value names [`EVENT_STREAM`] (parameters
/// such as `charset` aside).
pub(super) fn is_event_stream(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    essence.eq_ignore_ascii_case(EVENT_STREAM.as_bytes())
}

/// A streamed answer, fed as its chunks arrive.
pub(super) struct Answer<'a> {
    parser: Parser,
    max_output: usize,
    /// Bytes read so far, and the most the stream may carry.
    read: usize,
    limit: usize,
    progress: Option<&'a Progress>,
    events: Vec<Event>,
}

impl<'a> Answer<'a> {
    /// An answer whose result is at most `max_output` bytes, reporting its
    /// progress to `progress` (`None` when the call is not a task).
    pub(super) fn new(max_output: usize, progress: Option<&'a Progress>) -> Self {
        Self {
            parser: Parser::new(max_output.max(MAX_LINE_BYTES)),
            max_output,
            read: 0,
            limit: max_output.saturating_add(MAX_STREAM_BYTES),
            progress,
            events: Vec::new(),
        }
    }

    /// Takes the next chunk: `Some` outcome once the result (or the
    /// error) came, after which the rest of the stream is not read.
    pub(super) fn feed(&mut self, chunk: &[u8]) -> Result<Option<Outcome>, BackendError> {
        self.read = self.read.saturating_add(chunk.len());
        let mut events = std::mem::take(&mut self.events);
        self.parser.feed(chunk, &mut events);
        for event in events.drain(..) {
            if let Some(outcome) = self.take(event) {
                return Ok(Some(outcome));
            }
        }
        self.events = events;
        if self.read > self.limit {
            return Err(BackendError::HttpStream(format!(
                "its event stream passed {} bytes without a result event",
                self.limit
            )));
        }
        Ok(None)
    }

    /// The error of a stream that ended before its result.
    pub(super) fn ended(&self) -> BackendError {
        BackendError::HttpStream(
            "its event stream ended without a result event (`event: result` or `event: error`, \
             then a `data:` line and a blank line)"
                .to_owned(),
        )
    }

    fn take(&self, event: Event) -> Option<Outcome> {
        match event.name.as_str() {
            "result" | "error" if event.oversized => Some(output_too_large(self.max_output)),
            "result" => Some(Outcome::ok(event.data)),
            "error" => Some(Outcome::error(event.data)),
            "progress" => {
                self.progress(&event);
                None
            }
            name => {
                tracing::trace!(event = name, "event ignored");
                None
            }
        }
    }

    fn progress(&self, event: &Event) {
        if event.oversized || event.data.len() > MAX_LINE_BYTES {
            tracing::debug!(
                limit = MAX_LINE_BYTES,
                "progress event ignored: longer than its limit"
            );
            return;
        }
        match Update::from_json(event.data.trim()) {
            Ok(update) => {
                if let Some(progress) = self.progress {
                    progress.update(update);
                }
            }
            Err(error) => tracing::debug!(
                %error,
                "progress event ignored: expected {{\"fraction\": 0.5, \"message\": \"...\"}}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `chunks` answer, and the last progress reported.
    fn answer(
        chunks: &[&[u8]],
        max_output: usize,
    ) -> (Result<Option<Outcome>, String>, Option<Update>) {
        let (progress, latest) = Progress::channel();
        let mut answer = Answer::new(max_output, Some(&progress));
        let mut outcome = Ok(None);
        for chunk in chunks {
            match answer.feed(chunk) {
                Ok(None) => {}
                Ok(Some(done)) => {
                    outcome = Ok(Some(done));
                    break;
                }
                Err(error) => {
                    outcome = Err(error.to_string());
                    break;
                }
            }
        }
        let update = latest.borrow().clone();
        (outcome, update)
    }

    #[test]
    fn content_types() {
        for yes in [
            "text/event-stream",
            "Text/Event-Stream",
            "text/event-stream; charset=utf-8",
            " text/event-stream ;x",
        ] {
            assert!(is_event_stream(yes.as_bytes()), "{yes}");
        }
        for no in ["application/json", "text/event-streams", "text/plain", ""] {
            assert!(!is_event_stream(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn progress_then_the_result() {
        let text = b"event: progress\ndata: {\"fraction\": 0.4, \"message\": \"step 2\"}\n\n: ping\n\nevent: result\ndata: {\"rows\": 12}\n\nevent: result\ndata: 2\n\n";
        let (outcome, update) = answer(&[text], 1024);
        assert_eq!(outcome, Ok(Some(Outcome::ok("{\"rows\": 12}"))));
        assert_eq!(update, Some(Update::new(Some(0.4), "step 2")));
    }

    #[test]
    fn the_error_event_is_an_error_result() {
        let (outcome, _) = answer(
            &[b"event: error\ndata: {\"message\": \"no such row\"}\n\n"],
            64,
        );
        assert_eq!(
            outcome,
            Ok(Some(Outcome::error("{\"message\": \"no such row\"}")))
        );
    }

    #[test]
    fn malformed_and_long_progress_events_are_ignored() {
        let long = format!(
            "event: progress\ndata: {{\"message\": \"{}\"}}\n\n",
            "x".repeat(MAX_LINE_BYTES)
        );
        for bad in [
            "event: progress\ndata: half\n\n",
            "event: progress\ndata: {\"fraction\": \"half\"}\n\n",
            "event: progress\ndata: [0.5]\n\n",
            long.as_str(),
        ] {
            let (outcome, update) = answer(&[bad.as_bytes()], 1024 * 1024);
            assert_eq!(outcome, Ok(None), "{bad}");
            assert_eq!(update, None, "{bad}");
        }
        // A good one after a bad one still counts.
        let (_, update) = answer(
            &[b"event: progress\ndata: oops\n\nevent: progress\ndata: {\"fraction\": 1}\n\n"],
            64,
        );
        assert_eq!(update, Some(Update::new(Some(1.0), "")));
    }

    #[test]
    fn other_events_are_ignored() {
        let (outcome, update) = answer(
            &[b"data: {\"fraction\": 0.5}\n\nevent: ping\ndata: 1\n\nevent: message\ndata: 2\n\n"],
            64,
        );
        assert_eq!((outcome, update), (Ok(None), None));
    }

    #[test]
    fn a_result_over_the_cap_is_refused_as_a_body_is() {
        let big = format!("event: result\ndata: \"{}\"\n\n", "x".repeat(20_000));
        let (outcome, _) = answer(&[big.as_bytes()], 10_000);
        assert_eq!(outcome, Ok(Some(output_too_large(10_000))));
        // Under the parser's bound (8 KiB) but over the cap: the runtime's
        // cap refuses it.
        let (outcome, _) = answer(&[b"event: result\ndata: \"0123456789\"\n\n"], 5);
        assert_eq!(outcome, Ok(Some(Outcome::ok("\"0123456789\""))));
        let error = format!("event: error\ndata: {}\n\n", "x".repeat(20_000));
        let (outcome, _) = answer(&[error.as_bytes()], 10_000);
        assert_eq!(outcome, Ok(Some(output_too_large(10_000))));
    }

    #[test]
    fn a_stream_past_its_bound_fails() {
        let (progress, _latest) = Progress::channel();
        let mut answer = Answer::new(16, Some(&progress));
        let ping = b": ping\n".repeat(1024);
        let mut fed = 0;
        let error = loop {
            match answer.feed(&ping) {
                Ok(None) => fed += ping.len(),
                Ok(Some(outcome)) => panic!("{outcome:?}"),
                Err(error) => break error,
            }
        };
        assert!(fed <= MAX_STREAM_BYTES + 16, "{fed}");
        assert!(fed + ping.len() > MAX_STREAM_BYTES + 16, "{fed}");
        assert!(matches!(error, BackendError::HttpStream(_)), "{error}");
        assert_eq!(error.to_status().code(), tonic::Code::Unavailable);
    }

    #[test]
    fn a_stream_that_ends_early_says_so() {
        let answer = Answer::new(16, None);
        let error = answer.ended();
        assert!(
            error.to_string().contains("without a result event"),
            "{error}"
        );
    }

    #[test]
    fn progress_without_a_task_is_dropped_quietly() {
        let mut answer = Answer::new(64, None);
        let outcome = answer
            .feed(b"event: progress\ndata: {\"fraction\": 0.5}\n\nevent: result\ndata: 1\n\n")
            .expect("a result");
        assert_eq!(outcome, Some(Outcome::ok("1")));
    }
}
