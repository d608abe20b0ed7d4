//! `GET /metrics`: the Prometheus text exposition (`server/metrics.rs`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::server::AppState;

pub async fn handle(State(s): State<Arc<AppState>>) -> Response {
    // The gauges are read off the queue and the admission budget when scraped, the only time
    // anyone sees them.
    if let Some(r) = s.ready.get() {
        s.metrics.queue_depth.set((r.queue.max_capacity() - r.queue.capacity()) as i64);
    }
    s.metrics.requests_in_flight.set(s.admission.in_flight() as i64);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

pub fn openapi() -> Value {
    json!({
        "summary": "Prometheus metrics: requests by endpoint and status, latency histograms, batch sizes, queue depth",
        "responses": {"200": {"description": "Prometheus text format", "content": {"text/plain": {}}}},
    })
}
