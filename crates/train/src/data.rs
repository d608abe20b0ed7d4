//! The training data: the corpus split into training and held-out cells by a seeded hash of the
//! cell key, epochs read in a seeded shard order through a shuffle buffer, length-grouped into
//! planned batches for the masking dataflow; and a watch on the graph directory so that a graph
//! updated during training reaches the masking operator.

use std::path::PathBuf;

use corrflow_algorithms::SequenceLayout;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use corrflow_algorithms::batches::LengthGrouper;
use corrflow_io::corpus::CorpusIndex;
use corrflow_io::error::Result;
use corrflow_mask::dataflow::{EdgeChange, Feed, FeedSource};

/// How cells become planned batches.
#[derive(Clone, Debug)]
pub struct DataPlan {
    pub index: CorpusIndex,
    pub vocab_size: usize,
    pub layout: SequenceLayout,
    pub batch_size: usize,
    pub group_batches: usize,
    pub shuffle_buffer: usize,
    pub epochs: usize,
    /// Longest sequence kept (tokens beyond are cut; a trailing `<eos>` is kept).
    pub max_len: usize,
    pub eval_fraction: f64,
    pub seed: u64,
}

fn mix(mut z: u64) -> u64 {
    // splitmix64 finaliser
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl DataPlan {
    /// Whether cell `key` is held out.
    pub fn is_eval(&self, key: u64) -> bool {
        (mix(key ^ mix(self.seed ^ 0x5eed)) as f64 / u64::MAX as f64) < self.eval_fraction
    }

    pub fn truncate(&self, mut tokens: Vec<u32>) -> Vec<u32> {
        if self.max_len > 0 && tokens.len() > self.max_len {
            let eos = self.layout.eos.filter(|e| tokens.last() == Some(e));
            tokens.truncate(self.max_len);
            if let Some(e) = eos {
                *tokens.last_mut().expect("max_len > 0") = e;
            }
        }
        tokens
    }

    pub fn train_cells(&self) -> u64 {
        (0..self.index.cells).filter(|&k| !self.is_eval(k)).count() as u64
    }

    /// Batches per epoch: full groups of `group_batches`, then the last group's remainder.
    pub fn batches_per_epoch(&self) -> u64 {
        let n = self.train_cells();
        let group = (self.batch_size * self.group_batches) as u64;
        (n / group) * self.group_batches as u64 + (n % group).div_ceil(self.batch_size as u64)
    }

    /// The first `n` held-out cells (key order): the fixed evaluation set.
    pub fn eval_set(&self, n: usize) -> Result<Vec<(u64, Vec<u32>)>> {
        let mut out = Vec::new();
        for s in 0..self.index.shards.len() {
            if out.len() >= n {
                break;
            }
            self.index.for_each_block(s, self.vocab_size, |b| {
                for i in 0..b.len() {
                    let key = b.first_key + i as u64;
                    if out.len() < n && self.is_eval(key) {
                        out.push((key, self.truncate(b.cell(i).to_vec())));
                    }
                }
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// The feed of the masking dataflow from batch `first_seq` on; batches before it are planned
    /// (to keep the order) but not emitted. `graph` is polled every `poll` batches.
    pub fn feed(self, first_seq: u64, graph: Option<GraphWatch>) -> FeedSource {
        Box::new(move |emit| {
            let mut watch = graph;
            let mut seq = 0u64;
            for epoch in 0..self.epochs as u64 {
                let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed ^ mix(epoch + 1)));
                let mut order: Vec<usize> = (0..self.index.shards.len()).collect();
                order.shuffle(&mut rng);
                let mut grouper = LengthGrouper::new(self.batch_size, self.group_batches, self.seed, epoch, seq);
                let mut buffer: Vec<(u64, Vec<u32>)> = Vec::with_capacity(self.shuffle_buffer.max(1));
                let mut stopped = false;
                let mut send = |batches: Vec<corrflow_algorithms::batches::PlannedBatch>, seq: &mut u64| -> bool {
                    for b in batches {
                        *seq = b.seq + 1;
                        if b.seq < first_seq {
                            continue;
                        }
                        if let Some(w) = watch.as_mut() {
                            if let Some(changes) = w.poll(b.seq) {
                                if !emit(Feed::Graph(changes)) {
                                    return false;
                                }
                            }
                        }
                        if !emit(Feed::Batch(b)) {
                            return false;
                        }
                    }
                    true
                };
                for &s in &order {
                    if stopped {
                        break;
                    }
                    self.index
                        .for_each_block(s, self.vocab_size, |b| {
                            for i in 0..b.len() {
                                let key = b.first_key + i as u64;
                                if self.is_eval(key) {
                                    continue;
                                }
                                buffer.push((key, self.truncate(b.cell(i).to_vec())));
                                if buffer.len() >= self.shuffle_buffer.max(1) {
                                    let j = rng.random_range(0..buffer.len());
                                    let (k, t) = buffer.swap_remove(j);
                                    if !send(grouper.push(k, t), &mut seq) {
                                        stopped = true;
                                        return Err(corrflow_io::error::Error::Usage("stopped".into()));
                                    }
                                }
                            }
                            Ok(())
                        })
                        .or_else(|e| if stopped { Ok(()) } else { Err(e) })?;
                }
                if stopped {
                    return Ok(());
                }
                buffer.shuffle(&mut rng);
                for (k, t) in buffer.drain(..) {
                    if !send(grouper.push(k, t), &mut seq) {
                        return Ok(());
                    }
                }
                if !send(grouper.flush(), &mut seq) {
                    return Ok(());
                }
            }
            Ok(())
        })
    }
}

/// Polls a graph directory for a new version (its `graph.json` content hash) and returns the
/// edge changes against the version the masking operator holds.
pub struct GraphWatch {
    pub dir: PathBuf,
    pub every: u64,
    pub hash: String,
    pub edges: std::collections::BTreeSet<(u32, u32)>,
}

impl GraphWatch {
    fn poll(&mut self, seq: u64) -> Option<Vec<EdgeChange>> {
        if !seq.is_multiple_of(self.every.max(1)) {
            return None;
        }
        let text = std::fs::read_to_string(self.dir.join(corrflow_io::graph_files::INFO)).ok()?;
        let info: corrflow_io::graph_files::GraphInfo = serde_json::from_str(&text).ok()?;
        if info.content_hash == self.hash {
            return None;
        }
        // A graph being replaced may be half-visible for a moment: keep the old one then.
        let g = corrflow_io::graph_files::read_graph(&self.dir).ok()?;
        let new: std::collections::BTreeSet<(u32, u32)> = g.edges.iter().map(|e| (e.u, e.v)).collect();
        let mut changes: Vec<EdgeChange> = self.edges.difference(&new).map(|&e| (e, -1)).collect();
        changes.extend(new.difference(&self.edges).map(|&e| (e, 1)));
        tracing::info!(
            seq,
            added = new.difference(&self.edges).count(),
            "dependency graph changed; masking uses it from this batch on"
        );
        self.hash = g.info.content_hash;
        self.edges = new;
        Some(changes)
    }
}
