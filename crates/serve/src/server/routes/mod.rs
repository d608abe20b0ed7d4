//! The HTTP endpoints, each declared once in [`ENDPOINTS`]: its method and path, its handler
//! (one file per endpoint in this folder, with the endpoint's OpenAPI operation beside it), and
//! whether it needs the bearer token or runs the model. The router, `/openapi.json`'s `paths`,
//! the metrics' `endpoint` label (the path) and the shutdown summary are all read off the table.
//!
//! Every response is observed (count by endpoint and status, latency) and, when a token is
//! configured, every endpoint but the public ones (`/health`) needs
//! `Authorization: Bearer TOKEN` (`observe.rs`).

mod annotate;
mod embed;
mod encode;
mod health;
mod info;
mod metrics;
mod observe;
pub mod openapi;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Json, Router};

use super::AppState;

/// Every endpoint of the server; adding one is a file in this folder and a line here.
pub static ENDPOINTS: &[Endpoint] = &[
    Endpoint::post("/v1/embed", |m| on(m, embed::handle), embed::openapi).runs_model(),
    Endpoint::post("/v1/annotate", |m| on(m, annotate::handle), annotate::openapi).runs_model(),
    Endpoint::get("/health", |m| on(m, health::handle), health::openapi).public(),
    Endpoint::get("/info", |m| on(m, info::handle), info::openapi),
    Endpoint::get("/metrics", |m| on(m, metrics::handle), metrics::openapi),
    Endpoint::get("/openapi.json", |m| on(m, openapi::handle), openapi::openapi),
];

/// One endpoint: the path is also its `endpoint` label in the metrics.
pub struct Endpoint {
    pub method: Method,
    pub path: &'static str,
    /// The handler under the method (`|m| on(m, handler)`: the method is given once, here).
    pub route: fn(MethodFilter) -> MethodRouter<Arc<AppState>>,
    /// The OpenAPI operation object (summary, request body, responses).
    pub openapi: fn() -> serde_json::Value,
    /// Needs no bearer token even when one is set.
    pub public: bool,
    /// Runs the model: its 200s are the requests counted in the shutdown summary.
    pub runs_model: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

impl Method {
    fn filter(self) -> MethodFilter {
        match self {
            Method::Get => MethodFilter::GET,
            Method::Post => MethodFilter::POST,
        }
    }

    /// The key of the operation in OpenAPI's path item.
    pub fn openapi_key(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Post => "post",
        }
    }
}

impl Endpoint {
    const fn new(
        method: Method,
        path: &'static str,
        route: fn(MethodFilter) -> MethodRouter<Arc<AppState>>,
        openapi: fn() -> serde_json::Value,
    ) -> Self {
        Self { method, path, route, openapi, public: false, runs_model: false }
    }

    pub const fn get(
        path: &'static str,
        route: fn(MethodFilter) -> MethodRouter<Arc<AppState>>,
        openapi: fn() -> serde_json::Value,
    ) -> Self {
        Self::new(Method::Get, path, route, openapi)
    }

    pub const fn post(
        path: &'static str,
        route: fn(MethodFilter) -> MethodRouter<Arc<AppState>>,
        openapi: fn() -> serde_json::Value,
    ) -> Self {
        Self::new(Method::Post, path, route, openapi)
    }

    pub const fn public(mut self) -> Self {
        self.public = true;
        self
    }

    pub const fn runs_model(mut self) -> Self {
        self.runs_model = true;
        self
    }
}

/// The endpoint registered at `path` (a route's matched path).
pub fn endpoint(path: &str) -> Option<&'static Endpoint> {
    ENDPOINTS.iter().find(|e| e.path == path)
}

pub fn router(state: Arc<AppState>) -> Router {
    let mut router = Router::new();
    for e in ENDPOINTS {
        router = router.route(e.path, (e.route)(e.method.filter()));
    }
    router
        .fallback(|| async { error(404, "no such endpoint") })
        .method_not_allowed_fallback(|method: axum::http::Method, uri: axum::http::Uri| async move {
            error(405, format!("{method} is not allowed on {} (see GET /openapi.json)", uri.path()))
        })
        .layer(from_fn_with_state(state.clone(), observe::observe))
        .layer(DefaultBodyLimit::max(state.options.max_body_bytes))
        .with_state(state)
}

/// `{"error": {"status": S, "message": M}}` with status S.
pub fn error(status: u16, message: impl Into<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(error_body(status.as_u16(), &message.into()))).into_response()
}

/// The body of every error answer, also written by hand for requests hyper refuses
/// (`malformed.rs`).
pub fn error_body(status: u16, message: &str) -> serde_json::Value {
    serde_json::json!({"error": {"status": status, "message": message}})
}

/// 429 with `Retry-After`.
fn too_many(message: &str) -> Response {
    let mut r = error(429, message);
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_declared_once() {
        let mut paths: Vec<&str> = ENDPOINTS.iter().map(|e| e.path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), ENDPOINTS.len(), "a path declared twice");
        assert!(endpoint("/health").is_some_and(|e| e.public && !e.runs_model));
        assert!(endpoint("/v1/embed").is_some_and(|e| !e.public && e.runs_model && e.method == Method::Post));
        assert!(endpoint("/nope").is_none());
    }
}
