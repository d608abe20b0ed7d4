//! Prometheus metrics of the server (`GET /metrics`, text exposition format).

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
        let latency = exponential_buckets(0.0005, 2.0, 16).expect("static buckets");
        let requests = IntCounterVec::new(
            Opts::new("http_requests_total", "HTTP requests by endpoint and status"),
            &["endpoint", "status"],
        )
        .expect("static metric");
        let request_seconds = HistogramVec::new(
            HistogramOpts::new("http_request_duration_seconds", "Request latency by endpoint").buckets(latency.clone()),
            &["endpoint"],
        )
        .expect("static metric");
        let cells = IntCounter::new("cells_embedded_total", "Cells embedded").expect("static metric");
        let unknown_genes =
            IntCounter::new("unknown_genes_total", "Genes in requests not in the vocabulary").expect("static metric");
        let queue_depth = IntGauge::new("queue_depth", "Requests waiting for the batcher").expect("static metric");
        let requests_in_flight =
            IntGauge::new("requests_in_flight", "Embed requests admitted and not yet answered").expect("static metric");
        let requests_abandoned = IntCounter::new(
            "requests_abandoned_total",
            "Queued requests skipped before compute because their client had disconnected",
        )
        .expect("static metric");
        let request_bodies_open = IntGauge::new(
            "request_bodies_open",
            "Request bodies being received, read by a handler or drained after a refusal",
        )
        .expect("static metric");
        let request_bodies_too_slow = IntCounter::new(
            "request_bodies_too_slow_total",
            "Request bodies cut off for arriving under --min-body-bytes-per-s",
        )
        .expect("static metric");
        let queue_wait_seconds = Histogram::with_opts(
            HistogramOpts::new("queue_wait_seconds", "Time requests wait before their batch runs")
                .buckets(latency.clone()),
        )
        .expect("static metric");
        let batch_cells = Histogram::with_opts(
            HistogramOpts::new("batch_cells", "Cells per model batch")
                .buckets(exponential_buckets(1.0, 2.0, 12).expect("static")),
        )
        .expect("static metric");
        let batch_tokens = Histogram::with_opts(
            HistogramOpts::new("batch_tokens", "Padded tokens per model batch")
                .buckets(exponential_buckets(64.0, 2.0, 14).expect("static")),
        )
        .expect("static metric");
        let inference_seconds = Histogram::with_opts(
            HistogramOpts::new("inference_seconds", "ONNX Runtime time per model batch").buckets(latency),
        )
        .expect("static metric");
        let ready = IntGauge::new("ready", "1 once the model is loaded").expect("static metric");
        for c in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(request_seconds.clone()),
            Box::new(cells.clone()),
            Box::new(unknown_genes.clone()),
            Box::new(queue_depth.clone()),
            Box::new(requests_in_flight.clone()),
            Box::new(requests_abandoned.clone()),
            Box::new(request_bodies_open.clone()),
            Box::new(request_bodies_too_slow.clone()),
            Box::new(queue_wait_seconds.clone()),
            Box::new(batch_cells.clone()),
            Box::new(batch_tokens.clone()),
            Box::new(inference_seconds.clone()),
            Box::new(ready.clone()),
        ] {
            registry.register(c).expect("distinct metric names");
        }
        Self {
            registry,
            requests,
            request_seconds,
            cells,
            unknown_genes,
            queue_depth,
            requests_in_flight,
            requests_abandoned,
            request_bodies_open,
            request_bodies_too_slow,
            queue_wait_seconds,
            batch_cells,
            batch_tokens,
            inference_seconds,
            ready,
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
