#![allow(clippy::unwrap_used)]

use async_trait::async_trait;

use tokio::time::Instant;

use super::*;
use crate::tool::Backend;

/// Answers with fixed text after a delay.
struct Fixed {
    delay: Duration,
    outcome: Outcome,
}

#[async_trait]
impl Backend for Fixed {
    async fn call(
        &self,
        _args: &str,
        _context: &CallContext,
        _deadline: Deadline,
    ) -> Result<Outcome, BackendError> {
        tokio::time::sleep(self.delay).await;
        Ok(self.outcome.clone())
    }
}

fn tool(name: &str, delay: Duration, outcome: Outcome, timeout: Option<Duration>) -> Tool {
    let descriptor = pb::ToolDescriptor {
        name: name.into(),
        timeout: timeout.map(|t| prost_types::Duration::try_from(t).unwrap()),
        ..Default::default()
    };
    Tool::new(descriptor, Arc::new(Fixed { delay, outcome }))
}

#[test]
fn tool_sets_are_checked() {
    assert!(matches!(Runtime::new(vec![]), Err(ToolSetError::Empty)));
    let a = tool("a", Duration::ZERO, Outcome::ok("1"), None);
    assert!(matches!(
        Runtime::new(vec![a.clone(), a]),
        Err(ToolSetError::Duplicate(name)) if name == "a"
    ));
    let bad = tool("bad name", Duration::ZERO, Outcome::ok("1"), None);
    assert!(matches!(
        Runtime::new(vec![bad]),
        Err(ToolSetError::InvalidName(_))
    ));
}

#[tokio::test]
async fn unknown_tool_is_not_found() {
    let runtime = Runtime::new(vec![tool("a", Duration::ZERO, Outcome::ok("1"), None)]).unwrap();
    let err = runtime
        .execute("b", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn results_are_normalized() {
    let runtime = Runtime::new(vec![
        tool("json", Duration::ZERO, Outcome::ok(" {\"a\": 1}\n"), None),
        tool(
            "text",
            Duration::ZERO,
            Outcome::ok("hello \"world\"\n"),
            None,
        ),
        tool("fails", Duration::ZERO, Outcome::error("boom"), None),
    ])
    .unwrap();
    let json = runtime
        .execute("json", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert_eq!(
        (json.result_json.as_str(), json.is_error),
        ("{\"a\": 1}", false)
    );
    let text = runtime
        .execute("text", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert_eq!(text.result_json, "\"hello \\\"world\\\"\\n\"");
    let fails = runtime
        .execute("fails", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert_eq!(
        (fails.result_json.as_str(), fails.is_error),
        ("\"boom\"", true)
    );
}

#[tokio::test]
async fn output_over_the_cap_is_an_error_result() {
    let big =
        tool("big", Duration::ZERO, Outcome::ok("x".repeat(100)), None).with_max_output_bytes(10);
    let runtime = Runtime::new(vec![big]).unwrap();
    let response = runtime
        .execute("big", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert!(response.is_error);
    assert!(
        response
            .result_json
            .contains("exceeds the limit of 10 bytes"),
        "{}",
        response.result_json
    );
}

#[tokio::test(start_paused = true)]
async fn tool_timeout_is_enforced() {
    let slow = tool(
        "slow",
        Duration::from_secs(30),
        Outcome::ok("1"),
        Some(Duration::from_secs(2)),
    );
    let runtime = Runtime::new(vec![slow]).unwrap();
    let start = Instant::now();
    let err = runtime
        .execute("slow", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::DeadlineExceeded);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn caller_timeout_wins_when_shorter() {
    let slow = tool(
        "slow",
        Duration::from_secs(30),
        Outcome::ok("1"),
        Some(Duration::from_secs(20)),
    );
    let runtime = Runtime::new(vec![slow]).unwrap();
    let start = Instant::now();
    let err = runtime
        .execute(
            "slow",
            "{}",
            CallContext::default(),
            Deadline::from_caller(start, Some(Duration::from_secs(1))),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::DeadlineExceeded);
    assert_eq!(start.elapsed(), Duration::from_millis(950));
}

#[tokio::test(start_paused = true)]
async fn effective_timeouts() {
    let s = Duration::from_secs;
    let effective = |tool: Option<Duration>, caller: Option<Duration>| {
        Deadline::from_caller(Instant::now(), caller)
            .limited_by(tool, DEFAULT_TIMEOUT)
            .budget()
    };
    assert_eq!(effective(None, None), DEFAULT_TIMEOUT);
    assert_eq!(effective(Some(s(2)), None), s(2));
    assert_eq!(effective(Some(s(2)), Some(s(10))), s(2));
    assert_eq!(effective(None, Some(s(10))), Duration::from_millis(9900));
}

#[test]
fn an_unknown_tool_is_named_bounded_and_on_one_line() {
    let huge = format!("{}\nforged", "t".repeat(1 << 20));
    let status = ExecuteError::UnknownTool(huge).to_status();
    assert_eq!(status.code(), tonic::Code::NotFound);
    assert!(
        status.message().len() < 256,
        "{} bytes",
        status.message().len()
    );
    assert!(!status.message().contains('\n'));
}

/// Answers with the context it was given, as JSON, counting its calls.
#[derive(Default)]
struct Echo {
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Backend for Echo {
    async fn call(
        &self,
        _args: &str,
        context: &CallContext,
        _deadline: Deadline,
    ) -> Result<Outcome, BackendError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Outcome::ok(
            serde_json::json!([context.caller, context.invocation_id]).to_string(),
        ))
    }
}

#[tokio::test]
async fn the_context_reaches_the_backend_once_checked() {
    let echo = Arc::new(Echo::default());
    let descriptor = pb::ToolDescriptor {
        name: "who".into(),
        ..Default::default()
    };
    let runtime = Runtime::new(vec![Tool::new(descriptor, echo.clone())]).unwrap();
    let known = runtime
        .execute(
            "who",
            "{}",
            CallContext::new("alice", "inv-1"),
            Deadline::unbounded(),
        )
        .await
        .unwrap();
    assert_eq!(known.result_json, r#"["alice","inv-1"]"#);
    let anonymous = runtime
        .execute("who", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert_eq!(anonymous.result_json, r#"["",""]"#);

    let forged = CallContext::new("alice\r\nx-toolmesh-caller: root", "inv-2");
    let err = runtime
        .execute("who", "{}", forged, Deadline::unbounded())
        .await
        .unwrap_err();
    let status = err.to_status();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with(
            r#"caller "alice\r\nx-toolmesh-caller: root" cannot be given to the tool"#
        ),
        "{}",
        status.message()
    );
    assert_eq!(
        echo.calls.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the refused call never reached the backend"
    );
}
