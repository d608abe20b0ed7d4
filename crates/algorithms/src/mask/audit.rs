//! The masking audit of the paper's Table 3 (definitions in docs/DESIGN.md §6.3).

use serde::{Deserialize, Serialize};

use super::{MaskPlan, NeighbourTable};

/// Additive audit counts over cells; [`AuditCounts::merge`] combines threads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditCounts {
    pub cells: u64,
    pub gene_tokens: u64,
    pub masked: u64,
    pub structural: u64,
    /// Runs of consecutive masked positions.
    pub runs: u64,
    /// Σ over masked genes g of |N(g)|: every (masked gene, neighbour) pair.
    pub neighbour_pairs: u64,
    /// Of those, pairs whose neighbour is masked in the same cell.
    pub neighbour_hits: u64,
}

impl AuditCounts {
    /// Counts one cell: its gene tokens and its plan.
    pub fn add(&mut self, genes: &[u32], plan: &MaskPlan, graph: &NeighbourTable) {
        self.cells += 1;
        self.gene_tokens += genes.len() as u64;
        self.masked += plan.positions.len() as u64;
        self.structural += plan.structural as u64;
        let pos = &plan.positions;
        self.runs += pos.iter().enumerate().filter(|&(i, &p)| i == 0 || pos[i - 1] + 1 != p).count() as u64;
        // Masked tokens sorted, to test neighbours by binary search (no per-cell index needed).
        let mut masked: Vec<u32> = pos.iter().map(|&p| genes[p as usize]).collect();
        masked.sort_unstable();
        for &g in &masked {
            let n = graph.neighbours(g);
            self.neighbour_pairs += n.len() as u64;
            self.neighbour_hits += n.iter().filter(|v| masked.binary_search(v).is_ok()).count() as u64;
        }
    }

    pub fn merge(&mut self, o: &Self) {
        self.cells += o.cells;
        self.gene_tokens += o.gene_tokens;
        self.masked += o.masked;
        self.structural += o.structural;
        self.runs += o.runs;
        self.neighbour_pairs += o.neighbour_pairs;
        self.neighbour_hits += o.neighbour_hits;
    }

    /// Mean length of runs of consecutive masked positions.
    pub fn mean_span(&self) -> f64 {
        self.masked as f64 / self.runs as f64
    }

    /// P(neighbour masked | gene masked), over every graph neighbour whether present or not.
    pub fn hit_rate(&self) -> f64 {
        self.neighbour_hits as f64 / self.neighbour_pairs as f64
    }

    pub fn masked_fraction(&self) -> f64 {
        self.masked as f64 / self.gene_tokens as f64
    }

    pub fn structural_fraction(&self) -> f64 {
        self.structural as f64 / self.masked as f64
    }
}
