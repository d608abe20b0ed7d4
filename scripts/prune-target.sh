#!/usr/bin/env bash
# Keeps the shared cargo target dir (outside the clone, reused by every fresh clone) from
# filling the disk. Third-party crates are kept: they are what makes a fresh clone build in
# minutes. The workspace's own artifacts are the ones that pile up: every change to features,
# dependencies or the toolchain gives them new hashes, and each copy of the trainer, the CLI
# and its test binaries is 0.3–0.4 GB. When free space is short, the copies of each workspace
# artifact beyond its newest few builds go, if older than a few hours, with the incremental dir
# (CI builds with CARGO_INCREMENTAL=0 anyway).
#
# Why by build and not by age alone: cargo leaves a fresh artifact untouched, so the build that
# `make test` reuses keeps the time it was compiled, hours or days ago. Pruning every copy older
# than three hours (this script until session 60) deleted it whenever the disk was short, and
# the next run rebuilt the workspace (~40 min). A crate's hash is fixed by its build
# configuration (features, profile, toolchain, dependencies), not by its source, so each live
# configuration (`make test`'s, `make build`'s, the wheel's) is one hash a name, rewritten in
# place by each build, and the newest CORRFLOW_PRUNE_KEEP hashes of a name hold them.
#
#   scripts/prune-target.sh [TARGET_DIR]    env: CORRFLOW_PRUNE_BELOW_GB (default 30),
#                                                CORRFLOW_PRUNE_OLDER_MIN (default 180),
#                                                CORRFLOW_PRUNE_KEEP (default 4 hashes a name)
set -euo pipefail
target=${1:-${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}}
below_gb=${CORRFLOW_PRUNE_BELOW_GB:-30}
older_min=${CORRFLOW_PRUNE_OLDER_MIN:-180}
keep=${CORRFLOW_PRUNE_KEEP:-4}
deps="$target/release/deps"
[ -d "$deps" ] || exit 0
for setting in "CORRFLOW_PRUNE_BELOW_GB=$below_gb" "CORRFLOW_PRUNE_OLDER_MIN=$older_min" "CORRFLOW_PRUNE_KEEP=$keep"; do
  [[ ${setting#*=} =~ ^[0-9]+$ ]] ||
    { echo "prune-target: ${setting%%=*} must be a whole number, got '${setting#*=}'" >&2; exit 2; }
done

free_gb=$(df -P -BG "$target" | awk 'NR == 2 { sub(/G$/, "", $4); print $4 }')
[ "$free_gb" -lt "$below_gb" ] || exit 0

root=$(cd "$(dirname "$0")/.." && pwd)
pruned=$(python3 - "$root" "$deps" "$keep" "$older_min" <<'PY'
import glob, os, re, sys, time, tomllib
root, deps, keep, older_min = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
# The workspace's package, library and target names as they appear in artifact names (`-`
# becomes `_`): the named targets of every manifest, and the files cargo finds targets in.
names = set()
for manifest in [f"{root}/Cargo.toml", *glob.glob(f"{root}/crates/*/Cargo.toml"), f"{root}/python/Cargo.toml"]:
    if not os.path.exists(manifest):
        continue
    with open(manifest, "rb") as f:
        m = tomllib.load(f)
    targets = [m.get("package", {}), m.get("lib", {})]
    for kind in ("bin", "test", "bench", "example"):
        targets += m.get(kind, [])
    names |= {t["name"].replace("-", "_") for t in targets if "name" in t}
for pattern in ("tests/*.rs", "crates/*/tests/*.rs", "benches/*.rs"):
    names |= {os.path.basename(f)[:-3].replace("-", "_") for f in glob.glob(f"{root}/{pattern}")}
# lib<name>-<hash>.rlib, <name>-<hash>.d, <name>-<hash> (a test binary), <name>-<hash>.<cgu>.o
artifact = re.compile(r"^(?:lib)?([A-Za-z0-9_]+)-([0-9a-f]{16})(?:\..*)?$")
builds = {}  # name -> hash -> [newest mtime, paths]
for entry in os.scandir(deps):
    m = artifact.match(entry.name)
    if not m or not entry.is_file(follow_symlinks=False):
        continue
    name, digest = m.groups()
    if not (name.startswith("corrflow") or name in names):
        continue
    build = builds.setdefault(name, {}).setdefault(digest, [0.0, []])
    build[0] = max(build[0], entry.stat().st_mtime)
    build[1].append(entry.path)
cutoff = time.time() - older_min * 60
pruned = 0
for by_hash in builds.values():
    ranked = sorted(by_hash.values(), key=lambda b: b[0], reverse=True)
    for newest, paths in ranked[keep:]:
        if newest < cutoff:
            for p in paths:
                os.remove(p)
                pruned += 1
print(pruned)
PY
) || {
  # A cache that could not be pruned must not stop the build that follows.
  echo "prune-target: pruning $deps failed (above); nothing more removed" >&2
  exit 0
}
rm -rf "$target/release/incremental"
echo "prune-target: ${free_gb} GB free under $target; removed $pruned files of stale workspace builds" \
  "(kept the newest $keep builds of each name; $(df -P -BG "$target" | awk 'NR == 2 { print $4 }') free now)" >&2
