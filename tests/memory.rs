//! Ingest and the streamed graph build run in bounded memory: peak RSS for an 8× larger input
//! (real cells repeated) stays within 1.2× of the 1× peak.

use crate::common;

use common::*;

fn peak_mb(input: &std::path::Path, cfg: &str, tmp: &std::path::Path, atlas: &str) -> f64 {
    let out = tmp.join(atlas);
    let s = ok_json(&corrflow(&[
        "ingest",
        "--json",
        "--config",
        cfg,
        "--atlas",
        atlas,
        "--gene-column",
        "gene_ids",
        "--out",
        out.to_str().unwrap(),
        input.to_str().unwrap(),
    ]));
    s["peak_rss_mb"].as_f64().expect("peak RSS is reported on Linux")
}

#[test]
fn peak_memory_is_flat_as_input_grows_eightfold() {
    let Some(fx) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("mem.toml");
    // Chunks smaller than the 1× input, so both runs hold full chunks.
    std::fs::write(&cfg, "[ingest]\nchunk_cells = 32\nshard_cells = 64\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    let one = peak_mb(&fx.join("good/csr.h5ad"), cfg, tmp.path(), "one");
    let eight = peak_mb(&fx.join("good/repeat8.h5ad"), cfg, tmp.path(), "eight");
    println!("peak RSS: 1x {one:.1} MB, 8x {eight:.1} MB");
    assert!(eight <= one * 1.2, "peak RSS grew from {one:.1} MB to {eight:.1} MB");
    assert!(eight < 300.0);
}

#[test]
fn streamed_graph_build_memory_is_flat_as_the_corpus_grows_eightfold() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    let cfg = tmp.path().join("mem.toml");
    // Small shards, and a small budget for the ρ_local postings.
    std::fs::write(&cfg, "[ingest]\nshard_cells = 250\n[graph]\nstream_memory_mb = 2\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    let names: Vec<String> = (0..8).map(|i| format!("a{i}")).collect();
    for name in &names {
        let c = corpus.to_str().unwrap();
        let b = bundled();
        ok_json(&corrflow(&[
            "ingest",
            "--json",
            "--config",
            cfg,
            "--atlas",
            name,
            "--gene-column",
            "gene_ids",
            "--out",
            c,
            b.to_str().unwrap(),
        ]));
    }
    let peak = |atlases: &str, out: &str| {
        let out = tmp.path().join(out);
        let s = ok_json(&corrflow(&[
            "graph",
            "build",
            "--json",
            "--incremental",
            "--config",
            cfg,
            "--max-genes",
            "300",
            "--atlas",
            atlases,
            "--corpus",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]));
        assert_eq!(s["cells"].as_u64().unwrap() % 1000, 0);
        s["peak_rss_mb"].as_f64().expect("peak RSS is reported on Linux")
    };
    let one = peak("a0", "g1");
    let eight = peak(&names.join(","), "g8");
    println!("graph build --incremental peak RSS: 1x {one:.1} MB, 8x {eight:.1} MB");
    assert!(eight <= one * 1.2, "peak RSS grew from {one:.1} MB to {eight:.1} MB");
}
