//! The backends that run tools without Rust code: an HTTP JSON endpoint
//! ([`http::HttpBackend`]) or a command ([`command::CommandBackend`]).
//! Rust handlers live in [`crate::sdk`].

pub mod command;
pub mod http;

pub use command::CommandBackend;
pub use http::HttpBackend;
