//! Enrolment of a passkey approver (issue #34): checks a link made by
//! `approval-server enroll`, verifies the new credential and spends the link. The
//! server adds nothing to the keyring: it answers the line the operator adds.

use super::{Service, ServiceError};
use crate::store::Raise;
use approval_core::api::{Enrolled, EnrolmentOptions, EnrolmentRequest};
use approval_core::enrolment::{enrolment_challenge, user_handle, EnrolmentClaim, EnrolmentError};
use approval_core::keyring::{ApproverKey, Keyring, PasskeyEntry};
use approval_core::passkey::{self, b64url, from_b64url, Relying};
use approval_core::{Code, Timestamp};

/// The display name of the relying party in the authenticator's prompt.
pub const RP_NAME: &str = "approval-gate";

fn refused(e: EnrolmentError) -> ServiceError {
    let code = match e {
        EnrolmentError::Expired(_) => Code::Expired,
        EnrolmentError::BadSignature => Code::Unauthorized,
        EnrolmentError::Malformed(_) => Code::BadRequest,
    };
    ServiceError::new(code, e.to_string())
}

fn spent() -> ServiceError {
    ServiceError::new(
        Code::AlreadyRecorded,
        "this enrolment link was already used (each link makes one passkey): ask whoever runs the server for a new one (`approval-server enroll NAME`)",
    )
}

impl Service {
    /// Checks an enrolment token: this server's, in time, not spent.
    fn enrolment_claim(&self, token: &str) -> Result<EnrolmentClaim, ServiceError> {
        let claim = EnrolmentClaim::verify(
            token,
            self.identity.public_key(),
            self.identity.server_id(),
            self.now(),
        )
        .map_err(refused)?;
        // Raising to 0 reads the mark without spending it (1 means spent).
        match self.store.raise(&claim.mark(), 0)? {
            Raise::Kept(n) if n >= 1 => Err(spent()),
            _ => Ok(claim),
        }
    }

    /// What the enrolment page passes to `navigator.credentials.create`.
    pub fn enrolment_options(&self, token: &str) -> Result<EnrolmentOptions, ServiceError> {
        let claim = self.enrolment_claim(token)?;
        Ok(EnrolmentOptions {
            user_id: b64url(&user_handle(self.identity.server_id(), &claim.name)),
            challenge: b64url(&enrolment_challenge(token)),
            expires_at: Timestamp::from_unix(claim.exp),
            name: claim.name,
            rp_id: claim.rp,
            rp_name: RP_NAME.into(),
            origin: claim.origin,
        })
    }

    /// Verifies the new credential (origin, RP, challenge of this link, user present
    /// and verified, an ES256 or EdDSA key), spends the link, and answers the
    /// keyring line. Spent only when everything else held, so a failed attempt
    /// (a cancelled prompt, a wrong device) can be retried with the same link.
    pub fn enrol(&self, token: &str, req: &EnrolmentRequest) -> Result<Enrolled, ServiceError> {
        let claim = self.enrolment_claim(token)?;
        let bad = |what: &str| {
            ServiceError::new(
                Code::BadRequest,
                format!("{what} must be base64url without padding"),
            )
        };
        let cred = from_b64url(&req.credential_id).map_err(|_| bad("credential_id"))?;
        let att = from_b64url(&req.attestation_object).map_err(|_| bad("attestation_object"))?;
        let cdj = from_b64url(&req.client_data_json).map_err(|_| bad("client_data_json"))?;
        let relying = Relying {
            rp_id: &claim.rp,
            origin: &claim.origin,
        };
        let reg = passkey::verify_registration(&relying, &enrolment_challenge(token), &att, &cdj)
            .map_err(|e| {
            ServiceError::new(
                Code::BadRequest,
                format!("the new passkey was refused: {e}"),
            )
        })?;
        if reg.credential_id != cred {
            return Err(ServiceError::new(
                Code::BadRequest,
                "credential_id differs from the one inside the attestation object",
            ));
        }
        let entry = PasskeyEntry::new(reg.key, &claim.rp, Some(&claim.origin), reg.credential_id)
            .map_err(|e| ServiceError::new(Code::BadRequest, e))?;
        if self.store.raise(&claim.mark(), 1)? != Raise::Raised {
            return Err(spent());
        }
        let line = Keyring::entry_line(&claim.name, &ApproverKey::Passkey(entry));
        tracing::info!(approver = %claim.name, "enrolment link used: a passkey line was issued");
        Ok(Enrolled { keyring_line: line })
    }
}
