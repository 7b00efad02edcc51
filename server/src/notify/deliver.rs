//! The deliverer: a queue per channel with bounded concurrency, fed with the
//! outbox entries that are due, fairly across kinds ([`super::due`]).
//!
//! Why it is shaped so (issue #31, item 3): one pass that sent every entry in turn
//! let one failing or slow channel hold back every other notification. Here:
//! - each read takes only entries due now, by next attempt, at most [`PER_KIND`] of
//!   one kind and [`READ`] in all, so a kind's backlog (the agent can make one in
//!   seconds) never hides another kind's entry;
//! - each delivery is its own task; at most [`PER_CHANNEL`] run at once per channel
//!   and [`IN_FLIGHT`] in all, so a channel that answers slowly or not at all holds
//!   only its own slots, and other channels keep delivering;
//! - an entry whose channel has no free slot waits, among at most [`READ`] entries
//!   of the last read, and starts when a slot frees; the next read replaces them
//!   (they stay in the outbox). Memory is bounded by [`READ`] entries read and
//!   [`IN_FLIGHT`] deliveries, whatever the outbox holds;
//! - results come back to this one task, which alone writes the entry's retry state
//!   (an entry is never read back while its deliveries are in flight).

use super::{channels_of, describe, notice, NotifyOptions, OutboxItem, FAILED, QUEUED_DELIVERED};
use crate::service::Service;
use approval_core::notify::NotifyChannel;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Most entries of one kind in one read.
pub const PER_KIND: usize = 32;
/// Most entries in one read.
pub const READ: usize = 256;
/// Most deliveries in flight to one channel.
pub const PER_CHANNEL: usize = 4;
/// Most deliveries in flight in all.
pub const IN_FLIGHT: usize = 64;
/// How soon the outbox is read again after a read whose entries all started.
const SOON: Duration = Duration::from_millis(100);

/// One delivery's result.
struct Done {
    seq: u64,
    channel: usize,
    key: String,
    /// The channel for logs ([`describe`]).
    what: String,
    /// The channel's type, the metrics' `channel` label.
    kind: &'static str,
    result: Result<(), String>,
}

/// An entry of the last read not yet started.
struct Waiting {
    seq: u64,
    item: OutboxItem,
    /// The channels whose full queues it waits for (empty: not tried yet), so a
    /// waiting entry costs no store read until one of them has a free slot.
    blocked_on: Vec<String>,
}

/// An entry with deliveries in flight.
struct Pending {
    item: OutboxItem,
    /// Deliveries still in flight.
    jobs: usize,
    /// Channels the proposal's notifications go to now.
    channels: usize,
    /// Why the last failed delivery of this round failed.
    failed: Option<String>,
}

/// The deliverer's state: what is in flight, per entry and per channel.
pub(super) struct Deliverer {
    svc: Arc<Service>,
    opts: NotifyOptions,
    http: reqwest::Client,
    mail: Arc<super::email::Mailer>,
    pending: HashMap<u64, Pending>,
    /// The last read's entries not yet started (a channel's queue was full): at
    /// most [`READ`], started as slots free, replaced by the next read.
    ready: VecDeque<Waiting>,
    per_channel: HashMap<String, usize>,
    in_flight: usize,
    tx: mpsc::UnboundedSender<Done>,
    rx: mpsc::UnboundedReceiver<Done>,
}

/// A channel's identity for its queue: its whole configuration.
fn channel_key(ch: &NotifyChannel) -> String {
    serde_json::to_string(ch).unwrap_or_else(|_| describe(ch))
}

fn now_ms() -> u64 {
    super::now_ms()
}

impl Deliverer {
    pub(super) fn new(svc: Arc<Service>, opts: NotifyOptions) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            http: super::webhook::client(opts.timeout),
            mail: Arc::new(super::email::Mailer::new(&opts)),
            svc,
            opts,
            pending: HashMap::new(),
            ready: VecDeque::new(),
            per_channel: HashMap::new(),
            in_flight: 0,
            tx,
            rx,
        }
    }

    /// Runs forever: reads what is due every tick, and again soon after a read
    /// whose entries have all started (more may be due); starts waiting entries as
    /// slots free; settles each delivery as it ends.
    pub(super) async fn run(mut self) {
        let mut warned_on = None;
        let mut next_read = tokio::time::Instant::now();
        loop {
            tokio::select! {
                Some(done) = self.rx.recv() => {
                    self.settle(done);
                    let had = !self.ready.is_empty();
                    if let Err(e) = self.start_ready() {
                        tracing::error!(error = %e, "notification outbox cannot be read");
                    }
                    if had && self.ready.is_empty() {
                        next_read = next_read.min(tokio::time::Instant::now() + SOON);
                    }
                }
                _ = tokio::time::sleep_until(next_read) => {
                    // Queue only when some channel exists (a reload may add or remove them).
                    let on = super::any_channel(&self.svc, &self.opts);
                    self.svc.store().set_outbox(on, self.opts.cap);
                    if warned_on != Some(on) {
                        tracing::info!(on, "notifications");
                        warned_on = Some(on);
                    }
                    let mut wait = self.opts.tick;
                    // Several instances on one database: one delivers at a time.
                    if self.svc.leads(crate::service::upkeep::Task::Outbox).await {
                        match self.read().await {
                            // Everything read has started: more may be due.
                            Ok(true) if self.ready.is_empty() => wait = wait.min(SOON),
                            Ok(_) => {}
                            Err(e) => tracing::error!(error = %e, "notification outbox cannot be read"),
                        }
                    }
                    next_read = tokio::time::Instant::now() + wait;
                }
            }
        }
    }

    /// Reads what is due (replacing what waited from the last read) and starts what
    /// slots allow. Returns whether the read found anything to start.
    async fn read(&mut self) -> Result<bool, crate::store::StoreError> {
        let store = self.svc.store().clone();
        let now = now_ms();
        let page = tokio::task::spawn_blocking(move || store.outbox_due(now, PER_KIND, READ))
            .await
            .map_err(|e| crate::store::StoreError::Backend(e.to_string()))??;
        self.ready = page
            .into_iter()
            .filter(|(seq, _)| !self.pending.contains_key(seq))
            .map(|(seq, item)| Waiting {
                seq,
                item,
                blocked_on: Vec::new(),
            })
            .collect();
        let found = !self.ready.is_empty();
        self.start_ready()?;
        Ok(found)
    }

    /// Starts deliveries for the waiting entries, in the read's (fair) order, as far
    /// as slots allow; an entry none of whose channels has a free slot keeps waiting.
    fn start_ready(&mut self) -> Result<(), crate::store::StoreError> {
        let mut waiting = VecDeque::new();
        while let Some(w) = self.ready.pop_front() {
            let still_blocked = !w.blocked_on.is_empty()
                && w.blocked_on
                    .iter()
                    .all(|k| self.per_channel.get(k).copied().unwrap_or(0) >= PER_CHANNEL);
            if self.in_flight >= IN_FLIGHT || still_blocked {
                waiting.push_back(w);
                continue;
            }
            if let Some(blocked_on) = self.start(w.seq, &w.item)? {
                waiting.push_back(Waiting { blocked_on, ..w });
            }
        }
        self.ready = waiting;
        Ok(())
    }

    /// Starts one entry's deliveries; when no slot was free, returns the channels
    /// it waits for.
    fn start(
        &mut self,
        seq: u64,
        item: &OutboxItem,
    ) -> Result<Option<Vec<String>>, crate::store::StoreError> {
        if self.pending.contains_key(&seq) {
            return Ok(None);
        }
        // Right before sending: a leader frozen after its read and replaced meanwhile
        // must not send what the new leader delivers (store/postgres/lease.rs).
        if !self.svc.still_leads(crate::service::upkeep::Task::Outbox) {
            return Ok(None);
        }
        let Some(rec) = self.svc.store().get(&item.proposal_id)? else {
            self.svc.store().outbox_remove(seq)?;
            return Ok(None);
        };
        let channels = channels_of(&self.svc, &self.opts, &rec);
        if channels
            .iter()
            .enumerate()
            .all(|(i, _)| item.done.contains(&i))
        {
            self.svc.store().outbox_remove(seq)?;
            if !channels.is_empty() {
                QUEUED_DELIVERED.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(None);
        }
        let delivery = format!("{}-{seq}", self.svc.store().server_id());
        let mut jobs = 0;
        let mut blocked_on = Vec::new();
        for (i, ch) in channels.iter().enumerate() {
            if item.done.contains(&i) || self.in_flight >= IN_FLIGHT {
                continue;
            }
            let key = channel_key(ch);
            let busy = self.per_channel.entry(key.clone()).or_default();
            if *busy >= PER_CHANNEL {
                // Its queue is full: this channel's delivery waits.
                blocked_on.push(key);
                continue;
            }
            *busy += 1;
            self.in_flight += 1;
            jobs += 1;
            let n = notice(&self.svc, &rec, item, ch.include_payload());
            let (http, mail, tx, ch, delivery) = (
                self.http.clone(),
                self.mail.clone(),
                self.tx.clone(),
                ch.clone(),
                delivery.clone(),
            );
            tokio::spawn(async move {
                let (kind, result) = match &ch {
                    NotifyChannel::Webhook { .. } => (
                        "webhook",
                        super::webhook::send(&http, &ch, &n, &delivery).await,
                    ),
                    NotifyChannel::Email { .. } => ("email", mail.send(&ch, &n, &delivery).await),
                };
                let what = describe(&ch);
                let _ = tx.send(Done {
                    seq,
                    channel: i,
                    key,
                    what,
                    kind,
                    result,
                });
            });
        }
        if jobs == 0 {
            return Ok(Some(blocked_on));
        }
        self.pending.insert(
            seq,
            Pending {
                item: item.clone(),
                jobs,
                channels: channels.len(),
                failed: None,
            },
        );
        Ok(None)
    }

    /// Records one delivery's result; once the entry has none in flight, writes
    /// its new state (removed when every channel has it, else its retry).
    fn settle(&mut self, done: Done) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(busy) = self.per_channel.get_mut(&done.key) {
            *busy = busy.saturating_sub(1);
            if *busy == 0 {
                self.per_channel.remove(&done.key);
            }
        }
        let Some(p) = self.pending.get_mut(&done.seq) else {
            return;
        };
        let (id, event) = (p.item.proposal_id.clone(), p.item.event.as_str());
        self.svc.metrics().delivery(done.kind, done.result.is_ok());
        match done.result {
            Ok(()) => {
                tracing::info!(%id, event, channel = %done.what, "notification delivered");
                if !p.item.done.contains(&done.channel) {
                    p.item.done.push(done.channel);
                }
            }
            Err(why) => {
                tracing::warn!(%id, event, channel = %done.what, attempt = p.item.attempts + 1, "notification not delivered: {why}");
                p.failed = Some(why);
            }
        }
        p.jobs -= 1;
        if p.jobs > 0 {
            return;
        }
        let Some(p) = self.pending.remove(&done.seq) else {
            return;
        };
        if let Err(e) = self.write_back(done.seq, p) {
            tracing::error!(error = %e, "notification outbox cannot be written");
        }
    }

    fn write_back(&self, seq: u64, p: Pending) -> Result<(), crate::store::StoreError> {
        let Pending {
            mut item,
            channels,
            failed,
            ..
        } = p;
        let store = self.svc.store();
        if (0..channels).all(|i| item.done.contains(&i)) {
            store.outbox_remove(seq)?;
            QUEUED_DELIVERED.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let Some(why) = failed else {
            // Nothing failed; a channel's queue was full: still due, kept as it is
            // but for the channels that have it now.
            return store.outbox_put(seq, &item);
        };
        item.attempts += 1;
        let now = now_ms();
        let age_ms = now.saturating_sub((item.at.unix().max(0) as u64) * 1000);
        if age_ms >= self.opts.give_up.as_millis() as u64 {
            tracing::error!(id = %item.proposal_id, event = item.event.as_str(), attempts = item.attempts, "notification given up after {:?}: {why}", self.opts.give_up);
            store.outbox_remove(seq)?;
            FAILED.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let shift = item.attempts.saturating_sub(1).min(20);
        let delay = self
            .opts
            .retry_base
            .saturating_mul(1u32 << shift)
            .min(self.opts.retry_max);
        item.next_try_ms = now + delay.as_millis() as u64;
        store.outbox_put(seq, &item)
    }
}
