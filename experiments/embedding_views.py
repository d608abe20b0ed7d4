"""Other ways to read a trained value model's embedding (REPORT.md §10, session 56): a screen.

`corrflow embed` shows a value model's encoder one view of the cell (every gene of its visible
pool, up to `inference_genes`) and returns the CLS state. This script, with the exported ONNX
model and ONNX Runtime, builds the same input itself and can instead
  --views R --k K   average the CLS state over R views of K genes drawn uniformly from the pool
                    (the size of a training view; seeded by --seed);
  --output decoded  return the decoder's output (the decoding set's predicted levels) instead of
                    the CLS state.
With --views 1 --k 0 --output cell_embedding it reproduces `corrflow embed` (checked to 4e-6 on
pbmc68k_reduced). Written for models whose visible pool is the measured genes of the decoding
set (`values.visible = "decoded"`) and for inputs whose `raw` holds log1p-normalised values
(pbmc68k_reduced: `--counts raw --log1p`); other inputs are refused.

usage: python experiments/embedding_views.py MODEL.onnx INPUT.h5ad OUT.parquet
       [--views 1] [--k 0] [--seed 0] [--output cell_embedding|decoded]
The vocabulary is read from MODEL's folder (`model.vocab/`, as `corrflow train` leaves it).
"""
import argparse
import json
import os

import anndata as ad
import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq


def tsv(path):
    with open(path) as f:
        next(f)
        return dict(line.rstrip("\n").split("\t") for line in f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("out")
    ap.add_argument("--views", type=int, default=1)
    ap.add_argument("--k", type=int, default=0, help="genes per view (0: the whole pool)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="cell_embedding", choices=["cell_embedding", "decoded"])
    a = ap.parse_args()
    if a.views < 1 or a.k < 0:
        raise SystemExit("--views must be at least 1 and --k at least 0")
    sess = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    cfg = json.loads(sess.get_modelmeta().custom_metadata_map["corrflow.config"])
    values = cfg.get("values") or {}
    if values.get("visible") not in (None, "decoded") or "decode_genes" not in values:
        raise SystemExit(f"{a.model}: written for value models with visible = \"decoded\"")
    vocab = os.path.join(os.path.dirname(a.model), "model.vocab")
    symbols, tokens = tsv(os.path.join(vocab, "gene_name_id.tsv")), tsv(os.path.join(vocab, "token_dictionary.tsv"))
    adata = ad.read_h5ad(a.input)
    if adata.raw is None:
        raise SystemExit(f"{a.input}: no raw matrix of log1p-normalised values")
    counts = np.expm1(adata.raw.X.toarray().astype(np.float64))
    total = counts.sum(1)
    ids = np.array([int(tokens[symbols[s]]) if symbols.get(s) in tokens else -1 for s in adata.raw.var_names])
    decode = set(values["decode_genes"])
    pool = np.array([j for j, t in enumerate(ids) if t in decode])
    if a.k > len(pool):
        raise SystemExit(f"--k {a.k} is more than the {len(pool)} genes of the pool")
    # x = ln(1 + c / n_counts * L), as corrflow's value input (the ratio does not depend on the
    # scale the log1p values were normalised to).
    x = np.log1p(counts[:, pool] / total[:, None] * values["target_sum"]).astype(np.float32)
    genes = ids[pool]
    n = counts.shape[0]
    dim = cfg["hidden"] if a.output == "cell_embedding" else len(values["decode_genes"])
    rng = np.random.default_rng(a.seed)
    out = np.zeros((n, dim))
    for _ in range(a.views):
        cols = np.tile(np.arange(len(pool)), (n, 1)) if a.k == 0 else np.argsort(rng.random((n, len(pool))), 1)[:, :a.k]
        for s in range(0, n, 64):
            c = cols[s:s + 64]
            inp = np.concatenate([np.full((len(c), 1), int(tokens["<cls>"])), genes[c]], 1).astype(np.int64)
            val = np.concatenate([np.zeros((len(c), 1), np.float32), np.take_along_axis(x[s:s + 64], c, 1)], 1)
            feed = {"input_ids": inp, "values": val, "attention_mask": np.ones_like(inp)}
            out[s:s + len(c)] += sess.run([a.output], feed)[0]
    out /= a.views
    table = pa.table({"cell_id": pa.array(list(adata.obs_names)),
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(out.astype(np.float32).ravel()), dim)})
    pq.write_table(table, a.out)


if __name__ == "__main__":
    main()
