//! `corrflow eval cells`: embed first when given a model, score every method beside the
//! baselines, print the side-by-side table, optionally draw the panel.

use std::path::PathBuf;

use anyhow::{Context, Result};
use corrflow::config::Config;
use corrflow::embed::ModelSource;
use corrflow::eval::cells::{self, CellEvalOptions, CellEvalRequest, NamedEmbeddings};

use super::print_summary;
use super::serve::model_inputs;
use crate::cli::EvalCellsArgs;

pub(crate) fn eval_cells(cfg: &Config, a: EvalCellsArgs, json: bool) -> Result<()> {
    let models: Vec<ModelSource> = a
        .model
        .iter()
        .map(|m| ModelSource::Onnx(m.clone()))
        .chain(a.checkpoint.iter().map(|c| ModelSource::Checkpoint(c.clone())))
        .collect();
    let mut overlap = super::overlap().input("--input", &a.input);
    for e in &a.embeddings {
        overlap = overlap.input("--embeddings", e);
    }
    for m in &models {
        overlap = model_inputs(m, overlap);
    }
    overlap.output_opt("--plot", a.plot.as_deref()).check()?;
    if let Some(p) = &a.plot {
        corrflow::fs::atomic::check_writable(p)?;
    }
    let sources: Vec<PathBuf> =
        a.embeddings.iter().cloned().chain(a.model.iter().cloned()).chain(a.checkpoint.iter().cloned()).collect();
    let names = method_names(&a.name, &sources)?;
    // Models embed the input into a scratch directory first, exactly as `embed` would.
    let scratch = tempfile::tempdir().context("a scratch directory for the embeddings")?;
    let mut embeddings: Vec<NamedEmbeddings> =
        a.embeddings.iter().zip(&names).map(|(p, n)| NamedEmbeddings { name: n.clone(), path: p.clone() }).collect();
    for (i, model) in models.into_iter().enumerate() {
        let out = scratch.path().join(format!("model-{i}.parquet"));
        let cells = corrflow::infer::CellsRun {
            model,
            input: a.input.clone(),
            read: a.read.read_options(cfg, Vec::new()),
            allow_normalized: a.read.allow_normalized || a.read.log1p,
            transform: a.read.transform(),
            batching: a.batching.batching(),
            runtime: a.runtime.options(),
            progress: !json,
        };
        let req = corrflow::embed::EmbedRequest {
            cells,
            out: out.clone(),
            h5ad_out: None,
            pooling: None,
            layer: -1,
            genes: false,
        };
        corrflow::embed::embed(&req)?;
        embeddings.push(NamedEmbeddings { name: names[a.embeddings.len() + i].clone(), path: out });
    }
    let req = CellEvalRequest {
        input: a.input.clone(),
        read: a.read.read_options(cfg, Vec::new()),
        transform: a.read.transform(),
        allow_normalized: a.read.allow_normalized,
        embeddings,
        label: a.label,
        batch: a.batch,
        exclude: a.exclude,
        options: CellEvalOptions {
            neighbours: a.neighbours,
            lisi_neighbours: a.lisi_neighbours,
            resolutions: a.resolutions,
            n_top_genes: a.n_top_genes,
            n_comps: a.n_comps,
            folds: a.folds,
            alpha: a.alpha,
            probe_neighbours: a.probe_neighbours,
            seed: a.seed,
            baselines: !a.no_baselines,
            ..CellEvalOptions::default()
        },
    };
    let report = cells::eval_cells(&req)?;
    let mut human = cells::table(&report);
    if let Some(p) = &a.plot {
        draw(p, &report)?;
        human += &format!("plot: {}\n", p.display());
    }
    print_summary(json, human.trim_end(), &report)
}

/// `--name` values, or "embeddings" for one method, or the file names.
fn method_names(given: &[String], sources: &[PathBuf]) -> Result<Vec<String>> {
    if !given.is_empty() {
        anyhow::ensure!(
            given.len() == sources.len(),
            "--name has {} names for {} methods (--embeddings, then --model, then --checkpoint)",
            given.len(),
            sources.len()
        );
        anyhow::ensure!(given.iter().all(|n| !n.trim().is_empty()), "--name: names must not be empty");
        return Ok(given.to_vec());
    }
    if sources.len() == 1 {
        return Ok(vec!["embeddings".into()]);
    }
    Ok(sources
        .iter()
        .map(|p| p.file_stem().or(p.file_name()).map_or("model".into(), |s| s.to_string_lossy().into_owned()))
        .collect())
}

/// The panel: each method's two leading principal components coloured by label, and a bar
/// chart of the main metrics per method.
fn draw(path: &std::path::Path, r: &cells::CellEvalReport) -> Result<()> {
    let scatters: Vec<(&str, &[[f64; 2]])> = r.layouts.iter().map(|(n, l)| (n.as_str(), l.as_slice())).collect();
    let metrics = ["ari", "nmi", "silhouette_label", "macro_f1", "knn_macro_f1", "ilisi", "graph_connectivity"];
    let bars: Vec<(&str, Vec<(String, f64)>)> = metrics
        .iter()
        .filter_map(|m| {
            let v: Vec<(String, f64)> =
                r.order.iter().filter_map(|n| cells::metric(&r.methods[n], m).map(|v| (n.clone(), v))).collect();
            (!v.is_empty()).then_some((*m, v))
        })
        .collect();
    corrflow_plot::scatter_and_bars(
        path,
        &format!("eval cells: {} ({} cells)", r.label, r.cells),
        &scatters,
        &r.label_codes,
        &r.label_names,
        &bars,
    )?;
    Ok(())
}
