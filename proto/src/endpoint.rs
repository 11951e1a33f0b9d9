//! Where a toolmesh server is, written the same way in every binary and
//! agent: `host:port` or `http://host:port` (plaintext), or
//! `https://host:port` (TLS).

use std::fmt;

/// Why an address is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointError {
    given: String,
    problem: &'static str,
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a server address: {}; write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051",
            self.given, self.problem
        )
    }
}

impl std::error::Error for EndpointError {}

/// The URL for `address`: `http://host:port` for `host:port` or
/// `http://host:port`, `https://host:port` for `https://host:port` (a
/// trailing `/` is dropped).
pub fn url(address: &str) -> Result<String, EndpointError> {
    url_or(address, "http")
}

/// [`url`], with `default_scheme` (`http` or `https`) for an address
/// written without one.
pub fn url_or(address: &str, default_scheme: &str) -> Result<String, EndpointError> {
    let given = address.trim();
    let error = |problem| EndpointError {
        given: address.to_owned(),
        problem,
    };
    let (scheme, rest) = match given.split_once("://") {
        None => (default_scheme, given),
        Some((scheme @ ("http" | "https"), rest)) => (scheme, rest),
        Some(_) => return Err(error("the scheme must be http:// or https://")),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() {
        return Err(error("the host is missing"));
    }
    if authority.contains(['/', '?', '#', '@']) || authority.chars().any(char::is_whitespace) {
        return Err(error("only a host and a port may be given"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') || host.starts_with('[') => (host, port),
        _ => return Err(error("the port is missing")),
    };
    if host.is_empty() || host == "[]" {
        return Err(error("the host is missing"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(error("an IPv6 address goes in brackets, e.g. [::1]:50051"));
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(error("the port must be a number from 1 to 65535")),
        Ok(_) => Ok(format!("{scheme}://{authority}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_and_http_urls_mean_the_same() {
        for given in [
            "127.0.0.1:50051",
            "http://127.0.0.1:50051",
            "http://127.0.0.1:50051/",
            " 127.0.0.1:50051\n",
        ] {
            assert_eq!(
                url(given).as_deref(),
                Ok("http://127.0.0.1:50051"),
                "{given:?}"
            );
        }
        assert_eq!(
            url("registry.svc:7000").as_deref(),
            Ok("http://registry.svc:7000")
        );
        assert_eq!(url("[::1]:50051").as_deref(), Ok("http://[::1]:50051"));
    }

    #[test]
    fn https_stays_https_and_may_be_the_default() {
        assert_eq!(
            url("https://registry.svc:7000/").as_deref(),
            Ok("https://registry.svc:7000")
        );
        assert_eq!(
            url_or("10.1.2.3:50061", "https").as_deref(),
            Ok("https://10.1.2.3:50061")
        );
        assert_eq!(
            url_or("http://10.1.2.3:50061", "https").as_deref(),
            Ok("http://10.1.2.3:50061")
        );
    }

    #[test]
    fn every_mistake_says_what_to_write() {
        for (given, problem) in [
            ("", "the host is missing"),
            ("http://", "the host is missing"),
            (":50051", "the host is missing"),
            ("127.0.0.1", "the port is missing"),
            ("127.0.0.1:", "the port must be a number"),
            ("127.0.0.1:http", "the port must be a number"),
            ("127.0.0.1:70000", "the port must be a number"),
            ("127.0.0.1:0", "the port must be a number"),
            ("https://", "the host is missing"),
            (
                "grpc://127.0.0.1:50051",
                "the scheme must be http:// or https://",
            ),
            ("http://127.0.0.1:50051/v1", "only a host and a port"),
            ("::1:50051", "an IPv6 address goes in brackets"),
        ] {
            let error = url(given).expect_err(given).to_string();
            assert!(error.contains(problem), "{given:?}: {error}");
            assert!(error.contains("e.g. 127.0.0.1:50051"), "{given:?}: {error}");
        }
    }
}
