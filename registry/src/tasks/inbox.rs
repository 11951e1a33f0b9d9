//! The approvers' inbox behind `toolmesh.v1.Approvals`: the calls held for
//! a person (tasks) and, with `--pins-file`, the tool definitions the pins
//! hold ([`crate::catalog::pins::approvals`]). Listings show the held
//! definitions first, by tool, then the held calls, newest first; an id
//! says which kind it names.

use toolmesh_proto::pb;
use toolmesh_telemetry::TraceContext;

use super::{Decide, Tasks, Viewer, model::Task};
use crate::{access::auth::Caller, catalog::pins::approvals, error::RegistryError};

/// The page token of the held definitions from the `n`th on.
const DEFINITIONS_TOKEN: &str = "definitions.";

impl Tasks {
    /// A page of what `approver` may decide: definitions, then calls.
    pub(crate) async fn inbox_page(
        &self,
        approver: &Caller,
        request: &pb::ListApprovalsRequest,
    ) -> Result<pb::ListApprovalsResponse, RegistryError> {
        let from = match request.page_token.strip_prefix(DEFINITIONS_TOKEN) {
            Some(n) => Some(
                n.parse::<usize>()
                    .map_err(|_| RegistryError::InvalidRequest {
                        field: "page_token".into(),
                        reason: "not a token ListApprovals gave".into(),
                    })?,
            ),
            None if request.page_token.is_empty() => Some(0),
            None => None,
        };
        let Some(from) = from else {
            return self.pending_for(approver, request).await;
        };
        let (size, _) = super::page(request.page_size, "", "ListApprovals")?;
        let mut approvals: Vec<pb::Approval> = self
            .invoker
            .catalog()
            .pending_definitions(approver)
            .into_iter()
            .skip(from)
            .take(size + 1)
            .collect();
        if approvals.len() > size {
            approvals.truncate(size);
            return Ok(pb::ListApprovalsResponse {
                approvals,
                next_page_token: format!("{DEFINITIONS_TOKEN}{}", from + size),
            });
        }
        let calls = pb::ListApprovalsRequest {
            page_size: u32::try_from(size - approvals.len()).unwrap_or(u32::MAX),
            page_token: String::new(),
        };
        if calls.page_size == 0 {
            // The page is full of definitions: the calls start the next.
            let next_page_token = format!("{DEFINITIONS_TOKEN}{}", from + size);
            return Ok(pb::ListApprovalsResponse {
                approvals,
                next_page_token,
            });
        }
        let rest = self.pending_for(approver, &calls).await?;
        approvals.extend(rest.approvals);
        Ok(pb::ListApprovalsResponse {
            approvals,
            next_page_token: rest.next_page_token,
        })
    }

    /// Everything pending `approver` may decide.
    pub(crate) async fn inbox_all(
        &self,
        approver: &Caller,
    ) -> Result<Vec<pb::Approval>, RegistryError> {
        let mut all = self.invoker.catalog().pending_definitions(approver);
        all.extend(
            self.pending_all(approver)
                .await?
                .iter()
                .filter_map(Task::approval_to_proto),
        );
        Ok(all)
    }

    /// Approval `id`, pending or closed, if `viewer` may see it.
    pub(crate) async fn inbox_get(
        &self,
        id: &str,
        viewer: &Viewer,
    ) -> Result<pb::Approval, RegistryError> {
        if approvals::is_definition(id) {
            return self
                .invoker
                .catalog()
                .definition_approval(&viewer.caller, id);
        }
        wire(&self.approval(id, viewer).await?)
    }

    /// Decides approval `id` as `viewer`.
    pub(crate) async fn inbox_decide(
        &self,
        id: &str,
        viewer: &Viewer,
        decide: Decide,
        (comment, digest): (&str, &str),
        trace: &TraceContext,
    ) -> Result<pb::Approval, RegistryError> {
        if approvals::is_definition(id) {
            let approve = matches!(decide, Decide::Approve);
            return self
                .invoker
                .catalog()
                .decide_definition(&viewer.caller, id, approve, comment, digest)
                .await;
        }
        wire(
            &self
                .decide(id, viewer, decide, comment, digest, trace)
                .await?,
        )
    }
}

/// `task`'s approval as the API shows it.
fn wire(task: &Task) -> Result<pb::Approval, RegistryError> {
    task.approval_to_proto()
        .ok_or_else(|| RegistryError::TaskNotFound {
            id: task.id.clone(),
        })
}
