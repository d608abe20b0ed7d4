//! What a fine-tuning run learns from: the classes, and for each cell (cell classification) or
//! each gene token (gene classification) its class and the part of the split it is in.

use std::path::PathBuf;

use corrflow_algorithms::classes::{stratified_split, Part};
use corrflow_io::corpus::{CellLabels, CorpusIndex, NO_LABEL};
use corrflow_io::error::{Error, Result};
use corrflow_io::vocab::Vocabulary;
use serde::{Deserialize, Serialize};

use corrflow_io::util::csv::read_gene_classes;

/// What is classified, and where its labels come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "task")]
pub enum FinetuneTask {
    /// Whole cells, labelled by an obs column stored in the corpus (`ingest --obs-columns`);
    /// cells whose label is in `exclude` are left out (as cells without a label).
    Cell {
        column: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        exclude: Vec<String>,
    },
    /// Genes, labelled by a CSV (`id_column`, one column per class marked `Yes`/`1`/`true`):
    /// every occurrence of a labelled gene in a cell is a training or evaluation item.
    Gene { labels: PathBuf, id_column: String, class_columns: Vec<String> },
}

/// Items (cells or genes) per part of the split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartSizes {
    pub train: usize,
    pub validation: usize,
    pub test: usize,
    /// Cells without a label, or labelled genes not in the vocabulary.
    pub left_out: usize,
}

/// The classes and each item's class and part.
pub(crate) struct Supervision {
    pub classes: Vec<String>,
    /// By cell key (cells) or by token id (genes).
    pub label: Vec<Option<(usize, Part)>>,
    pub genes: bool,
    pub sizes: PartSizes,
    /// Training items per class (for class weights).
    pub train_counts: Vec<usize>,
}

impl Supervision {
    pub fn resolve(
        task: &FinetuneTask,
        index: &CorpusIndex,
        vocab: &Vocabulary,
        validation: f64,
        test: f64,
        seed: u64,
    ) -> Result<Self> {
        let (classes, codes, genes, left_out) = match task {
            FinetuneTask::Cell { column, exclude } => {
                let labels = CellLabels::read(index, column)?;
                if let Some(x) = exclude.iter().find(|x| !labels.names.contains(x)) {
                    return Err(Error::Usage(format!(
                        "--exclude '{x}' is not a value of '{column}' (values: {})",
                        labels.names.join(", ")
                    )));
                }
                // Codes of the kept classes, in the order of the column's sorted values.
                let kept: Vec<String> = labels.names.iter().filter(|n| !exclude.contains(n)).cloned().collect();
                let recode: Vec<Option<usize>> =
                    labels.names.iter().map(|n| kept.iter().position(|k| k == n)).collect();
                let codes: Vec<Option<usize>> = (0..index.cells)
                    .map(|k| Some(labels.code(k)).filter(|&c| c != NO_LABEL).and_then(|c| recode[c as usize]))
                    .collect();
                let left_out = codes.iter().filter(|c| c.is_none()).count();
                (kept, codes, false, left_out)
            }
            FinetuneTask::Gene { labels, id_column, class_columns } => {
                if class_columns.len() < 2 {
                    return Err(Error::Usage("gene classification needs at least 2 class columns".into()));
                }
                let rows = read_gene_classes(labels, id_column, class_columns)?;
                let mut codes = vec![None; vocab.len()];
                let mut missing = 0;
                for (gene, class) in &rows {
                    match vocab.lookup(gene) {
                        Some(m) => codes[m.token() as usize] = Some(*class),
                        None => missing += 1,
                    }
                }
                (class_columns.clone(), codes, true, missing)
            }
        };
        let source = match task {
            FinetuneTask::Cell { column, .. } => format!("obs column '{column}'"),
            FinetuneTask::Gene { labels, .. } => labels.display().to_string(),
        };
        if classes.len() < 2 {
            return Err(Error::Usage(format!("{source} has {} classes; fine-tuning needs at least 2", classes.len())));
        }
        let parts = stratified_split(&codes, validation, test, seed);
        let mut sizes = PartSizes { left_out, ..PartSizes::default() };
        let mut train_counts = vec![0; classes.len()];
        let label: Vec<Option<(usize, Part)>> = codes
            .iter()
            .zip(&parts)
            .map(|(c, p)| {
                let (c, p) = (c.as_ref()?, p.as_ref()?);
                match p {
                    Part::Train => {
                        sizes.train += 1;
                        train_counts[*c] += 1;
                    }
                    Part::Validation => sizes.validation += 1,
                    Part::Test => sizes.test += 1,
                }
                Some((*c, *p))
            })
            .collect();
        if sizes.train == 0 || sizes.validation == 0 {
            return Err(Error::Usage(format!(
                "{source}: {} training and {} validation items; fine-tuning needs both (too few labelled {})",
                sizes.train,
                sizes.validation,
                if genes { "genes in the vocabulary" } else { "cells" }
            )));
        }
        Ok(Self { classes, label, genes, sizes, train_counts })
    }

    /// The class and part of cell `key` (cells) or token `t` (genes).
    pub fn of(&self, item: u64) -> Option<(usize, Part)> {
        self.label.get(item as usize).copied().flatten()
    }

    /// The training cells by key (cell classification): the data plan's subset.
    pub fn training_cells(&self) -> Vec<bool> {
        self.label.iter().map(|l| matches!(l, Some((_, Part::Train)))).collect()
    }
}
