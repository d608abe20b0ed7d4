//! What the model endpoints share: admission, the body, validation, the queue and the
//! batcher's answer.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use tokio::sync::{mpsc, oneshot};

use super::{error, too_many};
use crate::server::api::{parse_embed_request, ParsedRequest};
use crate::server::batcher::Job;
use crate::server::body::{read_to_vec, ReadError};
use crate::server::{AppState, Ready};

/// What the batcher returned for a request's cells.
pub struct Encoded {
    /// Each cell's embedding followed by a cell head's probabilities.
    pub rows: Vec<f32>,
    pub tokens: Vec<usize>,
    pub unknown_genes: Vec<usize>,
}

const FULL: &str = "the request queue is full (requests, uploads or body bytes in flight at the limit); retry later";

/// Admission, body, validation, the queue and the batcher's answer. A refusal is the response
/// to send (a body left unread is drained when the request is dropped, `body::GuardedBody`).
pub async fn encode_request(s: &Arc<AppState>, req: Request) -> Result<(&Ready, Encoded), Response> {
    let Some(ready) = s.ready.get() else {
        return Err(error(503, "the model is still loading; retry shortly"));
    };
    if let Some(refused) = unsupported_encoding(req.headers()) {
        return Err(refused);
    }
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    let limit = s.options.max_body_bytes;
    if let Some(declared) = declared.filter(|&d| d > limit) {
        let mut r = error(413, format!("the body is {declared} bytes, over the length limit of {limit} bytes"));
        if declared > limit.saturating_mul(crate::server::DRAIN_BODIES) {
            // Too much to read and drop: the connection closes after the answer.
            r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return Err(r);
    }
    // A small body is read before admission (it holds no slot while it arrives); a large one is
    // admitted first, so that a full server answers at once and holds no large body
    // (`admission.rs`).
    let small = declared.is_some_and(|d| d <= s.options.small_body_bytes);
    let body = req.into_body();
    let (bytes, _admitted) = if small {
        let bytes = read_body(body, declared, limit).await?;
        (bytes, s.admission.try_admit_arrived().ok_or_else(|| too_many(FULL))?)
    } else {
        let mut admitted = s.admission.try_admit_upload(declared.unwrap_or(limit)).ok_or_else(|| too_many(FULL))?;
        let bytes = read_body(body, declared, limit).await?;
        admitted.arrived();
        (bytes, admitted)
    };
    // The body's buffer lives only until it is parsed.
    let parsed =
        parse_embed_request(&bytes, &ready.encoder_vocab, &ready.rules).map_err(|e| error(e.status, e.message));
    drop(bytes);
    let ParsedRequest { cells, unknown_genes } = parsed?;
    let n = cells.len();
    let tokens: Vec<usize> = cells.tokens.iter().map(Vec::len).collect();
    let (reply, answer) = oneshot::channel();
    match ready.queue.try_send(Job { cells, reply, enqueued: Instant::now() }) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => return Err(too_many("the request queue is full; retry later")),
        Err(mpsc::error::TrySendError::Closed(_)) => return Err(error(503, "the server is shutting down")),
    }
    // If the client goes away now, hyper drops this future and with it `answer`: the batcher
    // then skips the job instead of computing it.
    match answer.await {
        Ok(Ok(rows)) => {
            s.metrics.cells.inc_by(n as u64);
            s.metrics.unknown_genes.inc_by(unknown_genes.iter().sum::<usize>() as u64);
            Ok((ready, Encoded { rows, tokens, unknown_genes }))
        }
        Ok(Err(e)) => Err(error(500, format!("inference failed: {e}"))),
        Err(_) => Err(error(503, "the server is shutting down")),
    }
}

/// The whole body, or the answer saying why not.
async fn read_body(
    body: axum::body::Body,
    declared: Option<usize>,
    limit: usize,
) -> Result<crate::server::body::BodyBytes, Response> {
    read_to_vec(body, declared, limit).await.map_err(|e| match e {
        ReadError::TooLarge => error(413, format!("the body is over the length limit of {limit} bytes")),
        ReadError::TimedOut(m) => error(408, m),
        ReadError::Broken(m) => error(400, format!("the request body could not be read (malformed or cut off): {m}")),
    })
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
