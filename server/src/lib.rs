//! `approval-server`: the durable MCP approval service.
//!
//! Agents propose through MCP ([`mcp`]); humans sign through the approver API
//! ([`approver_api`]); [`service`] holds the operations both share, over the
//! [`store`] and the rules of `approval-core`. [`run`] wires them to sockets.
#![forbid(unsafe_code)]

pub mod admin;
pub mod admin_socket;
pub mod agents;
pub mod approver_api;
pub mod approver_page;
pub mod audit;
pub mod backup;
pub mod body_budget;
pub mod capacity;
pub mod clock;
pub mod config;
pub mod disabled_kind;
pub mod endpoint;
pub mod executor;
pub mod http;
pub mod identity;
pub mod listener;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod outbound;
pub mod record;
pub mod run;
pub mod service;
pub mod stdio;
pub mod store;
pub mod throttle;
pub mod tls;
pub mod verify_cache;

/// Fail-stop lives with the store it wraps; this path stays for its importers.
pub use store::failstop;
