//! `embed --genes`: each gene's contextual embedding averaged over the cells it is expressed in
//! (Geneformer's `gene` mode), streamed. The input is tokenized into a scratch corpus as for
//! cell embeddings; each batch's token states are added to a per-gene sum (vocabulary × hidden,
//! f64), so memory does not grow with the number of cells. Written as Parquet: `gene_id`,
//! `symbol`, `token_id`, `n_cells`, `embedding`.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};

use crate::encode::{plan_batches, Encoder, PaddedBatch};
use corrflow_io::corpus::columns::InputIds;
use corrflow_io::corpus::for_each_shard_batch;
use corrflow_io::error::{Error, Result};
use corrflow_io::util::parquet_out::write_parquet_atomic;

use super::{tokenize_input, EmbedRequest, EmbedSummary};

/// Per-gene sums of token states and the number of cells each gene was seen in.
struct GeneSums {
    dim: usize,
    sums: Vec<f64>,
    cells: Vec<u64>,
}

impl GeneSums {
    fn new(vocab_size: usize, dim: usize) -> Self {
        Self { dim, sums: vec![0.0; vocab_size * dim], cells: vec![0; vocab_size] }
    }

    /// Adds the states of `cell` (its row `r` of a batch `len` wide) for every gene token.
    fn add(&mut self, cell: &[u32], states: &[f32], r: usize, len: usize, is_gene: impl Fn(u32) -> bool) {
        let d = self.dim;
        for (pos, &t) in cell.iter().enumerate() {
            if !is_gene(t) {
                continue;
            }
            let s = &states[(r * len + pos) * d..(r * len + pos + 1) * d];
            let t = t as usize;
            self.sums[t * d..(t + 1) * d].iter_mut().zip(s).for_each(|(a, &b)| *a += f64::from(b));
            self.cells[t] += 1;
        }
    }
}

pub(super) fn embed_genes(req: &EmbedRequest, encoder: &mut dyn Encoder, start: Instant) -> Result<EmbedSummary> {
    let (_scratch, index, ingest) = tokenize_input(
        &req.cells.input,
        &req.cells.read,
        req.cells.allow_normalized,
        req.cells.transform,
        encoder,
        req.cells.progress,
    )?;
    let vocab = encoder.vocab().clone();
    let dim = encoder.dim();
    let mut sums = GeneSums::new(vocab.len(), dim);
    let bar = super::progress_bar(req.cells.progress, index.cells, "embed --genes");
    for shard in &index.shards {
        for_each_shard_batch(&shard.path, |rb| {
            let cells = InputIds::of(rb, &shard.path)?.cells()?;
            let lengths: Vec<usize> = cells.iter().map(Vec::len).collect();
            for rows in plan_batches(&lengths, req.cells.batching.token_budget, req.cells.batching.max_rows) {
                let batch = PaddedBatch::new(rows.iter().map(|&i| cells[i].as_slice()), vocab.pad);
                let states = encoder.token_states(&batch)?;
                for (r, &i) in rows.iter().enumerate() {
                    sums.add(&cells[i], &states, r, batch.len, |t| vocab.is_gene(t));
                }
            }
            bar.inc(rb.num_rows() as u64);
            Ok(())
        })?;
    }
    bar.finish();
    let genes = write(req, &vocab, &sums)?;
    Ok(EmbedSummary::of(req, encoder, &ingest, start, Some(genes)))
}

/// The mean embedding of every gene seen in at least one cell, by token id; returns how many.
fn write(req: &EmbedRequest, vocab: &corrflow_io::vocab::Vocabulary, sums: &GeneSums) -> Result<usize> {
    let d = sums.dim;
    let seen: Vec<usize> = (0..sums.cells.len()).filter(|&t| sums.cells[t] > 0).collect();
    if seen.is_empty() {
        return Err(Error::format(&req.cells.input, "no cell could be tokenized with the model's vocabulary"));
    }
    let symbols = vocab.symbols_by_token();
    let mut list = FixedSizeListBuilder::new(Float32Builder::with_capacity(seen.len() * d), d as i32);
    for &t in &seen {
        let n = sums.cells[t] as f64;
        list.values().extend(sums.sums[t * d..(t + 1) * d].iter().map(|&s| Some((s / n) as f32)));
        list.append(true);
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("gene_id", DataType::Utf8, false),
        Field::new("symbol", DataType::Utf8, true),
        Field::new("token_id", DataType::UInt32, false),
        Field::new("n_cells", DataType::UInt64, false),
        Field::new(
            "embedding",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), d as i32),
            true,
        ),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(seen.iter().map(|&t| vocab.token(t as u32).unwrap_or_default()))),
        Arc::new(StringArray::from_iter(seen.iter().map(|&t| symbols.get(&(t as u32)).map(String::as_str)))),
        Arc::new(UInt32Array::from_iter_values(seen.iter().map(|&t| t as u32))),
        Arc::new(UInt64Array::from_iter_values(seen.iter().map(|&t| sums.cells[t]))),
        Arc::new(list.finish()),
    ];
    let rb = RecordBatch::try_new(schema, columns).map_err(|e| Error::parquet(&req.out, e))?;
    write_parquet_atomic(&req.out, &rb)?;
    Ok(seen.len())
}
