//! Every reader of a file with a recorded checksum checks it: a flipped byte in a shard stops
//! `export hf` (as it stops graph build, mask audit and train), and a flipped byte in a graph's
//! `edges.parquet` stops every command reading the graph, naming the file and the problem.

use crate::common;

use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Flips one byte in the middle of `path`.
fn flip_a_byte(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

fn fails_with(o: &std::process::Output, needles: &[&str]) {
    let e = stderr(o);
    assert!(!o.status.success(), "should fail: {e}");
    assert!(!e.contains("panicked"), "{e}");
    for n in needles {
        assert!(e.contains(n), "'{n}' missing from: {e}");
    }
}

#[test]
fn a_corrupt_shard_stops_the_hugging_face_export_and_leaves_no_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, _) = bundled_corpus_and_graph(tmp.path());
    flip_a_byte(&corpus.join("atlases/pbmc/shard-00000.parquet"));
    let out = tmp.path().join("hf");
    let o = corrflow(&["export", "hf", "--corpus", s(&corpus), "--out", s(&out)]);
    fails_with(&o, &["shard-00000.parquet", "checksum"]);
    assert!(!out.exists(), "no dataset may appear");
}

#[test]
fn a_corrupt_edges_file_stops_every_reader_of_the_graph() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    flip_a_byte(&graph.join("edges.parquet"));
    let needles = ["edges.parquet", "content hash"];
    fails_with(&corrflow(&["graph", "show", s(&graph)]), &needles);
    fails_with(&corrflow(&["mask", "audit", "--corpus", s(&corpus), "--graph", s(&graph)]), &needles);
    let tiny = repo().join("configs/tiny.toml");
    let run = tmp.path().join("run");
    let o = corrflow(&["train", "--config", s(&tiny), "--corpus", s(&corpus), "--graph", s(&graph), "--out", s(&run)]);
    fails_with(&o, &needles);
    assert!(!run.join("checkpoints").exists(), "nothing trained on a corrupt graph");
}

#[test]
fn weights_of_another_shape_under_a_valid_checksum_are_refused_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let tiny = std::fs::read_to_string(repo().join("configs/tiny.toml")).unwrap();
    let narrow = tmp.path().join("narrow.toml");
    std::fs::write(&narrow, tiny.replace("hidden = 64", "hidden = 32").replace("ffn = 128", "ffn = 64")).unwrap();
    let train = |config: &Path, out: &Path| {
        let args = ["train", "--json", "--config", s(config), "--corpus", s(&corpus), "--graph", s(&graph)];
        ok_json(&corrflow(&[&args[..], &["--max-steps", "2", "--out", s(out)]].concat()));
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    train(&repo().join("configs/tiny.toml"), &a);
    train(&narrow, &b);
    // b's weights in a's checkpoint, with the checksums updated (state.json's own too) so that
    // only the shapes differ.
    let (ca, cb) = (a.join("checkpoints/step-00000002"), b.join("checkpoints/step-00000002"));
    std::fs::copy(cb.join("model.bin"), ca.join("model.bin")).unwrap();
    use corrflow::model::checkpoint::{write_state, CheckpointState};
    let read = |dir: &Path| -> CheckpointState {
        serde_json::from_str(&std::fs::read_to_string(dir.join("state.json")).unwrap()).unwrap()
    };
    let mut state = read(&ca);
    state.model_sha256 = read(&cb).model_sha256;
    write_state(&ca.join("state.json"), &state).unwrap();
    let out = tmp.path().join("emb.parquet");
    let o = corrflow(&[
        "embed",
        "--checkpoint",
        s(&a),
        "--input",
        s(&bundled()),
        "--gene-column",
        "gene_ids",
        "--out",
        s(&out),
    ]);
    fails_with(&o, &["model.bin", "another shape"]);
    assert!(!out.exists());
    let o = corrflow(&["export", "onnx", "--checkpoint", s(&a), "--out", s(&tmp.path().join("m.onnx"))]);
    fails_with(&o, &["model.bin", "another shape"]);
}
