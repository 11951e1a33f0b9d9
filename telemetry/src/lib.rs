//! How the toolmesh binaries log: the same flags, the same formats, set up
//! in one place.
//!
//! - `--log FILTER` (`RUST_LOG`): what to log, e.g. `info` or
//!   `toolmesh_registry=debug,info`.
//! - `--log-format text|json` (`TOOLMESH_LOG_FORMAT`): one human-readable
//!   line per event, or one JSON object per line for a log pipeline.
//! - Colour only when standard output is a terminal and `NO_COLOR` is not
//!   set, so log files and pipes get plain text.
//! - [`shown`]: client-supplied text in errors and log lines, bounded and
//!   escaped; [`causes`]: an error and its sources on one line.

use std::io::IsTerminal as _;

pub mod shown;

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
}

/// Whether to colour the output: a terminal, and no `NO_COLOR`.
fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber `args` describe, writing to stdout.
pub fn init(args: &LogArgs) -> Result<(), TelemetryError> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.filter).map_err(|e| {
        TelemetryError::Filter {
            filter: args.filter.clone(),
            reason: e.to_string(),
        }
    })?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let installed = match args.log_format {
        LogFormat::Text => builder.with_ansi(colour()).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    installed.map_err(|_| TelemetryError::AlreadySet)
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
        let error = init(&LogArgs {
            filter: "info,=[".into(),
            log_format: LogFormat::Text,
        })
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
