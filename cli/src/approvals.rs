//! The approvals commands, over `toolmesh.v1.Approvals`: the calls the
//! registry's policy holds for a person. A held call is a task in
//! INPUT_REQUIRED and its approval's id is the task's id; `approvals list`
//! and `watch` show those the caller may decide, `get` shows one, and
//! `approve` and `deny` decide it, once. A refusal (not yours to decide,
//! your own call, decided already, another call's digest) ends as any
//! failed call does: its status, its exit code.
//!
//! - `client`: the `Approvals` client beside the connected registry.
//! - `show`: an approval as JSON, lines, a table row, a watch event.

pub(crate) mod client;
mod show;

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolmesh_proto::pb;

use crate::failure::Failure;
use crate::output::{Output, note, print, table};
pub(crate) use client::Approvals;
use show::{approval_json, state_name};

/// The most approvals the registry gives in one page.
const PAGE: u32 = 500;

/// `approvals list`: the pending approvals the caller may decide, newest
/// first: all of them, or the first `limit`.
pub(crate) async fn list(
    approvals: &mut Approvals,
    limit: Option<u32>,
    output: Output,
) -> Result<(), Failure> {
    let limit = limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut pending = Vec::new();
    let mut page_token = String::new();
    let more = loop {
        let want = limit.map_or(PAGE, |n| {
            u32::try_from(n.saturating_sub(pending.len())).map_or(PAGE, |left| left.min(PAGE))
        });
        let request = approvals.request(pb::ListApprovalsRequest {
            page_size: want,
            page_token,
        });
        let page = approvals
            .call(async |c| c.list_approvals(request).await)
            .await?;
        let empty = page.approvals.is_empty();
        pending.extend(page.approvals);
        page_token = page.next_page_token;
        if let Some(n) = limit
            && pending.len() >= n
        {
            pending.truncate(n);
            break !page_token.is_empty();
        }
        // A page with nothing on it cannot lead anywhere: never loop on one.
        if page_token.is_empty() || empty {
            break false;
        }
    };
    match output {
        Output::Json => print(json!({
            "approvals": Value::Array(pending.iter().map(approval_json).collect()),
            "more": more,
        })),
        Output::Text => {
            let now = SystemTime::now();
            let rows: Vec<Vec<String>> =
                pending.iter().map(|a| show::approval_row(a, now)).collect();
            print(table(
                &["ID", "TOOL", "CALLER", "RULE", "EXPIRES", "ARGUMENTS"],
                &rows,
            ))?;
            if more {
                note("more approvals wait for a decision: a larger --limit shows them");
            } else if pending.is_empty() {
                note("no call waits for your decision");
            }
            Ok(())
        }
    }
}

/// `approvals watch`: the pending approvals the caller may decide, then
/// each one added and each one removed (decided, expired, cancelled: its
/// state says), until interrupted, nobody reads any more, or `limit` has
/// passed (which ends it as done).
pub(crate) async fn watch(
    approvals: &mut Approvals,
    limit: Option<Duration>,
    output: Output,
) -> Result<(), Failure> {
    let time_up = async {
        match limit {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        watched = follow(approvals, output) => watched,
        () = time_up => Ok(()),
    }
}

/// The `WatchApprovals` stream, each event printed, to its end.
async fn follow(approvals: &mut Approvals, output: Output) -> Result<(), Failure> {
    let mut request = approvals.request(pb::WatchApprovalsRequest {});
    // A stream lasts as long as the user wants: no deadline.
    request.metadata_mut().remove("grpc-timeout");
    let mut stream = approvals
        .call(async |c| c.watch_approvals(request).await)
        .await?;
    // Between events nothing is written: notice a reader gone meanwhile.
    let closed = crate::pipe::stdout_closed();
    tokio::pin!(closed);
    loop {
        let event = tokio::select! {
            event = stream.message() => event,
            () = &mut closed => return Err(Failure::broken_pipe()),
        };
        let Some(event) = event.map_err(|s| approvals.failed(&s))? else {
            return Ok(());
        };
        match output {
            Output::Json => {
                let kind = event.kind().as_str_name().trim_start_matches("KIND_");
                let approval = event.approval.as_ref().map(approval_json);
                print(json!({"kind": kind, "approval": approval}))?;
            }
            Output::Text => print(show::event_line(&event, SystemTime::now()))?,
        }
    }
}

/// `approvals get ID`: one approval, pending or closed, whole.
pub(crate) async fn get(
    approvals: &mut Approvals,
    id: String,
    output: Output,
) -> Result<(), Failure> {
    let request = approvals.request(pb::GetApprovalRequest { task_id: id });
    let approval = approvals
        .call(async |c| c.get_approval(request).await)
        .await?;
    match output {
        Output::Json => print(approval_json(&approval)),
        Output::Text => print(show::approval_lines(&approval, SystemTime::now()).join("\n")),
    }
}

/// `approvals approve ID`: the call runs once, as it was held; only the
/// call of `digest`, if given.
pub(crate) async fn approve(
    approvals: &mut Approvals,
    id: String,
    comment: Option<String>,
    digest: Option<String>,
    output: Output,
) -> Result<(), Failure> {
    let request = approvals.request(pb::ApproveRequest {
        task_id: id,
        comment: comment.unwrap_or_default(),
        digest: digest.unwrap_or_default(),
    });
    let approval = approvals.call(async |c| c.approve(request).await).await?;
    summary(&approval, output)
}

/// `approvals deny ID --comment TEXT`: the call's task fails with the
/// comment, which its caller reads; only the call of `digest`, if given.
pub(crate) async fn deny(
    approvals: &mut Approvals,
    id: String,
    comment: String,
    digest: Option<String>,
    output: Output,
) -> Result<(), Failure> {
    let request = approvals.request(pb::DenyRequest {
        task_id: id,
        comment,
        digest: digest.unwrap_or_default(),
    });
    let approval = approvals.call(async |c| c.deny(request).await).await?;
    summary(&approval, output)
}

/// `approval` in brief: its id and state (`--output json`: all of it).
fn summary(approval: &pb::Approval, output: Output) -> Result<(), Failure> {
    match output {
        Output::Json => print(approval_json(approval)),
        Output::Text => print(format_args!(
            "{} {}",
            approval.task_id,
            state_name(approval.state())
        )),
    }
}

/// `--digest`: the call's digest as `approvals get` shows it, 64 hex
/// digits (SHA-256), in lowercase as the registry writes it.
pub(crate) fn digest(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(format!(
            "{text:?} is not a digest: a call's digest is 64 hex digits, as `toolmesh approvals get ID` shows it"
        ))
    }
}

/// `deny --comment`: why, in words, which the caller (and its LLM) reads;
/// never blank.
pub(crate) fn reason(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err("say why the call is denied: its caller reads the comment".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_is_64_hex_digits_in_lowercase() {
        let hex = "AB".repeat(32);
        assert_eq!(digest(&format!(" {hex} ")), Ok("ab".repeat(32)));
        for refused in ["", "abc", &"g".repeat(64), &"a".repeat(65)] {
            assert!(digest(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_denial_says_why() {
        assert_eq!(reason("no"), Ok("no".to_owned()));
        assert!(reason(" \n").is_err());
    }
}
