//! The scenarios. Each starts its own server over a fresh store (so peak RSS
//! and store size belong to that scenario alone), prepares what it needs
//! untimed, then runs `clients` concurrent workers until the duration ends.
//!
//! Every loop is bounded twice: by a deadline and by a count.
//!
//! One file per scenario; what they share is `harness`, which imports none of them.

mod decide;
mod harness;
mod prepare;
mod scale;
mod status;
mod stdio;

pub use decide::{decide, round_trip};
pub use harness::Settings;
pub use prepare::prepare;
pub use scale::scale;
pub use status::{noop_load, pending_ids, status, status_load};
pub use stdio::stdio;
