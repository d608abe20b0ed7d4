"""CorrMask against random masking, paired, judged by `corrflow eval cells` beside its PCA / HVG /
random-projection baselines (REPORT.md §9; issue "Judge every model against baselines").

Design: for each seed s the tiny annotation model (`configs/annotation.toml`) is pre-trained twice
on the same corpus with the same seed — so the same initial weights and the same data order —
once with random masking and once with CorrMask (λ 0.5); only the masks differ. Every checkpoint
embeds each probe set; ONE `eval cells` run per probe set then scores all of them and the
baselines on the same cells. Reported per metric: the paired differences d_s = CorrMask − random,
their mean and 95% t-interval, the baselines beside, and the rarest quarter of the classes
separately (the paper's Fig. 5).

usage: python experiments/baselines.py --out DIR [--sets pbmc] [--steps 1000] [--seeds 0-11]
       [--corrflow BIN]
Writes DIR/baselines.json (every eval report and the intervals) and DIR/baselines.md (tables).
Runs and embeddings already in DIR are reused, so a stopped run resumes.
"""
import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from annotation import CONFIG, corrflow, once, prepare  # noqa: E402

METRICS = ["ari", "nmi", "macro_f1", "rare_macro_f1", "knn_macro_f1", "silhouette_label"]

# Two-sided 95% Student t quantiles by degrees of freedom (scipy-free).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
        18: 2.101, 19: 2.093, 20: 2.086, 24: 2.064, 29: 2.045, 39: 2.023, 59: 2.001}


def t975(df):
    return T975.get(df) or T975[max(k for k in T975 if k <= df)]


def interval(diffs):
    """Mean and half-width of the 95% t-interval of paired differences."""
    n = len(diffs)
    mean = statistics.mean(diffs)
    if n < 2:
        return mean, float("nan")
    return mean, t975(n - 1) * statistics.stdev(diffs) / math.sqrt(n)


def seeds_of(spec):
    if "-" in spec:
        lo, hi = spec.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in spec.split(",")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sets", default="pbmc")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seeds", default="0-11")
    ap.add_argument("--corrflow", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/corrflow/target")), "release", "corrflow"))
    a = ap.parse_args()
    seeds = seeds_of(a.seeds)
    os.makedirs(a.out, exist_ok=True)
    reports, lines = {}, []
    for name in a.sets.split(","):
        d, corpus, graph, probes = prepare(a.corrflow, a.out, name)
        runs = {}
        for seed in seeds:
            for strategy in ["random", "corrmask"]:
                run = os.path.join(d, "runs", f"{strategy}-{a.steps}-{seed}")
                if not os.path.exists(os.path.join(run, "done.json")):
                    s = corrflow(a.corrflow, "train", "--config", CONFIG, "--corpus", corpus, "--graph", graph,
                                 "--strategy", strategy, "--lambda", "0.5", "--seed", str(seed), "--max-steps", str(a.steps),
                                 "--out", run, "--restart")
                    with open(os.path.join(run, "done.json"), "w") as f:
                        json.dump(s, f)
                    print(f"{name}: trained {strategy} seed {seed} ({s['total_steps']} steps)", flush=True)
                runs[(strategy, seed)] = run
        for probe, path, flags, label, exclude in probes:
            embeddings, names = [], []
            for (strategy, seed), run in runs.items():
                emb = os.path.join(run, f"{probe}.parquet")
                once(emb, lambda: corrflow(a.corrflow, "embed", "--checkpoint", run, "--input", path, *flags, "--out", emb))
                embeddings += ["--embeddings", emb]
                names.append(f"{strategy}-{seed}")
            extra = ["--exclude", ",".join(exclude)] if exclude else []
            r = corrflow(a.corrflow, "eval", "cells", "--input", path, *flags, "--label", label, *extra,
                         "--name", ",".join(names), *embeddings)
            reports[probe] = r
            lines += table(probe, r, seeds, a.steps)
            print("\n".join(lines[-(len(METRICS) + 4):]), flush=True)
    summary = {"experiment": "corrmask-vs-random, paired, eval cells", "steps": a.steps, "seeds": seeds,
               "intervals": {p: {m: dict(zip(("mean", "half_width"), interval(diffs(r, m, seeds)))) for m in METRICS}
                             for p, r in reports.items()},
               "reports": reports}
    with open(os.path.join(a.out, "baselines.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(a.out, "baselines.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(json.dumps({"experiment": summary["experiment"], "out": a.out, "probes": list(reports)}))


def diffs(r, metric, seeds):
    m = r["methods"]
    return [m[f"corrmask-{s}"][metric] - m[f"random-{s}"][metric] for s in seeds]


def table(probe, r, seeds, steps):
    m = r["methods"]
    ms = lambda xs: f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"
    out = [f"### {probe}: {r['cells']} cells, {r['classes']} classes; {len(seeds)} paired seeds, {steps} steps", "",
           "| metric | random | CorrMask | Δ (95% CI) | PCA | HVG | random projection |",
           "|---|---|---|---|---|---|---|"]
    for metric in METRICS:
        rnd = [m[f"random-{s}"][metric] for s in seeds]
        cm = [m[f"corrmask-{s}"][metric] for s in seeds]
        mean, hw = interval(diffs(r, metric, seeds))
        base = [f"{m[b][metric]:.3f}" if b in m else "—" for b in ("pca", "hvg", "random")]
        out.append(f"| {metric} | {ms(rnd)} | {ms(cm)} | {mean:+.3f} ± {hw:.3f} | " + " | ".join(base) + " |")
    out.append("")
    return out


if __name__ == "__main__":
    main()
