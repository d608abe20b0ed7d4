#!/usr/bin/env bash
# Ingest of the scale driver's atlases from h5ad and from zarr, interleaved per size, the page
# cache dropped before each run (root), and the two corpora's shards compared byte for byte.
#
#   benches/atlas_ingest_formats.sh WORK CORRFLOW OUT.tsv [SIZES] [ROUNDS]
#
# WORK is benches/atlas_scale.sh's folder (WORK/x<size>/data holds kang, cbmc and pbmc3k as .h5ad
# and .zarr, WORK/x<size>/vocab the vocabulary); make zarr copies of kept h5ad atlases with
# `python benches/atlas_synth.py datasets/data WORK/x<size>/data --cells N --formats zarr` (the
# same seed draws the same cells). SIZES defaults to "1 4 16 64", ROUNDS to 1. Appends rows
# (size, stage, tool, cells, seconds, peak_rss_mb, round) to OUT.tsv and says per size and round
# whether the shards are identical. The corpora are written beside the data and removed after.
set -euo pipefail
work=${1:?WORK}
bin=$(realpath "${2:?CORRFLOW}")
out=${3:?OUT.tsv}
sizes=${4:-1 4 16 64}
rounds=${5:-1}
. "$(dirname "$0")/lib/timed_run.sh"
need_drop_caches
[ -f "$out" ] || printf 'size\tstage\ttool\tcells\tseconds\tpeak_rss_mb\tround\n' >"$out"
base=${BASE:-65536}
t=$(mktemp)
trap 'rm -f "$t" "$t".*' EXIT

for s in $sizes; do
  d=$work/x$s
  for r in $(seq 1 "$rounds"); do
    for fmt in h5ad zarr; do
      o=$d/corpus_formats_$fmt
      rm -rf "$o"
      timed_run "$t" /dev/null "" "$(dirname "$0")/lib/ingest_atlases.sh" "$bin" "$d/vocab" "$o" "$d/data" "$fmt"
      printf '%s\tingest %s\tcorrflow\t%s\t%s\t%s\t%s\n' "$s" "$fmt" $((base * s)) "$(wall_seconds "$t")" "$(peak_rss_mb "$t")" "$r" >>"$out"
    done
    shard_md5s "$d/corpus_formats_h5ad" >"$t.h5ad"
    shard_md5s "$d/corpus_formats_zarr" >"$t.zarr"
    if cmp -s "$t.h5ad" "$t.zarr"; then
      echo "x$s round $r: the $(wc -l <"$t.h5ad") shards are identical"
    else
      echo "x$s round $r: the shards differ"
    fi
    rm -rf "$d/corpus_formats_h5ad" "$d/corpus_formats_zarr"
  done
done
