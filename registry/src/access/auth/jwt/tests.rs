use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Value, json};

use super::*;
use crate::access::auth::test_keys::{self, TestKey, now, raw_token};

fn keys(text: &str) -> JwtKeys {
    JwtKeys::parse(text).expect("test keys")
}

fn pem_keys(key: &TestKey) -> JwtKeys {
    keys(&key.public_pem)
}

fn claims(sub: &str) -> Value {
    json!({ "sub": sub, "exp": now() + 600 })
}

fn verify(verifier: &JwtVerifier, keys: &JwtKeys, token: &str) -> Result<Caller, AuthError> {
    verifier.verify(keys, token)
}

fn default_verifier() -> JwtVerifier {
    JwtVerifier::new(JwtSettings::default())
}

fn invalid(claim: &str, expected: &'static str) -> AuthError {
    AuthError::InvalidClaim {
        claim: claim.into(),
        expected,
    }
}

#[test]
fn accepts_rs256_es256_and_eddsa() {
    for key in [test_keys::rsa(), test_keys::ec(), test_keys::ed()] {
        let token = key.sign(&claims("agent-1"), None);
        let caller = verify(&default_verifier(), &pem_keys(key), &token).expect("valid");
        assert_eq!(caller.id, "agent-1", "{:?}", key.algorithm);
        assert!(caller.groups.is_empty());
    }
}

#[test]
fn reads_groups_and_configured_claims() {
    let key = test_keys::ec();
    let token = key.sign(
        &json!({ "sub": "a", "exp": now() + 60, "groups": ["billing", "ops"] }),
        None,
    );
    let caller = verify(&default_verifier(), &pem_keys(key), &token).expect("valid");
    assert_eq!(caller.groups, ["billing", "ops"]);

    let verifier = JwtVerifier::new(JwtSettings {
        caller_claim: "client_id".into(),
        groups_claim: "roles".into(),
        ..JwtSettings::default()
    });
    let token = key.sign(
        &json!({ "client_id": "svc", "exp": now() + 60, "roles": ["r"] }),
        None,
    );
    let caller = verify(&verifier, &pem_keys(key), &token).expect("valid");
    assert_eq!(
        (caller.id.as_str(), caller.groups.as_slice()),
        ("svc", &["r".to_owned()][..])
    );
}

#[test]
fn refuses_bad_caller_and_groups_claims() {
    let key = test_keys::ed();
    let keys = pem_keys(key);
    let cases = [
        (
            json!({ "exp": now() + 60 }),
            AuthError::MissingClaim("sub".into()),
        ),
        (
            json!({ "sub": "", "exp": now() + 60 }),
            invalid("sub", "a non-empty string"),
        ),
        (
            json!({ "sub": 7, "exp": now() + 60 }),
            invalid("sub", claims::ONE_STRING),
        ),
        (
            json!({ "sub": ["a", "b"], "exp": now() + 60 }),
            invalid("sub", claims::ONE_STRING),
        ),
        (
            json!({ "sub": "a", "exp": now() + 60, "groups": "billing" }),
            invalid("groups", "an array of strings"),
        ),
        (
            json!({ "sub": "a", "exp": now() + 60, "groups": ["x", 1] }),
            invalid("groups", "an array of strings"),
        ),
    ];
    for (claims, expected) in cases {
        let token = key.sign(&claims, None);
        assert_eq!(
            verify(&default_verifier(), &keys, &token),
            Err(expected),
            "{claims}"
        );
    }
}

#[test]
fn checks_exp_and_nbf_with_leeway() {
    let key = test_keys::rsa();
    let keys = pem_keys(key);
    let verifier = default_verifier();
    let expired = key.sign(&json!({ "sub": "a", "exp": now() - 120 }), None);
    assert_eq!(verify(&verifier, &keys, &expired), Err(AuthError::Expired));
    let within_leeway = key.sign(&json!({ "sub": "a", "exp": now() - 30 }), None);
    assert!(verify(&verifier, &keys, &within_leeway).is_ok());
    let no_exp = key.sign(&json!({ "sub": "a" }), None);
    assert_eq!(
        verify(&verifier, &keys, &no_exp),
        Err(AuthError::MissingClaim("exp".into()))
    );
    let future = key.sign(
        &json!({ "sub": "a", "exp": now() + 600, "nbf": now() + 300 }),
        None,
    );
    assert_eq!(
        verify(&verifier, &keys, &future),
        Err(AuthError::NotYetValid)
    );
    let soon = key.sign(
        &json!({ "sub": "a", "exp": now() + 600, "nbf": now() + 30 }),
        None,
    );
    assert!(verify(&verifier, &keys, &soon).is_ok());

    let strict = JwtVerifier::new(JwtSettings {
        leeway: Duration::ZERO,
        ..JwtSettings::default()
    });
    assert_eq!(
        verify(&strict, &keys, &within_leeway),
        Err(AuthError::Expired)
    );
}

#[test]
fn checks_issuer_and_audience_when_configured() {
    let key = test_keys::ec();
    let keys = pem_keys(key);
    let verifier = JwtVerifier::new(JwtSettings {
        issuer: Some("https://idp.example".into()),
        audience: Some("toolmesh".into()),
        ..JwtSettings::default()
    });
    let exp = now() + 60;
    let token = |claims: Value| key.sign(&claims, None);
    let good = token(
        json!({ "sub": "a", "exp": exp, "iss": "https://idp.example", "aud": ["x", "toolmesh"] }),
    );
    assert!(verify(&verifier, &keys, &good).is_ok());
    let cases = [
        (
            json!({ "sub": "a", "exp": exp, "iss": "https://evil.example", "aud": "toolmesh" }),
            AuthError::WrongIssuer,
        ),
        (
            json!({ "sub": "a", "exp": exp, "aud": "toolmesh" }),
            AuthError::WrongIssuer,
        ),
        (
            json!({ "sub": "a", "exp": exp, "iss": "https://idp.example", "aud": "other" }),
            AuthError::WrongAudience,
        ),
        (
            json!({ "sub": "a", "exp": exp, "iss": "https://idp.example" }),
            AuthError::WrongAudience,
        ),
    ];
    for (claims, expected) in cases {
        assert_eq!(
            verify(&verifier, &keys, &token(claims.clone())),
            Err(expected),
            "{claims}"
        );
    }
    let unconfigured = default_verifier();
    let with_aud = token(json!({ "sub": "a", "exp": exp, "aud": "someone-else" }));
    assert_eq!(
        verify(&unconfigured, &keys, &with_aud),
        Err(AuthError::WrongAudience)
    );
}

/// RFC 7519 makes `iss` one StringOrURI: a list is malformed, refused
/// whether or not an issuer is configured, even one holding the
/// configured issuer (jsonwebtoken's own check reads it as a set).
#[test]
fn refuses_an_iss_that_is_not_one_string() {
    let key = test_keys::ec();
    let keys = pem_keys(key);
    let ours = "https://idp.example";
    let configured = JwtVerifier::new(JwtSettings {
        issuer: Some(ours.into()),
        ..JwtSettings::default()
    });
    let exp = now() + 60;
    for iss in [
        json!(["https://evil.example", ours]),
        json!([ours]),
        json!([]),
        json!(7),
        json!({ "iss": ours }),
    ] {
        let token = key.sign(&json!({ "sub": "a", "exp": exp, "iss": iss }), None);
        for verifier in [&configured, &default_verifier()] {
            let refused = verify(verifier, &keys, &token).expect_err("a malformed iss");
            assert_eq!(refused, invalid("iss", claims::ONE_STRING), "{iss}");
            assert!(
                refused.to_string().contains("`iss` must be one string"),
                "{refused}"
            );
        }
    }
    let good = key.sign(&json!({ "sub": "a", "exp": exp, "iss": ours }), None);
    assert!(verify(&configured, &keys, &good).is_ok());
    let null = key.sign(&json!({ "sub": "a", "exp": exp, "iss": null }), None);
    assert!(verify(&default_verifier(), &keys, &null).is_ok());
    assert_eq!(
        verify(&configured, &keys, &null),
        Err(AuthError::WrongIssuer)
    );
}

#[test]
fn registered_claims_of_the_wrong_type_are_refused_whatever_is_configured() {
    let key = test_keys::rsa();
    let keys = pem_keys(key);
    let verifier = JwtVerifier::new(JwtSettings {
        caller_claim: "client_id".into(),
        ..JwtSettings::default()
    });
    let exp = now() + 60;
    let cases = [
        (json!({ "sub": ["x"] }), invalid("sub", claims::ONE_STRING)),
        (
            json!({ "aud": 5 }),
            invalid("aud", "a string or an array of strings"),
        ),
        (
            json!({ "aud": ["toolmesh", 5] }),
            invalid("aud", "a string or an array of strings"),
        ),
        (
            json!({ "nbf": "2000-01-01" }),
            invalid("nbf", "a number (seconds since the epoch)"),
        ),
    ];
    for (extra, expected) in cases {
        let mut claims = json!({ "client_id": "svc", "exp": exp });
        for (name, value) in extra.as_object().expect("an object") {
            claims[name] = value.clone();
        }
        let token = key.sign(&claims, None);
        assert_eq!(verify(&verifier, &keys, &token), Err(expected), "{claims}");
    }
    let forged = test_keys::other_rsa().sign(
        &json!({ "client_id": "svc", "exp": exp, "sub": ["x"] }),
        None,
    );
    assert_eq!(
        verify(&verifier, &keys, &forged),
        Err(AuthError::BadSignature),
        "the signature is checked before the claims are read"
    );
    let fine = key.sign(
        &json!({ "client_id": "svc", "exp": exp, "sub": "user-1", "nbf": now() - 5 }),
        None,
    );
    assert_eq!(
        verify(&verifier, &keys, &fine).map(|c| c.id),
        Ok("svc".into())
    );
}

#[test]
fn refuses_alg_none() {
    let keys = pem_keys(test_keys::rsa());
    for alg in ["none", "None", "NONE"] {
        let token = raw_token(&json!({ "alg": alg, "typ": "JWT" }), &claims("a"), b"");
        assert_eq!(
            verify(&default_verifier(), &keys, &token),
            Err(AuthError::AlgorithmNotAccepted)
        );
    }
    let token = raw_token(&json!({ "typ": "JWT" }), &claims("a"), b"");
    assert_eq!(
        verify(&default_verifier(), &keys, &token),
        Err(AuthError::MalformedToken)
    );
}

#[test]
fn refuses_hs256_signed_with_the_public_key() {
    let key = test_keys::rsa();
    let keys = pem_keys(key);
    for secret in [
        key.public_pem.as_bytes(),
        key.public_pem.trim_end().as_bytes(),
    ] {
        let forged = jsonwebtoken::encode(
            &Header::new(jsonwebtoken::Algorithm::HS256),
            &claims("admin"),
            &EncodingKey::from_secret(secret),
        )
        .expect("HS256 token");
        assert_eq!(
            verify(&default_verifier(), &keys, &forged),
            Err(AuthError::AlgorithmNotAccepted)
        );
    }
}

#[test]
fn refuses_an_alg_that_does_not_fit_the_key() {
    let rsa = test_keys::rsa();
    let token = rsa.sign(&claims("a"), None);
    assert_eq!(
        verify(&default_verifier(), &pem_keys(test_keys::ec()), &token),
        Err(AuthError::NoMatchingKey)
    );
    let ps256 = raw_token(&json!({ "alg": "PS256" }), &claims("a"), b"sig");
    assert_eq!(
        verify(&default_verifier(), &pem_keys(rsa), &ps256),
        Err(AuthError::AlgorithmNotAccepted)
    );
}

#[test]
fn refuses_a_token_signed_by_another_key() {
    let token = test_keys::other_rsa().sign(&claims("a"), None);
    assert_eq!(
        verify(&default_verifier(), &pem_keys(test_keys::rsa()), &token),
        Err(AuthError::BadSignature)
    );
    let mut parts: Vec<String> = test_keys::rsa()
        .sign(&claims("a"), None)
        .split('.')
        .map(str::to_owned)
        .collect();
    parts[1] = raw_token(&json!({}), &claims("admin"), b"")
        .split('.')
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        verify(
            &default_verifier(),
            &pem_keys(test_keys::rsa()),
            &parts.join(".")
        ),
        Err(AuthError::BadSignature)
    );
}

#[test]
fn tries_every_pem_key_of_the_algorithm() {
    let text = format!(
        "{}{}",
        test_keys::other_rsa().public_pem,
        test_keys::rsa().public_pem
    );
    let token = test_keys::rsa().sign(&claims("a"), Some("any-kid"));
    assert!(verify(&default_verifier(), &keys(&text), &token).is_ok());
}

#[test]
fn selects_the_jwks_key_by_kid() {
    let set = keys(&test_keys::jwks(&[
        ("old", test_keys::other_rsa()),
        ("new", test_keys::rsa()),
        ("ec", test_keys::ec()),
        ("ed", test_keys::ed()),
    ]));
    let verifier = default_verifier();
    let token = test_keys::rsa().sign(&claims("a"), Some("new"));
    assert!(verify(&verifier, &set, &token).is_ok());
    let wrong_kid = test_keys::rsa().sign(&claims("a"), Some("old"));
    assert_eq!(
        verify(&verifier, &set, &wrong_kid),
        Err(AuthError::BadSignature)
    );
    let unknown_kid = test_keys::rsa().sign(&claims("a"), Some("gone"));
    assert_eq!(
        verify(&verifier, &set, &unknown_kid),
        Err(AuthError::NoMatchingKey)
    );
    let no_kid = test_keys::rsa().sign(&claims("a"), None);
    assert!(verify(&verifier, &set, &no_kid).is_ok());
    for (kid, key) in [("ec", test_keys::ec()), ("ed", test_keys::ed())] {
        assert!(
            verify(&verifier, &set, &key.sign(&claims("a"), Some(kid))).is_ok(),
            "{kid}"
        );
    }
}

#[test]
fn refuses_malformed_tokens_and_crit() {
    let keys = pem_keys(test_keys::ec());
    for token in ["a.b.c", "..", "x.y", "!!.e30.sig"] {
        assert_eq!(
            verify(&default_verifier(), &keys, token),
            Err(AuthError::MalformedToken),
            "{token}"
        );
    }
    let crit = raw_token(
        &json!({ "alg": "ES256", "crit": ["exp"] }),
        &claims("a"),
        b"sig",
    );
    assert_eq!(
        verify(&default_verifier(), &keys, &crit),
        Err(AuthError::AlgorithmNotAccepted)
    );
}
