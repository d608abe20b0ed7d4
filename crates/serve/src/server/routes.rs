//! The HTTP routes (axum): `POST /v1/embed`, `GET /health`, `/info`, `/metrics`,
//! `/openapi.json`; every response is observed (count by endpoint and status, latency) and,
//! when a token is configured, every route but `/health` needs `Authorization: Bearer TOKEN`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::{mpsc, oneshot};

use super::api::{parse_embed_request, EmbedResponse, Predictions, Rows};
use super::batcher::Job;
use super::AppState;
use corrflow_io::encode::split_probabilities;

pub const OPENAPI: &str = include_str!("openapi.json");

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/embed", post(embed))
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
    let endpoint = req.extensions().get::<MatchedPath>().map_or("other", |p| match p.as_str() {
        "/v1/embed" => "/v1/embed",
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

fn authorized(req: &Request, token: &str) -> bool {
    let Some(value) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let Some(given) = value.strip_prefix("Bearer ") else { return false };
    // Compare every byte, so the time taken does not tell how much of the token matched.
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

async fn embed(State(s): State<Arc<AppState>>, req: Request) -> Response {
    let Some(ready) = s.ready.get() else {
        return error(503, "the model is still loading; retry shortly");
    };
    // Admission before the body is read: a full server answers at once and holds no body.
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(s.options.max_body_bytes);
    if declared > s.options.max_body_bytes {
        let limit = s.options.max_body_bytes;
        return error(413, format!("the body is {declared} bytes, over the length limit of {limit} bytes"));
    }
    let Some(_admitted) = s.admission.try_admit(declared) else {
        return refuse_unread(req.into_body(), declared).await;
    };
    let body = match axum::body::to_bytes(req.into_body(), s.options.max_body_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return error(413, format!("the body is over the length limit of {} bytes", s.options.max_body_bytes))
        }
    };
    let parsed = match parse_embed_request(&body, &ready.encoder_vocab, &ready.rules) {
        Ok(p) => p,
        Err(e) => return error(e.status, e.message),
    };
    let n = parsed.cells.len();
    let tokens: Vec<usize> = parsed.cells.iter().map(Vec::len).collect();
    let (reply, answer) = oneshot::channel();
    match ready.queue.try_send(Job { cells: parsed.cells, reply, enqueued: Instant::now() }) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => return too_many("the request queue is full; retry later"),
        Err(mpsc::error::TrySendError::Closed(_)) => return error(503, "the server is shutting down"),
    }
    match answer.await {
        Ok(Ok(rows)) => {
            let (dim, k) = (ready.dim, ready.classes.len());
            s.metrics.cells.inc_by(n as u64);
            s.metrics.unknown_genes.inc_by(parsed.unknown_genes.iter().sum::<usize>() as u64);
            let (flat, probabilities) = split_probabilities(rows, dim, k);
            Json(EmbedResponse {
                model: ready.name.clone(),
                dim,
                embeddings: Rows { flat, width: dim },
                tokens,
                unknown_genes: parsed.unknown_genes,
                predictions: (k > 0).then(|| Predictions::of(&ready.classes, probabilities)),
            })
            .into_response()
        }
        Ok(Err(e)) => error(500, format!("inference failed: {e}")),
        Err(_) => error(503, "the server is shutting down"),
    }
}

/// Bodies up to this size are read (and dropped) before a refusal is sent, so that a client
/// still sending one sees the 429 rather than a reset connection; larger ones are not read.
const DRAIN_LIMIT: usize = 1 << 20;

/// The 429 of a request that was not admitted, holding none of its body: a small body is read
/// frame by frame and dropped, a large one is left unread and the connection closed.
async fn refuse_unread(body: axum::body::Body, declared: usize) -> Response {
    use http_body_util::BodyExt;
    let message = "the request queue is full (requests or body bytes in flight at the limit); retry later";
    if declared <= DRAIN_LIMIT {
        let mut body = body;
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, |d| d.len());
            if seen > DRAIN_LIMIT {
                break;
            }
        }
        return too_many(message);
    }
    let mut r = too_many(message);
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
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
    // The gauge is read off the queue when scraped, the only time anyone sees it.
    if let Some(r) = s.ready.get() {
        s.metrics.queue_depth.set((r.queue.max_capacity() - r.queue.capacity()) as i64);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}
