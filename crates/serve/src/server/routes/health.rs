//! `GET /health`: 503 `loading` until the model is loaded, then 200 (public: never needs the
//! token).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::server::AppState;

pub async fn handle(State(s): State<Arc<AppState>>) -> Response {
    if s.ready.get().is_some() {
        Json(json!({"status": "ok"})).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "loading"}))).into_response()
    }
}

pub fn openapi() -> Value {
    json!({
        "summary": "Readiness: 200 once the model is loaded, 503 before",
        "responses": {"200": {"description": "Ready"}, "503": {"description": "Loading"}},
    })
}
