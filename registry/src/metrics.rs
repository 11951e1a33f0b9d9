//! The registry's Prometheus metrics, served by the admin port
//! (`--admin-listen`, [`toolmesh_telemetry::admin`]). Names, types and
//! labels are the contract of `docs/observability.md` and the dashboard:
//! change neither without the other.
//!
//! Each event has one recording method, called where the event happens.
//! Tool names pass through [`BoundedNames`] (`--metrics-max-tools`), so
//! announced names cannot grow the series without bound, and a name not in
//! the catalog is always `(other)`, so names agents make up cannot take the
//! capped values either; no label ever holds a caller id, an instance id
//! or arguments. What the catalog and the audit log already
//! count (live tools, instances, leases, dropped audit records) is read at
//! scrape time rather than mirrored: in Redis mode every replica's view is
//! the shared catalog, so each replica reports the fleet's numbers (take
//! `max`, not `sum`, across replicas).

mod labels;
mod live;

use std::{
    fmt,
    sync::{Arc, Weak},
    time::Duration,
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use toolmesh_telemetry::{
    families::{Always, latency},
    labels::{BoundedNames, OTHER},
};

use crate::access::audit::AuditLog;
pub(crate) use labels::{RateLimitDecision, RedisOp, ValidationFailure};
use live::Live;
pub(crate) use live::{LiveCatalog, LiveCounts};

/// Default of `--metrics-max-tools`.
pub(crate) const DEFAULT_MAX_TOOLS: usize = 100;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcome {
    tool: Arc<str>,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolDecision {
    tool: Arc<str>,
    decision: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolReason {
    tool: Arc<str>,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOnly {
    tool: Arc<str>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Ranking {
    ranking: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Source {
    source: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PinEvent {
    event: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolVersion {
    tool: Arc<str>,
    version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnnounceResult {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Op {
    op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Version {
    version: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Task durations: from 100 ms to about 2 h, each bucket 4 times the last.
fn task_time() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.1, 4.0, 9,
    ))
}

/// The `outcome` of a call or attempt that succeeded.
fn ok() -> &'static str {
    toolmesh_proto::code::outcome(tonic::Code::Ok)
}

/// One tool's series, resolved once ([`Metrics::series`]) and kept with
/// what the catalog compiled from its descriptor, so that a call records
/// its outcome without hashing the tool's name and label set three times:
/// the `ok` series are held, the others found by the resolved label.
#[derive(Debug)]
pub(crate) struct ToolSeries {
    tool: Arc<str>,
    calls_ok: Counter,
    duration_ok: Histogram,
    attempts_ok: Histogram,
    metrics: Arc<Metrics>,
}

impl ToolSeries {
    /// An Invoke of the tool ended with `outcome` after `latency`.
    pub(crate) fn invoked(&self, outcome: &'static str, latency: Duration) {
        if outcome == ok() {
            self.calls_ok.inc();
            self.duration_ok.observe(latency.as_secs_f64());
        } else {
            self.metrics.invoked_as(self.tool.clone(), outcome, latency);
        }
    }

    /// One attempt of the tool ended with `outcome` after `latency`.
    pub(crate) fn attempt(&self, outcome: &'static str, latency: Duration) {
        if outcome == ok() {
            self.attempts_ok.observe(latency.as_secs_f64());
        } else {
            self.metrics.attempt_as(self.tool.clone(), outcome, latency);
        }
    }

    /// Whether these are `metrics`' series.
    pub(crate) fn of(&self, metrics: &Arc<Metrics>) -> bool {
        Arc::ptr_eq(&self.metrics, metrics)
    }
}

/// The registry's metrics and the Prometheus registry that exposes them.
pub struct Metrics {
    registry: Arc<Registry>,
    tools: BoundedNames,
    other: Arc<str>,
    invocations: Family<ToolOutcome, Counter>,
    invoke_duration: Histograms<ToolOutcome>,
    attempt_duration: Histograms<ToolOutcome>,
    rate_limit: Family<ToolDecision, Counter>,
    validation: Family<ToolReason, Counter>,
    announces: Family<AnnounceResult, Counter>,
    lease_expiries: Counter,
    retries: Family<ToolOnly, Counter>,
    hedges: Family<ToolOnly, Counter>,
    ejections: Counter,
    replays: Family<ToolOnly, Counter>,
    nonconforming: Family<ToolOnly, Counter>,
    deprecated_calls: Family<ToolVersion, Counter>,
    tasks_started: Family<ToolOnly, Counter>,
    tasks_ended: Family<ToolOutcome, Counter>,
    task_duration: Histograms<ToolOutcome>,
    approvals_requested: Family<ToolOnly, Counter>,
    approvals_decided: Family<ToolOutcome, Counter>,
    approval_wait: Histograms<ToolOutcome>,
    approvals_pending: Gauge,
    searches: Family<Ranking, Counter>,
    search_fallbacks: Family<Reason, Counter>,
    tool_embeddings: Family<Source, Counter>,
    search_tools_indexed: Gauge,
    search_tools_pending: Gauge,
    pin_events: Family<PinEvent, Counter>,
    redis_duration: Histograms<Op>,
    redis_errors: Family<Op, Counter>,
    redis_circuit_open: Gauge,
    ready: Gauge,
    live: Arc<Live>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    /// Metrics nobody scrapes, for parts built without a registry.
    fn default() -> Self {
        Self::new(DEFAULT_MAX_TOOLS)
    }
}

impl Metrics {
    /// Every registry metric, registered; at most `max_tools` tool names
    /// get their own label value.
    pub fn new(max_tools: usize) -> Self {
        let mut registry = Registry::default();
        let metrics = Self {
            registry: Arc::default(),
            tools: BoundedNames::new(max_tools),
            other: Arc::from(OTHER),
            invocations: Family::default(),
            invoke_duration: Family::new_with_constructor(latency),
            attempt_duration: Family::new_with_constructor(latency),
            rate_limit: Family::default(),
            validation: Family::default(),
            announces: Family::default(),
            lease_expiries: Counter::default(),
            retries: Family::default(),
            hedges: Family::default(),
            ejections: Counter::default(),
            replays: Family::default(),
            nonconforming: Family::default(),
            deprecated_calls: Family::default(),
            tasks_started: Family::default(),
            tasks_ended: Family::default(),
            task_duration: Family::new_with_constructor(task_time),
            approvals_requested: Family::default(),
            approvals_decided: Family::default(),
            approval_wait: Family::new_with_constructor(task_time),
            approvals_pending: Gauge::default(),
            searches: Family::default(),
            search_fallbacks: Family::default(),
            tool_embeddings: Family::default(),
            search_tools_indexed: Gauge::default(),
            search_tools_pending: Gauge::default(),
            pin_events: Family::default(),
            redis_duration: Family::new_with_constructor(latency),
            redis_errors: Family::default(),
            redis_circuit_open: Gauge::default(),
            ready: Gauge::default(),
            live: Arc::default(),
        };
        let r = &mut registry;
        r.register(
            "toolmesh_invocations",
            "Invoke calls by tool and outcome (ok, tool_error, or the gRPC code in snake case), refusals included",
            Always(metrics.invocations.clone()),
        );
        r.register(
            "toolmesh_invoke_duration_seconds",
            "Invoke latency in the registry, from arrival to answer",
            Always(metrics.invoke_duration.clone()),
        );
        r.register(
            "toolmesh_attempt_duration_seconds",
            "One attempt registry to sidecar: backend time plus the hop",
            Always(metrics.attempt_duration.clone()),
        );
        r.register(
            "toolmesh_rate_limit_decisions",
            "Rate-limit decisions of calls to rate-limited tools",
            Always(metrics.rate_limit.clone()),
        );
        r.register(
            "toolmesh_validation_failures",
            "Calls refused for their arguments: schema or malformed",
            Always(metrics.validation.clone()),
        );
        r.register(
            "toolmesh_nonconforming_results",
            "Results that did not match their tool's output schema (the agent got an error result instead)",
            Always(metrics.nonconforming.clone()),
        );
        r.register(
            "toolmesh_deprecated_calls",
            "Calls that went to a version the operator marked deprecated (the versions file)",
            Always(metrics.deprecated_calls.clone()),
        );
        r.register(
            "toolmesh_announces",
            "Announces by result: accepted, or the refusal's gRPC code",
            Always(metrics.announces.clone()),
        );
        r.register(
            "toolmesh_lease_expiries",
            "Instances removed because their lease expired",
            metrics.lease_expiries.clone(),
        );
        r.register(
            "toolmesh_retries",
            "Extra attempts after a failed one",
            Always(metrics.retries.clone()),
        );
        r.register(
            "toolmesh_hedges",
            "Hedged attempts (no answer after half the deadline)",
            Always(metrics.hedges.clone()),
        );
        r.register(
            "toolmesh_ejections",
            "Instances ejected from rotation as outliers",
            metrics.ejections.clone(),
        );
        r.register(
            "toolmesh_idempotency_replays",
            "Answers replayed from an idempotency key's first call",
            Always(metrics.replays.clone()),
        );
        r.register(
            "toolmesh_tasks_started",
            "Tasks started (handed to an instance), by tool",
            Always(metrics.tasks_started.clone()),
        );
        r.register(
            "toolmesh_tasks_ended",
            "Tasks that ended, by tool and state (completed, failed, cancelled), as the replica that ended them saw it",
            Always(metrics.tasks_ended.clone()),
        );
        r.register(
            "toolmesh_task_duration_seconds",
            "Time from a task's start to its end, by tool and state",
            Always(metrics.task_duration.clone()),
        );
        r.register(
            "toolmesh_pin_events",
            "Pinned definitions' events: trusted (pinned on first use), held (quarantined), flagged (served unpinned, mode warn), approved, revoked",
            Always(metrics.pin_events.clone()),
        );
        r.register(
            "toolmesh_approvals_requested",
            "Calls held for approval, by tool",
            Always(metrics.approvals_requested.clone()),
        );
        r.register(
            "toolmesh_approvals_decided",
            "Held calls closed, by tool and outcome (approved, denied, expired, void), as the replica that closed them saw it",
            Always(metrics.approvals_decided.clone()),
        );
        r.register(
            "toolmesh_approval_decision_seconds",
            "Time from a call's hold to its decision, by tool and outcome",
            Always(metrics.approval_wait.clone()),
        );
        r.register(
            "toolmesh_approvals_pending",
            "Calls waiting for approval (in Redis mode, across replicas), at the last janitor pass",
            metrics.approvals_pending.clone(),
        );
        r.register(
            "toolmesh_searches",
            "SearchTools answers (and MCP searches), by ranking: hybrid (model and BM25) or lexical (BM25 alone)",
            Always(metrics.searches.clone()),
        );
        r.register(
            "toolmesh_search_fallbacks",
            "Searches ranked lexically though a model is loaded, by reason: busy, slow, failed (the query's vector), indexing (a tool in scope not embedded yet)",
            Always(metrics.search_fallbacks.clone()),
        );
        r.register(
            "toolmesh_tool_embeddings",
            "Tool vectors had, by source: model (computed by this replica) or cache (loaded from Redis)",
            Always(metrics.tool_embeddings.clone()),
        );
        r.register(
            "toolmesh_search_tools_indexed",
            "Tools in the model's index",
            metrics.search_tools_indexed.clone(),
        );
        r.register(
            "toolmesh_search_tools_pending",
            "Distinct tool texts waiting for a vector",
            metrics.search_tools_pending.clone(),
        );
        r.register(
            "toolmesh_redis_command_duration_seconds",
            "Redis calls by operation, deadline and breaker included",
            Always(metrics.redis_duration.clone()),
        );
        r.register(
            "toolmesh_redis_errors",
            "Failed Redis calls by operation",
            Always(metrics.redis_errors.clone()),
        );
        r.register(
            "toolmesh_redis_circuit_open",
            "1 while the Redis circuit breaker is open",
            metrics.redis_circuit_open.clone(),
        );
        r.register(
            "toolmesh_ready",
            "1 when ready to take traffic (readiness)",
            metrics.ready.clone(),
        );
        let build = Family::<Version, Gauge>::default();
        build
            .get_or_create(&Version {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        r.register("toolmesh_build_info", "Always 1; the version", build);
        r.register_collector(Box::new(metrics.live.clone()));
        Self {
            registry: Arc::new(registry),
            ..metrics
        }
    }

    /// What the admin port serves at `/metrics`.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.clone()
    }

    /// The live tools, instances and leases are read from `catalog` at
    /// each scrape (the first catalog given is kept).
    pub fn observe_catalog<C: LiveCatalog + 'static>(&self, catalog: &Arc<C>) {
        let weak: Weak<C> = Arc::downgrade(catalog);
        let catalog: Weak<dyn LiveCatalog> = weak;
        let _ = self.live.catalog.set(catalog);
    }

    /// Dropped audit records are read from `audit` at each scrape (the
    /// first log given is kept).
    pub fn observe_audit(&self, audit: &AuditLog) {
        let _ = self.live.audit.set(audit.clone());
    }

    /// The `tool` label of `tool`: a name not in the catalog (an unknown
    /// tool, or a refused caller's guess) never takes one of the capped
    /// values, so made-up names cannot crowd out real tools.
    fn tool(&self, tool: &str) -> Arc<str> {
        let unknown = self
            .live
            .catalog
            .get()
            .and_then(Weak::upgrade)
            .is_some_and(|catalog| !catalog.has(tool));
        if unknown {
            return self.other.clone();
        }
        self.tools.label(tool)
    }

    /// An Invoke of `tool` ended with `outcome` after `latency`.
    pub fn invoked(&self, tool: &str, outcome: &'static str, latency: Duration) {
        self.invoked_as(self.tool(tool), outcome, latency);
    }

    fn invoked_as(&self, tool: Arc<str>, outcome: &'static str, latency: Duration) {
        let labels = ToolOutcome { tool, outcome };
        self.invocations.get_or_create(&labels).inc();
        self.invoke_duration
            .get_or_create(&labels)
            .observe(latency.as_secs_f64());
    }

    /// One attempt of `tool` on a sidecar ended with `outcome` after
    /// `latency`.
    pub fn attempt(&self, tool: &str, outcome: &'static str, latency: Duration) {
        self.attempt_as(self.tool(tool), outcome, latency);
    }

    fn attempt_as(&self, tool: Arc<str>, outcome: &'static str, latency: Duration) {
        self.attempt_duration
            .get_or_create(&ToolOutcome { tool, outcome })
            .observe(latency.as_secs_f64());
    }

    /// `tool`'s series, its label resolved once, to record its calls and
    /// attempts with: what every call records, without the lookups.
    pub(crate) fn series(self: &Arc<Self>, tool: &str) -> ToolSeries {
        let tool = self.tool(tool);
        let ok = ToolOutcome {
            tool: tool.clone(),
            outcome: ok(),
        };
        ToolSeries {
            calls_ok: self.invocations.get_or_create(&ok).clone(),
            duration_ok: self.invoke_duration.get_or_create(&ok).clone(),
            attempts_ok: self.attempt_duration.get_or_create(&ok).clone(),
            tool,
            metrics: self.clone(),
        }
    }

    /// Another attempt of `tool` started after a failed one.
    pub fn retried(&self, tool: &str) {
        self.retries
            .get_or_create(&ToolOnly {
                tool: self.tool(tool),
            })
            .inc();
    }

    /// A hedged attempt of `tool` started.
    pub fn hedged(&self, tool: &str) {
        self.hedges
            .get_or_create(&ToolOnly {
                tool: self.tool(tool),
            })
            .inc();
    }

    /// An instance left rotation as an outlier.
    pub fn ejected(&self) {
        self.ejections.inc();
    }

    /// A result of `tool` did not match its output schema.
    pub fn nonconforming(&self, tool: &str) {
        self.nonconforming
            .get_or_create(&ToolOnly {
                tool: self.tool(tool),
            })
            .inc();
    }

    /// A call went to `version` of `tool`, which is deprecated. Only
    /// versions the versions file names are counted, so the labels stay
    /// bounded.
    pub fn deprecated_call(&self, tool: &str, version: &str) {
        self.deprecated_calls
            .get_or_create(&ToolVersion {
                tool: self.tool(tool),
                version: version.to_owned(),
            })
            .inc();
    }

    /// A pinned definition's `event` (`trusted`, `held`, `flagged`,
    /// `approved`, `revoked`): a closed set, by event only.
    pub fn pin_event(&self, event: &'static str) {
        self.pin_events.get_or_create(&PinEvent { event }).inc();
    }

    /// A task of `tool` was handed to an instance.
    pub fn task_started(&self, tool: &str) {
        self.tasks_started
            .get_or_create(&ToolOnly {
                tool: self.tool(tool),
            })
            .inc();
    }

    /// A task of `tool` ended in `state` after `ran`.
    pub fn task_ended(&self, tool: &str, state: &'static str, ran: Duration) {
        let labels = ToolOutcome {
            tool: self.tool(tool),
            outcome: state,
        };
        self.tasks_ended.get_or_create(&labels).inc();
        self.task_duration
            .get_or_create(&labels)
            .observe(ran.as_secs_f64());
    }

    /// A call of `tool` was held for approval.
    pub fn approval_requested(&self, tool: &str) {
        self.approvals_requested
            .get_or_create(&ToolOnly {
                tool: self.tool(tool),
            })
            .inc();
    }

    /// A held call of `tool` was closed as `outcome` after `waited`.
    pub fn approval_decided(&self, tool: &str, outcome: &'static str, waited: Duration) {
        let labels = ToolOutcome {
            tool: self.tool(tool),
            outcome,
        };
        self.approvals_decided.get_or_create(&labels).inc();
        self.approval_wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
    }

    /// How many calls wait for approval.
    pub fn approvals_pending(&self, count: usize) {
        self.approvals_pending
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// A search was answered, ranked `ranking` (`hybrid`, `lexical`).
    pub fn search_ranked(&self, ranking: &'static str) {
        self.searches.get_or_create(&Ranking { ranking }).inc();
    }

    /// A search was ranked lexically though a model is loaded, for `reason`.
    pub fn search_fallback(&self, reason: &'static str) {
        self.search_fallbacks
            .get_or_create(&Reason { reason })
            .inc();
    }

    /// `count` tool vectors were had from `source` (`model`, `cache`).
    pub fn tool_embeddings(&self, source: &'static str, count: usize) {
        if count > 0 {
            self.tool_embeddings
                .get_or_create(&Source { source })
                .inc_by(count as u64);
        }
    }

    /// The model's index holds `tools`, of which `pending` texts wait.
    pub fn search_index(&self, tools: usize, pending: usize) {
        self.search_tools_indexed
            .set(i64::try_from(tools).unwrap_or(i64::MAX));
        self.search_tools_pending
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// A call of `tool` was answered from its idempotency key.
    pub fn replayed(&self, tool: &str) {
        self.replays
            .get_or_create(&ToolOnly {
                tool: self.tool(tool),
            })
            .inc();
    }

    /// The rate limiter decided `decision` for a call of `tool`.
    pub fn rate_limit(&self, tool: &str, decision: RateLimitDecision) {
        self.rate_limit
            .get_or_create(&ToolDecision {
                tool: self.tool(tool),
                decision: decision.label(),
            })
            .inc();
    }

    /// A call of `tool` was refused for its arguments.
    pub fn validation_failed(&self, tool: &str, reason: ValidationFailure) {
        self.validation
            .get_or_create(&ToolReason {
                tool: self.tool(tool),
                reason: reason.label(),
            })
            .inc();
    }

    /// An announce ended: `accepted`, or the refusal's gRPC code as an outcome.
    pub fn announced(&self, result: &'static str) {
        self.announces
            .get_or_create(&AnnounceResult { result })
            .inc();
    }

    /// An instance's lease expired.
    pub fn lease_expired(&self) {
        self.lease_expiries.inc();
    }

    /// A Redis call of kind `op` took `latency`; `ok: false` if it failed.
    pub fn redis_call(&self, op: RedisOp, latency: Duration, ok: bool) {
        let labels = Op { op: op.label() };
        self.redis_duration
            .get_or_create(&labels)
            .observe(latency.as_secs_f64());
        if !ok {
            self.redis_errors.get_or_create(&labels).inc();
        }
    }

    /// Whether the Redis breaker is open now.
    pub fn redis_circuit(&self, open: bool) {
        self.redis_circuit_open.set(i64::from(open));
    }

    /// Whether the registry is ready now.
    pub fn ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }
}

#[cfg(test)]
mod tests;
