#!/usr/bin/env bash
# Issue 26: what the hierarchical head costs in training. The same run with MLM alone and with
# MLM + HCE (same corpus, config, seed and steps), alternating for ROUNDS rounds so that machine
# drift hits both alike; tokens/s from each run's summary (the trainer's own timing of its
# steps; the HCE runs have no warm-up, so every step with labelled cells pays for the head).
#
#   benches/hce_train.sh CORPUS ONTOLOGY CONFIG STEPS [ROUNDS] [BIN]
#
# CORPUS needs a `cl_id` column (ingest --cell-type-map); CONFIG a [train] section (e.g. the
# one experiments/hce.py writes: configs/annotation.toml with a shuffle buffer over the corpus).
set -eu
CORPUS=$1 ONTOLOGY=$2 CONFIG=$3 STEPS=$4 ROUNDS=${5:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${6:-${CARGO_TARGET_DIR:-$ROOT/target}/release/corrflow}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
tps() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["tokens_per_s"])'; }
echo "| round | MLM tokens/s | MLM + HCE tokens/s | ratio |"
echo "|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
    a=$("$BIN" --config "$CONFIG" train --json --corpus "$CORPUS" --strategy random --max-steps "$STEPS" --out "$OUT/mlm" --restart | tps)
    b=$("$BIN" --config "$CONFIG" train --json --corpus "$CORPUS" --strategy random --max-steps "$STEPS" --out "$OUT/hce" --restart \
        --hce-ontology "$ONTOLOGY" | tps)
    python3 -c "print(f'| $r | {$a:.0f} | {$b:.0f} | {$b/$a:.3f} |')"
done
