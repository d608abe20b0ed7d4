//! The masking-strategy extension point: a strategy written outside the library (the type in
//! this file) plus one registration line is all the audit and training need to use it by name.

use crate::common;

use corrflow::algorithms::mask::{register, MaskParams, MaskStrategy, MaskingStrategy, StructuralPhase};
use corrflow::mask::{audit_command, AuditRequest};

use common::*;

/// Masks a cell's first `B` genes (the whole budget, as one span).
struct FirstGenes;

impl MaskingStrategy for FirstGenes {
    fn name(&self) -> &'static str {
        "first-genes"
    }

    fn structural_share(&self, _: &MaskParams) -> f64 {
        1.0
    }

    fn structural(&self, phase: &mut StructuralPhase<'_>) {
        for i in 0..phase.quota as u32 {
            phase.mask(i);
        }
    }
}

#[test]
fn a_strategy_registered_from_outside_masks_the_audit_by_its_name() {
    register(&FirstGenes);
    let strategy = MaskStrategy::parse("first-genes").expect("registered strategies are found by name");
    assert!(MaskStrategy::names().ends_with("first-genes"));

    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let request = |strategies: Vec<MaskStrategy>| AuditRequest {
        corpus: corpus.clone(),
        graph: graph.clone(),
        atlases: Vec::new(),
        strategies,
        params: MaskParams::default(),
        sweep: Vec::new(),
        epoch: 0,
        dump: None,
        plot: None,
        progress: false,
    };
    let report = audit_command(&request(vec![strategy, MaskStrategy::RANDOM])).unwrap();
    let (first, random) = (&report.rows[0], &report.rows[1]);
    assert_eq!(first.strategy, "first-genes");
    assert_eq!(first.cells, 1000);
    // The same budget as any strategy, all of it structural, one span per cell.
    assert_eq!(first.counts.masked, random.counts.masked);
    assert_eq!(first.counts.structural, first.counts.masked);
    let cells_with_masks = first.counts.runs;
    assert!(cells_with_masks > 0 && cells_with_masks <= first.counts.cells);
    assert!((first.mean_span - first.counts.masked as f64 / cells_with_masks as f64).abs() < 1e-9);
    assert!(first.mean_span > 10.0 * random.mean_span, "{} vs {}", first.mean_span, random.mean_span);
}
