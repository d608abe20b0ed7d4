//! A value model's cells for fine-tuning: each cell is shown to the encoder exactly as `embed`
//! shows it (`corrflow_infer::inputs::value_input`: `<cls>`, then the genes of the model's
//! visible pool among its atlas' measured genes, at most `values.inference_genes` of them, with
//! their values). So the classifier trains on the inputs it will be given when the fine-tuned
//! model embeds or annotates a file, and a cell's input depends on the cell only.

use std::path::Path;

use corrflow_infer::inputs::{value_input, CellExpression};
use corrflow_infer::model_meta::ValueModel;
use corrflow_io::corpus::CorpusIndex;
use corrflow_io::error::{Error, Result};
use corrflow_mask::plan::ExpressionCell;
use corrflow_mask::values::{atlas_measured, CellAtlases, VisibleFrom};

/// What turns a planned cell (an [`ExpressionCell`] payload) into a value model's input.
pub(crate) struct ValueInputs {
    cls: u32,
    settings: ValueModel,
    /// Each atlas' visible pool (`ValueModel::visible_pool` of its measured genes), by cell key.
    atlases: CellAtlases,
    /// `is_gene[t]`: the plan's expression table (which tokens are genes).
    pub is_gene: std::sync::Arc<Vec<bool>>,
}

impl ValueInputs {
    /// The inputs of the corpus `corpus` (its indexed atlases must keep expression) for a model
    /// with these value settings and `<cls>` token.
    pub fn open(
        corpus: &Path,
        index: &CorpusIndex,
        settings: &ValueModel,
        cls: u32,
        is_gene: std::sync::Arc<Vec<bool>>,
    ) -> Result<Self> {
        let measured = atlas_measured(corpus, index)?;
        let mut decode = settings.decode_genes.clone();
        decode.sort_unstable();
        // The detected-only narrowing is `value_input`'s, per cell; the pool here is per atlas.
        let from = VisibleFrom { decoded_only: settings.visible.decoded_only(), detected_only: false };
        let atlases = CellAtlases::new(index, measured, &decode, from);
        Ok(Self { cls, settings: settings.clone(), atlases, is_gene })
    }

    /// The tokens and values of the planned cell `key` (its packed expression).
    pub fn of(&self, key: u64, payload: &[u32]) -> Result<(Vec<u32>, Vec<f32>)> {
        let cell = ExpressionCell::unpack(payload)
            .ok_or_else(|| Error::internal("finetune", format!("cell {key} was planned without its expression")))?;
        let view = CellExpression { genes: &cell.genes, counts: &cell.counts, total: cell.total };
        Ok(value_input(self.cls, &self.settings, &self.atlases.of(key).pool, view))
    }
}

#[cfg(test)]
mod tests {
    use corrflow_infer::model_meta::VisiblePool;

    use super::*;

    #[test]
    fn a_pool_of_decoded_genes_is_the_one_embed_draws_from() {
        // What `embed` passes `value_input` (the settings' pool of the source's measured genes)
        // and what the atlas table gives for a cell of that atlas are the same genes.
        let measured = vec![2u32, 3, 5, 7, 9, 11];
        let settings = ValueModel {
            decode_genes: vec![9, 3, 11],
            visible: VisiblePool::Decoded,
            inference_genes: 10,
            ..ValueModel::default()
        };
        let mut decode = settings.decode_genes.clone();
        decode.sort_unstable();
        let from = VisibleFrom { decoded_only: true, detected_only: false };
        let genes = corrflow_mask::values::AtlasGenes::new(&decode, &measured, from.decoded_only);
        assert_eq!(genes.pool, settings.visible_pool(&measured));
        assert_eq!(genes.pool, vec![3, 9, 11]);
    }
}
