//! The masking operator: a timely dataflow that masks planned batches with the dependency graph
//! of their time and hands them to the trainer through a bounded channel.
//!
//! Two inputs share one timeline (the batch sequence number): planned batches, and the graph as
//! a differential collection of edges. A batch at time `t` is masked once the graph input has
//! passed `t`, with every edge change at times `≤ t` applied, so a graph change (an atlas added
//! or retracted) takes effect exactly for the batches after it, whatever the number of workers.
//! Masks depend only on `(seed, epoch, cell)`, so the batches are the same bytes for any number
//! of workers; the receiving side restores sequence order. A full channel blocks the operator,
//! and the feeder never runs more than a few batches ahead of the slowest worker: backpressure
//! all the way to the corpus reader.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use corrflow_algorithms::mask::{MaskScratch, MaskTables, MaskedSequence, Masker, NeighbourTable};
use crossbeam_channel::{Receiver, Sender};
use differential_dataflow::input::Input as _;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Input, Probe};

use super::MaskContext;
use corrflow_algorithms::batches::{PlannedBatch, TrainingBatch};
use corrflow_io::error::{Error, Result};

/// An edge change of the graph collection: `(u, v)` with `u < v`, +1 added / −1 removed.
pub type EdgeChange = ((u32, u32), isize);

/// What the feeder emits, in order: batches, and graph changes that apply from the next batch on.
#[derive(Clone, Debug)]
pub enum Feed {
    Batch(PlannedBatch),
    Graph(Vec<EdgeChange>),
}

/// Produces the feed: calls `emit` for each item and stops early when it returns false (the
/// trainer has gone).
pub type FeedSource = Box<dyn FnOnce(&mut dyn FnMut(Feed) -> bool) -> Result<()> + Send>;

/// How the dataflow runs.
#[derive(Clone, Debug)]
pub struct MaskingOptions {
    pub workers: usize,
    /// Batches the channel to the trainer holds.
    pub capacity: usize,
    /// Sequence number of the first batch (a resumed run starts past 0).
    pub first_seq: u64,
}

/// The running dataflow: masked batches in sequence order.
pub struct MaskedBatches {
    rx: Option<Receiver<TrainingBatch>>,
    reorder: BTreeMap<u64, TrainingBatch>,
    next: u64,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<Result<()>>>,
}

impl MaskedBatches {
    /// Starts the dataflow on its own threads: `initial` edges are the graph at time 0.
    pub fn spawn(ctx: Arc<MaskContext>, initial: Vec<(u32, u32)>, source: FeedSource, opts: MaskingOptions) -> Self {
        let (tx, rx) = crossbeam_channel::bounded(opts.capacity.max(1));
        let stop = Arc::new(AtomicBool::new(false));
        let stop_w = stop.clone();
        let first = opts.first_seq;
        let workers = opts.workers.max(1);
        let join = std::thread::spawn(move || run(ctx, initial, source, workers, first, tx, stop_w));
        Self { rx: Some(rx), reorder: BTreeMap::new(), next: first, stop, join: Some(join) }
    }

    /// Waits for the dataflow and returns its error, if any.
    pub fn finish(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        self.rx = None;
        match self.join.take() {
            Some(j) => j.join().map_err(|_| Error::internal("masking dataflow", "a worker panicked"))?,
            None => Ok(()),
        }
    }
}

impl Iterator for MaskedBatches {
    type Item = Result<TrainingBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(b) = self.reorder.remove(&self.next) {
                self.next += 1;
                return Some(Ok(b));
            }
            match self.rx.as_ref()?.recv() {
                Ok(b) => {
                    self.reorder.insert(b.seq, b);
                }
                Err(_) => {
                    // All workers finished: report their error, or the end.
                    return match self.shutdown() {
                        Err(e) => Some(Err(e)),
                        Ok(()) if self.reorder.is_empty() => None,
                        Ok(()) => {
                            Some(Err(Error::internal("masking dataflow", format!("batch {} was lost", self.next))))
                        }
                    };
                }
            }
        }
    }
}

impl Drop for MaskedBatches {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn run(
    ctx: Arc<MaskContext>,
    initial: Vec<(u32, u32)>,
    source: FeedSource,
    workers: usize,
    first_seq: u64,
    tx: Sender<TrainingBatch>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let source = Arc::new(Mutex::new(Some(source)));
    let initial = Arc::new(initial);
    let result: Arc<Mutex<Result<()>>> = Arc::new(Mutex::new(Ok(())));
    let result_w = result.clone();
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let (mut batches_in, mut edges_in, probe) = masking_dataflow(worker, ctx.clone(), tx.clone(), stop.clone());
        if worker.index() != 0 {
            return; // inputs dropped: only worker 0 feeds; this worker masks its share.
        }
        for &e in initial.iter() {
            edges_in.update(e, 1);
        }
        let mut time = first_seq;
        edges_in.advance_to(time);
        batches_in.advance_to(time);
        edges_in.flush();
        // Batches in flight ahead of the slowest worker: bounds memory whatever the trainer does.
        let lag = 2 * worker.peers() as u64 + 2;
        let mut emit = |feed: Feed| -> bool {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
            match feed {
                Feed::Graph(changes) => {
                    for (e, d) in changes {
                        edges_in.update(e, d);
                    }
                }
                Feed::Batch(b) => {
                    debug_assert_eq!(b.seq, time, "batches are numbered consecutively");
                    batches_in.send(b);
                    time += 1;
                    batches_in.advance_to(time);
                    edges_in.advance_to(time);
                    edges_in.flush();
                    while probe.less_than(&time.saturating_sub(lag)) && !stop.load(Ordering::SeqCst) {
                        worker.step();
                    }
                }
            }
            true
        };
        let source = source.lock().ok().and_then(|mut s| s.take());
        if let Some(source) = source {
            // On a source error the batches already fed are still delivered, then the error.
            if let Err(e) = source(&mut emit) {
                if let Ok(mut r) = result_w.lock() {
                    *r = Err(e);
                }
            }
        }
    })
    .map_err(|e| Error::internal("masking dataflow", format!("starting: {e}")))?;
    guards
        .join()
        .into_iter()
        .try_for_each(|r| r.map_err(|e| Error::internal("masking dataflow", format!("worker failed: {e}"))))?;
    Arc::try_unwrap(result).map_or(Ok(()), |m| m.into_inner().unwrap_or(Ok(())))
}

/// One worker's masking dataflow: planned batches in (spread over the workers by sequence
/// number) and edge changes in (broadcast to every worker); each worker masks a batch once the
/// graph is complete up to the batch's time and sends it to `tx`.
#[allow(clippy::type_complexity)]
fn masking_dataflow(
    worker: &mut timely::worker::Worker,
    ctx: Arc<MaskContext>,
    tx: Sender<TrainingBatch>,
    stop: Arc<AtomicBool>,
) -> (
    timely::dataflow::InputHandle<u64, timely::container::CapacityContainerBuilder<Vec<PlannedBatch>>>,
    differential_dataflow::input::InputSession<u64, (u32, u32), isize>,
    timely::dataflow::ProbeHandle<u64>,
) {
    worker.dataflow::<u64, _, _>(|scope| {
        let (edges_in, edges) = scope.new_collection::<(u32, u32), isize>();
        let (batches_in, batches) = scope.new_input::<Vec<PlannedBatch>>();
        let probe = batches
            .binary_frontier::<_, timely::container::CapacityContainerBuilder<Vec<()>>, _, _, _, _>(
                edges.inner.broadcast(),
                Exchange::new(|b: &PlannedBatch| b.seq),
                Pipeline,
                "CorrMask",
                move |_cap, _info| {
                    let mut op = MaskOperator::new(ctx);
                    move |(batches, _), (edges, edge_frontier), _out| {
                        batches.for_each(|_, data| op.waiting.append(data));
                        edges.for_each(|_, data| op.changes.append(data));
                        op.mask_ready(edge_frontier, &tx, &stop);
                    }
                },
            )
            .probe()
            .0;
        (batches_in, edges_in, probe)
    })
}

/// State of one worker's masking operator.
struct MaskOperator {
    ctx: Arc<MaskContext>,
    waiting: Vec<PlannedBatch>,
    changes: Vec<((u32, u32), u64, isize)>,
    edges: HashMap<(u32, u32), isize>,
    table: NeighbourTable,
    graph_time: u64,
    scratch: MaskScratch,
    masked: Vec<MaskedSequence>,
}

impl MaskOperator {
    fn new(ctx: Arc<MaskContext>) -> Self {
        Self {
            ctx,
            waiting: Vec::new(),
            changes: Vec::new(),
            edges: HashMap::new(),
            table: NeighbourTable::default(),
            graph_time: 0,
            scratch: MaskScratch::default(),
            masked: Vec::new(),
        }
    }

    /// Masks, in time order, every waiting batch whose time the graph input has passed.
    fn mask_ready(
        &mut self,
        edge_frontier: &timely::progress::frontier::MutableAntichain<u64>,
        tx: &Sender<TrainingBatch>,
        stop: &AtomicBool,
    ) {
        self.waiting.sort_by_key(|b| std::cmp::Reverse(b.seq));
        while let Some(b) = self.waiting.last() {
            if edge_frontier.less_equal(&b.seq) {
                break;
            }
            let b = self.waiting.pop().expect("checked above");
            self.apply_changes_through(b.seq);
            let batch = self.mask(b);
            if stop.load(Ordering::SeqCst) || tx.send(batch).is_err() {
                stop.store(true, Ordering::SeqCst);
                self.waiting.clear();
                return;
            }
        }
    }

    fn apply_changes_through(&mut self, t: u64) {
        let mut latest = None;
        self.changes.retain(|&(e, time, diff)| {
            if time > t {
                return true;
            }
            *self.edges.entry(e).or_default() += diff;
            latest = latest.max(Some(time));
            false
        });
        if let Some(time) = latest {
            self.edges.retain(|_, c| *c != 0);
            self.table = NeighbourTable::from_edges(self.edges.keys().copied());
            self.graph_time = self.graph_time.max(time);
        }
    }

    fn mask(&mut self, b: PlannedBatch) -> TrainingBatch {
        let ctx = &self.ctx;
        let masker = Masker {
            params: &ctx.params,
            tables: MaskTables { graph: &self.table, pmi: ctx.pmi.as_ref() },
            replacement: &ctx.replacement,
            layout: &ctx.layout,
        };
        let mut batch = TrainingBatch::mask(&b, &masker, ctx.pad, &mut self.scratch, &mut self.masked);
        batch.graph_time = self.graph_time;
        batch.graph_edges = self.table.edges();
        batch
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use corrflow_algorithms::mask::{MaskParams, Replacement};
    use corrflow_algorithms::SequenceLayout;

    use super::*;
    use corrflow_algorithms::batches::LengthGrouper;

    fn context() -> Arc<MaskContext> {
        Arc::new(MaskContext {
            params: MaskParams { lambda: 1.0, ..MaskParams::default() },
            graph: NeighbourTable::default(),
            pmi: None,
            replacement: Replacement {
                mask_token: 1,
                gene_tokens: (2..400).collect(),
                mask_token_rate: 0.8,
                random_token_rate: 0.1,
            },
            layout: SequenceLayout::v1(),
            vocab_size: 400,
            pad: 0,
        })
    }

    /// 40 cells of 60–100 genes in batches of 4.
    fn planned(n_cells: u64) -> Vec<PlannedBatch> {
        let mut g = LengthGrouper::new(4, 3, 1, 0, 0);
        let mut out = Vec::new();
        for k in 0..n_cells {
            let len = 60 + (k * 7 % 41) as usize;
            out.extend(g.push(k, (0..len as u32).map(|i| 2 + (i * 5 + k as u32) % 398).collect()));
        }
        out.extend(g.flush());
        out
    }

    fn module_edges(offset: u32) -> Vec<(u32, u32)> {
        (0..60u32).step_by(6).flat_map(|m| (0..5).map(move |i| (2 + offset + m + i, 3 + offset + m + i))).collect()
    }

    fn feed(
        batches: Vec<PlannedBatch>,
        change_at: u64,
        change: Vec<EdgeChange>,
        emitted: Arc<AtomicUsize>,
    ) -> FeedSource {
        Box::new(move |emit| {
            for b in batches {
                if b.seq == change_at && !emit(Feed::Graph(change.clone())) {
                    return Ok(());
                }
                if !emit(Feed::Batch(b)) {
                    return Ok(());
                }
                emitted.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })
    }

    fn run_all(workers: usize, change_at: u64) -> Vec<TrainingBatch> {
        let old = module_edges(0);
        let new = module_edges(100);
        let change: Vec<EdgeChange> = old.iter().map(|&e| (e, -1)).chain(new.iter().map(|&e| (e, 1))).collect();
        let opts = MaskingOptions { workers, capacity: 2, first_seq: 0 };
        let src = feed(planned(40), change_at, change, Arc::new(AtomicUsize::new(0)));
        MaskedBatches::spawn(context(), old, src, opts).collect::<Result<Vec<_>>>().unwrap()
    }

    #[test]
    fn batches_after_a_graph_change_use_the_new_neighbours_and_earlier_ones_the_old() {
        let batches = run_all(1, 4);
        assert_eq!(batches.len(), 10);
        let ctx = context();
        for b in &batches {
            let edges = if b.seq < 4 { module_edges(0) } else { module_edges(100) };
            assert_eq!(b.graph_time, if b.seq < 4 { 0 } else { 4 }, "batch {}", b.seq);
            // The batch equals the pure function applied with the graph of its time.
            let table = NeighbourTable::from_edges(edges);
            let masker = Masker {
                params: &ctx.params,
                tables: MaskTables { graph: &table, pmi: None },
                replacement: &ctx.replacement,
                layout: &ctx.layout,
            };
            let mut scratch = MaskScratch::default();
            for (r, &key) in b.cell_keys.iter().enumerate() {
                let tokens: Vec<u32> = {
                    let len = 60 + (key * 7 % 41) as usize;
                    (0..len as u32).map(|i| 2 + (i * 5 + key as u32) % 398).collect()
                };
                let mut m = MaskedSequence::default();
                masker.mask(&tokens, 0, key, &mut scratch, &mut m);
                assert_eq!(&b.input_ids[r * b.len..r * b.len + tokens.len()], &m.input_ids[..]);
                assert_eq!(&b.labels[r * b.len..r * b.len + tokens.len()], &m.labels[..]);
            }
        }
        assert_eq!(batches.iter().map(|b| b.seq).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn one_and_two_workers_produce_the_same_batches_in_the_same_order() {
        let (one, two) = (run_all(1, 5), run_all(2, 5));
        assert_eq!(one.len(), two.len());
        for (a, b) in one.iter().zip(&two) {
            assert!(a == b, "batch {} differs between 1 and 2 workers", a.seq);
        }
    }

    #[test]
    fn a_slow_trainer_holds_the_feeder_back() {
        let emitted = Arc::new(AtomicUsize::new(0));
        let many: Vec<PlannedBatch> =
            (0..400).map(|s| PlannedBatch { seq: s, epoch: 0, cells: vec![(s, (2..80).collect())] }).collect();
        let opts = MaskingOptions { workers: 2, capacity: 2, first_seq: 0 };
        let mut it =
            MaskedBatches::spawn(context(), module_edges(0), feed(many, u64::MAX, vec![], emitted.clone()), opts);
        let first = it.next().unwrap().unwrap();
        assert_eq!(first.seq, 0);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let ahead = emitted.load(Ordering::SeqCst);
        assert!(ahead < 20, "feeder ran {ahead} batches ahead of a stalled trainer");
        // Dropping the consumer stops the feeder instead of draining the corpus.
        drop(it);
        assert!(emitted.load(Ordering::SeqCst) < 400);
    }

    #[test]
    fn a_failing_source_reports_its_error_to_the_trainer() {
        let src: FeedSource = Box::new(|emit| {
            emit(Feed::Batch(PlannedBatch { seq: 0, epoch: 0, cells: vec![(0, vec![2, 3, 4])] }));
            Err(Error::Usage("shard 3 is corrupt".into()))
        });
        let opts = MaskingOptions { workers: 1, capacity: 2, first_seq: 0 };
        let results: Vec<Result<TrainingBatch>> = MaskedBatches::spawn(context(), vec![], src, opts).collect();
        assert!(results[0].is_ok());
        let err = results.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(err.contains("shard 3 is corrupt"), "{err}");
    }
}
