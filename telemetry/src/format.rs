//! Log line formats that name the trace: inside a span whose trace is
//! exported, every line carries `trace_id` and `span_id`, so a log search
//! and a trace view lead to each other.

use std::fmt;

use opentelemetry::trace::TraceContextExt as _;
use serde_json::{Map, Value};
use tracing::{Event, Subscriber, field::Field};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::{
    fmt::{
        FmtContext, FormatEvent, FormatFields, FormattedFields,
        format::{self, Writer},
        time::{FormatTime as _, SystemTime},
    },
    registry::LookupSpan,
};

/// The current span's trace and span ids (hex), when its trace is exported.
pub fn current_ids() -> Option<(String, String)> {
    if !crate::tracing_enabled() {
        return None;
    }
    let span = tracing::Span::current();
    if span.is_none() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let ids = otel.span_context();
    ids.is_valid()
        .then(|| (ids.trace_id().to_string(), ids.span_id().to_string()))
}

/// The ids [`current_ids`] gives, for a line written in the current span:
/// none for an event written outside every span (`parent: None`), such as
/// the registry's call line, which names its trace in a field of its own.
fn ids_of(event: &Event<'_>) -> Option<(String, String)> {
    if event.is_root() { None } else { current_ids() }
}

/// One JSON object per line: `timestamp`, `level`, the event's fields
/// (`message` among them) at the top level, `target`, the enclosing
/// `spans` (outermost first, each with its `name` and fields), and
/// `trace_id` and `span_id` inside a traced span.
#[derive(Debug, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        line.insert("timestamp".into(), Value::String(timestamp));
        line.insert(
            "level".into(),
            Value::String(event.metadata().level().to_string()),
        );
        event.record(&mut JsonVisitor(&mut line));
        line.insert(
            "target".into(),
            Value::String(event.metadata().target().to_owned()),
        );
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope
                .from_root()
                .map(|span| {
                    let mut object = Map::new();
                    object.insert("name".into(), Value::String(span.name().to_owned()));
                    let extensions = span.extensions();
                    if let Some(fields) = extensions.get::<FormattedFields<N>>()
                        && let Ok(Value::Object(fields)) =
                            serde_json::from_str::<Value>(fields.as_str())
                    {
                        object.extend(fields);
                    }
                    Value::Object(object)
                })
                .collect();
            if !spans.is_empty() {
                line.insert("spans".into(), Value::Array(spans));
            }
        }
        if let Some((trace_id, span_id)) = ids_of(event) {
            line.insert("trace_id".into(), Value::String(trace_id));
            line.insert("span_id".into(), Value::String(span_id));
        }
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl tracing::field::Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::from(crate::causes(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::from(format!("{value:?}")));
    }
}

/// The human-readable format, with ` trace_id=… span_id=…` at the end of
/// each line written inside a traced span (not on a terminal, whose lines
/// keep their colours instead).
#[derive(Debug)]
pub struct TextLines(pub format::Format<format::Full, crate::text::LineTime>);

impl<S, N> FormatEvent<S, N> for TextLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let ids = if writer.has_ansi_escapes() {
            None
        } else {
            ids_of(event)
        };
        let Some((trace_id, span_id)) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let line = line.trim_end_matches('\n');
        writeln!(writer, "{line} trace_id={trace_id} span_id={span_id}")
    }
}
