//! `evaluate` end to end on generated cells.

use super::*;

/// 3 cell types × 40 cells, 2 batches; type t expresses genes 10t..10t+10 strongly.
fn cells(batches: bool) -> (CellData, Vec<Vec<f32>>) {
    let mut counts = CsrMatrix { genes: 40, indptr: vec![0], ..Default::default() };
    let (mut labels, mut batch, mut emb) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..120usize {
        let t = i % 3;
        for g in 0..40u32 {
            let base = if g as usize / 10 == t { 20 } else { 1 };
            let v = (base + (i * 7 + g as usize * 13) % 5) as f64;
            counts.indices.push(g);
            counts.values.push(v);
        }
        counts.indptr.push(counts.indices.len());
        labels.push(Some(format!("type{t}")));
        batch.push(Some(format!("b{}", i % 2)));
        let wobble = ((i * 31) % 17) as f32 * 0.01;
        emb.push(vec![t as f32 * 5.0 + wobble, wobble, (i % 2) as f32 * 0.01]);
    }
    let data = CellData {
        source: "generated".into(),
        ids: (0..120).map(|i| format!("c{i}")).collect(),
        labels,
        batches: batches.then_some(batch),
        counts: Ok(counts),
        counts_name: "X".into(),
        integer_counts: true,
        transform: ValueTransform::None,
        allow_normalized: false,
    };
    (data, emb)
}

fn method(emb: Vec<Vec<f32>>) -> MethodInput {
    MethodInput { name: "model".into(), source: "test".into(), rows: emb.into_iter().map(Some).collect(), dim: 3 }
}

#[test]
fn separable_cells_score_high_and_every_baseline_is_there() {
    let (data, emb) = cells(true);
    let opts = CellEvalOptions { n_top_genes: 20, n_comps: 5, ..CellEvalOptions::default() };
    let r = evaluate(&data, &[method(emb)], "cell_type", Some("batch"), &[], &opts).unwrap();
    assert_eq!(r.order, vec!["model", "pca", "random", "hvg"]);
    let m = &r.methods["model"];
    assert!(m.ari > 0.99 && m.nmi > 0.99, "ari {} nmi {}", m.ari, m.nmi);
    assert!(m.silhouette_label > 0.9 && m.macro_f1 > 0.99);
    assert!(m.ilisi.unwrap() > 0.8, "batches are mixed: {:?}", m.ilisi);
    // This regular data has ties at the cut-off: kept, as scanpy keeps them.
    assert!(r.methods["hvg"].dim >= 20);
    assert_eq!(r.methods["pca"].dim, 5);
    assert!(r.methods["pca"].ari > 0.9, "the PCA of the marker genes separates the types");
    assert_eq!(r.best.get("ari").map(String::as_str), Some("model"));
    assert!(table(&r).contains("ari"));
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let (data, emb) = cells(true);
    let opts = CellEvalOptions { n_top_genes: 20, n_comps: 5, ..CellEvalOptions::default() };
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| evaluate(&data, &[method(emb.clone())], "t", Some("b"), &[], &opts).unwrap())
    };
    let (a, b) = (run(1), run(3));
    for name in &a.order {
        let (x, y) = (serde_json::to_value(&a.methods[name]).unwrap(), serde_json::to_value(&b.methods[name]).unwrap());
        let strip = |mut v: serde_json::Value| {
            v.as_object_mut().unwrap().remove("seconds");
            v
        };
        assert_eq!(strip(x), strip(y), "{name}");
    }
}

#[test]
fn values_that_are_not_counts_skip_the_baselines_and_say_why() {
    let (mut data, emb) = cells(false);
    data.counts = Err("cell c0 holds -1.2 (not counts)".into());
    let r = evaluate(&data, &[method(emb)], "t", None, &[], &CellEvalOptions::default()).unwrap();
    assert_eq!(r.order, vec!["model"]);
    assert_eq!(r.skipped.len(), 3);
    assert!(r.skipped[0].reason.contains("not counts"));
    assert!(table(&r).contains("pca: not computed"));
}

#[test]
fn non_integer_values_need_to_be_declared() {
    let (mut data, emb) = cells(false);
    data.integer_counts = false;
    let r = evaluate(&data, &[method(emb.clone())], "t", None, &[], &CellEvalOptions::default()).unwrap();
    assert!(r.skipped.iter().any(|s| s.reason.contains("--log1p")), "{:?}", r.skipped);
    data.allow_normalized = true;
    let opts = CellEvalOptions { n_top_genes: 20, n_comps: 5, ..CellEvalOptions::default() };
    let r = evaluate(&data, &[method(emb)], "t", None, &[], &opts).unwrap();
    assert!(r.skipped.is_empty());
}

#[test]
fn too_few_cells_or_classes_and_bad_options_are_refused() {
    let (mut data, emb) = cells(false);
    let err = evaluate(
        &data,
        &[method(emb.clone())],
        "t",
        None,
        &["type1".into(), "type2".into()],
        &CellEvalOptions::default(),
    );
    assert!(err.unwrap_err().to_string().contains("≥ 2 classes"));
    data.labels[0] = None;
    let r =
        evaluate(&data, &[method(emb)], "t", None, &[], &CellEvalOptions { baselines: false, ..Default::default() })
            .unwrap();
    assert_eq!((r.cells, r.dropped_cells), (119, 1));
    for opts in [
        CellEvalOptions { neighbours: 1, ..Default::default() },
        CellEvalOptions { resolutions: vec![f64::NAN], ..Default::default() },
        CellEvalOptions { folds: 1, ..Default::default() },
        CellEvalOptions { alpha: -1.0, ..Default::default() },
    ] {
        assert!(validate_options(&opts).is_err());
    }
}
