//! Signed-message parsing. The input is split at its first NUL byte: the first
//! part is read as a decision message and as an `Authorization` header; the rest
//! is the path the read signature must cover.
//!
//! Invariants: no panic; a parsed decision message re-serialises to exactly the
//! same text; `verify_read` with the fixed keyring accepts only a header whose
//! signature verifies under the named approver's key (checked independently);
//! a `SignedDecision` JSON body never verifies for a hash other than the one
//! it was signed over (checked for an accepted one against a second hash).
#![no_main]

use approval_core::json;
use approval_core::message::{
    decision_message, parse_decision_message, read_message, verify_read, Signature, SignedDecision,
};
use approval_core::{ApproverName, ServerId, Sha256Hex, Timestamp};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (head, path) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"/v1/proposals?status=pending"[..]),
    };
    let (Ok(head), Ok(path)) = (std::str::from_utf8(head), std::str::from_utf8(path)) else {
        return;
    };
    if let Ok((d, h, r)) = parse_decision_message(head) {
        let again = decision_message(d, &h, &r).expect("a parsed reason is within limits");
        assert_eq!(again, head, "decision message does not round-trip");
    }
    let kr = approval_fuzz::keyring();
    let now = Timestamp::from_unix(approval_fuzz::NOW);
    let srv = ServerId::parse(approval_fuzz::SERVER_ID).expect("a valid server id");
    if let Ok(name) = verify_read(&kr, &srv, head, "GET", path, now) {
        // Check the acceptance independently of verify_read.
        let parts: Vec<&str> = head.split(' ').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], "Approval");
        assert_eq!(ApproverName::parse(parts[1]).ok(), Some(name.clone()));
        let ts: i64 = parts[2].parse().expect("accepted timestamp is a number");
        assert!((ts - now.unix()).abs() <= 300, "stale read accepted");
        let sig = Signature::parse(parts[3]).expect("accepted signature decodes");
        let key = kr.key(&name).expect("accepted approver has a key in the keyring");
        key.verify_strict(read_message(&srv, ts, "GET", path).as_bytes(), &sig)
            .expect("accepted read signature verifies");
        assert!(
            verify_read(&kr, &srv, head, "POST", path, now).is_err(),
            "a read signed for GET verified for POST"
        );
    }
    if let Ok(v) = json::parse_exact(head) {
        if let Ok(d) = serde_json::from_value::<SignedDecision>(v) {
            let h = Sha256Hex::digest(path.as_bytes());
            if let Some(key) = kr.for_proof(&d.approver, &d.proof) {
                if d.verify(key, &h).is_ok() {
                    let other = Sha256Hex::digest(&[path.as_bytes(), b"x"].concat());
                    assert!(d.verify(key, &other).is_err(), "one signature, two hashes");
                }
            }
        }
    }
});
