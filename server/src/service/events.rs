//! The event bus: every change to a proposal is numbered, kept for a while for
//! streams that resume (`Last-Event-ID`), and broadcast to long-polls and watchers.
//!
//! Used by the service after each stored change, and for other instances' changes
//! (`Service::announce_remote`). May import core; not the service itself.

use approval_core::ProposalId;
use tokio::sync::broadcast;

/// A change to a proposal, announced to long-polls and watchers.
#[derive(Debug, Clone)]
pub struct Event {
    /// Which proposal.
    pub id: ProposalId,
    /// Its place in this process's sequence of announcements (from 1), which
    /// `/v1/events` sends as the SSE id so a client can resume with `Last-Event-ID`.
    pub seq: u64,
}

/// Announcements kept for a resuming event stream (`Last-Event-ID`).
pub const RECENT_EVENTS: usize = 4096;

/// The last announcements, in order, and the next sequence number.
#[derive(Default)]
struct Recent {
    next: u64,
    events: std::collections::VecDeque<Event>,
}

/// The announcements of this process: the broadcast, the recent ones in order, and
/// the epoch that tells this process's event ids from another's.
pub(super) struct EventBus {
    sender: broadcast::Sender<Event>,
    recent: std::sync::Mutex<Recent>,
    /// Tells this process's event ids from another's (a restart starts over).
    epoch: String,
}

impl EventBus {
    pub(super) fn new() -> Self {
        Self {
            sender: broadcast::channel(4096).0,
            recent: Default::default(),
            epoch: {
                let mut b = [0u8; 4];
                let _ = getrandom::fill(&mut b);
                hex::encode(b)
            },
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    /// Numbers a change, keeps it for resuming streams, and broadcasts it (under one
    /// lock, so receivers see the numbers in order).
    pub(super) fn announce(&self, id: ProposalId) {
        let mut r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        r.next += 1;
        let ev = Event { id, seq: r.next };
        r.events.push_back(ev.clone());
        if r.events.len() > RECENT_EVENTS {
            r.events.pop_front();
        }
        let _ = self.sender.send(ev);
    }

    pub(super) fn event_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.epoch)
    }

    pub(super) fn events_after(&self, last_event_id: &str) -> Option<Vec<Event>> {
        let (epoch, seq) = last_event_id.split_once('-')?;
        let seq: u64 = seq.parse().ok()?;
        let r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if epoch != self.epoch || seq > r.next {
            return None;
        }
        let oldest = r.events.front().map_or(r.next + 1, |e| e.seq);
        if seq + 1 < oldest {
            return None;
        }
        Some(r.events.iter().filter(|e| e.seq > seq).cloned().collect())
    }
}
