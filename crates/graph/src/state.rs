//! Incremental graph state (the rank-map design of docs/DESIGN.md §5.2): score histograms, the rank
//! maps frozen at the last rebase, and exact pair sums under those maps, for the atlases
//! included. Adding or retracting an atlas adds or subtracts its cells' statistics exactly; the
//! graph is then derived from the sums. A rebase recomputes maps and statistics from the stored
//! shards (= an exact build). `GRAPH/state/` holds `state.json` and `stats.bin.zst`, and a copy
//! of the graph files as of the last rebase (`rebase/`).

use std::path::{Path, PathBuf};

use std::borrow::Cow;
use std::sync::Arc;

use corrflow_algorithms::graph::{GraphParams, GraphVocab, PairSums, RankMaps, ScoreHistograms};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::changes::Candidate;
use super::gene_stats::GeneStats;
use super::parallel::{shard_histograms, shard_row_sums, Cluster, ShardSet};
use corrflow_fs::atomic::write_json_atomic;
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::graph_files::{read_graph, Coverage, Graph};
use corrflow_io::vocab::Vocabulary;

const STATE_DIR: &str = "state";
const STATE_JSON: &str = "state.json";
const STATS_BIN: &str = "stats.bin.zst";
const REBASE_DIR: &str = "rebase";

/// One atlas included in the state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncludedAtlas {
    pub name: String,
    pub dir: PathBuf,
    pub cells: u64,
}

/// `state.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateInfo {
    pub format_version: u32,
    pub params: GraphParams,
    pub vocab_hash: String,
    /// Graph vocabulary (token ids, ascending).
    pub genes: Vec<u32>,
    pub atlases: Vec<IncludedAtlas>,
    /// Atlases and sums hash at the last rebase: when the state returns to exactly these sums,
    /// the rebase's exact graph is the graph.
    pub rebase_atlases: Vec<String>,
    pub rebase_sums_hash: String,
    pub rebase_cells: i64,
    /// The genes at the last rebase (`None` in states written before genes could enter: then
    /// `genes`). Genes that entered since are dropped again when they leave the vocabulary.
    #[serde(default)]
    pub rebase_genes: Option<Vec<u32>>,
    /// Drift of the current statistics from the rank maps and vocabulary (set by whoever
    /// changes the statistics: a build, rebase or update).
    #[serde(default)]
    pub drift: Drift,
}

/// The whole incremental state.
pub struct GraphState {
    pub info: StateInfo,
    /// Statistics of the state's genes: the graph vocabulary, plus genes of the last rebase's
    /// vocabulary that have left it (kept so that retracting what pushed them out is exact).
    pub stats: GeneStats,
    /// The candidate records of the current sums (input of the next update's dataflow).
    pub candidates: Vec<Candidate>,
    /// Cells each gene of the corpus vocabulary is present in (token id → count), for every gene
    /// and not only the graph's: what the graph vocabulary would be now. `None` in states
    /// written before it was kept.
    pub presence: Option<Vec<i64>>,
}

const CANDIDATES_BIN: &str = "candidates.bin";
const PRESENCE_BIN: &str = "presence.bin";

/// How far the current data have moved from the state's frozen parts: per gene, the
/// Kolmogorov–Smirnov distance between the current and the rebase CDF of its scores; and the
/// genes that the graph vocabulary rule would pick now but the state has no statistics for
/// (they enter the graph only at a rebase).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    pub mean_ks: f64,
    pub max_ks: f64,
    #[serde(default)]
    pub vocab_missing: Option<usize>,
    /// Genes that entered the graph vocabulary in this update, with statistics computed from the
    /// stored shards (`graph.extend_vocab`).
    #[serde(default)]
    pub vocab_entered: usize,
}

impl Drift {
    /// The share of the graph vocabulary that a rebase would replace (0 when unknown).
    pub fn vocab_share(&self, genes: usize) -> f64 {
        self.vocab_missing.map_or(0.0, |m| m as f64 / genes.max(1) as f64)
    }

    /// Whether the rank maps moved further than `graph.rebase_drift` allows (0 turns it off).
    pub fn ks_over(&self, params: &GraphParams) -> bool {
        params.rebase_drift > 0.0 && self.max_ks > params.rebase_drift
    }
}

impl GraphState {
    /// State of an exact build over all cells of its atlases (`(name, directory)`): the maps
    /// made from those cells, the sums under them (`rho`: their correlations), and every gene's
    /// presence.
    pub fn new(
        stats: GeneStats,
        rho: &[f64],
        presence: Vec<i64>,
        atlases: &[(String, PathBuf)],
        params: &GraphParams,
        vocab_hash: &str,
    ) -> Self {
        let atlases = atlases
            .iter()
            .map(|(name, dir)| IncludedAtlas {
                name: name.clone(),
                dir: absolute(dir),
                cells: corrflow_io::corpus::AtlasManifest::load(dir).map(|m| m.cells).unwrap_or(0),
            })
            .collect::<Vec<_>>();
        let genes = stats.vocab.tokens().to_vec();
        let info = StateInfo {
            format_version: 1,
            params: params.clone(),
            vocab_hash: vocab_hash.to_string(),
            genes: genes.clone(),
            rebase_atlases: atlases.iter().map(|a| a.name.clone()).collect(),
            atlases,
            rebase_sums_hash: sums_hash(&stats.sums),
            rebase_cells: stats.hist.n_cells,
            rebase_genes: Some(genes),
            drift: Drift::default(),
        };
        let candidates = stats.candidates(rho, params);
        let mut state = Self { info, stats, candidates, presence: Some(presence) };
        state.info.drift = state.drift();
        state
    }

    /// Adds (`sign` 1) or subtracts (−1) an atlas' statistics.
    pub fn merge(&mut self, graph_dir: &Path, stats: &super::parallel::AtlasStatistics, sign: i64) -> Result<()> {
        if let Some(p) = &self.presence {
            if p.len() != stats.presence.len() {
                return Err(Error::format(
                    graph_dir.join(STATE_DIR).join(PRESENCE_BIN),
                    format!("counts {} genes, the corpus vocabulary has {}", p.len(), stats.presence.len()),
                ));
            }
        }
        self.stats.hist.merge(&stats.hist, sign);
        self.stats.sums.merge(&stats.sums, sign);
        if let Some(p) = self.presence.as_mut() {
            p.iter_mut().zip(&stats.presence).for_each(|(a, b)| *a += sign * b);
        }
        Ok(())
    }

    /// What the vocabulary rule picks from the current presence counts among the genes
    /// `allowed` accepts (`None` in states written before presence counts were kept).
    fn vocabulary_rule(&self, allowed: impl Fn(u32) -> bool) -> Option<GraphVocab> {
        let p = &self.info.params;
        let counts: Vec<u64> = self.presence.as_ref()?.iter().map(|&c| c.max(0) as u64).collect();
        Some(GraphVocab::select(&counts, p.min_presence, p.max_genes, allowed))
    }

    /// The graph's genes: the vocabulary rule among the genes the state has statistics for.
    fn graph_genes(&self) -> Vec<u32> {
        let has = |t: u32| self.stats.vocab.index(t).is_some();
        self.vocabulary_rule(has).map_or_else(|| self.stats.vocab.tokens().to_vec(), |v| v.tokens().to_vec())
    }

    /// The statistics of the graph's genes (a copy only when the state keeps others).
    pub fn graph_stats(&self) -> Cow<'_, GeneStats> {
        let genes = self.graph_genes();
        if genes == self.stats.vocab.tokens() {
            Cow::Borrowed(&self.stats)
        } else {
            Cow::Owned(self.stats.remap(genes))
        }
    }

    /// Brings the state's genes to the vocabulary rule (`graph.extend_vocab`). When more than
    /// `graph.rebase_vocab` of the vocabulary would be genes the state lacks, those genes get
    /// histograms, rank maps (from every included cell) and pair sums, computed from the stored
    /// shards of the included atlases by a dataflow over their shards (a smaller shortfall is
    /// tolerated, like a small rank-map drift). Genes that entered after the last rebase and
    /// have left the graph again are dropped. Returns the number of genes that entered.
    pub fn follow_vocabulary(&mut self, vocab: &Vocabulary, cluster: &Cluster) -> Result<usize> {
        let Some(now) = self.vocabulary_rule(|_| true).filter(|_| self.info.params.extend_vocab) else {
            return Ok(0);
        };
        let rebase = self.info.rebase_genes.get_or_insert_with(|| self.info.genes.clone()).clone();
        let has = |t: u32| self.stats.vocab.index(t).is_some();
        let missing: Vec<u32> = now.tokens().iter().copied().filter(|&t| !has(t)).collect();
        let share = missing.len() as f64 / self.info.genes.len().max(1) as f64;
        let entering = if share > self.info.params.rebase_vocab { missing } else { Vec::new() };
        let graph =
            self.vocabulary_rule(|t| has(t) || entering.binary_search(&t).is_ok()).expect("presence counts are kept"); // ok: invariant (checked above)
        let mut genes: Vec<u32> = self
            .stats
            .vocab
            .tokens()
            .iter()
            .copied()
            .filter(|&t| graph.index(t).is_some() || rebase.binary_search(&t).is_ok())
            .chain(entering.iter().copied())
            .collect();
        genes.sort_unstable();
        if genes == self.stats.vocab.tokens() {
            return Ok(0);
        }
        let l = self.info.params.l_max;
        super::build::check_memory_for(genes.len(), l, true)?;
        let mut grown = self.stats.remap(genes);
        if !entering.is_empty() {
            tracing::info!(genes = entering.len(), "genes entered the vocabulary: computing their statistics");
            let dirs = self.info.atlases.iter().map(|a| a.dir.as_path());
            let set = Arc::new(ShardSet::of_atlases(dirs, vocab.clone(), cluster.workers)?);
            // Process 0's own workers: the other processes of a cluster have returned already.
            let local = cluster.local();
            let new_genes = GraphVocab::from_tokens(entering.clone(), vocab.len());
            let hist = shard_histograms(&local, set.clone(), new_genes, l)?.expect("worker 0 sums"); // ok: invariant
            if hist.n_cells != grown.hist.n_cells {
                return Err(Error::format(
                    &self.info.atlases[0].dir,
                    format!(
                        "the included atlases now hold {} cells, the graph counted {}; rebase the graph",
                        hist.n_cells, grown.hist.n_cells
                    ),
                ));
            }
            let maps = RankMaps::from_histograms(&hist);
            let rows: Vec<usize> = entering.iter().map(|&t| grown.vocab.index(t).expect("entered")).collect(); // ok: invariant
            for (i, &u) in rows.iter().enumerate() {
                let span = |x: usize| x * l..(x + 1) * l;
                grown.hist.counts[span(u)].copy_from_slice(&hist.counts[span(i)]);
                grown.maps.t2[span(u)].copy_from_slice(&maps.t2[span(i)]);
            }
            let sums =
                shard_row_sums(&local, set, grown.vocab.clone(), grown.maps.clone(), rows)?.expect("worker 0 sums"); // ok: invariant
            grown.sums.insert_rows(&sums);
        }
        self.info.genes = grown.vocab.tokens().to_vec();
        self.stats = grown;
        Ok(entering.len())
    }

    pub fn drift(&self) -> Drift {
        let ks = self.stats.ks_distances();
        let mean_ks = ks.iter().sum::<f64>() / ks.len().max(1) as f64;
        let vocab_missing = self
            .vocabulary_rule(|_| true)
            .map(|now| now.tokens().iter().filter(|&&t| self.stats.vocab.index(t).is_none()).count());
        Drift { mean_ks, max_ks: ks.iter().copied().fold(0.0, f64::max), vocab_missing, vocab_entered: 0 }
    }

    /// Whether the sums are exactly those of the last rebase (the same atlases and genes, added
    /// and retracted back).
    pub fn at_rebase_point(&self) -> bool {
        let names: Vec<&str> = self.info.atlases.iter().map(|a| a.name.as_str()).collect();
        names == self.info.rebase_atlases.iter().map(String::as_str).collect::<Vec<_>>()
            && self.info.rebase_genes.as_ref().is_none_or(|g| *g == self.info.genes)
            && sums_hash(&self.stats.sums) == self.info.rebase_sums_hash
    }

    /// The graph the state implies, from the statistics of the graph's genes (`rho` = their
    /// correlations): the rebase's exact graph when the state is back at its rebase point;
    /// otherwise ρ_global from the exact sums under the frozen maps, selection as in Algorithm
    /// 1, and ρ_local estimated on the co-present cells under the maps.
    pub fn derive_graph(&self, graph_dir: &Path, vocab: &Vocabulary, stats: &GeneStats, rho: &[f64]) -> Result<Graph> {
        if self.at_rebase_point() {
            return read_graph(&graph_dir.join(STATE_DIR).join(REBASE_DIR));
        }
        let p = &self.info.params;
        let coverage = Coverage {
            mode: "rank-maps",
            params: p,
            cells: stats.hist.n_cells as u64,
            corpus_cells: self.info.atlases.iter().map(|a| a.cells).sum(),
            atlases: self.info.atlases.iter().map(|a| a.name.clone()).collect(),
        };
        Ok(Graph::assemble(coverage, vocab, &stats.vocab, &stats.hist, stats.edges(rho, p)))
    }

    /// Reads only `state.json` (cheap: no statistics).
    pub fn load_info(graph_dir: &Path) -> Option<StateInfo> {
        let text = std::fs::read_to_string(graph_dir.join(STATE_DIR).join(STATE_JSON)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes `state.json` and the statistics (atomically, statistics first).
    pub fn save(&self, graph_dir: &Path) -> Result<()> {
        let dir = graph_dir.join(STATE_DIR);
        std::fs::create_dir_all(&dir).at(&dir)?;
        let bin = dir.join(STATS_BIN);
        let tmp = corrflow_fs::atomic::temp_path(&bin);
        let (hist, maps, sums) = (&self.stats.hist, &self.stats.maps, &self.stats.sums);
        let cells = [hist.n_cells, maps.n_cells, sums.n_cells];
        let longs: [&[i64]; 4] = [&cells, &hist.counts, &maps.t2, &sums.co];
        super::stats_file::write(&tmp, &longs, &[&sums.yy, &sums.yp, &sums.y2p])?;
        corrflow_fs::atomic::commit(&tmp, &bin)?;
        let mut raw = Vec::with_capacity(self.candidates.len() * 24);
        for &(u, ((key, v), co)) in &self.candidates {
            raw.extend_from_slice(&u.to_le_bytes());
            raw.extend_from_slice(&key.to_le_bytes());
            raw.extend_from_slice(&v.to_le_bytes());
            raw.extend_from_slice(&co.to_le_bytes());
        }
        corrflow_fs::atomic::write_atomic(&dir.join(CANDIDATES_BIN), &raw)?;
        if let Some(presence) = &self.presence {
            let raw: Vec<u8> = presence.iter().flat_map(|c| c.to_le_bytes()).collect();
            corrflow_fs::atomic::write_atomic(&dir.join(PRESENCE_BIN), &raw)?;
        }
        Ok(write_json_atomic(&dir.join(STATE_JSON), &self.info)?)
    }

    pub fn load(graph_dir: &Path) -> Result<Self> {
        let dir = graph_dir.join(STATE_DIR);
        let json = dir.join(STATE_JSON);
        let text = std::fs::read_to_string(&json).map_err(|_| {
            Error::format(graph_dir, "has no incremental state (build it with `graph build --incremental`)")
        })?;
        let info: StateInfo =
            serde_json::from_str(&text).map_err(|e| Error::format(&json, format!("invalid state: {e}")))?;
        let (g, l) = (info.genes.len(), info.params.l_max);
        let bin = dir.join(STATS_BIN);
        let (longs, wides) = super::stats_file::read(&bin, &[3, g * l, g * l, g * g], &[g * g; 3])?;
        let [cells, counts, t2, co]: [Vec<i64>; 4] = longs.try_into().expect("four arrays"); // ok: invariant
        let [yy, yp, y2p]: [Vec<i128>; 3] = wides.try_into().expect("three arrays"); // ok: invariant
        let (hn, mn, sn) = (cells[0], cells[1], cells[2]);
        let vocab = GraphVocab::from_tokens(info.genes.clone(), info.genes.last().map_or(0, |&t| t as usize + 1));
        let cpath = dir.join(CANDIDATES_BIN);
        let raw = std::fs::read(&cpath).at(&cpath)?;
        if raw.len() % 24 != 0 {
            return Err(Error::format(&cpath, "candidate records are truncated"));
        }
        let word = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes")); // ok: invariant
        let wide = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes")); // ok: invariant
        let candidates = raw
            .chunks_exact(24)
            .map(|r| (word(&r[0..4]), ((wide(&r[4..12]), word(&r[12..16])), wide(&r[16..24]) as i64)))
            .collect();
        let ppath = dir.join(PRESENCE_BIN);
        let presence = match std::fs::read(&ppath) {
            Ok(raw) if raw.len() % 8 == 0 && raw.len() / 8 > info.genes.last().map_or(0, |&t| t as usize) => Some(
                raw.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(), // ok: invariant
            ),
            Ok(_) => return Err(Error::format(&ppath, "gene presence counts are truncated")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).at(&ppath),
        };
        let stats = GeneStats {
            vocab,
            hist: ScoreHistograms { l_max: l, n_genes: g, n_cells: hn, counts },
            maps: RankMaps { l_max: l, n_genes: g, n_cells: mn, t2 },
            sums: PairSums { n_genes: g, n_cells: sn, yy, co, yp, y2p },
        };
        Ok(Self { candidates, presence, stats, info })
    }

    /// Keeps a copy of the graph files as of this rebase.
    pub fn save_rebase_graph(graph_dir: &Path) -> Result<()> {
        let dir = graph_dir.join(STATE_DIR).join(REBASE_DIR);
        std::fs::create_dir_all(&dir).at(&dir)?;
        for f in [corrflow_io::graph_files::EDGES, corrflow_io::graph_files::GENES, corrflow_io::graph_files::INFO] {
            std::fs::copy(graph_dir.join(f), dir.join(f)).at(dir.join(f))?;
        }
        Ok(())
    }
}

/// The atlas directory as an absolute path, so later updates and rebases find its shards from
/// any working directory.
pub fn absolute(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

fn sums_hash(s: &PairSums) -> String {
    let mut h = Sha256::new();
    h.update(s.n_cells.to_le_bytes());
    for x in s.yy.iter().chain(&s.yp).chain(&s.y2p) {
        h.update(x.to_le_bytes());
    }
    for x in &s.co {
        h.update(x.to_le_bytes());
    }
    hex::encode(h.finalize())
}
