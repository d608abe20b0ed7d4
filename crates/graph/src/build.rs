//! Exact build: Algorithm 1 over (a seeded sample of) the corpus' cells.

use std::path::Path;
use std::time::Instant;

use corrflow_algorithms::graph::{
    approx_correlations, co_presence, count_presence, screened_candidate_pairs, spearman_average_ranks, GeneMoments,
    GraphEdge, GraphParams, GraphVocab, OverlapScratch, RankMaps, ScoreHistograms, ScoredCell,
};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::overlap::{postings, Overlaps};
use corrflow_io::corpus::{load_corpus_cells, Corpus, CorpusCells};
use corrflow_io::error::{Error, Result};
use corrflow_io::graph_files::{Coverage, Graph};
use corrflow_io::vocab::Vocabulary;

/// What `graph build --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BuildSummary {
    pub command: String,
    pub out: String,
    pub cells: u64,
    pub genes: usize,
    pub edges: usize,
    pub candidates: usize,
    pub seconds: f64,
    /// Reading the corpus, presence counts, graph vocabulary, scores.
    pub seconds_load: f64,
    /// Histograms, rank maps, co-presence, screening products, candidate selection.
    pub seconds_statistics: f64,
    /// Of which the single-precision screening products.
    pub seconds_screening: f64,
    /// Achieved rate of the screening products (upper-triangle flops).
    pub screening_gflops: f64,
    /// Exact ρ_global and ρ_local of the candidate pairs.
    pub seconds_local: f64,
    /// How a streamed build gathered ρ_local: "postings" (every needed posting in one pass) or
    /// "histograms" (per-pair score histograms, two passes per round); "in memory" otherwise.
    #[serde(default)]
    pub local_method: String,
    /// Rounds of that gathering (1 for postings, 0 in memory).
    #[serde(default)]
    pub local_rounds: usize,
    pub peak_rss_mb: Option<f64>,
}

/// Cells each gene is present in (among the first `l_max` tokens), indexed by token id; special
/// tokens count 0, so they never enter a graph vocabulary.
pub fn gene_presence(cells: &CorpusCells, vocab: &Vocabulary, l_max: usize) -> Vec<u64> {
    let mut presence = vec![0u64; vocab.len()];
    for i in 0..cells.len() {
        count_presence(cells.cell(i), l_max, &mut presence);
    }
    for (t, p) in presence.iter_mut().enumerate() {
        if !vocab.is_gene(t as u32) {
            *p = 0;
        }
    }
    presence
}

/// Algorithm 1, exactly: Spearman with average ranks over the sampled cells for ρ_global,
/// Spearman on the co-present cells for ρ_local.
pub fn build_exact(corpus_dir: &Path, atlases: &[String], params: &GraphParams) -> Result<(Graph, BuildSummary)> {
    let started = Instant::now();
    params.validate().map_err(Error::Usage)?;
    let corpus = Corpus::open(corpus_dir)?;
    let (_, dirs) = corpus.resolve_atlases(atlases)?;
    let vocab = corpus.vocab;
    check_memory(params, false)?;
    let cells = load_corpus_cells(&dirs, &vocab, params.l_max, params.n_sub, params.seed)?;

    let presence = gene_presence(&cells, &vocab, params.l_max);
    let gv = GraphVocab::select(&presence, params.min_presence, params.max_genes, |_| true); // specials count 0
    let g = gv.len();
    let scored: Vec<ScoredCell> = (0..cells.len())
        .into_par_iter()
        .map(|i| {
            let mut c = ScoredCell::default();
            gv.score(cells.cell(i), params.l_max, &mut c);
            c
        })
        .collect();
    drop(cells.tokens);

    // ρ_global for every pair is screened with single-precision products and settled exactly
    // (integer sums over co-present cells) wherever the screening could change a decision;
    // every reported ρ_global is exact.
    let seconds_load = started.elapsed().as_secs_f64();
    let t_stats = Instant::now();
    let threads = rayon::current_num_threads();
    let mut hist = ScoreHistograms::new(g, params.l_max);
    scored.iter().for_each(|c| hist.add_cell(c, 1));
    let maps = RankMaps::from_histograms(&hist);
    let moments = GeneMoments::new(&hist, &maps);
    let co = co_presence(&scored, g);
    let t_screen = Instant::now();
    let (approx, bound) = approx_correlations(&scored, &maps, &moments, threads);
    let seconds_screening = t_screen.elapsed().as_secs_f64();
    let screening_flops = screening_flops(scored.len(), g);
    let postings = postings(&scored, g);
    let n_cells = scored.len();
    let overlaps = Overlaps::new(&postings[..], n_cells);
    let exact_rho = |u: usize, v: usize| moments.rho_exact(u, v, overlaps.with(u, v, |o| dot_y(o, &maps, u, v)));
    let pairs = screened_candidate_pairs(&approx, bound, &co, g, params, exact_rho);
    drop(approx);
    let seconds_statistics = t_stats.elapsed().as_secs_f64();

    let t_local = Instant::now();
    let edges =
        local_edges(&pairs, &overlaps, &PairStats { moments: &moments, maps: &maps, gv: &gv, co: &co }, params.l_max);
    let seconds_local = t_local.elapsed().as_secs_f64();

    let coverage = Coverage {
        mode: "exact",
        params,
        cells: cells.offsets.len() as u64 - 1,
        corpus_cells: cells.total_cells,
        atlases: cells.atlases.clone(),
    };
    let graph = Graph::assemble(coverage, &vocab, &gv, &hist, edges);
    let summary = BuildSummary {
        command: "graph build".into(),
        out: String::new(),
        cells: graph.info.cells,
        genes: g,
        edges: graph.edges.len(),
        candidates: pairs.len(),
        seconds: started.elapsed().as_secs_f64(),
        seconds_load,
        seconds_statistics,
        seconds_screening,
        screening_gflops: screening_flops / seconds_screening.max(1e-9) / 1e9,
        seconds_local,
        local_method: "in memory".into(),
        local_rounds: 0,
        peak_rss_mb: corrflow_io::util::peak_rss_bytes().map(|b| b as f64 / 1e6),
    };
    Ok((graph, summary))
}

/// What an edge reports besides its local ρ: the exact global moments, the rank maps, the
/// graph's genes and their co-presence counts.
struct PairStats<'a> {
    moments: &'a GeneMoments,
    maps: &'a RankMaps,
    gv: &'a GraphVocab,
    co: &'a [i64],
}

/// The local Spearman ρ of every candidate pair over its co-present cells, with its exact
/// global ρ; pairs whose ρ is undefined (a constant side) are no edges.
fn local_edges(pairs: &[(usize, usize)], overlaps: &Overlaps, stats: &PairStats, l_max: usize) -> Vec<GraphEdge> {
    let g = stats.gv.len();
    // Pairs come sorted by their first gene, so each thread's dense array is mostly reused.
    pairs
        .par_iter()
        .map_init(OverlapScratch::default, |scratch, &(u, v)| {
            overlaps.with(u, v, |overlap| {
                let r = spearman_average_ranks(overlap, l_max, scratch);
                (!r.is_nan()).then(|| GraphEdge {
                    u: stats.gv.token(u),
                    v: stats.gv.token(v),
                    rho: r,
                    rho_global: stats.moments.rho_exact(u, v, dot_y(overlap, stats.maps, u, v)),
                    co_count: stats.co[u * g + v] as u64,
                })
            })
        })
        .flatten()
        .collect()
}

/// Floating-point operations of the upper-triangle screening products (256-gene blocks).
fn screening_flops(cells: usize, g: usize) -> f64 {
    (0..g).step_by(256).map(|b0| ((b0 + 256).min(g) - b0) as f64 * (g - b0) as f64).sum::<f64>() * 2.0 * cells as f64
}

/// `Σ y_u(a)·y_v(b)` over score pairs, exactly: in i64 while the worst case fits (|y| ≤ 2N, so
/// up to ~1.3 M cells), in i128 beyond.
fn dot_y(overlap: &[(u16, u16)], maps: &RankMaps, u: usize, v: usize) -> i128 {
    let (yu, yv) = (&maps.t2[u * maps.l_max..(u + 1) * maps.l_max], &maps.t2[v * maps.l_max..(v + 1) * maps.l_max]);
    let (cu, cv) = (yu[0], yv[0]);
    let n = maps.n_cells.max(1) as i128;
    if overlap.len() as i128 * (2 * n) * (2 * n) < i128::from(i64::MAX) {
        overlap.iter().map(|&(a, b)| (yu[usize::from(a)] - cu) * (yv[usize::from(b)] - cv)).sum::<i64>().into()
    } else {
        overlap.iter().map(|&(a, b)| i128::from(yu[usize::from(a)] - cu) * i128::from(yv[usize::from(b)] - cv)).sum()
    }
}

/// The statistics hold a few G × G matrices; refuse clearly rather than run out of memory.
/// `incremental` adds the state's exact sums (three i128 and one i64 matrix).
pub fn check_memory(params: &GraphParams, incremental: bool) -> Result<()> {
    check_memory_for(params.max_genes, params.l_max, incremental)
}

/// [`check_memory`] for statistics of `genes` genes.
pub fn check_memory_for(genes: usize, l_max: usize, incremental: bool) -> Result<()> {
    let g = genes as u64;
    // Screened correlations (f64), co-presence (i64), a block of products, maps and histograms.
    let mut bytes = g * g * (8 + 8 + 8) + g * l_max as u64 * 16;
    if incremental {
        bytes += g * g * (3 * 16 + 8 + 8);
    }
    let available = corrflow_io::util::available_memory().unwrap_or(u64::MAX);
    if bytes > available / 2 {
        return Err(Error::Usage(format!(
            "the statistics of {genes} genes need about {:.1} GB, more than half of the {:.1} GB available; \
             lower graph.max_genes",
            bytes as f64 / 1e9,
            available as f64 / 1e9
        )));
    }
    Ok(())
}
