//! The Redis catalog's background work: following the change channel, and
//! the maintenance loop (sweeps, write-back after outages, replica count,
//! periodic resync). Both end when the store is dropped.

use std::{
    sync::{Weak, atomic::Ordering},
    time::Duration,
};

use futures::StreamExt as _;
use tokio::time::Instant;

use super::{MAX_RECONNECT_DELAY, RESYNC_EVERY, RedisStore};
use crate::redis_pool::Dependent;

/// Follows the change channel, reloading each changed tool; resyncs on every
/// (re)subscribe. Reconnects with backoff; ends when the store is dropped.
/// Until the write-back after an outage it neither resyncs nor reloads: the
/// maintenance loop resyncs once it has written back. Losing the channel
/// counts as an outage.
pub(super) async fn subscribe(store: Weak<RedisStore>) {
    let mut delays = reconnect_delays();
    loop {
        let (client, channel, timeout) = {
            let Some(store) = store.upgrade() else { return };
            let settings = store.pool.settings();
            let client = store.pool.standalone_client().ok();
            (client, store.key("events"), settings.call_timeout * 4)
        };
        let subscribed = match client {
            Some(client) => tokio::time::timeout(timeout, async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await
            .ok()
            .and_then(Result::ok),
            None => None,
        };
        // Refused (e.g. an ACL without the channel) is retried like
        // unreachable: with backoff, never in a tight loop.
        let Some(mut pubsub) = subscribed else {
            tokio::time::sleep(delays.next().unwrap_or(MAX_RECONNECT_DELAY)).await;
            continue;
        };
        delays = reconnect_delays();
        if let Some(store) = store.upgrade()
            && !store.awaiting_write_back()
            && let Err(error) = store.resync().await
        {
            tracing::warn!(%error, "catalog resync failed");
        }
        let mut messages = pubsub.on_message();
        while let Some(message) = messages.next().await {
            let Some(store) = store.upgrade() else { return };
            if store.awaiting_write_back() {
                continue;
            }
            if let Ok(name) = message.get_payload::<String>()
                && let Err(error) = store.reload(&name).await
            {
                tracing::debug!(%error, tool = %name, "reload failed; the next resync heals it");
            }
        }
        // An outage is the pool's to report; a lost channel alone is news.
        tracing::info!("redis change channel lost; resubscribing");
        // Redis may have restarted empty, and come back before a presence
        // check saw it gone: write back before trusting it again, or the
        // resync on resubscribe would empty the view.
        if let Some(store) = store.upgrade() {
            store.local().awaiting_write_back = true;
        }
        tokio::time::sleep(delays.next().unwrap_or(MAX_RECONNECT_DELAY)).await;
    }
}

/// What the catalog does while Redis is away, as the pool's outage
/// reports say it. The maintenance loop below asks Redis at least once a
/// second, so an outage is seen and reported even with no traffic.
fn outage_consequence(store: &Weak<RedisStore>) -> String {
    match store.upgrade() {
        Some(store) if *store.loaded.borrow() => "the catalog is served from this replica's view \
            (announces are refused with UNAVAILABLE; heartbeats are kept here and written back \
            once Redis answers)"
            .into(),
        Some(_) => "the catalog is not loaded, so the registry is not ready (gRPC health \
            NOT_SERVING, /readyz 503) and lists no tools; announces are refused with UNAVAILABLE"
            .into(),
        None => String::new(),
    }
}

/// 50 ms, doubling up to [`MAX_RECONNECT_DELAY`].
fn reconnect_delays() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder as _;
    backon::ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(MAX_RECONNECT_DELAY)
        .without_max_times()
        .build()
}

/// Sweeps expired leases, writes back what was kept during an outage, counts
/// replicas, and resyncs periodically.
pub(super) async fn maintain(store: Weak<RedisStore>) {
    let interval = {
        let Some(strong) = store.upgrade() else {
            return;
        };
        let weak = store.clone();
        strong
            .pool
            .on_outage(Dependent::Catalog, move || outage_consequence(&weak));
        (strong.settings.ttl / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
    };
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_resync = Instant::now();
    loop {
        ticker.tick().await;
        let Some(store) = store.upgrade() else { return };
        match store.presence().await {
            Ok(count) => store.replicas.store(count.max(1), Ordering::Relaxed),
            Err(_) => {
                store.local().awaiting_write_back = true;
                continue;
            }
        }
        if store.awaiting_write_back() {
            if let Err(error) = store.recover().await {
                tracing::warn!(%error, "write-back after the outage failed; retrying");
                continue;
            }
            last_resync = Instant::now();
        }
        if !store.local().pending.is_empty() {
            let _ = store.write_back(false).await;
        }
        let recovering = store
            .local()
            .recovered_at
            .is_some_and(|at| at.elapsed() < store.settings.ttl);
        if !recovering && let Err(error) = store.sweep().await {
            tracing::debug!(%error, "sweep failed");
        }
        if last_resync.elapsed() >= RESYNC_EVERY {
            last_resync = Instant::now();
            if let Err(error) = store.resync().await {
                tracing::debug!(%error, "periodic resync failed");
            }
        }
    }
}
