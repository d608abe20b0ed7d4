//! Cell Ontology annotation on real labelled cells (pbmc68k_reduced, the Spectra sample, CBMC)
//! with the real Cell Ontology release from `cellxgene-ontology-guide`: curated maps become
//! `cl_id` columns at ingest (unmapped labels counted, unknown ones refused); multitask training
//! with the hierarchical head records its ontology slice; `annotate` gives the same calls from
//! burn and ONNX Runtime, scores them against the labels and writes them into an h5ad copy; the
//! server's `/v1/annotate` equals the offline calls; Python onnxruntime reproduces the leaf
//! probabilities; bad inputs are clear errors.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::server::{post, Server};
use common::*;

const ONTOLOGY: &str = "CL-ontology-v2026-03-26.json.zst";

struct Base {
    dir: tempfile::TempDir,
    corpus: PathBuf,
    run: PathBuf,
    model: PathBuf,
    ontology: PathBuf,
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

fn maps(name: &str) -> PathBuf {
    repo().join("datasets/cell_type_maps").join(name)
}

/// pbmc68k_reduced and Spectra with their mapped labels, a tiny model trained with MLM + HCE on
/// them, and its ONNX export.
fn base() -> Option<&'static Base> {
    static B: OnceLock<Option<Base>> = OnceLock::new();
    B.get_or_init(|| {
        let (p68, spectra, ontology) = (data("pbmc68k_reduced.h5ad")?, data("spectra_sample.h5ad")?, data(ONTOLOGY)?);
        let dir = tempfile::tempdir().unwrap();
        let (corpus, run, model) = (dir.path().join("c"), dir.path().join("run"), dir.path().join("m.onnx"));
        for (atlas, file, col, map, flags) in [
            ("p68", &p68, "bulk_labels", "pbmc68k_reduced.tsv", &["--counts", "raw", "--log1p"][..]),
            ("sp", &spectra, "cell_type_annotations", "spectra_sample.tsv", &["--log1p"][..]),
        ] {
            let mut args = vec!["ingest", "--json", "--atlas", atlas, "--out"];
            let (c, m, f) = (p(&corpus), p(&maps(map)), p(file));
            args.extend([c.as_str(), "--obs-columns", col, "--cell-type-map", m.as_str()]);
            args.extend(flags);
            args.push(f.as_str());
            let s = ok_json(&corrflow(&args));
            assert_eq!(s["cell_types"]["unmapped"], serde_json::json!({}), "{s}");
        }
        let tiny = repo().join("configs/tiny.toml");
        let o = p(&ontology);
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
            "40",
            "--out",
            &p(&run),
            "--hce-ontology",
            &o,
            "--hce-warmup",
            "5",
        ]));
        ok_json(&corrflow(&["export", "onnx", "--json", "--checkpoint", &p(&run), "--out", &p(&model)]));
        Some(Base { dir, corpus, run, model, ontology })
    })
    .as_ref()
}

/// `annotate` of the Spectra sample with the model `source` into `out`.
fn annotate(source: &[&str], out: &Path, extra: &[&str]) -> serde_json::Value {
    let spectra = p(&data("spectra_sample.h5ad").unwrap());
    let mut args = vec!["annotate", "--json"];
    args.extend(source);
    let o = p(out);
    args.extend(["--input", spectra.as_str(), "--log1p", "--out", o.as_str()]);
    args.extend(extra);
    ok_json(&corrflow(&args))
}

/// The calls Parquet as (cell_id → (leaf_id, leaf_probability, call_id, greedy probabilities)).
fn read_calls(path: &Path) -> std::collections::BTreeMap<String, (String, f32, Option<String>, Vec<f32>)> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Float32Type;
    use arrow_array::Array;
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 1024).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for rb in reader {
        let rb = rb.unwrap();
        let s = |n: &str| rb.column_by_name(n).unwrap().as_string::<i32>().clone();
        let (ids, leaf, call) = (s("cell_id"), s("leaf_id"), s("call_id"));
        let prob = rb.column_by_name("leaf_probability").unwrap().as_primitive::<Float32Type>().clone();
        let greedy = rb.column_by_name("greedy_probabilities").unwrap().as_list::<i32>().clone();
        for i in 0..rb.num_rows() {
            let g = greedy.value(i);
            let g: Vec<f32> = g.as_primitive::<Float32Type>().values().to_vec();
            let c = call.is_valid(i).then(|| call.value(i).to_string());
            out.insert(ids.value(i).to_string(), (leaf.value(i).to_string(), prob.value(i), c, g));
        }
    }
    out
}

#[test]
fn hce_training_records_its_slice_and_annotate_agrees_across_backends() {
    let Some(b) = base() else { return };
    // The checkpoint carries the head: the release, and every leaf under the 24 label terms.
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(b.run.join("checkpoints/step-00000040/state.json")).unwrap())
            .unwrap();
    let head = &state["model"]["hce"];
    assert_eq!(head["ontology_version"], "v2026-03-26");
    assert_eq!(head["column"], "cl_id");
    let leaves: Vec<String> = serde_json::from_value(head["leaves"].clone()).unwrap();
    let loaded = corrflow::ontology::load(&b.ontology).unwrap();
    let o = &loaded.ontology;
    let t_cell_leaves = o.descendant_leaves(o.find("CL:0000625").unwrap());
    for l in &t_cell_leaves {
        assert!(leaves.contains(&o.term(*l).id), "leaf {} under a label term is missing", o.term(*l).id);
    }
    // The hierarchical loss is logged, and positive on batches with labelled cells.
    let metrics = std::fs::read_to_string(b.run.join("metrics.jsonl")).unwrap();
    let hce: Vec<f64> = metrics
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["loss_hce"].as_f64())
        .collect();
    assert!(hce.iter().any(|&v| v > 0.0), "no batch trained the hierarchical head: {hce:?}");

    let tmp = tempfile::tempdir().unwrap();
    let (burn, ort) = (tmp.path().join("burn.parquet"), tmp.path().join("ort.parquet"));
    let h5 = tmp.path().join("calls.h5ad");
    let truth = ["--truth", "cell_type_annotations", "--truth-map"];
    let map = p(&maps("spectra_sample.tsv"));
    let s =
        annotate(&["--checkpoint", &p(&b.run)], &burn, &[&truth[..], &[map.as_str(), "--h5ad-out", &p(&h5)]].concat());
    annotate(&["--model", &p(&b.model)], &ort, &["--ontology", &p(&b.ontology)]);
    assert_eq!(s["cells"], 1000);
    assert_eq!(s["leaves"].as_u64().unwrap() as usize, leaves.len());
    let (a, c) = (read_calls(&burn), read_calls(&ort));
    assert_eq!(a.len(), 1000);
    for (id, (leaf, prob, call, greedy)) in &a {
        let (leaf2, prob2, call2, greedy2) = &c[id];
        assert!((prob - prob2).abs() <= 1e-4, "{id}: leaf probability {prob} vs {prob2}");
        assert!(leaf == leaf2 || (prob - prob2).abs() < 1e-4, "{id}: leaf {leaf} vs {leaf2}");
        assert!(call == call2 || greedy.iter().zip(greedy2).all(|(x, y)| (x - y).abs() <= 1e-4));
        // Down the greedy path probabilities never grow; the root holds all the mass.
        assert!((greedy[0] - 1.0).abs() < 1e-4, "{id}: root probability {}", greedy[0]);
        assert!(greedy.windows(2).all(|w| w[1] <= w[0] + 1e-6), "{id}: {greedy:?}");
    }
    // Scored against the mapped labels: every cell, the depth-0 accuracy is 1.
    let e = &s["evaluation"];
    assert_eq!(e["scored_cells"], 1000);
    assert_eq!(e["unmapped"], serde_json::json!({}));
    assert_eq!(e["by_depth"][0]["accuracy"], 1.0);
    let exact = e["exact_accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&exact) && e["ancestor_tolerant_accuracy"].as_f64().unwrap() >= 0.0);
    // The h5ad copy has the calls in obs, rows in the file's order.
    let Some(py) = python() else { return };
    let script = "import anndata, sys; a = anndata.read_h5ad(sys.argv[1]); \
        print(a.n_obs, a.obs['corrflow_leaf_id'].iloc[0], a.obs.index[0], float(a.obs['corrflow_leaf_probability'].iloc[0]))";
    let out = std::process::Command::new(py).args(["-c", script, &p(&h5)]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let line = stdout(&out);
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f[0], "1000");
    let (leaf, prob, _, _) = &a[f[2]];
    assert_eq!(f[1], leaf);
    assert!((f[3].parse::<f32>().unwrap() - prob).abs() < 1e-5);
}

#[test]
fn the_server_annotates_as_the_offline_command_does() {
    let Some(b) = base() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let offline = tmp.path().join("calls.parquet");
    annotate(&["--model", &p(&b.model)], &offline, &[]);
    let calls = read_calls(&offline);
    let meta = corrflow::model_meta::open_exported(&b.model).unwrap().meta;
    let max_genes = meta.tokenize_layout().max_genes;
    let cells: Vec<(String, Vec<u32>)> = atlas_tokens(&b.corpus, "sp").into_iter().take(12).collect();
    let ids: Vec<Vec<u32>> = cells.iter().map(|(_, t)| t[..t.len().min(max_genes)].to_vec()).collect();
    let server = Server::start(&b.model, &[], &[]);
    server.wait_ready();
    let url = format!("{}/v1/annotate", server.url);
    let (status, body) = post(&url, &serde_json::json!({"input_ids": ids}).to_string(), None);
    assert_eq!(status, 200, "{body}");
    let r: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["ontology_version"], "v2026-03-26");
    for ((id, _), call) in cells.iter().zip(r["calls"].as_array().unwrap()) {
        // Cell ids of the atlas are the file's; annotate read the same file.
        let (leaf, prob, reliable, _) = &calls[id];
        assert_eq!(call["leaf"]["id"], leaf.as_str(), "{id}");
        assert!((call["leaf"]["probability"].as_f64().unwrap() as f32 - prob).abs() <= 1e-4);
        assert_eq!(call["call"]["id"].as_str(), reliable.as_deref());
    }
    // A higher threshold gives a call no deeper; bad thresholds and bodies are client errors.
    let (_, strict) =
        post(&format!("{url}?threshold=0.99"), &serde_json::json!({"input_ids": &ids[..1]}).to_string(), None);
    let strict: serde_json::Value = serde_json::from_str(&strict).unwrap();
    assert!(strict["calls"][0]["call"]["depth"].as_u64() <= r["calls"][0]["call"]["depth"].as_u64());
    assert_eq!(
        post(&format!("{url}?threshold=2"), &serde_json::json!({"input_ids": &ids[..1]}).to_string(), None).0,
        422
    );
    // Issue 43: a threshold that is not a number gets the JSON error body of the other refusals.
    let (status, body) =
        post(&format!("{url}?threshold=abc"), &serde_json::json!({"input_ids": &ids[..1]}).to_string(), None);
    assert_eq!(status, 422, "{body}");
    let e: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    assert!(e["error"]["message"].as_str().unwrap().contains("threshold must be a number"), "{body}");
    assert_eq!(post(&url, "{\"cells\": [", None).0, 422);
    let (status, body) = post(&url, r#"{"cells": [{"genes": ["NOT_A_GENE", "CD3E"], "counts": [5, 3]}]}"#, None);
    assert_eq!(status, 200, "{body}");
    let r: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["unknown_genes"][0], 1);
    let (status, body) = post(&url, r#"{"cells": [{"genes": ["NOT_A_GENE"], "counts": [5]}]}"#, None);
    assert_eq!(status, 422, "{body}");
    let (_, spec) = common::server::get(&format!("{}/openapi.json", server.url), None);
    assert!(spec.contains("/v1/annotate") && spec.contains("AnnotateResponse"));
    server.terminate();
    // A model without a hierarchical head: 404 on /v1/annotate.
    let plain = Server::start(&tiny_model().model, &[], &[]);
    plain.wait_ready();
    let (status, body) = post(&format!("{}/v1/annotate", plain.url), r#"{"input_ids": [[5, 6, 7]]}"#, None);
    assert_eq!(status, 404, "{body}");
    plain.terminate();
}

/// Issue 43: labels that cannot be scored are refused, naming the right thing: free-text
/// labels without a map, and a `--truth` column the input does not have (not the map).
#[test]
fn truth_labels_that_cannot_be_scored_are_clear_errors() {
    let Some(b) = base() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let spectra = p(&data("spectra_sample.h5ad").unwrap());
    let out = tmp.path().join("calls.parquet");
    let (model, o) = (p(&b.model), p(&out));
    let run = |extra: &[&str]| {
        let args = ["annotate", "--model", &model, "--input", &spectra, "--log1p", "--out", &o];
        corrflow(&[&args[..], extra].concat())
    };
    let r = run(&["--truth", "cell_type_annotations"]);
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("--truth 'cell_type_annotations' holds labels, not ontology term ids"), "{err}");
    assert!(err.contains("--truth-map"), "{err}");
    let map = p(&maps("spectra_sample.tsv"));
    let r = run(&["--truth", "nope", "--truth-map", &map]);
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("nope") && !err.contains("has no rows"), "the map is blamed: {err}");
    assert!(!out.exists());
}

#[test]
fn python_onnxruntime_reproduces_the_leaf_probabilities() {
    let Some(b) = base() else { return };
    let Some(py) = python() else { return };
    use corrflow::encode::{Encoder, PaddedBatch};
    let meta = corrflow::model_meta::open_exported(&b.model).unwrap().meta;
    let max_genes = meta.tokenize_layout().max_genes;
    let cells: Vec<Vec<u32>> = atlas_tokens(&b.corpus, "p68")
        .into_iter()
        .take(16)
        .map(|(_, t)| t[..t.len().min(max_genes)].to_vec())
        .collect();
    let batch = PaddedBatch::new(cells.iter().map(Vec::as_slice), meta.pad);
    let mut burn = corrflow::model::BurnEncoder::open(&b.run, None, -1).unwrap();
    let rows = burn.encode_with_probabilities(&batch).unwrap();
    let (_, probs) = corrflow::encode::split_probabilities(rows, burn.dim(), burn.classes().len());
    let case = b.dir.path().join("leaf-case.json");
    let json = serde_json::json!({"shape": [batch.rows, batch.len], "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask, "probabilities": probs});
    std::fs::write(&case, json.to_string()).unwrap();
    let out = run_python(&py, "annotate_parity.py", &[&p(&b.model), &p(&case)]);
    assert!(out.status.success(), "annotate_parity.py failed: {}", stderr(&out));
    let r: serde_json::Value = serde_json::from_str(stdout(&out).trim().lines().last().unwrap()).unwrap();
    assert!(r["max_abs_diff"].as_f64().unwrap() <= 1e-4, "{r}");
    assert_eq!(r["leaves"].as_u64().unwrap() as usize, burn.classes().len());
    assert!(r["root_mass_error"].as_f64().unwrap() <= 1e-4, "{r}");
    assert_eq!(r["ontology_version"], "v2026-03-26");
}

#[test]
fn maps_are_proposed_applied_and_unmapped_labels_reported() {
    let (Some(cbmc), Some(spectra), Some(ontology)) =
        (data("cbmc_citeseq.h5ad"), data("spectra_sample.h5ad"), data(ONTOLOGY))
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // Proposal: exact/synonym matches found (Treg is a CL synonym), the rest left to the user.
    let proposed = tmp.path().join("spectra.tsv");
    let s = ok_json(&corrflow(&[
        "ontology",
        "map",
        "--json",
        "--ontology",
        &p(&ontology),
        "--labels",
        &p(&spectra),
        "--column",
        "cell_type_annotations",
        "--out",
        &p(&proposed),
    ]));
    let rows = s["rows"].as_array().unwrap();
    let treg = rows.iter().find(|r| r["label"] == "Treg").unwrap();
    assert_eq!((treg["cl_id"].as_str(), treg["matched"].as_str()), (Some("CL:0000815"), Some("synonym")));
    assert!(s["unmapped"].as_array().unwrap().iter().any(|l| l == "CD4_T"));
    let map = corrflow::ontology::map::CellTypeMap::read(&proposed).unwrap();
    assert_eq!(map.rows.iter().map(|r| r.cells).sum::<u64>(), 1000);
    // CBMC with its curated map: Mouse and Unknown stay without an id and are counted.
    let (vocab, corpus) = (tmp.path().join("vocab"), tmp.path().join("c"));
    ok_json(&corrflow(&["vocab", "build", "--json", "--out", &p(&vocab), &p(&cbmc)]));
    let s = ok_json(&corrflow(&[
        "ingest",
        "--json",
        "--vocab",
        &p(&vocab),
        "--atlas",
        "cbmc",
        "--out",
        &p(&corpus),
        "--obs-columns",
        "cell_type",
        "--cell-type-map",
        &p(&maps("cbmc_citeseq.tsv")),
        &p(&cbmc),
    ]));
    let c = &s["cell_types"];
    assert_eq!(c["unmapped"], serde_json::json!({"Mouse": 607, "Unknown": 171}));
    assert_eq!(c["mapped_cells"], 8617 - 607 - 171);
    // A label the map does not list is refused, naming it.
    let partial = tmp.path().join("partial.tsv");
    let text = std::fs::read_to_string(maps("cbmc_citeseq.tsv")).unwrap();
    std::fs::write(&partial, text.lines().filter(|l| !l.contains("\tMk\t")).collect::<Vec<_>>().join("\n")).unwrap();
    let out = corrflow(&[
        "ingest",
        "--vocab",
        &p(&vocab),
        "--atlas",
        "x",
        "--out",
        &p(&corpus),
        "--obs-columns",
        "cell_type",
        "--cell-type-map",
        &p(&partial),
        &p(&cbmc),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("label 'Mk'") && stderr(&out).contains("partial.tsv"), "{}", stderr(&out));
    assert!(!corpus.join("atlases/x").exists());
}

#[test]
fn bad_ontologies_other_releases_and_unlabelled_models_are_clear_errors() {
    let Some(b) = base() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.parquet");
    let run = |extra: &[&str]| {
        let spectra = p(&data("spectra_sample.h5ad").unwrap());
        let mut args = vec!["annotate", "--input", spectra.as_str(), "--log1p"];
        let o = p(&out);
        args.extend(["--out", o.as_str()]);
        args.extend(extra);
        corrflow(&args)
    };
    // An ontology file that does not parse.
    let broken = tmp.path().join("broken.json");
    std::fs::write(&broken, "{\"CL:1\": ").unwrap();
    let o = run(&["--model", &p(&b.model), "--ontology", &p(&broken)]);
    assert!(!o.status.success() && stderr(&o).contains("broken.json") && stderr(&o).contains("not an ontology JSON"));
    // Another release than the model was trained with.
    let other = tmp.path().join("CL-ontology-v2025-01-01.json.zst");
    std::fs::copy(&b.ontology, &other).unwrap();
    let o = run(&["--model", &p(&b.model), "--ontology", &p(&other)]);
    assert!(
        !o.status.success() && stderr(&o).contains("v2025-01-01") && stderr(&o).contains("v2026-03-26"),
        "{}",
        stderr(&o)
    );
    // A model without a hierarchical head.
    let o = run(&["--model", &p(&tiny_model().model)]);
    assert!(!o.status.success() && stderr(&o).contains("no hierarchical cell-type head"), "{}", stderr(&o));
    assert!(!out.exists());
    // Training on a column whose values are not ontology ids names them.
    let o = corrflow(&[
        "train",
        "--config",
        &p(&repo().join("configs/tiny.toml")),
        "--corpus",
        &p(&b.corpus),
        "--strategy",
        "random",
        "--out",
        &p(&tmp.path().join("r")),
        "--hce-ontology",
        &p(&b.ontology),
        "--hce-column",
        "bulk_labels",
    ]);
    assert!(!o.status.success() && stderr(&o).contains("CD14+ Monocyte"), "{}", stderr(&o));
}

#[test]
fn init_from_starts_multitask_training_from_pretrained_weights() {
    let Some(b) = base() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let tiny = p(&repo().join("configs/tiny.toml"));
    let (pre, tuned) = (tmp.path().join("pre"), tmp.path().join("tuned"));
    let train = |out: &Path, extra: &[&str]| {
        let mut args = vec!["train", "--json", "--config", tiny.as_str(), "--strategy", "random", "--max-steps"];
        let (c, o) = (p(&b.corpus), p(out));
        args.extend(["40", "--corpus", c.as_str(), "--out", o.as_str()]);
        args.extend(extra);
        corrflow(&args)
    };
    ok_json(&train(&pre, &[]));
    let pre_ckpt = p(&pre.join("checkpoints/step-00000040"));
    ok_json(&train(&tuned, &["--init-from", &pre_ckpt, "--hce-ontology", &p(&b.ontology)]));
    let first = |run: &Path, key: &str| -> f64 {
        let m = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
        let line: serde_json::Value = serde_json::from_str(m.lines().next().unwrap()).unwrap();
        line[key].as_f64().unwrap()
    };
    // From pre-trained weights the masked-token loss starts where pre-training left it, well
    // below a random initialisation's (the base run, same corpus and seed).
    let (scratch, warm) = (first(&b.run, "loss_reconstruction"), first(&tuned, "loss_reconstruction"));
    assert!(warm < scratch - 0.2, "initialised run starts at {warm}, a fresh one at {scratch}");
    // Another architecture is refused before anything is trained.
    let wide = tmp.path().join("wide.toml");
    std::fs::write(
        &wide,
        std::fs::read_to_string(repo().join("configs/tiny.toml")).unwrap().replace("hidden = 64", "hidden = 32"),
    )
    .unwrap();
    let o = corrflow(&[
        "train",
        "--config",
        &p(&wide),
        "--corpus",
        &p(&b.corpus),
        "--strategy",
        "random",
        "--out",
        &p(&tmp.path().join("w")),
        "--init-from",
        &pre_ckpt,
    ]);
    assert!(!o.status.success() && stderr(&o).contains("another architecture"), "{}", stderr(&o));
}
