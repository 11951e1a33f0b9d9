//! Where a toolmesh server listens, written the same way in every binary:
//! `IP:port`, or `host:port` with a host name that resolves (the first
//! address it resolves to is used).

use std::{
    fmt,
    net::{IpAddr, SocketAddr, ToSocketAddrs as _},
    str::FromStr,
};

/// What to write instead, shown with every mistake.
const EXAMPLES: &str = "write IP:port or host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::1]:50051 or localhost:50051";

/// Why a listen address is not usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenError {
    /// It is not `host:port`.
    Syntax {
        /// The text given.
        given: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The host is a name that does not resolve to any address.
    Unresolved {
        /// The text given.
        given: String,
        /// What the resolver said.
        reason: String,
    },
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax { given, problem } => {
                write!(
                    f,
                    "{given:?} is not a listen address: {problem}; {EXAMPLES}"
                )
            }
            Self::Unresolved { given, reason } => write!(
                f,
                "cannot listen on {given:?}: the host name does not resolve ({reason}); give an IP address (127.0.0.1, 0.0.0.0, [::1]) or a host name that resolves"
            ),
        }
    }
}

impl std::error::Error for ListenError {}

/// A listen address that is well-formed; [`ListenAddr::resolve`] turns it
/// into the socket address to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddr {
    host: String,
    port: u16,
}

/// A resolved listen address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The address to bind: the first one the host resolved to.
    pub addr: SocketAddr,
    /// Every address a host name resolved to, in the resolver's order;
    /// empty when the host was an IP address.
    pub candidates: Vec<SocketAddr>,
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        Self {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl ListenAddr {
    /// The host as given (an IP address or a name), without IPv6 brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port; 0 lets the system choose one.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket address to bind: the IP itself, or the first address the
    /// host name resolves to. Resolving may block on the system resolver.
    pub fn resolve(&self) -> Result<Resolved, ListenError> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(Resolved {
                addr: SocketAddr::new(ip, self.port),
                candidates: Vec::new(),
            });
        }
        let unresolved = |reason: String| ListenError::Unresolved {
            given: self.to_string(),
            reason,
        };
        let candidates: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| unresolved(e.to_string()))?
            .collect();
        let addr = *candidates
            .first()
            .ok_or_else(|| unresolved("no address".into()))?;
        Ok(Resolved { addr, candidates })
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for ListenAddr {
    type Err = ListenError;

    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let error = |problem| ListenError::Syntax {
            given: given.to_owned(),
            problem,
        };
        let text = given.trim();
        if text.contains("://") {
            return Err(error("a listen address has no scheme"));
        }
        if text.is_empty() {
            return Err(error("the host is missing"));
        }
        if text.ends_with(']') {
            return Err(error("the port is missing"));
        }
        if text.contains(['/', '?', '#', '@']) || text.chars().any(char::is_whitespace) {
            return Err(error("only a host and a port may be given"));
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(error("the port is missing"));
        };
        let host = match host.strip_prefix('[') {
            Some(inner) => inner
                .strip_suffix(']')
                .filter(|inner| inner.parse::<std::net::Ipv6Addr>().is_ok())
                .ok_or_else(|| error("brackets hold an IPv6 address, e.g. [::1]:50051"))?,
            None if host.contains(':') => {
                return Err(error("an IPv6 address goes in brackets, e.g. [::1]:50051"));
            }
            None => host,
        };
        if host.is_empty() {
            return Err(error("the host is missing"));
        }
        let port = port
            .parse::<u16>()
            .map_err(|_| error("the port must be a number from 0 to 65535"))?;
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ListenAddr {
        text.parse()
            .unwrap_or_else(|e| panic!("{text:?} should parse: {e}"))
    }

    #[test]
    fn ips_resolve_to_themselves() {
        for (given, addr) in [
            ("127.0.0.1:50051", "127.0.0.1:50051"),
            ("0.0.0.0:0", "0.0.0.0:0"),
            ("[::1]:50051", "[::1]:50051"),
            (" 127.0.0.1:9\n", "127.0.0.1:9"),
        ] {
            let resolved = parse(given).resolve().expect("an IP resolves");
            assert_eq!(resolved.addr.to_string(), addr, "{given:?}");
            assert!(resolved.candidates.is_empty(), "{given:?}");
        }
        assert_eq!(parse("[::1]:7").to_string(), "[::1]:7");
    }

    #[test]
    fn localhost_resolves_to_a_loopback_address() {
        let resolved = parse("localhost:50052")
            .resolve()
            .expect("localhost resolves");
        assert!(resolved.addr.ip().is_loopback(), "{resolved:?}");
        assert_eq!(resolved.addr.port(), 50052);
        assert_eq!(resolved.candidates.first(), Some(&resolved.addr));
    }

    #[test]
    fn a_name_that_does_not_resolve_says_what_to_give() {
        let error = parse("nosuchhost.invalid:50052")
            .resolve()
            .expect_err("does not resolve")
            .to_string();
        assert!(
            error.starts_with(
                "cannot listen on \"nosuchhost.invalid:50052\": the host name does not resolve ("
            ),
            "{error}"
        );
        assert!(
            error.ends_with(
                "); give an IP address (127.0.0.1, 0.0.0.0, [::1]) or a host name that resolves"
            ),
            "{error}"
        );
    }

    #[test]
    fn every_mistake_says_what_to_write() {
        for (given, problem) in [
            ("", "the host is missing"),
            (":50051", "the host is missing"),
            ("localhost", "the port is missing"),
            ("[::1]", "the port is missing"),
            ("127.0.0.1:", "the port must be a number from 0 to 65535"),
            (
                "127.0.0.1:70000",
                "the port must be a number from 0 to 65535",
            ),
            ("http://127.0.0.1:50051", "a listen address has no scheme"),
            ("127.0.0.1:50051/x", "only a host and a port may be given"),
            ("::1:50051", "an IPv6 address goes in brackets"),
            ("[localhost]:50051", "brackets hold an IPv6 address"),
        ] {
            let error = given.parse::<ListenAddr>().expect_err(given).to_string();
            assert!(
                error.starts_with(&format!("{given:?} is not a listen address: {problem}")),
                "{error}"
            );
            assert!(error.ends_with(EXAMPLES), "{error}");
        }
    }
}
