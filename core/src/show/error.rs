//! Why a server's proposal view was refused before anything was shown or signed.
//!
//! The messages are an interface: `signer-cli` prints them as they are (exit code 1)
//! and the gate's approver page will show them the same way, so each one says what
//! did not hold and that nothing was signed. Text that came from the server is
//! escaped inside them ([`crate::escape`]), so a message is safe on a terminal.

use crate::escape::{escape, quote};
use crate::ids::{ProposalId, ServerId, Sha256Hex};
use crate::Kind;
use thiserror::Error;

/// A proposal view that did not pass [`super::Checked::check`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ShowError {
    /// The answer is not a JSON object.
    #[error("the server's answer is not a proposal object: refused, nothing signed")]
    NotAnObject,
    /// A field the checks need is absent.
    #[error("the server's proposal has no `{0}` field: refused, nothing signed")]
    MissingField(&'static str),
    /// The preview does not parse (the parser's reason, escaped).
    #[error("the server sent an invalid preview ({}): refused, nothing signed", escape(.0))]
    InvalidPreview(String),
    /// `preview_sha256` is not a hash.
    #[error(
        "the server's preview_sha256 is not 64 lowercase hex characters: refused, nothing signed"
    )]
    ClaimNotAHash,
    /// The preview does not hash to what the server claims.
    #[error(
        "PREVIEW HASH MISMATCH: the server claims preview_sha256 {claimed} but the preview it sent hashes to {computed}. \
         What you would sign is not what you were shown: refused, nothing signed. Tell whoever runs the server."
    )]
    HashMismatch {
        /// The server's `preview_sha256`.
        claimed: Sha256Hex,
        /// The hash recomputed from the preview.
        computed: Sha256Hex,
    },
    /// The view's `proposal_id` differs from its preview's.
    #[error(
        "the server's proposal_id {} differs from its preview's {preview}: refused, nothing signed",
        quote(.view)
    )]
    IdMismatch {
        /// The view's `proposal_id`, as sent.
        view: String,
        /// The preview's.
        preview: ProposalId,
    },
    /// The server sent another proposal than the one asked for.
    #[error("asked for proposal {asked} but the server sent the preview of {sent}: refused, nothing signed")]
    OtherProposal {
        /// The id asked for.
        asked: ProposalId,
        /// The preview's id.
        sent: ProposalId,
    },
    /// The preview was made by another server than the one talked to.
    #[error(
        "SERVER MISMATCH: this preview was made by server {preview} but the server you are talking to is {ours}: refused, nothing signed"
    )]
    ServerMismatch {
        /// The preview's `server_id`.
        preview: ServerId,
        /// The server's id as pinned by the caller.
        ours: ServerId,
    },
    /// The policy does not parse (the parser's reason, escaped).
    #[error("the server sent an invalid policy ({}): refused, nothing signed", escape(.0))]
    InvalidPolicy(String),
    /// The policy sent does not hash to the preview's `policy_sha256`.
    #[error(
        "POLICY MISMATCH: the preview names policy_sha256 {named} but the policy the server sent hashes to {computed}: refused, nothing signed"
    )]
    PolicyMismatch {
        /// The preview's `policy_sha256`.
        named: Sha256Hex,
        /// The hash of the policy sent.
        computed: Sha256Hex,
    },
    /// The policy governs another kind than the preview's.
    #[error("the policy sent governs kind {policy} but the preview is of kind {preview}: refused, nothing signed")]
    KindMismatch {
        /// The policy's kind.
        policy: Kind,
        /// The preview's kind.
        preview: Kind,
    },
    /// The status is not one this version knows.
    #[error("the server reports an unknown status {}", quote(.0))]
    UnknownStatus(String),
    /// `quorum` or `decisions` does not parse: refused rather than shown as "none yet".
    #[error(
        "the server's `{field}` is not understood ({}): refused, nothing signed. \
         A newer server may need a newer signer-cli; otherwise tell whoever runs the server.",
        escape(.detail)
    )]
    NotUnderstood {
        /// `quorum` or `decisions`.
        field: &'static str,
        /// The parser's reason.
        detail: String,
    },
}
