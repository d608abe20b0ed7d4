#!/usr/bin/env bash
# Atlas scale (issue "Atlas scale"): every stage of corrflow on synthetic atlases of 1x, 4x, 16x
# and 64x of BASE cells (default 65,536, so 64x is 4.2M cells), each stage timed with its peak
# RSS, beside what a user would otherwise run at that size:
#   ingest (h5ad, zarr)   anndata read_h5ad(backed="r") + corrflow.tokenize in blocks of 8,192
#   vocab build, graph build (N_sub 100,000 and all cells), graph update --add (an atlas of 10%)
#   one MaskedBatches epoch       annbatch: its collection (a shuffled zarr copy) and one epoch
#   200 training steps (throughput), embed --model over all cells
#   eval cells on 100,000 cells   scanpy + scib-metrics (benches/eval_cells_reference.py)
# The atlases come from benches/atlas_synth.py (real Kang, CBMC and pbmc3k cells resampled with
# count noise, written block by block as gzip h5ad and AnnData zarr).
#
# Reads come from disk: the page cache is dropped before each stage when this runs as root
# (`echo 3 > /proc/sys/vm/drop_caches`), and with MEM_LIMIT (e.g. MEM_LIMIT=2G) each stage runs
# in a cgroup-v1 memory group of that size, page cache included, so inputs larger than it are
# larger than the memory the stage has (this machine's disk cannot hold an atlas larger than its
# 24 GB of RAM beside the corpora the stages write).
#
# usage: benches/atlas_scale.sh [SIZES (default 1,4,16,64)]
#   BASE=65536 WORK=~/.cache/corrflow/bench/atlas MEM_LIMIT= ALL_CELLS_GRAPH_MAX=16 (largest
#   size whose all-cells graph is built) KEEP=1 (keep the largest size's files)
#   EVAL_CELLS=100000 (0: no eval cells stage) PY= (a Python with corrflow installed; default:
#   the test venv, the package built first by scripts/python-package.sh) ANNBATCH_PY= (a Python
#   with annbatch; default: benches/annbatch-env.sh's venv, the anchor left out without one)
#   SKIP="embed --model,train 200 steps,ingest h5ad (anndata backed + corrflow.tokenize)" (stages
#   left out, by name or "name (tool)" as stages.tsv writes them, separated by commas, or by
#   semicolons when a name holds a comma, e.g. "annbatch collection;MaskedBatches epoch (annbatch
#   epoch (batch 4,096, X only))"; a stage whose output a later one reads must stay)
# Writes WORK/stages.tsv (size, stage, tool, cells, seconds, peak RSS MB), WORK/atlas_scale.md
# (table, slopes, RSS ratios) and WORK/atlas_scale.svg (benches/atlas_plot.py).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/lib/timed_run.sh
: "${CARGO_TARGET_DIR:=$HOME/.cache/corrflow/target}"
bin="$CARGO_TARGET_DIR/release/corrflow"
py="${PY:-$(scripts/python-package.sh)}"   # the test venv with this corrflow's Python package
sizes="${1:-1,4,16,64}"
base="${BASE:-65536}"
work="${WORK:-$HOME/.cache/corrflow/bench/atlas}"
all_cells_max="${ALL_CELLS_GRAPH_MAX:-16}"
annbatch_py="${ANNBATCH_PY:-$(benches/annbatch-env.sh || true)}"
# Stages to leave out (see usage): a tool's label may hold a comma, so ';' separates when present.
sep=,; [[ "${SKIP:-}" != *";"* ]] || sep=";"
IFS="$sep" read -ra skip <<<"${SKIP:-}"
[ -n "$annbatch_py" ] || echo "atlas_scale: no Python >= 3.12 for annbatch, its anchor rows are left out" >&2
mkdir -p "$work"
tsv="$work/stages.tsv"
[ -s "$tsv" ] || printf 'size\tstage\ttool\tcells\tseconds\tpeak_rss_mb\n' >"$tsv"
[ -x "$bin" ] || { echo "build corrflow first: make build" >&2; exit 1; }

cgroup=""
if [ -n "${MEM_LIMIT:-}" ]; then
  cgroup=/sys/fs/cgroup/memory/corrflow-atlas
  mkdir -p "$cgroup" || { echo "MEM_LIMIT needs cgroup v1's memory controller as root" >&2; exit 1; }
  echo "$MEM_LIMIT" >"$cgroup/memory.limit_in_bytes"
fi

# stage SIZE NAME TOOL CELLS command...: one timed run, appended to stages.tsv.
stage() {
  local size="$1" name="$2" tool="$3" cells="$4"; shift 4
  for x in "${skip[@]}"; do
    if [ "$x" = "$name" ] || [ "$x" = "$name ($tool)" ]; then echo "${size}x $name ($tool): skipped"; return 0; fi
  done
  local t="$work/time.txt"
  timed_run "$t" "$work/out.txt" "$cgroup" "$@" \
    || { tail -20 "$t" >&2; echo "failed: $name ($tool) at ${size}x" >&2; return 1; }
  local wall rss
  wall=$(wall_seconds "$t")
  rss=$(peak_rss_mb "$t")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$name" "$tool" "$cells" "$wall" "$rss" >>"$tsv"
  echo "${size}x $name ($tool): ${wall}s, ${rss} MB"
}

# The model of the embedding stages: configs/tiny.toml trained for 40 steps on the first size's
# corpus (its vocabulary is the synthetic atlases', whose CBMC genes have no Ensembl id or symbol).
model="$work/model/model.onnx"

for m in ${sizes//,/ }; do
  cells=$((base * m))
  d="$work/x$m"
  mkdir -p "$d"
  # A run without KEEP removed the data of the sizes it finished.
  if [ ! -s "$d/synth.json" ] || [ ! -e "$d/data/kang.h5ad" ]; then
    "$py" benches/atlas_synth.py datasets/data "$d/data" --cells "$cells" >"$d/synth.json.tmp"
    mv "$d/synth.json.tmp" "$d/synth.json"
  fi
  h5ads=("$d/data/kang.h5ad" "$d/data/cbmc.h5ad" "$d/data/pbmc3k.h5ad")
  echo "## ${m}x: $cells cells, $(du -sh "$d/data" | cut -f1) on disk (h5ad + zarr)"
  rm -rf "$d/vocab" "$d/corpus" "$d/corpus_zarr" "$d/graph" "$d/graph_all" "$d/graph_inc"
  stage "$m" "vocab build" corrflow "$cells" "$bin" vocab build --out "$d/vocab" "${h5ads[@]}"
  stage "$m" "ingest h5ad" corrflow "$cells" benches/lib/ingest_atlases.sh "$bin" "$d/vocab" "$d/corpus" "$d/data" h5ad
  stage "$m" "ingest h5ad" "anndata backed + corrflow.tokenize" "$cells" \
    "$py" -c "$TOKENIZE_ANCHOR_PY" "$d/vocab" "${h5ads[@]}"
  stage "$m" "ingest zarr" corrflow "$cells" benches/lib/ingest_atlases.sh "$bin" "$d/vocab" "$d/corpus_zarr" "$d/data" zarr
  rm -rf "$d/corpus_zarr"
  stage "$m" "graph build N_sub 100k" corrflow "$cells" "$bin" graph build --corpus "$d/corpus" --out "$d/graph"
  if [ "$m" -le "$all_cells_max" ]; then
    stage "$m" "graph build all cells" corrflow "$cells" "$bin" graph build --n-sub 0 --incremental \
      --atlas kang --atlas cbmc --corpus "$d/corpus" --out "$d/graph_inc"
    stage "$m" "graph update --add (10%)" corrflow "$((cells / 10))" "$bin" graph update --graph "$d/graph_inc" \
      --add "$d/corpus/atlases/pbmc3k"
  fi
  if [ ! -s "$model" ]; then
    "$bin" --config configs/tiny.toml train --corpus "$d/corpus" --graph "$d/graph" --out "$work/model/run" --restart >/dev/null
    "$bin" export onnx --checkpoint "$work/model/run" --out "$model" >/dev/null
  fi
  stage "$m" "MaskedBatches epoch" corrflow "$cells" "$py" -c "$MASKED_EPOCH_PY" "$d/corpus" "$d/graph"
  if [ -n "$annbatch_py" ]; then
    # annbatch's own preparation (shuffle into a sharded zarr), then its epoch over that copy.
    rm -rf "$d/annbatch.zarr"
    stage "$m" "annbatch collection" annbatch "$cells" "$annbatch_py" benches/annbatch_epoch.py collection \
      "$d/annbatch.zarr" "${h5ads[@]}"
    stage "$m" "MaskedBatches epoch" "annbatch epoch (batch 4,096, X only)" "$cells" "$annbatch_py" \
      benches/annbatch_epoch.py epoch "$d/annbatch.zarr"
    rm -rf "$d/annbatch.zarr"
  fi
  # 200 steps whatever the corpus: time against the atlas's cells should be flat.
  stage "$m" "train 200 steps" corrflow "$cells" "$bin" --config configs/tiny.toml train --corpus "$d/corpus" \
    --graph "$d/graph" --out "$d/run" --max-steps 200 --restart
  rm -rf "$d/run"
  stage "$m" "embed --model" corrflow "$cells" bash -c "
    for a in kang cbmc pbmc3k; do \"$bin\" embed --model \"$model\" --input \"$d/data/\$a.h5ad\" --out \"$d/emb-\$a.parquet\" >/dev/null || exit 1; done"
  if [ "${KEEP:-}" != 1 ]; then rm -rf "$d/data" "$d/corpus" "$d"/emb-*.parquet; fi
done

# eval cells on EVAL_CELLS (100,000) cells of a Kang atlas (label: cell_type), beside scanpy +
# scib-metrics; EVAL_CELLS=0 leaves this stage out (the reference alone runs ~35 min at 100k).
n_eval="${EVAL_CELLS:-100000}"
e="$work/eval$n_eval"
if [ "$n_eval" -eq 0 ]; then :
elif [ ! -s "$e/kang.parquet" ]; then
  # Kang is 60% of an atlas.
  "$py" benches/atlas_synth.py datasets/data "$e/data" --cells $(((n_eval * 10 + 5) / 6)) --formats h5ad >/dev/null
  "$bin" embed --model "$model" --input "$e/data/kang.h5ad" --out "$e/kang.parquet" >/dev/null
fi
if [ "$n_eval" -gt 0 ]; then
  stage "eval $n_eval" "eval cells" corrflow "$n_eval" "$bin" eval cells --embeddings "$e/kang.parquet" \
    --input "$e/data/kang.h5ad" --label cell_type
  stage "eval $n_eval" "eval cells" "scanpy + scib-metrics" "$n_eval" "$py" benches/eval_cells_reference.py \
    "$e/data/kang.h5ad" "$e/kang.parquet" cell_type
fi

"$py" benches/atlas_plot.py "$tsv" "$work/atlas_scale.md" "$work/atlas_scale.svg"
cat "$work/atlas_scale.md"
