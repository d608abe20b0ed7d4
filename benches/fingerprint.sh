#!/usr/bin/env bash
# Output fingerprint of the whole pipeline, for refactors that must not change a single byte.
#
# Runs every stage of corrflow with one binary on the Kang PBMC data (datasets/data/kang_ctrl
# and kang_stim; fetched by datasets/fetch.sh if missing) with configs/tiny.toml, in a fresh
# temporary work directory, and prints `sha256  name` for every output file (names relative to
# the work directory, sorted). Run it with the binary before and after a refactor and compare:
#
#   benches/fingerprint.sh [--bin PATH] [--out DIR] [--compare FILE] [--keep]
#
#   --bin PATH      binary to run (default: $CARGO_TARGET_DIR/release/corrflow,
#                   CARGO_TARGET_DIR defaulting to ~/.cache/corrflow/target)
#   --out DIR       also write the lines to DIR/fingerprint.txt (and the commands' logs to DIR/logs/)
#   --compare FILE  compare with a recorded fingerprint (e.g. benches/fingerprint-before.txt):
#                   lists every output that differs, is missing or is new; exits 1 if any
#   --keep          keep the work directory (its path is printed on stderr)
#
# benches/fingerprint-before.txt holds the values of commit 216d986 (before the workspace
# refactor; binary sha256 3f5ea626...f23f5b). A run takes 70-80 s on this 2-core machine (the
# two 40-step tiny trainings take 45 s of it).
#
# What is fingerprinted (in pipeline order; each stage's files are hashed right after it ran,
# because later stages change some of them in place):
#   corpus/            `ingest` of kang_ctrl and kang_stim (builtin geneformer-v1 vocabulary):
#                      every shard, manifest.json of each atlas, corpus.json, the corpus' vocab/
#   corpus-vb/         `ingest` of kang_ctrl with the vocabulary written by `vocab build`
#   hf/                `export hf` of the corpus
#   vocab/             `vocab build` on kang_ctrl: every file it writes
#   graph-exact/       `graph build` (exact, Algorithm 1) on kang_ctrl
#   graph-inc.N-*/     `graph build --incremental` on kang_ctrl (1-build), then in the same graph
#                      directory `graph update --add` kang_stim (2-add), `graph update --retract`
#                      kang_stim (3-retract), `--add` kang_stim again (4-readd) and `graph rebase`
#                      (5-rebase): every file of the graph directory (edges.parquet, genes.parquet,
#                      graph.json, deltas/, state/) after each step
#   masks/             `mask audit --dump` on the corpus and graph-exact, one dump per strategy
#                      (random, pmi, pmi-rand, corrmask)
#   run-mlm/           `train` (tiny config, objective mlm, 40 steps; checkpoints at 20 and 40):
#                      model.bin, optim.bin, state.json of both checkpoints, the run's vocab/, and
#                      metrics.jsonl (normalized, see below)
#   run-wced/          the same with objective = "wced" (the CLI has no objective flag: a copy of
#                      tiny.toml with that one line changed)
#   onnx/              `export onnx` of run-mlm's last checkpoint: model.onnx and model.vocab/
#   embed/             `embed --checkpoint` (burn) of run-mlm and `embed --model` (ONNX Runtime,
#                      --threads 1) of the export, on the bundled 1,000 cells
#                      (datasets/default/pbmc1k.h5ad) with obs column n_counts
#
# Normalized before hashing (the content otherwise depends on the machine or the clock):
#   run-*/metrics.jsonl   sed deletes the "tokens_per_s" field of each line (a wall-clock rate);
#                         everything else (step, loss, lr, eval numbers, token counts and
#                         graph_time, which is the masking dataflow's logical graph version, not a
#                         clock) stays, byte for byte.
#   graph-inc.*/state/*.json
#                         the state stores each included atlas' directory as an absolute path
#                         (so updates work from any directory); the work directory's path is
#                         replaced by "$WORK" (sed) so that the fresh temp directory does not show.
#                         (candidates.bin, presence.bin and stats.bin.zst hold no paths.)
#   run-*/checkpoints/step-*/model.bin, optim.bin
#                         burn gives every parameter a random u64 id (burn_std IdGenerator, fresh
#                         on each run) and stores it in both records; optim.bin is moreover a
#                         HashMap keyed by those ids, serialized in HashMap (random) order. The
#                         ids are replaced by their ordinal in model.bin and optim.bin's entries
#                         are sorted by it (burn_canon below, python3 stdlib); all tensor bytes and
#                         everything else stay as written.
#   run-*/checkpoints/step-*/state.json
#                         its model_sha256 / optim_sha256 lines (sha256 of the raw records, so of
#                         the random ids) and its state_sha256 line (sha256 of the file before it,
#                         so of those lines) are deleted; the records are hashed, normalized, above.
#                         The rest (step, configs, vocabulary hash, layout) stays.
# Excluded: no output file; every other file is hashed exactly as written (none holds a time,
# host name or absolute path: checked with two runs in different temp directories). The
# commands' stdout/stderr (summaries with elapsed times) are not hashed; --out keeps them in logs/.
# External inputs that also decide the bytes: datasets/data (checksums in its SHA256SUMS),
# configs/tiny.toml, datasets/default/pbmc1k.h5ad and, for embed/onnx.parquet only, the ONNX
# Runtime library that the binary loads (scripts/fetch-onnxruntime.sh, 1.31.1).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
: "${CARGO_TARGET_DIR:=$HOME/.cache/corrflow/target}"
bin="$CARGO_TARGET_DIR/release/corrflow"
out="" compare="" keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --compare) compare="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fingerprint: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
[ -x "$bin" ] || { echo "fingerprint: no executable binary at $bin" >&2; exit 2; }
[ -z "$compare" ] || [ -r "$compare" ] || { echo "fingerprint: cannot read $compare" >&2; exit 2; }
[ -z "$compare" ] || compare="$(cd "$(dirname "$compare")" && pwd)/$(basename "$compare")"
if [ -n "$out" ]; then mkdir -p "$out"; out="$(cd "$out" && pwd)"; fi

data="$repo/datasets/data"
if [ ! -s "$data/kang_ctrl.h5ad" ] || [ ! -s "$data/kang_stim.h5ad" ]; then
  echo "fingerprint: Kang data missing; running datasets/fetch.sh" >&2
  "$repo/datasets/fetch.sh"
fi

# Canonical path (no symlinks): the graph state stores canonicalized absolute paths.
work="$(cd "$(mktemp -d "${TMPDIR:-/tmp}/corrflow-fingerprint.XXXXXX")" && pwd -P)"
if [ -n "$keep" ]; then echo "fingerprint: work directory $work" >&2; else trap 'rm -rf "$work"' EXIT; fi
cd "$work"
mkdir -p in logs
# Inputs under fixed relative names: manifests and checkpoint states record paths as given.
ln -s "$data/kang_ctrl.h5ad" "$data/kang_stim.h5ad" "$repo/datasets/default/pbmc1k.h5ad" in/
cp "$repo/configs/tiny.toml" in/tiny.toml
sed 's/^objective = "mlm"/objective = "wced"/' in/tiny.toml > in/tiny-wced.toml
grep -q '^objective = "wced"' in/tiny-wced.toml || { echo "fingerprint: could not set objective in tiny.toml" >&2; exit 2; }

list="$work/fingerprint.unsorted"
: > "$list"
export RUST_LOG=warn NO_COLOR=1

# run NAME ARGS...: runs the binary, its output in logs/NAME.log; shows the log tail on failure.
run() {
  local name="$1"; shift
  local t0=$SECONDS
  if ! "$bin" "$@" > "logs/$name.log" 2>&1; then
    echo "fingerprint: '$name' failed: corrflow $*" >&2
    tail -20 "logs/$name.log" >&2
    exit 1
  fi
  echo "fingerprint: $name ($((SECONDS - t0)) s)" >&2
}

# burn_canon model MODEL.bin | burn_canon optim MODEL.bin OPTIM.bin: the record's bytes with
# burn's random parameter ids made canonical (see the header). A record is bincode: each
# parameter id is a length byte 13 and 13 base32 (DNSSEC alphabet) characters; model.bin holds
# them in module order; optim.bin is a map param id -> AdamW state (for the parameters that
# got gradients) whose entries, each starting with its id, come in HashMap order. Ids become
# param00000000.. in model.bin's order, and optim.bin's entries are put in that order. A stray match inside tensor bytes (odds ~2^-24 per
# file) is caught by the count checks.
burn_canon() {
  python3 - "$@" <<'PY'
import re, sys
ID = re.compile(rb"\x0d[0-9a-v]{13}")
def die(msg):
    sys.exit("fingerprint: burn_canon: " + msg)
kind, model_path = sys.argv[1], sys.argv[2]
model = open(model_path, "rb").read()
ids = [m.group() for m in ID.finditer(model)]
if not ids or len(set(ids)) != len(ids):
    die(f"{model_path}: {len(ids)} parameter ids, {len(set(ids))} distinct")
canon = {i: b"\x0d" + b"param%08d" % n for n, i in enumerate(ids)}
if kind == "model":
    out = ID.sub(lambda m: canon[m.group()], model)
else:
    optim_path = sys.argv[3]
    optim = open(optim_path, "rb").read()
    starts = [m.start() for m in ID.finditer(optim)]
    entries = [optim[a:b] for a, b in zip(starts, starts[1:] + [len(optim)])]
    keys = [e[:14] for e in entries]
    # Parameters without a gradient (e.g. the MLM head under wced) have no optimizer state.
    if not keys or len(set(keys)) != len(keys) or not set(keys) <= set(ids) or optim[starts[0] - 1] != len(keys):
        die(f"{optim_path}: {len(keys)} parameter ids ({len(set(keys))} distinct, "
            f"{len(set(keys) - set(ids))} not in model.bin, map length byte {optim[starts[0] - 1]})")
    header = optim[: starts[0]]
    out = header + b"".join(canon[e[:14]] + e[14:] for e in sorted(entries, key=lambda e: canon[e[:14]]))
sys.stdout.buffer.write(out)
PY
}

# hash_file LABEL FILE: one line for FILE under the name LABEL, normalized where documented above.
hash_file() {
  local label="$1" f="$2" h
  case "$label" in
    run-*/metrics.jsonl)
      grep -q '"tokens_per_s":' "$f" || { echo "fingerprint: $label has no tokens_per_s (format changed?)" >&2; exit 1; }
      h=$(sed -E 's/,?"tokens_per_s":[-+0-9.eE]+//' "$f" | sha256sum) ;;
    graph-inc.*/state/*.json)
      h=$(sed "s|$work|\$WORK|g" "$f" | sha256sum) ;;
    run-*/checkpoints/*/model.bin)
      h=$(burn_canon model "$f" | sha256sum) ;;
    run-*/checkpoints/*/optim.bin)
      h=$(burn_canon optim "$(dirname "$f")/model.bin" "$f" | sha256sum) ;;
    run-*/checkpoints/*/state.json)
      [ "$(grep -cE '^  "(model|optim|state)_sha256": "[0-9a-f]{64}",?$' "$f")" = 3 ] \
        || { echo "fingerprint: $label lacks model_sha256/optim_sha256/state_sha256 (format changed?)" >&2; exit 1; }
      h=$(sed -E '/^  "(model|optim|state)_sha256": "[0-9a-f]{64}",?$/d' "$f" | sha256sum) ;;
    *)
      h=$(sha256sum < "$f") ;;
  esac
  printf '%s  %s\n' "${h%% *}" "$label" >> "$list"
}

# snap LABEL DIR: hashes every file under DIR as LABEL/relative-path.
snap() {
  local label="$1" dir="$2" rel
  [ -d "$dir" ] || { echo "fingerprint: $dir missing" >&2; exit 1; }
  while IFS= read -r rel; do
    rel="${rel#./}"
    hash_file "$label/$rel" "$dir/$rel"
  done < <(cd "$dir" && find . -type f | LC_ALL=C sort)
}

# --- corpus -----------------------------------------------------------------------------------
# FINGERPRINT_INGEST_FLAGS (e.g. --ranks-only: no expression columns, as before value models)
# is added to every ingest, to compare a refactor's outputs with a binary that has no such flag.
read -r -a ingest_flags <<< "${FINGERPRINT_INGEST_FLAGS:-}"
run ingest-ctrl --config in/tiny.toml ingest "${ingest_flags[@]}" --atlas kang_ctrl --out corpus in/kang_ctrl.h5ad
run ingest-stim --config in/tiny.toml ingest "${ingest_flags[@]}" --atlas kang_stim --out corpus in/kang_stim.h5ad
snap corpus corpus
run export-hf --config in/tiny.toml export hf --corpus corpus --out hf
snap hf hf

# --- vocab build, and a corpus tokenized with it ----------------------------------------------
run vocab-build --config in/tiny.toml vocab build --out vocab in/kang_ctrl.h5ad
snap vocab vocab
run ingest-vb --config in/tiny.toml ingest "${ingest_flags[@]}" --vocab vocab --atlas kang_ctrl --out corpus-vb in/kang_ctrl.h5ad
snap corpus-vb corpus-vb

# --- graph: exact, then incremental build / add / retract / re-add / rebase ------------------
run graph-exact --config in/tiny.toml graph build --corpus corpus --atlas kang_ctrl --out graph-exact
snap graph-exact graph-exact
run graph-inc-build --config in/tiny.toml graph build --incremental --corpus corpus --atlas kang_ctrl --out graph-inc
snap graph-inc.1-build graph-inc
run graph-add --config in/tiny.toml graph update --graph graph-inc --add corpus/atlases/kang_stim
snap graph-inc.2-add graph-inc
run graph-retract --config in/tiny.toml graph update --graph graph-inc --retract kang_stim
snap graph-inc.3-retract graph-inc
run graph-readd --config in/tiny.toml graph update --graph graph-inc --add corpus/atlases/kang_stim
snap graph-inc.4-readd graph-inc
run graph-rebase --config in/tiny.toml graph rebase --graph graph-inc
snap graph-inc.5-rebase graph-inc

# --- masks --------------------------------------------------------------------------------------
mkdir -p masks
for s in random pmi pmi-rand corrmask; do
  run "mask-$s" --config in/tiny.toml mask audit --corpus corpus --graph graph-exact --strategy "$s" --dump "masks/$s.parquet"
done
snap masks masks

# --- training (40 steps), export, embeddings ----------------------------------------------------
for obj in mlm wced; do
  cfg=in/tiny.toml; [ "$obj" = mlm ] || cfg="in/tiny-$obj.toml"
  run "train-$obj" --config "$cfg" train --corpus corpus --graph graph-exact --out "run-$obj" --max-steps 40
  snap "run-$obj" "run-$obj"
done
run export-onnx --config in/tiny.toml export onnx --checkpoint run-mlm --out onnx/model.onnx
snap onnx onnx
mkdir -p embed
run embed-checkpoint --config in/tiny.toml embed --checkpoint run-mlm --input in/pbmc1k.h5ad --obs-columns n_counts --out embed/checkpoint.parquet
run embed-onnx --config in/tiny.toml embed --model onnx/model.onnx --threads 1 --input in/pbmc1k.h5ad --obs-columns n_counts --out embed/onnx.parquet
snap embed embed

# --- report -------------------------------------------------------------------------------------
LC_ALL=C sort -k2 "$list" > fingerprint.txt
cat fingerprint.txt
if [ -n "$out" ]; then
  cp fingerprint.txt "$out/fingerprint.txt"
  rm -rf "$out/logs"; cp -r logs "$out/logs"
fi
echo "fingerprint: $(wc -l < fingerprint.txt) files, $SECONDS s" >&2

if [ -n "$compare" ]; then
  # name -> hash in each; report changed, missing and new names.
  if diff -q <(LC_ALL=C sort -k2 "$compare") fingerprint.txt > /dev/null; then
    echo "fingerprint: identical to $compare" >&2
  else
    LC_ALL=C awk 'NR == FNR { old[$2] = $1; next }
      { if (!($2 in old)) print "new:      " $2; else if (old[$2] != $1) print "differs:  " $2; seen[$2] = 1 }
      END { for (n in old) if (!(n in seen)) print "missing:  " n }' "$compare" fingerprint.txt | LC_ALL=C sort -k2 >&2
    echo "fingerprint: DIFFERENT from $compare" >&2
    exit 1
  fi
fi
