#!/usr/bin/env bash
# An input larger than the machine's RAM: the scale driver's atlases written as *uncompressed*
# h5ad (anndata's default when no compression is asked for; ~3.1x the gzip file), so that a size
# of 128x (8.4M cells, ~30 GB) is larger than this 24 GB machine's memory and no page cache can
# hold it. The stages that read the input itself, one-pass `vocab build` and `ingest` of the three
# atlases, are timed with their peak RSS, the page cache dropped before each (root), and beside
# ingest the anchor a user would otherwise run, anndata's backed reader + `corrflow.tokenize` in
# blocks (ANCHOR=0 leaves it out; it needs corrflow in CORRFLOW_PYTHON, the test venv by default).
#
#   benches/atlas_beyond_ram.sh WORK CORRFLOW OUT.tsv [SIZES]
#
# SIZES defaults to "1 128" (multiples of BASE = 65,536 cells). WORK/u<size>/data holds the
# atlases (written by benches/atlas_synth.py --compression none when missing, block by block;
# 128x takes ~25 min and ~30 GB of disk). At the smallest size the same cells are also written as
# gzip h5ad and ingested, and the two corpora's shards compared byte for byte: the reader's
# uncompressed path gives the same tokens. Appends rows (size, stage, tool, cells, seconds,
# peak_rss_mb, input_bytes, mem_total_bytes) to OUT.tsv; corpora and vocabularies are removed
# after each size, the data kept (KEEP_DATA=0 removes it).
set -euo pipefail
work=${1:?WORK}
bin=$(realpath "${2:?CORRFLOW}")
out=${3:?OUT.tsv}
sizes=${4:-1 128}
base=${BASE:-65536}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${CORRFLOW_PYTHON:-$HOME/.cache/corrflow/test-venv/bin/python}
. "$here/benches/lib/timed_run.sh"
need_drop_caches
mem_total=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
[ -f "$out" ] || printf 'size\tstage\ttool\tcells\tseconds\tpeak_rss_mb\tinput_bytes\tmem_total_bytes\n' >"$out"
t=$(mktemp)
trap 'rm -f "$t" "$t".*' EXIT

row() { # SIZE STAGE INPUT_BYTES [TOOL]
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "${4:-corrflow}" $((base * $1)) "$(wall_seconds "$t")" \
    "$(peak_rss_mb "$t")" "$3" "$mem_total" >>"$out"
}
ingest_all() { # DATA_DIR EXT VOCAB OUT
  timed_run "$t" /dev/null "" "$here/benches/lib/ingest_atlases.sh" "$bin" "$3" "$4" "$1" "$2"
}

first=1
for s in $sizes; do
  d=$work/u$s
  mkdir -p "$d"
  if [ ! -s "$d/synth.json" ]; then
    "$py" "$here/benches/atlas_synth.py" "$here/datasets/data" "$d/data" --cells $((base * s)) \
      --formats h5ad --compression none >"$d/synth.json.tmp"
    mv "$d/synth.json.tmp" "$d/synth.json"
  fi
  files=("$d/data/kang.h5ad" "$d/data/cbmc.h5ad" "$d/data/pbmc3k.h5ad")
  bytes=$(du -cb "${files[@]}" | tail -1 | cut -f1)
  echo "## ${s}x: $((base * s)) cells, $bytes bytes of uncompressed h5ad; memory $mem_total bytes"
  rm -rf "$d/vocab" "$d/corpus"
  timed_run "$t" /dev/null "" "$bin" vocab build --out "$d/vocab" "${files[@]}"
  row "$s" "vocab build" "$bytes"
  ingest_all "$d/data" h5ad "$d/vocab" "$d/corpus"
  row "$s" "ingest h5ad (uncompressed)" "$bytes"
  if [ "${ANCHOR:-1}" = 1 ]; then
    # What a user would otherwise run on the same files (it writes nothing).
    timed_run "$t" /dev/null "" "$py" -c "$TOKENIZE_ANCHOR_PY" "$d/vocab" "${files[@]}"
    row "$s" "ingest h5ad (uncompressed)" "$bytes" "anndata backed + corrflow.tokenize"
  fi
  echo "${s}x: $(find "$d/corpus/atlases" -name '*.parquet' | wc -l) shards"
  if [ "$first" = 1 ]; then
    # The same cells (same seed) as gzip h5ad: the corpus must not depend on the compression.
    "$py" "$here/benches/atlas_synth.py" "$here/datasets/data" "$d/gzip" --cells $((base * s)) --formats h5ad >/dev/null
    ingest_all "$d/gzip" h5ad "$d/vocab" "$d/corpus_gzip"
    row "$s" "ingest h5ad (gzip)" "$(du -cb "$d"/gzip/*.h5ad | tail -1 | cut -f1)"
    shard_md5s "$d/corpus" >"$t.none"
    shard_md5s "$d/corpus_gzip" >"$t.gzip"
    if cmp -s "$t.none" "$t.gzip"; then
      echo "${s}x: uncompressed and gzip give the same $(wc -l <"$t.none") shards"
    else
      echo "${s}x: the shards of uncompressed and gzip input differ" >&2
      exit 1
    fi
    rm -rf "$d/gzip" "$d/corpus_gzip"
    first=0
  fi
  rm -rf "$d/vocab" "$d/corpus"
  [ "${KEEP_DATA:-1}" = 1 ] || rm -rf "$d/data" "$d/synth.json"
done
