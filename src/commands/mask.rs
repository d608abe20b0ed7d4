//! `mask audit`: the paper's Table 3 for a corpus and a graph.

use anyhow::Result;
use corrflow::config::Config;

use super::print_summary;
use crate::cli::MaskCommand;

pub(crate) fn mask(cfg: &Config, cmd: MaskCommand, json: bool) -> Result<()> {
    let progress = !json;
    let MaskCommand::Audit { corpus, graph, strategy, lambda, p, seed, epoch, atlas, dump, sweep, plot } = cmd;
    super::overlap()
        .input("--corpus", &corpus)
        .input("--graph", &graph)
        .output_opt("--dump", dump.as_deref())
        .output_opt("--plot", plot.as_deref())
        .check()?;
    check_fraction("--lambda", lambda, true)?;
    check_fraction("--p", p, false)?;
    for &l in &sweep {
        check_fraction("--sweep", Some(l), true)?;
    }
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
    let mut human = format!(
        "{} cells; graph {} genes ({} with an edge) / {} edges",
        report.cells, report.graph_genes, report.graph_genes_with_edges, report.graph_edges
    );
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

/// A share flag: `--lambda` and `--sweep` in [0, 1] (`closed`), `--p` in (0, 1).
pub(crate) fn check_fraction(flag: &str, value: Option<f64>, closed: bool) -> Result<()> {
    let Some(v) = value else { return Ok(()) };
    if closed {
        anyhow::ensure!((0.0..=1.0).contains(&v), "{flag} must be in [0, 1] (got {v})");
    } else {
        anyhow::ensure!(v > 0.0 && v < 1.0, "{flag} must be in (0, 1) (got {v})");
    }
    Ok(())
}
