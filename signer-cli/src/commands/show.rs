//! `show ID`: the whole preview, checked locally, with every hidden character made visible.

use super::{connect, out, outln};
use crate::client::{now_unix, Client};
use crate::config::Settings;
use crate::proposal::{check, Checked};
use anyhow::Result;
use approval_core::{ProposalId, ServerId};

/// Fetches a proposal over a signed read and checks it (see [`crate::proposal::check`]).
pub async fn fetch(client: &Client, id: &ProposalId) -> Result<(Checked, ServerId)> {
    let server_id = client.server_id().await?;
    let view = client.get(&format!("/v1/proposals/{id}")).await?;
    Ok((check(&view, Some(id), &server_id)?, server_id))
}

/// `signer-cli show [ID]`: a full id, a unique prefix, or none (the one pending
/// proposal waiting for this approver).
pub async fn show(settings: &Settings, id: Option<&str>) -> Result<()> {
    let client = connect(settings)?;
    let id = super::pick::pick(&client, id, None).await?;
    let (checked, _) = fetch(&client, &id).await?;
    if settings.json {
        outln(&crate::display::to_json(&checked.to_json()));
    } else {
        out(&checked.render(now_unix(), crate::display::color()));
    }
    Ok(())
}
