//! `corrflow annotate`: Cell Ontology calls for the cells of a file from a model with a
//! hierarchical cell-type head (`train --hce-ontology`): per cell the most probable leaf with
//! its lineage, the greedy top-down path, and the reliable call (the deepest term of that path
//! whose probability reaches τ), each with its probability. Streamed like `embed` (the same
//! tokenizer, batches and encoder backends: a checkpoint run by burn or an exported model run by
//! ONNX Runtime); optionally scored against a label column ([`truth`]).

pub mod calls;
mod columns;
mod truth;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::annotate::calls::{Annotator, CellCall};
use crate::encode::{encode_cells, split_probabilities, Encoder, ModelCells, Output};
use crate::model_meta::OntologyHead;
use corrflow_io::error::{Error, Result};
use corrflow_io::formats::obs_write::{write_obs_columns, NewObsColumn};
use corrflow_io::util::parquet_out::ParquetOut;

use crate::cells_run::CellsRun;
use crate::embed::tokenize_input;
use crate::registry::{model_config, open_encoder, ModelSource, OpenOptions};
pub use truth::{Truth, TruthReport};

#[derive(Clone, Debug)]
pub struct AnnotateRequest {
    pub cells: CellsRun,
    pub out: PathBuf,
    /// A copy of the input with the calls as obs columns.
    pub h5ad_out: Option<PathBuf>,
    /// The reliable call's τ.
    pub threshold: f64,
    /// The ontology file, checked against the release the model was trained with.
    pub ontology: Option<PathBuf>,
    /// Score the calls against a label column.
    pub truth: Option<Truth>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AnnotateSummary {
    pub command: String,
    pub encoder: String,
    pub out: String,
    pub cells: u64,
    pub dropped: u64,
    pub ontology_version: String,
    /// Head outputs (leaves) and terms of its ontology slice.
    pub leaves: usize,
    pub terms: usize,
    pub threshold: f64,
    pub seconds: f64,
    pub cells_per_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<TruthReport>,
}

/// The hierarchical head of the model a request names (from the checkpoint's state or the
/// exported model's metadata, without loading weights).
pub fn model_head(model: &ModelSource) -> Result<(OntologyHead, PathBuf)> {
    let (config, path) = model_config(model)?;
    let head = config.hce.ok_or_else(|| {
        Error::Usage(format!(
            "{} has no hierarchical cell-type head: train one with `train --hce-ontology` (a fine-tuned classifier's labels come from `embed`)",
            path.display()
        ))
    })?;
    Ok((head, path))
}

/// Refuses an ontology file of another release than the model's, or one that lacks a term of
/// the model's slice.
pub fn check_ontology(head: &OntologyHead, model: &Path, ontology: &Path) -> Result<()> {
    let loaded = corrflow_io::ontology::load(ontology)?;
    if loaded.version != head.ontology_version {
        return Err(Error::conflict(
            ontology,
            format!(
                "is ontology release {}, but {} was trained with release {}: use that release's file",
                loaded.version,
                model.display(),
                head.ontology_version
            ),
        ));
    }
    if let Some(t) = head.terms.iter().find(|t| loaded.ontology.find(&t.id).is_none()) {
        return Err(Error::conflict(ontology, format!("lacks term {} ({}) of the model's head", t.id, t.label)));
    }
    Ok(())
}

pub fn annotate(req: &AnnotateRequest) -> Result<AnnotateSummary> {
    let start = std::time::Instant::now();
    corrflow_fs::atomic::check_writable(&req.out)?;
    if let Some(h5) = &req.h5ad_out {
        corrflow_fs::atomic::check_writable(h5)?;
        corrflow_io::formats::check_editable(&req.cells.input)?;
    }
    let (head, model_path) = model_head(&req.cells.model)?;
    if let Some(o) = &req.ontology {
        check_ontology(&head, &model_path, o)?;
    }
    let annotator = Annotator::new(&head, req.threshold).map_err(Error::Usage)?;
    let opts = OpenOptions { pooling: Some(head.pooling), layer: -1, runtime: req.cells.runtime.clone() };
    let mut encoder = open_encoder(&req.cells.model, &opts)?;
    crate::encode::check_batch_memory(encoder.as_ref(), req.cells.batching.token_budget)?;
    if encoder.classes() != head.leaves.as_slice() {
        return Err(Error::format(&model_path, "the model's cell head does not output its ontology slice's leaves"));
    }
    let mut read = req.cells.read.clone();
    let truth = req.truth.as_ref().map(|t| t.open(&annotator)).transpose()?;
    read.obs_columns = truth.iter().map(|t| t.column().to_string()).collect();
    let (_scratch, index, ingest) = tokenize_input(
        &req.cells.input,
        &read,
        req.cells.allow_normalized,
        req.cells.transform,
        encoder.as_ref(),
        req.cells.progress,
    )?;
    let bar = crate::embed::progress_bar(req.cells.progress, index.cells, "annotate");
    let mut scorer = truth;
    if let Some(s) = scorer.as_mut() {
        s.prepare(&index, &annotator)?;
    }
    let mut out = ParquetOut::new(&req.out);
    let mut kept: Option<(Vec<String>, Vec<CellCall>)> = req.h5ad_out.as_ref().map(|_| Default::default());
    let source = crate::embed::ScratchCells::for_model(encoder.as_ref(), &index)?;
    for shard in &index.shards {
        source.for_each_batch(&shard.path, |rb| {
            let cells = source.cells(rb, &shard.path)?;
            let (calls, probs) = call_rows(encoder.as_mut(), &annotator, &cells, req)?;
            let ids = columns::cell_ids(rb, &shard.path)?;
            let k = annotator.head.width();
            let truth = match scorer.as_mut() {
                Some(s) => Some(s.add(rb, &shard.path, &calls, (&probs, k), &annotator)?),
                None => None,
            };
            out.write(&columns::calls_batch(&ids, &calls, truth.as_ref(), &shard.path)?)?;
            if let Some((all_ids, all_calls)) = kept.as_mut() {
                all_ids.extend(ids);
                all_calls.extend(calls);
            }
            bar.inc(rb.num_rows() as u64);
            Ok(())
        })?;
    }
    out.finish(|| Error::format(&req.cells.input, "no cell could be tokenized with the model's vocabulary"))?;
    bar.finish();
    if let (Some(h5), Some((ids, calls))) = (&req.h5ad_out, kept) {
        write_obs_columns(&req.cells.input, h5, &ids, &obs_columns(&calls))?;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(AnnotateSummary {
        command: "annotate".into(),
        encoder: encoder.name().into(),
        out: req.out.display().to_string(),
        cells: ingest.cells_kept,
        dropped: ingest.dropped.total(),
        ontology_version: head.ontology_version.clone(),
        leaves: annotator.head.width(),
        terms: annotator.head.ontology().len(),
        threshold: req.threshold,
        seconds,
        cells_per_s: ingest.cells_kept as f64 / seconds.max(1e-9),
        evaluation: scorer.map(|s| s.report(&annotator)),
    })
}

/// The calls of a shard record batch's cells, in row order, and their leaf probabilities.
fn call_rows(
    encoder: &mut dyn Encoder,
    annotator: &Annotator,
    cells: &ModelCells,
    req: &AnnotateRequest,
) -> Result<(Vec<CellCall>, Vec<f32>)> {
    let (dim, k) = (encoder.dim(), encoder.classes().len());
    let rows = encode_cells(encoder, cells, req.cells.batching, Output::WithProbabilities, |_| {})?;
    let (_, probs) = split_probabilities(rows, dim, k);
    Ok((probs.chunks(k).map(|p| annotator.call(p)).collect(), probs))
}

/// The calls as obs columns of the h5ad copy.
fn obs_columns(calls: &[CellCall]) -> Vec<(String, NewObsColumn)> {
    let text = |f: &dyn Fn(&CellCall) -> String| NewObsColumn::Text(calls.iter().map(f).collect());
    let number = |f: &dyn Fn(&CellCall) -> f32| NewObsColumn::Number(calls.iter().map(f).collect());
    vec![
        ("corrflow_leaf".into(), text(&|c| c.leaf.label.clone())),
        ("corrflow_leaf_id".into(), text(&|c| c.leaf.id.clone())),
        ("corrflow_leaf_probability".into(), number(&|c| c.leaf.probability as f32)),
        ("corrflow_call".into(), text(&|c| c.call.as_ref().map_or(String::new(), |t| t.label.clone()))),
        ("corrflow_call_id".into(), text(&|c| c.call.as_ref().map_or(String::new(), |t| t.id.clone()))),
        ("corrflow_call_probability".into(), number(&|c| c.call.as_ref().map_or(f32::NAN, |t| t.probability as f32))),
    ]
}
