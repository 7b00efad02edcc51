//! `approval-server stdio --connect URL` gives a stdio host the same service as
//! HTTP: the same tools with the same schemas, and the same codes for the same calls.

use approval_e2e::{Mcp, McpClient, Server, Stdio, World};
use serde_json::{json, Value};
use std::collections::BTreeMap;

use approval_e2e::NOTE_POLICY_ALICE_AND_BOB as POLICY;

fn by_name(tools: &[Value]) -> BTreeMap<String, Value> {
    tools
        .iter()
        .map(|t| (t["name"].as_str().unwrap_or_default().to_owned(), t.clone()))
        .collect()
}

#[tokio::test]
async fn stdio_lists_the_same_tools_as_http() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let http = server.mcp().await?;
    let stdio = Stdio::connect(&server.mcp_url, None).await?;

    let via_http = by_name(&http.list_tools().await?);
    let via_stdio = by_name(&stdio.list_tools().await?);
    let names: Vec<&str> = via_http.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        vec![
            "approval_execute",
            "approval_list",
            "approval_prepare",
            "approval_status",
            "approval_withdraw"
        ],
        "the agent must have these tools and no way to approve"
    );
    assert_eq!(
        via_http.keys().collect::<Vec<_>>(),
        via_stdio.keys().collect::<Vec<_>>()
    );
    for (name, t) in &via_http {
        let s = &via_stdio[name];
        assert_eq!(t["inputSchema"], s["inputSchema"], "{name} inputSchema");
        assert_eq!(t["outputSchema"], s["outputSchema"], "{name} outputSchema");
        assert_eq!(t["annotations"], s["annotations"], "{name} annotations");
        assert!(t["outputSchema"].is_object(), "{name} has no outputSchema");
    }
    assert_eq!(
        via_http["approval_execute"]["annotations"]["destructiveHint"],
        true
    );
    assert_eq!(
        via_http["approval_status"]["annotations"]["readOnlyHint"],
        true
    );

    let status = stdio.close().await?;
    assert!(status.success(), "the bridge exited with {status}");
    Ok(())
}

/// The same script of calls, on one transport; returns the codes it saw.
async fn script<C: McpClient>(c: &C, w: &World, server: &Server) -> anyhow::Result<Vec<String>> {
    let mut codes = Vec::new();
    let mut note = |r: &approval_e2e::ToolResult| {
        codes.push(format!(
            "{}{}",
            r.code(),
            if r.is_error { " (error)" } else { "" }
        ))
    };
    let unknown_kind = c.prepare("no.such.kind", json!({"text": "x"}), "").await?;
    note(&unknown_kind);
    let bad = c.prepare("note.write", json!({"nottext": 1}), "").await?;
    note(&bad);
    // 2^53 + 1 cannot be carried exactly: refused with a pointer, not rounded.
    let inexact = c
        .call_tool(
            "approval_prepare",
            serde_json::from_str(
                r#"{"kind": "note.write", "payload": {"text": "n", "n": 9007199254740993}}"#,
            )?,
        )
        .await?;
    note(&inexact);

    let prep = c
        .prepare("note.write", json!({"text": "via a transport"}), "s")
        .await?;
    note(&prep);
    let (id, hash) = (prep.proposal_id(), prep.preview_sha256());
    note(&c.status(&id).await?);
    note(&c.execute(&id, &hash).await?);
    w.signer("alice", server).approve(&id).await?;
    w.signer("bob", server).approve(&id).await?;
    note(&c.status(&id).await?);
    note(&c.execute(&id, &"f".repeat(64)).await?);
    let done = c.execute(&id, &hash).await?;
    note(&done);
    note(&c.execute(&id, &hash).await?);
    note(&c.status(&id).await?);
    note(&c.status("p-00000000000000000000000000000000").await?);
    note(&c.list(None).await?);
    Ok(codes)
}

#[tokio::test]
async fn stdio_and_http_give_the_same_codes() -> anyhow::Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", POLICY)?;
    let server = w.start()?;
    let http = server.mcp().await?;
    let stdio = Stdio::connect(&server.mcp_url, None).await?;

    let via_http = script(&http, &w, &server).await?;
    let via_stdio = script(&stdio, &w, &server).await?;
    let expected = vec![
        "UNKNOWN_KIND (error)",
        "INVALID_PAYLOAD (error)",
        "INVALID_PAYLOAD (error)",
        "PENDING_QUORUM",
        "PENDING_QUORUM",
        "PENDING_QUORUM (error)",
        "QUORUM_REACHED",
        "PREVIEW_MISMATCH (error)",
        "SUCCEEDED",
        "ALREADY_EXECUTED_NO_REPLAY (error)",
        "SUCCEEDED",
        "UNKNOWN_PROPOSAL (error)",
        "OK",
    ];
    assert_eq!(via_http, expected, "HTTP");
    assert_eq!(via_stdio, expected, "stdio");

    // One service behind both: what stdio made, HTTP sees, as the same agent.
    let listed = http.list(Some("SUCCEEDED")).await?;
    assert_eq!(
        listed.structured["proposals"].as_array().map(Vec::len),
        Some(2),
        "{}",
        listed.structured
    );

    // A protocol fault stays a JSON-RPC error through the bridge.
    let fault = stdio
        .rpc(
            "tools/call",
            json!({"name": "approval_approve", "arguments": {}}),
        )
        .await?;
    let refused =
        |v: &Value| v.get("error").is_some() || v.pointer("/result/isError") == Some(&json!(true));
    assert!(refused(&fault), "{fault}");
    let fault_http = http
        .rpc(
            "tools/call",
            json!({"name": "approval_approve", "arguments": {}}),
        )
        .await?;
    assert!(refused(&fault_http), "{fault_http}");
    // The same refusal both ways (a JSON-RPC error code or a tool result code).
    let shape = |v: &Value| {
        (
            v.pointer("/error/code").cloned(),
            v.pointer("/result/structuredContent/code").cloned(),
        )
    };
    assert_eq!(shape(&fault), shape(&fault_http));
    drop(stdio);
    Ok(())
}

#[tokio::test]
async fn stdio_reports_an_unreachable_service_as_an_error() -> anyhow::Result<()> {
    // A port nothing listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let err = match Stdio::connect(&url, None).await {
        Ok(_) => anyhow::bail!("initialize succeeded against nothing"),
        Err(e) => format!("{e:#}"),
    };
    // Issue 16: a closed port is named as such, with what to check.
    assert!(
        err.contains(&format!(
            "connection refused at {url}: is the service running?"
        )),
        "{err}"
    );
    assert!(Mcp::connect(&url, None).await.is_err());
    Ok(())
}
