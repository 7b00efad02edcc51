//! The approver page's use cases (issue #34): the link a notice carries, and what
//! the page may read. Deciding from the page is `decide` like any decision: the
//! page's link lets its holder read one proposal and never act on it.
//!
//! The link is `<public_url>/approve/<id>#v=<view token>` (the token in the
//! fragment, which browsers never send to a server or a proxy log; the page's script
//! sends it as a header). The token is [`crate::identity::ServerIdentity::view_token`].

use super::{Service, ServiceError};
use crate::record::ProposalRecord;
use approval_core::{Code, ProposalId};

impl Service {
    /// Sets where approvers open the gate's pages: `scheme://host[:port]`.
    pub fn set_public_url(&self, url: &str) {
        let url = url.trim_end_matches('/').to_owned();
        match self.public_url.write() {
            Ok(mut u) => *u = Some(url),
            Err(p) => *p.into_inner() = Some(url),
        }
    }

    /// Where approvers open the gate's pages, once known.
    pub fn public_url(&self) -> Option<String> {
        match self.public_url.read() {
            Ok(u) => u.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The approver page link of a proposal, once the public URL is known.
    pub fn page_link(&self, id: &ProposalId) -> Option<String> {
        let base = self.public_url()?;
        Some(format!(
            "{base}/approve/{id}#v={}",
            self.identity.view_token(id)
        ))
    }

    /// The proposal a page link names, if `token` is its view token. A wrong token and
    /// an unknown id are refused alike (UNAUTHORIZED), so a guess learns nothing.
    pub fn get_for_page(&self, id: &str, token: &str) -> Result<ProposalRecord, ServiceError> {
        let refused = || {
            ServiceError::new(
                Code::Unauthorized,
                "this page link is not valid for this proposal: open the link from the notification again (the part after #v= must be kept)",
            )
        };
        let id = ProposalId::parse(id).map_err(|_| refused())?;
        if !self.identity.check_view_token(&id, token) {
            return Err(refused());
        }
        self.store
            .get(&id)?
            .ok_or_else(|| ServiceError::new(Code::UnknownProposal, format!("no proposal {id}")))
    }
}
