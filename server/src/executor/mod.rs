//! Executors: what `approval_execute` does, as the policy (never the agent) says.
//!
//! Each executor runs at most once per proposal (the store's claim guarantees it)
//! and reports one of three outcomes. The line between FAILED and OUTCOME_UNKNOWN
//! is whether the effect may have happened: a refusal before anything was sent is
//! FAILED; a time-out or broken connection after sending is OUTCOME_UNKNOWN, for a
//! human to settle. Nothing is ever retried here.

use approval_core::policy::ExecutorConfig;
use approval_core::receipt::Receipt;
use approval_core::status::Outcome;
use approval_core::{ProposalId, Sha256Hex};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

mod command;
pub mod mcp;
pub mod mcp_bounds;
mod note;
mod webhook;

/// The longest excerpt of output kept with a result.
pub const DETAIL_LIMIT: usize = 4096;
/// The most output read from a command or response before the rest is discarded.
pub const READ_LIMIT: usize = 64 * 1024;

/// What an executor reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecReport {
    /// How it ended.
    pub outcome: Outcome,
    /// A bounded excerpt of what happened.
    pub detail: String,
    /// Digest of what was read back, where the executor reads back.
    pub readback_sha256: Option<Sha256Hex>,
    /// The structured result, where the executor has one (the `mcp` executor's tool
    /// result: `content`, `structuredContent`, `isError`), bounded in size.
    pub output: Option<Value>,
}

impl ExecReport {
    pub(crate) fn new(outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: excerpt(&detail.into()),
            readback_sha256: None,
            output: None,
        }
    }
}

/// What executors need from the server.
#[derive(Clone)]
pub struct ExecContext {
    /// The data folder (`<data>/sandbox` and `<data>/receipts` live there).
    pub data_dir: PathBuf,
    /// HTTP client for webhooks (no redirects).
    pub http: reqwest::Client,
}

impl ExecContext {
    /// A context for a data folder.
    pub fn new(data_dir: PathBuf) -> Self {
        let http = crate::outbound::client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self { data_dir, http }
    }
}

/// Cuts text to [`DETAIL_LIMIT`] bytes on a character boundary.
pub fn excerpt(s: &str) -> String {
    if s.len() <= DETAIL_LIMIT {
        return s.to_owned();
    }
    let mut end = DETAIL_LIMIT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..end], s.len())
}

/// The folder under the data folder where a `note` policy without `dir` writes
/// (named in `init`'s example policy too, from here).
pub const NOTE_DIR: &str = "sandbox";

/// Runs the policy's executor for one proposal.
pub async fn run(
    cfg: &ExecutorConfig,
    ctx: &ExecContext,
    id: &ProposalId,
    payload: &Value,
    receipt: &Receipt,
) -> ExecReport {
    match cfg {
        ExecutorConfig::Note { dir } => {
            let dir = dir
                .as_ref()
                .map(PathBuf::from)
                .unwrap_or_else(|| ctx.data_dir.join(NOTE_DIR));
            note::note(&dir, id, payload).await
        }
        ExecutorConfig::Webhook {
            url,
            timeout,
            headers,
        } => {
            webhook::webhook(
                ctx,
                url,
                Duration::from_secs(timeout.get()),
                headers,
                id,
                payload,
                receipt,
            )
            .await
        }
        ExecutorConfig::Command {
            program,
            args,
            timeout,
        } => {
            command::command(
                ctx,
                program,
                args,
                Duration::from_secs(timeout.get()),
                id,
                payload,
                receipt,
            )
            .await
        }
        ExecutorConfig::Mcp { .. } => mcp::call(cfg, payload).await,
        // Applied by the service itself (`service/governance.rs`), never here: a
        // policy file cannot name it, so this is only reached by a bug. Nothing ran.
        ExecutorConfig::Gate => ExecReport::new(
            Outcome::Failed,
            "the gate executor applies configuration changes in the service; nothing ran",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approval_core::Seconds;

    fn receipt() -> Receipt {
        Receipt {
            preview: serde_json::json!({}),
            preview_sha256: Sha256Hex::digest(b"x"),
            policy: serde_json::json!({}),
            decisions: vec![],
            attestation: None,
        }
    }

    fn id() -> ProposalId {
        ProposalId::parse("p-test").unwrap()
    }

    #[tokio::test]
    async fn note_writes_once_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ExecContext::new(dir.path().to_path_buf());
        let cfg = ExecutorConfig::Note { dir: None };
        let payload = serde_json::json!({"text": "hello"});
        let r = run(&cfg, &ctx, &id(), &payload, &receipt()).await;
        assert_eq!(r.outcome, Outcome::Succeeded, "{r:?}");
        assert_eq!(r.readback_sha256, Some(Sha256Hex::digest(b"hello")));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sandbox/p-test.txt")).unwrap(),
            "hello"
        );
        // The same proposal can never write twice.
        let again = run(&cfg, &ctx, &id(), &payload, &receipt()).await;
        assert_eq!(again.outcome, Outcome::Failed);
    }

    fn cmd(program: &str, args: &[&str], timeout: u64) -> ExecutorConfig {
        ExecutorConfig::Command {
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            timeout: Seconds::new(timeout),
        }
    }

    #[tokio::test]
    async fn command_exit_codes_and_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ExecContext::new(dir.path().to_path_buf());
        let p = serde_json::json!({"a": 1});
        let ok = run(&cmd("/bin/cat", &[], 10), &ctx, &id(), &p, &receipt()).await;
        assert_eq!(ok.outcome, Outcome::Succeeded);
        assert!(ok.detail.contains(r#"stdout: {"a":1}"#), "{}", ok.detail);
        assert!(dir.path().join("receipts/p-test.json").exists());
        let bad = run(&cmd("/bin/false", &[], 10), &ctx, &id(), &p, &receipt()).await;
        assert_eq!(bad.outcome, Outcome::Failed);
        let missing = run(
            &cmd("/nonexistent/prog", &[], 10),
            &ctx,
            &id(),
            &p,
            &receipt(),
        )
        .await;
        assert_eq!(missing.outcome, Outcome::Failed);
        assert!(missing.detail.starts_with("not run"), "{}", missing.detail);
    }

    #[tokio::test]
    async fn command_timeout_kills_and_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ExecContext::new(dir.path().to_path_buf());
        let start = std::time::Instant::now();
        let r = run(
            &cmd("/bin/sleep", &["30"], 1),
            &ctx,
            &id(),
            &serde_json::json!({}),
            &receipt(),
        )
        .await;
        assert_eq!(r.outcome, Outcome::Unknown, "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn command_output_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ExecContext::new(dir.path().to_path_buf());
        let r = run(
            &cmd("/usr/bin/head", &["-c", "1000000", "/dev/zero"], 10),
            &ctx,
            &id(),
            &serde_json::json!({}),
            &receipt(),
        )
        .await;
        assert_eq!(r.outcome, Outcome::Succeeded);
        assert!(r.detail.len() < DETAIL_LIMIT + 100, "{}", r.detail.len());
    }

    #[tokio::test]
    async fn webhook_outcomes() {
        use axum::routing::post;
        let app = axum::Router::new()
            .route(
                "/ok",
                post(|h: axum::http::HeaderMap| async move {
                    h.get("idempotency-key")
                        .map(|v| v.to_str().unwrap_or("").to_owned())
                        .unwrap_or_default()
                }),
            )
            .route(
                "/fail",
                post(|| async { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
            )
            .route(
                "/hang",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let dir = tempfile::tempdir().unwrap();
        let ctx = ExecContext::new(dir.path().to_path_buf());
        let hook = |path: &str, t: u64| ExecutorConfig::Webhook {
            url: format!("http://{addr}{path}"),
            timeout: Seconds::new(t),
            headers: Default::default(),
        };
        let p = serde_json::json!({});
        let ok = run(&hook("/ok", 5), &ctx, &id(), &p, &receipt()).await;
        assert_eq!(ok.outcome, Outcome::Succeeded, "{ok:?}");
        assert!(
            ok.detail.ends_with("p-test"),
            "idempotency key echoed: {}",
            ok.detail
        );
        assert_eq!(
            run(&hook("/fail", 5), &ctx, &id(), &p, &receipt())
                .await
                .outcome,
            Outcome::Failed
        );
        let hang = run(&hook("/hang", 1), &ctx, &id(), &p, &receipt()).await;
        assert_eq!(hang.outcome, Outcome::Unknown);
        assert!(
            hang.detail.contains("no answer within 1s"),
            "{}",
            hang.detail
        );
        // Nothing listens on port 1: refused before sending.
        let refused = ExecutorConfig::Webhook {
            url: "http://127.0.0.1:1/x".into(),
            timeout: Seconds::new(5),
            headers: Default::default(),
        };
        let refused = run(&refused, &ctx, &id(), &p, &receipt()).await;
        assert_eq!(refused.outcome, Outcome::Failed);
        assert!(
            refused.detail.starts_with("not sent: ") && refused.detail.contains("refused"),
            "the cause should be named: {}",
            refused.detail
        );
    }
}
