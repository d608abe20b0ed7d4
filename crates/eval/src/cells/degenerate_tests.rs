//! `evaluate` on small and degenerate label sets (issue 51, item 7): each is handled, with the
//! left-out classes reported, or refused with a message naming what is wrong; none panics.

use super::*;

/// `sizes[t]` cells of class `t` over `genes` genes, embedded in 3-d near `5 t`; batches
/// alternate between two values.
fn data(sizes: &[usize], genes: u32) -> (CellData, MethodInput) {
    let mut counts = CsrMatrix { genes: genes as usize, indptr: vec![0], ..Default::default() };
    let (mut labels, mut batches, mut rows) = (Vec::new(), Vec::new(), Vec::new());
    let mut i = 0usize;
    for (t, &n) in sizes.iter().enumerate() {
        for _ in 0..n {
            for g in 0..genes {
                // A hash of (cell, gene, type): genes of varied means and dispersions.
                let h =
                    ((i as u64 * 2_654_435_761) ^ (u64::from(g) * 40_503) ^ (t as u64 * 97)).wrapping_mul(0x9E37_79B9);
                let v = 1 + (h >> 7) % (2 + u64::from(g % 7) * 3);
                counts.indices.push(g);
                counts.values.push(v as f64);
            }
            counts.indptr.push(counts.indices.len());
            labels.push(Some(format!("type{t}")));
            batches.push(Some(format!("b{}", i % 2)));
            let wobble = ((i * 31) % 17) as f32 * 0.01;
            rows.push(Some(vec![t as f32 * 5.0 + wobble, wobble, (i % 3) as f32 * 0.1]));
            i += 1;
        }
    }
    let cells = CellData {
        source: "generated.h5ad".into(),
        ids: (0..i).map(|k| format!("c{k}")).collect(),
        labels,
        batches: Some(batches),
        counts: Ok(counts),
        counts_name: "X".into(),
        integer_counts: true,
        transform: ValueTransform::None,
        allow_normalized: false,
    };
    (cells, MethodInput { name: "model".into(), source: "model.parquet".into(), rows, dim: 3 })
}

fn opts(folds: usize) -> CellEvalOptions {
    CellEvalOptions { folds, n_top_genes: 10, n_comps: 3, ..CellEvalOptions::default() }
}

fn err(r: Result<CellEvalReport>) -> String {
    match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn one_cell_per_class_is_scored_without_the_probes_and_says_why() {
    let (d, m) = data(&[1, 1, 1, 1], 20);
    let o = CellEvalOptions { baselines: false, ..opts(2) };
    let r = evaluate(&d, &[m], "cell_type", None, &[], &o).unwrap();
    assert_eq!(r.probe_skipped_classes.len(), 4);
    assert!(r.probes_not_computed.as_deref().unwrap().contains("0 of the 4 classes"), "{r:?}");
    let s = &r.methods["model"];
    assert!(s.accuracy.is_nan() && s.macro_f1.is_nan() && s.per_class.is_empty());
    assert!(s.silhouette_label.is_finite() && s.ari.is_finite());
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["methods"]["model"]["accuracy"].is_null());
    assert_eq!(json["probe_skipped_classes"][0]["cells"], 1);
    let t = table(&r);
    assert!(t.contains("probes: not computed") && t.contains("type0 (1 cell)"), "{t}");
    assert!(!t.contains("\naccuracy"), "a row of no values is not printed: {t}");
}

#[test]
fn classes_smaller_than_the_folds_are_left_out_of_the_probes_only() {
    // Two classes too small for 3 folds; with the baselines (every method gets the same list).
    let (d, m) = data(&[9, 9, 1, 2], 30);
    let r = evaluate(&d, &[m], "cell_type", None, &[], &opts(3)).unwrap();
    let left: Vec<(&str, usize)> = r.probe_skipped_classes.iter().map(|c| (c.class.as_str(), c.cells)).collect();
    assert_eq!(left, vec![("type2", 1), ("type3", 2)]);
    assert!(r.probes_not_computed.is_none());
    for name in &r.order {
        let s = &r.methods[name];
        assert!(s.accuracy.is_finite(), "{name}");
        assert_eq!(s.per_class.len(), 2, "{name}: only the probed classes");
    }
    assert_eq!(r.classes, 4, "Leiden and the silhouettes see every class");
    let t = table(&r);
    assert!(
        t.contains("probes: 2 class(es) with fewer than 3 cells left out")
            && t.contains(": type2 (1 cell), type3 (2 cells)"),
        "{t}"
    );
    assert!(table(&r).contains("probes: 3-fold mean"));
}

#[test]
fn too_few_cells_classes_labels_or_batches_are_refused_naming_the_cause() {
    let o = CellEvalOptions { baselines: false, ..opts(2) };
    // One class.
    let (d, m) = data(&[10], 10);
    assert!(err(evaluate(&d, &[m], "cell_type", None, &[], &o)).contains("1 classes of 'cell_type'"));
    // Two cells.
    let (d, m) = data(&[1, 1], 10);
    let e = err(evaluate(&d, &[m], "cell_type", None, &[], &o));
    assert!(e.contains("2 cells in 2 classes") && e.contains("≥ 4 cells"), "{e}");
    // No label at all.
    let (mut d, m) = data(&[5, 5], 10);
    d.labels.iter_mut().for_each(|l| *l = None);
    let e = err(evaluate(&d, &[m], "cell_type", None, &[], &o));
    assert!(e.contains("10 without a 'cell_type' value") && e.starts_with("generated.h5ad"), "{e}");
    // No batch at all, and one batch value.
    let (mut d, m) = data(&[5, 5], 10);
    d.batches.as_mut().unwrap().iter_mut().for_each(|b| *b = None);
    let e = err(evaluate(&d, &[m], "cell_type", Some("batch"), &[], &o));
    assert!(e.contains("10 without a 'batch' value"), "{e}");
    let (mut d, m) = data(&[5, 5], 10);
    d.batches.as_mut().unwrap().iter_mut().for_each(|b| *b = Some("only".into()));
    let e = err(evaluate(&d, &[m], "cell_type", Some("batch"), &[], &o));
    assert!(e.contains("batch column 'batch' has one value ('only')"), "{e}");
}

#[test]
fn embeddings_that_cannot_be_scored_are_named() {
    let o = CellEvalOptions { baselines: false, ..opts(2) };
    let (d, mut m) = data(&[5, 5], 10);
    m.rows.iter_mut().for_each(|r| *r = None);
    let e = err(evaluate(&d, &[m], "cell_type", None, &[], &o));
    assert!(e.starts_with("model.parquet: no cell of generated.h5ad has a finite embedding"), "{e}");
    let (d, mut m) = data(&[5, 5], 10);
    m.dim = 0;
    m.rows.iter_mut().for_each(|r| *r = Some(Vec::new()));
    assert!(err(evaluate(&d, &[m], "cell_type", None, &[], &o)).contains("0 wide"));
    let (d, m) = data(&[5, 5], 10);
    let twice = [MethodInput { name: m.name.clone(), source: m.source.clone(), rows: m.rows.clone(), dim: 3 }, m];
    assert!(err(evaluate(&d, &twice, "cell_type", None, &[], &o)).contains("model.parquet is given twice"));
}

#[test]
fn neighbour_counts_beyond_the_cells_are_capped() {
    // 12 cells: the graph, LISI and k-NN probe neighbours all exceed them.
    let (d, m) = data(&[6, 6], 10);
    let o = CellEvalOptions { neighbours: 50, lisi_neighbours: 90, probe_neighbours: 1000, ..opts(2) };
    let r = evaluate(&d, &[m], "cell_type", Some("batch"), &[], &o).unwrap();
    let s = &r.methods["model"];
    assert!(s.knn_accuracy.is_finite() && s.ilisi.unwrap().is_finite() && s.graph_connectivity.is_some());
}

#[test]
fn more_hvgs_than_genes_keeps_every_gene_and_says_so() {
    let (d, m) = data(&[15, 15], 40);
    let o = CellEvalOptions { n_top_genes: 100_000, ..opts(2) };
    let r = evaluate(&d, &[m], "cell_type", None, &[], &o).unwrap();
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    let hvg = r.methods["hvg"].dim;
    assert!((2..=40).contains(&hvg), "{hvg}");
    assert_eq!(r.methods["pca"].dim, 3);
    assert!(
        r.baseline_notes.iter().any(|n| n.contains("--n-top-genes 100000 is more than the 40 genes")),
        "{:?}",
        r.baseline_notes
    );
}

#[test]
fn alpha_is_bounded_and_both_ends_fit() {
    let (lo, hi) = crate::ALPHA_RANGE;
    for alpha in [lo, hi] {
        let (d, m) = data(&[10, 10, 10], 10);
        let o = CellEvalOptions { alpha, baselines: false, ..opts(2) };
        validate_options(&o).unwrap();
        let r = evaluate(&d, &[m], "cell_type", None, &[], &o).unwrap();
        assert!(r.methods["model"].accuracy.is_finite(), "alpha {alpha}");
    }
    for alpha in [0.0, lo / 2.0, hi * 2.0, 1e308, f64::INFINITY, f64::NAN, -1.0] {
        let e = validate_options(&CellEvalOptions { alpha, ..opts(2) }).unwrap_err().to_string();
        assert!(e.contains("--alpha must be in [1e-4, 1e6]"), "{alpha}: {e}");
    }
}
