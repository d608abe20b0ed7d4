#!/usr/bin/env bash
# `corrflow eval cells` against what a user would otherwise run (benches/eval_cells_reference.py:
# scanpy's recipe + neighbours + Leiden, scib-metrics, scikit-learn probes), the same embeddings and
# cells, interleaved rounds: pbmc68k_reduced (700 cells, with `phase` as the batch) and Kang
# ctrl + stim (13,999 cells; label = condition). The embeddings come from a tiny model trained
# here for 40 steps on the bundled cells (what they score does not change the work).
# Needs datasets/fetch.sh data and /usr/bin/time. Usage: benches/eval_cells.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CARGO_TARGET_DIR:=$HOME/.cache/corrflow/target}"
bin="$CARGO_TARGET_DIR/release/corrflow"
py="$(scripts/python-env.sh)"
rounds="${1:-2}"
work="${BENCH_DIR:-$HOME/.cache/corrflow/bench}/eval_cells"
mkdir -p "$work"
data=datasets/data
if [ ! -d "$work/run" ]; then
  "$bin" ingest --atlas pbmc1k --gene-column gene_ids --out "$work/corpus" datasets/default/pbmc1k.h5ad >/dev/null
  "$bin" graph build --corpus "$work/corpus" --out "$work/graph" >/dev/null
  "$bin" --config configs/tiny.toml train --corpus "$work/corpus" --graph "$work/graph" --out "$work/run" >/dev/null
fi
kang="$work/kang_both.h5ad"
[ -s "$kang" ] || "$py" - "$data/kang_ctrl.h5ad" "$data/kang_stim.h5ad" "$kang" <<'PY'
import sys, anndata as ad
parts = []
for path, name in zip(sys.argv[1:3], ["ctrl", "stim"]):
    a = ad.read_h5ad(path)
    a.obs["condition"] = name
    a.obs_names = [f"{name}-{c}" for c in a.obs_names]
    parts.append(a)
ad.concat(parts, join="inner").write_h5ad(sys.argv[3])
PY
[ -s "$work/pbmc68k.parquet" ] || "$bin" embed --checkpoint "$work/run" --input "$data/pbmc68k_reduced.h5ad" --counts raw --log1p --out "$work/pbmc68k.parquet" >/dev/null
[ -s "$work/kang.parquet" ] || "$bin" embed --checkpoint "$work/run" --input "$kang" --out "$work/kang.parquet" >/dev/null

measure() {  # label, command...: wall seconds and peak RSS of one run
  local name="$1"; shift
  /usr/bin/time -v "$@" >/dev/null 2>"$work/time.txt" || { cat "$work/time.txt" >&2; exit 1; }
  local wall rss
  wall=$(grep 'Elapsed (wall' "$work/time.txt" | awk '{print $8}')
  rss=$(grep 'Maximum resident' "$work/time.txt" | awk '{printf "%.0f", $6/1024}')
  echo "$name: wall $wall, peak RSS $rss MB"
}

for r in $(seq 1 "$rounds"); do
  echo "## round $r"
  measure "corrflow pbmc68k_reduced (700)" "$bin" eval cells --embeddings "$work/pbmc68k.parquet" \
    --input "$data/pbmc68k_reduced.h5ad" --counts raw --log1p --label bulk_labels --batch phase
  measure "reference pbmc68k_reduced (700)" "$py" benches/eval_cells_reference.py "$data/pbmc68k_reduced.h5ad" \
    "$work/pbmc68k.parquet" bulk_labels --batch phase --counts raw --log1p
  measure "corrflow kang (13,999)" "$bin" eval cells --embeddings "$work/kang.parquet" --input "$kang" --label condition
  measure "reference kang (13,999)" "$py" benches/eval_cells_reference.py "$kang" "$work/kang.parquet" condition
done
