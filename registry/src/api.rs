//! The tonic services. Thin: decode, call the plain types, encode.
//!
//! - [`agents`]: `ToolRegistry`, for agents.
//! - [`registration`]: `Registration`, for sidecars.

mod agents;
mod registration;

pub use agents::ToolRegistryApi;
pub use registration::RegistrationApi;
