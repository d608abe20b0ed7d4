"""Every kind of model corrflow makes, against the PCA / HVG / random-projection baselines, on
held-out cells (REPORT.md §9; issue "Judge every model against baselines", item 2).

One `corrflow eval cells` run per test set scores every model's embeddings and the baselines on
the same cells. The test sets are the held-out 30% parts of experiments/hce.py's split (seed 0,
stratified per label), because the MLM + HCE models and the fine-tuned model saw the labels of
the other 70%; Zeisel, which no supervised model touches, is scored whole.

  pbmc68k_reduced (test part) and Spectra (test part), geneformer-v1 vocabulary:
    random-4000 / corrmask-4000  experiments/baselines.py's paired runs (Kang + pbmc3k, 16,699
                                 cells, 2 x 64, cells cut to 128 genes), seeds --seeds
    mlm-3000 / mlm+hce-3000      experiments/hce.py's PBMC arms (seed 0)
    hf-bert                      a Hugging Face BertForMaskedLM of Geneformer V1's architecture
                                 (6 x 256, 2,048 positions) at its seeded random initialisation,
                                 brought in by `corrflow import hf`: the untrained-transformer
                                 control (no pre-trained Geneformer weights are on this machine)
  CBMC (test part), its own vocabulary:
    random / corrmask            pre-trained on the CBMC training part (6,032 cells), 3,000 steps
    mlm-3000 / mlm+hce-3000      experiments/hce.py's CBMC arms (seed 0)
    finetuned                    `corrflow finetune` of the CBMC random model on the training
                                 part's labels (whole encoder), then embedded
  Zeisel (all 3,005 cells), its own vocabulary:
    random / corrmask            pre-trained on Zeisel's cells (up to 4,000 steps; the preset's
                                 10 epochs end it at 3,580)

usage: python experiments/all_models.py --out DIR --paired DIR --hce DIR [--seeds 0,1,2]
       [--corrflow BIN] [--python PY]
--paired and --hce are the --out directories of baselines.py (--steps 4000) and hce.py
(--steps 3000 --seeds 0). Writes DIR/all_models.json (every eval report) and DIR/all_models.md.
Finished steps in DIR are reused.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from annotation import CONFIG, DATA, corrflow, once, prepare  # noqa: E402
from hce import LABELLED  # noqa: E402

METRICS = [("ari", "ARI"), ("nmi", "NMI"), ("silhouette_label", "silhouette"), ("macro_f1", "logistic macro-F1"),
           ("knn_macro_f1", "k-NN macro-F1"), ("rare_macro_f1", "rarest-quarter macro-F1")]
BASELINES = [("pca", "PCA (50 of 2,000 HVGs)"), ("hvg", "HVG matrix"), ("random", "random projection")]

HF_BERT = r'''
import sys, torch, transformers
out, vocab_size = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
cfg = transformers.BertConfig(vocab_size=vocab_size, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
    intermediate_size=512, hidden_act="relu", max_position_embeddings=2048, pad_token_id=0,
    hidden_dropout_prob=0.02, attention_probs_dropout_prob=0.02, layer_norm_eps=1e-12)
transformers.BertForMaskedLM(cfg).save_pretrained(out, safe_serialization=True)
'''


def train(binary, run, corpus, graph, strategy, steps, seed, config=CONFIG):
    if not os.path.exists(os.path.join(run, "done.json")):
        g = ["--graph", graph] if graph else []
        s = corrflow(binary, "train", "--config", config, "--corpus", corpus, *g, "--strategy", strategy,
                     "--lambda", "0.5", "--seed", str(seed), "--max-steps", str(steps), "--out", run, "--restart")
        with open(os.path.join(run, "done.json"), "w") as f:
            json.dump(s, f)
        print(f"trained {run} ({s['total_steps']} steps)", flush=True)
    return run


def hf_bert(binary, python, out):
    run = os.path.join(out, "hf-bert", "run")
    if not os.path.exists(os.path.join(run, "checkpoints")):
        model = os.path.join(out, "hf-bert", "hf")
        # Geneformer V1's token dictionary: 25,424 genes + <pad> + <mask> (header line excluded).
        with open(os.path.join(os.path.dirname(os.path.dirname(DATA)), "..", "shared", "geneformer-v1",
                               "token_dictionary.tsv")) as f:
            vocab = sum(1 for _ in f) - 1
        subprocess.run([python, "-c", HF_BERT, model, str(vocab)], check=True)
        corrflow(binary, "import", "hf", "--model", model, "--vocab", "geneformer-v1", "--out", run)
    return run


def cbmc_models(binary, out, hce):
    """Within-CBMC models on the training part's corpus (hce.py's), and the fine-tuned one."""
    d = os.path.join(out, "cbmc")
    corpus = os.path.join(hce, "cbmc", "corpus")
    graph = once(os.path.join(d, "graph"), lambda: corrflow(binary, "graph", "build", "--config", CONFIG,
                                                              "--corpus", corpus, "--out", os.path.join(d, "graph")))
    models = {f"{s}-3000": train(binary, os.path.join(d, f"{s}-3000-0"), corpus, graph, s, 3000, 0) for s in ("random", "corrmask")}
    ft = os.path.join(d, "finetuned")
    once(os.path.join(ft, "results.json"), lambda: corrflow(
        binary, "finetune", "--checkpoint", models["random-3000"], "--corpus", corpus, "--label", "cell_type",
        "--exclude", "Mouse,Unknown", "--class-weights", "--lr", "1e-3", "--max-len", "128", "--epochs", "20",
        "--patience", "4", "--seed", "0", "--out", ft))
    models["finetuned"] = ft
    for arm in ("mlm", "mlm+hce"):
        models[f"{arm}-3000"] = os.path.join(hce, "cbmc", "runs", f"{arm}-0")
    return models


def evaluate(binary, models, test, flags, label, exclude, work):
    """Embeds `test` with every model and scores them with one `eval cells` run."""
    os.makedirs(work, exist_ok=True)
    embeddings, names = [], []
    for name, run in models.items():
        emb = os.path.join(work, f"{name}.parquet")
        once(emb, lambda: corrflow(binary, "embed", "--checkpoint", run, "--input", test, *flags, "--out", emb))
        embeddings += ["--embeddings", emb]
        names.append(name)
    extra = ["--exclude", ",".join(exclude)] if exclude else []
    report = os.path.join(work, "eval.json")
    if not os.path.exists(report):
        r = corrflow(binary, "eval", "cells", "--input", test, *flags, "--label", label, *extra,
                     "--name", ",".join(names), *embeddings, "--plot", os.path.join(work, "eval.svg"))
        with open(report, "w") as f:
            json.dump(r, f)
    with open(report) as f:
        return json.load(f)


def rows(report, groups):
    """Table rows: each model group (mean ± sd over its seeds), then the baselines."""
    m = report["methods"]
    out = []
    for label, members in groups:
        cells = []
        for key, _ in METRICS:
            xs = [m[n][key] for n in members if n in m and m[n].get(key) is not None]
            if not xs:
                cells.append("—")
            elif len(xs) == 1:
                cells.append(f"{xs[0]:.3f}")
            else:
                cells.append(f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}")
        out.append((label, cells))
    for key, label in BASELINES:
        out.append((label, [f"{m[key][k]:.3f}" if key in m and m[key].get(k) is not None else "—" for k, _ in METRICS]))
    return out


def table(title, report, groups):
    lines = [f"### {title}: {report['cells']} cells, {report['classes']} labels", "",
             "| model | " + " | ".join(h for _, h in METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    body = rows(report, groups)
    best = [max((float(c[i].split()[0]) for _, c in body if c[i] != "—"), default=None) for i in range(len(METRICS))]
    for label, cells in body:
        marked = [f"**{c}**" if c != "—" and float(c.split()[0]) == best[i] else c for i, c in enumerate(cells)]
        lines.append(f"| {label} | " + " | ".join(marked) + " |")
    return lines + [""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--paired", required=True)
    ap.add_argument("--hce", required=True)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--corrflow", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/corrflow/target")), "release", "corrflow"))
    ap.add_argument("--python", default=os.path.expanduser("~/.cache/corrflow/test-venv/bin/python"))
    a = ap.parse_args()
    b, seeds = a.corrflow, [int(s) for s in a.seeds.split(",")]
    os.makedirs(a.out, exist_ok=True)
    reports, lines = {}, []

    pbmc = {}
    for s in seeds:
        for strategy in ("random", "corrmask"):
            run = os.path.join(a.paired, "pbmc", "runs", f"{strategy}-{a.steps}-{s}")
            if not os.path.exists(os.path.join(run, "done.json")):
                sys.exit(f"{run} is not trained: run experiments/baselines.py --out {a.paired} --steps {a.steps} first")
            pbmc[f"{strategy}-{a.steps}-{s}"] = run
    for arm in ("mlm", "mlm+hce"):
        pbmc[f"{arm}-3000"] = os.path.join(a.hce, "pbmc", "runs", f"{arm}-0")
    pbmc["hf-bert"] = hf_bert(b, a.python, a.out)
    groups = [(f"random masking, {a.steps} steps ({len(seeds)} seeds)", [f"random-{a.steps}-{s}" for s in seeds]),
              (f"CorrMask, {a.steps} steps ({len(seeds)} seeds)", [f"corrmask-{a.steps}-{s}" for s in seeds]),
              ("MLM, 3,000 steps (§8)", ["mlm-3000"]), ("MLM + HCE, 3,000 steps (§8; saw 70% of the labels)", ["mlm+hce-3000"]),
              ("imported HF BERT, Geneformer V1 shape, untrained", ["hf-bert"])]
    for name in ("pbmc68k", "spectra"):
        _, flags, label, _ = LABELLED[name]
        test = os.path.join(a.hce, "pbmc", f"{name}_test.h5ad")
        reports[name] = evaluate(b, pbmc, test, flags, label, [], os.path.join(a.out, f"{name}-seeds-" + "-".join(map(str, seeds))))
        lines += table(f"{name} (held-out 30%)", reports[name], groups)
        print("\n".join(lines[-(len(groups) + 7):]), flush=True)

    cbmc = cbmc_models(b, a.out, a.hce)
    _, flags, label, _ = LABELLED["cbmc"]
    reports["cbmc"] = evaluate(b, cbmc, os.path.join(a.hce, "cbmc", "cbmc_test.h5ad"), flags, label,
                               ["Mouse", "Unknown"], os.path.join(a.out, "cbmc-eval"))
    lines += table("CBMC (held-out 30%; Mouse and Unknown left out)", reports["cbmc"], [
        ("random masking, 3,000 steps", ["random-3000"]), ("CorrMask, 3,000 steps", ["corrmask-3000"]),
        ("MLM, 3,000 steps (§8)", ["mlm-3000"]), ("MLM + HCE, 3,000 steps (§8; saw 70% of the labels)", ["mlm+hce-3000"]),
        ("fine-tuned on the 70%'s labels (from random masking)", ["finetuned"])])
    print("\n".join(lines[-12:]), flush=True)

    d, corpus, graph, probes = prepare(b, a.out, "zeisel")
    zeisel = {f"{s}-4000": train(b, os.path.join(d, "runs", f"{s}-4000-0"), corpus, graph, s, 4000, 0) for s in ("random", "corrmask")}
    _, path, flags, label, exclude = probes[0]
    reports["zeisel"] = evaluate(b, zeisel, path, flags, label, exclude, os.path.join(a.out, "zeisel-eval"))
    lines += table("Zeisel (all cells; pre-training saw the cells, not the labels)", reports["zeisel"],
                   [("random masking, 3,580 steps (10 epochs)", ["random-4000"]), ("CorrMask, 3,580 steps (10 epochs)", ["corrmask-4000"])])
    print("\n".join(lines[-9:]), flush=True)

    with open(os.path.join(a.out, "all_models.json"), "w") as f:
        json.dump({"experiment": "all models against baselines", "seeds": seeds, "reports": reports}, f, indent=1)
    with open(os.path.join(a.out, "all_models.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(json.dumps({"experiment": "all models", "out": a.out, "sets": list(reports)}))


if __name__ == "__main__":
    main()
