//! Prometheus metrics of the server (`GET /metrics`, text exposition format).

use prometheus::core::Collector;
use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub request_seconds: HistogramVec,
    pub cells: IntCounter,
    pub unknown_genes: IntCounter,
    pub queue_depth: IntGauge,
    pub requests_in_flight: IntGauge,
    pub requests_abandoned: IntCounter,
    pub request_bodies_open: IntGauge,
    pub request_bodies_too_slow: IntCounter,
    pub queue_wait_seconds: Histogram,
    pub batch_cells: Histogram,
    pub batch_tokens: Histogram,
    pub inference_seconds: Histogram,
    pub ready: IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new_custom(Some("corrflow".into()), None).expect("static prefix");
        let r = &registry;
        let latency = exponential_buckets(0.0005, 2.0, 16).expect("static buckets");
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            register(r, Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)))
        };
        let counter = |name: &str, help: &str| register(r, IntCounter::new(name, help));
        let gauge = |name: &str, help: &str| register(r, IntGauge::new(name, help));
        Self {
            requests: register(
                r,
                IntCounterVec::new(
                    Opts::new("http_requests_total", "HTTP requests by endpoint and status"),
                    &["endpoint", "status"],
                ),
            ),
            request_seconds: register(
                r,
                HistogramVec::new(
                    HistogramOpts::new("http_request_duration_seconds", "Request latency by endpoint")
                        .buckets(latency.clone()),
                    &["endpoint"],
                ),
            ),
            cells: counter("cells_embedded_total", "Cells embedded"),
            unknown_genes: counter("unknown_genes_total", "Genes in requests not in the vocabulary"),
            queue_depth: gauge("queue_depth", "Requests waiting for the batcher"),
            requests_in_flight: gauge("requests_in_flight", "Embed requests admitted and not yet answered"),
            requests_abandoned: counter(
                "requests_abandoned_total",
                "Queued requests skipped before compute because their client had disconnected",
            ),
            request_bodies_open: gauge(
                "request_bodies_open",
                "Request bodies being received, read by a handler or drained after a refusal",
            ),
            request_bodies_too_slow: counter(
                "request_bodies_too_slow_total",
                "Request bodies cut off for arriving under --min-body-bytes-per-s",
            ),
            queue_wait_seconds: histogram(
                "queue_wait_seconds",
                "Time requests wait before their batch runs",
                latency.clone(),
            ),
            batch_cells: histogram(
                "batch_cells",
                "Cells per model batch",
                exponential_buckets(1.0, 2.0, 12).expect("static buckets"),
            ),
            batch_tokens: histogram(
                "batch_tokens",
                "Padded tokens per model batch",
                exponential_buckets(64.0, 2.0, 14).expect("static buckets"),
            ),
            inference_seconds: histogram("inference_seconds", "ONNX Runtime time per model batch", latency),
            ready: gauge("ready", "1 once the model is loaded"),
            registry,
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf).expect("text encoding into a Vec");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// A metric, registered. Names, help texts and buckets are static, so neither step can fail.
fn register<M: Collector + Clone + 'static>(registry: &Registry, metric: prometheus::Result<M>) -> M {
    let metric = metric.expect("static metric");
    registry.register(Box::new(metric.clone())).expect("distinct metric names");
    metric
}
