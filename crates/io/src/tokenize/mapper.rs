//! How a file's gene columns map onto the vocabulary.

use serde::{Deserialize, Serialize};

use crate::vocab::{GeneMatch, Vocabulary};

/// How a file's genes map onto the vocabulary.
#[derive(Clone, Debug)]
pub struct GeneMapper {
    pub(super) token_of_column: Vec<Option<u32>>,
    /// Per column: its token and the token's median, or [`UNMAPPED`] (and 1.0) — the layout the
    /// per-value loop of [`super::cell::ChunkTokenizer::tokenize`] reads without a branch.
    pub(super) column_table: Vec<(u32, f64)>,
    /// Whether several columns map to the same token (their counts are summed).
    pub(super) has_duplicates: bool,
    pub stats: MappingStats,
}

/// Counts of how a file's genes matched the vocabulary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingStats {
    pub genes_in_file: usize,
    pub matched_by_id: usize,
    pub matched_by_unversioned_id: usize,
    pub matched_by_symbol: usize,
    pub not_in_vocabulary: usize,
    /// Columns whose token another column already has (summed).
    pub duplicate_columns: usize,
}

impl GeneMapper {
    /// The vocabulary tokens the file measures (each once, ascending): a value model reads a
    /// zero of one of these as "measured, not detected".
    pub fn measured_tokens(&self) -> Vec<u32> {
        let mut tokens: Vec<u32> = self.token_of_column.iter().flatten().copied().collect();
        tokens.sort_unstable();
        tokens.dedup();
        tokens
    }

    pub fn new(vocab: &Vocabulary, gene_ids: &[String]) -> Self {
        let mut stats = MappingStats { genes_in_file: gene_ids.len(), ..Default::default() };
        let mut seen = vec![false; vocab.len()];
        let token_of_column = gene_ids
            .iter()
            .map(|g| {
                let m = vocab.lookup(g);
                match m {
                    Some(GeneMatch::Exact(_)) => stats.matched_by_id += 1,
                    Some(GeneMatch::Unversioned(_)) => stats.matched_by_unversioned_id += 1,
                    Some(GeneMatch::Symbol(_)) => stats.matched_by_symbol += 1,
                    None => stats.not_in_vocabulary += 1,
                }
                let t = m.map(GeneMatch::token)?;
                if std::mem::replace(&mut seen[t as usize], true) {
                    stats.duplicate_columns += 1;
                }
                Some(t)
            })
            .collect::<Vec<_>>();
        let column_table = token_of_column
            .iter()
            .map(|t| t.and_then(|t| Some((t, vocab.median(t)?))).unwrap_or((UNMAPPED, 1.0)))
            .collect();
        Self { token_of_column, column_table, has_duplicates: stats.duplicate_columns > 0, stats }
    }

    pub fn n_matched(&self) -> usize {
        self.token_of_column.iter().filter(|t| t.is_some()).count()
    }
}

impl MappingStats {
    /// The counts of several files together.
    pub fn add(&mut self, o: &Self) {
        self.genes_in_file += o.genes_in_file;
        self.matched_by_id += o.matched_by_id;
        self.matched_by_unversioned_id += o.matched_by_unversioned_id;
        self.matched_by_symbol += o.matched_by_symbol;
        self.not_in_vocabulary += o.not_in_vocabulary;
        self.duplicate_columns += o.duplicate_columns;
    }

    /// Genes matched by any route.
    pub fn matched(&self) -> usize {
        self.matched_by_id + self.matched_by_unversioned_id + self.matched_by_symbol
    }
}

/// Token of a column that is not in the vocabulary, in [`GeneMapper`]'s column table.
pub(super) const UNMAPPED: u32 = u32::MAX;
