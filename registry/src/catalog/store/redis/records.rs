//! How leases, instances and tools are written in Redis's hashes, and read
//! back.

use std::{collections::HashMap, sync::Arc};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use prost::Message as _;
use toolmesh_proto::{grant::CallKey, pb::ToolDescriptor};

use crate::catalog::store::model::{Instance, ToolState};

/// What a replica knows of a lease, to write it back if Redis loses it.
#[derive(Debug, Clone)]
pub(super) struct LeaseRecord {
    pub(super) instance: String,
    /// The instance's endpoint and key as stored ([`stored_address`]).
    pub(super) address: String,
    pub(super) tools: Vec<String>,
    pub(super) owner: String,
    /// When it was announced (ms since the epoch, Redis's clock), when the
    /// lease says.
    pub(super) announced_ms: Option<u64>,
}

impl LeaseRecord {
    /// The record in a lease's hash, if it is whole.
    pub(super) fn from_fields(fields: &HashMap<String, String>) -> Option<Self> {
        Some(Self {
            instance: fields.get("instance")?.clone(),
            address: fields.get("endpoint")?.clone(),
            tools: fields
                .get("tools")
                .map(|t| t.lines().map(str::to_owned).collect())
                .unwrap_or_default(),
            owner: fields.get("owner").cloned().unwrap_or_default(),
            announced_ms: fields.get("since").and_then(|s| s.parse().ok()),
        })
    }
}

/// An instance's endpoint and execute key as one text, as Redis keeps them
/// (in a tool's instances and in a lease): the endpoint, then, if the
/// instance has a key, a space and the key in base64. An endpoint never
/// has a space (`endpoint_policy`), so the two part cleanly.
pub(super) fn stored_address(endpoint: &str, key: Option<&CallKey>) -> String {
    match key {
        Some(key) => format!("{endpoint} {}", STANDARD.encode(key.as_bytes())),
        None => endpoint.to_owned(),
    }
}

/// The endpoint part of a [`stored_address`].
pub(super) fn endpoint_of(address: &str) -> &str {
    address
        .split_once(' ')
        .map_or(address, |(endpoint, _)| endpoint)
}

/// The instance `id` whose [`stored_address`] is `address`; a key that
/// does not decode (written by something else) is no key.
pub(super) fn instance(id: String, address: &str) -> Instance {
    let (endpoint, key) = match address.split_once(' ') {
        Some((endpoint, key)) => (
            endpoint,
            STANDARD
                .decode(key)
                .ok()
                .and_then(|bytes| CallKey::from_bytes(&bytes).ok()),
        ),
        None => (address, None),
    };
    Instance {
        id,
        endpoint: endpoint.to_owned(),
        execute_key: key,
    }
}

/// The state Redis holds for one tool; `shown`'s descriptor and digest
/// are kept if the descriptor did not change.
pub(super) fn tool_state(
    descriptor: Option<&[u8]>,
    instances: HashMap<String, String>,
    shown: Option<&ToolState>,
) -> Option<ToolState> {
    let descriptor = ToolDescriptor::decode(descriptor?).ok()?;
    let mut instances: Vec<Arc<Instance>> = instances
        .into_iter()
        .map(|(id, address)| Arc::new(instance(id, &address)))
        .collect();
    instances.sort_by(|a, b| a.id.cmp(&b.id));
    Some(match shown {
        Some(shown) if *shown.descriptor == descriptor => ToolState {
            descriptor: shown.descriptor.clone(),
            digest: shown.digest.clone(),
            instances,
        },
        _ => ToolState::new(Arc::new(descriptor), instances),
    })
}
