//! The values of the metrics' enumerated labels, each spelled once.

/// What the rate limiter decided for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimitDecision {
    /// The call took its tokens.
    Allowed,
    /// The tool's own limit refused it.
    LimitedTool,
    /// The caller's limit on the tool refused it.
    LimitedCaller,
    /// The limiter could not decide (Redis away, fail-closed).
    Error,
}

impl RateLimitDecision {
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::LimitedTool => "limited_tool",
            Self::LimitedCaller => "limited_caller",
            Self::Error => "error",
        }
    }
}

/// Why arguments were refused before any sidecar saw them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationFailure {
    /// They parse, but break the tool's input schema.
    Schema,
    /// They are not (acceptable) JSON: syntax, duplicate keys, too large.
    Malformed,
}

impl ValidationFailure {
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Schema => "schema",
            Self::Malformed => "malformed",
        }
    }
}

/// Every kind of call the Redis pool makes: the `op` label, a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedisOp {
    /// The announce script.
    Announce,
    /// The heartbeat script.
    Heartbeat,
    /// The withdraw script.
    Withdraw,
    /// The lease sweep script.
    Sweep,
    /// The write-back script after an outage.
    Restore,
    /// The replica presence script.
    Presence,
    /// One tool's descriptor and instances (a pipeline of GET and HGETALL).
    LoadTool,
    /// Every tool name and lease (SMEMBERS and ZRANGE), for a resync.
    ListCatalog,
    /// The lease an instance holds (GET).
    InstanceLease,
    /// A lease's record (HGETALL).
    ReadLease,
    /// The GCRA rate-limit script.
    RateLimit,
    /// Claiming an idempotency key.
    IdempotencyClaim,
    /// Storing an idempotency key's outcome.
    IdempotencyComplete,
    /// Releasing an idempotency key.
    IdempotencyRelease,
    /// Storing a new task.
    TaskCreate,
    /// Reading tasks (GET, MGET, ZRANGE).
    TaskRead,
    /// Writing a changed task.
    TaskUpdate,
    /// Reading the pinned definitions (HGETALL).
    PinRead,
    /// Pinning or unpinning a definition (HSET, HSETNX, HDEL).
    PinWrite,
    /// Reading cached tool embeddings (MGET).
    EmbeddingRead,
    /// Claiming texts to embed, or storing their vectors (SET).
    EmbeddingWrite,
    /// The console's shared session key (SET NX, GET).
    ConsoleKey,
    /// The console's shared call tail (XADD, XREVRANGE).
    ConsoleCalls,
}

impl RedisOp {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Announce => "announce",
            Self::Heartbeat => "heartbeat",
            Self::Withdraw => "withdraw",
            Self::Sweep => "sweep",
            Self::Restore => "restore",
            Self::Presence => "presence",
            Self::LoadTool => "load_tool",
            Self::ListCatalog => "list_catalog",
            Self::InstanceLease => "instance_lease",
            Self::ReadLease => "read_lease",
            Self::RateLimit => "rate_limit",
            Self::IdempotencyClaim => "idempotency_claim",
            Self::IdempotencyComplete => "idempotency_complete",
            Self::IdempotencyRelease => "idempotency_release",
            Self::TaskCreate => "task_create",
            Self::TaskRead => "task_read",
            Self::TaskUpdate => "task_update",
            Self::PinRead => "pin_read",
            Self::PinWrite => "pin_write",
            Self::EmbeddingRead => "embedding_read",
            Self::EmbeddingWrite => "embedding_write",
            Self::ConsoleKey => "console_key",
            Self::ConsoleCalls => "console_calls",
        }
    }
}
