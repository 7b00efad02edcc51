//! The model must not drift from the code. Its rules are the code's own (it calls
//! core's state table and `approval_core::claim`); these tests pin the rest:
//! every step's mirrored code is still where the model says, every step named
//! there is a real step, and the table rows the model's safety rests on are the
//! ones core has.

use approval_core::action::Action;
use approval_core::claim::{Batch, BatchDecision, BatchWrite};
use approval_core::status::{Outcome, Status};
use approval_model::state::{Exec, Member, Rec, Then};
use approval_model::{lifecycle, Backend, ExactlyOnce, Step, MIRRORS};
use stateright::Model;
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
        "BatchCommit",
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

/// The model's batch commit decides as `claim::Batch` does, member by member in
/// queue order: two claims from one read of APPROVED, queued on one instance, then
/// the first's finish. Whatever core's rule answers, the model's step must agree
/// (a model with its own copy of the rule would drift from a changed `Batch`).
#[test]
fn the_batch_the_model_commits_decides_as_core_s_batch() {
    let model = ExactlyOnce::ci_batches();
    let mut s = model.init_states().remove(0);
    let read = s.stored;
    assert_eq!(read.status, Status::Approved);
    let claimed = Rec {
        status: lifecycle(read.status).claim(now()).unwrap().status,
        revision: read.revision + 1,
    };
    let finished = Rec {
        status: lifecycle(claimed.status)
            .finish(Outcome::Succeeded)
            .unwrap()
            .status,
        revision: claimed.revision + 1,
    };
    // Tasks 0 and 2 run on instance 0.
    let queue = [
        (0, claimed, Then::Run),
        (2, claimed, Then::Run),
        (0, finished, Then::Answer),
    ];
    let mut core = Batch::default();
    core.found(0u8, Some(read.revision as u64));
    let expected: Vec<BatchDecision> = queue
        .iter()
        .map(|(_, rec, _)| {
            let write = BatchWrite::Update {
                new_revision: rec.revision as u64,
            };
            core.decide(&0, write)
        })
        .collect();
    assert_eq!(
        expected,
        [
            BatchDecision::Applied,
            BatchDecision::Conflict,
            BatchDecision::Applied
        ],
        "core's Batch changed: update this test and the model's BatchCommit"
    );

    // The first claim and the second, in one batch.
    for &(task, rec, then) in &queue[..2] {
        s.procs[0].queue.push(Member { task, rec, then });
        s.tasks[task as usize] = Exec::Queued;
    }
    let after = model.next_state(&s, Step::BatchCommit(0)).unwrap();
    assert_eq!(after.durable, claimed, "the applied claim is committed");
    assert_eq!(after.tasks[0], Exec::Claimed(claimed), "the first may run");
    assert_eq!(
        after.tasks[2],
        Exec::Read(claimed, None),
        "the second retries from what is stored"
    );
    assert!(after.procs[0].queue.is_empty());
    assert_eq!(after.acked, claimed.revision);

    // The first's finish, decided over the running revision, and a stale claim.
    let mut s = after;
    s.tasks[0] = Exec::Queued;
    s.tasks[2] = Exec::Queued;
    s.procs[0].queue = vec![
        Member {
            task: 2,
            rec: claimed,
            then: Then::Run,
        },
        Member {
            task: 0,
            rec: finished,
            then: Then::Answer,
        },
    ];
    let after = model.next_state(&s, Step::BatchCommit(0)).unwrap();
    assert_eq!(after.durable, finished);
    assert_eq!(after.tasks[0], Exec::Done);
    assert_eq!(after.tasks[2], Exec::Read(finished, None));

    // The model calls core's rule, not a copy of it.
    let src = include_str!("../src/model.rs");
    assert!(src.contains("Batch::default()") && src.contains(".decide(&RECORD, write)"));
    assert_eq!(model.backend, Backend::Postgres);
}

fn now() -> approval_core::Timestamp {
    approval_core::Timestamp::from_unix(1_800_000_000)
}
