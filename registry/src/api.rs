//! The tonic services. Thin: decode, call the plain types, encode.

use std::{pin::Pin, sync::Arc};

use futures::Stream;
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use toolmesh_proto::{pb, timeout};

use crate::{
    catalog::{Catalog, CatalogEvent, ChangeKind, lease_tag},
    error::RegistryError,
    invoke::Invoker,
};

/// Events buffered per watcher before the watcher task waits for the client.
const WATCH_BUFFER: usize = 64;

/// `toolmesh.v1.ToolRegistry`, for agents.
pub struct ToolRegistryApi {
    catalog: Arc<Catalog>,
    invoker: Arc<Invoker>,
    shutdown: CancellationToken,
}

impl ToolRegistryApi {
    /// The service over a catalog and an invoker; watch streams end when
    /// `shutdown` is cancelled.
    pub fn new(catalog: Arc<Catalog>, invoker: Arc<Invoker>, shutdown: CancellationToken) -> Self {
        Self {
            catalog,
            invoker,
            shutdown,
        }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ToolEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::tool_registry_server::ToolRegistry for ToolRegistryApi {
    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let tags = request.into_inner().tags;
        let tools = self
            .catalog
            .list()
            .iter()
            .filter(|t| tags.iter().all(|tag| t.descriptor.tags.contains(tag)))
            .map(|t| t.to_proto())
            .collect();
        Ok(Response::new(pb::ListToolsResponse { tools }))
    }

    async fn get_tool(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::Tool>, Status> {
        let name = request.into_inner().name;
        match self.catalog.get(&name) {
            Some(tool) => Ok(Response::new(tool.to_proto())),
            None => Err(RegistryError::ToolNotFound { tool: name }.into()),
        }
    }

    #[tracing::instrument(skip_all, fields(tool = %request.get_ref().tool))]
    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        let caller_timeout = timeout::of(&request);
        let result = self
            .invoker
            .invoke(request.into_inner(), caller_timeout)
            .await;
        match result {
            Ok(response) => Ok(Response::new(response)),
            Err(error) => {
                tracing::debug!(%error, "invoke failed");
                Err(error.into())
            }
        }
    }

    type WatchToolsStream = EventStream;

    async fn watch_tools(
        &self,
        _request: Request<pb::WatchToolsRequest>,
    ) -> Result<Response<Self::WatchToolsStream>, Status> {
        let (snapshot, mut changes) = self.catalog.watch();
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            for tool in snapshot {
                if tx
                    .send(Ok(event(ChangeKind::Added, Some(tool.to_proto()))))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if tx.send(Ok(synced())).await.is_err() {
                return;
            }
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => {
                        let _ = tx.send(Err(Status::unavailable("registry shutting down; watch again"))).await;
                        return;
                    }
                    () = tx.closed() => return,
                    next = changes.recv() => next,
                };
                let item = match next {
                    Ok(CatalogEvent { kind, tool }) => Ok(event(kind, Some(tool.to_proto()))),
                    Err(RecvError::Lagged(missed)) => Err(Status::aborted(format!(
                        "watcher fell {missed} events behind; watch again"
                    ))),
                    Err(RecvError::Closed) => {
                        Err(Status::unavailable("catalog closed; watch again"))
                    }
                };
                let last = item.is_err();
                if tx.send(item).await.is_err() || last {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn event(kind: ChangeKind, tool: Option<pb::Tool>) -> pb::ToolEvent {
    let kind = match kind {
        ChangeKind::Added => pb::tool_event::Kind::Added,
        ChangeKind::Updated => pb::tool_event::Kind::Updated,
        ChangeKind::Removed => pb::tool_event::Kind::Removed,
    };
    pb::ToolEvent {
        kind: kind.into(),
        tool,
    }
}

fn synced() -> pb::ToolEvent {
    pb::ToolEvent {
        kind: pb::tool_event::Kind::Synced.into(),
        tool: None,
    }
}

/// `toolmesh.v1.Registration`, for sidecars.
pub struct RegistrationApi {
    catalog: Arc<Catalog>,
}

impl RegistrationApi {
    /// The service over a catalog.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self { catalog }
    }
}

#[tonic::async_trait]
impl pb::registration_server::Registration for RegistrationApi {
    #[tracing::instrument(skip_all, fields(instance = %request.get_ref().instance_id))]
    async fn announce(
        &self,
        request: Request<pb::AnnounceRequest>,
    ) -> Result<Response<pb::AnnounceResponse>, Status> {
        let request = request.into_inner();
        let tools: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        let endpoint = request.endpoint.clone();
        match self.catalog.announce(request).await {
            Ok(lease) => {
                tracing::info!(?tools, %endpoint, lease = %lease_tag(&lease.id), "announced");
                Ok(Response::new(pb::AnnounceResponse {
                    lease_id: lease.id,
                    ttl: prost_types::Duration::try_from(lease.ttl).ok(),
                }))
            }
            Err(error) => {
                tracing::warn!(%error, "announce refused");
                Err(error.into())
            }
        }
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let ttl = self
            .catalog
            .heartbeat(&request.into_inner().lease_id)
            .await?;
        Ok(Response::new(pb::HeartbeatResponse {
            ttl: prost_types::Duration::try_from(ttl).ok(),
        }))
    }

    async fn withdraw(
        &self,
        request: Request<pb::WithdrawRequest>,
    ) -> Result<Response<pb::WithdrawResponse>, Status> {
        self.catalog
            .withdraw(&request.into_inner().lease_id)
            .await?;
        Ok(Response::new(pb::WithdrawResponse {}))
    }
}
