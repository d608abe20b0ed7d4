//! `corrflow perturb`: in-silico deletion or overexpression of genes in every cell of an h5ad
//! (Geneformer's definitions, `corrflow_algorithms::perturb`), and how far each cell's embedding
//! moves (cosine). `--module GRAPH` perturbs each gene together with its dependency-graph
//! partners. The effect is compared with random gene sets of matched expression (each gene
//! replaced by a random gene of the same expression decile among the cells), as a permutation
//! test. Streamed: cells are read from the scratch corpus a block at a time and their rows
//! written as they are done; memory does not grow with the input. A value model's cells are
//! perturbed in their counts instead (`values.rs` says what deletion and overexpression mean
//! there).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Array, ArrayRef, Float64Array, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use corrflow_algorithms::perturb::{cosine, perturb, Perturbation};
use serde::Serialize;

use crate::encode::{encode_cells, Encoder, ModelCells, Output};
use corrflow_io::corpus::columns::{InputIds, CELL_ID};
use corrflow_io::corpus::for_each_shard_batch;
use corrflow_io::error::{Error, Result};
use corrflow_io::util::parquet_out::ParquetOut;
use corrflow_io::vocab::Vocabulary;

use crate::cells_run::CellsRun;
use crate::embed::tokenize_input;
use crate::registry::{open_encoder, OpenOptions};

mod gene_sets;
mod gene_shifts;
mod values;
use gene_sets::{check_random_set_memory, random_sets, resolve_genes};
use gene_shifts::GeneShifts;
use values::ValueCells;

#[derive(Clone, Debug)]
pub struct PerturbRequest {
    pub cells: CellsRun,
    pub out: PathBuf,
    /// Also each other gene's mean embedding shift (Parquet), over the perturbed cells.
    pub genes_out: Option<PathBuf>,
    /// Genes by Ensembl id or symbol.
    pub genes: Vec<String>,
    pub how: Perturbation,
    /// A dependency graph: each gene is perturbed together with its partners.
    pub module: Option<PathBuf>,
    /// Only the cells whose obs column has this value.
    pub cells_where: Option<(String, String)>,
    /// Random gene sets of matched expression for the permutation test (0: none).
    pub random_sets: usize,
    pub seed: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PerturbSummary {
    pub command: String,
    pub how: String,
    pub genes: Vec<String>,
    /// Tokens perturbed: the genes and, with `--module`, their partners.
    pub tokens: Vec<u32>,
    pub module_partners: usize,
    pub cells: u64,
    /// Cells the perturbation applies to (deletion: expressing at least one of the genes).
    pub cells_perturbed: u64,
    /// Mean of 1 − cosine(original, perturbed) over those cells.
    pub mean_shift: f64,
    pub random_sets: usize,
    pub random_mean_shifts: Vec<f64>,
    /// (1 + random sets with a mean shift ≥ the genes') / (1 + random sets).
    pub p_value: Option<f64>,
    pub out: String,
    /// Genes written to `genes_out`.
    pub genes_shifted: Option<usize>,
    pub seconds: f64,
}

/// Flag values and outputs checked before any work.
fn validate(req: &PerturbRequest) -> Result<()> {
    corrflow_fs::atomic::check_writable(&req.out)?;
    if let Some(g) = &req.genes_out {
        corrflow_fs::atomic::check_writable(g)?;
    }
    if req.random_sets > MAX_RANDOM_SETS {
        return Err(Error::Usage(format!(
            "--random-sets must be at most {MAX_RANDOM_SETS} (got {}): each set encodes every cell again",
            req.random_sets
        )));
    }
    if let Some(i) = req.genes.iter().position(|g| g.trim().is_empty()) {
        return Err(Error::Usage(format!(
            "{}: gene {} of {} is empty (Ensembl ids or symbols, comma-separated)",
            flag_of(req.how),
            i + 1,
            req.genes.len()
        )));
    }
    Ok(())
}

pub fn perturb_cells(req: &PerturbRequest) -> Result<PerturbSummary> {
    validate(req)?;
    let start = Instant::now();
    let opts = OpenOptions { runtime: req.cells.runtime.clone(), ..OpenOptions::default() };
    let mut encoder = open_encoder(&req.cells.model, &opts)?;
    if encoder.config().and_then(crate::inputs::value_settings).is_some() && req.genes_out.is_some() {
        return Err(Error::Usage(format!(
            "--genes-out: {} is a value model; the other genes' shifts are read from rank models' gene states \
             (as `embed --genes`), which a value model does not give",
            req.cells.model.path().display()
        )));
    }
    crate::encode::check_batch_memory(encoder.as_ref(), req.cells.batching.token_budget)?;
    let vocab = encoder.vocab().clone();
    let (tokens, partners) = resolve_genes(&vocab, &req.genes, req.module.as_deref())?;
    check_random_set_memory(req.random_sets, tokens.len())?;
    let mut read = req.cells.read.clone();
    if let Some((col, _)) = &req.cells_where {
        read.obs_columns = vec![col.clone()];
    }
    let (_scratch, index, _) = tokenize_input(
        &req.cells.input,
        &read,
        req.cells.allow_normalized,
        req.cells.transform,
        encoder.as_ref(),
        false,
    )?;
    let layout = encoder.layout();
    let value_cells = ValueCells::for_model(encoder.as_ref(), &index)?;
    // Expression counts only serve the matched random sets: without them, no pass over the cells.
    let sets = if req.random_sets > 0 {
        let expressed = expression(&index, req.cells_where.as_ref(), vocab.len(), value_cells.as_ref())?;
        random_sets(&tokens, &expressed, &vocab, req.random_sets, req.seed)
    } else {
        Vec::new()
    };
    let pass = Pass {
        req,
        vocab: &vocab,
        layout,
        max_len: layout.max_genes + usize::from(layout.cls.is_some()) + usize::from(layout.eos.is_some()),
        sets: std::iter::once(tokens.as_slice()).chain(sets.iter().map(Vec::as_slice)).collect(),
    };
    let mut writer = RowWriter::new(&req.out);
    let mut tally = Tally {
        cells: 0,
        sums: vec![(0.0, 0); pass.sets.len()],
        genes: req.genes_out.as_ref().map(|_| GeneShifts::new(vocab.len())),
    };
    let result = match &value_cells {
        None => for_each_block(&index, req.cells_where.as_ref(), &mut |ids, block| {
            pass.block(encoder.as_mut(), ids, block, &mut writer, &mut tally)
        }),
        Some(v) => v.for_each_block(&index, req.cells_where.as_ref(), &mut |ids, block| {
            pass.value_block(encoder.as_mut(), v, ids, block, &mut writer, &mut tally)
        }),
    };
    // An unfinished writer removes its temporary file when dropped.
    result?;
    if let Some(e) = nothing_measured(req, &tally) {
        return Err(e);
    }
    writer.finish()?;
    let genes_shifted = match (&tally.genes, &req.genes_out) {
        (Some(g), Some(path)) => Some(g.write(&vocab, path)?),
        _ => None,
    };
    Ok(summarize(req, tokens, partners, tally, genes_shifted, start))
}

/// Why a finished pass has nothing to report: no cell selected, or none the perturbation
/// applies to.
fn nothing_measured(req: &PerturbRequest, tally: &Tally) -> Option<Error> {
    if tally.cells == 0 {
        return Some(Error::Usage(match &req.cells_where {
            Some((c, v)) => format!("no cell has {c} = {v}"),
            None => format!("{}: no cell could be tokenized with the model's vocabulary", req.cells.input.display()),
        }));
    }
    (tally.sums[0].1 == 0).then(|| {
        Error::Usage(format!(
            "{} {}: none of the {} cells expresses {} (among its model input genes), so there is nothing to delete and no shift to measure",
            flag_of(req.how),
            req.genes.join(","),
            tally.cells,
            if req.genes.len() == 1 { "this gene" } else { "any of these genes" }
        ))
    })
}

/// The summary of a pass: the genes' mean shift against the random sets'.
fn summarize(
    req: &PerturbRequest,
    tokens: Vec<u32>,
    partners: usize,
    tally: Tally,
    genes_shifted: Option<usize>,
    start: Instant,
) -> PerturbSummary {
    let (cells, sums) = (tally.cells, tally.sums);
    let mean = |(sum, n): (f64, u64)| if n == 0 { f64::NAN } else { sum / n as f64 };
    let mean_shift = mean(sums[0]);
    let random: Vec<f64> = sums[1..].iter().map(|&s| mean(s)).collect();
    let p_value = (!random.is_empty())
        .then(|| (1 + random.iter().filter(|&&r| r >= mean_shift).count()) as f64 / (1 + random.len()) as f64);
    PerturbSummary {
        command: "perturb".into(),
        how: format!("{:?}", req.how).to_lowercase(),
        genes: req.genes.clone(),
        tokens,
        module_partners: partners,
        cells,
        cells_perturbed: sums[0].1,
        mean_shift,
        random_sets: sums.len() - 1,
        random_mean_shifts: random,
        p_value,
        out: req.out.display().to_string(),
        genes_shifted,
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// The most random gene sets `perturb` draws: each set encodes every selected cell once more.
pub const MAX_RANDOM_SETS: usize = 10_000;

/// The flag that names the genes of a perturbation.
fn flag_of(how: Perturbation) -> &'static str {
    match how {
        Perturbation::Delete => "--delete",
        Perturbation::Overexpress => "--overexpress",
    }
}

/// The fixed parts of the perturbation pass: the gene sets (the perturbed genes first, then the
/// random sets) and how sequences are cut.
struct Pass<'a> {
    req: &'a PerturbRequest,
    vocab: &'a Vocabulary,
    layout: corrflow_algorithms::SequenceLayout,
    max_len: usize,
    sets: Vec<&'a [u32]>,
}

/// What the pass accumulates: cells seen, per set the sum of shifts and the cells perturbed, and
/// the other genes' shifts of the first set.
struct Tally {
    cells: u64,
    sums: Vec<(f64, u64)>,
    genes: Option<GeneShifts>,
}

impl Pass<'_> {
    /// Perturbs a block of cells with every set and writes the first set's rows.
    fn block(
        &self,
        encoder: &mut dyn Encoder,
        ids: &[String],
        block: &[Vec<u32>],
        writer: &mut RowWriter,
        tally: &mut Tally,
    ) -> Result<()> {
        let (req, dim) = (self.req, encoder.dim());
        tally.cells += block.len() as u64;
        let original = encode(encoder, &ModelCells::ranks(block.to_vec()), req)?;
        for (s, &set) in self.sets.iter().enumerate() {
            let mut edited: Vec<(Vec<u32>, usize)> =
                block.iter().map(|c| perturb(c, set, req.how, &self.layout, self.max_len)).collect();
            let applies = applying(req.how, &edited.iter().map(|e| e.1).collect::<Vec<_>>());
            let cells: Vec<Vec<u32>> = applies.iter().map(|&i| std::mem::take(&mut edited[i].0)).collect();
            let moved = encode(encoder, &ModelCells::ranks(cells.clone()), req)?;
            let cosines = record_shifts(tally, s, block.len(), &applies, (&original, &applies), &moved, dim);
            if s > 0 {
                continue;
            }
            let present: Vec<u32> = edited.iter().map(|e| e.1 as u32).collect();
            writer.write(ids, &present, &cosines)?;
            if let Some(g) = tally.genes.as_mut() {
                let pairs: Vec<(&[u32], &[u32])> =
                    applies.iter().zip(&cells).map(|(&i, c)| (block[i].as_slice(), c.as_slice())).collect();
                g.add(
                    encoder,
                    self.vocab,
                    &pairs,
                    set,
                    (req.cells.batching.token_budget, req.cells.batching.max_rows),
                )?;
            }
        }
        Ok(())
    }
}

/// The cells a perturbation applies to: every cell for overexpression; for deletion, those that
/// detect one of the genes (`present[i]` of them).
fn applying(how: Perturbation, present: &[usize]) -> Vec<usize> {
    (0..present.len()).filter(|&i| how == Perturbation::Overexpress || present[i] > 0).collect()
}

/// Adds the shifts of the cells `applies` (of `n`) to set `s`'s sums: cell `applies[r]`'s moved
/// vector is row `r` of `moved`, its original row `original.1[r]` of `original.0`. Returns each
/// cell's cosine (`None` where the perturbation does not apply).
fn record_shifts(
    tally: &mut Tally,
    s: usize,
    n: usize,
    applies: &[usize],
    original: (&[f32], &[usize]),
    moved: &[f32],
    dim: usize,
) -> Vec<Option<f64>> {
    let mut cosines = vec![None; n];
    for (r, &i) in applies.iter().enumerate() {
        let o = original.1[r];
        let cos = cosine(&original.0[o * dim..(o + 1) * dim], &moved[r * dim..(r + 1) * dim]);
        cosines[i] = Some(cos);
        tally.sums[s].0 += 1.0 - cos;
        tally.sums[s].1 += 1;
    }
    cosines
}

/// How many selected cells express each token: a pass over the rank tokens, or a value model's
/// detected genes.
fn expression(
    index: &corrflow_io::corpus::CorpusIndex,
    filter: Option<&(String, String)>,
    vocab_size: usize,
    value_cells: Option<&ValueCells>,
) -> Result<Vec<u64>> {
    let mut expressed = vec![0u64; vocab_size];
    match value_cells {
        None => for_each_block(index, filter, &mut |_, cells| {
            cells.iter().flatten().for_each(|&t| expressed[t as usize] += 1);
            Ok(())
        })?,
        Some(v) => v.for_each_block(index, filter, &mut |_, cells| {
            cells.iter().flat_map(|c| &c.genes).for_each(|&t| expressed[t as usize] += 1);
            Ok(())
        })?,
    }
    Ok(expressed)
}

/// Cell vectors of `cells` (row-major), batched under the request's budget.
fn encode(encoder: &mut dyn Encoder, cells: &ModelCells, req: &PerturbRequest) -> Result<Vec<f32>> {
    encode_cells(encoder, cells, req.cells.batching, Output::Embedding, |_| {})
}

/// Calls `f` with the ids and tokens of the selected cells of each shard record batch.
fn for_each_block(
    index: &corrflow_io::corpus::CorpusIndex,
    filter: Option<&(String, String)>,
    f: &mut dyn FnMut(&[String], &[Vec<u32>]) -> Result<()>,
) -> Result<()> {
    for shard in &index.shards {
        let p = &shard.path;
        for_each_shard_batch(p, |rb| {
            let mut all = InputIds::of(rb, p)?.cells()?;
            let (rows, names) = selected(rb, p, filter)?;
            let cells: Vec<Vec<u32>> = rows.iter().map(|&i| std::mem::take(&mut all[i])).collect();
            if cells.is_empty() {
                Ok(())
            } else {
                f(&names, &cells)
            }
        })?;
    }
    Ok(())
}

/// The rows of a record batch that the filter (`--cells-where COLUMN=VALUE`) selects, and
/// their cell ids.
fn selected(
    rb: &RecordBatch,
    p: &std::path::Path,
    filter: Option<&(String, String)>,
) -> Result<(Vec<usize>, Vec<String>)> {
    let rows: Vec<usize> = match filter {
        None => (0..rb.num_rows()).collect(),
        Some((col, want)) => {
            let c = rb.column_by_name(col).ok_or_else(|| corrflow_io::corpus::columns::missing(p, col))?;
            let c = arrow_cast::cast(c, &DataType::Utf8).map_err(|e| Error::parquet(p, e))?;
            let c = c.as_any().downcast_ref::<StringArray>().expect("cast to Utf8");
            (0..rb.num_rows()).filter(|&i| c.is_valid(i) && c.value(i) == want).collect()
        }
    };
    let ids = rb
        .column_by_name(CELL_ID)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| corrflow_io::corpus::columns::missing(p, CELL_ID))?;
    let names = rows.iter().map(|&i| ids.value(i).to_string()).collect();
    Ok((rows, names))
}

/// The per-cell output, written a block at a time through `ParquetOut` (a temporary file renamed
/// into place when finished, removed when dropped unfinished).
struct RowWriter {
    out: ParquetOut,
    schema: Arc<Schema>,
}

impl RowWriter {
    fn new(target: &std::path::Path) -> Self {
        let schema = Arc::new(Schema::new(vec![
            Field::new(CELL_ID, DataType::Utf8, false),
            Field::new("genes_present", DataType::UInt32, false),
            Field::new("cosine", DataType::Float64, true),
            Field::new("shift", DataType::Float64, true),
        ]));
        Self { out: ParquetOut::new(target), schema }
    }

    fn write(&mut self, ids: &[String], present: &[u32], cosine: &[Option<f64>]) -> Result<()> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(ids)),
            Arc::new(UInt32Array::from(present.to_vec())),
            Arc::new(Float64Array::from(cosine.to_vec())),
            Arc::new(Float64Array::from(cosine.iter().map(|c| c.map(|c| 1.0 - c)).collect::<Vec<_>>())),
        ];
        let rb =
            RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| Error::parquet(self.out.target(), e))?;
        self.out.write(&rb)
    }

    fn finish(self) -> Result<()> {
        self.out.finish(|| Error::internal("perturb", "no cell was written"))
    }
}
