"""TileDB-SOMA experiments (CELLxGENE Census is one) as a corrflow input, read by the `tiledbsoma`
package: there is no Rust TileDB-SOMA reader. The extension registers a format that takes a SOMA
experiment's directory wherever inputs are read (`corrflow.ingest`) and calls `open_source` here;
the pipeline then asks for cells a chunk at a time, so memory stays bounded by a chunk (plus the
selected cells' join ids, 8 bytes each).

Which cells: those of `obs` matching the `value_filter` given to `corrflow.ingest` (tiledbsoma's
syntax, e.g. ``"tissue == 'blood' and is_primary_data == True"``), in `soma_joinid` order.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

# Set by corrflow.ingest around the call: the format's open runs inside it, on a thread of the
# library's (so not a thread-local). One ingest at a time sets them.
_settings: Dict[str, Any] = {"value_filter": None, "measurement": "RNA"}
_lock = threading.Lock()


def settings() -> Dict[str, Any]:
    return _settings


class using:
    """`with using(value_filter=..., measurement=...)`: the SOMA options of one ingest."""

    def __init__(self, **options: Any):
        self.options = options

    def __enter__(self):
        _lock.acquire()
        self.saved = dict(_settings)
        _settings.update(self.options)

    def __exit__(self, *exc):
        _settings.clear()
        _settings.update(self.saved)
        _lock.release()


def _tiledbsoma():
    try:
        import tiledbsoma
    except ImportError as e:
        raise ImportError(
            "reading a TileDB-SOMA experiment needs the tiledbsoma package: pip install tiledbsoma"
        ) from e
    return tiledbsoma


def _kind(arrow_type) -> str:
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_integer(arrow_type):
        return "int64"
    if pa.types.is_floating(arrow_type):
        return "float64"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "utf8"
    raise ValueError(f"obs column of type {arrow_type}: corrflow stores strings, numbers and booleans")


# Cells read from TileDB per query: a few tens of MB of counts at Census' density.
BLOCK = 2048


class SomaSource:
    """The selected cells of one SOMA experiment, read a chunk at a time."""

    def __init__(self, path: str, counts: str, gene_column: Optional[str], obs_columns: List[str]):
        soma = _tiledbsoma()
        opts = settings()
        self.exp = soma.Experiment.open(path)
        measurement = opts.get("measurement") or "RNA"
        if counts == "raw":
            measurement = "raw"  # tiledbsoma.io.from_h5ad writes AnnData's raw as its own measurement
        if measurement not in self.exp.ms:
            raise ValueError(f"no measurement '{measurement}' (measurements: {', '.join(self.exp.ms.keys())})")
        ms = self.exp.ms[measurement]
        layers = list(ms.X.keys())
        if counts.startswith("layer:"):
            layer = counts[len("layer:"):]
        elif len(layers) == 1:
            layer = layers[0]
        elif "raw" in layers:
            layer = "raw"  # Census: raw counts in X["raw"], normalised ones beside
        else:
            raise ValueError(f"measurement '{measurement}' has X layers {', '.join(layers)}: pick one with counts='layer:NAME'")
        if layer not in layers:
            raise ValueError(f"measurement '{measurement}' has no X layer '{layer}' (layers: {', '.join(layers)})")
        self.X = ms.X[layer]
        var_columns = [f.name for f in ms.var.schema]
        if gene_column is None:
            # tiledbsoma.io.from_h5ad keeps AnnData's var index as var_id (a named index under its
            # name: the first string column); Census has feature_id.
            gene_column = next((c for c in ("var_id", "feature_id") if c in var_columns), None) or _first_string(ms.var.schema)
            if gene_column is None:
                raise ValueError(f"no string column in var to take genes from (columns: {', '.join(var_columns)})")
        elif gene_column not in var_columns:
            raise ValueError(f"var has no column '{gene_column}' (columns: {', '.join(var_columns)})")
        var = ms.var.read(column_names=["soma_joinid", gene_column]).concat()
        joinids = var.column("soma_joinid").to_numpy()
        genes = [""] * (int(joinids.max()) + 1 if len(joinids) else 0)
        for j, g in zip(joinids.tolist(), var.column(gene_column).to_pylist()):
            genes[j] = g if g is not None else ""
        self.gene_ids = genes
        obs_schema = {f.name: f.type for f in self.exp.obs.schema}
        missing = [c for c in obs_columns if c not in obs_schema]
        if missing:
            raise ValueError(f"obs has no column {', '.join(map(repr, missing))} (columns: {', '.join(obs_schema)})")
        self.obs_columns = list(obs_columns)
        self.obs_fields: List[Tuple[str, str]] = [(c, _kind(obs_schema[c])) for c in obs_columns]
        self.cell_id_column = next((c for c in ("obs_id", "observation_joinid") if c in obs_schema), None) or _first_string(
            self.exp.obs.schema
        )
        value_filter = opts.get("value_filter")
        try:
            query = self.exp.axis_query(measurement, obs_query=soma.AxisQuery(value_filter=value_filter))
            self.cells = np.sort(query.obs_joinids().to_numpy().astype(np.int64))
        except Exception as e:  # tiledbsoma's first line names the column or the syntax error
            raise ValueError(f"value_filter {value_filter!r}: {str(e).strip().splitlines()[0]}") from e
        self.n_cells = len(self.cells)
        self.obs_schema = obs_schema
        # What identifies the cells read (the manifest records it; a resumed ingest must match).
        self.selection = f"measurement {measurement}, X layer {layer}" + (f", obs {value_filter}" if value_filter else "")

    def _obs(self, ids: np.ndarray, columns: List[str]):
        t = self.exp.obs.read(coords=(ids,), column_names=["soma_joinid", *columns]).concat()
        order = np.argsort(t.column("soma_joinid").to_numpy())
        return t.take(order)

    def read(self, start: int, end: int):
        """Cells start..end of the selection as CSR arrays (genes by var soma_joinid), cell ids
        and the requested obs columns as lists. Read from TileDB a block of BLOCK cells at a
        time (one query per block instead of one per chunk: 4x faster on Kang)."""
        block = getattr(self, "_block", None)
        if block is None or not (block[0] <= start and end <= block[1]):
            b_end = min(max(end, start + BLOCK), self.n_cells)
            block = (start, b_end, self._read(start, b_end))
            self._block = block
        b_start, _, (indptr, indices, data, cell_ids, values) = block
        lo, hi = start - b_start, end - b_start
        a, z = indptr[lo], indptr[hi]
        return (indptr[lo:hi + 1] - a, indices[a:z], data[a:z], cell_ids[lo:hi], [v[lo:hi] for v in values])

    def _read(self, start: int, end: int):
        ids = self.cells[start:end]
        coo = self.X.read(coords=(ids, slice(None))).tables().concat()
        rows = np.searchsorted(ids, coo.column("soma_dim_0").to_numpy())
        cols = coo.column("soma_dim_1").to_numpy()
        data = coo.column("soma_data").to_numpy()
        key = rows.astype(np.int64) * (len(self.gene_ids) + 1) + cols
        if len(key) > 1 and not (key[1:] >= key[:-1]).all():  # TileDB returns cells in no set order
            order = np.argsort(key, kind="stable")
            rows, cols, data = rows[order], cols[order], data[order]
        indptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(ids)), out=indptr[1:])
        indices = np.ascontiguousarray(cols, dtype=np.uint32)
        data = np.ascontiguousarray(data, dtype=np.float64)
        wanted = ([self.cell_id_column] if self.cell_id_column else []) + self.obs_columns
        obs = self._obs(ids, list(dict.fromkeys(wanted)))
        cell_ids = obs.column(self.cell_id_column).to_pylist() if self.cell_id_column else [str(i) for i in ids]
        values = [_values(obs.column(c)) for c in self.obs_columns]
        return indptr, indices, data, [str(c) for c in cell_ids], values

    def obs_column(self, name: str):
        """The whole obs column `name` of the selected cells (kind, values), or None."""
        if name not in self.obs_schema:
            return None
        col = self._obs(self.cells, [name]).column(name)
        return _kind(self.obs_schema[name]), _values(col)


def _first_string(schema) -> Optional[str]:
    """The first string column of a SOMA dataframe: where from_h5ad keeps a named index."""
    import pyarrow as pa

    return next((f.name for f in schema if f.name != "soma_joinid" and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))), None)


def _values(column) -> list:
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column.to_pylist()


def open_source(path: Any, counts: str, gene_column: Optional[str], obs_columns: List[str]) -> SomaSource:
    return SomaSource(os.fspath(path), counts, gene_column, obs_columns)
