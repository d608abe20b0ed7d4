//! The hostile-user suite of the commands added since the first campaign (issue 43, item 8):
//! finetune, annotate, perturb, embed, import hf, ontology, eval probe / genes / cells, export onnx
//! and serve, generated as (command, input, expected outcome) cases like `tests/malformed.rs`:
//! - every numeric flag with values that are not numbers (`abc`, empty, `nan`, `inf`) and with
//!   values just beyond its documented bound (docs/configuration.md);
//! - every input flag pointed at a missing file, an empty file, a directory and a text file;
//! - flags with a closed set of values given one outside it.
//!
//! Each case must be refused: exit status 1 or 2 (never a panic, an abort or a signal), a message
//! naming the flag or the file, nothing left at the output path, and the inputs unchanged.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// The valid inputs every case starts from (only the flag under test is broken).
struct Inputs {
    dir: tempfile::TempDir,
    cells: String,
    run: String,
    onnx: String,
    corpus: String,
    embeddings: String,
    labels: String,
    hf: String,
}

impl Inputs {
    /// None without the test venv (the labelled cells are made by tests/python/make_fixtures.py).
    fn new() -> Option<Self> {
        let cells = fixtures()?.join("good/csr.h5ad");
        let m = tiny_model();
        let dir = tempfile::tempdir().unwrap();
        let s = |p: &Path| p.display().to_string();
        let embeddings = dir.path().join("emb.parquet");
        let corpus = dir.path().join("labelled");
        let cells = s(&cells);
        ok_json(&corrflow(&[
            "ingest",
            "--json",
            "--atlas",
            "cells",
            "--gene-column",
            "gene_ids",
            "--obs-columns",
            "cell_type",
            "--out",
            &s(&corpus),
            &cells,
        ]));
        ok_json(&corrflow(&[
            "embed",
            "--json",
            "--checkpoint",
            &s(&m.run),
            "--input",
            &cells,
            "--gene-column",
            "gene_ids",
            "--obs-columns",
            "cell_type",
            "--out",
            &s(&embeddings),
        ]));
        let labels = dir.path().join("labels.csv");
        std::fs::write(
            &labels,
            "ensembl_id,dosage_sensitive,dosage_insensitive\nENSG00000187634,1,0\nENSG00000188976,0,1\n",
        )
        .unwrap();
        // Stand-ins for broken inputs.
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        std::fs::write(dir.path().join("text.h5ad"), b"not a file of cells\n").unwrap();
        std::fs::create_dir(dir.path().join("a-directory")).unwrap();
        Some(Inputs {
            cells,
            run: s(&m.run),
            onnx: s(&m.model),
            corpus: s(&corpus),
            embeddings: s(&embeddings),
            labels: s(&labels),
            hf: s(&repo().join("tests/fixtures/hf")),
            dir,
        })
    }

    fn p(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// One command with valid arguments; `{out}` is replaced by a fresh output path per case.
struct Base {
    name: &'static str,
    args: Vec<String>,
    /// Numeric flags: (flag, values beyond its bound).
    numbers: Vec<(&'static str, Vec<&'static str>)>,
    /// Input flags (their value is replaced by a broken path).
    inputs: Vec<&'static str>,
    /// Flags with a closed set of values.
    choices: Vec<&'static str>,
}

fn bases(i: &Inputs) -> Vec<Base> {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let read = ["--gene-column", "gene_ids"];
    vec![
        Base {
            name: "vocab build",
            args: [v(&["vocab", "build", "--out", "{out}"]), v(&read), v(&[&i.cells])].concat(),
            // Below 1e-6 a bucket key of a large value would not fit an i32.
            numbers: vec![("--alpha", vec!["0", "-1", "1e-7", "0.5"])],
            inputs: vec![],
            choices: vec![],
        },
        Base {
            name: "embed",
            args: [v(&["embed", "--checkpoint", &i.run, "--input", &i.cells]), v(&read), v(&["--out", "{out}"])]
                .concat(),
            numbers: vec![
                ("--threads", vec!["-1", "100000"]),
                ("--max-batch-cells", vec!["0", "-1", "2000000"]),
                ("--token-budget", vec!["0", "-5"]),
            ],
            inputs: vec!["--checkpoint", "--input"],
            choices: vec!["--pooling", "--ort-device"],
        },
        Base {
            name: "embed (onnx)",
            args: [v(&["embed", "--model", &i.onnx, "--input", &i.cells]), v(&read), v(&["--out", "{out}"])].concat(),
            numbers: vec![("--threads", vec!["100000"]), ("--max-batch-cells", vec!["0"])],
            inputs: vec!["--model", "--input"],
            choices: vec![],
        },
        Base {
            name: "perturb",
            args: [
                v(&["perturb", "--checkpoint", &i.run, "--input", &i.cells]),
                v(&read),
                v(&["--delete", "ENSG00000187634", "--out", "{out}"]),
            ]
            .concat(),
            numbers: vec![
                ("--random-sets", vec!["-1", "10001", "1000000000"]),
                ("--threads", vec!["-1", "100000"]),
                ("--max-batch-cells", vec!["0"]),
                ("--seed", vec!["-1"]),
            ],
            inputs: vec!["--checkpoint", "--input"],
            choices: vec!["--ort-device"],
        },
        Base {
            name: "annotate",
            args: [v(&["annotate", "--checkpoint", &i.run, "--input", &i.cells]), v(&read), v(&["--out", "{out}"])]
                .concat(),
            numbers: vec![
                ("--threshold", vec!["-0.1", "1.5", "2"]),
                ("--threads", vec!["100000"]),
                ("--max-batch-cells", vec!["0"]),
            ],
            // Not --input: the tiny checkpoint has no cell-type head, which annotate names first.
            inputs: vec!["--checkpoint"],
            choices: vec!["--ort-device"],
        },
        Base {
            name: "finetune",
            args: v(&[
                "finetune",
                "--checkpoint",
                &i.run,
                "--corpus",
                &i.corpus,
                "--label",
                "cell_type",
                "--out",
                "{out}",
            ]),
            numbers: vec![
                ("--lr", vec!["0", "-1", "-0.001"]),
                ("--epochs", vec!["0", "-1", "1000001"]),
                ("--patience", vec!["0", "-1"]),
                ("--batch-size", vec!["0", "-1", "2000000"]),
                ("--validation-fraction", vec!["0", "-0.1", "0.5", "1"]),
                ("--test-fraction", vec!["-0.1", "0.5", "1"]),
                ("--max-len", vec!["-1", "100000"]),
                ("--freeze-layers", vec!["-1"]),
            ],
            inputs: vec!["--checkpoint", "--corpus"],
            choices: vec!["--pooling"],
        },
        Base {
            name: "eval probe",
            args: v(&["eval", "probe", "--embeddings", &i.embeddings, "--label", "cell_type"]),
            numbers: vec![
                ("--alpha", vec!["0", "-1", "1e308"]),
                ("--neighbours", vec!["0", "-1"]),
                ("--test-fraction", vec!["0", "1", "-0.5"]),
                ("--rare-fraction", vec!["0", "1.5"]),
                ("--folds", vec!["-1"]),
            ],
            inputs: vec!["--embeddings"],
            choices: vec![],
        },
        Base {
            name: "eval genes",
            args: v(&["eval", "genes", "--embeddings", &i.embeddings, "--labels", &i.labels]),
            numbers: vec![
                ("--alpha", vec!["0", "-1", "1e308"]),
                ("--neighbours", vec!["0", "-1"]),
                ("--folds", vec!["-1"]),
            ],
            inputs: vec!["--embeddings", "--labels"],
            choices: vec![],
        },
        Base {
            name: "eval cells",
            args: [
                v(&["eval", "cells", "--embeddings", &i.embeddings, "--input", &i.cells]),
                v(&read),
                v(&["--label", "cell_type"]),
            ]
            .concat(),
            numbers: vec![
                ("--neighbours", vec!["0", "1", "1001"]),
                ("--lisi-neighbours", vec!["1", "1001"]),
                ("--n-top-genes", vec!["0", "100001"]),
                ("--n-comps", vec!["0", "1001"]),
                ("--folds", vec!["1", "101"]),
                // 0 is below the bound: the docs once allowed it, and it failed after 11 s.
                ("--alpha", vec!["-1", "0", "1e-5", "1e308"]),
                ("--probe-neighbours", vec!["0", "1001"]),
                ("--resolutions", vec!["0", "-1", "101"]),
            ],
            inputs: vec!["--embeddings", "--input"],
            choices: vec![],
        },
        Base {
            name: "export onnx",
            args: v(&["export", "onnx", "--checkpoint", &i.run, "--out", "{out}"]),
            numbers: vec![],
            inputs: vec!["--checkpoint"],
            choices: vec!["--pooling"],
        },
        Base {
            name: "import hf",
            args: v(&["import", "hf", "--model", &i.hf, "--out", "{out}"]),
            numbers: vec![],
            inputs: vec!["--model"],
            choices: vec!["--model-version"],
        },
        Base {
            name: "serve",
            args: v(&["serve", "--model", &i.onnx, "--addr", "127.0.0.1:0"]),
            numbers: vec![
                ("--threads", vec!["100000"]),
                ("--max-queue", vec!["0", "2000000"]),
                ("--max-cells", vec!["0"]),
                ("--max-body-bytes", vec!["0", "5000000000"]),
                ("--max-inflight-mb", vec!["0"]),
                ("--batch-wait-ms", vec!["-1", "60001"]),
                ("--max-batch-cells", vec!["0"]),
                ("--body-timeout-s", vec!["0", "3601"]),
                ("--min-body-bytes-per-s", vec!["-1", "1073741825"]),
                ("--body-grace-s", vec!["0", "3601"]),
                ("--small-body-bytes", vec!["-1", "16777217"]),
            ],
            inputs: vec!["--model"],
            choices: vec!["--ort-device"],
        },
    ]
}

struct Case {
    name: String,
    args: Vec<String>,
    /// The refusal must name this (a flag or a path).
    needle: String,
}

/// Every case of every command.
fn cases(i: &Inputs) -> Vec<Case> {
    let mut out = Vec::new();
    for (b, base) in bases(i).into_iter().enumerate() {
        let with = |flag: &str, value: &str, k: usize| -> Vec<String> {
            let o = i.p(&format!("out-{b}-{k}"));
            let mut args: Vec<String> =
                base.args.iter().map(|a| if a == "{out}" { o.clone() } else { a.clone() }).collect();
            match args.iter().position(|a| a == flag) {
                Some(at) => args[at + 1] = value.to_string(),
                None => args.extend([flag.to_string(), value.to_string()]),
            }
            args
        };
        let mut k = 0;
        let mut push = |name: String, args: Vec<String>, needle: String| {
            out.push(Case { name, args, needle });
        };
        for (flag, beyond) in &base.numbers {
            for value in ["abc", "", "nan", "inf"].iter().chain(beyond) {
                k += 1;
                push(format!("{}: {flag} {value:?}", base.name), with(flag, value, k), flag.to_string());
            }
        }
        for flag in &base.inputs {
            for (what, path) in [
                ("missing", i.p("no-such-file")),
                ("empty file", i.p("empty")),
                ("directory", i.p("a-directory")),
                ("text file", i.p("text.h5ad")),
            ] {
                k += 1;
                let needle = Path::new(&path).file_name().unwrap().to_string_lossy().to_string();
                push(format!("{}: {flag} {what}", base.name), with(flag, &path, k), needle);
            }
        }
        for flag in &base.choices {
            k += 1;
            push(format!("{}: {flag} outside its values", base.name), with(flag, "no-such-value", k), flag.to_string());
        }
    }
    out
}

/// Every file below `dir` with its bytes.
fn snapshot(paths: &[&str]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else if p.is_file() {
            files.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    files.sort();
    files
}

/// What went wrong with one case (None: refused as it must be).
fn check(case: &Case, out_dir: &Path) -> Option<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corrflow"));
    cmd.args(&case.args).env("XDG_RUNTIME_DIR", std::env::temp_dir());
    let start = std::time::Instant::now();
    // serve would run forever if it accepted the value: give it 20 s, then call that accepted.
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr).to_string();
    let Some(status) = status else {
        return Some(format!("{}: still running after 20 s (accepted)", case.name));
    };
    let leftovers: Vec<String> = std::fs::read_dir(out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("out-"))
        .filter(|n| case.args.iter().any(|a| a.ends_with(n.as_str())))
        .collect();
    match status.code() {
        None => Some(format!("{}: killed by a signal; stderr: {err}", case.name)),
        Some(0) => Some(format!("{}: accepted (exit 0)", case.name)),
        Some(c) if c != 1 && c != 2 => Some(format!("{}: exit {c}; stderr: {err}", case.name)),
        _ if err.contains("panicked") || err.contains("RUST_BACKTRACE") => Some(format!("{}: panic: {err}", case.name)),
        _ if !err.contains(&case.needle) => {
            Some(format!("{}: message does not name '{}': {err}", case.name, case.needle))
        }
        _ if !leftovers.is_empty() => Some(format!("{}: left {leftovers:?} behind", case.name)),
        _ => None,
    }
}

#[test]
fn every_hostile_case_is_refused_clearly_and_loses_nothing() {
    let Some(inputs) = Inputs::new() else { return };
    let cases = cases(&inputs);
    assert!(cases.len() >= 250, "the suite generates {} cases", cases.len());
    let watched =
        [&inputs.cells, &inputs.run, &inputs.onnx, &inputs.corpus, &inputs.embeddings, &inputs.labels, &inputs.hf]
            .map(|p| p.as_str());
    let before = snapshot(&watched);
    // Two workers: most cases end in milliseconds, the ones that load a model in about a second.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(case) = cases.get(at) else { break };
                if let Some(f) = check(case, inputs.dir.path()) {
                    failures.lock().unwrap().push(f);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(snapshot(&watched) == before, "an input changed");
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
