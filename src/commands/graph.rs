//! `graph build|update|rebase|show`: the gene dependency graph (CorrMask Algorithm 1).

use anyhow::Result;
use corrflow::config::Config;
use corrflow::vocab::Vocabulary;

use super::print_summary;
use crate::cli::GraphCommand;

pub(crate) fn graph(cfg: &Config, cmd: GraphCommand, json: bool) -> Result<()> {
    match cmd {
        GraphCommand::Build { corpus, out, atlas, n_sub, seed, max_genes, incremental, cluster, .. } => {
            super::overlap().input("--corpus", &corpus).replaced_dir("--out", &out).check()?;
            let mut params = cfg.graph.clone();
            params.n_sub = n_sub.unwrap_or(params.n_sub);
            params.seed = seed.unwrap_or(params.seed);
            params.max_genes = max_genes.unwrap_or(params.max_genes);
            anyhow::ensure!(
                incremental || (cluster.workers == 1 && cluster.processes == 1 && cluster.hostfile.is_none()),
                "-w/-n/-p/-h apply to `graph build --incremental` (the streamed dataflow); the in-memory \
                 exact build uses all cores by itself"
            );
            let mut s = if incremental {
                match corrflow::graph::build_incremental(&corpus, &atlas, &params, &out, &cluster.cluster()?)? {
                    Some((_, s)) => s,
                    None => {
                        let what = serde_json::json!({"command": "graph build", "helper": true});
                        return print_summary(json, "graph build: statistics contributed to process 0", &what);
                    }
                }
            } else {
                let (mut graph, s) = corrflow::graph::build_exact(&corpus, &atlas, &params)?;
                corrflow::graph::write_graph(&out, &mut graph)?;
                s
            };
            s.out = out.display().to_string();
            let human = if incremental {
                format!(
                    "graph build: {} genes, {} edges from {} cells in {:.2}s (streamed: vocabulary and rank maps {:.2}s, exact statistics and selection {:.2}s, ρ_local {:.2}s from {} in {} round{}) -> {}",
                    s.genes, s.edges, s.cells, s.seconds, s.seconds_load, s.seconds_statistics, s.seconds_local,
                    s.local_method, s.local_rounds, if s.local_rounds == 1 { "" } else { "s" }, out.display()
                )
            } else {
                format!(
                    "graph build: {} genes, {} edges from {} cells in {:.2}s (load {:.2}s, statistics {:.2}s incl. screening products {:.2}s at {:.0} GFLOP/s, exact ρ {:.2}s) -> {}",
                    s.genes, s.edges, s.cells, s.seconds, s.seconds_load, s.seconds_statistics, s.seconds_screening, s.screening_gflops, s.seconds_local, out.display()
                )
            };
            print_summary(json, &human, &s)
        }
        GraphCommand::Update { graph, add, retract, cluster, .. } => {
            super::overlap().input_opt("--add", add.as_deref()).replaced_dir("--graph", &graph).check()?;
            let cluster = cluster.cluster()?;
            let s = match (add, retract) {
                (Some(dir), _) => corrflow::graph::update_add(&graph, &dir, &cluster)?,
                (_, Some(name)) => corrflow::graph::update_retract(&graph, &name, &cluster)?,
                _ => unreachable!("clap requires --add or --retract"),
            };
            let human = update_line(&s);
            print_summary(json, &human, &s)
        }
        GraphCommand::Rebase { graph, cluster, .. } => {
            let s = corrflow::graph::rebase(&graph, &cluster.cluster()?)?;
            print_summary(json, &update_line(&s), &s)
        }
        GraphCommand::Show { graph, gene, vocab, top } => {
            let g = corrflow::graph::read_graph(&graph)?;
            let vocab = Vocabulary::resolve(&vocab).ok();
            let report = corrflow::graph::show_graph(&g, Some(&graph), vocab.as_ref(), gene.as_deref(), top)
                .map_err(anyhow::Error::msg)?;
            let summary = serde_json::json!({"command": "graph show", "info": g.info});
            print_summary(json, report.trim_end(), &summary)
        }
    }
}

/// The human line of `graph update` and `graph rebase`.
fn update_line(s: &corrflow::graph::UpdateSummary) -> String {
    if s.delta.is_none() && !s.rebased {
        return format!("{}: {}", s.command, s.change);
    }
    let mut line = format!(
        "{} ({}): {} edges from {} cells; +{} -{} ~{} edges (delta {}); drift mean {:.4} max {:.4}, {} genes outside the graph vocabulary{}",
        s.command,
        s.change,
        s.edges,
        s.cells,
        s.added,
        s.removed,
        s.reweighted,
        s.delta.as_deref().unwrap_or("-"),
        s.drift.mean_ks,
        s.drift.max_ks,
        s.drift.vocab_missing.map_or("?".to_string(), |m| m.to_string()),
        if s.rebased { "; rebased" } else { "" }
    );
    if s.drift.vocab_entered > 0 {
        line.push_str(&format!(
            "\n{} genes entered the graph vocabulary (statistics computed from the stored shards)",
            s.drift.vocab_entered
        ));
    }
    if s.rebase_recommended && !s.rebased {
        line.push_str(
            "\nrebase recommended: drift is above graph.rebase_drift, or more genes than graph.rebase_vocab would enter the graph vocabulary (run `corrflow graph rebase`)",
        );
    }
    line
}
