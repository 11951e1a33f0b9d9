//! Tools written in Rust: the seed's `defineTool`, with the schemas derived
//! from the argument and result types. A handler that needs to know who
//! called takes a [`CallContext`] too ([`tool_with_context`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use toolmesh_sidecar::sdk::{self, ToolError};
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct AddArgs { a: i64, b: i64 }
//! #[derive(serde::Serialize, schemars::JsonSchema)]
//! struct AddResult { sum: i64 }
//!
//! # async fn run() -> Result<(), toolmesh_sidecar::SidecarError> {
//! let add = sdk::tool("add", "Add two integers", |args: AddArgs| async move {
//!     Ok::<_, ToolError>(AddResult { sum: args.a + args.b })
//! })
//! .rate_limit(5.0, 10)
//! .timeout(Duration::from_secs(2))
//! .idempotent(true)
//! .build();
//! sdk::Sidecar::new("http://127.0.0.1:50051")
//!     .tool(add)
//!     .serve_at("127.0.0.1:0", async { let _ = tokio::signal::ctrl_c().await; })
//!     .await
//! # }
//! ```

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::{TcpListener, ToSocketAddrs};
use toolmesh_proto::{deadline::Deadline, pb};

pub use crate::context::CallContext;

use crate::SidecarError;
use crate::server::{ServeOptions, serve};
use crate::tool::{Backend, BackendError, Outcome, Tool};

/// A failure a Rust tool reports: becomes an `is_error` result whose JSON is
/// the message as a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    message: String,
}

impl ToolError {
    /// A failure with this message (shown to the LLM).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        Self::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// Runs a Rust async function: JSON and the call's context in, JSON out.
struct Handler<F, A, R> {
    function: F,
    types: PhantomData<fn(A) -> R>,
}

#[async_trait]
impl<F, Fut, A, R> Backend for Handler<F, A, R>
where
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
    A: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
{
    async fn call(
        &self,
        arguments_json: &str,
        context: &CallContext,
        deadline: Deadline,
    ) -> Result<Outcome, BackendError> {
        let arguments_json = toolmesh_proto::rules::arguments(arguments_json);
        let args: A = match serde_json::from_str(arguments_json) {
            Ok(args) => args,
            Err(e) => return Ok(Outcome::error_message(&format!("invalid arguments: {e}"))),
        };
        let result = tokio::time::timeout_at(deadline.at(), (self.function)(args, context.clone()))
            .await
            .map_err(|_| BackendError::DeadlineExceeded)?;
        match result {
            Ok(value) => serde_json::to_string(&value)
                .map(Outcome::ok)
                .map_err(|e| BackendError::Internal(format!("cannot encode the result: {e}"))),
            Err(err) => Ok(Outcome::error_message(err.message())),
        }
    }
}

/// Starts a tool named `name` run by `handler`; finish with [`ToolBuilder::build`].
///
/// The input schema is derived from `A`, the output schema from `R`. A
/// handler that needs to know who called uses [`tool_with_context`].
pub fn tool<A, R, F, Fut>(
    name: impl Into<String>,
    description: impl Into<String>,
    handler: F,
) -> ToolBuilder
where
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
    A: JsonSchema + DeserializeOwned + Send + 'static,
    R: JsonSchema + Serialize + Send + 'static,
{
    tool_with_context(name, description, move |args: A, _context| handler(args))
}

/// Like [`tool`], for a handler that also takes the call's [`CallContext`]:
/// who the registry authenticated as the caller (empty when it does not
/// authenticate agents) and the invocation id. A call run as a task
/// reports its progress through it ([`CallContext::report_progress`],
/// which does nothing for a call an agent waits on); dropping the
/// handler's future is how a task is stopped.
///
/// ```
/// use toolmesh_sidecar::sdk::{self, CallContext, ToolError};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct NoteArgs { text: String }
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Note { author: String, text: String }
///
/// let note = sdk::tool_with_context(
///     "note",
///     "Write a note signed by the caller",
///     |args: NoteArgs, context: CallContext| async move {
///         if context.is_anonymous() {
///             return Err(ToolError::new("notes need a known caller"));
///         }
///         Ok(Note { author: context.caller, text: args.text })
///     },
/// )
/// .per_caller_rate_limit(1.0, 5)
/// .build();
/// assert_eq!(note.descriptor().name, "note");
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Pages { count: u32 }
/// #[derive(serde::Serialize, schemars::JsonSchema)]
/// struct Done { pages: u32 }
///
/// let render = sdk::tool_with_context(
///     "render",
///     "Render every page",
///     |args: Pages, context: CallContext| async move {
///         for page in 0..args.count {
///             let fraction = f64::from(page) / f64::from(args.count.max(1));
///             context.report_progress(Some(fraction), format!("page {page}"));
///         }
///         Ok::<_, ToolError>(Done { pages: args.count })
///     },
/// )
/// .task_timeout(std::time::Duration::from_secs(3600))
/// .build();
/// assert_eq!(render.descriptor().task_timeout.map(|t| t.seconds), Some(3600));
/// ```
pub fn tool_with_context<A, R, F, Fut>(
    name: impl Into<String>,
    description: impl Into<String>,
    handler: F,
) -> ToolBuilder
where
    F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
    A: JsonSchema + DeserializeOwned + Send + 'static,
    R: JsonSchema + Serialize + Send + 'static,
{
    let descriptor = pb::ToolDescriptor {
        name: name.into(),
        description: description.into(),
        input_schema_json: serde_json::Value::from(schemars::schema_for!(A)).to_string(),
        output_schema_json: serde_json::Value::from(schemars::schema_for!(R)).to_string(),
        ..Default::default()
    };
    ToolBuilder {
        descriptor,
        backend: Arc::new(Handler {
            function: handler,
            types: PhantomData,
        }),
        max_output_bytes: None,
        config: serde_json::Map::new(),
    }
}

/// Sets the optional parts of a Rust tool's descriptor.
#[must_use = "call .build() to get the Tool"]
pub struct ToolBuilder {
    descriptor: pb::ToolDescriptor,
    backend: Arc<dyn Backend>,
    max_output_bytes: Option<usize>,
    config: serde_json::Map<String, serde_json::Value>,
}

impl ToolBuilder {
    /// Rate limit across all instances: `rate` calls per second, `burst` at once.
    pub fn rate_limit(mut self, rate: f64, burst: u32) -> Self {
        self.descriptor.rate_limit = Some(pb::RateLimit { rate, burst });
        self
    }

    /// Rate limit of each caller, across all instances, enforced by the
    /// registry beside [`Self::rate_limit`]: `rate` calls per second,
    /// `burst` at once. Callers are told apart only when the registry
    /// authenticates agents.
    pub fn per_caller_rate_limit(mut self, rate: f64, burst: u32) -> Self {
        self.descriptor.per_caller_rate_limit = Some(pb::RateLimit { rate, burst });
        self
    }

    /// Whether the registry's audit log may record the arguments of calls
    /// (default `false`); input schema fields marked `writeOnly` or
    /// `x-sensitive` are redacted even then.
    pub fn audit_arguments(mut self, audit: bool) -> Self {
        self.descriptor.audit_arguments = audit;
        self
    }

    /// Longest a call may run (durations beyond prost's range are ignored).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.descriptor.timeout = toolmesh_proto::rules::duration_field(timeout);
        self
    }

    /// Longest a call started as a task (`Tasks.StartTask`) may run, when
    /// it may run longer than [`Self::timeout`]: hours, say. Unset, a task
    /// has the call's `timeout`. A handler reports how far it has come
    /// with [`CallContext::report_progress`].
    pub fn task_timeout(mut self, timeout: Duration) -> Self {
        self.descriptor.task_timeout = toolmesh_proto::rules::duration_field(timeout);
        self
    }

    /// Whether running twice equals running once (MCP's `idempotentHint`).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.descriptor.idempotent = idempotent;
        self
    }

    /// A short human-readable name, e.g. `"Word count"`.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.descriptor.title = title.into();
        self
    }

    /// Hint: the tool does not modify its environment.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.descriptor.read_only = Some(read_only);
        self
    }

    /// Hint: a modifying tool may destroy or overwrite.
    pub fn destructive(mut self, destructive: bool) -> Self {
        self.descriptor.destructive = Some(destructive);
        self
    }

    /// Hint: the tool reaches an open world of entities (the web, email).
    pub fn open_world(mut self, open_world: bool) -> Self {
        self.descriptor.open_world = Some(open_world);
        self
    }

    /// A setting the handler reads from its context with every call
    /// ([`CallContext::config`](crate::CallContext)), never announced: one
    /// handler can serve several tools that differ by it.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.config.insert(key.into(), value.into());
        self
    }

    /// Labels for filtering.
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.descriptor.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Free-form version, e.g. `"1.0.0"`.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.descriptor.version = version.into();
        self
    }

    /// Largest result in bytes (default 4 MiB).
    pub fn max_output_bytes(mut self, max: usize) -> Self {
        self.max_output_bytes = Some(max);
        self
    }

    /// The tool. Its name is checked when it is served.
    pub fn build(self) -> Tool {
        let tool = Tool::new(self.descriptor, self.backend).with_config(self.config);
        match self.max_output_bytes {
            Some(max) => tool.with_max_output_bytes(max),
            None => tool,
        }
    }
}

/// An embedded sidecar serving Rust tools (announce, heartbeat and withdraw
/// included): a thin wrapper around [`serve`].
#[derive(Debug)]
#[must_use = "call .serve() or .serve_at()"]
pub struct Sidecar {
    tools: Vec<Tool>,
    options: ServeOptions,
}

impl Sidecar {
    /// A sidecar announcing to the registry at `registry`: `host:port` or
    /// `http://host:port`, e.g. `"127.0.0.1:50051"` (checked when served).
    pub fn new(registry: impl Into<String>) -> Self {
        Self {
            tools: Vec::new(),
            options: ServeOptions {
                registry: registry.into(),
                ..ServeOptions::default()
            },
        }
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// The address the registry should dial, `host:port` or
    /// `http://host:port` (default `http://<bound address>`).
    pub fn advertise(mut self, url: impl Into<String>) -> Self {
        self.options.advertise = Some(url.into());
        self
    }

    /// A stable instance id (default `<hostname>-<random>`).
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.options.instance_id = Some(id.into());
        self
    }

    /// Does nothing: every `Execute` carries a grant the registry signs
    /// with this instance's own key ([`toolmesh_proto::grant`]), which
    /// replaces the shared token.
    #[deprecated(note = "execute grants replace the shared token; remove the call")]
    pub fn execute_token(self, _token: toolmesh_proto::token::Token) -> Self {
        self
    }

    /// Signs this instance's `Execute` grants with `key` instead of a new
    /// random one: only to call `Execute` directly, as tests do
    /// ([`toolmesh_proto::grant::sign`]).
    pub fn execute_key(mut self, key: toolmesh_proto::grant::CallKey) -> Self {
        self.options.execute_key = Some(key);
        self
    }

    /// Holds at most `max` tasks at once, running or with an end the
    /// registry has not taken yet (default
    /// [`DEFAULT_MAX_TASKS`](crate::server::DEFAULT_MAX_TASKS)); more are
    /// `RESOURCE_EXHAUSTED`.
    pub fn max_tasks(mut self, max: usize) -> Self {
        self.options.max_tasks = Some(max);
        self
    }

    /// Registers with `token`: one of the registry's `--registrants-file`
    /// credentials.
    pub fn registration_token(mut self, token: toolmesh_proto::token::Token) -> Self {
        self.options.registration_token = Some(token);
        self
    }

    /// Serves on an already bound listener until `shutdown` completes.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), SidecarError> {
        serve(listener, self.tools, self.options, shutdown).await
    }

    /// Binds `addr`, then serves until `shutdown` completes.
    pub async fn serve_at(
        self,
        addr: impl ToSocketAddrs,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), SidecarError> {
        let listener = TcpListener::bind(addr).await.map_err(SidecarError::Io)?;
        self.serve(listener, shutdown).await
    }
}
