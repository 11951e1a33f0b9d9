//! Where pins made at run time live: trust on first use, and operators'
//! approvals. In memory, or in one Redis hash (`{prefix:pins}`) every
//! replica reads, written with `HSETNX` where the first writer must win.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use prost::Message as _;
use serde::{Deserialize, Serialize};
use toolmesh_proto::pb;

use crate::{error::RegistryError, metrics::RedisOp, redis_pool::RedisPool};

/// Most pins the store holds.
pub const MAX_PINS: usize = 100_000;

/// One pin: the approved digest, who approved it and when, and the
/// definition itself when it was seen (to show what a held one changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinRecord {
    /// The approved digest.
    pub digest: String,
    /// Who pinned it: a caller, `trust-on-first-use`, or `pins file`.
    pub by: String,
    /// When (Unix ms; 0 for the file's).
    pub at_ms: u64,
    /// The pinned definition, encoded (base64 of the protobuf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    definition: Option<String>,
}

impl PinRecord {
    /// A pin of `digest` by `by`, now, of `definition` if known.
    pub fn new(digest: String, by: &str, definition: Option<&pb::ToolDescriptor>) -> Self {
        Self {
            digest,
            by: by.to_owned(),
            at_ms: crate::tasks::model::now_ms(),
            definition: definition.map(|d| STANDARD.encode(d.encode_to_vec())),
        }
    }

    /// A pin the file holds.
    pub fn from_file(digest: &str) -> Self {
        Self {
            digest: digest.to_owned(),
            by: "pins file".into(),
            at_ms: 0,
            definition: None,
        }
    }

    /// The pinned definition, if the record carries it.
    pub fn definition(&self) -> Option<pb::ToolDescriptor> {
        let bytes = STANDARD.decode(self.definition.as_deref()?).ok()?;
        pb::ToolDescriptor::decode(bytes.as_slice()).ok()
    }
}

/// The engine under the pins.
#[async_trait::async_trait]
pub trait PinStore: Send + Sync + 'static {
    /// Every pin, by key.
    async fn all(&self) -> Result<BTreeMap<String, PinRecord>, RegistryError>;
    /// Pins `key` unless it is pinned already; whether this did.
    async fn put_first(&self, key: &str, record: &PinRecord) -> Result<bool, RegistryError>;
    /// Pins `key`, replacing its pin.
    async fn put(&self, key: &str, record: &PinRecord) -> Result<(), RegistryError>;
    /// Unpins `key`; whether it was pinned.
    async fn remove(&self, key: &str) -> Result<bool, RegistryError>;
}

/// Pins in this process.
#[derive(Default)]
pub struct MemoryPins {
    pins: Mutex<BTreeMap<String, PinRecord>>,
}

fn full() -> RegistryError {
    RegistryError::CatalogFull(format!("{MAX_PINS} pins is the limit"))
}

#[async_trait::async_trait]
impl PinStore for MemoryPins {
    async fn all(&self) -> Result<BTreeMap<String, PinRecord>, RegistryError> {
        Ok(self
            .pins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    async fn put_first(&self, key: &str, record: &PinRecord) -> Result<bool, RegistryError> {
        let mut pins = self.pins.lock().unwrap_or_else(PoisonError::into_inner);
        if pins.contains_key(key) {
            return Ok(false);
        }
        if pins.len() >= MAX_PINS {
            return Err(full());
        }
        pins.insert(key.to_owned(), record.clone());
        Ok(true)
    }

    async fn put(&self, key: &str, record: &PinRecord) -> Result<(), RegistryError> {
        let mut pins = self.pins.lock().unwrap_or_else(PoisonError::into_inner);
        if !pins.contains_key(key) && pins.len() >= MAX_PINS {
            return Err(full());
        }
        pins.insert(key.to_owned(), record.clone());
        Ok(())
    }

    async fn remove(&self, key: &str) -> Result<bool, RegistryError> {
        Ok(self
            .pins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
            .is_some())
    }
}

/// Pins in Redis, shared by every replica.
pub struct RedisPins {
    pool: Arc<RedisPool>,
    key: String,
}

impl RedisPins {
    /// Pins in the hash `{prefix:pins}`.
    pub fn new(pool: Arc<RedisPool>, prefix: &str) -> Self {
        Self {
            pool,
            key: format!("{{{prefix}:pins}}"),
        }
    }
}

fn unavailable(error: impl std::fmt::Display) -> RegistryError {
    RegistryError::StoreUnavailable {
        reason: format!("pins: {error}"),
    }
}

fn encode(record: &PinRecord) -> String {
    // A struct of strings and numbers always serializes.
    serde_json::to_string(record).unwrap_or_default()
}

#[async_trait::async_trait]
impl PinStore for RedisPins {
    async fn all(&self) -> Result<BTreeMap<String, PinRecord>, RegistryError> {
        let key = &self.key;
        let fields: BTreeMap<String, String> = self
            .pool
            .run(RedisOp::PinRead, async |conn| {
                redis::cmd("HGETALL").arg(key).query_async(conn).await
            })
            .await
            .map_err(unavailable)?;
        Ok(fields
            .into_iter()
            .take(MAX_PINS)
            .filter_map(|(k, v)| Some((k, serde_json::from_str(&v).ok()?)))
            .collect())
    }

    async fn put_first(&self, field: &str, record: &PinRecord) -> Result<bool, RegistryError> {
        let (key, value) = (&self.key, encode(record));
        self.pool
            .run(RedisOp::PinWrite, async |conn| {
                redis::cmd("HSETNX")
                    .arg(key)
                    .arg(field)
                    .arg(&value)
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(unavailable)
    }

    async fn put(&self, field: &str, record: &PinRecord) -> Result<(), RegistryError> {
        let (key, value) = (&self.key, encode(record));
        self.pool
            .run(RedisOp::PinWrite, async |conn| {
                redis::cmd("HSET")
                    .arg(key)
                    .arg(field)
                    .arg(&value)
                    .query_async::<()>(conn)
                    .await
            })
            .await
            .map_err(unavailable)
    }

    async fn remove(&self, field: &str) -> Result<bool, RegistryError> {
        let key = &self.key;
        self.pool
            .run(RedisOp::PinWrite, async |conn| {
                redis::cmd("HDEL")
                    .arg(key)
                    .arg(field)
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(unavailable)
    }
}
