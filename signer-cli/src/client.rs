//! HTTP to the approver API: signed reads, decisions, time-outs, and error mapping.
//!
//! Every answer body is parsed with `approval_core::json::parse_exact`, so a server
//! that answers with duplicate keys or numbers that would change meaning is refused
//! rather than half-believed. Errors map to exit codes here, once:
//! - no connection, time-out, or an answer that is not the API's JSON: exit 3;
//! - a JSON error `{code, message}` with a 4xx status: exit 1, shown as `code: message`;
//! - a JSON error with a 5xx status (the server's own trouble): exit 3, shown the same way.

use crate::display::escape;
use crate::failure::{network, refused};
use crate::known_servers::{self, Identity, Verdict};
use anyhow::Result;
use approval_core::keyring::SecretKey;
use approval_core::message::sign_read;
use approval_core::{PublicKey, ServerId};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// Largest answer body read, so a hostile server cannot exhaust memory.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A client of one approval server.
pub struct Client {
    base: Url,
    http: reqwest::Client,
    timeout: Duration,
    key: Option<SecretKey>,
    /// The OpenSSH key in ssh-agent that signs decisions, when `--ssh-agent` is given.
    ssh_agent: Option<approval_core::ssh::SshKey>,
    /// Where server identities are pinned (`None`: no pinning, for library use).
    known_servers: Option<PathBuf>,
    /// The server's id once checked against its pin (checked before any signed read).
    checked: Mutex<Option<ServerId>>,
}

/// The current time in whole Unix seconds.
pub fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Client {
    /// A client for the server at `base`, signing reads with `key` when given.
    pub fn new(base: Url, timeout: Duration, key: Option<SecretKey>) -> Result<Self> {
        Self::with_roots(base, timeout, key, vec![])
    }

    /// [`Client::new`], trusting `roots` (a private CA, a self-signed certificate) for
    /// `https://` besides the system's roots. TLS only guards the channel: the
    /// server's pinned identity is checked all the same before anything is signed.
    pub fn with_roots(
        base: Url,
        timeout: Duration,
        key: Option<SecretKey>,
        roots: Vec<reqwest::Certificate>,
    ) -> Result<Self> {
        let http = reqwest::Client::builder()
            .tls_certs_merge(roots)
            // Dropped before the server closes an idle connection (PROTOCOL.md,
            // "Connections"): a decision sent on a closing one would be lost.
            .pool_idle_timeout(Duration::from_secs(
                approval_core::time::CLIENT_POOL_IDLE_SECS,
            ))
            .connect_timeout(timeout)
            // A stalled stream is noticed even without a total time-out (watch); the
            // server sends a keep-alive every 15 s.
            .read_timeout(timeout.max(Duration::from_secs(45)))
            .user_agent(concat!("signer-cli/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| network(format!("cannot set up HTTP: {e}")))?;
        Ok(Self {
            base,
            http,
            timeout,
            key,
            ssh_agent: None,
            known_servers: None,
            checked: Mutex::new(None),
        })
    }

    /// Pins the server's identity in `path` on first use and checks it on every
    /// later use (see [`crate::known_servers`]); nothing is signed before that.
    pub fn with_known_servers(mut self, path: PathBuf) -> Self {
        self.known_servers = Some(path);
        self
    }

    /// Signs decisions with `key` through ssh-agent (see [`crate::ssh_agent`]).
    pub fn with_ssh_agent(mut self, key: Option<approval_core::ssh::SshKey>) -> Self {
        self.ssh_agent = key;
        self
    }

    /// The OpenSSH key that signs decisions through ssh-agent, if any.
    pub fn ssh_agent(&self) -> Option<&approval_core::ssh::SshKey> {
        self.ssh_agent.as_ref()
    }

    /// The base URL as the user wrote it (no trailing slash).
    pub fn base(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// The secret key, if the client has one.
    pub fn key(&self) -> Option<&SecretKey> {
        self.key.as_ref()
    }

    fn url(&self, path_and_query: &str) -> Result<Url> {
        let s = format!("{}{}", self.base(), path_and_query);
        Url::parse(&s).map_err(|e| network(format!("cannot build URL {s}: {e}")))
    }

    fn describe(&self, e: &reqwest::Error) -> anyhow::Error {
        let what = if e.is_timeout() {
            format!("timed out after {}s", self.timeout.as_secs())
        } else if e.is_connect() {
            "cannot connect".to_owned()
        } else {
            "connection failed".to_owned()
        };
        let mut detail = String::new();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            detail = s.to_string();
            src = s.source();
        }
        if detail.is_empty() {
            detail = e.to_string();
        }
        let tls_trouble = self.base.scheme() == "https"
            && (detail.contains("certificate") || detail.contains("UnknownIssuer"));
        let hint = if tls_trouble {
            ": the server's TLS certificate is not trusted here; for a private CA or a self-signed certificate pass --tls-ca FILE (or SIGNER_TLS_CA, or `tls_ca = \"path\"` in config.toml)"
        } else if e.is_connect() {
            ": is the server running, and is this the \"Approver API:\" address it printed (http:// or https://)?"
        } else {
            ""
        };
        network(format!(
            "{what} to the approval server at {}: {}{hint}",
            self.base(),
            escape(&detail)
        ))
    }

    /// The refusal when `--server` does not lead to an approver API (the MCP
    /// endpoint, another service, a wrong path): names the address tried.
    fn not_an_approver_api(&self, why: &str) -> anyhow::Error {
        network(format!(
            "{} is not an approval gate's approver API (no /healthz answer at {}/healthz: {}): pass the \"Approver API:\" address that `approval-server serve` or `demo` prints, e.g. --server http://127.0.0.1:4800",
            self.base(),
            self.base(),
            escape(why)
        ))
    }

    /// When a signature was refused and the server named the key it holds for this
    /// approver, compares that with our own key: another key is the real cause.
    fn explain_key(&self, err: anyhow::Error) -> anyhow::Error {
        use approval_core::fingerprint::{fingerprint, key_mismatch_advice, parse_held_key_note};
        let Some(k) = &self.key else { return err };
        let text = err.to_string();
        match parse_held_key_note(&text) {
            Some((name, theirs)) if name == k.name => {
                let ours = fingerprint(&k.public_key());
                if theirs == ours {
                    return err;
                }
                refused(format!(
                    "{} (the server said: {text})",
                    key_mismatch_advice(&name, &theirs, &ours)
                ))
            }
            _ => err,
        }
    }

    /// An error answer that is not the API's JSON: if `/healthz` does not answer as
    /// an approval gate either, says so instead of the bare HTTP status.
    async fn check_is_api(&self, err: anyhow::Error) -> anyhow::Error {
        match self.server_id().await {
            Ok(_) => err,
            Err(e) => e,
        }
    }

    /// The server id every signed read covers (`approval-v1-read\n<server_id>\n...`), so
    /// that a read signed for this server cannot be replayed to another: the pinned
    /// identity of [`Client::server_id`], checked once per run.
    pub async fn read_server_id(&self) -> Result<ServerId> {
        self.server_id().await
    }

    async fn signed(&self, method: Method, url: &Url) -> Result<reqwest::RequestBuilder> {
        let key = self
            .key
            .as_ref()
            .ok_or_else(|| crate::failure::usage("this command needs your key (--key FILE)"))?;
        let server_id = self.read_server_id().await?;
        let mut pq = url.path().to_owned();
        if let Some(q) = url.query() {
            pq.push('?');
            pq.push_str(q);
        }
        let auth = sign_read(
            &key.key,
            &key.name,
            &server_id,
            now_unix(),
            method.as_str(),
            &pq,
        );
        Ok(self
            .http
            .request(method, url.clone())
            .header(reqwest::header::AUTHORIZATION, auth))
    }

    /// Sends a request with the time-out and returns the parsed JSON of a 2xx answer.
    async fn exchange(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let resp = req
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| self.describe(&e))?;
        let status = resp.status();
        let text = self.read_body(resp).await?;
        self.interpret_here(status, &text).await
    }

    /// [`interpret`], then the two causes worth naming: another key for this name,
    /// or an address that is not an approver API.
    async fn interpret_here(&self, status: StatusCode, text: &str) -> Result<Value> {
        match interpret(status, text) {
            Ok(v) => Ok(v),
            Err(e) if is_api_error(text) => Err(self.explain_key(e)),
            Err(e) => Err(self.check_is_api(e).await),
        }
    }

    /// Reads a body up to [`MAX_BODY_BYTES`] as UTF-8.
    async fn read_body(&self, mut resp: reqwest::Response) -> Result<String> {
        let mut buf = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.describe(&e))? {
            if buf.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(network(format!(
                    "the server's answer is larger than {MAX_BODY_BYTES} bytes: refused"
                )));
            }
            buf.extend_from_slice(&chunk);
        }
        String::from_utf8(buf)
            .map_err(|_| network("the server answered with bytes that are not UTF-8 text"))
    }

    /// `GET /healthz`: what the server says it is (`server_id` and `server_key`),
    /// not yet compared with any pin.
    ///
    /// The answer must prove, by a signature over a fresh random challenge, that the
    /// server holds the key it presents (`/healthz` is otherwise unsigned, so an
    /// impersonator could replay it and pass the pin check).
    pub async fn identity(&self) -> Result<Identity> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)
            .map_err(|e| network(format!("cannot make a random challenge: {e}")))?;
        let challenge: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let url = self.url(&format!("/healthz?challenge={challenge}"))?;
        let resp = self
            .http
            .get(url)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| self.describe(&e))?;
        let status = resp.status();
        let text = self.read_body(resp).await?;
        let v = match approval_core::json::parse_exact(&text) {
            Ok(v) if v.get("server_id").is_some() => v,
            _ => {
                return Err(self.not_an_approver_api(&format!(
                    "HTTP {status}, \"{}\"",
                    crate::display::truncate(&text, 60)
                )))
            }
        };
        if !status.is_success() {
            return interpret(status, &text).and_then(|_| {
                Err(network(format!(
                    "the server's /healthz answered HTTP {status}"
                )))
            });
        }
        let id = v
            .get("server_id")
            .and_then(Value::as_str)
            .ok_or_else(|| self.not_an_approver_api("the answer's server_id is not a string"))?;
        let server_id = ServerId::parse(id)
            .map_err(|e| network(format!("the server's /healthz answer: {e}")))?;
        let key = v.get("server_key").and_then(Value::as_str).ok_or_else(|| {
            network(
                "the server's /healthz answer has no server_key: the server is older than this signer-cli (upgrade it) or is not an approval server",
            )
        })?;
        let server_key = PublicKey::parse(key)
            .map_err(|e| network(format!("the server's /healthz server_key: {e}")))?;
        let proof = v.get("proof").and_then(Value::as_str).ok_or_else(|| {
            network(
                "the server's /healthz answer has no proof of its identity key: the server is older than this signer-cli (upgrade it) or is not the approval server it claims to be; nothing was signed",
            )
        })?;
        let proof_ok = approval_core::message::Signature::parse(proof)
            .ok()
            .is_some_and(|p| {
                approval_core::attestation::verify_identity(&server_key, &server_id, &challenge, &p)
                    .is_ok()
            });
        if !proof_ok {
            return Err(refused(format!(
                "the server at {} presents the identity {server_id} with key {server_key} but cannot prove it holds that key (its answer to a fresh challenge does not verify): it may be an impersonator replaying the real server's /healthz. Refused, nothing signed",
                self.base()
            )));
        }
        Ok(Identity {
            server_id,
            server_key,
        })
    }

    /// The server's id, checked against its pin (pinned on first use, with a line
    /// on stderr): the source of truth for which server this is. A changed identity
    /// is refused before anything is signed.
    pub async fn server_id(&self) -> Result<ServerId> {
        if let Some(id) = self.checked.lock().ok().and_then(|c| c.clone()) {
            return Ok(id);
        }
        let seen = self.identity().await?;
        if let Some(path) = &self.known_servers {
            if known_servers::check(path, self.base(), &seen)? == Verdict::Pinned {
                eprintln!(
                    "signer-cli: pinned server {} as {} with key {} in {} (first use)",
                    self.base(),
                    seen.server_id,
                    seen.server_key,
                    path.display()
                );
            }
        }
        if let Ok(mut c) = self.checked.lock() {
            *c = Some(seen.server_id.clone());
        }
        Ok(seen.server_id)
    }

    /// [`Client::server_id`] checked again now, not from an earlier check (a watch
    /// that reconnects may be talking to a restarted or replaced server).
    pub async fn recheck_server_id(&self) -> Result<ServerId> {
        if let Ok(mut c) = self.checked.lock() {
            *c = None;
        }
        self.server_id().await
    }

    /// A signed `GET` of an approver API path (with its query).
    pub async fn get(&self, path_and_query: &str) -> Result<Value> {
        self.server_id().await?;
        let url = self.url(path_and_query)?;
        self.exchange(self.signed(Method::GET, &url).await?).await
    }

    /// The exact body text of a signed `GET` (for receipts, kept byte for byte).
    pub async fn get_text(&self, path_and_query: &str) -> Result<String> {
        self.server_id().await?;
        let url = self.url(path_and_query)?;
        let resp = self
            .signed(Method::GET, &url)
            .await?
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| self.describe(&e))?;
        let status = resp.status();
        let text = self.read_body(resp).await?;
        self.interpret_here(status, &text).await?;
        Ok(text)
    }

    /// `POST` of a JSON body (decisions carry their own signature).
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.server_id().await?;
        let url = self.url(path)?;
        let req = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        self.exchange(req).await
    }

    /// Opens the signed `GET /v1/events` stream, resuming after `last_event_id` when
    /// given; the body is read by the caller without a total time-out (only connecting
    /// and the headers are timed).
    pub async fn events(&self, last_event_id: Option<&str>) -> Result<reqwest::Response> {
        self.server_id().await?;
        let url = self.url("/v1/events")?;
        let mut req = self
            .signed(Method::GET, &url)
            .await?
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = tokio::time::timeout(self.timeout, req.send())
            .await
            .map_err(|_| {
                network(format!(
                    "timed out after {}s to the approval server at {}",
                    self.timeout.as_secs(),
                    self.base()
                ))
            })?
            .map_err(|e| self.describe(&e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = self.read_body(resp).await?;
        self.interpret_here(status, &text).await?;
        Err(network(format!(
            "the server answered /v1/events with HTTP {status}"
        )))
    }
}

/// Whether a body is the API's JSON error `{code, message}`.
fn is_api_error(text: &str) -> bool {
    approval_core::json::parse_exact(text)
        .ok()
        .is_some_and(|v| v.get("code").and_then(Value::as_str).is_some())
}

/// Maps an answer to its JSON (2xx) or to the error it means.
pub fn interpret(status: StatusCode, text: &str) -> Result<Value> {
    let parsed = approval_core::json::parse_exact(text);
    if status.is_success() {
        return parsed.map_err(|e| {
            network(format!(
                "the server's answer is not exact JSON ({}); starts with \"{}\"",
                escape(&e.to_string()),
                crate::display::truncate(text, 60)
            ))
        });
    }
    let err = parsed.ok().and_then(|v| {
        let code = v.get("code")?.as_str()?.to_owned();
        let message = v
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let st = v.get("status").and_then(Value::as_str).map(str::to_owned);
        Some((code, message, st))
    });
    match err {
        Some((code, message, st)) => {
            let mut m = format!("{}: {}", escape(&code), escape(&message));
            if let Some(st) = st {
                m.push_str(&format!(" (status {})", escape(&st)));
            }
            if status.is_server_error() {
                Err(network(m))
            } else {
                Err(refused(m))
            }
        }
        None => Err(network(format!(
            "the server answered HTTP {status} without the API's JSON error; starts with \"{}\"",
            crate::display::truncate(text, 60)
        ))),
    }
}
