//! Server-Sent Events as they arrive: the `text/event-stream` format of
//! the WHATWG HTML standard ("Server-sent events", "Parsing an event
//! stream"), read chunk by chunk and bounded.
//!
//! Only what a call needs: the `event` and `data` fields. `id` and `retry`
//! (for reconnecting, which a call never does), comments and unknown
//! fields are ignored, as the standard says; a line without a colon is a
//! field with an empty value. Lines end with `\n`, `\r\n` or `\r`; a byte
//! order mark may start the stream. An event ends at a blank line, and is
//! dispatched only if it had a `data` field; one the stream ends in the
//! middle of is not dispatched.
//!
//! An event keeps at most `max_event` bytes of data (as received: bytes
//! that are not UTF-8 become U+FFFD) and a line at most that and
//! [`LINE_SLACK`]: past either, the rest is dropped as it comes and the
//! event is marked [`Event::oversized`] (its data left empty). A backend
//! that never ends a line or an event costs no more memory than one
//! event.

/// Room a line has beyond the event's bound: its field name, the colon
/// and the space.
const LINE_SLACK: usize = 64;

/// One event: its type and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Event {
    /// Its type (`event:`); empty when the event gave none (the
    /// standard's `message`).
    pub(super) name: String,
    /// Its `data` lines, joined by `\n` (empty when [`Self::oversized`]).
    pub(super) data: String,
    /// It held more than the parser's bound: its data was dropped.
    pub(super) oversized: bool,
}

/// An event stream, fed chunk by chunk.
#[derive(Debug)]
pub(super) struct Parser {
    max_event: usize,
    /// The line so far.
    line: Vec<u8>,
    /// The line so far is too long: the rest of it is dropped.
    dropping: bool,
    /// The last chunk ended with `\r`: a `\n` first in this one is the
    /// rest of that line's end.
    after_cr: bool,
    /// No line has ended yet: the first may start with a byte order mark.
    first_line: bool,
    /// The event so far: its type, its data, whether it had a `data`
    /// field, whether it is over the bound.
    name: String,
    data: Vec<u8>,
    has_data: bool,
    oversized: bool,
}

impl Parser {
    /// A stream whose events keep at most `max_event` bytes of data.
    pub(super) fn new(max_event: usize) -> Self {
        Self {
            max_event,
            line: Vec::new(),
            dropping: false,
            after_cr: false,
            first_line: true,
            name: String::new(),
            data: Vec::new(),
            has_data: false,
            oversized: false,
        }
    }

    /// Takes the next `chunk`; the events it completes are pushed onto
    /// `events`, in order.
    pub(super) fn feed(&mut self, mut chunk: &[u8], events: &mut Vec<Event>) {
        if chunk.is_empty() {
            return;
        }
        if std::mem::take(&mut self.after_cr) {
            chunk = chunk.strip_prefix(b"\n").unwrap_or(chunk);
        }
        while let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.extend_line(&chunk[..end]);
            self.end_line(events);
            let cr = chunk[end] == b'\r';
            chunk = &chunk[end + 1..];
            if cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.extend_line(chunk);
    }

    /// Bytes held now, for the bound's tests.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.line.len() + self.data.len() + self.name.len()
    }

    fn extend_line(&mut self, part: &[u8]) {
        if self.dropping {
            return;
        }
        let room = self
            .max_event
            .saturating_add(LINE_SLACK)
            .saturating_sub(self.line.len());
        if part.len() <= room {
            self.line.extend_from_slice(part);
            return;
        }
        // Too long: a comment is dropped as it is; anything else makes
        // the event oversized.
        self.line.extend_from_slice(&part[..room]);
        if self.line.first() != Some(&b':') {
            self.make_oversized();
        }
        self.line = Vec::new();
        self.dropping = true;
    }

    fn make_oversized(&mut self) {
        self.oversized = true;
        self.data = Vec::new();
    }

    fn end_line(&mut self, events: &mut Vec<Event>) {
        let mut line = std::mem::take(&mut self.line);
        let mut text = &line[..];
        if std::mem::take(&mut self.first_line) {
            text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
        }
        if !std::mem::take(&mut self.dropping) {
            self.take_line(text, events);
        }
        // The buffer serves the next line.
        line.clear();
        self.line = line;
    }

    /// A whole line, its end left out.
    fn take_line(&mut self, line: &[u8], events: &mut Vec<Event>) {
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => self.name = String::from_utf8_lossy(value).into_owned(),
            b"data" if !self.oversized => {
                let size = self.data.len() + usize::from(self.has_data) + value.len();
                if size > self.max_event {
                    self.make_oversized();
                    return;
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            // More data of an oversized event, a comment (empty field
            // name), `id`, `retry`, or a field the standard does not know.
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<Event>) {
        let name = std::mem::take(&mut self.name);
        let data = std::mem::take(&mut self.data);
        let has_data = std::mem::take(&mut self.has_data);
        let oversized = std::mem::take(&mut self.oversized);
        if has_data || oversized {
            events.push(Event {
                name,
                data: String::from_utf8_lossy(&data).into_owned(),
                oversized,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parse_chunks(chunks: &[&[u8]], max_event: usize) -> Vec<Event> {
        let mut parser = Parser::new(max_event);
        let mut events = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut events);
        }
        events
    }

    fn parse(text: &str) -> Vec<Event> {
        parse_chunks(&[text.as_bytes()], 1024)
    }

    fn event(name: &str, data: &str) -> Event {
        Event {
            name: name.to_owned(),
            data: data.to_owned(),
            oversized: false,
        }
    }

    #[test]
    fn the_standards_examples() {
        assert_eq!(
            parse("data: YHOO\ndata: +2\ndata: 10\n\n"),
            [event("", "YHOO\n+2\n10")]
        );
        assert_eq!(
            parse(
                ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n"
            ),
            [event("", "first event"), event("", "second event")],
            "the third is not ended by a blank line"
        );
        assert_eq!(
            parse("data\n\ndata\ndata\n\ndata:"),
            [event("", ""), event("", "\n")]
        );
        assert_eq!(
            parse("data:test\n\ndata: test\n\n"),
            [event("", "test"), event("", "test")]
        );
    }

    #[test]
    fn named_events_and_every_line_end() {
        let text = "\u{feff}event: progress\r\ndata: {\"fraction\": 0.5}\r\n\r\n: keep-alive\revent:result\rdata: {\"n\":\rretry: 10\rid: 7\rfoo: bar\rdata: 1}\r\r";
        assert_eq!(
            parse(text),
            [
                event("progress", "{\"fraction\": 0.5}"),
                event("result", "{\"n\":\n1}"),
            ]
        );
    }

    #[test]
    fn an_event_with_no_data_is_not_dispatched() {
        assert_eq!(parse("event: result\n\nevent: x\nid: 2\n\n"), []);
        // Its type does not carry over to the next event.
        assert_eq!(parse("event: result\n\ndata: 1\n\n"), [event("", "1")]);
    }

    #[test]
    fn a_crlf_split_between_chunks_ends_one_line() {
        let events = parse_chunks(&[b"data: a\r", b"\n", b"\r", b"\ndata: b\r\n\r\n"], 64);
        assert_eq!(events, [event("", "a"), event("", "b")]);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let events = parse_chunks(&[b"data: \xff\xfe ok\n\n"], 64);
        assert_eq!(events, [event("", "\u{fffd}\u{fffd} ok")]);
    }

    #[test]
    fn an_event_over_the_bound_is_marked_and_its_data_dropped() {
        let oversized = Event {
            name: "result".to_owned(),
            data: String::new(),
            oversized: true,
        };
        // Many short lines, and one long line.
        let many = format!("event: result\n{}\n", "data: 0123456789\n".repeat(10));
        let long = format!("data: {}\nevent: result\n\n", "x".repeat(1000));
        for text in [many, long] {
            assert_eq!(
                parse_chunks(&[text.as_bytes()], 50),
                std::slice::from_ref(&oversized)
            );
        }
        // At the bound exactly, kept.
        let at = format!("data: {}\n\n", "x".repeat(50));
        assert_eq!(
            parse_chunks(&[at.as_bytes()], 50),
            [event("", &"x".repeat(50))]
        );
        // The next event is read as usual.
        let then = format!("data: {}\n\ndata: ok\n\n", "x".repeat(1000));
        assert_eq!(parse_chunks(&[then.as_bytes()], 50)[1], event("", "ok"));
    }

    #[test]
    fn a_long_comment_is_only_dropped() {
        let text = format!("data: ok\n:{}\n\n", "x".repeat(1000));
        assert_eq!(parse_chunks(&[text.as_bytes()], 50), [event("", "ok")]);
    }

    #[test]
    fn a_line_that_never_ends_holds_at_most_the_bound() {
        let mut parser = Parser::new(100);
        let mut events = Vec::new();
        for _ in 0..1000 {
            parser.feed(&[b'x'; 1000], &mut events);
            assert!(parser.held() <= 100 + LINE_SLACK);
        }
        assert_eq!(events, []);
    }

    /// Events written with any line ends, comments and ignored fields.
    fn written() -> impl Strategy<Value = (Vec<(String, Vec<String>)>, Vec<u8>)> {
        let one = (
            "[a-z]{0,8}",
            proptest::collection::vec("[^\r\n]{0,20}", 1..4),
            proptest::collection::vec(prop_oneof![Just("\n"), Just("\r\n"), Just("\r")], 8),
            any::<bool>(),
        );
        proptest::collection::vec(one, 0..6).prop_map(|events| {
            let mut text = Vec::new();
            let mut expected = Vec::new();
            let mut last_end = "\n";
            for (name, data, ends, extra) in events {
                let mut ends = ends.into_iter().cycle();
                let mut line = |text: &mut Vec<u8>, line: &str| {
                    text.extend_from_slice(line.as_bytes());
                    let mut end = ends.next().unwrap_or("\n");
                    // `\r` then an empty line's `\n` is one `\r\n`.
                    if line.is_empty() && last_end == "\r" && end == "\n" {
                        end = "\r";
                    }
                    text.extend_from_slice(end.as_bytes());
                    last_end = end;
                };
                if extra {
                    line(&mut text, ": a comment");
                    line(&mut text, "id: 3");
                }
                if !name.is_empty() {
                    line(&mut text, &format!("event: {name}"));
                }
                for data in &data {
                    line(&mut text, &format!("data: {data}"));
                }
                if extra {
                    line(&mut text, "retry: 100");
                }
                line(&mut text, "");
                expected.push((name, data));
            }
            (expected, text)
        })
    }

    fn cut<'a>(text: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(text.len())).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for end in cuts {
            chunks.push(&text[start..end]);
            start = end;
        }
        chunks.push(&text[start..]);
        chunks
    }

    proptest! {
        #[test]
        fn written_events_read_back_however_they_arrive(
            (expected, text) in written(),
            cuts in proptest::collection::vec(0usize..600, 0..8),
        ) {
            let events = parse_chunks(&cut(&text, &cuts), 1024);
            let read: Vec<(String, Vec<String>)> = events
                .into_iter()
                .map(|e| {
                    prop_assert!(!e.oversized);
                    Ok((e.name, e.data.split('\n').map(str::to_owned).collect()))
                })
                .collect::<Result<_, TestCaseError>>()?;
            prop_assert_eq!(read, expected);
        }

        #[test]
        fn any_stream_parses_the_same_however_it_arrives_within_its_bound(
            text in proptest::collection::vec(
                prop_oneof![
                    Just(b'\n'),
                    Just(b'\r'),
                    Just(b':'),
                    Just(b' '),
                    Just(b'x'),
                    any::<u8>(),
                ],
                0..400,
            ),
            words in proptest::collection::vec(
                prop_oneof![Just("data:"), Just("event:"), Just("\n\n"), Just("\u{feff}")],
                0..20,
            ),
            cuts in proptest::collection::vec(0usize..800, 0..8),
            max_event in 0usize..100,
        ) {
            let mut text = text;
            for (i, word) in words.iter().enumerate() {
                let at = (i * 37) % (text.len() + 1);
                text.splice(at..at, word.bytes());
            }
            let whole = parse_chunks(&[&text], max_event);
            let mut parser = Parser::new(max_event);
            let mut pieces = Vec::new();
            for chunk in cut(&text, &cuts) {
                parser.feed(chunk, &mut pieces);
                prop_assert!(parser.held() <= 3 * max_event + 2 * LINE_SLACK);
            }
            for event in &whole {
                prop_assert!(event.data.len() <= 3 * max_event, "{} > {}", event.data.len(), max_event);
            }
            prop_assert_eq!(whole, pieces);
        }
    }
}
