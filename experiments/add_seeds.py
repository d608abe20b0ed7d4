"""Adds training seeds scored in a later `eval cells` run to a recorded summary of
experiments/value_models.py (REPORT.md §10), without the earlier runs' embeddings.

A summary row keeps each metric's mean and sd over the seeds at full precision, which with the
seed count are sufficient statistics: the new mean, sd and the 95% t-interval of (model − PCA)
over all seeds follow exactly. The later run must score the same cells with the same baselines;
this is checked (PCA, HVG and random-projection scores equal to the summary's to 1e-9), since
the interval pairs every seed with the one PCA score.

usage: python experiments/add_seeds.py SUMMARY.json KEY EVAL.json TAG [TAG ...] > OUT.json
  SUMMARY.json  a fit report (e.g. docs/eval/session36/fit-pbmc68k-21000-4seeds.json)
  KEY           its entry, e.g. pbmc68k/txfm-2x128/random
  EVAL.json     the later `eval cells --json` report (value_models.py keeps it as eval/*/eval.json)
  TAG           the new seeds' method names in it
"""
import json
import math
import sys

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def merged(row, n, xs):
    """Mean and sd over n recorded seeds (row's mean and sd) and the new values xs."""
    total = row["model"] * n + sum(xs)
    squares = (n - 1) * row["sd"] ** 2 + n * row["model"] ** 2 + sum(x * x for x in xs)
    m = n + len(xs)
    mean = total / m
    return mean, math.sqrt(max(squares - m * mean * mean, 0.0) / (m - 1)), m


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    summary_path, key, eval_path, tags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    with open(summary_path) as f:
        entry = json.load(f)[key]
    with open(eval_path) as f:
        methods = json.load(f)["methods"]
    missing = [t for t in tags if t not in methods]
    if missing:
        sys.exit(f"{eval_path}: no method {missing}; it has {sorted(methods)}")
    n, rows = entry["seeds"], {}
    for metric, row in entry["rows"].items():
        for base, name in [("baseline", "pca"), ("hvg", "hvg"), ("random", "random")]:
            then, now = row.get(base), methods.get(name, {}).get(metric)
            if then is not None and (now is None or abs(then - now) > 1e-9):
                sys.exit(f"{metric}: {name} scored {now} in {eval_path} but {then} in {summary_path}: other cells or baselines")
        xs = [methods[t][metric] for t in tags]
        mean, sd, m = merged(row, n, xs)
        diff, half = mean - row["baseline"], T975[m - 1] * sd / math.sqrt(m)
        rows[metric] = {**row, "model": mean, "sd": sd, "diff": diff, "half_width": half, "beats": diff - half > 0,
                        "added": dict(zip(tags, xs))}
    json.dump({key: {"rows": rows, "seeds": n + len(tags), "from": summary_path}}, sys.stdout, indent=1)
    print()
    for metric, r in rows.items():
        print(f"{metric}: {r['model']:.3f} ± {r['sd']:.3f} vs PCA {r['baseline']:.3f}: "
              f"{r['diff']:+.3f} ± {r['half_width']:.3f} ({r['diff'] - r['half_width']:+.3f} to "
              f"{r['diff'] + r['half_width']:+.3f}){'  beats' if r['beats'] else ''}", file=sys.stderr)


if __name__ == "__main__":
    main()
