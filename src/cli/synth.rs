//! `synth structure|modularity` arguments: each flag overrides `[synth.*]` of the config.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use corrflow::synth::Background;

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
    #[arg(long, value_parser = super::serde_enum::<Background>, value_delimiter = ',', value_name = "rate|mean")]
    pub background: Option<Vec<Background>>,
    /// First seed; trial t uses seed + t (overrides synth.modularity.seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs trained at once (overrides synth.modularity.threads; 0 = all cores; at most 16 per
    /// core).
    #[arg(long, value_parser = super::parse_threads)]
    pub threads: Option<usize>,
}
