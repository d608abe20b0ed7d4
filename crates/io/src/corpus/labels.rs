//! Per-cell labels from an obs column of the shards, by cell key: the targets of objectives
//! that predict a property of the whole cell (a cell type, an ontology term). Training batches
//! carry their cells' keys, so an objective looks its labels up here.

use std::collections::BTreeMap;

use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};

use super::columns::{is_obs_column, missing};
use super::{for_each_shard_batch, CorpusIndex};
use crate::error::{Error, Result};

/// No label for this cell (missing value): the cell adds nothing to a label loss.
pub const NO_LABEL: i64 = -100;

/// A label column over every cell of a corpus index, as codes into sorted distinct values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellLabels {
    pub column: String,
    /// The distinct values, sorted; a code is an index into them.
    pub names: Vec<String>,
    /// Code of each cell, by key (`NO_LABEL` where the value is missing).
    codes: Vec<i64>,
}

impl CellLabels {
    /// Reads `column` of every shard of `index` (checksums verified), in key order. Values of
    /// any obs type are labels by their text.
    pub fn read(index: &CorpusIndex, column: &str) -> Result<Self> {
        if !is_obs_column(column) {
            return Err(Error::Usage(format!("'{column}' is a token column, not an obs column")));
        }
        let mut values: Vec<Option<String>> = Vec::with_capacity(index.cells as usize);
        for shard in &index.shards {
            super::verify_shard(&shard.path, shard.bytes, &shard.sha256)?;
            for_each_shard_batch(&shard.path, |rb| append_values(rb, &shard.path, column, &mut values))?;
        }
        let mut codes_of: BTreeMap<&str, i64> = values.iter().flatten().map(|v| (v.as_str(), 0)).collect();
        for (code, slot) in codes_of.values_mut().enumerate() {
            *slot = code as i64;
        }
        let codes = values.iter().map(|v| v.as_deref().map_or(NO_LABEL, |v| codes_of[v])).collect();
        let names = codes_of.keys().map(|s| s.to_string()).collect();
        Ok(Self { column: column.to_string(), names, codes })
    }

    /// The code of cell `key` (`NO_LABEL` when missing or out of range).
    pub fn code(&self, key: u64) -> i64 {
        self.codes.get(key as usize).copied().unwrap_or(NO_LABEL)
    }

    /// Cells covered (the index's cell count).
    pub fn cells(&self) -> usize {
        self.codes.len()
    }
}

fn append_values(rb: &RecordBatch, path: &std::path::Path, column: &str, out: &mut Vec<Option<String>>) -> Result<()> {
    let array = rb.column_by_name(column).ok_or_else(|| missing(path, column))?;
    let format = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())
        .map_err(|e| Error::format(path, format!("column '{column}': {e}")))?;
    out.extend((0..array.len()).map(|i| array.is_valid(i).then(|| format.value(i).to_string())));
    Ok(())
}
