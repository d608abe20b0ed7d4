//! Setting up multitask pre-training with a hierarchical cell-type head: the ontology, the
//! corpus' label column of term ids, and the slice of the ontology the head predicts over, cut
//! once when a run starts and recorded in the model configuration (so checkpoints, exports and
//! the server carry it).

use std::path::PathBuf;

use corrflow_infer::model_meta::{OntologyHead, Pooling};
use corrflow_io::corpus::{CellLabels, Corpus};
use corrflow_io::error::{Error, Result};
use corrflow_io::ontology;

/// `train --hce-*`.
#[derive(Clone, Debug, PartialEq)]
pub struct HceOptions {
    /// The ontology file (`datasets/data/CL-ontology-*.json.zst`).
    pub ontology: PathBuf,
    /// The obs column of term ids (`cl_id`, from `ingest --cell-type-map`).
    pub column: String,
    pub weight: f64,
    /// Reconstruction-only steps before the hierarchical loss starts.
    pub warmup_steps: u64,
    pub pooling: Pooling,
}

/// The head over every leaf under the corpus' labels.
pub fn head_for(options: &HceOptions, corpus: &Option<PathBuf>, atlases: &[String]) -> Result<OntologyHead> {
    let corpus = corpus.clone().ok_or_else(|| Error::Usage("train needs train.corpus (or --corpus)".into()))?;
    let loaded = ontology::load(&options.ontology)?;
    let index = Corpus::open(&corpus)?.index(atlases)?;
    let labels = CellLabels::read(&index, &options.column)?;
    let o = &loaded.ontology;
    let unknown: Vec<&str> = labels.names.iter().filter(|n| o.find(n).is_none()).map(String::as_str).collect();
    if !unknown.is_empty() {
        return Err(Error::invalid(
            &corpus,
            format!(
                "obs column '{}' has values that are not terms of the ontology {} ({}): {} (map labels to term ids with ingest --cell-type-map)",
                options.column,
                options.ontology.display(),
                loaded.version,
                unknown.join(", ")
            ),
        ));
    }
    if labels.names.is_empty() {
        return Err(Error::invalid(&corpus, format!("obs column '{}' has no labelled cells", options.column)));
    }
    let terms: Vec<u32> = labels.names.iter().filter_map(|n| o.find(n)).collect();
    let slice = o.slice(&terms);
    tracing::info!(
        labels = terms.len(),
        leaves = slice.leaves().len(),
        terms = slice.len(),
        labelled_cells = labels.counts().iter().sum::<usize>(),
        "hierarchical head over ontology {}",
        loaded.version
    );
    Ok(OntologyHead {
        ontology_version: loaded.version,
        column: options.column.clone(),
        weight: options.weight,
        warmup_steps: options.warmup_steps,
        pooling: options.pooling,
        leaves: OntologyHead::leaf_ids(slice.terms()),
        terms: slice.terms().to_vec(),
    })
}
