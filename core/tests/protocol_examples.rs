//! Every ```json example of docs/PROTOCOL.md is checked against the type it shows.
//!
//! Each example is preceded by an HTML comment naming its type, `<!-- wire: TYPE -->`
//! (the example must deserialise into TYPE and serialise back to the same JSON, so
//! a field the type lacks or names otherwise fails), or saying why it is not one,
//! `<!-- not-wire: reason -->`. An example with neither fails, so a new example
//! cannot drift from the code unnoticed.

use approval_core::api;
use approval_core::Attestation;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// Parses `example` as `T` and checks that it serialises back to the same JSON.
fn round_trip<T: DeserializeOwned + Serialize>(example: &Value) -> Result<(), String> {
    let parsed: T = serde_json::from_value(example.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&parsed).map_err(|e| e.to_string())?;
    if &back == example {
        Ok(())
    } else {
        Err(format!("serialises back as {back}"))
    }
}

/// The check for a type named in a `wire:` marker.
fn check(ty: &str, example: &Value) -> Result<(), String> {
    match ty {
        "Attestation" => round_trip::<Attestation>(example),
        "api::ErrorBody" => round_trip::<api::ErrorBody>(example),
        "api::ProposalView" => round_trip::<api::ProposalView>(example),
        "api::ProposalPage" => round_trip::<api::ProposalPage>(example),
        "api::Decided" => round_trip::<api::Decided>(example),
        "api::AlreadyRecorded" => round_trip::<api::AlreadyRecorded>(example),
        "api::Health" => round_trip::<api::Health>(example),
        "api::ReauthEvent" => round_trip::<api::ReauthEvent>(example),
        "api::PageState" => round_trip::<api::PageState>(example),
        "api::EnrolmentOptions" => round_trip::<api::EnrolmentOptions>(example),
        "api::EnrolmentRequest" => round_trip::<api::EnrolmentRequest>(example),
        "api::Enrolled" => round_trip::<api::Enrolled>(example),
        "SignedDecision" => round_trip::<approval_core::SignedDecision>(example),
        "governance::Bundle" => round_trip::<approval_core::governance::Bundle>(example),
        other => Err(format!(
            "no check for the type {other:?}: add it to this test"
        )),
    }
}

/// What the line before an example says about it.
enum Marker {
    Wire(String),
    NotWire,
}

fn marker(line: &str) -> Option<Marker> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    if let Some(ty) = inner.strip_prefix("wire:") {
        return Some(Marker::Wire(ty.trim().to_owned()));
    }
    inner
        .strip_prefix("not-wire:")
        .filter(|why| !why.trim().is_empty())
        .map(|_| Marker::NotWire)
}

#[test]
fn every_protocol_example_parses_into_the_type_it_names() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md");
    let text = std::fs::read_to_string(path).expect("docs/PROTOCOL.md is readable");
    let lines: Vec<&str> = text.lines().collect();
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "```json" {
            i += 1;
            continue;
        }
        let start = i + 1;
        let end = (start..lines.len())
            .find(|&j| lines[j].trim() == "```")
            .expect("every ```json block is closed");
        let body = lines[start..end].join("\n");
        let at = format!("docs/PROTOCOL.md line {}", i + 1);
        match i.checked_sub(1).and_then(|p| marker(lines[p])) {
            None => failures.push(format!(
                "{at}: no `<!-- wire: TYPE -->` or `<!-- not-wire: reason -->` on the line before the example"
            )),
            Some(Marker::NotWire) => {}
            Some(Marker::Wire(ty)) => {
                checked += 1;
                let result = serde_json::from_str::<Value>(&body)
                    .map_err(|e| format!("not JSON: {e}"))
                    .and_then(|v| check(&ty, &v));
                if let Err(e) = result {
                    failures.push(format!("{at} ({ty}): {e}"));
                }
            }
        }
        i = end + 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked > 0, "no example of docs/PROTOCOL.md was checked");
}
