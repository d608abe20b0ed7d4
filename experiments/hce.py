"""Multitask pre-training with hierarchical cross-entropy over the Cell Ontology (BMFM-RNA §2.3,
§4.2; REPORT.md §8): the same small model pre-trained with MLM alone and with MLM + HCE, same
corpus, budget and seeds, driven entirely through the corrflow CLI.

Labelled cells are split per label (seeded, stratified) into a training part, whose labels are
mapped to Cell Ontology ids with the curated maps in datasets/cell_type_maps/ and stored by
`ingest --cell-type-map`, and a held-out test part that no model sees labels of. On the test
part:
  - linear probe: `eval probe` (logistic regression, 5-fold) on frozen mean-pooled embeddings
    of both models, macro-F1 over the dataset's own labels;
  - zero-shot annotation (HCE models): `annotate --truth` against the mapped labels: exact,
    ancestor-tolerant and per-depth accuracy, macro-F1 at the labels' level.

  (a) pbmc: Kang ctrl + stim and pbmc3k (unlabelled) + the training parts of pbmc68k_reduced
      (bulk_labels) and the Spectra sample (cell_type_annotations); geneformer-v1 vocabulary.
  (b) cbmc: the training part of CBMC (its own vocabulary; Mouse and Unknown stay unlabelled).

usage: python experiments/hce.py --out DIR [--sets pbmc,cbmc] [--steps 2000] [--seeds 0,1,2]
       [--warmup 200] [--weight 1.0] [--corrflow BIN] [--python PY]
Writes DIR/hce.json (every report) and DIR/hce.md (tables). Finished steps in DIR are reused.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(HERE, "datasets", "data")
MAPS = os.path.join(HERE, "datasets", "cell_type_maps")
PRESET = os.path.join(HERE, "configs", "annotation.toml")
CONFIG = PRESET  # set in main(): the preset with a shuffle buffer over the whole corpus
ONTOLOGY = os.path.join(DATA, "CL-ontology-v2026-03-26.json.zst")

# name: (file, read flags, label column, map)
LABELLED = {
    "pbmc68k": ("pbmc68k_reduced.h5ad", ["--counts", "raw", "--log1p"], "bulk_labels", "pbmc68k_reduced.tsv"),
    "spectra": ("spectra_sample.h5ad", ["--log1p"], "cell_type_annotations", "spectra_sample.tsv"),
    "cbmc": ("cbmc_citeseq.h5ad", [], "cell_type", "cbmc_citeseq.tsv"),
}
UNLABELLED = [("kang_ctrl", "kang_ctrl.h5ad", []), ("kang_stim", "kang_stim.h5ad", []),
              ("pbmc3k", "pbmc3k.h5ad", ["--gene-column", "gene_ids"])]

SPLIT = r'''
import sys, numpy as np, anndata as ad
src, col, test_fraction, seed, train_out, test_out = sys.argv[1:]
a = ad.read_h5ad(src)
rng = np.random.default_rng(int(seed))
test = np.zeros(a.n_obs, bool)
labels = a.obs[col].astype(str).values
for value in sorted(set(labels)):
    idx = np.flatnonzero(labels == value)
    rng.shuffle(idx)
    test[idx[: int(round(float(test_fraction) * len(idx)))]] = True
a[~test].copy().write_h5ad(train_out)
a[test].copy().write_h5ad(test_out)
'''


def corrflow(binary, *args):
    cmd = [binary, *args, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def once(path, make):
    if not os.path.exists(path):
        make()
    return path


def split(python, d, name):
    f, _, col, _ = LABELLED[name]
    train, test = os.path.join(d, f"{name}_train.h5ad"), os.path.join(d, f"{name}_test.h5ad")
    if not (os.path.exists(train) and os.path.exists(test)):
        subprocess.run([python, "-c", SPLIT, os.path.join(DATA, f), col, "0.3", "0", train, test], check=True,
                       stderr=subprocess.DEVNULL)
    return train, test


def prepare(binary, python, out, setting):
    """The corpus (labelled training parts with cl_id) and the held-out test sets."""
    d = os.path.join(out, setting)
    os.makedirs(d, exist_ok=True)
    corpus = os.path.join(d, "corpus")
    names = ["pbmc68k", "spectra"] if setting == "pbmc" else ["cbmc"]
    tests = []
    if setting == "pbmc":
        vocab = "geneformer-v1"
        for atlas, f, flags in UNLABELLED:
            once(os.path.join(corpus, "atlases", atlas), lambda: corrflow(
                binary, "ingest", "--config", CONFIG, "--vocab", vocab, "--atlas", atlas, "--out", corpus, *flags,
                os.path.join(DATA, f)))
    else:
        vocab = os.path.join(d, "vocab")
        once(vocab, lambda: corrflow(binary, "vocab", "build", "--config", CONFIG, "--out", vocab,
                                     os.path.join(DATA, LABELLED["cbmc"][0])))
    for name in names:
        _, flags, col, m = LABELLED[name]
        train, test = split(python, d, name)
        once(os.path.join(corpus, "atlases", name), lambda: corrflow(
            binary, "ingest", "--config", CONFIG, "--vocab", vocab, "--atlas", name, "--out", corpus, *flags,
            "--obs-columns", col, "--cell-type-map", os.path.join(MAPS, m), train))
        tests.append((name, test, flags, col, os.path.join(MAPS, m)))
    return d, corpus, tests


def mean_sd(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--sets", default="pbmc,cbmc")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight", type=float, default=1.0)
    ap.add_argument("--corrflow", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/corrflow/target")), "release", "corrflow"))
    ap.add_argument("--python", default=os.path.expanduser("~/.cache/corrflow/fetch-venv/bin/python"))
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    os.makedirs(a.out, exist_ok=True)
    # Atlases are read one shard at a time; a buffer over the whole corpus mixes the labelled
    # atlases into every stretch of training instead of leaving them to the end of the epoch.
    global CONFIG
    CONFIG = os.path.join(a.out, "hce.toml")
    with open(PRESET) as f:
        preset = f.read()
    with open(CONFIG, "w") as f:
        f.write(preset.replace("shuffle_buffer = 2000", "shuffle_buffer = 40000"))
    results = []
    for setting in a.sets.split(","):
        d, corpus, tests = prepare(a.corrflow, a.python, a.out, setting)
        for objective in ["mlm", "mlm+hce"]:
            for seed in seeds:
                run = os.path.join(d, "runs", f"{objective}-{seed}")
                if not os.path.exists(os.path.join(run, "done.json")):
                    hce = ["--hce-ontology", ONTOLOGY, "--hce-warmup", str(a.warmup), "--hce-weight", str(a.weight)] \
                        if objective == "mlm+hce" else []
                    s = corrflow(a.corrflow, "train", "--config", CONFIG, "--corpus", corpus, "--strategy", "random",
                                 "--seed", str(seed), "--max-steps", str(a.steps), "--out", run, "--restart", *hce)
                    with open(os.path.join(run, "done.json"), "w") as f:
                        json.dump(s, f)
                for name, test, flags, col, m in tests:
                    emb = os.path.join(run, f"{name}-test.parquet")
                    once(emb, lambda: corrflow(a.corrflow, "embed", "--checkpoint", run, "--input", test, *flags,
                                               "--obs-columns", col, "--out", emb))
                    exclude = ["--exclude", "Mouse,Unknown"] if name == "cbmc" else []
                    probe = corrflow(a.corrflow, "eval", "probe", "--embeddings", emb, "--label", col, "--seed", "0",
                                     "--folds", "5", *exclude)
                    row = {"set": setting, "test": name, "objective": objective, "seed": seed, "probe": probe}
                    if objective == "mlm+hce":
                        calls = os.path.join(run, f"{name}-calls.parquet")
                        row["annotate"] = corrflow(a.corrflow, "annotate", "--checkpoint", run, "--input", test, *flags,
                                                   "--out", calls, "--truth", col, "--truth-map", m,
                                                   "--ontology", ONTOLOGY)
                    results.append(row)
                    z = row.get("annotate", {}).get("evaluation", {})
                    print(f"{setting}/{name} {objective} seed {seed}: probe macro-F1 {probe['macro_f1']:.4f}"
                          + (f", zero-shot exact {z['exact_accuracy']:.3f} tolerant {z['ancestor_tolerant_accuracy']:.3f}"
                             f" macro-F1 {z['macro_f1']:.3f}" if z else ""), flush=True)
    with open(os.path.join(a.out, "hce.json"), "w") as f:
        json.dump({"experiment": "hce", "steps": a.steps, "warmup": a.warmup, "weight": a.weight, "results": results}, f, indent=1)
    lines = ["| test set | MLM probe macro-F1 | MLM + HCE probe macro-F1 | Δ | HCE zero-shot exact | ancestor-tolerant | zero-shot macro-F1 |",
             "|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["test"] for r in results):
        rows = [r for r in results if r["test"] == name]
        m1, s1 = mean_sd([r["probe"]["macro_f1"] for r in rows if r["objective"] == "mlm"])
        m2, s2 = mean_sd([r["probe"]["macro_f1"] for r in rows if r["objective"] == "mlm+hce"])
        ev = [r["annotate"]["evaluation"] for r in rows if "annotate" in r]
        ex, exs = mean_sd([e["exact_accuracy"] for e in ev])
        tol, tols = mean_sd([e["ancestor_tolerant_accuracy"] for e in ev])
        zf, zfs = mean_sd([e["macro_f1"] for e in ev])
        lines.append(f"| {name} | {m1:.3f} ± {s1:.3f} | {m2:.3f} ± {s2:.3f} | {m2 - m1:+.3f} | {ex:.3f} ± {exs:.3f} | "
                     f"{tol:.3f} ± {tols:.3f} | {zf:.3f} ± {zfs:.3f} |")
    depth = ["", "| test set | " + " | ".join(f"depth {k}" for k in range(12)) + " |", "|---|" + "---|" * 12]
    for name in dict.fromkeys(r["test"] for r in results):
        ev = [r["annotate"]["evaluation"] for r in results if r["test"] == name and "annotate" in r]
        cells = []
        for k in range(12):
            xs = [x["accuracy"] for e in ev for x in e["by_depth"] if x["depth"] == k]
            cells.append(f"{statistics.mean(xs):.3f}" if xs else "–")
        depth.append(f"| {name} | " + " | ".join(cells) + " |")
    with open(os.path.join(a.out, "hce.md"), "w") as f:
        f.write("\n".join(lines + depth) + "\n")
    print("\n".join(lines + depth))
    print(json.dumps({"experiment": "hce", "out": a.out, "rows": len(results)}))


if __name__ == "__main__":
    main()
