//! Properties of the masking strategies (proptest) and their distributions (seeded statistics).

use proptest::prelude::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::*;
use crate::SequenceLayout;

const MASK: u32 = 1;
const CLS: u32 = 2;
const EOS: u32 = 3;
const FIRST_GENE: u32 = 4;

fn replacement(n_tokens: u32) -> Replacement {
    Replacement {
        mask_token: MASK,
        gene_tokens: (FIRST_GENE..n_tokens).collect(),
        mask_token_rate: 0.8,
        random_token_rate: 0.1,
    }
}

/// A cell: `len` distinct gene tokens from a vocabulary of `n_tokens`, in random order.
fn cell(len: usize, n_tokens: u32, seed: u64) -> Vec<u32> {
    let mut all: Vec<u32> = (FIRST_GENE..n_tokens).collect();
    all.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
    all.truncate(len);
    all
}

fn random_graph(n_tokens: u32, edges: usize, seed: u64) -> NeighbourTable {
    use rand::Rng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xabc);
    NeighbourTable::from_edges(
        (0..edges).map(|_| (rng.random_range(FIRST_GENE..n_tokens), rng.random_range(FIRST_GENE..n_tokens))),
    )
}

fn plan(genes: &[u32], params: &MaskParams, tables: MaskTables<'_>, cell_index: u64) -> MaskPlan {
    let mut out = MaskPlan::default();
    let mut rng = cell_rng(params.seed, 0, cell_index);
    mask_cell(genes, params, tables, &mut rng, &mut MaskScratch::default(), &mut out);
    out
}

fn strategy() -> impl Strategy<Value = MaskStrategy> {
    prop::sample::select(MaskStrategy::all())
}

fn pmi_of(cells: &[Vec<u32>]) -> PmiTable {
    let mut c = PmiCounts::default();
    cells.iter().for_each(|g| c.add_sequence(g));
    c.table(0.0, 1)
}

proptest! {
    #[test]
    fn exactly_the_budget_is_masked_and_structure_stays_within_its_quota(
        len in 0usize..400, p in 0.01f64..0.9, lambda in 0.0f64..=1.0, k_max in 0usize..8,
        edges in 0usize..3000, strategy in strategy(), seed in any::<u64>(),
    ) {
        let n_tokens = 600;
        let genes = cell(len, n_tokens, seed);
        let graph = random_graph(n_tokens, edges, seed);
        let pmi = pmi_of(&[genes.clone(), cell(len, n_tokens, seed + 1)]);
        let params = MaskParams { strategy, p, lambda, k_max, seed, ..MaskParams::default() };
        let tables = MaskTables { graph: &graph, pmi: Some(&pmi) };
        let plan = plan(&genes, &params, tables, 7);
        let (b, bs) = params.budgets(len);
        prop_assert_eq!(plan.positions.len(), b);
        prop_assert!(plan.structural <= bs);
        prop_assert!(plan.positions.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
        prop_assert!(plan.positions.iter().all(|&i| (i as usize) < len));
        if strategy == MaskStrategy::CORRMASK {
            // Seeds and partners alike are genes of the graph.
            let structural_genes = plan.positions.iter().filter(|&&i| graph.degree(genes[i as usize]) > 0).count();
            prop_assert!(structural_genes >= plan.structural);
        }
    }

    #[test]
    fn special_tokens_are_never_touched_and_replacements_are_genes(
        len in 0usize..300, strategy in strategy(), seed in any::<u64>(), cell_index in any::<u64>(),
    ) {
        let n_tokens = 500;
        let mut tokens = vec![CLS];
        tokens.extend(cell(len, n_tokens, seed));
        tokens.push(EOS);
        let graph = random_graph(n_tokens, 2000, seed);
        let pmi = pmi_of(&[tokens[1..tokens.len() - 1].to_vec()]);
        let params = MaskParams { strategy, p: 0.3, seed, ..MaskParams::default() };
        let rep = replacement(n_tokens);
        let layout = SequenceLayout { max_genes: 4094, cls: Some(CLS), eos: Some(EOS) };
        let masker = Masker { params: &params, tables: MaskTables { graph: &graph, pmi: Some(&pmi) }, replacement: &rep, layout: &layout };
        let mut out = MaskedSequence::default();
        masker.mask(&tokens, 3, cell_index, &mut MaskScratch::default(), &mut out);
        let last = tokens.len() - 1;
        prop_assert_eq!((out.input_ids[0], out.input_ids[last]), (CLS, EOS));
        prop_assert_eq!((out.labels[0], out.labels[last]), (IGNORE_INDEX, IGNORE_INDEX));
        prop_assert_eq!(out.labels.iter().filter(|&&l| l != IGNORE_INDEX).count(), params.budgets(len).0);
        for (i, (&inp, &lab)) in out.input_ids.iter().zip(&out.labels).enumerate() {
            if lab == IGNORE_INDEX {
                prop_assert_eq!(inp, tokens[i], "unmasked positions keep their token");
            } else {
                prop_assert_eq!(lab, i64::from(tokens[i]));
                prop_assert!(inp == MASK || inp >= FIRST_GENE, "replacement {} is a special token", inp);
            }
        }
    }

    #[test]
    fn the_same_seed_epoch_and_cell_give_the_same_masks(
        len in 0usize..300, strategy in strategy(), seed in any::<u64>(), epoch in 0u64..5, cell_index in any::<u64>(),
    ) {
        let n_tokens = 500;
        let tokens = cell(len, n_tokens, seed);
        let graph = random_graph(n_tokens, 2000, seed);
        let pmi = pmi_of(std::slice::from_ref(&tokens));
        let params = MaskParams { strategy, seed, ..MaskParams::default() };
        let rep = replacement(n_tokens);
        let layout = SequenceLayout::v1();
        let masker = Masker { params: &params, tables: MaskTables { graph: &graph, pmi: Some(&pmi) }, replacement: &rep, layout: &layout };
        let (mut a, mut b) = (MaskedSequence::default(), MaskedSequence::default());
        // A scratch that already masked other cells must not change the result.
        let mut used = MaskScratch::default();
        masker.mask(&cell(len + 7, n_tokens, seed ^ 1), epoch, cell_index ^ 1, &mut used, &mut b);
        masker.mask(&tokens, epoch, cell_index, &mut MaskScratch::default(), &mut a);
        masker.mask(&tokens, epoch, cell_index, &mut used, &mut b);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn corrmask_with_lambda_zero_is_random_masking(len in 0usize..400, seed in any::<u64>(), cell_index in any::<u64>()) {
        let genes = cell(len, 600, seed);
        let graph = random_graph(600, 3000, seed);
        let tables = MaskTables { graph: &graph, pmi: None };
        let corr = MaskParams { strategy: MaskStrategy::CORRMASK, lambda: 0.0, seed, ..MaskParams::default() };
        let random = MaskParams { strategy: MaskStrategy::RANDOM, seed, ..MaskParams::default() };
        prop_assert_eq!(plan(&genes, &corr, tables, cell_index), plan(&genes, &random, tables, cell_index));
    }
}

#[test]
fn sequences_shorter_than_one_over_p_mask_nothing() {
    let graph = random_graph(100, 500, 1);
    let tables = MaskTables { graph: &graph, pmi: None };
    for strategy in MaskStrategy::all() {
        let params = MaskParams { strategy, p: 0.15, ..MaskParams::default() };
        for len in 0..7 {
            let p = plan(&cell(len, 100, 3), &params, tables, 0);
            assert!(p.positions.is_empty(), "{strategy:?} masked a {len}-gene cell");
        }
        assert_eq!(plan(&cell(7, 100, 3), &params, tables, 0).positions.len(), 1);
    }
}

#[test]
fn without_neighbours_corrmask_falls_back_to_random_positions() {
    let empty = NeighbourTable::default();
    // A graph over other genes only: nothing in the cell has neighbours.
    let elsewhere = NeighbourTable::from_edges([(900, 901), (901, 902)]);
    let genes = cell(200, 500, 9);
    let params = MaskParams { lambda: 1.0, ..MaskParams::default() };
    for graph in [&empty, &elsewhere] {
        let p = plan(&genes, &params, MaskTables { graph, pmi: None }, 1);
        assert_eq!((p.positions.len(), p.structural), (30, 0));
    }
}

#[test]
fn when_all_neighbours_are_present_structure_fills_the_quota_with_graph_groups() {
    // Modules of 6 genes, fully connected; the cell holds every module entirely.
    let genes: Vec<u32> = (FIRST_GENE..FIRST_GENE + 300).collect();
    let edges = genes
        .chunks(6)
        .flat_map(|m| m.iter().flat_map(move |&a| m.iter().filter(move |&&b| a < b).map(move |&b| (a, b))));
    let graph = NeighbourTable::from_edges(edges);
    let params = MaskParams { lambda: 1.0, k_max: 5, ..MaskParams::default() };
    let p = plan(&genes, &params, MaskTables { graph: &graph, pmi: None }, 4);
    assert_eq!((p.positions.len(), p.structural), (45, 45));
    // A seed with K_max = 5 takes its whole module: at most one module is cut by the quota.
    let mut per_module = [0usize; 50];
    p.positions.iter().for_each(|&i| per_module[i as usize / 6] += 1);
    let partial = per_module.iter().filter(|&&c| c != 0 && c != 6).count();
    assert!(partial <= 1, "modules masked partially: {per_module:?}");
}

#[test]
fn random_masking_is_uniform_over_positions() {
    // 20,000 cells of 100 genes, 15 masked each: every position's count is Binomial(20,000, 0.15).
    let genes = cell(100, 200, 0);
    let params = MaskParams { strategy: MaskStrategy::RANDOM, ..MaskParams::default() };
    let graph = NeighbourTable::default();
    let mut counts = [0u32; 100];
    for c in 0..20_000 {
        plan(&genes, &params, MaskTables { graph: &graph, pmi: None }, c)
            .positions
            .iter()
            .for_each(|&i| counts[i as usize] += 1);
    }
    let (mean, sd) = (3000.0, (20_000.0f64 * 0.15 * 0.85).sqrt());
    for (i, &c) in counts.iter().enumerate() {
        assert!((c as f64 - mean).abs() < 5.0 * sd, "position {i}: {c} masks");
    }
}

#[test]
fn replacement_rates_are_80_10_10() {
    let genes = cell(400, 1000, 1);
    let params = MaskParams { strategy: MaskStrategy::RANDOM, p: 0.5, ..MaskParams::default() };
    let rep = replacement(1000);
    let graph = NeighbourTable::default();
    let layout = SequenceLayout::v1();
    let masker =
        Masker { params: &params, tables: MaskTables { graph: &graph, pmi: None }, replacement: &rep, layout: &layout };
    let (mut mask, mut kept, mut total) = (0, 0, 0);
    let mut out = MaskedSequence::default();
    let mut scratch = MaskScratch::default();
    for c in 0..200 {
        masker.mask(&genes, 0, c, &mut scratch, &mut out);
        for (i, &l) in out.labels.iter().enumerate() {
            if l != IGNORE_INDEX {
                total += 1;
                mask += usize::from(out.input_ids[i] == MASK);
                kept += usize::from(out.input_ids[i] == genes[i]);
            }
        }
    }
    let (m, k) = (mask as f64 / total as f64, kept as f64 / total as f64);
    assert_eq!(total, 40_000);
    assert!((m - 0.8).abs() < 0.01 && (k - 0.1).abs() < 0.01, "mask {m}, kept {k}");
}

#[test]
fn corrmask_masks_neighbours_together_far_more_often_than_random() {
    // Planted modules of 10 genes; cells hold half of each module's genes.
    let n_tokens = 2004;
    let graph = NeighbourTable::from_edges((0..200u32).flat_map(|m| {
        let base = FIRST_GENE + m * 10;
        (0..10).flat_map(move |a| (a + 1..10).map(move |b| (base + a, base + b)))
    }));
    let (mut random, mut corr) = (AuditCounts::default(), AuditCounts::default());
    for c in 0..300u64 {
        let genes = cell(1000, n_tokens, c);
        for (strategy, audit) in [(MaskStrategy::RANDOM, &mut random), (MaskStrategy::CORRMASK, &mut corr)] {
            let params = MaskParams { strategy, ..MaskParams::default() };
            let p = plan(&genes, &params, MaskTables { graph: &graph, pmi: None }, c);
            audit.add(&genes, &p, &graph);
        }
    }
    assert!((random.masked_fraction() - 0.15).abs() < 1e-9);
    assert!((random.hit_rate() - 0.075).abs() < 0.01, "random: {}", random.hit_rate());
    assert!(corr.hit_rate() > 2.0 * random.hit_rate(), "corrmask {} vs random {}", corr.hit_rate(), random.hit_rate());
    assert!((corr.structural_fraction() - 0.5).abs() < 0.01);
}
