//! What an operator's files and an agent's credential feed the registry's
//! access control: the API key file, the JWT key file, the policy file (its
//! approval rules and their conditions too), the registrants file, and a
//! bearer token checked against a public key whose private half nobody has
//! (so no input may ever verify).
//!
//! Input: one selector byte, then the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolmesh_registry::access::auth::{
    Caller, Policy,
    api_keys::ApiKeys,
    jwt::{JwtSettings, JwtVerifier},
    jwt_keys::JwtKeys,
};
use toolmesh_registry::access::registrants::Registrants;

/// A P-256 public key; its private key was thrown away when it was made.
const ORPHAN_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEgG7XVmU+3Uxvnpoja3XjBPc5h8kd
2RWYdFSp59m9Qfq/bSrauqe8HxIchCVEFu9hAWW6kVOAVZYkbApjxRIEQg==
-----END PUBLIC KEY-----
";

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    match selector % 5 {
        0 => {
            if let Ok(keys) = ApiKeys::parse(text) {
                let _ = keys.lookup(text);
            }
        }
        1 => {
            if let Ok(policy) = Policy::parse(text) {
                let caller = Caller {
                    id: text.chars().take(16).collect(),
                    groups: vec![text.chars().rev().take(8).collect()],
                };
                let _ = policy.allows(&caller, text);
                let tool = toolmesh_proto::pb::ToolDescriptor {
                    name: text.chars().take(64).collect(),
                    destructive: Some(text.len() % 2 == 0),
                    ..Default::default()
                };
                let _ = policy
                    .approvals()
                    .holding(&caller, &tool, || serde_json::from_str(text).ok());
            }
        }
        2 => {
            let _ = JwtKeys::parse(text);
        }
        3 => {
            let _ = Registrants::parse(text);
        }
        _ => {
            let keys = JwtKeys::parse(ORPHAN_KEY).expect("a valid public key");
            let verifier = JwtVerifier::new(JwtSettings::default());
            assert!(
                verifier.verify(&keys, text).is_err(),
                "a token verified against a key nobody can sign with"
            );
        }
    }
});
