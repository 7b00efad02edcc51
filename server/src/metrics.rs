//! Prometheus metrics (issue #36): one registry and every metric family, typed.
//!
//! A leaf utility: it imports nothing of the crate but core's label values. The
//! service owns one [`Metrics`] (`Service::metrics`) and records where each rule is
//! applied (proposals, decisions, executions, signature failures); the transports
//! record requests and throttling; the store records its commit latency; `notify/`
//! its deliveries. `serve --metrics-listen ADDR` serves [`Metrics::render`] at
//! `/metrics` on a listener of its own (`run.rs`), never on the agent's or the
//! approvers'. PROTOCOL.md §"Metrics and logs" is the public list.
//!
//! **Labels are bounded.** Every label value is a `&'static str` from a fixed set
//! (a route template, a status, a code, an executor type) except `kind`, which is
//! only ever a kind that has a policy in force ([`Metrics::kind_label`]); anything
//! else is `other`. No proposal id and no agent name is ever a label, so nothing an
//! agent sends can add a series (`tests::made_up_kinds_and_routes_add_no_series`,
//! and the e2e attack in `tests/tests/metrics.rs`).
//!
//! **Counters and gauges over several instances.** Counters count what this
//! instance did (sum them over instances). State shared by every instance (the
//! PENDING proposals, the outbox depth, fail-stop) is read from the store when
//! `/metrics` is scraped ([`Sample`]), so it is exact on each instance: take `max`
//! over instances, not `sum`.

use approval_core::policy::PolicySet;
use approval_core::Kind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::OnceLock;
use std::time::Duration;

/// The `Content-Type` of [`Metrics::render`]'s text (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The label value of anything outside a bounded set (an unknown route, a kind
/// with no policy in force).
pub const OTHER: &str = "other";

/// Every route the gate's routers serve, as axum names them (`MatchedPath`). A path
/// that matches none is `other`. Keep in step with `http.rs`, `approver_api.rs`
/// and `approver_page/` (`http::scrape::tests::every_route_is_known` checks each is one).
pub const ROUTES: [&str; 15] = [
    "/mcp",
    "/healthz",
    "/v1/proposals",
    "/v1/proposals/{id}",
    "/v1/proposals/{id}/decisions",
    "/v1/proposals/{id}/receipt",
    "/v1/events",
    "/v1/audit",
    "/v1/config",
    "/v1/config/proposals",
    "/approve/assets/{file}",
    "/approve/{id}",
    "/approve/{id}/state",
    "/enroll/{token}",
    "/enroll/{token}/options",
];

/// The route label of a request: its route template when it is one of [`ROUTES`],
/// else `other`.
pub fn route_label(matched: Option<&str>) -> &'static str {
    matched
        .and_then(|m| ROUTES.iter().find(|r| **r == m))
        .copied()
        .unwrap_or(OTHER)
}

/// Which side a request came from: `/mcp` is the agent's, the rest the approvers'.
pub fn surface_of(route: &str) -> &'static str {
    if route == "/mcp" {
        "agent"
    } else {
        "approver"
    }
}

/// `approval_http_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `agent` or `approver`.
    pub surface: &'static str,
    /// A route of [`ROUTES`], or `other`.
    pub route: &'static str,
    /// The HTTP status code.
    pub code: u16,
}

/// `approval_http_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// `agent` or `approver`.
    pub surface: &'static str,
    /// A route of [`ROUTES`], or `other`.
    pub route: &'static str,
}

/// `approval_proposals_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProposalLabels {
    /// A kind with a policy in force, or `other`.
    pub kind: String,
    /// The status the proposal entered (`PENDING`, `APPROVED`, `EXECUTED`, …).
    pub status: &'static str,
}

/// `approval_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `approve`, `reject`, `revoke`, `resolve-succeeded`, `resolve-failed`.
    pub decision: &'static str,
    /// `recorded`, `already_recorded`, or the refusal's code (`INVALID_SIGNATURE`, …).
    pub outcome: &'static str,
}

/// `approval_executions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutionLabels {
    /// `note`, `command`, `webhook`, `mcp`.
    pub executor: &'static str,
    /// `succeeded`, `failed`, `unknown`.
    pub outcome: &'static str,
}

/// `approval_execution_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorLabels {
    /// `note`, `command`, `webhook`, `mcp`.
    pub executor: &'static str,
}

/// `approval_signature_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignatureLabels {
    /// `decision` or `signed_read`.
    pub on: &'static str,
}

/// `approval_throttled_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ThrottleLabels {
    /// `connections`, `in_flight`, `reserve` (refused by `capacity.rs`) or
    /// `forged_signatures` (a connection closed over its failed-signature budget).
    pub reason: &'static str,
}

/// `approval_notify_deliveries_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    /// `webhook` or `email`.
    pub channel: &'static str,
    /// `delivered` or `failed`.
    pub outcome: &'static str,
}

/// `approval_leader`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    /// `sweep` or `outbox`.
    pub task: &'static str,
}

/// `approval_lease_sweeps_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SweepLabels {
    /// `ok` or `error`.
    pub outcome: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latencies from 0.5 ms to about 16 s.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Execution times from 1 ms to about 9 min.
fn exec_time() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// The shared state read from the store at scrape time (see the module comment;
/// `store::failstop::metrics_sample` reads it).
/// `None`: the store could not say (it is then left out of that scrape).
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// PENDING proposals in the store.
    pub pending: Option<u64>,
    /// Outbox entries queued, and notifications dropped at the cap since start.
    pub outbox: Option<(u64, u64)>,
    /// The store stopped after a failed write (`store/failstop.rs`).
    pub fail_stopped: bool,
}

/// Reads a [`Sample`]; blocking (it may ask PostgreSQL).
pub type Sampler = dyn Fn() -> Sample + Send + Sync;

/// The registry and its families. Recording is lock-free but for the first use of
/// a label set; the label sets are bounded (see the module comment).
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Histograms<RouteLabels>,
    proposals: Family<ProposalLabels, Counter>,
    pending: Gauge,
    decisions: Family<DecisionLabels, Counter>,
    executions: Family<ExecutionLabels, Counter>,
    execution_seconds: Histograms<ExecutorLabels>,
    signature_failures: Family<SignatureLabels, Counter>,
    throttled: Family<ThrottleLabels, Counter>,
    outbox_depth: Gauge,
    outbox_dropped: Gauge,
    deliveries: Family<DeliveryLabels, Counter>,
    commit_seconds: Histogram,
    fail_stopped: Gauge,
    leader: Family<TaskLabels, Gauge>,
    lease_sweeps: Family<SweepLabels, Counter>,
    claims_expired: Counter,
    sampler: OnceLock<Box<Sampler>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family, registered under its public name (PROTOCOL.md).
    pub fn new() -> Self {
        let mut m = Self {
            registry: Registry::default(),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(latency),
            proposals: Family::default(),
            pending: Gauge::default(),
            decisions: Family::default(),
            executions: Family::default(),
            execution_seconds: Family::new_with_constructor(exec_time),
            signature_failures: Family::default(),
            throttled: Family::default(),
            outbox_depth: Gauge::default(),
            outbox_dropped: Gauge::default(),
            deliveries: Family::default(),
            commit_seconds: latency(),
            fail_stopped: Gauge::default(),
            leader: Family::default(),
            lease_sweeps: Family::default(),
            claims_expired: Counter::default(),
            sampler: OnceLock::new(),
        };
        let r = &mut m.registry;
        r.register(
            "approval_http_requests",
            "HTTP requests answered, by surface, route and status code",
            m.requests.clone(),
        );
        r.register_with_unit(
            "approval_http_request_duration",
            "Time to the response head, by surface and route",
            Unit::Seconds,
            m.request_seconds.clone(),
        );
        r.register(
            "approval_proposals",
            "Proposals that entered a status on this instance, by kind and status",
            m.proposals.clone(),
        );
        r.register(
            "approval_pending_proposals",
            "PENDING proposals in the store (read at scrape time)",
            m.pending.clone(),
        );
        r.register(
            "approval_decisions",
            "Signed decisions posted, by decision and outcome",
            m.decisions.clone(),
        );
        r.register(
            "approval_executions",
            "Executions run, by executor and outcome",
            m.executions.clone(),
        );
        r.register_with_unit(
            "approval_execution_duration",
            "Time an executor ran, by executor",
            Unit::Seconds,
            m.execution_seconds.clone(),
        );
        r.register(
            "approval_signature_failures",
            "Approver signatures that did not verify, by where they were sent",
            m.signature_failures.clone(),
        );
        r.register(
            "approval_throttled",
            "Requests refused or connections closed by a budget, by reason",
            m.throttled.clone(),
        );
        r.register(
            "approval_outbox_depth",
            "Notification outbox entries queued (read at scrape time)",
            m.outbox_depth.clone(),
        );
        r.register(
            "approval_outbox_dropped",
            "Notifications dropped at the outbox cap since the store opened (read at scrape time)",
            m.outbox_dropped.clone(),
        );
        r.register(
            "approval_notify_deliveries",
            "Notification deliveries to one channel, by channel type and outcome",
            m.deliveries.clone(),
        );
        r.register_with_unit(
            "approval_store_commit",
            "Time from a state change's write to its durability (one per write attempt)",
            Unit::Seconds,
            m.commit_seconds.clone(),
        );
        r.register(
            "approval_fail_stop",
            "1 once the store has failed and the server refuses everything",
            m.fail_stopped.clone(),
        );
        r.register(
            "approval_leader",
            "PostgreSQL: 1 while this instance leads the task",
            m.leader.clone(),
        );
        r.register(
            "approval_lease_sweeps",
            "PostgreSQL: sweeps of expired execution leases, by outcome",
            m.lease_sweeps.clone(),
        );
        r.register(
            "approval_lease_claims_expired",
            "PostgreSQL: execution claims whose lease ran out, ended OUTCOME_UNKNOWN",
            m.claims_expired.clone(),
        );
        m
    }

    /// Installs what [`Metrics::render`] reads from the store; the first one stays.
    pub fn set_sampler(&self, sampler: Box<Sampler>) {
        let _ = self.sampler.set(sampler);
    }

    /// The text Prometheus scrapes, with the store's state read now. Blocking: call
    /// it off the async workers.
    pub fn render(&self) -> String {
        if let Some(sample) = self.sampler.get().map(|s| s()) {
            if let Some(n) = sample.pending {
                self.pending.set(clamp(n));
            }
            if let Some((queued, dropped)) = sample.outbox {
                self.outbox_depth.set(clamp(queued));
                self.outbox_dropped.set(clamp(dropped));
            }
            self.fail_stopped.set(i64::from(sample.fail_stopped));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The number of series lines in [`Metrics::render`]'s text: what the
    /// cardinality tests bound.
    pub fn series(&self) -> usize {
        self.render()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count()
    }

    /// `kind` when a policy in force has it, else `other`.
    pub fn kind_label(policies: &PolicySet, kind: &Kind) -> String {
        match policies.get(kind) {
            Some(_) => kind.as_str().to_owned(),
            None => OTHER.to_owned(),
        }
    }

    /// One HTTP request answered.
    pub fn request(&self, route: &'static str, code: u16, took: Duration) {
        let surface = surface_of(route);
        self.requests
            .get_or_create(&RequestLabels {
                surface,
                route,
                code,
            })
            .inc();
        self.request_seconds
            .get_or_create(&RouteLabels { surface, route })
            .observe(took.as_secs_f64());
    }

    /// A proposal entered `status` (made, or changed by this instance).
    pub fn proposal(&self, kind: String, status: &'static str) {
        self.proposals
            .get_or_create(&ProposalLabels { kind, status })
            .inc();
    }

    /// A decision posted, and what came of it.
    pub fn decision(&self, decision: &'static str, outcome: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabels { decision, outcome })
            .inc();
    }

    /// An executor ran for `took` with `outcome`.
    pub fn execution(&self, executor: &'static str, outcome: &'static str, took: Duration) {
        self.executions
            .get_or_create(&ExecutionLabels { executor, outcome })
            .inc();
        self.execution_seconds
            .get_or_create(&ExecutorLabels { executor })
            .observe(took.as_secs_f64());
    }

    /// A signature that did not verify, `on` a decision or a signed read.
    pub fn signature_failure(&self, on: &'static str) {
        self.signature_failures
            .get_or_create(&SignatureLabels { on })
            .inc();
    }

    /// A request refused, or a connection closed, by a budget.
    pub fn throttled(&self, reason: &'static str) {
        self.throttled
            .get_or_create(&ThrottleLabels { reason })
            .inc();
    }

    /// One notification delivery to a channel.
    pub fn delivery(&self, channel: &'static str, delivered: bool) {
        let outcome = if delivered { "delivered" } else { "failed" };
        self.deliveries
            .get_or_create(&DeliveryLabels { channel, outcome })
            .inc();
    }

    /// One write made durable (or refused) after `took`.
    pub fn commit(&self, took: Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
    }

    /// Whether this instance leads `task` now (PostgreSQL).
    pub fn leads(&self, task: &'static str, leads: bool) {
        self.leader
            .get_or_create(&TaskLabels { task })
            .set(i64::from(leads));
    }

    /// One lease sweep, and how many claims it ended.
    pub fn lease_sweep(&self, result: Result<usize, ()>) {
        let outcome = match result {
            Ok(n) => {
                self.claims_expired.inc_by(n as u64);
                "ok"
            }
            Err(()) => "error",
        };
        self.lease_sweeps
            .get_or_create(&SweepLabels { outcome })
            .inc();
    }
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_in_the_text_with_its_type() {
        let m = Metrics::new();
        m.set_sampler(Box::new(|| Sample {
            pending: Some(3),
            outbox: Some((2, 1)),
            fail_stopped: false,
        }));
        m.request("/mcp", 200, Duration::from_millis(3));
        m.proposal("note.write".into(), "PENDING");
        m.decision("approve", "recorded");
        m.execution("note", "succeeded", Duration::from_millis(5));
        m.signature_failure("decision");
        m.throttled("in_flight");
        m.delivery("webhook", false);
        m.commit(Duration::from_millis(1));
        m.leads("sweep", true);
        m.lease_sweep(Ok(2));
        let text = m.render();
        for line in [
            "# TYPE approval_http_requests counter",
            "approval_http_requests_total{surface=\"agent\",route=\"/mcp\",code=\"200\"} 1",
            "# TYPE approval_http_request_duration_seconds histogram",
            "approval_proposals_total{kind=\"note.write\",status=\"PENDING\"} 1",
            "approval_pending_proposals 3",
            "approval_decisions_total{decision=\"approve\",outcome=\"recorded\"} 1",
            "approval_executions_total{executor=\"note\",outcome=\"succeeded\"} 1",
            "approval_execution_duration_seconds_count{executor=\"note\"} 1",
            "approval_signature_failures_total{on=\"decision\"} 1",
            "approval_throttled_total{reason=\"in_flight\"} 1",
            "approval_outbox_depth 2",
            "approval_outbox_dropped 1",
            "approval_notify_deliveries_total{channel=\"webhook\",outcome=\"failed\"} 1",
            "approval_store_commit_seconds_count 1",
            "approval_fail_stop 0",
            "approval_leader{task=\"sweep\"} 1",
            "approval_lease_sweeps_total{outcome=\"ok\"} 1",
            "approval_lease_claims_expired_total 2",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }

    #[test]
    fn unknown_routes_are_other() {
        assert_eq!(
            route_label(Some("/v1/proposals/{id}")),
            "/v1/proposals/{id}"
        );
        assert_eq!(route_label(Some("/v1/proposals/p-123")), OTHER);
        assert_eq!(route_label(None), OTHER);
        assert_eq!(surface_of("/mcp"), "agent");
        assert_eq!(surface_of(OTHER), "approver");
    }

    /// The attack: an agent makes up 1,000 kinds and 1,000 paths. Each lands on
    /// `other`, so the series stay as few as the label sets a real gate has.
    #[test]
    fn made_up_kinds_and_routes_add_no_series() {
        let m = Metrics::new();
        let policies = PolicySet::default();
        for i in 0..1000 {
            let path = format!("/made/up/{i}");
            m.request(route_label(Some(&path)), 404, Duration::ZERO);
            if let Ok(kind) = Kind::parse(&format!("made.up{i}")) {
                m.proposal(Metrics::kind_label(&policies, &kind), "PENDING");
            }
        }
        let once = m.series();
        m.request(route_label(Some("/made/up/again")), 404, Duration::ZERO);
        assert_eq!(m.series(), once, "{}", m.render());
        // One request series (and its histogram's lines), one proposal series.
        let text = m.render();
        let labelled = |name: &str| text.lines().filter(|l| l.starts_with(name)).count();
        assert_eq!(labelled("approval_http_requests_total{"), 1, "{text}");
        assert_eq!(labelled("approval_proposals_total{"), 1, "{text}");
        assert_eq!(
            labelled("approval_http_request_duration_seconds_count{"),
            1,
            "{text}"
        );
        assert!(text.contains("kind=\"other\""), "{text}");
        assert!(!text.contains("made"), "{text}");
    }
}
