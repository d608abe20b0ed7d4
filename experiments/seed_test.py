"""A pre-registered seed test whose seeds were scored in more than one `eval cells` run (REPORT.md
§10, session 62): per-seed scores recorded earlier (a JSON table, e.g. copied from REPORT) joined
with the seeds of a later eval report, then each target metric's model − PCA interval over all
seeds, 95% and Bonferroni's 98.3%.

Joining is sound only when every run scored the same cells against the same PCA: the recorded
table carries the PCA scores its seeds were measured against, and they must equal the later run's
to the table's precision (`digits`), or the script refuses.

usage: python experiments/seed_test.py RECORDED.json EVAL.json TAG_PREFIX SEEDS > OUT.json
  RECORDED.json  {"digits": 3, "pca": {"ari": .., "nmi": .., "macro_f1": ..},
                  "seeds": {"20": {"ari": .., "nmi": .., "macro_f1": ..}, ...}}
  EVAL.json      a later `eval cells --json` report
  TAG_PREFIX     its method names without the seed, e.g. bins-2x128-k384-dec-random-
  SEEDS          the later run's seeds, e.g. 24-29 or 24,25
"""
import json
import statistics
import sys

from value_models import METRICS, T975, T_BONFERRONI3, TARGET, interval, seeds_of

# The target metrics with their report names, as value_models.py scores them.
TARGETS = {k: name for k, name in METRICS if k in TARGET}


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    recorded_path, eval_path, prefix, seeds = sys.argv[1:]
    with open(recorded_path) as f:
        recorded = json.load(f)
    with open(eval_path) as f:
        methods = json.load(f)["methods"]
    tolerance = 0.5 * 10 ** -recorded["digits"] + 1e-12
    for k in TARGETS:
        if abs(methods["pca"][k] - recorded["pca"][k]) > tolerance:
            sys.exit(f"{eval_path}: PCA {k} {methods['pca'][k]:.6f} is not the recorded "
                     f"{recorded['pca'][k]} (to {recorded['digits']} digits): other cells or baseline")
    rows = {int(s): v for s, v in recorded["seeds"].items()}
    for s in seeds_of(seeds):
        tag = f"{prefix}{s}"
        if tag not in methods:
            sys.exit(f"{eval_path}: no method {tag}")
        if s in rows:
            sys.exit(f"seed {s} is both recorded and in {eval_path}")
        rows[s] = {k: methods[tag][k] for k in TARGETS}
    out = {"seeds": {str(s): rows[s] for s in sorted(rows)}, "pca": {k: methods["pca"][k] for k in TARGETS},
           "metrics": {}}
    for k, name in TARGETS.items():
        diffs = [rows[s][k] - methods["pca"][k] for s in sorted(rows)]
        mean, half = interval(diffs, T975)
        _, half_b = interval(diffs, T_BONFERRONI3, float("nan"))
        out["metrics"][k] = {"name": name, "model_mean": statistics.mean(r[k] for r in rows.values()),
                             "model_sd": statistics.stdev(r[k] for r in rows.values()),
                             "delta": mean, "half_width_95": half, "half_width_bonferroni": half_b,
                             "above_pca_95": mean - half > 0, "above_pca_bonferroni": mean - half_b > 0,
                             "seeds_above": sum(d > 0 for d in diffs), "n": len(diffs)}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
