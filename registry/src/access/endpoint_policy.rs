//! Which announced endpoints the registry will dial. An endpoint is where
//! agents' arguments are sent, so an announce cannot point the registry at
//! just anything:
//!
//! - `http://host:port` or `https://host:port` only, host and port
//!   explicit (`https://`: the registry verifies the sidecar's certificate
//!   for that host);
//! - never an unspecified address (`0.0.0.0`, `::`), nor the registry's own
//!   listen address (itself, on its own port, through loopback or not);
//! - with `--endpoint-allow`, only hosts it lists: CIDRs for IP addresses
//!   (`10.0.0.0/8`, `fd00::/8`), names and `*.suffix` patterns for host
//!   names (`*.svc.cluster.local`). Names are matched as written, at
//!   announce (a list of CIDRs alone refuses every name).
//!
//! When the registry connects, the addresses a host name resolves to are
//! checked again ([`EndpointPolicy::may_dial`]): a name that resolves to
//! the registry itself (`127.1`, an alias) or to an unspecified address is
//! not dialled. Resolved addresses are not held to the CIDRs: a name the
//! operator allowed is trusted to resolve where it should.

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;

use ipnet::IpNet;

/// One entry of `--endpoint-allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    /// IP addresses in this network.
    Net(IpNet),
    /// This host name (lowercase).
    Host(String),
    /// Any host name ending in `.suffix` (lowercase, without the dot).
    Suffix(String),
}

impl std::str::FromStr for Allowed {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let example =
            "e.g. 10.0.0.0/8, fd00::/8, 10.1.2.3, tools.example.com or *.svc.cluster.local";
        if let Ok(net) = text.parse::<IpNet>() {
            return Ok(Self::Net(net.trunc()));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Self::Net(IpNet::from(ip)));
        }
        let (wildcard, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(format!(
                "{text:?} is not a CIDR, an IP address or a host name pattern; {example}"
            ));
        }
        let name = name.to_ascii_lowercase();
        Ok(if wildcard {
            Self::Suffix(name)
        } else {
            Self::Host(name)
        })
    }
}

impl Allowed {
    fn allows(&self, host: &Host) -> bool {
        match (self, host) {
            (Self::Net(net), Host::Ip(ip)) => net.contains(ip),
            (Self::Host(allowed), Host::Name(name)) => allowed == name,
            (Self::Suffix(suffix), Host::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            _ => false,
        }
    }
}

enum Host {
    Ip(IpAddr),
    Name(String),
}

/// The rules every announced endpoint is checked against.
#[derive(Debug, Default)]
pub struct EndpointPolicy {
    allowed: Vec<Allowed>,
    own: OnceLock<Own>,
}

/// Where the registry itself answers: its port, on these addresses.
#[derive(Debug)]
struct Own {
    port: u16,
    ips: Vec<IpAddr>,
}

impl EndpointPolicy {
    /// Endpoints allowed by `allowed` (empty: any host).
    pub fn new(allowed: Vec<Allowed>) -> Self {
        Self {
            allowed,
            own: OnceLock::new(),
        }
    }

    /// The address the registry listens on: endpoints that reach it are
    /// refused. Set once, when it starts serving.
    pub fn set_own_address(&self, addr: SocketAddr) {
        let mut ips = vec![addr.ip()];
        if addr.ip().is_unspecified() {
            // Every address of this machine's interfaces reaches it.
            if let Ok(interfaces) = nix::ifaddrs::getifaddrs() {
                ips.extend(interfaces.filter_map(|i| {
                    let address = i.address?;
                    address
                        .as_sockaddr_in()
                        .map(|a| IpAddr::V4(a.ip()))
                        .or_else(|| address.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
                }));
            }
        }
        let _ = self.own.set(Own {
            port: addr.port(),
            ips,
        });
    }

    /// Checks `endpoint`; the error says why it is refused.
    pub fn check(&self, endpoint: &str) -> Result<(), String> {
        let uri: tonic::codegen::http::Uri = endpoint
            .parse()
            .map_err(|e| format!("{endpoint:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err(format!("{endpoint:?} must be an http:// or https:// URL")),
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(format!(
                "{endpoint:?} must be http://host:port or https://host:port, with no path or query"
            ));
        }
        let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
            return Err(format!(
                "{endpoint:?} must give a host and a port, e.g. http://10.1.2.3:50061"
            ));
        };
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(format!("{endpoint:?} must not carry user information"));
        }
        let host = match host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(host.to_ascii_lowercase()),
        };
        if port == 0 {
            return Err(format!("{endpoint:?}: port 0 cannot be dialled"));
        }
        if let Host::Ip(ip) = &host
            && ip.is_unspecified()
        {
            return Err(format!(
                "{endpoint:?}: {ip} is not an address to dial; advertise the sidecar's own address"
            ));
        }
        if self.is_own(&host, port) {
            return Err(format!("{endpoint:?} is the registry's own address"));
        }
        if !self.allowed.is_empty() && !self.allowed.iter().any(|a| a.allows(&host)) {
            return Err(format!(
                "{endpoint:?} is not in the registry's --endpoint-allow list"
            ));
        }
        Ok(())
    }

    /// Whether the registry may connect to `addr`, an address an allowed
    /// endpoint's host resolved to: never an unspecified address, nor its
    /// own (a name such as `127.1` or `my-alias` that resolves to it).
    pub fn may_dial(&self, addr: SocketAddr) -> bool {
        !addr.ip().is_unspecified() && !self.is_own(&Host::Ip(addr.ip()), addr.port())
    }

    fn is_own(&self, host: &Host, port: u16) -> bool {
        let Some(own) = self.own.get() else {
            return false;
        };
        if port != own.port {
            return false;
        }
        match host {
            Host::Name(name) => name == "localhost" || name.ends_with(".localhost"),
            Host::Ip(ip) => ip.is_loopback() || own.ips.contains(ip),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allowed: &[&str]) -> EndpointPolicy {
        let policy = EndpointPolicy::new(
            allowed
                .iter()
                .map(|a| a.parse().unwrap_or_else(|e| panic!("{e}")))
                .collect(),
        );
        policy.set_own_address(SocketAddr::from(([0, 0, 0, 0], 50051)));
        policy
    }

    #[test]
    fn only_http_and_https_urls_with_a_host_and_a_port() {
        let any = policy(&[]);
        assert!(any.check("http://10.1.2.3:50061").is_ok());
        assert!(any.check("https://tools.example.com:50061").is_ok());
        assert!(any.check("http://tools.example.com:50061/").is_ok());
        assert!(any.check("http://[fd00::1]:50061").is_ok());
        for refused in [
            "ftp://x:1",
            "https://x",
            "https://0.0.0.0:50061",
            "https://user@x:1",
            "http://x",
            "http://x:0",
            "http://x:1/path",
            "http://x:1/?q",
            "http://user@x:1",
            "http://0.0.0.0:50061",
            "http://[::]:50061",
            "not a url",
        ] {
            assert!(any.check(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn never_the_registry_itself() {
        let any = policy(&[]);
        for own in [
            "http://127.0.0.1:50051",
            "http://localhost:50051",
            "http://[::1]:50051",
            "http://127.0.0.2:50051",
            "https://localhost:50051",
        ] {
            let error = any.check(own).expect_err(own);
            assert!(error.contains("registry's own address"), "{error}");
        }
        assert!(any.check("http://127.0.0.1:50061").is_ok(), "another port");
        assert!(
            any.check("http://192.0.2.1:50051").is_ok(),
            "another machine"
        );
    }

    #[test]
    fn the_allow_list_takes_cidrs_addresses_names_and_suffixes() {
        let listed = policy(&[
            "10.0.0.0/8",
            "192.168.1.5",
            "tools.example.com",
            "*.svc.cluster.local",
        ]);
        for allowed in [
            "http://10.200.3.4:1",
            "http://192.168.1.5:1",
            "http://TOOLS.example.com:1",
            "http://inventory.tools.svc.cluster.local:50061",
        ] {
            assert!(listed.check(allowed).is_ok(), "{allowed}");
        }
        for refused in [
            "http://11.0.0.1:1",
            "http://192.168.1.6:1",
            "http://evil.example.com:1",
            "http://svc.cluster.local:1",
            "http://xsvc.cluster.local:1",
            "http://127.0.0.1:22",
        ] {
            let error = listed.check(refused).expect_err(refused);
            assert!(error.contains("--endpoint-allow"), "{refused}: {error}");
        }
    }

    #[test]
    fn bad_entries_are_refused_with_examples() {
        for bad in ["", "*.", "a..b", "10.0.0.0/33", "http://x", "x_y.com"] {
            let error = bad.parse::<Allowed>().expect_err(bad);
            assert!(error.contains("e.g."), "{error}");
        }
    }
}
