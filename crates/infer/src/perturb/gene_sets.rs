//! The gene sets of a perturbation: the named genes (with their graph partners) and the
//! random sets of expression-matched genes that give each shift its baseline.

use std::collections::BTreeSet;

use rand::seq::IndexedRandom;
use rand::SeedableRng;

use corrflow_io::error::{Error, Result};
use corrflow_io::vocab::Vocabulary;

/// The tokens of `genes` (unknown ones are an error naming them) and, with a graph, their
/// partners; returns the tokens and how many partners were added.
pub(super) fn resolve_genes(
    vocab: &Vocabulary,
    genes: &[String],
    module: Option<&std::path::Path>,
) -> Result<(Vec<u32>, usize)> {
    if genes.is_empty() {
        return Err(Error::Usage("name at least one gene (--delete or --overexpress)".into()));
    }
    let unknown: Vec<&str> = genes.iter().filter(|g| vocab.lookup(g).is_none()).map(String::as_str).collect();
    if !unknown.is_empty() {
        return Err(Error::Usage(format!(
            "not in the model's vocabulary '{}': {} (Ensembl ids or symbols)",
            vocab.name(),
            unknown.join(", ")
        )));
    }
    let mut tokens: Vec<u32> = Vec::new();
    for g in genes {
        let t = vocab.lookup(g).expect("checked above").token();
        if !tokens.contains(&t) {
            tokens.push(t);
        }
    }
    let Some(dir) = module else { return Ok((tokens, 0)) };
    let graph = corrflow_io::graph_files::read_graph(dir)?;
    if graph.info.vocab_hash != vocab.hash() {
        return Err(Error::conflict(dir, "the graph was built with another vocabulary than the model's"));
    }
    let seeds: BTreeSet<u32> = tokens.iter().copied().collect();
    let before = tokens.len();
    for e in &graph.edges {
        for (a, b) in [(e.u, e.v), (e.v, e.u)] {
            if seeds.contains(&a) && !tokens.contains(&b) {
                tokens.push(b);
            }
        }
    }
    let added = tokens.len() - before;
    Ok((tokens, added))
}

/// `count` random gene sets as large as `genes`, each gene replaced by a random gene expressed
/// in a similar number of cells (the same decile of the expressed genes), none of `genes`.
pub(super) fn random_sets(
    genes: &[u32],
    expressed: &[u64],
    vocab: &Vocabulary,
    count: usize,
    seed: u64,
) -> Vec<Vec<u32>> {
    let mut pool: Vec<u32> =
        (0..expressed.len() as u32).filter(|&t| vocab.is_gene(t) && expressed[t as usize] > 0).collect();
    pool.sort_by_key(|&t| (expressed[t as usize], t));
    let decile = |t: u32| -> usize {
        let rank = pool.partition_point(|&p| (expressed[p as usize], p) < (expressed[t as usize], t));
        (rank * 10 / pool.len().max(1)).min(9)
    };
    let bins: Vec<Vec<u32>> =
        (0..10).map(|d| pool.iter().copied().filter(|&t| decile(t) == d && !genes.contains(&t)).collect()).collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            genes
                .iter()
                .filter_map(|&g| {
                    // A gene no selected cell expresses gets a random gene of the lowest decile.
                    let d = if expressed[g as usize] > 0 { decile(g) } else { 0 };
                    bins[d].choose(&mut rng).copied()
                })
                .collect()
        })
        .collect()
}

/// Refuses random sets whose bookkeeping (each set's genes, its slot in the pass and its sums,
/// about 64 + 4 bytes per gene) would not fit in half the memory available now.
pub(super) fn check_random_set_memory(sets: usize, genes: usize) -> Result<()> {
    let need = (sets as u128) * (64 + 4 * genes as u128);
    match corrflow_io::util::available_memory() {
        Some(free) if need > free as u128 / 2 => Err(Error::Usage(format!(
            "--random-sets {sets} of {genes} genes each needs about {:.1} GB, more than half the {:.1} GB available; use fewer sets",
            need as f64 / 1e9,
            free as f64 / 1e9
        ))),
        _ => Ok(()),
    }
}
