//! `graph build` implements Algorithm 1 exactly: the edge set equals an independent numpy/scipy
//! implementation (benches/graph_reference.py) on real data, with ρ_local and ρ_global within
//! 1e-6 and identical co-presence counts; builds are deterministic.

use crate::common;

use std::path::Path;

use common::*;

fn corpus_of(h5ad: &Path, gene_column: Option<&str>, dir: &Path) {
    let mut args = vec!["ingest", "--json", "--atlas", "a", "--out", dir.to_str().unwrap()];
    if let Some(g) = gene_column {
        args.extend(["--gene-column", g]);
    }
    args.push(h5ad.to_str().unwrap());
    ok_json(&corrflow(&args));
}

fn compare_with_reference(corpus: &Path, extra: &[&str], ref_args: &[&str]) {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let graph = tmp.path().join("graph");
    let mut args = vec![
        "graph",
        "build",
        "--json",
        "--n-sub",
        "0",
        "--corpus",
        corpus.to_str().unwrap(),
        "--out",
        graph.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let s = ok_json(&corrflow(&args));
    let reference = tmp.path().join("ref.json");
    let mut rargs = vec![corpus.to_str().unwrap(), reference.to_str().unwrap()];
    rargs.extend_from_slice(ref_args);
    let o =
        std::process::Command::new(&py).arg(repo().join("benches/graph_reference.py")).args(&rargs).output().unwrap();
    assert!(o.status.success(), "reference failed: {}", stderr(&o));
    let ours = corrflow::graph::read_graph(&graph).unwrap();
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&reference).unwrap()).unwrap();
    let genes: Vec<u64> = r["genes"].as_array().unwrap().iter().map(|g| g.as_u64().unwrap()).collect();
    assert_eq!(ours.genes.iter().map(|g| u64::from(g.0)).collect::<Vec<_>>(), genes, "graph vocabulary differs");
    let edges = r["edges"].as_array().unwrap();
    assert_eq!(ours.edges.len(), edges.len(), "edge count differs");
    assert!(!edges.is_empty());
    for (e, x) in ours.edges.iter().zip(edges) {
        let x = x.as_array().unwrap();
        assert_eq!(
            (u64::from(e.u), u64::from(e.v)),
            (x[0].as_u64().unwrap(), x[1].as_u64().unwrap()),
            "edge sets differ"
        );
        assert!((e.rho - x[2].as_f64().unwrap()).abs() < 1e-6, "rho_local {} vs {}", e.rho, x[2]);
        assert!((e.rho_global - x[3].as_f64().unwrap()).abs() < 1e-6, "rho_global {} vs {}", e.rho_global, x[3]);
        assert_eq!(e.co_count, x[4].as_u64().unwrap());
    }
    println!("{} edges match the reference ({s})", edges.len());
}

#[test]
fn bundled_pbmc1k_graph_matches_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    corpus_of(&bundled(), Some("gene_ids"), tmp.path());
    // Smaller thresholds for 1,000 cells, so the comparison covers many edges.
    compare_with_reference(tmp.path(), &["--max-genes", "800"], &["--max-genes", "800"]);
}

#[test]
fn pbmc3k_graph_matches_the_reference() {
    let Some(p) = data("pbmc3k.h5ad") else { return };
    let tmp = tempfile::tempdir().unwrap();
    corpus_of(&p, Some("gene_ids"), tmp.path());
    compare_with_reference(tmp.path(), &[], &[]);
}

#[test]
fn builds_are_deterministic_and_sampling_is_seeded() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    corpus_of(&bundled(), Some("gene_ids"), &corpus);
    let build = |name: &str, seed: &str| {
        let out = tmp.path().join(name);
        let s = ok_json(&corrflow(&[
            "graph",
            "build",
            "--json",
            "--n-sub",
            "600",
            "--seed",
            seed,
            "--max-genes",
            "500",
            "--corpus",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]));
        assert_eq!(s["cells"], 600);
        corrflow::graph::read_graph(&out).unwrap().info.content_hash
    };
    // (The third graph once went to "c", the corpus itself: `graph build` now refuses that.)
    let (a, b, c) = (build("a", "1"), build("b", "1"), build("seed2", "2"));
    assert_eq!(a, b, "same seed, same graph");
    assert_ne!(a, c, "another seed samples other cells");
}

#[test]
fn graph_show_lists_a_genes_neighbours() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    corpus_of(&bundled(), Some("gene_ids"), &corpus);
    let g = tmp.path().join("g");
    ok_json(&corrflow(&[
        "graph",
        "build",
        "--json",
        "--corpus",
        corpus.to_str().unwrap(),
        "--out",
        g.to_str().unwrap(),
    ]));
    let o = corrflow(&["graph", "show", g.to_str().unwrap(), "--gene", "CD74"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains("degree:") && out.contains("HLA-DRA"), "{out}");
    let o = corrflow(&["graph", "show", g.to_str().unwrap(), "--gene", "NOT_A_GENE"]);
    assert!(!o.status.success() && stderr(&o).contains("NOT_A_GENE"));
}

#[test]
fn a_graph_vocabulary_too_large_for_memory_is_refused_with_the_estimate() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    corpus_of(&bundled(), Some("gene_ids"), &corpus);
    let out = tmp.path().join("g");
    let o = corrflow(&[
        "graph",
        "build",
        "--max-genes",
        "60000",
        "--corpus",
        corpus.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("statistics of 60000 genes need about")
            && err.contains("lower graph.max_genes")
            && err.contains("GB"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
    assert!(!out.exists());
    // A corpus path without a corpus is a clear error too.
    let o = corrflow(&[
        "graph",
        "build",
        "--corpus",
        tmp.path().join("nope").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success() && stderr(&o).contains("corpus.json"), "{}", stderr(&o));
}

/// The shards' checksums do not cover the manifest's cell counts: a count edited by hand (or by
/// a broken tool) is refused, where it once made `graph build` sample fewer cells, or only the
/// first ones, and exit 0.
#[test]
fn a_manifest_whose_cell_counts_disagree_with_its_shards_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    corpus_of(&bundled(), Some("gene_ids"), &corpus);
    let manifest = corpus.join("atlases/a/manifest.json");
    let good: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let cells = good["cells"].as_u64().unwrap();
    let build_with = |name: &str, n_sub: &str| {
        let out = tmp.path().join(name);
        let (c, g) = (corpus.to_str().unwrap(), out.to_str().unwrap());
        let o = corrflow(&["graph", "build", "--n-sub", n_sub, "--corpus", c, "--out", g]);
        assert!(!o.status.success() && !out.join("graph.json").exists(), "graph build accepted it: {}", stderr(&o));
        stderr(&o)
    };
    let build = |name: &str| build_with(name, "100");
    // The atlas total alone.
    let mut m = good.clone();
    m["cells"] = (cells + 5).into();
    std::fs::write(&manifest, m.to_string()).unwrap();
    let e = build("g1");
    assert!(
        e.contains("manifest.json") && e.contains(&format!("counts {} cells but its shards {cells}", cells + 5)),
        "{e}"
    );
    // The total and a shard's count together: caught against the rows read.
    let mut m = good.clone();
    m["cells"] = (cells + 5).into();
    let first = m["shards"][0]["cells"].as_u64().unwrap();
    m["shards"][0]["cells"] = (first + 5).into();
    std::fs::write(&manifest, m.to_string()).unwrap();
    for (name, n_sub) in [("g2", "100"), ("g3", "0")] {
        // Sampled cells and every cell (the all-cells statistics read shards in blocks).
        let e = build_with(name, n_sub);
        assert!(
            e.contains("shard-00000.parquet")
                && e.contains(&format!("shard has {first} cells, its manifest says {}", first + 5)),
            "{name}: {e}"
        );
    }
}
