//! What every request goes through before its handler: the body put under its deadline and
//! minimum rate (`body.rs`), the bearer token checked, and the answer counted by endpoint and
//! status, with its latency.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use super::{endpoint, error};
use crate::server::body::{BodyPolicy, GuardedBody, PaceRules};
use crate::server::AppState;

pub async fn observe(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let req = guard_body(&s, req);
    // Labels come from the table only, so that a client cannot add label values.
    let matched = req.extensions().get::<MatchedPath>().and_then(|p| endpoint(p.as_str()));
    let label = matched.map_or("other", |e| e.path);
    let response = match &s.options.bearer_token {
        Some(token) if !matched.is_some_and(|e| e.public) && !authorized(&req, token) => {
            let mut r = error(401, "missing or wrong bearer token");
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        _ => next.run(req).await,
    };
    s.metrics.requests.with_label_values(&[label, response.status().as_str()]).inc();
    s.metrics.request_seconds.with_label_values(&[label]).observe(start.elapsed().as_secs_f64());
    response
}

/// The request with its body under the body deadline and minimum rate, drained if dropped
/// unread.
fn guard_body(s: &AppState, req: Request) -> Request {
    let expect_continue =
        req.headers().get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let o = &s.options;
    let policy = BodyPolicy {
        pace: PaceRules { timeout: o.body_timeout, grace: o.body_grace, min_rate: o.min_body_rate },
        drain_max_bytes: o.max_body_bytes.saturating_mul(crate::server::DRAIN_BODIES),
        shutdown: s.shutting_down.subscribe(),
        open: s.metrics.request_bodies_open.clone(),
        too_slow: s.metrics.request_bodies_too_slow.clone(),
    };
    req.map(|body| Body::new(GuardedBody::new(body, expect_continue, policy)))
}

fn authorized(req: &Request, token: &str) -> bool {
    let Some(value) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some(given) = value.strip_prefix("Bearer ") else { return false };
    // Compare every byte, so the time taken does not tell how much of the token matched.
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}
