"""Table and SVG of benches/atlas_scale.sh: per stage and tool, time and peak RSS at every size,
the log-log slope of time against cells from 4x on (target ≤ 1.05 for streaming stages) and the
peak RSS at the largest size over the peak at 1x (target ≤ 1.2).

usage: atlas_plot.py STAGES.tsv OUT.md OUT.svg
"""
import csv
import math
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402


def slope(points):
    """Least-squares slope of log(seconds) on log(cells)."""
    if len(points) < 2:
        return float("nan")
    xs = [math.log(c) for c, _ in points]
    ys = [math.log(max(s, 1e-3)) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")


def main():
    tsv, md, svg = sys.argv[1:4]
    rows = list(csv.DictReader(open(tsv), delimiter="\t"))
    series = defaultdict(dict)  # (stage, tool) -> size -> (cells, seconds, rss)
    for r in rows:
        series[(r["stage"], r["tool"])][r["size"]] = (int(r["cells"]), float(r["seconds"]), float(r["peak_rss_mb"]))
    sizes = sorted({r["size"] for r in rows}, key=lambda s: (not s.isdigit(), int(s) if s.isdigit() else 0, s))
    lines = ["| stage | tool | " + " | ".join(f"{s}x s (MB)" if s.isdigit() else f"{s} s (MB)" for s in sizes)
             + " | slope 4x→ | RSS largest / 1x |", "|---|---|" + "---|" * (len(sizes) + 2)]
    for (stage, tool), by in series.items():
        cells = [by[s] if s in by else None for s in sizes]
        scaled = [(c[0], c[1]) for s, c in by.items() if s.isdigit() and int(s) >= 4]
        numeric = sorted((int(s), v) for s, v in by.items() if s.isdigit())
        ratio = numeric[-1][1][2] / numeric[0][1][2] if len(numeric) > 1 and numeric[0][0] == 1 else float("nan")
        cell = lambda c: "" if c is None else f"{c[1]:.1f} ({c[2]:.0f})"  # noqa: E731
        lines.append(f"| {stage} | {tool} | " + " | ".join(cell(c) for c in cells)
                     + f" | {slope(scaled):.2f} | {ratio:.2f} |")
    open(md, "w").write("\n".join(lines) + "\n")

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(14, 5.5))
    # tab20: one colour per series up to 20 (the default cycle repeats after 10).
    colours = plt.get_cmap("tab20").colors
    for i, ((stage, tool), by) in enumerate(series.items()):
        pts = sorted(v for s, v in by.items() if s.isdigit())
        if len(pts) < 2:
            continue
        style = "-o" if tool == "corrflow" else "--s"
        label = stage if tool == "corrflow" else f"{stage}: {tool}"
        c = colours[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20]
        ax_t.plot([p[0] for p in pts], [p[1] for p in pts], style, color=c, label=label, markersize=3)
        ax_m.plot([p[0] for p in pts], [p[2] for p in pts], style, color=c, label=label, markersize=3)
    for ax, what in ((ax_t, "seconds"), (ax_m, "peak RSS (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("cells")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    ax_m.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.suptitle("corrflow at atlas scale (benches/atlas_scale.sh)")
    fig.tight_layout()
    fig.savefig(svg)


if __name__ == "__main__":
    main()
