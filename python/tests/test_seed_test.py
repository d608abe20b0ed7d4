"""experiments/seed_test.py, which joins a pre-registered test's seeds scored in different `eval
cells` runs (session 62): the join is refused unless both runs scored against the same PCA, and the
interval is the one over every seed."""
import json
import math
import statistics
import subprocess
import sys

from conftest import ROOT

PCA = {"ari": 0.52779, "nmi": 0.66205, "macro_f1": 0.64369}


def run(tmp_path, recorded_pca, later):
    recorded = {"digits": 3, "pca": recorded_pca,
                "seeds": {"20": {"ari": 0.436, "nmi": 0.630, "macro_f1": 0.657},
                          "21": {"ari": 0.369, "nmi": 0.610, "macro_f1": 0.640}}}
    methods = {"pca": PCA, **{f"m-{s}": v for s, v in later.items()}}
    (tmp_path / "recorded.json").write_text(json.dumps(recorded))
    (tmp_path / "eval.json").write_text(json.dumps({"methods": methods}))
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "seed_test.py"), str(tmp_path / "recorded.json"),
                           str(tmp_path / "eval.json"), "m-", ",".join(map(str, later))],
                          capture_output=True, text=True)


def test_seeds_of_two_runs_give_one_interval_over_all_of_them(tmp_path):
    later = {24: {"ari": 0.45, "nmi": 0.666, "macro_f1": 0.670}, 25: {"ari": 0.40, "nmi": 0.62, "macro_f1": 0.61}}
    r = run(tmp_path, {"ari": 0.528, "nmi": 0.662, "macro_f1": 0.644}, later)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    diffs = [x - PCA["macro_f1"] for x in (0.657, 0.640, 0.670, 0.61)]
    f1 = out["metrics"]["macro_f1"]
    assert sorted(out["seeds"]) == ["20", "21", "24", "25"] and f1["n"] == 4
    assert math.isclose(f1["delta"], statistics.mean(diffs), abs_tol=1e-12)
    # t quantile of three degrees of freedom, 95% two-sided.
    assert math.isclose(f1["half_width_95"], 3.182 * statistics.stdev(diffs) / 2, rel_tol=1e-9)
    assert f1["seeds_above"] == 2 and not f1["above_pca_95"]


def test_a_run_against_another_pca_is_refused(tmp_path):
    r = run(tmp_path, {"ari": 0.528, "nmi": 0.662, "macro_f1": 0.650}, {24: dict(PCA)})
    assert r.returncode != 0 and "PCA macro_f1" in r.stderr and "not the recorded" in r.stderr


def test_a_seed_in_both_is_refused(tmp_path):
    r = run(tmp_path, {"ari": 0.528, "nmi": 0.662, "macro_f1": 0.644}, {21: dict(PCA)})
    assert r.returncode != 0 and "seed 21 is both recorded" in r.stderr
