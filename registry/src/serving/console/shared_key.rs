//! In Redis mode every replica seals sign-ins under one key, so that a
//! session made on one replica is good on all: the first replica to
//! start sets `{prefix:console}:key` (SET NX, 32 random bytes), every
//! replica reads it. Rotating it (deleting the key, then restarting the
//! replicas) ends every session.

use std::time::Duration;

use backon::BackoffBuilder as _;
use base64::{Engine as _, engine::general_purpose::STANDARD};

use super::session::{Sealer, random_key};
use crate::{metrics::RedisOp, redis_pool::RedisPool};

/// Tries before a replica gives up on the shared key.
const ATTEMPTS: usize = 8;

/// The Redis key holding the session key.
pub(crate) fn redis_key(prefix: &str) -> String {
    format!("{{{prefix}:console}}:key")
}

/// The sealer under the shared key; after [`ATTEMPTS`] failures (with
/// backoff, about half a minute), one under a key of this replica's own,
/// logged: its sessions are then good on it alone.
pub(crate) async fn sealer(pool: &RedisPool, prefix: &str) -> Sealer {
    let mut delays = backon::ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(8))
        .with_max_times(ATTEMPTS)
        .build();
    loop {
        match shared(pool, prefix).await {
            Ok(key) => return Sealer::new(&key),
            Err(error) => match delays.next() {
                Some(delay) => {
                    tracing::warn!(%error, ?delay, "console: reading the shared session key; retrying");
                    tokio::time::sleep(delay).await;
                }
                None => {
                    tracing::error!(%error, "console: no shared session key; sign-ins are good on this replica only");
                    return Sealer::random();
                }
            },
        }
    }
}

/// The key in Redis, set first if there is none.
async fn shared(pool: &RedisPool, prefix: &str) -> Result<[u8; 32], String> {
    let key = redis_key(prefix);
    let mine = STANDARD.encode(random_key());
    let stored: String = pool
        .run(RedisOp::ConsoleKey, async |conn| {
            // Whoever set it first, every replica reads the same.
            let _: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&mine)
                .arg("NX")
                .query_async(conn)
                .await?;
            redis::cmd("GET").arg(&key).query_async(conn).await
        })
        .await
        .map_err(|e| e.to_string())?;
    STANDARD
        .decode(stored.trim())
        .ok()
        .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
        .ok_or_else(|| format!("{key} does not hold 32 bytes in base64: delete it to start afresh"))
}
