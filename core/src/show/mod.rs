//! A proposal as a server describes it (its ProposalView JSON), checked, then shown
//! to a human: the one rendering `signer-cli show` prints, `signer-cli ui` puts on
//! its page, and the gate's own approver page (`/approve/<id>`, issue #34) serves.
//! Written once here, so the same escaping and the same look-alike warnings reach
//! every approver whatever they read the proposal with.
//!
//! The server is not trusted with what the approver signs. [`Checked::check`]
//! recomputes `preview_sha256` from the preview and refuses the proposal when the
//! server's claim differs, when the preview is for another proposal or was made by
//! another server, or when the policy sent along does not hash to the preview's
//! `policy_sha256` ([`ShowError`] says which). Only a [`Checked`] proposal is rendered
//! or signed, and signatures always cover the locally computed hash.
//!
//! Pure, like the rest of core: the time is an argument (`now`, Unix seconds), and
//! whether to colour (a terminal) is the caller's to decide.
//! - [`error`]: why a view was refused;
//! - [`render`]: the human view ([`Checked::render`], [`render_plain`]);
//! - [`text`]: durations, relative times, the highlight, name lists, cutting.

pub mod error;
pub mod render;
pub mod text;

pub use error::ShowError;
pub use render::render_plain;

use crate::api::{DecisionView, QuorumView};
use crate::json::canonical_bytes;
use crate::{ApproverName, Policy, Preview, ProposalId, ServerId, Sha256Hex, Status, Timestamp};
use serde_json::Value;

/// A proposal whose preview hash, id, server and policy were checked locally. Made
/// only by [`Checked::check`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Checked {
    /// The server's ProposalView, as received.
    pub view: Value,
    /// The preview.
    pub preview: Preview,
    /// `preview_sha256`, recomputed here (equal to the server's claim).
    pub hash: Sha256Hex,
    /// The policy that governs it (its hash equals the preview's `policy_sha256`).
    pub policy: Policy,
    /// The status the server reports.
    pub status: Status,
    /// The server's count.
    pub quorum: QuorumView,
    /// The decisions so far.
    pub decisions: Vec<DecisionView>,
    /// Until when an approved proposal may run.
    pub executable_until: Option<String>,
    /// From when an approved proposal may run (quorum plus the policy's cooldown),
    /// as the server reports it; absent without a cooldown.
    pub executable_from: Option<String>,
}

fn field<'a>(v: &'a Value, name: &'static str) -> Result<&'a Value, ShowError> {
    v.get(name).ok_or(ShowError::MissingField(name))
}

/// `quorum` or `decisions`: shown, never used to decide what is signed; but a value
/// that does not parse is refused rather than shown as "none yet" (which would also
/// hide that this approver already decided).
fn understood<T: serde::de::DeserializeOwned>(
    view: &Value,
    name: &'static str,
) -> Result<Option<T>, ShowError> {
    view.get(name)
        .map(|v| {
            serde_json::from_value::<T>(v.clone()).map_err(|e| ShowError::NotUnderstood {
                field: name,
                detail: e.to_string(),
            })
        })
        .transpose()
}

impl Checked {
    /// Checks a ProposalView against the proposal id asked for (if any) and the id
    /// of the server it came from (pinned by the caller, never read from the view).
    pub fn check(
        view: &Value,
        expected: Option<&ProposalId>,
        server_id: &ServerId,
    ) -> Result<Checked, ShowError> {
        if !view.is_object() {
            return Err(ShowError::NotAnObject);
        }
        let preview = Preview::from_value(field(view, "preview")?)
            .map_err(|e| ShowError::InvalidPreview(e.to_string()))?;
        let claimed = field(view, "preview_sha256")?
            .as_str()
            .and_then(|s| Sha256Hex::parse(s).ok())
            .ok_or(ShowError::ClaimNotAHash)?;
        let hash = preview.sha256();
        if hash != claimed {
            return Err(ShowError::HashMismatch {
                claimed,
                computed: hash,
            });
        }
        let view_id = field(view, "proposal_id")?.as_str().unwrap_or("");
        if view_id != preview.proposal_id.as_str() {
            return Err(ShowError::IdMismatch {
                view: view_id.to_owned(),
                preview: preview.proposal_id.clone(),
            });
        }
        if let Some(id) = expected {
            if &preview.proposal_id != id {
                return Err(ShowError::OtherProposal {
                    asked: id.clone(),
                    sent: preview.proposal_id.clone(),
                });
            }
        }
        if &preview.server_id != server_id {
            return Err(ShowError::ServerMismatch {
                preview: preview.server_id.clone(),
                ours: server_id.clone(),
            });
        }
        let policy_value = field(view, "policy")?;
        let policy = Policy::from_canonical_json(policy_value)
            .map_err(|e| ShowError::InvalidPolicy(e.to_string()))?;
        let policy_hash = Sha256Hex::digest(&canonical_bytes(policy_value));
        if policy_hash != preview.policy_sha256 || policy.sha256() != preview.policy_sha256 {
            return Err(ShowError::PolicyMismatch {
                named: preview.policy_sha256,
                computed: policy_hash,
            });
        }
        if policy.kind() != &preview.kind {
            return Err(ShowError::KindMismatch {
                policy: policy.kind().clone(),
                preview: preview.kind.clone(),
            });
        }
        let status_text = field(view, "status")?.as_str().unwrap_or("");
        let status = Status::parse(status_text)
            .ok_or_else(|| ShowError::UnknownStatus(status_text.to_owned()))?;
        let quorum = understood::<QuorumView>(view, "quorum")?.unwrap_or_else(|| QuorumView {
            need: policy.spec().quorum,
            ..QuorumView::default()
        });
        let decisions = understood::<Vec<DecisionView>>(view, "decisions")?.unwrap_or_default();
        let text = |name: &str| view.get(name).and_then(Value::as_str).map(str::to_owned);
        Ok(Checked {
            executable_until: text("executable_until"),
            executable_from: text("executable_from"),
            view: view.clone(),
            preview,
            hash,
            policy,
            status,
            quorum,
            decisions,
        })
    }

    /// Whether `me` is named by the policy.
    pub fn may_decide(&self, me: &ApproverName) -> bool {
        self.policy.is_approver(me)
    }

    /// When the proposal is APPROVED and still in its cooldown at `now` (Unix
    /// seconds, the reader's clock), the moment it becomes executable.
    pub fn cooling_until(&self, now: i64) -> Option<Timestamp> {
        let from = Timestamp::parse(self.executable_from.as_deref()?).ok()?;
        (self.status == Status::Approved && from.unix() > now).then_some(from)
    }

    /// Whether `me` already has a decision of this word on record.
    pub fn has_decided(&self, me: &ApproverName, decision: &str) -> bool {
        self.decisions
            .iter()
            .any(|d| &d.signed.approver == me && d.signed.decision.as_str() == decision)
    }

    /// The `--json` form: the server's view plus what was checked here.
    pub fn to_json(&self) -> Value {
        let mut v = self.view.clone();
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "checked".into(),
                serde_json::json!({
                    "preview_sha256": self.hash.to_hex(),
                    "server_id": self.preview.server_id.as_str(),
                    "policy_sha256": self.preview.policy_sha256.to_hex(),
                }),
            );
        }
        v
    }
}

#[cfg(test)]
mod tests;
