//! Incremental graph maintenance (rank maps frozen at the last rebase, exact integer sums):
//! (a) build(A) → add(B) → retract(B) is byte-identical to build(A), also when B brings genes
//!     into the graph vocabulary;
//! (b) add(B) → rebase equals build(A ∪ B) byte for byte;
//! (c) `-w 1`, `-w 2` and a 2-process timely cluster on loopback give identical graphs;
//! (d) Kang ctrl → add stim (interferon shift): the incremental edge set stays close to the
//!     exact graph of both (the interferon genes entering the vocabulary get statistics from the
//!     stored shards), the drift is reported and a rebase recommended;
//! (e) a shard larger than a worker's block of cells gives the exact graph too.

use crate::common;

use std::path::Path;

use common::*;

fn ingest(corpus: &Path, atlas: &str, file: &Path, gene_column: Option<&str>) {
    let mut args = vec!["ingest", "--json", "--atlas", atlas, "--out", corpus.to_str().unwrap()];
    if let Some(g) = gene_column {
        args.extend(["--gene-column", g]);
    }
    args.push(file.to_str().unwrap());
    ok_json(&corrflow(&args));
}

fn same_files(a: &Path, b: &Path) {
    for f in ["edges.parquet", "genes.parquet", "graph.json"] {
        assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "{f} differs");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn add_then_retract_restores_the_graph_and_rebase_equals_a_fresh_build() {
    let Some(fx) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    ingest(&corpus, "a", &bundled(), Some("gene_ids"));
    ingest(&corpus, "b", &fx.join("good/repeat8.h5ad"), Some("gene_ids"));
    let (g, g0, gab) = (tmp.path().join("g"), tmp.path().join("g0"), tmp.path().join("gab"));
    // Every gene the vocabulary rule picks gets statistics, however few are missing.
    let config = tmp.path().join("follow.toml");
    std::fs::write(&config, "[graph]\nrebase_vocab = 0.0\n").unwrap();
    let build = |out: &Path, atlas: &str| {
        let mut args = vec!["graph", "build", "--json", "--incremental", "--max-genes", "400", "--config", s(&config)];
        args.extend(["--corpus", s(&corpus), "--out", s(out)]);
        if !atlas.is_empty() {
            args.extend(["--atlas", atlas]);
        }
        ok_json(&corrflow(&args))
    };
    build(&g, "a");
    build(&g0, "a");
    let added =
        ok_json(&corrflow(&["graph", "update", "--json", "--graph", s(&g), "--add", s(&corpus.join("atlases/b"))]));
    assert_eq!(added["cells"], 1512);
    // b moves genes into the top 400: they get statistics, and leave again with b below.
    assert!(added["drift"]["vocab_entered"].as_u64().unwrap() > 0, "{added}");
    assert_eq!(added["drift"]["vocab_missing"], 0);
    assert!(g.join("deltas").join(added["delta"].as_str().unwrap()).exists());
    // Adding the same atlas twice, or retracting an unknown one, is refused.
    let o = corrflow(&["graph", "update", "--graph", s(&g), "--add", s(&corpus.join("atlases/b"))]);
    assert!(!o.status.success() && stderr(&o).contains("already in this graph"), "{}", stderr(&o));
    let o = corrflow(&["graph", "update", "--graph", s(&g), "--retract", "zzz"]);
    assert!(!o.status.success() && stderr(&o).contains("not in this graph"));

    let retracted = ok_json(&corrflow(&["graph", "update", "--json", "--graph", s(&g), "--retract", "b"]));
    assert_eq!(retracted["cells"], 1000);
    same_files(&g, &g0);

    ok_json(&corrflow(&["graph", "update", "--json", "--graph", s(&g), "--add", s(&corpus.join("atlases/b"))]));
    let r = ok_json(&corrflow(&["graph", "rebase", "--json", "--graph", s(&g)]));
    assert_eq!(r["rebased"], true);
    build(&gab, "");
    same_files(&g, &gab);

    // With the default graph.rebase_vocab (2% of 400 genes = 8) that shortfall is tolerated:
    // nothing enters, the update reports the missing genes.
    let t = tmp.path().join("t");
    let mut args = vec!["graph", "build", "--json", "--incremental", "--max-genes", "400", "--atlas", "a"];
    args.extend(["--corpus", s(&corpus), "--out", s(&t)]);
    ok_json(&corrflow(&args));
    let u = ok_json(&corrflow(&["graph", "update", "--json", "--graph", s(&t), "--add", s(&corpus.join("atlases/b"))]));
    assert_eq!(u["drift"]["vocab_entered"], 0);
    assert_eq!(u["drift"]["vocab_missing"], added["drift"]["vocab_entered"], "{u}");
}

#[test]
fn one_worker_two_workers_and_a_two_process_cluster_give_identical_graphs() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    ingest(&corpus, "a", &bundled(), Some("gene_ids"));
    // The same cells again as a second atlas in 256-cell shards, so workers split the shards.
    let o = corrflow(&[
        "ingest",
        "--json",
        "--config",
        s(&repo().join("configs/tiny.toml")),
        "--atlas",
        "b",
        "--gene-column",
        "gene_ids",
        "--out",
        s(&corpus),
        s(&bundled()),
    ]);
    assert!(ok_json(&o)["shards"].as_u64().unwrap() >= 4);
    let base = tmp.path().join("base");
    ok_json(&corrflow(&[
        "graph",
        "build",
        "--json",
        "--incremental",
        "--max-genes",
        "400",
        "--atlas",
        "a",
        "--corpus",
        s(&corpus),
        "--out",
        s(&base),
    ]));
    let copy = |name: &str| {
        let dst = tmp.path().join(name);
        copy_dir(&base, &dst);
        dst
    };
    let add = s(&corpus.join("atlases/b")).to_string();
    let (w1, w2, cluster) = (copy("w1"), copy("w2"), copy("cluster"));
    ok_json(&corrflow(&["graph", "update", "--json", "--graph", s(&w1), "--add", &add, "-w", "1"]));
    ok_json(&corrflow(&["graph", "update", "--json", "--graph", s(&w2), "--add", &add, "-w", "2"]));
    on_two_processes(tmp.path(), &["graph", "update", "--graph", s(&cluster), "--add", &add]);
    same_files(&w1, &w2);
    same_files(&w1, &cluster);
    let stats = |g: &Path| std::fs::read(g.join("state/stats.bin.zst")).unwrap();
    assert_eq!(stats(&w1), stats(&cluster));

    // The streamed build itself, on 2 workers and on 2 processes.
    let build = ["graph", "build", "--incremental", "--max-genes", "400", "--atlas", "a,b", "--corpus", s(&corpus)];
    let (b1, b2, bc) = (tmp.path().join("b1"), tmp.path().join("b2"), tmp.path().join("bc"));
    ok_json(&corrflow(&[&build[..], &["--json", "--out", s(&b1)]].concat()));
    ok_json(&corrflow(&[&build[..], &["--json", "--out", s(&b2), "-w", "2"]].concat()));
    on_two_processes(tmp.path(), &[&build[..], &["--out", s(&bc)]].concat());
    same_files(&b1, &b2);
    same_files(&b1, &bc);
    assert_eq!(stats(&b1), stats(&b2));
    assert_eq!(stats(&b1), stats(&bc));

    // ρ_local from per-pair histograms (a 2 MB budget), summed across 2 workers and across 2
    // processes: the same graph.
    let small = tmp.path().join("small.toml");
    std::fs::write(&small, "[graph]\nstream_memory_mb = 2\n").unwrap();
    let (h2, hc) = (tmp.path().join("h2"), tmp.path().join("hc"));
    let with_small = [&build[..], &["--config", s(&small)]].concat();
    let summary = ok_json(&corrflow(&[&with_small[..], &["--json", "--out", s(&h2), "-w", "2"]].concat()));
    assert_eq!(summary["local_method"], "histograms", "{summary}");
    on_two_processes(tmp.path(), &[&with_small[..], &["--out", s(&hc)]].concat());
    for f in ["edges.parquet", "genes.parquet"] {
        let read = |g: &Path| std::fs::read(g.join(f)).unwrap();
        assert_eq!(read(&b1), read(&h2), "{f} differs on 2 workers");
        assert_eq!(read(&b1), read(&hc), "{f} differs on 2 processes");
    }
}

/// Runs a graph command as a 2-process timely cluster on loopback; process 0's output must be
/// a JSON summary, process 1 must succeed.
fn on_two_processes(tmp: &Path, args: &[&str]) -> serde_json::Value {
    // Two free loopback ports (bound, read, released) for the two processes.
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port0, port1) = (free(), free());
    let hosts = tmp.join(format!("hosts-{port0}.txt"));
    std::fs::write(&hosts, format!("127.0.0.1:{port0}\n127.0.0.1:{port1}\n")).unwrap();
    let p1 = std::process::Command::new(env!("CARGO_BIN_EXE_corrflow"))
        .args(args)
        .args(["-n", "2", "-p", "1", "-h", s(&hosts)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let p0 = corrflow(&[args, &["--json", "-n", "2", "-p", "0", "-h", s(&hosts)]].concat());
    let p1 = p1.wait_with_output().unwrap();
    assert!(p1.status.success(), "process 1: {}", String::from_utf8_lossy(&p1.stderr));
    ok_json(&p0)
}

#[test]
fn the_streamed_incremental_build_is_the_exact_build_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    ingest(&corpus, "a", &bundled(), Some("gene_ids"));
    let (exact, inc, small) = (tmp.path().join("exact"), tmp.path().join("inc"), tmp.path().join("small"));
    let base = ["graph", "build", "--json", "--n-sub", "0", "--max-genes", "500", "--corpus", s(&corpus)];
    ok_json(&corrflow(&[&base[..], &["--out", s(&exact)]].concat()));
    let summary = ok_json(&corrflow(&[&base[..], &["--incremental", "--out", s(&inc)]].concat()));
    assert!(summary["edges"].as_u64().unwrap() > 1000, "{summary}");
    assert_eq!((summary["local_method"].as_str(), summary["local_rounds"].as_u64()), (Some("postings"), Some(1)));
    same_files(&exact, &inc);
    // A 1 MB budget for ρ_local: the postings do not fit, so per-pair histograms in many
    // rounds (two passes each), and the same graph.
    let config = tmp.path().join("small.toml");
    std::fs::write(&config, "[graph]\nstream_memory_mb = 1\n").unwrap();
    let small_summary =
        ok_json(&corrflow(&[&base[..], &["--incremental", "--config", s(&config), "--out", s(&small)]].concat()));
    assert_eq!(small_summary["local_method"], "histograms", "{small_summary}");
    assert!(small_summary["local_rounds"].as_u64().unwrap() > 1, "{small_summary}");
    for f in ["edges.parquet", "genes.parquet"] {
        assert_eq!(std::fs::read(inc.join(f)).unwrap(), std::fs::read(small.join(f)).unwrap(), "{f} differs");
    }
}

/// A shard of more cells than a worker reads at once (Kang ctrl + stim, 13,999 cells, in one
/// atlas): the streamed build reads it in blocks, and its statistics and ρ_local postings (cell
/// numbers across blocks) still give the exact build byte for byte.
#[test]
fn a_shard_read_in_blocks_gives_the_exact_graph() {
    let (Some(ctrl), Some(stim)) = (data("kang_ctrl.h5ad"), data("kang_stim.h5ad")) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    ok_json(&corrflow(&["ingest", "--json", "--atlas", "kang", "--out", s(&corpus), s(&ctrl), s(&stim)]));
    let manifest = corrflow::corpus::AtlasManifest::load(&corpus.join("atlases/kang")).unwrap();
    assert!(
        manifest.shards[0].cells > corrflow::graph::SHARD_BLOCK_CELLS as u64,
        "the shard must span blocks: {} cells",
        manifest.shards[0].cells
    );
    let (exact, inc) = (tmp.path().join("exact"), tmp.path().join("inc"));
    let base = ["graph", "build", "--json", "--n-sub", "0", "--max-genes", "500", "--corpus", s(&corpus)];
    ok_json(&corrflow(&[&base[..], &["--out", s(&exact)]].concat()));
    ok_json(&corrflow(&[&base[..], &["--incremental", "-w", "2", "--out", s(&inc)]].concat()));
    same_files(&exact, &inc);
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let to = dst.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

/// Edge-set Jaccard of two graphs, over all edges and over the edges between genes both have.
fn jaccard(a: &corrflow::graph::Graph, b: &corrflow::graph::Graph) -> (f64, f64) {
    use std::collections::HashSet;
    let genes = |g: &corrflow::graph::Graph| g.genes.iter().map(|x| x.0).collect::<HashSet<u32>>();
    let common: HashSet<u32> = genes(a).intersection(&genes(b)).copied().collect();
    let j = |keep: &dyn Fn(&(u32, u32)) -> bool| {
        let ea: HashSet<(u32, u32)> = a.edges.iter().map(|e| (e.u, e.v)).filter(|e| keep(e)).collect();
        let eb: HashSet<(u32, u32)> = b.edges.iter().map(|e| (e.u, e.v)).filter(|e| keep(e)).collect();
        ea.intersection(&eb).count() as f64 / ea.union(&eb).count() as f64
    };
    (j(&|_| true), j(&|e| common.contains(&e.0) && common.contains(&e.1)))
}

#[test]
fn kang_interferon_shift_stays_close_to_the_exact_graph() {
    let (Some(ctrl), Some(stim)) = (data("kang_ctrl.h5ad"), data("kang_stim.h5ad")) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    ingest(&corpus, "ctrl", &ctrl, None);
    ingest(&corpus, "stim", &stim, None);
    let exact = tmp.path().join("exact");
    ok_json(&corrflow(&["graph", "build", "--json", "--n-sub", "0", "--corpus", s(&corpus), "--out", s(&exact)]));
    let exact = corrflow::graph::read_graph(&exact).unwrap();
    let frozen_config = tmp.path().join("frozen.toml");
    std::fs::write(&frozen_config, "[graph]\nextend_vocab = false\n").unwrap();
    let build_ctrl = |out: &Path, config: Option<&Path>| {
        let mut args = vec!["graph", "build", "--json", "--incremental", "--atlas", "ctrl", "--corpus", s(&corpus)];
        args.extend(["--out", s(out)]);
        if let Some(c) = config {
            args.extend(["--config", s(c)]);
        }
        ok_json(&corrflow(&args));
    };
    let add_stim = |graph: &Path| {
        let o = corrflow(&["graph", "update", "--json", "--graph", s(graph), "--add", s(&corpus.join("atlases/stim"))]);
        println!("{}", stdout(&o));
        let u = ok_json(&o);
        assert!(u["drift"]["max_ks"].as_f64().unwrap() > 0.1, "an interferon shift moves some genes: {u}");
        assert_eq!(u["rebase_recommended"], true);
        assert!(stdout(&o).contains("rebase recommended"));
        (u, corrflow::graph::read_graph(graph).unwrap())
    };

    // Vocabulary frozen at the rebase (graph.extend_vocab = false): the drift it reports is
    // exactly the genes of the exact graph that the frozen vocabulary lacks; on the genes both
    // graphs have, the frozen rank maps keep the edge set.
    let frozen = tmp.path().join("frozen");
    build_ctrl(&frozen, Some(&frozen_config));
    let (u, graph) = add_stim(&frozen);
    let entering = exact.genes.iter().filter(|g| !graph.genes.iter().any(|x| x.0 == g.0)).count();
    assert!(entering > 0, "stim brings interferon genes into the top genes");
    assert_eq!(u["drift"]["vocab_missing"].as_u64(), Some(entering as u64), "{u}");
    assert_eq!(u["drift"]["vocab_entered"], 0);
    let (all, common) = jaccard(&graph, &exact);
    println!("frozen vocabulary: Jaccard {all:.3} over all edges, {common:.3} over genes in both vocabularies");
    assert!(common >= 0.90, "Jaccard on common genes {common}");

    // The default follows the vocabulary: the entering genes get statistics from the stored
    // shards, the graph has the exact graph's genes, and the whole edge set stays close.
    let (inc, inc0) = (tmp.path().join("inc"), tmp.path().join("inc0"));
    build_ctrl(&inc, None);
    copy_dir(&inc, &inc0);
    let (u, graph) = add_stim(&inc);
    assert_eq!(u["drift"]["vocab_entered"].as_u64(), Some(entering as u64), "{u}");
    assert_eq!(u["drift"]["vocab_missing"], 0);
    assert_eq!(
        graph.genes.iter().map(|g| g.0).collect::<Vec<_>>(),
        exact.genes.iter().map(|g| g.0).collect::<Vec<_>>()
    );
    let (all, _) = jaccard(&graph, &exact);
    println!("vocabulary followed: Jaccard {all:.3} over all edges");
    assert!(all >= 0.90, "Jaccard over all edges {all}");
    // Retracting stim drops the genes that entered with it again: back to ctrl's graph exactly.
    ok_json(&corrflow(&["graph", "update", "--json", "--graph", s(&inc), "--retract", "stim"]));
    same_files(&inc, &inc0);
}
