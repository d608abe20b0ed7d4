//! `corrflow perturb` on real cells: deletion moves the cells that express the genes and no
//! other, overexpression moves every cell, the shifts do not depend on the batch size, a graph
//! module adds the genes' partners, the permutation test runs against matched random sets, and
//! bad input is refused with a clear message and nothing written.

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use arrow_array::{Array, Float64Array, StringArray};
use common::*;

fn perturb(args: &[&str]) -> std::process::Output {
    let bundled = bundled();
    let mut all = vec!["perturb", "--json", "--input", bundled.to_str().unwrap(), "--gene-column", "gene_ids"];
    all.extend_from_slice(args);
    corrflow(&all)
}

const GENES: &str = "B2M,TMSB4X,FTL";

#[test]
fn deletion_moves_exactly_the_cells_that_express_the_genes_whatever_the_batch_size() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let model = f.model.to_str().unwrap();
    let mut runs = Vec::new();
    let mut gene_shifts = Vec::new();
    for b in ["1", "7", "64"] {
        let out = tmp.path().join(format!("b{b}.parquet"));
        let genes_out = tmp.path().join(format!("g{b}.parquet"));
        let s = ok_json(&perturb(&[
            "--model",
            model,
            "--delete",
            GENES,
            "--batch-size",
            b,
            "--random-sets",
            "3",
            "--out",
            out.to_str().unwrap(),
            "--genes-out",
            genes_out.to_str().unwrap(),
        ]));
        gene_shifts.push(read_gene_shifts(&genes_out));
        assert_eq!(s["genes_shifted"].as_u64().unwrap() as usize, gene_shifts.last().unwrap().len());
        assert_eq!(s["cells"], 1000);
        assert!(s["cells_perturbed"].as_u64().unwrap() > 500, "{s}");
        assert_eq!(s["random_mean_shifts"].as_array().unwrap().len(), 3);
        let p = s["p_value"].as_f64().unwrap();
        assert!((0.25..=1.0).contains(&p), "(1 + k) / 4: {p}");
        runs.push((s, perturb_rows(&out)));
    }
    let (_, base) = &runs[0];
    assert_eq!(base.len(), 1000);
    for (id, (present, shift)) in base {
        assert_eq!(shift.is_some(), *present > 0, "{id}: shifted iff it expresses a gene");
        if let Some(s) = shift {
            assert!(*s >= -1e-6 && *s <= 2.0, "{id}: {s}");
        }
        for (_, other) in &runs[1..] {
            let (p2, s2) = other[id];
            assert_eq!(p2, *present);
            assert!((s2.unwrap_or(0.0) - shift.unwrap_or(0.0)).abs() <= 1e-5, "{id}: batch size changed the shift");
        }
    }
    assert!(runs[0].0["mean_shift"].as_f64().unwrap() > 0.0);
    // Every other gene's embedding shift: the deleted genes are not in it, each gene was seen in
    // at most the perturbed cells, and the batch size does not change it.
    let perturbed = runs[0].0["cells_perturbed"].as_u64().unwrap();
    let (first, rest) = gene_shifts.split_first().unwrap();
    assert!(first.len() > 500, "{} genes", first.len());
    for deleted in ["B2M", "TMSB4X", "FTL"] {
        assert!(!first.values().any(|(symbol, _, _)| symbol == deleted), "{deleted} is not shifted, it is gone");
    }
    for (id, (_, n, shift)) in first {
        assert!(*n <= perturbed && *shift >= -1e-9, "{id}: {n} cells, shift {shift}");
        for other in rest {
            assert!((other[id].2 - shift).abs() <= 1e-5, "{id}: batch size changed its shift");
        }
    }
}

/// gene_id → (symbol, n_cells, mean_shift) of a `--genes-out` file.
fn read_gene_shifts(path: &Path) -> HashMap<String, (String, u64, f64)> {
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let mut out = HashMap::new();
    for rb in reader {
        let rb = rb.unwrap();
        let ids = rb.column(0).as_any().downcast_ref::<StringArray>().unwrap().clone();
        let symbols = rb.column(1).as_any().downcast_ref::<StringArray>().unwrap().clone();
        let n = rb.column(3).as_any().downcast_ref::<arrow_array::UInt64Array>().unwrap().clone();
        let shift = rb.column(4).as_any().downcast_ref::<Float64Array>().unwrap().clone();
        for i in 0..rb.num_rows() {
            let symbol = if symbols.is_valid(i) { symbols.value(i).to_string() } else { String::new() };
            out.insert(ids.value(i).to_string(), (symbol, n.value(i), shift.value(i)));
        }
    }
    out
}

#[test]
fn shifts_do_not_depend_on_the_runtime_thread_count() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let model = f.model.to_str().unwrap();
    let runs: Vec<_> = ["1", "2"]
        .iter()
        .map(|threads| {
            let out = tmp.path().join(format!("t{threads}.parquet"));
            let args = ["--model", model, "--delete", GENES, "--threads", threads, "--random-sets", "0"];
            ok_json(&perturb(&[&args[..], &["--out", out.to_str().unwrap()]].concat()));
            perturb_rows(&out)
        })
        .collect();
    for (id, (present, shift)) in &runs[0] {
        let (p2, s2) = runs[1][id];
        assert_eq!(p2, *present);
        assert!((s2.unwrap_or(0.0) - shift.unwrap_or(0.0)).abs() <= 1e-5, "{id}: thread count changed the shift");
    }
}

#[test]
fn overexpression_moves_every_cell_and_a_graph_module_adds_the_partners() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.parquet");
    let model = f.model.to_str().unwrap();
    let s = ok_json(&perturb(&[
        "--model",
        model,
        "--overexpress",
        "CD3E",
        "--random-sets",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert_eq!(s["cells_perturbed"], 1000);
    assert!(s["p_value"].is_null());
    assert!(perturb_rows(&out).values().all(|(_, shift)| shift.is_some()));
    // The bundled graph: a gene with partners brings them along.
    let dir = tempfile::tempdir().unwrap();
    let (_, graph) = bundled_corpus_and_graph(dir.path());
    let g = corrflow::graph::read_graph(&graph).unwrap();
    let vocab = corrflow::vocab::Vocabulary::resolve("geneformer-v1").unwrap();
    let hub = g.edges[0].u;
    let degree = g.edges.iter().filter(|e| e.u == hub || e.v == hub).count();
    let hub_id = vocab.token(hub).unwrap().to_string();
    let s = ok_json(&perturb(&[
        "--model",
        model,
        "--delete",
        &hub_id,
        "--module",
        graph.to_str().unwrap(),
        "--random-sets",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert_eq!(s["module_partners"].as_u64().unwrap() as usize, degree);
    assert_eq!(s["tokens"].as_array().unwrap().len(), degree + 1);
}

#[test]
fn bad_requests_are_refused_clearly_and_write_nothing() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.parquet");
    let model = f.model.to_str().unwrap();
    let o = perturb(&["--model", model, "--delete", "B2M,NOT_A_GENE", "--out", out.to_str().unwrap()]);
    assert!(
        !o.status.success() && stderr(&o).contains("not in the model's vocabulary 'model.vocab': NOT_A_GENE"),
        "{}",
        stderr(&o)
    );
    let o =
        perturb(&["--model", model, "--delete", "B2M", "--cells-where", "n_counts=-1", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("no cell has n_counts = -1"), "{}", stderr(&o));
    let o = perturb(&["--model", model, "--delete", "B2M", "--cells-where", "nope", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("COL=VALUE"), "{}", stderr(&o));
    let o = perturb(&["--model", model, "--delete", "B2M", "--overexpress", "FTL", "--out", out.to_str().unwrap()]);
    assert!(!o.status.success());
    // Issue 43: deleting a gene no cell expresses is an error, not "shift NaN, p = 0.250".
    let o = perturb(&["--model", model, "--delete", "ENSG00000000005", "--out", out.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--delete ENSG00000000005: none of the") && err.contains("expresses this gene"), "{err}");
    assert!(!out.exists(), "nothing written");
    assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none(), "no temporary file left");
}
