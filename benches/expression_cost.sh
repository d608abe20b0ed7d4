#!/usr/bin/env bash
# What keeping each cell's expression costs a corpus (issue "Models that see expression", item 1):
# bytes per cell and ingest time, with expression (the default) against `ingest --ranks-only` of
# the same binary, and optionally a binary from before expression was kept, interleaved round by
# round (this machine drifts 10-30%).
#
#   benches/expression_cost.sh [--bin BIN] [--before BIN] [--rounds N] [--input H5AD]...
#
# Defaults: the release binary, 3 rounds, Kang ctrl and stim (datasets/data). Prints one line per
# (arm, round) and a summary: median seconds, cells/s, shard bytes per cell.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
: "${CARGO_TARGET_DIR:=$HOME/.cache/corrflow/target}"
bin="$CARGO_TARGET_DIR/release/corrflow" before="" rounds=3 inputs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --before) before="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --input) inputs+=("$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#inputs[@]} -gt 0 ] || inputs=("$repo/datasets/data/kang_ctrl.h5ad" "$repo/datasets/data/kang_stim.h5ad")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

arms=("expression:$bin:" "ranks-only:$bin:--ranks-only")
[ -n "$before" ] && arms+=("before:$before:")
declare -A secs bytes cells
for r in $(seq 1 "$rounds"); do
  for arm in "${arms[@]}"; do
    IFS=: read -r name b flags <<< "$arm"
    out="$work/$name-$r"
    t0=$(date +%s.%N)
    n=0
    for f in "${inputs[@]}"; do
      n=$((n + 1))
      # shellcheck disable=SC2086
      "$b" ingest $flags --json --atlas "a$n" --out "$out" "$f" > "$work/last.json"
    done
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    c=$(python3 -c "import json,glob; print(sum(json.load(open(m))['cells'] for m in glob.glob('$out/atlases/*/manifest.json')))")
    sz=$(find "$out/atlases" -name '*.parquet' -printf '%s\n' | awk '{s+=$1} END {print s}')
    echo "round $r $name: $t s, $c cells, $sz shard bytes ($(echo "$sz / $c" | bc) B/cell)"
    secs[$name]+="$t "; bytes[$name]=$sz; cells[$name]=$c
    rm -rf "$out"
  done
done
echo "summary (median of $rounds rounds):"
for arm in "${arms[@]}"; do
  IFS=: read -r name _ _ <<< "$arm"
  med=$(echo "${secs[$name]}" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "  $name: ${med} s, $(echo "${cells[$name]} / $med" | bc) cells/s, $(echo "${bytes[$name]} / ${cells[$name]}" | bc) B/cell"
done
