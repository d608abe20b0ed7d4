"""Writes an h5ad made of an input's real cells repeated N times (cell ids suffixed), for
memory and throughput scaling benchmarks: make_repeat.py IN.h5ad N OUT.h5ad"""
import sys

import anndata as ad

src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
a = ad.read_h5ad(src)
ad.concat([a] * n, index_unique="-", merge="same").write_h5ad(out)
