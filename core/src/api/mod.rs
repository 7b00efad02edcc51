//! The wire contract, typed: the JSON shapes the server sends and its clients read.
//!
//! The server serialises these types and signer-cli (or any client) deserialises
//! them, so a field is named once, here. `docs/PROTOCOL.md` shows them; its examples
//! are parsed into these types by `core/tests/protocol_examples.rs`.
//!
//! Key order: the server turns an answer into a `serde_json::Value` before writing it
//! (as it always has), so keys go out sorted whatever the field order here.
//!
//! This module may import the rest of the core; nothing in the core imports it.

pub mod approver;
pub mod page;
pub mod tools;

pub use approver::{
    AlreadyRecorded, ConfigProposed, Decided, DecisionView, DisabledKindView, ErrorBody, Health,
    HealthStatus, ProposalPage, ProposalView, ProposeConfig, QuorumView, ReauthEvent,
};
pub use page::{
    Enrolled, EnrolmentOptions, EnrolmentRequest, PageDecision, PagePasskey, PageQuorum, PageState,
};
pub use tools::{DecisionOut, GroupOut, ListItem, RequiredOut, ResultOut, ToolOutput};
