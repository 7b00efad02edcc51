//! Notifications that arrive, tell the truth and show what they carry (issue #31,
//! items 3, 4 and 8), against the real server binary, real HTTP receivers and a
//! real SMTP server. The agent is the attacker: it floods a failing channel to hold
//! back another kind's notification, and writes text that renders blank.

mod support;

use approval_e2e::{poll_until, McpClient, World};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::*;

/// The production timings (ms): 5 s first back-off, 5 min longest, 1 h give-up,
/// 10 s time-out, 1 s poll.
const PRODUCTION: &str = "5000,300000,3600000,10000,1000";

fn webhook(url: &str) -> String {
    format!("[[notify]]\ntype = \"webhook\"\nurl = \"{url}\"\n")
}

#[tokio::test]
async fn a_thousand_entries_failing_on_one_channel_do_not_delay_another_kinds_notification(
) -> anyhow::Result<()> {
    let (flood_url, flood_hits) = refusing_receiver(429).await?;
    let (prod_url, prod_rx) = receiver_on("127.0.0.1:0".parse()?, &[]).await?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "flood.note.toml",
        &kind_policy("flood.note", "30m", &webhook(&flood_url)),
    )?;
    w.write_policy(
        "deploy.prod.toml",
        &kind_policy("deploy.prod", "30m", &webhook(&prod_url)),
    )?;
    let server = start(&w, &[], &[("APPROVAL_NOTIFY_TIMINGS_MS", PRODUCTION)])?;
    // The agent makes 1,000 entries for the channel that answers 429, 8 at a time.
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..8 {
        let mcp = server.mcp().await?;
        tasks.spawn(async move {
            for i in 0..125 {
                mcp.prepare("flood.note", json!({"text": format!("f{t}-{i}")}), "flood")
                    .await?
                    .expect("PENDING_QUORUM", false);
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    // They are queued and failing.
    poll_until(
        "the flood to be queued and refused",
        Duration::from_secs(20),
        || async {
            let n = notifications(&server).await?;
            Ok(
                (n["queued"].as_u64() >= Some(1_000) && flood_hits.load(Ordering::SeqCst) >= 100)
                    .then_some(()),
            )
        },
    )
    .await?;
    assert!(
        server
            .log()
            .contains("notification not delivered: the receiver answered 429"),
        "{}",
        server.log()
    );

    // Another kind's notification goes out within 5 s all the same.
    let mcp = server.mcp().await?;
    let t = Instant::now();
    let prep = mcp
        .prepare("deploy.prod", json!({"text": "ship it"}), "deploy")
        .await?;
    prep.expect("PENDING_QUORUM", false);
    let id = prep.proposal_id();
    poll_until(
        "the deploy.prod notification",
        Duration::from_secs(5),
        || async { Ok((!of(&prod_rx.bodies(), &id, "waiting").is_empty()).then_some(())) },
    )
    .await?;
    let took = t.elapsed();
    eprintln!(
        "deploy.prod notified {took:?} after its proposal, behind 1000 failing entries ({} refused attempts so far)",
        flood_hits.load(Ordering::SeqCst)
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The flood is still queued (and still tried): nothing was dropped to make room.
    let n = notifications(&server).await?;
    assert!(n["queued"].as_u64() >= Some(1_000), "{n}");
    assert_eq!(n["dropped"], 0, "{n}");
    Ok(())
}

/// Every body of one proposal.
fn all_of(bodies: &[Value], id: &str) -> Vec<Value> {
    bodies
        .iter()
        .filter(|b| b["proposal_id"] == id)
        .cloned()
        .collect()
}

#[tokio::test]
async fn each_terminal_change_is_announced_as_itself_and_never_invites_an_approval(
) -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    let Some(smtp) = Smtp::start(w.dir.path())? else {
        return Ok(());
    };
    // The webhook receiver is down until every proposal has ended: each notice,
    // the `waiting` ones too, is delivered after its proposal can no longer be approved.
    let down = free_addr()?;
    let defaults = w.dir.path().join("notify.toml");
    std::fs::write(
        &defaults,
        format!(
            "{}[[notify]]\ntype = \"email\"\nto = [\"approvers@example.com\"]\n",
            webhook(&format!("http://{down}/hook"))
        ),
    )?;
    w.write_policy("note.write.toml", &kind_policy("note.write", "30m", ""))?;
    w.write_policy("note.short.toml", &kind_policy("note.short", "2s", ""))?;
    w.write_policy("note.edit.toml", &kind_policy("note.edit", "30m", ""))?;
    let relay = format!("smtp://127.0.0.1:{}", smtp.port);
    let server = start(
        &w,
        &["--notify-default", &defaults.to_string_lossy()],
        &[("APPROVAL_SMTP_URL", &relay)],
    )?;
    let mcp = server.mcp().await?;

    // Revoked: approved by alice and bob, then revoked by bob.
    let revoked = mcp
        .prepare("note.write", json!({"text": "r"}), "to revoke")
        .await?
        .proposal_id();
    w.signer("alice", &server).approve(&revoked).await?;
    w.signer("bob", &server).approve(&revoked).await?;
    mcp.wait_status(&revoked, "APPROVED", Duration::from_secs(10))
        .await?;
    let r = w.signer("bob", &server).revoke(&revoked).await?;
    assert_eq!(r["status"], "REVOKED", "{r}");
    // Withdrawn by the agent.
    let withdrawn = mcp
        .prepare("note.write", json!({"text": "w"}), "to withdraw")
        .await?
        .proposal_id();
    mcp.withdraw(&withdrawn).await?.expect("WITHDRAWN", false);
    // Expired (ttl 2 s).
    let expired = mcp
        .prepare("note.short", json!({"text": "e"}), "to expire")
        .await?
        .proposal_id();
    // Policy changed (its policy edited, then SIGHUP).
    let voided = mcp
        .prepare("note.edit", json!({"text": "p"}), "to void")
        .await?
        .proposal_id();
    w.write_policy(
        "note.edit.toml",
        &kind_policy("note.edit", "30m", "").replace("quorum = 2", "quorum = 3"),
    )?;
    server.sighup()?;
    mcp.wait_status(&voided, "POLICY_CHANGED", Duration::from_secs(10))
        .await?;
    mcp.wait_status(&expired, "EXPIRED", Duration::from_secs(15))
        .await?;

    let (_, rx) = receiver_on(down, &[]).await?;
    let want = [
        (&revoked, "revoked"),
        (&withdrawn, "withdrawn"),
        (&expired, "expired"),
        (&voided, "policy_changed"),
    ];
    let bodies = poll_until(
        "every terminal event by webhook",
        Duration::from_secs(20),
        || async {
            let b = rx.bodies();
            Ok(want
                .iter()
                .all(|(id, ev)| of(&b, id, ev).len() == 1)
                .then_some(b))
        },
    )
    .await?;
    let r = &of(&bodies, &revoked, "revoked")[0];
    assert!(
        r["title"]
            .as_str()
            .is_some_and(|t| t.contains("was revoked by bob")),
        "{r}"
    );
    assert_eq!(r["by"], "bob", "{r}");
    for (id, ev) in want {
        for b in all_of(&bodies, id) {
            // Sent after the end: nothing invites an approval that would fail.
            assert!(b["commands"].get("approve").is_none(), "{ev}: {b}");
            assert!(b["still_needed"].is_null(), "{ev}: {b}");
            assert_ne!(b["status"], "PENDING", "{ev}: {b}");
            if b["event"] == "waiting" {
                assert!(
                    b["title"]
                        .as_str()
                        .is_some_and(|t| t.contains("no longer waits for approval")),
                    "{ev}: {b}"
                );
            }
        }
    }
    // The same events by mail.
    let subjects = [
        (&revoked, "was revoked by bob"),
        (&withdrawn, "was withdrawn by the agent"),
        (&expired, "expired"),
        (&voided, "ended POLICY_CHANGED"),
    ];
    let mails = poll_until(
        "every terminal event by mail",
        Duration::from_secs(20),
        || async {
            let m = smtp.mails();
            let subject_lines: Vec<String> = m
                .iter()
                .map(|x| x["data"].as_str().unwrap_or_default().replace("\r\n ", " "))
                .collect();
            Ok(subjects
                .iter()
                .all(|(id, s)| {
                    subject_lines.iter().any(|d| {
                        d.contains(&format!("Subject: [approval-gate] {id} (")) && d.contains(s)
                    })
                })
                .then_some(m))
        },
    )
    .await?;
    // No mail about the revoked proposal after its end says it waits for carol.
    for m in &mails {
        let d = m["data"].as_str().unwrap_or_default().replace("=\r\n", "");
        if d.contains(&format!("signer-cli show {revoked}")) && d.contains("revoked by bob") {
            assert!(!d.contains("signer-cli approve"), "{d}");
            assert!(!d.contains("more approval(s) from carol"), "{d}");
        }
    }
    Ok(())
}

/// Characters that render blank or as nothing, of the classes `signer-cli` escapes.
const BLANKS: &[(char, &str)] = &[
    ('\u{3164}', "\\u{3164}"),   // HANGUL FILLER
    ('\u{2800}', "\\u{2800}"),   // BRAILLE PATTERN BLANK
    ('\u{FFA0}', "\\u{ffa0}"),   // HALFWIDTH HANGUL FILLER
    ('\u{115F}', "\\u{115f}"),   // HANGUL CHOSEONG FILLER
    ('\u{1D159}', "\\u{1d159}"), // MUSICAL SYMBOL NULL NOTEHEAD
    ('\u{00A0}', "\\u{a0}"),     // NO-BREAK SPACE
    ('\u{3000}', "\\u{3000}"),   // IDEOGRAPHIC SPACE
    ('\u{200B}', "\\u{200b}"),   // ZERO WIDTH SPACE
    ('\u{202E}', "\\u{202e}"),   // RIGHT-TO-LEFT OVERRIDE
    ('\u{E0041}', "\\u{e0041}"), // TAG LATIN CAPITAL LETTER A
    ('\u{E000}', "\\u{e000}"),   // private use
];

fn hostile_summary() -> String {
    let mut s = String::from("pay \u{430}dmin");
    for (c, _) in BLANKS {
        s.push(' ');
        s.push(*c);
    }
    s
}

fn assert_escaped(what: &str, text: &str) {
    for (c, escaped) in BLANKS {
        assert!(
            !text.contains(*c),
            "{what} carries U+{:04X} raw: {text}",
            *c as u32
        );
        assert!(text.contains(escaped), "{what} lacks {escaped}: {text}");
    }
}

/// A mail's body as text, decoded from the transfer encoding lettre chose
/// (7bit/8bit, quoted-printable or base64).
fn mail_text(data: &str) -> anyhow::Result<String> {
    use base64::Engine as _;
    let (head, body) = data.split_once("\r\n\r\n").unwrap_or((data, ""));
    let head = head.to_ascii_lowercase();
    if head.contains("content-transfer-encoding: base64") {
        let raw: String = body.split_whitespace().collect();
        return Ok(String::from_utf8(
            base64::engine::general_purpose::STANDARD.decode(raw)?,
        )?);
    }
    if head.contains("content-transfer-encoding: quoted-printable") {
        let flat = body.replace("=\r\n", "");
        let b = flat.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'=' {
                if let Some(v) = flat
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    out.push(v);
                    i += 3;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        return Ok(String::from_utf8(out)?);
    }
    Ok(body.to_string())
}

#[tokio::test]
async fn blank_rendering_characters_reach_mail_webhook_json_and_slack_escaped() -> anyhow::Result<()>
{
    let w = World::new(&["alice", "bob", "carol"])?;
    let Some(smtp) = Smtp::start(w.dir.path())? else {
        return Ok(());
    };
    let (json_url, json_rx) = receiver_on("127.0.0.1:0".parse()?, &[]).await?;
    let (slack_url, slack_rx) = receiver_on("127.0.0.1:0".parse()?, &[]).await?;
    w.write_policy(
        "note.write.toml",
        &kind_policy(
            "note.write",
            "30m",
            &format!(
                "{}[[notify]]\ntype = \"webhook\"\nformat = \"slack\"\nurl = \"{slack_url}\"\n\
                 [[notify]]\ntype = \"email\"\nto = [\"approvers@example.com\"]\n",
                webhook(&json_url)
            ),
        ),
    )?;
    let relay = format!("smtp://127.0.0.1:{}", smtp.port);
    let server = start(&w, &[], &[("APPROVAL_SMTP_URL", &relay)])?;
    let mcp = server.mcp().await?;
    let id = mcp
        .prepare("note.write", json!({"text": "x"}), &hostile_summary())
        .await?
        .proposal_id();

    let json_body = poll_until("the json webhook", Duration::from_secs(20), || async {
        let r = json_rx.requests();
        Ok(r.into_iter().find(|(_, b, _)| b["proposal_id"] == id))
    })
    .await?;
    let summary = json_body.1["summary"].as_str().unwrap_or_default();
    assert_escaped("the JSON summary", summary);
    // Nothing raw anywhere in the bytes sent either.
    assert_escaped("the JSON body", &json_body.2);
    // The look-alike word is named, as signer-cli names it.
    let warnings = json_body.1["warnings"].to_string();
    assert!(
        warnings.contains("mixes Cyrillic and Latin letters"),
        "{}",
        json_body.1
    );

    let slack = poll_until("the slack webhook", Duration::from_secs(20), || async {
        let r = slack_rx.requests();
        Ok(r.into_iter().next())
    })
    .await?;
    let m = slack.1["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap_or_default();
    assert_escaped("the Slack text", m);
    assert!(m.contains("mixes Cyrillic and Latin letters"), "{m}");

    let mail = poll_until("the mail", Duration::from_secs(20), || async {
        Ok(smtp.mails().into_iter().next())
    })
    .await?;
    let text = mail_text(mail["data"].as_str().unwrap_or_default())?;
    assert_escaped("the mail", &text);
    assert!(text.contains("mixes Cyrillic and Latin letters"), "{text}");
    Ok(())
}
