//! The gate's own approver page and enrolment page (issue #34) against real
//! processes: the real approval server on a known port, `approval-server enroll`,
//! signer-cli for the key approvers, a webhook receiver for the links, and a real
//! headless Chromium whose passkeys live in a WebDriver virtual authenticator
//! (real P-256 keys and real assertions; no device, no human).
//!
//! Why a known port: a passkey is bound to an origin (`http://localhost:PORT`),
//! which the server must know before it starts (`--public-url`), and which the
//! keyring line then names. Headless Chromium treats `http://localhost` as a
//! secure context, so WebAuthn works without TLS.
//!
//! What is attacked: a page left open while the proposal changes elsewhere (no
//! button may stay enabled), a server whose preview does not hash to what it claims
//! (a lying proxy), a used enrolment link, a kind that does not accept passkeys, an
//! assertion without user verification, and a receipt whose passkey assertion was
//! altered in any one field.
//!
//! Run: `cargo build -p approval-server -p signer-cli && cargo test -p approval-e2e
//! --test approve_page`; `APPROVAL_UPDATE_SCREENSHOTS=1` also writes
//! `docs/img/approve-phone.png`.

mod support;

#[path = "support/browser.rs"]
mod browser;
#[path = "support/webauthn.rs"]
mod webauthn;

use anyhow::{bail, Context, Result};
use approval_e2e::{bin, poll_until, McpClient, Server, World, STEP_TIMEOUT};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use browser::{target_dir, Browser, Phone};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::{receiver_on, Receiver};
use webauthn::Authenticator;

/// What the page promises: a change made elsewhere shows within this long.
const SHOWN_WITHIN: Duration = Duration::from_secs(2);

/// The buttons the page can show.
const BUTTONS: [&str; 3] = ["#btn-approve", "#btn-reject", "#btn-revoke"];

/// A 2-of-2 kind: alice with her key file, dana with a passkey.
fn both_policy(kind: &str, hook: &str) -> String {
    format!(
        r#"kind = "{kind}"
description = "Write a note"
quorum = 2
approvers = ["alice", "dana"]
accept = ["key", "passkey"]
ttl = "30m"
execute_within = "10m"
[executor]
type = "note"
[[notify]]
type = "webhook"
url = "{hook}"
"#
    )
}

/// The same, but counting key signatures only (the default, said out loud).
fn keys_only_policy(kind: &str, hook: &str) -> String {
    both_policy(kind, hook).replace(r#"accept = ["key", "passkey"]"#, r#"accept = ["key"]"#)
}

// ---------------------------------------------------------------------------
// The gate on a known origin
// ---------------------------------------------------------------------------

/// A world (alice has a key), its server on `http://localhost:PORT`, and the
/// receiver its webhook notices go to.
struct Gate {
    world: World,
    server: Server,
    /// `http://localhost:PORT`: the origin passkeys are bound to.
    origin: String,
    hooks: Receiver,
}

/// A free port, picked by binding port 0 and letting it go.
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Starts the gate with `policies(hook_url)` (file name, TOML). Their kinds name
/// dana, who is not in the keyring yet: they stay disabled until she enrols.
async fn gate(policies: impl Fn(&str) -> Vec<(String, String)>) -> Result<Gate> {
    let (hook, hooks) = receiver_on("127.0.0.1:0".parse()?, &[]).await?;
    let world = World::new(&["alice"])?;
    for (file, toml) in policies(&hook) {
        world.write_policy(&file, &toml)?;
    }
    let port = free_port()?;
    let origin = format!("http://localhost:{port}");
    let listen = format!("127.0.0.1:{port}");
    let server = support::start(&world, &["--listen", &listen, "--public-url", &origin], &[])?;
    Ok(Gate {
        world,
        server,
        origin,
        hooks,
    })
}

impl Gate {
    /// `approval-server enroll NAME --rp localhost --public-url ORIGIN --data DIR`:
    /// the one-line link it prints.
    fn enrolment_link(&self, name: &str) -> Result<String> {
        let out = std::process::Command::new(bin("approval-server"))
            .args([
                "enroll",
                name,
                "--rp",
                "localhost",
                "--public-url",
                &self.origin,
            ])
            .arg("--data")
            .arg(&self.world.data)
            .stdin(std::process::Stdio::null())
            .output()
            .context("cannot run approval-server enroll")?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "approval-server enroll {name} failed ({}): {stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let link = stdout.trim().to_owned();
        if !link.starts_with(&format!("{}/enroll/", self.origin))
            || link.contains(char::is_whitespace)
        {
            bail!("approval-server enroll printed {stdout:?}, not one enrolment link");
        }
        Ok(link)
    }

    /// Enrols `name` in the browser `b` (whose virtual authenticator makes the
    /// passkey), adds the line to the keyring, reloads (SIGHUP) and waits until no
    /// kind is disabled any more. Returns the keyring line and the used link.
    async fn enrol(&self, b: &Browser, name: &str) -> Result<(String, String)> {
        let link = self.enrolment_link(name)?;
        b.goto(&link).await?;
        let what = b
            .wait(
                "the enrolment page to load",
                "const m = document.querySelector('#message'); \
                 if (m && !m.hidden && m.classList.contains('error')) return 'ERROR ' + m.textContent; \
                 const e = document.querySelector('#enroll'); \
                 return e && !e.hidden && !e.disabled && document.querySelector('#what').textContent",
                json!([]),
            )
            .await?;
        assert_eq!(what, format!("Create a passkey for {name} on localhost"));
        b.click("#enroll").await?;
        let line = b
            .wait(
                "the keyring line",
                "const m = document.querySelector('#message'); \
                 if (m.classList.contains('error')) return 'ERROR ' + m.textContent; \
                 return document.querySelector('#keyring-line').textContent",
                json!([]),
            )
            .await?;
        let line = line.as_str().context("not text")?.to_owned();
        assert!(
            line.starts_with(&format!("{name} webauthn-es256 ")),
            "{line}"
        );
        assert!(line.contains(" rp=localhost "), "{line}");
        assert!(
            line.ends_with(&format!(" origin={}", self.origin)),
            "{line}"
        );
        let says = b
            .js(
                "return document.querySelector('#result').textContent",
                json!([]),
            )
            .await?;
        assert!(
            says.as_str().unwrap_or("").contains(
                "Send this line to whoever runs the server; nothing was added by the server itself."
            ),
            "{says}"
        );
        self.world.add_to_keyring(&line)?;
        self.server.sighup()?;
        poll_until(
            "the keyring reload to enable the kinds",
            STEP_TIMEOUT,
            || async {
                let h = self.server.healthz().await?;
                Ok(h["disabled_kinds"]
                    .as_array()
                    .is_some_and(|d| d.is_empty())
                    .then_some(()))
            },
        )
        .await?;
        Ok((line, link))
    }

    /// The page link for `id`, as its webhook notice carries it (`approve_url`,
    /// present for kinds that accept passkeys).
    async fn approve_url(&self, id: &str) -> Result<String> {
        let url = poll_until("a notice with approve_url", STEP_TIMEOUT, || async {
            Ok(self
                .hooks
                .bodies()
                .iter()
                .filter(|b| b["proposal_id"] == id)
                .find_map(|b| b["approve_url"].as_str().map(str::to_owned)))
        })
        .await
        .with_context(|| format!("notices: {:?}", self.hooks.bodies()))?;
        let want = format!("{}/approve/{id}#v=", self.origin);
        assert!(url.starts_with(&want), "{url} does not start with {want}");
        assert_eq!(
            url,
            self.page_link(id)?,
            "not the link the server's key makes"
        );
        Ok(url)
    }

    /// The page link for `id` made from the server's key, as the server makes it
    /// ([`view_token`]): for a kind that accepts keys only, whose notices carry no
    /// link, but whose page a link holder may still open.
    fn page_link(&self, id: &str) -> Result<String> {
        Ok(format!(
            "{}/approve/{id}#v={}",
            self.origin,
            view_token(&self.world.data, id)?
        ))
    }

    /// `signer-cli --json verify RECEIPT --keys KEYRING --server-key KEY`, offline.
    async fn verify(&self, receipt: &Path) -> Result<approval_e2e::CliOutput> {
        let key = self.server.healthz().await?["server_key"]
            .as_str()
            .context("/healthz has no server_key")?
            .to_owned();
        let out = tokio::process::Command::new(bin("signer-cli"))
            .env("XDG_CONFIG_HOME", self.world.path().join("xdg-config"))
            .env_remove("SIGNER_SERVER")
            .env_remove("SIGNER_KEY")
            .arg("--json")
            .arg("verify")
            .arg(receipt)
            .arg("--keys")
            .arg(&self.world.keys)
            .args(["--server-key", &key])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        Ok(tokio::time::timeout(STEP_TIMEOUT, out).await??.into())
    }
}

/// A proposal's view token as the server makes it (`ServerIdentity::view_token`):
/// base64url of HMAC-SHA256 keyed with SHA-256("approval-v1-view-key\n" || seed)
/// over "approval-v1-view\n" || id, the seed read from `<data>/server.key`.
fn view_token(data: &Path, id: &str) -> Result<String> {
    use hmac::Mac as _;
    use sha2::Digest as _;
    let text = std::fs::read_to_string(data.join("server.key"))?;
    let seed = text
        .lines()
        .nth(1)
        .context("server.key has no second line")?;
    let seed = base64::engine::general_purpose::STANDARD.decode(seed.trim())?;
    let mut k = sha2::Sha256::new();
    k.update(b"approval-v1-view-key\n");
    k.update(&seed);
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&k.finalize())?;
    mac.update(b"approval-v1-view\n");
    mac.update(id.as_bytes());
    Ok(URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
}

/// The `cred=` of a keyring line.
fn credential_id(line: &str) -> Result<String> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("cred="))
        .map(str::to_owned)
        .with_context(|| format!("no cred= in {line}"))
}

// ---------------------------------------------------------------------------
// The page
// ---------------------------------------------------------------------------

/// Opens the page and waits for its first state; returns the status shown.
async fn open_page(b: &Browser, url: &str) -> Result<String> {
    b.goto(url).await?;
    let st = b
        .wait(
            "the page's first state",
            "const s = document.querySelector('#status').textContent; return s !== 'loading…' && s",
            json!([]),
        )
        .await?;
    Ok(st.as_str().unwrap_or("").to_owned())
}

/// The text of an element ("" when absent).
async fn text(b: &Browser, css: &str) -> Result<String> {
    let v = b
        .js(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''",
            json!([css]),
        )
        .await?;
    Ok(v.as_str().unwrap_or("").to_owned())
}

/// The action buttons shown and enabled right now.
async fn enabled_buttons(b: &Browser) -> Result<Vec<String>> {
    let v = b
        .js(
            "return arguments[0].filter(s => { const e = document.querySelector(s); return e && !e.hidden && !e.disabled; })",
            json!([BUTTONS]),
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// The action buttons shown (enabled or not).
async fn shown_buttons(b: &Browser) -> Result<Vec<String>> {
    let v = b
        .js(
            "return arguments[0].filter(s => { const e = document.querySelector(s); return e && !e.hidden; })",
            json!([BUTTONS]),
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Types the hash prefix and a reason, waits for `button` to be enabled, clicks
/// it and waits for the page's answer in `#message`; returns that answer.
async fn decide_on_page(b: &Browser, button: &str, prefix: &str, reason: &str) -> Result<String> {
    b.type_into("#prefix", prefix).await?;
    if !reason.is_empty() {
        b.type_into("#reason", reason).await?;
    }
    b.wait(
        "the button to be enabled",
        "const e = document.querySelector(arguments[0]); return !e.hidden && !e.disabled",
        json!([button]),
    )
    .await?;
    b.click(button).await?;
    let msg = b
        .wait(
            "the page's answer",
            "const m = document.querySelector('#message'); const t = m.textContent; \
             return !m.hidden && t && !t.startsWith('Waiting') && t",
            json!([]),
        )
        .await?;
    Ok(msg.as_str().unwrap_or("").to_owned())
}

/// Waits (at most [`SHOWN_WITHIN`] from `since`) for the page to show `status`.
async fn shows_status_within(b: &Browser, status: &str, since: Instant) -> Result<()> {
    let left = SHOWN_WITHIN.saturating_sub(since.elapsed());
    poll_until(&format!("the page to show {status}"), left, || async {
        Ok((text(b, "#status").await? == status).then_some(()))
    })
    .await
    .with_context(|| format!("not shown within {SHOWN_WITHIN:?} of the change"))
}

/// In the page: signs `decision` with the passkey `cred` (as a client other than
/// the page could, with any `userVerification`) and POSTs it; `{status, body}`.
const RAW_DECISION: &str = r#"
const [id, approver, cred, decision, hash, reason, uv] = arguments;
const done = arguments[arguments.length - 1];
const b64 = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const unb64 = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((s.length + 3) % 4)), c => c.charCodeAt(0));
(async () => {
  const text = 'approval-v1\n' + decision + '\n' + hash + '\n' + reason;
  const challenge = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  const c = await navigator.credentials.get({publicKey: {challenge, rpId: 'localhost',
    allowCredentials: [{type: 'public-key', id: unb64(cred)}], userVerification: uv, timeout: 20000}});
  const r = await fetch('/v1/proposals/' + id + '/decisions', {method: 'POST',
    headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({approver, decision, reason, passkey: {credential_id: b64(c.rawId),
      authenticator_data: b64(c.response.authenticatorData), client_data_json: b64(c.response.clientDataJSON),
      signature: b64(c.response.signature)}})});
  done({status: r.status, body: await r.text()});
})().catch((e) => done({error: String(e)}));
"#;

/// Runs [`RAW_DECISION`]; returns the HTTP status and the JSON body.
async fn raw_decision(
    b: &Browser,
    id: &str,
    cred: &str,
    hash: &str,
    uv: &str,
) -> Result<(u16, Value)> {
    let r = b
        .js_async(
            RAW_DECISION,
            json!([id, "dana", cred, "approve", hash, "", uv]),
        )
        .await?;
    if let Some(e) = r.get("error") {
        bail!("the browser made no assertion: {e}");
    }
    let status = r["status"].as_u64().context("no status")? as u16;
    let body = serde_json::from_str(r["body"].as_str().unwrap_or("")).unwrap_or(Value::Null);
    Ok((status, body))
}

/// Where a screenshot goes: always `target/NAME`, and `docs/img/NAME` too when
/// `APPROVAL_UPDATE_SCREENSHOTS=1` (so a test run leaves the tree clean).
fn save_screenshot(name: &str, png: &[u8]) -> Result<PathBuf> {
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let out = target_dir().join(name);
    std::fs::write(&out, png)?;
    if std::env::var("APPROVAL_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/img");
        std::fs::create_dir_all(&docs)?;
        std::fs::write(docs.join(name), png)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------

/// The whole path: dana enrols on the page (the link then refuses a second use),
/// alice approves with signer-cli, dana with her passkey on the page reached from
/// the webhook notice; the agent executes once; the receipt verifies offline and
/// is refused with any one field of dana's assertion altered.
#[tokio::test]
async fn a_passkey_enrolled_on_the_page_approves_and_the_receipt_verifies_offline() -> Result<()> {
    let g = gate(|hook| vec![("note.write.toml".into(), both_policy("note.write", hook))]).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    let auth = b.add_authenticator(Authenticator::default()).await?;
    let (line, link) = g.enrol(&b, "dana").await?;
    assert_eq!(b.credentials(&auth).await?.len(), 1);

    // The link worked once.
    b.goto(&link).await?;
    let refused = b
        .wait(
            "the used link's refusal",
            "const m = document.querySelector('#message'); return !m.hidden && m.classList.contains('error') && m.textContent",
            json!([]),
        )
        .await?;
    assert!(
        b.js("return document.querySelector('#enroll').hidden", json!([]))
            .await?
            == json!(true),
        "the enrol button is offered again: {refused}"
    );
    let again = reqwest::get(format!("{link}/options")).await?;
    assert!(
        again.status().is_client_error(),
        "a used link answered {}",
        again.status()
    );

    let mcp = g.server.mcp().await?;
    let p = mcp
        .prepare(
            "note.write",
            json!({"text": "release 2.2 notes"}),
            "Write the release notes",
        )
        .await?;
    p.expect("PENDING_QUORUM", false);
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    g.world.signer("alice", &g.server).approve(&id).await?;

    let url = g.approve_url(&id).await?;
    assert_eq!(open_page(&b, &url).await?, "PENDING");
    // The view token left the address bar (it stays in the tab's sessionStorage).
    let href = b.js("return location.href", json!([])).await?;
    assert_eq!(href, format!("{}/approve/{id}", g.origin));
    // Reloaded without it, the tab still reads the proposal.
    assert_eq!(
        open_page(&b, &format!("{}/approve/{id}", g.origin)).await?,
        "PENDING"
    );
    assert_eq!(text(&b, "#hash").await?, hash);
    assert_eq!(text(&b, "#hash mark").await?, hash[..8]);
    assert!(b
        .js(
            "return document.querySelector('#refusal').hidden",
            json!([])
        )
        .await?
        .as_bool()
        .unwrap_or(false));
    b.wait(
        "1 of 2 approvals",
        "return document.querySelector('#quorum').textContent === '1 of 2 approvals'",
        json!([]),
    )
    .await?;
    assert!(text(&b, "#preview").await?.contains(&id));
    assert!(text(&b, "#decisions").await?.contains("alice: approve"));
    assert_eq!(
        shown_buttons(&b).await?,
        vec!["#btn-approve", "#btn-reject"]
    );
    assert!(
        enabled_buttons(&b).await?.is_empty(),
        "enabled before the prefix"
    );

    // A wrong prefix enables nothing.
    let wrong: String = hash[..8]
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    b.type_into("#prefix", &wrong).await?;
    assert!(enabled_buttons(&b).await?.is_empty(), "enabled by {wrong}");

    let said = decide_on_page(&b, "#btn-approve", &hash[..8], "").await?;
    assert!(said.contains("recorded"), "{said}");
    assert_eq!(
        mcp.wait_status(&id, "APPROVED", STEP_TIMEOUT)
            .await?
            .approvals()
            .len(),
        2
    );
    let done = mcp.execute(&id, &hash).await?;
    done.expect("SUCCEEDED", false);
    mcp.execute(&id, &hash)
        .await?
        .expect("ALREADY_EXECUTED_NO_REPLAY", true);
    let st = Instant::now();
    shows_status_within(&b, "SUCCEEDED", st).await?;
    assert!(text(&b, "#decide-note")
        .await?
        .contains("nothing to decide now"));
    assert!(shown_buttons(&b).await?.is_empty());

    // The receipt, offline.
    let receipt = g.world.path().join("receipt.json");
    g.world
        .signer("alice", &g.server)
        .receipt(&id, &receipt)
        .await?;
    let ok = g.verify(&receipt).await?;
    assert!(ok.status.success(), "{ok}");
    let v = ok.json()?;
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["revocation_checked"], true, "{v}");
    let mut by: Vec<String> = serde_json::from_value(v["approved_by"].clone())?;
    by.sort();
    assert_eq!(by, vec!["alice", "dana"]);

    let original: Value = serde_json::from_str(&std::fs::read_to_string(&receipt)?)?;
    let at = original["decisions"]
        .as_array()
        .and_then(|ds| ds.iter().position(|d| d.get("passkey").is_some()))
        .context("no passkey decision in the receipt")?;
    assert_eq!(
        original["decisions"][at]["passkey"]["credential_id"],
        credential_id(&line)?
    );
    for field in [
        "credential_id",
        "authenticator_data",
        "client_data_json",
        "signature",
    ] {
        let mut r = original.clone();
        let b64 = r["decisions"][at]["passkey"][field]
            .as_str()
            .context("not a string")?
            .to_owned();
        let mut bytes = URL_SAFE_NO_PAD.decode(&b64)?;
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
        r["decisions"][at]["passkey"][field] = json!(URL_SAFE_NO_PAD.encode(&bytes));
        let altered = g.world.path().join(format!("receipt-{field}.json"));
        std::fs::write(&altered, serde_json::to_string(&r)?)?;
        let out = g.verify(&altered).await?;
        assert!(
            !out.status.success(),
            "a receipt with {field} altered was accepted: {out}"
        );
        assert!(out.stderr.contains("receipt refused"), "{field}: {out}");
    }
    Ok(())
}

/// The same approval on a phone-sized screen (390x844 CSS pixels): one column, no
/// sideways scrolling, big buttons; the picture is the README's.
#[tokio::test]
async fn the_approval_on_a_phone_sized_screen() -> Result<()> {
    let g = gate(|hook| vec![("note.write.toml".into(), both_policy("note.write", hook))]).await?;
    let Some(b) = Browser::start_with(Some(Phone {
        width: 390,
        height: 844,
        pixel_ratio: 2.0,
    }))
    .await?
    else {
        return Ok(());
    };
    b.add_authenticator(Authenticator::default()).await?;
    g.enrol(&b, "dana").await?;
    let mcp = g.server.mcp().await?;
    let p = mcp
        .prepare(
            "note.write",
            json!({"text": "Rotate the TLS certificate of api.example.com"}),
            "Rotate the API certificate",
        )
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    g.world.signer("alice", &g.server).approve(&id).await?;
    let url = g.approve_url(&id).await?;
    assert_eq!(open_page(&b, &url).await?, "PENDING");
    b.wait(
        "1 of 2 approvals",
        "return document.querySelector('#quorum').textContent === '1 of 2 approvals'",
        json!([]),
    )
    .await?;
    let layout = b
        .js(
            "const r = document.querySelector('#btn-approve').getBoundingClientRect(); \
             return {inner: window.innerWidth, scroll: document.documentElement.scrollWidth, \
                     button_w: r.width, button_h: r.height}",
            json!([]),
        )
        .await?;
    assert_eq!(layout["inner"], 390, "{layout}");
    assert!(
        layout["scroll"].as_f64().unwrap_or(f64::MAX) <= 390.0,
        "sideways scrolling: {layout}"
    );
    assert!(
        layout["button_h"].as_f64().unwrap_or(0.0) >= 44.0,
        "{layout}"
    );
    assert!(
        layout["button_w"].as_f64().unwrap_or(0.0) >= 300.0,
        "{layout}"
    );

    b.type_into("#prefix", &hash[..8]).await?;
    b.wait(
        "the approve button enabled",
        "return !document.querySelector('#btn-approve').disabled",
        json!([]),
    )
    .await?;
    let png = b.screenshot_full_page().await?;
    let saved = save_screenshot("approve-phone.png", &png)?;
    eprintln!("screenshot: {}", saved.display());

    let said = decide_on_page(&b, "#btn-approve", &hash[..8], "").await?;
    assert!(said.contains("recorded"), "{said}");
    mcp.wait_status(&id, "APPROVED", STEP_TIMEOUT).await?;
    shows_status_within(&b, "APPROVED", Instant::now()).await?;
    Ok(())
}

/// A page left open while the proposal changes elsewhere: another approver's
/// approval shows (the typed prefix kept: nothing about the decision changed), a
/// rejection and a withdrawal show within 2 s and leave no enabled button.
#[tokio::test]
async fn a_page_left_open_follows_changes_made_elsewhere_within_2s() -> Result<()> {
    let g = gate(|hook| vec![("note.write.toml".into(), both_policy("note.write", hook))]).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.add_authenticator(Authenticator::default()).await?;
    g.enrol(&b, "dana").await?;
    let mcp = g.server.mcp().await?;
    let alice = g.world.signer("alice", &g.server);

    // Alice approves while dana's page is open and ready: still PENDING, still hers
    // to decide, now 1 of 2.
    let p = mcp
        .prepare("note.write", json!({"text": "one"}), "First")
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    assert_eq!(open_page(&b, &g.approve_url(&id).await?).await?, "PENDING");
    b.type_into("#prefix", &hash[..8]).await?;
    assert_eq!(
        enabled_buttons(&b).await?,
        vec!["#btn-approve", "#btn-reject"]
    );
    alice.approve(&id).await?;
    let since = Instant::now();
    poll_until("1 of 2 approvals", SHOWN_WITHIN, || async {
        Ok((text(&b, "#quorum").await? == "1 of 2 approvals").then_some(()))
    })
    .await?;
    assert!(since.elapsed() <= SHOWN_WITHIN);
    assert!(text(&b, "#decisions").await?.contains("alice: approve"));
    // Same status, same hash: what dana typed still stands.
    assert_eq!(
        enabled_buttons(&b).await?,
        vec!["#btn-approve", "#btn-reject"]
    );

    // Then alice rejects another one that dana's page is ready to approve.
    let p = mcp
        .prepare("note.write", json!({"text": "two"}), "Second")
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    assert_eq!(open_page(&b, &g.approve_url(&id).await?).await?, "PENDING");
    b.type_into("#prefix", &hash[..8]).await?;
    assert_eq!(
        enabled_buttons(&b).await?,
        vec!["#btn-approve", "#btn-reject"]
    );
    alice.reject(&id, "not now").await?;
    let since = Instant::now();
    let status = mcp.status(&id).await?.status().to_owned();
    shows_status_within(&b, &status, since).await?;
    assert!(enabled_buttons(&b).await?.is_empty());
    assert_eq!(
        b.js("return document.querySelector('#prefix').value", json!([]))
            .await?,
        ""
    );

    // And the agent withdraws a third.
    let p = mcp
        .prepare("note.write", json!({"text": "three"}), "Third")
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    assert_eq!(open_page(&b, &g.approve_url(&id).await?).await?, "PENDING");
    b.type_into("#prefix", &hash[..8]).await?;
    assert!(!enabled_buttons(&b).await?.is_empty());
    mcp.withdraw(&id).await?;
    let since = Instant::now();
    let status = mcp.status(&id).await?.status().to_owned();
    assert_ne!(status, "PENDING");
    shows_status_within(&b, &status, since).await?;
    assert!(enabled_buttons(&b).await?.is_empty());
    assert!(text(&b, "#decide-note")
        .await?
        .contains("nothing to decide now"));
    Ok(())
}

/// A kind that counts keys only refuses dana's real assertion
/// (SIGNATURE_NOT_ACCEPTED) and its page offers no passkey button; an assertion
/// made without user verification is refused (INVALID_SIGNATURE, naming it).
#[tokio::test]
async fn passkeys_are_refused_where_not_accepted_and_without_user_verification() -> Result<()> {
    let g = gate(|hook| {
        vec![
            ("note.write.toml".into(), both_policy("note.write", hook)),
            ("note.keys.toml".into(), keys_only_policy("note.keys", hook)),
        ]
    })
    .await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    let auth = b.add_authenticator(Authenticator::default()).await?;
    let (line, _) = g.enrol(&b, "dana").await?;
    let cred = credential_id(&line)?;
    let mcp = g.server.mcp().await?;

    // Keys only.
    let p = mcp
        .prepare("note.keys", json!({"text": "keys only"}), "Keys only")
        .await?;
    p.expect("PENDING_QUORUM", false);
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    let notice = poll_until("the key-only kind's notice", STEP_TIMEOUT, || async {
        Ok(g.hooks
            .bodies()
            .into_iter()
            .find(|b| b["proposal_id"] == id.as_str()))
    })
    .await?;
    assert_eq!(notice["approve_url"], Value::Null, "{notice}");
    assert_eq!(open_page(&b, &g.page_link(&id)?).await?, "PENDING");
    let note = b
        .wait(
            "the signer-cli note",
            "const n = document.querySelector('#decide-note'); return !n.hidden && n.textContent",
            json!([]),
        )
        .await?;
    assert!(
        note.as_str()
            .unwrap_or("")
            .contains(&format!("signer-cli approve {id}")),
        "{note}"
    );
    assert!(shown_buttons(&b).await?.is_empty());
    let (status, body) = raw_decision(&b, &id, &cred, &hash, "required").await?;
    assert_eq!(
        (status, body["code"].as_str().unwrap_or("")),
        (403, "SIGNATURE_NOT_ACCEPTED"),
        "{body}"
    );
    assert!(mcp.status(&id).await?.approvals().is_empty());

    // No user verification.
    let p = mcp
        .prepare("note.write", json!({"text": "needs uv"}), "Needs UV")
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    assert_eq!(open_page(&b, &g.approve_url(&id).await?).await?, "PENDING");
    b.set_user_verified(&auth, false).await?;
    // Through the page (which requires it): the browser or the server says no.
    let said = decide_on_page(&b, "#btn-approve", &hash[..8], "").await?;
    assert!(
        b.js(
            "return document.querySelector('#message').classList.contains('error')",
            json!([])
        )
        .await?
            == json!(true),
        "{said}"
    );
    assert!(mcp.status(&id).await?.approvals().is_empty(), "{said}");
    eprintln!("the page without user verification: {said}");
    // A client that does not ask for it gets an assertion without the UV flag.
    let (status, body) = raw_decision(&b, &id, &cred, &hash, "discouraged").await?;
    assert_eq!(
        (status, body["code"].as_str().unwrap_or("")),
        (403, "INVALID_SIGNATURE"),
        "{body}"
    );
    eprintln!("an assertion without user verification: {body}");
    let message = body["message"].as_str().unwrap_or("").to_lowercase();
    assert!(
        message.contains("user verification") || message.contains("verified"),
        "{body}"
    );
    assert!(mcp.status(&id).await?.approvals().is_empty());

    // With user verification back, the same page approves.
    b.set_user_verified(&auth, true).await?;
    let said = decide_on_page(&b, "#btn-approve", &hash[..8], "").await?;
    assert!(said.contains("recorded"), "{said}");
    assert_eq!(mcp.status(&id).await?.approvals(), vec!["dana".to_owned()]);
    Ok(())
}

// ---------------------------------------------------------------------------
// A server that lies about the preview
// ---------------------------------------------------------------------------

/// A proxy in front of the gate that, while `lie` is set, changes the preview's
/// summary in every `/approve/<id>/state` answer and leaves the claimed hash as
/// it was: what a compromised server (or anything on the path) would send.
#[derive(Clone)]
struct Liar {
    upstream: String,
    lie: std::sync::Arc<std::sync::atomic::AtomicBool>,
    http: reqwest::Client,
}

async fn liar(
    axum::extract::State(l): axum::extract::State<Liar>,
    req: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let path = req.uri().path().to_owned();
    let mut r = l.http.get(format!("{}{path}", l.upstream));
    if let Some(v) = req.headers().get("x-approval-view") {
        r = r.header("X-Approval-View", v);
    }
    let resp = match r.send().await {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = resp.status();
    let kind = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let mut body = resp.bytes().await.unwrap_or_default().to_vec();
    if path.ends_with("/state") && l.lie.load(std::sync::atomic::Ordering::SeqCst) {
        if let Ok(mut v) = serde_json::from_slice::<Value>(&body) {
            v["preview"]["summary"] = json!("Write the release notes (and nothing else)");
            body = v.to_string().into_bytes();
        }
    }
    (status, [(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The page recomputes the preview hash itself: a preview that does not hash to
/// what the server claims gets the loud refusal and no button, and an honest
/// answer on the same page brings the buttons back (so it was the hash).
#[tokio::test]
async fn a_preview_that_does_not_hash_to_the_claim_is_refused_with_no_button() -> Result<()> {
    let g = gate(|hook| vec![("note.write.toml".into(), both_policy("note.write", hook))]).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.add_authenticator(Authenticator::default()).await?;
    g.enrol(&b, "dana").await?;
    let mcp = g.server.mcp().await?;
    let p = mcp
        .prepare(
            "note.write",
            json!({"text": "honest"}),
            "Write the release notes",
        )
        .await?;
    let (id, hash) = (p.proposal_id(), p.preview_sha256());
    let url = g.approve_url(&id).await?;
    let token = url.split_once("#v=").context("no token")?.1.to_owned();

    let l = Liar {
        upstream: g.origin.clone(),
        lie: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
        http: reqwest::Client::new(),
    };
    let lie = l.lie.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().fallback(liar).with_state(l);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    b.goto(&format!("http://localhost:{port}/approve/{id}#v={token}"))
        .await?;
    let refusal = b
        .wait(
            "the refusal",
            "const r = document.querySelector('#refusal'); return !r.hidden && r.textContent",
            json!([]),
        )
        .await?;
    let refusal = refusal.as_str().unwrap_or("");
    assert!(
        refusal.contains(
            "the server sent a preview that does not hash to what it asks you to sign: do not approve; tell whoever runs the server"
        ),
        "{refusal}"
    );
    assert!(refusal.contains(&hash), "the claim is not shown: {refusal}");
    assert_ne!(text(&b, "#hash").await?, hash);
    assert!(shown_buttons(&b).await?.is_empty());
    assert_eq!(
        b.js("return document.querySelector('#decide').hidden", json!([]))
            .await?,
        json!(true)
    );

    // Honest again: the same page offers the decision.
    lie.store(false, std::sync::atomic::Ordering::SeqCst);
    b.wait(
        "the refusal to go",
        "return document.querySelector('#refusal').hidden",
        json!([]),
    )
    .await?;
    assert_eq!(text(&b, "#hash").await?, hash);
    assert_eq!(
        shown_buttons(&b).await?,
        vec!["#btn-approve", "#btn-reject"]
    );
    b.type_into("#prefix", &hash[..8]).await?;
    assert_eq!(
        enabled_buttons(&b).await?,
        vec!["#btn-approve", "#btn-reject"]
    );

    // And lying once more takes them away within 2 s, with what was typed.
    lie.store(true, std::sync::atomic::Ordering::SeqCst);
    let since = Instant::now();
    poll_until("the refusal again", SHOWN_WITHIN, || async {
        Ok(b.js(
            "return !document.querySelector('#refusal').hidden",
            json!([]),
        )
        .await?
        .as_bool()
        .filter(|shown| *shown))
    })
    .await?;
    assert!(since.elapsed() <= SHOWN_WITHIN);
    assert!(enabled_buttons(&b).await?.is_empty());
    assert_eq!(
        b.js("return document.querySelector('#prefix').value", json!([]))
            .await?,
        ""
    );
    assert!(mcp.status(&id).await?.approvals().is_empty());
    Ok(())
}

/// Hostile text (bidi overrides, zero-width and control characters, look-alike
/// letters, markup) is shown on the page exactly as `signer-cli show` prints it:
/// escaped, with the look-alike warnings, and nothing raw or executable reaches the
/// document (the exact-JSON view too shows every such character as an escape).
#[tokio::test]
async fn hostile_text_is_shown_escaped_exactly_as_signer_cli_show_prints_it() -> Result<()> {
    let g = gate(|hook| vec![("note.write.toml".into(), both_policy("note.write", hook))]).await?;
    let Some(b) = Browser::start().await? else {
        return Ok(());
    };
    b.add_authenticator(Authenticator::default()).await?;
    g.enrol(&b, "dana").await?;
    let mcp = g.server.mcp().await?;
    let summary =
        "Pay invoice \u{202E}fdp.exe\u{202C} to \u{0430}dmin\u{200B} <b>now</b>\u{7}\u{1b}[2J";
    let payload = json!({
        "text": "Wire 9,000 EUR to \u{0440}\u{0430}ypal.com\u{2066} (hidden)\u{2069}\nthen <img src=x onerror=alert(1)><script>alert(2)</script>",
    });
    let p = mcp.prepare("note.write", payload, summary).await?;
    let id = p.proposal_id();
    let url = g.approve_url(&id).await?;
    assert_eq!(open_page(&b, &url).await?, "PENDING");
    let shown = text(&b, "#preview").await?;
    let cli = g
        .world
        .signer("alice", &g.server)
        .ok(&["show", &id])
        .await?
        .stdout;
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
        "WARNING: \"аdmin\" in summary mixes Cyrillic and Latin letters",
        "<img src=x onerror=alert(1)><script>alert(2)</script>",
    ] {
        assert!(shown.contains(needle), "page lacks {needle:?}:\n{shown}");
    }
    let html = b
        .js("return document.documentElement.outerHTML", json!([]))
        .await?;
    let html = html.as_str().unwrap_or("");
    for c in ['\u{202E}', '\u{200B}', '\u{7}', '\u{1b}', '\u{2066}'] {
        assert!(!html.contains(c), "raw {c:?} in the page");
    }
    let counts = b
        .js(
            "return [document.querySelectorAll('img').length, document.querySelectorAll('b').length, \
             [...document.querySelectorAll('script')].every(s => s.src.startsWith(location.origin + '/approve/assets/'))]",
            json!([]),
        )
        .await?;
    assert_eq!(counts, json!([0, 0, true]));
    Ok(())
}
