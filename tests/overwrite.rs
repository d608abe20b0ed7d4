//! No command writes over one of its inputs or one output over another (issue 43, item 1): the
//! same file by any spelling (the path itself, `./`, `..`, a symlink, a hard link) is refused
//! before any work, with exit code 1, a message naming both flags and the path, and the input's
//! bytes unchanged.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;

/// A scratch directory with stand-ins for each kind of input (the check runs before anything is
/// read, so their contents do not matter, only that they exist and must not change).
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let s = Self { dir: tempfile::tempdir().unwrap() };
        std::fs::write(s.p("cells.h5ad"), b"the user's cells: must survive").unwrap();
        std::fs::write(s.p("map.tsv"), b"label\tcl_id\n").unwrap();
        std::fs::write(s.p("onto.json"), b"{}").unwrap();
        std::fs::write(s.p("labels.csv"), b"ensembl_id,a,b\n").unwrap();
        for d in ["ckpt", "corpus", "graph", "hf-model", "run"] {
            std::fs::create_dir(s.p(d)).unwrap();
            std::fs::write(s.p(d).join("keep.json"), d.as_bytes()).unwrap();
        }
        std::os::unix::fs::symlink(s.p("cells.h5ad"), s.p("link.h5ad")).unwrap();
        std::fs::hard_link(s.p("cells.h5ad"), s.p("hard.h5ad")).unwrap();
        s
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `name` under the scratch directory, as a string (names may hold `./` and `..`).
    fn s(&self, name: &str) -> String {
        self.p(name).display().to_string()
    }

    /// Every file's bytes, to compare after a refused command.
    fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        let mut stack = vec![self.dir.path().to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    files.push((p.clone(), std::fs::read(&p).unwrap()));
                }
            }
        }
        files.sort();
        files
    }
}

/// Runs `args` (names starting with `@` are scratch paths) and expects a refusal saying each
/// of `needles`, with nothing in the scratch directory changed.
fn refused(s: &Scratch, args: &[&str], needles: &[&str]) {
    let args: Vec<String> =
        args.iter().map(|a| a.strip_prefix('@').map_or_else(|| a.to_string(), |n| s.s(n))).collect();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let before = s.snapshot();
    let o = corrflow(&argv);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{argv:?} should be refused: {err}");
    assert!(!err.contains("panicked"), "{argv:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{argv:?}: the error does not say '{n}': {err}");
    }
    assert!(before == s.snapshot(), "{argv:?} changed the scratch files");
}

const SAME_INPUT: &str = "refusing to write over an input";

#[test]
fn embed_annotate_and_perturb_refuse_to_write_over_their_input() {
    let s = Scratch::new();
    let model = ["--checkpoint", "@ckpt", "--input", "@cells.h5ad"];
    for out in ["cells.h5ad", "./cells.h5ad", "link.h5ad", "hard.h5ad", "ckpt/../cells.h5ad"] {
        let o = format!("@{out}");
        let args = [&["embed"][..], &model, &["--out", &o]].concat();
        refused(&s, &args, &["--out and --input are the same file", "cells.h5ad", SAME_INPUT]);
    }
    let args = [&["embed"][..], &model, &["--out", "@e.parquet", "--h5ad-out", "@hard.h5ad"]].concat();
    refused(&s, &args, &["--h5ad-out and --input are the same file", "hard.h5ad"]);
    let args = [&["embed", "--genes"][..], &model, &["--out", "@link.h5ad"]].concat();
    refused(&s, &args, &["--out and --input are the same file"]);
    let args = [&["embed"][..], &model, &["--out", "@ckpt"]].concat();
    refused(&s, &args, &["--out and --checkpoint are the same directory"]);
    let args = [&["embed"][..], &model, &["--out", "@a.parquet", "--h5ad-out", "@./a.parquet"]].concat();
    refused(&s, &args, &["--h5ad-out and --out are the same file", "each output needs a path of its own"]);

    let args = [&["annotate"][..], &model, &["--out", "@cells.h5ad"]].concat();
    refused(&s, &args, &["--out and --input are the same file", SAME_INPUT]);
    let args = [&["annotate"][..], &model, &["--out", "@a.parquet", "--h5ad-out", "@link.h5ad"]].concat();
    refused(&s, &args, &["--h5ad-out and --input are the same file"]);
    let args =
        [&["annotate"][..], &model, &["--truth", "cell_type", "--truth-map", "@map.tsv", "--out", "@map.tsv"]].concat();
    refused(&s, &args, &["--out and --truth-map are the same file"]);

    let args = [&["perturb"][..], &model, &["--delete", "B2M", "--out", "@cells.h5ad"]].concat();
    refused(&s, &args, &["--out and --input are the same file", SAME_INPUT]);
    let outs = ["--delete", "B2M", "--out", "@s.parquet", "--genes-out", "@./s.parquet"];
    let args = [&["perturb"][..], &model, &outs].concat();
    refused(&s, &args, &["--genes-out and --out are the same file", "s.parquet"]);
    let args = [&["perturb"][..], &model, &["--delete", "B2M", "--module", "@graph", "--out", "@graph"]].concat();
    refused(&s, &args, &["--out and --module are the same directory"]);
}

#[test]
fn corpus_vocabulary_and_export_commands_refuse_to_write_over_their_input() {
    let s = Scratch::new();
    refused(&s, &["ingest", "--atlas", "a", "--out", "@cells.h5ad", "@cells.h5ad"], &["--out and FILE are the same"]);
    refused(&s, &["ingest", "--atlas", "a", "--out", "@hard.h5ad", "@cells.h5ad"], &["--out and FILE are the same"]);
    refused(
        &s,
        &["ingest", "--atlas", "a", "--out", "@c2", "--cell-type-map", "@map.tsv", "--hf", "@.", "@cells.h5ad"],
        &["--hf", "would replace the directory that holds FILE"],
    );
    refused(
        &s,
        &["ingest", "--atlas", "a", "--out", "@map.tsv", "@cells.h5ad"],
        &["--out", "existing file", "directory to write into"],
    );
    refused(&s, &["vocab", "build", "--out", "@.", "@cells.h5ad"], &["would replace the directory that holds FILE"]);
    refused(&s, &["vocab", "build", "--out", "@hard.h5ad", "@cells.h5ad"], &["--out and FILE are the same file"]);
    refused(&s, &["export", "onnx", "--checkpoint", "@ckpt", "--out", "@ckpt/../ckpt"], &["--out and --checkpoint"]);
    refused(&s, &["export", "hf", "--corpus", "@corpus", "--out", "@corpus"], &["--out and --corpus are the same"]);
    refused(&s, &["export", "hf", "--corpus", "@corpus", "--out", "@."], &["would replace the directory that holds"]);
    let args = ["import", "hf", "--model", "@hf-model", "--out", "@hf-model/."];
    refused(&s, &args, &["--out and --model are the same directory"]);
    let args = ["ontology", "map", "--ontology", "@onto.json", "--labels", "@cells.h5ad", "--column", "c"];
    refused(&s, &[&args[..], &["--out", "@link.h5ad"]].concat(), &["--out and --labels are the same file"]);
    refused(&s, &[&args[..], &["--out", "@onto.json"]].concat(), &["--out and --ontology are the same file"]);
}

#[test]
fn graph_mask_and_training_commands_refuse_to_write_over_their_input() {
    let s = Scratch::new();
    refused(&s, &["graph", "build", "--corpus", "@corpus", "--out", "@corpus"], &["--out and --corpus are the same"]);
    refused(
        &s,
        &["graph", "build", "--corpus", "@corpus", "--out", "@."],
        &["would replace the directory that holds --corpus"],
    );
    refused(&s, &["graph", "update", "--graph", "@graph", "--add", "@graph"], &["--graph and --add are the same"]);
    let audit = ["mask", "audit", "--corpus", "@corpus", "--graph", "@graph"];
    refused(&s, &[&audit[..], &["--dump", "@./graph"]].concat(), &["--dump and --graph are the same"]);
    refused(
        &s,
        &[&audit[..], &["--dump", "@d.parquet", "--plot", "@./d.parquet"]].concat(),
        &["--plot and --dump are the same file"],
    );
    refused(&s, &["train", "--corpus", "@corpus", "--out", "@corpus"], &["--out and --corpus are the same directory"]);
    refused(&s, &["train", "--corpus", "@corpus", "--out", "@run", "--dump-batches", "@corpus"], &["--dump-batches"]);
    refused(
        &s,
        &["train", "--corpus", "@corpus", "--out", "@map.tsv"],
        &["--out", "map.tsv", "existing file", "directory to write into"],
    );
    let ft = ["finetune", "--checkpoint", "@ckpt", "--corpus", "@corpus", "--label", "cell_type"];
    refused(&s, &[&ft[..], &["--out", "@ckpt"]].concat(), &["--out and --checkpoint are the same directory"]);
    refused(&s, &[&ft[..], &["--out", "@cells.h5ad"]].concat(), &["--out", "existing file"]);
    let gene = ["finetune", "--checkpoint", "@ckpt", "--corpus", "@corpus", "--gene-labels", "@labels.csv"];
    refused(&s, &[&gene[..], &["--classes", "a,b", "--out", "@labels.csv"]].concat(), &["--out and --gene-labels"]);
}

/// A path that does not exist yet is compared by its directory: two spellings of one new file
/// are still one file.
#[test]
fn two_spellings_of_a_new_output_are_one_file() {
    let s = Scratch::new();
    let model = ["--checkpoint", "@ckpt", "--input", "@cells.h5ad", "--delete", "B2M"];
    let outs = ["--out", "@run/../new.parquet", "--genes-out", "@corpus/../new.parquet"];
    refused(&s, &[&["perturb"][..], &model, &outs].concat(), &["--genes-out and --out are the same file"]);
    assert!(!Path::new(&s.s("new.parquet")).exists());
}

/// `--config` is an input of every command, and an existing file inside an input directory is
/// part of that input (a checkpoint's model.bin, a corpus' shard).
#[test]
fn the_config_and_files_inside_input_directories_are_never_written_over() {
    let s = Scratch::new();
    std::fs::write(s.p("cfg.toml"), b"# the user's settings: must survive\n").unwrap();
    let model = ["--config", "@cfg.toml", "--checkpoint", "@ckpt", "--input", "@cells.h5ad"];
    refused(&s, &[&["embed"][..], &model, &["--out", "@cfg.toml"]].concat(), &["--out and --config are the same file"]);
    let args =
        [&["perturb"][..], &model, &["--delete", "B2M", "--out", "@e.parquet", "--genes-out", "@./cfg.toml"]].concat();
    refused(&s, &args, &["--genes-out and --config are the same file"]);
    let args =
        ["--config", "@cfg.toml", "train", "--corpus", "@corpus", "--out", "@run", "--dump-batches", "@cfg.toml"];
    refused(&s, &args, &["--dump-batches and --config are the same file"]);

    const INSIDE: &str = "refusing to write over part of an input";
    let model = ["--checkpoint", "@ckpt", "--input", "@cells.h5ad"];
    let args = [&["embed"][..], &model, &["--out", "@ckpt/keep.json"]].concat();
    refused(&s, &args, &["--out", "inside the directory of --checkpoint", INSIDE]);
    let args = [&["annotate"][..], &model, &["--out", "@ckpt/./keep.json"]].concat();
    refused(&s, &args, &["inside the directory of --checkpoint", INSIDE]);
    refused(&s, &["export", "onnx", "--checkpoint", "@ckpt", "--out", "@ckpt/keep.json"], &[INSIDE]);
    let args = ["train", "--corpus", "@corpus", "--out", "@run", "--dump-batches", "@corpus/keep.json"];
    refused(&s, &args, &["--dump-batches", "inside the directory of --corpus", INSIDE]);
}
