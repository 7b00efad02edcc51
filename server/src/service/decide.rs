//! A signed decision (approve, reject, revoke, resolve), as named steps: the
//! approver's key, the proposal, the signature (charged to its connection when it
//! fails), a resend, then, inside the compare-and-swap, whether the state machine
//! allows it now ([`Action::allowed_in`] through [`Lifecycle::permits`]) and what the
//! new tally leads to.
//!
//! May import the store, the record, the audit events, `throttle` and core.

use super::error::transition_refusal;
use super::{Decided, Service, ServiceError};
use crate::audit::{AuditEvent, AuditKind};
use crate::record::{ProposalRecord, StoredDecision};
use crate::store::Raise;
use crate::throttle::ConnectionId;
use approval_core::keyring::{ApproverKey, SignatureKind};
use approval_core::message::{Decision, Proof, SignedDecision};
use approval_core::policy::Policy;
use approval_core::quorum::{QuorumOutcome, Tally};
use approval_core::status::{Lifecycle, Status, TransitionError};
use approval_core::{Action, Code, ProposalId, Timestamp};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};

/// A refusal of who signed or of what they signed.
fn forbidden(m: String) -> ServiceError {
    ServiceError::new(Code::InvalidSignature, m)
}

/// What the decision leads to, given the state it found (`life`, expiry applied) and
/// the tally with it counted: a transition and its audit kind, or nothing (the
/// decision is recorded, quorum not reached yet).
fn consequence(
    life: Lifecycle,
    now: Timestamp,
    cur: &ProposalRecord,
    tally: &Tally,
    policy: &Policy,
    d: &SignedDecision,
) -> Option<(Result<Lifecycle, TransitionError>, AuditKind)> {
    match (life.status, &tally.outcome, d.decision) {
        // The cooldown is the signed preview's (the policy's, by its hash).
        (Status::Pending, QuorumOutcome::Reached, _) => Some((
            life.approve_with_cooldown(now, cur.preview.cooldown, policy.spec().execute_within),
            AuditKind::Approved,
        )),
        (Status::Pending, QuorumOutcome::Vetoed, _) => {
            Some((life.reject(now), AuditKind::Rejected))
        }
        (Status::Approved, QuorumOutcome::Revoked, _) => {
            Some((life.revoke(now), AuditKind::Revoked))
        }
        // A counted reject during the cooldown is a veto: it ends it.
        (Status::Approved, _, Decision::Reject) if tally.rejections.contains(&d.approver) => {
            Some((life.reject(now), AuditKind::Rejected))
        }
        (Status::OutcomeUnknown, _, Decision::ResolveSucceeded) => {
            Some((life.resolve(true), AuditKind::Resolved))
        }
        (Status::OutcomeUnknown, _, Decision::ResolveFailed) => {
            Some((life.resolve(false), AuditKind::Resolved))
        }
        _ => None,
    }
}

impl Service {
    /// Records a signed decision (idempotently) and applies what it causes. A failed
    /// signature is charged to `source` (the client's connection), never to the approver
    /// named: a decision that verifies is always heard (see [`crate::throttle`]).
    pub async fn decide(
        &self,
        id: &str,
        d: SignedDecision,
        source: Option<ConnectionId>,
    ) -> Result<Decided, ServiceError> {
        let decision = d.decision.as_str();
        let r = self.decide_steps(id, d, source).await;
        let outcome = match &r {
            Ok(done) if done.already_recorded => "already_recorded",
            Ok(_) => "recorded",
            Err(e) => e.code.as_str(),
        };
        self.metrics.decision(decision, outcome);
        r
    }

    /// [`Service::decide`]'s steps, in order.
    async fn decide_steps(
        &self,
        id: &str,
        d: SignedDecision,
        source: Option<ConnectionId>,
    ) -> Result<Decided, ServiceError> {
        let key = self.approver_key(&d)?;
        let rec = self.decided_on(id).await?;
        self.check_signature(&rec, &key, &d, source).await?;
        self.check_counter(&key, &d, &rec)?;
        if let Some(resent) = self.resent(&rec, &d).await? {
            return Ok(resent);
        }
        let already = AtomicBool::new(false);
        let record = self
            .transition_from(rec, |cur, now| {
                if cur.decisions.iter().any(|x| x.signed == d) {
                    // The same signed decision arrived concurrently and won.
                    already.store(true, Ordering::SeqCst);
                    return Ok(None);
                }
                self.apply_decision(cur, now, &d).map(Some)
            })
            .await?;
        let already = already.load(Ordering::SeqCst);
        if already {
            // Found applied by a concurrent identical post: wait until it is durable.
            self.commit.flush().await?;
        }
        tracing::info!(id = %record.id(), approver = %d.approver, decision = %d.decision, status = %record.status(), "decision");
        if record.preview.on_quorum() && record.status() == Status::Approved {
            // Nobody calls execute for it: the gate does, once it may (`on_quorum`).
            self.wake_on_quorum(record.id().clone());
        }
        Ok(Decided {
            record,
            already_recorded: already,
        })
    }

    /// Step 1: the approver's key in the keyring in force.
    fn approver_key(&self, d: &SignedDecision) -> Result<ApproverKey, ServiceError> {
        let config = self.config();
        if !config.keyring.contains(&d.approver) {
            return Err(forbidden(format!(
                "approver {} is not in the server's keyring",
                d.approver
            )));
        }
        let key = config
            .keyring
            .for_proof(&d.approver, &d.proof)
            .ok_or_else(|| {
                forbidden(match d.proof {
                    Proof::Signature(_) => format!(
                        "approver {} has no ed25519 key in the server's keyring, only passkeys: decide on the approver page",
                        d.approver
                    ),
                    Proof::Passkey(_) => format!(
                        "approver {} has no passkey with this credential id in the server's keyring: enrol it (`approval-server enroll {}`) and add its line",
                        d.approver, d.approver
                    ),
                    Proof::SshSig(_) => format!(
                        "approver {} has no OpenSSH key in the server's keyring that made this SSHSIG: add its `{} ssh-ed25519 ...` (or sk-ssh-ed25519@openssh.com) line",
                        d.approver, d.approver
                    ),
                })
            })?;
        Ok(key.clone())
    }

    /// Step 2: the proposal decided on.
    async fn decided_on(&self, id: &str) -> Result<ProposalRecord, ServiceError> {
        let found = match ProposalId::parse(id) {
            Ok(pid) => Some(self.store.get_async(&pid).await?),
            Err(_) => None,
        };
        match found {
            Some(Some(rec)) => Ok(rec),
            _ => Err(ServiceError::new(
                Code::UnknownProposal,
                format!("no proposal {id:?}"),
            )),
        }
    }

    /// Step 3: the signer is an approver of the record's policy, the policy accepts
    /// this kind of signature, and it verifies (a failure is charged to `source`).
    async fn check_signature(
        &self,
        rec: &ProposalRecord,
        key: &ApproverKey,
        d: &SignedDecision,
        source: Option<ConnectionId>,
    ) -> Result<(), ServiceError> {
        if !self.visible(&d.approver, rec) {
            return Err(forbidden(format!(
                "{} is not an approver of kind {} under the policy of this proposal: only the policy's approvers may decide",
                d.approver, rec.preview.kind
            )));
        }
        let policy = self.policy_of(rec)?;
        let kind = d.proof.kind();
        if !policy.accepts(kind) {
            let others: Vec<&str> = policy.spec().accept.iter().map(|k| k.as_str()).collect();
            return Err(ServiceError::new(
                Code::SignatureNotAccepted,
                format!(
                    "kind {} accepts only {} signatures (its policy's accept = {others:?}), and this decision is signed with a {kind}: {}",
                    rec.preview.kind,
                    others.join(" and "),
                    match kind {
                        SignatureKind::Passkey => "decide with signer-cli and a key in the keyring",
                        SignatureKind::Key => "decide on the approver page with the passkey in the keyring",
                    }
                ),
            ));
        }
        if let Some(why) = policy.presence_refusal(&d.proof) {
            return Err(ServiceError::new(
                Code::SignatureNotAccepted,
                format!(
                    "kind {} has {why}; this decision is signed without it: decide with the security key in the keyring (signer-cli --ssh-agent, touching the token)",
                    rec.preview.kind
                ),
            ));
        }
        self.forgeries.admit(source, self.now()).await;
        // Memoised: the quorum count inside the transition and the answer's view
        // check this same signature again, and should not redo the signature math.
        if !self.verified.verify(key, d, &rec.preview_sha256) {
            self.forgeries.failed(source, self.now());
            self.metrics.signature_failure("decision");
            // Checked again, uncached, only to say what was wrong.
            let why = d
                .verify(key, &rec.preview_sha256)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            return Err(forbidden(match key {
                ApproverKey::Key(k) => format!(
                    "signature does not verify for {} {} on preview {}: sign exactly `approval-v1\\n{}\\n<preview_sha256>\\n<reason>` for this proposal with the key in the keyring; {}",
                    d.approver, d.decision, rec.preview_sha256.prefix(8), d.decision,
                    approval_core::fingerprint::held_key_note(&d.approver, k)
                ),
                ApproverKey::Ssh(k) => format!(
                    "{why} ({} {} on preview {}: sign `approval-v1\\n{}\\n<preview_sha256>\\n<reason>` as an SSHSIG, namespace approval-v1, sha512, with the key {} of the keyring)",
                    d.approver, d.decision, rec.preview_sha256.prefix(8), d.decision, k.fingerprint()
                ),
                ApproverKey::Passkey(p) => format!(
                    "{why} ({} {} on preview {}: the passkey must sign on {} for rp {} with the challenge SHA-256(`approval-v1\\n{}\\n<preview_sha256>\\n<reason>`), user present and verified)",
                    d.approver, d.decision, rec.preview_sha256.prefix(8), p.origin(), p.rp_id(), d.decision
                ),
            }));
        }
        // A connection in the listener's approver reserve is served once this is set.
        self.forgeries.passed(source, self.now());
        Ok(())
    }

    /// Step 3b: a passkey's or a security key's (`sk-`, mark `sk/<SHA-256 of its blob>`)
    /// signature counter must go up (or stay 0 on an
    /// authenticator that keeps none), across every decision and every instance: a
    /// counter that goes back means a cloned authenticator, or an assertion replayed.
    /// Raised before the decision is written, so a crash in between only spends a
    /// count the authenticator already spent.
    fn check_counter(
        &self,
        key: &ApproverKey,
        d: &SignedDecision,
        rec: &ProposalRecord,
    ) -> Result<(), ServiceError> {
        let (mark, what) = match (key, &d.proof) {
            (ApproverKey::Passkey(p), Proof::Passkey(a)) => (
                p.counter_mark(),
                format!(
                    "passkey assertion refused: {}'s signature counter ({} bytes of credential id)",
                    d.approver,
                    a.credential_id.len()
                ),
            ),
            (ApproverKey::Ssh(k), Proof::SshSig(_)) if k.is_sk() => (
                k.counter_mark(),
                format!(
                    "security key signature refused: {}'s token {} counter",
                    d.approver,
                    k.fingerprint()
                ),
            ),
            _ => return Ok(()),
        };
        if rec.decisions.iter().any(|x| x.signed == *d) {
            // The very same assertion, already recorded: step 4 acknowledges it
            // again and changes nothing.
            return Ok(());
        }
        // Step 3 verified the proof (memoised): its counter is read, not re-verified.
        let count = d.proof.sign_count().unwrap_or(0);
        match self.store.raise(&mark, u64::from(count))? {
            Raise::Raised => Ok(()),
            Raise::Kept(0) if count == 0 => Ok(()),
            Raise::Kept(held) => Err(forbidden(format!(
                "{what} is {count}, not above the {held} already seen: the signature was replayed or the authenticator was cloned; decide again with it, and tell whoever runs the server if this repeats"
            ))),
        }
    }

    /// Step 4: the same approver's same decision already recorded: this exact one is
    /// acknowledged again (once durable), another one refused.
    async fn resent(
        &self,
        rec: &ProposalRecord,
        d: &SignedDecision,
    ) -> Result<Option<Decided>, ServiceError> {
        let Some(prev) = rec
            .decisions
            .iter()
            .find(|x| x.signed.approver == d.approver && x.signed.decision == d.decision)
        else {
            return Ok(None);
        };
        if prev.signed == *d {
            // The first copy may still be waiting for its fsync: acknowledge this
            // one only once that write is durable too.
            self.commit.flush().await?;
            return Ok(Some(Decided {
                record: rec.clone(),
                already_recorded: true,
            }));
        }
        Err(ServiceError::new(
            Code::AlreadyRecorded,
            format!(
                "{} already recorded a {} on this proposal",
                d.approver, d.decision
            ),
        )
        .about(rec, self.now()))
    }

    /// Step 5, inside the compare-and-swap: whether the state machine takes this
    /// decision now, the record with it added, and what the new tally leads to.
    fn apply_decision(
        &self,
        cur: &ProposalRecord,
        now: Timestamp,
        d: &SignedDecision,
    ) -> Result<(ProposalRecord, Vec<AuditEvent>), ServiceError> {
        let life = cur.lifecycle.at(now);
        if !life.permits(Action::of(d.decision), now) {
            return Err(ServiceError::new(
                Code::InvalidTransition,
                format!("cannot {} a proposal that is {}", d.decision, life.status),
            )
            .about(cur, now));
        }
        let mut next = cur.clone();
        next.revision += 1;
        next.updated_at = now;
        next.decisions.push(StoredDecision {
            signed: d.clone(),
            at: now,
        });
        let mut events = vec![Self::event(
            AuditKind::Decision,
            cur,
            now,
            json!({"approver": d.approver, "decision": d.decision, "reason": d.reason}),
        )];
        let (tally, policy) = self.tally(&next)?;
        let changed = consequence(life, now, cur, &tally, &policy, d);
        next.lifecycle = life;
        if let Some((l, kind)) = changed {
            next.lifecycle = l.map_err(|e| transition_refusal(cur, now, e))?;
            events.push(Self::event(
                kind,
                cur,
                now,
                json!({"status": next.lifecycle.status, "by": d.approver}),
            ));
        }
        Ok((next, events))
    }
}

#[cfg(test)]
#[path = "decide_sk_tests.rs"]
mod sk_tests;
