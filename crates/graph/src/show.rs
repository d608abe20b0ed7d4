//! `corrflow graph show`: size, degree distribution and a gene's top neighbours.

use std::collections::HashMap;
use std::fmt::Write as _;

use corrflow_io::graph_files::Graph;
use corrflow_io::vocab::Vocabulary;

/// A human-readable report; `gene` (symbol or Ensembl id) adds its neighbours by |ρ_local|.
pub fn show_graph(
    graph: &Graph,
    graph_dir: Option<&std::path::Path>,
    vocab: Option<&Vocabulary>,
    gene: Option<&str>,
    top: usize,
) -> Result<String, String> {
    let mut out = String::new();
    let i = &graph.info;
    let _ = writeln!(
        out,
        "graph ({} mode): {} genes, {} edges, from {} cells of {} ({})",
        i.mode,
        i.genes,
        i.edges,
        i.cells,
        i.atlases.join(", "),
        &i.content_hash[..12.min(i.content_hash.len())]
    );
    let mut degree: HashMap<u32, usize> = HashMap::new();
    for e in &graph.edges {
        *degree.entry(e.u).or_default() += 1;
        *degree.entry(e.v).or_default() += 1;
    }
    let mut d: Vec<usize> = graph.genes.iter().map(|g| degree.get(&g.0).copied().unwrap_or(0)).collect();
    d.sort_unstable();
    if !d.is_empty() {
        let q = |p: f64| d[((d.len() - 1) as f64 * p).round() as usize];
        let isolated = d.iter().filter(|&&x| x == 0).count();
        let mean = d.iter().sum::<usize>() as f64 / d.len() as f64;
        let _ = writeln!(
            out,
            "degree: mean {mean:.1}, median {}, p90 {}, max {}; {isolated} genes without edges",
            q(0.5),
            q(0.9),
            q(1.0)
        );
    }
    if let Some(state) = graph_dir.and_then(super::state::GraphState::load_info) {
        let d = &state.drift;
        let _ = writeln!(
            out,
            "incremental state: {} atlases ({} at the last rebase); drift mean KS {:.4}, max {:.4} (rebase recommended above {}); {} genes would enter the graph vocabulary at a rebase (recommended above {:.0}% of it)",
            state.atlases.len(),
            state.rebase_atlases.len(),
            d.mean_ks,
            d.max_ks,
            state.params.rebase_drift,
            d.vocab_missing.map_or("?".to_string(), |m| m.to_string()),
            100.0 * state.params.rebase_vocab
        );
    }
    if let Some(name) = gene {
        let token = vocab
            .and_then(|v| v.lookup(name).map(|m| m.token()))
            .or_else(|| graph.genes.iter().find(|g| g.1 == name).map(|g| g.0))
            .ok_or_else(|| format!("gene '{name}' is not in the vocabulary"))?;
        let mut nb: Vec<(u32, f64, f64, u64)> = graph
            .edges
            .iter()
            .filter_map(|e| match (e.u == token, e.v == token) {
                (true, _) => Some((e.v, e.rho, e.rho_global, e.co_count)),
                (_, true) => Some((e.u, e.rho, e.rho_global, e.co_count)),
                _ => None,
            })
            .collect();
        nb.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()).then(a.0.cmp(&b.0)));
        let _ = writeln!(out, "{name} (token {token}): {} neighbours", nb.len());
        let names = vocab.map(Vocabulary::symbols_by_token).unwrap_or_default();
        for (t, r, rg, co) in nb.into_iter().take(top) {
            let label =
                names.get(&t).cloned().unwrap_or_else(|| vocab.and_then(|v| v.token(t)).unwrap_or("?").to_string());
            let _ = writeln!(out, "  {label:<16} rho {r:+.3}  rho_global {rg:+.3}  co-present {co}");
        }
    }
    Ok(out)
}
