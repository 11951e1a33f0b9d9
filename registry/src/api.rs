//! The tonic services. Thin: decode, call the plain types, encode.

use std::{pin::Pin, sync::Arc};

use futures::Stream;
use prost::Message as _;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use toolmesh_proto::{pb, timeout};
use toolmesh_telemetry::shown::{QUOTED_MAX, clip};

use crate::{
    catalog::{Catalog, lease_tag},
    error::RegistryError,
    invoke::Invoker,
    watch::{self, Watchers},
};

/// `toolmesh.v1.ToolRegistry`, for agents.
pub struct ToolRegistryApi {
    catalog: Arc<Catalog>,
    invoker: Arc<Invoker>,
    watchers: Arc<Watchers>,
    shutdown: CancellationToken,
    list_limit: usize,
}

/// What a `ListTools` answer leaves for everything but its tools.
const LIST_MARGIN: usize = 1024;

impl ToolRegistryApi {
    /// The service over a catalog and an invoker; watch streams are held to
    /// `watchers`' limits and end when `shutdown` is cancelled.
    pub fn new(
        catalog: Arc<Catalog>,
        invoker: Arc<Invoker>,
        watchers: Arc<Watchers>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            catalog,
            invoker,
            watchers,
            shutdown,
            list_limit: (4 << 20) - LIST_MARGIN,
        }
    }

    /// Keeps `ListTools` answers under `max_message_bytes` (the server's
    /// encoding limit): a longer list stops before it, `truncated` set.
    #[must_use]
    pub fn max_message_bytes(mut self, max_message_bytes: usize) -> Self {
        self.list_limit = max_message_bytes.saturating_sub(LIST_MARGIN);
        self
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
        let mut answer = pb::ListToolsResponse::default();
        let mut size = 0;
        for tool in self
            .catalog
            .list()
            .iter()
            .filter(|t| tags.iter().all(|tag| t.descriptor.tags.contains(tag)))
        {
            let tool = tool.to_proto();
            // A repeated field costs its message, a tag and a length prefix.
            let cost = tool.encoded_len() + 1 + prost::length_delimiter_len(tool.encoded_len());
            if size + cost > self.list_limit {
                answer.truncated = true;
                break;
            }
            size += cost;
            answer.tools.push(tool);
        }
        Ok(Response::new(answer))
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

    #[tracing::instrument(skip_all, fields(tool = %clip(&request.get_ref().tool, QUOTED_MAX)))]
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
        request: Request<pb::WatchToolsRequest>,
    ) -> Result<Response<Self::WatchToolsStream>, Status> {
        let permit = self
            .watchers
            .admit(toolmesh_proto::tls::peer(&request).remote_addr)?;
        Ok(Response::new(Box::pin(watch::stream(
            self.catalog.clone(),
            self.watchers.limits(),
            self.shutdown.clone(),
            permit,
        ))))
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
    #[tracing::instrument(skip_all, fields(instance = %clip(&request.get_ref().instance_id, QUOTED_MAX)))]
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
