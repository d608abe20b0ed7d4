//! The jobs that read single-cell files: `ingest` (files → tokens → a corpus atlas, through a
//! streaming pipeline) and `vocab build` (files → a new vocabulary's medians).

mod duplicates;
mod hints;
mod pipeline;
mod request;
mod run;
mod vocab_build;

pub use request::{IngestRequest, IngestSummary};
pub use run::{run_ingest, validate_atlas_name};
pub use vocab_build::{
    alpha_out_of_range, build_vocabulary, MedianEstimator, VocabBuildOptions, VocabBuildSummary, SKETCH_MEMORY_MB,
};
