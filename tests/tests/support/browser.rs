//! A headless Chromium driven over the W3C WebDriver protocol, shared by the
//! browser tests (`ui_browser.rs` for `signer-cli ui`, `approve_page.rs` for the
//! gate's approver page), each including it with `#[path = "support/browser.rs"]`.
//!
//! Why not a WebDriver client crate: the tests need a dozen JSON POSTs, which the
//! reqwest they already use speaks directly; a client crate would add a large
//! dependency tree for that. Debian's chromium and chromium-driver must be on the
//! PATH ([`Browser::start`] finds them with [`approval_e2e::require`]): without them
//! a browser test says so in one line and passes, or fails under
//! `APPROVAL_TEST_REQUIRE_ALL` (`.ci/run` installs both). No test installs them.
//!
//! What a test needs beyond this (the WebAuthn virtual authenticator, a page's own
//! credentials) lives in its own file as another `impl Browser` block.
#![allow(dead_code)]

use anyhow::{anyhow, bail, Context, Result};
use approval_e2e::{poll_until, STEP_TIMEOUT};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// How to get the two programs the browser tests need.
const INSTALL: &str = "apt-get install chromium chromium-driver";

pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
}

/// Chromium and chromedriver on the PATH, or `None` after the one `skipped:` line.
fn programs() -> Option<(PathBuf, PathBuf)> {
    let why = "to drive a headless browser over WebDriver";
    let chromium = approval_e2e::require("chromium", why, INSTALL)?;
    let driver = approval_e2e::require("chromedriver", why, INSTALL)?;
    Some((chromium, driver))
}

/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver and one browser session (both ended on drop).
pub struct Browser {
    driver: tokio::process::Child,
    port: u16,
    session: String,
    http: reqwest::Client,
    profile: tempfile::TempDir,
}

/// A phone's screen, emulated by Chromium (`mobileEmulation`): the CSS viewport,
/// the device pixel ratio, touch, and a mobile user agent, so the page's viewport
/// meta and media queries apply as on the device.
#[derive(Clone, Copy, Debug)]
pub struct Phone {
    /// CSS pixels.
    pub width: u32,
    /// CSS pixels.
    pub height: u32,
    /// Device pixels per CSS pixel (screenshots are this much larger).
    pub pixel_ratio: f64,
}

impl Browser {
    /// A desktop-sized window (1280x1400); `None` when chromium or chromedriver
    /// is missing (the test returns early: see [`programs`]).
    pub async fn start() -> Result<Option<Browser>> {
        Self::start_with(None).await
    }

    /// A browser emulating `phone` (or a desktop window with `None`); `None` when
    /// chromium or chromedriver is missing.
    pub async fn start_with(phone: Option<Phone>) -> Result<Option<Browser>> {
        let Some((chromium, chromedriver)) = programs() else {
            return Ok(None);
        };
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        let driver = tokio::process::Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", chromedriver.display()))?;
        let http = reqwest::Client::new();
        let status = format!("http://127.0.0.1:{port}/status");
        poll_until("chromedriver to answer", STEP_TIMEOUT, || async {
            Ok(match http.get(&status).send().await {
                Ok(r) => r
                    .json::<Value>()
                    .await
                    .ok()
                    .filter(|v| v["value"]["ready"] == true),
                Err(_) => None,
            })
        })
        .await?;
        let profile = tempfile::tempdir()?;
        let window = match phone {
            Some(p) => format!("--window-size={},{}", p.width, p.height),
            None => "--window-size=1280,1400".to_owned(),
        };
        let mut chrome = json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     window, "--no-first-run",
                     format!("--user-data-dir={}", profile.path().display())],
        });
        if let Some(p) = phone {
            chrome["mobileEmulation"] = json!({
                "deviceMetrics": {"width": p.width, "height": p.height, "pixelRatio": p.pixel_ratio,
                                  "mobile": true, "touch": true},
                "userAgent": "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Mobile Safari/537.36",
            });
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": chrome,
        }}});
        let r: Value = http
            .post(format!("http://127.0.0.1:{port}/session"))
            .json(&caps)
            .send()
            .await?
            .json()
            .await?;
        let session = r["value"]["sessionId"]
            .as_str()
            .with_context(|| format!("no WebDriver session: {r}"))?
            .to_owned();
        Ok(Some(Browser {
            driver,
            port,
            session,
            http,
            profile,
        }))
    }

    pub async fn cmd(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let url = format!(
            "http://127.0.0.1:{}/session/{}{path}",
            self.port, self.session
        );
        let mut req = self.http.request(method, url).timeout(STEP_TIMEOUT);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await?.json().await?;
        if v["value"].get("error").is_some() {
            bail!("WebDriver {path}: {}", v["value"]);
        }
        Ok(v["value"].clone())
    }

    pub async fn goto(&self, url: &str) -> Result<()> {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await
            .map(|_| ())
    }

    /// Runs a script in the page; returns its value.
    pub async fn js(&self, script: &str, args: Value) -> Result<Value> {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Runs an asynchronous script (its last argument is the callback to call with
    /// the result); returns that result.
    pub async fn js_async(&self, script: &str, args: Value) -> Result<Value> {
        self.cmd(
            reqwest::Method::POST,
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Waits until `script` returns something other than null/false/"".
    pub async fn wait(&self, what: &str, script: &str, args: Value) -> Result<Value> {
        poll_until(what, STEP_TIMEOUT, || async {
            let v = self.js(script, args.clone()).await?;
            Ok(match &v {
                Value::Null | Value::Bool(false) => None,
                Value::String(s) if s.is_empty() => None,
                _ => Some(v),
            })
        })
        .await
    }

    pub async fn find(&self, css: &str) -> Result<String> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        v[ELEMENT]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("no element {css}: {v}"))
    }

    /// Clicks into the element and types, as a person would.
    pub async fn type_into(&self, css: &str, text: &str) -> Result<()> {
        let e = self.find(css).await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/clear"),
            Some(json!({})),
        )
        .await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await
        .map(|_| ())
    }

    pub async fn click(&self, css: &str) -> Result<()> {
        let e = self.find(css).await?;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await
        .map(|_| ())
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        use base64::Engine as _;
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await?;
        let b64 = v.as_str().context("screenshot is not a string")?;
        Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
    }

    /// A PNG of the whole page, beyond the window (Chrome DevTools through
    /// chromedriver's `goog/cdp/execute`), at the device pixel ratio.
    pub async fn screenshot_full_page(&self) -> Result<Vec<u8>> {
        use base64::Engine as _;
        let metrics = self
            .cmd(
                reqwest::Method::POST,
                "/goog/cdp/execute",
                Some(json!({"cmd": "Page.getLayoutMetrics", "params": {}})),
            )
            .await?;
        let size = &metrics["cssContentSize"];
        let (w, h) = (
            size["width"].as_f64().context("no content width")?,
            size["height"].as_f64().context("no content height")?,
        );
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/goog/cdp/execute",
                Some(json!({"cmd": "Page.captureScreenshot", "params": {
                    "format": "png", "captureBeyondViewport": true,
                    "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}
                }})),
            )
            .await?;
        let b64 = v["data"].as_str().context("no screenshot data")?;
        Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
    }
}

impl Drop for Browser {
    /// Ends the session (and so Chromium) before chromedriver is killed, so no
    /// browser outlives the test.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                self.session, self.port
            );
            // The answer comes once the browser has quit; its first bytes are enough
            // (chromedriver may keep the connection open after them).
            let mut first = [0u8; 64];
            let _ = s.read(&mut first);
        }
        // Seen once after a CI run: a Chromium still running with no chromedriver, its
        // session's end not reached in time. Whatever still runs on this test's own
        // profile folder (a unique temporary path) is ended too; a machine without
        // pkill keeps the behaviour above.
        let profile = format!("--user-data-dir={}", self.profile.path().display());
        let _ = std::process::Command::new("pkill")
            .args(["-KILL", "-f", "--", &profile])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.start_kill();
    }
}
