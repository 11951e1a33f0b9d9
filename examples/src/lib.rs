//! The toolmesh demo: one command starts a registry, an HTTP service, a
//! config-driven sidecar and a Rust SDK tool, then runs a Rust agent that
//! discovers the tools and walks through every success and failure of the
//! error model.
//!
//! # Layout
//! - [`inventory`]: the example HTTP service (`POST /lookup`) the sidecar's
//!   `lookup` tool points at; binary `inventory-service`.
//! - [`calculator`]: a Rust tool (`divide`) written with the sidecar SDK;
//!   binary `calculator-tool`.
//! - [`agent`]: the agent: waits for the tools, prints them, calls them,
//!   decodes every error's google.rpc details and checks each expected
//!   outcome; binary `agent`.
//! - [`agent_loop`]: an agent loop with a scripted stand-in for the LLM
//!   (search, export, call with the digest shown, repair from the
//!   violations, fetch again when the tool changed); binary
//!   `agent-loop`.
//! - [`present`]: how the agent prints tools, results and error details.
//! - [`demo_config`]: turns `demo/sidecar.yaml` into the effective config
//!   with runtime addresses and absolute paths.
//! - [`processes`]: child processes with their logs in files, stopped with
//!   SIGTERM then SIGKILL, and never left behind.
//! - [`launcher`]: the demo itself (binary `toolmesh-demo`): ports, start
//!   order, readiness, the agent run, shutdown.

pub mod agent;
pub mod agent_loop;
pub mod calculator;
pub mod demo_config;
pub mod inventory;
pub mod launcher;
pub mod present;
pub mod processes;
