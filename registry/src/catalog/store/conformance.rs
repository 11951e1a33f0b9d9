//! What every [`CatalogStore`] engine must do, as scenarios run against the
//! memory engine (`memory/tests.rs`) and the Redis one (`redis/tests.rs`)
//! alike. Each takes a store nothing else has written to.
#![allow(clippy::unwrap_used)]

use super::{
    CatalogStore,
    memory::Limits,
    model::{Announcement, ChangeKind},
};
use crate::{access::registrants::Owner, error::RegistryError};
use toolmesh_proto::pb::ToolDescriptor;

/// The bounds [`limits_bound_the_catalog`] expects its store to have.
pub(super) const BOUNDED: Limits = Limits {
    max_instances: 1,
    max_tools: 2,
};

/// An unversioned tool whose description is `revision`: two revisions of
/// one name are two definitions of the same catalog entry.
pub(super) fn tool(name: &str, revision: &str) -> ToolDescriptor {
    ToolDescriptor {
        name: name.into(),
        description: revision.into(),
        ..Default::default()
    }
}

/// Version `version` of `name`.
pub(super) fn versioned(name: &str, version: &str) -> ToolDescriptor {
    ToolDescriptor {
        name: name.into(),
        version: version.into(),
        ..Default::default()
    }
}

pub(super) fn announcement(id: &str, tools: Vec<ToolDescriptor>) -> Announcement {
    Announcement {
        instance_id: id.into(),
        endpoint: format!("http://127.0.0.1/{id}"),
        execute_key: None,
        tools,
        owner: Owner::default(),
    }
}

pub(super) fn owned(
    id: &str,
    tools: Vec<ToolDescriptor>,
    owner: &str,
    max: Option<usize>,
) -> Announcement {
    Announcement {
        owner: Owner {
            name: owner.into(),
            max_instances: max,
            max_tools: None,
        },
        ..announcement(id, tools)
    }
}

pub(super) fn denied<T: std::fmt::Debug>(result: Result<T, RegistryError>) -> bool {
    matches!(result, Err(RegistryError::PermissionDenied { .. }))
}

pub(super) async fn conflicting_descriptor_is_refused_and_changes_nothing(
    store: &dyn CatalogStore,
) {
    store
        .announce(announcement("a", vec![tool("t", "1")]))
        .await
        .unwrap();
    let err = store
        .announce(announcement("b", vec![tool("u", "1"), tool("t", "2")]))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::DescriptorConflict { ref tool, .. } if tool == "t"));
    assert!(store.get("u").is_none());
    assert_eq!(store.get("t").unwrap().instances.len(), 1);
}

pub(super) async fn sole_instance_may_change_its_descriptor(store: &dyn CatalogStore) {
    let (_, mut events) = store.watch(false);
    store
        .announce(announcement("a", vec![tool("t", "1")]))
        .await
        .unwrap();
    store
        .announce(announcement("a", vec![tool("t", "2")]))
        .await
        .unwrap();
    assert_eq!(store.get("t").unwrap().descriptor.description, "2");
    assert_eq!(events.recv().await.unwrap().kind, ChangeKind::Added);
    assert_eq!(events.recv().await.unwrap().kind, ChangeKind::Updated);
}

pub(super) async fn reannounce_replaces_the_old_lease(store: &dyn CatalogStore) {
    let first = store
        .announce(announcement("a", vec![tool("t", "1"), tool("u", "1")]))
        .await
        .unwrap();
    let second = store
        .announce(announcement("a", vec![tool("t", "1")]))
        .await
        .unwrap();
    assert!(store.heartbeat(&first.id, "").await.is_err());
    assert!(store.heartbeat(&second.id, "").await.is_ok());
    assert!(store.get("u").is_none());
    assert_eq!(store.list().len(), 1);
}

pub(super) async fn withdraw_removes_only_that_instance(store: &dyn CatalogStore) {
    let a = store
        .announce(announcement("a", vec![tool("t", "1")]))
        .await
        .unwrap();
    store
        .announce(announcement("b", vec![tool("t", "1")]))
        .await
        .unwrap();
    assert_eq!(store.get("t").unwrap().instances.len(), 2);
    store.withdraw(&a.id, "").await.unwrap();
    let t = store.get("t").unwrap();
    assert_eq!(t.instances.len(), 1);
    assert_eq!(t.instances[0].id, "b");
    store.withdraw("unknown", "").await.unwrap();
}

pub(super) async fn a_tool_and_its_leases_belong_to_the_registrant_that_holds_them(
    store: &dyn CatalogStore,
) {
    let lease = store
        .announce(owned("a", vec![tool("t", "1")], "alice", None))
        .await
        .unwrap();
    // Another registrant can neither add an instance of the tool, nor
    // replace its descriptor, nor take over the instance id.
    assert!(denied(
        store
            .announce(owned("m", vec![tool("t", "1")], "mallory", None))
            .await
    ));
    assert!(denied(
        store
            .announce(owned("a", vec![tool("t", "2")], "mallory", None))
            .await
    ));
    assert!(denied(
        store
            .announce(owned("a", vec![tool("u", "1")], "mallory", None))
            .await
    ));
    assert!(denied(
        store
            .announce(announcement("m", vec![tool("t", "1")]))
            .await
    ));
    // Nor renew or end its lease.
    assert!(denied(store.heartbeat(&lease.id, "mallory").await));
    assert!(denied(store.withdraw(&lease.id, "mallory").await));
    assert_eq!(store.get("t").unwrap().instances.len(), 1);
    // The owner can do all of it.
    store
        .announce(owned("b", vec![tool("t", "1")], "alice", None))
        .await
        .unwrap();
    store.heartbeat(&lease.id, "alice").await.unwrap();
    store.withdraw(&lease.id, "alice").await.unwrap();
    assert_eq!(store.get("t").unwrap().instances.len(), 1);
}

pub(super) async fn a_registrant_holds_at_most_its_instances_and_the_others_still_fit(
    store: &dyn CatalogStore,
) {
    for id in ["a", "b"] {
        store
            .announce(owned(id, vec![tool("t", "1")], "alice", Some(2)))
            .await
            .unwrap();
    }
    assert!(matches!(
        store
            .announce(owned("c", vec![tool("t", "1")], "alice", Some(2)))
            .await,
        Err(RegistryError::CatalogFull(_))
    ));
    // Re-announcing an instance it holds is no new instance.
    store
        .announce(owned("a", vec![tool("t", "1")], "alice", Some(2)))
        .await
        .unwrap();
    store
        .announce(owned("x", vec![tool("u", "1")], "bob", Some(2)))
        .await
        .unwrap();
}

/// `store` was made with [`BOUNDED`].
pub(super) async fn limits_bound_the_catalog(store: &dyn CatalogStore) {
    store
        .announce(announcement("a", vec![tool("t", "1")]))
        .await
        .unwrap();
    assert!(matches!(
        store
            .announce(announcement("b", vec![tool("t", "1")]))
            .await,
        Err(RegistryError::CatalogFull(_))
    ));
    assert!(matches!(
        store
            .announce(announcement(
                "a",
                vec![tool("x", "1"), tool("y", "1"), tool("z", "1")]
            ))
            .await,
        Err(RegistryError::CatalogFull(_))
    ));
    store
        .announce(announcement("a", vec![tool("x", "1"), tool("y", "1")]))
        .await
        .unwrap();
}

pub(super) async fn versions_serve_side_by_side_under_one_registrant(store: &dyn CatalogStore) {
    use crate::catalog::store::model::Scope;
    let (_, mut events) = store.watch(false);
    store
        .announce(owned("a", vec![versioned("w", "1.4.2")], "alice", None))
        .await
        .unwrap();
    let first = events.recv().await.unwrap();
    assert_eq!((first.kind, first.scope), (ChangeKind::Added, Scope::Both));
    let second = store
        .announce(owned("b", vec![versioned("w", "2.0.0")], "alice", None))
        .await
        .unwrap();
    let added = events.recv().await.unwrap();
    assert_eq!(
        (added.kind, added.scope),
        (ChangeKind::Added, Scope::Version)
    );
    let moved = events.recv().await.unwrap();
    assert_eq!(
        (moved.kind, moved.scope),
        (ChangeKind::Updated, Scope::Default)
    );
    assert_eq!(moved.tool.descriptor.version, "2.0.0");
    let family = store.family("w").unwrap();
    assert_eq!(family.version_names(), ["2.0.0", "1.4.2"]);
    assert_eq!(store.get("w@1.4.2").unwrap().instances[0].id, "a");
    assert_eq!(store.get("w@2.0.0").unwrap().instances[0].id, "b");
    assert!(store.get("w").is_none(), "no unversioned entry");
    assert_eq!(store.list().len(), 1);
    assert_eq!(store.list_all().len(), 2);
    // Another registrant may not add a version of alice's tool.
    assert!(denied(
        store
            .announce(owned("m", vec![versioned("w", "3.0.0")], "mallory", None))
            .await
    ));
    // Instances of one version still agree on its definition.
    let mut drifted = versioned("w", "1.4.2");
    drifted.description = "changed".into();
    let conflict = store
        .announce(owned("c", vec![drifted], "alice", None))
        .await
        .expect_err("drift");
    assert!(
        matches!(&conflict, RegistryError::DescriptorConflict { tool, differences } if tool == "w" && differences[0].starts_with("description")),
        "{conflict:?}"
    );
    store.withdraw(&second.id, "alice").await.unwrap();
    let family = store.family("w").unwrap();
    assert_eq!(family.default().descriptor.version, "1.4.2");
    assert!(store.get("w@2.0.0").is_none());
}

/// The console's instance listing: each live instance with its registrant,
/// tools and lease, gone once withdrawn.
pub(super) async fn instances_show_registrant_tools_and_lease(store: &dyn CatalogStore) {
    let lease = store
        .announce(owned(
            "a",
            vec![tool("t", "1"), tool("u", "1")],
            "team-a",
            None,
        ))
        .await
        .unwrap();
    store
        .announce(owned("b", vec![tool("v", "1")], "team-b", None))
        .await
        .unwrap();
    let mut instances = store.instances().await.unwrap();
    instances.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(instances.len(), 2, "{instances:?}");
    let a = &instances[0];
    assert_eq!((a.id.as_str(), a.owner.as_str()), ("a", "team-a"));
    assert_eq!(a.endpoint, "http://127.0.0.1/a");
    let mut tools = a.tools.clone();
    tools.sort();
    assert_eq!(tools, ["t", "u"]);
    let left = a.expires_in.expect("an expiry");
    assert!(left > std::time::Duration::ZERO && left <= std::time::Duration::from_secs(3600));
    let announced = a.announced_ms.expect("an announce time");
    assert!(
        super::model::epoch_ms().abs_diff(announced) < 60_000,
        "{announced}"
    );
    store.withdraw(&lease.id, "team-a").await.unwrap();
    let left: Vec<String> = store
        .instances()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(left, ["b"]);
}
