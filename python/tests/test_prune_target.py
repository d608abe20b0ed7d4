"""scripts/prune-target.sh, which `make deps` runs before every build: when the disk is short it
removes stale copies of the workspace's own artifacts from the shared cargo target dir, and must
never remove the build the next `make test` reuses, however old (session 60)."""
import os
import subprocess
import time

from conftest import ROOT

MINUTE = 60


def touch(path, minutes_ago):
    path.write_bytes(b"")
    t = time.time() - minutes_ago * MINUTE
    os.utime(path, (t, t))


def prune(target, **env):
    run_env = {**os.environ, "CORRFLOW_PRUNE_BELOW_GB": "1000000", **env}
    return subprocess.run(["bash", str(ROOT / "scripts" / "prune-target.sh"), str(target)],
                          env=run_env, capture_output=True, text=True)


def test_keeps_the_newest_builds_of_each_name_and_recent_ones(tmp_path):
    deps = tmp_path / "release" / "deps"
    deps.mkdir(parents=True)
    (tmp_path / "release" / "incremental").mkdir()
    # Six builds of corrflow-io, the newest first; build 5 was rebuilt a moment ago through its
    # rmeta, and build 7 is the newest by a little.
    for i, age in enumerate([100, 200, 300, 400, 500, 600], start=1):
        touch(deps / f"libcorrflow_io-{i:016x}.rlib", age)
        touch(deps / f"corrflow_io-{i:016x}.d", age)
    touch(deps / f"libcorrflow_io-{5:016x}.rmeta", 10)
    touch(deps / f"libcorrflow_io-{7:016x}.rlib", 30)
    # A `make test` build of days ago that nothing has rebuilt since: cargo leaves it untouched.
    touch(deps / f"integration-{0xa:016x}", 5 * 24 * 60)
    # Third-party crates stay whatever their age.
    for i in range(6):
        touch(deps / f"libarrow-{i:016x}.rlib", 10_000)

    out = prune(tmp_path)
    assert out.returncode == 0, out.stderr
    left = {p.name for p in deps.iterdir()}
    kept_io = {n.split("-")[1].split(".")[0] for n in left if "corrflow_io" in n}
    # The four newest builds (5, 7, 1, 2) stay; 3, 4 and 6 are older than three hours and go.
    assert kept_io == {f"{i:016x}" for i in (5, 7, 1, 2)}
    assert f"integration-{0xa:016x}" in left
    assert sum(n.startswith("libarrow") for n in left) == 6
    assert not (tmp_path / "release" / "incremental").exists()
    assert "removed 6 files" in out.stderr

    # Builds younger than the age floor stay even beyond the newest CORRFLOW_PRUNE_KEEP.
    touch(deps / f"integration-{0xb:016x}", 20)
    out = prune(tmp_path, CORRFLOW_PRUNE_KEEP="0")
    assert out.returncode == 0, out.stderr
    left = {p.name for p in deps.iterdir()}
    assert f"integration-{0xb:016x}" in left and f"integration-{0xa:016x}" not in left


def test_refuses_a_bad_setting_and_does_nothing_with_room(tmp_path):
    deps = tmp_path / "release" / "deps"
    deps.mkdir(parents=True)
    touch(deps / f"libcorrflow_io-{1:016x}.rlib", 10_000)
    out = prune(tmp_path, CORRFLOW_PRUNE_KEEP="four")
    assert out.returncode == 2 and "CORRFLOW_PRUNE_KEEP must be a whole number, got 'four'" in out.stderr
    out = prune(tmp_path, CORRFLOW_PRUNE_BELOW_GB="0", CORRFLOW_PRUNE_KEEP="0")
    assert out.returncode == 0 and out.stderr == ""
    assert (deps / f"libcorrflow_io-{1:016x}.rlib").exists()
