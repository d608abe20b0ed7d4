//! In-silico perturbation of a rank-value token sequence, with Geneformer's definitions:
//! deleting a gene removes its token (the genes after it move up a rank); overexpressing a gene
//! moves its token to the front (after `<cls>`), inserting it when the cell does not express it,
//! and the sequence keeps its length limit.

use crate::mask::gene_range;
use crate::SequenceLayout;

/// What is done to the chosen genes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perturbation {
    Delete,
    Overexpress,
}

/// The perturbed sequence of `tokens`, and how many of `genes` the cell expressed. `max_len`
/// bounds the result (specials included; 0 = no bound).
pub fn perturb(
    tokens: &[u32],
    genes: &[u32],
    how: Perturbation,
    layout: &SequenceLayout,
    max_len: usize,
) -> (Vec<u32>, usize) {
    let body = gene_range(tokens, layout);
    let present = tokens[body.clone()].iter().filter(|t| genes.contains(t)).count();
    let mut out = Vec::with_capacity(tokens.len() + genes.len());
    out.extend_from_slice(&tokens[..body.start]);
    if how == Perturbation::Overexpress {
        out.extend_from_slice(genes);
    }
    out.extend(tokens[body.clone()].iter().filter(|t| !genes.contains(t)));
    let tail = &tokens[body.end..];
    if max_len > 0 && out.len() + tail.len() > max_len {
        out.truncate(max_len.saturating_sub(tail.len()).max(body.start + 1));
    }
    out.extend_from_slice(tail);
    (out, present)
}

/// Cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        ab / (aa.sqrt() * bb.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_removes_the_genes_and_moves_the_rest_up() {
        let v1 = SequenceLayout::v1();
        assert_eq!(perturb(&[5, 6, 7, 8], &[6, 8, 9], Perturbation::Delete, &v1, 0), (vec![5, 7], 2));
        assert_eq!(perturb(&[5, 6], &[9], Perturbation::Delete, &v1, 0), (vec![5, 6], 0));
    }

    #[test]
    fn overexpression_puts_the_genes_first_inserting_absent_ones_within_the_length_limit() {
        let v1 = SequenceLayout::v1();
        assert_eq!(perturb(&[5, 6, 7, 8], &[7], Perturbation::Overexpress, &v1, 0), (vec![7, 5, 6, 8], 1));
        assert_eq!(perturb(&[5, 6, 7], &[9], Perturbation::Overexpress, &v1, 3), (vec![9, 5, 6], 0));
        // V2: after <cls>, and <eos> stays last.
        let v2 = SequenceLayout::v2(2, 3);
        assert_eq!(perturb(&[2, 5, 6, 7, 3], &[7], Perturbation::Overexpress, &v2, 0), (vec![2, 7, 5, 6, 3], 1));
        assert_eq!(perturb(&[2, 5, 6, 7, 3], &[9], Perturbation::Overexpress, &v2, 5), (vec![2, 9, 5, 6, 3], 0));
        assert_eq!(perturb(&[2, 5, 6, 3], &[6], Perturbation::Delete, &v2, 0), (vec![2, 5, 3], 1));
    }

    #[test]
    fn cosine_of_parallel_orthogonal_and_zero_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-12);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-12);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
    }
}
