//! Webhook channel: one POST per notification, `json` or `slack` body.
//!
//! Headers: `Content-Type: application/json`, `X-Approval-Event: <event>`,
//! `X-Approval-Delivery: <server_id>-<outbox seq>` (the same on a retry), and with
//! `secret_from = "ENV"` `X-Approval-Signature: sha256=<hex HMAC-SHA256 of the body
//! keyed with the variable's value>`. Redirects are not followed; any 2xx is delivered.

use approval_core::notify::{Notice, NotifyChannel, WebhookFormat};
use hmac::{Hmac, Mac};
use std::time::Duration;

/// The client every webhook delivery uses.
pub fn client(timeout: Duration) -> reqwest::Client {
    crate::outbound::client_builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("approval-gate/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// `sha256=<hex>` of the body keyed with `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match Hmac::<sha2::Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        // HMAC takes keys of any length; this cannot happen.
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Sends one notification; the error says why it was not delivered.
pub async fn send(
    http: &reqwest::Client,
    ch: &NotifyChannel,
    n: &Notice,
    delivery: &str,
) -> Result<(), String> {
    let NotifyChannel::Webhook {
        url,
        format,
        secret_from,
        ..
    } = ch
    else {
        return Err("not a webhook channel".into());
    };
    let body = match format {
        WebhookFormat::Json => n.json(),
        WebhookFormat::Slack => n.slack(),
    };
    let body = serde_json::to_vec(&body).map_err(|e| format!("cannot encode the body: {e}"))?;
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .header("x-approval-event", n.event.as_str())
        .header("x-approval-delivery", delivery);
    if let Some(var) = secret_from {
        let secret = std::env::var(var).map_err(|_| {
            format!("secret_from names the environment variable {var}, which the server does not have: set it where the server starts")
        })?;
        req = req.header("x-approval-signature", signature(secret.as_bytes(), &body));
    }
    let resp = req.body(body).send().await.map_err(|e| {
        if e.is_timeout() {
            "no answer within the time-out".to_string()
        } else if e.is_connect() {
            format!("cannot connect: {e}")
        } else {
            format!("request failed: {e}")
        }
    })?;
    let status = resp.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("the receiver answered {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_rfc4231_hmac_sha256() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
