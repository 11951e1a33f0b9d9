//! Log filters with a chatty dependency quieted.
//!
//! rmcp, the MCP SDK both binaries use, logs at INFO a peer's whole
//! handshake on one line (`peer_info=…`: 2,331 bytes for a server whose
//! instructions it holds, whatever a client sent for the registry's
//! endpoint) and every notification it receives, unbounded and
//! unescaped. The binaries' own lines say what an operator needs, bounded
//! ([`crate::shown`]). So unless the user's filter names the dependency,
//! its events go at WARN and above.

/// `filter` (`--log`, `RUST_LOG`) with `target`'s events at WARN and above
/// when the filter is plain levels (`info`, `toolmesh_sidecar=debug,info`)
/// whose default is `info`, `debug` or `trace`, and no directive names
/// `target`; any other filter (one naming `target`, span filters, one that
/// does not parse) is kept as given, so that what the user typed is what
/// is reported if it is wrong.
pub fn quieting(filter: &str, target: &str) -> String {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let level = |text: &str| LEVELS.iter().any(|l| text.eq_ignore_ascii_case(l));
    let module = |text: &str| {
        !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut default = None;
    for directive in filter.split(',').map(str::trim) {
        match directive.split_once('=') {
            Some((name, value)) if module(name) && level(value) => {
                if name.starts_with(target) {
                    return filter.to_owned();
                }
            }
            None if level(directive) => default = Some(directive),
            _ => return filter.to_owned(),
        }
    }
    match default {
        Some(level)
            if ["info", "debug", "trace"]
                .iter()
                .any(|l| level.eq_ignore_ascii_case(l)) =>
        {
            format!("{filter},{target}=warn")
        }
        _ => filter.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependency_is_quieted_only_where_the_user_asked_for_chatter_and_not_for_it() {
        assert_eq!(quieting("info", "rmcp"), "info,rmcp=warn");
        assert_eq!(
            quieting("toolmesh_sidecar=debug,DEBUG", "rmcp"),
            "toolmesh_sidecar=debug,DEBUG,rmcp=warn"
        );
        for kept in [
            "rmcp=debug,info",
            "warn",
            "off",
            "error,toolmesh_sidecar=info",
            "",
            "info,=[",
            "info,[serve_inner]=trace",
        ] {
            assert_eq!(quieting(kept, "rmcp"), kept);
        }
    }
}
