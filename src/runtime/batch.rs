//! Padded model inputs and token-budget batching: plain data, shared by `embed --model` and
//! the server.

/// `input_ids` and `attention_mask`, row-major `[rows, len]`, padded with `pad`.
#[derive(Clone, Debug, PartialEq)]
pub struct PaddedBatch {
    pub rows: usize,
    pub len: usize,
    pub input_ids: Vec<i64>,
    pub attention_mask: Vec<i64>,
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
        Self { rows, len, input_ids, attention_mask }
    }

    /// Padded tokens the model computes over.
    pub fn tokens(&self) -> usize {
        self.rows * self.len
    }
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
