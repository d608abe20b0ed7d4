//! `pmi` and `pmi-rand`: whole spans of adjacent tokens whose NPMI is at least `pmi_tau`
//! (the PMI-masking baseline), for the whole budget or for half of it.

use rand::Rng;

use super::strategies::{MaskScratch, StructuralPhase};
use super::{MaskParams, MaskRng, MaskingStrategy, PmiTable};

/// PMI spans for a fixed share of the budget: the whole of it (`pmi`) or half, the rest random
/// (`pmi-rand`).
pub struct PmiSpans {
    name: &'static str,
    share: f64,
}

pub const PMI: PmiSpans = PmiSpans { name: "pmi", share: 1.0 };
pub const PMI_RAND: PmiSpans = PmiSpans { name: "pmi-rand", share: 0.5 };

impl MaskingStrategy for PmiSpans {
    fn name(&self) -> &'static str {
        self.name
    }

    fn structural_share(&self, _: &MaskParams) -> f64 {
        self.share
    }

    fn needs_pmi(&self) -> bool {
        true
    }

    fn structural(&self, phase: &mut StructuralPhase<'_>) {
        spans_phase(phase);
    }
}

fn spans_phase(phase: &mut StructuralPhase<'_>) {
    if let Some(pmi) = phase.tables.pmi {
        pmi_spans(phase.genes, pmi, phase.quota, phase.rng, phase.scratch);
    }
}

/// PMI's structural phase: whole spans in random order, each taken if it fits in `quota`.
fn pmi_spans(genes: &[u32], pmi: &PmiTable, quota: usize, rng: &mut MaskRng, s: &mut MaskScratch) {
    let mut spans = std::mem::take(&mut s.spans);
    pmi.spans(genes, &mut spans);
    for i in 0..spans.len() {
        let left = quota - s.masked.len;
        if left == 0 {
            break;
        }
        let j = rng.random_range(i..spans.len());
        spans.swap(i, j);
        let (a, b) = spans[i];
        if (b - a) as usize <= left {
            for p in a..b {
                s.masked.insert(p);
            }
        }
    }
    s.spans = spans;
}
