use std::sync::Arc;

use proptest::prelude::*;
use toolmesh_proto::pb::ToolDescriptor;

use super::*;

fn state(version: &str) -> Arc<ToolState> {
    Arc::new(ToolState::new(
        Arc::new(ToolDescriptor {
            name: "weather".into(),
            version: version.into(),
            ..Default::default()
        }),
        Vec::new(),
    ))
}

#[test]
fn keys_name_the_version() {
    let d = |version: &str| ToolDescriptor {
        name: "weather".into(),
        version: version.into(),
        ..Default::default()
    };
    assert_eq!(key(&d("")), "weather");
    assert_eq!(key(&d("1.4.2")), "weather@1.4.2");
    assert_eq!(name_of("weather@1.4.2"), "weather");
    assert_eq!(name_of("weather"), "weather");
}

#[test]
fn references_take_the_version_inline_or_beside() {
    let r = Reference::parse("weather@1.4.2", "", "tool").expect("inline");
    assert_eq!((r.name, r.version), ("weather", Some("1.4.2")));
    assert_eq!(r.key().as_deref(), Some("weather@1.4.2"));
    let r = Reference::parse("weather", "2.0.0", "tool").expect("beside");
    assert_eq!(r.version, Some("2.0.0"));
    let r = Reference::parse("weather", "", "tool").expect("none");
    assert_eq!((r.version, r.key()), (None, None));
    assert!(Reference::parse("weather@1.4.2", "1.4.2", "tool").is_ok());
    let field = |tool, version| match Reference::parse(tool, version, "tool") {
        Err(RegistryError::InvalidRequest { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    assert_eq!(field("weather@1.4.2", "2.0.0"), "version");
    assert_eq!(field("weather@latest", ""), "tool");
    assert_eq!(field("weather", "1.4"), "version");
    assert_eq!(field("weather@", ""), "tool");
}

#[test]
fn releases_rank_above_the_unversioned_and_prereleases() {
    let mut versions = vec!["2.0.0-rc.1", "", "1.4.2", "10.0.0", "2.0.0", "1.10.0"];
    versions.sort_by(|a, b| precedence(a, b));
    assert_eq!(
        versions,
        ["10.0.0", "2.0.0", "1.10.0", "1.4.2", "", "2.0.0-rc.1"]
    );
}

#[test]
fn the_default_is_the_operators_choice_else_the_best_release() {
    let family = Family::new(
        vec![state("1.4.2"), state("2.0.0"), state("3.0.0-beta")],
        None,
    )
    .expect("family");
    assert_eq!(family.default().descriptor.version, "2.0.0");
    assert_eq!(family.version_names(), ["2.0.0", "1.4.2", "3.0.0-beta"]);
    let chosen = Family::new(family.versions().to_vec(), Some("1.4.2")).expect("family");
    assert_eq!(chosen.default().descriptor.version, "1.4.2");
    let gone = Family::new(family.versions().to_vec(), Some("9.9.9")).expect("family");
    assert_eq!(gone.default().descriptor.version, "2.0.0");
    let digest = family.versions()[1].digest.clone();
    assert_eq!(
        family
            .with_digest(&digest)
            .map(|t| t.descriptor.version.as_str()),
        Some("1.4.2")
    );
    assert!(Family::new(Vec::new(), None).is_none());
}

proptest! {
    #[test]
    fn version_checks_never_panic(version in "\\PC{0,80}") {
        let _ = check(&version);
        let _ = Reference::parse(&version, "", "tool");
    }

    #[test]
    fn precedence_is_a_total_order(a in "[0-9]{1,2}\\.[0-9]\\.[0-9](-rc\\.[0-9])?", b in "[0-9]{1,2}\\.[0-9]\\.[0-9](-rc\\.[0-9])?") {
        prop_assert_eq!(precedence(&a, &b), precedence(&b, &a).reverse());
    }
}
