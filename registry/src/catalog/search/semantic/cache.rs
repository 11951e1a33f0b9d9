//! Tool vectors shared through Redis, so that replicas embed a tool once
//! and a restarted replica loads what was embedded before.
//!
//! Keys are `{<prefix>:emb:<model>}:<text hash>` (`<model>` the first 16
//! hex digits of the model's digest): one hash tag per model, so a batch
//! is one `MGET` in a Cluster too. Each value holds a magic, the model's
//! whole digest, the text hash, the dimension, the vector (f32, little
//! endian) and a checksum over all of it; a value that fails any check
//! (corrupt, truncated, another model's, another text's, not unit length)
//! is never served: it is recomputed and written over, with a warning.
//! Vectors live 30 days from their last write.
//!
//! A text not cached is claimed first (`SET <key>:claim NX PX`): a replica
//! that finds it claimed waits for the vector (polling with backoff, within
//! the claim's life) instead of computing it too.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest as _, Sha256};

use super::vectors::TextHash;
use crate::{
    metrics::RedisOp,
    redis_pool::{Dependent, RedisPool},
};

const MAGIC: &[u8; 4] = b"tmv1";
/// How long a vector is kept after its last write.
const RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a claim holds a text: far above what a batch takes.
pub(crate) const CLAIM: Duration = Duration::from_secs(15);

/// A cache the indexer could not use (it then embeds by itself).
#[derive(Debug, thiserror::Error)]
#[error("embedding cache: {0}")]
pub(crate) struct CacheError(String);

/// Where vectors are shared.
#[async_trait]
pub(crate) trait EmbeddingCache: Send + Sync {
    /// The cached vector of each text, in order; `None` where there is
    /// none, or none that passes every check.
    async fn get(&self, hashes: &[TextHash]) -> Result<Vec<Option<Vec<f32>>>, CacheError>;
    /// Claims each text for this replica to embed; true where claimed.
    async fn claim(&self, hashes: &[TextHash]) -> Result<Vec<bool>, CacheError>;
    /// Stores the vectors.
    async fn put(&self, vectors: &[(TextHash, &[f32])]) -> Result<(), CacheError>;
}

/// Encodes and checks cache values for one model.
#[derive(Debug, Clone)]
pub(crate) struct Codec {
    model: [u8; 32],
    dimension: usize,
}

impl Codec {
    /// Values of the model with hex digest `digest` and vectors of `dimension`.
    pub(crate) fn new(digest: &str, dimension: usize) -> Self {
        let mut model = [0u8; 32];
        for (i, byte) in model.iter_mut().enumerate() {
            *byte = digest
                .get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .unwrap_or_default();
        }
        Self { model, dimension }
    }

    /// The value for `vector`, the vector of the text `hash`.
    pub(crate) fn encode(&self, hash: &TextHash, vector: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 32 + 32 + 4 + 4 * vector.len() + 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.model);
        out.extend_from_slice(hash);
        out.extend_from_slice(
            &u32::try_from(vector.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for x in vector {
            out.extend_from_slice(&x.to_le_bytes());
        }
        let sum = Sha256::digest(&out);
        out.extend_from_slice(&sum[..8]);
        out
    }

    /// The vector in `value` if it is this model's vector of the text
    /// `hash`, whole and of unit length; else why not.
    pub(crate) fn decode(&self, hash: &TextHash, value: &[u8]) -> Result<Vec<f32>, &'static str> {
        let body_len = 4 + 32 + 32 + 4 + 4 * self.dimension;
        if value.len() != body_len + 8 {
            return Err("wrong length");
        }
        let (body, sum) = value.split_at(body_len);
        if Sha256::digest(body)[..8] != *sum {
            return Err("checksum mismatch");
        }
        if &body[..4] != MAGIC {
            return Err("not a toolmesh vector");
        }
        if body[4..36] != self.model {
            return Err("another model's vector");
        }
        if body[36..68] != *hash {
            return Err("another text's vector");
        }
        let mut dimension = [0u8; 4];
        dimension.copy_from_slice(&body[68..72]);
        if u32::from_le_bytes(dimension) as usize != self.dimension {
            return Err("wrong dimension");
        }
        let vector: Vec<f32> = body[72..]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        if !norm.is_finite() || (norm - 1.0).abs() > 1e-3 {
            return Err("not a unit vector");
        }
        Ok(vector)
    }
}

/// The cache in Redis.
pub(crate) struct RedisCache {
    pool: Arc<RedisPool>,
    /// `{<prefix>:emb:<model>}:`
    keys: String,
    codec: Codec,
    replica: String,
}

impl RedisCache {
    /// Vectors of the model `digest` (of `dimension`) under `prefix`.
    pub(crate) fn new(pool: Arc<RedisPool>, prefix: &str, digest: &str, dimension: usize) -> Self {
        pool.on_outage(Dependent::Embeddings, || {
            "each replica embeds new tools itself; search ranks them once embedded".into()
        });
        Self {
            pool,
            keys: format!("{{{prefix}:emb:{}}}:", digest.get(..16).unwrap_or(digest)),
            codec: Codec::new(digest, dimension),
            replica: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    fn key(&self, hash: &TextHash) -> String {
        let mut key = self.keys.clone();
        for byte in hash {
            key.push_str(&format!("{byte:02x}"));
        }
        key
    }
}

#[async_trait]
impl EmbeddingCache for RedisCache {
    async fn get(&self, hashes: &[TextHash]) -> Result<Vec<Option<Vec<f32>>>, CacheError> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = hashes.iter().map(|h| self.key(h)).collect();
        let values: Vec<Option<Vec<u8>>> = self
            .pool
            .run(RedisOp::EmbeddingRead, async |conn| {
                redis::cmd("MGET").arg(&keys).query_async(conn).await
            })
            .await
            .map_err(|e| CacheError(e.to_string()))?;
        Ok(hashes
            .iter()
            .zip(values)
            .map(|(hash, value)| {
                let value = value?;
                self.codec
                    .decode(hash, &value)
                    .inspect_err(|problem| {
                        tracing::warn!(key = %self.key(hash), problem, "cached tool vector refused; embedding the tool again");
                    })
                    .ok()
            })
            .collect())
    }

    async fn claim(&self, hashes: &[TextHash]) -> Result<Vec<bool>, CacheError> {
        let mut pipe = redis::pipe();
        for hash in hashes {
            pipe.cmd("SET")
                .arg(format!("{}:claim", self.key(hash)))
                .arg(&self.replica)
                .arg("NX")
                .arg("PX")
                .arg(CLAIM.as_millis() as u64);
        }
        let claimed: Vec<Option<String>> = self
            .pool
            .run(RedisOp::EmbeddingWrite, async |conn| {
                pipe.query_async(conn).await
            })
            .await
            .map_err(|e| CacheError(e.to_string()))?;
        Ok(claimed.into_iter().map(|c| c.is_some()).collect())
    }

    async fn put(&self, vectors: &[(TextHash, &[f32])]) -> Result<(), CacheError> {
        let mut pipe = redis::pipe();
        for (hash, vector) in vectors {
            pipe.cmd("SET")
                .arg(self.key(hash))
                .arg(self.codec.encode(hash, vector))
                .arg("EX")
                .arg(RETENTION.as_secs())
                .ignore();
        }
        self.pool
            .run(RedisOp::EmbeddingWrite, async |conn| {
                pipe.query_async::<()>(conn).await
            })
            .await
            .map_err(|e| CacheError(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(n: usize) -> Vec<f32> {
        let x = 1.0 / (n as f32).sqrt();
        vec![x; n]
    }

    #[test]
    fn a_value_reads_back_as_the_vector_it_was() {
        let codec = Codec::new(&"ab".repeat(32), 8);
        let hash = [7u8; 32];
        let value = codec.encode(&hash, &unit(8));
        assert_eq!(codec.decode(&hash, &value), Ok(unit(8)));
    }

    #[test]
    fn a_value_that_fails_a_check_is_refused_with_its_reason() {
        let codec = Codec::new(&"ab".repeat(32), 8);
        let hash = [7u8; 32];
        let value = codec.encode(&hash, &unit(8));

        let mut flipped = value.clone();
        flipped[80] ^= 1;
        assert_eq!(codec.decode(&hash, &flipped), Err("checksum mismatch"));
        assert_eq!(
            codec.decode(&hash, &value[..value.len() - 1]),
            Err("wrong length")
        );
        assert_eq!(codec.decode(&hash, b"garbage"), Err("wrong length"));
        assert_eq!(
            codec.decode(&[8u8; 32], &value),
            Err("another text's vector")
        );
        let other = Codec::new(&"cd".repeat(32), 8);
        assert_eq!(other.decode(&hash, &value), Err("another model's vector"));
        let long = codec.encode(&hash, &[0.5; 8]);
        assert_eq!(codec.decode(&hash, &long), Err("not a unit vector"));
        let nan = codec.encode(&hash, &[f32::NAN; 8]);
        assert_eq!(codec.decode(&hash, &nan), Err("not a unit vector"));
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_decode_to_a_vector_unless_encoded(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let codec = Codec::new(&"ab".repeat(32), 8);
            proptest::prop_assert!(codec.decode(&[7u8; 32], &bytes).is_err());
        }
    }
}
