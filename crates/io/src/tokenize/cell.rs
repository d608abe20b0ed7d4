//! One cell of a chunk to tokens: a branch-free path for the common case (integer counts, no
//! duplicate gene columns) and the general one, which also names invalid values.

use std::path::Path;

use corrflow_algorithms::{normalized_expression, rank_order, rank_value_encode, RankScratch, SequenceLayout};

use super::mapper::UNMAPPED;
use super::{cell_counts, is_integer, normalize, sum_duplicates, GeneMapper, TokenizeOptions, ValueTransform};
use crate::error::Result;
use crate::formats::{CellChunk, CellValues};
use crate::vocab::Vocabulary;

/// What tokenizing the cells of one chunk reads.
pub(super) struct ChunkTokenizer<'a> {
    pub(super) path: &'a Path,
    pub(super) chunk: &'a CellChunk,
    pub(super) gene_ids: &'a [String],
    pub(super) mapper: &'a GeneMapper,
    pub(super) vocab: &'a Vocabulary,
    pub(super) opts: &'a TokenizeOptions,
    /// Keep each cell's expression (its raw counts in rank order, the genes past the cut, its
    /// total) beside its tokens.
    pub(super) expression: bool,
}

/// Per-thread buffers of [`ChunkTokenizer`]; `tokens` holds the last cell's tokens and, when
/// the expression is kept, `counts`, `tail` and `total` its expression.
#[derive(Default)]
pub(super) struct CellBuffers {
    pairs: Vec<(u32, f64)>,
    /// Each pair's raw count (the expression path; `pairs` hold normalized values).
    raw: Vec<f64>,
    order: Vec<u32>,
    scratch: RankScratch,
    pub(super) tokens: Vec<u32>,
    pub(super) counts: Vec<f32>,
    pub(super) tail: Vec<u32>,
    pub(super) total: f64,
}

impl CellBuffers {
    /// The cell's tokens from its vocabulary genes (`pairs`: token, normalized value) and, with
    /// `expression`, the raw counts (`raw`, aligned with `pairs`) in the same rank order. One
    /// sort serves both: the tokens are the first `max_genes` of the full rank order, exactly
    /// what `rank_value_encode` writes.
    fn encode(&mut self, layout: &SequenceLayout, expression: bool, total: f64) {
        if !expression {
            rank_value_encode(&self.pairs, layout, &mut self.scratch, &mut self.tokens);
            return;
        }
        rank_order(&self.pairs, &mut self.scratch, &mut self.order);
        self.tokens.clear();
        self.tokens.extend(layout.cls);
        let cut = self.order.len().min(layout.max_genes);
        self.tokens.extend(self.order[..cut].iter().map(|&i| self.pairs[i as usize].0));
        self.tokens.extend(layout.eos);
        self.tail.clear();
        self.tail.extend(self.order[cut..].iter().map(|&i| self.pairs[i as usize].0));
        self.counts.clear();
        self.counts.extend(self.order.iter().map(|&i| self.raw[i as usize] as f32));
        self.total = total;
    }
}

impl ChunkTokenizer<'_> {
    /// Tokenizes cell `i` into `buf.tokens`; returns whether it has any vocabulary gene.
    pub(super) fn tokenize(&self, i: usize, buf: &mut CellBuffers) -> Result<bool> {
        let (mapper, opts) = (self.mapper, self.opts);
        if opts.transform == ValueTransform::None && !mapper.has_duplicates {
            let (cols, values) = self.chunk.cell(i);
            let fast = match values {
                CellValues::F32(v) => self.tokenize_counts(cols, v, buf),
                CellValues::F64(v) => self.tokenize_counts(cols, v, buf),
            };
            if let Some(kept) = fast {
                return Ok(kept);
            }
        }
        self.tokenize_general(i, buf)
    }

    /// The common case: counts, no duplicate gene columns. `None` when some value is invalid
    /// (the general path then names it), else whether the cell has any vocabulary gene.
    fn tokenize_counts<V: Copy + Into<f64>>(&self, cols: &[u32], values: &[V], buf: &mut CellBuffers) -> Option<bool> {
        // Normalized values take the general path, which turns scaled counts back into counts.
        let n_counts = checked_total(values)?;
        // Branch-free: every value is normalised and written, and the slot is kept only for a
        // vocabulary gene with a count > 0 (whether a gene is in the vocabulary is a coin flip
        // the branch predictor cannot learn).
        let (pairs, raw) = (&mut buf.pairs, &mut buf.raw);
        pairs.clear();
        pairs.resize(values.len(), (0, 0.0));
        let mut n = 0;
        let slots = pairs.as_mut_slice();
        if self.expression {
            raw.clear();
            raw.resize(values.len(), 0.0);
            for (&col, &v) in cols.iter().zip(values) {
                let v: f64 = v.into();
                let (token, median) = self.mapper.column_table[col as usize];
                slots[n] = (token, normalized_expression(v, n_counts, median));
                raw[n] = v;
                n += usize::from((token != UNMAPPED) & (v > 0.0));
            }
        } else {
            for (&col, &v) in cols.iter().zip(values) {
                let v: f64 = v.into();
                let (token, median) = self.mapper.column_table[col as usize];
                slots[n] = (token, normalized_expression(v, n_counts, median));
                n += usize::from((token != UNMAPPED) & (v > 0.0));
            }
        }
        pairs.truncate(n);
        if pairs.is_empty() || n_counts <= 0.0 {
            buf.tokens.clear();
            return Some(false);
        }
        buf.encode(&self.opts.layout, self.expression, n_counts);
        Some(true)
    }

    /// [`Self::tokenize`] for every case: duplicate columns summed, transformed values, and the
    /// error naming the first invalid value.
    fn tokenize_general(&self, i: usize, buf: &mut CellBuffers) -> Result<bool> {
        let pairs = &mut buf.pairs;
        pairs.clear();
        let n_counts = cell_counts(self.path, self.chunk, i, self.gene_ids, self.opts, |col, v| {
            if let Some(t) = self.mapper.token_of_column[col as usize] {
                pairs.push((t, v));
            }
        })?;
        let repeats = self.mapper.has_duplicates;
        if pairs.is_empty() || n_counts <= 0.0 {
            buf.tokens.clear();
            return Ok(false);
        }
        if repeats {
            sum_duplicates(pairs);
        }
        if self.expression {
            buf.raw.clear();
            buf.raw.extend(pairs.iter().map(|p| p.1));
        }
        normalize(self.vocab, pairs, n_counts);
        buf.encode(&self.opts.layout, self.expression, n_counts);
        Ok(true)
    }
}

/// The sum of a cell's stored values when every one is a valid count (finite, ≥ 0 and an
/// integer), else `None`. Equal to [`cell_counts`]'s sequential sum: integer
/// sums below 2^53 are exact in any order, so those are summed in four independent lanes.
#[allow(clippy::manual_range_contains)] // `&` of two comparisons, see below
fn checked_total<V: Copy + Into<f64>>(values: &[V]) -> Option<f64> {
    // Non-short-circuit `&` so the loops have no branch and vectorize.
    let valid = |v: f64| (v >= 0.0) & (v < f64::INFINITY);
    let mut ok = true;
    let mut lanes = [0.0f64; 4];
    let quads = values.chunks_exact(4);
    let rest = quads.remainder();
    for q in quads {
        for (lane, &v) in lanes.iter_mut().zip(q) {
            let v: f64 = v.into();
            ok &= valid(v) & is_integer(v);
            *lane += v;
        }
    }
    for &v in rest {
        let v: f64 = v.into();
        ok &= valid(v) & is_integer(v);
        lanes[0] += v;
    }
    let sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    (ok && sum < 9_007_199_254_740_992.0).then_some(sum)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{chunk, v1};
    use super::*;
    use crate::formats::ChunkValues;
    use crate::vocab::BUILTIN;
    use corrflow_algorithms::SequenceLayout;

    #[test]
    fn fast_path_gives_the_general_paths_tokens_and_totals_for_f32_and_f64_storage() {
        let vocab = Vocabulary::resolve(BUILTIN).unwrap();
        // Every 5th column is not in the vocabulary.
        let genes: Vec<String> = (0..400)
            .map(|c| if c % 5 == 0 { format!("nope{c}") } else { vocab.token(2 + c).unwrap().to_string() })
            .collect();
        let mapper = GeneMapper::new(&vocab, &genes);
        let mut state = 7u64;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            state >> 33
        };
        let rows: Vec<Vec<(u32, f64)>> = (0..60)
            .map(|cell| {
                let mut cols: Vec<u32> = (0..400).filter(|_| next() % 3 == 0).collect();
                cols.truncate(cell * 7);
                // Mostly small counts, some explicit zeros and a few large ones.
                cols.into_iter().map(|c| (c, [0.0, 1.0, 1.0, 2.0, 3.0, 250.0][(next() % 6) as usize])).collect()
            })
            .collect();
        let refs: Vec<&[(u32, f64)]> = rows.iter().map(Vec::as_slice).collect();
        let wide = chunk(&refs);
        // The same values stored as f32, as AnnData files store counts.
        let ChunkValues::F64(v) = &wide.values else { unreachable!() };
        let narrow = CellChunk { values: ChunkValues::F32(v.iter().map(|&x| x as f32).collect()), ..wide.clone() };
        for opts in [
            v1(),
            TokenizeOptions { allow_normalized: true, ..v1() },
            TokenizeOptions { layout: SequenceLayout { max_genes: 9, ..SequenceLayout::v1() }, ..v1() },
        ] {
            let tokenizer = |c| ChunkTokenizer {
                path: Path::new("x"),
                chunk: c,
                gene_ids: &genes,
                mapper: &mapper,
                vocab: &vocab,
                opts: &opts,
                expression: false,
            };
            let (cells, cells32) = (tokenizer(&wide), tokenizer(&narrow));
            let (mut fast, mut general, mut fast32) =
                (CellBuffers::default(), CellBuffers::default(), CellBuffers::default());
            for i in 0..wide.n_cells() {
                let a = cells.tokenize(i, &mut fast).unwrap();
                let b = cells.tokenize_general(i, &mut general).unwrap();
                assert_eq!((a, &fast.tokens), (b, &general.tokens), "cell {i}");
                let a32 = cells32.tokenize(i, &mut fast32).unwrap();
                assert_eq!((a32, &fast32.tokens), (a, &fast.tokens), "cell {i} stored as f32");
                let b32 = cells32.tokenize_general(i, &mut general).unwrap();
                assert_eq!((b32, &general.tokens), (a, &fast.tokens), "cell {i} stored as f32, general path");
            }
        }
        assert_eq!(checked_total(&[1.0, 2.0, 3.0, 4.0, 5.0]), Some(15.0));
        assert_eq!(checked_total(&[1.0, 2.5]), None);
        assert_eq!(checked_total(&[1.0, -0.5, 2.0, 3.0, 4.0]), None);
        assert_eq!(checked_total(&[1.0, 2.0, 3.0, 4.0, f64::NAN]), None);
        assert_eq!(checked_total(&[f64::INFINITY]), None);
        assert_eq!(checked_total(&[9.1e15, 9.1e15]), None, "beyond 2^53 the sequential sum decides");
    }
}
