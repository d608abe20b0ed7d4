//! `corrflow eval cells` end to end: a model (ONNX and checkpoint) and embeddings files judged
//! beside the baselines on real labelled cells; flag values and paths refused with messages that
//! name them. The metrics' agreement with scib-metrics / scanpy is python/tests/test_eval_cells.py.

mod common;

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
