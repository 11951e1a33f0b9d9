//! The MCP methods, over the registry's parts: `tools/list` and
//! `tools/call` as `ListTools` and `Invoke` answer them, the handshake of
//! the older revisions (which binds a session to its caller), and
//! `tools/list_changed` notifications (on a session, or on a
//! `subscriptions/listen` stream).
//!
//! rmcp makes one handler per session (handshake revisions) and one per
//! request (2026-07-28); what they share is in [`Shared`].

use std::{
    borrow::Cow,
    net::SocketAddr,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::extract::ConnectInfo;
use http::{HeaderMap, HeaderValue};
use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ErrorCode, Extensions,
        GetTaskParams, GetTaskResult, Implementation, InitializeRequestParams, InitializeResult,
        JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
        ServerConfig, SubscriptionFilter, UpdateTaskParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};
use serde_json::Value;
use tokio::sync::{Semaphore, broadcast};
use tokio_util::{
    sync::{CancellationToken, DropGuard},
    task::TaskTracker,
};
use toolmesh_proto::{deadline::Deadline, pb};
use toolmesh_telemetry::TraceContext;

use crate::serving::http_listener::PeerAddr;

use super::{
    call_tool::{self, CallTool},
    content, listing, notify, results,
    search::{self, SearchTool},
    tasks,
};
use crate::{
    access::auth::Caller,
    access::{Access, allows},
    calls::invoke::{Call, Invoker, Purpose},
    catalog::search::ToolSearch,
    catalog::{Catalog, CatalogEvent},
    error::RegistryError,
    tasks::{Tasks, Viewer},
};

/// `_meta` key of a `tools/call` request: the call's idempotency key, as
/// `Invoke`'s `idempotency_key` (a repeat with the same key and arguments
/// gets the first call's answer).
pub(crate) const IDEMPOTENCY_KEY: &str = "toolmesh/idempotencyKey";

/// The JSON-RPC error code of a refused `subscriptions/listen`
/// (implementation-defined range).
const TOO_MANY_SUBSCRIPTIONS: ErrorCode = ErrorCode(-32000);

/// What every handler needs, shared.
pub(crate) struct Shared {
    catalog: Arc<Catalog>,
    access: Arc<Access>,
    invoker: Arc<Invoker>,
    tasks: Arc<Tasks>,
    index: Arc<ToolSearch>,
    search_tool: Option<SearchTool>,
    /// `toolmesh.call_tool`, in progressive discovery.
    call_tool: Option<CallTool>,
    limits: Limits,
    subscriptions: Arc<Semaphore>,
    shutdown: CancellationToken,
    calls: TaskTracker,
    shadow_warned: AtomicBool,
    call_shadow_warned: AtomicBool,
}

/// The registry's own tools on `/mcp`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnTools {
    /// `toolmesh.search_tools` (`--mcp-search-tool`).
    pub search: bool,
    /// Progressive discovery (`--mcp-discovery progressive`): the search
    /// and call tools alone are listed.
    pub progressive: bool,
}

/// The bounds handlers keep to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Longest a call may take.
    pub call_timeout: Duration,
    /// Most tools per `tools/list` page.
    pub page_size: u32,
    /// Most bytes of descriptors per page.
    pub page_bytes: usize,
    /// Most `subscriptions/listen` streams open at once.
    pub max_subscriptions: usize,
}

impl Shared {
    /// The parts handlers serve from; `search_tool` lists and answers
    /// `toolmesh.search_tools` from `index`; `progressive` lists it and
    /// `toolmesh.call_tool` alone (the search tool then on whatever
    /// `search_tool` says).
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        access: Arc<Access>,
        invoker: Arc<Invoker>,
        tasks: Arc<Tasks>,
        index: Arc<ToolSearch>,
        own: OwnTools,
        limits: Limits,
    ) -> Self {
        let OwnTools {
            search: search_tool,
            progressive,
        } = own;
        Self {
            catalog,
            access,
            invoker,
            tasks,
            index,
            search_tool: if search_tool || progressive {
                SearchTool::new()
            } else {
                None
            },
            call_tool: if progressive { CallTool::new() } else { None },
            subscriptions: Arc::new(Semaphore::new(limits.max_subscriptions)),
            limits,
            shutdown: CancellationToken::new(),
            calls: TaskTracker::new(),
            shadow_warned: AtomicBool::new(false),
            call_shadow_warned: AtomicBool::new(false),
        }
    }

    /// Starts draining: subscriptions and notifications end; calls in
    /// flight go on.
    pub(crate) fn drain(&self) {
        self.shutdown.cancel();
        self.calls.close();
    }

    /// Completes once no call is in flight after [`Self::drain`].
    pub(crate) async fn calls_finished(&self) {
        self.calls.wait().await;
    }

    /// The search tool, unless it is off or a catalog tool has its name.
    fn search_tool(&self) -> Option<&SearchTool> {
        self.unshadowed(self.search_tool.as_ref(), search::NAME, &self.shadow_warned)
    }

    /// The call tool, in progressive discovery, unless a catalog tool has
    /// its name.
    fn call_tool(&self) -> Option<&CallTool> {
        self.unshadowed(
            self.call_tool.as_ref(),
            call_tool::NAME,
            &self.call_shadow_warned,
        )
    }

    /// `tool`, the registry's own tool `name`, unless a catalog tool has
    /// that name (said once, through `warned`).
    fn unshadowed<'a, T>(
        &self,
        tool: Option<&'a T>,
        name: &'static str,
        warned: &AtomicBool,
    ) -> Option<&'a T> {
        let tool = tool?;
        if self.catalog.get(name).is_none() {
            return Some(tool);
        }
        if !warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                tool = name,
                "a catalog tool has the name of one of the registry's MCP tools: MCP clients get the catalog tool"
            );
        }
        None
    }

    /// The descriptors `caller` sees, in name order.
    fn listed(&self, caller: &Caller) -> Vec<listing::Listed> {
        if let Some(call) = &self.call_tool {
            // Progressive: the registry's two tools (or the catalog's of
            // their names, if the caller may see those).
            let policy = self.access.policy();
            return [call_tool::NAME, search::NAME]
                .into_iter()
                .filter_map(|name| match self.catalog.get(name) {
                    Some(tool) => allows(policy.as_deref(), caller, name)
                        .then(|| listing::Listed::from(&*tool)),
                    None if name == call_tool::NAME => Some(listing::Listed {
                        descriptor: call.descriptor().clone(),
                        digest: None,
                    }),
                    None => self.search_tool.as_ref().map(|tool| listing::Listed {
                        descriptor: tool.descriptor().clone(),
                        digest: None,
                    }),
                })
                .collect();
        }
        let policy = self.access.policy();
        let mut listed: Vec<listing::Listed> = self
            .catalog
            .list()
            .iter()
            .filter(|t| allows(policy.as_deref(), caller, t.name()))
            .map(|t| listing::Listed::from(&**t))
            .collect();
        if let Some(tool) = self.search_tool() {
            let at = listed.partition_point(|d| d.descriptor.name.as_str() < search::NAME);
            let search = listing::Listed {
                descriptor: tool.descriptor().clone(),
                digest: None,
            };
            listed.insert(at, search);
        }
        listed
    }
}

/// The W3C trace context headers.
const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

/// Who made one HTTP request, from where, and in which trace.
struct Requester {
    caller: Caller,
    peer: Option<SocketAddr>,
    /// The request's trace context headers.
    trace_headers: HeaderMap,
}

impl Requester {
    /// What the HTTP layers left in a message's extensions: the request's
    /// parts, with the caller [`super::auth`] found and the peer address.
    fn of(extensions: &Extensions) -> Result<Self, ErrorData> {
        let parts = extensions
            .get::<http::request::Parts>()
            .ok_or_else(|| ErrorData::internal_error("the HTTP request is unknown", None))?;
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the caller is unknown", None))?;
        let peer = parts
            .extensions
            .get::<ConnectInfo<PeerAddr>>()
            .and_then(|info| info.0.0);
        let mut trace_headers = HeaderMap::new();
        for name in TRACE_HEADERS {
            if let Some(value) = parts.headers.get(name) {
                trace_headers.insert(name, value.clone());
            }
        }
        Ok(Self {
            caller,
            peer,
            trace_headers,
        })
    }

    /// The trace context: W3C headers in the request's `_meta` (the
    /// 2026-07-28 convention), else in its HTTP headers.
    fn trace(&self, meta: &JsonObject) -> TraceContext {
        let from_meta = |key: &str| {
            meta.get(key)
                .and_then(Value::as_str)
                .and_then(|v| HeaderValue::from_str(v).ok())
        };
        if from_meta(TRACE_HEADERS[0]).is_some() {
            let mut headers = HeaderMap::new();
            for name in TRACE_HEADERS {
                if let Some(value) = from_meta(name) {
                    headers.insert(name, value);
                }
            }
            return TraceContext::from_headers(&headers).decide();
        }
        TraceContext::from_headers(&self.trace_headers).decide()
    }
}

/// One session's (or one request's) handler.
pub(crate) struct McpHandler {
    shared: Arc<Shared>,
    /// The caller that opened the session, when there is one.
    owner: OnceLock<Caller>,
    /// The catalog's changes from before a subscription is acknowledged,
    /// so that none after the acknowledgment is missed.
    changes: Mutex<Option<broadcast::Receiver<CatalogEvent>>>,
    /// Cancelled when the session (or request) ends.
    ended: CancellationToken,
    _end: DropGuard,
}

impl McpHandler {
    /// A handler over `shared`.
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        let ended = CancellationToken::new();
        Self {
            shared,
            owner: OnceLock::new(),
            changes: Mutex::new(None),
            _end: ended.clone().drop_guard(),
            ended,
        }
    }

    /// The request's caller, who must be the session's if it has one.
    fn requester(&self, extensions: &Extensions) -> Result<Requester, ErrorData> {
        let requester = Requester::of(extensions)?;
        if let Some(owner) = self.owner.get()
            && owner.id != requester.caller.id
        {
            return Err(ErrorData::invalid_request(
                "this MCP session was opened with another caller's credential; open your own",
                None,
            ));
        }
        Ok(requester)
    }

    /// Whose tasks `requester` sees, under the policy in force.
    fn viewer(&self, requester: Requester) -> Viewer {
        Viewer {
            caller: requester.caller,
            policy: self.shared.access.policy(),
        }
    }

    /// Completes when notifications should stop: the session ended or the
    /// registry drains.
    fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let (ended, shutdown) = (self.ended.clone(), self.shared.shutdown.clone());
        async move {
            tokio::select! {
                () = ended.cancelled() => {}
                () = shutdown.cancelled() => {}
            }
        }
    }

    async fn invoke(
        &self,
        request: CallToolRequestParams,
        meta: &JsonObject,
        requester: Requester,
        offered_tasks: bool,
        cancelled: CancellationToken,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        let invoke = pb::InvokeRequest {
            tool: name.to_owned(),
            arguments_json: request
                .arguments
                .map(|arguments| Value::Object(arguments).to_string())
                .unwrap_or_default(),
            idempotency_key: meta
                .get(IDEMPOTENCY_KEY)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            tool_digest: meta
                .get(crate::catalog::export::DIGEST_META)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            version: meta
                .get(crate::catalog::export::VERSION_META)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
        let shared = &self.shared;
        let policy = shared.access.policy();
        if !allows(policy.as_deref(), &requester.caller, name) {
            // As if the tool did not exist, as for `Invoke`.
            shared
                .invoker
                .denied(&invoke, &requester.caller.id, requester.peer);
            return Err(results::unknown_tool(name));
        }
        let call = Call {
            caller: &requester.caller.id,
            peer: requester.peer,
            deadline: Deadline::from_caller(
                tokio::time::Instant::now(),
                Some(shared.limits.call_timeout),
            ),
            trace: requester.trace(meta),
        };
        if let Some(hold) = shared
            .tasks
            .held_by(policy.as_deref(), &requester.caller, &invoke)
        {
            // Held for a person: a task to a client that took tasks, else
            // an error result naming it (or, for a repeat with its key
            // once it is over, its answer).
            return match shared.tasks.hold(invoke, call, hold, Purpose::Task).await {
                Ok(task) if offered_tasks => Ok(CallToolResponse::Task(tasks::created(&task))),
                Ok(task) => match crate::tasks::answer_of_held(&task) {
                    Ok(response) => Ok(content::from_response(&response).into()),
                    Err(status) => {
                        results::from_task_error(status.code(), status.message()).map(Into::into)
                    }
                },
                Err(error) => results::from_error(name, &error).map(Into::into),
            };
        }
        let long = shared
            .catalog
            .get(name)
            .is_some_and(|tool| tasks::runs_as_task(&tool.descriptor, offered_tasks));
        if long {
            return match shared.tasks.start(invoke, call).await {
                Ok(task) => Ok(CallToolResponse::Task(tasks::created(&task))),
                Err(error) => {
                    tracing::debug!(%error, "MCP task refused");
                    results::from_error(name, &error).map(Into::into)
                }
            };
        }
        let invoked = shared
            .calls
            .track_future(shared.invoker.invoke(invoke, call));
        // A cancelled request cancels the call, as a cancelled `Invoke` does.
        let outcome = tokio::select! {
            outcome = invoked => outcome,
            () = cancelled.cancelled() => {
                return Err(ErrorData::invalid_request("the call was cancelled", None));
            }
        };
        match outcome {
            Ok(response) => Ok(content::from_response(&response).into()),
            Err(error) => {
                tracing::debug!(%error, "MCP call refused");
                results::from_error(name, &error).map(Into::into)
            }
        }
    }
}

/// What a failed `tasks/*` request is to the client: an unknown task is
/// invalid params; the store out of reach an internal error.
fn task_error(id: &str, error: &RegistryError) -> ErrorData {
    match error {
        RegistryError::TaskNotFound { .. } => tasks::unknown_task(id),
        other => ErrorData::internal_error(other.to_string(), None),
    }
}

/// Every revision rmcp knows: 2026-07-28, and the handshake revisions
/// back to 2024-11-05.
const REVISIONS: &[ProtocolVersion] = ProtocolVersion::KNOWN_VERSIONS;

impl ServerHandler for McpHandler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(
            Implementation::new("toolmesh-registry", env!("CARGO_PKG_VERSION"))
                .with_title("toolmesh"),
        )
        .with_instructions(
            "The tools of a toolmesh registry: every call is validated, rate limited and \
             audited by the registry. When no listed tool fits a task, toolmesh.search_tools \
             finds tools by a description in words.",
        )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(REVISIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let requester = Requester::of(&context.extensions)?;
        let _ = self.owner.set(requester.caller);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(caller) = self.owner.get().cloned() else {
            return;
        };
        let (catalog, access) = (self.shared.catalog.clone(), self.shared.access.clone());
        let (peer, stopped) = (context.peer, self.stopped());
        let changes = catalog.watch(false).1;
        tokio::spawn(async move {
            notify::follow(
                changes,
                |name| allows(access.policy().as_deref(), &caller, name),
                stopped,
                || {
                    let peer = peer.clone();
                    async move { peer.notify_tool_list_changed().await.is_ok() }
                },
            )
            .await;
        });
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let requester = self.requester(&context.extensions)?;
        let listed = self.shared.listed(&requester.caller);
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let limits = &self.shared.limits;
        listing::page(&listed, cursor, limits.page_size, limits.page_bytes)
            .map(Into::into)
            .map_err(|error| ErrorData::invalid_params(format!("cursor: {error}"), None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let requester = self.requester(&context.extensions)?;
        if request.name == search::NAME
            && let Some(tool) = self.shared.search_tool()
        {
            let arguments = Value::Object(request.arguments.unwrap_or_default());
            let policy = self.shared.access.policy();
            return tool
                .call(
                    &arguments,
                    &self.shared.index,
                    &self.shared.catalog,
                    |name| allows(policy.as_deref(), &requester.caller, name),
                )
                .await
                .map(Into::into);
        }
        let request = match self.shared.call_tool() {
            Some(tool) if request.name == call_tool::NAME => match tool.unwrap(request) {
                Ok(call) => call,
                Err(refused) => return refused.map(Into::into),
            },
            _ => request,
        };
        // The extension's rule: a task only for a request that offers the
        // extension itself, whatever the session declared.
        let offered_tasks = context
            .meta
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        self.invoke(
            request,
            &context.meta,
            requester,
            offered_tasks,
            context.ct.clone(),
        )
        .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let requester = self.requester(&context.extensions)?;
        let task = self
            .shared
            .tasks
            .get(&request.task_id, &self.viewer(requester))
            .await
            .map_err(|error| task_error(&request.task_id, &error))?;
        Ok(tasks::detailed(&task))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // No task asks for input yet: every response answers a request
        // that is not outstanding, which the extension says to ignore.
        let requester = self.requester(&context.extensions)?;
        self.shared
            .tasks
            .get(&request.task_id, &self.viewer(requester))
            .await
            .map_err(|error| task_error(&request.task_id, &error))?;
        Ok(())
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let requester = self.requester(&context.extensions)?;
        let trace = requester.trace(&context.meta);
        // A task that is over stays as it ended: cancelling is a wish.
        self.shared
            .tasks
            .cancel(&request.task_id, &self.viewer(requester), &trace)
            .await
            .map_err(|error| task_error(&request.task_id, &error))?;
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let accepted = requested.supported_by(&self.get_info().capabilities);
        if accepted.tools_list_changed == Some(true) {
            *self.changes.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(self.shared.catalog.watch(false).1);
        }
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let Ok(_permit) = self.shared.subscriptions.clone().try_acquire_owned() else {
            tracing::warn!("MCP subscription refused: --mcp-max-sessions subscriptions are open");
            return Err(ErrorData::new(
                TOO_MANY_SUBSCRIPTIONS,
                "too many subscriptions are open; retry later",
                None,
            ));
        };
        let requester = self.requester(&context.request_context().extensions)?;
        let stopped = {
            let (request, shutdown) = (
                context.request_context().ct.clone(),
                self.shared.shutdown.clone(),
            );
            async move {
                tokio::select! {
                    () = request.cancelled() => {}
                    () = shutdown.cancelled() => {}
                }
            }
        };
        let changes = self
            .changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(changes) = changes.filter(|_| context.accepted().tools_list_changed == Some(true))
        else {
            stopped.await;
            return Ok(());
        };
        let sink = context.sink().clone();
        let access = &self.shared.access;
        notify::follow(
            changes,
            |name| allows(access.policy().as_deref(), &requester.caller, name),
            stopped,
            || {
                let sink = sink.clone();
                async move { sink.notify_tool_list_changed().await.is_ok() }
            },
        )
        .await;
        Ok(())
    }
}
