//! The tonic services. Thin: decode, call the plain types, encode.

use std::{pin::Pin, sync::Arc};

use futures::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use toolmesh_proto::{deadline::Deadline, pb, tls};
use toolmesh_telemetry::{
    TraceContext,
    shown::{QUOTED_MAX, clip},
    spans,
};

use crate::{
    access::{Access, allows, allows_every_tool},
    audit::{AuditLog, Outcome, RegistrationAction, RegistrationRecord},
    auth::Caller,
    catalog::{Catalog, lease_tag},
    error::RegistryError,
    invoke::{Call, Invoker},
    listing::Query,
    registrants::{Owner, Registrant},
    search::{self, Scope, ToolSearch},
    watch::{self, Visibility, Watchers},
};

/// `toolmesh.v1.ToolRegistry`, for agents. Every call is authenticated
/// (when agents are), and shows or reaches only the tools the caller may
/// call: any other is `NOT_FOUND`.
pub struct ToolRegistryApi {
    catalog: Arc<Catalog>,
    access: Arc<Access>,
    invoker: Arc<Invoker>,
    watchers: Arc<Watchers>,
    shutdown: CancellationToken,
    list_limit: usize,
    search: Arc<ToolSearch>,
}

/// `Invoke`'s fully qualified name, as its spans name it.
const INVOKE: &str = "toolmesh.v1.ToolRegistry/Invoke";

/// What a `ListTools` answer leaves for everything but its tools.
const LIST_MARGIN: usize = 1024;

impl ToolRegistryApi {
    /// The service over a catalog and an invoker, for the callers `access`
    /// admits; watch streams are held to `watchers`' limits and end when
    /// `shutdown` is cancelled.
    pub fn new(
        catalog: Arc<Catalog>,
        access: Arc<Access>,
        invoker: Arc<Invoker>,
        watchers: Arc<Watchers>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            catalog,
            access,
            invoker,
            watchers,
            shutdown,
            list_limit: (4 << 20) - LIST_MARGIN,
            search: Arc::default(),
        }
    }

    /// Answers `SearchTools` from `search`, which the caller keeps equal
    /// to the catalog ([`ToolSearch::follow`]).
    #[must_use]
    pub fn with_search(mut self, search: Arc<ToolSearch>) -> Self {
        self.search = search;
        self
    }

    /// Keeps `ListTools` answers under `max_message_bytes` (the server's
    /// encoding limit): a longer list stops before it, `truncated` set.
    #[must_use]
    pub fn max_message_bytes(mut self, max_message_bytes: usize) -> Self {
        self.list_limit = max_message_bytes.saturating_sub(LIST_MARGIN);
        self
    }

    /// `Invoke` inside its server span; `trace` is the agent's context.
    async fn invoke_traced(
        &self,
        request: Request<pb::InvokeRequest>,
        trace: TraceContext,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        let deadline = Deadline::of(&request);
        let peer = tls::peer(&request).remote_addr;
        let caller = match self.access.caller(request.metadata()) {
            Ok(caller) => caller,
            Err(error) => {
                self.invoker.refused(request.get_ref(), "", peer, &error);
                return Err(error.into());
            }
        };
        if !allows(
            self.access.policy().as_deref(),
            &caller,
            &request.get_ref().tool,
        ) {
            // As if the tool did not exist: a caller learns nothing of the
            // tools it may not call. The operator's records say what it was.
            self.invoker.denied(request.get_ref(), &caller.id, peer);
            return Err(RegistryError::ToolNotFound {
                tool: request.get_ref().tool.clone(),
            }
            .into());
        }
        let call = Call {
            caller: &caller.id,
            peer,
            deadline,
            trace,
        };
        match self.invoker.invoke(request.into_inner(), call).await {
            Ok(response) => Ok(Response::new(response)),
            Err(error) => {
                tracing::debug!(%error, "invoke failed");
                Err(error.into())
            }
        }
    }

    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        self.access.caller(request.metadata()).map_err(|error| {
            tracing::debug!(%error, peer = ?tls::peer(request).remote_addr, "agent refused");
            error.into()
        })
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ToolEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::tool_registry_server::ToolRegistry for ToolRegistryApi {
    async fn list_tools(
        &self,
        request: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let caller = self.caller(&request)?;
        let query = Query::new(request.get_ref())?;
        let policy = self.access.policy();
        let mut tools = self.catalog.list();
        tools.retain(|t| {
            query.matches(t.name(), &t.descriptor.tags)
                && allows(policy.as_deref(), &caller, t.name())
        });
        Ok(Response::new(query.page(
            &tools,
            |t| t.name(),
            |t| t.to_proto(),
            self.list_limit,
        )))
    }

    async fn export_tools(
        &self,
        request: Request<pb::ExportToolsRequest>,
    ) -> Result<Response<pb::ExportToolsResponse>, Status> {
        let caller = self.caller(&request)?;
        let request = request.into_inner();
        let format = match pb::ExportFormat::try_from(request.format) {
            Ok(pb::ExportFormat::Unspecified) | Err(_) => {
                return Err(RegistryError::InvalidRequest {
                    field: "format".into(),
                    reason: "choose one: OPENAI_CHAT, OPENAI_RESPONSES, ANTHROPIC, GEMINI or MCP"
                        .into(),
                }
                .into());
            }
            Ok(format) => format,
        };
        let query = Query::filters(request.tags, request.name_prefix)?;
        let policy = self.access.policy();
        let visible = |name: &str| allows(policy.as_deref(), &caller, name);
        let mut issues = Vec::new();
        let tools: Vec<_> = if request.names.is_empty() {
            self.catalog
                .list()
                .into_iter()
                .filter(|t| query.matches(t.name(), &t.descriptor.tags) && visible(t.name()))
                .collect()
        } else {
            let mut found = Vec::with_capacity(request.names.len());
            for name in &request.names {
                match self.catalog.get(name) {
                    Some(t) if query.matches(t.name(), &t.descriptor.tags) && visible(name) => {
                        found.push(t);
                    }
                    _ => issues.push(pb::ExportIssue {
                        tool: name.clone(),
                        omitted: true,
                        message: "no live tool of this name matches the request".into(),
                    }),
                }
            }
            found
        };
        let export = crate::export::export(
            format,
            tools.iter().map(|t| &*t.descriptor),
            self.list_limit,
        );
        issues.extend(export.issues);
        Ok(Response::new(pb::ExportToolsResponse {
            tools_json: serde_json::Value::Array(export.tools).to_string(),
            issues,
        }))
    }

    async fn search_tools(
        &self,
        request: Request<pb::SearchToolsRequest>,
    ) -> Result<Response<pb::SearchToolsResponse>, Status> {
        let caller = self.caller(&request)?;
        let request = request.into_inner();
        let query_text = request.query.trim();
        if query_text.is_empty() || request.query.len() > search::MAX_QUERY_BYTES {
            return Err(RegistryError::InvalidRequest {
                field: "query".into(),
                reason: format!(
                    "describe the task in words, at most {} bytes",
                    search::MAX_QUERY_BYTES
                ),
            }
            .into());
        }
        let limit = match usize::try_from(request.limit).unwrap_or(usize::MAX) {
            0 => search::DEFAULT_RESULTS,
            n => n.min(search::MAX_RESULTS),
        };
        let query = Query::filters(request.tags, request.name_prefix)?;
        let policy = self.access.policy();
        let visible = |name: &str| allows(policy.as_deref(), &caller, name);
        // Scored against what the caller sees; the filters only select.
        let scope = if allows_every_tool(policy.as_deref(), &caller) {
            Scope::Everything
        } else {
            Scope::Visible(&visible)
        };
        let mut matches = Vec::with_capacity(limit);
        // The index may trail the catalog by an event: a tool found must
        // still be live, and pass the filters.
        for found in self.search.search(query_text, usize::MAX, scope) {
            if matches.len() == limit {
                break;
            }
            if let Some(tool) = self.catalog.get(&found.name)
                && query.matches(tool.name(), &tool.descriptor.tags)
            {
                matches.push(pb::ToolMatch {
                    tool: Some(tool.to_proto()),
                    score: f64::from(found.score),
                });
            }
        }
        Ok(Response::new(pb::SearchToolsResponse { matches }))
    }

    async fn get_tool(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::Tool>, Status> {
        let caller = self.caller(&request)?;
        let name = request.into_inner().name;
        match self.catalog.get(&name) {
            Some(tool) if allows(self.access.policy().as_deref(), &caller, &name) => {
                Ok(Response::new(tool.to_proto()))
            }
            _ => Err(RegistryError::ToolNotFound { tool: name }.into()),
        }
    }

    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeResponse>, Status> {
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let span = toolmesh_telemetry::call_span!(
            trace.is_traced(),
            "toolmesh.v1.ToolRegistry/Invoke",
            otel.kind = "server",
            tool = %clip(&request.get_ref().tool, QUOTED_MAX),
        );
        // Boxed: the call's state (a few KiB) is allocated once, rather
        // than copied into each future that wraps it.
        spans::serve(
            span,
            &trace,
            INVOKE,
            Box::pin(self.invoke_traced(request, trace.clone())),
        )
        .await
    }

    type WatchToolsStream = EventStream;

    async fn watch_tools(
        &self,
        request: Request<pb::WatchToolsRequest>,
    ) -> Result<Response<Self::WatchToolsStream>, Status> {
        let caller = self.caller(&request)?;
        let permit = self.watchers.admit(tls::peer(&request).remote_addr)?;
        Ok(Response::new(Box::pin(watch::stream(
            self.catalog.clone(),
            self.watchers.limits(),
            self.shutdown.clone(),
            permit,
            Visibility::new(self.access.clone(), caller),
        ))))
    }
}

/// `toolmesh.v1.Registration`, for sidecars: open, or only for the
/// registrants of `--registrants-file`, each for its own tools.
pub struct RegistrationApi {
    catalog: Arc<Catalog>,
    access: Arc<Access>,
    audit: AuditLog,
    metrics: Arc<crate::metrics::Metrics>,
    /// The catalog's bound on tool names (`--max-tools`), which
    /// registrants without a `max_tools` of their own share.
    max_tools: usize,
}

impl RegistrationApi {
    /// The service over a catalog, for the registrants `access` knows
    /// (none: open registration).
    pub fn new(catalog: Arc<Catalog>, access: Arc<Access>) -> Self {
        Self {
            catalog,
            access,
            audit: AuditLog::disabled(),
            metrics: Arc::default(),
            max_tools: crate::store::memory::Limits::default().max_tools,
        }
    }

    /// Shares `max_tools` tool names (`--max-tools`) between registrants
    /// that give no `max_tools` of their own.
    #[must_use]
    pub fn sharing(mut self, max_tools: usize) -> Self {
        self.max_tools = max_tools;
        self
    }

    /// Writes a record of every registration change to `audit`.
    #[must_use]
    pub fn audit(mut self, audit: AuditLog) -> Self {
        self.audit = audit;
        self
    }

    /// Counts every announce, by result, in `metrics`.
    #[must_use]
    pub fn metered(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Who sent `request`: `None` when registration is open.
    fn registrant<T>(
        &self,
        request: &Request<T>,
    ) -> Result<Option<Arc<Registrant>>, RegistryError> {
        let Some(registrants) = self.access.registrants() else {
            return Ok(None);
        };
        let identities = peer_identities(request);
        registrants
            .authenticate(request.metadata(), &identities)
            .map(Some)
    }

    fn record(&self, record: RegistrationRecord) {
        if self.audit.is_enabled() {
            self.audit.record(record);
        }
    }
}

/// The verified identities (SANs) of the client's certificate, if it sent
/// one over TLS with `--tls-client-ca-file`.
fn peer_identities<T>(request: &Request<T>) -> Vec<String> {
    tls::peer(request).identities
}

fn owner_name(registrant: Option<&Arc<Registrant>>) -> &str {
    registrant.map_or("", |r| r.owner().name.as_str())
}

/// The record of a withdraw or heartbeat by `caller`: `action`, or
/// `refused` with `error`.
fn lease_record(
    action: RegistrationAction,
    caller: &str,
    peer: Option<std::net::SocketAddr>,
    error: Option<&RegistryError>,
) -> RegistrationRecord {
    RegistrationRecord {
        caller: caller.to_owned(),
        action: if error.is_none() {
            action
        } else {
            RegistrationAction::Refused
        },
        instance: String::new(),
        endpoint: String::new(),
        tools: Vec::new(),
        outcome: error.map_or(Outcome::Ok, |e| Outcome::Failed(e.code())),
        reason: error.map(ToString::to_string),
        peer,
    }
}

#[tonic::async_trait]
impl pb::registration_server::Registration for RegistrationApi {
    #[tracing::instrument(skip_all, fields(instance = %clip(&request.get_ref().instance_id, QUOTED_MAX)))]
    async fn announce(
        &self,
        request: Request<pb::AnnounceRequest>,
    ) -> Result<Response<pb::AnnounceResponse>, Status> {
        let peer = tls::peer(&request).remote_addr;
        let registrant = self.registrant(&request);
        let request = request.into_inner();
        let tools: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        let mut record = RegistrationRecord {
            caller: registrant
                .as_ref()
                .ok()
                .and_then(|r| r.as_ref().map(|r| r.owner().name.clone()))
                .unwrap_or_default(),
            action: RegistrationAction::Announce,
            instance: request.instance_id.clone(),
            endpoint: request.endpoint.clone(),
            tools: tools.clone(),
            outcome: Outcome::Ok,
            reason: None,
            peer,
        };
        let endpoint = request.endpoint.clone();
        let result = match registrant {
            Ok(registrant) => self.announce_as(request, registrant.as_ref(), &tools).await,
            Err(error) => Err(error),
        };
        match result {
            Ok(lease) => {
                self.metrics.announced("accepted");
                self.record(record);
                tracing::info!(?tools, %endpoint, lease = %lease_tag(&lease.id), "announced");
                Ok(Response::new(pb::AnnounceResponse {
                    lease_id: lease.id,
                    ttl: toolmesh_proto::rules::duration_field(lease.ttl),
                }))
            }
            Err(error) => {
                self.metrics
                    .announced(toolmesh_proto::code::outcome(error.code()));
                tracing::warn!(%error, "announce refused");
                record.action = RegistrationAction::Refused;
                record.outcome = Outcome::Failed(error.code());
                record.reason = Some(error.to_string());
                self.record(record);
                Err(error.into())
            }
        }
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let peer = tls::peer(&request).remote_addr;
        let (caller, result) = match self.registrant(&request) {
            Ok(registrant) => {
                let caller = owner_name(registrant.as_ref()).to_owned();
                let result = self
                    .catalog
                    .heartbeat(&request.into_inner().lease_id, &caller)
                    .await;
                (caller, result)
            }
            Err(error) => (String::new(), Err(error)),
        };
        match result {
            Ok(ttl) => Ok(Response::new(pb::HeartbeatResponse {
                ttl: toolmesh_proto::rules::duration_field(ttl),
            })),
            Err(error) => {
                // A heartbeat changes nothing; only a refused one is recorded.
                if matches!(
                    error,
                    RegistryError::Unauthenticated { .. } | RegistryError::PermissionDenied { .. }
                ) {
                    self.record(lease_record(
                        RegistrationAction::Refused,
                        &caller,
                        peer,
                        Some(&error),
                    ));
                }
                Err(error.into())
            }
        }
    }

    async fn withdraw(
        &self,
        request: Request<pb::WithdrawRequest>,
    ) -> Result<Response<pb::WithdrawResponse>, Status> {
        let peer = tls::peer(&request).remote_addr;
        let result = match self.registrant(&request) {
            Ok(registrant) => {
                let caller = owner_name(registrant.as_ref()).to_owned();
                let result = self
                    .catalog
                    .withdraw(&request.into_inner().lease_id, &caller)
                    .await;
                (caller, result)
            }
            Err(error) => (String::new(), Err(error)),
        };
        let (caller, result) = result;
        self.record(lease_record(
            RegistrationAction::Withdraw,
            &caller,
            peer,
            result.as_ref().err(),
        ));
        result?;
        Ok(Response::new(pb::WithdrawResponse {}))
    }
}

impl RegistrationApi {
    async fn announce_as(
        &self,
        request: pb::AnnounceRequest,
        registrant: Option<&Arc<Registrant>>,
        tools: &[String],
    ) -> Result<crate::catalog::Lease, RegistryError> {
        let owner = match registrant {
            Some(registrant) => {
                for tool in tools {
                    registrant.may_announce(tool)?;
                }
                match self.access.registrants() {
                    Some(all) => all.owner(registrant, self.max_tools),
                    None => registrant.owner().clone(),
                }
            }
            None => Owner::default(),
        };
        self.catalog.announce_as(request, owner).await
    }
}
