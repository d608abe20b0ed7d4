//! `POST /v1/annotate?threshold=τ`: the same bodies as `/v1/embed`; each cell's Cell Ontology
//! calls from the model's hierarchical head (404 for a model without one).

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::encode::encode_request;
use super::error;
use super::openapi::{error_response, json_body, model_errors};
use crate::server::api::AnnotateResponse;
use crate::server::AppState;
use corrflow_infer::annotate::calls::Annotator;
use corrflow_infer::encode::split_probabilities;

#[derive(serde::Deserialize)]
pub struct AnnotateQuery {
    threshold: Option<f64>,
}

pub async fn handle(
    State(s): State<Arc<AppState>>,
    q: Result<Query<AnnotateQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return error(422, format!("threshold must be a number in [0, 1] ({})", e.body_text())),
    };
    let Some(ready) = s.ready.get() else {
        return error(503, "the model is still loading; retry shortly");
    };
    let Some(head) = ready.annotator.as_ref() else {
        return error(404, "this model has no hierarchical cell-type head (train it with `train --hce-ontology`)");
    };
    let threshold = q.threshold.unwrap_or(head.threshold);
    if !(0.0..=1.0).contains(&threshold) {
        return error(422, format!("threshold must be in [0, 1], got {threshold}"));
    }
    let (ready, done) = match encode_request(&s, req).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let annotator = Annotator { head: head.head.clone(), threshold };
    let (_, probabilities) = split_probabilities(done.rows, ready.dim, ready.classes.len());
    Json(AnnotateResponse {
        model: ready.name.clone(),
        ontology_version: ready.ontology_version.clone().unwrap_or_default(),
        threshold,
        calls: probabilities.chunks(ready.classes.len().max(1)).map(|p| annotator.call(p)).collect(),
        tokens: done.tokens,
        unknown_genes: done.unknown_genes,
    })
    .into_response()
}

pub fn openapi() -> Value {
    let mut responses = Map::new();
    responses.insert("200".into(), json_body("Each cell's calls, in request order", "AnnotateResponse"));
    responses.extend(model_errors("; a threshold outside [0, 1]"));
    responses.insert("404".into(), error_response("The model has no hierarchical cell-type head"));
    json!({
        "summary": "Cell Ontology calls for cells given as raw counts or token ids (a model trained with a hierarchical cell-type head, `train --hce-ontology`)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EmbedRequest"}}}},
        "responses": responses,
        "parameters": [{
            "name": "threshold",
            "in": "query",
            "required": false,
            "description": "τ of the reliable call: the deepest term of the greedy path with probability ≥ τ (default 0.5)",
            "schema": {"type": "number", "minimum": 0, "maximum": 1},
        }],
    })
}
