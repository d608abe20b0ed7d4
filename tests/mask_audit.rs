//! `mask audit`: Table 3 on real cells, checked against an independent Python implementation
//! (benches/mask_reference.py) reading the `--dump`; CorrMask masks graph neighbours together
//! far more often than random masking; bad inputs fail clearly and leave no dump behind.

use crate::common;

use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn audit(corpus: &Path, graph: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["mask", "audit", "--json", "--corpus", s(corpus), "--graph", s(graph)];
    args.extend_from_slice(extra);
    ok_json(&corrflow(&args))
}

#[test]
fn audit_numbers_match_an_independent_implementation_reading_the_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let dump = tmp.path().join("masks.parquet");
    let r = audit(&corpus, &graph, &["--strategy", "corrmask", "--dump", s(&dump)]);
    let row = &r["rows"][0];
    assert_eq!(row["cells"], 1000);
    // Same seed: same bytes; another seed: other masks.
    let again = tmp.path().join("again.parquet");
    audit(&corpus, &graph, &["--strategy", "corrmask", "--dump", s(&again)]);
    assert_eq!(std::fs::read(&dump).unwrap(), std::fs::read(&again).unwrap(), "masks are not deterministic");
    audit(&corpus, &graph, &["--strategy", "corrmask", "--seed", "1", "--dump", s(&again)]);
    assert_ne!(std::fs::read(&dump).unwrap(), std::fs::read(&again).unwrap());
    let Some(py) = python() else { return };
    let o = std::process::Command::new(py)
        .arg(repo().join("benches/mask_reference.py"))
        .args(["audit", s(&corpus), s(&graph), s(&dump)])
        .output()
        .unwrap();
    assert!(o.status.success(), "reference failed: {}", stderr(&o));
    let reference: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(reference["budget_exact"], true, "some cell's mask is not ⌊L·p⌋ positions");
    for k in ["mean_span", "hit_rate", "masked_fraction", "structural_fraction"] {
        let (a, b) = (row[k].as_f64().unwrap(), reference[k].as_f64().unwrap());
        assert!((a - b).abs() < 1e-12, "{k}: corrflow {a}, reference {b}");
    }
}

#[test]
fn corrmask_hits_neighbours_far_more_than_random_and_pmi_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let plot = tmp.path().join("sweep.svg");
    let r = audit(
        &corpus,
        &graph,
        &["--strategy", "random,pmi,pmi-rand,corrmask", "--sweep", "0,0.5,1", "--plot", s(&plot)],
    );
    let hit = |rows: &serde_json::Value, i: usize| rows[i]["hit_rate"].as_f64().unwrap();
    let rows = &r["rows"];
    let (random, pmi, corrmask) = (hit(rows, 0), hit(rows, 1), hit(rows, 3));
    assert!(corrmask > 1.5 * random, "corrmask {corrmask} vs random {random}");
    assert!(pmi < 1.3 * random, "PMI spans follow adjacency, not correlation: {pmi} vs {random}");
    for row in rows.as_array().unwrap() {
        assert!((row["masked_fraction"].as_f64().unwrap() - 0.15).abs() < 0.01);
    }
    assert_eq!(rows[0]["structural_fraction"], 0.0);
    assert!(rows[1]["structural_fraction"].as_f64().unwrap() > 0.95, "PMI's whole budget is spans");
    let sweep = &r["sweep"];
    // λ = 0 is random masking exactly (same draws), and the hit rate rises with λ.
    assert_eq!(sweep[0]["counts"], rows[0]["counts"]);
    assert!(hit(sweep, 0) < hit(sweep, 1) && hit(sweep, 1) < hit(sweep, 2));
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("hit rate"), "plot is not an SVG chart");
}

#[test]
fn kang_corrmask_hit_rate_is_a_multiple_of_random() {
    let (Some(ctrl), Some(stim)) = (data("kang_ctrl.h5ad"), data("kang_stim.h5ad")) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = (tmp.path().join("c"), tmp.path().join("g"));
    for (atlas, f) in [("ctrl", &ctrl), ("stim", &stim)] {
        ok_json(&corrflow(&["ingest", "--json", "--atlas", atlas, "--out", s(&corpus), s(f)]));
    }
    ok_json(&corrflow(&["graph", "build", "--json", "--corpus", s(&corpus), "--out", s(&graph)]));
    let r = audit(&corpus, &graph, &["--strategy", "random,corrmask", "--sweep", "1"]);
    let (random, corrmask) = (r["rows"][0]["hit_rate"].as_f64().unwrap(), r["rows"][1]["hit_rate"].as_f64().unwrap());
    let corrmask100 = r["sweep"][0]["hit_rate"].as_f64().unwrap();
    assert!(corrmask > 1.6 * random, "CorrMask {corrmask} vs random {random}");
    assert!(corrmask100 > 2.4 * random, "CorrMask-100 {corrmask100} vs random {random}");
}

#[test]
fn a_graph_of_another_vocabulary_or_a_corrupt_shard_fails_clearly_and_leaves_no_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let dump = tmp.path().join("masks.parquet");
    // Another vocabulary: the graph's recorded hash differs.
    let info = graph.join("graph.json");
    let text = std::fs::read_to_string(&info).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let hash = v["vocab_hash"].as_str().unwrap().to_string();
    std::fs::write(&info, text.replace(&hash, &"0".repeat(hash.len()))).unwrap();
    let o = corrflow(&["mask", "audit", "--corpus", s(&corpus), "--graph", s(&graph), "--dump", s(&dump)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("vocabulary"), "{}", stderr(&o));
    std::fs::write(&info, text).unwrap();
    // A shard changed after ingest: named in the error, and no dump that looks complete.
    let shard = corpus.join("atlases/pbmc/shard-00000.parquet");
    let mut bytes = std::fs::read(&shard).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(&shard, bytes).unwrap();
    let o = corrflow(&["mask", "audit", "--corpus", s(&corpus), "--graph", s(&graph), "--dump", s(&dump)]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("shard-00000.parquet") && stderr(&o).contains("checksum"), "{}", stderr(&o));
    assert!(!dump.exists());
    assert_eq!(
        std::fs::read_dir(tmp.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".tmp"))
            .count(),
        0
    );
    // Bad parameters.
    let o = corrflow(&["mask", "audit", "--corpus", s(&corpus), "--graph", s(&graph), "--lambda", "1.5"]);
    assert!(!o.status.success() && stderr(&o).contains("lambda"), "{}", stderr(&o));
    let o = corrflow(&["mask", "audit", "--corpus", s(&corpus), "--graph", s(&graph), "--strategy", "span"]);
    assert!(!o.status.success() && stderr(&o).contains("unknown strategy"), "{}", stderr(&o));
}
