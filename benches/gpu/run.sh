#!/usr/bin/env bash
# Issue 5 on an NVIDIA GPU: `corrflow train` (burn-cuda, paper config) against
# transformers.BertForMaskedLM (benches/gpu/bert_torch.py), same model, same batch size, same
# corpus, on the same GPU. Results (JSON lines in results.jsonl, logs, metrics.jsonl) go to OUTDIR.
#
#   benches/gpu/run.sh CORPUS GRAPH OUTDIR STEPS WARMUP [LABEL=CORRFLOW_BIN[@DEVICE] ...]
#
# DEVICE is cuda (burn-cuda with fusion, the default) or cuda-kernels (no fusion, the CubeCL
# kernels of the fused operations): `fusion=BIN kernels=BIN@cuda-kernels` compares them. Each
# LABEL runs twice, with its kernel cache (CORRFLOW_KERNEL_CACHE, OUTDIR/kernel-cache-LABEL) cold
# and then warm (as LABEL-warm), to time the first step both ways.
#
# Each CORRFLOW_BIN must be built with `cargo build --release --features cuda`; libcuda and NVRTC
# are loaded at run time (CUDA's lib folders are added to LD_LIBRARY_PATH for NVRTC).
# TORCH=0 skips the PyTorch runs, TORCH_PRECISIONS (default "fp32 tf32 bf16") chooses them;
# BURN_TIMEOUT (seconds, default 300) bounds each corrflow run;
# DEADLINE_S (seconds from the start, unset: none) bounds the whole script: each corrflow run gets
# at most what is left of it and a run with under 30 s left is skipped (a device call killed at
# its limit would leave the run in progress without its summary line);
# PROFILE=1 runs corrflow with --profile-steps (per-phase milliseconds in metrics.jsonl).
# `python -m corrflow.pretrain` (PyTorch fed by corrflow.MaskedBatches, CorrMask on the fly) runs
# the same config on one GPU when PYTHON (default python3) imports it (on_device.sh puts the
# packed native module on PYTHONPATH): PRETRAIN_PRECISIONS (default "bf16 fp32") chooses bf16
# autocast and/or fp32, PRETRAIN_DEVICE (default cuda) the device. Every run's GPU utilisation
# is sampled every 250 ms (nvidia-smi) and its mean recorded with the run's result.
set -u
CORPUS=$1 GRAPH=$2 OUT=$3 STEPS=$4 WARMUP=$5
START=$(date +%s)
left_s() { # seconds left before DEADLINE_S (a day where it is unset)
    if [ -n "${DEADLINE_S:-}" ]; then echo $(( DEADLINE_S - ($(date +%s) - START) )); else echo 86400; fi
}
shift 5
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}

util_start() { # FILE: samples GPU utilisation (%) into FILE until util_stop
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 250 > "$1" 2>/dev/null &
        UTIL_PID=$!
    else
        : > "$1"
        UTIL_PID=
    fi
}
util_stop() { # FILE: stops the sampling; FILE keeps the numeric samples only (not "[N/A]" lines)
    [ -n "${UTIL_PID:-}" ] && kill "$UTIL_PID" 2>/dev/null && wait "$UTIL_PID" 2>/dev/null
    UTIL_PID=
    grep -E '^[0-9.]+$' "$1" > "$1.tmp"; mv "$1.tmp" "$1"
}

summarize() { # METRICS WARMUP IMPL PRECISION UTIL_FILE: one results line from a metrics.jsonl
    python3 - "$@" <<'EOF' | tee -a "$OUT/results.jsonl"
import json, statistics, sys
path, w, impl, precision, util = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
try:
    rows = [json.loads(l) for l in open(path) if l.strip()]
except OSError:
    rows = []
rows = [r for r in rows if "tokens" in r]
timed = [r for r in rows if r["step"] > w]
secs = [r["tokens"] / r["tokens_per_s"] for r in timed]
samples = [float(x) for x in open(util).read().split()]
print(json.dumps({
    "impl": impl, "precision": precision, "steps": len(timed),
    "tokens_per_s": sum(r["tokens"] for r in timed) / sum(secs) if timed else None,
    "median_step_tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed) if timed else None,
    "mean_tokens_per_step": statistics.mean(r["tokens"] for r in timed) if timed else None,
    "median_step_ms": 1000 * statistics.median(secs) if timed else None,
    "step_seconds_first": [round(r["tokens"] / r["tokens_per_s"], 3) for r in rows[:12]],
    "first_losses": [round(r["loss"], 4) for r in rows[:5]], "last_loss": rows[-1]["loss"] if rows else None,
    # The stability target: after step 50, no step slower than 2x the median.
    "slowest_after_50_over_median": max(s for r, s in zip(timed, secs) if r["step"] > 50) / statistics.median(secs)
    if any(r["step"] > 50 for r in timed) else None,
    "gpu_util_mean": statistics.mean(samples) if samples else None, "gpu_util_samples": len(samples),
}))
EOF
}
mkdir -p "$OUT"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

if [ "${TORCH:-1}" != 0 ]; then
    for prec in ${TORCH_PRECISIONS:-fp32 tf32 bf16}; do
        util_start "$OUT/util-torch-$prec.txt"
        "$PYTHON" "$HERE/bert_torch.py" --corpus "$CORPUS" --steps $((STEPS - WARMUP)) --warmup "$WARMUP" \
            --precision "$prec" --json "$OUT/results.jsonl" > "$OUT/torch-$prec.log" 2>&1 || tail -20 "$OUT/torch-$prec.log"
        util_stop "$OUT/util-torch-$prec.txt"
        tail -1 "$OUT/torch-$prec.log"
        python3 -c 'import json, statistics, sys; s = [float(x) for x in open(sys.argv[1]).read().split()]; print(json.dumps({"gpu_util": sys.argv[2], "mean": statistics.mean(s) if s else None, "samples": len(s)}))' \
            "$OUT/util-torch-$prec.txt" "pytorch-$prec" | tee -a "$OUT/results.jsonl"
    done
fi

# The paper config on the GPU; every step logged, no evaluation or checkpoint inside the timed steps.
sed -e 's/^device = .*/device = "cuda"/' -e 's/^log_every = .*/log_every = 1/' \
    -e 's/^eval_every = .*/eval_every = 100000/' -e 's/^checkpoint_every = .*/checkpoint_every = 100000/' \
    -e 's/^eval_cells = .*/eval_cells = 96/' "$HERE/../../configs/paper.toml" > "$OUT/paper-cuda.toml"
# corrflow.pretrain on one GPU, before the burn runs (the deadline cuts what comes last).
if "$PYTHON" -c "import corrflow.pretrain, transformers" 2> "$OUT/pretrain-import.log"; then
    for prec in ${PRETRAIN_PRECISIONS:-bf16 fp32}; do
        left=$(left_s) budget=${BURN_TIMEOUT:-300}
        if [ "$left" -lt 30 ]; then
            echo "pretrain-$prec skipped: ${left} s left of DEADLINE_S=$DEADLINE_S" | tee -a "$OUT/skipped.txt"
            continue
        fi
        [ "$left" -lt "$budget" ] && budget=$left
        rm -rf "$OUT/run-pretrain-$prec"
        util_start "$OUT/util-pretrain-$prec.txt"
        start=$(date +%s)
        timeout "$budget" "$PYTHON" -m corrflow.pretrain --config "$OUT/paper-cuda.toml" --corpus "$CORPUS" \
            --graph "$GRAPH" --out "$OUT/run-pretrain-$prec" --max-steps "$STEPS" \
            --device "${PRETRAIN_DEVICE:-cuda}" $([ "$prec" = fp32 ] && echo --fp32) > "$OUT/pretrain-$prec.log" 2>&1
        echo "pretrain-$prec exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/pretrain-$prec.log"
        util_stop "$OUT/util-pretrain-$prec.txt"
        tail -3 "$OUT/pretrain-$prec.log"
        summarize "$OUT/run-pretrain-$prec/metrics.jsonl" "$WARMUP" corrflow.pretrain "$prec" "$OUT/util-pretrain-$prec.txt"
    done
else
    echo "corrflow.pretrain skipped: $PYTHON cannot import it with transformers: $(tail -1 "$OUT/pretrain-import.log")" |
        tee -a "$OUT/skipped.txt"
fi

for spec in $(for s in "$@"; do echo "$s ${s%%=*}-warm=${s#*=}"; done); do
    label=${spec%%=*} bin=${spec#*=} device=cuda
    case "$bin" in *@*) device=${bin#*@} bin=${bin%@*} ;; esac
    # One kernel cache per label: empty for its first run, kept for its -warm run.
    export CORRFLOW_KERNEL_CACHE="$OUT/kernel-cache-${label%-warm}"
    case "$label" in *-warm) ;; *) rm -rf "$CORRFLOW_KERNEL_CACHE" ;; esac
    rm -rf "$OUT/run-$label"
    left=$(left_s) budget=${BURN_TIMEOUT:-300}
    if [ "$left" -lt 30 ]; then
        echo "$label skipped: ${left} s left of DEADLINE_S=$DEADLINE_S" | tee -a "$OUT/skipped.txt"
        continue
    fi
    [ "$left" -lt "$budget" ] && budget=$left
    start=$(date +%s)
    util_start "$OUT/util-$label.txt"
    CUBECL_DEBUG_LOG="$OUT/cubecl-$label.log" timeout "$budget" "$bin" train ${PROFILE:+--profile-steps} \
        --config "$OUT/paper-cuda.toml" --corpus "$CORPUS" --graph "$GRAPH" --device "$device" \
        --out "$OUT/run-$label" --max-steps "$STEPS" > "$OUT/burn-$label.log" 2>&1
    echo "$label exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/burn-$label.log"
    util_stop "$OUT/util-$label.txt"
    tail -3 "$OUT/burn-$label.log"
    # The debug log can be large: keep its size, the number of lines per kind, and its ends.
    if [ -f "$OUT/cubecl-$label.log" ]; then
        log="$OUT/cubecl-$label.log"
        { ls -la "$log"; wc -l < "$log"; cut -c1-40 "$log" | sort | uniq -c | sort -rn | head -30;
          head -c 20000 "$log"; echo ...; tail -c 20000 "$log"; } > "$OUT/cubecl-$label.summary"
        rm -f "$log"
    fi
    summarize "$OUT/run-$label/metrics.jsonl" "$WARMUP" "corrflow-burn-cuda-$label" fp32 "$OUT/util-$label.txt"
done
