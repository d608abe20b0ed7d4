//! How well hierarchical calls match labels given at any depth of the ontology.
//!
//! For a cell labelled `y` with leaf-argmax `l̂` and reliable call `r`:
//! - **exact**: `y` is in `l̂`'s lineage: read at the label's own depth, the call is the label
//!   (the leaf itself for a leaf label, a leaf of the right subtree for a coarse one);
//! - **ancestor-tolerant**: `r` is `y`, an ancestor of `y` (a coarser but true call) or a
//!   descendant of `y`;
//! - **at depth d** (cells whose label is at depth ≥ d): every term of `y`'s lineage at depth `d`
//!   is in `l̂`'s lineage;
//! - **macro-F1 at the labels' own level**: the evaluated label terms split the leaves (each leaf
//!   goes to the deepest label term above it; leaves under none go to "other"); a cell's
//!   predicted class is the part with the most probability mass ([`LabelLevel`]; "other": a
//!   miss); F1 per label term, mean over terms.

use serde::{Deserialize, Serialize};

use super::hce::LeafHead;
use super::Ontology;
use crate::classes::{f1_scores, macro_mean};

/// One evaluated cell: its label term and its calls (terms of the same ontology).
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    pub label: u32,
    pub leaf: u32,
    pub reliable: Option<u32>,
    /// The label-level class ([`LabelLevel::predict`]); `None`: "other".
    pub class: Option<u32>,
}

/// Classification at the labels' own level: a set of label terms (at any depths) splits a head's
/// leaves, each leaf going to the deepest label term above it (ties: the lower term), so a
/// coarse label's class holds only the leaves no finer label claims.
#[derive(Clone, Debug)]
pub struct LabelLevel {
    /// Per head output, the label term its leaf belongs to.
    part: Vec<Option<u32>>,
}

impl LabelLevel {
    pub fn new(head: &LeafHead, labels: &[u32]) -> Self {
        let o = head.ontology();
        let part = head
            .outputs()
            .iter()
            .map(|&leaf| {
                let lineage = o.lineage(leaf);
                labels
                    .iter()
                    .copied()
                    .filter(|l| lineage.contains(l))
                    .max_by_key(|&l| (o.depth(l), std::cmp::Reverse(l)))
            })
            .collect();
        Self { part }
    }

    /// The label term whose part holds the most probability (`None` when the leaves under no
    /// label term hold more).
    pub fn predict(&self, leaf_probabilities: &[f32]) -> Option<u32> {
        let mut mass: Vec<(Option<u32>, f64)> = Vec::new();
        for (p, &class) in leaf_probabilities.iter().zip(&self.part) {
            match mass.iter_mut().find(|(c, _)| *c == class) {
                Some(slot) => slot.1 += f64::from(*p),
                None => mass.push((class, f64::from(*p))),
            }
        }
        mass.sort_by_key(|(c, _)| c.map_or(0, |t| t as u64 + 1));
        mass.iter()
            .fold(None, |best: Option<(Option<u32>, f64)>, &(c, m)| match best {
                Some((_, bm)) if bm >= m => best,
                _ => Some((c, m)),
            })?
            .0
    }
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
    fn label_terms_split_the_leaves_and_the_heaviest_part_is_the_class() {
        let head = LeafHead::new(toy());
        let o = head.ontology();
        let f = |id| o.find(id).unwrap();
        // Labels T (coarse) and n8 (a leaf under it): T's part is m8 and dbl; DC and mono are
        // under no label ("other").
        let level = LabelLevel::new(&head, &[f("T"), f("n8")]);
        // Leaves: n8, m8, dbl, mono, DC.
        assert_eq!(level.predict(&[0.4, 0.2, 0.1, 0.2, 0.1]), Some(f("n8")));
        assert_eq!(level.predict(&[0.3, 0.25, 0.25, 0.1, 0.1]), Some(f("T")));
        assert_eq!(level.predict(&[0.1, 0.1, 0.1, 0.4, 0.3]), None);
    }

    #[test]
    fn coarse_labels_count_finer_calls_and_depth_scores_follow_the_lineage() {
        let o = toy();
        let f = |id: &str| o.find(id).unwrap();
        let j = |label: &str, leaf: &str, reliable: &str, class: Option<&str>| Judged {
            label: f(label),
            leaf: f(leaf),
            reliable: Some(f(reliable)),
            class: class.and_then(|c| o.find(c)),
        };
        let cells = [
            j("n8", "n8", "n8", Some("n8")),   // exact leaf
            j("T", "m8", "CD8", Some("CD8")),  // coarse label, finer call: exact at the label's level
            j("n8", "m8", "CD8", Some("CD8")), // wrong leaf, but the reliable call is an ancestor: tolerant
            j("CD8", "mono", "my", None),      // wrong everywhere below the root
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
        // Predicted classes: n8 ✓, CD8 ✗ for T, CD8 ✗ for n8, other for cell 4. F1: T 0, CD8 0
        // (2 false positives, 1 miss), n8 2/3.
        let f1: Vec<f64> = s.per_label.iter().map(|l| l.f1).collect();
        assert_eq!(f1[0], 0.0);
        assert_eq!(f1[1], 0.0);
        assert!((f1[2] - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.macro_f1 - 2.0 / 9.0).abs() < 1e-12);
    }
}
