//! The `webhook` executor: POSTs `{payload, receipt}` to a URL, once.

use super::{ExecContext, ExecReport, READ_LIMIT};
use approval_core::receipt::Receipt;
use approval_core::status::Outcome;
use approval_core::ProposalId;
use serde_json::Value;
use std::time::Duration;

/// POSTs `{payload, receipt}` once.
pub(super) async fn webhook(
    ctx: &ExecContext,
    url: &str,
    timeout: Duration,
    headers: &std::collections::BTreeMap<String, String>,
    id: &ProposalId,
    payload: &Value,
    receipt: &Receipt,
) -> ExecReport {
    let body = serde_json::json!({ "payload": payload, "receipt": receipt });
    let mut req = ctx
        .http
        .post(url)
        .timeout(timeout)
        .header("Idempotency-Key", id.as_str())
        .json(&body);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() || e.is_builder() => {
            return ExecReport::new(Outcome::Failed, format!("not sent: {}", causes(&e)));
        }
        Err(e) if e.is_timeout() => {
            return ExecReport::new(
                Outcome::Unknown,
                format!(
                    "no answer within {}s: the request may have been delivered and the receiver may have acted",
                    timeout.as_secs()
                ),
            );
        }
        Err(e) => {
            return ExecReport::new(
                Outcome::Unknown,
                format!("sent, then {}: the receiver may have acted", causes(&e)),
            );
        }
    };
    let status = resp.status();
    let excerpt_body = read_bounded_response(resp).await;
    let outcome = if status.is_success() {
        Outcome::Succeeded
    } else {
        Outcome::Failed
    };
    ExecReport::new(outcome, format!("HTTP {status}: {excerpt_body}"))
}

/// An error and its causes, for the stored detail: reqwest's own text ("error sending
/// request for url ...") does not say whether the connection was reset or refused, and a
/// human settling an OUTCOME_UNKNOWN needs to know.
pub(super) fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        next = c.source();
    }
    text
}

async fn read_bounded_response(mut resp: reqwest::Response) -> String {
    let mut buf = Vec::new();
    while buf.len() < READ_LIMIT {
        match resp.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            _ => break,
        }
    }
    buf.truncate(READ_LIMIT);
    String::from_utf8_lossy(&buf).into_owned()
}
