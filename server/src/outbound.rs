//! Outbound HTTP: the one client builder every request this server sends starts from
//! (the stdio bridge, webhook executors, notifications).
//!
//! It lives apart from [`crate::listener`] (inbound) so that the bridge, the executors
//! and the notifiers need not import the listener. It may import core only.

use std::time::Duration;

/// The builder every outbound HTTP client of this crate starts from: an idle pooled
/// connection is dropped after [`approval_core::time::CLIENT_POOL_IDLE_SECS`], before a
/// server closing it for idling (the listener's header-read time-out,
/// [`approval_core::time::CONNECTION_IDLE_SECS`]) could lose a request written on it.
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().pool_idle_timeout(Duration::from_secs(
        approval_core::time::CLIENT_POOL_IDLE_SECS,
    ))
}
