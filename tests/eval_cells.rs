//! `corrflow eval cells` end to end: a model (ONNX and checkpoint) and embeddings files judged
//! beside the baselines on real labelled cells; flag values and paths refused with messages that
//! name them. The metrics' agreement with scib-metrics / scanpy is python/tests/test_eval_cells.py.

use crate::common;

use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn pbmc68k() -> Option<std::path::PathBuf> {
    let p = data("pbmc68k_reduced.h5ad");
    if p.is_none() {
        missing("datasets/data/pbmc68k_reduced.h5ad");
    }
    p
}

const READ: [&str; 3] = ["--counts", "raw", "--log1p"];

#[test]
fn a_model_is_judged_beside_every_baseline_on_the_same_cells() {
    let Some(cells) = pbmc68k() else { return };
    let m = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let plot = tmp.path().join("eval.svg");
    let mut args = vec!["eval", "cells", "--json", "--model", s(&m.model), "--input", s(&cells)];
    args.extend(READ);
    args.extend(["--label", "bulk_labels", "--batch", "phase", "--plot", s(&plot)]);
    let o = corrflow(&args);
    let r = ok_json(&o);
    let printed = stdout(&o);
    assert!(printed.contains("* best of the row") && printed.contains("silhouette_label"), "{printed}");
    let methods = r["methods"].as_object().unwrap();
    let names: Vec<&str> = methods.keys().map(String::as_str).collect();
    assert_eq!(names, vec!["embeddings", "hvg", "pca", "random"]);
    assert_eq!(r["order"][0], "embeddings");
    for (name, m) in methods {
        for key in ["ari", "nmi", "silhouette_label", "accuracy", "macro_f1", "knn_accuracy", "ilisi", "clisi"] {
            let v = m[key].as_f64().unwrap_or_else(|| panic!("{name}.{key}"));
            assert!((0.0..=1.0).contains(&v), "{name}.{key} = {v}");
        }
        assert_eq!(m["leiden"].as_array().unwrap().len(), 10, "scib-metrics' ten resolutions");
    }
    assert_eq!(methods["pca"]["dim"], 50);
    assert_eq!(methods["embeddings"]["dim"], 64);
    assert_eq!(methods["random"]["dim"], 64, "the random projection has the model's width");
    // Every method is scored on the same cells: those the model embeds.
    assert_eq!(r["cells"].as_u64().unwrap() + r["dropped_cells"].as_u64().unwrap(), 700);
    assert!(r["best"]["ari"].is_string());
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("pca (PC1, PC2)"));

    // The checkpoint gives (nearly) the same embeddings as its export; with the ONNX file's
    // embeddings as a second method, the two score alike and the baselines are unchanged.
    let emb = tmp.path().join("onnx.parquet");
    let mut e = vec!["embed", "--json", "--model", s(&m.model), "--input", s(&cells), "--out", s(&emb)];
    e.extend(READ);
    ok_json(&corrflow(&e));
    let mut args = vec!["eval", "cells", "--json", "--embeddings", s(&emb), "--checkpoint", s(&m.run)];
    args.extend(["--name", "onnx,burn", "--input", s(&cells)]);
    args.extend(READ);
    args.extend(["--label", "bulk_labels"]);
    let two = ok_json(&corrflow(&args));
    let (a, b) = (&two["methods"]["onnx"], &two["methods"]["burn"]);
    assert!((a["silhouette_label"].as_f64().unwrap() - b["silhouette_label"].as_f64().unwrap()).abs() < 1e-3);
    assert_eq!(two["methods"]["pca"]["silhouette_label"], r["methods"]["pca"]["silhouette_label"]);
}

#[test]
fn flags_and_paths_are_checked_before_any_work() {
    let Some(cells) = pbmc68k() else { return };
    let m = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--neighbours", "1"], "--neighbours must be in 2..=1000"),
        (vec!["--resolutions", "0.5,-1"], "--resolutions"),
        (vec!["--folds", "1"], "--folds must be in 2..=100"),
        (vec!["--alpha", "nan"], "--alpha"),
        (vec!["--n-comps", "0"], "--n-comps"),
        (vec!["--name", "a,b"], "--name has 2 names for 1 methods"),
        (vec!["--name", "pca"], "--name 'pca' is taken"),
        (vec!["--plot", s(&cells)], "--plot"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["eval", "cells", "--model", s(&m.model), "--input", s(&cells), "--label", "bulk_labels"];
        args.extend(READ);
        args.extend(extra.iter().copied());
        let o = corrflow(&args);
        assert_eq!(o.status.code(), Some(1), "{extra:?} must be refused: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{extra:?}: {}", stderr(&o));
    }
    // The input is still an h5ad after --plot named it.
    assert!(std::fs::read(&cells).unwrap().starts_with(b"\x89HDF"));
    // A label column the file lacks, and embeddings of other cells.
    let mut args = vec!["eval", "cells", "--model", s(&m.model), "--input", s(&cells), "--label", "nope"];
    args.extend(READ);
    let o = corrflow(&args);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nope"), "{}", stderr(&o));
    let other = tmp.path().join("bundled.parquet");
    let bundled = bundled();
    let e = [
        "embed",
        "--json",
        "--model",
        s(&m.model),
        "--input",
        s(&bundled),
        "--gene-column",
        "gene_ids",
        "--out",
        s(&other),
    ];
    ok_json(&corrflow(&e));
    let mut args = vec!["eval", "cells", "--embeddings", s(&other), "--input", s(&cells), "--label", "bulk_labels"];
    args.extend(READ);
    let o = corrflow(&args);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("none of its cell_id values"), "{}", stderr(&o));
}

#[test]
fn scaled_values_are_reported_as_no_baseline() {
    let Some(cells) = pbmc68k() else { return };
    let m = tiny_model();
    // pbmc68k_reduced's X is scaled (negative values): the model embeds raw, the baselines read X.
    let emb = tempfile::tempdir().unwrap();
    let out = emb.path().join("e.parquet");
    let mut e = vec!["embed", "--json", "--model", s(&m.model), "--input", s(&cells), "--out", s(&out)];
    e.extend(READ);
    ok_json(&corrflow(&e));
    let o =
        corrflow(&["eval", "cells", "--json", "--embeddings", s(&out), "--input", s(&cells), "--label", "bulk_labels"]);
    let r = ok_json(&o);
    assert_eq!(r["order"].as_array().unwrap().len(), 1);
    let skipped = r["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 3);
    assert!(skipped[0]["reason"].as_str().unwrap().contains("not counts"), "{skipped:?}");
    assert!(stdout(&o).contains("pca: not computed"));
}

/// The small inputs of tests/python/make_eval_cases.py, made once.
fn cases() -> Option<&'static std::path::PathBuf> {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let py = python()?;
        let dir =
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("eval-cases-{}", std::process::id()));
        let o = run_python(&py, "make_eval_cases.py", &[s(&dir)]);
        assert!(o.status.success(), "make_eval_cases.py: {}", stderr(&o));
        Some(dir)
    })
    .as_ref()
}

/// `eval cells` on `name`.h5ad with `name`.parquet (or `emb`), and `extra` flags.
fn eval_case(dir: &Path, name: &str, emb: &[&str], extra: &[&str]) -> std::process::Output {
    let input = dir.join(format!("{name}.h5ad"));
    let own = dir.join(format!("{name}.parquet"));
    let mut args = vec!["eval", "cells", "--json", "--input", s(&input), "--label", "cell_type"];
    let files: Vec<std::path::PathBuf> =
        if emb.is_empty() { vec![own] } else { emb.iter().map(|e| dir.join(e)).collect() };
    for f in &files {
        args.extend(["--embeddings", s(f)]);
    }
    args.extend(extra);
    corrflow(&args)
}

/// Exit 1, no panic, and a message that contains every needle.
fn refused(o: &std::process::Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "must be refused: {err}");
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' not in: {err}");
    }
}

#[test]
fn one_cell_per_class_and_rare_classes_are_reported_not_a_panic() {
    let Some(dir) = cases() else { return };
    // Issue 51, item 7: four classes of one cell, no baselines, two folds.
    let o = eval_case(dir, "singletons", &[], &["--no-baselines", "--folds", "2"]);
    let r = ok_json(&o);
    assert!(r["probes_not_computed"].as_str().unwrap().contains("0 of the 4 classes"), "{r}");
    assert_eq!(r["probe_skipped_classes"].as_array().unwrap().len(), 4);
    assert!(r["methods"]["embeddings"]["accuracy"].is_null());
    assert!(r["methods"]["embeddings"]["silhouette_label"].is_f64());
    assert!(stdout(&o).contains("probes: not computed"), "{}", stdout(&o));
    // Classes of 1 and 2 cells beside two of 8, 3 folds: left out of the probes only.
    let o = eval_case(dir, "rare", &[], &["--folds", "3", "--n-top-genes", "20", "--n-comps", "5"]);
    let r = ok_json(&o);
    let left: Vec<String> = r["probe_skipped_classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}:{}", c["class"], c["cells"]))
        .collect();
    assert_eq!(left, vec!["\"C\":1", "\"D\":2"]);
    for m in ["embeddings", "pca", "hvg", "random"] {
        assert!(r["methods"][m]["macro_f1"].is_f64(), "{m}: {r}");
        assert_eq!(r["methods"][m]["per_class"].as_array().unwrap().len(), 2, "{m}");
    }
    assert!(stdout(&o).contains("left out") && stdout(&o).contains("C (1 cell), D (2 cells)"), "{}", stdout(&o));
}

#[test]
fn degenerate_labels_batches_and_embeddings_are_refused_naming_the_cause() {
    let Some(dir) = cases() else { return };
    refused(&eval_case(dir, "unlabelled", &[], &[]), &["unlabelled.h5ad", "12 without a 'cell_type' value"]);
    refused(&eval_case(dir, "onebatch", &[], &["--batch", "batch"]), &["batch column 'batch' has one value ('b1')"]);
    refused(&eval_case(dir, "good", &[], &["--exclude", "A,B"]), &["1 classes", "20 excluded"]);
    // Embeddings files: each named, and for what is wrong with it.
    refused(&eval_case(dir, "good", &["nan.parquet"], &[]), &["nan.parquet", "finite"]);
    assert!(!stderr(&eval_case(dir, "good", &["nan.parquet"], &[])).contains("good.h5ad"), "names the embeddings");
    refused(&eval_case(dir, "good", &["zero.parquet"], &[]), &["zero.parquet", "0 wide"]);
    refused(&eval_case(dir, "good", &["nocols.parquet"], &[]), &["nocols.parquet", "no columns"]);
    refused(&eval_case(dir, "good", &["norows.parquet"], &[]), &["norows.parquet", "no rows"]);
    refused(&eval_case(dir, "good", &["good.parquet", "good.parquet"], &[]), &["good.parquet is given twice"]);
    // eval probe and eval genes read embeddings files the same way.
    let probe = |f: &str, extra: &[&str]| {
        let e = dir.join(f);
        let mut a = vec!["eval", "probe", "--embeddings", s(&e)];
        if !extra.contains(&"--label") {
            a.extend(["--label", "cell_type"]);
        }
        a.extend(extra);
        corrflow(&a)
    };
    refused(&probe("zero.parquet", &[]), &["zero.parquet", "0 wide"]);
    refused(&probe("nan.parquet", &[]), &["nan.parquet", "no row has both"]);
    refused(&probe("singletons.parquet", &["--folds", "2"]), &["0 class(es) the probes can score", "A (1 cell)"]);
    refused(&probe("unlabelled.parquet", &[]), &["unlabelled.parquet", "no row has both a 'cell_type' value"]);
    refused(&probe("good.parquet", &["--max-iterations", "0"]), &["--max-iterations must be in"]);
    refused(
        &probe("good.parquet", &["--label", "embedding"]),
        &["label column 'embedding'", "cannot be read as labels"],
    );
    let r = ok_json(&probe("rare.parquet", &["--folds", "3", "--json"]));
    assert_eq!(r["skipped_classes"].as_array().unwrap().len(), 2, "{r}");
    refused(&probe("good.parquet", &["--alpha", "1e308"]), &["--alpha must be in"]);
    let genes = |f: &str, labels: &str, alpha: &str| {
        let (e, l) = (dir.join(f), dir.join(labels));
        corrflow(&["eval", "genes", "--embeddings", s(&e), "--labels", s(&l), "--alpha", alpha])
    };
    refused(&genes("genes-zero.parquet", "genes.csv", "1"), &["genes-zero.parquet", "0 wide"]);
    refused(&genes("genes.parquet", "genes.csv", "1e308"), &["--alpha must be in"]);
    refused(&genes("genes.parquet", "genes-other.csv", "1"), &["none of the 60 labelled genes of", "genes-other.csv"]);
}

#[test]
fn alpha_is_bounded_to_what_fits_and_n_top_genes_to_the_genes() {
    let Some(dir) = cases() else { return };
    let small = ["--n-top-genes", "20", "--n-comps", "5"];
    for alpha in ["0", "1e-5", "2e6", "1e308"] {
        let o = eval_case(dir, "good", &[], &[&small[..], &["--alpha", alpha]].concat());
        refused(&o, &["--alpha must be in [1e-4, 1e6]"]);
    }
    for alpha in ["1e-4", "1e6"] {
        let r = ok_json(&eval_case(dir, "good", &[], &[&small[..], &["--alpha", alpha, "--no-baselines"]].concat()));
        assert!(r["methods"]["embeddings"]["accuracy"].is_f64(), "--alpha {alpha}: {r}");
    }
    // Issue 51, item 8: more HVGs than the 60 genes keeps at most every gene, and says so.
    let r = ok_json(&eval_case(dir, "good", &[], &["--n-top-genes", "100000"]));
    let hvg = r["methods"]["hvg"]["dim"].as_u64().unwrap();
    assert!((2..=60).contains(&hvg), "{hvg}");
    assert_eq!(r["methods"]["pca"]["dim"].as_u64().unwrap(), 29.min(hvg - 1), "components: < cells and HVGs");
    let notes = r["baseline_notes"].to_string();
    assert!(notes.contains("--n-top-genes 100000 is more than the 60 genes"), "{notes}");
}
