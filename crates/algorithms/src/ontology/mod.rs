//! A cell-type ontology as a DAG (the Cell Ontology's `is_a` graph), and the hierarchical
//! classification built on it (BMFM-RNA §4.2): a softmax over leaves whose probabilities roll up
//! to every ancestor ([`hce`]), the two decoders ([`decode`]) and the hierarchical scores
//! ([`metrics`]).
//!
//! Terms are addressed by their index in [`Ontology::terms`]; ids (`CL:0000084`) are the
//! stable names that files and checkpoints use.

pub mod decode;
pub mod hce;
pub mod metrics;

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

/// One term: its id, label, synonyms and the ids of its direct parents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Term {
    pub id: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synonyms: Vec<String>,
    #[serde(default)]
    pub parents: Vec<String>,
}

/// Why a set of terms is not an ontology.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OntologyError {
    #[error("the ontology has no terms")]
    Empty,
    #[error("term id '{0}' appears twice")]
    Duplicate(String),
    #[error("term '{term}' names parent '{parent}', which is not a term of the ontology")]
    UnknownParent { term: String, parent: String },
    #[error("the parent relation has a cycle through '{0}'")]
    Cycle(String),
}

/// How a text matched a term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchKind {
    /// The term's id itself.
    Id,
    /// The label, ignoring case and punctuation.
    Exact,
    /// A synonym, ignoring case and punctuation.
    Synonym,
}

/// The DAG: terms, parents and children by index, depths, leaves.
#[derive(Clone, Debug)]
pub struct Ontology {
    terms: Vec<Term>,
    parents: Vec<Vec<u32>>,
    children: Vec<Vec<u32>>,
    by_id: HashMap<String, u32>,
    /// Longest path from a root (roots 0): a child is always deeper than each of its parents.
    depth: Vec<u32>,
    /// Terms in an order where parents come before children.
    topological: Vec<u32>,
    leaves: Vec<u32>,
}

impl Ontology {
    /// Builds the DAG, checking that every parent is a term and that there is no cycle.
    pub fn new(terms: Vec<Term>) -> Result<Self, OntologyError> {
        if terms.is_empty() {
            return Err(OntologyError::Empty);
        }
        let mut by_id = HashMap::with_capacity(terms.len());
        for (i, t) in terms.iter().enumerate() {
            if by_id.insert(t.id.clone(), i as u32).is_some() {
                return Err(OntologyError::Duplicate(t.id.clone()));
            }
        }
        let mut parents = vec![Vec::new(); terms.len()];
        let mut children = vec![Vec::new(); terms.len()];
        for (i, t) in terms.iter().enumerate() {
            for p in &t.parents {
                let &pi = by_id
                    .get(p)
                    .ok_or_else(|| OntologyError::UnknownParent { term: t.id.clone(), parent: p.clone() })?;
                if !parents[i].contains(&pi) {
                    parents[i].push(pi);
                    children[pi as usize].push(i as u32);
                }
            }
        }
        for c in &mut children {
            c.sort_unstable();
        }
        let topological = topological_order(&parents, &children)
            .map_err(|stuck| OntologyError::Cycle(terms[stuck as usize].id.clone()))?;
        let mut depth = vec![0u32; terms.len()];
        for &t in &topological {
            depth[t as usize] = parents[t as usize].iter().map(|&p| depth[p as usize] + 1).max().unwrap_or(0);
        }
        let leaves = (0..terms.len() as u32).filter(|&i| children[i as usize].is_empty()).collect();
        Ok(Self { terms, parents, children, by_id, depth, topological, leaves })
    }

    pub fn len(&self) -> usize {
        self.terms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn terms(&self) -> &[Term] {
        &self.terms
    }

    pub fn term(&self, t: u32) -> &Term {
        &self.terms[t as usize]
    }

    /// The index of the term with id `id`.
    pub fn find(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    pub fn parents(&self, t: u32) -> &[u32] {
        &self.parents[t as usize]
    }

    pub fn children(&self, t: u32) -> &[u32] {
        &self.children[t as usize]
    }

    pub fn depth(&self, t: u32) -> u32 {
        self.depth[t as usize]
    }

    /// Terms without parents.
    pub fn roots(&self) -> Vec<u32> {
        (0..self.len() as u32).filter(|&t| self.parents[t as usize].is_empty()).collect()
    }

    /// Terms without children, in index order.
    pub fn leaves(&self) -> &[u32] {
        &self.leaves
    }

    pub fn is_leaf(&self, t: u32) -> bool {
        self.children[t as usize].is_empty()
    }

    /// Every ancestor of `t`, `t` itself included (its lineage), sorted.
    pub fn lineage(&self, t: u32) -> BTreeSet<u32> {
        self.closure(t, &self.parents)
    }

    /// Every descendant of `t`, `t` itself included, sorted.
    pub fn subtree(&self, t: u32) -> BTreeSet<u32> {
        self.closure(t, &self.children)
    }

    /// The leaves under `t` (`t` itself when it is a leaf), sorted.
    pub fn descendant_leaves(&self, t: u32) -> Vec<u32> {
        self.subtree(t).into_iter().filter(|&d| self.is_leaf(d)).collect()
    }

    /// Whether `a` is `d` or one of its ancestors.
    pub fn is_ancestor_or_self(&self, a: u32, d: u32) -> bool {
        a == d || self.lineage(d).contains(&a)
    }

    fn closure(&self, t: u32, edges: &[Vec<u32>]) -> BTreeSet<u32> {
        let mut seen = BTreeSet::from([t]);
        let mut stack = vec![t];
        while let Some(x) = stack.pop() {
            for &y in &edges[x as usize] {
                if seen.insert(y) {
                    stack.push(y);
                }
            }
        }
        seen
    }

    /// The terms `text` names: its id, else terms whose label, else whose synonym, equals it
    /// ignoring case and punctuation. Several terms can share a synonym; all are returned.
    pub fn lookup(&self, text: &str) -> Vec<(u32, MatchKind)> {
        if let Some(t) = self.find(text.trim()) {
            return vec![(t, MatchKind::Id)];
        }
        let key = normalize(text);
        if key.is_empty() {
            return Vec::new();
        }
        let exact: Vec<_> = (0..self.len() as u32)
            .filter(|&t| normalize(&self.term(t).label) == key)
            .map(|t| (t, MatchKind::Exact))
            .collect();
        if !exact.is_empty() {
            return exact;
        }
        (0..self.len() as u32)
            .filter(|&t| self.term(t).synonyms.iter().any(|s| normalize(s) == key))
            .map(|t| (t, MatchKind::Synonym))
            .collect()
    }

    /// The sub-DAG a hierarchical head over `labels` lives in: every leaf under a label term,
    /// and every ancestor of those leaves, with the parent edges among them (synonyms dropped).
    /// Its leaves are exactly those leaves; term order follows ids.
    pub fn slice(&self, labels: &[u32]) -> Ontology {
        let leaves: BTreeSet<u32> = labels.iter().flat_map(|&l| self.descendant_leaves(l)).collect();
        let keep: BTreeSet<u32> = leaves.iter().flat_map(|&l| self.lineage(l)).collect();
        let mut terms: Vec<Term> = keep
            .iter()
            .map(|&t| {
                let term = self.term(t);
                let mut parents: Vec<String> = self.parents(t).iter().map(|&p| self.term(p).id.clone()).collect();
                parents.sort();
                Term { id: term.id.clone(), label: term.label.clone(), synonyms: Vec::new(), parents }
            })
            .collect();
        terms.sort_by(|a, b| a.id.cmp(&b.id));
        // Parents of kept terms are ancestors of kept leaves, so kept: this cannot fail.
        Ontology::new(terms).expect("a slice of a valid ontology is valid") // ok: invariant
    }

    /// Terms in an order where every parent comes before its children.
    pub fn topological(&self) -> &[u32] {
        &self.topological
    }
}

/// Lower case letters, digits and `+` (which carries meaning: "CD14+"), with every run of
/// other punctuation and spaces one space: `"T-cell"` equals `"T cell"`, `"CD14+ Mono"` equals
/// `"cd14+ mono"`.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_alphanumeric() || c == '+' {
            out.extend(c.to_lowercase());
        } else if c == '-' || c.is_whitespace() || c.is_ascii_punctuation() {
            // Separators collapse to one space, so "T-cell" equals "T cell".
            if !out.ends_with(' ') && !out.is_empty() {
                out.push(' ');
            }
        }
    }
    out.trim_end().to_string()
}

/// Kahn's order, or a term on (or below) a cycle.
fn topological_order(parents: &[Vec<u32>], children: &[Vec<u32>]) -> Result<Vec<u32>, u32> {
    let mut waiting: Vec<usize> = parents.iter().map(Vec::len).collect();
    let mut ready: Vec<u32> = (0..parents.len() as u32).filter(|&t| waiting[t as usize] == 0).rev().collect();
    let mut order = Vec::with_capacity(parents.len());
    while let Some(t) = ready.pop() {
        order.push(t);
        for &c in children[t as usize].iter().rev() {
            waiting[c as usize] -= 1;
            if waiting[c as usize] == 0 {
                ready.push(c);
            }
        }
    }
    if order.len() == parents.len() {
        return Ok(order);
    }
    // Walk up unfinished parents from an unfinished term until a term repeats: it is on a cycle.
    let mut at = (0..parents.len()).find(|&t| waiting[t] > 0).unwrap_or(0) as u32;
    let mut seen = std::collections::HashSet::new();
    while seen.insert(at) {
        match parents[at as usize].iter().find(|&&p| waiting[p as usize] > 0) {
            Some(&p) => at = p,
            None => break,
        }
    }
    Err(at)
}

/// A toy ontology for tests (here and in the modules below):
///
/// ```text
///            cell
///          /      \
///      T cell    myeloid
///      /    \       |    \
///   CD4 T  CD8 T   mono   DC
///          /    \
///      naive8  memory8      (and "double" under both CD4 T and CD8 T)
/// ```
#[cfg(test)]
pub(crate) fn toy() -> Ontology {
    let t = |id: &str, label: &str, parents: &[&str]| Term {
        id: id.into(),
        label: label.into(),
        synonyms: if id == "T" { vec!["T lymphocyte".into()] } else { vec![] },
        parents: parents.iter().map(|p| p.to_string()).collect(),
    };
    Ontology::new(vec![
        t("cell", "cell", &[]),
        t("T", "T cell", &["cell"]),
        t("my", "myeloid cell", &["cell"]),
        t("CD4", "CD4-positive T cell", &["T"]),
        t("CD8", "CD8-positive T cell", &["T"]),
        t("n8", "naive CD8 T cell", &["CD8"]),
        t("m8", "memory CD8 T cell", &["CD8"]),
        t("dbl", "double-positive T cell", &["CD4", "CD8"]),
        t("mono", "monocyte", &["my"]),
        t("DC", "dendritic cell", &["my"]),
    ])
    .expect("toy ontology")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(o: &Ontology, ts: impl IntoIterator<Item = u32>) -> Vec<String> {
        ts.into_iter().map(|t| o.term(t).id.clone()).collect()
    }

    #[test]
    fn parents_children_depth_and_leaves_follow_the_edges() {
        let o = toy();
        let f = |id| o.find(id).unwrap();
        assert_eq!(ids(&o, o.leaves().iter().copied()), ["n8", "m8", "dbl", "mono", "DC"]);
        assert_eq!(o.depth(f("cell")), 0);
        assert_eq!(o.depth(f("n8")), 3);
        // The longest path: dbl sits under CD8 (depth 2), so it is at depth 3.
        assert_eq!(o.depth(f("dbl")), 3);
        assert_eq!(ids(&o, o.descendant_leaves(f("T"))), ["n8", "m8", "dbl"]);
        assert_eq!(ids(&o, o.descendant_leaves(f("CD4"))), ["dbl"]);
        assert_eq!(ids(&o, o.lineage(f("dbl"))), ["cell", "T", "CD4", "CD8", "dbl"]);
        assert!(o.is_ancestor_or_self(f("T"), f("n8")));
        assert!(!o.is_ancestor_or_self(f("my"), f("n8")));
        let pos = |id| o.topological().iter().position(|&t| t == f(id)).unwrap();
        assert!(pos("cell") < pos("T") && pos("CD4") < pos("dbl") && pos("CD8") < pos("dbl"));
    }

    #[test]
    fn unknown_parents_duplicates_and_cycles_are_refused() {
        let t = |id: &str, p: &[&str]| Term {
            id: id.into(),
            label: id.into(),
            synonyms: vec![],
            parents: p.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(Ontology::new(vec![]).unwrap_err(), OntologyError::Empty);
        assert!(matches!(Ontology::new(vec![t("a", &["zz"])]), Err(OntologyError::UnknownParent { .. })));
        assert!(matches!(Ontology::new(vec![t("a", &[]), t("a", &[])]), Err(OntologyError::Duplicate(_))));
        assert!(matches!(Ontology::new(vec![t("a", &["b"]), t("b", &["a"])]), Err(OntologyError::Cycle(_))));
        // The term named is on the cycle, not merely below it.
        let e =
            Ontology::new(vec![t("root", &[]), t("x", &["root", "z"]), t("y", &["x"]), t("z", &["y"]), t("w", &["z"])]);
        assert!(matches!(e, Err(OntologyError::Cycle(ref id)) if ["x", "y", "z"].contains(&id.as_str())), "{e:?}");
    }

    #[test]
    fn lookup_matches_ids_labels_and_synonyms_ignoring_case_and_punctuation() {
        let o = toy();
        let f = |id| o.find(id).unwrap();
        assert_eq!(o.lookup("CD8"), vec![(f("CD8"), MatchKind::Id)]);
        assert_eq!(o.lookup("cd8 positive t-cell"), vec![(f("CD8"), MatchKind::Exact)]);
        assert_eq!(o.lookup("T-Lymphocyte"), vec![(f("T"), MatchKind::Synonym)]);
        assert!(o.lookup("B cell").is_empty());
        assert_eq!(normalize("CD14+ Mono"), "cd14+ mono");
        assert_eq!(normalize("  CD4+/CD25  T_Reg "), "cd4+ cd25 t reg");
    }

    #[test]
    fn a_slice_keeps_the_leaves_under_its_labels_and_their_ancestors() {
        let o = toy();
        let s = o.slice(&[o.find("CD4").unwrap(), o.find("mono").unwrap()]);
        assert_eq!(
            s.terms().iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["CD4", "CD8", "T", "cell", "dbl", "mono", "my"]
        );
        assert_eq!(ids(&s, s.leaves().iter().copied()), ["dbl", "mono"]);
        assert_eq!(ids(&s, s.lineage(s.find("dbl").unwrap())), ["CD4", "CD8", "T", "cell", "dbl"]);
    }
}
