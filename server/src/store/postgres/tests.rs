//! The PostgreSQL store's own tests (the shared contract is `store::contract`).

use super::testdb::Fresh;
use super::*;
use crate::store::contract;
use approval_core::status::Lifecycle;
use std::sync::Arc;

#[test]
fn postgres_store_passes_the_contract() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let store = PgStore::open(&db.url).unwrap();
    contract::run(&store);
}

/// The sweep reads expired claims, then ends each one: a renewal landing in
/// between (its instance is alive, only slow) must win, so a claim whose
/// instance still runs it is never ended under it.
#[test]
fn a_lease_renewed_after_the_sweep_read_it_is_not_ended() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let store = PgStore::open(&db.url)
        .unwrap()
        .with_lease(Duration::from_millis(300));
    let t0 = Timestamp::from_unix(1_800_000_000);
    let mut rec = contract::record("p-lease", "agent1", 1_800_000_000);
    store
        .create(&rec, vec![], PendingLimits::default())
        .unwrap();
    let step = |rec: &ProposalRecord, life: Lifecycle| {
        let mut next = rec.with_lifecycle(life, t0);
        next.revision = rec.revision + 1;
        next
    };
    let approved = rec
        .lifecycle
        .approve(t0, approval_core::time::Seconds::new(3600))
        .unwrap();
    let next = step(&rec, approved);
    assert!(matches!(store.update(&next, vec![]).unwrap(), Cas::Applied));
    rec = next;
    let next = step(&rec, rec.lifecycle.claim(t0).unwrap());
    assert!(matches!(store.update(&next, vec![]).unwrap(), Cas::Applied));
    rec = next;

    std::thread::sleep(Duration::from_millis(500));
    // Ending an expired claim is the sweep leader's act.
    assert!(store.try_lead("sweep"));
    assert_eq!(store.expired_claims(10).unwrap(), vec![rec.id().clone()]);
    // The running instance renews now, after the sweep's read.
    store.renew_lease(rec.id()).unwrap();
    let ended = step(&rec, rec.lifecycle.crash_recovered().unwrap());
    assert!(
        matches!(
            store.end_expired_claim(&ended, vec![]).unwrap(),
            Cas::Conflict(_)
        ),
        "a renewed claim was ended"
    );
    assert_eq!(
        store.get(rec.id()).unwrap().unwrap().status(),
        Status::Executing
    );
    // Its instance dies: no more renewals, and the next sweep ends it.
    std::thread::sleep(Duration::from_millis(500));
    assert!(store.try_lead("sweep"));
    assert!(matches!(
        store.end_expired_claim(&ended, vec![]).unwrap(),
        Cas::Applied
    ));
    assert_eq!(
        store.get(rec.id()).unwrap().unwrap().status(),
        Status::OutcomeUnknown
    );
}

/// `sslmode` is read strictly: no silent fall-back to plain TCP, no CA file
/// without TLS, and a CA file that cannot be used is named.
#[test]
fn store_urls_choose_tls_strictly() {
    let plain = |u: &str| matches!(parse_url(u), Ok((_, Tls::Plain)));
    assert!(plain("postgres://u@h/db"));
    assert!(plain(
        "postgres://u@h/db?sslmode=disable&application_name=x"
    ));
    for (url, says) in [
        (
            "postgres://u@h/db?sslmode=prefer",
            "falls back to plain TCP",
        ),
        ("postgres://u@h/db?sslmode=allow", "falls back to plain TCP"),
        ("postgres://u@h/db?sslmode=bogus", "unknown sslmode"),
        (
            "postgres://u@h/db?sslrootcert=/x.pem",
            "no sslmode=verify-full",
        ),
        (
            "postgres://u:pw@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "/nonexistent/ca.pem",
        ),
    ] {
        let err = parse_url(url)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(says), "{url}: {err}");
        assert!(!err.contains("pw@"), "the password leaked: {err}");
    }
}

/// TLS to the machine's PostgreSQL (Debian's default cluster: `ssl = on` with the
/// snakeoil certificate, issued for `localhost`): with that certificate as
/// `sslrootcert` the store connects and the session is encrypted; the same
/// certificate under another host name, or without the CA file, is refused.
#[test]
fn tls_to_postgres_verifies_the_certificate_and_its_name() {
    let Some(db) = Fresh::new() else { return };
    const SNAKEOIL: &str = "/etc/ssl/certs/ssl-cert-snakeoil.pem";
    let ssl_on = run_query(&db.url, "SHOW ssl").as_deref() == Ok("on");
    if !ssl_on || !std::path::Path::new(SNAKEOIL).exists() {
        println!("TLS to PostgreSQL not tested: this database has ssl off or no {SNAKEOIL}");
        return;
    }
    PgStore::migrate(&db.url).unwrap();
    let host = "127.0.0.1";
    assert!(
        db.url.contains(host),
        "the test URL names {host}: {}",
        db.url
    );
    let by_name = db.url.replacen(host, "localhost", 1);
    let tls = format!("{by_name}&sslmode=verify-full&sslrootcert={SNAKEOIL}");
    let store = PgStore::open(&tls).unwrap();
    assert!(store.pending_count(None).is_ok());
    assert_eq!(
        run_query(
            &tls,
            "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        )
        .as_deref(),
        Ok("true"),
        "the session is not encrypted"
    );
    // The right CA under the wrong name; and another CA (any other one the system
    // has) for the right name.
    let mut refused = vec![format!(
        "{}&sslmode=verify-full&sslrootcert={SNAKEOIL}",
        db.url
    )];
    let other_ca = std::fs::read_dir("/etc/ssl/certs")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pem"))
        .find(|p| !p.ends_with("ssl-cert-snakeoil.pem"));
    if let Some(ca) = other_ca {
        refused.push(format!(
            "{by_name}&sslmode=verify-full&sslrootcert={}",
            ca.display()
        ));
    }
    for url in refused {
        let err = run_query(&url, "SELECT 'connected'")
            .err()
            .unwrap_or_default();
        assert!(
            err.to_lowercase().contains("certificate"),
            "{url}: expected a certificate error, got {err:?}"
        );
    }
}

/// One query's first column as text, on a connection made as the store makes them.
fn run_query(url: &str, sql: &str) -> Result<String, String> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (cfg, tls) = parse_url(&url).map_err(|e| e.to_string())?;
            let c = connect(&cfg, &tls).await.map_err(|e| e.to_string())?;
            let row = c.query_one(&sql, &[]).await.map_err(|e| e.to_string())?;
            row.try_get::<_, String>(0).map_err(|e| e.to_string())
        })
    })
    .join()
    .unwrap()
}

#[test]
fn postgres_store_passes_the_marks_contract() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let store = PgStore::open(&db.url).unwrap();
    contract::marks(&store);
    contract::marks_race(&store);
    // A second instance on the same database sees the same marks.
    let other = PgStore::open(&db.url).unwrap();
    assert_eq!(
        other.raise("passkey/a", 9).unwrap(),
        crate::store::Raise::Kept(u64::MAX)
    );
}

#[test]
fn postgres_store_passes_the_config_versions_contract() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    contract::config_versions(&PgStore::open(&db.url).unwrap());
    // Another instance on the same database reads the same version.
    let other = PgStore::open(&db.url).unwrap();
    assert_eq!(other.config_version().unwrap(), 2);
}

#[test]
fn postgres_store_passes_the_outbox_contract() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    contract::outbox(&PgStore::open(&db.url).unwrap());
}

#[test]
fn postgres_outbox_due_entries_of_a_flooded_kind_do_not_hide_another_kinds() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    contract::outbox_due_is_fair(&PgStore::open(&db.url).unwrap());
}

#[test]
fn serve_refuses_an_unmigrated_or_newer_schema_naming_the_command() {
    let Some(db) = Fresh::new() else { return };
    let err = PgStore::open(&db.url).err().expect("refused");
    assert!(
        err.to_string().contains("approval-server migrate --store"),
        "{err}"
    );
    assert_eq!(PgStore::migrate(&db.url).unwrap(), (0, SCHEMA));
    // Twice is harmless.
    assert_eq!(PgStore::migrate(&db.url).unwrap(), (SCHEMA, SCHEMA));
    PgStore::open(&db.url).unwrap();
    testdb::psql(
        &db.url,
        &format!(
            "INSERT INTO schema_migrations (version) VALUES ({})",
            SCHEMA + 1
        ),
    );
    let err = PgStore::open(&db.url).err().expect("refused");
    assert!(err.to_string().contains("newer than this build"), "{err}");
}

#[test]
fn two_instances_share_the_server_id_and_key() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let a = PgStore::open(&db.url).unwrap();
    let b = PgStore::open(&db.url).unwrap();
    assert_eq!(a.server_id(), b.server_id());
    let k1 = PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(&[1; 32]));
    let k2 = PublicKey::from_signing_key(&ed25519_dalek::SigningKey::from_bytes(&[2; 32]));
    assert_eq!(a.bind_server_key(&k1).unwrap(), k1);
    assert_eq!(b.bind_server_key(&k2).unwrap(), k1);
    assert_eq!(
        a.shared_server_secret("one").unwrap(),
        b.shared_server_secret("two").unwrap()
    );
}

/// Concurrent writers on two instances: one audit chain, no gap, no fork; of
/// concurrent claims on one revision exactly one wins.
#[test]
fn concurrent_writers_on_two_instances_make_one_chain_and_one_winner() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let stores = [
        Arc::new(PgStore::open(&db.url).unwrap()),
        Arc::new(PgStore::open(&db.url).unwrap()),
    ];
    let ev = |rec: &ProposalRecord| contract::ev(crate::audit::AuditKind::Proposed, rec);
    let target = contract::record("p-target", "agent1", 1_800_000_000);
    stores[0]
        .create(&target, ev(&target), PendingLimits::default())
        .unwrap();
    let mut threads = Vec::new();
    for t in 0..8 {
        let s = stores[t % 2].clone();
        let target = target.clone();
        threads.push(std::thread::spawn(move || {
            for i in 0..10 {
                let r = contract::record(&format!("p-{t}-{i}"), "agent1", 1_800_000_000 + i);
                s.create(&r, ev(&r), PendingLimits::default()).unwrap();
            }
            let mut next = target.clone();
            next.revision = 1;
            matches!(s.update(&next, ev(&next)).unwrap(), Cas::Applied)
        }));
    }
    let wins = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|w| *w)
        .count();
    assert_eq!(wins, 1);
    let (entries, head) = stores[1].audit().unwrap();
    assert_eq!(crate::audit::verify_chain(entries, head), Ok(1 + 80 + 1));
}

#[test]
fn an_unreachable_database_is_reported_as_unavailable() {
    if testdb::database_url().is_none() {
        return;
    }
    // A port nothing listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let err = PgStore::open(&format!("postgres://root@127.0.0.1:{port}/test"))
        .err()
        .expect("refused");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
}

#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redact("postgres://u:secret@h:5432/db"),
        "postgres://u:***@h:5432/db"
    );
    assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    // A password holding `/` (base64) or `@`, and one given as a parameter.
    assert_eq!(
        redact("postgres://u:ab/c+d=@h:5432/db"),
        "postgres://u:***@h:5432/db"
    );
    assert_eq!(redact("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
    assert_eq!(
        redact("postgres://h/db?user=u&password=s3cret&sslmode=disable"),
        "postgres://h/db?user=u&password=***&sslmode=disable"
    );
    assert_eq!(redact("u:secret"), "(not a URL)");
}

/// A migrated fresh database, its store, and one record created in it (`p-target`).
fn with_target() -> Option<(Fresh, Arc<PgStore>, ProposalRecord)> {
    let db = Fresh::new()?;
    PgStore::migrate(&db.url).unwrap();
    let store = Arc::new(PgStore::open(&db.url).unwrap());
    let target = contract::record("p-target", "agent1", 1_800_000_000);
    let ev = contract::ev(crate::audit::AuditKind::Proposed, &target);
    store.create(&target, ev, PendingLimits::default()).unwrap();
    Some((db, store, target))
}

/// Group commit, attacked from inside one batch: sixteen claims of one record
/// computed from the same read arrive together. One applies; every other is handed
/// the winner's record (what is stored now), as if each had been its own
/// transaction after it; and the writes were really gathered (fewer transactions
/// than members).
#[test]
fn claims_of_one_record_in_one_batch_apply_once_and_the_rest_get_the_winner() {
    let Some((_db, store, target)) = with_target() else {
        return;
    };
    let ev = |rec: &ProposalRecord| contract::ev(crate::audit::AuditKind::Proposed, rec);
    let (batches_before, members_before) = store.batch_counts();
    let gate = Arc::new(std::sync::Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let (store, gate, target) = (store.clone(), gate.clone(), target.clone());
            std::thread::spawn(move || {
                let mut next = target.clone();
                next.revision = 1;
                next.preview.summary = format!("writer {t}");
                gate.wait();
                (t, store.update(&next, ev(&next)).unwrap())
            })
        })
        .collect();
    let answers: Vec<(usize, Cas)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: Vec<usize> = answers
        .iter()
        .filter(|(_, c)| matches!(c, Cas::Applied))
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(winners.len(), 1, "{winners:?}");
    let stored = store.get(target.id()).unwrap().unwrap();
    assert_eq!(stored.revision, 1);
    assert_eq!(stored.preview.summary, format!("writer {}", winners[0]));
    for (t, cas) in &answers {
        match cas {
            Cas::Applied => {}
            Cas::Conflict(cur) => {
                assert_eq!(cur.revision, 1, "writer {t} was handed an older record");
                assert_eq!(cur.preview.summary, stored.preview.summary);
            }
            Cas::Missing => panic!("writer {t}: missing"),
        }
    }
    let (batches, members) = store.batch_counts();
    let (batches, members) = (batches - batches_before, members - members_before);
    assert_eq!(members, 16);
    assert!(
        batches < members,
        "{batches} transactions for {members} writes: nothing was gathered"
    );
    let (entries, head) = store.audit().unwrap();
    assert_eq!(crate::audit::verify_chain(entries, head), Ok(2));
}

/// The pending limits hold inside a batch: creates of one agent arriving together
/// are admitted in order up to the limit, the rest refused on their own without
/// failing the others, and the counters agree with the rows.
#[test]
fn creates_gathered_in_one_batch_respect_the_pending_limit_one_by_one() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let store = Arc::new(PgStore::open(&db.url).unwrap());
    let limits = PendingLimits {
        per_agent: 3,
        total: 100,
    };
    let gate = Arc::new(std::sync::Barrier::new(12));
    let threads: Vec<_> = (0..12)
        .map(|t| {
            let (store, gate) = (store.clone(), gate.clone());
            std::thread::spawn(move || {
                let r = contract::record(&format!("p-{t}"), "agent1", 1_800_000_000 + t);
                let dup = r.clone();
                gate.wait();
                let first = store.create(
                    &r,
                    contract::ev(crate::audit::AuditKind::Proposed, &r),
                    limits,
                );
                // An admitted id again, at once: refused as existing, never stored twice.
                let again = first
                    .is_ok()
                    .then(|| store.create(&dup, vec![], PendingLimits::default()));
                (first, again)
            })
        })
        .collect();
    let mut admitted = 0;
    for t in threads {
        let (first, again) = t.join().unwrap();
        match first {
            Ok(()) => {
                admitted += 1;
                assert!(
                    matches!(again, Some(Err(StoreError::Exists(_)))),
                    "{again:?}"
                );
            }
            Err(StoreError::Full(why)) => assert!(why.contains("agent1"), "{why}"),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(admitted, 3);
    assert_eq!(store.list_status(Status::Pending, 100).unwrap().len(), 3);
    let agent = AgentName::parse("agent1").unwrap();
    assert_eq!(store.pending_count(Some(&agent)).unwrap(), 3);
    assert_eq!(store.pending_count(None).unwrap(), 3);
    let (entries, head) = store.audit().unwrap();
    assert_eq!(crate::audit::verify_chain(entries, head), Ok(3));
}

/// The read cache, across instances: an instance that cached a record serves the
/// other instance's change once its NOTIFY arrives (within the bound), and its own
/// acknowledged writes at once.
#[test]
fn a_cached_read_follows_another_instances_write_and_never_trails_its_own() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let (a, b) = (
        PgStore::open(&db.url).unwrap(),
        PgStore::open(&db.url).unwrap(),
    );
    let mut rec = contract::record("p-cached", "agent1", 1_800_000_000);
    a.create(&rec, vec![], PendingLimits::default()).unwrap();
    // The listener must be up before the cache serves anything.
    let start = std::time::Instant::now();
    while a.cache.get(rec.id()).is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "a's cache never came on"
        );
        std::thread::sleep(Duration::from_millis(20));
        let _ = a.get(rec.id()).unwrap();
    }
    // What an execute reads: the stored record at once, never the cached copy, so
    // "not approved yet" never comes from a copy trailing the other instance.
    rec.revision = 1;
    assert!(matches!(b.update(&rec, vec![]).unwrap(), Cas::Applied));
    assert_eq!(a.get_latest(rec.id()).unwrap().unwrap().revision, 1);
    for revision in 2..=20 {
        rec.revision = revision;
        rec.preview.summary = format!("revision {revision}");
        let (writer, reader) = if revision % 2 == 0 {
            (&a, &b)
        } else {
            (&b, &a)
        };
        assert!(matches!(writer.update(&rec, vec![]).unwrap(), Cas::Applied));
        // Its own write: at once.
        assert_eq!(writer.get(rec.id()).unwrap().unwrap().revision, revision);
        // The other's: once the NOTIFY is in.
        let start = std::time::Instant::now();
        loop {
            let seen = reader.get(rec.id()).unwrap().unwrap().revision;
            assert!(seen <= revision);
            if seen == revision {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "revision {revision} written elsewhere was not seen within 2 s (still {seen})"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Two instances' batches from their very first ones (statements not yet prepared
/// on either connection) interleave on the audit head: every write lands in its own
/// instance's transaction under the head lock, none after its COMMIT, so the chain is
/// one chain with every entry, and no write fails. (A batch whose COMMIT was sent
/// before a statement still being prepared broke exactly this: `audit_pkey`.)
#[test]
fn two_instances_batching_from_their_first_write_keep_one_chain() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    for round in 0..3 {
        let stores = [
            Arc::new(PgStore::open(&db.url).unwrap()),
            Arc::new(PgStore::open(&db.url).unwrap()),
        ];
        let gate = Arc::new(std::sync::Barrier::new(16));
        let threads: Vec<_> = (0..16)
            .map(|t| {
                let (s, gate) = (stores[t % 2].clone(), gate.clone());
                std::thread::spawn(move || {
                    gate.wait();
                    for i in 0..12 {
                        let mut r = contract::record(
                            &format!("p-{round}-{t}-{i}"),
                            &format!("agent{t}"),
                            1_800_000_000 + i,
                        );
                        let ev =
                            |r: &ProposalRecord| contract::ev(crate::audit::AuditKind::Proposed, r);
                        s.create(&r, ev(&r), PendingLimits::default()).unwrap();
                        r.revision = 1;
                        assert!(matches!(s.update(&r, ev(&r)).unwrap(), Cas::Applied));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (entries, head) = stores[0].audit().unwrap();
        assert_eq!(
            crate::audit::verify_chain(entries, head),
            Ok((round + 1) * 16 * 12 * 2)
        );
    }
}

/// A write awaited by a caller that then goes away (an HTTP client that hung up
/// drops the request's future) still commits, and since the service will never
/// announce it, the store does, after the commit: waiters on this instance hear of
/// it. A writer that heard its answer is not announced twice.
#[test]
fn a_write_whose_writer_went_away_is_announced_after_its_commit() {
    let Some(db) = Fresh::new() else { return };
    PgStore::migrate(&db.url).unwrap();
    let store = PgStore::open(&db.url).unwrap();
    let mut events = store.remote_events().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rec = contract::record("p-gone", "agent1", 1_800_000_000);
    rt.block_on(store.create_async(&rec, vec![], PendingLimits::default()))
        .unwrap();
    let mut next = rec.clone();
    next.revision = 1;
    assert!(matches!(
        rt.block_on(store.update_async(&next, vec![])).unwrap(),
        Cas::Applied
    ));
    // Heard: nothing for the store to announce.
    assert!(events.try_recv().is_err());

    let mut gone = next.clone();
    gone.revision = 2;
    drop(store.update_async(&gone, vec![]));
    let heard =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), events.recv()).await });
    assert_eq!(heard.unwrap().unwrap(), Some(rec.id().clone()));
    assert_eq!(store.get(rec.id()).unwrap().unwrap().revision, 2);
}

/// Writes that queue while a batch waits for the audit head (another instance's
/// commit holds it) join that batch once it holds the head, in the order they
/// were queued: one transaction for all, each member decided as its own
/// transaction after the ones before it (a late claim of a record an early member
/// changed conflicts and gets that member's record; a late create of a new agent's
/// proposal counts against that agent's limit; an id created twice is refused once).
#[test]
fn writes_queued_while_a_batch_waits_for_the_head_join_it() {
    let Some((db, store, target)) = with_target() else {
        return;
    };

    // Another connection holds the head, as another instance's batch would.
    let (to_holder, orders) = std::sync::mpsc::channel::<()>();
    let (holder_ready, ready) = std::sync::mpsc::channel::<i32>();
    let url = db.url.clone();
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (cfg, tls) = parse_url(&url).unwrap();
        let c = rt.block_on(connect(&cfg, &tls)).unwrap();
        let pid: i32 = rt
            .block_on(async {
                c.batch_execute("BEGIN").await?;
                c.query_one("SELECT seq FROM audit_head FOR UPDATE", &[])
                    .await?;
                c.query_one("SELECT pg_backend_pid()", &[]).await
            })
            .unwrap()
            .get(0);
        holder_ready.send(pid).unwrap();
        let _ = orders.recv();
        rt.block_on(c.batch_execute("ROLLBACK")).unwrap();
    });
    let pid = ready.recv().unwrap();
    let (batches_before, members_before) = store.batch_counts();

    // Each awaited write is queued when it is asked for (the futures only wait for
    // the answers), so the order of the calls below is the order of the queue.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ev = |rec: &ProposalRecord| contract::ev(crate::audit::AuditKind::Decision, rec);
    let at = |summary: &str| {
        let mut r = target.clone();
        r.revision = 1;
        r.preview.summary = summary.into();
        r
    };
    let (first, second) = (at("first"), at("second"));
    let early = store.update_async(&first, ev(&first));
    // The early write's batch is waiting for the head.
    let waiting = format!(
        "SELECT count(*)::text FROM pg_stat_activity WHERE {pid} = ANY(pg_blocking_pids(pid))"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while run_query(&db.url, &waiting).unwrap() != "1" {
        assert!(
            std::time::Instant::now() < deadline,
            "no batch waits for the head"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let claim = store.update_async(&second, ev(&second));
    let limits = PendingLimits {
        per_agent: 1,
        total: 100,
    };
    let new =
        ["p-new-1", "p-new-2", "p-new-1"].map(|id| contract::record(id, "agent2", 1_800_000_001));
    let creates: Vec<_> = new
        .iter()
        .map(|r| store.create_async(r, ev(r), limits))
        .collect();
    to_holder.send(()).unwrap();
    holder.join().unwrap();

    assert!(matches!(rt.block_on(early), Ok(Cas::Applied)));
    match rt.block_on(claim) {
        Ok(Cas::Conflict(cur)) => assert_eq!(cur.preview.summary, "first"),
        other => panic!("the late claim: {other:?}"),
    }
    let answers: Vec<String> = creates
        .into_iter()
        .map(|c| match rt.block_on(c) {
            Ok(()) => "created".to_owned(),
            Err(StoreError::Full(_)) => "full".to_owned(),
            Err(StoreError::Exists(_)) => "exists".to_owned(),
            Err(e) => format!("{e}"),
        })
        .collect();
    assert_eq!(answers, ["created", "full", "exists"]);
    let (batches, members) = store.batch_counts();
    assert_eq!(
        (batches - batches_before, members - members_before),
        (1, 5),
        "the queued writes were not gathered into the waiting batch"
    );
    let agent2 = AgentName::parse("agent2").unwrap();
    assert_eq!(store.pending_count(Some(&agent2)).unwrap(), 1);
    assert_eq!(store.pending_count(None).unwrap(), 2);
    assert_eq!(
        store.get(target.id()).unwrap().unwrap().preview.summary,
        "first"
    );
    // The target's entry, then the early update's and the late create's, sealed
    // in queue order into one chain.
    let (entries, head) = store.audit().unwrap();
    assert_eq!(crate::audit::verify_chain(entries, head), Ok(3));
}
