//! Scoring `annotate`'s calls against labels: an obs column of term ids, or of free-text labels
//! mapped to ids by a cell-type map. Labels the map leaves unmapped, and terms outside the
//! model's ontology slice, are counted and reported, not scored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use serde::{Deserialize, Serialize};

use corrflow_algorithms::ontology::metrics::{score, DepthAccuracy, Judged, LabelLevel};
use corrflow_io::corpus::{obs_text, CellLabels, CorpusIndex};
use corrflow_io::error::{Error, Result};
use corrflow_io::ontology::calls::{Annotator, CellCall};
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
    pub(crate) fn open(&self, _annotator: &Annotator) -> Result<Scorer> {
        let map = match &self.map {
            None => None,
            Some(p) => {
                let m = CellTypeMap::read(p)?.for_column(&self.column);
                if m.is_empty() {
                    return Err(Error::format(p, format!("has no rows for column '{}'", self.column)));
                }
                Some(m)
            }
        };
        Ok(Scorer { column: self.column.clone(), map, map_path: self.map.clone(), ..Default::default() })
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
