use super::*;
use proptest::prelude::*;

const NOW: u64 = 1_800_000_000_000;

fn key(byte: u8) -> CallKey {
    CallKey::from_bytes(&[byte; KEY_LEN]).expect("32 bytes")
}

fn call<'a>(arguments: &'a str) -> (Call<'a>, &'a str) {
    (
        Call {
            instance: "inventory-1",
            invocation: "inv-1",
            tool: "victim_tool",
            caller: "alice-agent",
            arguments: ArgumentsDigest::of(arguments),
        },
        arguments,
    )
}

fn metadata(grant: AsciiMetadataValue) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    attach(&mut metadata, grant);
    metadata
}

fn verifier() -> Verifier {
    Verifier::new(key(7), "inventory-1", DEFAULT_MAX_AGE)
}

/// Checks `metadata` against the call `call("{}")` describes, at `now`.
fn check_at(verifier: &Verifier, metadata: &MetadataMap, now: u64) -> Result<(), Refusal> {
    verifier.check(metadata, "victim_tool", "inv-1", "alice-agent", "{}", now)
}

#[test]
fn a_grant_admits_its_call_once() {
    let (call, _) = call("{}");
    let grant = metadata(mint(&key(7), &call, NOW, 1));
    let verifier = verifier();
    assert_eq!(check_at(&verifier, &grant, NOW + 5), Ok(()));
    assert_eq!(check_at(&verifier, &grant, NOW + 6), Err(Refusal::Replayed));
    let another = metadata(mint(&key(7), &call, NOW, 2));
    assert_eq!(
        check_at(&verifier, &another, NOW + 7),
        Ok(()),
        "another nonce"
    );
}

#[test]
fn a_grant_is_worth_nothing_for_anything_else() {
    let (call, _) = call("{}");
    let grant = metadata(mint(&key(7), &call, NOW, 1));
    let verifier = verifier();
    let refused = |tool: &str, invocation: &str, caller: &str, arguments: &str| {
        verifier.check(&grant, tool, invocation, caller, arguments, NOW)
    };
    assert_eq!(
        refused("other_tool", "inv-1", "alice-agent", "{}"),
        Err(Refusal::Forged)
    );
    assert_eq!(
        refused("victim_tool", "inv-2", "alice-agent", "{}"),
        Err(Refusal::Forged)
    );
    assert_eq!(
        refused("victim_tool", "inv-1", "mallory", "{}"),
        Err(Refusal::Forged)
    );
    assert_eq!(
        refused("victim_tool", "inv-1", "alice-agent", r#"{"amount":1}"#),
        Err(Refusal::Forged)
    );
    let elsewhere = Verifier::new(key(7), "inventory-2", DEFAULT_MAX_AGE);
    assert_eq!(
        check_at(&elsewhere, &grant, NOW),
        Err(Refusal::Forged),
        "another instance"
    );
    let other_key = Verifier::new(key(8), "inventory-1", DEFAULT_MAX_AGE);
    assert_eq!(
        check_at(&other_key, &grant, NOW),
        Err(Refusal::Forged),
        "another key"
    );
    assert_eq!(
        check_at(&verifier, &grant, NOW),
        Ok(()),
        "still good for its own call"
    );
}

#[test]
fn fields_cannot_be_shifted_between_each_other() {
    let shifted = Call {
        instance: "inventory-1",
        invocation: "inv-1victim_tool",
        tool: "",
        caller: "alice-agent",
        arguments: ArgumentsDigest::of("{}"),
    };
    let grant = metadata(mint(&key(7), &shifted, NOW, 1));
    assert_eq!(check_at(&verifier(), &grant, NOW), Err(Refusal::Forged));
}

#[test]
fn a_grant_from_too_far_either_way_is_stale() {
    let (call, _) = call("{}");
    let verifier = verifier();
    let old = metadata(mint(&key(7), &call, NOW - 61_000, 1));
    let refusal = check_at(&verifier, &old, NOW).expect_err("a minute old");
    assert_eq!(
        refusal.to_string(),
        "the execute grant was issued 61.0s before this sidecar's clock, more than the 60s a grant is taken; are the registry's and the sidecar's clocks set?"
    );
    let ahead = metadata(mint(&key(7), &call, NOW + 90_500, 2));
    let refusal = check_at(&verifier, &ahead, NOW).expect_err("ahead");
    assert!(refusal.to_string().contains("90.5s ahead of"), "{refusal}");
    let edge = metadata(mint(&key(7), &call, NOW - 60_000, 3));
    assert_eq!(check_at(&verifier, &edge, NOW), Ok(()), "exactly max_age");
}

#[test]
fn missing_and_malformed_grants_are_refused() {
    let verifier = verifier();
    assert_eq!(
        check_at(&verifier, &MetadataMap::new(), NOW),
        Err(Refusal::Missing)
    );
    let (call, _) = call("{}");
    let good = mint(&key(7), &call, NOW, 1);
    let good = good.to_str().expect("ascii");
    let tag = good.rsplit('.').next().expect("a tag");
    for bad in [
        "",
        "v1",
        "v2.1800000000000.0000000000000001.AAAA",
        &format!("v1.{NOW}.1.{tag}"),
        &format!("v1.{NOW}.000000000000000g.{tag}"),
        &format!("v1.{NOW}.000000000000000A.{tag}"),
        &format!("v1.+{NOW}.0000000000000001.{tag}"),
        &format!("v1.-5.0000000000000001.{tag}"),
        &format!("v1.{NOW}.0000000000000001.{tag}.extra"),
        &format!("v1.{NOW}.0000000000000001.{}", &tag[..10]),
        &format!("v1.{NOW}.0000000000000001.{tag}="),
        &format!("v1.{}.0000000000000001.{tag}", "9".repeat(30)),
    ] {
        let metadata = metadata(bad.parse().expect("ascii"));
        assert_eq!(
            check_at(&verifier, &metadata, NOW),
            Err(Refusal::Malformed),
            "{bad:?}"
        );
    }
}

#[test]
fn past_capacity_the_oldest_are_forgotten_and_never_replayable() {
    let verifier = Verifier::with_capacity(key(7), "inventory-1", DEFAULT_MAX_AGE, 2);
    let (call, _) = call("{}");
    let grants: Vec<MetadataMap> = (0..3)
        .map(|i| metadata(mint(&key(7), &call, NOW + i, i)))
        .collect();
    for grant in &grants {
        assert_eq!(check_at(&verifier, grant, NOW + 10), Ok(()));
    }
    assert_eq!(verifier.seen.lock().expect("lock").len(), 2);
    assert_eq!(
        check_at(&verifier, &grants[0], NOW + 11),
        Err(Refusal::Overflow),
        "forgotten, still refused"
    );
    assert_eq!(
        check_at(&verifier, &grants[2], NOW + 11),
        Err(Refusal::Replayed)
    );
    let newer = metadata(mint(&key(7), &call, NOW + 5, 9));
    assert_eq!(check_at(&verifier, &newer, NOW + 11), Ok(()));
}

#[test]
fn grants_older_than_max_age_leave_the_guard() {
    let verifier = verifier();
    let (call, _) = call("{}");
    for i in 0..100 {
        let grant = metadata(mint(&key(7), &call, NOW + i * 1_000, i));
        assert_eq!(check_at(&verifier, &grant, NOW + i * 1_000), Ok(()));
    }
    assert_eq!(
        verifier.seen.lock().expect("lock").len(),
        61,
        "the last 60 s and the one issued exactly at the horizon"
    );
}

#[test]
fn keys_are_never_shown_and_must_be_whole() {
    let key = CallKey::generate().expect("random");
    assert_eq!(format!("{key:?}"), "CallKey(<redacted>)");
    assert_ne!(key, CallKey::generate().expect("random"));
    assert_eq!(CallKey::from_bytes(key.as_bytes()).expect("32 bytes"), key);
    assert!(matches!(
        CallKey::from_bytes(&[1; 31]),
        Err(KeyError::Length(31))
    ));
    assert!(matches!(CallKey::from_bytes(&[]), Err(KeyError::Length(0))));
}

proptest! {
    #[test]
    fn a_grant_reads_v1_issue_time_nonce_and_tag(issued in any::<u64>(), nonce in any::<u64>()) {
        let (call, _) = call("{}");
        let grant = mint(&key(7), &call, issued, nonce);
        let tag = hmac::sign(&key(7).hmac, &call.message(issued, nonce));
        let expected = format!("v1.{issued}.{nonce:016x}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()));
        prop_assert_eq!(grant.to_str().expect("ascii"), expected);
    }

    #[test]
    fn any_changed_byte_of_a_grant_is_refused(index in 0usize..64, byte in 0x21u8..0x7f) {
        let (call, _) = call("{}");
        let good = mint(&key(7), &call, NOW, 1);
        let mut text = good.to_str().expect("ascii").as_bytes().to_vec();
        let index = index % text.len();
        prop_assume!(text[index] != byte);
        text[index] = byte;
        let Ok(text) = String::from_utf8(text) else { return Ok(()) };
        let Ok(value) = text.parse::<AsciiMetadataValue>() else { return Ok(()) };
        prop_assert!(check_at(&verifier(), &metadata(value), NOW).is_err(), "{}", text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[ -~]{0,200}") {
        if let Ok(value) = text.parse::<AsciiMetadataValue>() {
            prop_assert!(check_at(&verifier(), &metadata(value), NOW).is_err());
        }
    }
}
