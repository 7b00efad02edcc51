//! `signer-cli`: approvers read the exact preview and sign it on their own machines.
//!
//! The binary is a thin layer over `approval-core`: it never hashes, formats signed
//! messages or verifies signatures itself. The modules:
//! - [`config`]: where the server and key come from, loading the key safely;
//! - [`client`]: HTTP with signed reads, time-outs, and server errors;
//! - [`known_servers`]: each server's id and key, pinned on first use;
//! - [`proposal`]: core's checks ([`approval_core::show`]) every proposal passes before it
//!   is shown or signed, as the CLI's refusals;
//! - [`display`]: terminal detection, tables, `--json`; the rendering and the escaping
//!   are core's (`approval_core::show` and `approval_core::escape`, the one escaping and
//!   look-alike policy, shared with the server's notifications);
//! - [`commands`]: one module per command;
//! - [`ui`]: the approver's page (`signer-cli ui`): a loopback server and its guards;
//! - [`ssh_agent`]: decisions signed by a key in ssh-agent (or on a FIDO token behind it);
//! - [`failure`]: the exit code each error means (mapped in `main`).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod commands;
pub mod config;
pub mod desktop;
pub mod display;
pub mod failure;
pub mod known_servers;
pub mod proposal;
pub mod ssh_agent;
pub mod ui;
