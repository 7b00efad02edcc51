//! The state machine, exhaustively: every status × every action, before and after
//! the deadlines, with the exact error and code for each refusal.

use approval_core::status::Outcome;
use approval_core::{Code, Lifecycle, Seconds, Status, Timestamp, TransitionError};

fn t(s: i64) -> Timestamp {
    Timestamp::from_unix(2_000_000 + s)
}

/// Expires (PENDING) at t(100); executable (APPROVED) until t(200).
fn in_status(status: Status) -> Lifecycle {
    Lifecycle {
        status,
        expires_at: t(100),
        approved_at: Some(t(50)),
        executable_until: Some(t(200)),
        executable_from: None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    Approve,
    Reject,
    Revoke,
    Withdraw,
    PolicyChanged,
    Expire,
    Claim,
    Finish(Outcome),
    CrashRecovered,
    Resolve(bool),
}

const ACTIONS: [Action; 13] = [
    Action::Approve,
    Action::Reject,
    Action::Revoke,
    Action::Withdraw,
    Action::PolicyChanged,
    Action::Expire,
    Action::Claim,
    Action::Finish(Outcome::Succeeded),
    Action::Finish(Outcome::Failed),
    Action::Finish(Outcome::Unknown),
    Action::CrashRecovered,
    Action::Resolve(true),
    Action::Resolve(false),
];

fn apply(l: Lifecycle, a: Action, now: Timestamp) -> Result<Lifecycle, TransitionError> {
    match a {
        Action::Approve => l.approve(now, Seconds::new(60)),
        Action::Reject => l.reject(now),
        Action::Revoke => l.revoke(now),
        Action::Withdraw => l.withdraw(now),
        Action::PolicyChanged => l.policy_changed(now),
        Action::Expire => l.expire(now),
        Action::Claim => l.claim(now),
        Action::Finish(o) => l.finish(o),
        Action::CrashRecovered => l.crash_recovered(),
        Action::Resolve(b) => l.resolve(b),
    }
}

fn action_name(a: Action) -> approval_core::Action {
    match a {
        Action::Approve => approval_core::Action::Approve,
        Action::Reject => approval_core::Action::Reject,
        Action::Revoke => approval_core::Action::Revoke,
        Action::Withdraw => approval_core::Action::Withdraw,
        Action::PolicyChanged => approval_core::Action::Void,
        Action::Expire => approval_core::Action::Expire,
        Action::Claim => approval_core::Action::Execute,
        Action::Finish(_) => approval_core::Action::Finish,
        Action::CrashRecovered => approval_core::Action::Finish,
        Action::Resolve(_) => approval_core::Action::Resolve,
    }
}

/// The DESIGN's transition table, written out: where `a` leads from `s` while
/// no deadline has passed, or `None` when it is refused.
fn expected(s: Status, a: Action) -> Option<Status> {
    use Status::*;
    match (s, a) {
        (Pending, Action::Approve) => Some(Approved),
        (Pending, Action::Reject) => Some(Rejected),
        (Approved, Action::Revoke) => Some(Revoked),
        (Pending, Action::Withdraw) => Some(Withdrawn),
        (Pending | Approved, Action::PolicyChanged) => Some(PolicyChanged),
        (Approved, Action::Claim) => Some(Executing),
        (Executing, Action::Finish(Outcome::Succeeded)) => Some(Succeeded),
        (Executing, Action::Finish(Outcome::Failed)) => Some(Failed),
        (Executing, Action::Finish(Outcome::Unknown)) => Some(OutcomeUnknown),
        (Executing, Action::CrashRecovered) => Some(OutcomeUnknown),
        (OutcomeUnknown, Action::Resolve(true)) => Some(Succeeded),
        (OutcomeUnknown, Action::Resolve(false)) => Some(Failed),
        _ => None,
    }
}

/// The code an agent sees when `a` is refused in `s`.
fn expected_code(s: Status, a: Action) -> Code {
    match (s, a) {
        (Status::Succeeded | Status::Failed | Status::OutcomeUnknown, Action::Claim) => {
            Code::AlreadyExecutedNoReplay
        }
        (Status::Executing, Action::Claim) => Code::ExecutionInProgress,
        _ => s.code(),
    }
}

#[test]
fn every_status_times_every_action_before_the_deadlines() {
    let now = t(60);
    let mut allowed = 0;
    for s in Status::ALL {
        for a in ACTIONS {
            let got = apply(in_status(s), a, now);
            match expected(s, a) {
                Some(to) => {
                    allowed += 1;
                    let l = got.unwrap_or_else(|e| panic!("{s} {a:?}: {e}"));
                    assert_eq!(l.status, to, "{s} {a:?}");
                    assert_eq!(l.expires_at, t(100), "{s} {a:?} keeps the expiry");
                    if a == Action::Approve {
                        assert_eq!(l.approved_at, Some(now));
                        assert_eq!(l.executable_until, Some(t(120)));
                    } else {
                        assert_eq!(l.approved_at, Some(t(50)), "{s} {a:?}");
                        assert_eq!(l.executable_until, Some(t(200)), "{s} {a:?}");
                    }
                }
                None => assert_eq!(
                    got,
                    Err(TransitionError {
                        from: s,
                        action: action_name(a),
                        code: expected_code(s, a)
                    }),
                    "{s} {a:?}"
                ),
            }
        }
    }
    // The DESIGN diagram's edges that do not depend on time (policy edits count
    // twice: from PENDING and from APPROVED; finish counts once per outcome).
    assert_eq!(allowed, 13);
}

#[test]
fn every_status_times_every_action_after_the_deadlines() {
    // Past both deadlines PENDING and APPROVED are EXPIRED for every action that
    // takes the time; only `expire` itself succeeds. Other states ignore time.
    let now = t(1000);
    for s in Status::ALL {
        for a in ACTIONS {
            let got = apply(in_status(s), a, now);
            let times_out = matches!(s, Status::Pending | Status::Approved);
            match (times_out, a) {
                (true, Action::Expire) => assert_eq!(got.unwrap().status, Status::Expired, "{s}"),
                (true, Action::Finish(_) | Action::CrashRecovered | Action::Resolve(_)) => {
                    // These do not take `now`: refused from the stored status.
                    assert_eq!(got.unwrap_err().from, s, "{s} {a:?}");
                }
                (true, _) => assert_eq!(
                    got,
                    Err(TransitionError {
                        from: Status::Expired,
                        action: action_name(a),
                        code: Code::Expired
                    }),
                    "{s} {a:?}"
                ),
                (false, _) => assert_eq!(
                    got.map(|l| l.status),
                    apply(in_status(s), a, t(60)).map(|l| l.status),
                    "{s} {a:?}"
                ),
            }
        }
    }
}

#[test]
fn deadlines_are_exclusive_and_measured_from_the_right_moment() {
    let p = Lifecycle::new(t(100));
    assert_eq!(p.status, Status::Pending);
    assert_eq!((p.approved_at, p.executable_until), (None, None));
    assert!(!p.is_expired_at(t(99)));
    assert!(p.is_expired_at(t(100)));
    assert!(p.approve(t(99), Seconds::new(60)).is_ok());
    assert_eq!(
        p.approve(t(100), Seconds::new(60)).unwrap_err().code,
        Code::Expired
    );
    // An approval made late still gets its full execute window.
    let a = p.approve(t(99), Seconds::new(60)).unwrap();
    assert!(a.executable(t(158)));
    assert!(!a.executable(t(159)));
    assert_eq!(a.claim(t(159)).unwrap_err().from, Status::Expired);
    assert_eq!(a.expire(t(158)).unwrap_err().code, Code::QuorumReached);
    assert_eq!(a.expire(t(159)).unwrap().status, Status::Expired);
    // An expired record stays expired, and expiring it again is refused.
    let e = a.expire(t(159)).unwrap();
    assert_eq!(
        e.expire(t(10_000)).unwrap_err(),
        TransitionError {
            from: Status::Expired,
            action: approval_core::Action::Expire,
            code: Code::Expired
        }
    );
    // An APPROVED record without a deadline is treated as expired: fail closed.
    let odd = Lifecycle {
        executable_until: None,
        ..in_status(Status::Approved)
    };
    assert!(odd.is_expired_at(t(0)));
    assert_eq!(odd.claim(t(0)).unwrap_err().code, Code::Expired);
    // Saturation at the end of representable time.
    let far = Lifecycle::new(Timestamp::from_unix(i64::MAX));
    let a = far.approve(t(0), Seconds::new(u64::MAX)).unwrap();
    assert_eq!(a.executable_until, Some(Timestamp::from_unix(i64::MAX)));
    assert!(a.executable(t(1_000_000)));
}

#[test]
fn executable_and_retry_allowed_per_status() {
    for s in Status::ALL {
        let l = in_status(s);
        assert_eq!(l.executable(t(60)), s == Status::Approved, "{s}");
        assert_eq!(
            l.retry_allowed(t(60)),
            matches!(s, Status::Pending | Status::Approved),
            "{s}"
        );
        assert!(!l.executable(t(1000)), "{s}");
        assert!(!l.retry_allowed(t(1000)), "{s}");
    }
}

#[test]
fn statuses_codes_and_finality() {
    let table = [
        (Status::Pending, "PENDING", Code::PendingQuorum, false),
        (Status::Approved, "APPROVED", Code::QuorumReached, false),
        (
            Status::Executing,
            "EXECUTING",
            Code::ExecutionInProgress,
            false,
        ),
        (Status::Succeeded, "SUCCEEDED", Code::Succeeded, true),
        (Status::Failed, "FAILED", Code::Failed, true),
        (Status::Rejected, "REJECTED", Code::Rejected, true),
        (Status::Expired, "EXPIRED", Code::Expired, true),
        (Status::Revoked, "REVOKED", Code::Revoked, true),
        (Status::Withdrawn, "WITHDRAWN", Code::Withdrawn, true),
        (
            Status::PolicyChanged,
            "POLICY_CHANGED",
            Code::PolicyChanged,
            true,
        ),
        (
            Status::OutcomeUnknown,
            "OUTCOME_UNKNOWN",
            Code::OutcomeUnknown,
            false,
        ),
    ];
    assert_eq!(table.len(), Status::ALL.len());
    for (s, wire, code, is_final) in table {
        assert_eq!(s.as_str(), wire);
        assert_eq!(s.to_string(), wire);
        assert_eq!(s.code(), code);
        assert_eq!(s.is_final(), is_final, "{s}");
        assert_eq!(Status::parse(wire), Some(s));
        assert_eq!(Status::parse(&wire.to_lowercase()), Some(s));
        assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(wire));
        assert_eq!(
            serde_json::from_value::<Status>(serde_json::json!(wire)).unwrap(),
            s
        );
        // A final status has no way out, by any action.
        if is_final {
            for a in ACTIONS {
                assert!(apply(in_status(s), a, t(60)).is_err(), "{s} {a:?}");
            }
        }
    }
    for bad in ["", "DONE", "PENDING ", "pending_quorum", "EXPIRED\n"] {
        assert_eq!(Status::parse(bad), None, "{bad:?}");
    }
    assert!(serde_json::from_value::<Status>(serde_json::json!("pending")).is_err());
    let e = TransitionError {
        from: Status::Succeeded,
        action: approval_core::Action::Execute,
        code: Code::AlreadyExecutedNoReplay,
    };
    assert_eq!(e.to_string(), "cannot execute a proposal that is SUCCEEDED");
}

#[test]
fn codes_have_stable_wire_spellings() {
    let all = [
        (Code::PendingQuorum, "PENDING_QUORUM"),
        (Code::QuorumReached, "QUORUM_REACHED"),
        (Code::Succeeded, "SUCCEEDED"),
        (Code::Failed, "FAILED"),
        (Code::AlreadyExecutedNoReplay, "ALREADY_EXECUTED_NO_REPLAY"),
        (Code::ExecutionInProgress, "EXECUTION_IN_PROGRESS"),
        (Code::PreviewMismatch, "PREVIEW_MISMATCH"),
        (Code::Expired, "EXPIRED"),
        (Code::Rejected, "REJECTED"),
        (Code::Revoked, "REVOKED"),
        (Code::Withdrawn, "WITHDRAWN"),
        (Code::PolicyChanged, "POLICY_CHANGED"),
        (Code::OutcomeUnknown, "OUTCOME_UNKNOWN"),
        (Code::UnknownProposal, "UNKNOWN_PROPOSAL"),
        (Code::UnknownKind, "UNKNOWN_KIND"),
        (Code::KindDisabled, "KIND_DISABLED"),
        (Code::InvalidPayload, "INVALID_PAYLOAD"),
        (Code::InvalidSignature, "INVALID_SIGNATURE"),
        (Code::BadRequest, "BAD_REQUEST"),
        (Code::Unauthorized, "UNAUTHORIZED"),
        (Code::InvalidTransition, "INVALID_TRANSITION"),
        (Code::AlreadyRecorded, "ALREADY_RECORDED"),
        (Code::LimitExceeded, "LIMIT_EXCEEDED"),
        (Code::Internal, "INTERNAL"),
    ];
    for (c, wire) in all {
        assert_eq!(c.as_str(), wire);
        assert_eq!(c.to_string(), wire);
        assert_eq!(serde_json::to_value(c).unwrap(), serde_json::json!(wire));
        assert_eq!(
            serde_json::from_value::<Code>(serde_json::json!(wire)).unwrap(),
            c
        );
    }
}

#[test]
fn lifecycle_serialises_with_wire_spellings() {
    let l = in_status(Status::Approved);
    let v = serde_json::to_value(l).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "status": "APPROVED",
            "expires_at": t(100).to_rfc3339(),
            "approved_at": t(50).to_rfc3339(),
            "executable_until": t(200).to_rfc3339(),
        })
    );
    assert_eq!(serde_json::from_value::<Lifecycle>(v).unwrap(), l);
}

proptest::proptest! {
    /// With any cooldown shorter than the window, at any moment: an approval is
    /// executable exactly inside `[approved_at + cooldown, approved_at + execute_within)`,
    /// a claim succeeds exactly then (and is refused COOLING_DOWN before, without
    /// changing anything), and a revoke or a veto lands exactly until it opens (a
    /// revoke after too, while it is APPROVED).
    #[test]
    fn an_approval_is_executable_only_after_its_cooldown(
        approved in 0i64..1000,
        within in 2u64..500,
        cooldown_frac in 0u64..1000,
        offset in -10i64..600,
    ) {
        use approval_core::cooldown::execution_window;
        use approval_core::Decision;
        let cooldown = Seconds::new(1 + cooldown_frac % (within - 1));
        let l = Lifecycle::new(t(approved + 1))
            .approve_with_cooldown(t(approved), Some(cooldown), Seconds::new(within))
            .unwrap();
        let now = t(approved + offset);
        let (opens, closes) = execution_window(t(approved), Some(cooldown), Seconds::new(within));
        let inside = opens <= now && now < closes;
        let cooling = now < opens;
        proptest::prop_assert_eq!(l.executable(now), inside);
        proptest::prop_assert_eq!(l.claim(now).is_ok(), inside);
        if cooling {
            proptest::prop_assert_eq!(l.claim(now).unwrap_err().code, Code::CoolingDown);
            proptest::prop_assert_eq!(l.cooling_down_until(now), Some(opens));
        }
        proptest::prop_assert_eq!(l.accepts(Decision::Reject, now), cooling);
        proptest::prop_assert_eq!(l.reject(now).is_ok(), cooling);
        proptest::prop_assert_eq!(l.accepts(Decision::Revoke, now), now < closes);
        proptest::prop_assert_eq!(l.revoke(now).is_ok(), now < closes);
    }
}
