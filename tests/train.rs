//! `train`, `embed`, `eval probe` on real cells with configs/tiny.toml: a run stopped and resumed
//! ends with the same weights and metrics as an uninterrupted one; the loss falls; embeddings
//! stream to Parquet and into an h5ad that anndata reads; the probe runs end to end; bad inputs
//! (sizes, another run's checkpoints, truncated checkpoints) fail clearly and overwrite nothing.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tiny() -> PathBuf {
    repo().join("configs/tiny.toml")
}

fn train(corpus: &Path, graph: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let cfg = tiny();
    let mut args =
        vec!["train", "--json", "--config", s(&cfg), "--corpus", s(corpus), "--graph", s(graph), "--out", s(out)];
    args.extend_from_slice(extra);
    corrflow_env(&args, env)
}

fn metrics(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("tokens_per_s");
            v
        })
        .collect()
}

#[test]
fn a_stopped_and_resumed_run_ends_with_the_same_weights_and_the_loss_falls() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let full = ok_json(&train(&corpus, &graph, &a, &["--max-steps", "30"], &[]));
    assert_eq!(full["steps"], 30);
    // Stopped after 13 steps (checkpoint written there), then resumed to 30.
    let o = train(&corpus, &graph, &b, &["--max-steps", "30", "--stop-at-step", "13"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let resumed = ok_json(&train(&corpus, &graph, &b, &["--max-steps", "30"], &[]));
    assert_eq!(resumed["resumed_from"], 13);
    let (wa, wb) = (weights(&a), weights(&b));
    assert_eq!(wa.len(), wb.len());
    assert!(wa == wb, "resumed weights differ from the uninterrupted run's");
    assert_eq!(metrics(&a), metrics(&b), "metrics differ");
    // Each line has the contract's fields; the loss falls.
    let m = metrics(&a);
    for line in &m {
        for k in ["step", "loss", "lr"] {
            assert!(line.get(k).is_some(), "metrics line without {k}: {line}");
        }
    }
    let eval: Vec<&serde_json::Value> = m.iter().filter(|l| l.get("eval_loss").is_some()).collect();
    assert!(!eval.is_empty() && eval[0].get("eval_accuracy").is_some());
    let first = m[..5].iter().map(|l| l["loss"].as_f64().unwrap()).sum::<f64>() / 5.0;
    let last = m[m.len() - 5..].iter().map(|l| l["loss"].as_f64().unwrap()).sum::<f64>() / 5.0;
    assert!(last < first - 0.3, "loss did not fall: {first} -> {last}");
    assert!(full["parameters"].as_u64().unwrap() > 1_000_000);
}

#[test]
fn profiled_steps_log_each_phase_and_train_the_same_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let (plain, profiled) = (tmp.path().join("plain"), tmp.path().join("profiled"));
    ok_json(&train(&corpus, &graph, &plain, &["--max-steps", "6"], &[]));
    ok_json(&train(&corpus, &graph, &profiled, &["--max-steps", "6", "--profile-steps"], &[]));
    assert!(weights(&plain) == weights(&profiled), "profiling changed the trained weights");
    let (m, p) = (metrics(&plain), metrics(&profiled));
    assert_eq!(m.len(), p.len());
    for (a, b) in m.iter().zip(&p) {
        assert!(a.get("phase_ms").is_none(), "unprofiled run logged phases: {a}");
        let phases = b["phase_ms"].as_object().unwrap_or_else(|| panic!("no phase_ms in {b}"));
        let names: Vec<&str> = phases.keys().map(String::as_str).collect();
        // Clipping is part of the optimizer step (one fused pass with the AdamW update).
        assert_eq!(names.len(), 4, "{b}");
        for name in ["prepare", "forward", "backward", "optimizer"] {
            let ms = phases.get(name).and_then(|v| v.as_f64()).unwrap_or_else(|| panic!("no {name} in {b}"));
            assert!(ms >= 0.0, "{name}: {ms}");
        }
        let mut b = b.clone();
        b.as_object_mut().unwrap().remove("phase_ms");
        assert_eq!(*a, b, "profiling changed a metrics line");
    }
}

#[test]
fn the_summary_names_the_cpu_products_and_either_trains_the_same_losses() {
    // CORRFLOW_GEMM forces the product a machine would not choose itself, so both paths train
    // end to end on any CI machine. They round differently: losses agree closely, not in bits.
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let mut losses = Vec::new();
    for products in ["gemm", "matrixmultiply"] {
        let out = tmp.path().join(products);
        let summary = ok_json(&train(&corpus, &graph, &out, &["--max-steps", "4"], &[("CORRFLOW_GEMM", products)]));
        assert_eq!(summary["cpu_products"], products, "{summary}");
        losses.push(metrics(&out).iter().filter_map(|l| l["loss"].as_f64()).collect::<Vec<_>>());
    }
    assert_eq!(losses[0].len(), 4);
    for (g, m) in losses[0].iter().zip(&losses[1]) {
        assert!((g - m).abs() <= 1e-4 * g.abs(), "losses differ between the products: {g} vs {m}");
    }
}

#[test]
fn embeddings_reach_parquet_and_an_h5ad_that_anndata_reads_and_the_probe_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let run = tmp.path().join("run");
    ok_json(&train(&corpus, &graph, &run, &["--max-steps", "10"], &[]));
    let (emb, h5) = (tmp.path().join("emb.parquet"), tmp.path().join("with_emb.h5ad"));
    let e = ok_json(&corrflow(&[
        "embed",
        "--json",
        "--checkpoint",
        s(&run),
        "--input",
        s(&bundled()),
        "--gene-column",
        "gene_ids",
        "--out",
        s(&emb),
        "--h5ad-out",
        s(&h5),
        "--layer",
        "-1",
    ]));
    assert_eq!((e["cells"].as_u64(), e["dim"].as_u64()), (Some(1000), Some(64)));
    if let Some(py) = python() {
        let code = format!(
            "import anndata, numpy as np, pyarrow.parquet as pq\n\
             a = anndata.read_h5ad('{}')\n\
             e = a.obsm['X_corrflow']\n\
             t = pq.read_table('{}')\n\
             x = np.stack(t['embedding'].to_numpy(zero_copy_only=False))\n\
             assert e.shape == (1000, 64), e.shape\n\
             assert list(t['cell_id'].to_pylist()) == list(a.obs_names)\n\
             assert np.array_equal(x, e)\n\
             print('ok')",
            s(&h5),
            s(&emb)
        );
        let o = std::process::Command::new(py).args(["-c", &code]).output().unwrap();
        assert!(o.status.success(), "anndata check failed: {}", stderr(&o));
    }
    // A probe on labelled real cells (Spectra's sample, cell_type_annotations).
    let Some(spectra) = data("spectra_sample.h5ad") else { return };
    let emb2 = tmp.path().join("spectra.parquet");
    ok_json(&corrflow(&[
        "embed",
        "--json",
        "--checkpoint",
        s(&run),
        "--input",
        s(&spectra),
        "--out",
        s(&emb2),
        "--obs-columns",
        "cell_type_annotations",
        "--allow-normalized",
    ]));
    let p =
        ok_json(&corrflow(&["eval", "probe", "--json", "--embeddings", s(&emb2), "--label", "cell_type_annotations"]));
    assert!(p["classes"].as_u64().unwrap() >= 2);
    let (acc, f1) = (p["accuracy"].as_f64().unwrap(), p["macro_f1"].as_f64().unwrap());
    assert!((0.0..=1.0).contains(&acc) && (0.0..=1.0).contains(&f1));
    assert!(acc > 0.3, "probe accuracy {acc} is no better than chance");
    assert!(p["per_class"].as_array().unwrap().len() == p["classes"].as_u64().unwrap() as usize);
    assert!(!p["rare_classes"].as_array().unwrap().is_empty());
    // 5-fold by default: every cell is tested once; the k-NN vote and the AUROC are reported.
    assert_eq!(p["folds"], 5);
    assert_eq!(p["test_cells"], p["cells"]);
    let knn = p["knn_accuracy"].as_f64().unwrap();
    assert!(knn > 0.3 && knn <= 1.0, "k-NN accuracy {knn}");
    let auroc = p["macro_auroc"].as_f64().unwrap();
    assert!(auroc > 0.5 && auroc <= 1.0, "macro AUROC {auroc}");
    assert!(p["macro_f1_sd"].as_f64().unwrap() >= 0.0);
    // One seeded split holds out a fifth of each class.
    let one = ok_json(&corrflow(&[
        "eval",
        "probe",
        "--json",
        "--embeddings",
        s(&emb2),
        "--label",
        "cell_type_annotations",
        "--folds",
        "1",
    ]));
    assert_eq!(one["folds"], 1);
    let share = one["test_cells"].as_f64().unwrap() / one["cells"].as_f64().unwrap();
    assert!((0.18..0.3).contains(&share), "held-out share {share}");
}

#[test]
fn bad_sizes_other_runs_and_truncated_checkpoints_fail_clearly_and_overwrite_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    // Impossible sizes in the config.
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, std::fs::read_to_string(tiny()).unwrap().replace("hidden = 64", "hidden = 66")).unwrap();
    let o = corrflow(&[
        "train",
        "--config",
        s(&bad),
        "--corpus",
        s(&corpus),
        "--graph",
        s(&graph),
        "--out",
        s(&tmp.path().join("x")),
    ]);
    assert!(!o.status.success() && stderr(&o).contains("multiple of model.heads"), "{}", stderr(&o));
    // A run directory of another configuration is not continued.
    let run = tmp.path().join("run");
    ok_json(&train(&corpus, &graph, &run, &["--max-steps", "4"], &[]));
    let before = std::fs::read(run.join("checkpoints/step-00000004/model.bin")).unwrap();
    let o = train(&corpus, &graph, &run, &["--max-steps", "4", "--strategy", "random"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("different configuration"), "{}", stderr(&o));
    assert_eq!(std::fs::read(run.join("checkpoints/step-00000004/model.bin")).unwrap(), before);
    // A truncated checkpoint is named, not loaded.
    let model = run.join("checkpoints/step-00000004/model.bin");
    std::fs::write(&model, &before[..before.len() / 2]).unwrap();
    let o = corrflow(&[
        "embed",
        "--checkpoint",
        s(&run),
        "--input",
        s(&bundled()),
        "--gene-column",
        "gene_ids",
        "--out",
        s(&tmp.path().join("e.parquet")),
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("model.bin") && stderr(&o).contains("checksum"),
        "{}",
        stderr(&o)
    );
    assert!(!tmp.path().join("e.parquet").exists());
    let o = train(&corpus, &graph, &run, &["--max-steps", "8"], &[]);
    assert!(!o.status.success() && stderr(&o).contains("checksum"), "{}", stderr(&o));
    // A corpus of another vocabulary than the checkpoint's.
    std::fs::write(&model, &before).unwrap();
    let other = tmp.path().join("other_vocab");
    let o = corrflow(&["vocab", "build", "--out", s(&other), "--gene-column", "gene_ids", s(&bundled())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c2 = tmp.path().join("c2");
    ok_json(&corrflow(&[
        "ingest",
        "--json",
        "--vocab",
        s(&other),
        "--atlas",
        "pbmc",
        "--gene-column",
        "gene_ids",
        "--out",
        s(&c2),
        s(&bundled()),
    ]));
    let o = corrflow(&[
        "train",
        "--config",
        s(&tiny()),
        "--corpus",
        s(&c2),
        "--strategy",
        "random",
        "--max-steps",
        "4",
        "--out",
        s(&run),
    ]);
    assert!(!o.status.success() && stderr(&o).contains("vocabulary"), "{}", stderr(&o));
}
