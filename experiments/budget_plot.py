"""Score against training budget: one model variant's `eval cells` reports at several step counts,
each training seed a point, their mean a line, PCA's score a dashed line (REPORT §10).

    python experiments/budget_plot.py OUT.svg --tag bins-2x128-k128-dec-random- \
        2247=docs/eval/session45/eval-zeisel-2247-bins-5seeds.json \
        4494=docs/eval/session46/eval-zeisel-4494-bins-5seeds.json ...

`--tag` selects the report's methods that are the variant's seeds (a prefix). Prints the table
(steps, seeds, mean per metric, PCA) that the plot shows.
"""

import argparse
import json
import statistics

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

METRICS = [("ari", "ARI"), ("nmi", "NMI"), ("macro_f1", "logistic macro-F1"), ("knn_macro_f1", "k-NN macro-F1")]


def load(points, tag):
    """steps -> (per-seed scores per metric, PCA's scores)"""
    out = {}
    for point in points:
        steps, path = point.split("=", 1)
        methods = json.load(open(path))["methods"]
        seeds = {m: v for m, v in methods.items() if m.startswith(tag)}
        if not seeds:
            raise SystemExit(f"{path}: no method starts with {tag!r}")
        out.setdefault(int(steps), ({}, methods["pca"]))[0].update(seeds)
    return dict(sorted(out.items()))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--tag", required=True)
    p.add_argument("--title", default="")
    p.add_argument("points", nargs="+", help="STEPS=EVAL.json")
    a = p.parse_args()
    data = load(a.points, a.tag)
    means = {steps: {k: statistics.mean(v[k] for v in seeds.values()) for k, _ in METRICS}
             for steps, (seeds, _) in data.items()}
    print("| steps | seeds | " + " | ".join(name for _, name in METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for steps, (seeds, _) in data.items():
        print(f"| {steps:,} | {len(seeds)} | " + " | ".join(f"{means[steps][k]:.3f}" for k, _ in METRICS) + " |")
    pca = next(iter(data.values()))[1]
    print("| PCA | | " + " | ".join(f"{pca[k]:.3f}" for k, _ in METRICS) + " |")

    xs = list(data)
    fig, axes = plt.subplots(1, len(METRICS), figsize=(4 * len(METRICS), 3.6), sharex=True)
    for ax, (key, name) in zip(axes, METRICS):
        for steps, (seeds, _) in data.items():
            ax.plot([steps] * len(seeds), [v[key] for v in seeds.values()], "o", color="tab:blue", alpha=0.4,
                    markersize=4)
        ax.plot(xs, [means[s][key] for s in xs], "-", color="tab:blue", label="model (mean of seeds)")
        ax.axhline(pca[key], linestyle="--", color="tab:red", label="PCA")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:,}" for x in xs])
        ax.set_xlabel("training steps")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(a.title)
    fig.tight_layout()
    fig.savefig(a.out)


if __name__ == "__main__":
    main()
