//! Padded model inputs and token-budget batching: plain data, shared by `embed --model` and
//! the server.

/// `input_ids` and `attention_mask`, row-major `[rows, len]`, padded with `pad`; a value
/// model's batch also has each token's `values` (same shape, 0 on padding; empty otherwise).
#[derive(Clone, Debug, PartialEq)]
pub struct PaddedBatch {
    pub rows: usize,
    pub len: usize,
    pub input_ids: Vec<i64>,
    pub attention_mask: Vec<i64>,
    pub values: Vec<f32>,
}

impl PaddedBatch {
    /// Pads `cells` (each non-empty) to the longest.
    pub fn new<'a>(cells: impl IntoIterator<Item = &'a [u32]>, pad: u32) -> Self {
        let cells: Vec<&[u32]> = cells.into_iter().collect();
        let len = cells.iter().map(|c| c.len()).max().unwrap_or(0).max(1);
        let rows = cells.len();
        let mut input_ids = vec![i64::from(pad); rows * len];
        let mut attention_mask = vec![0i64; rows * len];
        for (r, cell) in cells.iter().enumerate() {
            for (c, &t) in cell.iter().enumerate() {
                input_ids[r * len + c] = i64::from(t);
                attention_mask[r * len + c] = 1;
            }
        }
        Self { rows, len, input_ids, attention_mask, values: Vec::new() }
    }

    /// [`Self::new`] of a value model's cells: each cell's tokens and their values.
    pub fn with_values<'a>(cells: impl IntoIterator<Item = (&'a [u32], &'a [f32])>, pad: u32) -> Self {
        let cells: Vec<(&[u32], &[f32])> = cells.into_iter().collect();
        let mut batch = Self::new(cells.iter().map(|c| c.0), pad);
        batch.values = vec![0.0; batch.rows * batch.len];
        for (r, (_, values)) in cells.iter().enumerate() {
            batch.values[r * batch.len..r * batch.len + values.len()].copy_from_slice(values);
        }
        batch
    }

    /// Padded tokens the model computes over.
    pub fn tokens(&self) -> usize {
        self.rows * self.len
    }
}

/// Embeddings (row-major `cells × dim`, in the order of `cells`) of cells encoded in the batches
/// [`plan_batches`] makes; `encode` returns one batch's rows, row-major `rows × dim`. A value
/// model's cells come with `values` (one vector per cell, aligned with its tokens).
pub fn encode_in_batches<E>(
    cells: &[Vec<u32>],
    values: Option<&[Vec<f32>]>,
    pad: u32,
    dim: usize,
    (token_budget, max_rows): (usize, usize),
    mut encode: impl FnMut(&PaddedBatch) -> Result<Vec<f32>, E>,
) -> Result<Vec<f32>, E> {
    let lengths: Vec<usize> = cells.iter().map(Vec::len).collect();
    let mut out = vec![0f32; cells.len() * dim];
    for rows in plan_batches(&lengths, token_budget, max_rows) {
        let batch = match values {
            None => PaddedBatch::new(rows.iter().map(|&i| cells[i].as_slice()), pad),
            Some(v) => PaddedBatch::with_values(rows.iter().map(|&i| (cells[i].as_slice(), v[i].as_slice())), pad),
        };
        let values = encode(&batch)?;
        for (r, &i) in rows.iter().enumerate() {
            out[i * dim..(i + 1) * dim].copy_from_slice(&values[r * dim..(r + 1) * dim]);
        }
    }
    Ok(out)
}

/// Splits cells into batches of at most `token_budget` padded tokens (a cell longer than the
/// budget gets a batch of its own) and at most `max_rows` rows. Cells are taken longest first,
/// so each batch holds similar lengths and little padding; returns indices into `lengths`.
pub fn plan_batches(lengths: &[usize], token_budget: usize, max_rows: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    // Stable: equal lengths keep their arrival order.
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut width = 0;
    for i in order {
        let len = lengths[i].max(1);
        let w = width.max(len);
        if !current.is_empty() && ((current.len() + 1) * w > token_budget || current.len() >= max_rows.max(1)) {
            batches.push(std::mem::take(&mut current));
            width = 0;
        }
        width = width.max(len);
        current.push(i);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_encodings_come_back_in_cell_order() {
        // Each "embedding" is (first token, length): batches are planned longest first.
        let cells: Vec<Vec<u32>> = vec![vec![7], vec![3, 1, 2], vec![9, 9], vec![5, 5, 5, 5]];
        let out = encode_in_batches(&cells, None, 0, 2, (6, 2), |b| {
            Ok::<_, ()>(
                (0..b.rows)
                    .flat_map(|r| {
                        let row = &b.attention_mask[r * b.len..(r + 1) * b.len];
                        [b.input_ids[r * b.len] as f32, row.iter().sum::<i64>() as f32]
                    })
                    .collect(),
            )
        })
        .unwrap();
        assert_eq!(out, vec![7.0, 1.0, 3.0, 3.0, 9.0, 2.0, 5.0, 4.0]);
        assert_eq!(encode_in_batches(&cells, None, 0, 2, (6, 2), |_| Err("boom")), Err("boom"));
    }

    #[test]
    fn a_value_batch_pads_values_with_zeros_beside_its_tokens() {
        let b = PaddedBatch::with_values([(&[5u32, 6, 7][..], &[0.0f32, 1.5, 2.5][..]), (&[8][..], &[0.0][..])], 0);
        assert_eq!(b.input_ids, vec![5, 6, 7, 8, 0, 0]);
        assert_eq!(b.values, vec![0.0, 1.5, 2.5, 0.0, 0.0, 0.0]);
        assert!(PaddedBatch::new([&[1u32][..]], 0).values.is_empty());
    }

    #[test]
    fn padding_fills_ids_with_pad_and_the_mask_with_zeros() {
        let b = PaddedBatch::new([&[5u32, 6, 7][..], &[8][..]], 0);
        assert_eq!((b.rows, b.len), (2, 3));
        assert_eq!(b.input_ids, vec![5, 6, 7, 8, 0, 0]);
        assert_eq!(b.attention_mask, vec![1, 1, 1, 1, 0, 0]);
    }

    #[test]
    fn batches_respect_the_token_budget_and_row_cap_and_cover_every_cell_once() {
        let lengths = [10, 300, 7, 250, 2048, 1, 64, 64, 128];
        for (budget, rows) in [(512, 64), (4096, 3), (100, 100), (1, 1)] {
            let batches = plan_batches(&lengths, budget, rows);
            let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
            seen.sort();
            assert_eq!(seen, (0..lengths.len()).collect::<Vec<_>>());
            for b in &batches {
                let width = b.iter().map(|&i| lengths[i]).max().unwrap();
                assert!(b.len() == 1 || b.len() * width <= budget, "{b:?} over {budget}");
                assert!(b.len() <= rows);
            }
        }
    }

    #[test]
    fn batches_group_similar_lengths_longest_first() {
        let batches = plan_batches(&[5, 100, 6, 90], 200, 10);
        assert_eq!(batches, vec![vec![1, 3], vec![2, 0]]);
    }
}
