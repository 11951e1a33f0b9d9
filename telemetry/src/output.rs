//! Where log lines go: standard output, one `write(2)` per line, except
//! on a thread that asked to gather its lines ([`gather_on_this_thread`]):
//! the registry's serving threads, which otherwise make a `write(2)` for
//! every call's line. There, `INFO` and lower lines gather in memory and
//! are written in one block:
//!
//! - before the thread writes to an agent's connection
//!   ([`flush_this_thread`] in the connection's writer), so a line logged
//!   before an answer is in the log before the answer is on the wire, as
//!   when each line is written at once;
//! - when the thread runs out of work (its runtime's `on_thread_park`);
//! - when they reach [`BLOCK`] bytes, with any `WARN` or `ERROR` line (after
//!   the lines before it), and when the thread ends.
//!
//! A terminal gets every line as it is written ([`crate::init`] decides);
//! so does every other thread.

use std::{
    cell::RefCell,
    io,
    sync::atomic::{AtomicBool, Ordering},
};

use tracing_subscriber::fmt::MakeWriter;

/// Bytes of gathered lines written at once, without waiting.
pub const BLOCK: usize = 32 * 1024;

/// Whether threads may gather lines: standard output is not a terminal.
static GATHERING: AtomicBool = AtomicBool::new(false);

thread_local! {
    static GATHERED: RefCell<Gathered> = const { RefCell::new(Gathered(None)) };
}

#[cfg(test)]
thread_local! {
    /// What the tests' lines would have written to standard output.
    static WRITTEN: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Writes `bytes` to standard output in one call.
fn write_out(bytes: &[u8]) -> io::Result<()> {
    #[cfg(test)]
    {
        WRITTEN.with(|written| written.borrow_mut().extend_from_slice(bytes));
        Ok(())
    }
    #[cfg(not(test))]
    {
        io::Write::write_all(&mut io::stdout().lock(), bytes)
    }
}

/// This thread's gathered lines, when it gathers; written when the
/// thread ends.
struct Gathered(Option<Vec<u8>>);

impl Gathered {
    /// Appends `line`; whether it was taken, and whether the block is full.
    fn push(&mut self, line: &[u8]) -> Option<bool> {
        let lines = self.0.as_mut()?;
        lines.extend_from_slice(line);
        Some(lines.len() >= BLOCK)
    }

    fn write(&mut self) -> io::Result<()> {
        match &mut self.0 {
            Some(lines) if !lines.is_empty() => {
                let written = write_out(lines);
                lines.clear();
                if lines.capacity() > 2 * BLOCK {
                    lines.shrink_to(BLOCK);
                }
                written
            }
            _ => Ok(()),
        }
    }
}

impl Drop for Gathered {
    fn drop(&mut self) {
        // Nowhere to report a failed write of the log but the log.
        let _ = self.write();
    }
}

/// Lets threads gather their lines when standard output is not a
/// terminal; [`crate::init`] calls it.
pub(crate) fn init_output() {
    GATHERING.store(
        !io::IsTerminal::is_terminal(&io::stdout()),
        Ordering::Relaxed,
    );
}

/// From now on this thread's `INFO` and lower lines gather until
/// [`flush_this_thread`] (or a warning, a full block, the thread's end),
/// when the log is not a terminal. Only for a thread that calls
/// [`flush_this_thread`] before each write to a peer and when it idles.
pub fn gather_on_this_thread() {
    if GATHERING.load(Ordering::Relaxed) {
        GATHERED.with(|gathered| {
            let mut gathered = gathered.borrow_mut();
            if gathered.0.is_none() {
                gathered.0 = Some(Vec::with_capacity(BLOCK));
            }
        });
    }
}

/// Writes the lines this thread gathered, if any.
pub fn flush_this_thread() {
    let _ = GATHERED.try_with(|gathered| {
        if let Ok(mut gathered) = gathered.try_borrow_mut() {
            let _ = gathered.write();
        }
    });
}

/// Standard output for the log: the [`MakeWriter`] [`crate::init`]
/// installs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stdout;

/// One event's line (the formatter writes each whole, in one call).
#[derive(Debug)]
pub struct Line {
    urgent: bool,
}

impl io::Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let taken = GATHERED
            .try_with(|gathered| {
                let mut gathered = gathered.try_borrow_mut().ok()?;
                if self.urgent {
                    gathered.write().ok()?;
                    return None;
                }
                let full = gathered.push(buf)?;
                if full {
                    gathered.write().ok()?;
                }
                Some(())
            })
            .ok()
            .flatten();
        if taken.is_none() {
            write_out(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Stdout {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line { urgent: true }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        Line {
            urgent: *meta.level() <= tracing::Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// Runs `f` on a thread of its own that gathers (as if standard output
    /// were a file); what it wrote out, and what it left gathered.
    fn on_a_gathering_thread(f: impl FnOnce() + Send + 'static) -> (String, String) {
        std::thread::spawn(move || {
            GATHERED.with(|g| g.borrow_mut().0 = Some(Vec::new()));
            f();
            let left = GATHERED.with(|g| g.borrow_mut().0.take().unwrap_or_default());
            let written = WRITTEN.with(|w| std::mem::take(&mut *w.borrow_mut()));
            (
                String::from_utf8(written).expect("utf-8"),
                String::from_utf8(left).expect("utf-8"),
            )
        })
        .join()
        .expect("the thread ran")
    }

    fn line(urgent: bool, text: &str) {
        Line { urgent }.write_all(text.as_bytes()).expect("taken");
    }

    #[test]
    fn info_lines_gather_until_flushed() {
        let (written, left) = on_a_gathering_thread(|| {
            line(false, "one\n");
            line(false, "two\n");
        });
        assert_eq!((written.as_str(), left.as_str()), ("", "one\ntwo\n"));
        let (written, left) = on_a_gathering_thread(|| {
            line(false, "one\n");
            line(false, "two\n");
            flush_this_thread();
            line(false, "three\n");
        });
        assert_eq!((written.as_str(), left.as_str()), ("one\ntwo\n", "three\n"));
    }

    #[test]
    fn a_warning_goes_out_at_once_after_the_lines_before_it() {
        let (written, left) = on_a_gathering_thread(|| {
            line(false, "one\n");
            line(true, "careful\n");
        });
        assert_eq!((written.as_str(), left.as_str()), ("one\ncareful\n", ""));
    }

    #[test]
    fn a_full_block_is_written_at_once() {
        let text = format!("{}\n", "x".repeat(1023));
        let lines = BLOCK / text.len();
        let (written, left) = on_a_gathering_thread(move || {
            for _ in 0..lines {
                line(false, &text);
            }
            line(false, "after\n");
        });
        assert_eq!(written.len(), BLOCK);
        assert_eq!(left, "after\n");
    }

    #[test]
    fn a_thread_that_did_not_ask_writes_each_line_at_once() {
        let written = std::thread::spawn(|| {
            line(false, "now\n");
            WRITTEN.with(|w| std::mem::take(&mut *w.borrow_mut()))
        })
        .join()
        .expect("the thread ran");
        assert_eq!(written, b"now\n");
    }
}
