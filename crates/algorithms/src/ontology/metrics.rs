//! How well hierarchical calls match labels given at any depth of the ontology.
//!
//! For a cell labelled `y` with leaf-argmax `l̂` and reliable call `r`:
//! - **exact**: `y` is in `l̂`'s lineage: read at the label's own depth, the call is the label
//!   (the leaf itself for a leaf label, a leaf of the right subtree for a coarse one);
//! - **ancestor-tolerant**: `r` is `y`, an ancestor of `y` (a coarser but true call) or a
//!   descendant of `y`;
//! - **at depth d** (cells whose label is at depth ≥ d): every term of `y`'s lineage at depth `d`
//!   is in `l̂`'s lineage;
//! - **macro-F1 at the labels' own level**: each cell's predicted class is the deepest of the
//!   evaluated label terms in `l̂`'s lineage (none: a miss), F1 per label term, mean over terms.

use serde::{Deserialize, Serialize};

use super::Ontology;
use crate::classes::{f1_scores, macro_mean};

/// One evaluated cell: its label term and its calls (terms of the same ontology).
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    pub label: u32,
    pub leaf: u32,
    pub reliable: Option<u32>,
}

/// Accuracy at one depth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepthAccuracy {
    pub depth: u32,
    pub cells: usize,
    pub accuracy: f64,
}

/// One label term's scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabelScore {
    pub term: u32,
    pub cells: usize,
    pub exact_accuracy: f64,
    pub f1: f64,
}

/// The hierarchical scores of a set of cells.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HierarchicalScores {
    pub cells: usize,
    pub exact_accuracy: f64,
    pub ancestor_tolerant_accuracy: f64,
    pub by_depth: Vec<DepthAccuracy>,
    pub macro_f1: f64,
    pub per_label: Vec<LabelScore>,
}

/// Scores `cells` (see the module documentation).
pub fn score(o: &Ontology, cells: &[Judged]) -> HierarchicalScores {
    let mut labels: Vec<u32> = cells.iter().map(|c| c.label).collect();
    labels.sort_unstable();
    labels.dedup();
    let class_of = |t: u32| labels.binary_search(&t).ok();
    let (mut exact, mut tolerant) = (0usize, 0usize);
    let max_depth = labels.iter().map(|&t| o.depth(t)).max().unwrap_or(0);
    let mut depth_hits = vec![(0usize, 0usize); max_depth as usize + 1];
    let (mut truth, mut pred) = (Vec::with_capacity(cells.len()), Vec::with_capacity(cells.len()));
    let mut exact_by_label = vec![0usize; labels.len()];
    for c in cells {
        let predicted = o.lineage(c.leaf);
        let label_lineage = o.lineage(c.label);
        let hit = predicted.contains(&c.label);
        exact += usize::from(hit);
        if hit {
            exact_by_label[class_of(c.label).unwrap_or(0)] += 1;
        }
        tolerant +=
            usize::from(c.reliable.is_some_and(|r| label_lineage.contains(&r) || o.lineage(r).contains(&c.label)));
        for (d, slot) in depth_hits.iter_mut().enumerate().take(o.depth(c.label) as usize + 1) {
            let at_d: Vec<u32> = label_lineage.iter().copied().filter(|&a| o.depth(a) as usize == d).collect();
            slot.0 += 1;
            slot.1 += usize::from(!at_d.is_empty() && at_d.iter().all(|a| predicted.contains(a)));
        }
        truth.push(class_of(c.label).unwrap_or(0));
        // The deepest label term on the predicted lineage (ties: the lower term index).
        let best =
            predicted.iter().copied().filter_map(|t| class_of(t).map(|k| (o.depth(t), std::cmp::Reverse(t), k))).max();
        pred.push(best.map_or(labels.len(), |(_, _, k)| k));
    }
    let (f1, support) = f1_scores(&truth, &pred, labels.len() + 1);
    let n = cells.len().max(1) as f64;
    HierarchicalScores {
        cells: cells.len(),
        exact_accuracy: exact as f64 / n,
        ancestor_tolerant_accuracy: tolerant as f64 / n,
        by_depth: depth_hits
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| *n > 0)
            .map(|(d, &(n, h))| DepthAccuracy { depth: d as u32, cells: n, accuracy: h as f64 / n as f64 })
            .collect(),
        macro_f1: macro_mean(&f1[..labels.len()]),
        per_label: labels
            .iter()
            .enumerate()
            .map(|(k, &t)| LabelScore {
                term: t,
                cells: support[k],
                exact_accuracy: exact_by_label[k] as f64 / support[k].max(1) as f64,
                f1: f1[k],
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ontology::toy;

    #[test]
    fn coarse_labels_count_finer_calls_and_depth_scores_follow_the_lineage() {
        let o = toy();
        let f = |id| o.find(id).unwrap();
        let j = |label, leaf, reliable| Judged { label: f(label), leaf: f(leaf), reliable: Some(f(reliable)) };
        let cells = [
            j("n8", "n8", "n8"),    // exact leaf
            j("T", "m8", "CD8"),    // coarse label, finer call: exact at the label's level
            j("n8", "m8", "CD8"),   // wrong leaf, but the reliable call is an ancestor: tolerant
            j("CD8", "mono", "my"), // wrong everywhere below the root
        ];
        let s = score(&o, &cells);
        assert_eq!(s.cells, 4);
        assert!((s.exact_accuracy - 0.5).abs() < 1e-12);
        assert!((s.ancestor_tolerant_accuracy - 0.75).abs() < 1e-12);
        let at = |d: u32| s.by_depth.iter().find(|x| x.depth == d).unwrap().clone();
        // Depth 0 (cell): all 4. Depth 1 (T): the first three. Depth 2 (CD8): cells 1, 3, 4
        // have labels that deep; 1 and 3 are under CD8. Depth 3 (n8): cells 1 and 3; only 1.
        assert_eq!((at(0).cells, at(0).accuracy), (4, 1.0));
        assert_eq!((at(1).cells, at(1).accuracy), (4, 0.75));
        assert_eq!(at(2).cells, 3);
        assert!((at(2).accuracy - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!((at(3).cells, at(3).accuracy), (2, 0.5));
        // Classes: T, CD8, n8 (term order).
        let per: Vec<(String, usize)> = s.per_label.iter().map(|l| (o.term(l.term).id.clone(), l.cells)).collect();
        assert_eq!(per, [("T".to_string(), 1), ("CD8".to_string(), 1), ("n8".to_string(), 2)]);
        // Predicted classes: n8 ✓, CD8 (m8 → deepest label on its lineage) ✗ for T, CD8 ✗ for
        // n8, none for cell 4. F1: T 0, CD8 0 (2 false positives, 1 miss), n8 2/3.
        let f1: Vec<f64> = s.per_label.iter().map(|l| l.f1).collect();
        assert_eq!(f1[0], 0.0);
        assert_eq!(f1[1], 0.0);
        assert!((f1[2] - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.macro_f1 - 2.0 / 9.0).abs() < 1e-12);
    }
}
