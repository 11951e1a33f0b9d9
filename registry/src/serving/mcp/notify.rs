//! `notifications/tools/list_changed`: one follower of the catalog's
//! change stream per session (handshake revisions) or per
//! `subscriptions/listen` stream (2026-07-28), each bounded by the number
//! of those. A change to a tool the caller cannot see is not told; the
//! changes of a [`COALESCE`] window are told once; a client that does not
//! take a notification within [`SEND_TIMEOUT`] is not told again.

use std::{future::Future, time::Duration};

use tokio::sync::broadcast::{
    self,
    error::{RecvError, TryRecvError},
};

use crate::catalog::CatalogEvent;

/// The changes within this window after the first are told in one
/// notification: at most one notification per window per client.
pub(crate) const COALESCE: Duration = Duration::from_millis(200);

/// Longest a notification may wait to be taken.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Calls `send` after each of `changes` (the catalog's, from
/// [`crate::catalog::Catalog::watch`]) to a tool `visible` lets through,
/// coalesced, until `stop` completes, the stream closes, or a send fails
/// (`false`) or times out.
pub(crate) async fn follow<S, F>(
    mut changes: broadcast::Receiver<CatalogEvent>,
    visible: impl Fn(&str) -> bool,
    stop: impl Future<Output = ()>,
    mut send: S,
) where
    S: FnMut() -> F,
    F: Future<Output = bool>,
{
    tokio::pin!(stop);
    loop {
        let changed = tokio::select! {
            () = &mut stop => return,
            event = changes.recv() => match event {
                Ok(event) => event.for_defaults() && visible(event.tool.name()),
                Err(RecvError::Lagged(_)) => true,
                Err(RecvError::Closed) => return,
            },
        };
        if !changed {
            continue;
        }
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(COALESCE) => {}
        }
        // What came in meanwhile is told by this notification.
        loop {
            match changes.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
        match tokio::time::timeout(SEND_TIMEOUT, send()).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use toolmesh_proto::pb;

    use crate::{
        catalog::Catalog,
        catalog::store::memory::{Limits, MemoryStore},
    };

    use super::*;

    fn announce(instance: &str, tool: &str) -> pb::AnnounceRequest {
        pb::AnnounceRequest {
            instance_id: instance.into(),
            endpoint: "http://127.0.0.1:9".into(),
            tools: vec![pb::ToolDescriptor {
                name: tool.into(),
                ..Default::default()
            }],
            execute_key: Vec::new(),
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn changes_are_coalesced_and_filtered() {
        let catalog = Arc::new(Catalog::new(MemoryStore::new(
            Duration::from_secs(3600),
            Limits::default(),
        )));
        let sent = Arc::new(AtomicUsize::new(0));
        let stop = tokio_util::sync::CancellationToken::new();
        let follower = tokio::spawn({
            let (catalog, sent, stop) = (catalog.clone(), sent.clone(), stop.clone());
            async move {
                follow(
                    catalog.watch(false).1,
                    |name| name != "hidden",
                    stop.cancelled_owned(),
                    || {
                        sent.fetch_add(1, Ordering::SeqCst);
                        async { true }
                    },
                )
                .await;
            }
        });
        settle().await;

        catalog.announce(announce("i1", "hidden")).await.unwrap();
        tokio::time::sleep(COALESCE * 3).await;
        assert_eq!(sent.load(Ordering::SeqCst), 0, "an invisible change");

        for i in 0..5 {
            catalog
                .announce(announce(&format!("v{i}"), &format!("t{i}")))
                .await
                .unwrap();
        }
        tokio::time::sleep(COALESCE * 3).await;
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "five changes, one notification"
        );

        catalog.announce(announce("v9", "t9")).await.unwrap();
        tokio::time::sleep(COALESCE * 3).await;
        assert_eq!(sent.load(Ordering::SeqCst), 2);

        stop.cancel();
        follower.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_send_ends_the_follower() {
        let catalog = Arc::new(Catalog::new(MemoryStore::new(
            Duration::from_secs(3600),
            Limits::default(),
        )));
        let follower = tokio::spawn({
            let catalog = catalog.clone();
            async move {
                follow(
                    catalog.watch(false).1,
                    |_| true,
                    std::future::pending(),
                    || async { false },
                )
                .await;
            }
        });
        settle().await;
        catalog.announce(announce("i", "t")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), follower)
            .await
            .expect("ends")
            .unwrap();
    }
}
