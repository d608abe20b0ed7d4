//! Leiden clustering of a weighted graph (modularity with a resolution, as igraph's
//! `community_leiden(objective_function="modularity")` and leidenalg's `RBConfigurationVertex
//! Partition` optimise it), through the `leiden-rs` crate, seeded and single-threaded so that
//! a seed gives one partition on every machine and thread count.

use leiden_rs::{GraphDataBuilder, Leiden, LeidenConfig, QualityType};

use super::umap_graph::WeightedGraph;

/// Cluster of each node, numbered from 0 in order of first appearance.
pub fn leiden(graph: &WeightedGraph, resolution: f64, seed: u64) -> Result<Vec<usize>, String> {
    let mut b = GraphDataBuilder::new(graph.nodes);
    for &(i, j, w) in &graph.edges {
        b.add_edge(i as usize, j as usize, w).map_err(|e| e.to_string())?;
    }
    let data = b.build().map_err(|e| e.to_string())?;
    let config =
        LeidenConfig { resolution, seed: Some(seed), quality: QualityType::Modularity, ..LeidenConfig::default() };
    let out = Leiden::new(config).run(&data).map_err(|e| e.to_string())?;
    let mut renumber = std::collections::HashMap::new();
    Ok((0..graph.nodes)
        .map(|v| {
            let next = renumber.len();
            *renumber.entry(out.partition.community_of(v)).or_insert(next)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cliques_joined_by_a_weak_edge_are_two_clusters() {
        let mut edges = Vec::new();
        for base in [0u32, 5] {
            for i in 0..5 {
                for j in i + 1..5 {
                    edges.push((base + i, base + j, 1.0));
                }
            }
        }
        edges.push((4, 5, 0.01));
        let g = WeightedGraph { nodes: 10, edges };
        let c = leiden(&g, 1.0, 0).unwrap();
        assert_eq!(c, vec![0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
        assert_eq!(c, leiden(&g, 1.0, 0).unwrap(), "seeded");
    }
}
