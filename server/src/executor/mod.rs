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
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
}

impl ExecReport {
    fn new(outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: excerpt(&detail.into()),
            readback_sha256: None,
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
        let http = reqwest::Client::builder()
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
                .unwrap_or_else(|| ctx.data_dir.join("sandbox"));
            note(&dir, id, payload).await
        }
        ExecutorConfig::Webhook {
            url,
            timeout,
            headers,
        } => {
            webhook(
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
            command(
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
    }
}

/// Writes one new file and reads it back.
async fn note(dir: &Path, id: &ProposalId, payload: &Value) -> ExecReport {
    let text = match payload.get("text").and_then(Value::as_str) {
        Some(t) => t.to_owned(),
        None => serde_json::to_string_pretty(payload).unwrap_or_default(),
    };
    if let Err(e) = tokio::fs::create_dir_all(dir).await {
        return ExecReport::new(
            Outcome::Failed,
            format!("cannot create {}: {e}", dir.display()),
        );
    }
    let path = dir.join(format!("{id}.txt"));
    let written = async {
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await?;
        f.write_all(text.as_bytes()).await?;
        f.sync_all().await
    }
    .await;
    if let Err(e) = written {
        return ExecReport::new(
            Outcome::Failed,
            format!("cannot write {}: {e}", path.display()),
        );
    }
    match tokio::fs::read(&path).await {
        Ok(back) if back == text.as_bytes() => ExecReport {
            outcome: Outcome::Succeeded,
            detail: format!(
                "wrote {} ({} bytes), read back identical",
                path.display(),
                back.len()
            ),
            readback_sha256: Some(Sha256Hex::digest(&back)),
        },
        Ok(back) => ExecReport {
            outcome: Outcome::Failed,
            detail: format!(
                "read back {} bytes from {} that differ from what was written",
                back.len(),
                path.display()
            ),
            readback_sha256: Some(Sha256Hex::digest(&back)),
        },
        Err(e) => ExecReport::new(
            Outcome::Failed,
            format!("cannot read back {}: {e}", path.display()),
        ),
    }
}

/// POSTs `{payload, receipt}` once.
async fn webhook(
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
fn causes(e: &dyn std::error::Error) -> String {
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

async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                // Keep draining past the limit so the child never blocks on a full pipe.
                let room = READ_LIMIT.saturating_sub(out.len());
                out.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    out
}

/// Runs a program without a shell.
async fn command(
    ctx: &ExecContext,
    program: &str,
    args: &[String],
    timeout: Duration,
    id: &ProposalId,
    payload: &Value,
    receipt: &Receipt,
) -> ExecReport {
    let receipts = ctx.data_dir.join("receipts");
    let receipt_path = receipts.join(format!("{id}.json"));
    let wrote = async {
        tokio::fs::create_dir_all(&receipts).await?;
        let text = serde_json::to_vec_pretty(receipt).map_err(std::io::Error::other)?;
        tokio::fs::write(&receipt_path, text).await
    }
    .await;
    if let Err(e) = wrote {
        return ExecReport::new(
            Outcome::Failed,
            format!("not run: cannot write the receipt: {e}"),
        );
    }
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("APPROVAL_RECEIPT", &receipt_path)
        .env("APPROVAL_PROPOSAL_ID", id.as_str())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return ExecReport::new(
                Outcome::Failed,
                format!("not run: cannot start {program}: {e}"),
            )
        }
    };
    let input = serde_json::to_vec(payload).unwrap_or_default();
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let feed = async move {
        if let Some(mut s) = stdin {
            // A program that does not read its input is not an error.
            let _ = s.write_all(&input).await;
        }
    };
    let out = async move {
        match stdout {
            Some(s) => read_bounded(s).await,
            None => Vec::new(),
        }
    };
    let err = async move {
        match stderr {
            Some(s) => read_bounded(s).await,
            None => Vec::new(),
        }
    };
    let run = async {
        let (_, o, e, status) = tokio::join!(feed, out, err, child.wait());
        (o, e, status)
    };
    match tokio::time::timeout(timeout, run).await {
        Ok((o, e, Ok(status))) => {
            let text = format!(
                "exit {}; stdout: {}; stderr: {}",
                status
                    .code()
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "by signal".into()),
                String::from_utf8_lossy(&o),
                String::from_utf8_lossy(&e)
            );
            let outcome = if status.success() {
                Outcome::Succeeded
            } else {
                Outcome::Failed
            };
            ExecReport::new(outcome, text)
        }
        Ok((_, _, Err(e))) => {
            ExecReport::new(Outcome::Unknown, format!("lost track of {program}: {e}"))
        }
        Err(_) => {
            let _ = child.kill().await;
            ExecReport::new(
                Outcome::Unknown,
                format!(
                    "{program} did not finish within {}s and was killed",
                    timeout.as_secs()
                ),
            )
        }
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
