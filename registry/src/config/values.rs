//! Flag values whose parse errors speak the user's words: what was given,
//! where (the flag or its environment variable), what is expected, and an
//! example.

use std::{ffi::OsStr, time::Duration};

use clap::{
    Arg, Command,
    builder::TypedValueParser,
    error::{Error as ClapError, ErrorKind},
    parser::ValueSource,
};
use toolmesh_proto::listen::ListenAddr;

/// A clap value parser from a function whose error is a sentence; the
/// error clap prints names the flag or the environment variable the value
/// came from.
#[derive(Clone, Copy)]
pub struct Explained<T>(fn(&str) -> Result<T, String>);

/// `--lease-ttl 10s`, `TOOLMESH_LEASE_TTL=500ms`: a duration as people
/// write it.
pub fn duration() -> Explained<Duration> {
    Explained(parse_duration)
}

/// `--listen 127.0.0.1:50051` or `localhost:50051`.
pub fn listen() -> Explained<ListenAddr> {
    Explained(|text| {
        text.parse()
            .map_err(|e: toolmesh_proto::listen::ListenError| e.to_string())
    })
}

/// A duration with its unit (`10s`, `500ms`, `1m 30s`); the error says
/// what is wrong and shows those examples.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    use humantime::DurationError as E;
    humantime::parse_duration(text).map_err(|error| {
        let problem = match error {
            E::Empty => "it is empty".to_owned(),
            E::UnknownUnit { unit, .. } if unit.is_empty() => "the unit is missing".to_owned(),
            E::UnknownUnit { unit, .. } => format!("{unit:?} is not a unit of time"),
            E::NumberOverflow => "it is too large, or finer than a nanosecond".to_owned(),
            E::InvalidCharacter(_) | E::NumberExpected(_) => {
                "it is not a number followed by a unit".to_owned()
            }
        };
        format!(
            "{text:?} is not a duration: {problem}; write a number and a unit (ms, s, m, h), e.g. 10s, 500ms or 1m 30s"
        )
    })
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Explained<T> {
    type Value = T;

    fn parse_ref(&self, cmd: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<T, ClapError> {
        self.parse_ref_(cmd, arg, value, ValueSource::CommandLine)
    }

    fn parse_ref_(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
        source: ValueSource,
    ) -> Result<T, ClapError> {
        let text = value.to_string_lossy();
        (self.0)(&text).map_err(|reason| {
            let origin = match (source, arg) {
                (ValueSource::EnvVariable, Some(arg)) => {
                    arg.get_env().map(|env| env.to_string_lossy().into_owned())
                }
                (_, Some(arg)) => arg.get_long().map(|long| format!("--{long}")),
                (_, None) => None,
            };
            let message = match origin {
                Some(origin) => format!("{origin}: {reason}"),
                None => reason,
            };
            cmd.clone().error(ErrorKind::ValueValidation, message)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_say_what_is_expected() {
        for (given, problem) in [
            ("10", "the unit is missing"),
            ("soon", "it is not a number followed by a unit"),
            ("10 parsecs", "\"parsecs\" is not a unit of time"),
            ("", "it is empty"),
        ] {
            assert_eq!(
                parse_duration(given),
                Err(format!(
                    "{given:?} is not a duration: {problem}; write a number and a unit (ms, s, m, h), e.g. 10s, 500ms or 1m 30s"
                )),
            );
        }
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
    }
}
