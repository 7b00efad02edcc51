//! A proposal as the server describes it, checked before anything is shown or signed.
//!
//! The checks and the rendering are core's ([`approval_core::show`]), shared with the
//! gate's own approver page; this module only turns core's [`ShowError`] into the
//! CLI's refusal (exit code 1, the same message).

pub use approval_core::show::text::expires_in;
pub use approval_core::show::{Checked, ShowError};

use crate::failure::refused;
use anyhow::Result;
use approval_core::{ProposalId, ServerId};
use serde_json::Value;

/// Checks a ProposalView against the proposal id asked for and the server's id
/// ([`Checked::check`]); a refusal exits with code 1.
pub fn check(view: &Value, expected: Option<&ProposalId>, server_id: &ServerId) -> Result<Checked> {
    Checked::check(view, expected, server_id).map_err(|e| refused(e.to_string()))
}
