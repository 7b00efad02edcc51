//! Capacity per identity: no one client can hold the connections another needs.
//!
//! A connection keeps its listener slot while a request on it is in flight, and HTTP/1
//! pipelining lets one connection queue many requests behind a long one. With nothing
//! but a global limit, the agent the gate guards held all 1,024 slots with pipelined
//! long polls and forged decisions, and bob's revoke waited in the kernel's backlog
//! until the agent had executed (issue #31, item 1). The rules here, applied by the
//! listener ([`crate::listener`]) to every request head before any handler runs:
//!
//! - **Budgets per identity.** The address cannot be the identity (the agent and the
//!   approvers share `127.0.0.1`); a request's identity is what it carries: an agent
//!   token (or, without an agents file, any `/mcp` request, which is the `local`
//!   agent), or nothing at all ([`Identity::Anonymous`]). Each identity may keep at
//!   most [`MAX_BUSY_CONNECTIONS`] connections *busy* (a request in flight) and
//!   [`MAX_IN_FLIGHT`] requests in flight at once (HTTP/2 multiplexes). A request over
//!   either budget is answered at once (429, `LIMIT_EXCEEDED`) and its connection is
//!   closed, so whatever it pipelined behind is never read. Idle connections are not
//!   counted: the listener's idle fuse and pressure fuse already recycle them, and
//!   counting them would let the agent lock anonymous peers (`/healthz`) out with
//!   idle keep-alives.
//! - **Approver claims are never capped by identity**: a request that carries an
//!   approver's signature (a signed read, a decision) is classified before its
//!   signature is checked, and refusing claims over a budget would let forgeries in
//!   carol's name crowd out her genuine veto. Instead a failed signature is charged to
//!   its connection ([`crate::throttle`]) and the connection is closed once over its
//!   budget; a forger gets a few verifications per connection it opens, no more.
//! - **A reserve only a verifying approver can use.** When a listener's general pool
//!   ([`MAX_CONNECTIONS`]) is full, it keeps accepting into a reserve
//!   of [`APPROVER_RESERVE`] connections. A reserve connection must present a
//!   signature that verifies within [`RESERVE_FUSE`] of accept; any other request on
//!   it is answered 503 `LIMIT_EXCEEDED` and the connection closed, and so is one
//!   whose signature fails. `GET /healthz` alone is also answered there (then the
//!   connection is closed): signer-cli checks the server's identity with it before
//!   signing, and an answer given at once holds no slot. The agent cannot make its connections look like an
//!   approver's without an approver's key, so a genuine decision is read and recorded
//!   whatever the agent holds.
//! - **Queued work has a bound**: an HTTP/1 connection serves at most
//!   [`MAX_REQUESTS_PER_HTTP1_CONNECTION`] requests, the last answered with
//!   `Connection: close` (HTTP/2 is bounded by its stream limit).
//!
//! This file sits below the listener (which imports it) and the service: what it needs
//! of the service, the agents in force and the failed-signature accounts, it asks
//! through the [`Gate`] trait, which `run.rs` implements for the service.

use crate::throttle::ConnectionId;
use approval_core::ids::AgentName;
use approval_core::Code;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections one identity may keep busy (a request in flight) at once.
pub const MAX_BUSY_CONNECTIONS: usize = 128;
/// Requests one identity may have in flight at once (over all its connections).
pub const MAX_IN_FLIGHT: usize = 256;
/// Requests served on one HTTP/1 connection before it is closed (`Connection: close`
/// on the last answer): a bound on what one connection can queue by pipelining.
pub const MAX_REQUESTS_PER_HTTP1_CONNECTION: u32 = 32;
/// Connections served at once, per listener (besides the approvers' reserve,
/// [`APPROVER_RESERVE`]).
pub const MAX_CONNECTIONS: usize = 1024;
/// Connections a listener accepts beyond its general pool, for approvers only.
pub const APPROVER_RESERVE: usize = 64;
/// Time a reserve connection has from accept to a signature that verifies.
pub const RESERVE_FUSE: Duration = Duration::from_secs(1);

/// Who a request's budget is charged to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// A request carrying this agent's token (or `local`, without an agents file).
    Agent(AgentName),
    /// A request carrying no credential: all such peers share one budget.
    Anonymous,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Agent(a) => write!(f, "agent {a}"),
            Identity::Anonymous => f.write_str("peers without a credential"),
        }
    }
}

/// What a request head says about who sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// Charged to an identity's budget.
    Capped(Identity),
    /// Claims an approver's signature (checked by the handler, not here).
    ApproverClaim,
}

/// What admission needs from the service: the agents in force and the accounts of
/// failed signatures. The service implements it (in [`crate::run`], where the two
/// meet), so this file does not import the service.
pub trait Gate: Send + Sync {
    /// `None` when no agents file is in force; otherwise the agent the bearer `token`
    /// names in it (`Some(None)` when there is no token or it names no agent).
    fn agent_for(&self, token: Option<&str>) -> Option<Option<AgentName>>;
    /// Whether `conn` is over its budget of failed signatures.
    fn over_budget(&self, conn: ConnectionId) -> bool;
    /// Whether a signature from `conn` has verified.
    fn verified(&self, conn: ConnectionId) -> bool;
    /// The connection has ended: its signature account goes.
    fn forget(&self, conn: ConnectionId);
    /// A request was refused, or a connection closed, for `reason` (a
    /// [`Refusal::reason`], or `forged_signatures`): counted in the metrics.
    fn throttled(&self, _reason: &'static str) {}
}

/// Classifies a request head (see the module comment). An invalid agent token is
/// anonymous: it gets its 401 within the anonymous budget.
pub fn classify<B>(gate: &dyn Gate, req: &axum::http::Request<B>) -> Class {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let path = req.uri().path();
    if path.starts_with("/v1/")
        && (auth.starts_with("Approval ")
            || (req.method() == Method::POST && path.ends_with("/decisions")))
    {
        return Class::ApproverClaim;
    }
    match gate.agent_for(auth.strip_prefix("Bearer ").map(str::trim)) {
        Some(named) => named.map_or(Class::Capped(Identity::Anonymous), |a| {
            Class::Capped(Identity::Agent(a))
        }),
        None if path == "/mcp" => match AgentName::parse("local") {
            Ok(a) => Class::Capped(Identity::Agent(a)),
            Err(_) => Class::Capped(Identity::Anonymous),
        },
        None => Class::Capped(Identity::Anonymous),
    }
}

/// One identity's use: connections busy and requests in flight.
#[derive(Debug, Default, Clone, Copy)]
struct Use {
    busy: usize,
    in_flight: usize,
}

/// The budgets of every identity, shared by the listeners of one server.
#[derive(Default)]
pub struct Budgets {
    uses: Mutex<HashMap<Identity, Use>>,
}

/// One connection's requests in flight, per identity (a connection is busy for an
/// identity while this count is above zero).
#[derive(Default)]
pub struct ConnCharges(Mutex<Vec<(Identity, usize)>>);

/// Why a request was refused before any handler saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The identity already keeps this many connections busy.
    Connections(Identity),
    /// The identity already has this many requests in flight.
    InFlight(Identity),
    /// A reserve connection's request carries no approver signature.
    Reserve,
}

impl Refusal {
    /// The metrics' `reason` label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Connections(_) => "connections",
            Refusal::InFlight(_) => "in_flight",
            Refusal::Reserve => "reserve",
        }
    }

    /// The message a client reads: what was over which limit, and what to do.
    pub fn message(&self) -> String {
        match self {
            Refusal::Connections(who) => format!(
                "{who} already keep {MAX_BUSY_CONNECTIONS} connections busy with a request in flight, the most one identity may: wait for an answer before sending on a new connection; this connection is closed"
            ),
            Refusal::InFlight(who) => format!(
                "{who} already have {MAX_IN_FLIGHT} requests in flight, the most one identity may: wait for an answer before sending more; this connection is closed"
            ),
            Refusal::Reserve => format!(
                "the server is at its limit of {} connections; this one was accepted into the reserve kept for approvers, which serves only requests signed by an approver whose signature verifies: retry in a moment; this connection is closed",
                MAX_CONNECTIONS
            ),
        }
    }

    /// The answer: `{code, message}` (a JSON-RPC error with `data.code` on `/mcp`),
    /// 429 for a budget, 503 for the reserve, with `Retry-After`.
    pub fn response(&self, mcp: bool) -> Response {
        let status = match self {
            Refusal::Reserve => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::TOO_MANY_REQUESTS,
        };
        let message = self.message();
        let body = if mcp {
            json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": -32600, "message": message,
                "data": {"code": Code::LimitExceeded},
            }})
        } else {
            json!({"code": Code::LimitExceeded, "message": message})
        };
        let mut r = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        r
    }
}

/// A request charged to an identity; dropping it (when its response body is
/// dropped) gives the capacity back.
pub struct Charge {
    budgets: Arc<Budgets>,
    conn: Arc<ConnCharges>,
    who: Identity,
}

/// A request's charge, shared with work the request started that may outlive it: a
/// tool call's write runs to its end on a task of its own even when its client hangs
/// up, and it keeps this clone until then. Without it, an agent could send writes and
/// hang up at once: each hang-up gave its budget back while the write still waited
/// in the store's queue, so its budget bounded nothing and an approver's revoke
/// queued behind all of them. The listener puts one in each charged request's
/// extensions.
#[derive(Clone)]
pub struct Held {
    _charge: Arc<Charge>,
}

impl Held {
    pub fn new(charge: Arc<Charge>) -> Self {
        Self { _charge: charge }
    }
}

/// The agent a request's bearer token named when it was admitted, put in the
/// request's extensions by the listener so that `/mcp` does not hash the token a
/// second time ([`crate::http`] reads it only where an agents file is in force).
#[derive(Debug, Clone)]
pub struct AdmittedAgent(pub AgentName);

impl Charge {
    /// The agent this request was charged to, if it is one.
    pub fn agent(&self) -> Option<&AgentName> {
        match &self.who {
            Identity::Agent(a) => Some(a),
            Identity::Anonymous => None,
        }
    }
}

impl Budgets {
    /// Charges one request of `who` on `conn`, or says which budget it is over.
    /// Nothing is charged when it is refused.
    pub fn charge(
        self: &Arc<Self>,
        conn: &Arc<ConnCharges>,
        who: Identity,
    ) -> Result<Charge, Refusal> {
        let mut mine = conn.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        let here = mine.iter().position(|(w, _)| *w == who);
        let u = uses.entry(who.clone()).or_default();
        if u.in_flight >= MAX_IN_FLIGHT {
            return Err(Refusal::InFlight(who));
        }
        match here {
            Some(i) => mine[i].1 += 1,
            None => {
                if u.busy >= MAX_BUSY_CONNECTIONS {
                    return Err(Refusal::Connections(who));
                }
                u.busy += 1;
                mine.push((who.clone(), 1));
            }
        }
        u.in_flight += 1;
        Ok(Charge {
            budgets: self.clone(),
            conn: conn.clone(),
            who,
        })
    }

    /// What `who` uses now: (connections busy, requests in flight).
    pub fn used(&self, who: &Identity) -> (usize, usize) {
        let uses = self.uses.lock().unwrap_or_else(|e| e.into_inner());
        uses.get(who).map_or((0, 0), |u| (u.busy, u.in_flight))
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut mine = self.conn.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut uses = self.budgets.uses.lock().unwrap_or_else(|e| e.into_inner());
        let idle = match mine.iter().position(|(w, _)| *w == self.who) {
            Some(i) => {
                mine[i].1 = mine[i].1.saturating_sub(1);
                let idle = mine[i].1 == 0;
                if idle {
                    mine.swap_remove(i);
                }
                idle
            }
            None => false,
        };
        if let Some(u) = uses.get_mut(&self.who) {
            u.in_flight = u.in_flight.saturating_sub(1);
            if idle {
                u.busy = u.busy.saturating_sub(1);
            }
            if u.busy == 0 && u.in_flight == 0 {
                uses.remove(&self.who);
            }
        }
    }
}

/// What a listener needs to admit requests: the gate (agent tokens and the
/// signature accounts) and the budgets, shared by all listeners of one server.
pub struct Admission {
    gate: Arc<dyn Gate>,
    budgets: Arc<Budgets>,
}

impl Admission {
    /// Budgets over the gate's agents.
    pub fn new(gate: Arc<dyn Gate>) -> Arc<Self> {
        Arc::new(Admission {
            gate,
            budgets: Arc::default(),
        })
    }

    /// Decides whether a request may run: `Ok(charge)` (none for an approver claim),
    /// or the refusal to answer with. On a reserve connection only approver claims
    /// and `GET /healthz` run: signer-cli checks the server's identity there before
    /// it signs, and an answer given at once holds nothing (the connection is closed
    /// after it all the same).
    pub fn admit<B>(
        &self,
        req: &axum::http::Request<B>,
        conn: &Arc<ConnCharges>,
        reserve: bool,
    ) -> Result<Option<Charge>, Refusal> {
        let admitted = self.classified(req, conn, reserve);
        if let Err(refusal) = &admitted {
            self.gate.throttled(refusal.reason());
        }
        admitted
    }

    fn classified<B>(
        &self,
        req: &axum::http::Request<B>,
        conn: &Arc<ConnCharges>,
        reserve: bool,
    ) -> Result<Option<Charge>, Refusal> {
        match classify(self.gate.as_ref(), req) {
            Class::ApproverClaim => Ok(None),
            Class::Capped(_)
                if reserve && !(req.method() == Method::GET && req.uri().path() == "/healthz") =>
            {
                Err(Refusal::Reserve)
            }
            Class::Capped(who) => self.budgets.charge(conn, who).map(Some),
        }
    }

    /// Whether the connection must be closed after its current answer: over its
    /// failed-signature budget, or a reserve connection without a verified signature.
    pub fn must_close(&self, conn: ConnectionId, reserve: bool) -> bool {
        if self.gate.over_budget(conn) {
            self.gate.throttled("forged_signatures");
            return true;
        }
        reserve && !self.gate.verified(conn)
    }

    /// Whether a signature from `conn` has verified.
    pub fn verified(&self, conn: ConnectionId) -> bool {
        self.gate.verified(conn)
    }

    /// The connection has ended: its signature account goes.
    pub fn ended(&self, conn: ConnectionId) {
        self.gate.forget(conn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(n: &str) -> Identity {
        Identity::Agent(AgentName::parse(n).expect("name"))
    }

    /// The attack on the budget with hang-ups: the request's own charge is dropped
    /// (its client went away) while the write it started still holds a [`Held`]
    /// clone; the agent's in-flight count covers the write until it ends.
    #[test]
    fn a_charge_held_by_work_that_outlives_its_request_stays_counted() {
        let budgets = Arc::new(Budgets::default());
        let conn = Arc::new(ConnCharges::default());
        let who = agent("mallory");
        let charge = Arc::new(budgets.charge(&conn, who.clone()).unwrap());
        let write = Held::new(charge.clone());
        drop(charge);
        assert_eq!(budgets.used(&who), (1, 1));
        drop(write);
        assert_eq!(budgets.used(&who), (0, 0));
    }

    #[test]
    fn an_agent_over_its_busy_connections_is_refused_and_another_agent_is_not() {
        let b = Arc::new(Budgets::default());
        let mut held = Vec::new();
        for _ in 0..MAX_BUSY_CONNECTIONS {
            let c = Arc::new(ConnCharges::default());
            held.push(b.charge(&c, agent("mallory")).expect("within budget"));
        }
        let extra = Arc::new(ConnCharges::default());
        assert_eq!(
            b.charge(&extra, agent("mallory")).err(),
            Some(Refusal::Connections(agent("mallory")))
        );
        assert_eq!(
            b.used(&agent("mallory")),
            (MAX_BUSY_CONNECTIONS, MAX_BUSY_CONNECTIONS)
        );
        // Another agent, and peers without a credential, have their own budgets.
        assert!(b.charge(&extra, agent("other")).is_ok());
        assert!(b.charge(&Arc::default(), Identity::Anonymous).is_ok());
        // Capacity comes back when the answers are done.
        held.pop();
        assert!(b.charge(&extra, agent("mallory")).is_ok());
    }

    #[test]
    fn in_flight_requests_are_capped_on_one_multiplexed_connection() {
        let b = Arc::new(Budgets::default());
        let c = Arc::new(ConnCharges::default());
        let held: Vec<_> = (0..MAX_IN_FLIGHT)
            .map(|_| b.charge(&c, agent("mallory")).expect("within budget"))
            .collect();
        assert_eq!(b.used(&agent("mallory")), (1, MAX_IN_FLIGHT));
        assert_eq!(
            b.charge(&c, agent("mallory")).err(),
            Some(Refusal::InFlight(agent("mallory")))
        );
        drop(held);
        assert_eq!(b.used(&agent("mallory")), (0, 0), "everything given back");
    }

    /// A gate whose every connection is over its forgery budget, and that keeps the
    /// reasons it is told of.
    #[derive(Default)]
    struct Counting(Mutex<Vec<&'static str>>);

    impl Gate for Counting {
        fn agent_for(&self, _token: Option<&str>) -> Option<Option<AgentName>> {
            None
        }
        fn over_budget(&self, _conn: ConnectionId) -> bool {
            true
        }
        fn verified(&self, _conn: ConnectionId) -> bool {
            false
        }
        fn forget(&self, _conn: ConnectionId) {}
        fn throttled(&self, reason: &'static str) {
            if let Ok(mut seen) = self.0.lock() {
                seen.push(reason);
            }
        }
    }

    #[test]
    fn refusals_and_closes_are_counted_by_reason() {
        let gate = Arc::new(Counting::default());
        let admission = Admission::new(gate.clone());
        let req = axum::http::Request::builder()
            .uri("/v1/proposals")
            .body(())
            .expect("a request");
        let conn = Arc::new(ConnCharges::default());
        assert_eq!(
            admission.admit(&req, &conn, true).err(),
            Some(Refusal::Reserve)
        );
        assert!(admission.admit(&req, &conn, false).is_ok());
        assert!(admission.must_close(ConnectionId::next(), false));
        let seen = gate.0.lock().map(|s| s.clone()).unwrap_or_default();
        assert_eq!(seen, ["reserve", "forged_signatures"]);
    }
}
