//! The edge changes of an update, computed by a differential dataflow: the candidate records of
//! the statistics before the update (epoch 0) are replaced by those after it (epoch 1); a
//! per-gene `reduce` keeps the `N_neigh` strongest partners, the co-presence threshold and
//! `distinct` give the edge collection, and its changes at epoch 1 are the delta.

use std::sync::{Arc, Mutex};

use differential_dataflow::input::Input;

/// A candidate record: gene `u`, ordering key `(!|ρ|.to_bits(), v)` (ascending = |ρ|
/// descending, ties by ascending token), and the pair's co-presence count.
pub type Candidate = (u32, ((u64, u32), i64));

/// Candidate records of a correlation matrix over the graph vocabulary (`tokens`, ascending):
/// per gene, its `n_neigh` strongest partners with |ρ| ≥ `rho_min`. Pre-selecting them (in
/// parallel, before the dataflow) feeds the `reduce` only what can reach its top-N: the top-N of
/// a gene's top-N is itself, and filtering by the monotone threshold first keeps the same top-N.
pub fn candidates(rho: &[f64], co: &[i64], tokens: &[u32], rho_min: f64, n_neigh: usize) -> Vec<Candidate> {
    use rayon::prelude::*;
    let g = tokens.len();
    (0..g)
        .into_par_iter()
        .flat_map_iter(|u| {
            let mut row: Vec<Candidate> = (0..g)
                .filter_map(|v| {
                    let r = rho[u * g + v];
                    (u != v && !r.is_nan() && r.abs() >= rho_min)
                        .then(|| (tokens[u], ((!r.abs().to_bits(), tokens[v]), co[u * g + v])))
                })
                .collect();
            if row.len() > n_neigh {
                row.select_nth_unstable_by_key(n_neigh - 1, |c| c.1 .0);
                row.truncate(n_neigh);
            }
            row
        })
        .collect()
}

/// (edges added, edges removed) when `before` is replaced by `after`; edges are `(u, v)` token
/// pairs with `u < v`, sorted.
pub fn edge_changes(
    before: Vec<Candidate>,
    after: Vec<Candidate>,
    n_neigh: usize,
    m_min: i64,
) -> (Vec<(u32, u32)>, Vec<(u32, u32)>) {
    let changes: Arc<Mutex<Vec<((u32, u32), u64, isize)>>> = Arc::new(Mutex::new(Vec::new()));
    let sink = changes.clone();
    timely::execute_directly(move |worker| {
        let sink = sink.clone();
        let (mut input, probe) = worker.dataflow::<u64, _, _>(|scope| {
            let (input, pairs) = scope.new_collection::<Candidate, isize>();
            let probe = pairs
                .reduce(
                    move |_u, partners: &[(&((u64, u32), i64), isize)], out: &mut Vec<(((u64, u32), i64), isize)>| {
                        out.extend(partners.iter().filter(|p| p.1 > 0).take(n_neigh).map(|p| (*p.0, 1)));
                    },
                )
                .filter(move |(_, (_, co))| *co >= m_min)
                .map(|(u, ((_, v), _))| (u.min(v), u.max(v)))
                .distinct()
                .inspect(move |(edge, time, diff)| sink.lock().expect("sink").push((*edge, *time, *diff))) // ok: invariant
                .probe()
                .0;
            (input, probe)
        });
        for r in &before {
            input.insert(*r);
        }
        input.advance_to(1);
        input.flush();
        worker.step_while(|| probe.less_than(input.time()));
        for r in before {
            input.remove(r);
        }
        for r in after {
            input.insert(r);
        }
        input.advance_to(2);
        input.flush();
        worker.step_while(|| probe.less_than(input.time()));
    });
    let changes = std::mem::take(&mut *changes.lock().expect("changes")); // ok: invariant
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    for (edge, time, diff) in changes {
        if time == 1 {
            if diff > 0 {
                added.push(edge);
            } else {
                removed.push(edge);
            }
        }
    }
    added.sort_unstable();
    removed.sort_unstable();
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_follow_the_top_n_and_co_presence_rules() {
        let tokens = [10, 11, 12, 13];
        let co = vec![500i64; 16];
        let rho_before = vec![1.0, 0.9, 0.5, 0.1, 0.9, 1.0, 0.3, 0.25, 0.5, 0.3, 1.0, 0.05, 0.1, 0.25, 0.05, 1.0];
        // After: gene 12 now prefers 13 over 10.
        let mut rho_after = rho_before.clone();
        rho_after[2 * 4 + 3] = 0.8;
        rho_after[3 * 4 + 2] = 0.8;
        let before = candidates(&rho_before, &co, &tokens, 0.2, 1);
        let after = candidates(&rho_after, &co, &tokens, 0.2, 1);
        let (added, removed) = edge_changes(before, after, 1, 200);
        // Before (n_neigh 1): 10-11, 10-12, 11-13. After: 10-11, 12-13 (12's and 13's best).
        assert_eq!(added, vec![(12, 13)]);
        assert_eq!(removed, vec![(10, 12), (11, 13)]);
    }
}
