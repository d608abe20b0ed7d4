//! `embed --genes` (Geneformer's gene mode) and `eval genes` on real cells: the burn and ONNX
//! Runtime backends agree, a gene's cell count is the number of cells whose tokens hold it, the
//! vectors do not depend on the batch size, and the dosage-sensitivity evaluation runs on them.

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use arrow_array::{Array, FixedSizeListArray, Float32Array, StringArray, UInt64Array};
use common::*;

/// gene_id → (n_cells, embedding) of a gene-embeddings file.
fn read(path: &Path) -> HashMap<String, (u64, Vec<f32>)> {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let mut out = HashMap::new();
    for rb in reader {
        let rb = rb.unwrap();
        let ids = rb.column_by_name("gene_id").unwrap().as_any().downcast_ref::<StringArray>().unwrap().clone();
        let n = rb.column_by_name("n_cells").unwrap().as_any().downcast_ref::<UInt64Array>().unwrap().clone();
        let emb =
            rb.column_by_name("embedding").unwrap().as_any().downcast_ref::<FixedSizeListArray>().unwrap().clone();
        let dim = emb.value_length() as usize;
        let values = emb.values().as_any().downcast_ref::<Float32Array>().unwrap().values().to_vec();
        for i in 0..rb.num_rows() {
            out.insert(ids.value(i).to_string(), (n.value(i), values[i * dim..(i + 1) * dim].to_vec()));
        }
    }
    out
}

fn embed_genes(source: &[&str], out: &Path, extra: &[&str]) -> HashMap<String, (u64, Vec<f32>)> {
    let bundled = bundled();
    let mut args = vec!["embed", "--json"];
    args.extend_from_slice(source);
    args.extend_from_slice(&["--input", bundled.to_str().unwrap(), "--gene-column", "gene_ids", "--genes"]);
    args.extend_from_slice(&["--out", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let s = ok_json(&corrflow(&args));
    assert_eq!(s["command"], "embed --genes");
    let genes = read(out);
    assert_eq!(s["genes"].as_u64().unwrap() as usize, genes.len());
    genes
}

#[test]
fn gene_embeddings_agree_across_backends_and_batch_sizes_and_count_the_cells_of_each_gene() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let run = f.run.to_str().unwrap();
    let burn = embed_genes(&["--checkpoint", run], &tmp.path().join("burn.parquet"), &[]);
    let ort = embed_genes(&["--model", f.model.to_str().unwrap()], &tmp.path().join("ort.parquet"), &[]);
    let one =
        embed_genes(&["--model", f.model.to_str().unwrap()], &tmp.path().join("b1.parquet"), &["--batch-size", "1"]);
    assert!(burn.len() > 1000, "{} genes", burn.len());
    assert_eq!(burn.keys().collect::<std::collections::BTreeSet<_>>(), ort.keys().collect());
    for (g, (n, v)) in &burn {
        let (n2, v2) = &ort[g];
        assert_eq!(n, n2, "{g}");
        assert!(max_abs_diff(v, v2) <= 1e-4, "{g}: burn vs ONNX Runtime");
        assert!(max_abs_diff(v2, &one[g].1) <= 1e-5, "{g}: batch size 1 vs 64");
    }
    // n_cells: the cells whose (model-layout) tokens hold the gene, from the model's own corpus
    // of the same cells.
    let index = corrflow::corpus::CorpusIndex::open(&f.corpus, &[]).unwrap();
    let vocab = corrflow::vocab::Vocabulary::resolve("geneformer-v1").unwrap();
    let max_len = 256; // configs/tiny.toml train.max_len: the model's inference layout
    let mut counts: HashMap<u32, u64> = HashMap::new();
    index
        .for_each_cell_block(vocab.len(), |b| {
            for i in 0..b.len() {
                for &t in b.cell(i).iter().take(max_len) {
                    *counts.entry(t).or_default() += 1;
                }
            }
            Ok(())
        })
        .unwrap();
    for (g, (n, _)) in burn.iter().take(200) {
        let t = vocab.lookup(g).unwrap().token();
        assert_eq!(counts[&t], *n, "{g}");
    }
}

#[test]
fn the_dosage_sensitivity_task_runs_on_gene_embeddings_and_reports_excluded_genes() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("genes.parquet");
    let genes = embed_genes(&["--checkpoint", f.run.to_str().unwrap()], &out, &[]);
    let labels = repo().join("datasets/tasks/dosage-sensitivity/dosage_sens_tf_labels.csv");
    let r = ok_json(&corrflow(&[
        "eval",
        "genes",
        "--json",
        "--embeddings",
        out.to_str().unwrap(),
        "--labels",
        labels.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(&labels).unwrap();
    let labelled = text.lines().skip(1).filter(|l| l.contains("Yes")).count() as u64;
    let with_embedding =
        text.lines().skip(1).filter(|l| genes.contains_key(l.split(',').next().unwrap())).count() as u64;
    assert_eq!(r["labelled"].as_u64().unwrap(), labelled);
    assert_eq!(r["excluded"].as_u64().unwrap(), labelled - with_embedding);
    assert_eq!(r["positives"].as_u64().unwrap() + r["negatives"].as_u64().unwrap(), with_embedding);
    for key in ["logistic_auroc", "knn_auroc"] {
        let folds = r[key]["folds"].as_array().unwrap();
        assert_eq!(folds.len(), 5);
        assert!(folds.iter().all(|a| (0.0..=1.0).contains(&a.as_f64().unwrap())));
    }
    // Missing columns are named.
    let o = corrflow(&[
        "eval",
        "genes",
        "--embeddings",
        out.to_str().unwrap(),
        "--labels",
        labels.to_str().unwrap(),
        "--positive",
        "nope",
    ]);
    assert!(!o.status.success() && stderr(&o).contains("no column 'nope'"), "{}", stderr(&o));
}
