//! How the toolmesh binaries log, trace and report metrics: the same
//! flags, the same formats, set up in one place.
//!
//! - `--log FILTER` (`RUST_LOG`): what to log, e.g. `info` or
//!   `toolmesh_registry=debug,info`.
//! - `--log-format text|json` (`TOOLMESH_LOG_FORMAT`): one human-readable
//!   line per event, or one JSON object per line for a log pipeline; inside
//!   a traced span, each line names its `trace_id` ([`format`](mod@format)).
//! - Colour only when standard output is a terminal and `NO_COLOR` is not
//!   set, so log files and pipes get plain text.
//! - Spans exported over OTLP when the `OTEL_*` variables name an endpoint
//!   ([`otel`]); W3C trace context read and passed on at every hop
//!   ([`propagation`]).
//! - [`admin`]: the admin HTTP port (metrics, liveness, readiness);
//!   [`labels`]: metric label values with a bounded number of names.
//! - [`shown`]: client-supplied text in errors and log lines, bounded and
//!   escaped; [`causes`]: an error and its sources on one line.
//! - [`filter`]: a log filter with a chatty dependency (rmcp) quieted;
//!   [`output`]: standard output, in blocks on the threads that ask;
//!   [`throttle`]: lines an outsider can cause, at most one per period.

use std::{
    io::IsTerminal as _,
    sync::atomic::{AtomicBool, Ordering},
};

use tracing_subscriber::{Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _};

pub mod admin;
pub mod families;
pub mod filter;
pub mod format;
pub mod labels;
pub mod otel;
pub mod output;
pub mod propagation;
pub mod sampler;
pub mod shown;
pub mod spans;
pub mod text;
pub mod throttle;

pub use propagation::TraceContext;

static TRACING: AtomicBool = AtomicBool::new(false);
static SAMPLER: std::sync::OnceLock<sampler::Sampler> = std::sync::OnceLock::new();

/// The head sampler, when spans are exported.
pub(crate) fn head_sampler() -> Option<&'static sampler::Sampler> {
    if tracing_enabled() {
        SAMPLER.get()
    } else {
        None
    }
}

/// A span for one call's work: an `info` span, exported, when `$traced`
/// (the call's [`TraceContext::is_traced`]); otherwise a `debug` span for
/// the logs alone (its target ends in `::untraced`, which the exporter
/// skips), so an unsampled call costs what it costs with tracing off.
///
/// At the default filter (`info`) an untraced call has no span at all: a
/// span costs its allocation, the formatting of its fields and a lookup at
/// every poll, about a tenth of the registry's CPU per call for its three,
/// and the lines written inside a call name its tool and instance in
/// their own fields. `--log debug` (or `--log toolmesh_registry=debug,info`)
/// puts the spans back around those lines.
#[macro_export]
macro_rules! call_span {
    ($traced:expr, $name:expr $(, $($field:tt)*)?) => {
        if $traced {
            ::tracing::info_span!($name $(, $($field)*)?)
        } else {
            ::tracing::debug_span!(target: concat!(module_path!(), "::untraced"), $name $(, $($field)*)?)
        }
    };
}

/// Whether spans are exported (an OTLP endpoint is configured and
/// [`init`] installed the exporter).
pub fn tracing_enabled() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// How each log line is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`.
    Json,
}

/// The logging flags every toolmesh binary takes.
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// What to log: a level (`info`, `debug`) or per-module directives
    /// (`toolmesh_registry=debug,info`).
    #[arg(long = "log", env = "RUST_LOG", default_value = "info")]
    pub filter: String,
    /// How each line is written: `text` or `json`.
    #[arg(long, env = "TOOLMESH_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Default for LogArgs {
    fn default() -> Self {
        Self {
            filter: "info".into(),
            log_format: LogFormat::Text,
        }
    }
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The filter does not parse.
    #[error(
        "invalid log filter {filter:?} (--log / RUST_LOG): {reason}; try `info` or `toolmesh_registry=debug,info`"
    )]
    Filter {
        /// The filter given.
        filter: String,
        /// What the parser said.
        reason: String,
    },
    /// A global subscriber is already installed.
    #[error("logging is already set up")]
    AlreadySet,
    /// The `OTEL_*` variables ask for what cannot be done.
    #[error("tracing: {0}")]
    Otel(String),
}

/// Flushes the spans not yet exported when dropped: keep it until the
/// process ends.
#[must_use = "dropping it stops trace export"]
pub struct Telemetry {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("exporting", &self.provider.is_some())
            .finish()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            TRACING.store(false, Ordering::Relaxed);
            if let Err(error) = provider.shutdown() {
                eprintln!("tracing: flushing the last spans failed: {error}");
            }
        }
    }
}

/// Whether to colour the output: a terminal, and no `NO_COLOR`.
fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber `args` describe, writing logs to stdout,
/// and exports spans as the `OTEL_*` variables say, naming the process
/// `service` unless they name it. Call inside a tokio runtime (the gRPC
/// exporter needs one).
pub fn init(args: &LogArgs, service: &str) -> Result<Telemetry, TelemetryError> {
    let export = otel::TraceExport::from_vars(|name| std::env::var(name).ok())?;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.filter).map_err(|e| {
        TelemetryError::Filter {
            filter: args.filter.clone(),
            reason: e.to_string(),
        }
    })?;
    let ansi = colour() && args.log_format == LogFormat::Text;
    output::init_output();
    let fields = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(output::Stdout);
    let text = format::TextLines(
        tracing_subscriber::fmt::format()
            .with_ansi(ansi)
            .with_timer(text::LineTime),
    );
    let logs = match args.log_format {
        // On a terminal the fields keep tracing-subscriber's colours.
        LogFormat::Text if ansi => fields.event_format(text).boxed(),
        LogFormat::Text => fields
            .fmt_fields(text::TextFields)
            .event_format(text)
            .boxed(),
        LogFormat::Json => fields
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(format::JsonLines)
            .boxed(),
    };
    let provider = export
        .as_ref()
        .map(|export| export.provider(service))
        .transpose()?;
    // Spans are exported whatever the log filter says: toolmesh's own, at
    // info and above (not the transport crates' debug spans).
    let traces = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(otel::tracer(provider))
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                meta.target().starts_with("toolmesh")
                    && !meta.target().ends_with("::untraced")
                    && *meta.level() <= tracing::Level::INFO
            }))
    });
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces)
        .try_init()
        .map_err(|_| TelemetryError::AlreadySet)?;
    if let Some(export) = &export {
        let (sampler, warning) = sampler::Sampler::from_vars(|name| std::env::var(name).ok());
        let _ = SAMPLER.set(sampler);
        if let Some(warning) = warning {
            tracing::warn!("{warning}");
        }
        TRACING.store(true, Ordering::Relaxed);
        tracing::info!(endpoint = %export.endpoint, protocol = %export.protocol, "exporting traces over OTLP");
    }
    Ok(Telemetry { provider })
}

/// `error` and its sources on one line, `outer: inner`, each said once: a
/// source whose text the line already contains (many errors quote their
/// source) is left out.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn flags_parse_and_default() {
        let cli = Cli::try_parse_from(["x"]).expect("no flags needed");
        assert_eq!(cli.log.log_format, LogFormat::Text);
        let cli =
            Cli::try_parse_from(["x", "--log-format", "json", "--log", "debug"]).expect("valid");
        assert_eq!(cli.log.log_format, LogFormat::Json);
        assert_eq!(cli.log.filter, "debug");
        assert!(Cli::try_parse_from(["x", "--log-format", "yaml"]).is_err());
    }

    #[test]
    fn a_bad_filter_is_named_with_an_example() {
        let error = init(
            &LogArgs {
                filter: "info,=[".into(),
                log_format: LogFormat::Text,
            },
            "test",
        )
        .expect_err("invalid");
        assert!(error.to_string().contains("try `info`"), "{error}");
    }

    #[test]
    fn each_cause_is_written_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer: {0}")]
        struct Quoting(#[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Wrapping(#[source] std::io::Error);

        assert_eq!(
            causes(&Quoting(std::io::Error::other("inner"))),
            "outer: inner"
        );
        assert_eq!(
            causes(&Wrapping(std::io::Error::other("inner"))),
            "outer: inner"
        );
    }
}
