use toolmesh_proto::grant::CallKey;

use super::records::{endpoint_of, instance};
use super::*;

#[test]
fn an_address_keeps_the_endpoint_and_the_key_apart() {
    let key = CallKey::from_bytes(&[9; 32]).expect("32 bytes");
    let stored = stored_address("http://10.0.0.7:50061", Some(&key));
    assert_eq!(endpoint_of(&stored), "http://10.0.0.7:50061");
    let read = instance("i".into(), &stored);
    assert_eq!(read.endpoint, "http://10.0.0.7:50061");
    assert_eq!(read.execute_key, Some(key));

    let plain = stored_address("http://10.0.0.7:50061", None);
    assert_eq!(plain, "http://10.0.0.7:50061");
    assert_eq!(instance("i".into(), &plain).execute_key, None);
    let garbled = instance("i".into(), "http://10.0.0.7:50061 not-base64!");
    assert_eq!(
        (garbled.endpoint.as_str(), garbled.execute_key),
        ("http://10.0.0.7:50061", None)
    );
}

/// A Redis engine of its own (its own key prefix) on `redis`, loaded.
async fn engine(
    redis: &toolmesh_test_support::redis::RedisServer,
    prefix: &str,
    limits: Limits,
) -> Arc<RedisStore> {
    let pool = RedisPool::new(crate::redis_pool::RedisSettings {
        url: redis.url(),
        ..Default::default()
    })
    .expect("a pool");
    let store = RedisStore::new(
        pool,
        RedisStoreSettings {
            prefix: prefix.into(),
            ttl: Duration::from_secs(10),
            limits,
            replica_id: format!("{prefix}-replica"),
        },
    );
    tokio::time::timeout(Duration::from_secs(20), store.loaded())
        .await
        .expect("the catalog loads from Redis");
    store
}

/// The scenarios every engine runs (`conformance.rs`), on a real
/// `redis-server`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_engine_does_what_every_engine_does() {
    use crate::catalog::store::conformance::{self, BOUNDED};
    let Some(redis) = toolmesh_test_support::redis::RedisServer::start() else {
        return;
    };
    let fresh = |prefix: &'static str| engine(&redis, prefix, Limits::default());
    conformance::conflicting_descriptor_is_refused_and_changes_nothing(&*fresh("c1").await).await;
    conformance::sole_instance_may_change_its_descriptor(&*fresh("c2").await).await;
    conformance::reannounce_replaces_the_old_lease(&*fresh("c3").await).await;
    conformance::withdraw_removes_only_that_instance(&*fresh("c4").await).await;
    conformance::instances_show_registrant_tools_and_lease(&*fresh("c4i").await).await;
    conformance::a_tool_and_its_leases_belong_to_the_registrant_that_holds_them(
        &*fresh("c5").await,
    )
    .await;
    conformance::a_registrant_holds_at_most_its_instances_and_the_others_still_fit(
        &*fresh("c6").await,
    )
    .await;
    conformance::limits_bound_the_catalog(&*engine(&redis, "c7", BOUNDED).await).await;
    conformance::versions_serve_side_by_side_under_one_registrant(&*fresh("c8").await).await;
}
