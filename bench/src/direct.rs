//! `ToolRuntime.Execute` served with no grant check: the path an agent
//! would take to the tool if there were no registry, for `direct` and
//! nginx in `scripts/bench.sh` and `scripts/hop.sh`.
//!
//! The sidecar takes only calls the registry signed, each grant once
//! (`toolmesh_proto::grant`), so h2load's pre-encoded frames cannot call
//! it. This server runs the same [`Runtime`] under the same HTTP/2
//! settings and leaves out only the check; the registry's path still pays
//! for it, as the hop it is.

use std::sync::Arc;

use toolmesh_proto::deadline::Deadline;
use toolmesh_proto::pb;
use toolmesh_proto::pb::tool_runtime_server::{ToolRuntime, ToolRuntimeServer};
use toolmesh_sidecar::runtime::Runtime;
use toolmesh_sidecar::server::{self, MAX_CONCURRENT_STREAMS};
use toolmesh_sidecar::{CallContext, Tool};

/// `Execute` for anyone; no tasks.
struct Unchecked(Arc<Runtime>);

#[tonic::async_trait]
impl ToolRuntime for Unchecked {
    async fn execute(
        &self,
        request: tonic::Request<pb::ExecuteRequest>,
    ) -> Result<tonic::Response<pb::ExecuteResponse>, tonic::Status> {
        let deadline = Deadline::of(&request);
        let call = request.into_inner();
        self.0
            .execute(
                &call.tool,
                &call.arguments_json,
                CallContext::new(call.caller, call.invocation_id),
                deadline,
            )
            .await
            .map(tonic::Response::new)
            .map_err(|err| err.to_status())
    }

    async fn run_task(
        &self,
        _: tonic::Request<pb::RunTaskRequest>,
    ) -> Result<tonic::Response<pb::RunTaskResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "the direct path runs no tasks",
        ))
    }

    async fn stop_task(
        &self,
        _: tonic::Request<pb::StopTaskRequest>,
    ) -> Result<tonic::Response<pb::StopTaskResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented(
            "the direct path runs no tasks",
        ))
    }
}

/// Serves `tool` on `listener` until the process ends, with the sidecar's
/// HTTP/2 and TCP settings (`toolmesh_sidecar::server`).
pub(crate) async fn serve(listener: tokio::net::TcpListener, tool: Tool) -> anyhow::Result<()> {
    let runtime = Arc::new(Runtime::new(vec![tool])?);
    server::builder(MAX_CONCURRENT_STREAMS)
        .add_service(ToolRuntimeServer::new(Unchecked(runtime)))
        .serve_with_incoming(server::incoming(listener))
        .await?;
    Ok(())
}
