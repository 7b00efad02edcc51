//! Email channel: plain-text mail through the server's SMTP relay (lettre).
//!
//! The relay is `--smtp URL` / `APPROVAL_SMTP_URL` (`smtp://host:port` plain, for a
//! local relay; `smtp://user:pass@host:587?tls=required` STARTTLS; `smtps://` TLS),
//! the sender `--smtp-from`; neither ever comes from a policy. Subject
//! `[approval-gate] <title>`; the agent's text reaches headers only escaped (no CR
//! or LF survives [`approval_core::escape::escape`]), and lettre encodes what is left.

use super::NotifyOptions;
use approval_core::notify::{Notice, NotifyChannel};
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

/// The relay, built once.
pub struct Mailer {
    relay: Result<AsyncSmtpTransport<Tokio1Executor>, String>,
    from: Result<Mailbox, String>,
}

impl Mailer {
    /// Builds the transport from the options (an error is kept and reported per mail).
    pub fn new(opts: &NotifyOptions) -> Self {
        let relay = match &opts.smtp {
            None => Err(
                "no SMTP relay: start the server with --smtp URL (or APPROVAL_SMTP_URL)"
                    .to_string(),
            ),
            Some(url) => AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                .map(|b| b.timeout(Some(opts.timeout)).build())
                .map_err(|e| format!("--smtp URL is not usable: {e}")),
        };
        if let Err(e) = &relay {
            if opts.smtp.is_some() {
                tracing::error!("{e}");
            }
        }
        let from = opts.smtp_from.parse::<Mailbox>().map_err(|e| {
            format!(
                "--smtp-from {:?} is not a mail address: {e}",
                opts.smtp_from
            )
        });
        Self { relay, from }
    }

    /// Sends one notification; the error says why it was not delivered.
    pub async fn send(&self, ch: &NotifyChannel, n: &Notice, delivery: &str) -> Result<(), String> {
        let NotifyChannel::Email { to, .. } = ch else {
            return Err("not an email channel".into());
        };
        let relay = self.relay.as_ref().map_err(Clone::clone)?;
        let msg = message(self.from.clone()?, to, n, delivery)?;
        relay
            .send(msg)
            .await
            .map(|_| ())
            .map_err(|e| format!("the SMTP relay refused or failed: {e}"))
    }
}

/// The mail for one notification.
pub fn message(
    from: Mailbox,
    to: &[String],
    n: &Notice,
    delivery: &str,
) -> Result<Message, String> {
    let host = from.email.domain().to_string();
    let mut b = Message::builder()
        .from(from)
        .subject(format!("[approval-gate] {}", n.title()))
        .message_id(Some(format!("<{delivery}@{host}>")))
        .header(ContentType::TEXT_PLAIN);
    for a in to {
        b = b.to(a
            .parse::<Mailbox>()
            .map_err(|e| format!("notify.to {a:?} is not a mail address: {e}"))?);
    }
    b.body(n.text())
        .map_err(|e| format!("cannot build the mail: {e}"))
}
