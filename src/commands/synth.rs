//! `corrflow synth structure|modularity`: the commands (flags override `[synth.*]` of the
//! config), which write `<experiment>.json` and `<experiment>.svg` into `--out`.

use std::path::{Path, PathBuf};

use corrflow::error::{Error, IoContext, Result};
use corrflow::synth::plot::{modularity_plot, structure_plot};
use corrflow::synth::structure;
use corrflow::synth::sweep::{markdown_table, sweep};
use corrflow::synth::SynthConfig;

use crate::cli::synth::{ModularityArgs, StructureArgs, SynthCommand};

/// Runs a synth command: (human-readable lines, JSON summary).
pub fn execute(cmd: &SynthCommand, cfg: &SynthConfig, progress: bool) -> Result<(String, serde_json::Value)> {
    match cmd {
        SynthCommand::Structure(a) => run_structure(a, cfg),
        SynthCommand::Modularity(a) => run_modularity(a, cfg, progress),
    }
}

/// `synth structure`: the report, its plots under `--out`, and the human summary.
fn run_structure(a: &StructureArgs, cfg: &SynthConfig) -> Result<(String, serde_json::Value)> {
    let mut p = cfg.structure.clone();
    p.seed = a.seed.unwrap_or(p.seed);
    p.cells = a.cells.unwrap_or(p.cells);
    p.top_k = a.top_k.unwrap_or(p.top_k);
    p.validate().map_err(Error::Usage)?;
    let (mut report, maps) = structure::run(&p);
    if let Some(dir) = &a.out {
        let (json, svg) = paths(dir, "structure")?;
        let zoom = dir.join("structure-zoom.svg");
        structure_plot(&svg, &zoom, &report, &maps, p.plot_bins)?;
        report.plot = Some(svg.display().to_string());
        report.zoom_plot = Some(zoom.display().to_string());
        report.json = Some(json.display().to_string());
        corrflow::fs::atomic::write_json_atomic(&json, &report)?;
    }
    let human = format!(
        "synth structure: {} genes in {} modules, {} cells, top {} tokens\n  same- vs cross-module pairs, AUROC: adjacency {:.4}, co-occurrence {:.4}\n  mean count within/between modules: adjacency {:.3}/{:.3}, co-occurrence {:.2}/{:.2}; same-module pairs never counted: adjacency {:.1}%, co-occurrence {:.1}%{}",
        p.genes,
        p.modules,
        p.cells,
        p.top_k,
        report.adjacency.auroc,
        report.cooccurrence.auroc,
        report.adjacency.mean_within,
        report.adjacency.mean_between,
        report.cooccurrence.mean_within,
        report.cooccurrence.mean_between,
        100.0 * report.adjacency.zero_within,
        100.0 * report.cooccurrence.zero_within,
        report.plot.as_deref().map(|s| format!("\n  -> {s}, {}", report.zoom_plot.as_deref().unwrap_or("-"))).unwrap_or_default()
    );
    Ok((human, serde_json::to_value(&report).expect("serialisable")))
}

/// `synth modularity`: the sweep (resumed from its journal under `--out`), its plot, and the
/// human summary.
fn run_modularity(a: &ModularityArgs, cfg: &SynthConfig, progress: bool) -> Result<(String, serde_json::Value)> {
    let mut p = cfg.modularity.clone();
    p.seeds = a.seeds.unwrap_or(p.seeds);
    p.epochs = a.epochs.unwrap_or(p.epochs);
    p.seed = a.seed.unwrap_or(p.seed);
    p.threads = a.threads.unwrap_or(p.threads);
    if let Some(g) = &a.gammas {
        p.gammas = g.clone();
    }
    if let Some(b) = &a.background {
        p.backgrounds = b.clone();
    }
    p.validate().map_err(Error::Usage)?;
    let show = |done: usize, total: usize, r: &corrflow::synth::sweep::RunRecord| {
        if progress {
            eprintln!(
                "[{done}/{total}] background {} γ {:.2} trial {} {}: accuracy {:.4} (loss {:.3} -> {:.3}, {:.1}s)",
                r.background.name(),
                r.gamma,
                r.trial,
                r.strategy.name(),
                r.outcome.accuracy,
                r.outcome.first_loss,
                r.outcome.last_loss,
                r.outcome.seconds
            );
        }
    };
    let journal = a.out.as_ref().map(|dir| dir.join("modularity.runs.jsonl"));
    let mut report = sweep(&p, journal.as_deref(), &show)?;
    if let Some(dir) = &a.out {
        let (json, svg) = paths(dir, "modularity")?;
        modularity_plot(&svg, &report)?;
        report.plot = Some(svg.display().to_string());
        report.json = Some(json.display().to_string());
        corrflow::fs::atomic::write_json_atomic(&json, &report)?;
    }
    let human = format!(
        "synth modularity: {} runs ({} from the journal; {} trials × {} γ × 2 strategies × {} background(s)), {} epochs, {:.1}s on {} thread(s)\n{}{}",
        report.runs.len(),
        report.resumed,
        p.seeds,
        p.gammas.len(),
        p.backgrounds.len(),
        p.epochs,
        report.seconds,
        report.threads,
        markdown_table(&report).trim_end(),
        report.plot.as_deref().map(|s| format!("\n-> {s}")).unwrap_or_default()
    );
    Ok((human, serde_json::to_value(&report).expect("serialisable")))
}

fn paths(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).at(dir)?;
    Ok((dir.join(format!("{name}.json")), dir.join(format!("{name}.svg"))))
}
