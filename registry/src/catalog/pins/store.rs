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
    /// The approver's comment, when approved through `Approvals`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
}

/// A held definition an approver denied: it stays held, and is no longer
/// pending.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    /// The denied digest.
    pub digest: String,
    /// Who denied it.
    pub by: String,
    /// When (Unix ms).
    pub at_ms: u64,
    /// Why.
    #[serde(default)]
    pub comment: String,
}

impl PinRecord {
    /// A pin of `digest` by `by`, now, of `definition` if known.
    pub fn new(digest: String, by: &str, definition: Option<&pb::ToolDescriptor>) -> Self {
        Self {
            digest,
            by: by.to_owned(),
            at_ms: crate::tasks::model::now_ms(),
            definition: definition.map(|d| STANDARD.encode(d.encode_to_vec())),
            comment: String::new(),
        }
    }

    /// A pin the file holds.
    pub fn from_file(digest: &str) -> Self {
        Self {
            digest: digest.to_owned(),
            by: "pins file".into(),
            at_ms: 0,
            definition: None,
            comment: String::new(),
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
    /// Every denial, by key.
    async fn denials(&self) -> Result<BTreeMap<String, Denial>, RegistryError>;
    /// Records `denial` of `key`'s held definition, replacing an earlier
    /// one.
    async fn deny(&self, key: &str, denial: &Denial) -> Result<(), RegistryError>;
    /// Forgets the denial of `key`.
    async fn forget_denial(&self, key: &str) -> Result<(), RegistryError>;
}

/// Pins in this process.
#[derive(Default)]
pub struct MemoryPins {
    pins: Mutex<BTreeMap<String, PinRecord>>,
    denials: Mutex<BTreeMap<String, Denial>>,
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

    async fn denials(&self) -> Result<BTreeMap<String, Denial>, RegistryError> {
        Ok(self
            .denials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    async fn deny(&self, key: &str, denial: &Denial) -> Result<(), RegistryError> {
        let mut denials = self.denials.lock().unwrap_or_else(PoisonError::into_inner);
        if !denials.contains_key(key) && denials.len() >= MAX_PINS {
            return Err(full());
        }
        denials.insert(key.to_owned(), denial.clone());
        Ok(())
    }

    async fn forget_denial(&self, key: &str) -> Result<(), RegistryError> {
        self.denials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        Ok(())
    }
}

/// Pins in Redis, shared by every replica.
pub struct RedisPins {
    pool: Arc<RedisPool>,
    key: String,
    denied: String,
}

impl RedisPins {
    /// Pins in the hash `{prefix:pins}`, denials in `{prefix:pins}:denied`
    /// (the same slot).
    pub fn new(pool: Arc<RedisPool>, prefix: &str) -> Self {
        let key = format!("{{{prefix}:pins}}");
        Self {
            pool,
            denied: format!("{key}:denied"),
            key,
        }
    }

    /// Every field of hash `key`, decoded; fields that do not decode are
    /// skipped.
    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<BTreeMap<String, T>, RegistryError> {
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

    /// Sets `field` of hash `key` to `value`.
    async fn write(&self, key: &str, field: &str, value: String) -> Result<(), RegistryError> {
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

    /// Deletes `field` of hash `key`; whether it was there.
    async fn delete(&self, key: &str, field: &str) -> Result<bool, RegistryError> {
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

fn unavailable(error: impl std::fmt::Display) -> RegistryError {
    RegistryError::StoreUnavailable {
        reason: format!("pins: {error}"),
    }
}

fn encode(record: &impl Serialize) -> String {
    // A struct of strings and numbers always serializes.
    serde_json::to_string(record).unwrap_or_default()
}

#[async_trait::async_trait]
impl PinStore for RedisPins {
    async fn all(&self) -> Result<BTreeMap<String, PinRecord>, RegistryError> {
        self.read(&self.key).await
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
        self.write(&self.key, field, encode(record)).await
    }

    async fn remove(&self, field: &str) -> Result<bool, RegistryError> {
        self.delete(&self.key, field).await
    }

    async fn denials(&self) -> Result<BTreeMap<String, Denial>, RegistryError> {
        self.read(&self.denied).await
    }

    async fn deny(&self, field: &str, denial: &Denial) -> Result<(), RegistryError> {
        self.write(&self.denied, field, encode(denial)).await
    }

    async fn forget_denial(&self, field: &str) -> Result<(), RegistryError> {
        self.delete(&self.denied, field).await.map(|_| ())
    }
}
