//! `random`: uniformly random positions (BERT / Geneformer); no structural phase.

use super::strategies::StructuralPhase;
use super::{MaskParams, MaskingStrategy};

pub struct Random;

impl MaskingStrategy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn structural_share(&self, _: &MaskParams) -> f64 {
        0.0
    }

    fn structural(&self, _: &mut StructuralPhase<'_>) {}
}
