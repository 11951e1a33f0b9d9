//! The progress line of a wait, on standard error, for people: on a
//! terminal one line redrawn in place (a bar and percent when the tool
//! reports a fraction, its message, the time the task has run) and cleared
//! at the end; elsewhere (a log file, CI) a line each time the progress
//! changes. Nothing with `--output json`.

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, SystemTime};

use toolmesh_proto::pb;

use super::show::{is_over, percent, state_name, system_time};
use crate::output::Output;

/// Cells of the bar.
const BAR_CELLS: usize = 20;

/// Width of a terminal that does not say (`COLUMNS`).
const DEFAULT_COLUMNS: usize = 80;

/// How the line is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Not at all.
    Off,
    /// Redrawn in place on a terminal this wide.
    Terminal(usize),
    /// A line for each change.
    Log,
}

/// What the line shows of a task, to tell a change.
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    state: pb::TaskState,
    status: String,
    fraction: Option<f64>,
    message: String,
}

/// The progress line of one wait.
#[derive(Debug)]
pub(crate) struct Line {
    mode: Mode,
    /// The task as last seen, and when it started.
    seen: Option<(Shown, Option<SystemTime>)>,
    /// What a log line last said.
    logged: Option<Shown>,
    /// Whether the terminal holds a drawn line.
    drawn: bool,
}

impl Line {
    /// The line for a wait printing `output`, on a terminal if standard
    /// error is one.
    pub(crate) fn new(output: Output) -> Self {
        let mode = match output {
            Output::Json => Mode::Off,
            Output::Text if std::io::stderr().is_terminal() => Mode::Terminal(columns()),
            Output::Text => Mode::Log,
        };
        Self {
            mode,
            seen: None,
            logged: None,
            drawn: false,
        }
    }

    /// Shows `task` as it is now.
    pub(crate) fn show(&mut self, task: &pb::Task) {
        let shown = Shown {
            state: task.state(),
            status: task.status_message.clone(),
            fraction: task.progress.as_ref().and_then(|p| p.fraction),
            message: task
                .progress
                .as_ref()
                .map(|p| p.message.clone())
                .unwrap_or_default(),
        };
        let started = task.created_at.as_ref().and_then(system_time);
        self.seen = Some((shown.clone(), started));
        if is_over(task) {
            // What it ended with is printed next, not as progress.
            return;
        }
        match self.mode {
            Mode::Off => {}
            Mode::Terminal(_) => self.draw(),
            Mode::Log => {
                let worth_saying = shown.fraction.is_some()
                    || !shown.message.is_empty()
                    || shown.state != pb::TaskState::Working;
                if worth_saying && self.logged.as_ref() != Some(&shown) {
                    let line = render(&shown, self.elapsed(), None);
                    write_stderr(&format!("{line}\n"));
                    self.logged = Some(shown);
                }
            }
        }
    }

    /// Redraws a terminal's line: the time has moved on.
    pub(crate) fn tick(&mut self) {
        let over = self.seen.as_ref().is_some_and(|(shown, _)| {
            matches!(
                shown.state,
                pb::TaskState::Completed | pb::TaskState::Failed | pb::TaskState::Cancelled
            )
        });
        if matches!(self.mode, Mode::Terminal(_)) && !over {
            self.draw();
        }
    }

    /// Takes a terminal's line away, leaving the cursor where it began.
    pub(crate) fn clear(&mut self) {
        if self.drawn {
            write_stderr("\r\x1b[2K");
            self.drawn = false;
        }
    }

    fn draw(&mut self) {
        let (Mode::Terminal(columns), Some((shown, _))) = (self.mode, &self.seen) else {
            return;
        };
        let line = render(shown, self.elapsed(), Some(BAR_CELLS));
        // One column short of the edge: a full line wraps on some
        // terminals, and then `\r` no longer reaches its start.
        let line: String = line.chars().take(columns.saturating_sub(1)).collect();
        write_stderr(&format!("\r\x1b[2K{line}"));
        self.drawn = true;
    }

    /// How long the task has run (0 if this machine's clock is behind the
    /// registry's).
    fn elapsed(&self) -> Duration {
        self.seen
            .as_ref()
            .and_then(|(_, started)| *started)
            .and_then(|started| SystemTime::now().duration_since(started).ok())
            .unwrap_or_default()
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The line: the state unless it is WORKING (with its status message),
/// a bar of `cells` (if any) and the percent when there is a fraction, the
/// message, the time run. `working 50% page 3 of 6 (12s)`.
fn render(shown: &Shown, elapsed: Duration, cells: Option<usize>) -> String {
    let mut line = match shown.state {
        pb::TaskState::Working => "working".to_owned(),
        state => state_name(state).to_owned(),
    };
    if shown.state != pb::TaskState::Working && !shown.status.is_empty() {
        let _ = write!(line, ": {}", one_line(&shown.status));
    }
    if let Some(fraction) = shown.fraction {
        if let Some(cells) = cells {
            let _ = write!(line, " {}", bar(fraction, cells));
        }
        let _ = write!(line, " {:>4}", percent(fraction));
    }
    if !shown.message.trim().is_empty() {
        let _ = write!(line, " {}", one_line(&shown.message));
    }
    let _ = write!(line, " ({})", clock(elapsed));
    line
}

/// `fraction` (0 to 1) as a bar of `cells`: `[#####-----]`.
fn bar(fraction: f64, cells: usize) -> String {
    let fraction = if fraction.is_finite() {
        fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    // Rounded down, so that a bar is full only when the work is done.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let full = ((fraction * cells as f64).floor() as usize).min(cells);
    format!("[{}{}]", "#".repeat(full), "-".repeat(cells - full))
}

/// `elapsed` as a clock: `12s`, `3m04s`, `1h02m`.
fn clock(elapsed: Duration) -> String {
    let s = elapsed.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// `text` on one line, its runs of white space one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The terminal's width: `COLUMNS`, else [`DEFAULT_COLUMNS`].
fn columns() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 10)
        .unwrap_or(DEFAULT_COLUMNS)
}

/// `text` on standard error, lost if it is closed.
fn write_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(fraction: Option<f64>, message: &str) -> Shown {
        Shown {
            state: pb::TaskState::Working,
            status: String::new(),
            fraction,
            message: message.into(),
        }
    }

    #[test]
    fn a_bar_fills_with_the_fraction() {
        assert_eq!(bar(0.0, 10), "[----------]");
        assert_eq!(bar(0.5, 10), "[#####-----]");
        assert_eq!(bar(0.99, 10), "[#########-]");
        assert_eq!(bar(1.0, 10), "[##########]");
        assert_eq!(bar(7.0, 4), "[####]");
        assert_eq!(bar(f64::NAN, 4), "[----]");
    }

    #[test]
    fn the_line_says_what_the_tool_reported_and_the_time() {
        let second = Duration::from_secs(1);
        assert_eq!(
            render(&shown(Some(0.5), "page 3\nof 6"), 12 * second, Some(4)),
            "working [##--]  50% page 3 of 6 (12s)"
        );
        assert_eq!(
            render(&shown(Some(0.5), ""), 64 * second, None),
            "working  50% (1m04s)"
        );
        assert_eq!(
            render(&shown(None, "fetching"), 3700 * second, None),
            "working fetching (1h01m)"
        );
        let waiting = Shown {
            state: pb::TaskState::InputRequired,
            status: "awaiting approval".into(),
            ..shown(None, "")
        };
        assert_eq!(
            render(&waiting, Duration::ZERO, None),
            "INPUT_REQUIRED: awaiting approval (0s)"
        );
    }

    #[test]
    fn json_output_shows_no_line() {
        let mut line = Line::new(Output::Json);
        line.show(&pb::Task::default());
        line.tick();
        assert!(!line.drawn);
    }
}
