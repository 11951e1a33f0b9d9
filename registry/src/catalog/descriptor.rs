//! Rules for tool descriptors: what an announce may carry, and how two
//! descriptors of one tool differ.

use std::time::Duration;

use toolmesh_proto::pb::{RateLimit, ToolDescriptor};

use crate::error::RegistryError;

/// Longest tool name (the function-name limit of the major LLM APIs).
pub const MAX_NAME_LEN: usize = toolmesh_proto::tool_name::MAX_LEN;
pub use toolmesh_proto::rules::{MAX_DESCRIPTION_BYTES, MAX_SCHEMA_BYTES, MAX_TITLE_BYTES};
/// Most tags on one tool.
pub const MAX_TAGS: usize = 32;
/// Longest tag, and longest `version`, in bytes.
pub const MAX_LABEL_BYTES: usize = 64;
/// Smallest accepted rate: one call a day.
pub const MIN_RATE: f64 = 1.0 / 86_400.0;
/// Largest accepted rate.
pub const MAX_RATE: f64 = 1e6;

/// Whether `name` is a valid tool name ([`toolmesh_proto::tool_name`]).
pub fn is_valid_name(name: &str) -> bool {
    toolmesh_proto::tool_name::is_valid(name)
}

/// A validated rate limit with its burst resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// Calls per second.
    pub rate: f64,
    /// Calls allowed at once.
    pub burst: u32,
}

impl Limit {
    /// The limit a descriptor declares, `None` if it is unlimited.
    pub fn of(descriptor: &ToolDescriptor) -> Option<Self> {
        descriptor.rate_limit.as_ref().map(Self::from_proto)
    }

    /// The limit each caller has on the tool, `None` if there is none.
    pub fn per_caller(descriptor: &ToolDescriptor) -> Option<Self> {
        descriptor
            .per_caller_rate_limit
            .as_ref()
            .map(Self::from_proto)
    }

    fn from_proto(limit: &RateLimit) -> Self {
        Self {
            rate: limit.rate,
            burst: resolved_burst(limit),
        }
    }

    /// The time between two tokens (GCRA's emission interval).
    pub fn period(&self) -> Duration {
        Duration::try_from_secs_f64(1.0 / self.rate).unwrap_or(Duration::MAX)
    }
}

fn resolved_burst(limit: &RateLimit) -> u32 {
    if limit.burst > 0 {
        limit.burst
    } else {
        // Truncation is intended: rate is bounded by MAX_RATE.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let burst = limit.rate.ceil().max(1.0) as u32;
        burst
    }
}

/// The timeout a descriptor declares, if any.
pub fn timeout(descriptor: &ToolDescriptor) -> Option<Duration> {
    toolmesh_proto::rules::duration(descriptor.timeout)
}

/// Checks a descriptor's fields (not its schemas, see [`crate::catalog::validate`]).
/// `field` names it in errors, e.g. `tools[2]`; a `timeout` may be at most
/// `max_timeout`.
pub fn check(
    descriptor: &ToolDescriptor,
    field: &str,
    max_timeout: Duration,
) -> Result<(), RegistryError> {
    let name = &descriptor.name;
    let invalid = |sub: &str, reason: String| RegistryError::InvalidDescriptor {
        tool: name.clone(),
        field: format!("{field}.{sub}"),
        reason,
    };
    if !is_valid_name(name) {
        return Err(invalid(
            "name",
            format!(
                "{name:?} must be 1 to {MAX_NAME_LEN} characters of letters, digits, '_', '-' or '.'"
            ),
        ));
    }
    if descriptor.title.len() > MAX_TITLE_BYTES || descriptor.title.contains(char::is_control) {
        return Err(invalid(
            "title",
            format!("must be at most {MAX_TITLE_BYTES} bytes, on one line"),
        ));
    }
    if descriptor.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(invalid(
            "description",
            format!("longer than {MAX_DESCRIPTION_BYTES} bytes"),
        ));
    }
    for (sub, schema) in [
        ("input_schema_json", &descriptor.input_schema_json),
        ("output_schema_json", &descriptor.output_schema_json),
    ] {
        if schema.len() > MAX_SCHEMA_BYTES {
            return Err(invalid(
                sub,
                format!("longer than {MAX_SCHEMA_BYTES} bytes"),
            ));
        }
    }
    if !descriptor.version.is_empty() {
        super::versions::check(&descriptor.version).map_err(|reason| invalid("version", reason))?;
    }
    if descriptor.tags.len() > MAX_TAGS {
        return Err(invalid("tags", format!("more than {MAX_TAGS} tags")));
    }
    if let Some(i) = descriptor
        .tags
        .iter()
        .position(|t| t.is_empty() || t.len() > MAX_LABEL_BYTES)
    {
        return Err(invalid(
            &format!("tags[{i}]"),
            format!("a tag must be 1 to {MAX_LABEL_BYTES} bytes"),
        ));
    }
    for (field, limit) in [
        ("rate_limit.rate", &descriptor.rate_limit),
        (
            "per_caller_rate_limit.rate",
            &descriptor.per_caller_rate_limit,
        ),
    ] {
        if let Some(limit) = limit
            && !(limit.rate.is_finite() && (MIN_RATE..=MAX_RATE).contains(&limit.rate))
        {
            return Err(invalid(
                field,
                format!(
                    "{} must be between {MIN_RATE:.6} and {MAX_RATE} calls per second",
                    limit.rate
                ),
            ));
        }
    }
    for (sub, duration, max) in [
        ("timeout", descriptor.timeout, max_timeout),
        ("task_timeout", descriptor.task_timeout, MAX_TASK_TIMEOUT),
    ] {
        if let Some(t) = duration {
            check_duration(t, max)
                .map_err(|(part, reason)| invalid(&format!("{sub}{part}"), reason))?;
        }
    }
    Ok(())
}

/// Longest a task may run: a week.
pub const MAX_TASK_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// `t` within `0..=max`, or the part of it that is wrong (`""` or
/// `".nanos"`) and why.
fn check_duration(t: prost_types::Duration, max: Duration) -> Result<(), (&'static str, String)> {
    if !(0..1_000_000_000).contains(&t.nanos) {
        return Err((".nanos", format!("{} must be from 0 to 999999999", t.nanos)));
    }
    match Duration::try_from(t) {
        Err(_) => Err(("", "must not be negative".into())),
        Ok(d) if d > max => Err((
            "",
            format!("must be at most {}", humantime::format_duration(max)),
        )),
        Ok(_) => Ok(()),
    }
}

/// How long a call started as a task may run: its `task_timeout`, else
/// its `timeout`, else `default`.
pub fn task_timeout(descriptor: &ToolDescriptor, default: Duration) -> Duration {
    toolmesh_proto::rules::duration(descriptor.task_timeout)
        .or_else(|| timeout(descriptor))
        .unwrap_or(default)
}

/// The descriptor's digest: the SHA-256 (hex) of the canonical JSON
/// ([`super::canonical`]) of every field the model or the call path reads,
/// the schemas as JSON values (so spacing and key order do not change it),
/// limits and timeouts as resolved.
pub fn digest(descriptor: &ToolDescriptor) -> String {
    let schema = |text: &str| -> serde_json::Value {
        serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
    };
    let limit = |l: Option<Limit>| l.map(|l| serde_json::json!({"rate": l.rate, "burst": l.burst}));
    let millis = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let form = serde_json::json!({
        "name": descriptor.name,
        "title": descriptor.title,
        "description": descriptor.description,
        "version": descriptor.version,
        "input_schema": schema(&descriptor.input_schema_json),
        "output_schema": schema(&descriptor.output_schema_json),
        "tags": descriptor.tags,
        "rate_limit": limit(Limit::of(descriptor)),
        "per_caller_rate_limit": limit(Limit::per_caller(descriptor)),
        "timeout_ms": millis(timeout(descriptor)),
        "task_timeout_ms": millis(toolmesh_proto::rules::duration(descriptor.task_timeout)),
        "idempotent": descriptor.idempotent,
        "audit_arguments": descriptor.audit_arguments,
        "read_only": descriptor.read_only,
        "destructive": descriptor.destructive,
        "open_world": descriptor.open_world,
    });
    super::canonical::sha256_hex(&form)
}

/// How `new` differs from `live`, one line per field; empty if they agree.
pub fn differences(live: &ToolDescriptor, new: &ToolDescriptor) -> Vec<String> {
    compare(live, new, ("live", "announced"))
        .into_iter()
        .map(|(_, line)| line)
        .collect()
}

/// How the `live` definition differs from the one an agent was `shown`:
/// each changed field's name, and a line saying how.
pub fn changes(shown: &ToolDescriptor, live: &ToolDescriptor) -> Vec<(&'static str, String)> {
    compare(shown, live, ("shown", "live"))
}

/// Every field on which `a` and `b` differ, named, and a line saying how,
/// the values labelled as `labels` says.
pub(crate) fn compare(
    a: &ToolDescriptor,
    b: &ToolDescriptor,
    labels: (&str, &str),
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut field = |name: &'static str, x: String, y: String| {
        if x != y {
            out.push((
                name,
                format!("{name}: {} {x} != {} {y}", labels.0, labels.1),
            ));
        }
    };
    field(
        "description",
        format!("{:?}", a.description),
        format!("{:?}", b.description),
    );
    field(
        "input_schema_json",
        schema_text(&a.input_schema_json),
        schema_text(&b.input_schema_json),
    );
    field(
        "output_schema_json",
        schema_text(&a.output_schema_json),
        schema_text(&b.output_schema_json),
    );
    field(
        "version",
        format!("{:?}", a.version),
        format!("{:?}", b.version),
    );
    field("tags", format!("{:?}", a.tags), format!("{:?}", b.tags));
    field(
        "rate_limit",
        limit_text(Limit::of(a)),
        limit_text(Limit::of(b)),
    );
    field(
        "per_caller_rate_limit",
        limit_text(Limit::per_caller(a)),
        limit_text(Limit::per_caller(b)),
    );
    field("timeout", timeout_text(a), timeout_text(b));
    field(
        "task_timeout",
        duration_text(a.task_timeout),
        duration_text(b.task_timeout),
    );
    field(
        "idempotent",
        a.idempotent.to_string(),
        b.idempotent.to_string(),
    );
    field(
        "audit_arguments",
        a.audit_arguments.to_string(),
        b.audit_arguments.to_string(),
    );
    field("title", format!("{:?}", a.title), format!("{:?}", b.title));
    for (name, x, y) in [
        ("read_only", a.read_only, b.read_only),
        ("destructive", a.destructive, b.destructive),
        ("open_world", a.open_world, b.open_world),
    ] {
        field(name, hint_text(x), hint_text(y));
    }
    field("name", format!("{:?}", a.name), format!("{:?}", b.name));
    out
}

/// Whether `digest` is written as [`digest`] writes one: 64 lowercase hex
/// digits.
pub fn is_digest(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn hint_text(hint: Option<bool>) -> String {
    hint.map_or_else(|| "unset".into(), |h| h.to_string())
}

/// Schemas compare as JSON values, so formatting differences do not conflict.
fn schema_text(schema: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(schema) {
        Ok(value) => value.to_string(),
        Err(_) => format!("{schema:?}"),
    }
}

fn limit_text(limit: Option<Limit>) -> String {
    limit.map_or_else(
        || "unlimited".into(),
        |l| format!("{}/s burst {}", l.rate, l.burst),
    )
}

fn timeout_text(d: &ToolDescriptor) -> String {
    duration_text(d.timeout)
}

fn duration_text(d: Option<prost_types::Duration>) -> String {
    toolmesh_proto::rules::duration(d).map_or_else(
        || "default".into(),
        |t| humantime::format_duration(t).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn descriptor() -> ToolDescriptor {
        ToolDescriptor {
            name: "word_count".into(),
            description: "Count words".into(),
            input_schema_json: r#"{"type":"object"}"#.into(),
            rate_limit: Some(RateLimit {
                rate: 2.5,
                burst: 0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn timeouts_versions_and_tags_are_bounded() {
        let hour = Duration::from_secs(3600);
        let field = |d: &ToolDescriptor| match check(d, "tools[0]", hour) {
            Err(RegistryError::InvalidDescriptor { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let with_timeout = |seconds, nanos| ToolDescriptor {
            timeout: Some(prost_types::Duration { seconds, nanos }),
            ..descriptor()
        };
        assert_eq!(field(&with_timeout(1, -1)), "tools[0].timeout.nanos");
        assert_eq!(
            field(&with_timeout(1, 1_000_000_000)),
            "tools[0].timeout.nanos"
        );
        assert_eq!(field(&with_timeout(-1, 0)), "tools[0].timeout");
        assert_eq!(field(&with_timeout(i64::MAX, 0)), "tools[0].timeout");
        assert_eq!(field(&with_timeout(3600, 1)), "tools[0].timeout");
        assert!(check(&with_timeout(3600, 0), "tools[0]", hour).is_ok());
        assert!(check(&with_timeout(0, 999_999_999), "tools[0]", hour).is_ok());

        let versioned = ToolDescriptor {
            version: "v".repeat(MAX_LABEL_BYTES + 1),
            ..descriptor()
        };
        assert_eq!(field(&versioned), "tools[0].version");
        let tagged = ToolDescriptor {
            tags: vec!["ok".into(), String::new()],
            ..descriptor()
        };
        assert_eq!(field(&tagged), "tools[0].tags[1]");
        let tagged = ToolDescriptor {
            tags: vec!["t".repeat(MAX_LABEL_BYTES + 1)],
            ..descriptor()
        };
        assert_eq!(field(&tagged), "tools[0].tags[0]");
    }

    #[test]
    fn burst_defaults_to_ceil_of_rate() {
        assert_eq!(Limit::of(&descriptor()).map(|l| l.burst), Some(3));
    }

    /// A digest is kept (pins, approvals, Redis) and compared across
    /// versions of the registry: the same descriptor must always give the
    /// same one. Pinned here for a descriptor that uses every kind of JSON
    /// value and text that needs escaping.
    #[test]
    fn the_digest_of_a_descriptor_never_changes() {
        let rich = ToolDescriptor {
            title: "Wörter zählen \"quoted\" \\ back\tslash ✓ 😀".into(),
            version: "1.2.3".into(),
            tags: vec!["text".into(), "ünïcode".into()],
            input_schema_json: r#"{"type":"object","required":["x"],"properties":{"x":{"type":"number","minimum":-1.5e-7,"maximum":12345678901234567890,"default":0.1},"y":{"enum":[null,true,false,"\u0001\n"],"description":"line\nbreak"}}}"#.into(),
            output_schema_json: "not json".into(),
            per_caller_rate_limit: Some(RateLimit { rate: 0.3, burst: 7 }),
            timeout: Some(prost_types::Duration { seconds: 2, nanos: 500_000_000 }),
            idempotent: true,
            read_only: Some(false),
            ..descriptor()
        };
        assert_eq!(
            digest(&rich),
            "1e8c9bbc1ea7e77e85c5a5bb086d70494d92e07432b02b40453d79d286898d73"
        );
    }

    #[test]
    fn the_digest_follows_meaning_not_spelling() {
        let a = descriptor();
        let mut spaced = a.clone();
        spaced.input_schema_json = format!("  {}\n", a.input_schema_json);
        assert_eq!(digest(&a), digest(&spaced));
        assert_eq!(digest(&a).len(), 64);
        let mut changed = a.clone();
        changed.description.push('!');
        assert_ne!(digest(&a), digest(&changed));
        let mut hinted = a.clone();
        hinted.destructive = Some(true);
        assert_ne!(digest(&a), digest(&hinted));
        // Key order in a schema, and a burst spelled as what 0 means.
        let mut ordered = a.clone();
        ordered.input_schema_json =
            r#"{"type":"object","properties":{"x":{"type":"string","minLength":1}}}"#.into();
        let mut reordered = ordered.clone();
        reordered.input_schema_json =
            r#"{ "properties": {"x": {"minLength": 1, "type": "string"}}, "type": "object" }"#
                .into();
        assert_eq!(digest(&ordered), digest(&reordered));
        let mut explicit = a.clone();
        explicit.rate_limit = Some(RateLimit {
            rate: 2.5,
            burst: 3,
        });
        assert_eq!(digest(&a), digest(&explicit));
        let mut versioned = a.clone();
        versioned.version = "1.0.0".into();
        assert_ne!(digest(&a), digest(&versioned));
    }

    #[test]
    fn identical_descriptors_do_not_differ_even_if_schema_spacing_does() {
        let mut b = descriptor();
        b.input_schema_json = r#"{ "type" : "object" }"#.into();
        assert!(differences(&descriptor(), &b).is_empty());
    }

    #[test]
    fn differences_name_the_field() {
        let mut b = descriptor();
        b.version = "2".into();
        b.idempotent = true;
        let diff = differences(&descriptor(), &b);
        assert_eq!(diff.len(), 2, "{diff:?}");
        assert!(diff[0].starts_with("version:"));
        assert!(diff[1].starts_with("idempotent:"));

        let mut c = descriptor();
        c.title = "Add".into();
        c.destructive = Some(false);
        let diff = differences(&descriptor(), &c);
        assert_eq!(
            diff,
            [
                r#"title: live "" != announced "Add""#,
                "destructive: live unset != announced false"
            ]
        );
    }

    #[test]
    fn a_title_is_one_short_line() {
        let field = |d: &ToolDescriptor| match check(d, "tools[0]", Duration::from_secs(60)) {
            Err(RegistryError::InvalidDescriptor { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        for title in ["two\nlines".to_owned(), "t".repeat(MAX_TITLE_BYTES + 1)] {
            let d = ToolDescriptor {
                title,
                ..descriptor()
            };
            assert_eq!(field(&d), "tools[0].title");
        }
        let fine = ToolDescriptor {
            title: "Word count".into(),
            ..descriptor()
        };
        assert!(check(&fine, "tools[0]", Duration::from_secs(60)).is_ok());
    }

    #[test]
    fn bad_rates_are_refused() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e9] {
            let mut d = descriptor();
            d.rate_limit = Some(RateLimit { rate, burst: 1 });
            assert!(
                check(&d, "tools[0]", Duration::from_secs(3600)).is_err(),
                "rate {rate}"
            );
        }
    }

    proptest! {
        #[test]
        fn every_description_is_its_own_digest(x in "\\PC{0,40}", y in "\\PC{0,40}") {
            let with = |d: &str| ToolDescriptor { description: d.into(), ..descriptor() };
            prop_assert_eq!(digest(&with(&x)) == digest(&with(&y)), x == y);
            prop_assert!(is_digest(&digest(&with(&x))));
        }

        #[test]
        fn names_follow_the_llm_function_name_rules(name in "\\PC{0,80}") {
            let ok = is_valid_name(&name);
            let expected = (1..=64).contains(&name.len())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
            prop_assert_eq!(ok, expected);
        }

        #[test]
        fn period_is_finite_for_accepted_rates(rate in MIN_RATE..MAX_RATE) {
            let limit = Limit { rate, burst: 1 };
            prop_assert!(limit.period() > Duration::ZERO);
            prop_assert!(limit.period() <= Duration::from_secs(86_400));
        }
    }
}
