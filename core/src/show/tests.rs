//! A proposal with hostile text, checked and rendered: every hidden character shown
//! as an escape, every look-alike word named, and a tampered view refused.

use super::*;
use serde_json::json;

const POLICY: &str = r#"
kind = "note.write"
description = "Write a note"
quorum = 1
approvers = ["alice", "bob"]
vetoes = 1
ttl = "30m"
execute_within = "10m"
[executor]
type = "note"
"#;

/// 2026-11-30T00:01:00Z: one minute after the proposal was made.
const NOW: i64 = 1_795_996_860;

fn policy() -> Policy {
    Policy::parse_toml("<test>", POLICY).expect("test policy")
}

fn server() -> ServerId {
    ServerId::parse("srv-1").expect("server id")
}

/// A PENDING view of a proposal whose summary hides a bidi override and a
/// zero-width space around a word with a Cyrillic `а`, and whose payload does the
/// same in a value and a key.
fn hostile_view() -> Value {
    let preview = Preview::from_value(&json!({
        "v": 1, "server_id": "srv-1", "proposal_id": "p-hostile", "kind": "note.write",
        "payload": {"user": "\u{430}dmin", "note": "pay \u{202E}exe.fdp\u{202C}", "r\u{43e}le\u{200B}": 1},
        "summary": "Grant \u{202E}nimda\u{202C} to \u{430}dmin\u{200B} now",
        "requested_by": "agent-7",
        "created_at": "2026-11-30T00:00:00Z",
        "expires_at": "2026-11-30T00:30:00Z",
        "policy_sha256": policy().sha256().to_hex(),
    }))
    .expect("preview");
    json!({
        "proposal_id": "p-hostile",
        "status": "PENDING",
        "preview": preview.to_value(),
        "preview_sha256": preview.sha256().to_hex(),
        "policy": policy().canonical_json(),
        "quorum": {"have": 0, "need": 1, "missing_groups": [], "approvers": [], "rejections": []},
        "decisions": [],
        "executable_until": null,
        "result": null,
    })
}

#[test]
fn hostile_text_is_escaped_and_lookalikes_are_named() {
    let text = render_plain(&hostile_view(), &server(), NOW).expect("checks pass");
    for hidden in ['\u{202E}', '\u{202C}', '\u{200B}', '\u{1b}'] {
        assert!(!text.contains(hidden), "raw {hidden:?} in {text}");
    }
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        "proposal        p-hostile  (PENDING)",
        "kind            note.write",
        r#"summary         "Grant \u{202e}nimda\u{202c} to аdmin\u{200b} now""#,
        "created         2026-11-30T00:00:00Z (1m ago)",
        "expires         2026-11-30T00:30:00Z (in 29m)",
        "policy          quorum 1 of [alice, bob], vetoes 1, executable for 10m after approval",
        r#"                "Write a note""#,
        r#"  "note": "pay \u{202e}exe.fdp\u{202c}","#,
        r#"  "rоle\u{200b}": 1,"#,
        r#"  "user": "аdmin""#,
        r#"WARNING: "аdmin" in summary mixes Cyrillic and Latin letters"#,
        r#"WARNING: "rоle" in a key of payload mixes Latin and Cyrillic letters"#,
        r#"WARNING: "аdmin" in payload.user mixes Cyrillic and Latin letters"#,
        "decisions:      none yet",
        "quorum          0 of 1, waiting for 1 more",
    ] {
        assert!(lines.contains(&want), "no line {want:?} in:\n{text}");
    }
    assert_eq!(text.matches("WARNING:").count(), 3, "{text}");
}

#[test]
fn the_plain_text_is_the_terminal_text_without_the_highlight() {
    let view = hostile_view();
    let checked = Checked::check(&view, None, &server()).expect("checks pass");
    let plain = render_plain(&view, &server(), NOW).expect("checks pass");
    assert_eq!(plain, checked.render(NOW, false));
    let coloured = checked.render(NOW, true);
    assert!(coloured.contains(&format!("\x1b[1;7m{}\x1b[0m", checked.hash.prefix(8))));
    assert!(coloured.contains(
        "\x1b[1;7mWARNING: \"аdmin\" in payload.user mixes Cyrillic and Latin letters\x1b[0m"
    ));
    assert_eq!(
        coloured.replace("\x1b[1;7m", "").replace("\x1b[0m", ""),
        plain
    );
}

#[test]
fn a_tampered_view_is_refused_with_a_reason() {
    let mut view = hostile_view();
    view["preview"]["summary"] = json!("something else");
    let e = render_plain(&view, &server(), NOW).expect_err("hash no longer matches");
    assert!(matches!(e, ShowError::HashMismatch { .. }), "{e}");
    assert!(e
        .to_string()
        .starts_with("PREVIEW HASH MISMATCH: the server claims preview_sha256 "));

    let other = ServerId::parse("srv-2").expect("server id");
    let e = render_plain(&hostile_view(), &other, NOW).expect_err("another server");
    assert_eq!(
        e.to_string(),
        "SERVER MISMATCH: this preview was made by server srv-1 but the server you are talking to is srv-2: refused, nothing signed"
    );

    let mut view = hostile_view();
    view["status"] = json!("PENDING\u{202E}");
    let e = render_plain(&view, &server(), NOW).expect_err("unknown status");
    assert_eq!(
        e.to_string(),
        r#"the server reports an unknown status "PENDING\u{202e}""#
    );

    let mut view = hostile_view();
    view["decisions"] = json!("none");
    let e = render_plain(&view, &server(), NOW).expect_err("decisions not a list");
    assert!(
        matches!(
            e,
            ShowError::NotUnderstood {
                field: "decisions",
                ..
            }
        ),
        "{e}"
    );
}
