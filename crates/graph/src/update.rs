//! `graph build --incremental`, `graph update --add/--retract`, `graph rebase`: the graph as
//! atlases arrive and leave, each change written as a delta file.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use corrflow_algorithms::graph::{GraphEdge, GraphParams};
use parquet::arrow::ArrowWriter;
use serde::{Deserialize, Serialize};

use super::changes::edge_changes;
use super::parallel::{cluster_statistics, AtlasStatistics, Cluster, ShardSet};
use super::state::{Drift, GraphState, IncludedAtlas};
use super::stream::build_streaming;
use corrflow_fs::lock::DirLock;
use corrflow_io::corpus::{corpus_of_atlas, Corpus};
use corrflow_io::error::{Error, IoContext, Result};
use corrflow_io::graph_files::{read_graph, write_graph_with, Graph};
use corrflow_io::vocab::Vocabulary;

const DELTAS: &str = "deltas";

/// What `graph update` / `graph rebase` print.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UpdateSummary {
    pub command: String,
    pub graph: String,
    pub change: String,
    pub cells: u64,
    pub edges: usize,
    pub added: usize,
    pub removed: usize,
    pub reweighted: usize,
    pub delta: Option<String>,
    pub drift: Drift,
    pub rebase_recommended: bool,
    pub rebased: bool,
    pub seconds: f64,
}

/// How an edge differs between two graphs (the `change` column of a delta file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeChange {
    Added,
    Removed,
    /// In both graphs, with another ρ_local.
    Reweighted,
}

impl EdgeChange {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Removed => "removed",
            Self::Reweighted => "reweighted",
        }
    }
}

/// Edge changes between two graphs.
#[derive(Debug, Default)]
pub struct GraphDelta {
    /// (u, v, change, old ρ_local, new ρ_local)
    pub rows: Vec<(u32, u32, EdgeChange, Option<f64>, Option<f64>)>,
}

impl GraphDelta {
    /// The delta from edge changes computed by the dataflow (`added`, `removed`), plus the
    /// reweighted edges present in both graphs. Pairs whose ρ_local is NaN on one side are not
    /// edges there (Algorithm 1 drops them); they show up as residual differences and are
    /// classified the same way.
    pub fn from_changes(old: &[GraphEdge], new: &[GraphEdge], added: &[(u32, u32)], removed: &[(u32, u32)]) -> Self {
        let before: HashMap<(u32, u32), f64> = old.iter().map(|e| ((e.u, e.v), e.rho)).collect();
        let after: HashMap<(u32, u32), f64> = new.iter().map(|e| ((e.u, e.v), e.rho)).collect();
        let mut rows = Vec::new();
        let mut listed = std::collections::HashSet::new();
        for e in added.iter().filter(|e| after.contains_key(e) && !before.contains_key(e)) {
            rows.push((e.0, e.1, EdgeChange::Added, None, after.get(e).copied()));
            listed.insert(*e);
        }
        for e in removed.iter().filter(|e| before.contains_key(e) && !after.contains_key(e)) {
            rows.push((e.0, e.1, EdgeChange::Removed, before.get(e).copied(), None));
            listed.insert(*e);
        }
        for e in new {
            let k = (e.u, e.v);
            match before.get(&k) {
                Some(&r) if r.to_bits() != e.rho.to_bits() => {
                    rows.push((e.u, e.v, EdgeChange::Reweighted, Some(r), Some(e.rho)))
                }
                None if !listed.contains(&k) => rows.push((e.u, e.v, EdgeChange::Added, None, Some(e.rho))),
                _ => {}
            }
        }
        for e in old {
            let k = (e.u, e.v);
            if !after.contains_key(&k) && !listed.contains(&k) {
                rows.push((e.u, e.v, EdgeChange::Removed, Some(e.rho), None));
            }
        }
        rows.sort_by_key(|a| (a.0, a.1));
        Self { rows }
    }

    /// The delta between two graphs by comparing their edges (rebase).
    pub fn between(old: &[GraphEdge], new: &[GraphEdge]) -> Self {
        Self::from_changes(old, new, &[], &[])
    }

    pub fn count(&self, kind: EdgeChange) -> usize {
        self.rows.iter().filter(|r| r.2 == kind).count()
    }

    fn write(&self, path: &Path) -> Result<()> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("u", DataType::UInt32, false),
            Field::new("v", DataType::UInt32, false),
            Field::new("change", DataType::Utf8, false),
            Field::new("rho_old", DataType::Float64, true),
            Field::new("rho_new", DataType::Float64, true),
        ]));
        let r = &self.rows;
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from_iter_values(r.iter().map(|x| x.0))),
            Arc::new(UInt32Array::from_iter_values(r.iter().map(|x| x.1))),
            Arc::new(StringArray::from_iter_values(r.iter().map(|x| x.2.as_str()))),
            Arc::new(Float64Array::from(r.iter().map(|x| x.3).collect::<Vec<_>>())),
            Arc::new(Float64Array::from(r.iter().map(|x| x.4).collect::<Vec<_>>())),
        ];
        let rb = RecordBatch::try_new(schema, cols).map_err(|e| Error::parquet(path, e))?;
        let mut w = ArrowWriter::try_new(File::create(path).at(path)?, rb.schema(), None)
            .map_err(|e| Error::parquet(path, e))?;
        w.write(&rb).map_err(|e| Error::parquet(path, e))?;
        w.into_inner().map_err(|e| Error::parquet(path, e))?.sync_all().at(path)
    }
}

/// Exact build over all cells plus the incremental state (streamed by the dataflow: see
/// [`build_streaming`]); the graph is the exact graph. `None` on a cluster's helper processes.
pub fn build_incremental(
    corpus: &Path,
    atlases: &[String],
    params: &GraphParams,
    out: &Path,
    cluster: &Cluster,
) -> Result<Option<(Graph, super::BuildSummary)>> {
    let _lock = (!cluster.is_helper()).then(|| DirLock::beside(out, "graph build --incremental")).transpose()?;
    let Some((mut graph, summary, state)) = build_streaming(corpus, atlases, params, cluster)? else {
        return Ok(None);
    };
    write_graph_with(out, &mut graph, |stage| {
        state.save(stage)?;
        GraphState::save_rebase_graph(stage)
    })?;
    Ok(Some((graph, summary)))
}

enum Change<'a> {
    Add(&'a Path),
    Retract(&'a str),
    Rebase,
}

impl Change<'_> {
    /// The command making the change, as a lock holder is described.
    fn describe(&self) -> String {
        match self {
            Change::Add(dir) => format!("graph update --add {}", dir.display()),
            Change::Retract(name) => format!("graph update --retract {name}"),
            Change::Rebase => "graph rebase".to_string(),
        }
    }
}

/// Adds an atlas directory (`CORPUS/atlases/NAME`) to the graph.
pub fn update_add(graph_dir: &Path, atlas_dir: &Path, cluster: &Cluster) -> Result<UpdateSummary> {
    apply(graph_dir, Change::Add(atlas_dir), cluster)
}

/// Retracts an included atlas by name.
pub fn update_retract(graph_dir: &Path, name: &str, cluster: &Cluster) -> Result<UpdateSummary> {
    apply(graph_dir, Change::Retract(name), cluster)
}

/// Recomputes maps and statistics from the stored shards of the included atlases.
pub fn rebase(graph_dir: &Path, cluster: &Cluster) -> Result<UpdateSummary> {
    apply(graph_dir, Change::Rebase, cluster)
}

/// The statistics of an atlas' cells under the state's maps, computed by the dataflow's
/// workers; `None` on helper processes of a cluster (process 0 applies them).
fn atlas_statistics(
    state: &GraphState,
    dir: &Path,
    vocab: &Vocabulary,
    cluster: &Cluster,
) -> Result<Option<AtlasStatistics>> {
    let set = Arc::new(ShardSet::of_atlases([dir], vocab.clone(), cluster.workers)?);
    cluster_statistics(cluster, set, state.stats.vocab.clone(), state.stats.maps.clone())
}

fn helper_summary(graph_dir: &Path, change: &str) -> UpdateSummary {
    UpdateSummary {
        command: "graph update".into(),
        graph: graph_dir.display().to_string(),
        change: format!("{change} (statistics contributed to process 0)"),
        cells: 0,
        edges: 0,
        added: 0,
        removed: 0,
        reweighted: 0,
        delta: None,
        drift: Drift::default(),
        rebase_recommended: false,
        rebased: false,
        seconds: 0.0,
    }
}

/// The change merged into the state: its name in summaries and delta files, and the corpus
/// vocabulary it was scored with (none for a rebase).
struct Merged {
    label: String,
    vocab: Option<Vocabulary>,
}

/// How the new graph is obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpdateMode {
    /// From the merged statistics (exact for additions and retractions under the maps).
    Derive,
    /// Maps and statistics recomputed from the stored shards: on the whole cluster for an
    /// explicit rebase, on this process' workers for one an update triggers.
    Rebase { whole_cluster: bool },
}

fn apply(graph_dir: &Path, change: Change<'_>, cluster: &Cluster) -> Result<UpdateSummary> {
    let started = std::time::Instant::now();
    // One writer at a time: the state is read, changed and published as a whole. Helper
    // processes of a cluster only contribute statistics; process 0 holds the lock.
    let _lock = (!cluster.is_helper()).then(|| DirLock::beside(graph_dir, &change.describe())).transpose()?;
    let lap = |what: &str| tracing::debug!(seconds = started.elapsed().as_secs_f64(), "graph update: {what}");
    let mut state = GraphState::load(graph_dir)?;
    let old = read_graph(graph_dir)?;
    lap("state loaded");
    let before = std::mem::take(&mut state.candidates);
    let explicit_rebase = matches!(change, Change::Rebase);
    let merged = match merge_change(graph_dir, &mut state, change, cluster)? {
        Ok(merged) => merged,
        Err(helper) => return Ok(helper),
    };
    let rebase_recommended = assess_drift(&mut state, merged.vocab.as_ref(), explicit_rebase, cluster)?;
    lap("statistics merged");
    let rebase = explicit_rebase || (rebase_recommended && state.info.params.auto_rebase);
    let mode = if rebase { UpdateMode::Rebase { whole_cluster: explicit_rebase } } else { UpdateMode::Derive };
    let Some((mut graph, state, changes)) = recompute(graph_dir, state, mode, before, merged.vocab, cluster)? else {
        return Ok(helper_summary(graph_dir, "rebase"));
    };
    lap("graph derived");
    let delta = match &changes {
        Some((added, removed)) => GraphDelta::from_changes(&old.edges, &graph.edges, added, removed),
        None => GraphDelta::between(&old.edges, &graph.edges),
    };
    let seq = std::fs::read_dir(graph_dir.join(DELTAS)).map(|d| d.count()).unwrap_or(0) + 1;
    let delta_name = format!("{seq:04}-{}.parquet", merged.label);
    publish_update(graph_dir, &mut graph, &state, &delta, &delta_name, mode != UpdateMode::Derive, &lap)?;
    lap("written");
    Ok(UpdateSummary {
        command: if explicit_rebase { "graph rebase".into() } else { "graph update".into() },
        graph: graph_dir.display().to_string(),
        change: merged.label,
        cells: graph.info.cells,
        edges: graph.edges.len(),
        added: delta.count(EdgeChange::Added),
        removed: delta.count(EdgeChange::Removed),
        reweighted: delta.count(EdgeChange::Reweighted),
        delta: Some(delta_name),
        drift: state.info.drift.clone(),
        rebase_recommended,
        rebased: mode != UpdateMode::Derive,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Adds or subtracts an atlas' statistics (nothing for a rebase). `Err` holds the summary of a
/// cluster's helper process, which only contributed its statistics.
fn merge_change(
    graph_dir: &Path,
    state: &mut GraphState,
    change: Change<'_>,
    cluster: &Cluster,
) -> Result<std::result::Result<Merged, UpdateSummary>> {
    Ok(Ok(match change {
        Change::Add(dir) => {
            let manifest = corrflow_io::corpus::AtlasManifest::load(dir)?;
            if state.info.atlases.iter().any(|a| a.name == manifest.atlas) {
                return Err(Error::conflict(dir, format!("atlas '{}' is already in this graph", manifest.atlas)));
            }
            let vocab = Corpus::open(&corpus_of_atlas(dir)?)?.vocab;
            if vocab.hash() != state.info.vocab_hash {
                return Err(Error::conflict(dir, "atlas uses another vocabulary than this graph"));
            }
            let label = format!("add-{}", manifest.atlas);
            let Some(stats) = atlas_statistics(state, dir, &vocab, cluster)? else {
                return Ok(Err(helper_summary(graph_dir, &label)));
            };
            let cells = stats.hist.n_cells as u64;
            state.merge(graph_dir, &stats, 1)?;
            let dir = super::state::absolute(dir);
            state.info.atlases.push(IncludedAtlas { name: manifest.atlas.clone(), dir, cells });
            state.info.atlases.sort_by(|a, b| a.name.cmp(&b.name));
            Merged { label, vocab: Some(vocab) }
        }
        Change::Retract(name) => {
            let Some(pos) = state.info.atlases.iter().position(|a| a.name == name) else {
                return Err(Error::conflict(graph_dir, format!("atlas '{name}' is not in this graph")));
            };
            if state.info.atlases.len() == 1 {
                return Err(Error::conflict(
                    graph_dir,
                    format!("'{name}' is the graph's only atlas; nothing would remain"),
                ));
            }
            let atlas = state.info.atlases[pos].clone();
            let vocab = Corpus::open(&corpus_of_atlas(&atlas.dir)?)?.vocab;
            let label = format!("retract-{name}");
            let Some(stats) = atlas_statistics(state, &atlas.dir, &vocab, cluster)? else {
                return Ok(Err(helper_summary(graph_dir, &label)));
            };
            state.merge(graph_dir, &stats, -1)?;
            state.info.atlases.remove(pos);
            Merged { label, vocab: Some(vocab) }
        }
        Change::Rebase => Merged { label: "rebase".to_string(), vocab: None },
    }))
}

/// Follows the vocabulary (genes entering it), records the drift, and says whether a rebase is
/// recommended (logged; `graph.auto_rebase` then rebases).
fn assess_drift(
    state: &mut GraphState,
    vocab_of_change: Option<&Vocabulary>,
    explicit_rebase: bool,
    cluster: &Cluster,
) -> Result<bool> {
    // Genes entering the vocabulary are not worth their pass over the shards when the rank-map
    // drift alone makes this update rebase.
    let p = &state.info.params;
    let rebasing = p.auto_rebase && state.drift().ks_over(p);
    let entered = match vocab_of_change {
        Some(vocab) if !rebasing => state.follow_vocabulary(vocab, cluster)?,
        _ => 0,
    };
    let drift = Drift { vocab_entered: entered, ..state.drift() };
    state.info.drift = drift.clone();
    let p = &state.info.params;
    let vocab_share = drift.vocab_share(state.info.genes.len());
    let recommended = !explicit_rebase && (drift.ks_over(p) || (p.rebase_vocab > 0.0 && vocab_share > p.rebase_vocab));
    if recommended {
        let what = "drift above graph.rebase_drift or graph.rebase_vocab";
        if p.auto_rebase {
            tracing::warn!(max_ks = drift.max_ks, vocab_share, "{what}: rebasing (graph.auto_rebase)");
        } else {
            tracing::warn!(max_ks = drift.max_ks, vocab_share, "{what}: run `corrflow graph rebase`");
        }
    }
    Ok(recommended)
}

/// Edge changes the dataflow computed: (added, removed).
type EdgeChanges = (Vec<(u32, u32)>, Vec<(u32, u32)>);

/// The new graph and state: derived from the merged statistics (with the dataflow's edge
/// changes from the candidates `before`), or rebuilt from the shards. `None` on a helper
/// process of a cluster rebase.
fn recompute(
    graph_dir: &Path,
    mut state: GraphState,
    mode: UpdateMode,
    before: Vec<super::changes::Candidate>,
    vocab_of_change: Option<Vocabulary>,
    cluster: &Cluster,
) -> Result<Option<(Graph, GraphState, Option<EdgeChanges>)>> {
    match mode {
        UpdateMode::Rebase { whole_cluster } => {
            let corpus = corpus_of_atlas(&state.info.atlases[0].dir)?;
            let names: Vec<String> = state.info.atlases.iter().map(|a| a.name.clone()).collect();
            let on = if whole_cluster { cluster.clone() } else { cluster.local() };
            let Some((graph, _, fresh)) = build_streaming(&corpus, &names, &state.info.params, &on)? else {
                return Ok(None);
            };
            Ok(Some((graph, fresh, None)))
        }
        UpdateMode::Derive => {
            let vocab = match vocab_of_change {
                Some(v) => v,
                None => Corpus::open(&corpus_of_atlas(&state.info.atlases[0].dir)?)?.vocab,
            };
            let params = state.info.params.clone();
            let stats = state.graph_stats();
            let rho = stats.correlations();
            let after = stats.candidates(&rho, &params);
            let graph = state.derive_graph(graph_dir, &vocab, &stats, &rho)?;
            drop(stats);
            let changes = edge_changes(before, after.clone(), params.n_neigh, params.m_min as i64);
            state.candidates = after;
            Ok(Some((graph, state, Some(changes))))
        }
    }
}

/// Publishes the graph, its state, the rank maps' reference graph (new after a rebase, kept
/// otherwise) and the deltas so far plus this one, in one atomic directory swap.
fn publish_update(
    graph_dir: &Path,
    graph: &mut Graph,
    state: &GraphState,
    delta: &GraphDelta,
    delta_name: &str,
    rebased: bool,
    lap: &dyn Fn(&str),
) -> Result<()> {
    let old_rebase = graph_dir.join("state").join("rebase");
    write_graph_with(graph_dir, graph, |stage| {
        lap("graph files written");
        state.save(stage)?;
        lap("state saved");
        if rebased {
            GraphState::save_rebase_graph(stage)?;
        } else {
            let dst = stage.join("state").join("rebase");
            std::fs::create_dir_all(&dst).at(&dst)?;
            for f in std::fs::read_dir(&old_rebase).at(&old_rebase)?.flatten() {
                std::fs::copy(f.path(), dst.join(f.file_name())).at(f.path())?;
            }
        }
        let deltas = stage.join(DELTAS);
        std::fs::create_dir_all(&deltas).at(&deltas)?;
        if let Ok(entries) = std::fs::read_dir(graph_dir.join(DELTAS)) {
            for f in entries.flatten() {
                std::fs::copy(f.path(), deltas.join(f.file_name())).at(f.path())?;
            }
        }
        delta.write(&deltas.join(delta_name))?;
        lap("deltas written");
        Ok(())
    })
}
