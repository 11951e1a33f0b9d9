use std::io::Write;

use serde_json::json;
use tonic::metadata::{MetadataMap, MetadataValue};

use super::*;
use crate::access::auth::api_keys::hash_key;
use crate::access::auth::test_keys::{self, now};

struct Files {
    _dir: tempfile::TempDir,
    settings: AuthSettings,
}

fn files(api_keys: Option<&str>, jwt_keys: Option<&str>) -> Files {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut settings = AuthSettings::default();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        let mut file = std::fs::File::create(&path).expect("create");
        file.write_all(text.as_bytes()).expect("write");
        path
    };
    settings.api_keys_file = api_keys.map(|text| write("keys.yaml", text));
    settings.jwt_keys_file = jwt_keys.map(|text| write("jwt.pem", text));
    Files {
        _dir: dir,
        settings,
    }
}

fn key_file() -> String {
    format!(
        "keys:\n  - caller: billing-agent\n    sha256: {}\n    groups: [billing]\n",
        hash_key("s3cret-key")
    )
}

fn with_header(value: &str) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    metadata.insert(
        "authorization",
        MetadataValue::try_from(value).expect("ASCII"),
    );
    metadata
}

fn both() -> (Files, Authenticator) {
    let files = files(Some(&key_file()), Some(&test_keys::ed().public_pem));
    let auth = Authenticator::new(&files.settings).expect("authenticator");
    (files, auth)
}

#[test]
fn a_valid_api_key_names_its_caller() {
    let (_files, auth) = both();
    assert!(auth.is_enabled());
    let caller = auth
        .authenticate(&with_header("Bearer s3cret-key"))
        .expect("known key");
    assert_eq!(
        caller,
        Caller {
            id: "billing-agent".into(),
            groups: vec!["billing".into()]
        }
    );
    assert!(
        auth.authenticate(&with_header("bearer   s3cret-key"))
            .is_ok()
    );
}

#[test]
fn an_unknown_key_is_refused_without_echoing_it() {
    let (_files, auth) = both();
    let error = auth
        .authenticate(&with_header("Bearer not-the-key"))
        .expect_err("unknown");
    assert_eq!(error, AuthError::UnknownKey);
    assert!(!error.to_string().contains("not-the-key"));
}

#[test]
fn a_valid_jwt_names_its_caller() {
    let (_files, auth) = both();
    let token = test_keys::ed().sign(
        &json!({ "sub": "planner", "exp": now() + 60, "groups": ["ops"] }),
        None,
    );
    let caller = auth
        .authenticate(&with_header(&format!("Bearer {token}")))
        .expect("valid token");
    assert_eq!(
        caller,
        Caller {
            id: "planner".into(),
            groups: vec!["ops".into()]
        }
    );
}

#[test]
fn malformed_headers_are_refused() {
    let (_files, auth) = both();
    assert_eq!(
        auth.authenticate(&MetadataMap::new()),
        Err(AuthError::MissingCredential)
    );
    assert_eq!(
        auth.authenticate(&with_header("Bearer ")),
        Err(AuthError::MissingCredential)
    );
    for value in [
        "s3cret-key",
        "Basic s3cret-key",
        "Bearer s3cret key",
        "Bearers3cret-key",
    ] {
        assert!(
            matches!(
                auth.authenticate(&with_header(value)),
                Err(AuthError::MalformedHeader(_))
            ),
            "{value}"
        );
    }
    let mut two = with_header("Bearer s3cret-key");
    two.append(
        "authorization",
        MetadataValue::from_static("Bearer s3cret-key"),
    );
    assert!(matches!(
        auth.authenticate(&two),
        Err(AuthError::MalformedHeader(_))
    ));
}

#[test]
fn each_kind_of_credential_needs_its_file() {
    let keys_only = files(Some(&key_file()), None);
    let auth = Authenticator::new(&keys_only.settings).expect("authenticator");
    assert_eq!(
        auth.authenticate_credential("a.b.c"),
        Err(AuthError::JwtNotAccepted)
    );
    let jwt_only = files(None, Some(&test_keys::ec().public_pem));
    let auth = Authenticator::new(&jwt_only.settings).expect("authenticator");
    assert_eq!(
        auth.authenticate_credential("s3cret-key"),
        Err(AuthError::ApiKeysNotAccepted)
    );
    let none = Authenticator::new(&AuthSettings::default()).expect("authenticator");
    assert!(!none.is_enabled());
    assert!(none.files().is_empty());
}

#[test]
fn a_broken_file_at_startup_is_an_error_naming_it() {
    let broken = files(Some("keys:\n  - caller: a\n    sha256: zz\n"), None);
    let error = Authenticator::new(&broken.settings)
        .expect_err("broken")
        .to_string();
    assert!(error.contains("keys.yaml"), "{error}");
    assert!(error.contains("keys[0] (caller \"a\")"), "{error}");
}

#[test]
fn changed_jwt_keys_are_picked_up_by_a_check() {
    let files = files(None, Some(&test_keys::ed().public_pem));
    let auth = Authenticator::new(&files.settings).expect("authenticator");
    let token = test_keys::ec().sign(&json!({ "sub": "a", "exp": now() + 60 }), None);
    assert_eq!(
        auth.authenticate_credential(&token),
        Err(AuthError::NoMatchingKey)
    );

    let path = files.settings.jwt_keys_file.as_ref().expect("jwt file");
    std::fs::write(path, &test_keys::ec().public_pem).expect("write");
    for file in auth.files() {
        file.check();
    }
    assert!(auth.authenticate_credential(&token).is_ok());
}
