//! The tonic services. Thin: decode, call the plain types, encode.
//!
//! - `agents.rs`: [`ToolRegistryApi`], for agents.
//! - `registration.rs`: [`RegistrationApi`], for sidecars.

mod agents;
mod registration;

pub(crate) use agents::ToolRegistryApi;
pub(crate) use registration::RegistrationApi;
