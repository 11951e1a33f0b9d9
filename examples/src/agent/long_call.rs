//! Step 10: the slow call of step 9, started as a task. It outlives the
//! tool's interactive timeout, reports its progress, and ends with its
//! result.

use std::time::Duration;

use tokio::time::Instant;
use tonic::Request;
use toolmesh_proto::pb;

use super::{Agent, CALL_DEADLINE};
use crate::present::{self, heading};

/// Longest the agent follows the task.
const TASK_DEADLINE: Duration = Duration::from_secs(30);

impl Agent {
    pub(super) async fn long_call(&mut self) {
        println!(
            "{}",
            heading("10. The same call as a task: Tasks.StartTask, then WatchTask")
        );
        println!("  slow_report may run 30 s as a task (its task_timeout); the agent follows it:");
        println!(r#"  -> start_task slow_report {{"quarter": "Q3"}}"#);
        let started = Instant::now();
        let mut request = Request::new(pb::StartTaskRequest {
            call: Some(pb::InvokeRequest {
                tool: "slow_report".into(),
                arguments_json: r#"{"quarter": "Q3"}"#.into(),
                tool_digest: self.digest_of("slow_report"),
                ..Default::default()
            }),
        });
        request.set_timeout(CALL_DEADLINE);
        let task = match self.tasks.start_task(request).await {
            Ok(task) => task.into_inner(),
            Err(status) => {
                println!("  <- {}", present::describe_status(&status).join(" "));
                self.check("the task started", false);
                return;
            }
        };
        println!("  <- task {} {}", task.id, state_name(&task));
        let last = self.follow(&task.id).await;
        let elapsed = started.elapsed();
        let result = match last.as_ref().and_then(|t| t.outcome.as_ref()) {
            Some(pb::task::Outcome::Response(response)) => {
                println!("  <- {}", present::describe_response(response));
                Some(response.result_json.clone())
            }
            Some(pb::task::Outcome::Error(error)) => {
                println!(
                    "  <- {} {}",
                    toolmesh_proto::code::name(tonic::Code::from_i32(error.code)),
                    error.message
                );
                None
            }
            None => {
                println!("  <- the task had not ended");
                None
            }
        };
        println!("  ended after {elapsed:.2?}");
        self.check(
            "the task completed with the report after the tool's 5 s, past its 1 s timeout",
            result.is_some_and(|r| r.contains("all good")) && elapsed >= Duration::from_secs(4),
        );
    }

    /// Follows task `id` to its end, printing each new progress: the task
    /// as it ended (`None` if the stream failed first).
    async fn follow(&mut self, id: &str) -> Option<pb::Task> {
        let mut request = Request::new(pb::WatchTaskRequest { id: id.to_owned() });
        request.set_timeout(TASK_DEADLINE);
        let mut stream = match self.tasks.watch_task(request).await {
            Ok(stream) => stream.into_inner(),
            Err(status) => {
                println!("  <- {}", present::describe_status(&status).join(" "));
                return None;
            }
        };
        let mut last: Option<pb::Task> = None;
        loop {
            match stream.message().await {
                Ok(Some(task)) => {
                    let before = last.as_ref().and_then(|t| t.progress.clone());
                    if let Some(progress) = task
                        .progress
                        .as_ref()
                        .filter(|p| before.as_ref() != Some(*p))
                    {
                        let percent = progress
                            .fraction
                            .map_or(String::new(), |f| format!("{:.0}% ", f * 100.0));
                        println!("  .. {percent}{}", progress.message);
                    }
                    last = Some(task);
                }
                Ok(None) => return last,
                Err(status) => {
                    println!("  <- {}", present::describe_status(&status).join(" "));
                    return None;
                }
            }
        }
    }
}

fn state_name(task: &pb::Task) -> &'static str {
    pb::TaskState::try_from(task.state).map_or("UNKNOWN", |s| s.as_str_name())
}
