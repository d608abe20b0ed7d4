# Sourced by the atlas benches: one run timed by `/usr/bin/time -v`, from disk, optionally in a
# cgroup-v1 memory group (whose limit counts the page cache).

# The page cache dropped (as root; elsewhere a no-op), so the next run reads from disk.
drop_caches() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; fi
}

# timed_run TIME_FILE OUT_FILE GROUP command...: drops the page cache and runs the command under
# `/usr/bin/time -v` (its report in TIME_FILE, stdout in OUT_FILE); with a GROUP directory (""
# for none), a shell joins that memory group and then becomes the command.
timed_run() {
  local t="$1" out="$2" group="$3"; shift 3
  local run=("$@")
  [ -z "$group" ] || run=(bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$group" "$@")
  drop_caches
  /usr/bin/time -v "${run[@]}" >"$out" 2>"$t"
}

# Fails unless the page cache can be dropped (root): for benches whose numbers must come from disk.
need_drop_caches() {
  [ -w /proc/sys/vm/drop_caches ] || { echo "$0: needs root to drop the page cache" >&2; exit 1; }
}

# The md5 of each shard of corpus DIR, one line per shard in path order: two corpora hold the
# same bytes when their listings are equal.
shard_md5s() { (cd "$1" && find atlases -name '*.parquet' | sort | xargs md5sum); }

# Wall seconds and peak RSS (MB) of a `/usr/bin/time -v` report.
wall_seconds() { awk -F': ' '/Elapsed \(wall/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$1"; }
peak_rss_mb() { awk '/Maximum resident/ {printf "%.0f", $6/1024}' "$1"; }

# One MaskedBatches epoch over CORPUS GRAPH (argv 1-2), printing the cells it yielded.
MASKED_EPOCH_PY="import sys, corrflow
print(sum(len(b['cell_index']) for b in corrflow.MaskedBatches(sys.argv[1], sys.argv[2], batch_size=64, shuffle_buffer=2000)))"

# The ingest anchor: anndata's backed reader + corrflow.tokenize in blocks of 8,192 cells over
# VOCAB H5AD... (argv), printing the cells it tokenized.
TOKENIZE_ANCHOR_PY="import sys, anndata as ad, corrflow
n = 0
for path in sys.argv[2:]:
    a = ad.read_h5ad(path, backed='r')
    for s in range(0, a.n_obs, 8192):
        n += len(corrflow.tokenize(a[s:s + 8192].to_memory(), vocab=sys.argv[1]))
print(n)"
