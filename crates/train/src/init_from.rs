//! `train --init-from CKPT`: a run that starts from a pre-trained checkpoint's weights instead of
//! a random initialisation, e.g. to add the hierarchical cell-type head to a model pre-trained
//! without it (BMFM-RNA's recipe: reconstruction first, then multitask). The encoder and the MLM
//! head are copied, the whole-cell head too when both use the same objective; heads the source
//! lacks start fresh. The architecture and the vocabulary must match.

use std::path::Path;

use corrflow_io::error::{Error, Result};
use corrflow_io::vocab::Vocabulary;
use corrflow_model::{load_checkpoint, CellEncoder, ModelConfig};

pub(crate) fn from_checkpoint<B: burn::tensor::backend::Backend>(
    fresh: CellEncoder<B>,
    m: &ModelConfig,
    vocab: &Vocabulary,
    path: &Path,
    device: &B::Device,
) -> Result<CellEncoder<B>> {
    let source = load_checkpoint::<B>(path, device)?;
    let s = &source.state.model;
    if source.vocab.hash() != vocab.hash() {
        return Err(Error::conflict(
            path,
            format!("was trained on vocabulary '{}', the corpus uses '{}'", source.vocab.name(), vocab.name()),
        ));
    }
    let same = (s.hidden, s.ffn, s.heads, s.layers, s.max_positions, s.mlm_activation)
        == (m.hidden, m.ffn, m.heads, m.layers, m.max_positions, m.mlm_activation);
    if !same {
        return Err(Error::conflict(
            path,
            format!(
                "has another architecture (hidden {}, ffn {}, heads {}, layers {}, max_positions {}) than [model] \
                 (hidden {}, ffn {}, heads {}, layers {}, max_positions {})",
                s.hidden,
                s.ffn,
                s.heads,
                s.layers,
                s.max_positions,
                m.hidden,
                m.ffn,
                m.heads,
                m.layers,
                m.max_positions
            ),
        ));
    }
    let src = source.model;
    let mut model = fresh;
    model.tokens = src.tokens;
    model.positions = src.positions;
    model.embed_norm = src.embed_norm;
    model.encoder = src.encoder;
    model.mlm_dense = src.mlm_dense;
    model.mlm_norm = src.mlm_norm;
    model.mlm_bias = src.mlm_bias;
    if s.objective == m.objective {
        model.cell_head = src.cell_head.or(model.cell_head);
    }
    if s.hce.is_some() && s.hce.as_ref().map(|h| &h.leaves) == m.hce.as_ref().map(|h| &h.leaves) {
        model.label_head = src.label_head.or(model.label_head);
    }
    tracing::info!(step = source.state.step, "initialised from {}", path.display());
    Ok(model)
}
