//! A watch on the graph directory, so that a graph updated during training reaches the masking
//! operator.

use std::path::PathBuf;

use crate::dataflow::EdgeChange;

/// Polls a graph directory for a new version (its `graph.json` content hash) and returns the
/// edge changes against the version the masking operator holds.
pub struct GraphWatch {
    pub dir: PathBuf,
    pub every: u64,
    pub hash: String,
    pub edges: std::collections::BTreeSet<(u32, u32)>,
}

impl GraphWatch {
    pub(crate) fn poll(&mut self, seq: u64) -> Option<Vec<EdgeChange>> {
        if !seq.is_multiple_of(self.every.max(1)) {
            return None;
        }
        let text = std::fs::read_to_string(self.dir.join(corrflow_io::graph_files::INFO)).ok()?;
        let info: corrflow_io::graph_files::GraphInfo = serde_json::from_str(&text).ok()?;
        if info.content_hash == self.hash {
            return None;
        }
        // A graph being replaced may be half-visible for a moment: keep the old one then.
        let g = corrflow_io::graph_files::read_graph(&self.dir).ok()?;
        let new: std::collections::BTreeSet<(u32, u32)> = g.edges.iter().map(|e| (e.u, e.v)).collect();
        let mut changes: Vec<EdgeChange> = self.edges.difference(&new).map(|&e| (e, -1)).collect();
        changes.extend(new.difference(&self.edges).map(|&e| (e, 1)));
        tracing::info!(
            seq,
            added = new.difference(&self.edges).count(),
            "dependency graph changed; masking uses it from this batch on"
        );
        self.hash = g.info.content_hash;
        self.edges = new;
        Some(changes)
    }
}
