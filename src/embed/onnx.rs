//! Exported models as embedding models: ONNX Runtime.

use std::path::Path;

use super::{CellVectors, EmbedRequest};
use crate::error::{Error, Result};
use crate::runtime::{OrtEncoder, PaddedBatch};
use crate::vocab::Vocabulary;
use corrflow_operators::SequenceLayout;

pub(super) struct OrtVectors(OrtEncoder);

impl OrtVectors {
    pub(super) fn open(path: &Path, req: &EmbedRequest) -> Result<Self> {
        let encoder = OrtEncoder::open(path, &req.runtime)?;
        let meta = &encoder.meta;
        if req.pooling.is_some_and(|p| p != meta.pooling) {
            return Err(Error::Usage(format!(
                "{} pools {:?}; re-export it with --pooling to change that",
                path.display(),
                meta.pooling
            )));
        }
        if req.layer != -1 && req.layer != meta.model.layers as i64 {
            return Err(Error::Usage(
                "--layer applies to checkpoints; an exported model gives the last layer's states".into(),
            ));
        }
        Ok(Self(encoder))
    }
}

impl CellVectors for OrtVectors {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn vocab(&self) -> &Vocabulary {
        &self.0.vocab
    }

    fn layout(&self) -> SequenceLayout {
        self.0.meta.tokenize_layout()
    }

    fn dim(&self) -> usize {
        self.0.hidden()
    }

    fn layer(&self) -> usize {
        self.0.meta.model.layers
    }

    fn encode(&mut self, batch: &PaddedBatch) -> Result<Vec<f32>> {
        self.0.embed(batch)
    }
}
