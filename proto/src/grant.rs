//! Execute grants: how a sidecar knows that a `ToolRuntime.Execute` comes
//! from the registry it announced to, and is a call that registry signed.
//!
//! Each sidecar makes a [`CallKey`] (32 random bytes) when it starts and
//! sends it in its announce (`AnnounceRequest.execute_key`). For every
//! `Execute` it sends to that instance, the registry mints a grant
//! ([`mint`], the [`HEADER`] header): an HMAC-SHA256 under the instance's
//! key over the instance id, the invocation id, the tool, the caller, the
//! SHA-256 of the arguments, when it was issued and a random nonce. The
//! sidecar's [`Verifier`] takes a call only with a grant that checks out
//! for its own key and instance and for this very call, issued within
//! `max_age` of its clock, and never seen before.
//!
//! So a grant that reaches one endpoint is worth nothing anywhere else: not
//! on another sidecar (another key, another instance id), not for another
//! call on the same one (another invocation, tool, caller or arguments),
//! not twice, and not after a minute. A registrant that announces its own
//! endpoint learns only grants for itself.
//!
//! A grant reads `v1.<issued at, Unix ms>.<nonce, 16 hex digits>.<HMAC,
//! unpadded base64url>`; what the HMAC covers is `Call::message`.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use sha2::{Digest as _, Sha256};
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};

/// The metadata key a grant travels in.
pub const HEADER: &str = "toolmesh-grant";
/// Bytes in a [`CallKey`].
pub const KEY_LEN: usize = 32;
/// How far a grant's issue time may be from the sidecar's clock, by
/// default: transit and queueing take milliseconds; the rest is for
/// clocks that differ.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(60);
/// Most grants a [`Verifier`] remembers to refuse their replay. Past it,
/// the oldest are forgotten and grants issued no later than them are
/// refused: a replay is never taken, at worst a grant delayed behind this
/// many newer ones is (at 10,000 calls/s, one over 26 s late).
pub const REPLAY_CAPACITY: usize = 1 << 18;

const VERSION: &str = "v1";
/// What the HMAC's message starts with, so that no other use of the key
/// could ever sign the same bytes.
const DOMAIN: &[u8] = b"toolmesh execute grant v1";

/// An instance's secret: made by the sidecar, sent to the registry in its
/// announce, never logged.
#[derive(Clone)]
pub struct CallKey {
    bytes: [u8; KEY_LEN],
    hmac: hmac::Key,
}

impl fmt::Debug for CallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallKey(<redacted>)")
    }
}

impl PartialEq for CallKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for CallKey {}

/// Why bytes are not a [`CallKey`].
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Not [`KEY_LEN`] bytes.
    #[error("an execute key is {KEY_LEN} bytes, not {0}")]
    Length(usize),
    /// The system's random source failed.
    #[error("the system's random source failed")]
    Random,
}

impl CallKey {
    /// A new key from the system's random source.
    pub fn generate() -> Result<Self, KeyError> {
        let mut bytes = [0u8; KEY_LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| KeyError::Random)?;
        Ok(Self::from_array(bytes))
    }

    /// The key whose bytes `bytes` are, as an announce carries them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        let array: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| KeyError::Length(bytes.len()))?;
        Ok(Self::from_array(array))
    }

    fn from_array(bytes: [u8; KEY_LEN]) -> Self {
        Self {
            hmac: hmac::Key::new(hmac::HMAC_SHA256, &bytes),
            bytes,
        }
    }

    /// The bytes to announce.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The SHA-256 of a call's `arguments_json`, computed once per call.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ArgumentsDigest([u8; 32]);

impl ArgumentsDigest {
    /// The digest of `arguments_json`, byte for byte as it is sent.
    pub fn of(arguments_json: &str) -> Self {
        Self(Sha256::digest(arguments_json.as_bytes()).into())
    }
}

impl fmt::Debug for ArgumentsDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArgumentsDigest(")?;
        for byte in &self.0[..4] {
            write!(f, "{byte:02x}")?;
        }
        write!(f, "…)")
    }
}

/// What a grant is for: one call on one instance.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The instance's id, as it announced.
    pub instance: &'a str,
    /// `ExecuteRequest.invocation_id`.
    pub invocation: &'a str,
    /// `ExecuteRequest.tool`.
    pub tool: &'a str,
    /// `ExecuteRequest.caller`.
    pub caller: &'a str,
    /// The digest of `ExecuteRequest.arguments_json`.
    pub arguments: ArgumentsDigest,
}

impl Call<'_> {
    /// A grant for this call under `key`, issued now with `nonce` (random,
    /// one per grant): what the registry sends with every call it signs.
    pub fn grant(&self, key: &CallKey, nonce: u64) -> AsciiMetadataValue {
        mint(key, self, now_ms(), nonce)
    }

    /// The bytes the HMAC covers: the domain, then each field as a 4-byte
    /// big-endian length and its bytes (so no two calls share a message),
    /// the arguments' digest, the issue time and the nonce (8 bytes
    /// big-endian each).
    fn message(&self, issued_at_ms: u64, nonce: u64) -> Vec<u8> {
        let fields = [self.instance, self.invocation, self.tool, self.caller];
        let mut message = Vec::with_capacity(
            DOMAIN.len() + fields.iter().map(|f| f.len() + 4).sum::<usize>() + 32 + 16,
        );
        message.extend_from_slice(DOMAIN);
        for field in fields {
            let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
            message.extend_from_slice(&len.to_be_bytes());
            message.extend_from_slice(field.as_bytes());
        }
        message.extend_from_slice(&self.arguments.0);
        message.extend_from_slice(&issued_at_ms.to_be_bytes());
        message.extend_from_slice(&nonce.to_be_bytes());
        message
    }
}

/// A grant for `call` under `key`, issued at `issued_at_ms` (Unix ms) with
/// `nonce` (random, one per grant), as the [`HEADER`] value.
pub fn mint(key: &CallKey, call: &Call<'_>, issued_at_ms: u64, nonce: u64) -> AsciiMetadataValue {
    let tag = hmac::sign(&key.hmac, &call.message(issued_at_ms, nonce));
    // `v1.<issued_at_ms>.<nonce, 16 hex digits>.<tag, base64url>`, written
    // straight into one string: `format!` was a third of the grant's cost.
    let mut text = String::with_capacity(VERSION.len() + 1 + 20 + 1 + 16 + 1 + 43);
    text.push_str(VERSION);
    text.push('.');
    crate::digits::push(&mut text, issued_at_ms);
    text.push('.');
    crate::digits::push_hex(&mut text, &nonce.to_be_bytes());
    text.push('.');
    URL_SAFE_NO_PAD.encode_string(tag.as_ref(), &mut text);
    // Digits, dots, hex and base64url: always a valid header value.
    AsciiMetadataValue::try_from(text).unwrap_or_else(|_| AsciiMetadataValue::from_static(""))
}

/// Now, as grants count time: Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Why a call's grant was refused. The message is the caller's to read:
/// it names what was wrong, never a key or a grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No grant at all: not a call from the registry.
    #[error("no execute grant")]
    Missing,
    /// Not a grant's shape.
    #[error("the execute grant is malformed")]
    Malformed,
    /// A grant for another instance, another call, or under another key.
    #[error("the execute grant is not this instance's for this call")]
    Forged,
    /// Issued further from this sidecar's clock than `max_age`.
    #[error(
        "the execute grant was issued {} this sidecar's clock, more than the {}s a grant is taken; are the registry's and the sidecar's clocks set?",
        shown_offset(*.offset_ms),
        .max_age.as_secs()
    )]
    Stale {
        /// This sidecar's time less the grant's issue time.
        offset_ms: i64,
        /// What the sidecar takes.
        max_age: Duration,
    },
    /// Seen before.
    #[error("the execute grant was already used")]
    Replayed,
    /// Issued no later than grants the replay guard had to forget.
    #[error("the execute grant is older than this sidecar's replay guard reaches")]
    Overflow,
}

fn shown_offset(offset_ms: i64) -> String {
    let seconds = offset_ms.unsigned_abs() as f64 / 1000.0;
    if offset_ms >= 0 {
        format!("{seconds:.1}s before")
    } else {
        format!("{seconds:.1}s ahead of")
    }
}

/// A sidecar's check of the grants its `Execute` calls carry.
pub struct Verifier {
    key: CallKey,
    instance: String,
    max_age: Duration,
    seen: Mutex<Seen>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("instance", &self.instance)
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// Takes grants minted under `key` for `instance`, issued within
    /// `max_age` of this clock, each once.
    pub fn new(key: CallKey, instance: impl Into<String>, max_age: Duration) -> Self {
        Self::with_capacity(key, instance, max_age, REPLAY_CAPACITY)
    }

    /// As [`Verifier::new`], remembering at most `capacity` grants.
    pub fn with_capacity(
        key: CallKey,
        instance: impl Into<String>,
        max_age: Duration,
        capacity: usize,
    ) -> Self {
        Self {
            key,
            instance: instance.into(),
            max_age,
            seen: Mutex::new(Seen::new(capacity.max(1))),
        }
    }

    /// The key grants must be minted under.
    pub fn key(&self) -> &CallKey {
        &self.key
    }

    /// Whether `metadata` carries a grant for the call made of `tool`,
    /// `invocation`, `caller` and `arguments_json`, at `now_ms`; a grant
    /// taken is remembered, so its replay is refused.
    pub fn check(
        &self,
        metadata: &MetadataMap,
        tool: &str,
        invocation: &str,
        caller: &str,
        arguments_json: &str,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let text = metadata
            .get(HEADER)
            .ok_or(Refusal::Missing)?
            .to_str()
            .map_err(|_| Refusal::Malformed)?;
        let grant = Parsed::from_text(text)?;
        let call = Call {
            instance: &self.instance,
            invocation,
            tool,
            caller,
            arguments: ArgumentsDigest::of(arguments_json),
        };
        hmac::verify(
            &self.key.hmac,
            &call.message(grant.issued_at_ms, grant.nonce),
            &grant.tag,
        )
        .map_err(|_| Refusal::Forged)?;
        let max_age_ms = u64::try_from(self.max_age.as_millis()).unwrap_or(u64::MAX);
        let offset_ms = i128::from(now_ms) - i128::from(grant.issued_at_ms);
        if offset_ms.unsigned_abs() > u128::from(max_age_ms) {
            return Err(Refusal::Stale {
                offset_ms: i64::try_from(offset_ms).unwrap_or(i64::MAX),
                max_age: self.max_age,
            });
        }
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(grant.issued_at_ms, grant.nonce, now_ms, max_age_ms)
    }
}

/// A grant's parts.
struct Parsed {
    issued_at_ms: u64,
    nonce: u64,
    tag: Vec<u8>,
}

impl Parsed {
    fn from_text(text: &str) -> Result<Self, Refusal> {
        let mut parts = text.split('.');
        let (Some(VERSION), Some(issued), Some(nonce), Some(tag), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(Refusal::Malformed);
        };
        // One spelling per grant: digits only, lowercase hex.
        let digits =
            !issued.is_empty() && issued.len() <= 20 && issued.bytes().all(|b| b.is_ascii_digit());
        let hex = nonce.len() == 16
            && nonce
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !digits || !hex {
            return Err(Refusal::Malformed);
        }
        Ok(Self {
            issued_at_ms: issued.parse().map_err(|_| Refusal::Malformed)?,
            nonce: u64::from_str_radix(nonce, 16).map_err(|_| Refusal::Malformed)?,
            tag: URL_SAFE_NO_PAD
                .decode(tag)
                .ok()
                .filter(|t| t.len() == 32)
                .ok_or(Refusal::Malformed)?,
        })
    }
}

/// The grants taken within the last `max_age`, by issue time: one issued
/// earlier than that fails the age check anyway, so it need not be kept.
struct Seen {
    grants: BTreeSet<(u64, u64)>,
    capacity: usize,
    /// The issue time of the newest grant forgotten for lack of room:
    /// grants issued no later are refused, since one of them may have
    /// been taken already.
    floor: Option<u64>,
}

impl Seen {
    fn new(capacity: usize) -> Self {
        Self {
            grants: BTreeSet::new(),
            capacity,
            floor: None,
        }
    }

    fn admit(
        &mut self,
        issued_at_ms: u64,
        nonce: u64,
        now_ms: u64,
        max_age_ms: u64,
    ) -> Result<(), Refusal> {
        let horizon = now_ms.saturating_sub(max_age_ms);
        while self.grants.first().is_some_and(|&(at, _)| at < horizon) {
            self.grants.pop_first();
        }
        if self.floor.is_some_and(|floor| floor < horizon) {
            self.floor = None;
        }
        if self.floor.is_some_and(|floor| issued_at_ms <= floor) {
            return Err(Refusal::Overflow);
        }
        if !self.grants.insert((issued_at_ms, nonce)) {
            return Err(Refusal::Replayed);
        }
        if self.grants.len() > self.capacity
            && let Some((forgotten, _)) = self.grants.pop_first()
        {
            self.floor = Some(self.floor.map_or(forgotten, |f| f.max(forgotten)));
        }
        Ok(())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.grants.len()
    }
}

/// Adds `grant` to `metadata` under [`HEADER`], marked sensitive: HTTP/2
/// sends it as a literal never indexed (RFC 7541 §7.1.3), as a credential
/// should be, and a value unique to the call would only evict the header
/// table's reusable entries.
pub fn attach(metadata: &mut MetadataMap, mut grant: AsciiMetadataValue) {
    // The key parsed once, not on every call.
    static KEY: LazyLock<AsciiMetadataKey> =
        LazyLock::new(|| AsciiMetadataKey::from_static(HEADER));
    grant.set_sensitive(true);
    metadata.insert(KEY.clone(), grant);
}

/// Signs `request` for the instance `instance` whose key is `key`, now,
/// with a random nonce: what the registry does to every `Execute` (it
/// mints the grant itself, once per attempt, on a request already
/// encoded); for tests and tools that call a sidecar directly with its
/// key.
pub fn sign(
    key: &CallKey,
    instance: &str,
    request: &mut tonic::Request<crate::pb::ExecuteRequest>,
) {
    let mut nonce = [0u8; 8];
    // A failed random source leaves a zero nonce: a grant refused as a
    // replay at worst, never a forged one.
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
    let body = request.get_ref();
    let grant = Call {
        instance,
        invocation: &body.invocation_id,
        tool: &body.tool,
        caller: &body.caller,
        arguments: ArgumentsDigest::of(&body.arguments_json),
    }
    .grant(key, u64::from_be_bytes(nonce));
    attach(request.metadata_mut(), grant);
}

#[cfg(test)]
mod tests;
