//! Idempotency keys: a call with an `idempotency_key` runs its tool at most
//! once per (caller, tool, key) for a retention period.
//!
//! [`IdempotencyStore::claim`] decides what a call does: [`Claim::Run`] (the
//! first call: run the tool, then [`Ticket::complete`] with its outcome),
//! [`Claim::Replay`] (answer with the stored outcome), or
//! [`Claim::ArgumentsDiffer`] (same key, other arguments: refuse). A repeat
//! that arrives while the first call is still running waits for its outcome.
//! A first call that provably never reached a sidecar gives its key back with
//! [`Ticket::release`]; so does dropping its ticket (the caller cancelled).
//!
//! - `memory`: one process (embedded mode), bounded by an entry count.
//! - `redis`: shared by every replica through Redis.

use std::{fmt, time::Duration};

use sha2::{Digest, Sha256};

pub(crate) mod memory;
pub(crate) mod redis;

pub use memory::MemoryIdempotency;
pub use redis::RedisIdempotency;

/// How long outcomes are kept by default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// Whose call with which key: a key is only ever shared by one caller's
/// calls to one tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    /// The caller id the credentials map to.
    pub caller: String,
    /// The tool called.
    pub tool: String,
    /// The `idempotency_key` of the request.
    pub key: String,
}

impl IdempotencyKey {
    /// The sha256 of the three parts, each preceded by its length so no two
    /// different keys can read the same: what the stores index by, so an
    /// entry's size does not depend on the strings a caller sends.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        for part in [&self.caller, &self.tool, &self.key] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hasher.finalize().into()
    }
}

/// sha256 of the canonical arguments JSON (the `serde_json::Value`
/// re-serialized compactly with object keys sorted, so neither whitespace
/// nor key order matters), in hex.
pub fn fingerprint(arguments: &serde_json::Value) -> String {
    let mut canonical = String::new();
    write_canonical(arguments, &mut canonical);
    hex(&Sha256::digest(canonical.as_bytes()))
}

/// Compact JSON with object keys sorted, whatever `serde_json`'s map order.
fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (name, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// What a first call ended with, once it may have reached a sidecar.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum StoredOutcome {
    /// The sidecar answered (the tool may have reported an error).
    Response {
        /// `InvokeResponse.result_json`.
        result_json: String,
        /// `InvokeResponse.is_error`.
        is_error: bool,
        /// `InvokeResponse.instance_id`.
        instance_id: String,
        /// `InvokeResponse.attempts`.
        attempts: u32,
        /// `InvokeResponse.content_json` (absent from records written
        /// before it was kept).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        content_json: String,
    },
    /// The call ended with a gRPC status (e.g. `DEADLINE_EXCEEDED`).
    Status {
        /// The status code (stored as its number, as gRPC writes it).
        #[serde(with = "code_number")]
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// The call was started as this task (`Tasks.StartTask`).
    Task {
        /// The task's id.
        id: String,
    },
}

/// A status code in a stored record: its number.
mod code_number {
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(code: &tonic::Code, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_i32(*code as i32)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<tonic::Code, D::Error> {
        i32::deserialize(from).map(tonic::Code::from_i32)
    }
}

/// What a call holding an idempotency key does.
#[derive(Debug)]
pub enum Claim {
    /// The first call: run the tool, then complete (or release) the ticket.
    Run(Ticket),
    /// Done before: answer with this.
    Replay(StoredOutcome),
    /// The key was used with other arguments.
    ArgumentsDiffer,
}

/// Why a claim could not be decided.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// Another call with the key is still running and did not finish before
    /// this call's deadline.
    #[error("an earlier call with this idempotency key is still running")]
    WaitTimedOut,
    /// The store (Redis) could not be reached: refusing rather than risk
    /// running the tool twice.
    #[error("idempotency store unavailable: {0}")]
    Unavailable(String),
    /// Every entry the store may hold is a call in progress.
    #[error("idempotency store full: too many calls with keys in progress")]
    Full,
}

/// Where idempotency keys are kept.
#[async_trait::async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Claims the key: [`Claim::Run`] (first call; do it and complete the
    /// ticket), [`Claim::Replay`] (done before), [`Claim::ArgumentsDiffer`].
    /// If another call holds the key in progress, waits for its outcome until
    /// `wait_until`, then [`IdempotencyError::WaitTimedOut`]; if that call
    /// gives the key back meanwhile, this one claims it. `hold_for` bounds how
    /// long the key stays in progress without an outcome (the call's deadline
    /// plus a margin), so a crashed replica cannot lock a key forever.
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &str,
        hold_for: Duration,
        wait_until: tokio::time::Instant,
    ) -> Result<Claim, IdempotencyError>;
}

/// How a store finishes one claim; what a [`Ticket`] holds. Implemented by
/// each store, not by callers.
#[async_trait::async_trait]
pub trait Finisher: Send + Sync + 'static {
    /// Stores the outcome if the claim still holds the key.
    async fn complete(&self, outcome: StoredOutcome);
    /// Frees the key if the claim still holds it.
    async fn release(&self);
    /// Frees the key without waiting (the ticket was dropped); may spawn.
    fn release_now(&self);
}

/// A claim on a key. [`complete`](Self::complete) stores the outcome,
/// [`release`](Self::release) frees the key; dropping it frees the key too.
pub struct Ticket {
    finisher: Option<Box<dyn Finisher>>,
}

impl Ticket {
    /// A ticket finished by `finisher` (for store implementations).
    pub fn new(finisher: Box<dyn Finisher>) -> Self {
        Self {
            finisher: Some(finisher),
        }
    }

    /// Stores `outcome`: later claims replay it, waiting ones get it now.
    /// Failures are logged (the key then frees itself after `hold_for`).
    pub async fn complete(mut self, outcome: StoredOutcome) {
        if let Some(finisher) = self.finisher.take() {
            finisher.complete(outcome).await;
        }
    }

    /// Frees the key: the call never reached a sidecar, the next one runs.
    pub async fn release(mut self) {
        if let Some(finisher) = self.finisher.take() {
            finisher.release().await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(finisher) = self.finisher.take() {
            finisher.release_now();
        }
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("finished", &self.finisher.is_none())
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_ignores_formatting_not_values() {
        let a: serde_json::Value = serde_json::from_str(r#"{"a": 1, "b": [1, 2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str("{\"b\":[1,2],\n\"a\":1}").unwrap();
        let c: serde_json::Value = serde_json::from_str(r#"{"a": 2, "b": [1, 2]}"#).unwrap();
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&a), fingerprint(&c));
        assert_eq!(fingerprint(&a).len(), 64);
    }

    #[test]
    fn key_parts_cannot_run_together() {
        let key = |caller: &str, tool: &str, key: &str| IdempotencyKey {
            caller: caller.into(),
            tool: tool.into(),
            key: key.into(),
        };
        assert_ne!(key("ab", "c", "k").digest(), key("a", "bc", "k").digest());
        assert_eq!(key("a", "b", "k").digest(), key("a", "b", "k").digest());
    }

    /// Replicas of another version read the same records: a code is
    /// stored as its number.
    #[test]
    fn a_stored_status_keeps_its_code_as_a_number() {
        let status = StoredOutcome::Status {
            code: tonic::Code::DeadlineExceeded,
            message: "late".into(),
        };
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(json, r#"{"Status":{"code":4,"message":"late"}}"#);
        assert_eq!(
            serde_json::from_str::<StoredOutcome>(&json).unwrap(),
            status
        );
    }
}
