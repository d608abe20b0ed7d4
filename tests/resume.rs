//! An ingest killed after some shards resumes from the finished shards and produces exactly
//! the corpus an uninterrupted run produces; until then no atlas looks complete.

use crate::common;

use common::*;

#[test]
#[cfg_attr(not(feature = "failpoints"), ignore = "needs the failpoints feature (make test enables it)")]
fn interrupted_ingest_resumes_to_the_same_result() {
    let Some(fx) = fixtures() else { return };
    let input = fx.join("good/repeat8.h5ad");
    let i = input.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = repo().join("configs/tiny.toml");
    let cfg = cfg.to_str().unwrap();
    // 512 cells, 128-cell chunks, 256-cell shards → 2 shards; a 64-cell shard size gives 8.
    let small = tmp.path().join("small.toml");
    std::fs::write(
        &small,
        std::fs::read_to_string(cfg)
            .unwrap()
            .replace("shard_cells = 256", "shard_cells = 64")
            .replace("chunk_cells = 128", "chunk_cells = 64"),
    )
    .unwrap();
    let small = small.to_str().unwrap();

    let full = tmp.path().join("full");
    ok_json(&corrflow(&["ingest", "--json", "--config", small, "--atlas", "a", "--out", full.to_str().unwrap(), i]));

    let crashed = tmp.path().join("crashed");
    let c = crashed.to_str().unwrap();
    let o = corrflow_env(
        &["ingest", "--config", small, "--atlas", "a", "--out", c, i],
        &[("FAILPOINTS", "ingest-after-shard=2*off->return")],
    );
    assert!(!o.status.success(), "the crash hook should abort the run");
    assert!(!crashed.join("atlases/a").exists(), "an interrupted atlas must not look complete");
    let stage = crashed.join("atlases/.a.partial");
    let shards = std::fs::read_dir(&stage)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
        .count();
    assert_eq!(shards, 3);

    // Different options refuse to resume someone else's partial ingest.
    let o = corrflow(&["ingest", "--config", cfg, "--atlas", "a", "--out", c, i]);
    assert!(!o.status.success() && stderr(&o).contains("--restart"), "{}", stderr(&o));

    let s = ok_json(&corrflow(&["ingest", "--json", "--config", small, "--atlas", "a", "--out", c, i]));
    assert_eq!(s["resumed_shards"], 3);
    assert_eq!(s["cells_read"], 512);
    assert!(!stage.exists());
    assert_eq!(atlas_tokens(&crashed, "a"), atlas_tokens(&full, "a"));
    for n in 0..8 {
        let name = format!("atlases/a/shard-{n:05}.parquet");
        assert_eq!(
            std::fs::read(full.join(&name)).unwrap(),
            std::fs::read(crashed.join(&name)).unwrap(),
            "{name} differs"
        );
    }
    let m = corrflow::corpus::AtlasManifest::load(&crashed.join("atlases/a")).unwrap();
    m.verify(&crashed.join("atlases/a")).unwrap();
}

#[test]
fn same_input_and_options_give_byte_identical_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let b = bundled();
    for run in ["one", "two"] {
        let out = tmp.path().join(run);
        ok_json(&corrflow(&[
            "ingest",
            "--json",
            "--atlas",
            "a",
            "--gene-column",
            "gene_ids",
            "--out",
            out.to_str().unwrap(),
            b.to_str().unwrap(),
        ]));
    }
    let shard = "atlases/a/shard-00000.parquet";
    assert_eq!(
        std::fs::read(tmp.path().join("one").join(shard)).unwrap(),
        std::fs::read(tmp.path().join("two").join(shard)).unwrap()
    );
}

#[test]
fn shards_keep_the_input_cell_order_with_many_chunks_in_flight() {
    // 8-cell chunks: the bundled 1,000 cells make 125 chunks, several tokenized at once on the
    // pool; the corpus must still list the cells in file order.
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("small.toml");
    let tiny = std::fs::read_to_string(repo().join("configs/tiny.toml")).unwrap();
    std::fs::write(&cfg, tiny.replace("chunk_cells = 128", "chunk_cells = 8")).unwrap();
    let b = bundled();
    let out = tmp.path().join("c");
    let args =
        ["ingest", "--json", "--config", cfg.to_str().unwrap(), "--atlas", "a", "--gene-column", "gene_ids", "--out"];
    let s = ok_json(&corrflow(&[&args[..], &[out.to_str().unwrap(), b.to_str().unwrap()]].concat()));
    let opts = corrflow::formats::ReadOptions { gene_column: Some("gene_ids".into()), ..Default::default() };
    let mut source = corrflow::formats::open(&b, &opts).unwrap();
    let n = source.n_cells();
    let in_file = source.read_chunk(0..n).unwrap().cell_ids;
    let in_corpus: Vec<String> = atlas_tokens(&out, "a").into_iter().map(|c| c.0).collect();
    assert_eq!(s["cells_kept"], n as u64, "every bundled cell has vocabulary genes");
    assert_eq!(in_corpus, in_file);
}
