use std::path::Path;

use corrflow_algorithms::mask::{
    MaskParams, MaskStrategy, MaskTables, Masker, NeighbourTable, PmiCounts, PmiTable, Replacement,
};
use corrflow_algorithms::SequenceLayout;

use corrflow_io::corpus::{CorpusIndex, CorpusInfo};
use corrflow_io::error::{Error, Result};
use corrflow_io::graph_files::{read_graph, Graph};
use corrflow_io::vocab::Vocabulary;

/// Everything masking a corpus needs, loaded once and checked for consistency.
#[derive(Debug)]
pub struct MaskContext {
    pub params: MaskParams,
    pub graph: NeighbourTable,
    pub pmi: Option<PmiTable>,
    pub replacement: Replacement,
    pub layout: SequenceLayout,
    pub vocab_size: usize,
    /// Padding token of batches.
    pub pad: u32,
}

impl MaskContext {
    /// The context for `params` over a corpus and a graph built from the same vocabulary; the
    /// PMI table is counted from `index`'s cells when `params` or `with_pmi` needs it.
    pub fn load(
        info: &CorpusInfo,
        vocab: &Vocabulary,
        index: &CorpusIndex,
        graph: Option<&Graph>,
        graph_dir: &Path,
        params: MaskParams,
        with_pmi: bool,
    ) -> Result<Self> {
        params.validate().map_err(|msg| Error::invalid(graph_dir, msg))?;
        let table = match graph {
            Some(g) => {
                if g.info.vocab_hash != info.vocab_hash {
                    let (built, uses) = corrflow_fs::hash::distinct_hashes(&g.info.vocab_hash, &info.vocab_hash);
                    return Err(Error::conflict(
                        graph_dir,
                        format!("graph was built with vocabulary {built} but the corpus uses {uses}"),
                    ));
                }
                if g.genes.len() > corrflow_algorithms::mask::MAX_GRAPH_GENES {
                    return Err(Error::format(
                        graph_dir,
                        format!(
                            "graph has {} genes; masking supports at most {}",
                            g.genes.len(),
                            corrflow_algorithms::mask::MAX_GRAPH_GENES
                        ),
                    ));
                }
                NeighbourTable::from_edges(g.edges.iter().map(|e| (e.u, e.v)))
            }
            None => NeighbourTable::default(),
        };
        if table.token_bound() > vocab.len() {
            return Err(Error::format(graph_dir, "graph has token ids outside the corpus vocabulary"));
        }
        let pmi = if with_pmi || params.strategy.needs_pmi() {
            Some(count_pmi(index, vocab, &info.layout)?.table(params.pmi_tau, params.pmi_min_count))
        } else {
            None
        };
        let replacement = Replacement {
            mask_token: vocab.mask,
            gene_tokens: (0..vocab.len() as u32).filter(|&t| vocab.is_gene(t)).collect(),
            mask_token_rate: params.mask_token_rate,
            random_token_rate: params.random_token_rate,
        };
        Ok(Self {
            params,
            graph: table,
            pmi,
            replacement,
            layout: info.layout,
            vocab_size: vocab.len(),
            pad: vocab.pad,
        })
    }

    /// Loads the graph directory and the context in one step.
    pub fn open(
        info: &CorpusInfo,
        vocab: &Vocabulary,
        index: &CorpusIndex,
        graph_dir: &Path,
        params: MaskParams,
        with_pmi: bool,
    ) -> Result<Self> {
        let graph = read_graph(graph_dir)?;
        Self::load(info, vocab, index, Some(&graph), graph_dir, params, with_pmi)
    }

    pub fn tables(&self) -> MaskTables<'_> {
        MaskTables { graph: &self.graph, pmi: self.pmi.as_ref() }
    }

    pub fn masker(&self) -> Masker<'_> {
        Masker { params: &self.params, tables: self.tables(), replacement: &self.replacement, layout: &self.layout }
    }

    /// The same context with another strategy and structural ratio (a table or a λ sweep). A
    /// PMI strategy needs a context loaded with one.
    pub fn with_strategy(&self, strategy: MaskStrategy, lambda: f64) -> Self {
        debug_assert!(!strategy.needs_pmi() || self.pmi.is_some());
        Self {
            params: MaskParams { strategy, lambda, ..self.params.clone() },
            graph: self.graph.clone(),
            pmi: self.pmi.clone(),
            replacement: self.replacement.clone(),
            layout: self.layout,
            vocab_size: self.vocab_size,
            pad: self.pad,
        }
    }
}

/// Unigram and adjacent-pair counts of the gene tokens of every cell in `index`.
pub fn count_pmi(index: &CorpusIndex, vocab: &Vocabulary, layout: &SequenceLayout) -> Result<PmiCounts> {
    let mut counts = PmiCounts::default();
    index.for_each_cell_block(vocab.len(), |block| {
        for i in 0..block.len() {
            let cell = block.cell(i);
            counts.add_sequence(&cell[corrflow_algorithms::mask::gene_range(cell, layout)]);
        }
        Ok(())
    })?;
    Ok(counts)
}
