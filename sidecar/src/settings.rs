//! Where each of the sidecar's settings comes from (a flag, its environment
//! variable, or the config file's key), so that an error names it the way
//! the user set it.

use std::net::SocketAddr;
use std::path::Path;

use clap::ArgMatches;
use clap::parser::ValueSource;
use toolmesh_proto::listen::ListenAddr;

use crate::launch::LaunchError;

/// Where each setting comes from, to name it in an error the way the user
/// set it: the flag, its environment variable, or the config file's key.
pub struct Setting<'a> {
    /// The parsed command line.
    pub matches: &'a ArgMatches,
    /// The config file, as given.
    pub config_file: &'a Path,
}

impl Setting<'_> {
    /// The value that wins (flag or env, else the YAML key), and its name.
    pub fn pick(
        &self,
        id: &str,
        flag: &str,
        env: &str,
        command_line: Option<String>,
        yaml: Option<String>,
    ) -> (Option<String>, String) {
        match (command_line, yaml) {
            (Some(value), _) => {
                let name = match self.matches.value_source(id) {
                    Some(ValueSource::EnvVariable) => env,
                    _ => flag,
                };
                (Some(value), name.to_owned())
            }
            (None, Some(value)) => (Some(value), format!("{}: {id}", self.config_file.display())),
            (None, None) => (None, flag.to_owned()),
        }
    }
}

/// The admin port's address: `admin`, resolved, and not the gRPC `listen`
/// address.
pub fn admin_address(
    admin: &str,
    listen: SocketAddr,
    matches: &ArgMatches,
) -> Result<SocketAddr, LaunchError> {
    let from = match matches.value_source("admin_listen") {
        Some(ValueSource::EnvVariable) => "TOOLMESH_ADMIN_LISTEN",
        _ => "--admin-listen",
    };
    let addr = admin
        .parse::<ListenAddr>()
        .and_then(|l| l.resolve())
        .map_err(|e| LaunchError::Setting(format!("{from}: {e}")))?
        .addr;
    let same_ip =
        addr.ip() == listen.ip() || addr.ip().is_unspecified() || listen.ip().is_unspecified();
    if addr.port() != 0 && addr.port() == listen.port() && same_ip {
        return Err(LaunchError::Setting(format!(
            "{from}: {addr} is where ToolRuntime listens ({listen}); give the admin port a port of its own"
        )));
    }
    Ok(addr)
}
