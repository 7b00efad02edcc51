//! Issue #35 item 1: the configuration under quorum. Real binaries: `serve --root`,
//! `approval-server config pull|propose`, `signer-cli approve|reject`, SIGHUP, and
//! two instances on PostgreSQL. Each test names the way around the gate it closes
//! (docs/THREAT_MODEL.md).

use anyhow::{bail, Context, Result};
use approval_e2e::pg::FreshDb;
use approval_e2e::{approval_server, poll_until, McpClient, Server, World};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A note policy for `kind`: `quorum` of these approvers.
fn policy(kind: &str, quorum: u32, approvers: &[&str]) -> String {
    let list: Vec<String> = approvers.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "kind = \"{kind}\"\nquorum = {quorum}\napprovers = [{}]\n[executor]\ntype = \"note\"\n",
        list.join(", ")
    )
}

fn root(admins: &[&str], threshold: u32) -> String {
    let list: Vec<String> = admins.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "administrators = [{}]\nthreshold = {threshold}\nemergency_cooldown = \"2s\"\n",
        list.join(", ")
    )
}

/// alice, bob and carol administer (2 of 3); note.write needs alice and bob.
fn world() -> Result<World> {
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy("note.write", 2, &["alice", "bob"]),
    )?;
    std::fs::write(
        w.path().join("root.toml"),
        root(&["alice", "bob", "carol"], 2),
    )?;
    Ok(w)
}

fn root_flag(w: &World) -> Vec<std::ffi::OsString> {
    vec!["--root".into(), w.path().join("root.toml").into()]
}

fn start(w: &World) -> Result<Server> {
    Server::start_full(
        &approval_e2e::ServerOptions {
            data: w.data.clone(),
            policies: w.policies.clone(),
            keys: w.keys.clone(),
            agents: None,
        },
        &[],
        &root_flag(w),
        &[],
    )
}

/// `approval-server config VERB DIR --server API --key <who's key>`; its stdout, or
/// an error with everything it printed.
fn config_cli(w: &World, verb: &str, api: &str, who: &str, dir: &Path) -> Result<String> {
    let key = w.key_file(who);
    let args: [&std::ffi::OsStr; 7] = [
        "config".as_ref(),
        verb.as_ref(),
        dir.as_os_str(),
        "--server".as_ref(),
        api.as_ref(),
        "--key".as_ref(),
        key.as_os_str(),
    ];
    let out = approval_server(&args)?;
    if !out.status.success() {
        bail!("config {verb} failed: {out}");
    }
    Ok(out.stdout.clone())
}

/// `config pull` into a fresh folder as `who`; the version it reports.
fn pull(w: &World, api: &str, who: &str, dir: &Path) -> Result<u64> {
    let out = config_cli(w, "pull", api, who, dir)?;
    out.strip_prefix("configuration version ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no version in {out:?}"))
}

/// `config propose DIR` as `who`: the proposal id, and everything it printed.
fn propose(w: &World, api: &str, who: &str, dir: &Path) -> Result<(String, String)> {
    let out = config_cli(w, "propose", api, who, dir)?;
    let id = out
        .split(" as ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .with_context(|| format!("no proposal id in {out:?}"))?;
    Ok((id.to_owned(), out.clone()))
}

async fn version_becomes(w: &World, api: &str, v: u64) -> Result<()> {
    let probe = w.path().join("probe");
    poll_until(
        &format!("configuration version {v}"),
        Duration::from_secs(15),
        || async { Ok((pull(w, api, "alice", &probe)? == v).then_some(())) },
    )
    .await
}

/// A raw `POST /v1/config/proposals?bundle_sha256=NAMED` signed by `who`, with
/// DIR's bundle as the body: (HTTP status, body).
async fn post_signed(
    w: &World,
    api: &str,
    who: &str,
    named: &str,
    dir: &Path,
) -> Result<(u16, String)> {
    let key = w.secret_key(who)?;
    let client = reqwest::Client::new();
    let health: serde_json::Value = client
        .get(format!("{api}/healthz"))
        .send()
        .await?
        .json()
        .await?;
    let sid = approval_core::ServerId::parse(health["server_id"].as_str().context("server_id")?)?;
    let path = format!("/v1/config/proposals?bundle_sha256={named}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs() as i64;
    let auth = approval_core::message::sign_read(&key.key, &key.name, &sid, now, "POST", &path);
    let mut policies = serde_json::Map::new();
    for e in std::fs::read_dir(dir.join("policies"))? {
        let p = e?.path();
        let name = p
            .file_name()
            .context("name")?
            .to_string_lossy()
            .into_owned();
        policies.insert(name, std::fs::read_to_string(&p)?.into());
    }
    let body = serde_json::json!({"bundle": {
        "root": std::fs::read_to_string(dir.join("root.toml"))?,
        "keyring": std::fs::read_to_string(dir.join("keyring"))?,
        "policies": policies,
    }});
    let resp = client
        .post(format!("{api}{path}"))
        .header("authorization", auth)
        .json(&body)
        .send()
        .await?;
    Ok((resp.status().as_u16(), resp.text().await?))
}

/// A proposal's status, as alice's signer-cli shows it.
async fn status(w: &World, server: &Server, id: &str) -> Result<String> {
    let shown = w
        .signer("alice", server)
        .ok(&["--json", "show", id])
        .await?
        .json()?;
    Ok(shown["status"].as_str().unwrap_or_default().to_owned())
}

fn keyring_line(w: &World, name: &str) -> Result<String> {
    w.keygen(name)
}

/// A folder with the version in force pulled into it.
fn pulled(w: &World, api: &str, name: &str) -> Result<PathBuf> {
    let dir = w.path().join(name);
    pull(w, api, "alice", &dir)?;
    Ok(dir)
}

#[tokio::test]
async fn files_edited_by_hand_change_nothing_and_a_change_needs_the_administrators_threshold(
) -> Result<()> {
    let w = world()?;
    let server = start(&w)?;
    assert!(server.log().contains("under quorum"), "{}", server.log());
    assert_eq!(pull(&w, &server.api_url, "bob", &w.path().join("v1"))?, 1);

    // Someone with the host's files adds their key and a quorum of one, then SIGHUP.
    let mallory = keyring_line(&w, "mallory")?;
    w.add_to_keyring(&mallory)?;
    w.write_policy("note.write.toml", &policy("note.write", 1, &["mallory"]))?;
    server.sighup()?;
    poll_until("the refusal", Duration::from_secs(10), || async {
        Ok(server
            .log()
            .contains("reload refused: the configuration is under quorum")
            .then_some(()))
    })
    .await?;
    assert!(
        server.log().contains("approval-server config propose"),
        "{}",
        server.log()
    );
    let v1 = pulled(&w, &server.api_url, "after-hup")?;
    assert!(!std::fs::read_to_string(v1.join("keyring"))?.contains("mallory"));
    let mcp = server.mcp().await?;
    let p = mcp
        .prepare("note.write", serde_json::json!({"text": "x"}), "")
        .await?;
    assert_eq!(p.structured["required"]["quorum"], 2, "{:?}", p.structured);

    // A real change: dave joins, note.write needs one approval.
    let dave = keyring_line(&w, "dave")?;
    let change = pulled(&w, &server.api_url, "change")?;
    let keys = std::fs::read_to_string(change.join("keyring"))?;
    std::fs::write(change.join("keyring"), format!("{keys}{dave}\n"))?;
    std::fs::write(
        change.join("policies/note.write.toml"),
        policy("note.write", 1, &["alice", "dave"]),
    )?;
    // A second change made against version 1 too, left pending: once version 2 is
    // in force it names a version that is gone.
    let stale_dir = pulled(&w, &server.api_url, "stale")?;
    std::fs::write(
        stale_dir.join("root.toml"),
        root(&["alice", "bob", "carol"], 3),
    )?;
    let (stale, _) = propose(&w, &server.api_url, "carol", &stale_dir)?;
    let (id, printed) = propose(&w, &server.api_url, "alice", &change)?;
    assert!(printed.contains("+ dave ed25519"), "{printed}");
    // The same change again makes no second proposal.
    let again = propose(&w, &server.api_url, "bob", &change)
        .unwrap_err()
        .to_string();
    assert!(
        again.contains(&format!("already proposed as {id}")),
        "{again}"
    );
    // A seen Authorization header cannot carry another bundle: the signed path names
    // the bundle's hash, and the body must match it.
    let forged = post_signed(&w, &server.api_url, "alice", &"0".repeat(64), &change).await?;
    assert_eq!(forged.0, 400, "{}", forged.1);
    assert!(
        forged.1.contains("must name the body's bundle"),
        "{}",
        forged.1
    );
    assert!(
        printed.contains("changed policies/note.write.toml"),
        "{printed}"
    );
    // Not an administrator: refused.
    let dave_proposes = config_cli(&w, "propose", &server.api_url, "dave", &change);
    assert!(
        format!("{dave_proposes:?}").contains("UNAUTHORIZED"),
        "{dave_proposes:?}"
    );

    // One administrator of two needed: nothing changes.
    w.signer("alice", &server).approve(&id).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        pull(&w, &server.api_url, "alice", &w.path().join("short"))?,
        1
    );
    // The second: applied on quorum, once.
    w.signer("bob", &server).approve(&id).await?;
    version_becomes(&w, &server.api_url, 2).await?;
    // The files on disk now say what the gate obeys.
    assert!(std::fs::read_to_string(&w.keys)?.contains("dave ed25519"));
    assert_eq!(status(&w, &server, &id).await?, "SUCCEEDED");

    // The stale change (against version 1) is void: it can never apply.
    assert_eq!(status(&w, &server, &stale).await?, "POLICY_CHANGED");
    let late = w
        .signer("bob", &server)
        .run(&["--json", "approve", &stale, "--yes"])
        .await?;
    assert!(!late.status.success(), "{late}");
    // Restoring version 1's files by hand and SIGHUP: refused, version 2 stays.
    for f in ["keyring", "root.toml"] {
        std::fs::copy(
            v1.join(f),
            if f == "keyring" {
                w.keys.clone()
            } else {
                w.path().join(f)
            },
        )?;
    }
    server.sighup()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        pull(&w, &server.api_url, "alice", &w.path().join("after"))?,
        2
    );

    // A restart without --root still serves version 2 (the store remembers).
    drop(server);
    let plain = w.start()?;
    assert_eq!(
        pull(&w, &plain.api_url, "dave", &w.path().join("restart"))?,
        2
    );
    drop(plain);
    let audit = approval_server(&[
        "audit".as_ref(),
        "export".as_ref(),
        "--data".as_ref(),
        w.data.as_os_str(),
    ])?;
    assert!(audit.status.success(), "{audit}");
    assert_eq!(
        audit.stdout.matches("\"config_applied\"").count(),
        2,
        "{}",
        audit.stdout
    );
    let verify = approval_server(&[
        "audit".as_ref(),
        "verify".as_ref(),
        "--data".as_ref(),
        w.data.as_os_str(),
    ])?;
    assert!(verify.status.success(), "{verify}");
    Ok(())
}

#[tokio::test]
async fn a_new_root_needs_the_old_roots_threshold_and_an_emergency_removal_one_fewer() -> Result<()>
{
    let w = world()?;
    let server = start(&w)?;
    let (dave, erin) = (keyring_line(&w, "dave")?, keyring_line(&w, "erin")?);
    let rotate = pulled(&w, &server.api_url, "rotate")?;
    let keys = std::fs::read_to_string(rotate.join("keyring"))?;
    std::fs::write(rotate.join("keyring"), format!("{keys}{dave}\n{erin}\n"))?;
    std::fs::write(rotate.join("root.toml"), root(&["dave", "erin"], 2))?;
    let (id, _) = propose(&w, &server.api_url, "alice", &rotate)?;
    // The new administrators cannot approve their own appointment.
    let own = w
        .signer("dave", &server)
        .run(&["--json", "approve", &id, "--yes"])
        .await?;
    assert!(!own.status.success(), "{own}");
    w.signer("alice", &server).approve(&id).await?;
    w.signer("carol", &server).approve(&id).await?;
    version_becomes(&w, &server.api_url, 2).await?;

    // Under the new root: erin is compromised; dave alone (2 - 1) removes her.
    let remove = pulled(&w, &server.api_url, "remove")?;
    let keys: String = std::fs::read_to_string(remove.join("keyring"))?
        .lines()
        .filter(|l| !l.starts_with("erin "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(remove.join("keyring"), keys)?;
    // Lowering the threshold further than the administrators left require is an
    // ordinary change: it needs the full threshold, so erin's approval would count.
    let both = pulled(&w, &server.api_url, "both")?;
    std::fs::write(both.join("root.toml"), root(&["dave", "erin"], 1))?;
    let (ordinary, printed) = propose(&w, &server.api_url, "dave", &both)?;
    assert!(!printed.contains("EMERGENCY"), "{printed}");
    let erin_counts = w
        .signer("erin", &server)
        .run(&["--json", "show", &ordinary])
        .await?;
    assert!(
        erin_counts.stdout.contains("\"need\": 2") || erin_counts.stdout.contains("\"need\":2"),
        "{erin_counts}"
    );
    std::fs::write(remove.join("root.toml"), root(&["dave"], 1))?;
    // Alice, still in the keyring, is no longer an administrator: she cannot propose.
    let alice = config_cli(&w, "propose", &server.api_url, "alice", &remove);
    assert!(
        format!("{alice:?}").contains("not an administrator"),
        "{alice:?}"
    );
    let (id, printed) = propose(&w, &server.api_url, "dave", &remove)?;
    assert!(
        printed.contains("EMERGENCY REMOVAL of administrator erin"),
        "{printed}"
    );
    // Erin can neither veto nor approve her own removal.
    let veto = w
        .signer("erin", &server)
        .run(&["--json", "reject", &id, "--reason", "no", "--yes"])
        .await?;
    assert!(!veto.status.success(), "{veto}");
    w.signer("dave", &server).approve(&id).await?;
    // The emergency cooldown (2 s here, 15 min by default) is the others' window to
    // revoke it: not applied yet.
    assert_eq!(
        pull(&w, &server.api_url, "dave", &w.path().join("cooling"))?,
        2
    );
    version_becomes(&w, &server.api_url, 3).await?;
    assert!(
        server.log().contains("EMERGENCY REMOVAL APPLIED"),
        "{}",
        server.log()
    );
    assert!(!std::fs::read_to_string(&w.keys)?.contains("erin "));
    Ok(())
}

#[tokio::test]
async fn two_postgresql_instances_apply_a_change_once_in_the_same_order() -> Result<()> {
    let Some(db) = FreshDb::new()? else {
        return Ok(());
    };
    let w = world()?;
    let rootf = w.path().join("root.toml");
    let extra = ["--root", rootf.to_str().context("path")?];
    let a = db.start(&w, "a", &extra)?;
    let b = db.start(&w, "b", &extra)?;
    for s in [&a, &b] {
        assert_eq!(pull(&w, &s.api_url, "alice", &w.path().join("p"))?, 1);
    }
    let dave = keyring_line(&w, "dave")?;
    let change = pulled(&w, &a.api_url, "change")?;
    let keys = std::fs::read_to_string(change.join("keyring"))?;
    std::fs::write(change.join("keyring"), format!("{keys}{dave}\n"))?;
    let (id, _) = propose(&w, &a.api_url, "alice", &change)?;
    w.signer("alice", &a).approve(&id).await?;
    w.signer("bob", &b).approve(&id).await?;
    version_becomes(&w, &a.api_url, 2).await?;
    version_becomes(&w, &b.api_url, 2).await?;
    // Both instances' sweeps had time to try it too: the claim let one apply it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let out = approval_server(&[
        "audit".as_ref(),
        "export".as_ref(),
        "--store".as_ref(),
        db.url.as_ref(),
    ])?;
    assert!(out.status.success(), "{out}");
    let applied: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("\"config_applied\""))
        .collect();
    assert_eq!(
        applied.len(),
        2,
        "version 1 once, version 2 once: {applied:?}"
    );
    assert!(
        applied[0].contains("\"version\":1") && applied[1].contains("\"version\":2"),
        "{applied:?}"
    );
    let verify = approval_server(&[
        "audit".as_ref(),
        "verify".as_ref(),
        "--store".as_ref(),
        db.url.as_ref(),
    ])?;
    assert!(verify.status.success(), "{verify}");
    Ok(())
}
