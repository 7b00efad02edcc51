//! Which proposal an id argument means: a full id as typed (or any id the server
//! knows as typed), else a unique prefix of one (`p-6355d6` or `6355d6`), or, with no id, the one pending proposal waiting for
//! this approver. Whatever is picked is then fetched, checked and shown in full as
//! before; only the typing of 46 characters is saved, never the hash confirmation.

use crate::client::Client;
use crate::display::{escape, truncate};
use crate::failure::{network, refused, usage};
use crate::proposal::check;
use anyhow::Result;
use approval_core::{ProposalId, Status};
use serde_json::Value;

/// Most proposals listed when looking for a prefix.
const SEARCH_LIMIT: usize = 1000;

/// Whether `id` is a whole proposal id: `p-` and 44 lowercase hex digits (random,
/// then the creation time), or 32 (the random part alone, from earlier servers).
fn is_full_id(id: &str) -> bool {
    id.strip_prefix("p-").is_some_and(|h| {
        (h.len() == 32 || h.len() == 44)
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The prefix as the server's ids start (`p-` added when left out).
fn normalise(prefix: &str) -> String {
    let p = prefix.trim().to_ascii_lowercase();
    if p.starts_with("p-") {
        p
    } else {
        format!("p-{p}")
    }
}

/// The ids in `candidates` that start with `prefix` (already normalised).
pub fn matching<'a>(candidates: &'a [String], prefix: &str) -> Vec<&'a String> {
    candidates
        .iter()
        .filter(|c| c.starts_with(prefix))
        .collect()
}

/// Resolves the id argument of `show` and the decision commands.
/// `status` narrows where a prefix or a missing id is looked for (None: any status).
pub async fn pick(client: &Client, id: Option<&str>, status: Option<Status>) -> Result<ProposalId> {
    if let Some(id) = id {
        if is_full_id(id) {
            return ProposalId::parse(id).map_err(|e| usage(escape(&e.to_string())));
        }
        if id.trim().is_empty()
            || !id
                .trim()
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(usage(format!(
                "{} is not a proposal id or a prefix of one (ids look like p-6355d6cdb2d22a2c8419ddadf40b0d3101942b3c4d5e)",
                crate::display::quote(id)
            )));
        }
        // An id the server knows as typed is that proposal; only an unknown one is
        // looked up as a prefix.
        if let Ok(exact) = ProposalId::parse(id) {
            match client.get(&format!("/v1/proposals/{exact}")).await {
                Ok(_) => return Ok(exact),
                Err(e) if e.to_string().starts_with("UNKNOWN_PROPOSAL:") => {}
                Err(e) => return Err(e),
            }
        }
    }
    let query = match status {
        Some(s) => format!(
            "/v1/proposals?status={}&limit={SEARCH_LIMIT}",
            s.as_str().to_ascii_lowercase()
        ),
        None => format!("/v1/proposals?status=all&limit={SEARCH_LIMIT}"),
    };
    let v = client.get(&query).await?;
    let list = v
        .get("proposals")
        .and_then(Value::as_array)
        .ok_or_else(|| network("the server's answer has no `proposals` list"))?;
    let ids: Vec<String> = list
        .iter()
        .filter_map(|p| p.get("proposal_id").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    let where_ = status
        .map(|s| format!(" {}", s.as_str()))
        .unwrap_or_default();
    match id {
        Some(prefix) => {
            let prefix = normalise(prefix);
            let found = matching(&ids, &prefix);
            match found.as_slice() {
                [one] => ProposalId::parse(one)
                    .map_err(|e| network(format!("the server listed a bad id: {}", escape(&e.to_string())))),
                [] => Err(refused(format!(
                    "no{where_} proposal you may see has an id starting with {}: `signer-cli pending` lists them",
                    escape(&prefix)
                ))),
                many => Err(usage(format!(
                    "{} proposals start with {}: type more of the id ({})",
                    many.len(),
                    escape(&prefix),
                    many.iter().take(5).map(|s| escape(s)).collect::<Vec<_>>().join(", ")
                ))),
            }
        }
        None => {
            let server_id = client.server_id().await?;
            let me = client
                .key()
                .map(|k| k.name.clone())
                .ok_or_else(|| usage("this command needs your key (--key FILE)"))?;
            let mut waiting = Vec::new();
            for p in list {
                let Ok(c) = check(p, None, &server_id) else {
                    continue;
                };
                if c.status == Status::Pending
                    && c.may_decide(&me)
                    && !c.has_decided(&me, "approve")
                    && !c.has_decided(&me, "reject")
                {
                    waiting.push(c);
                }
            }
            match waiting.as_slice() {
                [one] => {
                    eprintln!(
                        "signer-cli: one pending proposal waits for you ({me}): {}",
                        one.preview.proposal_id
                    );
                    Ok(one.preview.proposal_id.clone())
                }
                [] => Err(refused(format!(
                    "no pending proposal waits for you ({me}): nothing to do; give an id to look at another one"
                ))),
                many => Err(usage(format!(
                    "{} pending proposals wait for you: give the id, or a unique prefix of it: {}",
                    many.len(),
                    many.iter()
                        .take(5)
                        .map(|c| format!(
                            "{} ({}, {})",
                            c.preview.proposal_id,
                            c.preview.kind,
                            crate::display::quote(&truncate(&c.preview.summary, 30))
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_ids_and_prefixes() {
        assert!(is_full_id("p-6355d6cdb2d22a2c8419ddadf40b0d31"));
        assert!(is_full_id("p-6355d6cdb2d22a2c8419ddadf40b0d3101942b3c4d5e"));
        assert!(!is_full_id("p-6355d6cdb2d22a2c8419ddadf40b0d3101942b3c4d5"));
        assert!(!is_full_id("p-6355d6"));
        assert!(!is_full_id("6355d6cdb2d22a2c8419ddadf40b0d31"));
        assert_eq!(normalise("6355"), "p-6355");
        assert_eq!(normalise("P-6355"), "p-6355");
        let ids = vec![
            "p-6355aa".to_owned(),
            "p-6355bb".to_owned(),
            "p-7000".to_owned(),
        ];
        assert_eq!(matching(&ids, "p-6355").len(), 2);
        assert_eq!(matching(&ids, "p-6355b"), vec![&ids[1]]);
        assert!(matching(&ids, "p-8").is_empty());
    }
}
