//! Reading a cell type off a hierarchical head's leaf probabilities (BMFM-RNA §4.2): the global
//! leaf-argmax with its lineage, the greedy top-down path, and the reliable call (the deepest
//! term of the greedy path whose probability reaches a threshold). Every term comes with its
//! rolled-up probability, so a call can be read at any depth.

use serde::{Deserialize, Serialize};

use super::hce::LeafHead;

/// A term and its probability (the mass of the leaves under it).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub term: u32,
    pub probability: f64,
}

/// The calls for one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Calls {
    /// The most probable leaf.
    pub leaf: Scored,
    /// The leaf's lineage from a root down to it, by depth (ties by term index).
    pub leaf_lineage: Vec<Scored>,
    /// From the most probable root, the most probable child at each level, down to a leaf.
    pub greedy: Vec<Scored>,
    /// The deepest term of the greedy path with probability ≥ the threshold (`None` when not
    /// even the root reaches it, which a single-rooted slice's root always does).
    pub reliable: Option<Scored>,
}

/// Decodes one cell from its leaf probabilities (`head.width()` values); `threshold` is the
/// reliable call's τ.
pub fn decode(head: &LeafHead, leaf_probabilities: &[f32], threshold: f64) -> Calls {
    let up = head.roll_up(leaf_probabilities);
    let o = head.ontology();
    let scored = |t: u32| Scored { term: t, probability: up[t as usize] };
    // First maximum (lowest output) on ties, for determinism.
    let k = crate::classes::argmax(leaf_probabilities);
    let leaf = scored(head.outputs()[k]);
    let mut lineage: Vec<u32> = o.lineage(leaf.term).into_iter().collect();
    lineage.sort_by_key(|&t| (o.depth(t), t));
    let best = |ts: &[u32]| {
        ts.iter().copied().fold(None, |b: Option<u32>, t| match b {
            Some(b) if up[b as usize] >= up[t as usize] => Some(b),
            _ => Some(t),
        })
    };
    let mut greedy = Vec::new();
    let mut at = best(&o.roots());
    while let Some(t) = at {
        greedy.push(scored(t));
        at = best(o.children(t));
    }
    let reliable = greedy.iter().rev().find(|s| s.probability >= threshold).copied();
    Calls { leaf, leaf_lineage: lineage.into_iter().map(scored).collect(), greedy, reliable }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ontology::toy;

    fn ids(head: &LeafHead, path: &[Scored]) -> Vec<String> {
        path.iter().map(|s| head.ontology().term(s.term).id.clone()).collect()
    }

    #[test]
    fn leaf_argmax_and_greedy_can_disagree_and_both_carry_probabilities() {
        let head = LeafHead::new(toy());
        // Leaves: n8, m8, dbl, mono, DC. The single best leaf is `mono` (0.3), but the T-cell
        // subtree holds 0.6 of the mass, so top-down goes to T.
        let p = [0.2f32, 0.2, 0.2, 0.3, 0.1];
        let c = decode(&head, &p, 0.5);
        assert_eq!(ids(&head, &[c.leaf]), ["mono"]);
        assert!((c.leaf.probability - 0.3).abs() < 1e-6);
        assert_eq!(ids(&head, &c.leaf_lineage), ["cell", "my", "mono"]);
        assert_eq!(ids(&head, &c.greedy), ["cell", "T", "CD8", "n8"]);
        let probs: Vec<f64> = c.greedy.iter().map(|s| s.probability).collect();
        assert!((probs[0] - 1.0).abs() < 1e-6 && (probs[1] - 0.6).abs() < 1e-6 && (probs[2] - 0.6).abs() < 1e-6);
        // Reliable at τ = 0.5: CD8 (0.6) is the deepest on the path with enough mass.
        assert_eq!(ids(&head, &[c.reliable.unwrap()]), ["CD8"]);
        assert_eq!(ids(&head, &[decode(&head, &p, 0.9).reliable.unwrap()]), ["cell"]);
        assert_eq!(ids(&head, &[decode(&head, &p, 0.15).reliable.unwrap()]), ["n8"]);
    }

    #[test]
    fn a_confident_cell_decodes_to_the_same_leaf_both_ways() {
        let head = LeafHead::new(toy());
        let c = decode(&head, &[0.01, 0.01, 0.01, 0.02, 0.95], 0.9);
        assert_eq!(ids(&head, &[c.leaf]), ["DC"]);
        assert_eq!(ids(&head, &c.greedy), ["cell", "my", "DC"]);
        assert_eq!(ids(&head, &[c.reliable.unwrap()]), ["DC"]);
        // Probabilities never grow going down a path.
        assert!(c.greedy.windows(2).all(|w| w[1].probability <= w[0].probability + 1e-9));
    }
}
