#!/usr/bin/env bash
# Keeps the shared cargo target dir (outside the clone, reused by every fresh clone) from
# filling the disk. Third-party crates are kept: they are what makes a fresh clone build in
# minutes. The workspace's own artifacts are the ones that pile up: every change to features,
# dependencies or the toolchain gives them new hashes, and each copy of the trainer, the CLI
# and its test binaries is 0.3–0.4 GB. When free space is short, those older than a few hours
# go, with the incremental dir (CI builds with CARGO_INCREMENTAL=0 anyway).
#
#   scripts/prune-target.sh [TARGET_DIR]    env: CORRFLOW_PRUNE_BELOW_GB (default 30),
#                                                CORRFLOW_PRUNE_OLDER_MIN (default 180)
set -euo pipefail
target=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}}
below_gb=${CORRFLOW_PRUNE_BELOW_GB:-30}
older_min=${CORRFLOW_PRUNE_OLDER_MIN:-180}
deps="$target/release/deps"
[ -d "$deps" ] || exit 0

free_gb=$(df -P -BG "$target" | awk 'NR == 2 { sub(/G$/, "", $4); print $4 }')
[ "$free_gb" -lt "$below_gb" ] || exit 0

root=$(cd "$(dirname "$0")/.." && pwd)
# The workspace's crate and target names, as they appear in artifact names (`-` becomes `_`).
names=$(
  {
    echo corrflow
    for f in "$root"/tests/*.rs "$root"/crates/*/tests/*.rs "$root"/benches/*.rs; do
      [ -e "$f" ] && basename "$f" .rs
    done
  } | tr - _ | sort -u
)
pruned=0
while IFS= read -r -d '' file; do
  base=$(basename "$file")
  stem=${base#lib}
  stem=${stem%%-*}
  stem=${stem%%.*}
  case "$stem" in
    corrflow*) ;;
    *) grep -qxF "$stem" <<<"$names" || continue ;;
  esac
  rm -f "$file"
  pruned=$((pruned + 1))
done < <(find "$deps" -maxdepth 1 -type f -mmin "+$older_min" -print0)
rm -rf "$target/release/incremental"
echo "prune-target: ${free_gb} GB free under $target; removed $pruned stale workspace artifacts" \
  "($(df -P -BG "$target" | awk 'NR == 2 { print $4 }') free now)" >&2
