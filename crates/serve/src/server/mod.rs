//! `corrflow serve`: an embedding server for exported models (tokio + axum + ONNX Runtime).
//!
//! The socket is bound first and answers 503 until the model is loaded; requests are parsed and
//! validated on the async threads, queued (bounded: 429 when full) and batched dynamically by
//! token budget ([`batcher`]); shutdown (Ctrl-C / SIGTERM) stops accepting and finishes what
//! is in flight. The endpoints are one table ([`routes::ENDPOINTS`]). Bodies have a deadline and
//! a minimum rate, and refused ones are drained ([`body`], `pace.rs`); small bodies are read
//! before admission and large ones after (`admission.rs`); connections come from hyper with a
//! header deadline ([`listen`]), and the requests hyper refuses get JSON errors (`malformed.rs`).

mod admission;
pub mod api;
pub mod batcher;
pub mod body;
mod listen;
mod malformed;
mod memory;
pub mod metrics;
mod pace;
pub mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use tokio::sync::mpsc;

use corrflow_infer::encode::Encoder;

use api::InputRules;
use batcher::{BatchConfig, Job};
use corrflow_infer::onnxruntime::{OrtEncoder, RuntimeOptions};
use corrflow_io::error::{Error, Result};
use corrflow_io::vocab::Vocabulary;
use metrics::Metrics;

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub model: PathBuf,
    pub addr: SocketAddr,
    pub runtime: RuntimeOptions,
    pub batch: BatchConfig,
    /// Requests that may wait for the batcher before new ones get 429.
    pub max_queue: usize,
    pub max_body_bytes: usize,
    /// Declared body bytes of the requests admitted at once (at least one largest body).
    pub max_inflight_bytes: usize,
    pub max_cells_per_request: usize,
    pub bearer_token: Option<String>,
    /// A request's head, and then its whole body, must arrive within this (408 / closed after).
    pub body_timeout: std::time::Duration,
    /// From `body_grace` on, a body must have arrived at this many bytes/s on average since the
    /// request head (408 / closed after); 0: no minimum.
    pub min_body_rate: u64,
    pub body_grace: std::time::Duration,
    /// Bodies declaring at most this many bytes are read before admission (`admission.rs`).
    pub small_body_bytes: usize,
    /// Accept non-integer counts in `cells` (as `ingest --allow-normalized`).
    pub allow_normalized: bool,
}

impl ServeOptions {
    /// `model` on `addr` with the `serve` command's defaults.
    pub fn new(model: PathBuf, addr: SocketAddr) -> Self {
        Self {
            model,
            addr,
            runtime: RuntimeOptions::default(),
            batch: BatchConfig { token_budget: 16_384, max_rows: 64, max_wait: std::time::Duration::from_millis(2) },
            max_queue: 256,
            max_body_bytes: 16 << 20,
            max_inflight_bytes: 256 << 20,
            max_cells_per_request: 1024,
            bearer_token: None,
            body_timeout: std::time::Duration::from_secs(30),
            min_body_rate: 1024,
            body_grace: std::time::Duration::from_secs(5),
            small_body_bytes: 64 << 10,
            allow_normalized: false,
        }
    }
}

/// The most bytes of a refused body read and dropped so that its client can read the answer,
/// as a multiple of `--max-body-bytes` (past it the connection is closed).
pub const DRAIN_BODIES: usize = 4;

/// What the handlers share.
pub struct AppState {
    pub options: ServeOptions,
    pub metrics: Arc<Metrics>,
    /// Admission before a body is read: requests in flight, and their declared bytes (KiB).
    pub admission: admission::Admission,
    /// Set once the model is loaded.
    pub ready: OnceLock<Ready>,
    load_error: Mutex<Option<Error>>,
    /// Set at shutdown: refused bodies stop being drained.
    pub shutting_down: tokio::sync::watch::Sender<bool>,
}

pub struct Ready {
    pub queue: mpsc::Sender<Job>,
    pub encoder_vocab: Arc<Vocabulary>,
    pub rules: InputRules,
    pub dim: usize,
    /// A cell head's classes: a fine-tuned classifier's, or a hierarchical head's leaves
    /// (empty: embeddings only).
    pub classes: Vec<String>,
    /// The hierarchical head's decoder (`/v1/annotate`), with the default threshold.
    pub annotator: Option<corrflow_infer::annotate::calls::Annotator>,
    pub ontology_version: Option<String>,
    pub name: String,
    pub info: serde_json::Value,
}

#[derive(Clone, Debug, Serialize)]
pub struct ServeSummary {
    pub command: String,
    pub addr: String,
    pub requests: u64,
    pub cells: u64,
}

/// Serves until `shutdown` resolves; `on_listening` gets the bound address (port 0 picks one).
pub async fn serve(
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<ServeSummary> {
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| Error::Usage(format!("cannot bind {}: {e}", options.addr)))?;
    let addr = listener.local_addr().map_err(|e| Error::Usage(format!("{}: {e}", options.addr)))?;
    let state = Arc::new(AppState {
        options: options.clone(),
        metrics: Arc::new(Metrics::new()),
        admission: admission::Admission::new(&options),
        ready: OnceLock::new(),
        load_error: Mutex::new(None),
        shutting_down: tokio::sync::watch::Sender::new(false),
    });
    on_listening(addr);
    tokio::spawn(memory::trim_when_idle(state.clone(), std::time::Duration::from_secs(1)));

    // Load the model off the async threads; a failure stops the server with that error.
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(load_model(state.clone(), failed_tx));
    let stopping = state.clone();
    let stop = async move {
        tokio::select! {
            _ = shutdown => {}
            // Only a sent failure stops the server; the loader finishing drops the sender.
            Ok(()) = failed_rx => {}
        }
        stopping.shutting_down.send_replace(true);
    };
    listen::serve_connections(listener, routes::router(state.clone()), options.body_timeout, stop).await;
    if let Some(e) = state.load_error.lock().expect("not poisoned").take() {
        return Err(e);
    }
    let requests = routes::ENDPOINTS
        .iter()
        .filter(|e| e.runs_model)
        .map(|e| state.metrics.requests.with_label_values(&[e.path, "200"]).get())
        .sum();
    Ok(ServeSummary { command: "serve".into(), addr: addr.to_string(), requests, cells: state.metrics.cells.get() })
}

/// Loads the model off the async threads, then starts the batcher and marks the server ready;
/// a failure is kept in `load_error` and signalled on `failed_tx` (which stops the server).
async fn load_model(state: Arc<AppState>, failed_tx: tokio::sync::oneshot::Sender<()>) {
    let opts = state.options.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        // Tests hold the server in its loading state (`FAILPOINTS=serve-load=sleep(1500)`,
        // built with the `failpoints` feature only) to see the 503s.
        fail::fail_point!("serve-load");
        let encoder = OrtEncoder::open(&opts.model, &opts.runtime)?;
        corrflow_infer::encode::check_batch_memory(&encoder, opts.batch.token_budget)?;
        Ok(encoder)
    })
    .await;
    match loaded {
        Ok(Ok(encoder)) => {
            // As deep as admission is wide, so that an admitted request always finds room:
            // with a queue of `--max-queue`, two requests arriving before the batcher took
            // the first one saw 429 though admission had let both in (CI, session 32).
            let (tx, rx) = mpsc::channel(admission::Admission::max_requests(&state.options));
            let ready = ready_state(&state.options, &encoder, tx);
            tokio::spawn(batcher::run_batcher(encoder, rx, state.options.batch, state.metrics.clone()));
            let _ = state.ready.set(ready);
            state.metrics.ready.set(1);
            tracing::info!("model loaded; ready");
        }
        Ok(Err(e)) => {
            *state.load_error.lock().expect("not poisoned") = Some(e);
            let _ = failed_tx.send(());
        }
        Err(e) => {
            *state.load_error.lock().expect("not poisoned") =
                Some(Error::internal("server", format!("model loader: {e}")));
            let _ = failed_tx.send(());
        }
    }
}

fn ready_state(options: &ServeOptions, encoder: &OrtEncoder, queue: mpsc::Sender<Job>) -> Ready {
    let meta = &encoder.meta;
    let name = options.model.file_stem().map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let info = serde_json::json!({
        "model": name,
        "path": options.model.display().to_string(),
        "dim": meta.model.hidden,
        "config": meta.model,
        "layout": meta.layout,
        "max_len": meta.max_len,
        "pooling": meta.pooling,
        "classes": encoder.classes(),
        "ontology": meta.model.hce.as_ref().map(|h| serde_json::json!({
            "version": h.ontology_version, "column": h.column, "leaves": h.leaves.len(), "terms": h.terms.len(),
        })),
        "vocab": {"name": meta.vocab_name, "hash": meta.vocab_hash, "size": meta.vocab_size},
        "step": meta.step,
        "runtime": {
            "library": encoder.library.display().to_string(),
            "threads": options.runtime.threads,
            "device": options.runtime.device,
        },
        "batching": {
            "token_budget": options.batch.token_budget,
            "max_rows": options.batch.max_rows,
            "max_wait_ms": options.batch.max_wait.as_secs_f64() * 1e3,
            "max_queue": options.max_queue,
            "max_body_bytes": options.max_body_bytes,
            "max_inflight_bytes": options.max_inflight_bytes,
            "max_cells_per_request": options.max_cells_per_request,
            "body_timeout_s": options.body_timeout.as_secs_f64(),
            "min_body_bytes_per_s": options.min_body_rate,
            "body_grace_s": options.body_grace.as_secs_f64(),
            "small_body_bytes": options.small_body_bytes,
        },
        "allow_normalized": options.allow_normalized,
        "version": env!("CARGO_PKG_VERSION"),
    });
    Ready {
        queue,
        encoder_vocab: Arc::new(encoder.vocab.clone()),
        rules: InputRules {
            layout: meta.tokenize_layout(),
            vocab_size: meta.vocab_size,
            max_positions: meta.model.max_positions,
            max_cells: options.max_cells_per_request,
            allow_normalized: options.allow_normalized,
            values: corrflow_infer::inputs::value_settings(&meta.model)
                .and_then(|v| encoder.vocab.cls.map(|cls| (v.clone(), cls))),
        },
        dim: meta.model.hidden,
        classes: encoder.classes().to_vec(),
        annotator: meta.model.hce.as_ref().and_then(|h| corrflow_infer::annotate::calls::Annotator::new(h, 0.5).ok()),
        ontology_version: meta.model.hce.as_ref().map(|h| h.ontology_version.clone()),
        name,
        info,
    }
}

/// Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down: finishing requests in flight");
}
