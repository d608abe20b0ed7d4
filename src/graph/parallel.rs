//! Timely dataflow for the incremental statistics: every worker (threads, or processes of a
//! cluster on loopback or a network) reads a disjoint subset of an atlas' shards, pre-aggregates
//! the exact integer statistics of its cells, and the partials are exchanged to worker 0 and
//! summed. Integer sums make the result identical for any number of workers or processes.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use corrflow_operators::graph::{GraphVocab, PairSums, RankMaps, ScoreHistograms, ScoredCell};
use serde::{Deserialize, Serialize};
use timely::dataflow::operators::{Exchange, Input, Inspect, Probe};
use timely::dataflow::InputHandle;

use super::build::{gene_presence, load_shard_cells};
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

/// Statistics of the atlas' cells summed over all workers: `Some` on process 0's first worker.
pub fn cluster_statistics(cluster: &Cluster, job: StatsJob) -> Result<Option<AtlasStatistics>> {
    let job = Arc::new(job);
    let guards = timely::execute(cluster.config()?, move |worker| -> Result<Option<Partial>> {
        let (index, peers) = (worker.index(), worker.peers());
        let mut input = InputHandle::new();
        let total: Rc<RefCell<Option<Partial>>> = Rc::new(RefCell::new(None));
        let sink = total.clone();
        let probe = worker.dataflow::<u64, _, _>(|scope| {
            scope
                .input_from(&mut input)
                .container::<Vec<Partial>>()
                .exchange(|_| 0)
                .inspect(move |p: &Partial| {
                    let mut t = sink.borrow_mut();
                    match t.as_mut() {
                        None => *t = Some(p.clone()),
                        Some(t) => add(t, p),
                    }
                })
                .probe()
                .0
        });
        let mine: Vec<usize> = (0..job.shards).filter(|s| s % peers == index).collect();
        let partial = partial_of(&job, &mine)?;
        input.send(partial);
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
        let r = r.map_err(|e| Error::Usage(format!("dataflow worker failed: {e}")))??;
        if let Some(p) = r {
            result = Some(p);
        }
    }
    Ok(result.map(|p| {
        let (g, l) = (p.co.len().isqrt(), p.hist.len() / p.co.len().isqrt().max(1));
        AtlasStatistics {
            hist: ScoreHistograms { l_max: l, n_genes: g, n_cells: p.n_cells, counts: p.hist },
            sums: PairSums { n_genes: g, n_cells: p.n_cells, yy: p.yy, co: p.co, yp: p.yp, y2p: p.y2p },
            presence: p.presence,
        }
    }))
}

fn partial_of(job: &StatsJob, shards: &[usize]) -> Result<Partial> {
    let l = job.maps.l_max;
    let g = job.genes.len();
    let cells = load_shard_cells(&job.atlas_dir, shards, &job.vocab, l)?;
    let mut hist = ScoreHistograms::new(g, l);
    let mut scored = Vec::with_capacity(cells.len());
    for i in 0..cells.len() {
        let mut c = ScoredCell::default();
        job.genes.score(cells.cell(i), l, &mut c);
        hist.add_cell(&c, 1);
        scored.push(c);
    }
    let mut sums = PairSums::new(g);
    sums.add_cells(&scored, &job.maps, 1, job.gemm_threads);
    let presence = gene_presence(&cells, &job.vocab, l).into_iter().map(|p| p as i64).collect();
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

fn add(t: &mut Partial, p: &Partial) {
    t.n_cells += p.n_cells;
    t.hist.iter_mut().zip(&p.hist).for_each(|(a, b)| *a += b);
    t.presence.iter_mut().zip(&p.presence).for_each(|(a, b)| *a += b);
    t.co.iter_mut().zip(&p.co).for_each(|(a, b)| *a += b);
    for (a, b) in [(&mut t.yy, &p.yy), (&mut t.yp, &p.yp), (&mut t.y2p, &p.y2p)] {
        a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
    }
}
