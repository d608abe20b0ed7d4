//! Masked batches of a feed whose graph does not change, without the dataflow: planned batches
//! are masked a group at a time on a thread pool and delivered in order. The masks are the
//! dataflow's (the same [`TrainingBatch::mask`] with the same tables; a mask depends on the
//! seed, the epoch and the cell only), but there is no per-batch progress tracking, which is
//! what a consumer that never updates the graph, such as the Python loader, would otherwise pay
//! for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use corrflow_algorithms::batches::{PlannedBatch, TrainingBatch};
use corrflow_algorithms::mask::{MaskScratch, MaskedSequence};
use crossbeam_channel::{Receiver, Sender};
use rayon::prelude::*;

use crate::dataflow::{Feed, FeedSource};
use crate::MaskContext;
use corrflow_io::error::{Error, Result};

/// Planned batches masked at once: enough to keep every thread busy between hand-offs, and few
/// enough cells that the batches in flight (three groups and the consumer's queue) stay well
/// under a small corpus' size, so the loader's memory does not grow with the corpus.
const GROUP: usize = 32;
const GROUP_CELLS: usize = 512;

/// The masked batches of a feed, in feed order, masked on `threads` threads.
pub struct FixedGraphBatches {
    rx: Option<Receiver<Result<TrainingBatch>>>,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl FixedGraphBatches {
    /// Starts reading, planning and masking; `capacity` batches wait for the consumer at most.
    pub fn spawn(ctx: Arc<MaskContext>, source: FeedSource, threads: usize, capacity: usize) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(capacity.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let stop_w = stop.clone();
        let join = std::thread::spawn(move || {
            let result = rayon::ThreadPoolBuilder::new()
                .num_threads(threads.max(1))
                .build()
                .map_err(|e| Error::internal("masking", format!("thread pool: {e}")))
                .and_then(|pool| run(&ctx, source, &pool, &tx, &stop_w));
            if let Err(e) = result {
                let _ = tx.send(Err(e));
            }
        });
        Self { rx: Some(rx), stop, join: Some(join) }
    }
}

fn run(
    ctx: &MaskContext,
    source: FeedSource,
    pool: &rayon::ThreadPool,
    tx: &Sender<Result<TrainingBatch>>,
    stop: &AtomicBool,
) -> Result<()> {
    // Planning (this thread) and masking (the pool, driven from a second thread) overlap: groups
    // of planned batches pass between them through a short channel.
    let (groups_tx, groups_rx) = crossbeam_channel::bounded::<Vec<PlannedBatch>>(1);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let masker = ctx.masker();
            for group in groups_rx {
                let masked: Vec<TrainingBatch> = pool.install(|| {
                    group
                        .par_iter()
                        .map_init(
                            || (MaskScratch::default(), Vec::<MaskedSequence>::new()),
                            |(scratch, cells), b| TrainingBatch::mask(b, &masker, ctx.pad, scratch, cells),
                        )
                        .collect()
                });
                if !masked.into_iter().all(|b| !stop.load(Ordering::SeqCst) && tx.send(Ok(b)).is_ok()) {
                    stop.store(true, Ordering::SeqCst);
                    return; // dropping the receiver stops the planner at its next group
                }
            }
        });
        let mut group: Vec<PlannedBatch> = Vec::with_capacity(GROUP);
        let mut cells = 0;
        let mut unsupported = false;
        source(&mut |feed| match feed {
            Feed::Batch(b) => {
                cells += b.cells.len();
                group.push(b);
                if group.len() < GROUP && cells < GROUP_CELLS {
                    return true;
                }
                cells = 0;
                groups_tx.send(std::mem::replace(&mut group, Vec::with_capacity(GROUP))).is_ok()
            }
            Feed::Graph(_) => {
                unsupported = true;
                false
            }
        })?;
        if unsupported {
            return Err(Error::internal("masking", "a graph change reached the fixed-graph masker"));
        }
        if !group.is_empty() {
            let _ = groups_tx.send(group);
        }
        drop(groups_tx);
        Ok(())
    })
}

impl Iterator for FixedGraphBatches {
    type Item = Result<TrainingBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.rx.as_ref()?.recv().ok();
        if next.is_none() {
            self.rx = None;
            if let Some(j) = self.join.take() {
                if j.join().is_err() {
                    return Some(Err(Error::internal("masking", "the masking thread panicked")));
                }
            }
        }
        next
    }
}

impl Drop for FixedGraphBatches {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.rx = None; // a blocked send fails, the source stops at its next emit
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}
