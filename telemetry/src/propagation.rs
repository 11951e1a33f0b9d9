//! W3C trace context (`traceparent`, `tracestate`) across every hop: read
//! from a call's gRPC metadata or HTTP headers, and passed on to the next
//! hop as metadata, headers or environment variables.
//!
//! With traces exported ([`crate::tracing_enabled`]), the context passed on
//! is the current span's, so the next hop's spans are its children. Without,
//! the incoming context is passed on unchanged (after validation), so a
//! registry that does not export does not break the trace of an agent and a
//! tool that do.

use std::collections::HashMap;
use std::sync::LazyLock;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::{
    propagation::TraceContextPropagator,
    trace::{IdGenerator as _, RandomIdGenerator},
};
use tonic::metadata::AsciiMetadataKey;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The `traceparent` header and metadata key.
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` header and metadata key.
pub const TRACESTATE: &str = "tracestate";
/// The environment variable a command tool finds its `traceparent` in.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
/// The environment variable a command tool finds its `tracestate` in.
pub const TRACESTATE_ENV: &str = "TRACESTATE";

/// A valid W3C trace context, or none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id>-<span id>-<flags>`; `None` when there is no (valid)
    /// context.
    pub traceparent: Option<String>,
    /// Vendor entries, passed on with a valid `traceparent` only.
    pub tracestate: Option<String>,
    /// Whether this process exports the call's spans ([`TraceContext::decide`]).
    traced: bool,
}

struct Fields<'a>(HashMap<&'static str, &'a str>);

impl Extractor for Fields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).copied()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().copied().collect()
    }
}

#[derive(Default)]
struct Written(HashMap<String, String>);

impl Injector for Written {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

impl TraceContext {
    /// The context `get` finds (a metadata map, a header map, ...), when its
    /// `traceparent` is valid; `tracestate` is kept only with it, and
    /// dropped when malformed (as the W3C recommendation says).
    fn read<'a>(get: impl Fn(&'static str) -> Option<&'a str>) -> Self {
        let mut fields = HashMap::new();
        for key in [TRACEPARENT, TRACESTATE] {
            if let Some(value) = get(key) {
                fields.insert(key, value);
            }
        }
        if !fields.contains_key(TRACEPARENT) {
            return Self::default();
        }
        let cx = TraceContextPropagator::new().extract(&Fields(fields));
        Self::of(&cx)
    }

    /// The context of `cx`'s span, or none when it has no valid one.
    fn of(cx: &opentelemetry::Context) -> Self {
        if !cx.span().span_context().is_valid() {
            return Self::default();
        }
        let mut written = Written::default();
        TraceContextPropagator::new().inject_context(cx, &mut written);
        Self {
            traceparent: written.0.remove(TRACEPARENT),
            tracestate: written.0.remove(TRACESTATE).filter(|s| !s.is_empty()),
            traced: false,
        }
    }

    /// The head sampling decision for a call arriving with this context,
    /// made once where the call enters the process ([`crate::sampler`]).
    /// Not sampled, and with no context to pass on, the call gets a fresh
    /// one with the sampled flag clear, so the next hop does not start a
    /// trace of its own. Without trace export: unchanged, not traced.
    #[must_use]
    pub fn decide(mut self) -> Self {
        let Some(sampler) = crate::head_sampler() else {
            return self;
        };
        let incoming = self.traceparent.as_deref().and_then(parse);
        let trace_id = incoming.map_or_else(random_trace_id, |(id, _)| id);
        self.traced = sampler.samples(incoming.map(|(_, sampled)| sampled), trace_id);
        if !self.traced && self.traceparent.is_none() {
            let span_id = u64::from_be_bytes(RandomIdGenerator::default().new_span_id().to_bytes());
            self.traceparent = Some(format!("00-{trace_id:032x}-{span_id:016x}-00"));
        }
        self
    }

    /// Whether this process exports the call's spans: traces are exported
    /// and [`TraceContext::decide`] sampled it.
    pub fn is_traced(&self) -> bool {
        self.traced
    }

    /// The context a gRPC call carries in its metadata.
    pub fn from_metadata(metadata: &tonic::metadata::MetadataMap) -> Self {
        // The keys parsed once: every call is looked up for both.
        static KEYS: LazyLock<[AsciiMetadataKey; 2]> = LazyLock::new(|| {
            [
                AsciiMetadataKey::from_static(TRACEPARENT),
                AsciiMetadataKey::from_static(TRACESTATE),
            ]
        });
        Self::read(|key| {
            let key = &KEYS[usize::from(key != TRACEPARENT)];
            metadata.get(key).and_then(|v| v.to_str().ok())
        })
    }

    /// The context an HTTP request carries in its headers.
    pub fn from_headers(headers: &http::HeaderMap) -> Self {
        Self::read(|key| headers.get(key).and_then(|v| v.to_str().ok()))
    }

    /// The context a command tool finds in its environment.
    pub fn from_env() -> Self {
        let traceparent = std::env::var(TRACEPARENT_ENV).ok();
        let tracestate = std::env::var(TRACESTATE_ENV).ok();
        Self::read(|key| match key {
            TRACEPARENT => traceparent.as_deref(),
            _ => tracestate.as_deref(),
        })
    }

    /// The context to pass on from inside `span`: the span's own when the
    /// call is traced (the next hop is its child), `self` otherwise.
    pub fn onward(&self, span: &tracing::Span) -> Self {
        if !self.traced || !crate::tracing_enabled() {
            return self.clone();
        }
        let own = Self {
            traced: true,
            ..Self::of(&span.context())
        };
        if own.traceparent.is_some() {
            own
        } else {
            self.clone()
        }
    }

    /// Makes `span` a child of this context, when the call is traced and
    /// there is one; a span with no remote parent starts a trace.
    pub fn parent(&self, span: &tracing::Span) {
        if !self.traced || !crate::tracing_enabled() || self.traceparent.is_none() {
            return;
        }
        let mut fields = HashMap::new();
        if let Some(parent) = &self.traceparent {
            fields.insert(TRACEPARENT, parent.as_str());
        }
        if let Some(state) = &self.tracestate {
            fields.insert(TRACESTATE, state.as_str());
        }
        let cx = TraceContextPropagator::new().extract(&Fields(fields));
        // Fails only when no OpenTelemetry layer is installed.
        let _ = span.set_parent(cx);
    }

    /// Writes the context into a gRPC call's metadata.
    pub fn inject_metadata(&self, metadata: &mut tonic::metadata::MetadataMap) {
        for (key, value) in self.fields() {
            if let Ok(value) = value.parse() {
                metadata.insert(key, value);
            }
        }
    }

    /// Writes the context into an HTTP request's headers.
    pub fn inject_headers(&self, headers: &mut http::HeaderMap) {
        for (key, value) in self.fields() {
            if let Ok(value) = http::HeaderValue::from_str(value) {
                headers.insert(key, value);
            }
        }
    }

    /// The environment variables a command tool is given: `TRACEPARENT`
    /// and `TRACESTATE`, as the OpenTelemetry environment-carrier
    /// convention names them.
    pub fn env(&self) -> Vec<(&'static str, &str)> {
        self.fields()
            .map(|(key, value)| {
                let name = if key == TRACEPARENT {
                    TRACEPARENT_ENV
                } else {
                    TRACESTATE_ENV
                };
                (name, value)
            })
            .collect()
    }

    /// The trace id, 32 hex digits, when there is a context.
    pub fn trace_id(&self) -> Option<&str> {
        self.traceparent.as_deref().and_then(|p| p.get(3..35))
    }

    fn fields(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let parent = self.traceparent.as_deref();
        let state = parent.and(self.tracestate.as_deref());
        [(TRACEPARENT, parent), (TRACESTATE, state)]
            .into_iter()
            .filter_map(|(key, value)| value.map(|v| (key, v)))
    }
}

/// The trace id and sampled flag of a valid `traceparent`.
fn parse(traceparent: &str) -> Option<(u128, bool)> {
    let trace_id = u128::from_str_radix(traceparent.get(3..35)?, 16).ok()?;
    let flags = u8::from_str_radix(traceparent.get(53..55)?, 16).ok()?;
    Some((trace_id, flags & 1 == 1))
}

fn random_trace_id() -> u128 {
    u128::from_be_bytes(RandomIdGenerator::default().new_trace_id().to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        for (key, value) in pairs {
            headers.insert(*key, http::HeaderValue::from_str(value).expect("valid"));
        }
        headers
    }

    #[test]
    fn a_valid_context_passes_through_unchanged() {
        let cx = TraceContext::from_headers(&headers(&[
            (TRACEPARENT, PARENT),
            (TRACESTATE, "vendor=opaque"),
        ]));
        assert_eq!(cx.traceparent.as_deref(), Some(PARENT));
        assert_eq!(cx.tracestate.as_deref(), Some("vendor=opaque"));
        assert_eq!(cx.trace_id(), Some("0af7651916cd43dd8448eb211c80319c"));
        let mut out = http::HeaderMap::new();
        cx.onward(&tracing::Span::none()).inject_headers(&mut out);
        assert_eq!(
            out,
            headers(&[(TRACEPARENT, PARENT), (TRACESTATE, "vendor=opaque")])
        );
        assert_eq!(
            cx.env(),
            vec![(TRACEPARENT_ENV, PARENT), (TRACESTATE_ENV, "vendor=opaque")]
        );
    }

    #[test]
    fn malformed_contexts_are_dropped() {
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nx: y",
        ] {
            let Ok(value) = http::HeaderValue::from_str(bad) else {
                continue;
            };
            let mut h = http::HeaderMap::new();
            h.insert(TRACEPARENT, value);
            h.insert(TRACESTATE, http::HeaderValue::from_static("a=b"));
            assert_eq!(
                TraceContext::from_headers(&h),
                TraceContext::default(),
                "{bad}"
            );
        }
        // A tracestate alone is no context.
        let only_state = TraceContext::from_headers(&headers(&[(TRACESTATE, "a=b")]));
        assert_eq!(only_state, TraceContext::default());
    }

    proptest::proptest! {
        #[test]
        fn any_header_value_is_read_without_panicking(parent in ".{0,80}", state in ".{0,80}") {
            let mut h = http::HeaderMap::new();
            if let (Ok(p), Ok(s)) = (http::HeaderValue::from_str(&parent), http::HeaderValue::from_str(&state)) {
                h.insert(TRACEPARENT, p);
                h.insert(TRACESTATE, s);
            }
            let cx = TraceContext::from_headers(&h);
            if let Some(p) = &cx.traceparent {
                proptest::prop_assert_eq!(p.len(), 55);
            }
        }
    }
}
