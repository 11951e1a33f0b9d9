//! The demo's agent: what an LLM agent does with toolmesh, minus the LLM.
//!
//! It waits (bounded) until the demo's tools are live, following
//! `WatchTools`; prints them with their input schemas and as LLM
//! function-calling definitions; makes successful calls; then provokes each
//! failure of the error model and decodes its google.rpc details with
//! `tonic_types::StatusExt::get_error_details`. Every expected outcome is a
//! [`Check`]; the [`Report`] passes only if all of them do.
//!
//! Every call carries the agent's credential, if it has one, and an
//! `https://` registry is reached over TLS ([`access`]). Every call also
//! carries the digest of the definition `ListTools` showed
//! (`InvokeRequest.tool_digest`), so that a tool changed since is refused
//! (`FAILED_PRECONDITION`, `TOOL_DIGEST_MISMATCH`) rather than run.

pub mod access;
mod failures;
mod long_call;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde_json::Value;
use tokio::time::Instant;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_types::StatusExt as _;
use toolmesh_proto::pb::{
    self, tasks_client::TasksClient, tool_event::Kind, tool_registry_client::ToolRegistryClient,
};
use toolmesh_proto::tls::{ClientFiles, ClientTls};

pub use self::access::Access;

use crate::present::{self, describe_status, heading};

/// The tools the demo starts: three from the YAML sidecar, one from the SDK.
pub const EXPECTED_TOOLS: [&str; 4] = ["divide", "lookup", "slow_report", "word_count"];

/// The agent's own gRPC deadline on each call: longer than any tool's
/// timeout, so the registry's deadline is the one that fires.
const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// Most `word_count` calls made to reach its rate limit.
const MAX_RATE_LIMIT_CALLS: usize = 20;

/// What the agent needs to know.
#[derive(Debug, Clone)]
pub struct Options {
    /// Registry address: `host:port` or `http://host:port`, or
    /// `https://host:port` for TLS ([`toolmesh_proto::endpoint::url`]).
    pub registry: String,
    /// How long to wait for the registry and for every tool to be live.
    pub wait_for_tools: Duration,
}

/// One expected outcome and whether it was observed.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was expected.
    pub what: String,
    /// Whether it happened.
    pub passed: bool,
}

/// Every check of a run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The checks, in the order they were made.
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether every expected outcome was observed.
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.passed)
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed)
    }
}

/// Runs the whole walk-through against the registry, printing as it goes,
/// with no credential (the demo's registry wants none). An `Err` means the
/// walk-through could not run (no registry, tools never appeared); failed
/// expectations are in the [`Report`].
pub async fn run(options: &Options) -> anyhow::Result<Report> {
    run_with(options, &Access::default()).await
}

/// [`run`], with the agent's credential and CA.
pub async fn run_with(options: &Options, access: &Access) -> anyhow::Result<Report> {
    let deadline = Instant::now() + options.wait_for_tools;
    let channel = connect_channel(&options.registry, access, deadline).await?;
    let mut agent = Agent {
        client: ToolRegistryClient::with_interceptor(channel.clone(), access.bearer()),
        tasks: TasksClient::with_interceptor(channel, access.bearer()),
        access: access.clone(),
        report: Report::default(),
        digests: BTreeMap::new(),
    };
    agent.wait_for_tools(deadline).await?;
    agent.show_tools().await?;
    agent.successful_calls().await;
    agent.invalid_arguments().await;
    agent.arguments_not_json().await;
    agent.unknown_tool().await;
    agent.rate_limit().await;
    agent.tool_errors().await;
    agent.timeout().await;
    agent.long_call().await;
    agent.summary();
    Ok(agent.report)
}

/// A registry client whose every call carries the agent's credential.
pub type Client = ToolRegistryClient<InterceptedService<Channel, access::Bearer>>;

/// The same, for the registry's `Tasks` service.
pub type Tasks = TasksClient<InterceptedService<Channel, access::Bearer>>;

/// Connects to the registry at `address` as [`connect_channel`] does: a
/// client of its `ToolRegistry`.
pub async fn connect(address: &str, access: &Access, deadline: Instant) -> anyhow::Result<Client> {
    let channel = connect_channel(address, access, deadline).await?;
    Ok(ToolRegistryClient::with_interceptor(
        channel,
        access.bearer(),
    ))
}

/// Connects to the registry at `address`, retrying until `deadline`:
/// `https://` is TLS verified with `access.ca_file` (else the public
/// roots), never plaintext; a CA file with a plaintext address is refused.
pub async fn connect_channel(
    address: &str,
    access: &Access,
    deadline: Instant,
) -> anyhow::Result<Channel> {
    let url = toolmesh_proto::endpoint::url(address).context("invalid registry address")?;
    if let Some(ca) = &access.ca_file
        && !url.starts_with("https://")
    {
        bail!(
            "a CA file ({}) is set but the registry {url} is plaintext: write https:// for TLS",
            ca.display()
        );
    }
    let endpoint = Endpoint::from_shared(url.clone())
        .with_context(|| format!("invalid registry URL {url:?}"))?
        .connect_timeout(Duration::from_secs(2));
    let tls = ClientTls::load(ClientFiles {
        ca: access.ca_file.clone(),
        ..ClientFiles::default()
    })
    .context("the CA file (--ca-file, TOOLMESH_CA_FILE)")?;
    loop {
        match endpoint
            .connect_with_connector(toolmesh_proto::tls::connector(tls.clone()))
            .await
        {
            Ok(channel) => return Ok(channel),
            Err(e) if Instant::now() >= deadline => {
                return Err(e).with_context(|| format!("cannot reach the registry at {url}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

struct Agent {
    client: Client,
    tasks: Tasks,
    access: Access,
    report: Report,
    /// Each listed tool's digest, by name: the definition the agent was
    /// shown, sent with every call of the tool.
    digests: BTreeMap<String, String>,
}

impl Agent {
    /// `status` as an error, said plainly when it is `UNAUTHENTICATED`.
    fn failed(&self, call: &str, status: Status) -> anyhow::Error {
        if status.code() == Code::Unauthenticated {
            anyhow!(self.access.explain_unauthenticated(&status))
        } else {
            anyhow!(status).context(format!("{call} failed"))
        }
    }

    fn check(&mut self, what: impl Into<String>, passed: bool) {
        let what = what.into();
        println!("  [{}] {what}", if passed { "ok" } else { "FAILED" });
        self.report.checks.push(Check { what, passed });
    }

    /// The digest of `tool` as `ListTools` showed it (empty for a tool it
    /// did not list: the call is then bound to no definition).
    fn digest_of(&self, tool: &str) -> String {
        self.digests.get(tool).cloned().unwrap_or_default()
    }

    /// One `Invoke`, printed: the call, then its result or its status with
    /// the decoded details. It carries the digest of the tool as listed.
    async fn invoke(
        &mut self,
        tool: &str,
        arguments_json: &str,
    ) -> Result<pb::InvokeResponse, Status> {
        if arguments_json.contains('\n') {
            // Several lines: shown as a string literal so line and column
            // in the error can be followed.
            println!("  -> invoke {tool} {arguments_json:?}");
        } else {
            println!("  -> invoke {tool} {arguments_json}");
        }
        let mut request = Request::new(pb::InvokeRequest {
            tool: tool.to_owned(),
            arguments_json: arguments_json.to_owned(),
            tool_digest: self.digest_of(tool),
            ..Default::default()
        });
        request.set_timeout(CALL_DEADLINE);
        let outcome = self
            .client
            .invoke(request)
            .await
            .map(tonic::Response::into_inner);
        match &outcome {
            Ok(response) => println!("  <- {}", present::describe_response(response)),
            Err(status) => {
                let mut lines = describe_status(status).into_iter();
                if let Some(first) = lines.next() {
                    println!("  <- {first}");
                }
                for line in lines {
                    println!("       {line}");
                }
            }
        }
        outcome
    }

    async fn wait_for_tools(&mut self, deadline: Instant) -> anyhow::Result<()> {
        println!("{}", heading("Waiting for the tools (WatchTools)"));
        println!("  expecting: {}", EXPECTED_TOOLS.join(", "));
        let started = Instant::now();
        let within = deadline.saturating_duration_since(started);
        let mut stream = tokio::time::timeout_at(
            deadline,
            self.client.watch_tools(pb::WatchToolsRequest::default()),
        )
        .await
        .context("timed out opening WatchTools")?
        .map_err(|status| self.failed("WatchTools", status))?
        .into_inner();
        let mut live = BTreeSet::new();
        while !EXPECTED_TOOLS.iter().all(|t| live.contains(*t)) {
            let missing = || {
                let missing: Vec<_> = EXPECTED_TOOLS
                    .iter()
                    .filter(|t| !live.contains(**t))
                    .collect();
                format!("{missing:?}")
            };
            let Ok(event) = tokio::time::timeout_at(deadline, stream.message()).await else {
                bail!("the tools {} did not appear within {within:?}", missing());
            };
            let Some(event) =
                event.map_err(|status| self.failed("the WatchTools stream", status))?
            else {
                bail!("the WatchTools stream ended; still missing {}", missing());
            };
            let name = event
                .tool
                .as_ref()
                .and_then(|t| t.descriptor.as_ref())
                .map(|d| d.name.clone())
                .unwrap_or_default();
            let instances = event.tool.as_ref().map_or(0, |t| t.instances);
            match Kind::try_from(event.kind) {
                Ok(Kind::Added) => {
                    println!("  + {name} ({instances} instance(s))");
                    live.insert(name);
                }
                Ok(Kind::Updated) => {
                    live.insert(name);
                }
                Ok(Kind::Removed) => {
                    println!("  - {name}");
                    live.remove(&name);
                }
                Ok(Kind::Synced) => println!("  (initial list complete; now following changes)"),
                Ok(Kind::Unspecified) | Err(_) => {}
            }
        }
        println!(
            "  all {} tools are live after {:.2?}",
            EXPECTED_TOOLS.len(),
            started.elapsed()
        );
        Ok(())
    }

    async fn show_tools(&mut self) -> anyhow::Result<()> {
        let tools = self
            .client
            .list_tools(pb::ListToolsRequest::default())
            .await
            .map_err(|status| self.failed("ListTools", status))?
            .into_inner()
            .tools;
        self.digests = tools
            .iter()
            .filter_map(|t| Some((t.descriptor.as_ref()?.name.clone(), t.digest.clone())))
            .collect();
        println!("{}", heading("1. The tools, as ListTools shows them"));
        for tool in &tools {
            println!("\n{}", present::describe_tool(tool));
        }
        println!(
            "{}",
            heading("2. The same tools as LLM function-calling definitions")
        );
        for descriptor in tools.iter().filter_map(|t| t.descriptor.as_ref()) {
            println!("{}", present::function_definition(descriptor));
        }
        println!();
        let names: BTreeSet<_> = tools
            .iter()
            .filter_map(|t| t.descriptor.as_ref().map(|d| d.name.as_str()))
            .collect();
        self.check(
            "ListTools lists every demo tool",
            EXPECTED_TOOLS.iter().all(|t| names.contains(t)),
        );
        Ok(())
    }

    async fn successful_calls(&mut self) {
        println!("{}", heading("3. Successful calls"));
        let outcome = self
            .invoke(
                "word_count",
                r#"{"text": "toolmesh turns any service into a tool"}"#,
            )
            .await;
        self.check(
            "word_count (command backend) counts 7 words",
            result_field(&outcome, "words") == Some(Value::from(7)),
        );
        let outcome = self.invoke("lookup", r#"{"key": "widget"}"#).await;
        self.check(
            "lookup (HTTP backend) finds 42 widgets",
            result_field(&outcome, "quantity") == Some(Value::from(42)),
        );
        let outcome = self.invoke("divide", r#"{"a": 22, "b": 7}"#).await;
        let quotient = result_field(&outcome, "quotient").and_then(|q| q.as_f64());
        self.check(
            "divide (Rust SDK tool) computes 22 / 7",
            quotient.is_some_and(|q| (q - 22.0 / 7.0).abs() < 1e-9),
        );
    }

    fn summary(&self) {
        println!("{}", heading("Summary"));
        let passed = self.report.checks.iter().filter(|c| c.passed).count();
        println!(
            "  {passed}/{} expected outcomes observed",
            self.report.checks.len()
        );
        for failure in self.report.failures() {
            println!("  FAILED: {}", failure.what);
        }
    }
}

fn code_of(outcome: &Result<pb::InvokeResponse, Status>) -> Option<Code> {
    outcome.as_ref().err().map(Status::code)
}

/// `field` of a successful (not `is_error`) JSON object result.
fn result_field(outcome: &Result<pb::InvokeResponse, Status>, field: &str) -> Option<Value> {
    let response = outcome.as_ref().ok().filter(|r| !r.is_error)?;
    let mut value = serde_json::from_str::<Value>(&response.result_json).ok()?;
    value.get_mut(field).map(Value::take)
}
