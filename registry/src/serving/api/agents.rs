//! `toolmesh.v1.ToolRegistry`, the agents' service: lists, exports,
//! searches, gets, invokes and watches tools, each call authenticated and
//! shown only what the caller may call.

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
    access::auth::Caller,
    access::{Access, allows, allows_every_tool},
    calls::invoke::{Call, Invoker, Purpose},
    catalog::listing::Query,
    catalog::search::{self, Ranking, Scope, ToolSearch},
    catalog::versions::Reference,
    catalog::{Catalog, ToolState},
    error::RegistryError,
    serving::watch::{self, Visibility, Watchers},
    tasks::{Tasks, answer_of_held},
};

/// `toolmesh.v1.ToolRegistry`, for agents. Every call is authenticated
/// (when agents are), and shows or reaches only the tools the caller may
/// call: any other is `NOT_FOUND`.
pub(crate) struct ToolRegistryApi {
    catalog: Arc<Catalog>,
    access: Arc<Access>,
    invoker: Arc<Invoker>,
    watchers: Arc<Watchers>,
    shutdown: CancellationToken,
    list_limit: usize,
    search: Arc<ToolSearch>,
    /// Where calls the approval rules hold become tasks.
    tasks: Option<Arc<Tasks>>,
}

/// `Invoke`'s fully qualified name, as its spans name it.
const INVOKE: &str = "toolmesh.v1.ToolRegistry/Invoke";

/// What a `ListTools` answer leaves for everything but its tools.
const LIST_MARGIN: usize = 1024;

impl ToolRegistryApi {
    /// The service over a catalog and an invoker, for the callers `access`
    /// admits; watch streams are held to `watchers`' limits and end when
    /// `shutdown` is cancelled.
    pub(crate) fn new(
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
            tasks: None,
        }
    }

    /// Answers `SearchTools` from `search`, which the caller keeps equal
    /// to the catalog ([`ToolSearch::follow`]).
    #[must_use]
    pub(crate) fn with_search(mut self, search: Arc<ToolSearch>) -> Self {
        self.search = search;
        self
    }

    /// Holds the calls the policy's approval rules name as tasks in `tasks`
    /// (without, no call is held).
    #[must_use]
    pub(crate) fn holding_with(mut self, tasks: Arc<Tasks>) -> Self {
        self.tasks = Some(tasks);
        self
    }

    /// Keeps `ListTools` answers under `max_message_bytes` (the server's
    /// encoding limit): a longer list stops before it, `truncated` set.
    #[must_use]
    pub(crate) fn max_message_bytes(mut self, max_message_bytes: usize) -> Self {
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
        let policy = self.access.policy();
        if !allows(policy.as_deref(), &caller, &request.get_ref().tool) {
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
        let held = self.tasks.as_ref().and_then(|tasks| {
            Some((
                tasks,
                tasks.held_by(policy.as_deref(), &caller, request.get_ref())?,
            ))
        });
        if let Some((tasks, hold)) = held {
            // Boxed: a held call is rare, and its state would otherwise
            // grow every call's.
            let task =
                Box::pin(tasks.hold(request.into_inner(), call, hold, Purpose::Invoke)).await?;
            return answer_of_held(&task).map(Response::new);
        }
        match self.invoker.invoke(request.into_inner(), call).await {
            Ok(response) => Ok(with_headers(response)),
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

/// The response header a deprecated version's notice goes out in.
pub(crate) const DEPRECATION_HEADER: &str = "toolmesh-deprecation";

/// `response`, its deprecation notice (if any) also in a header, as
/// gRPC clients that never read the message's fields can see it.
fn with_headers(response: pb::InvokeResponse) -> Response<pb::InvokeResponse> {
    let notice = (!response.deprecation.is_empty())
        .then(|| tonic::metadata::MetadataValue::try_from(response.deprecation.as_str()).ok())
        .flatten();
    let mut answer = Response::new(response);
    if let Some(notice) = notice {
        answer.metadata_mut().insert(DEPRECATION_HEADER, notice);
    }
    answer
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
        Ok(Response::new(query.list(
            &self.catalog,
            |t| allows(policy.as_deref(), &caller, t.name()),
            policy.is_some(),
            |t| self.catalog.describe(t),
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
                    Some(t) if query.matches(t.name(), &t.descriptor.tags) && visible(t.name()) => {
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
        let export = crate::catalog::export::export(format, &tools, self.list_limit);
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
        let ranked = self.search.rank(query_text, scope).await;
        for found in ranked.found {
            if matches.len() == limit {
                break;
            }
            let Some(family) = self.catalog.family(&found.name) else {
                continue;
            };
            let default = self.catalog.get(&found.name);
            let shown: Vec<Arc<ToolState>> = if request.all_versions {
                family.versions().to_vec()
            } else {
                default.into_iter().collect()
            };
            for tool in shown {
                if matches.len() < limit && query.matches(tool.name(), &tool.descriptor.tags) {
                    matches.push(pb::ToolMatch {
                        tool: Some(self.catalog.describe(&tool)),
                        score: f64::from(found.score),
                    });
                }
            }
        }
        let ranking = match ranked.ranking {
            Ranking::Lexical => pb::SearchRanking::Lexical,
            Ranking::Hybrid => pb::SearchRanking::Hybrid,
        };
        Ok(Response::new(pb::SearchToolsResponse {
            matches,
            ranking: ranking.into(),
        }))
    }

    async fn get_tool(
        &self,
        request: Request<pb::GetToolRequest>,
    ) -> Result<Response<pb::Tool>, Status> {
        let caller = self.caller(&request)?;
        let request = request.into_inner();
        let reference = Reference::parse(&request.name, &request.version, "name")?;
        if !allows(self.access.policy().as_deref(), &caller, reference.name) {
            return Err(RegistryError::ToolNotFound {
                tool: reference.name.to_owned(),
            }
            .into());
        }
        let tool = self.catalog.lookup(&reference)?;
        Ok(Response::new(self.catalog.describe(&tool)))
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
            request.get_ref().all_versions,
        ))))
    }
}
