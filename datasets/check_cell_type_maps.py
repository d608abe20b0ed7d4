#!/usr/bin/env python3
"""Validates the curated cell-type -> Cell Ontology maps in datasets/cell_type_maps/.

For every map (default: pbmc68k_reduced, spectra_sample, cbmc_citeseq) it checks
  - the file format (UTF-8, '\\n' line ends, leading '#' comments naming the CL version, the
    exact header, six tab-separated fields per row, rows unique and sorted by label);
  - every cl_id against the CL JSON shipped in datasets/data/ (CL-ontology-v<version>.json.zst,
    fetched by fetch.sh): the term exists, is not deprecated, and cl_label is its exact label;
  - the match kind: 'exact' / 'synonym' / 'curated' must be the strongest kind that holds for the
    chosen term (label equal to its CL label, else to one of its synonyms, ignoring case and
    punctuation); 'unmapped' rows have empty cl_id and cl_label;
  - the label counts against the h5ad (read with h5py only): every label present in the obs
    column has exactly one row and `cells` equals its count.
Exits 1 with one line per problem, 0 when all maps pass.

Usage: check_cell_type_maps.py [--data DIR] [--maps DIR] [NAME ...]
Needs h5py (e.g. the fetch venv: ~/.cache/corrflow/fetch-venv/bin/python) and the `zstd` command
(falls back to the `zstandard` module when zstd is absent).
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MAPS = ["pbmc68k_reduced", "spectra_sample", "cbmc_citeseq"]
HEADER = ["column", "label", "cl_id", "cl_label", "match", "cells"]
MATCHES = {"exact", "synonym", "curated", "unmapped"}
VERSION_RE = re.compile(r"^# corrflow cell-type map · ontology CL v(\d{4}-\d{2}-\d{2}) · \S")
CL_ID_RE = re.compile(r"^CL:\d{7}$")


def norm(s):
    """Label comparison key: case-folded, every character that is not a letter or digit dropped."""
    return "".join(ch for ch in s.casefold() if ch.isalnum())


def load_ontology(path):
    if shutil.which("zstd"):
        raw = subprocess.run(["zstd", "-dc", "--", str(path)], check=True, capture_output=True).stdout
    else:
        import zstandard  # type: ignore

        with open(path, "rb") as f:
            raw = zstandard.ZstdDecompressor().stream_reader(f).read()
    return json.loads(raw)


def _strings(arr):
    return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in arr]


def label_counts(h5ad, col):
    """Counts of the values of obs column `col`, read with h5py from any anndata layout:
    categorical group obs/<col>/{categories,codes} (anndata >= 0.8), codes obs/<col> with
    obs/__categories/<col> (0.7), a compound obs table with uns/<col>_categories (< 0.7), or a
    plain string column. Returns (Counter of label -> cells, number of cells with a missing value)."""
    import h5py
    import numpy as np

    with h5py.File(h5ad, "r") as f:
        obs = f["obs"]
        if isinstance(obs, h5py.Group):
            if col not in obs:
                raise KeyError(f"obs has no column {col!r} (has {sorted(k for k in obs.keys() if not k.startswith('__'))})")
            node = obs[col]
            if isinstance(node, h5py.Group):
                cats, codes = _strings(node["categories"][()]), node["codes"][()]
            elif "__categories" in obs and col in obs["__categories"]:
                cats, codes = _strings(obs["__categories"][col][()]), node[()]
            else:
                c = Counter(_strings(node[()]))
                return c, 0
        else:  # old compound-table layout
            if col not in (obs.dtype.names or ()):
                raise KeyError(f"obs has no column {col!r} (has {list(obs.dtype.names or ())})")
            codes = obs[col]
            key = f"{col}_categories"
            if "uns" in f and key in f["uns"]:
                cats = _strings(f["uns"][key][()])
            elif codes.dtype.kind in "SUO":
                return Counter(_strings(codes)), 0
            else:
                raise KeyError(f"no categories for obs column {col!r} (looked for uns/{key})")
        codes = np.asarray(codes).astype(np.int64)
        if codes.size and codes.max() >= len(cats):
            raise ValueError(f"obs column {col!r}: code {codes.max()} out of range for {len(cats)} categories")
        missing = int((codes < 0).sum())
        n = np.bincount(codes[codes >= 0], minlength=len(cats))
        return Counter({cats[i]: int(n[i]) for i in range(len(cats)) if n[i] > 0}), missing


def check_map(tsv, data_dir, onto_cache):
    """Returns a list of problems for one map file."""
    errs = []
    name = tsv.stem
    raw = tsv.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return [f"{tsv}: not UTF-8 ({e})"]
    if "\r" in text:
        errs.append(f"{tsv}: contains '\\r' (line ends must be '\\n')")
    if not text.endswith("\n"):
        errs.append(f"{tsv}: last line is not terminated by '\\n'")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    comments, body = lines[:i], lines[i:]
    if not comments or not VERSION_RE.match(comments[0]):
        return errs + [f"{tsv}: first line must be '# corrflow cell-type map · ontology CL vYYYY-MM-DD · <notes>'"]
    version = VERSION_RE.match(comments[0]).group(1)
    if not body or body[0].split("\t") != HEADER:
        return errs + [f"{tsv}: header line must be {chr(9).join(HEADER)!r} right after the comments"]

    onto_path = data_dir / f"CL-ontology-v{version}.json.zst"
    if onto_path not in onto_cache:
        if not onto_path.is_file():
            return errs + [f"{tsv}: ontology file {onto_path} is missing (run datasets/fetch.sh)"]
        onto_cache[onto_path] = load_ontology(onto_path)
    onto = onto_cache[onto_path]

    rows, columns, seen = [], set(), set()
    for ln, line in enumerate(body[1:], start=i + 2):
        where = f"{tsv}:{ln}"
        if line.startswith("#"):
            errs.append(f"{where}: comment lines are only allowed before the header")
            continue
        f = line.split("\t")
        if len(f) != len(HEADER):
            errs.append(f"{where}: expected {len(HEADER)} tab-separated fields, got {len(f)}")
            continue
        col, label, cl_id, cl_label, match, cells = f
        if any(x != x.strip() for x in f) or not label:
            errs.append(f"{where}: empty label or field with leading/trailing whitespace")
        columns.add(col)
        if label in seen:
            errs.append(f"{where}: duplicate label {label!r}")
        seen.add(label)
        if not cells.isdigit() or int(cells) <= 0:
            errs.append(f"{where}: cells must be a positive integer, got {cells!r}")
        if match not in MATCHES:
            errs.append(f"{where}: match must be one of {sorted(MATCHES)}, got {match!r}")
        elif match == "unmapped":
            if cl_id or cl_label:
                errs.append(f"{where}: unmapped row must have empty cl_id and cl_label")
        else:
            term = onto.get(cl_id)
            if not CL_ID_RE.match(cl_id) or term is None:
                errs.append(f"{where}: {cl_id!r} is not a term of CL v{version}")
            else:
                if term.get("deprecated"):
                    rb = term.get("replaced_by")
                    errs.append(f"{where}: {cl_id} is deprecated" + (f" (replaced by {rb})" if rb else ""))
                if cl_label != term.get("label"):
                    errs.append(f"{where}: cl_label {cl_label!r} differs from the CL label of {cl_id}: {term.get('label')!r}")
                if norm(label) == norm(term.get("label", "")):
                    want = "exact"
                elif any(norm(label) == norm(s) for s in term.get("synonyms") or []):
                    want = "synonym"
                else:
                    want = "curated"
                if match != want:
                    errs.append(f"{where}: match is {match!r} but {label!r} vs {cl_id} ({term.get('label')!r}) is {want!r}")
        rows.append((label, int(cells) if cells.isdigit() else None))

    labels = [r[0] for r in rows]
    if labels != sorted(labels):
        errs.append(f"{tsv}: rows are not sorted by label (code-point order)")
    if len(columns) != 1:
        return errs + [f"{tsv}: rows must all name one obs column, found {sorted(columns)}"]
    col = columns.pop()

    h5ad = data_dir / f"{name}.h5ad"
    if not h5ad.is_file():
        return errs + [f"{tsv}: dataset {h5ad} is missing (run datasets/fetch.sh)"]
    try:
        counts, missing = label_counts(h5ad, col)
    except (KeyError, ValueError) as e:
        return errs + [f"{h5ad}: {e}"]
    if missing:
        print(f"note: {h5ad.name}: {missing} cells have no {col} value (not covered by any map row)", file=sys.stderr)
    mapped = dict(rows)
    for label in sorted(set(counts) - set(mapped)):
        errs.append(f"{tsv}: label {label!r} ({counts[label]} cells in {h5ad.name}:{col}) has no row")
    for label in sorted(set(mapped) - set(counts)):
        errs.append(f"{tsv}: label {label!r} does not occur in {h5ad.name}:{col}")
    for label in sorted(set(mapped) & set(counts)):
        if mapped[label] is not None and mapped[label] != counts[label]:
            errs.append(f"{tsv}: label {label!r} has cells={mapped[label]} but {h5ad.name}:{col} has {counts[label]}")
    if not errs:
        kinds = Counter(r.split("\t")[4] for r in body[1:])
        print(f"ok: {tsv.name}: {len(rows)} labels, {sum(counts.values())} cells, CL v{version} "
              f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=HERE / "data", help="folder with the h5ad files and the CL JSON")
    ap.add_argument("--maps", type=Path, default=HERE / "cell_type_maps", help="folder with the <dataset>.tsv maps")
    ap.add_argument("names", nargs="*", default=DEFAULT_MAPS, help="maps to check (default: %(default)s)")
    a = ap.parse_args()
    try:
        import h5py  # noqa: F401
    except ImportError:
        print("error: h5py is not importable; run with the fetch venv, e.g. "
              "~/.cache/corrflow/fetch-venv/bin/python datasets/check_cell_type_maps.py", file=sys.stderr)
        return 2
    errs, cache = [], {}
    for name in a.names:
        tsv = a.maps / f"{name}.tsv"
        if not tsv.is_file():
            errs.append(f"{tsv}: missing")
            continue
        errs += check_map(tsv, a.data, cache)
    for e in errs:
        print(f"error: {e}", file=sys.stderr)
    if errs:
        print(f"check_cell_type_maps: {len(errs)} problem(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
