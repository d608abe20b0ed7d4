"""corrflow.ingest / Corpus / Graph equal the CLI's outputs."""

import pyarrow.parquet as pq

import corrflow
from conftest import BUNDLED, DATA, corrflow as cli


def test_ingest_writes_the_same_corpus_as_the_cli(work, pbmc_corpus):
    out = work / "py_corpus"
    summary = corrflow.ingest(BUNDLED, out, "pbmc1k", gene_column="gene_ids", chunk_cells=128, shard_cells=256)
    assert summary["cells_kept"] == corrflow.Corpus(out).n_cells > 0
    mine, theirs = corrflow.Corpus(out).to_arrow(), corrflow.Corpus(pbmc_corpus).to_arrow()
    assert mine.column("cell_id").equals(theirs.column("cell_id"))
    assert mine.column("input_ids").equals(theirs.column("input_ids"))


def test_corpus_reports_atlases_cells_vocabulary_and_exports_to_datasets(work, pbmc_corpus):
    corpus = corrflow.Corpus(pbmc_corpus)
    assert corpus.atlases == ["pbmc1k"] and len(corpus) == corpus.to_arrow().num_rows
    assert corpus.vocab["vocab_name"] == "geneformer-v1" and corpus.vocab["cls"] is None
    ds = corpus.to_hf(work / "hf")
    assert ds.num_rows == len(corpus)
    assert ds[0]["input_ids"] == corpus.to_arrow().column("input_ids")[0].as_py()


def test_graph_build_equals_the_cli_graph(work, pbmc_corpus, pbmc_graph):
    # The tiny config's graph parameters, passed as keyword arguments.
    params = dict(n_sub=0, min_presence=20, max_genes=300, rho_min=0.2, m_min=30, n_neigh=20)
    g = corrflow.Graph.build(pbmc_corpus, work / "py_graph", **params)
    theirs = pq.read_table(pbmc_graph / "edges.parquet")
    mine = g.edges()
    assert g.n_edges == theirs.num_rows > 0
    for col in ("u", "v", "rho", "rho_global", "co_count"):
        assert mine.column(col).to_pylist() == theirs.column(col).to_pylist(), col
    assert g.summary["edges"] == g.n_edges


def test_neighbours_are_the_genes_edges_strongest_first_by_symbol_or_id(pbmc_graph):
    g = corrflow.Graph.open(pbmc_graph)
    genes = g.genes().to_pylist()
    hub = max(genes, key=lambda r: sum(1 for e in g.edges().to_pylist() if r["token_id"] in (e["u"], e["v"])))
    by_id = g.neighbours(hub["gene_id"])
    assert by_id.num_rows > 0
    rho = [abs(r) for r in by_id.column("rho").to_pylist()]
    assert rho == sorted(rho, reverse=True)
    if hub["symbol"]:
        assert g.neighbours(hub["symbol"].lower()).equals(by_id)
    df = by_id.to_pandas()
    assert set(df.columns) >= {"gene_id", "symbol", "rho", "rho_global", "co_count"}


def test_incremental_update_and_retract_are_exact(work):
    corpus = work / "two_atlases"
    cli("ingest", "--atlas", "ctrl", "--out", corpus, DATA / "kang_ctrl.h5ad")
    cli("ingest", "--atlas", "stim", "--out", corpus, DATA / "kang_stim.h5ad")
    g = corrflow.Graph.build(corpus, work / "inc_graph", atlases=["ctrl"], incremental=True,
                             min_presence=20, max_genes=300, m_min=30, n_neigh=20, n_sub=0)
    before = g.edges()
    added = g.update(corpus / "atlases" / "stim")
    assert added["cells"] > g.summary["cells"]
    assert g.info["atlases"] == ["ctrl", "stim"]
    g.retract("stim")
    assert g.info["atlases"] == ["ctrl"]
    assert g.edges().equals(before)
