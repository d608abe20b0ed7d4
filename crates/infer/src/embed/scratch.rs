//! Reading the cells of the scratch corpus an input was tokenized into, as the model takes them:
//! rank tokens, or (value models) each cell's expression turned into `<cls>` and genes with
//! values by [`crate::inputs::value_input`].

use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use corrflow_io::corpus::columns::InputIds;
use corrflow_io::corpus::{
    for_each_shard_batch, for_each_shard_batch_with_expression, AtlasManifest, CorpusIndex, ExpressionBlock,
};
use corrflow_io::error::{Error, Result};

use crate::encode::{Encoder, ModelCells};
use crate::inputs::{cls_token, value_input, value_settings, CellExpression};
use crate::model_meta::ValueModel;

/// What a value model's inputs are built from.
struct ValueSource {
    settings: ValueModel,
    cls: u32,
    /// The input's measured vocabulary genes (its scratch atlas' record) the model's encoder
    /// may see (`ValueModel::visible_pool`).
    measured: Vec<u32>,
    is_gene: Arc<Vec<bool>>,
    vocab_size: usize,
}

/// How the cells of a scratch corpus reach a model.
pub(crate) struct ScratchCells {
    value: Option<ValueSource>,
}

impl ScratchCells {
    pub fn for_model(encoder: &dyn Encoder, index: &CorpusIndex) -> Result<Self> {
        let Some(settings) = encoder.config().and_then(value_settings) else { return Ok(Self { value: None }) };
        let vocab = encoder.vocab();
        let measured = match index.shards.first().and_then(|s| s.path.parent()) {
            Some(dir) => {
                settings.visible_pool(&AtlasManifest::load(dir)?.expression.map(|e| e.measured).unwrap_or_default())
            }
            None => Vec::new(),
        };
        let is_gene = Arc::new((0..vocab.len() as u32).map(|t| vocab.is_gene(t)).collect());
        let value = ValueSource {
            settings: settings.clone(),
            cls: cls_token(vocab)?,
            measured,
            is_gene,
            vocab_size: vocab.len(),
        };
        Ok(Self { value: Some(value) })
    }

    /// Calls `f` with every record batch of a shard: the columns the model needs, and the obs
    /// columns.
    pub fn for_each_batch(&self, path: &Path, f: impl FnMut(&RecordBatch) -> Result<()>) -> Result<()> {
        match self.value {
            None => for_each_shard_batch(path, f),
            Some(_) => for_each_shard_batch_with_expression(path, f),
        }
    }

    /// A record batch's cells as the model takes them.
    pub fn cells(&self, rb: &RecordBatch, path: &Path) -> Result<ModelCells> {
        let Some(v) = &self.value else { return Ok(ModelCells::ranks(InputIds::of(rb, path)?.cells()?)) };
        let mut block = ExpressionBlock::default();
        block.decode(rb, path, 0, v.vocab_size, &v.is_gene)?;
        let (mut tokens, mut values) = (Vec::with_capacity(block.len()), Vec::with_capacity(block.len()));
        for i in 0..block.len() {
            let cell = CellExpression { genes: block.genes(i), counts: block.counts(i), total: block.totals[i] };
            let (t, x) = value_input(v.cls, &v.settings, &v.measured, cell);
            tokens.push(t);
            values.push(x);
        }
        if tokens.is_empty() && rb.num_rows() > 0 {
            return Err(Error::internal("embed", "expression cells lost"));
        }
        Ok(ModelCells { tokens, values: Some(values) })
    }
}
