//! The burn backend of the inference core's registry: checkpoints (`--checkpoint`), opened as a
//! [`BurnEncoder`]. Registered by the binary (`corrflow_infer::register_backend(&BURN)`): this
//! crate depends on the core for the model metadata, so the core cannot name it.

use std::path::PathBuf;

use corrflow_infer::encode::Encoder;
use corrflow_infer::model_meta::ModelConfig;
use corrflow_infer::{Backend, ModelSource, OpenOptions};
use corrflow_io::error::Result;

use crate::burn_encoder::BurnEncoder;
use crate::checkpoint;

/// Checkpoints run by burn on the CPU.
pub struct BurnCheckpoints;

/// The one instance to register.
pub static BURN: BurnCheckpoints = BurnCheckpoints;

impl Backend for BurnCheckpoints {
    fn name(&self) -> &'static str {
        "burn"
    }

    fn opens(&self, source: &ModelSource) -> bool {
        matches!(source, ModelSource::Checkpoint(_))
    }

    fn config(&self, source: &ModelSource) -> Result<(ModelConfig, PathBuf)> {
        let dir = checkpoint::resolve(source.path())?;
        let state = checkpoint::load_state(&dir, checkpoint::Purpose::Inference)?;
        Ok((state.model, dir))
    }

    fn open(&self, source: &ModelSource, opts: &OpenOptions) -> Result<Box<dyn Encoder>> {
        Ok(Box::new(BurnEncoder::open(source.path(), opts.pooling, opts.layer)?))
    }
}
