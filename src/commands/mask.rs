//! `mask audit`: the paper's Table 3 for a corpus and a graph.

use anyhow::Result;
use corrflow::config::Config;

use super::print_summary;
use crate::cli::MaskCommand;

pub(crate) fn mask(cfg: &Config, cmd: MaskCommand, json: bool) -> Result<()> {
    let progress = !json;
    let MaskCommand::Audit { corpus, graph, strategy, lambda, p, seed, epoch, atlas, dump, sweep, plot } = cmd;
    let mut params = cfg.mask.clone();
    params.lambda = lambda.unwrap_or(params.lambda);
    params.p = p.unwrap_or(params.p);
    params.seed = seed.unwrap_or(params.seed);
    params.validate().map_err(anyhow::Error::msg)?;
    let strategies = if strategy.is_empty() { vec![params.strategy] } else { strategy };
    let req = corrflow::mask::AuditRequest {
        corpus,
        graph,
        atlases: atlas,
        strategies,
        params,
        sweep,
        epoch,
        dump,
        plot,
        progress,
    };
    let report = corrflow::mask::audit_command(&req)?;
    print!("{}", corrflow::mask::table(&report.rows));
    if !report.sweep.is_empty() {
        println!("\nλ sweep (CorrMask):");
        print!("{}", corrflow::mask::table(&report.sweep));
    }
    let mut human =
        format!("{} cells; graph {} genes / {} edges", report.cells, report.graph_genes, report.graph_edges);
    if let Some(n) = report.pmi_pairs {
        human.push_str(&format!("; {n} PMI-linked pairs"));
    }
    for (what, f) in [("dump", &report.dump), ("plot", &report.plot)] {
        if let Some(f) = f {
            human.push_str(&format!("; {what} -> {f}"));
        }
    }
    print_summary(json, &human, &report)
}
