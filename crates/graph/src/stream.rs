//! `graph build --incremental` and `graph rebase`: the exact graph of every cell and the
//! incremental state, from the stored shards in one timely dataflow whose rounds each stream
//! the shards once, split among the workers: (1) every gene's presence → the graph vocabulary;
//! (2) score histograms → rank maps (Spearman's average ranks over all cells); (3) exact pair
//! sums under the maps → ρ_global and Algorithm 1's selection; (4) ρ_local exactly, as the
//! in-memory build computes it: from the (cell, score) postings of the selected pairs' genes in
//! one more pass when they all fit a memory budget, otherwise from per-pair score histograms in
//! rounds of pairs that fit it (two passes per round, [`super::local_hist`]).
//! Memory depends on the graph vocabulary, the candidate pairs and the budget (a worker holds a
//! block of cells, not a shard), not on the number of cells; so do the passes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use corrflow_algorithms::graph::{
    candidate_pairs, spearman_average_ranks, GraphEdge, GraphParams, GraphVocab, OverlapScratch, PairSums, RankMaps,
};
use rayon::prelude::*;

use super::build::{check_memory, BuildSummary};
use super::gene_stats::GeneStats;
use super::local_hist::{local_by_histograms, HistogramSizing, ScoreBins};
use super::overlap::Overlaps;
use super::parallel::{
    add_histograms, add_presence, gather, run_workers, share, AtlasStatistics, Cluster, ShardSet, To,
};
use super::state::GraphState;
use corrflow_io::corpus::{self, Corpus};
use corrflow_io::error::{Error, Result};
use corrflow_io::graph_files::{Coverage, Graph};

/// What process 0's first worker ends up with.
struct Built {
    stats: GeneStats,
    /// ρ_global of all pairs (from `stats`).
    rho: Vec<f64>,
    presence: Vec<i64>,
    edges: Vec<GraphEdge>,
    candidates: usize,
    seconds: [f64; 3],
    /// How ρ_local was gathered: "postings" (one pass) or "histograms", and in how many rounds.
    local: (&'static str, usize),
}

/// The exact graph over every cell of the atlases (all of the corpus' when empty) and its
/// incremental state; `None` on the helper processes of a cluster.
pub fn build_streaming(
    corpus_dir: &Path,
    atlases: &[String],
    params: &GraphParams,
    cluster: &Cluster,
) -> Result<Option<(Graph, BuildSummary, GraphState)>> {
    let started = Instant::now();
    let mut params = params.clone();
    params.n_sub = 0; // the state covers every cell, so atlases can be retracted exactly
    params.validate().map_err(Error::Usage)?;
    check_memory(&params, true)?;
    let corpus = Corpus::open(corpus_dir)?;
    let (names, dirs) = corpus.resolve_atlases(atlases)?;
    let vocab = corpus.vocab;
    let mut cells = 0u64;
    for dir in &dirs {
        let m = corpus::AtlasManifest::load(dir)?;
        m.verify(dir)?;
        cells += m.cells;
    }
    let set = Arc::new(ShardSet::of_atlases(dirs.iter().map(PathBuf::as_path), vocab.clone(), cluster.workers)?);
    // Doubled mid-ranks over a pair's co-present cells are u32 (up to 2n + 1).
    if set.cells() > u64::from(u32::MAX / 2) {
        return Err(Error::Usage(format!("{} cells: an incremental graph holds at most 2^31 cells", set.cells())));
    }
    let budget = local_budget(&params);
    let job_params = params.clone();
    let local_workers = cluster.workers.max(1);
    let Some(built) =
        run_workers(cluster, move |worker| build_worker(worker, &set, &job_params, budget, local_workers))?
    else {
        return Ok(None);
    };
    let Built { stats, rho, presence, edges, candidates, seconds, local } = built;
    let coverage = Coverage {
        mode: "exact",
        params: &params,
        cells: stats.hist.n_cells as u64,
        corpus_cells: cells,
        atlases: names.clone(),
    };
    let graph = Graph::assemble(coverage, &vocab, &stats.vocab, &stats.hist, edges);
    let summary = BuildSummary {
        command: "graph build".into(),
        out: String::new(),
        cells: graph.info.cells,
        genes: graph.info.genes,
        edges: graph.edges.len(),
        candidates,
        seconds: started.elapsed().as_secs_f64(),
        seconds_load: seconds[0],
        seconds_statistics: seconds[1],
        seconds_screening: 0.0,
        screening_gflops: 0.0,
        seconds_local: seconds[2],
        local_method: local.0.into(),
        local_rounds: local.1,
        peak_rss_mb: corrflow_io::util::peak_rss_bytes().map(|b| b as f64 / 1e6),
    };
    let included = names.into_iter().zip(dirs).collect::<Vec<_>>();
    let state = GraphState::new(stats, &rho, presence, &included, &params, vocab.hash());
    Ok(Some((graph, summary, state)))
}

/// Bytes ρ_local may hold: `graph.stream_memory_mb`, by default half of what the exact pair
/// sums of `graph.max_genes` genes hold (112 MB at 2,000), within 64 MB and an eighth of the
/// available memory. The sums stay in memory for the state, so the build's peak stays near
/// what it is when every posting fits, at any number of cells. An eighth of the memory (the
/// default before session 67, ~3 GB here) gave 3.5 GB at 944k cells and 1.9 GB at 3.8M against
/// 0.7 GB at 59k. Postings (6 bytes each) are gathered in one pass when every needed one fits
/// with the merge on worker 0 (12 bytes a posting); otherwise per-pair histograms fill it.
fn local_budget(params: &GraphParams) -> u64 {
    match params.stream_memory_mb {
        0 => {
            let eighth = (corrflow_io::util::available_memory().unwrap_or(8 << 30) / 8).clamp(64 << 20, 4 << 30);
            (PairSums::bytes(params.max_genes) / 2).clamp(64 << 20, eighth)
        }
        mb => mb << 20,
    }
}

/// Genes of the pairs (ascending), and their postings in all.
fn pair_genes(pairs: &[(usize, usize)], per_gene: &[u64]) -> (Vec<usize>, u64) {
    let mut needed = vec![false; per_gene.len()];
    pairs.iter().for_each(|&(u, v)| (needed[u], needed[v]) = (true, true));
    let genes: Vec<usize> = (0..needed.len()).filter(|&x| needed[x]).collect();
    let postings = genes.iter().map(|&x| per_gene[x]).sum();
    (genes, postings)
}

fn build_worker(
    worker: &mut timely::worker::Worker,
    set: &ShardSet,
    params: &GraphParams,
    budget: u64,
    local_workers: usize,
) -> Result<Option<Built>> {
    let l = params.l_max;
    let mine = share(worker, set.units.len());
    let t0 = Instant::now();
    // (1) Presence of every gene → the graph vocabulary (as an exact build picks it).
    // (`gather` sums owned vectors; `add_presence` takes slices.)
    let sum_presence = |t: &mut Vec<i64>, p: &Vec<i64>| add_presence(t, p);
    let presence = gather(worker, set.presence(&mine, l), &sum_presence, To::Everyone)?.expect("everyone"); // ok: invariant
    let counts: Vec<u64> = presence.iter().map(|&c| c.max(0) as u64).collect();
    let genes = GraphVocab::select(&counts, params.min_presence, params.max_genes, |_| true);
    let g = genes.len();
    // (2) Score histograms → rank maps.
    let hist = gather(worker, set.histograms(&mine, &genes, l), &add_histograms, To::Everyone)?.expect("everyone"); // ok: invariant
    let maps = RankMaps::from_histograms(&hist);
    let t1 = Instant::now();
    // (3) Exact pair sums under the maps (on worker 0), the selection there, its pairs to all.
    let total = gather(worker, set.statistics(&mine, &genes, &maps), &AtlasStatistics::add, To::First)?;
    // Worker 0 keeps the histograms and maps in the state (moved, not copied: 32 MB each at
    // 2,000 genes); the other workers keep their histograms for ρ_local's bins.
    let mut hist = Some(hist);
    let selected = total.map(|t| {
        let hist = hist.take().expect("taken once"); // ok: invariant
        let stats = GeneStats { vocab: genes.clone(), hist, maps, sums: t.sums };
        let rho = stats.correlations();
        let pairs = candidate_pairs(&rho, &stats.sums.co, g, params);
        (stats, rho, pairs)
    });
    let pairs_out: Vec<(usize, usize)> = selected.as_ref().map(|s| s.2.clone()).unwrap_or_default();
    let concat = |t: &mut Vec<(usize, usize)>, p: &Vec<(usize, usize)>| t.extend_from_slice(p);
    let pairs = gather(worker, Ok(pairs_out), &concat, To::Everyone)?.unwrap_or_default();
    let t2 = Instant::now();
    // (4) ρ_local: with every needed posting within the budget, one pass gathers the genes'
    // (cell, score) postings on worker 0, which computes Spearman on each pair's co-present
    // cells as the in-memory build does; otherwise the same sums from per-pair histograms.
    let per_gene: Vec<u64> = genes.tokens().iter().map(|&t| counts[t as usize]).collect();
    let (wanted, postings) = pair_genes(&pairs, &per_gene);
    let (local, local_run) = if postings <= budget / 12 {
        (local_by_postings(worker, set, &mine, &genes, l, &pairs, &wanted)?, ("postings", 1))
    } else {
        let sizing = HistogramSizing::new(budget, local_workers, worker.peers());
        let kept = selected.as_ref().map(|s| &s.0.hist);
        let bins = ScoreBins::new(kept.or(hist.as_ref()).expect("on worker 0 or here")); // ok: invariant
        let (rho, rounds) = local_by_histograms(worker, set, &mine, &genes, &bins, &pairs, sizing)?;
        (rho, ("histograms", rounds))
    };
    let local = local.unwrap_or_default();
    let Some((stats, rho, pairs)) = selected else { return Ok(None) };
    let edges = pairs
        .iter()
        .zip(local)
        .filter(|(_, r)| !r.is_nan())
        .map(|(&(u, v), r)| GraphEdge {
            u: stats.vocab.token(u),
            v: stats.vocab.token(v),
            rho: r,
            rho_global: rho[u * g + v],
            co_count: stats.sums.co[u * g + v] as u64,
        })
        .collect();
    let seconds = [(t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64(), t2.elapsed().as_secs_f64()];
    Ok(Some(Built { stats, rho, presence, edges, candidates: pairs.len(), seconds, local: local_run }))
}

/// ρ_local of every pair from the `wanted` genes' postings, gathered in one pass on worker 0
/// (`Some` there).
fn local_by_postings(
    worker: &mut timely::worker::Worker,
    set: &ShardSet,
    mine: &[usize],
    genes: &GraphVocab,
    l: usize,
    pairs: &[(usize, usize)],
    wanted: &[usize],
) -> Result<Option<Vec<f64>>> {
    let mine_postings = set.postings(mine, genes, l, wanted);
    let merge = |t: &mut Vec<Vec<(u32, u16)>>, p: &Vec<Vec<(u32, u16)>>| {
        t.iter_mut().zip(p).for_each(|(a, b)| a.extend_from_slice(b));
    };
    let Some(gathered) = gather(worker, mine_postings, &merge, To::First)? else { return Ok(None) };
    let mut postings = vec![Vec::new(); genes.len()];
    for (&u, mut p) in wanted.iter().zip(gathered) {
        p.sort_unstable_by_key(|x| x.0);
        postings[u] = p;
    }
    let overlaps = Overlaps::new(&postings[..], set.cells() as usize);
    Ok(Some(
        pairs
            .par_iter()
            .map_init(OverlapScratch::default, |scratch, &(u, v)| {
                overlaps.with(u, v, |overlap| spearman_average_ranks(overlap, l, scratch))
            })
            .collect(),
    ))
}
