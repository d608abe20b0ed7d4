#!/usr/bin/env bash
# The driver's all-cells graph (`graph build --n-sub 0 --incremental --atlas kang --atlas cbmc`)
# with two binaries, one after the other per size, the page cache dropped before each run
# (root), each under /usr/bin/time -v; then the graph files and every state file compared with
# cmp. Used for BENCHMARKS "Atlas scale", sessions 54-55.
#
# usage: benches/graph_all_cells_ab.sh OLD_BIN NEW_BIN ATLAS_DIR OUT_TSV [SIZES]
#   ATLAS_DIR holds x1/, x4/, ... with the driver's kept corpora (KEEP=1 benches/atlas_scale.sh);
#   SIZES defaults to "1 4 16 64". Each run's --json summary goes to OUT_TSV.d/.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,10p' "$0"; exit 2; }
. "$(dirname "$0")/lib/timed_run.sh"
need_drop_caches
old=$1 new=$2 atlas=$3 out=$4 sizes=${5:-1 4 16 64}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out.d"
printf 'size\tbinary\tseconds\tpeak_rss_mb\n' >"$out"
for m in $sizes; do
  corpus=$atlas/x$m/corpus
  [ -d "$corpus" ] || { echo "no corpus at $corpus" >&2; exit 1; }
  for label in old new; do
    bin=$old; [ $label = new ] && bin=$new
    timed_run "$work/time" "$out.d/x$m-$label.json" "" "$bin" graph build --n-sub 0 --incremental \
      --atlas kang --atlas cbmc --corpus "$corpus" --json --out "$work/$label"
    wall=$(wall_seconds "$work/time")
    rss=$(peak_rss_mb "$work/time")
    printf '%sx\t%s\t%s\t%s\n' "$m" "$label" "$wall" "$rss" | tee -a "$out"
  done
  for f in edges.parquet genes.parquet $(cd "$work/old" && find state -type f | sort); do
    if cmp -s "$work/old/$f" "$work/new/$f"; then r=identical; else r=DIFFERENT; fi
    echo "${m}x $f $r" | tee -a "$out.d/cmp.txt"
  done
  rm -rf "$work/old" "$work/new"
done
