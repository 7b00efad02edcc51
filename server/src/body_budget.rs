//! A memory budget for parsing `/mcp` request bodies.
//!
//! A JSON body costs far more memory parsed than raw: `[{},{},...]` is three bytes a
//! value on the wire and some sixty in a `serde_json::Value` array, and a request is
//! parsed twice (our exact parser, then rmcp's). Eight concurrent 5 MiB bodies of
//! empty objects once took the server from 18 MB to 659 MB. So before any parsing,
//! each body is scanned once, without allocating, for an upper bound of the values it
//! holds ([`value_count`]), and:
//!
//! - a body holding more than [`MAX_REQUEST_VALUES`] values is refused outright
//!   (413, `LIMIT_EXCEEDED`): no payload a human can review needs that many;
//! - the others are parsed under one shared budget of estimated bytes
//!   ([`PARSE_BUDGET_BYTES`], [`cost`]): a request waits up to [`BUDGET_WAIT`] for
//!   its share, then is refused (503, `LIMIT_EXCEEDED`, `Retry-After`). The share is
//!   held until the response is ready, since the parsed request lives that long.
//!
//! The raw body is under the same budget: before a body is read, its declared
//! length (or the body limit, when it declares none) is reserved
//! ([`ParseBudget::reserve`]), and only once it is read is the rest of its cost added
//! ([`ParseBudget::admit`]). So many connections sending large bodies at once wait
//! for the budget instead of each holding 5 MiB in memory.
//!
//! Only `/mcp` (the agent's side) is under this budget. The approver API's bodies
//! are small signed decisions under their own size limit, so an agent filling this
//! budget cannot delay an approver's veto or revoke.

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Time a client has to send a whole request body, on `/mcp` and for a decision: a
/// deadline for the body, not a pause between its pieces, so a body dribbled a byte
/// at a time cannot hold its connection or its share of the parse budget for longer.
pub const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The most JSON values (scalars, arrays, objects and object keys) one `/mcp`
/// request may hold.
pub const MAX_REQUEST_VALUES: usize = 400_000;

/// Estimated bytes one parsed value costs while a request is handled (both parses,
/// the growth slack of arrays and maps, the payload checks), measured with the peak
/// RSS tests in `tests/tests/memory_budget.rs`.
pub const BYTES_PER_VALUE: usize = 96;

/// Estimated bytes that all `/mcp` requests being parsed and handled may take together.
pub const PARSE_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// How long a request waits for its share of the budget before it is refused.
pub const BUDGET_WAIT: Duration = Duration::from_secs(10);

/// Permits are counted in KiB (a semaphore counts in `u32`).
const UNIT: usize = 1024;

/// An upper bound on the number of values and object keys in a JSON text, without
/// parsing it: one more than the `[`, `{`, `,` and `:` outside strings. Every value
/// but the outermost follows one of them, and so does every key. Linear, allocates
/// nothing.
pub fn value_count(body: &[u8]) -> usize {
    let mut n = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' | b',' | b':' => n += 1,
            _ => {}
        }
    }
    n
}

/// The estimated bytes handling a body costs: the body itself and its values.
pub fn cost(body_len: usize, values: usize) -> usize {
    body_len.saturating_add(values.saturating_mul(BYTES_PER_VALUE))
}

/// Why a body was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It holds more values than any request may.
    TooManyValues {
        /// Its value count (an upper bound).
        values: usize,
    },
    /// The budget stayed full for [`BUDGET_WAIT`].
    Busy,
}

impl Refusal {
    /// What was wrong and what to do, for the client.
    pub fn message(&self) -> String {
        match self {
            Refusal::TooManyValues { values } => format!(
                "LIMIT_EXCEEDED: the request holds about {values} JSON values, over the limit of \
                 {MAX_REQUEST_VALUES} per request: send a smaller payload (fewer, larger values)"
            ),
            Refusal::Busy => format!(
                "LIMIT_EXCEEDED: the server is parsing other large requests and its memory budget \
                 for them stayed full for {}s: retry in a few seconds, or send a smaller payload",
                BUDGET_WAIT.as_secs()
            ),
        }
    }
}

/// The shared budget.
#[derive(Clone)]
pub struct ParseBudget {
    permits: Arc<Semaphore>,
    total_units: usize,
    wait: Duration,
}

impl Default for ParseBudget {
    fn default() -> Self {
        Self::new(PARSE_BUDGET_BYTES, BUDGET_WAIT)
    }
}

impl ParseBudget {
    /// A budget of `bytes`, with `wait` as the longest wait for a share.
    pub fn new(bytes: usize, wait: Duration) -> Self {
        let total_units = (bytes / UNIT).max(1);
        Self {
            permits: Arc::new(Semaphore::new(total_units)),
            total_units,
            wait,
        }
    }

    fn units(&self, bytes: usize) -> u32 {
        let units = bytes.div_ceil(UNIT).clamp(1, self.total_units);
        u32::try_from(units).unwrap_or(u32::MAX)
    }

    async fn acquire(&self, units: u32) -> Result<OwnedSemaphorePermit, Refusal> {
        match tokio::time::timeout(self.wait, self.permits.clone().acquire_many_owned(units)).await
        {
            Ok(Ok(permit)) => Ok(permit),
            // Timed out, or the semaphore was closed (never done).
            _ => Err(Refusal::Busy),
        }
    }

    /// Reserves the share of a body about to be read, `declared` bytes long, waiting
    /// for it as [`ParseBudget::admit`] does.
    pub async fn reserve(&self, declared: usize) -> Result<OwnedSemaphorePermit, Refusal> {
        self.acquire(self.units(declared)).await
    }

    /// Admits a body that was read under `held` (from [`ParseBudget::reserve`]):
    /// refuses it when it holds too many values, else waits for the rest of its share
    /// (a share larger than the whole budget takes the whole budget). Dropping the
    /// returned permit returns the whole share; a refusal returns it at once.
    pub async fn admit(
        &self,
        body: &[u8],
        mut held: OwnedSemaphorePermit,
    ) -> Result<OwnedSemaphorePermit, Refusal> {
        let values = value_count(body);
        if values > MAX_REQUEST_VALUES {
            return Err(Refusal::TooManyValues { values });
        }
        let need = self.units(cost(body.len(), values)) as usize;
        let have = held.num_permits();
        if need > have {
            let more = u32::try_from(need - have).unwrap_or(u32::MAX);
            held.merge(self.acquire(more).await?);
        } else if have > need {
            // The body was shorter than declared: give the difference back now.
            drop(held.split(have - need));
        }
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_count_is_an_upper_bound_that_ignores_strings() {
        assert_eq!(value_count(b"1"), 1);
        assert_eq!(value_count(b"[]"), 2);
        assert_eq!(value_count(b"[{},{},{}]"), 7);
        assert_eq!(value_count(br#"{"a":1,"b":[2,3]}"#), 7);
        assert_eq!(value_count(br#""[,{:\"]""#), 1);
        let n = 1000;
        let body = format!("[{}]", vec!["{}"; n].join(","));
        assert!(value_count(body.as_bytes()) > n);
    }

    #[tokio::test]
    async fn too_many_values_are_refused_and_a_full_budget_refuses_after_waiting() {
        let budget = ParseBudget::new(64 * 1024, Duration::from_millis(50));
        let admit = |body: String| {
            let budget = budget.clone();
            async move {
                let held = budget.reserve(body.len()).await?;
                budget.admit(body.as_bytes(), held).await
            }
        };
        let many = format!("[{}]", vec!["0"; MAX_REQUEST_VALUES + 1].join(","));
        assert!(matches!(
            admit(many).await,
            Err(Refusal::TooManyValues { .. })
        ));
        // Each body costs more than half the budget: the second waits, then is refused.
        let body = format!("[{}]", vec!["0"; 400].join(","));
        let first = admit(body.clone()).await.unwrap();
        assert_eq!(admit(body.clone()).await.unwrap_err(), Refusal::Busy);
        drop(first);
        assert!(admit(body.clone()).await.is_ok());
        assert!(Refusal::Busy.message().starts_with("LIMIT_EXCEEDED"));
        // A reservation for a declared length holds its share while the body is read.
        let reserved = budget.reserve(64 * 1024).await.unwrap();
        assert_eq!(admit(body.clone()).await.unwrap_err(), Refusal::Busy);
        drop(reserved);
        assert!(admit(body).await.is_ok());
    }
}
