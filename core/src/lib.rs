//! `approval-core`: the domain of signed multi-party approval, without I/O.
//!
//! Everything that decides whether an action may run lives here, as plain types and
//! functions, so that the server, `signer-cli` and any system that acts on a receipt
//! compute the same hashes and the same quorum with the same code. There is no clock
//! (time is always an argument), no file or network access, and no async runtime.
//!
//! The pieces, in the order a proposal meets them:
//! - [`json`]: the agent's payload is parsed exactly, or refused with a JSON pointer;
//! - [`preview`]: the canonical preview and its `preview_sha256` (RFC 8785);
//! - [`policy`] and [`keyring`]: who may approve what, and with which key;
//! - [`message`]: the exact text an approver signs, signing and `verify_strict`;
//! - [`quorum`]: the one function that counts signatures;
//! - [`status`]: the state machine, transitions as functions of the current time;
//! - [`receipt`]: what the system that acts verifies offline;
//! - [`attestation`]: the server's signed word that it claimed an execution in time;
//! - [`claim`]: the storage rules that keep an effect to one run (the compare-and-swap,
//!   leases, leadership terms, group commit), shared by the stores and `approval-model`;
//! - [`passkey`]: WebAuthn assertions and registrations, for approvers who sign in
//!   with a passkey instead of a key file.
//!
//! And what every program shows a human: [`escape`] and [`unicode`], the one policy
//! for showing untrusted text (escaping and look-alike warnings); and [`show`], a
//! server's proposal view checked and rendered as every approver reads it (the CLI,
//! its page, the gate's approver page).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod action;
pub mod api;
pub mod approver_key;
pub mod attestation;
pub mod claim;
pub mod code;
pub mod cooldown;
pub mod enrolment;
pub mod escape;
pub mod fingerprint;
pub mod governance;
pub mod ids;
pub mod json;
pub mod keyring;
pub mod keys;
pub mod message;
pub mod notify;
pub mod passkey;
pub mod policy;
pub mod preview;
pub mod quorum;
pub mod receipt;
pub mod show;
pub mod ssh;
pub mod status;
pub mod time;
pub mod unicode;

pub use action::{Action, Actor};
pub use attestation::{Attestation, AttestationError};
pub use code::Code;
pub use ids::{ApproverName, Kind, ProposalId, ServerId, Sha256Hex};
pub use keyring::{Keyring, KeyringError, PublicKey};
pub use message::{Decision, SignedDecision};
pub use policy::{DisabledKind, KindState, Policy, PolicyError, PolicySet};
pub use preview::{Execution, Preview};
pub use quorum::{evaluate, QuorumOutcome, Tally};
pub use receipt::{
    verify_receipt, verify_receipt_attested, Receipt, ReceiptError, VerifiedReceipt,
};
pub use status::{Lifecycle, Status, TransitionError};
pub use time::{Seconds, Timestamp};
