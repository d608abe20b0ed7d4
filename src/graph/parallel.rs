//! Timely dataflow for the incremental statistics: every worker (threads, or processes of a
//! cluster on loopback or a network) reads a disjoint subset of an atlas' shards, pre-aggregates
//! the exact integer statistics of its cells, and the partials are exchanged to worker 0 and
//! summed. Integer sums make the result identical for any number of workers or processes.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use corrflow_operators::graph::{GeneRowSums, GraphVocab, PairSums, RankMaps, ScoreHistograms, ScoredCell};
use serde::{Deserialize, Serialize};
use timely::dataflow::operators::{Exchange, Input, Inspect, Probe};
use timely::dataflow::InputHandle;

use super::build::{gene_presence, load_shard_cells, CorpusCells};
use crate::error::{Error, Result};
use crate::vocab::Vocabulary;

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

    fn config(&self) -> Result<timely::Config> {
        let mut args = vec!["corrflow".to_string(), "-w".into(), self.workers.max(1).to_string()];
        if self.processes > 1 {
            args.extend(["-n".into(), self.processes.to_string(), "-p".into(), self.process.to_string()]);
            if let Some(h) = &self.hostfile {
                args.extend(["-h".into(), h.display().to_string()]);
            }
        }
        timely::Config::from_args(args.into_iter().skip(1))
            .map_err(|e| Error::Usage(format!("dataflow configuration: {e}")))
    }
}

/// The partial statistics one worker sends.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Partial {
    n_cells: i64,
    hist: Vec<i64>,
    yy: Vec<i128>,
    co: Vec<i64>,
    yp: Vec<i128>,
    y2p: Vec<i128>,
    /// Cells each gene (token id) is present in, over all genes of the vocabulary.
    presence: Vec<i64>,
}

/// An atlas' statistics under the state's maps, and the presence of every gene in it.
pub struct AtlasStatistics {
    pub hist: ScoreHistograms,
    pub sums: PairSums,
    pub presence: Vec<i64>,
}

/// What each worker needs: the vocabulary, the graph's genes and frozen maps, and the shards.
pub struct StatsJob {
    pub vocab: Vocabulary,
    pub genes: GraphVocab,
    pub maps: RankMaps,
    pub atlas_dir: PathBuf,
    pub shards: usize,
    /// Threads each worker's matrix products may use.
    pub gemm_threads: usize,
}

/// Runs `compute` on every worker over its share of `units` work items (item `i` goes to
/// worker `i mod peers`); the partials are exchanged to worker 0 and summed with `add`. `Some`
/// on process 0's first worker, `None` elsewhere.
fn run_partials<T, F, A>(cluster: &Cluster, units: usize, compute: F, add: A) -> Result<Option<T>>
where
    T: timely::ExchangeData + Clone,
    F: Fn(&[usize]) -> Result<T> + Send + Sync + 'static,
    A: Fn(&mut T, &T) + Send + Sync + 'static,
{
    let (compute, add) = (Arc::new(compute), Arc::new(add));
    let guards = timely::execute(cluster.config()?, move |worker| -> Result<Option<T>> {
        let (index, peers) = (worker.index(), worker.peers());
        let mut input = InputHandle::new();
        let total: Rc<RefCell<Option<T>>> = Rc::new(RefCell::new(None));
        let (sink, add) = (total.clone(), add.clone());
        let probe = worker.dataflow::<u64, _, _>(|scope| {
            scope
                .input_from(&mut input)
                .container::<Vec<T>>()
                .exchange(|_| 0)
                .inspect(move |p: &T| {
                    let mut t = sink.borrow_mut();
                    match t.as_mut() {
                        None => *t = Some(p.clone()),
                        Some(t) => add(t, p),
                    }
                })
                .probe()
                .0
        });
        let mine: Vec<usize> = (0..units).filter(|s| s % peers == index).collect();
        input.send(compute(&mine)?);
        input.advance_to(1);
        while probe.less_than(input.time()) {
            worker.step();
        }
        let out = total.borrow_mut().take();
        Ok(out)
    })
    .map_err(|e| Error::Usage(format!("starting the dataflow: {e}")))?;
    let mut result = None;
    for r in guards.join() {
        if let Some(p) = r.map_err(|e| Error::Usage(format!("dataflow worker failed: {e}")))?? {
            result = Some(p);
        }
    }
    Ok(result)
}

/// Statistics of the atlas' cells summed over all workers: `Some` on process 0's first worker.
pub fn cluster_statistics(cluster: &Cluster, job: StatsJob) -> Result<Option<AtlasStatistics>> {
    let shards = job.shards;
    let result = run_partials(cluster, shards, move |mine| partial_of(&job, mine), add)?;
    Ok(result.map(|p| {
        let (g, l) = (p.co.len().isqrt(), p.hist.len() / p.co.len().isqrt().max(1));
        AtlasStatistics {
            hist: ScoreHistograms { l_max: l, n_genes: g, n_cells: p.n_cells, counts: p.hist },
            sums: PairSums { n_genes: g, n_cells: p.n_cells, yy: p.yy, co: p.co, yp: p.yp, y2p: p.y2p },
            presence: p.presence,
        }
    }))
}

/// Scores the cells of each shard in turn (one shard in memory at a time).
fn for_each_shard(
    atlas_dir: &std::path::Path,
    shards: &[usize],
    vocab: &Vocabulary,
    genes: &GraphVocab,
    l_max: usize,
    mut f: impl FnMut(&CorpusCells, &[ScoredCell]),
) -> Result<()> {
    for &k in shards {
        let cells = load_shard_cells(atlas_dir, &[k], vocab, l_max)?;
        let scored: Vec<ScoredCell> = (0..cells.len())
            .map(|i| {
                let mut c = ScoredCell::default();
                genes.score(cells.cell(i), l_max, &mut c);
                c
            })
            .collect();
        f(&cells, &scored);
    }
    Ok(())
}

fn partial_of(job: &StatsJob, shards: &[usize]) -> Result<Partial> {
    let (l, g) = (job.maps.l_max, job.genes.len());
    let mut hist = ScoreHistograms::new(g, l);
    let mut sums = PairSums::new(g);
    let mut presence = vec![0i64; job.vocab.len()];
    for_each_shard(&job.atlas_dir, shards, &job.vocab, &job.genes, l, |cells, scored| {
        scored.iter().for_each(|c| hist.add_cell(c, 1));
        sums.add_cells(scored, &job.maps, 1, job.gemm_threads);
        let counts = gene_presence(cells, &job.vocab, l);
        presence.iter_mut().zip(counts).for_each(|(a, b)| *a += b as i64);
    })?;
    Ok(Partial {
        n_cells: hist.n_cells,
        hist: hist.counts,
        yy: sums.yy,
        co: sums.co,
        yp: sums.yp,
        y2p: sums.y2p,
        presence,
    })
}

/// The shards of several atlases, as work items for [`run_partials`].
#[derive(Clone, Debug)]
pub struct ShardSet {
    pub vocab: Vocabulary,
    pub units: Vec<(PathBuf, usize)>,
    pub gemm_threads: usize,
}

impl ShardSet {
    /// Every shard of the atlases.
    pub fn of_atlases<'a>(
        dirs: impl IntoIterator<Item = &'a std::path::Path>,
        vocab: Vocabulary,
        gemm_threads: usize,
    ) -> Result<Self> {
        let mut units = Vec::new();
        for dir in dirs {
            let shards = crate::corpus::AtlasManifest::load(dir)?.shards.len();
            units.extend((0..shards).map(|k| (dir.to_path_buf(), k)));
        }
        Ok(Self { vocab, units, gemm_threads })
    }

    fn each(&self, mine: &[usize], genes: &GraphVocab, l_max: usize, mut f: impl FnMut(&[ScoredCell])) -> Result<()> {
        for &i in mine {
            let (dir, k) = &self.units[i];
            for_each_shard(dir, &[*k], &self.vocab, genes, l_max, |_, scored| f(scored))?;
        }
        Ok(())
    }
}

/// Score histograms of `genes` over every cell of the shard set.
pub fn shard_histograms(
    cluster: &Cluster,
    set: Arc<ShardSet>,
    genes: GraphVocab,
    l_max: usize,
) -> Result<Option<ScoreHistograms>> {
    let units = set.units.len();
    let compute = move |mine: &[usize]| -> Result<(i64, Vec<i64>)> {
        let mut hist = ScoreHistograms::new(genes.len(), l_max);
        set.each(mine, &genes, l_max, |scored| scored.iter().for_each(|c| hist.add_cell(c, 1)))?;
        Ok((hist.n_cells, hist.counts))
    };
    let sum = |t: &mut (i64, Vec<i64>), p: &(i64, Vec<i64>)| {
        t.0 += p.0;
        t.1.iter_mut().zip(&p.1).for_each(|(a, b)| *a += b);
    };
    Ok(run_partials(cluster, units, compute, sum)?.map(|(n_cells, counts)| ScoreHistograms {
        l_max,
        n_genes: counts.len() / l_max.max(1),
        n_cells,
        counts,
    }))
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
        set.each(mine, &genes, maps.l_max, |scored| sums.add_cells(scored, &maps, set.gemm_threads))?;
        Ok(sums)
    };
    run_partials(cluster, units, compute, |t: &mut GeneRowSums, p: &GeneRowSums| t.merge(p))
}

fn add(t: &mut Partial, p: &Partial) {
    t.n_cells += p.n_cells;
    t.hist.iter_mut().zip(&p.hist).for_each(|(a, b)| *a += b);
    t.presence.iter_mut().zip(&p.presence).for_each(|(a, b)| *a += b);
    t.co.iter_mut().zip(&p.co).for_each(|(a, b)| *a += b);
    for (a, b) in [(&mut t.yy, &p.yy), (&mut t.yp, &p.yp), (&mut t.y2p, &p.y2p)] {
        a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
    }
}
