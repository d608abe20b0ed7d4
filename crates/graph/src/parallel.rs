//! Timely dataflow for the graph's statistics: every worker (threads, or processes of a cluster
//! on loopback or a network) reads a disjoint subset of the shards, pre-aggregates the exact
//! integer statistics of its cells, and the partials are exchanged and summed ([`gather`]).
//! Integer sums make the result identical for any number of workers or processes.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use corrflow_algorithms::graph::{BatchWork, GeneRowSums, GraphVocab, PairSums, RankMaps, ScoreHistograms, ScoredCell};
use serde::{Deserialize, Serialize};
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::{Exchange, Input, Probe};
use timely::dataflow::InputHandle;

use super::build::gene_presence;
use super::overlap::PostingBlock;
use corrflow_io::corpus::{for_each_shard_block, CorpusCells};
use corrflow_io::error::{Error, Result};
use corrflow_io::vocab::Vocabulary;

/// Cells of a shard held at once by a worker: a shard holds up to `ingest.shard_cells` cells
/// (100,000 by default), whose tokens and scores took hundreds of MB per worker when read whole.
/// Every statistic is an exact integer sum, so the blocks do not change any result.
pub const SHARD_BLOCK_CELLS: usize = 8192;

/// How to run the dataflow: `-w` threads per process, `-n` processes, `-p` this process,
/// `-h` a host file with one `host:port` per process.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub workers: usize,
    pub processes: usize,
    pub process: usize,
    pub hostfile: Option<PathBuf>,
}

impl Cluster {
    /// Whether this process only contributes statistics (it is not process 0 of a cluster).
    pub fn is_helper(&self) -> bool {
        self.processes > 1 && self.process > 0
    }

    /// This process' workers alone (for work that follows what the others contributed).
    pub fn local(&self) -> Self {
        Self { workers: self.workers, ..Self::default() }
    }

    fn config(&self) -> Result<timely::Config> {
        let mut args = vec!["corrflow".to_string(), "-w".into(), self.workers.max(1).to_string()];
        if self.processes > 1 {
            args.extend(["-n".into(), self.processes.to_string(), "-p".into(), self.process.to_string()]);
            if let Some(h) = &self.hostfile {
                args.extend(["-h".into(), h.display().to_string()]);
            }
        }
        timely::Config::from_args(args.into_iter().skip(1))
            .map_err(|e| Error::internal("graph dataflow", format!("configuration: {e}")))
    }
}

/// Where the sum of a [`gather`] round ends up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    /// Worker 0 (of process 0).
    First,
    /// Every worker of every process.
    Everyone,
}

/// One round of a dataflow on a running worker: every worker contributes its partial, the
/// partials are exchanged and summed with `add` on worker 0 or on every worker (`Some` there,
/// `None` elsewhere). A worker whose own share failed still takes part (so the others finish),
/// and then every receiver gets the error.
pub fn gather<T, A>(worker: &mut timely::worker::Worker, mine: Result<T>, add: &A, to: To) -> Result<Option<T>>
where
    T: timely::ExchangeData + Clone,
    A: Fn(&mut T, &T),
{
    // (destination, partial, error): every worker hears of every failure, whatever `to` is,
    // so no worker waits in a later round for one that has given up.
    type Message<T> = (u64, Option<T>, Option<String>);
    // Holds a process here (`FAILPOINTS=graph-gather=sleep(MS)`) so a test can kill it mid-run.
    fail::fail_point!("graph-gather");
    let peers = worker.peers() as u64;
    let mut input = InputHandle::new();
    let received: Rc<RefCell<Vec<Message<T>>>> = Rc::new(RefCell::new(Vec::new()));
    let sink = received.clone();
    let probe = worker.dataflow::<u64, _, _>(|scope| {
        let (probe, stream) = scope.input_from(&mut input).container::<Vec<Message<T>>>().exchange(|m| m.0).probe();
        // Partials are moved out of the channel, not cloned (they can be hundreds of MB).
        stream.sink(Pipeline, "Gather", move |(input, _)| {
            input.for_each(|_, data| sink.borrow_mut().append(data));
        });
        probe
    });
    let own_error = match mine {
        Ok(t) => {
            let targets = if to == To::Everyone { peers } else { 1 };
            (1..targets).for_each(|w| input.send((w, Some(t.clone()), None)));
            input.send((0, Some(t), None));
            None
        }
        Err(e) => {
            (0..peers).for_each(|w| input.send((w, None, Some(e.to_string()))));
            Some(e)
        }
    };
    input.advance_to(1);
    while probe.less_than(input.time()) {
        worker.step();
    }
    if let Some(e) = own_error {
        return Err(e);
    }
    let mut total: Option<T> = None;
    for (_, part, error) in received.borrow_mut().drain(..) {
        if let Some(e) = error {
            return Err(Error::Remote(e));
        }
        match (total.as_mut(), part) {
            (_, None) => {}
            (None, Some(p)) => total = Some(p),
            (Some(t), Some(p)) => add(t, &p),
        }
    }
    Ok(total)
}

/// Runs `work` on every worker of the cluster's dataflow and returns process 0's first
/// worker's result (`None` on the other processes). Of several errors, a worker's own is
/// preferred to the copies the others received.
pub fn run_workers<R, F>(cluster: &Cluster, work: F) -> Result<Option<R>>
where
    R: Send + 'static,
    F: Fn(&mut timely::worker::Worker) -> Result<Option<R>> + Send + Sync + 'static,
{
    let config = cluster.config()?;
    super::peer_loss::guarded(cluster.process, cluster.processes, move || collect(timely::execute(config, work)))
}

/// The workers' results: process 0's first worker's, or the first error.
fn collect<R>(
    guards: std::result::Result<timely::communication::WorkerGuards<Result<Option<R>>>, String>,
) -> Result<Option<R>>
where
    R: Send + 'static,
{
    let guards = guards.map_err(|e| Error::internal("graph dataflow", format!("starting: {e}")))?;
    let (mut result, mut remote) = (None, None);
    for r in guards.join() {
        match r.map_err(|e| Error::internal("graph dataflow", format!("worker failed: {e}")))? {
            Ok(Some(p)) => result = Some(p),
            Ok(None) => {}
            Err(e @ Error::Remote(_)) => remote = remote.or(Some(e)),
            Err(e) => return Err(e),
        }
    }
    match remote {
        Some(e) => Err(e),
        None => Ok(result),
    }
}

/// Runs `compute` on every worker over its share of `units` work items (item `i` goes to
/// worker `i mod peers`); the partials are summed with `add` on worker 0. `Some` on process 0.
fn run_partials<T, F, A>(cluster: &Cluster, units: usize, compute: F, add: A) -> Result<Option<T>>
where
    T: timely::ExchangeData + Clone,
    F: Fn(&[usize]) -> Result<T> + Send + Sync + 'static,
    A: Fn(&mut T, &T) + Send + Sync + 'static,
{
    run_workers(cluster, move |worker| {
        let mine = share(worker, units);
        gather(worker, compute(&mine), &add, To::First)
    })
}

/// The work items of this worker: item `i` goes to worker `i mod peers`.
pub fn share(worker: &timely::worker::Worker, units: usize) -> Vec<usize> {
    let (index, peers) = (worker.index(), worker.peers());
    (0..units).filter(|s| s % peers == index).collect()
}

/// Histograms and pair sums of the graph's genes under given maps, and every gene's presence,
/// over some cells: what each worker sends and what their sum is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AtlasStatistics {
    pub hist: ScoreHistograms,
    pub sums: PairSums,
    pub presence: Vec<i64>,
}

impl AtlasStatistics {
    pub fn add(&mut self, other: &Self) {
        self.hist.merge(&other.hist, 1);
        self.sums.merge(&other.sums, 1);
        add_presence(&mut self.presence, &other.presence);
    }
}

/// Sums presence counts.
pub fn add_presence(total: &mut [i64], part: &[i64]) {
    total.iter_mut().zip(part).for_each(|(a, b)| *a += b);
}

/// The shards of some atlases, as the work items of a dataflow: what each worker reads.
#[derive(Clone, Debug)]
pub struct ShardSet {
    pub vocab: Vocabulary,
    pub units: Vec<(PathBuf, usize)>,
    /// Cells before each unit (in unit order): unit `i`'s cells are numbered from `first[i]`.
    first: Vec<u64>,
    /// Threads each worker's matrix products may use.
    pub gemm_threads: usize,
}

impl ShardSet {
    /// Every shard of the atlases; the products of each of `workers` workers use their share
    /// of the machine's threads.
    pub fn of_atlases<'a>(dirs: impl IntoIterator<Item = &'a Path>, vocab: Vocabulary, workers: usize) -> Result<Self> {
        let (mut units, mut first, mut cells) = (Vec::new(), Vec::new(), 0u64);
        for dir in dirs {
            for (k, shard) in corrflow_io::corpus::AtlasManifest::load(dir)?.shards.iter().enumerate() {
                units.push((dir.to_path_buf(), k));
                first.push(cells);
                cells += shard.cells;
            }
        }
        first.push(cells);
        let gemm_threads = (rayon::current_num_threads() / workers.max(1)).max(1);
        Ok(Self { vocab, units, first, gemm_threads })
    }

    /// Cells in all shards (as their manifests say).
    pub fn cells(&self) -> u64 {
        self.first.last().copied().unwrap_or(0)
    }

    /// Calls `f` with the cells of each of this worker's shards in turn, in blocks of
    /// [`SHARD_BLOCK_CELLS`] (one block in memory at a time), and their scores over `genes`.
    pub fn each(
        &self,
        mine: &[usize],
        genes: &GraphVocab,
        l_max: usize,
        mut f: impl FnMut(&CorpusCells, &[ScoredCell]),
    ) -> Result<()> {
        self.each_unit(mine, genes, l_max, |_, _, cells, scored| f(cells, scored))
    }

    /// [`ShardSet::each`], also passing the unit's index and the block's first row in the unit.
    fn each_unit(
        &self,
        mine: &[usize],
        genes: &GraphVocab,
        l_max: usize,
        mut f: impl FnMut(usize, usize, &CorpusCells, &[ScoredCell]),
    ) -> Result<()> {
        let mut scored: Vec<ScoredCell> = Vec::new();
        for &i in mine {
            let (dir, k) = &self.units[i];
            let mut row = 0usize;
            // Checks the rows read against the shard's manifest count, which `first` holds.
            for_each_shard_block(dir, *k, &self.vocab, l_max, SHARD_BLOCK_CELLS, |cells| {
                scored.resize_with(cells.len(), ScoredCell::default);
                for (j, c) in scored.iter_mut().enumerate() {
                    genes.score(cells.cell(j), l_max, c);
                }
                f(i, row, cells, &scored);
                row += cells.len();
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Per gene of `wanted` (indices into `genes`, ascending), its (cell, score) postings in
    /// this worker's shards; cells are numbered across the whole set.
    pub fn postings(
        &self,
        mine: &[usize],
        genes: &GraphVocab,
        l_max: usize,
        wanted: &[usize],
    ) -> Result<Vec<Vec<(u32, u16)>>> {
        let mut slot = vec![usize::MAX; genes.len()];
        wanted.iter().enumerate().for_each(|(i, &u)| slot[u] = i);
        let mut out = vec![Vec::new(); wanted.len()];
        self.each_unit(mine, genes, l_max, |unit, first_row, _, scored| {
            for (row, c) in scored.iter().enumerate() {
                let cell = (self.first[unit] + (first_row + row) as u64) as u32;
                for (&u, &s) in c.genes.iter().zip(&c.scores) {
                    if let Some(list) = out.get_mut(slot[u as usize]) {
                        list.push((cell, s));
                    }
                }
            }
        })?;
        Ok(out)
    }

    /// The postings of this worker's shards, a block of cells at a time: `f(block)` once the
    /// block holds `cap` postings or more (checked after each cell, so at most `cap + l_max`),
    /// and for the rest. Gene `u`'s score `s` is stored as `stored[u · l_max + s]`, and
    /// skipped where that is `u16::MAX` (genes not wanted). Cells are numbered within the block.
    pub fn posting_blocks(
        &self,
        mine: &[usize],
        genes: &GraphVocab,
        l_max: usize,
        stored: &[u16],
        cap: usize,
        mut f: impl FnMut(&PostingBlock),
    ) -> Result<()> {
        let mut block = PostingBlock::with_capacity(genes.len(), cap + l_max);
        let mut flush = |block: &mut PostingBlock| {
            block.group();
            f(block);
            block.clear();
        };
        self.each(mine, genes, l_max, |_, scored| {
            for c in scored {
                for (&u, &s) in c.genes.iter().zip(&c.scores) {
                    let kept = stored[u as usize * l_max + usize::from(s)];
                    if kept != u16::MAX {
                        block.push(u, kept);
                    }
                }
                block.end_cell();
                if block.len() >= cap {
                    flush(&mut block);
                }
            }
        })?;
        if block.cells() > 0 {
            flush(&mut block);
        }
        Ok(())
    }

    /// Cells each gene (token id) is present in.
    pub fn presence(&self, mine: &[usize], l_max: usize) -> Result<Vec<i64>> {
        let mut presence = vec![0i64; self.vocab.len()];
        let none = GraphVocab::from_tokens(Vec::new(), 0);
        self.each(mine, &none, l_max, |c, _| {
            presence.iter_mut().zip(gene_presence(c, &self.vocab, l_max)).for_each(|(a, b)| *a += b as i64);
        })?;
        Ok(presence)
    }

    /// Score histograms of `genes`.
    pub fn histograms(&self, mine: &[usize], genes: &GraphVocab, l_max: usize) -> Result<ScoreHistograms> {
        let mut hist = ScoreHistograms::new(genes.len(), l_max);
        self.each(mine, genes, l_max, |_, scored| scored.iter().for_each(|c| hist.add_cell(c, 1)))?;
        Ok(hist)
    }

    /// Histograms and pair sums of `genes` under `maps`, and every gene's presence.
    pub fn statistics(&self, mine: &[usize], genes: &GraphVocab, maps: &RankMaps) -> Result<AtlasStatistics> {
        let (l, g) = (maps.l_max, genes.len());
        let mut hist = ScoreHistograms::new(g, l);
        let mut sums = PairSums::new(g);
        let mut presence = vec![0i64; self.vocab.len()];
        let mut work = BatchWork::default();
        self.each(mine, genes, l, |cells, scored| {
            scored.iter().for_each(|c| hist.add_cell(c, 1));
            sums.add_cells_in(&mut work, scored, maps, 1, self.gemm_threads);
            presence.iter_mut().zip(gene_presence(cells, &self.vocab, l)).for_each(|(a, b)| *a += b as i64);
        })?;
        Ok(AtlasStatistics { hist, sums, presence })
    }
}

/// Sums histograms.
pub fn add_histograms(total: &mut ScoreHistograms, part: &ScoreHistograms) {
    total.merge(part, 1);
}

/// Statistics of the shard set's cells under `maps` (see [`ShardSet::statistics`]), summed over
/// all workers: `Some` on process 0.
pub fn cluster_statistics(
    cluster: &Cluster,
    set: Arc<ShardSet>,
    genes: GraphVocab,
    maps: RankMaps,
) -> Result<Option<AtlasStatistics>> {
    let units = set.units.len();
    run_partials(cluster, units, move |mine| set.statistics(mine, &genes, &maps), AtlasStatistics::add)
}

/// Score histograms of `genes` over every cell of the shard set.
pub fn shard_histograms(
    cluster: &Cluster,
    set: Arc<ShardSet>,
    genes: GraphVocab,
    l_max: usize,
) -> Result<Option<ScoreHistograms>> {
    let units = set.units.len();
    run_partials(cluster, units, move |mine| set.histograms(mine, &genes, l_max), add_histograms)
}

/// Pair sums of the genes `rows` (indices into `genes`) against every gene of `genes`, under
/// `maps`, over every cell of the shard set.
pub fn shard_row_sums(
    cluster: &Cluster,
    set: Arc<ShardSet>,
    genes: GraphVocab,
    maps: RankMaps,
    rows: Vec<usize>,
) -> Result<Option<GeneRowSums>> {
    let units = set.units.len();
    let compute = move |mine: &[usize]| -> Result<GeneRowSums> {
        let mut sums = GeneRowSums::new(rows.clone(), genes.len());
        let mut work = BatchWork::default();
        set.each(mine, &genes, maps.l_max, |_, scored| sums.add_cells_in(&mut work, scored, &maps, set.gemm_threads))?;
        Ok(sums)
    };
    run_partials(cluster, units, compute, |t: &mut GeneRowSums, p: &GeneRowSums| t.merge(p))
}
