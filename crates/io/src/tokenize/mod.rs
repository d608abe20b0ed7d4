//! Tokenization of cell chunks: map file genes to the vocabulary, validate counts, normalize,
//! and rank-value encode each cell (the pure encoding lives in `corrflow_algorithms::rank`).

use std::path::Path;

use corrflow_algorithms::{normalized_expression, rank_value_encode, RankScratch, SequenceLayout};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::formats::CellChunk;
use crate::vocab::Vocabulary;

mod cell;
mod expression;
mod mapper;

use cell::{CellBuffers, ChunkTokenizer};
pub use expression::ExpressionBatch;
pub use mapper::{GeneMapper, MappingStats};

/// What the stored values are and how to turn them into counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueTransform {
    /// Values are counts (or scaled counts with `allow_normalized`).
    #[default]
    None,
    /// Values are `log1p` of (normalized) counts; `expm1` restores a per-cell scaling of them.
    Expm1,
}

/// Tokenization settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizeOptions {
    pub layout: SequenceLayout,
    /// Accept non-integer values (normalized data); rank-value tokens are invariant to per-cell
    /// scaling, so normalized counts give the same tokens as raw ones.
    pub allow_normalized: bool,
    pub transform: ValueTransform,
}

/// The vocabulary and sequence layout of a Geneformer version: V1 (2,048 genes, no special
/// tokens) or V2 (`<cls>` genes `<eos>`, 4,094 genes; the vocabulary gains the two tokens).
/// `max_genes` overrides the gene count.
pub fn versioned_layout(vocab: Vocabulary, v2: bool, max_genes: Option<usize>) -> Result<(Vocabulary, SequenceLayout)> {
    let (vocab, mut layout) = if v2 {
        let vocab = vocab.with_v2_specials();
        let (Some(cls), Some(eos)) = (vocab.cls, vocab.eos) else {
            return Err(Error::Vocab {
                name: vocab.name().to_string(),
                msg: "a V2 vocabulary needs <cls> and <eos>".into(),
            });
        };
        (vocab, SequenceLayout::v2(cls, eos))
    } else {
        (vocab, SequenceLayout::v1())
    };
    if let Some(m) = max_genes {
        if m == 0 {
            return Err(Error::Usage("max_genes must be at least 1".into()));
        }
        layout.max_genes = m;
    }
    Ok((vocab, layout))
}

/// The tokens of the kept cells of a chunk.
#[derive(Debug, Default)]
pub struct TokenizedChunk {
    /// Index within the chunk of each kept cell.
    pub kept: Vec<usize>,
    /// Offsets into `tokens`, one more than `kept`.
    pub offsets: Vec<usize>,
    pub tokens: Vec<u32>,
    /// Cells with no vocabulary gene expressed.
    pub dropped_no_vocab_genes: usize,
    /// The kept cells' expression ([`tokenize_chunk_with_expression`]).
    pub expression: Option<ExpressionBatch>,
}

/// Tokenizes every cell of `chunk`, in parallel, validating each stored value.
pub fn tokenize_chunk(
    path: &Path,
    chunk: &CellChunk,
    gene_ids: &[String],
    mapper: &GeneMapper,
    vocab: &Vocabulary,
    opts: &TokenizeOptions,
) -> Result<TokenizedChunk> {
    let cells = ChunkTokenizer { path, chunk, gene_ids, mapper, vocab, opts, expression: false };
    tokenize_cells(&cells)
}

/// [`tokenize_chunk`], keeping each kept cell's expression: its raw counts in rank order (the
/// genes of its tokens, then those past the layout's cut), those genes past the cut, and its
/// total count over all of the file's genes. The tokens are the same.
pub fn tokenize_chunk_with_expression(
    path: &Path,
    chunk: &CellChunk,
    gene_ids: &[String],
    mapper: &GeneMapper,
    vocab: &Vocabulary,
    opts: &TokenizeOptions,
) -> Result<TokenizedChunk> {
    let cells = ChunkTokenizer { path, chunk, gene_ids, mapper, vocab, opts, expression: true };
    tokenize_cells(&cells)
}

fn tokenize_cells(cells: &ChunkTokenizer<'_>) -> Result<TokenizedChunk> {
    let chunk = cells.chunk;
    // Blocks of cells rather than single cells per task: each block fills one flat token
    // buffer, so there is no allocation per cell and one copy per block when joining.
    const BLOCK: usize = 64;
    let n = chunk.n_cells();
    let blocks: Vec<TokenizedChunk> = (0..n.div_ceil(BLOCK))
        .into_par_iter()
        .map_init(CellBuffers::default, |buf, b| {
            let block = b * BLOCK..((b + 1) * BLOCK).min(n);
            // A cell has at most its stored values (and the layout's specials) as tokens.
            let bound = chunk.indptr[block.end] - chunk.indptr[block.start] + 2 * block.len();
            let mut t = TokenizedChunk {
                kept: Vec::with_capacity(block.len()),
                offsets: Vec::with_capacity(block.len() + 1),
                tokens: Vec::with_capacity(bound),
                ..Default::default()
            };
            t.offsets.push(0);
            if cells.expression {
                t.expression = Some(ExpressionBatch::with_capacity(block.len(), bound));
            }
            for i in block {
                if cells.tokenize(i, buf)? {
                    t.kept.push(i);
                    t.tokens.extend_from_slice(&buf.tokens);
                    t.offsets.push(t.tokens.len());
                    if let Some(e) = t.expression.as_mut() {
                        e.push(&buf.counts, &buf.tail, buf.total);
                    }
                } else {
                    t.dropped_no_vocab_genes += 1;
                }
            }
            Ok(t)
        })
        .collect::<Result<_>>()?;
    let total: usize = blocks.iter().map(|b| b.tokens.len()).sum();
    let mut t = TokenizedChunk {
        kept: Vec::with_capacity(n),
        offsets: Vec::with_capacity(n + 1),
        tokens: Vec::with_capacity(total),
        ..Default::default()
    };
    t.offsets.push(0);
    if cells.expression {
        let counts = blocks.iter().filter_map(|b| b.expression.as_ref()).map(|e| e.counts.len()).sum();
        let mut all = ExpressionBatch::with_capacity(n, counts);
        all.tail.reserve(blocks.iter().filter_map(|b| b.expression.as_ref()).map(|e| e.tail.len()).sum());
        t.expression = Some(all);
    }
    for b in blocks {
        let base = t.tokens.len();
        t.tokens.extend_from_slice(&b.tokens);
        t.offsets.extend(b.offsets[1..].iter().map(|o| o + base));
        t.kept.extend(b.kept);
        t.dropped_no_vocab_genes += b.dropped_no_vocab_genes;
        if let (Some(all), Some(part)) = (t.expression.as_mut(), b.expression) {
            all.append(part);
        }
    }
    Ok(t)
}

/// Validates and transforms the stored values of cell `i` of `chunk`, calls `f(column, count)`
/// for each count > 0 and returns the cell's total count over all of the file's genes.
///
/// Values must be finite and ≥ 0 and, unless `allow_normalized`, integers; the error names
/// the file, the cell and the gene. Normalized values that are scaled counts (every one an
/// integer multiple of the smallest, to within float32 storage's rounding: `normalize_total`,
/// then perhaps `log1p`, of raw counts) are turned back into those integers, so that rounding
/// cannot swap two genes whose counts rank them equal or a hair apart: such a cell gets the
/// tokens of its raw counts exactly when its smallest count is 1.
pub fn cell_counts(
    path: &Path,
    chunk: &CellChunk,
    i: usize,
    gene_ids: &[String],
    opts: &TokenizeOptions,
    mut f: impl FnMut(u32, f64),
) -> Result<f64> {
    let (cols, values) = chunk.cell(i);
    // Transformed once (`expm1` is the costly part of this path), then validated.
    let counts: Vec<f64> = (0..cols.len())
        .map(|k| match opts.transform {
            ValueTransform::None => values.get(k),
            ValueTransform::Expm1 => values.get(k).exp_m1(),
        })
        .collect();
    let mut integers = true;
    let mut smallest = f64::INFINITY;
    for (k, (&col, &v)) in cols.iter().zip(&counts).enumerate() {
        if !(v >= 0.0 && v.is_finite()) || (!opts.allow_normalized && !is_integer(v)) {
            return Err(invalid_value(path, chunk, i, gene_ids, col, values.get(k), v));
        }
        integers &= is_integer(v);
        if v > 0.0 {
            smallest = smallest.min(v);
        }
    }
    let unit = if integers { None } else { count_unit(smallest, &counts) };
    let mut n_counts = 0.0f64;
    for (&col, &v) in cols.iter().zip(&counts) {
        let v = unit.map_or(v, |u| (v / u).round());
        n_counts += v;
        if v > 0.0 {
            f(col, v);
        }
    }
    if !n_counts.is_finite() {
        // Finite counts can still add up to infinity, which would normalize every gene to 0.
        let (cell, id) = (chunk.first_cell + i, chunk.cell_ids.get(i).map_or("", String::as_str));
        return Err(Error::invalid(path, format!("cell {cell} ('{id}'): {TOTAL_OVERFLOW}")));
    }
    Ok(n_counts)
}

/// Why a cell of finite counts is refused when they add up to infinity.
const TOTAL_OVERFLOW: &str = "its counts add up to more than the largest float64, so it cannot be normalized";

/// Non-integer values below this look like `log1p` of counts (a count of e^20 is beyond any cell).
const LOG_SCALE: f64 = 20.0;

/// The start of the message of a non-integer value that was not allowed: ingest adds where the
/// file's raw counts may be ([`crate::ingest`]).
pub const NON_INTEGER: &str = "a non-integer count";

/// The error naming the file, the cell and the gene of an invalid value.
fn invalid_value(path: &Path, chunk: &CellChunk, i: usize, gene_ids: &[String], col: u32, raw: f64, v: f64) -> Error {
    let what = if !v.is_finite() {
        "a non-finite value"
    } else if v < 0.0 {
        "a negative count"
    } else if v < LOG_SCALE {
        // log1p of a count below e^20: what `sc.pp.log1p` leaves. `--log1p` restores the
        // scaled counts (and their exact tokens); `--allow-normalized` would rank the logs.
        "a non-integer count (these look log-transformed: pass --log1p if they are log1p of (normalized) counts, \
         or --allow-normalized to rank them as they are)"
    } else {
        "a non-integer count (normalized data? pass --allow-normalized)"
    };
    let cell = chunk.first_cell + i;
    let id = chunk.cell_ids.get(i).map_or("", String::as_str);
    let gene = gene_ids.get(col as usize).map_or("?", String::as_str);
    Error::invalid(path, format!("cell {cell} ('{id}'), gene '{gene}': {what}: {raw}"))
}

/// The count one unit of a cell's scaled counts stands for (its smallest value), when every
/// value is within float32 rounding of an integer multiple of it; `None` otherwise (the values
/// are then used as they are).
///
/// Float32 storage and `log1p`/`expm1` leave a relative error of about 1e-6 on a value, so a
/// multiple `r` is accepted within `1e-5·r + 1e-4` of an integer. Continuous data that passes
/// by chance has each value moved by at most about 1e-4 of itself.
fn count_unit(smallest: f64, values: &[f64]) -> Option<f64> {
    if !(smallest > 0.0 && smallest.is_finite()) {
        return None;
    }
    values
        .iter()
        .all(|v| {
            let r = v / smallest;
            (r - r.round()).abs() <= 1e-5 * r + 1e-4
        })
        .then_some(smallest)
}

/// Sorts `(key, count)` pairs by key and sums the counts of equal keys (duplicate gene ids).
pub fn sum_duplicates<K: Ord + Copy>(pairs: &mut Vec<(K, f64)>) {
    pairs.sort_unstable_by_key(|p| p.0);
    pairs.dedup_by(|b, a| {
        let same = a.0 == b.0;
        if same {
            a.1 += b.1;
        }
        same
    });
}

/// A cell given by gene names and counts (the server's input) as rank-value tokens.
#[derive(Debug, Default, PartialEq)]
pub struct NamedCellTokens {
    pub tokens: Vec<u32>,
    /// Genes not in the vocabulary (counted into the cell's total, not tokenized).
    pub unknown_genes: usize,
}

/// Tokenizes one cell given as parallel `genes` (Ensembl ids or symbols) and `counts` as ingest
/// does (the total is over all genes, duplicates are summed, genes outside the vocabulary are
/// counted but not tokenized), except that counts need not be integers. Errors describe the
/// problem for the client.
pub fn tokenize_named_cell(
    vocab: &Vocabulary,
    layout: &SequenceLayout,
    genes: &[String],
    counts: &[f64],
) -> std::result::Result<NamedCellTokens, String> {
    if genes.len() != counts.len() {
        return Err(format!("{} genes but {} counts", genes.len(), counts.len()));
    }
    let mut pairs = Vec::with_capacity(genes.len());
    let mut n_counts = 0.0;
    let mut unknown = 0;
    for (g, &c) in genes.iter().zip(counts) {
        if !(c.is_finite() && c >= 0.0) {
            return Err(format!("gene '{g}': counts must be finite and ≥ 0, got {c}"));
        }
        n_counts += c;
        match vocab.lookup(g) {
            Some(m) if c > 0.0 => pairs.push((m.token(), c)),
            Some(_) => {}
            None => unknown += 1,
        }
    }
    if !n_counts.is_finite() {
        return Err(TOTAL_OVERFLOW.to_string());
    }
    let mut out = NamedCellTokens { tokens: Vec::new(), unknown_genes: unknown };
    encode_cell(vocab, layout, &mut pairs, n_counts, true, &mut RankScratch::default(), &mut out.tokens);
    Ok(out)
}

/// A cell given by gene names and counts, as a value model reads it: its detected vocabulary
/// genes in rank order with their counts, its total, and the vocabulary genes it names (its
/// measured genes, zeros included, ascending).
#[derive(Debug, Default, PartialEq)]
pub struct NamedCellExpression {
    pub genes: Vec<u32>,
    pub counts: Vec<f32>,
    pub total: f64,
    pub measured: Vec<u32>,
    pub unknown_genes: usize,
}

/// [`tokenize_named_cell`]'s reading of a cell (the same validation, totals and duplicate
/// sums), kept as expression for a value model.
pub fn named_cell_expression(
    vocab: &Vocabulary,
    genes: &[String],
    counts: &[f64],
) -> std::result::Result<NamedCellExpression, String> {
    if genes.len() != counts.len() {
        return Err(format!("{} genes but {} counts", genes.len(), counts.len()));
    }
    let mut pairs = Vec::with_capacity(genes.len());
    let mut out = NamedCellExpression::default();
    for (g, &c) in genes.iter().zip(counts) {
        if !(c.is_finite() && c >= 0.0) {
            return Err(format!("gene '{g}': counts must be finite and ≥ 0, got {c}"));
        }
        out.total += c;
        match vocab.lookup(g) {
            Some(m) => {
                out.measured.push(m.token());
                pairs.push((m.token(), c));
            }
            None => out.unknown_genes += 1,
        }
    }
    if !out.total.is_finite() {
        return Err(TOTAL_OVERFLOW.to_string());
    }
    out.measured.sort_unstable();
    out.measured.dedup();
    sum_duplicates(&mut pairs);
    pairs.retain(|p| p.1 > 0.0);
    if pairs.is_empty() || out.total <= 0.0 {
        return Ok(out);
    }
    let raw: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    normalize(vocab, &mut pairs, out.total);
    let mut order = Vec::new();
    corrflow_algorithms::rank_order(&pairs, &mut RankScratch::default(), &mut order);
    out.genes = order.iter().map(|&i| pairs[i as usize].0).collect();
    out.counts = order.iter().map(|&i| raw[i as usize] as f32).collect();
    Ok(out)
}

/// The tokens of a cell from its vocabulary genes' raw counts (`pairs`: token, count) and its
/// total count: duplicates summed (when `may_repeat`), each value normalised by the gene's
/// median, then rank-value encoded into `out`. Returns whether the cell has any token.
fn encode_cell(
    vocab: &Vocabulary,
    layout: &SequenceLayout,
    pairs: &mut Vec<(u32, f64)>,
    n_counts: f64,
    may_repeat: bool,
    scratch: &mut RankScratch,
    out: &mut Vec<u32>,
) -> bool {
    if pairs.is_empty() || n_counts <= 0.0 {
        out.clear();
        return false;
    }
    if may_repeat {
        sum_duplicates(pairs);
    }
    normalize(vocab, pairs, n_counts);
    rank_value_encode(pairs, layout, scratch, out);
    true
}

/// Each pair's raw count replaced by its normalized expression (count / total · 10⁴ / median).
fn normalize(vocab: &Vocabulary, pairs: &mut [(u32, f64)], n_counts: f64) {
    for p in pairs.iter_mut() {
        let median = vocab.median(p.0).expect("vocabulary tokens of genes have medians"); // ok: invariant
        p.1 = normalized_expression(p.1, n_counts, median);
    }
}

/// Whether a finite value is an integer. `trunc` is one `roundsd` instruction with SSE4.1
/// (x86-64-v2, `.cargo/config.toml`), and it vectorizes in the fast path's validation loop.
#[inline]
fn is_integer(v: f64) -> bool {
    v.trunc() == v
}

#[cfg(test)]
mod tests;
