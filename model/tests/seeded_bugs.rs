//! Each seeded bug breaks one thing the real code does; the checker must find an
//! interleaving that runs the effect twice or loses an acknowledged write, within
//! the same bound CI checks the real protocol in. Each test prints the
//! counterexample, so a reader sees what the rule it breaks protects against.

use approval_model::{check, Backend, Bugs, ExactlyOnce, Step, NOTHING_LOST, ONCE};

/// Checks `backend` with `bugs` until `property` fails; returns the counterexample.
fn caught(backend: Backend, bugs: Bugs, property: &'static str) -> Vec<Step> {
    caught_in(ExactlyOnce::ci(backend).with_bugs(bugs), property)
}

/// [`caught`] within `model`'s own bound.
fn caught_in(model: ExactlyOnce, property: &'static str) -> Vec<Step> {
    let (backend, bugs) = (model.backend, model.bugs);
    let r = check(model, Some(property));
    let Some(trace) = r.trace(property) else {
        panic!(
            "{backend:?} with {bugs:?}: `{property}` not broken ({} states)",
            r.unique_states
        );
    };
    println!(
        "{backend:?} with {bugs:?}: `{property}` broken after {} states, {:.2?}: {trace:?}",
        r.unique_states, r.elapsed
    );
    trace.to_vec()
}

/// How many times `trace` starts an effect (a run, or the buggy sweep's own run).
fn starts(trace: &[Step]) -> usize {
    trace
        .iter()
        .filter(|s| matches!(s, Step::Start(_) | Step::SweepEnd(_)))
        .count()
}

#[test]
fn a_claim_without_the_compare_and_swap_runs_twice_on_either_store() {
    let bugs = Bugs {
        non_atomic_claim: true,
        ..Bugs::default()
    };
    for backend in [Backend::Sled, Backend::Postgres] {
        let trace = caught(backend, bugs, ONCE);
        // Two callers read APPROVED, both write EXECUTING, both run.
        assert_eq!(
            trace.iter().filter(|s| matches!(s, Step::Start(_))).count(),
            2
        );
    }
}

#[test]
fn acknowledging_before_the_flush_runs_twice_and_loses_the_write_on_sled() {
    let bugs = Bugs {
        ack_before_flush: true,
        ..Bugs::default()
    };
    // The claim is lost in the crash, the proposal is APPROVED again, and runs again.
    let trace = caught(Backend::Sled, bugs, ONCE);
    assert!(trace.iter().any(|s| matches!(s, Step::Crash(_))));
    let trace = caught(Backend::Sled, bugs, NOTHING_LOST);
    assert!(trace.iter().any(|s| matches!(s, Step::Crash(_))));
}

#[test]
fn a_group_commit_ticket_taken_before_the_write_runs_twice_on_sled() {
    let bugs = Bugs {
        ticket_before_write: true,
        ..Bugs::default()
    };
    // A flush that started before the write "covers" the early ticket without
    // carrying the write. One task is enough to run twice (a crash, then the
    // agent's retry); with the CI bound's four tasks, each holding an early ticket,
    // the checker needs 6.7 million states (about 40 s) to reach the same trace.
    let one_task = ExactlyOnce {
        tasks: 1,
        ..ExactlyOnce::ci(Backend::Sled).with_bugs(bugs)
    };
    let trace = caught_in(one_task, ONCE);
    assert!(trace.contains(&Step::FlushStart) && trace.contains(&Step::FlushDone));
    caught(Backend::Sled, bugs, NOTHING_LOST);
}

#[test]
fn a_lease_sweep_that_reruns_an_expired_claim_runs_twice() {
    let bugs = Bugs {
        sweep_reruns: true,
        ..Bugs::default()
    };
    let trace = caught(Backend::Postgres, bugs, ONCE);
    assert!(trace.contains(&Step::ClaimLeaseExpires));
    assert_eq!(starts(&trace), 2);
}

#[test]
fn a_table_edge_out_of_outcome_unknown_runs_twice_on_either_store() {
    let bugs = Bugs {
        execute_after_outcome_unknown: true,
        ..Bugs::default()
    };
    for backend in [Backend::Sled, Backend::Postgres] {
        let trace = caught(backend, bugs, ONCE);
        assert_eq!(
            trace.iter().filter(|s| matches!(s, Step::Start(_))).count(),
            2
        );
    }
}

#[test]
fn a_batch_that_decides_each_member_against_its_read_runs_twice_on_postgres() {
    let bugs = Bugs {
        batch_reads_once: true,
        ..Bugs::default()
    };
    // Two claims from one read of APPROVED meet in one batch; each is decided against
    // the row as read, not after the first, so both are applied and both run.
    let trace = caught_in(ExactlyOnce::ci_batches().with_bugs(bugs), ONCE);
    let commits: Vec<_> = trace
        .iter()
        .filter(|s| matches!(s, Step::BatchCommit(_)))
        .collect();
    assert_eq!(commits.len(), 1, "both claims in one batch: {trace:?}");
    assert_eq!(starts(&trace), 2);
}

#[test]
fn answering_before_the_batch_commit_runs_twice_and_loses_the_write_on_postgres() {
    let bugs = Bugs {
        answer_before_commit: true,
        ..Bugs::default()
    };
    // The claim is answered Applied, its effect starts, the instance dies before
    // its commit: the record is still APPROVED, and another instance runs it again.
    let trace = caught(Backend::Postgres, bugs, ONCE);
    assert!(trace.iter().any(|s| matches!(s, Step::Crash(_))));
    assert_eq!(starts(&trace), 2);
    // The answer itself outruns what is committed: a crash now loses it.
    let trace = caught(Backend::Postgres, bugs, NOTHING_LOST);
    assert!(trace.iter().any(|s| matches!(s, Step::BatchCommit(_))));
    assert!(!trace.iter().any(|s| matches!(s, Step::Committed(_))));
}
