//! The binary against a fake, lying or broken approver API: it must refuse to sign
//! anything it cannot check, show hostile text escaped, and map failures to exit codes.

mod common;

use common::*;
use serde_json::json;
use std::sync::atomic::Ordering;

const SRV: &str = "srv-test-1";

fn setup(view: serde_json::Value) -> (Env, Fake, String) {
    let env = Env::new();
    let key = env.key("alice");
    let fake = Fake::start(SRV, view);
    fake.pin(&env);
    (env, fake, key.display().to_string())
}

fn good() -> serde_json::Value {
    view(&preview(
        SRV,
        "p-1",
        json!({"text": "hello"}),
        "write hello",
    ))
}

#[test]
fn show_displays_a_checked_proposal_over_signed_reads() {
    let v = good();
    let h = v["preview_sha256"].as_str().unwrap_or("").to_owned();
    let (env, fake, key) = setup(v);
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&h), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!("check           {}", &h[..8])),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("\"text\": \"hello\""), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("quorum          0 of 2, waiting for 2 more (and 1 of [carol])"),
        "{}",
        r.stdout
    );
    assert!(fake.state.reads.load(Ordering::SeqCst) >= 1);
    assert_eq!(fake.state.unauthorized.load(Ordering::SeqCst), 0);
}

#[test]
fn approve_refuses_a_preview_hash_mismatch_and_posts_nothing() {
    let mut v = good();
    // The server claims the hash of another payload than the one it shows.
    let other = preview(SRV, "p-1", json!({"text": "something else"}), "write hello");
    v["preview_sha256"] = json!(other.sha256().to_hex());
    let (env, fake, key) = setup(v);
    let r = env.run(&[
        "approve", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("PREVIEW HASH MISMATCH"), "{}", r.stderr);
    assert!(r.stderr.contains(&other.sha256().to_hex()), "{}", r.stderr);
    assert!(r.stderr.contains("nothing signed"), "{}", r.stderr);
    assert_eq!(fake.posts(), 0);
    assert_eq!(
        r.stderr.lines().count(),
        1,
        "one-line message: {}",
        r.stderr
    );
}

#[test]
fn approve_refuses_a_preview_of_another_server_and_posts_nothing() {
    let v = view(&preview("srv-other", "p-1", json!({"text": "hello"}), ""));
    let (env, fake, key) = setup(v);
    let r = env.run(&[
        "approve", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("SERVER MISMATCH"), "{}", r.stderr);
    assert!(r.stderr.contains("srv-other"), "{}", r.stderr);
    assert_eq!(fake.posts(), 0);
}

#[test]
fn approve_refuses_a_preview_of_another_proposal() {
    let (env, fake, key) = setup(good());
    let r = env.run(&[
        "approve", "p-2", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("asked for proposal p-2"), "{}", r.stderr);
    assert_eq!(fake.posts(), 0);
}

#[test]
fn approve_refuses_a_policy_that_does_not_match_the_preview() {
    let mut v = good();
    v["policy"]["quorum"] = json!(1);
    let (env, fake, key) = setup(v);
    let r = env.run(&[
        "approve", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("POLICY MISMATCH"), "{}", r.stderr);
    assert_eq!(fake.posts(), 0);
}

#[test]
fn approve_refuses_duplicate_keys_in_the_answer() {
    let (env, fake, key) = setup(good());
    let text = good().to_string();
    // A second "preview_sha256" key: readers would disagree on which one counts.
    let dup = text.replacen('{', "{\"preview_sha256\":\"00\",", 1);
    fake.set_raw(&dup);
    let r = env.run(&[
        "approve", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("duplicate key"), "{}", r.stderr);
    assert_eq!(fake.posts(), 0);
}

#[test]
fn garbage_answer_exits_3_with_one_line() {
    let (env, fake, key) = setup(good());
    fake.set_raw("<html>\u{1b}[2Jnot json</html>");
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("not exact JSON"), "{}", r.stderr);
    assert!(
        !r.stderr.contains('\u{1b}'),
        "raw ESC in the error: {:?}",
        r.stderr
    );
    let r = env.run(&[
        "approve", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(fake.posts(), 0);
}

#[test]
fn server_down_exits_3() {
    let env = Env::new();
    let key = env.key("alice");
    // Bind then drop: the port is closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let url = format!("http://127.0.0.1:{port}");
    for args in [
        vec!["show", "p-1"],
        vec!["approve", "p-1", "--yes"],
        vec!["pending"],
    ] {
        let mut a = args.clone();
        a.extend(["--server", &url, "--key", key.to_str().unwrap_or("")]);
        let r = env.run(&a);
        assert_eq!(r.code, 3, "{args:?}: {r:?}");
        assert!(r.stderr.contains("cannot connect"), "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}

#[test]
fn unresponsive_server_times_out_with_exit_3() {
    let env = Env::new();
    let key = env.key("alice");
    // Accepts connections but never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let start = std::time::Instant::now();
    let r = env.run(&[
        "show",
        "p-1",
        "--timeout",
        "1",
        "--server",
        &url,
        "--key",
        key.to_str().unwrap_or(""),
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("timed out after 1s"), "{}", r.stderr);
    assert!(start.elapsed() < std::time::Duration::from_secs(8));
    drop(listener);
}

#[test]
fn hostile_payload_is_shown_escaped() {
    let payload = json!({
        "text": "clear\u{1b}[2Jscreen",
        "rtl": "invoice_\u{202e}fdp.exe",
        "zwj": "pay\u{200d}pal",
        "nul": "a\u{0}b",
        "sep": "line\u{2028}break",
        "fine": "café 😀 naïve",
    });
    let p = preview(SRV, "p-1", payload, "sum\u{202e}mary\u{1b}[31m");
    let (env, fake, key) = setup(view(&p));
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    let out = &r.stdout;
    for expected in [
        r#""text": "clear\u{1b}[2Jscreen""#,
        r#""rtl": "invoice_\u{202e}fdp.exe""#,
        r#""zwj": "pay\u{200d}pal""#,
        r#""nul": "a\u{0}b""#,
        r#""sep": "line\u{2028}break""#,
        r#""fine": "café 😀 naïve""#,
        r#"summary         "sum\u{202e}mary\u{1b}[31m""#,
    ] {
        assert!(out.contains(expected), "missing {expected} in:\n{out}");
    }
    for raw in ['\u{1b}', '\u{202e}', '\u{200d}', '\u{0}', '\u{2028}'] {
        assert!(!out.contains(raw), "raw {raw:?} in output:\n{out}");
    }
    // The same in the table and in JSON output: escaped, never raw.
    let r = env.run(&["pending", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(r"sum\u{202e}mary\u{1b}[31m"),
        "{}",
        r.stdout
    );
    let r = env.run(&[
        "show", "p-1", "--json", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    for raw in ['\u{1b}', '\u{202e}', '\u{200d}', '\u{0}', '\u{2028}'] {
        assert!(!r.stdout.contains(raw), "raw {raw:?} in JSON output");
    }
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON output");
    assert_eq!(
        v["preview"]["payload"]["rtl"],
        json!("invoice_\u{202e}fdp.exe")
    );
    assert_eq!(v["checked"]["preview_sha256"], json!(p.sha256().to_hex()));
}

/// An agent hides a value behind U+2800 BRAILLE PATTERN BLANK and writes Latin-looking
/// words with Cyrillic letters (issue #11, item 8): `show` prints the blank as an
/// escape and names every such word, in the summary, a payload key and payload
/// values, in a WARNING line.
#[test]
fn braille_blanks_and_cyrillic_lookalikes_are_shown_escaped_and_flagged() {
    let payload = json!({
        "user": "\u{430}dmin",
        "note": "\u{2800}",
        "to": ["ok", "\u{440}\u{430}\u{443}pal"],
        "r\u{43e}le": "Привет",
    });
    let p = preview(SRV, "p-1", payload, "grant \u{430}dmin\u{2800}rights");
    let (env, fake, key) = setup(view(&p));
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    let out = &r.stdout;
    for expected in [
        r#""note": "\u{2800}""#,
        r#"summary         "grant аdmin\u{2800}rights""#,
        r#"WARNING: "аdmin" in summary mixes Cyrillic and Latin letters"#,
        r#"WARNING: "аdmin" in payload.user mixes Cyrillic and Latin letters"#,
        "WARNING: \"\u{440}\u{430}\u{443}pal\" in payload.to[1] mixes Cyrillic and Latin letters",
        r#"WARNING: "rоle" in a key of payload mixes Latin and Cyrillic letters"#,
    ] {
        assert!(out.contains(expected), "missing {expected} in:\n{out}");
    }
    assert!(!out.contains('\u{2800}'), "raw U+2800 in output:\n{out}");
    // Words in one script, Latin or not, are not flagged.
    assert!(!out.contains("\"ok\" in"), "{out}");
    assert!(!out.contains("\"Привет\" in"), "{out}");
    assert_eq!(out.matches("WARNING:").count(), 4, "{out}");
}

#[test]
fn approve_with_yes_signs_the_local_hash_and_reports_progress() {
    let p = preview(SRV, "p-1", json!({"text": "hello"}), "");
    let (env, fake, key) = setup(view(&p));
    let r = env.run(&[
        "approve",
        "p-1",
        "--yes",
        "--reason",
        "looks right",
        "--server",
        &fake.url,
        "--key",
        &key,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("approved: 1 of 2, waiting for 1 more (and 1 of [carol])"),
        "{}",
        r.stdout
    );
    let posts = fake.state.posts.lock().expect("lock").clone();
    assert_eq!(posts.len(), 1);
    let d: approval_core::SignedDecision =
        serde_json::from_value(posts[0].clone()).expect("decision body");
    assert_eq!(d.approver.as_str(), "alice");
    assert_eq!(d.reason, "looks right");
    let pk = secret("alice").public_key();
    assert_eq!(d.verify_key(&pk, &p.sha256()), Ok(()));
}

#[test]
fn approve_asks_for_the_hash_prefix() {
    let p = preview(SRV, "p-1", json!({"text": "hello"}), "");
    let prefix = p.sha256().prefix(8);
    let (env, fake, key) = setup(view(&p));
    let args = ["approve", "p-1", "--server", &fake.url, "--key", &key];
    // Wrong prefix: refused, nothing sent.
    let r = env.run_stdin(&args, "00000000\n");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("nothing signed"), "{}", r.stderr);
    // No input at all (closed stdin): refused.
    let r = env.run(&args);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(fake.posts(), 0);
    // The right prefix: signed and sent.
    let r = env.run_stdin(&args, &format!("{prefix}\n"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("type the first 8 characters"),
        "{}",
        r.stderr
    );
    assert_eq!(fake.posts(), 1);
}

#[test]
fn reject_refuses_when_not_pending_and_revoke_when_not_approved() {
    let mut v = good();
    v["status"] = json!("EXPIRED");
    let (env, fake, key) = setup(v);
    let r = env.run(&[
        "reject", "p-1", "--yes", "--reason", "no", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("proposal p-1 is EXPIRED"), "{}", r.stderr);
    let r = env.run(&[
        "revoke", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(fake.posts(), 0);
}

#[test]
fn an_approver_outside_the_policy_is_told_before_signing() {
    let env = Env::new();
    let key = env.key("mallory");
    let fake = Fake::start(SRV, good());
    let r = env.run(&[
        "approve",
        "p-1",
        "--yes",
        "--server",
        &fake.url,
        "--key",
        key.to_str().unwrap_or(""),
    ]);
    // mallory is not in the fake's keyring: the signed read itself is refused.
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("UNAUTHORIZED: bad read signature"),
        "{}",
        r.stderr
    );
    assert_eq!(fake.posts(), 0);
}

#[test]
fn pending_lists_checked_rows_and_flags_lying_ones() {
    let (env, fake, key) = setup(good());
    let r = env.run(&["pending", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    let header = r.stdout.lines().next().unwrap_or("");
    for col in [
        "ID",
        "KIND",
        "SUMMARY",
        "REQUESTED BY",
        "AGE",
        "APPROVALS",
        "EXPIRES IN",
    ] {
        assert!(header.contains(col), "{header}");
    }
    assert!(r.stdout.contains("p-1"), "{}", r.stdout);
    assert!(r.stdout.contains("0/2"), "{}", r.stdout);
    let mut bad = good();
    bad["preview"]["payload"]["text"] = json!("changed after hashing");
    *fake.state.view.lock().expect("lock") = bad;
    let r = env.run(&["pending", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.contains("REFUSED: PREVIEW HASH MISMATCH"),
        "{}",
        r.stdout
    );
}

#[test]
fn watch_prints_new_proposals_from_the_stream_and_reconnects() {
    let (env, fake, key) = setup(good());
    fake.state.list_empty.store(true, Ordering::SeqCst);
    let mut child = env
        .cmd()
        .args(["watch", "--server", &fake.url, "--key", &key])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // The fake ends each stream after one event: watch must reconnect.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while fake.state.event_streams.load(Ordering::SeqCst) < 3
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        fake.state.event_streams.load(Ordering::SeqCst) >= 3,
        "{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("p-1")).collect();
    assert_eq!(lines.len(), 1, "printed once: {stdout}");
    assert!(
        lines[0].starts_with("NEW p-1  note.write  \"write hello\"  by local  approvals 0/2"),
        "{}",
        lines[0]
    );
    assert!(
        stderr.contains("the server closed the event stream; reconnecting in 1s"),
        "{stderr}"
    );
}

/// Issue #11, item 5: the server ends a stream when its read signature leaves the
/// window (or on a keyring reload) with a `reauth` event. watch signs a new read at
/// once, without back-off, and resumes with `Last-Event-ID` set to the last id seen.
#[test]
fn watch_signs_again_and_resumes_with_last_event_id_when_the_server_ends_the_stream() {
    let (env, fake, key) = setup(good());
    fake.state.reauth.store(true, Ordering::SeqCst);
    let mut child = env
        .cmd()
        .args(["watch", "--server", &fake.url, "--key", &key])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while fake.state.event_streams.load(Ordering::SeqCst) < 3
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ids = fake.state.last_event_ids.lock().expect("lock").clone();
    assert!(ids.len() >= 3, "{ids:?} {stderr}");
    assert_eq!(ids[0], None, "the first stream starts fresh");
    assert_eq!(ids[1].as_deref(), Some("ev-1"), "{ids:?}");
    assert_eq!(ids[2].as_deref(), Some("ev-2"), "{ids:?}");
    assert_eq!(
        fake.state.unauthorized.load(Ordering::SeqCst),
        0,
        "every reconnection was signed afresh and verified: {stderr}"
    );
    assert!(stderr.contains("signing again and resuming"), "{stderr}");
    assert!(!stderr.contains("reconnecting in"), "no back-off: {stderr}");
}

#[test]
fn watch_backs_off_exponentially_while_the_server_is_down() {
    let env = Env::new();
    let key = env.key("alice");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let url = format!("http://127.0.0.1:{port}");
    let mut child = env
        .cmd()
        .args([
            "watch",
            "--server",
            &url,
            "--key",
            key.to_str().unwrap_or(""),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Attempts at about 0 s, 1 s and 3 s; the next wait is 4 s.
    std::thread::sleep(std::time::Duration::from_millis(4500));
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for wait in [
        "reconnecting in 1s",
        "reconnecting in 2s",
        "reconnecting in 4s",
    ] {
        assert!(stderr.contains(wait), "{wait}: {stderr}");
    }
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

#[test]
fn signer_cli_refuses_a_server_whose_key_changed_and_signs_nothing() {
    let env = Env::new();
    let key = env.key("alice");
    let key = key.display().to_string();
    let fake = Fake::start(SRV, good());
    // First use: pinned, and said so with the key.
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("pinned server"), "{}", r.stderr);
    assert!(r.stderr.contains(&fake_server_key(42)), "{}", r.stderr);
    let reads = fake.state.reads.load(Ordering::SeqCst);
    // The server's key changes (a new server at the same address, or an impostor).
    fake.set_server_key(&fake_server_key(43));
    let r = env.run(&[
        "approve", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("SERVER IDENTITY CHANGED"), "{}", r.stderr);
    assert!(r.stderr.contains(&fake_server_key(42)), "{}", r.stderr);
    assert!(r.stderr.contains(&fake_server_key(43)), "{}", r.stderr);
    assert!(r.stderr.contains("trust-server"), "{}", r.stderr);
    // Nothing signed: no decision posted, not even a signed read sent.
    assert_eq!(fake.posts(), 0);
    assert_eq!(fake.state.reads.load(Ordering::SeqCst), reads);
    assert_eq!(fake.state.unauthorized.load(Ordering::SeqCst), 0);
}

#[test]
fn trust_server_repins_after_an_intended_change() {
    let env = Env::new();
    let key = env.key("alice");
    let key = key.display().to_string();
    let fake = Fake::start(SRV, good());
    fake.pin(&env);
    fake.set_server_key(&fake_server_key(44));
    let refused = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(refused.code, 1, "{refused:?}");
    // The explicit command needs no key, shows the old and the new pin, and re-pins.
    let t = env.run(&["trust-server", "--server", &fake.url]);
    assert_eq!(t.code, 0, "{t:?}");
    assert!(t.stdout.contains(&fake_server_key(42)), "{}", t.stdout);
    assert!(t.stdout.contains(&fake_server_key(44)), "{}", t.stdout);
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("pinned"), "{}", r.stderr);
    // Run again: nothing changes.
    let again = env.run(&["--json", "trust-server", "--server", &fake.url]);
    assert_eq!(again.code, 0, "{again:?}");
    let v: serde_json::Value = serde_json::from_str(&again.stdout).expect("json");
    assert_eq!(v["changed"], json!(false), "{v}");
}

#[test]
fn a_server_without_a_server_key_is_refused() {
    let env = Env::new();
    let key = env.key("alice");
    let key = key.display().to_string();
    let fake = Fake::start(SRV, good());
    fake.set_server_key("");
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(fake.state.reads.load(Ordering::SeqCst), 0);
}

/// Review finding on issue #11 item 7: the pin compared what an unsigned `/healthz`
/// said, so an impersonator that replays the real server's answer (same id, same key)
/// passed it. signer-cli now sends a fresh challenge and requires the server's proof
/// that it holds the pinned key; a replayed proof is refused and nothing is signed.
#[test]
fn signer_cli_refuses_a_server_that_replays_the_pinned_healthz() {
    let env = Env::new();
    let key = env.key("alice");
    let key = key.display().to_string();
    let fake = Fake::start(SRV, good());
    // The genuine server first: pinned, and a signed read goes through.
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    let reads = fake.state.reads.load(Ordering::SeqCst);
    // Now the same id and key, but a proof made for another challenge.
    fake.replay_proof();
    let r = env.run(&[
        "approve", "p-1", "--server", &fake.url, "--key", &key, "--yes",
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("cannot prove it holds that key"),
        "{}",
        r.stderr
    );
    assert_eq!(
        fake.state.reads.load(Ordering::SeqCst),
        reads,
        "no signed read was sent"
    );
    assert_eq!(
        fake.state.unauthorized.load(Ordering::SeqCst),
        0,
        "no signed read was even tried"
    );
    assert!(
        fake.state.posts.lock().expect("lock").is_empty(),
        "nothing was signed"
    );
}

/// Issue #13: `watch --notify` where the desktop has no notification service (no
/// D-Bus session bus here): one clear line, and watch goes on printing proposals.
#[test]
fn watch_notify_without_a_desktop_says_so_once_and_goes_on_printing() {
    let (env, fake, key) = setup(good());
    fake.state.list_empty.store(true, Ordering::SeqCst);
    let mut child = env
        .cmd()
        .args(["watch", "--notify", "--server", &fake.url, "--key", &key])
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            "unix:path=/nonexistent/approval-e2e-no-bus",
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while fake.state.event_streams.load(Ordering::SeqCst) < 3
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let off: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("desktop notifications are off"))
        .collect();
    assert_eq!(off.len(), 1, "said once: {stderr}");
    assert!(
        off[0].starts_with(
            "signer-cli: desktop notifications are off: this desktop has no notification service ("
        ) && off[0].ends_with("); watch goes on printing"),
        "{}",
        off[0]
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("p-1")).collect();
    assert_eq!(lines.len(), 1, "still printed: {stdout}\n{stderr}");
    assert!(lines[0].starts_with("NEW p-1  note.write"), "{}", lines[0]);
}

#[test]
fn approve_refuses_a_decision_list_it_cannot_read_instead_of_showing_none() {
    // A list that does not parse used to be shown as "none yet", which also hid
    // that this approver had already decided.
    let mut v = good();
    v["decisions"] = json!([{"approver": "alice", "decision": "maybe", "at": "soon"}]);
    let (env, fake, key) = setup(v);
    let r = env.run(&[
        "approve", "p-1", "--yes", "--server", &fake.url, "--key", &key,
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("`decisions` is not understood"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("nothing signed"), "{}", r.stderr);
    assert_eq!(fake.posts(), 0);
}

/// Issue #33: a proposal the gate runs by itself on quorum says so before anyone
/// signs, and an ordinary one does not.
#[test]
fn show_says_when_the_gate_runs_a_proposal_on_quorum() {
    let mut p = preview(SRV, "p-1", json!({"text": "hello"}), "write hello").to_value();
    p["execution"] = json!("on_quorum");
    let on_quorum = approval_core::Preview::from_value(&p).unwrap();
    let (env, fake, key) = setup(view(&on_quorum));
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("runs            ON QUORUM: the gate runs it itself"),
        "{}",
        r.stdout
    );
    let (env, fake, key) = setup(good());
    let r = env.run(&["show", "p-1", "--server", &fake.url, "--key", &key]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("ON QUORUM"), "{}", r.stdout);
}
