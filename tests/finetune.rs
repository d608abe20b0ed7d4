//! `finetune` on real labelled cells (pbmc68k_reduced's `bulk_labels`) and real gene labels
//! (dosage sensitivity): the run finishes with test scores and predictions and keeps only its
//! best checkpoint; the exported model's probabilities equal burn's and reach `embed` and the
//! server; frozen layers keep their weights; a stopped run resumes to the same weights; bad
//! requests are refused before anything is written.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::server::{post, Server};
use common::*;

/// A corpus of pbmc68k_reduced with its labels (atlas `p68`) and a model pre-trained on it.
struct Base {
    _dir: tempfile::TempDir,
    corpus: PathBuf,
    run: PathBuf,
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

fn base() -> Option<&'static Base> {
    static B: OnceLock<Option<Base>> = OnceLock::new();
    B.get_or_init(|| {
        let data = data("pbmc68k_reduced.h5ad")?;
        let dir = tempfile::tempdir().unwrap();
        let (corpus, run) = (dir.path().join("c"), dir.path().join("pre"));
        ok_json(&corrflow(&[
            "ingest",
            "--json",
            "--atlas",
            "p68",
            "--counts",
            "raw",
            "--log1p",
            "--obs-columns",
            "bulk_labels",
            "--out",
            &p(&corpus),
            &p(&data),
        ]));
        let tiny = repo().join("configs/tiny.toml");
        ok_json(&corrflow(&[
            "train",
            "--json",
            "--config",
            &p(&tiny),
            "--corpus",
            &p(&corpus),
            "--strategy",
            "random",
            "--max-steps",
            "20",
            "--out",
            &p(&run),
        ]));
        Some(Base { _dir: dir, corpus, run })
    })
    .as_ref()
}

/// `finetune` of the base model on `bulk_labels` into `out` with extra flags.
fn finetune(b: &Base, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "finetune".to_string(),
        "--json".into(),
        "--checkpoint".into(),
        p(&b.run),
        "--corpus".into(),
        p(&b.corpus),
        "--label".into(),
        "bulk_labels".into(),
        "--max-len".into(),
        "48".into(),
        "--lr".into(),
        "1e-3".into(),
        "--out".into(),
        p(out),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    corrflow(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn checkpoints(run: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(run.join("checkpoints")).unwrap().flatten().map(|e| e.path()).collect();
    v.sort();
    v
}

/// Column `name` of a Parquet file, each value formatted as text.
fn parquet_column(path: &Path, name: &str) -> Vec<String> {
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let mut out = Vec::new();
    for rb in reader {
        let rb = rb.unwrap();
        let col = rb.column_by_name(name).unwrap_or_else(|| panic!("no column {name}"));
        let f = ArrayFormatter::try_new(col.as_ref(), &FormatOptions::default()).unwrap();
        out.extend((0..col.len()).map(|i| f.value(i).to_string()));
    }
    out
}

/// `[rows, k]` probabilities of a Parquet `probabilities` column.
fn probabilities(path: &Path) -> Vec<Vec<f32>> {
    parquet_column(path, "probabilities")
        .iter()
        .map(|s| s.trim_matches(|c| c == '[' || c == ']').split(',').map(|v| v.trim().parse().unwrap()).collect())
        .collect()
}

/// pbmc68k_reduced's 700 cells embedded by a fine-tuned cell classifier, exported (`onnx`, ONNX
/// Runtime) and as its checkpoint `run` (burn), into `dir`: every row's probabilities sum to 1
/// and the backends agree within 1e-4. Returns the ONNX Runtime output and its probabilities.
fn calls_by_both_backends(dir: &Path, run: &Path, onnx: &Path) -> (PathBuf, Vec<Vec<f32>>) {
    let input = data("pbmc68k_reduced.h5ad").unwrap();
    let embed = |source: &[&str], out: &Path| {
        let (i, o) = (p(&input), p(out));
        let args =
            [&["embed", "--json", "--counts", "raw", "--log1p", "--input", &i, "--out", &o][..], source].concat();
        ok_json(&corrflow(&args))
    };
    let (by_ort, by_burn) = (dir.join("ort.parquet"), dir.join("burn.parquet"));
    embed(&["--model", &p(onnx)], &by_ort);
    embed(&["--checkpoint", &p(run)], &by_burn);
    let (a, b) = (probabilities(&by_ort), probabilities(&by_burn));
    assert_eq!(a.len(), 700);
    for (x, y) in a.iter().zip(&b) {
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-4);
        assert!(max_abs_diff(x, y) <= 1e-4, "ONNX Runtime and burn differ");
    }
    (by_ort, a)
}

#[test]
fn cell_classifier_finishes_with_test_scores_and_serves_its_calls() {
    let Some(b) = base() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("ft");
    let s = ok_json(&finetune(b, &run, &["--epochs", "3", "--patience", "3"]));
    assert_eq!(s["finished"], true);
    assert_eq!(s["classes"].as_array().unwrap().len(), 10, "{s}");
    let split = &s["split"];
    let total = ["train", "validation", "test"].iter().map(|k| split[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(total, 700);
    assert_eq!(split["left_out"], 0);
    // Every class gives ⌈10%⌉ of its cells to validation and to test (10 classes of ≥ 8 cells).
    assert!(split["validation"].as_u64().unwrap() >= 70 && split["test"].as_u64().unwrap() >= 70, "{split}");
    let test = &s["test"];
    assert_eq!(test["items"], split["test"]);
    assert!((0.0..=1.0).contains(&test["accuracy"].as_f64().unwrap()));
    assert_eq!(test["classes"].as_array().unwrap().len(), 10);
    // Three validation scores, one per epoch; the best one's checkpoint is the only one left.
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().filter(|l| l.contains("validation_macro_f1")).count(), 3);
    let kept = checkpoints(&run);
    assert_eq!(kept.len(), 1);
    assert!(kept[0].ends_with(format!("step-{:08}", s["best_step"].as_u64().unwrap())));
    assert_eq!(read_json(&run.join("results.json"))["test"], s["test"]);
    let state = read_json(&kept[0].join("state.json"));
    assert_eq!(state["model"]["classifier"]["classes"], s["classes"]);
    // The predictions: one per test cell, with its true label, the most probable class.
    let preds = run.join("predictions.parquet");
    let (labels, predicted) = (parquet_column(&preds, "label"), parquet_column(&preds, "predicted"));
    assert_eq!(labels.len() as u64, split["test"].as_u64().unwrap());
    let acc = labels.iter().zip(&predicted).filter(|(a, b)| a == b).count() as f64 / labels.len() as f64;
    assert!((acc - test["accuracy"].as_f64().unwrap()).abs() < 1e-9);
    // A finished run is not run again by accident.
    let again = finetune(b, &run, &["--epochs", "3"]);
    assert!(!again.status.success() && stderr(&again).contains("finished"), "{}", stderr(&again));

    // Exported, it gains logits and probabilities; embed reads them with ONNX Runtime and burn.
    let onnx = dir.path().join("ft.onnx");
    ok_json(&corrflow(&["export", "onnx", "--json", "--checkpoint", &p(&run), "--out", &p(&onnx)]));
    let (by_ort, a) = calls_by_both_backends(dir.path(), &run, &onnx);
    assert!(a.iter().all(|x| x.len() == 10));
    let called = parquet_column(&by_ort, "predicted_label");
    let classes: Vec<String> = serde_json::from_value(s["classes"].clone()).unwrap();
    for (row, label) in a.iter().zip(&called) {
        let best = (0..10).max_by(|&i, &j| row[i].total_cmp(&row[j])).unwrap();
        assert_eq!(&classes[best], label);
    }

    // The server returns the same calls for the same cells.
    let server = Server::start(&onnx, &[], &[]);
    server.wait_ready();
    let meta = corrflow::model_meta::open_exported(&onnx).unwrap();
    let keep = meta.meta.tokenize_layout().max_genes;
    let cells: Vec<Vec<u32>> =
        atlas_tokens(&b.corpus, "p68").into_iter().take(5).map(|(_, t)| t.into_iter().take(keep).collect()).collect();
    let (status, text) =
        post(&format!("{}/v1/embed", server.url), &serde_json::json!({"input_ids": cells}).to_string(), None);
    assert_eq!(status, 200, "{text}");
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let served: Vec<Vec<f32>> = serde_json::from_value(r["predictions"]["probabilities"].clone()).unwrap();
    assert_eq!(r["predictions"]["classes"], s["classes"]);
    for (row, want) in served.iter().zip(&a) {
        assert!(max_abs_diff(row, want) <= 1e-4);
    }
}

#[test]
fn frozen_layers_keep_their_pretrained_weights() {
    let Some(b) = base() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("ft");
    let s = ok_json(&finetune(
        b,
        &run,
        &["--epochs", "1", "--freeze-layers", "1", "--test-fraction", "0", "--exclude", "CD34+"],
    ));
    assert!(s["test"].is_null() && s["finished"] == true);
    // The 13 CD34+ cells are left out, and their class with them.
    assert_eq!(s["classes"].as_array().unwrap().len(), 9);
    assert_eq!(s["split"]["left_out"], 13);
    let (pre, ft) = (named_weights(&b.run), named_weights(&run));
    let weight = |all: &[(String, Vec<f32>)], name: &str| -> Vec<f32> {
        all.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no parameter {name}")).1.clone()
    };
    for frozen in [
        "tokens.weight",
        "positions.weight",
        "encoder.layers.0.pwff.linear_inner.weight",
        "encoder.layers.0.mha.query.weight",
    ] {
        assert_eq!(weight(&pre, frozen), weight(&ft, frozen), "{frozen} changed");
    }
    let trained = "encoder.layers.1.pwff.linear_inner.weight";
    assert_ne!(weight(&pre, trained), weight(&ft, trained), "{trained} did not change");
    let head = |all: &[(String, Vec<f32>)]| all.iter().any(|(n, _)| n.starts_with("label_head."));
    assert!(head(&ft) && !head(&pre));
    let trainable = s["trainable_parameters"].as_u64().unwrap();
    let all = trainable + s["frozen_parameters"].as_u64().unwrap();
    assert!(trainable < all / 2, "{s}");
}

#[test]
fn a_stopped_run_resumes_to_the_same_weights_and_scores() {
    let Some(b) = base() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (whole, parts) = (dir.path().join("whole"), dir.path().join("parts"));
    let flags = ["--epochs", "2", "--class-weights", "--seed", "3"];
    let a = ok_json(&finetune(b, &whole, &flags));
    let stopped = ok_json(&finetune(b, &parts, &[&flags[..], &["--stop-at-step", "20"]].concat()));
    assert_eq!(stopped["finished"], false);
    assert_eq!(stopped["steps"], 20);
    let resumed = ok_json(&finetune(b, &parts, &flags));
    assert_eq!(resumed["resumed_from"], 20);
    assert_eq!(resumed["test"], a["test"]);
    assert_eq!(resumed["best_step"], a["best_step"]);
    assert!(weights(&whole) == weights(&parts), "resumed weights differ");
    let lines = |run: &Path| std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().lines().count();
    assert_eq!(lines(&whole), lines(&parts), "a resumed run rewrites its metrics from the checkpoint");
}

#[test]
fn gene_classifier_scores_held_out_dosage_genes_by_occurrence_and_by_gene() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = bundled_corpus_and_graph(dir.path());
    let run = dir.path().join("pre");
    let tiny = repo().join("configs/tiny.toml");
    ok_json(&corrflow(&[
        "train",
        "--json",
        "--config",
        &p(&tiny),
        "--corpus",
        &p(&corpus),
        "--strategy",
        "random",
        "--max-steps",
        "10",
        "--out",
        &p(&run),
    ]));
    let labels = repo().join("datasets/tasks/dosage-sensitivity/dosage_sens_tf_labels.csv");
    let ft = dir.path().join("ft");
    let s = ok_json(&corrflow(&[
        "finetune",
        "--json",
        "--checkpoint",
        &p(&run),
        "--corpus",
        &p(&corpus),
        "--gene-labels",
        &p(&labels),
        "--classes",
        "dosage_insensitive,dosage_sensitive",
        "--epochs",
        "1",
        "--max-len",
        "64",
        "--validation-fraction",
        "0.25",
        "--test-fraction",
        "0.25",
        "--out",
        &p(&ft),
    ]));
    assert_eq!(s["task"], "gene");
    assert_eq!(s["classes"], serde_json::json!(["dosage_insensitive", "dosage_sensitive"]));
    let test = &s["test"];
    assert!(test["items"].as_u64().unwrap() > 0, "{s}");
    assert!(test["genes"]["items"].as_u64().unwrap() > 0 && test["genes"]["items"].as_u64() <= test["items"].as_u64());
    // Each prediction is an occurrence of a labelled gene, with the label the file gives it.
    let text = std::fs::read_to_string(&labels).unwrap();
    let truth: std::collections::HashMap<&str, &str> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            match (f[2], f.get(3).copied().unwrap_or("")) {
                ("Yes", _) => Some((f[0], "dosage_insensitive")),
                (_, "Yes") => Some((f[0], "dosage_sensitive")),
                _ => None,
            }
        })
        .collect();
    let preds = ft.join("predictions.parquet");
    let (genes, label) = (parquet_column(&preds, "gene_id"), parquet_column(&preds, "label"));
    assert_eq!(genes.len() as u64, test["items"].as_u64().unwrap());
    for (g, l) in genes.iter().zip(&label) {
        assert_eq!(truth.get(g.as_str()).copied(), Some(l.as_str()), "{g}");
    }
}

#[test]
fn bad_requests_are_refused_before_anything_is_written() {
    let Some(b) = base() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ft");
    for (extra, needle) in [
        (vec!["--label", "no_such_column"], "no_such_column"),
        (vec!["--label", "atlas"], "token column"),
        (vec!["--freeze-layers", "3"], "more than the model's 2 layers"),
        (vec!["--validation-fraction", "0"], "validation_fraction"),
        (vec!["--pooling", "cls"], "V2"),
        (vec!["--exclude", "Platelet"], "not a value of 'bulk_labels'"),
        // Issue 43: beyond the model's positions, and negative or infinite rates, name the flag.
        (vec!["--max-len", "100000"], "--max-len (finetune.max_len) must be at most the model's"),
        (vec!["--lr", "-1"], "--lr (finetune.lr) must be > 0 (got -1)"),
        (vec!["--lr", "inf"], "--lr (finetune.lr) must be a finite number (got inf)"),
    ] {
        let mut args = vec!["finetune", "--checkpoint"];
        let (r, c, o) = (p(&b.run), p(&b.corpus), p(&out));
        args.extend([r.as_str(), "--corpus", c.as_str(), "--out", o.as_str()]);
        if !extra.contains(&"--label") {
            args.extend(["--label", "bulk_labels"]);
        }
        args.extend(extra.iter().copied());
        let o = corrflow(&args);
        assert!(!o.status.success(), "{extra:?} was accepted");
        assert!(stderr(&o).contains(needle), "{extra:?}: {}", stderr(&o));
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
    // A fine-tuned model is not fine-tuned again.
    let ft = dir.path().join("ok");
    ok_json(&finetune(b, &ft, &["--epochs", "1"]));
    let o = corrflow(&[
        "finetune",
        "--checkpoint",
        &p(&ft),
        "--corpus",
        &p(&b.corpus),
        "--label",
        "bulk_labels",
        "--out",
        &p(&dir.path().join("again")),
    ]);
    assert!(stderr(&o).contains("already fine-tuned"), "{}", stderr(&o));
}

/// A value model (TxFM) fine-tuned on pbmc68k_reduced's `bulk_labels`: the classifier trains on
/// each cell as `embed` shows it, so the run's test predictions are the ones `embed` gives the
/// same cells from the h5ad (ONNX Runtime and burn alike); a gene task and `--max-len` are
/// refused with the reason.
#[test]
fn a_value_model_is_fine_tuned_on_the_cells_embed_shows_it() {
    let Some(input) = data("pbmc68k_reduced.h5ad") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (corpus, pre, ft) = (dir.path().join("c"), dir.path().join("pre"), dir.path().join("ft"));
    let read = ["--counts", "raw", "--log1p"];
    let ingest = [&["ingest", "--json", "--atlas", "p68", "--obs-columns", "bulk_labels"][..], &read].concat();
    ok_json(&corrflow(&[&ingest[..], &["--out", p(&corpus).as_str(), p(&input).as_str()]].concat()));
    let config =
        preset_with_lines(dir.path(), "txfm-tiny.toml", &[("inference_genes = 512", "inference_genes = 96")], "t.toml");
    let (c, r) = (p(&corpus), p(&pre));
    ok_json(&corrflow(&["train", "--json", "--config", &p(&config), "--corpus", &c, "--max-steps", "20", "--out", &r]));
    let finetune = |extra: &[&str]| {
        let f = p(&ft);
        let args = ["finetune", "--json", "--checkpoint", &r, "--corpus", &c, "--out", &f, "--lr", "5e-3"];
        corrflow(&[&args[..], extra].concat())
    };
    let refused = finetune(&["--label", "bulk_labels", "--max-len", "48"]);
    assert!(!refused.status.success() && stderr(&refused).contains("--max-len"), "{}", stderr(&refused));
    let labels = repo().join("datasets/tasks/dosage-sensitivity/dosage_sens_tf_labels.csv");
    let genes = finetune(&["--gene-labels", &p(&labels), "--classes", "dosage_insensitive,dosage_sensitive"]);
    assert!(!genes.status.success() && stderr(&genes).contains("classifies its cells"), "{}", stderr(&genes));
    assert!(!ft.join("checkpoints").exists(), "a refused run wrote checkpoints");

    // From a model pre-trained for 20 steps the CLS state barely differs between cells; three
    // epochs at this rate make the classifier's calls differ (checked below).
    let s = ok_json(&finetune(&["--label", "bulk_labels", "--pooling", "cls", "--epochs", "3", "--patience", "3"]));
    assert_eq!(s["finished"], true, "{s}");
    assert_eq!(s["classes"].as_array().unwrap().len(), 10, "{s}");
    let state = read_json(&checkpoints(&ft)[0].join("state.json"));
    assert_eq!(state["model"]["input"], "value");
    assert_eq!(state["model"]["classifier"]["pooling"], "cls");

    // Exported without --pooling it reads its head's (CLS) pooling; embed's calls on the h5ad
    // are the fine-tuning run's own test predictions, cell for cell.
    let onnx = dir.path().join("ft.onnx");
    ok_json(&corrflow(&["export", "onnx", "--json", "--checkpoint", &p(&ft), "--out", &p(&onnx)]));
    let (by_ort, a) = calls_by_both_backends(dir.path(), &ft, &onnx);
    let embedded: std::collections::HashMap<String, Vec<f32>> =
        parquet_column(&by_ort, "cell_id").into_iter().zip(a).collect();
    let preds = ft.join("predictions.parquet");
    let (cells, run_probs) = (parquet_column(&preds, "cell_id"), probabilities(&preds));
    assert_eq!(cells.len() as u64, s["split"]["test"].as_u64().unwrap());
    // The calls differ from cell to cell far more than the tolerance, so matching them says
    // that each cell had the same input in both.
    let spread = run_probs.iter().map(|x| max_abs_diff(x, &run_probs[0])).fold(0f32, f32::max);
    assert!(spread > 0.05, "the classifier's probabilities barely vary ({spread})");
    for (cell, want) in cells.iter().zip(&run_probs) {
        let got = embedded.get(cell).unwrap_or_else(|| panic!("cell {cell} not embedded"));
        assert!(max_abs_diff(got, want) <= 1e-4, "cell {cell}: embed {got:?}, fine-tuning {want:?}");
    }
}
