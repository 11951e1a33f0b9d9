//! The janitor: forgets, in every part that keeps state per tool or
//! instance, what left the catalog.

use std::{collections::HashSet, sync::Arc};

use tokio::sync::broadcast::error::RecvError;

use crate::{
    calls::balance::Balancer,
    calls::proxy::Proxy,
    calls::ratelimit::RateLimiter,
    catalog::{Catalog, ChangeKind},
};

/// Forgets, in every part that keeps state per tool or instance, what left
/// the catalog, so nothing grows with churn.
pub(super) async fn janitor(
    catalog: Arc<Catalog>,
    limiter: Arc<dyn RateLimiter>,
    balancer: Arc<Balancer>,
    proxy: Arc<Proxy>,
) {
    let (_, mut changes) = catalog.watch(true);
    let mut live: HashSet<(String, String)> = HashSet::new();
    loop {
        match changes.recv().await {
            Ok(event) if !event.for_versions() => continue,
            Ok(event) => {
                if event.kind == ChangeKind::Removed {
                    let key = event.tool.key();
                    catalog.forget(&key);
                    limiter.forget(&key);
                }
                if event.kind == ChangeKind::Added {
                    live.extend(
                        event
                            .tool
                            .instances
                            .iter()
                            .map(|i| (i.id.clone(), i.endpoint.clone())),
                    );
                    continue;
                }
            }
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        let now: HashSet<(String, String)> = catalog
            .list_all()
            .iter()
            .flat_map(|t| {
                t.instances
                    .iter()
                    .map(|i| (i.id.clone(), i.endpoint.clone()))
            })
            .collect();
        for (id, endpoint) in live.difference(&now) {
            balancer.forget(id);
            if !now.iter().any(|(_, e)| e == endpoint) {
                proxy.forget(endpoint);
            }
        }
        live = now;
    }
}
