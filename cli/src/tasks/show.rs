//! A task as the tasks commands show it: JSON for scripts ([`task_json`]),
//! lines and a table row for people, and its outcome as `invoke` would
//! have ended ([`outcome`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost_types::Timestamp;
use serde_json::{Value, json};
use toolmesh_proto::pb;

use crate::commands::{answer, answer_json, tool_error};
use crate::failure::Failure;
use crate::output::{Output, clip, pretty};

/// `state`'s name without its prefix: `WORKING`, `COMPLETED`.
pub(crate) fn state_name(state: pb::TaskState) -> &'static str {
    let name = state.as_str_name();
    name.strip_prefix("TASK_STATE_").unwrap_or(name)
}

/// Whether `task` is over: it never changes again.
pub(crate) fn is_over(task: &pb::Task) -> bool {
    matches!(
        task.state(),
        pb::TaskState::Completed | pb::TaskState::Failed | pb::TaskState::Cancelled
    )
}

/// The status a failed or cancelled task ended with, its details decoded
/// from the encoded `google.rpc.Status` the registry kept.
pub(crate) fn status_of(error: &pb::TaskError) -> tonic::Status {
    tonic::Status::with_details(
        tonic::Code::from(error.code),
        error.message.clone(),
        bytes::Bytes::from(error.details.clone()),
    )
}

/// `task` as JSON: every field, times in RFC 3339, the answer as `invoke
/// --output json` prints it and the error as a failed `invoke` does.
pub(crate) fn task_json(task: &pb::Task) -> Value {
    let (response, error) = match &task.outcome {
        Some(pb::task::Outcome::Response(response)) => (answer_json(response), Value::Null),
        Some(pb::task::Outcome::Error(error)) => (
            Value::Null,
            Failure::from_status(&status_of(error)).json["error"].take(),
        ),
        None => (Value::Null, Value::Null),
    };
    let progress = task
        .progress
        .as_ref()
        .map(|p| json!({"fraction": p.fraction, "message": p.message}));
    let time = |t: &Option<Timestamp>| {
        t.as_ref()
            .and_then(system_time)
            .map(|t| humantime::format_rfc3339_millis(t).to_string())
    };
    json!({
        "id": task.id,
        "tool": task.tool,
        "caller": task.caller,
        "state": state_name(task.state()),
        "status_message": task.status_message,
        "created_at": time(&task.created_at),
        "updated_at": time(&task.updated_at),
        "expires_at": time(&task.expires_at),
        "progress": progress,
        "revision": task.revision,
        "response": response,
        "error": error,
    })
}

/// `task` for people, one `name: value` line each.
pub(crate) fn task_lines(task: &pb::Task, now: SystemTime) -> Vec<String> {
    let mut lines = vec![
        format!("id:        {}", task.id),
        format!("tool:      {}", task.tool),
        format!("state:     {}", state_name(task.state())),
    ];
    if !task.status_message.is_empty() {
        lines.push(format!("status:    {}", task.status_message));
    }
    if let Some(progress) = &task.progress {
        lines.push(format!("progress:  {}", progress_text(progress)));
    }
    if !task.caller.is_empty() {
        lines.push(format!("caller:    {}", task.caller));
    }
    for (name, time) in [
        ("created", &task.created_at),
        ("updated", &task.updated_at),
        ("expires", &task.expires_at),
    ] {
        if let Some(at) = time.as_ref().and_then(system_time) {
            lines.push(format!(
                "{:<10} {} ({})",
                format!("{name}:"),
                humantime::format_rfc3339_seconds(at),
                age(at, now)
            ));
        }
    }
    match &task.outcome {
        Some(pb::task::Outcome::Response(response)) => {
            let result = serde_json::from_str(&response.result_json)
                .unwrap_or_else(|_| Value::String(response.result_json.clone()));
            if response.is_error {
                lines.push(format!("tool error: {}", tool_error(&result)));
            } else {
                lines.push(format!("result:\n{}", pretty(&result)));
            }
        }
        Some(pb::task::Outcome::Error(error)) => {
            let failure = Failure::from_status(&status_of(error));
            lines.push(format!("error:     {}", failure.message));
            lines.extend(failure.details.iter().map(|d| format!("  {d}")));
        }
        None => {}
    }
    lines
}

/// `task` as a row of `tasks list`: id, tool, state, progress, created,
/// updated.
pub(crate) fn task_row(task: &pb::Task, now: SystemTime) -> Vec<String> {
    let when = |t: &Option<Timestamp>| {
        t.as_ref()
            .and_then(system_time)
            .map_or_else(|| "-".to_owned(), |at| age(at, now))
    };
    vec![
        task.id.clone(),
        task.tool.clone(),
        state_name(task.state()).to_owned(),
        task.progress
            .as_ref()
            .map_or_else(|| "-".to_owned(), |p| clip(&progress_text(p), 30)),
        when(&task.created_at),
        when(&task.updated_at),
    ]
}

/// `progress` in words: `50% page 3 of 6`, or the message alone.
pub(crate) fn progress_text(progress: &pb::TaskProgress) -> String {
    let percent = progress.fraction.map(percent);
    match (percent, progress.message.trim()) {
        (Some(percent), "") => percent,
        (Some(percent), message) => format!("{percent} {message}"),
        (None, "") => "-".to_owned(),
        (None, message) => message.to_owned(),
    }
}

/// `fraction` (0 to 1) as a whole percent, `50%`.
pub(crate) fn percent(fraction: f64) -> String {
    let fraction = if fraction.is_finite() {
        fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    format!("{:.0}%", fraction * 100.0)
}

/// Prints how `task` ended as `invoke` ends: a completed task's answer (a
/// tool error is [`crate::failure::Exit::ToolFailed`]); a failed or
/// cancelled one's status as a failed `Invoke`'s, with the same exit code.
pub(crate) fn outcome(task: &pb::Task, output: Output) -> Result<(), Failure> {
    match &task.outcome {
        Some(pb::task::Outcome::Response(response)) => answer(&task.tool, response, output),
        Some(pb::task::Outcome::Error(error)) => Err(Failure::from_status(&status_of(error))),
        None => Err(Failure::plain(
            crate::failure::Exit::Other,
            format!(
                "task {} is {} but says nothing of how it ended",
                task.id,
                state_name(task.state())
            ),
        )),
    }
}

/// `at` as a time on this machine's clock; `None` before 1970.
pub(crate) fn system_time(at: &Timestamp) -> Option<SystemTime> {
    let seconds = u64::try_from(at.seconds).ok()?;
    let nanos = u32::try_from(at.nanos).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}

/// How long ago `at` was (`5s ago`), or how far off it is (`in 59m`).
pub(crate) fn age(at: SystemTime, now: SystemTime) -> String {
    match now.duration_since(at) {
        Ok(past) => format!("{} ago", short(past)),
        Err(ahead) => format!("in {}", short(ahead.duration())),
    }
}

/// `span` in its largest unit: `12s`, `5m`, `3h`, `2d`.
pub(crate) fn short(span: Duration) -> String {
    let seconds = span.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn at(seconds: i64) -> Option<Timestamp> {
        Some(Timestamp { seconds, nanos: 0 })
    }

    fn task() -> pb::Task {
        pb::Task {
            id: "t-1".into(),
            tool: "slow".into(),
            state: pb::TaskState::Working as i32,
            created_at: at(1_000),
            updated_at: at(1_090),
            expires_at: at(4_600),
            progress: Some(pb::TaskProgress {
                fraction: Some(0.5),
                message: "page 3 of 6".into(),
            }),
            revision: 3,
            ..Default::default()
        }
    }

    #[test]
    fn ages_read_in_their_largest_unit() {
        let now = UNIX_EPOCH + Duration::from_secs(10_000);
        let ago = |s: u64| age(now - Duration::from_secs(s), now);
        assert_eq!(ago(0), "0s ago");
        assert_eq!(ago(59), "59s ago");
        assert_eq!(ago(61), "1m ago");
        assert_eq!(ago(7_200), "2h ago");
        assert_eq!(age(now + Duration::from_secs(3_540), now), "in 59m");
        assert_eq!(short(Duration::from_secs(3 * 86_400)), "3d");
    }

    #[test]
    fn a_row_has_the_id_tool_state_progress_and_ages() {
        let now = UNIX_EPOCH + Duration::from_secs(1_100);
        assert_eq!(
            task_row(&task(), now),
            [
                "t-1",
                "slow",
                "WORKING",
                "50% page 3 of 6",
                "1m ago",
                "10s ago"
            ]
        );
        let quiet = pb::Task {
            progress: None,
            created_at: None,
            ..task()
        };
        assert_eq!(task_row(&quiet, now)[3..5], ["-", "-"]);
    }

    #[test]
    fn progress_reads_as_a_percent_and_words() {
        let p = |fraction, message: &str| pb::TaskProgress {
            fraction,
            message: message.into(),
        };
        assert_eq!(progress_text(&p(Some(0.25), "")), "25%");
        assert_eq!(progress_text(&p(None, "fetching")), "fetching");
        assert_eq!(progress_text(&p(None, " ")), "-");
        assert_eq!(percent(1.7), "100%");
        assert_eq!(percent(f64::NAN), "0%");
    }

    #[test]
    fn the_json_has_every_field_and_the_error_decoded() {
        let json = task_json(&task());
        assert_eq!(json["state"], "WORKING");
        assert_eq!(json["created_at"], "1970-01-01T00:16:40.000Z");
        assert_eq!(
            json["progress"],
            json!({"fraction": 0.5, "message": "page 3 of 6"})
        );
        assert_eq!(json["response"], Value::Null);
        assert_eq!(json["error"], Value::Null);

        let status = tonic::Status::cancelled("cancelled by its caller");
        let failed = pb::Task {
            state: pb::TaskState::Cancelled as i32,
            outcome: Some(pb::task::Outcome::Error(pb::TaskError {
                code: status.code() as i32,
                message: status.message().into(),
                details: status.details().to_vec(),
            })),
            ..task()
        };
        let json = task_json(&failed);
        assert_eq!(json["state"], "CANCELLED");
        assert_eq!(json["error"]["code"], "CANCELLED");
        let ended = outcome(&failed, Output::Json).unwrap_err();
        assert_eq!(ended.message, "CANCELLED: cancelled by its caller");
        assert_eq!(ended.exit, crate::failure::Exit::Other);
    }

    #[test]
    fn a_failed_tasks_details_decode_as_an_invokes() {
        use tonic_types::{ErrorDetails, StatusExt as _};
        let status = tonic::Status::with_error_details(
            tonic::Code::InvalidArgument,
            "bad arguments",
            ErrorDetails::with_bad_request_violation("/city", "required"),
        );
        let error = pb::TaskError {
            code: status.code() as i32,
            message: status.message().into(),
            details: status.details().to_vec(),
        };
        let failure = Failure::from_status(&status_of(&error));
        assert_eq!(failure.exit, crate::failure::Exit::Invalid);
        assert_eq!(failure.details, ["/city: required"]);
        assert_eq!(failure.json["error"]["violations"][0]["field"], "/city");
    }
}
