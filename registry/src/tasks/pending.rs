//! The approvers' view of the held calls: the pending ones each may
//! decide, newest first, read from the store's index of held calls.

use super::{
    Tasks,
    approve::may_decide,
    model::{Task, now_ms},
    store::Cursor,
    store_error,
};
use crate::{access::auth::Caller, error::RegistryError};
use toolmesh_proto::pb;

/// Most pending tasks one read of the store takes, while a listing looks
/// for those its approver may decide.
const PENDING_SCAN: usize = 200;

impl Tasks {
    /// A page of the pending approvals `approver` may decide, newest first.
    pub(crate) async fn pending_for(
        &self,
        approver: &Caller,
        request: &pb::ListApprovalsRequest,
    ) -> Result<pb::ListApprovalsResponse, RegistryError> {
        let (size, after) = super::page(request.page_size, &request.page_token, "ListApprovals")?;
        let mut found = self.pending_page(approver, after, size + 1).await?;
        let next_page_token = super::next_page(&mut found, size);
        Ok(pb::ListApprovalsResponse {
            approvals: found.iter().filter_map(Task::approval_to_proto).collect(),
            next_page_token,
        })
    }

    /// Every pending approval `approver` may decide (bounded by the live
    /// tasks), newest first.
    pub(crate) async fn pending_all(&self, approver: &Caller) -> Result<Vec<Task>, RegistryError> {
        self.pending_page(approver, None, self.settings.max_live)
            .await
    }

    /// Up to `want` pending approvals `approver` may decide, after `after`.
    async fn pending_page(
        &self,
        approver: &Caller,
        mut after: Option<Cursor>,
        want: usize,
    ) -> Result<Vec<Task>, RegistryError> {
        let now = now_ms();
        let mut found = Vec::new();
        // Each read moves on by PENDING_SCAN; the pending are live tasks.
        for _ in 0..=self.settings.max_live / PENDING_SCAN {
            let page = self
                .store
                .pending(after.as_ref(), PENDING_SCAN)
                .await
                .map_err(store_error)?;
            let full = page.len() == PENDING_SCAN;
            after = page.last().map(Cursor::after);
            found.extend(page.into_iter().filter(|task| {
                task.pending_approval()
                    .is_some_and(|a| now < a.until_ms && may_decide(task, a, approver).is_ok())
            }));
            if found.len() >= want || !full {
                break;
            }
        }
        found.truncate(want);
        Ok(found)
    }

    /// How many calls wait for approval, for the gauge.
    pub(super) async fn count_pending(&self) {
        match self.store.pending_count().await {
            Ok(count) => self.metrics.approvals_pending(count),
            Err(error) => {
                tracing::debug!(%error, "the pending approvals gauge waits for the next pass")
            }
        }
    }
}
