//! The model must not drift from the code. Its rules are the code's own (it calls
//! core's state table and `approval_core::claim`); these tests pin the rest:
//! every step's mirrored code is still where the model says, every step named
//! there is a real step, and the table rows the model's safety rests on are the
//! ones core has.

use approval_core::action::Action;
use approval_core::status::{Outcome, Status};
use approval_model::{lifecycle, MIRRORS};
use std::path::Path;

#[test]
fn every_step_names_code_that_is_still_there() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut missing = Vec::new();
    for m in MIRRORS {
        let text = std::fs::read_to_string(root.join(m.file))
            .unwrap_or_else(|e| panic!("{}: {e}", m.file));
        if !text.contains(m.code) {
            missing.push(format!(
                "step {}: {:?} no longer in {}",
                m.step, m.code, m.file
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "the code the model mirrors changed; update model/src/model.rs and model/src/mirrors.rs together:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_mirrored_step_is_a_step_of_the_model_and_every_process_step_has_a_mirror() {
    let steps = [
        "Read",
        "Claim",
        "Acknowledged",
        "Start",
        "Renew",
        "Finish",
        "FlushStart",
        "FlushDone",
        "Lead",
        "SweepRead",
        "SweepEnd",
        "Crash",
    ];
    for m in MIRRORS {
        assert!(steps.contains(&m.step), "{} is not a step", m.step);
    }
    for s in steps {
        assert!(
            MIRRORS.iter().any(|m| m.step == s),
            "step {s} names no code"
        );
    }
    // The names above are the model's: a renamed step fails to format here.
    let formatted = format!("{:?}", approval_model::Step::SweepEnd(0));
    assert!(formatted.starts_with("SweepEnd"));
}

/// The model steps with `Lifecycle`, which asks core's table; this pins that the
/// lifecycle functions it calls agree with the table row for row, so a lifecycle
/// that stopped asking the table would be seen here, not only in the model.
#[test]
fn the_lifecycle_the_model_steps_with_is_the_table() {
    let now = approval_core::Timestamp::from_unix(1_800_000_000);
    for s in Status::ALL {
        let l = lifecycle(s);
        assert_eq!(
            l.claim(now).is_ok(),
            Action::Execute.allowed_in(s, false),
            "claim from {s}"
        );
        assert_eq!(
            l.finish(Outcome::Succeeded).is_ok(),
            Action::Finish.allowed_in(s, false),
            "finish from {s}"
        );
        assert_eq!(
            l.crash_recovered().is_ok(),
            Action::Finish.allowed_in(s, false),
            "crash recovery from {s}"
        );
    }
}
