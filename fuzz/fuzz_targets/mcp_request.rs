//! The server's MCP request check, end to end in-process: arbitrary bytes are the
//! body of `POST /mcp`, sent through the real axum app (`approval_server::http::app`:
//! agent authentication, the exact-JSON check, rmcp, the service, a sled store on
//! /dev/shm) with `tower::ServiceExt::oneshot`. No socket is opened; the loopback
//! peer the authentication layer looks for is inserted as `ConnectInfo`.
//!
//! Invariants: no panic; never a 5xx; a proposal is created only from a body whose
//! payload the exact parser accepts, and the stored preview's payload has the same
//! canonical bytes as that exact parse (so what humans sign is what the agent sent,
//! whatever serde_json inside rmcp made of it).
#![no_main]

use approval_core::json;
use approval_core::status::Status;
use approval_core::ProposalId;
use approval_server::clock::ManualClock;
use approval_server::config::ConfigSource;
use approval_server::executor::ExecContext;
use approval_server::http::{self, McpOptions};
use approval_server::service::Service;
use approval_server::store::{PendingLimits, SledStore, Store};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use libfuzzer_sys::fuzz_target;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

struct World {
    rt: tokio::runtime::Runtime,
    svc: Arc<Service>,
    clock: ManualClock,
    app: axum::Router,
    runs: std::sync::atomic::AtomicU64,
    _dir: std::path::PathBuf,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        // libFuzzer exits without running destructors: remove the stores of
        // earlier runs whose process is gone.
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("approval-fuzz-mcp-") {
                    if !std::path::Path::new("/proc").join(pid).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let dir = base.join(format!("approval-fuzz-mcp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let pdir = dir.join("policies");
        std::fs::create_dir_all(&pdir).unwrap();
        std::fs::write(pdir.join("note.write.toml"), approval_fuzz::POLICY).unwrap();
        let keys = dir.join("keys");
        let text: String = approval_fuzz::NAMES
            .iter()
            .map(|n| approval_fuzz::secret(n).keyring_line() + "\n")
            .collect();
        std::fs::write(&keys, text).unwrap();
        let source = ConfigSource {
            policies: pdir,
            keys,
            agents: None,
            embedded_policies: None,
        };
        let config = source.load().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(&dir.join("store")).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let clock = ManualClock::new(approval_fuzz::NOW);
        let identity =
            approval_server::identity::ServerIdentity::open(&dir, store.as_ref()).unwrap();
        let svc = rt.block_on(async {
            Service::with_limits(
                store,
                identity,
                config,
                Some(source),
                Arc::new(clock.clone()),
                ExecContext::new(dir.clone()),
                PendingLimits {
                    per_agent: 5000,
                    total: 5000,
                },
            )
        });
        let app = http::app(svc.clone(), &McpOptions::default());
        World {
            rt,
            svc,
            clock,
            app,
            runs: Default::default(),
            _dir: dir,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    // Every 500 inputs, let everything pending expire so the pending limit is never
    // what the fuzzer keeps hitting.
    if w.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 500 == 499 {
        w.clock.advance(3600);
        w.rt.block_on(w.svc.sweep()).expect("sweep");
    }
    // Both shapes of result: before and from 2026-07-28 (`resultType`).
    let version = if data.len().is_multiple_of(2) {
        "2025-06-18"
    } else {
        "2026-07-28"
    };
    let before = w.svc.store().pending_count(None).unwrap();
    let mut req = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version)
        .body(Body::from(data.to_vec()))
        .unwrap();
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
    let (status, body) = w.rt.block_on(async {
        let resp = w.app.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 16 * 1024 * 1024)
            .await
            .expect("response body readable");
        (status, body)
    });
    assert!(
        !status.is_server_error(),
        "{status} for {:?}: {}",
        String::from_utf8_lossy(data),
        String::from_utf8_lossy(&body)
    );
    let after = w.svc.store().pending_count(None).unwrap();
    if after > before {
        assert_eq!(after, before + 1, "one request made two proposals");
        let text = std::str::from_utf8(data).expect("a proposal from a non-UTF-8 body");
        let parsed = json::parse_collecting(text).expect("a proposal from a body that is not JSON");
        assert!(
            !parsed
                .problems
                .iter()
                .any(|p| p.pointer == "/params/arguments/payload"
                    || p.pointer.starts_with("/params/arguments/payload/")),
            "a proposal from an inexact payload: {:?}",
            parsed.problems
        );
        let sent = parsed
            .value
            .pointer("/params/arguments/payload")
            .expect("a proposal without a payload");
        let resp: serde_json::Value =
            serde_json::from_slice(&body).expect("a prepare's response is JSON");
        let id = resp
            .pointer("/result/structuredContent/proposal_id")
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("a proposal was made but not reported: {resp}"));
        let rec = w
            .svc
            .store()
            .get(&ProposalId::parse(id).expect("a valid id"))
            .unwrap()
            .expect("the reported proposal is stored");
        assert_eq!(rec.status(), Status::Pending);
        let stored = &rec.preview.payload;
        assert_eq!(
            json::canonical_bytes(stored),
            json::canonical_bytes(sent),
            "the stored payload differs from the payload sent"
        );
    }
});
