//! The tonic services. Thin: decode, call the plain types, encode.
//!
//! - `agents.rs`: [`ToolRegistryApi`], for agents.
//! - `tasks.rs`: [`TasksApi`], for agents' tasks.
//! - `approvals.rs`: [`ApprovalsApi`], for the people who decide held calls.
//! - `pins.rs`: [`PinsApi`], for operators reviewing pinned definitions.
//! - `registration.rs`: [`RegistrationApi`], for sidecars (their tasks'
//!   reports included).

mod agents;
mod approvals;
mod pins;
mod registration;
mod tasks;

pub(crate) use agents::ToolRegistryApi;
pub(crate) use approvals::ApprovalsApi;
pub(crate) use pins::PinsApi;
pub(crate) use registration::RegistrationApi;
pub(crate) use tasks::TasksApi;
