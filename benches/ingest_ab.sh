#!/usr/bin/env bash
# A/B timing of ingest builds: runs each binary in turn, ROUNDS times, on the same input and
# prints the median and fastest wall time of each. Interleaving matters on this shared
# machine, whose speed drifts by up to ~25% over minutes: hyperfine's back-to-back blocks of
# runs can attribute the drift to whichever binary ran during it.
# Usage: benches/ingest_ab.sh ROUNDS INPUT BIN...   (copy each build to its own path first)
set -euo pipefail
rounds=$1 input=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for _ in $(seq "$rounds"); do
  for bin in "$@"; do
    rm -rf "$out/c"
    start=$(date +%s.%N)
    "$bin" ingest --atlas k --out "$out/c" "$input" >/dev/null 2>&1
    awk -v b="$bin" -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print b, e - s }'
  done
done | sort -k1,1 -k2,2n | awk '
  { n[$1]++; t[$1, n[$1]] = $2 }
  END { for (b in n) printf "%s: median %.3f s, fastest %.3f s over %d runs\n", b, t[b, int((n[b] + 1) / 2)], t[b, 1], n[b] }'
