//! `GET /info`: the model, the runtime and the batching settings (`Ready::info`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error;
use crate::server::AppState;

pub async fn handle(State(s): State<Arc<AppState>>) -> Response {
    match s.ready.get() {
        Some(r) => Json(r.info.clone()).into_response(),
        None => error(503, "the model is still loading; retry shortly"),
    }
}

pub fn openapi() -> Value {
    json!({
        "summary": "The model (config, vocabulary hash, pooling), the runtime and the batching settings",
        "responses": {"200": {"description": "Model information"}, "503": {"description": "Loading"}},
    })
}
