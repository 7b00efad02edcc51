//! `signer-cli ui` against real processes: the real approval server, the real
//! `signer-cli ui`, and a real headless Chromium driven over WebDriver by Debian's
//! chromedriver (without them on the PATH, each test says so in one line and passes,
//! or fails under `APPROVAL_TEST_REQUIRE_ALL`; `.ci/run` installs them).
//!
//! The browser is spoken to with the W3C WebDriver protocol directly (a few JSON
//! POSTs over the reqwest the tests already use) rather than through a client crate;
//! that harness is `support/browser.rs`, shared with `approve_page.rs`.
//!
//! What is attacked: the page's guards (wrong Host as after DNS rebinding, no or a
//! wrong secret, cross-origin POSTs, POSTs without Origin, the security headers),
//! hostile text (bidi overrides, zero-width and control characters, mixed scripts,
//! markup) that must show escaped exactly as `signer-cli show` prints it, and a wrong
//! hash prefix that must sign nothing.

use anyhow::{bail, Context, Result};
use approval_e2e::{
    bin, poll_until, McpClient, Server, World, NOTE_POLICY_ALICE_AND_BOB, STEP_TIMEOUT,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

#[path = "support/browser.rs"]
mod browser;
use browser::{target_dir, Browser};

// ---------------------------------------------------------------------------
// signer-cli ui
// ---------------------------------------------------------------------------

/// A running `signer-cli ui --no-open` (killed on drop).
struct Ui {
    _child: tokio::process::Child,
    /// The printed URL, secret included.
    url: String,
    /// `127.0.0.1:PORT`.
    host: String,
    /// The per-run secret.
    secret: String,
    /// Its stderr.
    log: PathBuf,
}

impl Ui {
    async fn start(world: &World, name: &str, server: &Server) -> Result<Ui> {
        Self::start_at(world, name, &server.api_url).await
    }

    /// `signer-cli ui` for `name` against any approver API URL.
    async fn start_at(world: &World, name: &str, api_url: &str) -> Result<Ui> {
        let log = world.path().join(format!("ui-{name}.log"));
        let mut child = tokio::process::Command::new(bin("signer-cli"))
            .env("XDG_CONFIG_HOME", world.path().join("xdg-config"))
            .env_remove("SIGNER_SERVER")
            .env_remove("SIGNER_KEY")
            .arg("--server")
            .arg(api_url)
            .arg("--key")
            .arg(world.key_file(name))
            .args(["ui", "--no-open"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start signer-cli ui")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(STEP_TIMEOUT, lines.next_line())
            .await
            .context("signer-cli ui printed nothing")??
            .with_context(|| {
                format!(
                    "signer-cli ui ended: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })?;
        let url = line
            .strip_prefix("Approver UI: ")
            .with_context(|| format!("not the URL line: {line:?}"))?
            .to_owned();
        let rest = url.strip_prefix("http://").context("URL is not http://")?;
        let (host, query) = rest.split_once("/?s=").context("URL has no secret")?;
        if !host.starts_with("127.0.0.1:") || query.len() != 43 {
            bail!("unexpected URL {url}");
        }
        // Keep reading stdout so the pipe never fills.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Ui {
            _child: child,
            host: host.to_owned(),
            secret: query.to_owned(),
            url,
            log,
        })
    }

    fn base(&self) -> String {
        format!("http://{}", self.host)
    }

    fn cookie_name(&self) -> String {
        let port = self.host.rsplit(':').next().unwrap_or("");
        format!("signer_ui_{port}")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// An answer read off the wire: status, headers (names lowercased), body.
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request written byte for byte (any Host, any Origin) to `addr`.
async fn raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Raw> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(STEP_TIMEOUT, s.read_to_end(&mut buf)).await??;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").context("no header end")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("no status line")?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Raw {
        status,
        headers,
        body: body.to_owned(),
    })
}

// ---------------------------------------------------------------------------
// What this page hands the browser
// ---------------------------------------------------------------------------

impl Browser {
    /// What the page holds after its handover: the `Cookie` header value (WebDriver
    /// reads HttpOnly cookies; the page's script cannot) and the token in the tab's
    /// sessionStorage.
    async fn page_credentials(&self, cookie_name: &str) -> Result<(String, String)> {
        let c = self
            .cmd(
                reqwest::Method::GET,
                &format!("/cookie/{cookie_name}"),
                None,
            )
            .await?;
        let value = c["value"].as_str().context("no cookie value")?;
        let token = self
            .js("return sessionStorage.getItem('signer-token')", json!([]))
            .await?;
        let token = token.as_str().context("no token in sessionStorage")?;
        Ok((format!("{cookie_name}={value}"), token.to_owned()))
    }
}

/// A world with alice and bob, both needed for `note.write`, and its server.
async fn note_world() -> Result<(World, Server)> {
    let world = World::new(&["alice", "bob"])?;
    world.write_policy("note.write.toml", NOTE_POLICY_ALICE_AND_BOB)?;
    let server = world.start()?;
    Ok((world, server))
}

/// CSS for the card of proposal `id` in the pending list.
fn card(id: &str) -> String {
    format!("#pending article[data-id=\"{id}\"]")
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// A whole 2-of-2 approval: the proposal arrives on the open page without a reload,
/// a wrong hash prefix signs nothing, alice approves by typing into the page, bob
/// with the CLI, and the agent executes once.
#[tokio::test]
async fn a_whole_approval_by_clicks_and_typing_with_a_live_arrival() -> Result<()> {
    let (world, server) = note_world().await?;
    let mcp = server.mcp().await?;
    let ui = Ui::start(&world, "alice", &server).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.goto(&ui.url).await?;
    let who = b
        .wait("the page to load", "const w = document.querySelector('#who').textContent; return w.startsWith('Signing as') ? w : null", json!([]))
        .await?;
    assert!(who.as_str().unwrap_or("").contains("alice"), "{who}");
    // The secret left the address bar, and so did the token (the handover page went
    // on to /#t=..., which the page took into sessionStorage and replaced by /).
    assert_eq!(
        b.js("return location.href", json!([])).await?,
        format!("{}/", ui.base())
    );
    b.wait(
        "the empty list",
        "return !document.querySelector('#empty').hidden",
        json!([]),
    )
    .await?;
    // The page's own event stream is open before the agent proposes.
    b.wait(
        "the page's event stream",
        "return document.querySelector('#live').textContent === 'live updates: on'",
        json!([]),
    )
    .await?;
    b.js("window.__notReloaded = 42; return null", json!([]))
        .await?;

    let p = mcp
        .prepare(
            "note.write",
            json!({"text": "release 2.1 notes"}),
            "Write the release notes",
        )
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    b.wait(
        "the proposal to appear without a reload",
        "return document.querySelector(arguments[0]) !== null",
        json!([card(&id)]),
    )
    .await?;
    assert_eq!(
        b.js("return window.__notReloaded", json!([])).await?,
        42,
        "the page reloaded"
    );

    // A wrong prefix: refused with the CLI's words, nothing signed.
    let wrong: String = hash[..8]
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    b.type_into(&format!("{} input[name=confirm]", card(&id)), &wrong)
        .await?;
    b.type_into(&format!("{} input[name=reason]", card(&id)), "looks right")
        .await?;
    b.click(&format!("{} button[name=sign]", card(&id))).await?;
    let err = b
        .wait(
            "the refusal",
            "return document.querySelector(arguments[0]).textContent",
            json!([format!("{} p.error", card(&id))]),
        )
        .await?;
    assert!(
        err.as_str().unwrap_or("").contains(&format!(
            "REFUSED: you typed \"{wrong}\", which is not the first 8 characters of the preview hash: nothing signed"
        )),
        "{err}"
    );
    assert!(mcp.status(&id).await?.approvals().is_empty());

    // The right prefix: signed, recorded, and the quorum shown.
    b.type_into(&format!("{} input[name=confirm]", card(&id)), &hash[..8])
        .await?;
    b.type_into(&format!("{} input[name=reason]", card(&id)), "looks right")
        .await?;
    b.click(&format!("{} button[name=sign]", card(&id))).await?;
    let outcome = b
        .wait(
            "the recorded result",
            "const o = document.querySelector('#log .outcome'); return o && o.textContent",
            json!([]),
        )
        .await?;
    assert_eq!(outcome, "approved: 1 of 2, waiting for 1 more");
    assert_eq!(mcp.status(&id).await?.approvals(), vec!["alice".to_owned()]);
    let logged = b
        .js(
            "return document.querySelector('#log pre.preview').textContent",
            json!([]),
        )
        .await?;
    assert!(
        logged.as_str().unwrap_or("").contains("  alice  approve  "),
        "{logged}"
    );

    // Bob with the CLI; the page drops the proposal from the pending list live.
    let bob = world.signer("bob", &server);
    bob.approve(&id).await?;
    b.wait(
        "the approved proposal to leave the pending list",
        "return document.querySelector(arguments[0]) === null",
        json!([card(&id)]),
    )
    .await?;
    let st = mcp.wait_status(&id, "APPROVED", STEP_TIMEOUT).await?;
    assert!(st.executable(), "{}", st.structured);
    let done = mcp.execute(&id, &hash).await?;
    done.expect("SUCCEEDED", false);
    let again = mcp.execute(&id, &hash).await?;
    again.expect("ALREADY_EXECUTED_NO_REPLAY", true);
    assert!(!ui.log().contains("live updates stopped"), "{}", ui.log());
    Ok(())
}

/// What an agent writes to hide or fake text, shown on the page exactly as
/// `signer-cli show` prints it; no markup of it becomes an element.
#[tokio::test]
async fn hostile_text_is_shown_exactly_as_signer_cli_show_prints_it() -> Result<()> {
    let (world, server) = note_world().await?;
    let mcp = server.mcp().await?;
    let ui = Ui::start(&world, "alice", &server).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.goto(&ui.url).await?;
    b.wait(
        "the page to load",
        "return document.querySelector('#who').textContent.startsWith('Signing as')",
        json!([]),
    )
    .await?;
    let summary =
        "Pay invoice \u{202E}fdp.exe\u{202C} to \u{0430}dmin\u{200B} <b>now</b>\u{7}\u{1b}[2J";
    let payload = json!({
        "text": "Wire 9,000 EUR to \u{0440}\u{0430}ypal.com\u{2066} (hidden)\u{2069}\nthen <img src=x onerror=alert(1)><script>alert(2)</script>",
        "to\u{200D}": "IBAN DE89\u{00A0}3704\u{FEFF}0044",
    });
    let p = mcp.prepare("note.write", payload, summary).await?;
    let id = p.proposal_id();
    let shown = b
        .wait(
            "the hostile proposal",
            "const e = document.querySelector(arguments[0]); return e && e.textContent",
            json!([format!("{} pre.preview", card(&id))]),
        )
        .await?;
    let shown = shown.as_str().context("not text")?.to_owned();
    let cli = world
        .signer("alice", &server)
        .ok(&["show", &id])
        .await?
        .stdout;
    // Every line but the two relative times ("created ... (3s ago)").
    let stable = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("created") && !l.starts_with("expires"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(stable(&shown), stable(&cli), "page:\n{shown}\ncli:\n{cli}");
    for needle in [
        "\\u{202e}fdp.exe\\u{202c}",
        "\\u{200b}",
        "\\u{7}\\u{1b}[2J",
        "\\u{2066} (hidden)\\u{2069}",
        "WARNING: \"аdmin\" in summary mixes Cyrillic and Latin letters",
        "WARNING: \"раypal\" in payload.text mixes Cyrillic and Latin letters",
        "<img src=x onerror=alert(1)><script>alert(2)</script>",
    ] {
        assert!(shown.contains(needle), "page lacks {needle:?}:\n{shown}");
    }
    // Nothing raw reached the page, and no markup became an element.
    let html = b
        .js("return document.documentElement.outerHTML", json!([]))
        .await?;
    let html = html.as_str().unwrap_or("");
    for c in [
        '\u{202E}', '\u{200B}', '\u{7}', '\u{1b}', '\u{2066}', '\u{FEFF}', '\u{00A0}',
    ] {
        assert!(!html.contains(c), "raw {c:?} in the page");
    }
    let counts = b
        .js(
            "return [document.querySelectorAll('img').length, document.querySelectorAll('script').length, document.querySelectorAll('b').length]",
            json!([]),
        )
        .await?;
    assert_eq!(counts, json!([0, 1, 0]));
    // The README's picture of it.
    let png = b.screenshot().await?;
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    std::fs::write(target_dir().join("ui-screenshot.png"), &png)?;
    drop(ui);
    Ok(())
}

/// The guards, over plain HTTP: wrong Host (DNS rebinding), missing or wrong
/// secret, cross-origin and Origin-less POSTs, the handover, the headers; and a
/// non-loopback --listen refused.
#[tokio::test]
async fn the_page_refuses_other_hosts_origins_and_requests_without_its_secret() -> Result<()> {
    let (world, server) = note_world().await?;
    let mcp = server.mcp().await?;
    let ui = Ui::start(&world, "alice", &server).await?;
    let addr = ui.host.clone();
    let host = ui.host.as_str();
    let port = host.rsplit(':').next().unwrap_or("");
    let csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
    let secured = |r: &Raw| {
        assert_eq!(r.header("content-security-policy"), Some(csp));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
        assert_eq!(r.header("cache-control"), Some("no-store"));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
    };

    let r = raw(
        &addr,
        "GET",
        &format!("/?s={}", ui.secret),
        &[("Host", &format!("evil.example:{port}"))],
        "",
    )
    .await?;
    assert_eq!(r.status, 421);
    assert!(r.header("set-cookie").is_none());

    // No secret: nothing at all, assets included.
    for path in [
        "/",
        "/app.js",
        "/style.css",
        "/api/state",
        "/events",
        "/nothing",
    ] {
        let r = raw(&addr, "GET", path, &[("Host", host)], "").await?;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(
            r.body.contains("open the URL signer-cli ui printed"),
            "{}",
            r.body
        );
        secured(&r);
    }
    let r = raw(&addr, "GET", "/?s=wrong", &[("Host", host)], "").await?;
    assert_eq!(r.status, 403);
    assert!(r.header("set-cookie").is_none());

    // The handover: a page that goes on to /#t=TOKEN, with a cookie that is not the
    // secret. It works once.
    let r = raw(
        &addr,
        "GET",
        &format!("/?s={}", ui.secret),
        &[("Host", host)],
        "",
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    secured(&r);
    let set = r.header("set-cookie").unwrap_or("").to_owned();
    let cookie = set.split(';').next().unwrap_or("").to_owned();
    assert_eq!(
        set,
        format!("{cookie}; HttpOnly; SameSite=Strict; Path=/"),
        "{set}"
    );
    assert!(
        cookie.starts_with(&format!("{}=", ui.cookie_name())),
        "{cookie}"
    );
    assert!(
        !cookie.contains(&ui.secret),
        "the cookie holds the URL's secret"
    );
    let token = r
        .body
        .split("url=/#t=")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .unwrap_or("")
        .to_owned();
    assert_eq!(token.len(), 43, "{}", r.body);
    assert!(!cookie.contains(&token), "the cookie holds the token");
    let again = raw(
        &addr,
        "GET",
        &format!("/?s={}", ui.secret),
        &[("Host", host)],
        "",
    )
    .await?;
    assert_eq!(again.status, 403, "{}", again.body);
    assert!(again.body.contains("used already"), "{}", again.body);
    assert!(again.header("set-cookie").is_none());
    // Guessing the cookie from the secret gets nothing.
    let secret_cookie = format!("{}={}", ui.cookie_name(), ui.secret);
    let r = raw(
        &addr,
        "GET",
        "/",
        &[("Host", host), ("Cookie", &secret_cookie)],
        "",
    )
    .await?;
    assert_eq!(r.status, 403);

    // DNS rebinding: another name for 127.0.0.1, even with the right cookie.
    for bad in [
        format!("evil.example:{port}"),
        "127.0.0.1".to_owned(),
        format!("127.0.0.1:{}1", port),
    ] {
        let r = raw(
            &addr,
            "GET",
            "/api/state",
            &[
                ("Host", &bad),
                ("Cookie", &cookie),
                ("X-Signer-Token", &token),
            ],
            "",
        )
        .await?;
        assert_eq!(r.status, 421, "Host {bad}: {}", r.body);
        secured(&r);
    }

    // With the cookie, under either name of the machine: the page's own files.
    for h in [host.to_owned(), format!("localhost:{port}")] {
        let r = raw(&addr, "GET", "/", &[("Host", &h), ("Cookie", &cookie)], "").await?;
        assert_eq!(r.status, 200, "{h}");
        assert!(r.body.contains("<script src=\"/app.js\" defer></script>"));
        secured(&r);
    }
    // The API and the event stream need the token too: cookies ignore ports, so a
    // server on another port of this machine may hold the cookie, never the token.
    for (path, hdrs) in [
        (
            "/api/state",
            vec![("Host", host), ("Cookie", cookie.as_str())],
        ),
        (
            "/api/state",
            vec![
                ("Host", host),
                ("Cookie", cookie.as_str()),
                ("X-Signer-Token", "AAAA"),
            ],
        ),
        ("/events", vec![("Host", host), ("Cookie", cookie.as_str())]),
    ] {
        let r = raw(&addr, "GET", path, &hdrs, "").await?;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(r.body.contains("lacks the page's token"), "{}", r.body);
    }
    let with_token = [
        ("Host", host),
        ("Cookie", cookie.as_str()),
        ("X-Signer-Token", token.as_str()),
    ];
    let r = raw(&addr, "GET", "/api/state", &with_token, "").await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let st: Value = serde_json::from_str(&r.body)?;
    assert_eq!(st["me"], "alice");
    // A cookie of the same name planted by another port does not lock the page out.
    let planted = format!("{}=planted; {cookie}", ui.cookie_name());
    let r = raw(
        &addr,
        "GET",
        "/api/state",
        &[
            ("Host", host),
            ("Cookie", &planted),
            ("X-Signer-Token", &token),
        ],
        "",
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.body);
    // What a browser marks as coming from another site or another port is refused,
    // cookie and token notwithstanding.
    for site in ["cross-site", "same-site"] {
        let mut h = with_token.to_vec();
        h.push(("Sec-Fetch-Site", site));
        let r = raw(&addr, "GET", "/api/state", &h, "").await?;
        assert_eq!(r.status, 403, "{site}: {}", r.body);
        assert!(
            r.body.contains("another site or another port"),
            "{}",
            r.body
        );
    }
    // Bad input to the page's own API: a clear code, not a bare framework error.
    for q in ["/api/proposal", "/api/proposal?id=", "/api/proposal?id=%20"] {
        let r = raw(&addr, "GET", q, &with_token, "").await?;
        assert_eq!(r.status, 400, "{q}: {}", r.body);
        let v: Value = serde_json::from_str(&r.body)?;
        assert_eq!(v["code"], "USAGE", "{q}: {v}");
    }
    let r = raw(
        &addr,
        "GET",
        "/api/proposal?id=p-zz%E2%80%AE",
        &with_token,
        "",
    )
    .await?;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("\\u{202e}"), "{}", r.body);

    // Decisions: only from this page's origin, only as JSON.
    let p = mcp
        .prepare("note.write", json!({"text": "x"}), "CSRF target")
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    let body = json!({"proposal_id": id, "decision": "approve", "confirm": &hash[..8], "shown_sha256": &hash, "reason": ""})
        .to_string();
    let json_ct = ("Content-Type", "application/json");
    let tok = ("X-Signer-Token", token.as_str());
    let r = raw(
        &addr,
        "POST",
        "/api/decide",
        &[("Host", host), ("Cookie", &cookie), tok, json_ct],
        &body,
    )
    .await?;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("without an Origin header"), "{}", r.body);
    for origin in [
        "http://evil.example",
        "null",
        &format!("http://evil.example:{port}"),
        &format!("https://{host}"),
        &format!("http://127.0.0.1:{}1", port),
        &format!("http://localhost:{}1", port),
    ] {
        let r = raw(
            &addr,
            "POST",
            "/api/decide",
            &[
                ("Host", host),
                ("Cookie", &cookie),
                tok,
                ("Origin", origin),
                json_ct,
            ],
            &body,
        )
        .await?;
        assert_eq!(r.status, 403, "Origin {origin}: {}", r.body);
        assert!(r.body.contains("from another origin"), "{}", r.body);
        secured(&r);
    }
    let own = format!("http://{host}");
    let r = raw(
        &addr,
        "POST",
        "/api/decide",
        &[
            ("Host", host),
            ("Cookie", &cookie),
            tok,
            ("Origin", &own),
            ("Content-Type", "text/plain"),
        ],
        &body,
    )
    .await?;
    assert_eq!(r.status, 415, "{}", r.body);
    // A POST from the page's own origin without the cookie, or without the token,
    // is refused too.
    for hdrs in [
        vec![("Host", host), tok, ("Origin", own.as_str()), json_ct],
        vec![
            ("Host", host),
            ("Cookie", cookie.as_str()),
            ("Origin", own.as_str()),
            json_ct,
        ],
    ] {
        let r = raw(&addr, "POST", "/api/decide", &hdrs, &body).await?;
        assert_eq!(r.status, 403, "{}", r.body);
    }
    assert!(
        mcp.status(&id).await?.approvals().is_empty(),
        "something was signed"
    );
    let page = [
        ("Host", host),
        ("Cookie", cookie.as_str()),
        tok,
        ("Origin", own.as_str()),
        json_ct,
    ];
    // A wrong prefix from the page itself: the CLI's refusal, nothing signed.
    let bad = json!({"proposal_id": id, "decision": "approve", "confirm": "zzzzzzzz", "shown_sha256": &hash, "reason": ""})
        .to_string();
    let r = raw(&addr, "POST", "/api/decide", &page, &bad).await?;
    assert_eq!(r.status, 409, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body)?;
    assert_eq!(v["code"], "REFUSED");
    // The right prefix, but not the preview the page showed: a server that answers
    // the list and the single proposal with two previews sharing the first 8
    // characters of their hashes gets nothing signed.
    let other = format!("{}{}", &hash[..8], "0".repeat(hash.len() - 8));
    let swapped = json!({"proposal_id": id, "decision": "approve", "confirm": &hash[..8], "shown_sha256": other, "reason": ""})
        .to_string();
    let r = raw(&addr, "POST", "/api/decide", &page, &swapped).await?;
    assert_eq!(r.status, 409, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body)?;
    assert_eq!(v["code"], "REFUSED");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("changed since the page showed it"),
        "{v}"
    );
    assert!(
        mcp.status(&id).await?.approvals().is_empty(),
        "something was signed"
    );
    // And the real thing, to show the guard lets the page through.
    let r = raw(&addr, "POST", "/api/decide", &page, &body).await?;
    assert_eq!(r.status, 200, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body)?;
    assert_eq!(v["outcome"], "approved: 1 of 2, waiting for 1 more");
    assert_eq!(mcp.status(&id).await?.approvals(), vec!["alice".to_owned()]);

    // Only loopback.
    let out = std::process::Command::new(bin("signer-cli"))
        .env("XDG_CONFIG_HOME", world.path().join("xdg-config"))
        .arg("--server")
        .arg(&server.api_url)
        .arg("--key")
        .arg(world.key_file("alice"))
        .args(["ui", "--no-open", "--listen", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a loopback address"), "{err}");
    assert!(out.stdout.is_empty());
    Ok(())
}

/// The other decisions by clicks: a veto on a pending card, and a revocation of an
/// approved proposal opened by a prefix of its id (as `signer-cli show` takes it).
#[tokio::test]
async fn reject_and_revoke_from_the_page() -> Result<()> {
    let (world, server) = note_world().await?;
    let mcp = server.mcp().await?;
    let ui = Ui::start(&world, "alice", &server).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.goto(&ui.url).await?;

    let p = mcp
        .prepare("note.write", json!({"text": "veto me"}), "To be vetoed")
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    let c = card(&id);
    b.wait(
        "the proposal",
        "return document.querySelector(arguments[0]) !== null",
        json!([c]),
    )
    .await?;
    b.click(&format!("{c} select[name=decision] option[value=reject]"))
        .await?;
    b.type_into(&format!("{c} input[name=confirm]"), &hash[..8])
        .await?;
    b.type_into(&format!("{c} input[name=reason]"), "not today")
        .await?;
    b.click(&format!("{c} button[name=sign]")).await?;
    let outcome = b
        .wait(
            "the veto",
            "const o = document.querySelector('#log .outcome'); return o && o.textContent",
            json!([]),
        )
        .await?;
    assert_eq!(outcome, "rejected: proposal is REJECTED (1 of 1 vetoes)");
    assert_eq!(mcp.status(&id).await?.status(), "REJECTED");

    // Approved by both with the CLI, then revoked from the page before it runs.
    let q = mcp
        .prepare("note.write", json!({"text": "revoke me"}), "To be revoked")
        .await?;
    let (id, hash) = (q.proposal_id(), q.preview_sha256());
    world.signer("alice", &server).approve(&id).await?;
    world.signer("bob", &server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", STEP_TIMEOUT).await?;
    b.type_into("#open input[name=id]", &id[2..10]).await?;
    b.click("#open button").await?;
    let opened = format!("#opened article[data-id=\"{id}\"]");
    let options = b
        .wait(
            "the opened proposal",
            "const e = document.querySelector(arguments[0]); return e && [...e.querySelectorAll('option')].map(o => o.value)",
            json!([opened]),
        )
        .await?;
    assert_eq!(options, json!(["revoke"]));
    b.type_into(&format!("{opened} input[name=confirm]"), &hash[..8])
        .await?;
    b.click(&format!("{opened} button[name=sign]")).await?;
    b.wait(
        "the revocation",
        "return [...document.querySelectorAll('#log .outcome')].some(o => o.textContent.startsWith('revoked: '))",
        json!([]),
    )
    .await?;
    let st = mcp.status(&id).await?;
    assert!(!st.executable(), "{}", st.structured);
    let run = mcp.execute(&id, &hash).await?;
    assert_ne!(run.status(), "SUCCEEDED", "{}", run.structured);
    Ok(())
}

// ---------------------------------------------------------------------------
// A server that lies: a proxy in front of the real one
// ---------------------------------------------------------------------------

/// Forwards everything to the real server (the event stream streamed through), but
/// in proposal views whose summary holds `TAMPER` it swaps the payload's text: the
/// preview then no longer hashes to the `preview_sha256` the server claims.
#[derive(Clone)]
struct Tamper {
    upstream: String,
    http: reqwest::Client,
}

fn tamper_one(p: &mut Value) {
    let marked = p["preview"]["summary"]
        .as_str()
        .is_some_and(|s| s.contains("TAMPER"));
    if marked {
        p["preview"]["payload"]["text"] = json!("wire everything to the attacker");
    }
}

async fn tamper(
    axum::extract::State(t): axum::extract::State<Tamper>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::header;
    use axum::response::IntoResponse;
    let (parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let body = axum::body::to_bytes(body, 1 << 24)
        .await
        .unwrap_or_default();
    let mut r = t
        .http
        .request(parts.method.clone(), format!("{}{pq}", t.upstream))
        .body(body.to_vec());
    for (k, v) in &parts.headers {
        if k != header::HOST && k != header::CONTENT_LENGTH {
            r = r.header(k, v);
        }
    }
    let resp = match r.send().await {
        Ok(r) => r,
        Err(e) => return (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = resp.status();
    if parts.method == axum::http::Method::GET && parts.uri.path().starts_with("/v1/proposals") {
        let text = resp.text().await.unwrap_or_default();
        let Ok(mut v) = serde_json::from_str::<Value>(&text) else {
            return (status, text).into_response();
        };
        match v.get_mut("proposals").and_then(Value::as_array_mut) {
            Some(list) => list.iter_mut().for_each(tamper_one),
            None => tamper_one(&mut v),
        }
        return (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            v.to_string(),
        )
            .into_response();
    }
    let mut b = axum::http::Response::builder().status(status);
    for (k, v) in resp.headers() {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING {
            b = b.header(k, v);
        }
    }
    b.body(axum::body::Body::from_stream(resp.bytes_stream()))
        .unwrap_or_else(|e| (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response())
}

/// A proposal that fails a local check (here the preview hash) is shown with the
/// CLI's refusal and no form, and a decision posted for it anyway signs nothing;
/// an honest proposal through the same proxy is offered as usual.
#[tokio::test]
async fn a_proposal_that_fails_the_local_checks_shows_the_refusal_and_no_form() -> Result<()> {
    let (world, server) = note_world().await?;
    let mcp = server.mcp().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let proxy = format!("http://{}", listener.local_addr()?);
    let app = axum::Router::new().fallback(tamper).with_state(Tamper {
        upstream: server.api_url.clone(),
        http: reqwest::Client::new(),
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let ui = Ui::start_at(&world, "alice", &proxy).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.goto(&ui.url).await?;

    let bad = mcp
        .prepare("note.write", json!({"text": "hello"}), "TAMPER: say hello")
        .await?;
    let good = mcp
        .prepare("note.write", json!({"text": "hello"}), "say hello")
        .await?;
    let (bad_id, bad_hash) = (bad.proposal_id(), bad.preview_sha256());
    let shown = b
        .wait(
            "the refused card",
            "const e = document.querySelector(arguments[0]); return e && e.classList.contains('refused') && [e.textContent, e.querySelector('form') === null, e.querySelector('button') === null]",
            json!([card(&bad_id)]),
        )
        .await?;
    let text = shown[0].as_str().unwrap_or("");
    assert!(
        text.contains("PREVIEW HASH MISMATCH") && text.contains("refused, nothing signed"),
        "{text}"
    );
    assert_eq!(
        shown[1], true,
        "a form for a proposal that failed its checks"
    );
    assert_eq!(
        shown[2], true,
        "a button for a proposal that failed its checks"
    );
    b.wait(
        "the honest card with its form",
        "const e = document.querySelector(arguments[0]); return e && e.querySelector('button[name=sign]') !== null",
        json!([card(&good.proposal_id())]),
    )
    .await?;

    // Posting anyway, with the hash the real server computed: refused, nothing signed.
    let host = ui.host.as_str();
    let own = format!("http://{host}");
    let body = json!({"proposal_id": bad_id, "decision": "approve", "confirm": &bad_hash[..8], "shown_sha256": &bad_hash, "reason": ""}).to_string();
    let (cookie, token) = b.page_credentials(&ui.cookie_name()).await?;
    let r = raw(
        host,
        "POST",
        "/api/decide",
        &[
            ("Host", host),
            ("Cookie", &cookie),
            ("X-Signer-Token", &token),
            ("Origin", &own),
            ("Content-Type", "application/json"),
        ],
        &body,
    )
    .await?;
    assert_eq!(r.status, 409, "{}", r.body);
    let v: Value = serde_json::from_str(&r.body)?;
    assert_eq!(v["code"], "REFUSED");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("PREVIEW HASH MISMATCH"),
        "{v}"
    );
    assert!(
        mcp.status(&bad_id).await?.approvals().is_empty(),
        "something was signed"
    );
    Ok(())
}

/// Without `--no-open` the browser is started on a private redirect file: the
/// secret never appears in a command line (which other local users can read in
/// /proc), and the file is readable by this user only.
#[tokio::test]
async fn the_browser_is_opened_through_a_private_file_never_with_the_secret_in_argv() -> Result<()>
{
    let (world, server) = note_world().await?;
    let seen = world.path().join("xdg-open.seen");
    let bin_dir = world.path().join("fake-bin");
    std::fs::create_dir_all(&bin_dir)?;
    let opener = bin_dir.join("xdg-open");
    std::fs::write(
        &opener,
        format!(
            "#!/bin/sh\n{{ echo \"args: $*\"; stat -c 'mode: %a' \"$1\"; cat \"$1\"; }} > {}.tmp && mv {}.tmp {}\nrm -f \"$1\"\n",
            seen.display(),
            seen.display(),
            seen.display()
        ),
    )?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755))?;
    }
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = tokio::process::Command::new(bin("signer-cli"))
        .env("XDG_CONFIG_HOME", world.path().join("xdg-config"))
        .env("PATH", path)
        .arg("--server")
        .arg(&server.api_url)
        .arg("--key")
        .arg(world.key_file("alice"))
        .arg("ui")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("no stdout")?;
    let line = tokio::time::timeout(STEP_TIMEOUT, BufReader::new(stdout).lines().next_line())
        .await??
        .context("no URL line")?;
    let url = line
        .strip_prefix("Approver UI: ")
        .context("no URL")?
        .to_owned();
    let secret = url.rsplit("?s=").next().unwrap_or("").to_owned();
    assert_eq!(secret.len(), 43, "{url}");
    let text = poll_until("xdg-open to run", STEP_TIMEOUT, || async {
        Ok(std::fs::read_to_string(&seen).ok())
    })
    .await?;
    let args = text.lines().next().unwrap_or("");
    assert!(!args.contains(&secret), "the secret is in argv: {args}");
    assert!(
        args.contains("signer-cli-ui-") && args.ends_with(".html"),
        "{args}"
    );
    assert!(text.contains("\nmode: 600\n"), "{text}");
    assert!(text.contains(&format!("url={url}\"")), "{text}");
    Ok(())
}

/// `note.write` with either alice or bob enough: one approval reaches quorum.
const NOTE_POLICY_ALICE_OR_BOB: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 1
approvers = ["alice", "bob"]
ttl = "30m"
execute_within = "10m"
[payload_schema]
type = "object"
required = ["text"]
[executor]
type = "note"
"#;

/// The reported bug: a card stayed "PENDING" with its approve button live after
/// another approver decided from another machine. Alice has the proposal open twice
/// (its pending card, and opened by id); bob's approval from the command line
/// reaches the 1-of-2 quorum. Within 2 s every card of it on alice's page says
/// APPROVED and offers no approve, and a decision sent from the stale card is
/// refused by signer-cli, nothing signed.
#[tokio::test]
async fn a_decision_made_elsewhere_updates_every_open_card_within_two_seconds() -> Result<()> {
    let world = World::new(&["alice", "bob"])?;
    world.write_policy("note.write.toml", NOTE_POLICY_ALICE_OR_BOB)?;
    let server = world.start()?;
    let mcp = server.mcp().await?;
    let ui = Ui::start(&world, "alice", &server).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.goto(&ui.url).await?;
    b.wait(
        "the page's event stream",
        "return document.querySelector('#live').textContent === 'live updates: on'",
        json!([]),
    )
    .await?;
    let p = mcp
        .prepare(
            "note.write",
            json!({"text": "ship it"}),
            "Decided elsewhere",
        )
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    let c = card(&id);
    b.wait(
        "the proposal's card with an approve choice",
        "return document.querySelector(arguments[0]) !== null",
        json!([format!("{c} option[value=approve]")]),
    )
    .await?;
    b.type_into("#open input[name=id]", &id).await?;
    b.click("#open button").await?;
    let opened = format!("#opened article[data-id=\"{id}\"]");
    b.wait(
        "the opened card with an approve choice",
        "return document.querySelector(arguments[0]) !== null",
        json!([format!("{opened} option[value=approve]")]),
    )
    .await?;
    // Alice starts typing into the card she will not get to send.
    b.type_into(&format!("{opened} input[name=confirm]"), &hash[..8])
        .await?;

    world.signer("bob", &server).approve(&id).await?;
    let decided = std::time::Instant::now();
    // Every card of the proposal, wherever it is on the page: its status line, and
    // whether it still offers approve.
    let cards = "const cs = [...document.querySelectorAll('article')].filter(a => a.dataset.id === arguments[0]);
        return cs.map(a => ({
            approved: a.querySelector('pre.preview') !== null
                && a.querySelector('pre.preview').textContent.includes(arguments[0] + '  (APPROVED)'),
            approve: a.querySelector('option[value=approve]') !== null,
        }));";
    poll_until("every card to show APPROVED", STEP_TIMEOUT, || async {
        let v = b.js(cards, json!([id])).await?;
        let all = v.as_array().cloned().unwrap_or_default();
        let done = all.len() >= 2 && all.iter().all(|x| x["approved"] == true);
        Ok(done.then_some(()))
    })
    .await?;
    let took = decided.elapsed();
    assert!(
        took <= Duration::from_secs(2),
        "the page took {took:?} to show bob's approval"
    );
    let v = b.js(cards, json!([id])).await?;
    for x in v.as_array().cloned().unwrap_or_default() {
        assert_eq!(x["approve"], false, "a card still offers approve: {v}");
    }
    assert!(
        b.js(
            "return document.querySelector(arguments[0]) === null",
            json!([c])
        )
        .await?
            == true,
        "the proposal is still listed as pending"
    );

    // What the stale card would have sent: signer-cli reads the proposal again and
    // refuses, naming what changed.
    let stale = json!({"proposal_id": id, "decision": "approve", "confirm": &hash[..8],
        "shown_sha256": &hash, "shown_status": "PENDING", "reason": ""});
    b.js(
        "window.__stale = null; call('POST', '/api/decide', arguments[0]).then(r => { window.__stale = 'signed: ' + JSON.stringify(r); }, e => { window.__stale = e.message; }); return null",
        json!([stale]),
    )
    .await?;
    let answer = b
        .wait(
            "the stale decision's answer",
            "return window.__stale",
            json!([]),
        )
        .await?;
    assert_eq!(
        answer,
        format!(
            "REFUSED: proposal {id} changed since the page showed it: it was PENDING, it is now APPROVED; nothing signed. Read it again before deciding"
        )
    );
    let st = mcp.status(&id).await?;
    assert_eq!(st.approvals(), vec!["bob".to_owned()], "{}", st.structured);
    Ok(())
}
