//! Notifications from the server, against real processes: the real server binary,
//! a real HTTP receiver (axum) that can be down, slow or answer 500, and a real SMTP
//! server (aiosmtpd, installed by this test into a venv under target/).
//!
//! The agent is the attacker here: what it writes (summary) must not inject mail
//! headers, Slack links or mentions; it must never slow or fail its own proposal by
//! breaking a receiver; and what was queued survives a crash and arrives once.

mod support;

use approval_e2e::{poll_until, McpClient, World};
use hmac::{Hmac, Mac};
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

const HOSTILE: &str = "<https://evil.example/approve|click to approve> <!channel> & *bold* `x` \u{202e}txt.exe\r\nBcc: victim@evil.example";

#[tokio::test]
async fn agent_text_cannot_form_slack_links_and_webhooks_carry_no_payload() -> anyhow::Result<()> {
    let (json_url, json_rx) = receiver_on("127.0.0.1:0".parse()?, &[]).await?;
    let (slack_url, slack_rx) = receiver_on("127.0.0.1:0".parse()?, &[]).await?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy(&format!(
            "[[notify]]\ntype = \"webhook\"\nurl = \"{json_url}\"\nsecret_from = \"HOOK_SECRET\"\n\
             [[notify]]\ntype = \"webhook\"\nformat = \"slack\"\nurl = \"{slack_url}\"\n"
        )),
    )?;
    let server = start(&w, &[], &[("HOOK_SECRET", "s3cret")])?;
    let mcp = server.mcp().await?;
    let prep = mcp
        .prepare("note.write", json!({"text": "PAYLOAD-SECRET-42"}), HOSTILE)
        .await?;
    prep.expect("PENDING_QUORUM", false);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    // A `waiting` notice says who is still needed only while the proposal is still
    // PENDING when it is sent: let the first be delivered before anyone approves
    // (on a loaded machine the deliverer can otherwise send it after quorum).
    poll_until(
        "the first json notification",
        Duration::from_secs(20),
        || async { Ok((!json_rx.bodies().is_empty()).then_some(())) },
    )
    .await?;
    w.signer("alice", &server).approve(&id).await?;
    w.signer("bob", &server).approve(&id).await?;
    mcp.wait_status(&id, "APPROVED", Duration::from_secs(10))
        .await?;
    mcp.execute(&id, &hash).await?.expect("SUCCEEDED", false);

    // waiting (proposed), waiting (alice), quorum_reached (bob), executed.
    let bodies = poll_until(
        "four json notifications",
        Duration::from_secs(20),
        || async {
            let b = json_rx.bodies();
            Ok((b.len() >= 4).then_some(b))
        },
    )
    .await?;
    let waiting = of(&bodies, &id, "waiting");
    assert_eq!(waiting.len(), 2, "{bodies:#?}");
    let first = &waiting[0];
    assert_eq!(first["kind"], "note.write");
    assert_eq!(first["preview_sha256_prefix"], hash[..8]);
    assert_eq!(first["approvals"], json!([]));
    assert_eq!(
        first["still_needed"],
        "2 more approval(s) from alice, bob, carol"
    );
    assert_eq!(first["commands"]["show"], format!("signer-cli show {id}"));
    assert_eq!(
        first["commands"]["approve"],
        format!("signer-cli approve {id}")
    );
    let summary = first["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("\\u{202e}") && summary.contains("\\r\\nBcc:"),
        "{summary}"
    );
    assert!(
        !summary.contains('\r') && !summary.contains('\u{202e}'),
        "{summary}"
    );
    assert_eq!(waiting[1]["approvals"], json!(["alice"]));
    assert_eq!(of(&bodies, &id, "quorum_reached").len(), 1, "{bodies:#?}");
    let executed = of(&bodies, &id, "executed");
    assert_eq!(executed.len(), 1, "{bodies:#?}");
    assert_eq!(executed[0]["outcome"], "SUCCEEDED");
    for b in &bodies {
        let text = b.to_string();
        assert!(
            !text.contains("PAYLOAD-SECRET-42"),
            "payload leaked: {text}"
        );
        assert!(b.get("payload").is_none(), "{text}");
        assert!(
            !text.contains("/v1/"),
            "a link into the approver API: {text}"
        );
    }
    // Every body is signed with the server's secret, never a policy's.
    for (h, _, raw) in json_rx.requests() {
        let sig = h
            .get("x-approval-signature")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cret")?;
        mac.update(raw.as_bytes());
        assert_eq!(
            sig,
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        );
        assert!(h.get("x-approval-delivery").is_some());
    }

    let slack = poll_until(
        "four slack notifications",
        Duration::from_secs(20),
        || async {
            let b = slack_rx.bodies();
            Ok((b.len() >= 4).then_some(b))
        },
    )
    .await?;
    for b in &slack {
        let m = b["blocks"][0]["text"]["text"].as_str().unwrap_or_default();
        let t = b["text"].as_str().unwrap_or_default();
        // No `<url|label>` link, `<!channel>` or `<@user>` mention can be formed.
        assert!(
            !m.contains('<') && !m.contains('>') && !t.contains('<'),
            "{m}"
        );
        assert!(!m.contains("PAYLOAD-SECRET-42"), "{m}");
        assert_eq!(b["blocks"][0]["text"]["type"], "mrkdwn");
    }
    let m = slack[0]["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        m.contains("summary: `&lt;https://evil.example/approve|click to approve&gt; &lt;!channel&gt; &amp; *bold* \\u{60}x\\u{60} \\u{202e}txt.exe\\r\\nBcc: victim@evil.example`"),
        "{m}"
    );
    assert!(m.contains(&format!("`signer-cli approve {id}`")), "{m}");

    let counts = poll_until("delivered counted", Duration::from_secs(10), || async {
        let n = notifications(&server).await?;
        Ok((n["delivered"].as_u64() >= Some(4) && n["queued"] == 0).then_some(n))
    })
    .await?;
    assert_eq!(counts["failed"], 0, "{counts}");
    Ok(())
}

#[tokio::test]
async fn receiver_down_slow_or_failing_never_slows_a_proposal_and_is_retried_until_delivered(
) -> anyhow::Result<()> {
    // Slow (past the 1 s time-out), then 500 twice, then 200.
    let (flaky_url, flaky) = receiver_on(
        "127.0.0.1:0".parse()?,
        &[Answer::Slow, Answer::Status(500), Answer::Status(500)],
    )
    .await?;
    // Nobody listens here until later.
    let down = free_addr()?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy(&format!(
            "[[notify]]\ntype = \"webhook\"\nurl = \"{flaky_url}\"\n\
             [[notify]]\ntype = \"webhook\"\nurl = \"http://{down}/hook\"\n"
        )),
    )?;
    let server = start(&w, &[], &[])?;
    let mcp = server.mcp().await?;
    // Proposals answer at once while the receivers fail: delivery is not on their path.
    let mut ids = Vec::new();
    for i in 0..5 {
        let t = Instant::now();
        let prep = mcp
            .prepare("note.write", json!({"text": format!("n{i}")}), "s")
            .await?;
        prep.expect("PENDING_QUORUM", false);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "a proposal took {:?} while the receivers failed",
            t.elapsed()
        );
        ids.push(prep.proposal_id());
    }
    // The failing receiver gets all five after its failures.
    poll_until(
        "the flaky receiver to get all five",
        Duration::from_secs(25),
        || async { Ok((flaky.bodies().len() >= 5).then_some(())) },
    )
    .await?;
    let log = server.log();
    assert!(
        log.contains("notification not delivered: the receiver answered 500"),
        "{log}"
    );
    assert!(
        log.contains("notification not delivered: no answer within the time-out"),
        "{log}"
    );
    assert!(
        log.contains("notification not delivered: cannot connect"),
        "{log}"
    );
    let n = notifications(&server).await?;
    assert_eq!(n["queued"], 5, "still waiting for the down receiver: {n}");

    // The down receiver comes up: everything queued reaches it, once.
    let (_, came_up) = receiver_on(down, &[]).await?;
    poll_until(
        "the recovered receiver to get all five",
        Duration::from_secs(25),
        || async { Ok((came_up.bodies().len() >= 5).then_some(())) },
    )
    .await?;
    poll_until("the outbox to drain", Duration::from_secs(10), || async {
        let n = notifications(&server).await?;
        Ok((n["queued"] == 0 && n["delivered"] == 5).then_some(()))
    })
    .await?;
    for id in &ids {
        assert_eq!(of(&came_up.bodies(), id, "waiting").len(), 1);
        // Delivered channels are not sent to again on the other channel's retries.
        assert_eq!(of(&flaky.bodies(), id, "waiting").len(), 1);
    }
    Ok(())
}

#[tokio::test]
async fn queued_notification_survives_a_crash_and_arrives_once() -> anyhow::Result<()> {
    let down = free_addr()?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy(&format!(
            "[[notify]]\ntype = \"webhook\"\nurl = \"http://{down}/hook\"\n"
        )),
    )?;
    let mut server = start(&w, &[], &[])?;
    let mcp = server.mcp().await?;
    let prep = mcp.prepare("note.write", json!({"text": "a"}), "s").await?;
    let id = prep.proposal_id();
    poll_until("a failed attempt", Duration::from_secs(10), || async {
        Ok(server
            .log()
            .contains("notification not delivered")
            .then_some(()))
    })
    .await?;
    assert_eq!(notifications(&server).await?["queued"], 1);
    server.kill();

    let (_, rx) = receiver_on(down, &[]).await?;
    let server = start(&w, &[], &[])?;
    poll_until(
        "the queued notification after the restart",
        Duration::from_secs(15),
        || async { Ok((!rx.bodies().is_empty()).then_some(())) },
    )
    .await?;
    poll_until("the outbox to drain", Duration::from_secs(10), || async {
        Ok((notifications(&server).await?["queued"] == 0).then_some(()))
    })
    .await?;
    // Several more polls of the outbox: nothing is sent twice.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let b = rx.bodies();
    assert_eq!(b.len(), 1, "{b:#?}");
    assert_eq!(b[0]["proposal_id"], id);
    assert_eq!(b[0]["event"], "waiting");
    Ok(())
}

#[tokio::test]
async fn undeliverable_notification_is_given_up_after_a_bounded_time_and_counted(
) -> anyhow::Result<()> {
    let down = free_addr()?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy(&format!(
            "[[notify]]\ntype = \"webhook\"\nurl = \"http://{down}/hook\"\n"
        )),
    )?;
    let server = start(
        &w,
        &[],
        &[("APPROVAL_NOTIFY_TIMINGS_MS", "100,200,1500,500,50")],
    )?;
    let mcp = server.mcp().await?;
    mcp.prepare("note.write", json!({"text": "a"}), "s")
        .await?
        .expect("PENDING_QUORUM", false);
    let n = poll_until(
        "the notification to be given up",
        Duration::from_secs(15),
        || async {
            let n = notifications(&server).await?;
            Ok((n["failed"] == 1).then_some(n))
        },
    )
    .await?;
    assert_eq!(n["queued"], 0, "{n}");
    assert_eq!(n["delivered"], 0, "{n}");
    assert!(
        server.log().contains("notification given up"),
        "{}",
        server.log()
    );
    Ok(())
}

#[tokio::test]
async fn summary_with_crlf_cannot_inject_mail_headers_or_recipients() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob", "carol"])?;
    let Some(smtp) = Smtp::start(w.dir.path())? else {
        return Ok(());
    };
    // The default channels file, for kinds whose policy has none.
    let defaults = w.dir.path().join("notify.toml");
    std::fs::write(
        &defaults,
        "[[notify]]\ntype = \"email\"\nto = [\"approvers@example.com\"]\n",
    )?;
    w.write_policy("note.write.toml", &policy(""))?;
    let relay = format!("smtp://127.0.0.1:{}", smtp.port);
    let server = start(
        &w,
        &[
            "--notify-default",
            &defaults.to_string_lossy(),
            "--smtp-from",
            "gate@example.com",
        ],
        &[("APPROVAL_SMTP_URL", &relay)],
    )?;
    let mcp = server.mcp().await?;
    let summary = "hi\r\nBcc: victim@evil.example\r\nSubject: approve now\n\r\n.\r\nMAIL FROM:<x@evil.example>";
    let prep = mcp
        .prepare("note.write", json!({"text": "PAYLOAD-SECRET-42"}), summary)
        .await?;
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    let mails = poll_until("one mail", Duration::from_secs(20), || async {
        let m = smtp.mails();
        Ok((!m.is_empty()).then_some(m))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mails = if smtp.mails().len() > mails.len() {
        smtp.mails()
    } else {
        mails
    };
    assert_eq!(mails.len(), 1, "{mails:#?}");
    let m = &mails[0];
    assert_eq!(m["rcpt_tos"], json!(["approvers@example.com"]), "{m}");
    assert_eq!(m["mail_from"], "gate@example.com");
    let data = m["data"].as_str().unwrap_or_default();
    let (head, body) = data.split_once("\r\n\r\n").unwrap_or((data, ""));
    // Unfolded (RFC 5322 folding: CRLF before a space continues the header).
    let head = head.replace("\r\n ", " ");
    let header_names: Vec<String> = head
        .split("\r\n")
        .filter(|l| !l.starts_with([' ', '\t']))
        .filter_map(|l| l.split_once(':').map(|(k, _)| k.to_ascii_lowercase()))
        .collect();
    assert!(!header_names.iter().any(|h| h == "bcc"), "{head}");
    assert_eq!(
        header_names.iter().filter(|h| *h == "subject").count(),
        1,
        "{head}"
    );
    assert!(
        head.contains(&format!(
            "Subject: [approval-gate] {id} (note.write) waits for approval"
        )),
        "{head}"
    );
    // The body is quoted-printable or 7bit; either way the escaped summary is there.
    let flat = body.replace("=\r\n", "");
    assert!(
        flat.contains("hi\\r\\nBcc: victim@evil.example\\r\\nSubject: approve now"),
        "{flat}"
    );
    assert!(flat.contains(&format!("signer-cli show {id}")), "{flat}");
    assert!(flat.contains(&format!("signer-cli approve {id}")), "{flat}");
    assert!(flat.contains(&hash[..8]), "{flat}");
    assert!(
        !data.contains("PAYLOAD-SECRET-42"),
        "payload leaked: {data}"
    );
    let n = notifications(&server).await?;
    assert_eq!(n["delivered"], 1, "{n}");
    Ok(())
}

#[tokio::test]
async fn proposal_flood_past_the_outbox_cap_still_commits_and_is_counted_as_dropped(
) -> anyhow::Result<()> {
    let down = free_addr()?;
    let w = World::new(&["alice", "bob", "carol"])?;
    w.write_policy(
        "note.write.toml",
        &policy(&format!(
            "[[notify]]\ntype = \"webhook\"\nurl = \"http://{down}/hook\"\n"
        )),
    )?;
    let server = start(&w, &["--notify-outbox-cap", "3"], &[])?;
    let mcp = server.mcp().await?;
    for i in 0..5 {
        mcp.prepare("note.write", json!({"text": format!("n{i}")}), "flood")
            .await?
            .expect("PENDING_QUORUM", false);
    }
    let n = notifications(&server).await?;
    assert_eq!(n["queued"], 3, "{n}");
    assert_eq!(n["dropped"], 2, "{n}");
    assert!(
        server.log().contains("notification outbox full"),
        "{}",
        server.log()
    );
    Ok(())
}
