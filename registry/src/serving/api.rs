//! The tonic services. Thin: decode, call the plain types, encode.
//!
//! - `agents.rs`: [`ToolRegistryApi`], for agents.
//! - `tasks.rs`: [`TasksApi`], for agents' tasks.
//! - `registration.rs`: [`RegistrationApi`], for sidecars (their tasks'
//!   reports included).

mod agents;
mod registration;
mod tasks;

pub(crate) use agents::ToolRegistryApi;
pub(crate) use registration::RegistrationApi;
pub(crate) use tasks::TasksApi;
