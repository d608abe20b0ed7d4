//! corrflow's input formats. Streaming readers: single-cell files in, chunks of cells out,
//! never the whole matrix.
//!
//! Each format is one [`CellFormat`] in the [`registry`] (how to recognise a path of it, how to
//! open it); every reader implements [`CellSource`]: it reports the file's genes and obs columns on open
//! (validating shapes and encodings), then hands out [`CellChunk`]s of consecutive cells on
//! request. Row-compressed and dense matrices are read by slices; column-compressed ones
//! (h5ad and zarr CSC, MatrixMarket) go through an out-of-core transpose first; loom's
//! genes × cells matrix is read by column slabs.

mod canonical;
pub mod crash_guard;
mod csr;
pub mod error;
mod filter;
pub mod h5;
mod h5ad;
mod h5ad_copy;
mod loom;
mod matrix;
mod mtx;
mod obs;
pub mod obs_write;
pub mod obsm;
pub mod registry;
pub mod soma;
mod tenx;
mod transpose;
mod values;
mod vlen_heap;
mod zarr;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use error::{Error, IoContext, Result};

pub use filter::Shard;
pub use h5ad_copy::check_editable;
pub use obs::{ObsKind, ObsValues};
pub use registry::{register, CellFormat, Input};
pub use values::{CellValues, ChunkValues};
/// What ingest's hints read of an AnnData zarr store.
pub mod zarr_store {
    pub use crate::zarr::{counts_choices, is_zarr, var_string_columns};
}

/// Consecutive cells of one file, in sparse row form. Chunks from [`open`] are canonical: each
/// cell's genes strictly ascending (a gene the file lists twice in a cell is summed).
#[derive(Clone, Debug, Default)]
pub struct CellChunk {
    /// Index of the first cell within its file.
    pub first_cell: usize,
    /// Offsets into `genes`/`values`, one more than the number of cells.
    pub indptr: Vec<usize>,
    /// Column (gene) index within the file's gene table.
    pub genes: Vec<u32>,
    /// Stored values (raw counts unless told otherwise); explicit zeros may occur.
    pub values: ChunkValues,
    pub cell_ids: Vec<String>,
    /// One entry per requested obs column, in request order.
    pub obs: Vec<ObsValues>,
}

impl CellChunk {
    pub fn n_cells(&self) -> usize {
        self.indptr.len().saturating_sub(1)
    }

    /// Column indices and values of the chunk's `i`-th cell.
    pub fn cell(&self, i: usize) -> (&[u32], CellValues<'_>) {
        let r = self.indptr[i]..self.indptr[i + 1];
        (&self.genes[r.clone()], self.values.slice(r))
    }
}

/// A named obs column and the type it is written as.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObsField {
    pub name: String,
    pub kind: ObsKind,
}

/// Where the counts come from in an h5ad file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CountsSource {
    #[default]
    X,
    Raw,
    Layer(String),
}

impl FromStr for CountsSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "X" => Ok(Self::X),
            "raw" | "raw/X" => Ok(Self::Raw),
            _ => match s.strip_prefix("layer:") {
                Some(name) if !name.is_empty() => Ok(Self::Layer(name.to_string())),
                _ => Err(format!("'{s}' is not X, raw or layer:NAME")),
            },
        }
    }
}

impl std::fmt::Display for CountsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::X => f.write_str("X"),
            Self::Raw => f.write_str("raw"),
            Self::Layer(n) => write!(f, "layer:{n}"),
        }
    }
}

/// What to read from each file.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    pub counts: CountsSource,
    /// var column holding gene ids; `None` = the var index (10x: feature ids).
    pub gene_column: Option<String>,
    pub obs_columns: Vec<String>,
    /// Cells per chunk; readers that transpose bucket cells by this size.
    pub chunk_cells: usize,
    /// Where out-of-core transposes keep their temporary buckets. Readers write here on first
    /// read, never at open: ingest opens its inputs before it clears this directory.
    pub scratch_dir: PathBuf,
    /// 10x files of several genomes: the genome to read (a v2 file's matrix group, or the v3
    /// features of that genome).
    pub genome: Option<String>,
    /// How long opening an HDF5 input may take before it is refused as damaged; `None`: by
    /// the file's size (`crash_guard::default_patience`).
    pub open_patience: Option<std::time::Duration>,
    /// Geneformer's cell filter: read only the cells whose obs column (loom: column attribute)
    /// `filter_pass` is 1, when the file has one. `ingest` and `vocab build` turn it on.
    pub filter_pass: bool,
    /// Loom files: the column attribute holding the cell names (`None`: the first of `CellID`,
    /// `obs_names`, `cell_id`, `cell_ids`, else the only column attribute of distinct strings).
    pub cell_names: Option<String>,
    /// Read only this part of the (filtered) cells: `embed --shard I/N`.
    pub shard: Option<Shard>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            counts: CountsSource::X,
            gene_column: None,
            obs_columns: Vec::new(),
            chunk_cells: 256,
            scratch_dir: std::env::temp_dir(),
            genome: None,
            open_patience: None,
            filter_pass: false,
            cell_names: None,
            shard: None,
        }
    }
}

/// What every reader knows once its file is open. A reader holds one and hands it out from
/// [`CellSource::meta`], which the trait's accessors read.
#[derive(Clone, Debug, Default)]
pub struct SourceMeta {
    pub path: PathBuf,
    pub n_cells: usize,
    /// Gene ids, one per column of the counts matrix.
    pub genes: Vec<String>,
    /// The requested obs columns, in request order.
    pub obs_fields: Vec<ObsField>,
}

/// A file of cells that can be read chunk by chunk.
pub trait CellSource: Send {
    fn meta(&self) -> &SourceMeta;
    fn path(&self) -> &Path {
        &self.meta().path
    }
    fn n_cells(&self) -> usize {
        self.meta().n_cells
    }
    /// Gene ids, one per column of the counts matrix.
    fn gene_ids(&self) -> &[String] {
        &self.meta().genes
    }
    /// The requested obs columns, in request order.
    fn obs_fields(&self) -> &[ObsField] {
        &self.meta().obs_fields
    }
    /// Reads cells `rows`; callers ask for `k*chunk_cells .. min((k+1)*chunk_cells, n)`.
    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk>;
    /// Human-readable format name, for logs and manifests.
    fn format(&self) -> &'static str;
    /// Where the gene ids were read when the format chose among several places itself, in its
    /// own words (loom: "row attribute 'ensembl_id'"), for messages; `None`: the var index or
    /// the features' ids.
    fn gene_column(&self) -> Option<&str> {
        None
    }
    /// The whole obs column (loom: column attribute) `name`, or `None` when the file has none
    /// (formats without cell annotations: 10x, MatrixMarket). Used for `filter_pass`.
    fn read_obs_column(&mut self, _name: &str) -> Result<Option<ObsValues>> {
        Ok(None)
    }
    /// Which of the input's cells are read, when not all of them (a SOMA experiment's obs value
    /// filter): part of what identifies the input when an ingest resumes, and recorded in the
    /// atlas manifest.
    fn selection(&self) -> Option<String> {
        None
    }
}

/// Opens `path` with the reader its format needs (the first of [`registry::all`] that detects
/// it): an AnnData zarr store, a MatrixMarket directory (or `.mtx` file), a 10x Genomics HDF5
/// file, a loom file or an h5ad file. With `opts.filter_pass`, only the cells whose
/// `filter_pass` is 1 are read, when the file has that obs column or loom attribute. Chunks
/// come in canonical form: each cell's genes ascending, a gene listed twice in a cell summed.
pub fn open(path: &Path, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
    let mut source = canonical::canonical(registry::open_any(path, opts)?);
    if opts.filter_pass {
        source = filter::honour_filter_pass(source, opts.chunk_cells)?;
    }
    match opts.shard {
        Some(shard) => filter::take_shard(source, shard, opts.chunk_cells),
        None => Ok(source),
    }
}
