//! The failures the demo's agent provokes, one of each the error model names,
//! and what it expects to read in each status's details.

use super::*;

impl Agent {
    pub(super) async fn invalid_arguments(&mut self) {
        println!(
            "{}",
            heading("4. Arguments that fail the schema: INVALID_ARGUMENT + BadRequest")
        );
        let outcome = self.invoke("divide", r#"{"a": "ten", "c": 1}"#).await;
        let fields: BTreeSet<String> = match &outcome {
            Err(status) => status
                .get_error_details()
                .bad_request()
                .map(|b| b.field_violations.iter().map(|v| v.field.clone()).collect())
                .unwrap_or_default(),
            Ok(_) => BTreeSet::new(),
        };
        self.check(
            "INVALID_ARGUMENT with a BadRequest violation at /a (wrong type) and /b (missing)",
            code_of(&outcome) == Some(Code::InvalidArgument)
                && fields.contains("/a")
                && fields.contains("/b"),
        );
    }

    pub(super) async fn arguments_not_json(&mut self) {
        println!(
            "{}",
            heading(
                "5. Arguments that are not JSON: INVALID_ARGUMENT + BadRequest with line/column"
            )
        );
        let outcome = self.invoke("divide", "{\"a\": 1,\n \"b\": }").await;
        let located = match &outcome {
            Err(status) => status.get_error_details().bad_request().is_some_and(|b| {
                b.field_violations
                    .iter()
                    .any(|v| v.field == "arguments_json" && v.description.contains("line 2"))
            }),
            Ok(_) => false,
        };
        self.check(
            "INVALID_ARGUMENT with a BadRequest violation on arguments_json at line 2",
            code_of(&outcome) == Some(Code::InvalidArgument) && located,
        );
    }

    pub(super) async fn unknown_tool(&mut self) {
        println!(
            "{}",
            heading("6. An unknown tool: NOT_FOUND + ResourceInfo")
        );
        let outcome = self.invoke("translate", r#"{"text": "hello"}"#).await;
        let named = match &outcome {
            Err(status) => status
                .get_error_details()
                .resource_info()
                .is_some_and(|r| r.resource_name == "translate"),
            Ok(_) => false,
        };
        self.check(
            "NOT_FOUND with a ResourceInfo naming the tool",
            code_of(&outcome) == Some(Code::NotFound) && named,
        );
    }

    pub(super) async fn rate_limit(&mut self) {
        println!(
            "{}",
            heading("7. The rate limit: RESOURCE_EXHAUSTED + RetryInfo + QuotaFailure")
        );
        println!(
            "  word_count allows 1 call/s with a burst of 3 (section 3 spent one); calling it until refused:"
        );
        let mut allowed = 0;
        let mut refusal = None;
        for _ in 0..MAX_RATE_LIMIT_CALLS {
            match self
                .invoke("word_count", r#"{"text": "again and again"}"#)
                .await
            {
                Ok(_) => allowed += 1,
                Err(status) => {
                    refusal = Some(status);
                    break;
                }
            }
        }
        let Some(status) = refusal else {
            self.check(
                format!("word_count refused within {MAX_RATE_LIMIT_CALLS} calls"),
                false,
            );
            return;
        };
        let details = status.get_error_details();
        let delay = details.retry_info().and_then(|r| r.retry_delay);
        let quota = details
            .quota_failure()
            .is_some_and(|q| !q.violations.is_empty());
        self.check(
            format!(
                "RESOURCE_EXHAUSTED after {allowed} allowed call(s), with a RetryInfo delay and a QuotaFailure"
            ),
            status.code() == Code::ResourceExhausted && delay.is_some_and(|d| !d.is_zero()) && quota,
        );
        let Some(delay) = delay else { return };
        println!("  waiting the {delay:?} RetryInfo asked for, then calling again:");
        tokio::time::sleep(delay + Duration::from_millis(20)).await;
        let outcome = self
            .invoke("word_count", r#"{"text": "patience pays"}"#)
            .await;
        self.check(
            "after the RetryInfo delay the call is allowed again",
            outcome.is_ok(),
        );
    }

    pub(super) async fn tool_errors(&mut self) {
        println!(
            "{}",
            heading("8. Tool errors: the tool ran and failed (is_error, not a gRPC error)")
        );
        let outcome = self.invoke("divide", r#"{"a": 1, "b": 0}"#).await;
        let message = outcome
            .as_ref()
            .ok()
            .filter(|r| r.is_error)
            .and_then(|r| serde_json::from_str::<Value>(&r.result_json).ok());
        self.check(
            "divide by zero is an is_error result \"division by zero\"",
            message == Some(Value::from("division by zero")),
        );
        println!("  the inventory service answers HTTP 404 for an unknown key:");
        let outcome = self.invoke("lookup", r#"{"key": "gizmo"}"#).await;
        let body = outcome
            .as_ref()
            .ok()
            .filter(|r| r.is_error)
            .and_then(|r| serde_json::from_str::<Value>(&r.result_json).ok());
        self.check(
            "lookup of an unknown key is an is_error result with the service's 404 body",
            body.as_ref().is_some_and(|b| b["known_keys"].is_array()),
        );
    }

    pub(super) async fn timeout(&mut self) {
        println!("{}", heading("9. A timeout: DEADLINE_EXCEEDED"));
        println!(
            "  slow_report needs 5 s, its timeout is 1 s; the agent allows {CALL_DEADLINE:?}:"
        );
        let started = Instant::now();
        let outcome = self.invoke("slow_report", r#"{"quarter": "Q3"}"#).await;
        let elapsed = started.elapsed();
        println!("  answered after {elapsed:.2?}");
        self.check(
            "DEADLINE_EXCEEDED at the tool's 1 s timeout (well before 5 s)",
            code_of(&outcome) == Some(Code::DeadlineExceeded) && elapsed < Duration::from_secs(3),
        );
    }
}
