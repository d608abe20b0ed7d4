#!/usr/bin/env bash
# "Beyond RAM" for the streaming stages: ingest of one atlas size's h5ad files and one
# MaskedBatches epoch over its corpus, each run unconfined and inside a cgroup-v1 memory group
# whose limit counts the page cache, interleaved, the page cache dropped before every run. With
# a limit below the input's size, the input is larger than all the memory the stage has.
#
# usage (as root, after benches/atlas_scale.sh with KEEP=1 wrote the size's data and corpus):
#   benches/atlas_mem_group.sh ATLAS_DIR [LIMIT (default 512M)] [ROUNDS (default 2)]
#   e.g. benches/atlas_mem_group.sh ~/.cache/corrflow/bench/atlas/x64 512M 2
# Prints and writes ATLAS_DIR/mem_group.tsv: round, stage, group (none or LIMIT), seconds, peak
# RSS MB, the group's peak usage MB and how often it hit its limit (memory.failcnt). Each
# confined ingest's corpus is compared with the unconfined one's, shard by shard.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/lib/timed_run.sh
d="${1:?usage: benches/atlas_mem_group.sh ATLAS_DIR [LIMIT] [ROUNDS]}"
limit="${2:-512M}"
rounds="${3:-2}"
: "${CARGO_TARGET_DIR:=$HOME/.cache/corrflow/target}"
bin="$CARGO_TARGET_DIR/release/corrflow"
py="${PY:-$(scripts/python-package.sh)}"
[ -x "$bin" ] || { echo "build corrflow first: make build" >&2; exit 1; }
for f in kang cbmc pbmc3k; do [ -e "$d/data/$f.h5ad" ] || { echo "$d/data/$f.h5ad: missing (run atlas_scale.sh with KEEP=1)" >&2; exit 1; }; done
[ -d "$d/corpus" ] && [ -d "$d/graph" ] || { echo "$d: no corpus or graph (run atlas_scale.sh with KEEP=1)" >&2; exit 1; }
cg=/sys/fs/cgroup/memory/corrflow-mem-group
mkdir -p "$cg" 2>/dev/null || { echo "needs cgroup v1's memory controller, as root" >&2; exit 1; }
echo "$limit" >"$cg/memory.limit_in_bytes"
out="$d/mem_group.tsv"
printf 'round\tstage\tgroup\tseconds\tpeak_rss_mb\tgroup_max_mb\tfailcnt\n' >"$out"
t="$d/mem_group.time"

run() { # ROUND STAGE GROUP command...
  local r="$1" st="$2" g="$3" group=""; shift 3
  if [ "$g" != none ]; then
    group="$cg"
    echo 0 >"$cg/memory.max_usage_in_bytes"; echo 0 >"$cg/memory.failcnt"
  fi
  timed_run "$t" /dev/null "$group" "$@" || { tail -20 "$t" >&2; echo "failed: $st ($g)" >&2; exit 1; }
  local wall rss gm=- fc=-
  wall=$(wall_seconds "$t")
  rss=$(peak_rss_mb "$t")
  if [ "$g" != none ]; then gm=$(($(cat "$cg/memory.max_usage_in_bytes") / 1048576)); fc=$(cat "$cg/memory.failcnt"); fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$st" "$g" "$wall" "$rss" "$gm" "$fc" | tee -a "$out"
}
ingest="for a in kang cbmc pbmc3k; do \"$bin\" ingest --vocab \"$d/vocab\" --atlas \$a --out \"\$0\" \"$d/data/\$a.h5ad\" >/dev/null || exit 1; done"
for r in $(seq "$rounds"); do
  for g in none "$limit"; do
    rm -rf "$d/corpus_$g"
    run "$r" "ingest h5ad" "$g" bash -c "$ingest" "$d/corpus_$g"
  done
  [ "$(shard_md5s "$d/corpus_none")" = "$(shard_md5s "$d/corpus_$limit")" ] || { echo "the confined corpus differs" >&2; exit 1; }
  rm -rf "$d/corpus_none" "$d/corpus_$limit"
  for g in none "$limit"; do
    run "$r" "MaskedBatches epoch" "$g" "$py" -c "$MASKED_EPOCH_PY" "$d/corpus" "$d/graph"
  done
done
rm -f "$t"; rmdir "$cg" 2>/dev/null || true
