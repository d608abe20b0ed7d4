//! `kill -9` at seeded random moments of `ingest`, `graph update`, `train` and `embed` (20 each):
//! after the kill nothing incomplete looks published (staging is hidden), and running the same
//! command again ends with exactly the output of an uninterrupted run (byte-identical shards,
//! graph files and embeddings; identical weights) and no temporary or staging file left.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rand::{Rng, SeedableRng};

const KILLS: usize = 20;

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Runs `args` to completion and returns how long it took.
fn timed(args: &[String]) -> Duration {
    let t = Instant::now();
    let o = corrflow(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    t.elapsed()
}

/// Starts `args` and SIGKILLs it after `after` (or lets it finish first).
fn kill_after(args: &[String], after: Duration) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_corrflow"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < after {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
}

/// Temporary or staging files under `dir`: `visible` ones only (what a reader could take for
/// output), or hidden ones too (what a finished command must have cleaned up).
fn leftovers(dir: &Path, hidden_too: bool) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let hidden = name.starts_with('.');
            if (name.contains(".tmp") || name.ends_with(".partial")) && (hidden_too || !hidden) {
                found.push(p.display().to_string());
            }
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    found
}

/// Every file under `dir` (relative path → bytes), skipping hidden staging and lock files.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// For each of [`KILLS`] seeded moments within one uninterrupted run's duration: a fresh copy
/// of the setup, the command killed then, checked for leftovers, run again, and compared.
fn kill_and_resume(
    name: &str,
    seed: u64,
    prepare: &dyn Fn(&Path) -> Vec<String>,
    published: &dyn Fn(&Path) -> PathBuf,
    compare: &dyn Fn(&Path, &Path),
) {
    let reference = tempfile::tempdir().unwrap();
    let args = prepare(reference.path());
    let full = timed(&args);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for k in 0..KILLS {
        let tmp = tempfile::tempdir().unwrap();
        let args = prepare(tmp.path());
        let at = full.mul_f64(rng.random_range(0.0..1.1));
        kill_after(&args, at);
        let left = leftovers(&published(tmp.path()), false);
        assert!(left.is_empty(), "{name}, kill {k} at {at:?}: {left:?}");
        let o = corrflow(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let again = stderr(&o);
        assert!(o.status.success() || again.contains("already"), "{name}, kill {k} at {at:?}: {again}");
        let left = leftovers(&published(tmp.path()), true);
        assert!(left.is_empty(), "{name}, kill {k} at {at:?}, after the rerun: {left:?}");
        compare(reference.path(), tmp.path());
    }
}

fn bundled_atlases(dir: &Path, atlases: &[&str]) -> PathBuf {
    let corpus = dir.join("c");
    for a in atlases {
        ok_json(&corrflow(&[
            "ingest",
            "--json",
            "--atlas",
            a,
            "--gene-column",
            "gene_ids",
            "--out",
            &s(&corpus),
            &s(&bundled()),
        ]));
    }
    corpus
}

#[test]
fn killed_ingests_resume_to_the_same_shards() {
    let prepare = |dir: &Path| -> Vec<String> {
        let cfg = repo().join("configs/tiny.toml");
        [
            "ingest",
            "--config",
            &s(&cfg),
            "--atlas",
            "a",
            "--gene-column",
            "gene_ids",
            "--out",
            &s(&dir.join("c")),
            &s(&bundled()),
        ]
        .map(String::from)
        .to_vec()
    };
    let compare = |a: &Path, b: &Path| assert!(files(&a.join("c")) == files(&b.join("c")), "corpora differ");
    kill_and_resume("ingest", 1, &prepare, &|d| d.join("c"), &compare);
}

#[test]
fn killed_graph_updates_leave_the_old_or_the_new_graph_and_rerun_to_the_same_one() {
    let base = tempfile::tempdir().unwrap();
    let corpus = bundled_atlases(base.path(), &["a", "b"]);
    let graph = base.path().join("g");
    ok_json(&corrflow(&[
        "graph",
        "build",
        "--json",
        "--incremental",
        "--max-genes",
        "300",
        "--atlas",
        "a",
        "--corpus",
        &s(&corpus),
        "--out",
        &s(&graph),
    ]));
    let prepare = |dir: &Path| -> Vec<String> {
        let g = dir.join("g");
        let _ = std::fs::remove_dir_all(&g);
        copy_dir(&graph, &g);
        ["graph", "update", "--graph", &s(&g), "--add", &s(&corpus.join("atlases/b"))].map(String::from).to_vec()
    };
    let compare = |a: &Path, b: &Path| {
        for f in ["edges.parquet", "genes.parquet", "graph.json"] {
            assert!(
                std::fs::read(a.join("g").join(f)).unwrap() == std::fs::read(b.join("g").join(f)).unwrap(),
                "{f} differs"
            );
        }
    };
    kill_and_resume("graph update", 2, &prepare, &|d| d.join("g"), &compare);
}

#[test]
fn killed_training_resumes_to_the_same_weights() {
    let base = tempfile::tempdir().unwrap();
    let corpus = bundled_atlases(base.path(), &["pbmc"]);
    // Cells cut to 64 genes, and 20 steps with a checkpoint and an evaluation every 10 (the
    // preset: 40 and 20): the 20 kills and reruns cost a sixth of the preset's, and still land
    // before the first checkpoint, between the two and after the run.
    let every_10 =
        [SHORT_CELLS, ("checkpoint_every = 20", "checkpoint_every = 10"), ("eval_every = 20", "eval_every = 10")];
    let cfg = preset_with_lines(base.path(), "tiny.toml", &every_10, "tiny-64-every-10.toml");
    let prepare = |dir: &Path| -> Vec<String> {
        let args =
            ["train", "--config", &s(&cfg), "--corpus", &s(&corpus), "--strategy", "random", "--max-steps", "20"];
        [&args[..], &["--out", &s(&dir.join("run"))]].concat().into_iter().map(String::from).collect()
    };
    // The steps logged: each once, as in the uninterrupted run (a resumed run rewrites its lines).
    let steps = |run: &Path| -> Vec<u64> {
        let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["step"].as_u64().unwrap()).collect()
    };
    let compare = |a: &Path, b: &Path| {
        assert!(weights(&a.join("run")) == weights(&b.join("run")), "weights differ");
        assert_eq!(steps(&a.join("run")), steps(&b.join("run")), "metrics.jsonl steps differ");
    };
    kill_and_resume("train", 3, &prepare, &|d| d.join("run"), &compare);
}

#[test]
fn killed_embeds_leave_no_partial_output_and_rerun_to_the_same_file() {
    // A model trained on cells cut to their 64 top genes: it embeds the bundled cells in a
    // fraction of the time of the preset's 256-gene cells (the ONNX forward is nearly all of an
    // embed), and the kills need a run with its phases, not long sequences.
    let base = tempfile::tempdir().unwrap();
    let (_, _, model) = exported_model(base.path(), &short_cells_tiny_config(base.path()));
    let prepare = |dir: &Path| -> Vec<String> {
        std::fs::create_dir_all(dir.join("out")).unwrap();
        [
            "embed",
            "--model",
            &s(&model),
            "--gene-column",
            "gene_ids",
            "--input",
            &s(&bundled()),
            "--out",
            &s(&dir.join("out/e.parquet")),
        ]
        .map(String::from)
        .to_vec()
    };
    let compare = |a: &Path, b: &Path| {
        assert!(std::fs::read(a.join("out/e.parquet")).unwrap() == std::fs::read(b.join("out/e.parquet")).unwrap());
    };
    kill_and_resume("embed", 4, &prepare, &|d| d.join("out"), &compare);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}
