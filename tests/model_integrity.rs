//! Integrity of models: one flipped bit at twelve places across an exported `model.onnx` (its
//! sidecar records the file's sha256) and across a checkpoint's `state.json` (its last field is
//! the sha256 of the bytes before it) is refused by every reader (`embed`, `annotate`, `perturb`,
//! `serve` startup; `export onnx` and a resumed `train` from the checkpoint) with exit status 1,
//! a message naming the file and no panic. Before, 11 of 12 flips in model.onnx and 3 of 12 in
//! state.json were accepted (a dropout of 0.02 read as 0.03 and carried into the export). The
//! Python package's readers are checked in python/tests/test_embed.py.

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const FLIPS: usize = 12;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `FLIPS` places spread over a file of `len` bytes, its first and last byte included.
fn places(len: usize) -> Vec<usize> {
    (0..FLIPS).map(|k| k * (len - 1) / (FLIPS - 1)).collect()
}

/// Flips the lowest bit of byte `at` of `path` (the smallest change: '2' becomes '3'); a second
/// call restores it.
fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The command failed with exit status 1, without a panic, naming `file` and its checksum.
fn refused(o: &Output, file: &Path, what: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{what} should exit 1: {e}");
    assert!(!e.contains("panicked"), "{what}: {e}");
    assert!(
        e.contains(s(file)) && e.contains("checksum"),
        "{what} should name {} and its checksum: {e}",
        file.display()
    );
}

/// `corrflow serve` on a free port until it exits (60 s at most): a model that fails to load
/// stops the server.
fn serve_until_exit(model: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_corrflow"))
        .args(["serve", "--model", s(model), "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("serve still runs 60 s after starting with a damaged model: {:?}", child.wait_with_output());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `embed`, `annotate` and `perturb` with the model source `source` (`--model FILE` or
/// `--checkpoint DIR`), writing into `out`.
fn cell_commands<'a>(source: [&'a str; 2], out: &'a Path) -> Vec<(&'static str, Vec<String>)> {
    let input = bundled();
    let common = [source[0], source[1], "--input", s(&input), "--gene-column", "gene_ids"];
    let with = |cmd: &'static str, extra: &[&str]| {
        let args: Vec<String> = [&[cmd][..], &common, extra].concat().iter().map(|a| a.to_string()).collect();
        (cmd, args)
    };
    let (e, a, p) = (out.join("e.parquet"), out.join("a.parquet"), out.join("p.parquet"));
    vec![
        with("embed", &["--out", s(&e)]),
        with("annotate", &["--out", s(&a)]),
        with("perturb", &["--delete", "B2M", "--random-sets", "2", "--out", s(&p)]),
    ]
}

/// Runs `commands`, each of which must be refused naming `file`, and writes nothing in `out`.
fn all_refuse(commands: &[(&'static str, Vec<String>)], file: &Path, out: &Path, at: usize) {
    for (what, args) in commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&corrflow(&args), file, &format!("{what} (byte {at} flipped)"));
    }
    assert_eq!(std::fs::read_dir(out).unwrap().count(), 0, "nothing may be written (byte {at} flipped)");
}

#[test]
fn every_reader_refuses_an_exported_model_with_any_flipped_byte() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("m/model.onnx");
    std::fs::create_dir_all(model.parent().unwrap()).unwrap();
    std::fs::copy(&f.model, &model).unwrap();
    copy_dir(&corrflow::model_meta::vocab_sidecar(&f.model), &corrflow::model_meta::vocab_sidecar(&model));
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let commands = cell_commands(["--model", s(&model)], &out);
    let len = std::fs::metadata(&model).unwrap().len() as usize;
    for at in places(len) {
        flip(&model, at);
        all_refuse(&commands, &model, &out, at);
        refused(&serve_until_exit(&model), &model, &format!("serve (byte {at} flipped)"));
        flip(&model, at);
    }
    // The copy itself is sound: restored, it embeds.
    let embed: Vec<&str> = commands[0].1.iter().map(String::as_str).collect();
    ok_json(&corrflow(&[&embed[..], &["--json"]].concat()));
}

#[test]
fn every_reader_refuses_a_checkpoint_whose_state_has_any_flipped_byte() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    copy_dir(&f.run, &run);
    let state = corrflow::model::checkpoint::latest(&run).unwrap().join("state.json");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let mut commands = cell_commands(["--checkpoint", s(&run)], &out);
    let exported = out.join("m.onnx");
    let export = ["export", "onnx", "--checkpoint", s(&run), "--out", s(&exported)];
    commands.push(("export onnx", export.iter().map(|a| a.to_string()).collect()));
    let (tiny, graph) = (repo().join("configs/tiny.toml"), f.corpus.parent().unwrap().join("g"));
    let train = ["train", "--config", s(&tiny), "--corpus", s(&f.corpus), "--graph", s(&graph), "--out", s(&run)];
    commands
        .push(("train (resume)", [&train[..], &["--max-steps", "9"]].concat().iter().map(|a| a.to_string()).collect()));
    // The flip that changed a dropout of 0.02 into 0.03, and eleven more across the file.
    let text = std::fs::read_to_string(&state).unwrap();
    let dropout = text.find("\"dropout\": 0.02").expect("tiny.toml's dropout") + "\"dropout\": 0.0".len();
    let mut at = places(text.len());
    at[FLIPS / 2] = dropout;
    for at in at {
        flip(&state, at);
        all_refuse(&commands, &state, &out, at);
        flip(&state, at);
    }
    ok_json(&corrflow(&["export", "onnx", "--json", "--checkpoint", s(&run), "--out", s(&exported)]));
}
