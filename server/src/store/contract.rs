//! Contract tests every `Store` backend must pass.
use super::*;
use crate::audit::{verify_chain, AuditEvent, AuditKind};
use crate::record::ProposalRecord;
use crate::record::SCHEMA_VERSION;
use approval_core::ids::AgentName;
use approval_core::status::Lifecycle;
use approval_core::status::Status;
use approval_core::{Preview, Timestamp};
use approval_core::{ProposalId, ServerId, Sha256Hex};

pub fn record(id: &str, agent: &str, created: i64) -> ProposalRecord {
    let preview = Preview {
        v: 1,
        server_id: ServerId::parse("srv-test").unwrap(),
        proposal_id: ProposalId::parse(id).unwrap(),
        kind: approval_core::Kind::parse("note.write").unwrap(),
        payload: serde_json::json!({"text": id}),
        summary: String::new(),
        requested_by: AgentName::parse(agent).unwrap(),
        created_at: Timestamp::from_unix(created),
        expires_at: Timestamp::from_unix(created + 1800),
        policy_sha256: Sha256Hex::digest(b"policy"),
        cooldown: None,
        execution: None,
    };
    ProposalRecord {
        schema: SCHEMA_VERSION,
        revision: 0,
        preview_sha256: preview.sha256(),
        lifecycle: Lifecycle::new(preview.expires_at),
        preview,
        decisions: vec![],
        result: None,
        attestation: None,
        updated_at: Timestamp::from_unix(created),
    }
}

/// The one audit event of `kind` for `rec`, as a write passes it to the store.
/// A minted id (`ProposalId::mint`) created at `created`, told apart by `n`: the
/// contract mixes these with other ids, so that every read path finds records filed
/// under either kind of key.
pub fn minted(created: i64, n: u8) -> String {
    ProposalId::mint([n; 16], created as u64 * 1000).to_string()
}

pub fn ev(kind: AuditKind, rec: &ProposalRecord) -> Vec<AuditEvent> {
    vec![AuditEvent {
        kind,
        proposal_id: rec.id().clone(),
        at: rec.updated_at,
        detail: serde_json::json!({}),
    }]
}

pub fn run(store: &dyn Store) {
    let a = record(&minted(1_800_000_000, 0xa), "agent1", 1_800_000_000);
    let b = record("p-b", "agent2", 1_800_000_001);
    let lim = PendingLimits::default();
    store.create(&a, ev(AuditKind::Proposed, &a), lim).unwrap();
    store.create(&b, ev(AuditKind::Proposed, &b), lim).unwrap();
    assert!(matches!(
        store.create(&a, ev(AuditKind::Proposed, &a), lim),
        Err(StoreError::Exists(_))
    ));
    assert_eq!(store.pending_count(None).unwrap(), 2);
    assert_eq!(
        store
            .pending_count(Some(&AgentName::parse("agent1").unwrap()))
            .unwrap(),
        1
    );
    // Limits: refused when full, and nothing is written.
    let c = record(&minted(1_800_000_002, 0xc), "agent1", 1_800_000_002);
    let tight = PendingLimits {
        per_agent: 1,
        total: 100,
    };
    assert!(matches!(
        store.create(&c, ev(AuditKind::Proposed, &c), tight),
        Err(StoreError::Full(_))
    ));
    assert_eq!(store.get(c.id()).unwrap(), None);
    let tight = PendingLimits {
        per_agent: 100,
        total: 2,
    };
    assert!(matches!(
        store.create(&c, ev(AuditKind::Proposed, &c), tight),
        Err(StoreError::Full(_))
    ));
    assert_eq!(store.pending_count(None).unwrap(), 2);
    assert_eq!(store.get(a.id()).unwrap().as_ref(), Some(&a));
    assert_eq!(
        store.get(&ProposalId::parse("p-none").unwrap()).unwrap(),
        None
    );
    // Listing: newest first, by status and by agent.
    let pending: Vec<_> = store
        .list_status(Status::Pending, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.id().clone())
        .collect();
    assert_eq!(pending, vec![b.id().clone(), a.id().clone()]);
    assert_eq!(store.list_status(Status::Pending, 1).unwrap().len(), 1);
    assert_eq!(
        store
            .list_agent(&AgentName::parse("agent1").unwrap(), 10)
            .unwrap(),
        vec![a.clone()]
    );
    // Compare-and-swap: one winner per revision, index follows the status.
    let now = Timestamp::from_unix(1_800_000_010);
    let approved = a.with_lifecycle(
        a.lifecycle
            .approve(now, approval_core::Seconds::new(60))
            .unwrap(),
        now,
    );
    assert!(matches!(
        store
            .update(&approved, ev(AuditKind::Approved, &approved))
            .unwrap(),
        Cas::Applied
    ));
    assert!(matches!(
        store
            .update(&approved, ev(AuditKind::Approved, &approved))
            .unwrap(),
        Cas::Conflict(_)
    ));
    assert_eq!(store.count_status(Status::Pending).unwrap(), 1);
    assert_eq!(store.count_status(Status::Approved).unwrap(), 1);
    assert_eq!(store.pending_count(None).unwrap(), 1);
    assert_eq!(
        store
            .pending_count(Some(&AgentName::parse("agent1").unwrap()))
            .unwrap(),
        0
    );
    let mut ghost = record("p-ghost", "agent1", 1);
    ghost.revision = 1;
    assert!(matches!(
        store.update(&ghost, vec![]).unwrap(),
        Cas::Missing
    ));
    // Deadlines: `due` hands over what has run out of time, earliest first, and
    // nothing that is not yet due or can no longer expire.
    let ids = |v: Vec<RecordHead>| {
        v.into_iter()
            .map(|h| h.preview.proposal_id)
            .collect::<Vec<_>>()
    };
    let at = Timestamp::from_unix;
    assert_eq!(ids(store.due(at(1_800_000_069), 10).unwrap()), vec![]);
    assert_eq!(
        ids(store.due(at(1_800_000_070), 10).unwrap()),
        vec![a.id().clone()]
    );
    assert_eq!(
        ids(store.due(at(1_800_001_801), 10).unwrap()),
        vec![a.id().clone(), b.id().clone()]
    );
    assert_eq!(
        ids(store.due(at(1_800_001_801), 1).unwrap()),
        vec![a.id().clone()]
    );
    let withdrawn = b.with_lifecycle(b.lifecycle.withdraw(now).unwrap(), now);
    assert!(matches!(
        store
            .update(&withdrawn, ev(AuditKind::Withdrawn, &withdrawn))
            .unwrap(),
        Cas::Applied
    ));
    assert_eq!(
        ids(store.due(at(1_900_000_000), 10).unwrap()),
        vec![a.id().clone()]
    );
    assert_eq!(store.pending_count(None).unwrap(), 0);
    assert_eq!(
        store
            .list_status(Status::Withdrawn, 10)
            .unwrap()
            .iter()
            .map(|r| r.id().clone())
            .collect::<Vec<_>>(),
        vec![b.id().clone()]
    );
    assert_eq!(store.list_status(Status::Pending, 10).unwrap(), vec![]);
    // Pages: an index walked newest first, strictly after the cursor, several
    // status indexes merged, a filter that skips without ending the walk.
    let heads = |p: &HeadPage| {
        p.heads
            .iter()
            .map(|h| h.preview.proposal_id.clone())
            .collect::<Vec<_>>()
    };
    let all = ListIndex::Statuses(Status::ALL.to_vec());
    let first = store.page(&all, None, 1, &mut |_| true).unwrap();
    assert_eq!(heads(&first), vec![b.id().clone()]);
    let next = first.next.clone().expect("a second page");
    assert_eq!(Cursor::parse(&next.to_string()), Some(next.clone()));
    let second = store.page(&all, Some(&next), 1, &mut |_| true).unwrap();
    assert_eq!(heads(&second), vec![a.id().clone()]);
    assert_eq!(second.next, None);
    let approved_only = store
        .page(&all, None, 10, &mut |h| {
            h.lifecycle.status == Status::Approved
        })
        .unwrap();
    assert_eq!(heads(&approved_only), vec![a.id().clone()]);
    let agent1 = ListIndex::Agent(AgentName::parse("agent1").unwrap());
    let mine = store.page(&agent1, None, 10, &mut |_| true).unwrap();
    assert_eq!((heads(&mine), mine.next), (vec![a.id().clone()], None));
    let withdrawn = ListIndex::Statuses(vec![Status::Withdrawn]);
    let w = store.page(&withdrawn, None, 10, &mut |_| true).unwrap();
    assert_eq!(heads(&w), vec![b.id().clone()]);
    // Whole-record pages walk the same index the same way, and hold each record
    // as `get` reads it.
    for (index, limit) in [(&all, 1), (&all, 10), (&agent1, 10), (&withdrawn, 10)] {
        let mut after = None;
        loop {
            let h = store
                .page(index, after.as_ref(), limit, &mut |_| true)
                .unwrap();
            let r = store
                .page_records(index, after.as_ref(), limit, &mut |_| true)
                .unwrap();
            assert_eq!(r.next, h.next, "{index:?} after {after:?}");
            let whole: Vec<ProposalRecord> = r.records;
            assert_eq!(
                whole.iter().map(|r| r.id().clone()).collect::<Vec<_>>(),
                heads(&h)
            );
            for rec in &whole {
                assert_eq!(Some(rec), store.get(rec.id()).unwrap().as_ref());
            }
            match h.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
    let approved_whole = store
        .page_records(&all, None, 10, &mut |h| {
            h.lifecycle.status == Status::Approved
        })
        .unwrap();
    assert_eq!(
        approved_whole
            .records
            .iter()
            .map(|r| r.id().clone())
            .collect::<Vec<_>>(),
        vec![a.id().clone()]
    );
    assert_eq!(
        Cursor::parse(&format!("1800000000.{}", a.id())).map(|c| c.id),
        Some(a.id().clone())
    );
    for bad in [
        "",
        "1800000000",
        "x.p-a",
        "-1.p-a",
        "1800000000.",
        "99999999999999.p-a",
    ] {
        assert_eq!(Cursor::parse(bad), None, "{bad:?}");
    }
    // Policies are kept once per hash; storing one twice changes nothing.
    let ph = Sha256Hex::digest(b"policy");
    assert_eq!(store.get_policy(&ph).unwrap(), None);
    store
        .put_policy(&ph, &serde_json::json!({"kind": "note.write"}))
        .unwrap();
    store
        .put_policy(&ph, &serde_json::json!({"kind": "other"}))
        .unwrap();
    assert_eq!(
        store.get_policy(&ph).unwrap(),
        Some(serde_json::json!({"kind": "note.write"}))
    );
    // The audit chain has every event, in order, and verifies.
    let (entries, head) = store.audit().unwrap();
    assert_eq!(entries.len(), 4);
    assert_eq!(verify_chain(entries, head), Ok(4));
    store.flush_blocking().unwrap();
}

/// The notification outbox: queued in the same write as the change (so never for a
/// refused one), capped with drops counted, entries numbered without reuse.
/// Marks only go up, each name on its own, and a value equal to the one held is kept.
pub fn marks(store: &dyn Store) {
    use super::Raise;
    assert_eq!(store.raise("passkey/a", 0).unwrap(), Raise::Raised);
    assert_eq!(store.raise("passkey/a", 0).unwrap(), Raise::Kept(0));
    assert_eq!(store.raise("passkey/a", 7).unwrap(), Raise::Raised);
    assert_eq!(store.raise("passkey/a", 7).unwrap(), Raise::Kept(7));
    assert_eq!(store.raise("passkey/a", 3).unwrap(), Raise::Kept(7));
    assert_eq!(store.raise("passkey/b", 1).unwrap(), Raise::Raised);
    assert_eq!(store.raise("passkey/a", u64::MAX).unwrap(), Raise::Raised);
    assert_eq!(store.raise("passkey/a", 8).unwrap(), Raise::Kept(u64::MAX));
    assert!(store.raise("", 1).is_err());
    assert!(store.raise(&"x".repeat(201), 1).is_err());
}

/// Many threads raising one mark with the same value: exactly one is told it raised
/// it (a replayed passkey assertion counts once however it races).
pub fn marks_race(store: &(dyn Store + Sync)) {
    use super::Raise;
    for round in 1..=5u64 {
        let raised = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    if store.raise("enroll/race", round).unwrap() == Raise::Raised {
                        raised.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(raised.into_inner(), 1, "round {round}");
    }
}

pub fn outbox(store: &dyn Store) {
    let ev = |rec: &ProposalRecord| ev(AuditKind::Proposed, rec);
    let a = record(&minted(1_800_000_000, 0x0a), "agent1", 1_800_000_000);
    let b = record("p-ob", "agent1", 1_800_000_001);
    let c = record(&minted(1_800_000_002, 0x0c), "agent1", 1_800_000_002);
    // Off (no channel configured): nothing is queued.
    store.create(&a, ev(&a), PendingLimits::default()).unwrap();
    assert_eq!(store.outbox_counts(), (0, 0));
    store.set_outbox(true, 1);
    store.create(&b, ev(&b), PendingLimits::default()).unwrap();
    assert_eq!(store.outbox_counts(), (1, 0));
    // A create refused by the limits commits nothing, so queues nothing.
    let tight = PendingLimits {
        per_agent: 2,
        total: 100,
    };
    assert!(matches!(
        store.create(&c, ev(&c), tight),
        Err(StoreError::Full(_))
    ));
    assert_eq!(store.outbox_counts(), (1, 0));
    // A stale update (compare-and-swap conflict) queues nothing either.
    assert!(matches!(
        store.update(&b, ev(&b)).unwrap(),
        Cas::Conflict(_)
    ));
    assert_eq!(store.outbox_counts(), (1, 0));
    // At the cap the change commits and its notification is dropped, counted.
    store.create(&c, ev(&c), PendingLimits::default()).unwrap();
    assert!(store.get(c.id()).unwrap().is_some());
    assert_eq!(store.outbox_counts(), (1, 1));
    let page = store.outbox_page(10).unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].1.proposal_id, *b.id());
    assert_eq!(page[0].1.event, approval_core::notify::NotifyEvent::Waiting);
    // A retry state is rewritten in place; a removed entry is gone.
    let mut retried = page[0].1.clone();
    retried.attempts = 3;
    store.outbox_put(page[0].0, &retried).unwrap();
    assert_eq!(store.outbox_page(10).unwrap()[0].1.attempts, 3);
    store.outbox_remove(page[0].0).unwrap();
    assert_eq!(store.outbox_counts(), (0, 1));
    // Numbers go on after the highest ever written, never reused.
    store.set_outbox(true, 10);
    let d = record("p-od", "agent2", 1_800_000_003);
    store.create(&d, ev(&d), PendingLimits::default()).unwrap();
    assert!(store.outbox_page(10).unwrap()[0].0 > page[0].0);
}

/// Issue #31, item 3: the deliverer reads only what is due, by next attempt, and no
/// kind's backlog hides another kind's entry (see `outbox::due`).
pub fn outbox_due_is_fair(store: &dyn Store) {
    store.set_outbox(true, 1_000);
    let flood_kind = approval_core::Kind::parse("flood.kind").unwrap();
    for i in 0..40u8 {
        let mut r = record(&minted(1_800_000_100, i), "agent1", 1_800_000_100);
        r.preview.kind = flood_kind.clone();
        store
            .create(&r, ev(AuditKind::Proposed, &r), PendingLimits::default())
            .unwrap();
    }
    let victim = record("p-victim", "agent2", 1_800_000_200);
    store
        .create(
            &victim,
            ev(AuditKind::Proposed, &victim),
            PendingLimits::default(),
        )
        .unwrap();
    let all = store.outbox_page(1_000).unwrap();
    assert_eq!(all.len(), 41);
    assert!(all.iter().take(40).all(|(_, i)| i.kind == "flood.kind"));
    // Forty fresh entries of one kind ahead of it: the other kind's entry is still
    // among the first two picked, and no kind takes more than its share.
    let due = store.outbox_due(1_000, 4, 10).unwrap();
    assert_eq!(due.len(), 5, "{due:?}");
    assert!(due[..2].iter().any(|(_, i)| i.proposal_id == *victim.id()));
    assert_eq!(
        due.iter().filter(|(_, i)| i.kind == "flood.kind").count(),
        4
    );
    // The flood fails: each waits for its retry, later entries sooner. Waiting
    // entries take no place; the due ones come by next attempt.
    for (n, (seq, item)) in all.iter().take(40).enumerate() {
        let mut it = item.clone();
        it.attempts = 1;
        it.next_try_ms = 10_000 + (40 - n as u64);
        store.outbox_put(*seq, &it).unwrap();
    }
    let due = store.outbox_due(1_000, 4, 10).unwrap();
    assert_eq!(due.len(), 1, "{due:?}");
    assert_eq!(due[0].1.proposal_id, *victim.id());
    let due = store.outbox_due(10_005, 3, 10).unwrap();
    let flood: Vec<u64> = due
        .iter()
        .filter(|(_, i)| i.kind == "flood.kind")
        .map(|(_, i)| i.next_try_ms)
        .collect();
    assert_eq!(flood, vec![10_001, 10_002, 10_003], "{due:?}");
    assert!(due.iter().any(|(_, i)| i.proposal_id == *victim.id()));
    // The limit bounds the whole read.
    assert_eq!(store.outbox_due(u64::MAX / 2, 100, 7).unwrap().len(), 7);
}

/// The configuration version under quorum (issue #35): it starts at none, advances
/// one version at a time only over the version it names (a stale or replayed change
/// writes nothing), reads back whole, and chains its audit events. Eight threads
/// racing the same change: exactly one applies it.
pub fn config_versions(store: &(dyn Store + Sync)) {
    use approval_core::governance::{Bundle, ConfigHead};
    let bundle = |keyring: &str| Bundle {
        root: "administrators = [\"alice\"]\nthreshold = 1\n".into(),
        keyring: keyring.into(),
        agents: None,
        policies: [("x.toml".to_owned(), "kind = \"x\"\n".to_owned())].into(),
    };
    let change = record("p-config", "gate-operator", 1_800_000_000);
    let (seq0, _) = store
        .audit()
        .unwrap()
        .1
        .unwrap_or((0, crate::audit::genesis()));
    assert_eq!(store.config_head().unwrap(), None);
    assert_eq!(store.config_version().unwrap(), 0);
    let v1 = ConfigHead::new(1, bundle("a"), None);
    assert!(
        !store.advance_config(1, &v1, vec![]).unwrap(),
        "from a version never in force"
    );
    assert!(store
        .advance_config(0, &v1, ev(AuditKind::ConfigApplied, &change))
        .unwrap());
    assert_eq!(store.config_head().unwrap(), Some(v1.clone()));
    assert_eq!(store.config_version().unwrap(), 1);
    let v2 = ConfigHead::new(2, bundle("b"), Some(change.id().clone()));
    let applied = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let e = ev(AuditKind::ConfigApplied, &change);
                if store.advance_config(1, &v2, e).unwrap() {
                    applied.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(applied.into_inner(), 1);
    // Replaying version 1's change, or version 2's again, changes nothing.
    assert!(!store.advance_config(0, &v1, vec![]).unwrap());
    assert!(!store.advance_config(1, &v2, vec![]).unwrap());
    let v3_skipping = ConfigHead::new(4, bundle("c"), None);
    assert!(!store.advance_config(2, &v3_skipping, vec![]).unwrap());
    let head = store.config_head().unwrap().unwrap();
    assert_eq!(head, v2);
    assert!(head.is_consistent());
    let (entries, top) = store.audit().unwrap();
    assert_eq!(
        top.unwrap().0,
        seq0 + 2,
        "one audit entry per applied version"
    );
    verify_chain(entries, top).unwrap();
}
