//! Per-cell labels from an obs column of the shards, by cell key: the targets of objectives
//! that predict a property of the whole cell (a cell type, an ontology term). Training batches
//! carry their cells' keys, so an objective looks its labels up here.

use std::collections::BTreeMap;

use arrow_array::{Array, RecordBatch};
use arrow_cast::display::{ArrayFormatter, FormatOptions};

use super::columns::is_obs_column;
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
    /// any obs type are labels by their text. Atlases without the column have no labels (a
    /// corpus can mix labelled and unlabelled atlases); no atlas with it is an error.
    pub fn read(index: &CorpusIndex, column: &str) -> Result<Self> {
        if !is_obs_column(column) {
            return Err(Error::Usage(format!("'{column}' is a token column, not an obs column")));
        }
        // A hint only: the manifests' counts are checked against the rows as they are read.
        let mut values: Vec<Option<String>> = Vec::with_capacity(index.cells.min(1 << 20) as usize);
        let mut found = false;
        for shard in &index.shards {
            super::verify_shard(&shard.path, shard.bytes, &shard.sha256)?;
            let mut rows = 0u64;
            for_each_shard_batch(&shard.path, |rb| {
                rows += rb.num_rows() as u64;
                found |= append_values(rb, &shard.path, column, &mut values)?;
                Ok(())
            })?;
            shard.check_cells(rows)?;
        }
        if !found && !index.shards.is_empty() {
            return Err(Error::Usage(format!(
                "no atlas of the corpus ({}) has obs column '{column}' (store it with ingest --obs-columns)",
                index.atlases.join(", ")
            )));
        }
        let mut codes_of: BTreeMap<&str, i64> = values.iter().flatten().map(|v| (v.as_str(), 0)).collect();
        for (code, slot) in codes_of.values_mut().enumerate() {
            *slot = code as i64;
        }
        let codes = values.iter().map(|v| v.as_deref().map_or(NO_LABEL, |v| codes_of[v])).collect();
        let names = codes_of.keys().map(|s| s.to_string()).collect();
        Ok(Self { column: column.to_string(), names, codes })
    }

    /// The same labels coded by their index in `names` (a model's fixed label list); values
    /// not in `names` are returned, sorted, as the error.
    pub fn recode(&self, names: &[String]) -> std::result::Result<Self, Vec<String>> {
        let index: BTreeMap<&str, i64> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i as i64)).collect();
        let unknown: Vec<String> = self.names.iter().filter(|n| !index.contains_key(n.as_str())).cloned().collect();
        if !unknown.is_empty() {
            return Err(unknown);
        }
        let codes =
            self.codes.iter().map(|&c| if c < 0 { c } else { index[self.names[c as usize].as_str()] }).collect();
        Ok(Self { column: self.column.clone(), names: names.to_vec(), codes })
    }

    /// The label of cell `key` (`None` when missing).
    pub fn name(&self, key: u64) -> Option<&str> {
        let c = self.code(key);
        (c >= 0).then(|| self.names[c as usize].as_str())
    }

    /// Cells per label code (cells without a label left out).
    pub fn counts(&self) -> Vec<usize> {
        let mut n = vec![0usize; self.names.len()];
        for &c in &self.codes {
            if c >= 0 {
                n[c as usize] += 1;
            }
        }
        n
    }

    /// Labels given directly: `codes[key]` indexes `names` (`NO_LABEL`: none).
    pub fn with_codes(self, column: &str, names: Vec<String>, codes: Vec<i64>) -> Self {
        Self { column: column.to_string(), names, codes }
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

/// Appends a batch's values of `column` (all missing when this atlas' shards lack the column);
/// whether the column was there.
fn append_values(
    rb: &RecordBatch,
    path: &std::path::Path,
    column: &str,
    out: &mut Vec<Option<String>>,
) -> Result<bool> {
    match obs_text(rb, path, column)? {
        Some(values) => {
            out.extend(values);
            Ok(true)
        }
        None => {
            out.extend(std::iter::repeat_n(None, rb.num_rows()));
            Ok(false)
        }
    }
}

/// A shard batch's values of obs column `column` as text (`None` for missing values), or
/// `None` when the batch has no such column.
pub fn obs_text(rb: &RecordBatch, path: &std::path::Path, column: &str) -> Result<Option<Vec<Option<String>>>> {
    let Some(array) = rb.column_by_name(column) else { return Ok(None) };
    let format = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default())
        .map_err(|e| Error::format(path, format!("column '{column}': {e}")))?;
    Ok(Some((0..array.len()).map(|i| array.is_valid(i).then(|| format.value(i).to_string())).collect()))
}
