//! HTTPS for remote approvers (issue #34, item 6): the real `approval-server serve
//! --tls-cert --tls-key` with a self-signed certificate made here (rcgen), the real
//! `signer-cli --tls-ca` against it, and the attacks and mistakes TLS brings:
//! a handshake that never finishes (slow-loris), plain HTTP on the TLS port, a
//! certificate rotated on SIGHUP, and a broken or mismatched renewal that must leave
//! the old certificate serving.

use anyhow::{bail, Context, Result};
use approval_e2e::{approval_server, poll_until, Mcp, McpClient, Server, ServerOptions, World};
use serde_json::json;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NOTE_POLICY: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 1
approvers = ["alice"]
ttl = "30m"
execute_within = "10m"
[payload_schema]
type = "object"
required = ["text"]
[executor]
type = "note"
"#;

/// The time from accept to a first request head (core's `CONNECTION_IDLE_SECS`): a
/// TLS handshake has the same.
const HEADER_DEADLINE: Duration = Duration::from_secs(approval_core::time::CONNECTION_IDLE_SECS);

/// A self-signed certificate for 127.0.0.1 and localhost, as PEM and DER.
struct Pair {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

fn self_signed() -> Result<Pair> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    Ok(Pair {
        cert_pem: cert.pem(),
        key_pem: signing_key.serialize_pem(),
        der: cert.der().to_vec(),
    })
}

/// Writes a file the way a renewal tool should: a temporary file renamed over it.
fn replace(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// A client trusting only `cas`, with a connection of its own (no pool reuse across
/// clients), that reports the peer's certificate.
fn https_client(cas: &[&Pair]) -> Result<reqwest::Client> {
    let roots = cas
        .iter()
        .map(|p| reqwest::Certificate::from_pem(p.cert_pem.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(reqwest::Client::builder()
        .tls_certs_only(roots)
        .tls_info(true)
        .timeout(Duration::from_secs(10))
        .build()?)
}

/// The DER of the certificate a new connection is given, and the `/healthz` answer.
async fn healthz(client: &reqwest::Client, api: &str) -> Result<(Vec<u8>, serde_json::Value)> {
    let r = client.get(format!("{api}/healthz")).send().await?;
    let der = r
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .map(<[u8]>::to_vec)
        .context("no peer certificate on an https answer")?;
    let status = r.status();
    let body: serde_json::Value = r.json().await?;
    if !status.is_success() {
        bail!("/healthz answered {status}: {body}");
    }
    Ok((der, body))
}

struct Tls {
    world: World,
    server: Server,
    cert: PathBuf,
    key: PathBuf,
    first: Pair,
}

fn start_tls() -> Result<Tls> {
    let world = World::new(&["alice"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let first = self_signed()?;
    let (cert, key) = (world.path().join("tls.crt"), world.path().join("tls.key"));
    replace(&cert, &first.cert_pem)?;
    replace(&key, &first.key_pem)?;
    let server = Server::start_full(
        &ServerOptions {
            data: world.data.clone(),
            policies: world.policies.clone(),
            keys: world.keys.clone(),
            agents: None,
        },
        &[],
        &[
            OsString::from("--tls-cert"),
            cert.clone().into(),
            OsString::from("--tls-key"),
            key.clone().into(),
        ],
        &[],
    )?;
    Ok(Tls {
        world,
        server,
        cert,
        key,
        first,
    })
}

#[tokio::test]
async fn https_serves_healthz_mcp_and_signer_cli_with_a_private_ca() -> Result<()> {
    let t = start_tls()?;
    let api = t.server.api_url.clone();
    assert!(api.starts_with("https://127.0.0.1:"), "{api}");
    assert!(t.server.mcp_url.starts_with("https://127.0.0.1:"));

    let client = https_client(&[&t.first])?;
    let (der, health) = healthz(&client, &api).await?;
    assert_eq!(der, t.first.der, "the certificate served is the one given");
    assert_eq!(health["status"], "ok", "{health}");
    // ALPN: h2 when the client offers it, HTTP/1.1 when it offers only that.
    let h2 = client.get(format!("{api}/healthz")).send().await?;
    assert_eq!(h2.version(), reqwest::Version::HTTP_2);
    let h1 = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(t.first.cert_pem.as_bytes())?])
        .http1_only()
        .build()?
        .get(format!("{api}/healthz"))
        .send()
        .await?;
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert!(h1.status().is_success());

    // The agent's side over HTTPS: a proposal through /mcp (Host check unchanged).
    let mcp = Mcp::connect_with(client.clone(), &t.server.mcp_url, None).await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "over TLS"}), "a note")
        .await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());

    // signer-cli without the CA: refused before anything is signed, and told how.
    let ca = t.cert.to_str().context("non-UTF-8 path")?.to_owned();
    let alice = t.world.signer_at("alice", &api);
    let untrusted = alice.run(&["pending"]).await?;
    assert_eq!(untrusted.status.code(), Some(3), "{untrusted}");
    assert!(untrusted.stderr.contains("--tls-ca"), "{untrusted}");

    // With --tls-ca: a signed read, then a full approval.
    let pending = alice.ok(&["--tls-ca", &ca, "--json", "pending"]).await?;
    assert!(pending.stdout.contains(&id), "{pending}");
    let approved = alice
        .ok(&["--tls-ca", &ca, "--json", "approve", &id, "--yes"])
        .await?
        .json()?;
    assert_eq!(approved["status"], "APPROVED", "{approved}");
    let done = mcp.execute(&id, &hash).await?;
    assert_eq!(done.status(), "SUCCEEDED", "{}", done.structured);

    // SIGNER_TLS_CA does the same as the flag.
    let mut cmd = tokio::process::Command::new(approval_e2e::bin("signer-cli"));
    cmd.env("XDG_CONFIG_HOME", t.world.path().join("xdg-config"))
        .env("SIGNER_TLS_CA", &t.cert)
        .args(["--server", &api, "--key"])
        .arg(t.world.key_file("alice"))
        .args(["--json", "pending"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output()).await??;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn plain_http_to_the_tls_port_fails_cleanly() -> Result<()> {
    let mut t = start_tls()?;
    let plain = t.server.api_url.replacen("https://", "http://", 1);
    let started = Instant::now();
    let r = reqwest::Client::builder()
        .timeout(Duration::from_secs(8))
        .build()?
        .get(format!("{plain}/healthz"))
        .send()
        .await;
    let e = match r {
        Ok(resp) => bail!("plain HTTP on the TLS port answered {}", resp.status()),
        Err(e) => e,
    };
    assert!(!e.is_timeout(), "refused at once, not left hanging: {e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The server is unharmed.
    assert!(t.server.is_running());
    healthz(&https_client(&[&t.first])?, &t.server.api_url).await?;
    Ok(())
}

/// Slow-loris on the handshake: a client that opens a connection and trickles a
/// ClientHello it never finishes is closed at the header deadline, like a silent one.
#[tokio::test]
async fn tls_handshake_slow_loris_is_cut_at_the_header_deadline() -> Result<()> {
    let t = start_tls()?;
    let addr = t.server.api_url.trim_start_matches("https://").to_owned();
    let stream = tokio::net::TcpStream::connect(&addr).await?;
    let started = Instant::now();
    let (mut rd, mut wr) = stream.into_split();
    // A handshake record announcing 512 bytes, then a byte every 500 ms.
    let trickle = tokio::spawn(async move {
        let _ = wr.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await;
        for _ in 0..60 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if wr.write_all(&[0x00]).await.is_err() {
                break;
            }
        }
    });
    let mut buf = [0u8; 256];
    let closed = tokio::time::timeout(HEADER_DEADLINE + Duration::from_secs(10), async {
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    trickle.abort();
    let held = started.elapsed();
    assert!(closed.is_ok(), "still open after {held:?}");
    assert!(
        held <= HEADER_DEADLINE + Duration::from_secs(3),
        "a handshake that never finishes held its slot {held:?}, past the {HEADER_DEADLINE:?} deadline"
    );
    assert!(
        held >= HEADER_DEADLINE - Duration::from_secs(1),
        "closed after {held:?}: earlier than the deadline, so not by it"
    );
    healthz(&https_client(&[&t.first])?, &t.server.api_url).await?;
    Ok(())
}

/// SIGHUP re-reads the pair: new connections get the new certificate while an open
/// one keeps its own; a broken certificate or a key of another certificate is refused
/// with a log line, and the pair in force keeps serving.
#[tokio::test]
async fn tls_certificate_reload_on_sighup_and_bad_reload_keeps_the_old_one() -> Result<()> {
    let mut t = start_tls()?;
    let api = t.server.api_url.clone();
    let second = self_signed()?;
    // An open connection from before the rotation.
    let open = https_client(&[&t.first])?;
    assert_eq!(healthz(&open, &api).await?.0, t.first.der);

    replace(&t.key, &second.key_pem)?;
    replace(&t.cert, &second.cert_pem)?;
    t.server.sighup()?;
    poll_until("the new certificate", Duration::from_secs(20), || async {
        let (der, _) = healthz(&https_client(&[&t.first, &second])?, &api).await?;
        Ok((der == second.der).then_some(()))
    })
    .await?;
    assert_eq!(
        healthz(&open, &api).await?.0,
        t.first.der,
        "a connection opened before the reload keeps its certificate"
    );

    // A broken certificate file: refused, the second pair keeps serving.
    replace(&t.cert, "-----BEGIN CERTIFICATE-----\nbroken\n")?;
    t.server.sighup()?;
    let line = poll_until("the refused reload", Duration::from_secs(20), || async {
        Ok(t.server
            .log()
            .lines()
            .find(|l| l.contains("TLS certificate reload refused"))
            .map(str::to_owned))
    })
    .await?;
    assert!(line.contains("tls.crt"), "names the file: {line}");
    assert!(t.server.is_running());
    let (der, health) = healthz(&https_client(&[&second])?, &api).await?;
    assert_eq!(der, second.der, "the old certificate still serves");
    assert_eq!(health["status"], "ok");

    // A valid certificate with the key of another: refused as a mismatch.
    let third = self_signed()?;
    replace(&t.cert, &third.cert_pem)?;
    t.server.sighup()?;
    poll_until("the mismatch refusal", Duration::from_secs(20), || async {
        Ok(t.server
            .log()
            .contains("is not the private key of the certificate")
            .then_some(()))
    })
    .await?;
    let (der, _) = healthz(&https_client(&[&second, &third])?, &api).await?;
    assert_eq!(der, second.der);
    assert!(t.server.is_running());
    Ok(())
}

#[tokio::test]
async fn tls_flags_go_together_and_a_bad_pair_refuses_the_start() -> Result<()> {
    let world = World::new(&["alice"])?;
    world.write_policy("note.write.toml", NOTE_POLICY)?;
    let pair = self_signed()?;
    let cert = world.path().join("tls.crt");
    replace(&cert, &pair.cert_pem)?;
    let out = approval_server(&[
        "serve".as_ref(),
        "--data".as_ref(),
        world.data.as_os_str(),
        "--policies".as_ref(),
        world.policies.as_os_str(),
        "--keys".as_ref(),
        world.keys.as_os_str(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--tls-cert".as_ref(),
        cert.as_os_str(),
    ])?;
    assert!(!out.status.success(), "{out}");
    assert!(out.stderr.contains("needs --tls-key"), "{out}");

    // The key file given is the certificate: no private key in it.
    let out = approval_server(&[
        "serve".as_ref(),
        "--data".as_ref(),
        world.data.as_os_str(),
        "--policies".as_ref(),
        world.policies.as_os_str(),
        "--keys".as_ref(),
        world.keys.as_os_str(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--tls-cert".as_ref(),
        cert.as_os_str(),
        "--tls-key".as_ref(),
        cert.as_os_str(),
    ])?;
    assert!(!out.status.success(), "{out}");
    assert!(
        out.stderr.contains("tls.crt: no private key found") && out.stderr.contains("--tls-key"),
        "{out}"
    );
    Ok(())
}
