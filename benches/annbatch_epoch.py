"""annbatch, the published anchor for streaming cells to a trainer, on the atlas driver's files.

    annbatch_epoch.py collection OUT.zarr A.h5ad [B.h5ad ...]   # annbatch's preprocessing
    annbatch_epoch.py epoch OUT.zarr [--batch-size 4096] [--seed 0]

`collection` is what annbatch asks a user to run once before training: it reads the h5ad files,
joins their genes, shuffles the cells and writes them as a sharded zarr collection (the step that
corresponds to `corrflow ingest`). `dataset_size` is set to 2 GB (annbatch's default is 20 GB),
so that its memory stays within what this machine's other stages use.

`epoch` reads every cell once in shuffled batches with the loader settings of annbatch's README
(chunks of 32 cells, 256 chunks preloaded, batches of 4,096) and only X and no obs column, and
prints the number of cells read. It needs a Python >= 3.12 with `annbatch[zarrs]`
(benches/annbatch-env.sh makes one).
"""

import argparse
import sys

import anndata as ad
import numpy as np
import zarr

# annbatch's README: zarrs' codec pipeline is what makes the collection fast on a local disk.
zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"})

from annbatch import DatasetCollection, Loader  # noqa: E402 (after the codec setting)


def x_only(group: zarr.Group) -> ad.AnnData:
    """The collection's matrix without its obs columns, which the loader would otherwise yield."""
    obs = ad.io.read_elem(group["obs"])
    return ad.AnnData(X=ad.io.sparse_dataset(group["X"]), obs=obs[[]])


def collection(out, inputs, seed):
    DatasetCollection(out).add_adatas(adata_paths=inputs, shuffle=True, dataset_size="2GB",
                                      rng=np.random.default_rng(seed))


def epoch(path, batch_size, seed):
    with ad.settings.override(remove_unused_categories=False):
        loader = Loader(batch_size=batch_size, chunk_size=32, preload_nchunks=256, shuffle=True,
                        rng=np.random.default_rng(seed), preload_to_gpu=False)
        loader = loader.use_collection(DatasetCollection(path, mode="r"), load_adata=x_only)
        cells = nonzeros = 0
        for batch in loader:
            x = batch["X"]
            cells += x.shape[0]
            nonzeros += x.nnz  # touch what was read, as a trainer would
    return cells, nonzeros


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["collection", "epoch"])
    p.add_argument("store", help="the collection (a path ending in .zarr)")
    p.add_argument("inputs", nargs="*", help="h5ad files (collection)")
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.mode == "collection":
        if not a.inputs:
            sys.exit("collection: give the h5ad files to collect")
        collection(a.store, a.inputs, a.seed)
        print(a.store)
    else:
        cells, nonzeros = epoch(a.store, a.batch_size, a.seed)
        print(cells, nonzeros)


if __name__ == "__main__":
    main()
