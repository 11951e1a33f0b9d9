//! The binary's way in: bind the addresses the flags name, then serve.

use tokio::net::TcpListener;
use toolmesh_proto::listen::ListenAddr;

use super::{Registry, ServeError};
use crate::config::Config;

/// Serves the registry `config` asks for on `--listen`, with its admin
/// port on `--admin-listen` when set, until `shutdown` completes. Every
/// port is bound before the registry says it listens.
pub async fn listen_and_serve(
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let (listen, admin_listen) = (config.listen.clone(), config.admin_listen.clone());
    // Config first, ports second.
    let mut registry = Registry::from_config(config)?;
    let listener = bind("--listen", &listen).await?;
    if let Some(admin) = &admin_listen {
        let same = admin
            .resolve()
            .map_err(|e| ServeError::Listen(e.to_string()))?
            .addr;
        let local = listener
            .local_addr()
            .map_err(|e| ServeError::Listen(format!("--listen: {e}")))?;
        if same.port() != 0 && same == local {
            return Err(ServeError::Listen(format!(
                "--admin-listen {admin} is the --listen address: give the admin port its own, e.g. 127.0.0.1:9090"
            )));
        }
        registry = registry.with_admin(bind("--admin-listen", admin).await?);
    }
    registry.serve(listener, shutdown).await
}

/// Binds `flag`'s address `listen`: the IP given, or the first address its
/// host name resolves to. A refusal says what to do about it.
async fn bind(flag: &str, listen: &ListenAddr) -> Result<TcpListener, ServeError> {
    let resolved = listen
        .resolve()
        .map_err(|e| ServeError::Listen(e.to_string()))?;
    if !resolved.candidates.is_empty() {
        let all: Vec<String> = resolved
            .candidates
            .iter()
            .map(ToString::to_string)
            .collect();
        tracing::info!(
            listen = %listen,
            address = %resolved.addr,
            resolved = %all.join(", "),
            "{flag} host name resolved; binding its first address"
        );
    }
    TcpListener::bind(resolved.addr).await.map_err(|error| {
        let hint = match error.kind() {
            std::io::ErrorKind::AddrInUse => {
                format!("; another process listens there: stop it or choose another port with {flag}")
            }
            std::io::ErrorKind::PermissionDenied => {
                format!("; ports below 1024 need privileges: choose a higher port with {flag}")
            }
            std::io::ErrorKind::AddrNotAvailable => {
                "; that address is not one of this machine's: use 127.0.0.1, 0.0.0.0 or one of its own".to_owned()
            }
            _ => String::new(),
        };
        ServeError::Listen(format!("cannot listen on {}: {error}{hint}", resolved.addr))
    })
}
