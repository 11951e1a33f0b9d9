//! `toolmesh.v1.Tasks`, the agents' calls that outlive one request: each
//! authenticated as `Invoke` is, each shown only the caller's own tasks.

use std::{pin::Pin, sync::Arc};

use futures::Stream;
use tonic::{Request, Response, Status};
use toolmesh_proto::{deadline::Deadline, pb, tls};
use toolmesh_telemetry::{
    TraceContext,
    shown::{QUOTED_MAX, clip},
};

use crate::{
    access::{Access, allows},
    calls::invoke::{Call, Purpose},
    error::RegistryError,
    tasks::{Tasks, Viewer, model::Task},
};

/// `Tasks.StartTask`'s fully qualified name, as its spans name it.
const START_TASK: &str = "toolmesh.v1.Tasks/StartTask";

/// `toolmesh.v1.Tasks`, over [`Tasks`].
pub(crate) struct TasksApi {
    access: Arc<Access>,
    tasks: Arc<Tasks>,
}

impl TasksApi {
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

    /// `StartTask`, inside its span.
    async fn start_task_traced(
        &self,
        request: Request<pb::StartTaskRequest>,
        trace: TraceContext,
    ) -> Result<Response<pb::Task>, Status> {
        let deadline = Deadline::of(&request);
        let peer = tls::peer(&request).remote_addr;
        let caller = self.access.caller(request.metadata())?;
        let Some(call) = request.into_inner().call else {
            return Err(RegistryError::InvalidRequest {
                field: "call".into(),
                reason: "required: the call, as Invoke takes it".into(),
            }
            .into());
        };
        let policy = self.access.policy();
        if !allows(policy.as_deref(), &caller, &call.tool) {
            return Err(RegistryError::ToolNotFound { tool: call.tool }.into());
        }
        let hold = self.tasks.held_by(policy.as_deref(), &caller, &call);
        let call_of = Call {
            caller: &caller.id,
            peer,
            deadline,
            trace,
        };
        let task = match hold {
            Some(hold) => self.tasks.hold(call, call_of, hold, Purpose::Task).await?,
            None => self.tasks.start(call, call_of).await?,
        };
        Ok(Response::new(task.to_proto()))
    }

    fn caller<T>(&self, request: &Request<T>) -> Result<String, Status> {
        self.access
            .caller(request.metadata())
            .map(|caller| caller.id)
            .map_err(Status::from)
    }
}

type TaskStream = Pin<Box<dyn Stream<Item = Result<pb::Task, Status>> + Send>>;

#[tonic::async_trait]
impl pb::tasks_server::Tasks for TasksApi {
    async fn start_task(
        &self,
        request: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let tool = request
            .get_ref()
            .call
            .as_ref()
            .map_or("", |c| c.tool.as_str());
        let span = toolmesh_telemetry::call_span!(
            trace.is_traced(),
            "toolmesh.v1.Tasks/StartTask",
            otel.kind = "server",
            tool = %clip(tool, QUOTED_MAX),
        );
        toolmesh_telemetry::spans::serve(
            span,
            &trace,
            START_TASK,
            Box::pin(self.start_task_traced(request, trace.clone())),
        )
        .await
    }

    async fn get_task(
        &self,
        request: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let viewer = self.viewer(&request)?;
        let task = self.tasks.get(&request.get_ref().id, &viewer).await?;
        Ok(Response::new(task.to_proto()))
    }

    type WatchTaskStream = TaskStream;

    async fn watch_task(
        &self,
        request: Request<pb::WatchTaskRequest>,
    ) -> Result<Response<Self::WatchTaskStream>, Status> {
        let viewer = self.viewer(&request)?;
        let deadline = Deadline::of(&request);
        let id = request.into_inner().id;
        // The first answer is the task as it is: an unknown one fails here.
        let first = self.tasks.get(&id, &viewer).await?;
        let watch = Watch {
            tasks: self.tasks.clone(),
            id,
            viewer,
            deadline,
            seen: 0,
            first: Some(first),
            done: false,
        };
        let stream = futures::stream::unfold(watch, Watch::next);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn cancel_task(
        &self,
        request: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::Task>, Status> {
        let viewer = self.viewer(&request)?;
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let task = self
            .tasks
            .cancel(&request.get_ref().id, &viewer, &trace)
            .await?;
        Ok(Response::new(task.to_proto()))
    }

    async fn list_tasks(
        &self,
        request: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let caller = self.caller(&request)?;
        Ok(Response::new(
            self.tasks.list(&caller, request.get_ref()).await?,
        ))
    }
}

/// One `WatchTask` stream.
struct Watch {
    tasks: Arc<Tasks>,
    id: String,
    viewer: Viewer,
    deadline: Deadline,
    /// The revision last sent (0: none yet).
    seen: u64,
    /// The task as the stream began, sent first.
    first: Option<Task>,
    /// Whether the stream has sent its last item.
    done: bool,
}

impl Watch {
    /// The next item: the task each time it changed, until it is over; an
    /// error (then the end) at the caller's deadline or when it is gone.
    async fn next(mut self) -> Option<(Result<pb::Task, Status>, Self)> {
        if self.done {
            return None;
        }
        let answer = match self.first.take() {
            Some(first) => Ok(Some(first)),
            None => {
                self.tasks
                    .next(&self.id, &self.viewer, self.seen, self.deadline)
                    .await
            }
        };
        let item = match answer {
            Ok(Some(task)) => {
                self.seen = task.revision;
                self.done = task.state.is_terminal();
                Ok(task.to_proto())
            }
            Ok(None) => {
                self.done = true;
                Err(Status::deadline_exceeded(
                    "the caller's deadline passed before the task ended; the task goes on: watch it again",
                ))
            }
            Err(error) => {
                self.done = true;
                Err(error.into())
            }
        };
        Some((item, self))
    }
}
