//! scib-metrics' `graph_connectivity`: for each label, the share of its cells in the largest
//! strongly connected component of the directed k-NN graph restricted to that label (an edge
//! from each cell to each of its neighbours); the mean over labels.

use super::distances::{Groups, Neighbours};

/// Sizes of the strongly connected components of the subgraph on `nodes` (iterative Tarjan).
fn strong_component_sizes(nodes: &[usize], succ: impl Fn(usize) -> Vec<usize>, n: usize) -> Vec<usize> {
    const UNSEEN: usize = usize::MAX;
    let (mut index, mut low, mut on_stack) = (vec![UNSEEN; n], vec![0; n], vec![false; n]);
    let (mut stack, mut sizes, mut next) = (Vec::new(), Vec::new(), 0);
    for &root in nodes {
        if index[root] != UNSEEN {
            continue;
        }
        // (node, its successors, position in them)
        let mut work: Vec<(usize, Vec<usize>, usize)> = vec![(root, succ(root), 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some((v, edges, pos)) = work.last_mut() {
            let v = *v;
            if *pos < edges.len() {
                let w = edges[*pos];
                *pos += 1;
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, succ(w), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some((parent, _, _)) = work.last() {
                low[*parent] = low[*parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut size = 0;
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    size += 1;
                    if w == v {
                        break;
                    }
                }
                sizes.push(size);
            }
        }
    }
    sizes
}

pub fn graph_connectivity(neighbours: &Neighbours, labels: Groups<'_>) -> f64 {
    let n = labels.codes.len();
    let mut scores = Vec::new();
    for l in 0..labels.count {
        let nodes: Vec<usize> = (0..n).filter(|&i| labels.codes[i] == l).collect();
        if nodes.is_empty() {
            continue;
        }
        let succ = |i: usize| {
            neighbours.of(i).0.iter().map(|&j| j as usize).filter(|&j| labels.codes[j] == l).collect::<Vec<_>>()
        };
        let sizes = strong_component_sizes(&nodes, succ, n);
        scores.push(*sizes.iter().max().expect("non-empty label") as f64 / nodes.len() as f64);
    }
    scores.iter().sum::<f64>() / scores.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_strong_and_each_label_scores_its_largest_share() {
        // Label 0: 0 → 1 → 2 → 0 is a cycle (one component of 3); 3 → 0 only (alone).
        // Label 1: 4 → 5 and 5 → 4 (one component of 2).
        let nb = Neighbours { k: 1, indices: vec![1, 2, 0, 0, 5, 4], distances: vec![1.0; 6] };
        let codes = [0, 0, 0, 0, 1, 1];
        let s = graph_connectivity(&nb, Groups { codes: &codes, count: 2 });
        assert!((s - (0.75 + 1.0) / 2.0).abs() < 1e-12);
        // A chain 0 → 1 → 2 → 3 has four strong components of one cell each.
        let chain = Neighbours { k: 1, indices: vec![1, 2, 3, 2], distances: vec![1.0; 4] };
        let s = graph_connectivity(&chain, Groups { codes: &[0, 0, 0, 0], count: 1 });
        assert!((s - 0.5).abs() < 1e-12, "2 ⇄ 3 is the largest component: {s}");
    }
}
