//! What the agent needs to be let in: its credential (an API key or a
//! JWT, sent as `authorization: Bearer <token>` on every call) and the CA
//! an `https://` registry's certificate is verified with.
//!
//! The credential comes from `--token-file`, else `TOOLMESH_TOKEN` (the
//! token itself) or `TOOLMESH_TOKEN_FILE` (a file holding it, one line);
//! the CA from `--ca-file` or `TOOLMESH_CA_FILE`, else the public roots.
//! The same rules as the Python and TypeScript agents. No message, log or
//! `Debug` output ever holds the token: errors name where it came from.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The variable holding the token itself.
pub const TOKEN_ENV: &str = "TOOLMESH_TOKEN";
/// The variable naming a file that holds the token.
pub const TOKEN_FILE_ENV: &str = "TOOLMESH_TOKEN_FILE";
/// The variable naming the PEM CA file for an `https://` registry.
pub const CA_FILE_ENV: &str = "TOOLMESH_CA_FILE";

/// What the agent says when the registry wants a credential it did not send.
pub const NO_CREDENTIAL_HINT: &str = "the registry wants a credential: set TOOLMESH_TOKEN to the agent's API key or JWT, or TOOLMESH_TOKEN_FILE (or --token-file) to a file holding it";

/// The agent's credential, ready to send, and where it came from.
#[derive(Clone)]
pub struct Credential {
    header: AsciiMetadataValue,
    source: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Credential(from {}, <redacted>)", self.source)
    }
}

impl Credential {
    /// `token` (an API key or a JWT) from `source` (a variable or a file,
    /// named in errors instead of the token).
    pub fn new(token: &str, source: impl Into<String>) -> anyhow::Result<Self> {
        let source = source.into();
        if token.is_empty() {
            bail!("{source} is empty: it must hold the agent's API key or JWT");
        }
        let header = if token.bytes().all(|b| b.is_ascii_graphic()) {
            format!("Bearer {token}").parse().ok()
        } else {
            None
        };
        let Some(header) = header else {
            bail!(
                "{source} is not a usable token: a token is one line of visible ASCII characters, without spaces (an API key or a JWT)"
            );
        };
        Ok(Self { header, source })
    }

    /// The token in `path`: its one line, without the line break (`\n` or
    /// `\r\n`). `what` names the setting that gave the path.
    pub fn read(path: &Path, what: &str) -> anyhow::Result<Self> {
        let source = format!("{what} {}", path.display());
        let text = std::fs::read(path).with_context(|| source.clone())?;
        let line = text
            .strip_suffix(b"\r\n")
            .or_else(|| text.strip_suffix(b"\n"))
            .unwrap_or(&text);
        // Not UTF-8 is refused by `new` like any other unusable byte.
        Self::new(&String::from_utf8_lossy(line), source)
    }

    /// Where it came from: `TOOLMESH_TOKEN`, or a setting and its file.
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// The agent's credential and CA.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Sent on every call; `None`: calls carry no credential.
    pub credential: Option<Credential>,
    /// PEM CA that an `https://` registry's certificate is verified with;
    /// `None`: the public roots.
    pub ca_file: Option<PathBuf>,
}

impl Access {
    /// From the flags (`token_file`, `ca_file`) and the process's
    /// environment; see [`Self::from_vars`].
    pub fn from_env(token_file: Option<&Path>, ca_file: Option<PathBuf>) -> anyhow::Result<Self> {
        Self::from_vars(token_file, ca_file, |name| std::env::var(name).ok())
    }

    /// `token_file` if given, else `TOOLMESH_TOKEN` or `TOOLMESH_TOKEN_FILE`
    /// (both set is an error; empty counts as unset); `ca_file` if given,
    /// else `TOOLMESH_CA_FILE`. `var` looks a variable up.
    pub fn from_vars(
        token_file: Option<&Path>,
        ca_file: Option<PathBuf>,
        var: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let set = |name: &str| var(name).filter(|v| !v.is_empty());
        let credential = match (token_file, set(TOKEN_ENV), set(TOKEN_FILE_ENV)) {
            (Some(path), _, _) => Some(Credential::read(path, "--token-file")?),
            (None, Some(_), Some(_)) => {
                bail!("{TOKEN_ENV} and {TOKEN_FILE_ENV} are both set: set only one")
            }
            (None, Some(token), None) => Some(Credential::new(&token, TOKEN_ENV)?),
            (None, None, Some(path)) => Some(Credential::read(Path::new(&path), TOKEN_FILE_ENV)?),
            (None, None, None) => None,
        };
        let ca_file = ca_file.or_else(|| set(CA_FILE_ENV).map(PathBuf::from));
        Ok(Self {
            credential,
            ca_file,
        })
    }

    /// The interceptor that puts the credential on every call.
    pub fn bearer(&self) -> Bearer {
        Bearer(self.credential.as_ref().map(|c| c.header.clone()))
    }

    /// What to tell the user when the registry answers `UNAUTHENTICATED`
    /// (`status`): set a credential, or which one it refused.
    pub fn explain_unauthenticated(&self, status: &Status) -> String {
        match &self.credential {
            None => format!("{NO_CREDENTIAL_HINT} ({})", status.message()),
            Some(credential) => format!(
                "the registry refused the credential from {} ({})",
                credential.source,
                status.message()
            ),
        }
    }
}

/// Adds `authorization: Bearer <token>` to every request, when there is a
/// token.
#[derive(Clone)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(<redacted>)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(header) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const KEY: &str = "agent-key-0123456789abcdef0123456789abcdef";

    fn access(token_file: Option<&Path>, vars: &[(&str, &str)]) -> anyhow::Result<Access> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Access::from_vars(token_file, None, |name| vars.get(name).cloned())
    }

    fn sent(access: &Access) -> Option<String> {
        let request = access.bearer().call(Request::new(())).ok()?;
        Some(
            request
                .metadata()
                .get("authorization")?
                .to_str()
                .ok()?
                .to_owned(),
        )
    }

    #[test]
    fn the_token_comes_from_the_flag_the_variable_or_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("token");
        std::fs::write(&file, format!("{KEY}\r\n")).expect("write");
        let bearer = Some(format!("Bearer {KEY}"));
        assert_eq!(sent(&access(None, &[]).expect("none")), None);
        let by_var = access(None, &[(TOKEN_ENV, KEY)]).expect("variable");
        assert_eq!(sent(&by_var), bearer);
        let by_file =
            access(None, &[(TOKEN_FILE_ENV, file.to_str().expect("utf-8"))]).expect("file");
        assert_eq!(sent(&by_file), bearer);
        let by_flag = access(Some(&file), &[(TOKEN_ENV, "other-token")]).expect("flag");
        assert_eq!(sent(&by_flag), bearer);
        assert_eq!(
            by_flag.credential.expect("a credential").source(),
            format!("--token-file {}", file.display())
        );
        let empty = access(None, &[(TOKEN_ENV, ""), (TOKEN_FILE_ENV, "")]).expect("empty");
        assert!(empty.credential.is_none());
    }

    #[test]
    fn mistakes_name_the_setting_never_the_token() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "two\nlines\n").expect("write");
        let spaced = format!("has a space {KEY}");
        for (result, expected) in [
            (
                access(None, &[(TOKEN_ENV, KEY), (TOKEN_FILE_ENV, "/x")]),
                "TOOLMESH_TOKEN and TOOLMESH_TOKEN_FILE are both set: set only one".to_owned(),
            ),
            (
                access(None, &[(TOKEN_ENV, &spaced)]),
                "TOOLMESH_TOKEN is not a usable token".to_owned(),
            ),
            (
                access(None, &[(TOKEN_FILE_ENV, file.to_str().expect("utf-8"))]),
                format!(
                    "TOOLMESH_TOKEN_FILE {} is not a usable token",
                    file.display()
                ),
            ),
            (
                access(Some(Path::new("/no/such/token")), &[]),
                "--token-file /no/such/token: No such file or directory".to_owned(),
            ),
        ] {
            let error = format!("{:#}", result.expect_err(&expected));
            assert!(error.starts_with(&expected), "{error}");
            assert!(!error.contains(KEY), "{error}");
        }
        let credential = Credential::new(KEY, TOKEN_ENV).expect("usable");
        assert_eq!(
            format!("{credential:?}"),
            "Credential(from TOOLMESH_TOKEN, <redacted>)"
        );
        let with = access(None, &[(TOKEN_ENV, KEY)]).expect("variable");
        assert_eq!(format!("{:?}", with.bearer()), "Bearer(<redacted>)");
        assert!(!format!("{with:?}").contains(KEY));
    }

    #[test]
    fn unauthenticated_says_what_to_set_or_what_was_refused() {
        let status = Status::unauthenticated("unauthenticated: no authorization header");
        assert_eq!(
            Access::default().explain_unauthenticated(&status),
            format!("{NO_CREDENTIAL_HINT} (unauthenticated: no authorization header)")
        );
        let with = access(None, &[(TOKEN_ENV, KEY)]).expect("variable");
        assert_eq!(
            with.explain_unauthenticated(&status),
            "the registry refused the credential from TOOLMESH_TOKEN (unauthenticated: no authorization header)"
        );
    }
}
