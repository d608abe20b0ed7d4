//! Concurrent writers: several `graph update`s on one graph, ingests of one atlas and trainings
//! into one run folder, started at once. Each is either applied or refused at once with the
//! lock message naming the holder — never lost — and the result equals applying the accepted
//! ones one after another.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Starts `corrflow ARGS` for each argument list at once and waits for all of them.
fn all_at_once(runs: &[Vec<String>]) -> Vec<Output> {
    let children: Vec<_> = runs
        .iter()
        .map(|args| {
            Command::new(env!("CARGO_BIN_EXE_corrflow"))
                .current_dir(repo())
                .args(args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
}

/// Whether a run succeeded or was refused by the lock (anything else fails the test).
fn applied(o: &Output) -> bool {
    if o.status.success() {
        return true;
    }
    let e = stderr(o);
    assert!(e.contains("is being changed by pid") && e.contains("corrflow"), "neither applied nor refused: {e}");
    false
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn concurrent_graph_updates_are_applied_or_refused_never_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    let bundled = bundled();
    for atlas in ["a", "b", "c", "d", "e"] {
        ok_json(&corrflow(&[
            "ingest",
            "--json",
            "--atlas",
            atlas,
            "--gene-column",
            "gene_ids",
            "--out",
            s(&corpus),
            s(&bundled),
        ]));
    }
    let build = |out: &Path| {
        let args = ["graph", "build", "--json", "--incremental", "--max-genes", "300", "--atlas", "a"];
        ok_json(&corrflow(&[&args[..], &["--corpus", s(&corpus), "--out", s(out)]].concat()));
    };
    let (g, sequential) = (tmp.path().join("g"), tmp.path().join("seq"));
    build(&g);
    let adds: Vec<&str> = vec!["b", "c", "d", "e"];
    let runs: Vec<Vec<String>> = adds
        .iter()
        .map(|a| strings(&["graph", "update", "--json", "--graph", s(&g), "--add", s(&corpus.join("atlases").join(a))]))
        .collect();
    let outcomes = all_at_once(&runs);
    let accepted: Vec<&str> = adds.iter().zip(&outcomes).filter(|(_, o)| applied(o)).map(|(a, _)| *a).collect();
    assert!(!accepted.is_empty());
    // The graph holds exactly the accepted atlases, and equals applying them one by one.
    let info = corrflow::graph::GraphState::load_info(&g).expect("state readable after the race");
    let mut included: Vec<String> = info.atlases.iter().map(|a| a.name.clone()).collect();
    included.sort();
    let mut expected: Vec<String> = ["a"].iter().chain(&accepted).map(|a| a.to_string()).collect();
    expected.sort();
    assert_eq!(included, expected);
    build(&sequential);
    for a in &accepted {
        ok_json(&corrflow(&[
            "graph",
            "update",
            "--json",
            "--graph",
            s(&sequential),
            "--add",
            s(&corpus.join("atlases").join(a)),
        ]));
    }
    for f in ["edges.parquet", "genes.parquet"] {
        assert_eq!(std::fs::read(g.join(f)).unwrap(), std::fs::read(sequential.join(f)).unwrap(), "{f}");
    }
    // No lock file is left behind.
    assert!(!tmp.path().join(".g.lock").exists());
}

#[test]
fn concurrent_ingests_of_one_atlas_publish_it_once() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    let bundled = bundled();
    let args =
        strings(&["ingest", "--json", "--atlas", "x", "--gene-column", "gene_ids", "--out", s(&corpus), s(&bundled)]);
    let outcomes = all_at_once(&[args.clone(), args.clone(), args.clone()]);
    // Each run published the atlas, was refused by the lock, or (started after the winner
    // finished) found the atlas already there.
    let mut published = 0;
    for o in &outcomes {
        if o.status.success() {
            published += 1;
        } else {
            let e = stderr(o);
            assert!(e.contains("is being changed by pid") || e.contains("already exists"), "{e}");
        }
    }
    assert_eq!(published, 1, "exactly one ingest publishes the atlas");
    let alone = tmp.path().join("alone");
    ok_json(&corrflow(&[
        "ingest",
        "--json",
        "--atlas",
        "x",
        "--gene-column",
        "gene_ids",
        "--out",
        s(&alone),
        s(&bundled),
    ]));
    assert_eq!(atlas_tokens(&corpus, "x"), atlas_tokens(&alone, "x"));
    let leftovers: Vec<_> =
        std::fs::read_dir(corpus.join("atlases")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("x")], "no staging or lock file remains");
}

#[test]
fn a_second_training_into_a_running_run_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let run = tmp.path().join("run");
    let tiny = short_cells_tiny_config(tmp.path());
    let train_into = |out: &Path| {
        let args = ["train", "--json", "--config", s(&tiny), "--corpus", s(&corpus), "--graph", s(&graph)];
        strings(&[&args[..], &["--out", s(out)]].concat())
    };
    let outcomes = all_at_once(&[train_into(&run), train_into(&run)]);
    let ok: Vec<bool> = outcomes.iter().map(applied).collect();
    assert!(ok.iter().any(|&x| x));
    // Whatever the interleaving, the run ends as an uninterrupted one does.
    let alone = tmp.path().join("alone");
    assert!(all_at_once(&[train_into(&alone)])[0].status.success());
    assert_eq!(metrics_losses(&run), metrics_losses(&alone));
    assert!(run.join("checkpoints/step-00000040/model.bin").is_file());
    assert!(!run.join(".corrflow.lock").exists());
}

/// The losses of a run's metrics, by step.
fn metrics_losses(run: &Path) -> Vec<(u64, String)> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["step"].as_u64().unwrap(), v["loss"].to_string())
        })
        .collect()
}
