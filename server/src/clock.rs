//! The server's clock, injected so tests control time instead of sleeping.

use approval_core::Timestamp;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in whole seconds.
    fn now(&self) -> Timestamp;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Timestamp::from_unix(secs)
    }
}

/// A clock tests move by hand.
#[derive(Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// Starts at `unix` seconds.
    pub fn new(unix: i64) -> Self {
        Self(Arc::new(AtomicI64::new(unix)))
    }
    /// Moves forward.
    pub fn advance(&self, secs: i64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix(self.0.load(Ordering::SeqCst))
    }
}
