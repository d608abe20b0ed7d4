//! Scoring `annotate`'s calls against labels: an obs column of term ids, or of free-text labels
//! mapped to ids by a cell-type map. Labels the map leaves unmapped, and terms outside the
//! model's ontology slice, are counted and reported, not scored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::annotate::calls::{Annotator, CellCall};
use corrflow_algorithms::ontology::metrics::{score, DepthAccuracy, Judged, LabelLevel};
use corrflow_io::corpus::{obs_text, CellLabels, CorpusIndex};
use corrflow_io::error::{Error, Result};
use corrflow_io::ontology::map::CellTypeMap;

/// `annotate --truth COL [--truth-map MAP.tsv]`.
#[derive(Clone, Debug)]
pub struct Truth {
    pub column: String,
    pub map: Option<PathBuf>,
}

/// One label term's scores, named.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NamedLabelScore {
    pub id: String,
    pub label: String,
    pub cells: usize,
    pub exact_accuracy: f64,
    pub f1: f64,
}

/// How the calls match the labels (see `corrflow_algorithms::ontology::metrics`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TruthReport {
    pub column: String,
    pub scored_cells: usize,
    /// Cells without a label.
    pub missing: u64,
    /// Cells whose label the map leaves unmapped, by label.
    pub unmapped: BTreeMap<String, u64>,
    /// Cells whose term is not in the model's ontology slice, by term id.
    pub outside_head: BTreeMap<String, u64>,
    pub exact_accuracy: f64,
    pub ancestor_tolerant_accuracy: f64,
    pub macro_f1: f64,
    pub by_depth: Vec<DepthAccuracy>,
    pub per_label: Vec<NamedLabelScore>,
}

impl Truth {
    /// Reads the map (its rows for `--truth`'s column are checked by [`Scorer::prepare`], once
    /// the input is known to have that column, so a wrong column is not blamed on the map).
    pub(crate) fn open(&self, _annotator: &Annotator) -> Result<Scorer> {
        let (map, map_columns) = match &self.map {
            None => (None, Vec::new()),
            Some(p) => {
                let all = CellTypeMap::read(p)?;
                let mut columns: Vec<String> = all.rows.iter().map(|r| r.column.clone()).collect();
                columns.dedup();
                (Some(all.for_column(&self.column)), columns)
            }
        };
        Ok(Scorer { column: self.column.clone(), map, map_path: self.map.clone(), map_columns, ..Default::default() })
    }
}

/// The labels of a batch's cells: the text and the term id.
pub(crate) struct RowTruth {
    pub labels: Vec<Option<String>>,
    pub ids: Vec<Option<String>>,
}

#[derive(Default)]
pub(crate) struct Scorer {
    column: String,
    map: Option<BTreeMap<String, Option<String>>>,
    map_path: Option<PathBuf>,
    /// The columns the map has rows for.
    map_columns: Vec<String>,
    /// The label terms of the input split the head's leaves (macro-F1 at their level).
    level: Option<LabelLevel>,
    /// (label id, leaf id, call id, label-level class id) of each scored cell.
    judged: Vec<(String, String, Option<String>, Option<String>)>,
    unmapped: BTreeMap<String, u64>,
    outside: BTreeMap<String, u64>,
    missing: u64,
}

impl Scorer {
    pub(crate) fn column(&self) -> &str {
        &self.column
    }

    /// Reads the input's labels once (from the tokenized input) to know the label terms before
    /// any cell is scored.
    pub(crate) fn prepare(&mut self, index: &CorpusIndex, annotator: &Annotator) -> Result<()> {
        let labels = CellLabels::read(index, &self.column)?;
        self.check_labels(&labels.names)?;
        let o = annotator.head.ontology();
        let mut terms: Vec<u32> = labels
            .names
            .iter()
            .filter_map(|l| match &self.map {
                None => Some(l.clone()),
                Some(map) => map.get(l).cloned().flatten(),
            })
            .filter_map(|id| o.find(&id))
            .collect();
        terms.sort_unstable();
        terms.dedup();
        self.level = Some(LabelLevel::new(&annotator.head, &terms));
        Ok(())
    }

    /// Refuses labels that cannot be scored at all: a map without rows for the column, or
    /// free-text labels (no term id among them) without a map.
    fn check_labels(&self, names: &[String]) -> Result<()> {
        match (&self.map, &self.map_path) {
            (Some(map), Some(path)) if map.is_empty() => Err(Error::format(
                path,
                format!(
                    "--truth-map has no rows for --truth's column '{}' (it maps: {}); its first field names the obs column",
                    self.column,
                    self.map_columns.join(", ")
                ),
            )),
            (None, _) if !names.is_empty() && !names.iter().any(|l| looks_like_term_id(l)) => {
                let examples: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
                Err(Error::Usage(format!(
                    "--truth '{}' holds labels, not ontology term ids (e.g. '{}'): give --truth-map MAP.tsv (from `corrflow ontology map`) to map them to ids",
                    self.column,
                    examples.join("', '")
                )))
            }
            _ => Ok(()),
        }
    }

    /// Records a batch's cells (their calls, and leaf probabilities `k` per cell); their labels
    /// and ids for the output columns.
    pub(crate) fn add(
        &mut self,
        rb: &RecordBatch,
        path: &Path,
        calls: &[CellCall],
        (probabilities, k): (&[f32], usize),
        annotator: &Annotator,
    ) -> Result<RowTruth> {
        let labels = obs_text(rb, path, &self.column)?
            .ok_or_else(|| Error::format(path, format!("obs column '{}' is missing", self.column)))?;
        let mut ids = Vec::with_capacity(labels.len());
        for (i, (label, call)) in labels.iter().zip(calls).enumerate() {
            let id = match (label, &self.map) {
                (None, _) => {
                    self.missing += 1;
                    None
                }
                (Some(l), None) => Some(l.clone()),
                (Some(l), Some(map)) => match map.get(l) {
                    Some(Some(id)) => Some(id.clone()),
                    Some(None) => {
                        *self.unmapped.entry(l.clone()).or_default() += 1;
                        None
                    }
                    None => {
                        let map = self.map_path.as_deref().unwrap_or(Path::new("the map"));
                        return Err(Error::format(
                            map,
                            format!("has no row for label '{l}' of column '{}' (add one; an empty cl_id leaves it unmapped)", self.column),
                        ));
                    }
                },
            };
            if let Some(id) = &id {
                let o = annotator.head.ontology();
                let class = self.level.as_ref().and_then(|l| l.predict(&probabilities[i * k..(i + 1) * k]));
                self.judged.push((
                    id.clone(),
                    call.leaf.id.clone(),
                    call.call.as_ref().map(|c| c.id.clone()),
                    class.map(|t| o.term(t).id.clone()),
                ));
            }
            ids.push(id);
        }
        Ok(RowTruth { labels, ids })
    }

    pub(crate) fn report(self, annotator: &Annotator) -> TruthReport {
        let o = annotator.head.ontology();
        let mut outside = self.outside;
        let judged: Vec<Judged> = self
            .judged
            .iter()
            .filter_map(|(label, leaf, call, class)| match o.find(label) {
                Some(l) => Some(Judged {
                    label: l,
                    leaf: o.find(leaf).expect("calls name terms of the head"),
                    reliable: call.as_deref().and_then(|c| o.find(c)),
                    class: class.as_deref().and_then(|c| o.find(c)),
                }),
                None => {
                    *outside.entry(label.clone()).or_default() += 1;
                    None
                }
            })
            .collect();
        let s = score(o, &judged);
        TruthReport {
            column: self.column,
            scored_cells: s.cells,
            missing: self.missing,
            unmapped: self.unmapped,
            outside_head: outside,
            exact_accuracy: s.exact_accuracy,
            ancestor_tolerant_accuracy: s.ancestor_tolerant_accuracy,
            macro_f1: s.macro_f1,
            by_depth: s.by_depth,
            per_label: s
                .per_label
                .iter()
                .map(|l| NamedLabelScore {
                    id: o.term(l.term).id.clone(),
                    label: o.term(l.term).label.clone(),
                    cells: l.cells,
                    exact_accuracy: l.exact_accuracy,
                    f1: l.f1,
                })
                .collect(),
        }
    }
}

/// Whether `label` has the shape of an ontology term id (`PREFIX:DIGITS`, as `CL:0000236`).
fn looks_like_term_id(label: &str) -> bool {
    match label.split_once(':') {
        Some((prefix, number)) => {
            !prefix.is_empty()
                && prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !number.is_empty()
                && number.chars().all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn term_ids_are_told_from_free_text_labels() {
        for id in ["CL:0000236", "UBERON:0002107", "my_onto:1"] {
            assert!(super::looks_like_term_id(id), "{id}");
        }
        for label in ["B cell", "CD4+ T", "CL:", ":12", "CL:12a", "T:cell"] {
            assert!(!super::looks_like_term_id(label), "{label}");
        }
    }
}
