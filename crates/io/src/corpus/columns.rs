//! The columns of a token shard, named once: the four every shard has, and the obs columns an
//! ingest may add after them. The one decoder of `input_ids` lives here.

use std::path::Path;

use arrow_array::{Array, Int32Array, ListArray, RecordBatch};

use crate::error::{Error, Result};

pub const INPUT_IDS: &str = "input_ids";
pub const LENGTH: &str = "length";
pub const CELL_ID: &str = "cell_id";
pub const ATLAS: &str = "atlas";

/// The columns every shard has, in schema order; the rest are obs columns.
pub const TOKEN_COLUMNS: [&str; 4] = [INPUT_IDS, LENGTH, CELL_ID, ATLAS];

/// Each cell's expression (shards written since value models; after the obs columns): the raw
/// count of every detected vocabulary gene in rank order (the genes of `input_ids`, then
/// [`EXPRESSION_TAIL`]), the genes past `input_ids`' cut, and the cell's total count over all of
/// its file's genes.
pub const EXPRESSION_COUNTS: &str = "expression_counts";
pub const EXPRESSION_TAIL: &str = "expression_tail";
pub const EXPRESSION_TOTAL: &str = "expression_total";
pub const EXPRESSION_COLUMNS: [&str; 3] = [EXPRESSION_COUNTS, EXPRESSION_TAIL, EXPRESSION_TOTAL];

/// Whether a shard column is an obs column (copied from the input file) rather than one of the
/// token or expression columns.
pub fn is_obs_column(name: &str) -> bool {
    !TOKEN_COLUMNS.contains(&name) && !is_expression_column(name)
}

/// Whether a shard column holds expression (read only by the stages that see values).
pub fn is_expression_column(name: &str) -> bool {
    EXPRESSION_COLUMNS.contains(&name)
}

/// A shard batch's `input_ids`, decoded row by row.
pub struct InputIds<'a> {
    list: &'a ListArray,
    path: &'a Path,
}

impl<'a> InputIds<'a> {
    /// The `input_ids` column of `rb` (read from `path`, named in errors).
    pub fn of(rb: &'a RecordBatch, path: &'a Path) -> Result<Self> {
        let list = rb
            .column_by_name(INPUT_IDS)
            .and_then(|c| c.as_any().downcast_ref::<ListArray>())
            .ok_or_else(|| missing(path, INPUT_IDS))?;
        Ok(Self { list, path })
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every row's token ids at once: the flat int32 values and the `len() + 1` offsets into
    /// them (decoding row by row allocates an array per row).
    pub fn flat(&self) -> Result<(&'a [i32], &'a [i32])> {
        let values =
            self.list.values().as_any().downcast_ref::<Int32Array>().ok_or_else(|| missing(self.path, INPUT_IDS))?;
        Ok((values.values(), self.list.value_offsets()))
    }

    /// Every row's token ids as `u32` sequences, for consumers that keep the cells.
    pub fn cells(&self) -> Result<Vec<Vec<u32>>> {
        let (values, offsets) = self.flat()?;
        Ok(offsets
            .windows(2)
            .map(|w| values[w[0] as usize..w[1] as usize].iter().map(|&t| t as u32).collect())
            .collect())
    }

    /// Row `i`'s token ids as stored (int32).
    pub fn row(&self, i: usize) -> Result<Int32Array> {
        let v = self.list.value(i);
        v.as_any().downcast_ref::<Int32Array>().cloned().ok_or_else(|| missing(self.path, INPUT_IDS))
    }
}

/// The error for a shard column that is missing or of an unexpected type.
pub fn missing(path: &Path, column: &str) -> Error {
    Error::format(path, format!("shard column '{column}' is missing or has an unexpected type"))
}
