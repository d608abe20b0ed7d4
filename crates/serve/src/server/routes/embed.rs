//! `POST /v1/embed`: each cell's embedding (and a fine-tuned classifier's calls).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::encode::encode_request;
use super::openapi::{json_body, model_errors};
use crate::server::api::{EmbedResponse, Predictions, Rows};
use crate::server::AppState;
use corrflow_infer::encode::split_probabilities;

pub async fn handle(State(s): State<Arc<AppState>>, req: Request) -> Response {
    let (ready, done) = match encode_request(&s, req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (dim, k) = (ready.dim, ready.classes.len());
    let (flat, probabilities) = split_probabilities(done.rows, dim, k);
    Json(EmbedResponse {
        model: ready.name.clone(),
        dim,
        embeddings: Rows { flat, width: dim },
        tokens: done.tokens,
        unknown_genes: done.unknown_genes,
        predictions: (k > 0).then(|| Predictions::of(&ready.classes, probabilities)),
    })
    .into_response()
}

pub fn openapi() -> Value {
    let mut responses = Map::new();
    responses.insert("200".into(), json_body("One embedding per cell, in request order", "EmbedResponse"));
    responses.extend(model_errors(""));
    json!({
        "summary": "Embed cells given as raw counts (tokenized server-side with the model's vocabulary) or as token ids",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbedRequest"}}}},
        "responses": responses,
    })
}
