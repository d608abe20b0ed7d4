"""Cell-type annotation with random masking vs CorrMask (REPORT.md §4; the paper's Tables 2/6,
Figs. 4–5), driven entirely through the corrflow CLI with the `configs/annotation.toml` preset.

For each setting, the same small model is pre-trained with random masking and with CorrMask
(λ 0.5) on the same corpus, budget and seeds; frozen mean-pooled embeddings are probed with
`eval probe` (logistic regression, seeded stratified 80/20 split). Reported: macro-F1 per
strategy (mean ± sd over seeds) and ΔF1 (CorrMask − random) over the k rarest classes for every
k (Fig. 5), at each pre-training budget (Fig. 4's scaling axis, at this machine's scale).

  (a) pbmc: pre-train on Kang ctrl+stim and pbmc3k (geneformer-v1 vocabulary); probe on
      pbmc68k_reduced (bulk_labels) and the Spectra sample (cell_type_annotations).
  (b) cbmc, zeisel: a vocabulary built from the dataset itself (column indices as gene ids),
      pre-train on its cells, probe on its labels (CBMC without "Mouse" and "Unknown").

usage: python experiments/annotation.py --out DIR [--sets pbmc,cbmc,zeisel] [--steps 150,500]
       [--seeds 0,1] [--corrflow BIN]
Writes DIR/annotation.json (every probe report), DIR/annotation.md (tables) and
DIR/annotation-delta-f1.svg. Runs already finished in DIR are reused.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(HERE, "datasets", "data")
CONFIG = os.path.join(HERE, "configs", "annotation.toml")


def corrflow(binary, *args):
    cmd = [binary, *args, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def once(path, make):
    """Runs `make` unless `path` exists (resumable driver)."""
    if not os.path.exists(path):
        make()
    return path


def prepare(binary, out, name):
    """Corpus, graph and the (input, read flags, label, exclude) probes of one setting."""
    d = os.path.join(out, name)
    corpus, graph = os.path.join(d, "corpus"), os.path.join(d, "graph")
    if name == "pbmc":
        vocab = "geneformer-v1"
        inputs = [("kang_ctrl", "kang_ctrl.h5ad", []), ("kang_stim", "kang_stim.h5ad", []),
                  ("pbmc3k", "pbmc3k.h5ad", ["--gene-column", "gene_ids"])]
        probes = [("pbmc68k_reduced", os.path.join(DATA, "pbmc68k_reduced.h5ad"), ["--counts", "raw", "--log1p"], "bulk_labels", []),
                  ("spectra", os.path.join(DATA, "spectra_sample.h5ad"), ["--log1p"], "cell_type_annotations", [])]
    else:
        f = {"cbmc": "cbmc_citeseq.h5ad", "zeisel": "zeisel.h5ad"}[name]
        flags = ["--log1p"] if name == "zeisel" else []
        vocab = os.path.join(d, "vocab")
        once(vocab, lambda: corrflow(binary, "vocab", "build", "--config", CONFIG, "--out", vocab, *flags, os.path.join(DATA, f)))
        inputs = [(name, f, flags)]
        exclude = ["Mouse", "Unknown"] if name == "cbmc" else []
        probes = [(name, os.path.join(DATA, f), flags, "cell_type", exclude)]
    if not os.path.exists(os.path.join(corpus, "corpus.json")) or any(
        not os.path.isdir(os.path.join(corpus, "atlases", atlas)) for atlas, _, _ in inputs
    ):
        for atlas, f, flags in inputs:
            if not os.path.isdir(os.path.join(corpus, "atlases", atlas)):
                corrflow(binary, "ingest", "--config", CONFIG, "--vocab", vocab, "--atlas", atlas, "--out", corpus, *flags,
                         os.path.join(DATA, f))
    once(graph, lambda: corrflow(binary, "graph", "build", "--config", CONFIG, "--corpus", corpus, "--out", graph))
    return d, corpus, graph, probes


def delta_curve(reports_c, reports_r):
    """ΔF1(k) = macro-F1 of the k rarest classes, CorrMask − random, averaged over seeds; classes
    as `eval probe` ranks them for its rare_macro_f1 (those with test cells, by size)."""
    def tested(report):
        return sorted((c for c in report["per_class"] if c["test_cells"] > 0), key=lambda c: c["cells"])

    def rare_f1(report, k):
        return statistics.mean(c["f1"] for c in tested(report)[:k])
    n = min(len(tested(r)) for r in reports_c + reports_r)
    return [statistics.mean(rare_f1(c, k) - rare_f1(r, k) for c, r in zip(reports_c, reports_r)) for k in range(1, n + 1)]


def svg_curves(curves, path):
    """ΔF1 against the number of rarest classes, one line per (probe, steps)."""
    w, h, m = 640, 360, 50
    ys = [y for _, c in curves for y in c] + [0.0]
    lo, hi = min(ys), max(ys)
    hi, lo = hi + 0.01, lo - 0.01
    kmax = max(len(c) for _, c in curves)
    X = lambda k: m + (w - 2 * m) * (k - 1) / max(kmax - 1, 1)
    Y = lambda v: h - m - (h - 2 * m) * (v - lo) / (hi - lo)
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{m}" y1="{Y(0):.1f}" x2="{w - m}" y2="{Y(0):.1f}" stroke="#999" stroke-dasharray="4"/>',
             f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
             f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">k rarest classes</text>',
             f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">ΔF1 (CorrMask − random)</text>',
             f'<text x="{m - 4}" y="{Y(hi) + 4:.1f}" text-anchor="end">{hi:+.2f}</text>',
             f'<text x="{m - 4}" y="{Y(lo) + 4:.1f}" text-anchor="end">{lo:+.2f}</text>',
             f'<text x="{m - 4}" y="{Y(0) + 4:.1f}" text-anchor="end">0</text>']
    for i, (label, c) in enumerate(curves):
        col = colours[i % len(colours)]
        pts = " ".join(f"{X(k + 1):.1f},{Y(v):.1f}" for k, v in enumerate(c))
        parts.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{pts}"/>')
        parts.append(f'<text x="{w - m + 4 - 150}" y="{m + 14 * i}" fill="{col}">{label}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sets", default="pbmc,cbmc,zeisel")
    ap.add_argument("--steps", default="150,500")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--corrflow", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/corrflow/target")), "release", "corrflow"))
    a = ap.parse_args()
    steps = [int(s) for s in a.steps.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    os.makedirs(a.out, exist_ok=True)
    results = []
    for name in a.sets.split(","):
        d, corpus, graph, probes = prepare(a.corrflow, a.out, name)
        for n in steps:
            for strategy in ["random", "corrmask"]:
                for seed in seeds:
                    run = os.path.join(d, "runs", f"{strategy}-{n}-{seed}")
                    if not os.path.exists(os.path.join(run, "done.json")):
                        s = corrflow(a.corrflow, "train", "--config", CONFIG, "--corpus", corpus, "--graph", graph,
                                     "--strategy", strategy, "--lambda", "0.5", "--seed", str(seed), "--max-steps", str(n),
                                     "--out", run, "--restart")
                        with open(os.path.join(run, "done.json"), "w") as f:
                            json.dump(s, f)
                    for probe, path, flags, label, exclude in probes:
                        emb = os.path.join(run, f"{probe}.parquet")
                        once(emb, lambda: corrflow(a.corrflow, "embed", "--checkpoint", run, "--input", path, *flags,
                                                   "--obs-columns", label, "--out", emb))
                        extra = ["--exclude", ",".join(exclude)] if exclude else []
                        r = corrflow(a.corrflow, "eval", "probe", "--embeddings", emb, "--label", label, "--seed", "0", "--folds", "1", *extra)
                        results.append({"set": name, "probe": probe, "steps": n, "cells_seen": n * 8,
                                        "strategy": strategy, "seed": seed, "report": r})
                        print(f"{name}/{probe} steps {n} {strategy} seed {seed}: macro-F1 {r['macro_f1']:.4f}", flush=True)
    with open(os.path.join(a.out, "annotation.json"), "w") as f:
        json.dump({"experiment": "annotation", "results": results}, f, indent=1)
    lines = ["| probe | pre-training steps (cells seen) | random macro-F1 | CorrMask macro-F1 | Δ | ΔF1 rarest 25% of classes |",
             "|---|---|---|---|---|---|"]
    curves = []
    for probe in dict.fromkeys(r["probe"] for r in results):
        for n in steps:
            rows = [r for r in results if r["probe"] == probe and r["steps"] == n]
            rr = [r["report"] for r in rows if r["strategy"] == "random"]
            rc = [r["report"] for r in rows if r["strategy"] == "corrmask"]
            ms = lambda xs: (statistics.mean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)
            (mr, sr), (mc, sc) = ms([r["macro_f1"] for r in rr]), ms([r["macro_f1"] for r in rc])
            curve = delta_curve(rc, rr)
            # eval probe's own rare-class macro-F1 (the rarest 25% of the tested classes).
            rare = statistics.mean(r["rare_macro_f1"] for r in rc) - statistics.mean(r["rare_macro_f1"] for r in rr)
            k = len(rr[0]["rare_classes"])
            lines.append(f"| {probe} | {n} ({n * 8:,}) | {mr:.3f} ± {sr:.3f} | {mc:.3f} ± {sc:.3f} | {mc - mr:+.3f} | {rare:+.3f} (k = {k}) |")
            curves.append((f"{probe}, {n} steps", curve))
    with open(os.path.join(a.out, "annotation.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    svg_curves(curves, os.path.join(a.out, "annotation-delta-f1.svg"))
    print("\n".join(lines))
    print(json.dumps({"experiment": "annotation", "out": a.out, "runs": len(results)}))


if __name__ == "__main__":
    main()
