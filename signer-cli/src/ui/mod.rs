//! `signer-cli ui`: the approver's page, served from the approver's own machine.
//!
//! The browser never holds the secret key: it shows what the local checks produced
//! and sends back what the human typed; signing happens here, in the same code as
//! the terminal commands ([`api`]). What makes the page safe on a shared laptop and
//! against other web sites is all in [`guard`], which every request passes:
//! - Host: only `<listen address>` or `localhost:PORT` (a DNS-rebound name is refused
//!   with 421, so a page of another site can never read this one as same-origin);
//! - a per-run secret: 32 random bytes, handed to the browser once through the URL
//!   printed on stdout (`/?s=SECRET`). The first valid use answers with an HttpOnly
//!   SameSite=Strict cookie holding a *different* random value, and a page that goes on
//!   to `/#t=TOKEN`: a third random value that the page keeps in `sessionStorage` and
//!   sends as `X-Signer-Token` (the event stream: `?t=`). Any later use of the URL is
//!   refused: it works once. Every other request without the cookie is refused (403),
//!   so another local user, or a site that guessed the port, gets nothing. The token is
//!   there because cookies ignore ports: a server of another local user on
//!   127.0.0.1:OTHER receives this page's cookie whenever the browser visits it, but
//!   never the token (`sessionStorage` is per origin, port included);
//! - requests a browser marks as coming from another site or another port
//!   (`Sec-Fetch-Site` other than `same-origin` or `none`) are refused;
//! - POSTs only from this origin (`Origin` checked, JSON bodies only);
//! - headers on every answer: a strict Content-Security-Policy (only the page's own
//!   script and style, no inline script, no framing), nosniff, no referrer, no-store.
//!
//! Every asset is compiled into the binary; the page fetches nothing from anywhere
//! else.

pub mod api;

use crate::client::Client;
use approval_core::ApproverName;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;

/// The Content-Security-Policy of every answer: nothing but this origin's own files,
/// no inline script or style, no plugins, no framing, forms only to this origin.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// What every request handler shares.
pub struct UiState {
    /// The approval server's client, signing with the approver's key.
    pub client: Client,
    /// The approver (the key's name).
    pub me: ApproverName,
    /// The per-run secret of the printed URL (base64url of 32 random bytes).
    secret: String,
    /// Set by the first valid use of the printed URL: it works once.
    handed: AtomicBool,
    /// The cookie's value, given at the handover (random, not the secret).
    session: String,
    /// The page's token, given at the handover in the URL fragment (random).
    token: String,
    /// The cookie's name: per port, so two `ui` runs on one machine do not
    /// overwrite each other's cookie (cookies ignore ports).
    cookie: String,
    /// The `Host` values answered: the listen address and `localhost:PORT`.
    hosts: [String; 2],
    /// The `Origin` values a POST may come from (`http://` + a host above).
    origins: [String; 2],
    /// Moves on every proposal event of the server's stream (see `watch`).
    pub changed: tokio::sync::watch::Receiver<u64>,
    /// Why live updates stopped, if they did (shown on the page).
    pub live_problem: Mutex<Option<String>>,
}

impl UiState {
    /// The state for a page listening on `addr` (already bound, port known).
    pub fn new(
        client: Client,
        me: ApproverName,
        addr: SocketAddr,
        changed: tokio::sync::watch::Receiver<u64>,
    ) -> anyhow::Result<Self> {
        let secret = random_secret()?;
        let session = random_secret()?;
        let token = random_secret()?;
        let port = addr.port();
        let hosts = [addr.to_string(), format!("localhost:{port}")];
        let origins = [
            format!("http://{}", hosts[0]),
            format!("http://{}", hosts[1]),
        ];
        Ok(Self {
            client,
            me,
            secret,
            handed: AtomicBool::new(false),
            session,
            token,
            cookie: format!("signer_ui_{port}"),
            hosts,
            origins,
            changed,
            live_problem: Mutex::new(None),
        })
    }

    /// The URL to open once: it hands the secret to the browser.
    pub fn url(&self) -> String {
        format!("{}/?s={}", self.origins[0], self.secret)
    }

    /// Constant-time comparisons (no timing oracle for guessing a value).
    fn is_secret(&self, candidate: &str) -> bool {
        bool::from(candidate.as_bytes().ct_eq(self.secret.as_bytes()))
    }

    fn is_session(&self, candidate: &str) -> bool {
        bool::from(candidate.as_bytes().ct_eq(self.session.as_bytes()))
    }

    fn is_token(&self, candidate: &str) -> bool {
        bool::from(candidate.as_bytes().ct_eq(self.token.as_bytes()))
    }
}

/// 32 random bytes, base64url.
fn random_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| crate::failure::usage(format!("cannot make the page's secret: {e}")))?;
    use base64::Engine as _;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// The answer to the first valid use of the printed URL: it goes on to the page
/// with the token in the fragment (never sent to any server, not even this one).
/// A page rather than a redirect, so that the page's first load is a same-origin
/// navigation that carries the SameSite=Strict cookie even when the printed URL was
/// opened from a file or another application.
fn handover_page(token: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url=/#t={token}\">\
         <title>Approver UI</title></head><body><p>Opening the approver page…</p></body></html>\n"
    )
}

/// The page's routes, every one behind [`guard`].
pub fn app(state: Arc<UiState>) -> Router {
    Router::new()
        .route("/", get(index))
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }),
        )
        .route("/api/state", get(api::state))
        .route("/api/proposal", get(api::proposal))
        .route("/api/decide", post(api::decide))
        .route("/events", get(api::events))
        .fallback(|| async { plain(StatusCode::NOT_FOUND, "no such page") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// A plain-text refusal.
fn plain(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}

/// Every value of the cookie `name`, from every `Cookie` header. All of them count:
/// a server on another port of this machine can plant a cookie of the same name (a
/// more specific `Path` is sent first), and must not lock the page out that way.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The parameter `key` of a query string, if any.
fn param<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Every request passes here first; every answer (refusals included) leaves with
/// the security headers.
async fn guard(State(st): State<Arc<UiState>>, req: Request, next: Next) -> Response {
    let mut resp = admit(&st, req, next).await;
    let h = resp.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

async fn admit(st: &UiState, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !st.hosts.iter().any(|h| h == host) {
        // DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1
        // sends `Host: evil.example:PORT`.
        return plain(
            StatusCode::MISDIRECTED_REQUEST,
            &format!(
                "this page answers only http://{}/ or http://{}/, not Host {}",
                st.hosts[0],
                st.hosts[1],
                crate::display::quote(host)
            ),
        );
    }
    // The one request without the cookie: the printed URL handing over the secret.
    if req.uri().path() == "/" && req.method() == Method::GET {
        if let Some(s) = param(req.uri().query(), "s") {
            if !st.is_secret(s) {
                return plain(
                    StatusCode::FORBIDDEN,
                    "wrong secret: open the URL signer-cli ui printed (it changes on every run)",
                );
            }
            if st.handed.swap(true, Ordering::SeqCst) {
                return plain(
                    StatusCode::FORBIDDEN,
                    "this URL was used already: it works once, and a browser holds the page now. \
                     For another browser or tab, stop signer-cli ui and run it again",
                );
            }
            let set = format!(
                "{}={}; HttpOnly; SameSite=Strict; Path=/",
                st.cookie, st.session
            );
            return Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
                .header(header::SET_COOKIE, set)
                .body(Body::from(handover_page(&st.token)))
                .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "cannot answer"));
        }
    }
    // A browser says where a request comes from: only this page itself, or the
    // human (typed, bookmarked), may reach it. Another port of 127.0.0.1 is
    // "same-site" to a browser, and its cookies reach this page: refused here.
    if let Some(site) = req
        .headers()
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
    {
        if site != "same-origin" && site != "none" {
            return plain(
                StatusCode::FORBIDDEN,
                &format!(
                    "refused a request from another site or another port (Sec-Fetch-Site: {}): \
                     only this page may call it",
                    crate::display::quote(site)
                ),
            );
        }
    }
    if !cookies(req.headers(), &st.cookie).any(|c| st.is_session(c)) {
        return plain(
            StatusCode::FORBIDDEN,
            "this page needs its secret: open the URL signer-cli ui printed (http://…/?s=…)",
        );
    }
    // The page's token: the API in a header, the event stream (EventSource sends
    // no headers) in the query. The page's own files need only the cookie.
    let path = req.uri().path();
    let token = if path.starts_with("/api/") {
        req.headers()
            .get("x-signer-token")
            .and_then(|v| v.to_str().ok())
    } else if path == "/events" {
        param(req.uri().query(), "t")
    } else {
        Some(st.token.as_str())
    };
    if !token.is_some_and(|t| st.is_token(t)) {
        return plain(
            StatusCode::FORBIDDEN,
            "this request lacks the page's token: use the tab that signer-cli ui opened \
             (the URL works once; for a new tab, run signer-cli ui again)",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let origin = req
            .headers()
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok());
        match origin {
            Some(o) if st.origins.iter().any(|x| x == o) => {}
            Some(o) => {
                return plain(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "refused a {} from another origin ({}): decisions are only taken from this page",
                        req.method(),
                        crate::display::quote(o)
                    ),
                )
            }
            None => {
                return plain(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "refused a {} without an Origin header: decisions are only taken from this page",
                        req.method()
                    ),
                )
            }
        }
        let json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if !json {
            return plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "decisions are sent as application/json",
            );
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_and_query() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; signer_ui_5=planted; signer_ui_5=xyz"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(
            cookies(&h, "signer_ui_5").collect::<Vec<_>>(),
            vec!["planted", "xyz"]
        );
        assert_eq!(cookies(&h, "b").collect::<Vec<_>>(), vec!["2"]);
        assert_eq!(cookies(&h, "signer_ui_6").next(), None);
        assert_eq!(param(Some("x=1&s=abc"), "s"), Some("abc"));
        assert_eq!(param(Some("ss=abc"), "s"), None);
        assert_eq!(param(Some("t=1"), "t"), Some("1"));
        assert_eq!(param(None, "s"), None);
    }
}
