//! The tasks commands, over `toolmesh.v1.Tasks`: calls that outlive one
//! request (docs/tasks.md). `invoke --task` starts one and waits for it
//! ([`start`]); `tasks list`, `get`, `wait` and `cancel` find, show,
//! follow and stop them. A wait ends as `invoke` would have: the result
//! printed the same way, a failure with the same status and exit code.
//!
//! - `show`: a task as JSON, lines, a table row; how it ended.
//! - `follow`: `WatchTask` to the task's end, across streams.
//! - `progress`: the progress line on standard error.

mod follow;
mod progress;
mod show;

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use toolmesh_proto::pb;

use crate::connect::Registry;
use crate::failure::{Exit, Failure};
use crate::output::{Output, note, print, table};
use show::{is_over, state_name, task_json};

/// `invoke NAME ... --task`: starts `call` as a task, then waits for it as
/// `tasks wait` does, for at most `limit` from now; with `detach`, prints
/// the task's id and state and returns at once.
pub(crate) async fn start(
    registry: &mut Registry,
    call: pb::InvokeRequest,
    detach: bool,
    limit: Option<Duration>,
    output: Output,
) -> Result<(), Failure> {
    let started = Instant::now();
    let deadline = match limit {
        Some(limit) if !detach => limit.min(registry.call_timeout()),
        _ => registry.call_timeout(),
    };
    let request = registry.request_within(pb::StartTaskRequest { call: Some(call) }, deadline);
    let task = registry
        .tasks_call(async |c| c.start_task(request).await)
        .await?;
    if detach {
        return summary(&task, output);
    }
    let task = if is_over(&task) {
        task
    } else {
        wait_for(registry, &task.id, started, limit, output).await?
    };
    show::outcome(&task, output)
}

/// `tasks list`: the caller's tasks, newest first: one page of
/// `page_size` (the registry's default if none) from `page_token`, or with
/// `all_pages` every page.
pub(crate) async fn list(
    registry: &mut Registry,
    page_size: Option<u32>,
    page_token: Option<String>,
    all_pages: bool,
    output: Output,
) -> Result<(), Failure> {
    let mut tasks = Vec::new();
    let mut page_token = page_token.unwrap_or_default();
    loop {
        let request = registry.request(pb::ListTasksRequest {
            page_size: page_size.unwrap_or(0),
            page_token,
        });
        let page = registry
            .tasks_call(async |c| c.list_tasks(request).await)
            .await?;
        let last = page.tasks.is_empty();
        tasks.extend(page.tasks);
        page_token = page.next_page_token;
        // A page with no task cannot lead anywhere: never loop on one.
        if !all_pages || page_token.is_empty() || last {
            break;
        }
    }
    match output {
        Output::Json => print(json!({
            "tasks": Value::Array(tasks.iter().map(task_json).collect()),
            "next_page_token": page_token,
        }))?,
        Output::Text => {
            let now = SystemTime::now();
            let rows: Vec<Vec<String>> = tasks.iter().map(|t| show::task_row(t, now)).collect();
            print(table(
                &["ID", "TOOL", "STATE", "PROGRESS", "CREATED", "UPDATED"],
                &rows,
            ))?;
            if !page_token.is_empty() {
                note(format_args!(
                    "more tasks: --all-pages, or --page-token {page_token}"
                ));
            }
        }
    }
    Ok(())
}

/// `tasks get ID`: one task, whole, whatever its state.
pub(crate) async fn get(
    registry: &mut Registry,
    id: String,
    output: Output,
) -> Result<(), Failure> {
    let request = registry.request(pb::GetTaskRequest { id });
    let task = registry
        .tasks_call(async |c| c.get_task(request).await)
        .await?;
    match output {
        Output::Json => print(task_json(&task)),
        Output::Text => print(show::task_lines(&task, SystemTime::now()).join("\n")),
    }
}

/// `tasks wait ID`: follows the task to its end, for at most `limit`, and
/// ends as `invoke` would have.
pub(crate) async fn wait(
    registry: &mut Registry,
    id: String,
    limit: Option<Duration>,
    output: Output,
) -> Result<(), Failure> {
    let task = wait_for(registry, &id, Instant::now(), limit, output).await?;
    show::outcome(&task, output)
}

/// `tasks cancel ID`: ends the task CANCELLED (one already over stays as
/// it ended) and prints its id and state.
pub(crate) async fn cancel(
    registry: &mut Registry,
    id: String,
    output: Output,
) -> Result<(), Failure> {
    let request = registry.request(pb::CancelTaskRequest { id });
    let task = registry
        .tasks_call(async |c| c.cancel_task(request).await)
        .await?;
    summary(&task, output)?;
    if output == Output::Text && task.state() != pb::TaskState::Cancelled {
        note(format_args!(
            "task {} was already over: {}",
            task.id,
            state_name(task.state())
        ));
    }
    Ok(())
}

/// `task` in brief: its id and state (`--output json`: all of it).
fn summary(task: &pb::Task, output: Output) -> Result<(), Failure> {
    match output {
        Output::Json => print(task_json(task)),
        Output::Text => print(format_args!("{} {}", task.id, state_name(task.state()))),
    }
}

/// Waits for task `id` to be over, for at most `limit` after `started`,
/// showing its progress on standard error: the task as it ended. Ends
/// early, the task going on, when the time is up, on Ctrl-C, or when
/// standard output's reader has gone.
async fn wait_for(
    registry: &mut Registry,
    id: &str,
    started: Instant,
    limit: Option<Duration>,
    output: Output,
) -> Result<pb::Task, Failure> {
    let until = limit.map(|limit| started + limit);
    let (seen, mut changes) = watch::channel(None);
    let mut line = progress::Line::new(output);
    let follow = follow::follow(registry, id, until, &seen);
    let time_up = async {
        match until {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let interrupted = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No handler: Ctrl-C ends the process as it always does.
            std::future::pending::<()>().await;
        }
    };
    let closed = crate::pipe::stdout_closed();
    tokio::pin!(follow, time_up, interrupted, closed);
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let ended = loop {
        tokio::select! {
            ended = &mut follow => break ended,
            Ok(()) = changes.changed() => {
                if let Some(task) = &*changes.borrow_and_update() {
                    line.show(task);
                }
            }
            _ = ticks.tick() => line.tick(),
            () = &mut time_up => break Err(goes_on(timed_out(id, limit), id)),
            () = &mut interrupted => break Err(goes_on(
                Failure::plain(Exit::Interrupted, format!("interrupted while waiting for task {id}")),
                id,
            )),
            () = &mut closed => break Err(Failure::broken_pipe()),
        }
    };
    line.clear();
    ended
}

/// A wait for task `id` that ran out of `limit`.
fn timed_out(id: &str, limit: Option<Duration>) -> Failure {
    let within = limit.map_or_else(String::new, |limit| {
        format!(" within {}", humantime::format_duration(limit))
    });
    let message = format!("task {id} did not end{within}");
    Failure {
        exit: Exit::Timeout,
        json: json!({"error": {"code": "DEADLINE_EXCEEDED", "message": message}}),
        message: format!("DEADLINE_EXCEEDED: {message}"),
        details: Vec::new(),
    }
}

/// `failure` of a wait for task `id`, which goes on: says how to wait for
/// it again or cancel it, and names it in the JSON.
pub(crate) fn goes_on(mut failure: Failure, id: &str) -> Failure {
    failure.details.push(format!(
        "the task goes on: toolmesh tasks wait {id} (or tasks cancel {id})"
    ));
    if let Some(error) = failure.json.get_mut("error").and_then(Value::as_object_mut) {
        error.insert("task_id".into(), id.into());
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_gives_up_names_the_task_that_goes_on() {
        let failure = goes_on(timed_out("t-1", Some(Duration::from_secs(90))), "t-1");
        assert_eq!(failure.exit, Exit::Timeout);
        assert_eq!(
            failure.message,
            "DEADLINE_EXCEEDED: task t-1 did not end within 1m 30s"
        );
        assert_eq!(
            failure.details,
            ["the task goes on: toolmesh tasks wait t-1 (or tasks cancel t-1)"]
        );
        assert_eq!(failure.json["error"]["task_id"], "t-1");
        assert_eq!(failure.json["error"]["code"], "DEADLINE_EXCEEDED");
    }
}
