//! How far a task has come, as its tool says: the [`Progress`] handle a
//! task's [`CallContext`](crate::CallContext) carries, the progress line
//! a command writes to stderr ([`PREFIX`], [`Update::from_line`]), and the
//! same JSON in an HTTP backend's `progress` event
//! ([`crate::backend::http`]).
//!
//! Only the latest report counts: a handle keeps one update, replaced by
//! each report, and the sidecar sends the newest to the registry at most
//! every 250 ms.

use std::sync::Arc;

use tokio::sync::watch;
use toolmesh_proto::pb;

/// Longest progress message kept, in bytes; a longer one is cut at a
/// character boundary.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// What starts a command's progress line on stderr, followed by a space
/// and a JSON object: `toolmesh-progress {"fraction":0.5,"message":"step
/// 2 of 4"}` (both keys optional).
pub const PREFIX: &str = "toolmesh-progress";

/// Longest progress line taken, in bytes: a longer line is stderr like
/// any other.
pub const MAX_LINE_BYTES: usize = 8 * 1024;

/// One progress report: the fraction done (0 to 1, when the tool says)
/// and what it is doing.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// Done so far, from 0 to 1.
    pub fraction: Option<f64>,
    /// What the tool is doing, at most [`MAX_MESSAGE_BYTES`].
    pub message: String,
}

impl Update {
    /// A report of `fraction` (clamped to 0..=1; a non-finite one is left
    /// out) and `message` (cut to [`MAX_MESSAGE_BYTES`]).
    pub fn new(fraction: Option<f64>, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_MESSAGE_BYTES {
            let mut end = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        Self {
            fraction: fraction
                .filter(|f| f.is_finite())
                .map(|f| f.clamp(0.0, 1.0)),
            message,
        }
    }

    /// The report a stderr line makes: `None` when the line is not a
    /// progress line (no [`PREFIX`]), `Some(Err)` when it starts like one
    /// but its JSON is not an object of `fraction` (a number) and
    /// `message` (a string).
    pub fn from_line(line: &str) -> Option<Result<Self, LineError>> {
        let rest = line.strip_prefix(PREFIX)?;
        if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
            return None;
        }
        Some(Self::from_json(rest.trim()).map_err(|error| LineError(error.to_string())))
    }

    /// The report a JSON object of `fraction` (a number) and `message` (a
    /// string), both optional, makes: the JSON of a progress line, or the
    /// data of an HTTP backend's `progress` event.
    pub(crate) fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        let line = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
            .and_then(|object| serde_json::from_value::<Line>(serde_json::Value::Object(object)))?;
        Ok(Self::new(line.fraction, line.message.unwrap_or_default()))
    }

    /// As the wire carries it.
    pub(crate) fn to_pb(&self) -> pb::TaskProgress {
        pb::TaskProgress {
            fraction: self.fraction,
            message: self.message.clone(),
        }
    }
}

/// The JSON of a progress line or event.
#[derive(serde::Deserialize)]
struct Line {
    #[serde(default)]
    fraction: Option<f64>,
    #[serde(default)]
    message: Option<String>,
}

/// Why a line that starts as a progress line is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a progress line ({0}): expected {PREFIX} {{\"fraction\": 0.5, \"message\": \"...\"}}")]
pub struct LineError(String);

/// Where a task's tool reports its progress. Clones report to the same
/// task; a report replaces the one before it, so reporting often costs
/// nothing.
#[derive(Clone)]
pub struct Progress(Arc<watch::Sender<Option<Update>>>);

impl Progress {
    /// A handle, and what reads its latest report.
    pub(crate) fn channel() -> (Self, watch::Receiver<Option<Update>>) {
        let (sender, receiver) = watch::channel(None);
        (Self(Arc::new(sender)), receiver)
    }

    /// Reports `fraction` done (0 to 1; clamped, a non-finite one left
    /// out) and `message` (cut to [`MAX_MESSAGE_BYTES`]).
    pub fn report(&self, fraction: Option<f64>, message: impl Into<String>) {
        self.update(Update::new(fraction, message));
    }

    /// Reports `update`.
    pub fn update(&self, update: Update) {
        self.0.send_replace(Some(update));
    }
}

impl PartialEq for Progress {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Progress {}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn fractions_are_clamped_and_non_finite_ones_left_out() {
        assert_eq!(Update::new(Some(0.25), "").fraction, Some(0.25));
        assert_eq!(Update::new(Some(-1.0), "").fraction, Some(0.0));
        assert_eq!(Update::new(Some(7.0), "").fraction, Some(1.0));
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(Update::new(Some(f), "").fraction, None);
        }
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let message = "é".repeat(MAX_MESSAGE_BYTES);
        let update = Update::new(None, message);
        assert!(update.message.len() <= MAX_MESSAGE_BYTES);
        assert!(update.message.len() >= MAX_MESSAGE_BYTES - 1);
        assert!(update.message.chars().all(|c| c == 'é'));
    }

    #[test]
    fn progress_lines() {
        let line = r#"toolmesh-progress {"fraction":0.5,"message":"step 2 of 4"}"#;
        assert_eq!(
            Update::from_line(line),
            Some(Ok(Update::new(Some(0.5), "step 2 of 4")))
        );
        assert_eq!(
            Update::from_line("toolmesh-progress {}"),
            Some(Ok(Update::new(None, "")))
        );
        assert_eq!(
            Update::from_line("toolmesh-progress\t{\"fraction\": 2}\r"),
            Some(Ok(Update::new(Some(1.0), "")))
        );
        assert_eq!(Update::from_line("progress 50%"), None);
        assert_eq!(Update::from_line("toolmesh-progressive {}"), None);
        for malformed in [
            "toolmesh-progress",
            "toolmesh-progress 0.5",
            "toolmesh-progress {\"fraction\": \"half\"}",
            "toolmesh-progress {\"fraction\": 0.5",
            "toolmesh-progress [0.5]",
        ] {
            assert!(
                matches!(Update::from_line(malformed), Some(Err(_))),
                "{malformed}"
            );
        }
    }

    #[test]
    fn the_latest_report_wins() {
        let (progress, mut latest) = Progress::channel();
        progress.report(Some(0.1), "one");
        progress.clone().report(Some(0.2), "two");
        assert!(latest.has_changed().unwrap());
        assert_eq!(
            latest.borrow_and_update().clone(),
            Some(Update::new(Some(0.2), "two"))
        );
    }

    proptest! {
        #[test]
        fn any_line_parses_without_panicking(line in ".*", json in "\\PC*") {
            let _ = Update::from_line(&line);
            if let Some(Ok(update)) = Update::from_line(&format!("{PREFIX} {json}")) {
                prop_assert!(update.message.len() <= MAX_MESSAGE_BYTES);
                prop_assert!(update.fraction.is_none_or(|f| (0.0..=1.0).contains(&f)));
            }
        }

        #[test]
        fn any_object_line_is_bounded(fraction in proptest::num::f64::ANY, message in "\\PC{0,2000}") {
            let line = format!(
                "{PREFIX} {}",
                serde_json::json!({"fraction": fraction, "message": message})
            );
            if let Some(Ok(update)) = Update::from_line(&line) {
                prop_assert!(update.message.len() <= MAX_MESSAGE_BYTES);
                prop_assert!(update.fraction.is_none_or(|f| (0.0..=1.0).contains(&f)));
            }
        }
    }
}
