//! Dynamic batching: requests wait in a bounded queue; the batcher takes the first, gathers
//! whatever else arrives within `max_wait` until the token budget is filled, plans length-grouped
//! batches under the budget and runs them, one at a time, on a blocking thread.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::metrics::Metrics;
use corrflow_infer::encode::{encode_in_batches, Encoder, ModelCells};

/// One request's cells and where its results go (row-major `[cells, dim + classes]`: each
/// embedding, followed by a cell classifier's probabilities).
pub struct Job {
    /// The cells' tokens (and a value model's values).
    pub cells: ModelCells,
    pub reply: oneshot::Sender<Result<Vec<f32>, String>>,
    pub enqueued: Instant,
}

#[derive(Clone, Copy, Debug)]
pub struct BatchConfig {
    /// Most padded tokens per model batch.
    pub token_budget: usize,
    /// Most cells per model batch.
    pub max_rows: usize,
    /// How long a partly filled batch waits for more requests.
    pub max_wait: Duration,
}

/// Whether `job`'s client has gone (counted in `requests_abandoned_total`).
fn abandoned(job: &Job, metrics: &Metrics) -> bool {
    let gone = job.reply.is_closed();
    if gone {
        metrics.requests_abandoned.inc();
    }
    gone
}

/// Runs until every sender of the queue is gone (shutdown), then returns.
pub async fn run_batcher<E: Encoder + 'static>(
    encoder: E,
    mut queue: mpsc::Receiver<Job>,
    config: BatchConfig,
    metrics: Arc<Metrics>,
) {
    let pad = encoder.vocab().pad;
    let dim = encoder.dim() + encoder.classes().len();
    let encoder = Arc::new(Mutex::new(encoder));
    while let Some(first) = queue.recv().await {
        // Requests whose clients went away while queued (hyper dropped their handlers, and with
        // them the reply's receiver) are skipped: they cost no compute and no batch room.
        if abandoned(&first, &metrics) {
            continue;
        }
        let mut jobs = gather(first, &mut queue, &config, &metrics).await;
        // Last look before the model runs: clients may have left while the batch filled.
        jobs.retain(|j| !abandoned(j, &metrics));
        if jobs.is_empty() {
            continue;
        }
        let now = Instant::now();
        for j in &jobs {
            metrics.queue_wait_seconds.observe(now.duration_since(j.enqueued).as_secs_f64());
        }
        // Every cell of the gathered requests, flattened; results go back per request.
        let counts: Vec<usize> = jobs.iter().map(|j| j.cells.len()).collect();
        let mut cells = ModelCells::default();
        for j in &mut jobs {
            let taken = std::mem::take(&mut j.cells);
            cells.tokens.extend(taken.tokens);
            if let Some(v) = taken.values {
                cells.values.get_or_insert_with(Vec::new).extend(v);
            }
        }
        let enc = encoder.clone();
        let m = metrics.clone();
        let result = tokio::task::spawn_blocking(move || -> Result<Vec<f32>, String> {
            let mut enc = enc.lock().map_err(|_| "the model runner panicked earlier".to_string())?;
            // Tests hold batches here (`FAILPOINTS=serve-batch=sleep(MS)`, `failpoints` builds only)
            // to fill the server.
            fail::fail_point!("serve-batch");
            let budget = (config.token_budget, config.max_rows);
            encode_in_batches(&cells.tokens, cells.values.as_deref(), pad, dim, budget, |batch| {
                m.batch_cells.observe(batch.rows as f64);
                m.batch_tokens.observe(batch.tokens() as f64);
                let t = Instant::now();
                let values = enc.encode_with_probabilities(batch).map_err(|e| e.to_string())?;
                m.inference_seconds.observe(t.elapsed().as_secs_f64());
                Ok(values)
            })
        })
        .await
        .unwrap_or_else(|e| Err(format!("the model runner failed: {e}")));
        send_replies(jobs, counts, result, dim);
    }
}

/// `first` and the requests that join it until the batch holds `config.token_budget` tokens or
/// `config.max_wait` has passed (skipping those whose clients have gone).
async fn gather(first: Job, queue: &mut mpsc::Receiver<Job>, config: &BatchConfig, metrics: &Metrics) -> Vec<Job> {
    let mut tokens: usize = first.cells.tokens.iter().map(Vec::len).sum();
    let mut jobs = vec![first];
    let deadline = tokio::time::Instant::now() + config.max_wait;
    while tokens < config.token_budget {
        let job = match queue.try_recv() {
            Ok(job) => job,
            Err(mpsc::error::TryRecvError::Empty) => match tokio::time::timeout_at(deadline, queue.recv()).await {
                Ok(Some(job)) => job,
                Ok(None) | Err(_) => break,
            },
            Err(mpsc::error::TryRecvError::Disconnected) => break,
        };
        if !abandoned(&job, metrics) {
            tokens += job.cells.tokens.iter().map(Vec::len).sum::<usize>();
            jobs.push(job);
        }
    }
    jobs
}

/// Each request's rows of the batch's result, or the batch's error.
fn send_replies(jobs: Vec<Job>, counts: Vec<usize>, result: Result<Vec<f32>, String>, dim: usize) {
    let mut offset = 0;
    for (job, n) in jobs.into_iter().zip(counts) {
        let reply = match &result {
            Ok(all) => Ok(all[offset * dim..(offset + n) * dim].to_vec()),
            Err(e) => Err(e.clone()),
        };
        offset += n;
        // The client may have gone away; nothing to do then.
        let _ = job.reply.send(reply);
    }
}
