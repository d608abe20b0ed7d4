//! The HTTP routes (axum): `POST /v1/embed`, `POST /v1/annotate`, `GET /health`, `/info`, `/metrics`,
//! `/openapi.json`; every response is observed (count by endpoint and status, latency) and,
//! when a token is configured, every route but `/health` needs `Authorization: Bearer TOKEN`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::{mpsc, oneshot};

use super::api::{parse_embed_request, AnnotateResponse, EmbedResponse, Predictions, Rows};
use super::batcher::Job;
use super::body::{read_to_vec, DrainLimits, GuardedBody, ReadError};
use super::AppState;
use axum::extract::Query;
use corrflow_io::encode::split_probabilities;
use corrflow_io::ontology::calls::Annotator;

pub const OPENAPI: &str = include_str!("openapi.json");

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/embed", post(embed))
        .route("/v1/annotate", post(annotate))
        .route("/health", get(health))
        .route("/info", get(info))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(|| async { error(404, "no such endpoint") })
        .method_not_allowed_fallback(|method: axum::http::Method, uri: axum::http::Uri| async move {
            error(405, format!("{method} is not allowed on {} (see GET /openapi.json)", uri.path()))
        })
        .layer(from_fn_with_state(state.clone(), observe))
        .layer(DefaultBodyLimit::max(state.options.max_body_bytes))
        .with_state(state)
}

/// `{"error": {"status": S, "message": M}}` with status S.
pub fn error(status: u16, message: impl Into<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::json!({"error": {"status": status.as_u16(), "message": message.into()}});
    (status, Json(body)).into_response()
}

async fn observe(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let req = guard_body(&s, req);
    let endpoint = req.extensions().get::<MatchedPath>().map_or("other", |p| match p.as_str() {
        "/v1/embed" => "/v1/embed",
        "/v1/annotate" => "/v1/annotate",
        "/health" => "/health",
        "/info" => "/info",
        "/metrics" => "/metrics",
        "/openapi.json" => "/openapi.json",
        _ => "other",
    });
    let response = match &s.options.bearer_token {
        Some(token) if endpoint != "/health" && !authorized(&req, token) => {
            let mut r = error(401, "missing or wrong bearer token");
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        _ => next.run(req).await,
    };
    s.metrics.requests.with_label_values(&[endpoint, response.status().as_str()]).inc();
    s.metrics.request_seconds.with_label_values(&[endpoint]).observe(start.elapsed().as_secs_f64());
    response
}

/// The request with its body under the body deadline, drained if dropped unread.
fn guard_body(s: &AppState, req: Request) -> Request {
    let expect_continue =
        req.headers().get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let drain = DrainLimits {
        max_bytes: s.options.max_body_bytes.saturating_mul(super::DRAIN_BODIES),
        shutdown: s.shutting_down.subscribe(),
    };
    let timeout = s.options.body_timeout;
    req.map(|body| Body::new(GuardedBody::new(body, timeout, expect_continue, drain)))
}

fn authorized(req: &Request, token: &str) -> bool {
    let Some(value) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some(given) = value.strip_prefix("Bearer ") else { return false };
    // Compare every byte, so the time taken does not tell how much of the token matched.
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

async fn embed(State(s): State<Arc<AppState>>, req: Request) -> Response {
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

/// `POST /v1/annotate?threshold=τ`: the same bodies as `/v1/embed`; each cell's Cell Ontology
/// calls from the model's hierarchical head (404 for a model without one).
async fn annotate(
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

#[derive(serde::Deserialize)]
struct AnnotateQuery {
    threshold: Option<f64>,
}

/// What the batcher returned for a request's cells.
struct Encoded {
    rows: Vec<f32>,
    tokens: Vec<usize>,
    unknown_genes: Vec<usize>,
}

/// Admission, body, validation, the queue and the batcher's answer: each cell's embedding
/// followed by a cell head's probabilities. A refusal is the response to send (a body left
/// unread is drained when the request is dropped, `body::GuardedBody`).
async fn encode_request(s: &Arc<AppState>, req: Request) -> Result<(&super::Ready, Encoded), Response> {
    let Some(ready) = s.ready.get() else {
        return Err(error(503, "the model is still loading; retry shortly"));
    };
    if let Some(refused) = unsupported_encoding(req.headers()) {
        return Err(refused);
    }
    // Admission before the body is read: a full server answers at once and holds no body.
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    let limit = s.options.max_body_bytes;
    if let Some(declared) = declared.filter(|&d| d > limit) {
        let mut r = error(413, format!("the body is {declared} bytes, over the length limit of {limit} bytes"));
        if declared > limit.saturating_mul(super::DRAIN_BODIES) {
            // Too much to read and drop: the connection closes after the answer.
            r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return Err(r);
    }
    let Some(_admitted) = s.admission.try_admit(declared.unwrap_or(limit)) else {
        return Err(too_many("the request queue is full (requests or body bytes in flight at the limit); retry later"));
    };
    let parsed = {
        // The body's buffer lives only until it is parsed.
        let body = read_to_vec(req.into_body(), declared, limit).await.map_err(|e| match e {
            ReadError::TooLarge => error(413, format!("the body is over the length limit of {limit} bytes")),
            ReadError::TimedOut(m) => error(408, m),
            ReadError::Broken(m) => {
                error(400, format!("the request body could not be read (malformed or cut off): {m}"))
            }
        })?;
        parse_embed_request(&body, &ready.encoder_vocab, &ready.rules).map_err(|e| error(e.status, e.message))?
    };
    let n = parsed.cells.len();
    let tokens: Vec<usize> = parsed.cells.iter().map(Vec::len).collect();
    let (reply, answer) = oneshot::channel();
    match ready.queue.try_send(Job { cells: parsed.cells, reply, enqueued: Instant::now() }) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => return Err(too_many("the request queue is full; retry later")),
        Err(mpsc::error::TrySendError::Closed(_)) => return Err(error(503, "the server is shutting down")),
    }
    // If the client goes away now, hyper drops this future and with it `answer`: the batcher
    // then skips the job instead of computing it.
    match answer.await {
        Ok(Ok(rows)) => {
            s.metrics.cells.inc_by(n as u64);
            s.metrics.unknown_genes.inc_by(parsed.unknown_genes.iter().sum::<usize>() as u64);
            Ok((ready, Encoded { rows, tokens, unknown_genes: parsed.unknown_genes }))
        }
        Ok(Err(e)) => Err(error(500, format!("inference failed: {e}"))),
        Err(_) => Err(error(503, "the server is shutting down")),
    }
}

/// Bodies are plain JSON: a compressed one (any `Content-Encoding` but identity) gets 415 with
/// `Accept-Encoding: identity` (RFC 7694), not a parse error about its bytes.
fn unsupported_encoding(headers: &axum::http::HeaderMap) -> Option<Response> {
    let value = headers.get(header::CONTENT_ENCODING)?;
    let name = value.to_str().unwrap_or("(not text)").trim();
    if name.is_empty() || name.eq_ignore_ascii_case("identity") {
        return None;
    }
    let mut r = error(415, format!("Content-Encoding '{name}' is not supported: send the JSON body uncompressed"));
    r.headers_mut().insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    Some(r)
}

/// 429 with `Retry-After`.
fn too_many(message: &str) -> Response {
    let mut r = error(429, message);
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn health(State(s): State<Arc<AppState>>) -> Response {
    if s.ready.get().is_some() {
        Json(serde_json::json!({"status": "ok"})).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"status": "loading"}))).into_response()
    }
}

async fn info(State(s): State<Arc<AppState>>) -> Response {
    match s.ready.get() {
        Some(r) => Json(r.info.clone()).into_response(),
        None => error(503, "the model is still loading; retry shortly"),
    }
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    // The gauges are read off the queue and the admission budget when scraped, the only time
    // anyone sees them.
    if let Some(r) = s.ready.get() {
        s.metrics.queue_depth.set((r.queue.max_capacity() - r.queue.capacity()) as i64);
    }
    s.metrics.requests_in_flight.set(s.admission.in_flight() as i64);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

#[cfg(test)]
mod tests {
    /// The document says OpenAPI 3.0.3, so it may use only 3.0's schema keywords: 3.1's
    /// `{"type": "null"}` and type arrays make openapi-spec-validator and client generators
    /// reject it (nullable values are `nullable: true`). python/tests/test_errors.py runs the
    /// validator itself on the served document.
    #[test]
    fn the_openapi_document_uses_only_openapi_3_0_schemas() {
        fn walk(v: &serde_json::Value, at: &str, bad: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    match m.get("type") {
                        Some(serde_json::Value::String(t)) if t == "null" => bad.push(format!("{at}: type null")),
                        Some(serde_json::Value::Array(_)) => bad.push(format!("{at}: a type array")),
                        _ => {}
                    }
                    for (k, x) in m {
                        walk(x, &format!("{at}/{k}"), bad);
                    }
                }
                serde_json::Value::Array(a) => {
                    a.iter().enumerate().for_each(|(i, x)| walk(x, &format!("{at}/{i}"), bad))
                }
                _ => {}
            }
        }
        let doc: serde_json::Value = serde_json::from_str(super::OPENAPI).unwrap();
        assert_eq!(doc["openapi"], "3.0.3");
        let mut bad = Vec::new();
        walk(&doc, "", &mut bad);
        assert!(bad.is_empty(), "OpenAPI 3.1-only constructs in a 3.0.3 document: {bad:?}");
    }
}
