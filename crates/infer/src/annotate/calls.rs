//! A cell's hierarchical calls as named terms: what `annotate` writes and the server's
//! `/v1/annotate` returns, decoded from a hierarchical head's leaf probabilities by
//! `corrflow_algorithms::ontology::decode`.

use corrflow_algorithms::ontology::decode::{decode, Scored};
use corrflow_algorithms::ontology::hce::LeafHead;
use serde::{Deserialize, Serialize};

use crate::model_meta::OntologyHead;

/// A term, its label and its probability (the mass of the leaves under it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TermCall {
    pub id: String,
    pub label: String,
    pub probability: f64,
    /// Longest path from a root of the head's ontology slice.
    pub depth: u32,
}

/// The calls for one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellCall {
    /// The most probable leaf (global leaf-argmax).
    pub leaf: TermCall,
    /// The leaf's lineage, root first.
    pub lineage: Vec<TermCall>,
    /// Greedy top-down: from the root, the most probable child at each level.
    pub greedy: Vec<TermCall>,
    /// The deepest term of the greedy path whose probability reaches the threshold.
    pub call: Option<TermCall>,
}

/// Decodes cells from a hierarchical head's leaf probabilities.
#[derive(Clone, Debug)]
pub struct Annotator {
    pub head: LeafHead,
    pub threshold: f64,
}

impl Annotator {
    /// The annotator of a model's hierarchical head; `threshold` is the reliable call's τ.
    pub fn new(config: &OntologyHead, threshold: f64) -> Result<Self, String> {
        if !(0.0..=1.0).contains(&threshold) {
            return Err(format!("the call threshold must be in [0, 1], got {threshold}"));
        }
        Ok(Self { head: config.leaf_head()?, threshold })
    }

    /// The calls of one cell (`leaf_probabilities`: one per head output).
    pub fn call(&self, leaf_probabilities: &[f32]) -> CellCall {
        let c = decode(&self.head, leaf_probabilities, self.threshold);
        let named = |s: &Scored| {
            let o = self.head.ontology();
            let t = o.term(s.term);
            TermCall { id: t.id.clone(), label: t.label.clone(), probability: s.probability, depth: o.depth(s.term) }
        };
        CellCall {
            leaf: named(&c.leaf),
            lineage: c.leaf_lineage.iter().map(named).collect(),
            greedy: c.greedy.iter().map(named).collect(),
            call: c.reliable.as_ref().map(named),
        }
    }
}
