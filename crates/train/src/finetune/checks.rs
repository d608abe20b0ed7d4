//! What `finetune` checks before it writes anything: the base model against the flags, and the
//! corpus against the base model's vocabulary.

use corrflow_infer::model_meta::Pooling;
use corrflow_io::corpus::Corpus;
use corrflow_io::error::{Error, Result};
use corrflow_model::TrainingBackend;

use super::{FinetuneRequest, FinetuneTask};

/// The corpus must be tokenized with the base model's vocabulary: a rank model's with its
/// layout; a value model's with the vocabulary it trained on (`<cls>` added when the corpus'
/// has none), whatever the corpus' layout (its cells are read as expression).
pub(super) fn check_corpus<B: TrainingBackend>(
    req: &FinetuneRequest,
    opened: &Corpus,
    base: &corrflow_model::LoadedModel<B>,
) -> Result<()> {
    let sees_values = base.state.model.input.sees_values();
    let vocab = if sees_values && opened.vocab.cls.is_none() {
        opened.vocab.clone().with_v2_specials()
    } else {
        opened.vocab.clone()
    };
    if vocab.hash() == base.vocab.hash() && (sees_values || opened.info.layout == base.state.layout) {
        return Ok(());
    }
    Err(Error::conflict(
        &req.corpus,
        format!(
            "the corpus is tokenized with vocabulary {} ({:?} layout), the model with {} ({:?}): ingest the cells with the model's vocabulary",
            opened.vocab.hash(),
            opened.info.layout,
            base.vocab.hash(),
            base.state.layout
        ),
    ))
}

/// What the base model must be for these flags: a pre-trained model (a value model for cell
/// labels only), not fine-tuned yet, with the positions, `<cls>` and layers that `--max-len`,
/// `--pooling cls` and `--freeze-layers` ask.
pub(super) fn check_base<B: TrainingBackend>(
    req: &FinetuneRequest,
    base: &corrflow_model::LoadedModel<B>,
) -> Result<()> {
    let c = &req.config;
    let positions = base.state.model.max_positions;
    if c.max_len > positions {
        return Err(Error::Usage(format!(
            "--max-len (finetune.max_len) must be at most the model's {positions} positions (got {}; 0 = the length it was pre-trained on)",
            c.max_len
        )));
    }
    if base.state.model.input.sees_values() && c.max_len != 0 {
        return Err(Error::Usage(format!(
            "--max-len (finetune.max_len) does not apply to a value model: its cells are shown as `embed` shows \
             them, at most the model's values.inference_genes ({}) genes (got {})",
            base.state.model.values.as_ref().map_or(0, |v| v.inference_genes),
            c.max_len
        )));
    }
    if base.state.model.input.sees_values() && matches!(req.task, FinetuneTask::Gene { .. }) {
        return Err(Error::Usage(format!(
            "{} is a value model (it sees expression values): finetune classifies its cells, not its genes \
             (a value model's tokens are a sample of the measured genes, not the cell's ranked genes; \
             gene classification needs a rank model, docs/values.md)",
            req.checkpoint.display()
        )));
    }
    if base.state.model.classifier.is_some() {
        return Err(Error::Usage(format!(
            "{} is already fine-tuned (it has a classifier); fine-tune its pre-trained base instead",
            req.checkpoint.display()
        )));
    }
    if c.pooling == Pooling::Cls && base.vocab.cls.is_none() {
        return Err(Error::Usage("--pooling cls needs a V2 (<cls>) model; this one is V1".into()));
    }
    if c.freeze_layers > base.state.model.layers {
        return Err(Error::Usage(format!(
            "--freeze-layers {} is more than the model's {} layers",
            c.freeze_layers, base.state.model.layers
        )));
    }
    Ok(())
}
