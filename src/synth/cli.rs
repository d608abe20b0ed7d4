//! `corrflow synth structure|modularity`: arguments (flags override `[synth.*]` of the config)
//! and the commands, which write `<experiment>.json` and `<experiment>.svg` into `--out`.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::plot::{modularity_plot, structure_plot};
use super::structure;
use super::sweep::{markdown_table, sweep};
use super::{Background, SynthConfig};
use crate::error::{Error, IoContext, Result};

#[derive(Subcommand, Clone, Debug)]
pub enum SynthCommand {
    /// Fig. 2 (Appendix B.1): adjacency vs co-occurrence recovery of gene modules (AUROC).
    Structure(StructureArgs),
    /// Fig. 3 (Appendix B.2): random vs correlation masking across modularity γ.
    Modularity(ModularityArgs),
}

#[derive(Args, Clone, Debug)]
pub struct StructureArgs {
    /// Directory for structure.json and structure.svg (created).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Overrides synth.structure.seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Overrides synth.structure.cells.
    #[arg(long)]
    pub cells: Option<usize>,
    /// Overrides synth.structure.top_k.
    #[arg(long)]
    pub top_k: Option<usize>,
}

#[derive(Args, Clone, Debug)]
pub struct ModularityArgs {
    /// Directory for modularity.json, modularity.svg and the journal of finished runs,
    /// modularity.runs.jsonl: the same command started again resumes from it (created).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Trials per γ (overrides synth.modularity.seeds).
    #[arg(long)]
    pub seeds: Option<usize>,
    /// Pre-training epochs (overrides synth.modularity.epochs).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Modularity levels, e.g. 0,0.25,0.5,0.75,1 (overrides synth.modularity.gammas).
    #[arg(long, value_delimiter = ',', value_name = "G,G")]
    pub gammas: Option<Vec<f64>>,
    /// Exp(0.1) read as a rate (mean 10), as a mean, or both: rate,mean (overrides
    /// synth.modularity.backgrounds).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "rate|mean")]
    pub background: Option<Vec<Background>>,
    /// First seed; trial t uses seed + t (overrides synth.modularity.seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs trained at once (overrides synth.modularity.threads; 0 = all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Runs a synth command: (human-readable lines, JSON summary).
pub fn execute(cmd: &SynthCommand, cfg: &SynthConfig, progress: bool) -> Result<(String, serde_json::Value)> {
    match cmd {
        SynthCommand::Structure(a) => {
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
                crate::util::atomic::write_json_atomic(&json, &report)?;
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
        SynthCommand::Modularity(a) => {
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
            let show = |done: usize, total: usize, r: &super::sweep::RunRecord| {
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
                crate::util::atomic::write_json_atomic(&json, &report)?;
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
    }
}

fn paths(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).at(dir)?;
    Ok((dir.join(format!("{name}.json")), dir.join(format!("{name}.svg"))))
}
