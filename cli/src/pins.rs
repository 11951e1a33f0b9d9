//! The pins commands, over `toolmesh.v1.Pins`: what each tool is pinned
//! to (`list`), how a held definition differs from its pin (`diff`), and
//! an operator's approval (`approve`) or revocation (`revoke`).

use anyhow::Context as _;
use serde_json::{Value, json};
use tonic::transport::Channel;
use toolmesh_proto::pb::{self, pins_client::PinsClient};

use crate::approvals::client::channel;
use crate::connect::{Registry, Target};
use crate::failure::{Exit, Failure};
use crate::output::{Output, note, print, table};

/// The registry's `Pins` service.
pub(crate) struct Pins {
    client: PinsClient<Channel>,
    registry: Registry,
}

impl Pins {
    /// `Pins` at `target`, which `registry` is connected to.
    pub(crate) fn new(registry: Registry, target: &Target) -> Result<Self, Failure> {
        let channel = channel(target, &registry)
            .context("the pins service")
            .map_err(|e| Failure::plain(Exit::Usage, format!("{e:#}")))?;
        Ok(Self {
            client: PinsClient::new(channel).max_decoding_message_size(64 << 20),
            registry,
        })
    }

    async fn call<T>(
        &mut self,
        call: impl AsyncFnOnce(&mut PinsClient<Channel>) -> Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, Failure> {
        let answer = call(&mut self.client).await;
        answer
            .map(tonic::Response::into_inner)
            .map_err(|status| self.registry.failed(&status))
    }

    async fn listing(&mut self) -> Result<pb::ListPinsResponse, Failure> {
        let request = self.registry.request(pb::ListPinsRequest {});
        self.call(async |c| c.list_pins(request).await).await
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

fn pin_json(pin: &pb::PinnedDefinition) -> Value {
    json!({
        "tool": pin.tool,
        "digest": pin.digest,
        "by": pin.by,
        "mode": pin.mode,
        "pinned_at": pin.pinned_at.as_ref().map(|t| t.seconds),
    })
}

fn held_json(held: &pb::HeldDefinition) -> Value {
    let (key, digest) = held_key(held);
    json!({
        "tool": key,
        "digest": digest,
        "pinned_digest": held.pinned_digest,
        "mode": held.mode,
        "changes": held.changes,
        "denied": held.denied_at.is_some(),
        "denied_by": held.denied_by,
        "denial_comment": held.denial_comment,
    })
}

/// A held definition's key (`name@version`) and digest.
fn held_key(held: &pb::HeldDefinition) -> (String, String) {
    let tool = held.tool.clone().unwrap_or_default();
    let d = tool.descriptor.unwrap_or_default();
    let key = if d.version.is_empty() {
        d.name
    } else {
        format!("{}@{}", d.name, d.version)
    };
    (key, tool.digest)
}

/// `pins list`: every pin, then every definition held.
pub(crate) async fn list(pins: &mut Pins, output: Output) -> Result<(), Failure> {
    let listing = pins.listing().await?;
    match output {
        Output::Json => print(json!({
            "pins": listing.pins.iter().map(pin_json).collect::<Vec<_>>(),
            "held": listing.held.iter().map(held_json).collect::<Vec<_>>(),
        })),
        Output::Text => {
            let rows: Vec<Vec<String>> = listing
                .pins
                .iter()
                .map(|p| {
                    vec![
                        p.tool.clone(),
                        short(&p.digest).to_owned(),
                        p.mode.clone(),
                        p.by.clone(),
                        "pinned".into(),
                    ]
                })
                .chain(listing.held.iter().map(|h| {
                    let (key, digest) = held_key(h);
                    vec![
                        key,
                        short(&digest).to_owned(),
                        h.mode.clone(),
                        match (&h.denied_at, h.denied_by.as_str()) {
                            (None, _) => "-".into(),
                            (Some(_), "") => "anonymous".into(),
                            (Some(_), by) => by.to_owned(),
                        },
                        if h.denied_at.is_some() {
                            "HELD, DENIED".into()
                        } else {
                            "HELD".into()
                        },
                    ]
                }))
                .collect();
            print(table(&["TOOL", "DIGEST", "MODE", "BY", "STATE"], &rows))?;
            if !listing.held.is_empty() {
                note(
                    "held definitions are not served: `pins diff TOOL` shows what changed, `pins approve TOOL` serves it",
                );
            }
            Ok(())
        }
    }
}

/// `pins diff TOOL`: how the held definition of TOOL differs from its pin.
pub(crate) async fn diff(pins: &mut Pins, tool: String, output: Output) -> Result<(), Failure> {
    let listing = pins.listing().await?;
    let Some(held) = listing.held.iter().find(|h| held_key(h).0 == tool) else {
        return Err(Failure::plain(
            Exit::NotFound,
            format!("no definition of {tool} is held (`pins list` shows what is)"),
        ));
    };
    match output {
        Output::Json => print(held_json(held)),
        Output::Text => {
            let (_, digest) = held_key(held);
            let mut lines = vec![
                format!("tool:    {tool}"),
                format!("held:    {digest}"),
                format!(
                    "pinned:  {}",
                    if held.pinned_digest.is_empty() {
                        "-"
                    } else {
                        &held.pinned_digest
                    }
                ),
                format!("mode:    {}", held.mode),
            ];
            if held.denied_at.is_some() {
                lines.push(format!(
                    "denied:  by {}{}",
                    if held.denied_by.is_empty() {
                        "anonymous"
                    } else {
                        &held.denied_by
                    },
                    if held.denial_comment.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", held.denial_comment)
                    }
                ));
            }
            if held.changes.is_empty() {
                lines.push("the pinned definition is not known to this registry".into());
            }
            lines.extend(held.changes.iter().map(|c| format!("  {c}")));
            print(lines.join("\n"))
        }
    }
}

/// `pins approve TOOL [--digest D]`: pins TOOL's live or held definition;
/// without a digest, the held one's (printed).
pub(crate) async fn approve(
    pins: &mut Pins,
    tool: String,
    digest: Option<String>,
    output: Output,
) -> Result<(), Failure> {
    let digest = match digest {
        Some(digest) => digest,
        None => {
            let listing = pins.listing().await?;
            let held = listing.held.iter().find(|h| held_key(h).0 == tool);
            let Some(held) = held else {
                return Err(Failure::plain(
                    Exit::NotFound,
                    format!("no definition of {tool} is held: give --digest to pin a served one"),
                ));
            };
            held_key(held).1
        }
    };
    let request = pins
        .registry
        .request(pb::ApprovePinRequest { tool, digest });
    let pinned = pins.call(async |c| c.approve_pin(request).await).await?;
    match output {
        Output::Json => print(pin_json(&pinned)),
        Output::Text => print(format!("pinned {} to {}", pinned.tool, pinned.digest)),
    }
}

/// `pins revoke TOOL`: removes a pin made at run time.
pub(crate) async fn revoke(pins: &mut Pins, tool: String, output: Output) -> Result<(), Failure> {
    let request = pins
        .registry
        .request(pb::RevokePinRequest { tool: tool.clone() });
    let answer = pins.call(async |c| c.revoke_pin(request).await).await?;
    match output {
        Output::Json => print(json!({"tool": tool, "revoked": answer.revoked})),
        Output::Text => print(if answer.revoked {
            format!("unpinned {tool}")
        } else {
            format!("{tool} had no pin made at run time (the pins file's stay)")
        }),
    }
}
