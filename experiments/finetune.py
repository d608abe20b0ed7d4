"""Fine-tuning the §4 PBMC models for cell-type classification (REPORT.md §7), driven through
the corrflow CLI.

Base models: §4's 4,000-step PBMC runs (random masking and CorrMask, 3 seeds each; 2 × 64,
128 genes per cell) and, as the no-pre-training control, the same architecture after one step.
Labelled sets: pbmc68k_reduced (`bulk_labels`, 700 cells, 10 classes) and the Spectra sample
(`cell_type_annotations`, 1,000 cells, 14 classes), each ingested with the geneformer-v1
vocabulary and its labels. Each base model is fine-tuned twice on every set with the same
seeded stratified 80/10/10 split: the whole encoder ("full"), and with the embeddings and both
layers frozen ("frozen": the head on fixed embeddings, a probe). Balanced class weights, up to
30 epochs, early stopping after 6 epochs without a better validation macro-F1.

usage: python experiments/finetune.py --runs DIR_OF_SECTION4_RUNS --out DIR [--corrflow BIN]
Writes DIR/finetune.json (every summary) and DIR/finetune.md (the table). Finished runs in
DIR are reused.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(HERE, "datasets", "data")
SETS = [("pbmc68k_reduced", "pbmc68k_reduced.h5ad", ["--counts", "raw", "--log1p"], "bulk_labels"),
        ("spectra", "spectra_sample.h5ad", ["--log1p"], "cell_type_annotations")]


def corrflow(binary, *args):
    cmd = [binary, *args, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True, help="§4's pbmc runs directory (random-4000-S, corrmask-4000-S)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--corrflow", default=os.path.join(HERE, "target", "release", "corrflow"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    seeds = [int(s) for s in a.seeds.split(",")]
    corpus = os.path.join(a.out, "labelled")
    for name, f, flags, label in SETS:
        if not os.path.isdir(os.path.join(corpus, "atlases", name)):
            corrflow(a.corrflow, "ingest", "--atlas", name, *flags, "--obs-columns", label, "--out", corpus,
                     os.path.join(DATA, f))
    bases = {}
    for s in seeds:
        bases[("random", s)] = os.path.join(a.runs, f"random-4000-{s}")
        bases[("corrmask", s)] = os.path.join(a.runs, f"corrmask-4000-{s}")
        scratch = os.path.join(a.out, f"scratch-{s}")
        if not os.path.isdir(os.path.join(scratch, "checkpoints")):
            state = json.load(open(os.path.join(bases[("random", s)], "checkpoints",
                                                sorted(os.listdir(os.path.join(bases[("random", s)], "checkpoints")))[-1],
                                                "state.json")))
            cfg = os.path.join(a.out, "scratch.toml")
            with open(cfg, "w") as fh:
                m, t = state["model"], state["train"]
                fh.write("[model]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in m.items()))
                fh.write(f"[train]\nmax_len = {t['max_len']}\nbatch_size = 8\n")
            corrflow(a.corrflow, "train", "--config", cfg, "--corpus", corpus, "--strategy", "random",
                     "--max-steps", "1", "--seed", str(s), "--out", scratch)
        bases[("scratch", s)] = scratch
    results = []
    for (kind, s), base in sorted(bases.items()):
        for name, _, _, label in SETS:
            for mode, extra in [("full", []), ("frozen", ["--freeze-layers", "2"])]:
                out = os.path.join(a.out, "ft", f"{kind}-{s}-{name}-{mode}")
                done = os.path.join(out, "results.json")
                if not os.path.exists(done):
                    corrflow(a.corrflow, "finetune", "--checkpoint", base, "--corpus", corpus, "--atlases", name,
                             "--label", label, "--out", out, "--epochs", "30", "--patience", "6", "--lr", "1e-3",
                             "--class-weights", "--max-len", "128", "--seed", "0", "--restart", *extra)
                r = json.load(open(done))
                results.append({"base": kind, "seed": s, "set": name, "mode": mode, "summary": r})
                t = r["test"]
                print(f"{kind:8} {s} {name:16} {mode:6} test macro-F1 {t['macro_f1']:.3f} accuracy {t['accuracy']:.3f} "
                      f"(best epoch {r['best_step'] // (r['steps'] // max(r['epochs'], 1))}, {r['seconds']:.0f} s)",
                      flush=True)
    json.dump(results, open(os.path.join(a.out, "finetune.json"), "w"), indent=1)
    lines = ["| set | base model | mode | test macro-F1 | test accuracy | test macro AUROC |", "|---|---|---|---|---|---|"]
    for name, _, _, _ in SETS:
        for kind in ["scratch", "random", "corrmask"]:
            for mode in ["frozen", "full"]:
                rs = [r["summary"]["test"] for r in results if (r["base"], r["set"], r["mode"]) == (kind, name, mode)]
                if not rs:
                    continue
                def ms(key):
                    v = [x[key] for x in rs if x[key] is not None]
                    return f"{statistics.mean(v):.3f} ± {statistics.stdev(v) if len(v) > 1 else 0:.3f}"
                lines.append(f"| {name} | {kind} | {mode} | {ms('macro_f1')} | {ms('accuracy')} | {ms('macro_auroc')} |")
    open(os.path.join(a.out, "finetune.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
