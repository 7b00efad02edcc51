//! The metrics' transport (issue #36): every request the agent and approver
//! routers answer is counted by [`track`], and `serve --metrics-listen ADDR` serves
//! `/metrics` on a listener of its own ([`serve`]), never on the agent's or the
//! approvers' (`tests::metrics_are_not_served_on_the_gate_routers`).
//!
//! The route label is the route's template (`MatchedPath`) when it is one of
//! [`crate::metrics::ROUTES`], else `other`: a path an agent makes up adds no series.

use crate::metrics::{self, Metrics};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use std::sync::Arc;
use std::time::Instant;

/// Counts every request `router` answers (its fallback too) in `metrics`: by surface,
/// route and status code, with the time to the response head.
pub fn track(router: Router, metrics: Arc<Metrics>) -> Router {
    router.layer(middleware::from_fn_with_state(metrics, count))
}

async fn count(State(m): State<Arc<Metrics>>, req: Request, next: Next) -> Response {
    let route = metrics::route_label(req.extensions().get::<MatchedPath>().map(|p| p.as_str()));
    let started = Instant::now();
    let res = next.run(req).await;
    m.request(route, res.status().as_u16(), started.elapsed());
    res
}

/// `/metrics` and nothing else.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(scrape))
        .with_state(metrics)
}

async fn scrape(State(m): State<Arc<Metrics>>) -> Response {
    // The store's state is read now; on PostgreSQL that is a query, so off the workers.
    match tokio::task::spawn_blocking(move || m.render()).await {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics could not be read: {e}"),
        )
            .into_response(),
    }
}

/// Serves `/metrics` on `listener` until `shutdown` completes. An operator's port,
/// on loopback or a monitoring network: no agent or approver route is there. It is
/// the gate's own accept loop (`listener.rs`: header deadline, connection cap), with
/// budgets of its own (`admission`), so a scraper and the gate's clients never
/// share a slot.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    admission: Arc<crate::capacity::Admission>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    crate::listener::serve(listener, router(metrics), admission, None, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::testing;
    use crate::http::{app, McpOptions};

    /// Scrapes `url`; the status and the body.
    async fn get(url: &str) -> (u16, String) {
        let r = reqwest::get(url).await.expect("the server answers");
        let status = r.status().as_u16();
        (status, r.text().await.unwrap_or_default())
    }

    #[tokio::test]
    async fn metrics_are_not_served_on_the_gate_routers() {
        let (svc, _dir) = testing::service(None).await;
        let gate = track(
            app(svc.clone(), &McpOptions::default()),
            svc.metrics().clone(),
        );
        let addr = testing::listen(gate).await;
        let (status, body) = get(&format!("http://{addr}/metrics")).await;
        // The approver API's own refusal of a path it does not serve.
        assert_eq!(status, 400, "{body}");
        assert!(!body.contains("approval_http_requests"), "{body}");
        // The listener of its own serves them, and counted that refusal as `other`.
        let addr = testing::listen(router(svc.metrics().clone())).await;
        let (status, body) = get(&format!("http://{addr}/metrics")).await;
        assert_eq!(status, 200);
        assert!(
            body.contains(
                "approval_http_requests_total{surface=\"approver\",route=\"other\",code=\"400\"} 1"
            ),
            "{body}"
        );
    }

    /// The attack: an agent calls 1,000 made-up paths and 1,000 made-up kinds. The
    /// series stay as few as before.
    #[tokio::test]
    async fn an_agent_making_up_routes_and_kinds_grows_no_series() {
        let (svc, _dir) = testing::service(None).await;
        let gate = track(
            app(svc.clone(), &McpOptions::default()),
            svc.metrics().clone(),
        );
        let addr = testing::listen(gate).await;
        let client = reqwest::Client::new();
        let made_up = |i: usize| {
            let path = client.get(format!("http://{addr}/v1/proposals/p-{i}/made-up-{i}"));
            let call = serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": "approval_prepare", "arguments": {
                    "kind": format!("made.up{i}"), "payload": {}, "summary": "x"}}});
            let call = client
                .post(format!("http://{addr}/mcp"))
                .header("accept", "application/json, text/event-stream")
                .json(&call);
            (path, call)
        };
        // Once, so that the `other` and `/mcp` series exist before counting.
        let (path, call) = made_up(1000);
        assert_eq!(
            path.send().await.map(|r| r.status().as_u16()).ok(),
            Some(400)
        );
        assert_eq!(
            call.send().await.map(|r| r.status().as_u16()).ok(),
            Some(200)
        );
        let before = svc.metrics().series();
        for i in 0..1000 {
            let (path, call) = made_up(i);
            let _ = path.send().await;
            let _ = call.send().await;
        }
        let after = svc.metrics().series();
        assert_eq!(after, before, "{before} series became {after}");
        let text = svc.metrics().render();
        assert!(!text.contains("made"), "{text}");
        assert!(
            text.contains("route=\"other\",code=\"400\"} 1001"),
            "{text}"
        );
        assert!(text.contains("route=\"/mcp\",code=\"200\"} 1001"), "{text}");
    }

    /// Each of [`metrics::ROUTES`] is a route the gate serves, counted as itself.
    #[tokio::test]
    async fn every_route_is_known() {
        let (svc, _dir) = testing::service(None).await;
        let gate = track(
            app(svc.clone(), &McpOptions::default()),
            svc.metrics().clone(),
        );
        let addr = testing::listen(gate).await;
        let client = reqwest::Client::new();
        for route in metrics::ROUTES {
            let path = route
                .replace("{id}", "p-0")
                .replace("{file}", "page.js")
                .replace("{token}", "t");
            let r = client
                .get(format!("http://{addr}{path}"))
                .timeout(std::time::Duration::from_secs(5))
                .send()
                .await;
            assert!(r.is_ok(), "GET {path}: {r:?}");
        }
        let text = svc.metrics().render();
        for route in metrics::ROUTES {
            assert!(
                text.lines()
                    .any(|l| l.starts_with("approval_http_requests_total{")
                        && l.contains(&format!("route=\"{route}\""))),
                "{route} was not counted as itself:\n{text}"
            );
        }
        assert!(!text.contains("route=\"other\""), "{text}");
    }
}
