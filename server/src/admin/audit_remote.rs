//! `approval-server audit verify|export --server URL --key FILE`: the audit log of a
//! running server, read over the approver API's signed `GET /v1/audit`.
//!
//! The running server locks its store, so the offline form cannot read it. Here the
//! server only ships the entries and its head; the chain is checked on this side by
//! the same [`crate::audit::verify_chain`] as offline, so an edited, reordered or
//! truncated log is caught just the same. Any approver in the keyring may read it.

use crate::audit::AuditEntry;
use crate::store::AuditLog;
use anyhow::Context;
use approval_core::keyring::SecretKey;
use approval_core::message::sign_read;
use approval_core::{ServerId, Sha256Hex};
use std::path::Path;
use std::time::Duration;

/// Parses `Audit-Head: <seq> <sha256>` (or `none`).
pub fn parse_head(v: &str) -> anyhow::Result<Option<(u64, Sha256Hex)>> {
    let v = v.trim();
    if v == "none" {
        return Ok(None);
    }
    let (seq, hash) = v
        .split_once(' ')
        .ok_or_else(|| anyhow::anyhow!("Audit-Head {v:?} is not `<seq> <sha256>`"))?;
    let seq = seq
        .parse()
        .map_err(|_| anyhow::anyhow!("Audit-Head {v:?}: bad sequence number"))?;
    let hash = Sha256Hex::parse(hash).map_err(|e| anyhow::anyhow!("Audit-Head {v:?}: {e}"))?;
    Ok(Some((seq, hash)))
}

/// Parses the JSON lines of `GET /v1/audit`.
pub fn parse_entries(body: &str) -> anyhow::Result<Vec<AuditEntry>> {
    body.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| {
                format!("line {} of the audit answer is not an audit entry", i + 1)
            })
        })
        .collect()
}

/// Fetches the audit log of the running server at `server` (its approver API base
/// URL), signing the read with the key file `key`.
pub async fn fetch(server: &str, key: &Path) -> anyhow::Result<AuditLog> {
    let text = std::fs::read_to_string(key)
        .with_context(|| format!("cannot read the key file {}", key.display()))?;
    let key = SecretKey::parse(&text).with_context(|| {
        format!(
            "{} is not a key file (made by `signer-cli keygen`)",
            key.display()
        )
    })?;
    let base = server.trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{base}/v1/audit"))
        .with_context(|| format!("--server {server} is not a URL like http://127.0.0.1:4800"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("cannot set up HTTP")?;
    let server_id = server_id(&client, base).await?;
    let auth = sign_read(&key.key, &key.name, &server_id, now, "GET", url.path());
    let resp = client
        .get(url.clone())
        .header(reqwest::header::AUTHORIZATION, auth)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", crate::stdio::bridge::unreachable(url.as_str(), &e)))?;
    let status = resp.status();
    let head = resp
        .headers()
        .get("audit-head")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp
        .text()
        .await
        .with_context(|| format!("broken answer from {url}"))?;
    if !status.is_success() {
        let why = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                Some(format!(
                    "{}: {}",
                    v.get("code")?.as_str()?,
                    v.get("message")?.as_str()?
                ))
            })
            .unwrap_or_else(|| {
                format!(
                    "HTTP {status}, not an approval gate's approver API (use the \"Approver API:\" address the server prints)"
                )
            });
        anyhow::bail!("{url} refused: {why}");
    }
    let head = head.ok_or_else(|| {
        anyhow::anyhow!(
            "{url} answered without an Audit-Head header: is this an approval gate's approver API?"
        )
    })?;
    Ok((parse_entries(&body)?, parse_head(&head)?))
}

/// The server id a signed read covers, from the server's `GET /healthz` (the read
/// signature binds it, so the header cannot be replayed to another server).
pub(super) async fn server_id(client: &reqwest::Client, base: &str) -> anyhow::Result<ServerId> {
    let url = format!("{base}/healthz");
    let resp = client
        .get(&url)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}", crate::stdio::bridge::unreachable(&url, &e)))?;
    let v: serde_json::Value = resp.json().await.map_err(|_| {
        anyhow::anyhow!(
            "{url} did not answer as an approval gate's approver API (use the \"Approver API:\" address the server prints)"
        )
    })?;
    let id = v.get("server_id").and_then(|v| v.as_str()).ok_or_else(|| {
        anyhow::anyhow!("{url} has no server_id: not an approval gate's approver API")
    })?;
    ServerId::parse(id).map_err(|e| anyhow::anyhow!("{url}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_head("none").unwrap(), None);
        let h = "ab".repeat(32);
        assert_eq!(
            parse_head(&format!("3 {h}")).unwrap(),
            Some((3, Sha256Hex::parse(&h).unwrap()))
        );
        assert!(parse_head("3").is_err());
        assert!(parse_head(&format!("x {h}")).is_err());
        assert!(parse_head("3 zz").is_err());
    }
}
