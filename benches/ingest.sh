#!/usr/bin/env bash
# Ingest benchmark (issue 2): throughput and peak RSS of `corrflow ingest` against the
# Geneformer-style Python baseline, on Kang PBMC ctrl (real cells) and an 8x file of the same
# cells. Needs datasets/fetch.sh data, hyperfine and /usr/bin/time. Run: make bench
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CARGO_TARGET_DIR:=$HOME/.cache/corrflow/target}"
bin="$CARGO_TARGET_DIR/release/corrflow"
py="$(scripts/python-env.sh)"
work="${BENCH_DIR:-$HOME/.cache/corrflow/bench}"
mkdir -p "$work"
one=datasets/data/kang_ctrl.h5ad
eight="$work/kang_ctrl_x8.h5ad"
[ -s "$eight" ] || "$py" benches/make_repeat.py "$one" 8 "$eight"

echo "## corrflow ingest: throughput (hyperfine, 5 runs)"
for f in "$one" "$eight"; do
  hyperfine -w 1 -r 5 -N --prepare "rm -rf $work/c" "$bin ingest --atlas k --out $work/c $f" --export-json "$work/hf.json" >/dev/null
  python3 - "$work/hf.json" "$f" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))["results"][0]
cells = {"kang_ctrl.h5ad": 6548}.get(os.path.basename(sys.argv[2]), 6548 * 8)
mb = os.path.getsize(sys.argv[2]) / 1e6
print(f"{os.path.basename(sys.argv[2])}: {r['mean']:.3f} s ± {r['stddev']:.3f} -> {cells / r['mean']:.0f} cells/s, {mb / r['mean']:.0f} MB/s")
PY
done

echo "## peak RSS (/usr/bin/time -v)"
for f in "$one" "$eight"; do
  rm -rf "$work/c"
  /usr/bin/time -v "$bin" ingest --atlas k --out "$work/c" "$f" 2>"$work/time.txt" >/dev/null
  echo "corrflow $(basename "$f"): $(grep 'Maximum resident' "$work/time.txt" | awk '{print $6/1024 " MB"}')"
done

echo "## Python baseline (Geneformer tokenizer code path, one core)"
for f in "$one" "$eight"; do
  /usr/bin/time -v "$py" benches/geneformer_baseline.py "$f" "$work/base.parquet" 2>"$work/time.txt" | sed "s|^|$(basename "$f"): |"
  echo "  wall $(grep 'Elapsed' "$work/time.txt" | awk '{print $8}'), peak RSS $(grep 'Maximum resident' "$work/time.txt" | awk '{print $6/1024 " MB"}')"
done
