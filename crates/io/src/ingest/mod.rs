//! The jobs that read single-cell files: `ingest` (files → tokens → a corpus atlas, through a
//! streaming pipeline) and `vocab build` (files → a new vocabulary's medians).

mod pipeline;
mod run;
mod vocab_build;

pub use run::{run_ingest, validate_atlas_name, IngestRequest, IngestSummary};
pub use vocab_build::{build_vocabulary, MedianEstimator, VocabBuildOptions, VocabBuildSummary};
