//! How a connected server's loop learns that its tools changed and that
//! the server is still there, by what the server speaks and advertises.
//! Nothing a server does not advertise is required of it: a 2026-07-28
//! server without `tools.listChanged`, or one that refuses
//! `subscriptions/listen`, is followed by listing its tools again.

use std::sync::Arc;

use rmcp::model::ServerPeerInfo;
use rmcp::service::{Peer, RoleClient, Subscription};

use super::session::{self, SessionError};

/// What, besides the relist interval and the connection closing, tells the
/// loop about a server.
pub(crate) enum Watch {
    /// A handshake revision: `notifications/tools/list_changed` comes on
    /// the session, and a `ping` says the server is there.
    Session,
    /// 2026-07-28 with `tools.listChanged`: the changes come on the
    /// `subscriptions/listen` stream, whose end is the server's.
    Stream(Box<Subscription>),
    /// 2026-07-28 without a change stream. The revision has no ping: the
    /// relist interval, a stdio server's exit and a failed call tell.
    Relist,
}

/// What the server says it does, before anything is asked of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Session,
    Listen,
    Relist,
}

fn plan(info: &ServerPeerInfo) -> Plan {
    if info.protocol_version.has_initialize() {
        return Plan::Session;
    }
    let list_changed = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|tools| tools.list_changed);
    if list_changed == Some(true) {
        Plan::Listen
    } else {
        Plan::Relist
    }
}

impl Watch {
    /// The watch for the server `info` describes, opening its change stream
    /// if it advertises one. A server that advertised it and then answers
    /// `-32601` is relisted instead; that is logged at WARN the first time
    /// for this server (`refused` remembers it across reconnections).
    pub(crate) async fn open(
        peer: &Peer<RoleClient>,
        info: &ServerPeerInfo,
        label: &Arc<str>,
        refused: &mut bool,
    ) -> Result<Self, SessionError> {
        match plan(info) {
            Plan::Session => Ok(Self::Session),
            Plan::Relist => Ok(Self::Relist),
            Plan::Listen => match session::listen(peer).await {
                Ok(subscription) => Ok(Self::Stream(Box::new(subscription))),
                Err(error @ SessionError::MethodNotFound(_)) => {
                    if std::mem::replace(refused, true) {
                        tracing::debug!(server = %label, %error, "MCP server's tools followed by relisting");
                    } else {
                        tracing::warn!(server = %label, %error, "MCP server advertises tools.listChanged but has no change stream; its tools are followed by relisting them");
                    }
                    Ok(Self::Relist)
                }
                Err(error) => Err(error),
            },
        }
    }

    /// Whether the loop pings the server (the handshake revisions have
    /// `ping`, 2026-07-28 does not).
    pub(crate) fn pings(&self) -> bool {
        matches!(self, Self::Session)
    }

    /// How the server's changes are followed, for the log.
    pub(crate) fn follows(&self) -> &'static str {
        match self {
            Self::Session => "session notifications and ping",
            Self::Stream(_) => "subscriptions/listen",
            Self::Relist => "relisting",
        }
    }

    /// The next change on the stream (never, without one); its end is the
    /// server's.
    pub(crate) async fn next_change(&mut self) -> Result<(), SessionError> {
        let Self::Stream(subscription) = self else {
            return std::future::pending().await;
        };
        match subscription.next().await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(SessionError::Request {
                what: "subscriptions/listen",
                reason: format!("the stream ended ({:?})", subscription.end()),
            }),
            Err(error) => Err(SessionError::Request {
                what: "subscriptions/listen",
                reason: error.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use rmcp::model::{ProtocolVersion, ServerCapabilities};
    use serde_json::json;

    use super::*;

    fn info(version: ProtocolVersion, capabilities: serde_json::Value) -> ServerPeerInfo {
        let capabilities: ServerCapabilities = serde_json::from_value(capabilities).unwrap();
        ServerPeerInfo::new(version, capabilities)
    }

    #[test]
    fn only_a_current_server_advertising_list_changed_is_listened_to() {
        let current = ProtocolVersion::V_2026_07_28;
        let cases = [
            (json!({"tools": {"listChanged": true}}), Plan::Listen),
            // mcp-server-time: fixed tools, no stream.
            (json!({"tools": {"listChanged": false}}), Plan::Relist),
            (json!({"tools": {}}), Plan::Relist),
            (json!({}), Plan::Relist),
        ];
        for (capabilities, expected) in cases {
            assert_eq!(
                plan(&info(current.clone(), capabilities.clone())),
                expected,
                "{capabilities}"
            );
        }
        for version in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2024_11_05] {
            assert_eq!(
                plan(&info(version, json!({"tools": {"listChanged": true}}))),
                Plan::Session
            );
        }
    }
}
