//! `corrflow mask audit`: the paper's Table 3 (mean span, conditional hit rate) over a corpus.

use corrflow_io::progress::Task;
use std::path::{Path, PathBuf};
use std::time::Instant;

use corrflow_algorithms::mask::{AuditCounts, MaskParams, MaskPlan, MaskScratch, MaskStrategy, MaskedSequence};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{MaskContext, MaskDumpWriter};
use corrflow_io::corpus::{Corpus, CorpusIndex};
use corrflow_io::error::{Error, Result};
use corrflow_plot::Series;

/// One line of the audit table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRow {
    pub strategy: String,
    pub lambda: f64,
    pub cells: u64,
    pub mean_span: f64,
    pub hit_rate: f64,
    pub masked_fraction: f64,
    pub structural_fraction: f64,
    pub counts: AuditCounts,
    pub seconds: f64,
    pub cells_per_s: f64,
}

/// Masks every cell of `index` (epoch `epoch`) with `ctx` and audits the plans; `dump` receives
/// every cell's masked positions. Cells are masked in parallel; results do not depend on it.
pub fn run_audit(
    ctx: &MaskContext,
    index: &CorpusIndex,
    epoch: u64,
    mut dump: Option<&mut MaskDumpWriter>,
    progress: &Task,
) -> Result<AuditRow> {
    let start = Instant::now();
    let masker = ctx.masker();
    let mut total = AuditCounts::default();
    index.for_each_cell_block(ctx.vocab_size, |block| {
        let keep = dump.is_some();
        let per_cell: Vec<(AuditCounts, Option<MaskPlan>, usize)> = (0..block.len())
            .into_par_iter()
            .map_init(
                || (MaskScratch::default(), MaskedSequence::default()),
                |(scratch, out), i| {
                    let tokens = block.cell(i);
                    masker.mask(tokens, epoch, block.first_key + i as u64, scratch, out);
                    let mut counts = AuditCounts::default();
                    let genes = &tokens[corrflow_algorithms::mask::gene_range(tokens, &ctx.layout)];
                    counts.add(genes, &out.plan, &ctx.graph);
                    (counts, keep.then(|| out.plan.clone()), out.gene_offset)
                },
            )
            .collect();
        if let Some(d) = dump.as_deref_mut() {
            let positions: Vec<Vec<u32>> = per_cell
                .iter()
                .map(|(_, p, off)| {
                    p.as_ref().map_or_else(Vec::new, |p| p.positions.iter().map(|&x| x + *off as u32).collect())
                })
                .collect();
            let structural: Vec<u32> =
                per_cell.iter().map(|(_, p, _)| p.as_ref().map_or(0, |p| p.structural as u32)).collect();
            d.write(&block.cell_ids, &positions, &structural)?;
        }
        per_cell.iter().for_each(|(c, _, _)| total.merge(c));
        progress.inc(block.len() as u64);
        Ok(())
    })?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(AuditRow {
        strategy: ctx.params.strategy.name().to_string(),
        lambda: ctx.params.lambda,
        cells: total.cells,
        mean_span: total.mean_span(),
        hit_rate: total.hit_rate(),
        masked_fraction: total.masked_fraction(),
        structural_fraction: total.structural_fraction(),
        counts: total,
        seconds,
        cells_per_s: total_cells_per_s(index.cells, seconds),
    })
}

fn total_cells_per_s(cells: u64, seconds: f64) -> f64 {
    cells as f64 / seconds.max(1e-9)
}

/// Audit rows as the paper's Table 3 plus the masked and structural fractions (text, one line
/// per row after a header).
pub fn table(rows: &[AuditRow]) -> String {
    let mut out = format!(
        "{:<10} {:>6} {:>10} {:>10} {:>9} {:>11} {:>9}\n",
        "strategy", "lambda", "mean span", "hit rate", "masked", "structural", "cells"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<10} {:>6.2} {:>10.3} {:>9.2}% {:>8.2}% {:>10.1}% {:>9}\n",
            r.strategy,
            r.lambda,
            r.mean_span,
            100.0 * r.hit_rate,
            100.0 * r.masked_fraction,
            100.0 * r.structural_fraction,
            r.cells
        ));
    }
    out
}

/// `corrflow mask audit`: what to audit.
#[derive(Clone, Debug)]
pub struct AuditRequest {
    pub corpus: PathBuf,
    pub graph: PathBuf,
    /// Atlases (empty: all).
    pub atlases: Vec<String>,
    /// Strategies of the table (each with `params.lambda`).
    pub strategies: Vec<MaskStrategy>,
    pub params: MaskParams,
    /// CorrMask at each of these λ (a sweep), after the table.
    pub sweep: Vec<f64>,
    pub epoch: u64,
    /// Every cell's masked positions (only for a single strategy and no sweep).
    pub dump: Option<PathBuf>,
    /// Plot of the sweep (SVG).
    pub plot: Option<PathBuf>,
    pub progress: bool,
}

/// What `mask audit --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuditReport {
    pub command: String,
    pub corpus: String,
    pub graph: String,
    pub cells: u64,
    /// The graph's genes (its vocabulary, as `graph build` and `graph show` count them).
    pub graph_genes: usize,
    /// Of those, the genes with at least one edge: the only ones structural masking can pair.
    pub graph_genes_with_edges: usize,
    pub graph_edges: usize,
    pub pmi_pairs: Option<usize>,
    pub rows: Vec<AuditRow>,
    pub sweep: Vec<AuditRow>,
    pub dump: Option<String>,
    pub plot: Option<String>,
}

pub fn audit_command(req: &AuditRequest) -> Result<AuditReport> {
    if req.dump.is_some() && (req.strategies.len() != 1 || !req.sweep.is_empty()) {
        return Err(Error::Usage("--dump needs exactly one strategy and no --sweep".into()));
    }
    if req.plot.is_some() && req.sweep.is_empty() {
        return Err(Error::Usage("--plot draws a λ sweep: give --sweep too".into()));
    }
    if let Some(l) = req.sweep.iter().find(|l| !(0.0..=1.0).contains(*l)) {
        return Err(Error::Usage(format!("--sweep values must be in [0, 1], got {l}")));
    }
    let corpus = Corpus::open(&req.corpus)?;
    let index = corpus.index(&req.atlases)?;
    let (info, vocab) = (&corpus.info, &corpus.vocab);
    let with_pmi = req.strategies.iter().any(|s| s.needs_pmi());
    let graph = corrflow_io::graph_files::read_graph(&req.graph)?;
    let base = MaskContext::load(info, vocab, &index, Some(&graph), &req.graph, req.params.clone(), with_pmi)?;
    let runs = req.strategies.len() + req.sweep.len();
    let bar = Task::start(req.progress, "mask audit", "cells", Some(index.cells * runs as u64), 0);
    let mut dump = req.dump.as_deref().map(MaskDumpWriter::create).transpose()?;
    let mut rows = Vec::new();
    for &s in &req.strategies {
        rows.push(run_audit(&base.with_strategy(s, req.params.lambda), &index, req.epoch, dump.as_mut(), &bar)?);
    }
    if let Some(d) = dump {
        d.finish()?;
    }
    let mut sweep = Vec::new();
    for &l in &req.sweep {
        sweep.push(run_audit(&base.with_strategy(MaskStrategy::CORRMASK, l), &index, req.epoch, None, &bar)?);
    }
    bar.finish();
    if let Some(p) = &req.plot {
        plot_sweep(p, &sweep)?;
    }
    Ok(AuditReport {
        command: "mask audit".into(),
        corpus: req.corpus.display().to_string(),
        graph: req.graph.display().to_string(),
        cells: index.cells,
        graph_genes: graph.info.genes,
        graph_genes_with_edges: base.graph.genes(),
        graph_edges: base.graph.edges(),
        pmi_pairs: base.pmi.as_ref().map(|p| p.pairs()),
        rows,
        sweep,
        dump: req.dump.as_ref().map(|p| p.display().to_string()),
        plot: req.plot.as_ref().map(|p| p.display().to_string()),
    })
}

/// Hit rate and mean span against λ; λ = 0 is random masking.
fn plot_sweep(path: &Path, sweep: &[AuditRow]) -> Result<()> {
    let series = |name: &str, f: fn(&AuditRow) -> f64| Series {
        name: name.into(),
        points: sweep.iter().map(|r| (r.lambda, f(r))).collect(),
    };
    Ok(corrflow_plot::line_panels(
        path,
        "CorrMask masking audit: λ sweep",
        "λ (structural share of the budget)",
        &[
            ("conditional hit rate (%)", vec![series("CorrMask", |r| 100.0 * r.hit_rate)]),
            ("mean masked span", vec![series("CorrMask", |r| r.mean_span)]),
        ],
    )?)
}
