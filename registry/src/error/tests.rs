use super::*;

#[test]
fn rate_limited_carries_retry_info_and_quota_failure() {
    let status = RegistryError::RateLimited {
        tool: "t".into(),
        caller: None,
        retry_after: Duration::from_millis(250),
        rate: 2.0,
        burst: 1,
    }
    .to_status();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().ends_with("retry in 250ms"),
        "{}",
        status.message()
    );
    let details = status.get_error_details();
    let retry = details.retry_info().expect("retry info");
    assert_eq!(retry.retry_delay, Some(Duration::from_millis(250)));
    let quota = details.quota_failure().expect("quota failure");
    assert_eq!(quota.violations[0].subject, "tool:t");

    let status = RegistryError::RateLimited {
        tool: "t".into(),
        caller: Some("alice".into()),
        retry_after: Duration::from_secs(1),
        rate: 1.0,
        burst: 1,
    }
    .to_status();
    assert!(
        status
            .message()
            .starts_with("caller \"alice\"'s rate limit of \"t\""),
        "{}",
        status.message()
    );
    let details = status.get_error_details();
    let quota = details.quota_failure().expect("quota failure");
    assert_eq!(quota.violations[0].subject, "caller:alice/tool:t");
}

#[test]
fn invalid_arguments_list_every_violation() {
    let status = RegistryError::ArgumentsInvalid {
        tool: "t".into(),
        violations: vec![
            Violation {
                pointer: "/a".into(),
                message: "x".into(),
            },
            Violation {
                pointer: "/b/0".into(),
                message: "y".into(),
            },
        ],
    }
    .to_status();
    assert_eq!(status.code(), Code::InvalidArgument);
    let details = status.get_error_details();
    let fields: Vec<_> = details
        .bad_request()
        .expect("bad request")
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields, ["/a", "/b/0"]);
}

#[test]
fn not_found_names_the_tool() {
    let status = RegistryError::ToolNotFound {
        tool: "nope".into(),
    }
    .to_status();
    assert_eq!(status.code(), Code::NotFound);
    let details = status.get_error_details();
    let info = details.resource_info().expect("resource info");
    assert_eq!(info.resource_name, "nope");
    assert_eq!(info.resource_type, TOOL_RESOURCE_TYPE);
}
