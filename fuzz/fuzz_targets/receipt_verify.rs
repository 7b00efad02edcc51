//! `Receipt::from_json_text` + `verify_receipt` with the fixed keyring.
//! Invariants: no panic; a receipt that verifies has quorum under its own policy
//! when counted again with `quorum::evaluate`, each approver counted once, every
//! counted approver in the keyring and in the policy; verification is
//! deterministic and agrees with the server-bound variant for its own server id.
#![no_main]

use approval_core::quorum::{evaluate, QuorumOutcome};
use approval_core::receipt::{verify_receipt, verify_receipt_for_server, Receipt};
use approval_core::{SignedDecision, Timestamp};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(r) = Receipt::from_json_text(text) else {
        return;
    };
    let kr = approval_fuzz::keyring();
    let now = Timestamp::from_unix(approval_fuzz::NOW);
    let timeless = verify_receipt(&r, &kr, None);
    let timed = verify_receipt(&r, &kr, Some(now));
    if timed.is_ok() {
        assert!(
            timeless.is_ok(),
            "verifies with a clock but not without one"
        );
    }
    let Ok(v) = timeless else {
        return;
    };
    let again = verify_receipt(&r, &kr, None).expect("verification is deterministic");
    assert_eq!(again.approvers(), v.approvers());
    assert!(
        verify_receipt_for_server(&r, &kr, None, Some(&v.preview().server_id)).is_ok(),
        "refused for its own server id"
    );
    let policy = v.policy();
    let signed: Vec<SignedDecision> = r
        .decisions
        .iter()
        .map(|d| d.signed())
        .collect();
    let tally = evaluate(policy, &kr, &v.preview_sha256(), &signed);
    assert_eq!(
        tally.outcome,
        QuorumOutcome::Reached,
        "verified receipt without quorum"
    );
    let spec = policy.spec();
    let distinct: BTreeSet<_> = v.approvers().iter().collect();
    assert_eq!(
        distinct.len(),
        v.approvers().len(),
        "an approver counted twice"
    );
    assert!(
        v.approvers().len() as u32 >= spec.quorum,
        "fewer approvals than the quorum"
    );
    let keys: BTreeSet<[u8; 32]> = v
        .approvers()
        .iter()
        .map(|a| {
            kr.key(a)
                .expect("counted approver has a key in the keyring")
                .to_bytes()
        })
        .collect();
    assert_eq!(keys.len(), v.approvers().len(), "one key counted twice");
    for a in v.approvers() {
        assert!(policy.is_approver(a), "counted approver outside the policy");
    }
    for req in &spec.require {
        let have = req
            .group
            .iter()
            .filter(|m| v.approvers().contains(m))
            .count() as u32;
        assert!(have >= req.count, "group requirement not met");
    }
});
