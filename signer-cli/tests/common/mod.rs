//! Shared helpers: temp dirs with keys, running the real binary, and a fake server.
#![allow(dead_code)]

use approval_core::keyring::SecretKey;
use approval_core::message::verify_read;
use approval_core::{ApproverName, Keyring, Policy, Preview, SignedDecision, Timestamp};
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path as AxPath, Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The test policy: quorum 2 of alice, bob, carol, and carol must be one of them.
pub const POLICY_TOML: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 2
approvers = ["alice", "bob", "carol"]
vetoes = 1
ttl = "30m"
execute_within = "10m"
[[require]]
group = ["carol"]
count = 1
[executor]
type = "note"
"#;

pub fn policy() -> Policy {
    Policy::parse_toml("<test>", POLICY_TOML).expect("test policy")
}

pub fn name(n: &str) -> ApproverName {
    ApproverName::parse(n).expect("name")
}

/// Deterministic keys: alice = [1;32], bob = [2;32], carol = [3;32], mallory = [9;32].
pub fn secret(n: &str) -> SecretKey {
    let seed = match n {
        "alice" => 1,
        "bob" => 2,
        "carol" => 3,
        _ => 9,
    };
    SecretKey::from_seed(name(n), [seed; 32])
}

pub fn keyring_text(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{}\n", secret(n).keyring_line()))
        .collect()
}

pub fn keyring() -> Keyring {
    Keyring::parse(&keyring_text(&["alice", "bob", "carol"])).expect("keyring")
}

/// A temp dir used as HOME and XDG_CONFIG_HOME.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Writes `n`'s key file with mode 0600 and returns its path.
    pub fn key(&self, n: &str) -> PathBuf {
        let p = self.path(&format!("{n}.key"));
        write_mode(&p, &secret(n).to_file_text(), 0o600);
        p
    }

    /// A command for the real binary, isolated from the caller's config.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_signer-cli"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.cmd().args(args).output().expect("run signer-cli"))
    }

    /// Runs with `input` on stdin.
    pub fn run_stdin(&self, args: &[&str], input: &str) -> Run {
        use std::io::Write;
        let mut child = self
            .cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn signer-cli");
        if let Some(mut si) = child.stdin.take() {
            let _ = si.write_all(input.as_bytes());
        }
        Run::from(child.wait_with_output().expect("wait"))
    }
}

pub fn write_mode(p: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(p, text).expect("write");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A finished run: exit code and output as text.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Self {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A preview of `note.write` made by `server_id` with `payload`.
pub fn preview(server_id: &str, id: &str, payload: Value, summary: &str) -> Preview {
    let now = now();
    Preview::from_value(&json!({
        "v": 1, "server_id": server_id, "proposal_id": id, "kind": "note.write",
        "payload": payload, "summary": summary, "requested_by": "local",
        "created_at": Timestamp::from_unix(now - 60).to_rfc3339(),
        "expires_at": Timestamp::from_unix(now + 1800).to_rfc3339(),
        "policy_sha256": policy().sha256().to_hex(),
    }))
    .expect("preview")
}

/// A correct PENDING ProposalView of `preview`.
pub fn view(preview: &Preview) -> Value {
    json!({
        "proposal_id": preview.proposal_id.as_str(),
        "status": "PENDING",
        "preview": preview.to_value(),
        "preview_sha256": preview.sha256().to_hex(),
        "policy": policy().canonical_json(),
        "quorum": {"have": 0, "need": 2, "missing_groups": [{"group": ["carol"], "have": 0, "need": 1}],
                   "approvers": [], "rejections": []},
        "decisions": [],
        "executable_until": null,
        "result": null,
    })
}

/// What the fake server serves and what it saw.
pub struct FakeState {
    pub server_id: String,
    /// The `server_key` its /healthz publishes (changeable, to test pinning).
    pub server_key: Mutex<String>,
    /// Answer challenges with a proof made for another challenge (an impersonator
    /// replaying what the real server once sent).
    pub replay_proof: std::sync::atomic::AtomicBool,
    /// The ProposalView served for every id.
    pub view: Mutex<Value>,
    /// When set, GETs of proposals answer this raw text with 200.
    pub raw: Mutex<Option<String>>,
    /// Decisions POSTed.
    pub posts: Mutex<Vec<Value>>,
    /// Signed reads that verified / were refused.
    pub reads: AtomicUsize,
    pub unauthorized: AtomicUsize,
    /// Connections to /v1/events.
    pub event_streams: AtomicUsize,
    /// When set, the pending list is empty (proposals arrive only as events).
    pub list_empty: AtomicBool,
    /// When set, each stream sends one proposal with an id, then ends with a
    /// `reauth` event, as the real server does when a signature's window passes.
    pub reauth: AtomicBool,
    /// The `Last-Event-ID` of each `/v1/events` connection that verified.
    pub last_event_ids: Mutex<Vec<Option<String>>>,
}

/// A fake approver API on 127.0.0.1:0, served by its own runtime.
pub struct Fake {
    pub url: String,
    pub state: Arc<FakeState>,
    _rt: tokio::runtime::Runtime,
}

impl Fake {
    pub fn start(server_id: &str, view: Value) -> Self {
        let state = Arc::new(FakeState {
            server_id: server_id.to_owned(),
            server_key: Mutex::new(fake_server_key(42)),
            replay_proof: std::sync::atomic::AtomicBool::new(false),
            view: Mutex::new(view),
            raw: Mutex::new(None),
            posts: Mutex::new(Vec::new()),
            reads: AtomicUsize::new(0),
            unauthorized: AtomicUsize::new(0),
            event_streams: AtomicUsize::new(0),
            list_empty: AtomicBool::new(false),
            reauth: AtomicBool::new(false),
            last_event_ids: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/healthz", get(healthz))
            .route("/v1/proposals", get(list))
            .route("/v1/proposals/{id}", get(show))
            .route("/v1/proposals/{id}/decisions", post(decide))
            .route("/v1/events", get(events))
            .with_state(state.clone());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        rt.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}"),
            state,
            _rt: rt,
        }
    }

    /// Pins this server's id and key for `env`'s signer-cli, as a first use would
    /// (so that tests of other things see no "pinned" line).
    pub fn pin(&self, env: &Env) {
        let dir = env.path("config").join("approval-signer");
        std::fs::create_dir_all(&dir).expect("config dir");
        let key = self.state.server_key.lock().expect("lock").clone();
        std::fs::write(
            dir.join("known_servers"),
            format!("{} {} {key}\n", self.url, self.state.server_id),
        )
        .expect("pin");
    }

    /// Makes /healthz answer challenges with a replayed proof from now on.
    pub fn replay_proof(&self) {
        self.state
            .replay_proof
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes /healthz publish another server key from now on.
    pub fn set_server_key(&self, key: &str) {
        *self.state.server_key.lock().expect("lock") = key.to_owned();
    }

    pub fn posts(&self) -> usize {
        self.state.posts.lock().map(|p| p.len()).unwrap_or(0)
    }

    pub fn set_raw(&self, text: &str) {
        *self.state.raw.lock().expect("lock") = Some(text.to_owned());
    }
}

fn authorized(st: &FakeState, headers: &HeaderMap, method: &Method, uri: &OriginalUri) -> bool {
    let h = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let pq = uri.0.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let Ok(server_id) = approval_core::ServerId::parse(&st.server_id) else {
        return false;
    };
    let ok = verify_read(
        &keyring(),
        &server_id,
        h,
        method.as_str(),
        pq,
        Timestamp::from_unix(now()),
    )
    .is_ok();
    if ok {
        st.reads.fetch_add(1, Ordering::SeqCst);
    } else {
        st.unauthorized.fetch_add(1, Ordering::SeqCst);
    }
    ok
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"code": "UNAUTHORIZED", "message": "bad read signature"})),
    )
        .into_response()
}

fn json_text(text: String) -> Response {
    ([("content-type", "application/json")], text).into_response()
}

/// A server identity key (standard base64 of the public key from seed `[n; 32]`).
pub fn fake_server_key(n: u8) -> String {
    approval_core::PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(&[n; 32]))
        .to_base64()
}

async fn healthz(
    State(st): State<Arc<FakeState>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let key = st.server_key.lock().map(|k| k.clone()).unwrap_or_default();
    let mut body = json!({"status": "ok", "server_id": st.server_id, "server_key": key});
    // The fake holds the secret of every key it can publish (seeds [n; 32]), and
    // answers the challenge as a real server does, unless told to replay a proof.
    let seed = (0..=255u8).find(|n| fake_server_key(*n) == key);
    if let (Some(c), Some(n)) = (q.get("challenge"), seed) {
        let id = approval_core::ServerId::parse(&st.server_id).expect("server id");
        let challenge = if st.replay_proof.load(std::sync::atomic::Ordering::SeqCst) {
            "a-challenge-seen-earlier-0000"
        } else {
            c.as_str()
        };
        let proof = approval_core::attestation::prove_identity(
            &ed25519_dalek::SigningKey::from_bytes(&[n; 32]),
            &id,
            challenge,
        );
        body["proof"] = json!(proof.to_base64());
    }
    json_text(body.to_string())
}

async fn show(
    State(st): State<Arc<FakeState>>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    AxPath(_id): AxPath<String>,
) -> Response {
    if !authorized(&st, &headers, &method, &uri) {
        return unauthorized();
    }
    if let Some(raw) = st.raw.lock().expect("lock").clone() {
        return json_text(raw);
    }
    json_text(st.view.lock().expect("lock").to_string())
}

async fn list(
    State(st): State<Arc<FakeState>>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers, &method, &uri) {
        return unauthorized();
    }
    if st.list_empty.load(Ordering::SeqCst) {
        return json_text(json!({ "proposals": [] }).to_string());
    }
    let v = st.view.lock().expect("lock").clone();
    json_text(json!({ "proposals": [v] }).to_string())
}

/// Records the decision, checks its signature like the real server, and answers
/// with the view updated (one more approval).
async fn decide(
    State(st): State<Arc<FakeState>>,
    AxPath(_id): AxPath<String>,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    st.posts.lock().expect("lock").push(body.clone());
    let mut v = st.view.lock().expect("lock").clone();
    let d: SignedDecision = match serde_json::from_value(body) {
        Ok(d) => d,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"code": "BAD_REQUEST", "message": e.to_string()})),
            )
                .into_response()
        }
    };
    let hash =
        approval_core::Sha256Hex::parse(v["preview_sha256"].as_str().unwrap_or("")).expect("hash");
    let key = keyring().for_proof(&d.approver, &d.proof).cloned();
    if key.is_none_or(|k| d.verify(&k, &hash).is_err()) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(
                json!({"code": "INVALID_SIGNATURE", "message": "signature does not verify"}),
            ),
        )
            .into_response();
    }
    if let Some(ds) = v["decisions"].as_array_mut() {
        ds.push(
            json!({"approver": d.approver.as_str(), "decision": d.decision.as_str(),
                       "reason": d.reason, "signature": d.signature().map(|s| s.to_base64()),
                       "at": Timestamp::from_unix(now()).to_rfc3339()}),
        );
    }
    let have = v["quorum"]["have"].as_u64().unwrap_or(0) + 1;
    v["quorum"]["have"] = json!(have);
    if let Some(a) = v["quorum"]["approvers"].as_array_mut() {
        a.push(json!(d.approver.as_str()));
    }
    json_text(json!({"recorded": true, "already_recorded": false, "proposal": v}).to_string())
}

/// One keep-alive comment and one `proposal` event, then the stream ends.
async fn events(
    State(st): State<Arc<FakeState>>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
) -> Response {
    if !authorized(&st, &headers, &method, &uri) {
        return unauthorized();
    }
    let n = st.event_streams.fetch_add(1, Ordering::SeqCst) + 1;
    let v = st.view.lock().expect("lock").clone();
    if st.reauth.load(Ordering::SeqCst) {
        let last = headers
            .get("last-event-id")
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned);
        st.last_event_ids.lock().expect("lock").push(last);
        let reauth = json!({"code": "UNAUTHORIZED", "reason": "signature_window",
            "message": "this stream's read signature left the server's window"});
        let body =
            format!("id: ev-{n}\nevent: proposal\ndata: {v}\n\nevent: reauth\ndata: {reauth}\n\n");
        return ([("content-type", "text/event-stream")], body).into_response();
    }
    let body = format!(": keep-alive\n\nevent: proposal\ndata: {v}\n\n");
    ([("content-type", "text/event-stream")], body).into_response()
}
