#!/usr/bin/env bash
# Graph benchmark (issue 3): `corrflow graph build` (exact Algorithm 1) against the numpy/scipy
# baseline benches/graph_reference.py on the same cells: Kang PBMC ctrl repeated 16× (104,768
# real cells; 2,000 genes), plus the machine's GEMM rate. Run: benches/graph.sh (after make bench
# data exists); set SKIP_BASELINE=1 to time only corrflow.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CARGO_TARGET_DIR:=$HOME/.cache/corrflow/target}"
bin="$CARGO_TARGET_DIR/release/corrflow"
py="$(scripts/python-env.sh)"
work="${BENCH_DIR:-$HOME/.cache/corrflow/bench}"
mkdir -p "$work"
x16="$work/kang_ctrl_x16.h5ad"
[ -s "$x16" ] || "$py" benches/make_repeat.py datasets/data/kang_ctrl.h5ad 16 "$x16"
[ -d "$work/k16/atlases/k16" ] || "$bin" ingest --atlas k16 --out "$work/k16" "$x16"

echo "## GEMM rate of this machine"
(. scripts/build-env.sh && cargo run -q --release -p corrflow-algorithms --example gemm_peak)

echo "## corrflow graph build, all 104,768 cells (the baseline's input)"
for run in 1 2 3; do
  rm -rf "$work/g"
  /usr/bin/time -v "$bin" graph build --json --n-sub 0 --corpus "$work/k16" --out "$work/g" 2>"$work/time.txt" | tail -1
  grep -E 'Maximum resident|Elapsed' "$work/time.txt"
done
echo "## corrflow graph build, N_sub = 100,000 (paper setting)"
rm -rf "$work/g"
"$bin" graph build --json --corpus "$work/k16" --out "$work/g" | tail -1

if [ -z "${SKIP_BASELINE:-}" ]; then
  echo "## numpy/scipy baseline (all cells)"
  /usr/bin/time -v "$py" benches/graph_reference.py "$work/k16" "$work/ref.json" 2>"$work/time.txt"
  grep -E 'Maximum resident|Elapsed' "$work/time.txt"
fi
