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
use anyhow::Result;
use approval_core::keyring::SecretKey;
use approval_core::message::sign_read;
use approval_core::ServerId;
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;
use std::time::Duration;

/// Largest answer body read, so a hostile server cannot exhaust memory.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A client of one approval server.
pub struct Client {
    base: Url,
    http: reqwest::Client,
    timeout: Duration,
    key: Option<SecretKey>,
    /// The server id signed reads cover, looked up once (see [`Client::read_server_id`]).
    read_server_id: tokio::sync::OnceCell<ServerId>,
}

/// The current time in whole Unix seconds.
pub fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Client {
    /// A client for the server at `base`, signing reads with `key` when given.
    pub fn new(base: Url, timeout: Duration, key: Option<SecretKey>) -> Result<Self> {
        let http = reqwest::Client::builder()
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
            read_server_id: tokio::sync::OnceCell::new(),
        })
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
        network(format!(
            "{what} to the approval server at {}: {}",
            self.base(),
            escape(&detail)
        ))
    }

    /// The server id every signed read covers (`approval-v1-read\n<server_id>\n...`), so
    /// that a read signed for this server cannot be replayed to another. The one place
    /// it comes from: today the server's unsigned `GET /healthz`, read once per run.
    pub async fn read_server_id(&self) -> Result<ServerId> {
        self.read_server_id
            .get_or_try_init(|| self.server_id())
            .await
            .cloned()
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
        interpret(status, &text)
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

    /// `GET /healthz`: the server's id.
    pub async fn server_id(&self) -> Result<ServerId> {
        let url = self.url("/healthz")?;
        let v = self.exchange(self.http.get(url)).await?;
        let id = v
            .get("server_id")
            .and_then(Value::as_str)
            .ok_or_else(|| network("the server's /healthz answer has no server_id"))?;
        ServerId::parse(id).map_err(|e| network(format!("the server's /healthz answer: {e}")))
    }

    /// A signed `GET` of an approver API path (with its query).
    pub async fn get(&self, path_and_query: &str) -> Result<Value> {
        let url = self.url(path_and_query)?;
        self.exchange(self.signed(Method::GET, &url).await?).await
    }

    /// The exact body text of a signed `GET` (for receipts, kept byte for byte).
    pub async fn get_text(&self, path_and_query: &str) -> Result<String> {
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
        interpret(status, &text)?;
        Ok(text)
    }

    /// `POST` of a JSON body (decisions carry their own signature).
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value> {
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
        interpret(status, &text)?;
        Err(network(format!(
            "the server answered /v1/events with HTTP {status}"
        )))
    }
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
