#!/usr/bin/env bash
# The graph's timely cluster across hosts against one process (issue 42): `graph build
# --incremental` of CORPUS by 1 process (-w 1 and -w 2) and by 2 and 4 processes, each in its own
# network namespace on one bridge (private 10.198.x addresses; traffic crosses veth interfaces
# and never leaves the machine), interleaved rounds. Checks that every cluster's edges and genes
# are the one-process files byte for byte. Needs root and iproute2.
#
#   benches/cluster.sh CORPUS OUT [ROUNDS] [BIN]
set -euo pipefail
CORPUS=$1 OUT=$2 ROUNDS=${3:-2}
BIN=${4:-${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}/release/corrflow}
TAG=cfb$$
mkdir -p "$OUT"
: > "$OUT/results.txt"

cleanup() {
    for k in 0 1 2 3; do ip netns del "${TAG}h$k" 2>/dev/null || true; ip link del "${TAG}v$k" 2>/dev/null || true; done
    ip link del "${TAG}br" 2>/dev/null || true
}
trap cleanup EXIT
ip link add name "${TAG}br" type bridge && ip link set "${TAG}br" up
for k in 0 1 2 3; do
    ip netns add "${TAG}h$k"
    ip link add "${TAG}v$k" type veth peer name "${TAG}p$k"
    ip link set "${TAG}p$k" netns "${TAG}h$k"
    ip link set "${TAG}v$k" master "${TAG}br" && ip link set "${TAG}v$k" up
    ip -n "${TAG}h$k" addr add "10.198.7.$((k + 1))/24" dev "${TAG}p$k"
    ip -n "${TAG}h$k" link set "${TAG}p$k" up && ip -n "${TAG}h$k" link set lo up
done

one() { # label workers
    rm -rf "$OUT/g-$1"
    local t0=$(date +%s.%N)
    "$BIN" graph build --incremental --corpus "$CORPUS" --out "$OUT/g-$1" -w "$2" > /dev/null
    echo "$1 $(echo "$(date +%s.%N) - $t0" | bc)" | tee -a "$OUT/results.txt"
}

cluster() { # processes
    local n=$1 hosts="$OUT/hosts-$1.txt" pids=()
    rm -rf "$OUT/g-n$n"
    : > "$hosts"
    for k in $(seq 0 $((n - 1))); do echo "10.198.7.$((k + 1)):$((7100 + n))" >> "$hosts"; done
    local t0=$(date +%s.%N)
    for k in $(seq 0 $((n - 1))); do
        ip netns exec "${TAG}h$k" "$BIN" graph build --incremental --corpus "$CORPUS" --out "$OUT/g-n$n" \
            -n "$n" -p "$k" -h "$hosts" > "$OUT/n$n-p$k.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    echo "n$n $(echo "$(date +%s.%N) - $t0" | bc)" | tee -a "$OUT/results.txt"
    for f in edges.parquet genes.parquet; do
        cmp -s "$OUT/g-w1/$f" "$OUT/g-n$n/$f" || { echo "n$n: $f differs from one process" >&2; exit 1; }
    done
}

for r in $(seq 1 "$ROUNDS"); do
    one w1 1
    one w2 2
    cluster 2
    cluster 4
done
python3 - "$OUT/results.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for k, v in rows:
    by.setdefault(k, []).append(float(v))
base = statistics.median(by["w1"])
for k, v in by.items():
    print(f"{k:>4}: {', '.join(f'{x:.2f}' for x in v)} s (median {statistics.median(v):.2f}, {base / statistics.median(v):.2f}x one process -w 1)")
PY
