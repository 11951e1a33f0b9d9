//! `toolmesh.v1.Approvals`, for the people who decide held calls and held
//! definitions: each request authenticated as agents' are, each approval
//! shown only to its rule's approvers (and to whom may see its task), each
//! held definition only to the pins file's approvers.

use std::{collections::HashMap, pin::Pin, sync::Arc};

use futures::Stream;
use tonic::{Request, Response, Status};
use toolmesh_proto::{deadline::Deadline, pb};
use toolmesh_telemetry::TraceContext;

use crate::{
    access::Access,
    catalog::pins::approvals::is_definition,
    error::RegistryError,
    tasks::{Decide, Tasks, Viewer},
};

/// `toolmesh.v1.Approvals`, over [`Tasks`].
pub(crate) struct ApprovalsApi {
    access: Arc<Access>,
    tasks: Arc<Tasks>,
}

impl ApprovalsApi {
    /// The service over `tasks`, for the callers `access` knows.
    pub(crate) fn new(access: Arc<Access>, tasks: Arc<Tasks>) -> Self {
        Self { access, tasks }
    }

    fn viewer<T>(&self, request: &Request<T>) -> Result<Viewer, Status> {
        let caller = self.access.caller(request.metadata())?;
        Ok(Viewer {
            caller,
            policy: self.access.policy(),
        })
    }

    async fn decide(
        &self,
        viewer: Viewer,
        trace: TraceContext,
        (id, comment, digest): (String, String, String),
        decide: Decide,
    ) -> Result<Response<pb::Approval>, Status> {
        let approval = self
            .tasks
            .inbox_decide(&id, &viewer, decide, (&comment, &digest), &trace)
            .await?;
        Ok(Response::new(approval))
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ApprovalEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::approvals_server::Approvals for ApprovalsApi {
    async fn list_approvals(
        &self,
        request: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let viewer = self.viewer(&request)?;
        Ok(Response::new(
            self.tasks
                .inbox_page(&viewer.caller, request.get_ref())
                .await?,
        ))
    }

    type WatchApprovalsStream = EventStream;

    async fn watch_approvals(
        &self,
        request: Request<pb::WatchApprovalsRequest>,
    ) -> Result<Response<Self::WatchApprovalsStream>, Status> {
        let viewer = self.viewer(&request)?;
        let deadline = Deadline::of(&request);
        let watch = Watch {
            tasks: self.tasks.clone(),
            viewer,
            deadline,
            shown: HashMap::new(),
            queue: std::collections::VecDeque::new(),
            synced: false,
            done: false,
            changes: self.tasks.subscribe(),
        };
        Ok(Response::new(Box::pin(futures::stream::unfold(
            watch,
            Watch::next,
        ))))
    }

    async fn get_approval(
        &self,
        request: Request<pb::GetApprovalRequest>,
    ) -> Result<Response<pb::Approval>, Status> {
        let viewer = self.viewer(&request)?;
        let approval = self
            .tasks
            .inbox_get(&request.get_ref().task_id, &viewer)
            .await?;
        Ok(Response::new(approval))
    }

    async fn approve(
        &self,
        request: Request<pb::ApproveRequest>,
    ) -> Result<Response<pb::Approval>, Status> {
        let viewer = self.viewer(&request)?;
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let r = request.into_inner();
        self.decide(
            viewer,
            trace,
            (r.task_id, r.comment, r.digest),
            Decide::Approve,
        )
        .await
    }

    async fn deny(
        &self,
        request: Request<pb::DenyRequest>,
    ) -> Result<Response<pb::Approval>, Status> {
        let viewer = self.viewer(&request)?;
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let r = request.into_inner();
        self.decide(
            viewer,
            trace,
            (r.task_id, r.comment, r.digest),
            Decide::Deny,
        )
        .await
    }
}

/// One `WatchApprovals` stream: the pending approvals read again at each
/// change this replica makes, and at the poll interval for other
/// replicas'; what appeared is ADDED, what left is REMOVED.
struct Watch {
    tasks: Arc<Tasks>,
    viewer: Viewer,
    deadline: Deadline,
    /// What the stream has shown as pending, by id.
    shown: HashMap<String, pb::Approval>,
    /// Events found and not sent yet.
    queue: std::collections::VecDeque<pb::ApprovalEvent>,
    synced: bool,
    done: bool,
    changes: tokio::sync::broadcast::Receiver<Arc<str>>,
}

impl Watch {
    async fn next(mut self) -> Option<(Result<pb::ApprovalEvent, Status>, Self)> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done {
                return None;
            }
            if self.synced {
                let poll = tokio::time::sleep(self.tasks.poll_interval());
                tokio::select! {
                    () = tokio::time::sleep_until(self.deadline.at()) => {
                        self.done = true;
                        return Some((Err(Status::deadline_exceeded("the caller's deadline passed; watch again")), self));
                    }
                    () = poll => {}
                    _ = self.changes.recv() => {}
                }
            }
            if let Err(error) = self.read().await {
                self.done = true;
                return Some((Err(error.into()), self));
            }
        }
    }

    /// Reads the pending approvals, queueing what changed since the last
    /// read (and SYNCED after the first).
    async fn read(&mut self) -> Result<(), RegistryError> {
        let pending = self.tasks.inbox_all(&self.viewer.caller).await?;
        let now: HashMap<String, pb::Approval> = pending
            .into_iter()
            .map(|a| (a.task_id.clone(), a))
            .collect();
        let mut gone: Vec<String> = self
            .shown
            .keys()
            .filter(|id| !now.contains_key(*id))
            .cloned()
            .collect();
        gone.sort();
        for id in gone {
            let last = self.shown.remove(&id);
            // Its state now, if it can still be read; a definition that
            // left undecided was withdrawn.
            let closed = match self.tasks.inbox_get(&id, &self.viewer).await {
                Ok(approval) => Some(approval),
                Err(_) if is_definition(&id) => last.map(|mut a| {
                    a.state = pb::ApprovalState::Void as i32;
                    a
                }),
                Err(_) => last,
            };
            self.queue.push_back(pb::ApprovalEvent {
                kind: pb::approval_event::Kind::Removed as i32,
                approval: closed,
            });
        }
        let mut added: Vec<&pb::Approval> = now
            .values()
            .filter(|a| !self.shown.contains_key(&a.task_id))
            .collect();
        added.sort_by_key(|a| {
            let at = a.requested_at.as_ref().map(|t| (t.seconds, t.nanos));
            (at, a.task_id.clone())
        });
        for approval in added {
            self.queue.push_back(pb::ApprovalEvent {
                kind: pb::approval_event::Kind::Added as i32,
                approval: Some(approval.clone()),
            });
        }
        self.shown = now;
        if !self.synced {
            self.synced = true;
            self.queue.push_back(pb::ApprovalEvent {
                kind: pb::approval_event::Kind::Synced as i32,
                approval: None,
            });
        }
        Ok(())
    }
}
