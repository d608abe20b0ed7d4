//! Graph directory I/O: `edges.parquet`, `genes.parquet`, `graph.json`, published atomically.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use corrflow_algorithms::graph::{GraphEdge, GraphParams, GraphVocab, ScoreHistograms};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::util::parquet_out::write_parquet;
use crate::vocab::Vocabulary;
use corrflow_fs::atomic::write_json_atomic;

pub const EDGES: &str = "edges.parquet";
pub const GENES: &str = "genes.parquet";
pub const INFO: &str = "graph.json";

/// `graph.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphInfo {
    pub format_version: u32,
    /// `exact` (Algorithm 1 as defined) or `rank-maps` (incremental).
    pub mode: String,
    pub params: GraphParams,
    /// Cells the statistics cover (after sampling).
    pub cells: u64,
    /// Cells in the corpus' included atlases.
    pub corpus_cells: u64,
    pub atlases: Vec<String>,
    pub vocab_hash: String,
    pub genes: usize,
    pub edges: usize,
    /// sha256 of edges.parquet and genes.parquet.
    pub content_hash: String,
}

/// A dependency graph in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    pub info: GraphInfo,
    /// (token id, gene id, presence), ascending token id.
    pub genes: Vec<(u32, String, u64)>,
    /// Sorted by (u, v).
    pub edges: Vec<GraphEdge>,
}

/// What a graph covers, besides its genes and edges.
pub struct Coverage<'a> {
    /// `exact` or `rank-maps`.
    pub mode: &'a str,
    pub params: &'a GraphParams,
    /// Cells the statistics cover, and cells in the included atlases.
    pub cells: u64,
    pub corpus_cells: u64,
    pub atlases: Vec<String>,
}

impl Graph {
    /// A graph over the genes of `genes` (presence from `hist`, names from `vocab`).
    pub fn assemble(
        coverage: Coverage<'_>,
        vocab: &Vocabulary,
        genes: &GraphVocab,
        hist: &ScoreHistograms,
        edges: Vec<GraphEdge>,
    ) -> Self {
        let rows = (0..genes.len())
            .map(|i| {
                let t = genes.token(i);
                (t, vocab.token(t).unwrap_or("?").to_string(), hist.presence(i) as u64)
            })
            .collect();
        Self {
            info: GraphInfo {
                format_version: 1,
                mode: coverage.mode.into(),
                params: coverage.params.clone(),
                cells: coverage.cells,
                corpus_cells: coverage.corpus_cells,
                atlases: coverage.atlases,
                vocab_hash: vocab.hash().to_string(),
                genes: genes.len(),
                edges: edges.len(),
                content_hash: String::new(),
            },
            genes: rows,
            edges,
        }
    }
}

/// Writes `graph` to `dir` (replacing an existing graph directory only as a whole).
pub fn write_graph(dir: &Path, graph: &mut Graph) -> Result<()> {
    write_graph_with(dir, graph, |_| Ok(()))
}

/// Writes `graph` into a staging directory, lets `extra` add files to it (state, deltas), then
/// swaps it in place of `dir`.
pub fn write_graph_with(dir: &Path, graph: &mut Graph, extra: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    corrflow_fs::atomic::publish_dir(dir, |stage| write_graph_files(stage, graph, extra))
}

fn write_graph_files(stage: &Path, graph: &mut Graph, extra: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let mut edges = graph.edges.clone();
    edges.sort_by_key(|a| (a.u, a.v));
    let e = &edges;
    let schema = Arc::new(Schema::new(vec![
        Field::new("u", DataType::UInt32, false),
        Field::new("v", DataType::UInt32, false),
        Field::new("rho", DataType::Float64, false),
        Field::new("rho_global", DataType::Float64, false),
        Field::new("co_count", DataType::UInt64, false),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(e.iter().map(|x| x.u))),
        Arc::new(UInt32Array::from_iter_values(e.iter().map(|x| x.v))),
        Arc::new(Float64Array::from_iter_values(e.iter().map(|x| x.rho))),
        Arc::new(Float64Array::from_iter_values(e.iter().map(|x| x.rho_global))),
        Arc::new(UInt64Array::from_iter_values(e.iter().map(|x| x.co_count))),
    ];
    let rb = RecordBatch::try_new(schema, cols).map_err(|err| Error::parquet(stage, err))?;
    write_parquet(&stage.join(EDGES), &rb)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("token_id", DataType::UInt32, false),
        Field::new("gene_id", DataType::Utf8, false),
        Field::new("presence", DataType::UInt64, false),
    ]));
    let g = &graph.genes;
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(g.iter().map(|x| x.0))),
        Arc::new(StringArray::from_iter_values(g.iter().map(|x| x.1.as_str()))),
        Arc::new(UInt64Array::from_iter_values(g.iter().map(|x| x.2))),
    ];
    let rb = RecordBatch::try_new(schema, cols).map_err(|err| Error::parquet(stage, err))?;
    write_parquet(&stage.join(GENES), &rb)?;
    let edges_bytes = std::fs::read(stage.join(EDGES)).at(stage.join(EDGES))?;
    let genes_bytes = std::fs::read(stage.join(GENES)).at(stage.join(GENES))?;
    graph.info.content_hash = content_hash(&edges_bytes, &genes_bytes);
    graph.info.edges = edges.len();
    graph.edges = edges;
    write_json_atomic(&stage.join(INFO), &graph.info)?;
    extra(stage)
}

/// `graph.json`'s content hash: sha256 of `edges.parquet` then `genes.parquet`.
fn content_hash(edges: &[u8], genes: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(edges);
    h.update(genes);
    hex::encode(h.finalize())
}

fn read_batches(path: &Path, bytes: Vec<u8>) -> Result<Vec<RecordBatch>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
        .and_then(|b| b.build())
        .map_err(|e| Error::parquet_read(path, e))?;
    reader.map(|r| r.map_err(|e| Error::parquet_read(path, e))).collect()
}

fn column<'a, T: 'static>(rb: &'a RecordBatch, path: &Path, name: &str) -> Result<&'a T> {
    rb.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| Error::format(path, format!("missing or mistyped column '{name}'")))
}

/// Reads a graph directory.
pub fn read_graph(dir: &Path) -> Result<Graph> {
    let info_path = dir.join(INFO);
    let text = std::fs::read_to_string(&info_path).at(&info_path)?;
    let info: GraphInfo =
        serde_json::from_str(&text).map_err(|e| Error::format(&info_path, format!("invalid graph.json: {e}")))?;
    // Both files are read once: hashed against graph.json's content hash, then decoded.
    let (edges_path, genes_path) = (dir.join(EDGES), dir.join(GENES));
    let edges_bytes = std::fs::read(&edges_path).at(&edges_path)?;
    let genes_bytes = std::fs::read(&genes_path).at(&genes_path)?;
    if content_hash(&edges_bytes, &genes_bytes) != info.content_hash {
        return Err(Error::format(
            dir,
            format!("{EDGES} and {GENES} do not match the content hash in {INFO} (corrupt or modified)"),
        ));
    }
    let mut edges = Vec::new();
    let p = edges_path;
    for rb in read_batches(&p, edges_bytes)? {
        let (u, v) = (column::<UInt32Array>(&rb, &p, "u")?, column::<UInt32Array>(&rb, &p, "v")?);
        let (r, rg) = (column::<Float64Array>(&rb, &p, "rho")?, column::<Float64Array>(&rb, &p, "rho_global")?);
        let co = column::<UInt64Array>(&rb, &p, "co_count")?;
        for i in 0..rb.num_rows() {
            edges.push(GraphEdge {
                u: u.value(i),
                v: v.value(i),
                rho: r.value(i),
                rho_global: rg.value(i),
                co_count: co.value(i),
            });
        }
    }
    let mut genes = Vec::new();
    let p = genes_path;
    for rb in read_batches(&p, genes_bytes)? {
        let (t, g, n) = (
            column::<UInt32Array>(&rb, &p, "token_id")?,
            column::<StringArray>(&rb, &p, "gene_id")?,
            column::<UInt64Array>(&rb, &p, "presence")?,
        );
        for i in 0..rb.num_rows() {
            genes.push((t.value(i), g.value(i).to_string(), n.value(i)));
        }
    }
    if edges.len() != info.edges {
        return Err(Error::format(
            dir,
            format!("graph.json says {} edges, edges.parquet has {}", info.edges, edges.len()),
        ));
    }
    Ok(Graph { info, genes, edges })
}
