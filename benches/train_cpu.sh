#!/usr/bin/env bash
# Issue 24: `corrflow train` against PyTorch on the CPU, same batches, interleaved rounds.
#
#   benches/train_cpu.sh CORPUS GRAPH OUT CONFIG STEPS [ROUNDS] [LABEL=CORRFLOW_BIN ...]
#
# CONFIG is paper or tiny (configs/CONFIG.toml, every step logged, no evaluation or checkpoint
# inside the timed steps). The first corrflow binary also writes the batches it trains on
# (--dump-batches); benches/train_replay.py replays them in transformers.BertForMaskedLM (hf) and
# in the same model decoding only the masked positions (masked). Each round runs every corrflow
# binary and both PyTorch modes one after the other, so machine drift hits all alike. The first
# SKIP (default 2) steps of every run are not timed. When the venv has the corrflow package,
# `python -m corrflow.pretrain` (the same model in PyTorch, fed by corrflow.MaskedBatches and
# masking on the fly) runs too: against the replay of pre-made batches it shows what the loader
# costs. With accelerate there too, transformers' Trainer (benches/hf_trainer.py) runs over the
# corpus exported to a Hugging Face dataset: what a Geneformer user would run. Results: OUT/results.jsonl and a table on
# stdout. PyTorch goes into a venv (TORCH_VENV, default ~/.cache/corrflow/torch-venv; ~6 GB with
# its CUDA libraries, made on first use). Also records the machine's f32 GEMM peak (gemm crate
# and torch.mm).
set -eu
CORPUS=$1 GRAPH=$2 OUT=$3 CONFIG=$4 STEPS=$5 ROUNDS=${6:-2}
shift $(( $# < 6 ? $# : 6 ))
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
SKIP=${SKIP:-2}
[ $# -gt 0 ] || set -- "corrflow=${CARGO_TARGET_DIR:-$ROOT/target}/release/corrflow"
VENV=${TORCH_VENV:-$HOME/.cache/corrflow/torch-venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q torch transformers
fi
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
# The corpus as a Hugging Face dataset, for the Trainer baseline.
first_bin=${1#*=}
[ -d "$OUT/hf-dataset" ] || "$first_bin" export hf --corpus "$CORPUS" --out "$OUT/hf-dataset" > /dev/null
sed -e 's/^log_every = .*/log_every = 1/' -e 's/^eval_every = .*/eval_every = 100000/' \
    -e 's/^checkpoint_every = .*/checkpoint_every = 100000/' -e 's/^eval_cells = .*/eval_cells = 8/' \
    "$ROOT/configs/$CONFIG.toml" > "$OUT/$CONFIG.toml"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*avx512f.*/Flags: avx512f present/' > "$OUT/machine.txt"

corrflow_run() { # label bin round [extra args]
    local label=$1 bin=$2 round=$3; shift 3
    rm -rf "$OUT/run-$label"
    "$bin" train --config "$OUT/$CONFIG.toml" --corpus "$CORPUS" --graph "$GRAPH" --out "$OUT/run-$label" \
        --max-steps "$STEPS" --profile-steps "$@" > "$OUT/$label-$round.log" 2>&1
    python3 - "$OUT/run-$label/metrics.jsonl" "$SKIP" "$label" "$CONFIG" "$round" <<'PY' | tee -a "$OUT/results.jsonl"
import json, statistics, sys
path, skip, label, config, rnd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rows = [json.loads(l) for l in open(path) if '"tokens"' in l][skip:]
secs = sum(r["tokens"] / r["tokens_per_s"] for r in rows)
# A phase a binary does not time (clipping is inside the optimizer step since session 21) is 0.
ph = lambda k: statistics.median(r.get("phase_ms", {}).get(k, 0.0) for r in rows)
print(json.dumps({"impl": label, "config": config, "round": int(rnd), "steps": len(rows),
    "tokens_per_s": sum(r["tokens"] for r in rows) / secs,
    "phase_ms": {"fwd": ph("forward"), "bwd": ph("backward"), "opt": ph("clip") + ph("optimizer")},
    "first_loss": rows[0]["loss"] if rows else None}))
PY
}

pretrain_run() { # round: corrflow.pretrain (PyTorch's engine fed by corrflow.MaskedBatches, CorrMask
    # masked on the fly), when the venv has the corrflow package (scripts/python-package.sh PYTHON)
    "$VENV/bin/python" -c "import corrflow.pretrain" 2>/dev/null || return 0
    rm -rf "$OUT/run-pretrain"
    "$VENV/bin/python" -m corrflow.pretrain --config "$OUT/$CONFIG.toml" --corpus "$CORPUS" --graph "$GRAPH" \
        --out "$OUT/run-pretrain" --max-steps "$STEPS" --device cpu > "$OUT/pretrain-$1.log" 2>&1
    python3 - "$OUT/run-pretrain/metrics.jsonl" "$SKIP" "$CONFIG" "$1" <<'PY' | tee -a "$OUT/results.jsonl"
import json, sys
path, skip, config, rnd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [json.loads(l) for l in open(path) if '"tokens"' in l][skip:]
secs = sum(r["tokens"] / r["tokens_per_s"] for r in rows)
print(json.dumps({"impl": "corrflow.pretrain", "config": config, "round": int(rnd), "steps": len(rows),
    "tokens_per_s": sum(r["tokens"] for r in rows) / secs, "first_loss": rows[0]["loss"] if rows else None}))
PY
}

trainer_run() { # round: transformers' Trainer over the corpus exported to a Hugging Face dataset,
    # DataCollatorForLanguageModeling and length-grouped batches (benches/hf_trainer.py)
    "$VENV/bin/python" -c "import corrflow.pretrain, accelerate" 2>/dev/null || return 0
    "$VENV/bin/python" "$HERE/hf_trainer.py" --dataset "$OUT/hf-dataset" --corpus "$CORPUS" --config "$OUT/$CONFIG.toml" \
        --steps "$STEPS" --skip "$SKIP" > "$OUT/trainer-$2.log" 2>&1
    tail -1 "$OUT/trainer-$2.log" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d['round']=$2; d['config']='$CONFIG'; print(json.dumps(d))" | tee -a "$OUT/results.jsonl"
}

torch_run() { # mode round
    "$VENV/bin/python" "$HERE/train_replay.py" --batches "$OUT/batches.jsonl" --corpus "$CORPUS" \
        --config "$CONFIG" --mode "$1" --skip "$SKIP" > "$OUT/torch-$1-$2.log" 2>&1
    tail -1 "$OUT/torch-$1-$2.log" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d['round']=$2; print(json.dumps(d))" | tee -a "$OUT/results.jsonl"
}

for round in $(seq 1 "$ROUNDS"); do
    first=1
    for spec in "$@"; do
        label=${spec%%=*} bin=${spec#*=}
        if [ "$round" = 1 ] && [ $first = 1 ]; then
            corrflow_run "$label" "$bin" "$round" --dump-batches "$OUT/batches.jsonl"
        else
            corrflow_run "$label" "$bin" "$round"
        fi
        first=0
    done
    torch_run hf "$round"
    torch_run masked "$round"
    pretrain_run "$round"
    trainer_run "$1" "$round"
done

# The machine's f32 GEMM peak, both libraries, 2 threads.
(. "$ROOT/scripts/build-env.sh" && cargo run -q --release -p corrflow-algorithms --example gemm_peak --manifest-path "$ROOT/Cargo.toml") > "$OUT/gemm-peak.txt" 2>&1 || true
"$VENV/bin/python" - >> "$OUT/gemm-peak.txt" <<'PY'
import time, torch
a = torch.randn(2048, 2048); b = torch.randn(2048, 2048); a @ b
t = time.perf_counter(); [a @ b for _ in range(10)]; dt = time.perf_counter() - t
print(f"torch.mm f32 2048^3: {2 * 2048**3 * 10 / dt / 1e9:.0f} GFLOP/s ({torch.get_num_threads()} threads)")
PY
cat "$OUT/gemm-peak.txt"

python3 - "$OUT/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["impl"], []).append(r)
mean = {k: statistics.mean(r["tokens_per_s"] for r in v) for k, v in by.items()}
print(f"{'implementation':<22} {'tokens/s per round':<28} {'mean':>8} {'vs hf':>7} {'vs masked':>10}")
for k, v in by.items():
    per = ", ".join(f"{r['tokens_per_s']:.0f}" for r in v)
    print(f"{k:<22} {per:<28} {mean[k]:>8.0f} {mean[k] / mean.get('pytorch-hf', float('nan')):>7.2f} {mean[k] / mean.get('pytorch-masked', float('nan')):>10.2f}")
PY
