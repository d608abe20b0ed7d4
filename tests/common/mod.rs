//! Shared helpers of the integration tests: the binary, the Python venv, fixtures, data.
#![allow(dead_code)]

pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `corrflow` with `args`.
pub fn corrflow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corrflow")).args(args).output().expect("run corrflow")
}

pub fn corrflow_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_corrflow"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run corrflow")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts success and returns the JSON summary (last stdout line).
pub fn ok_json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "corrflow failed: {}", stderr(o));
    let out = stdout(o);
    let last = out.lines().last().expect("a summary line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

/// A prerequisite is missing: fail under CI (which must provide everything), skip otherwise.
pub fn missing(what: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} is missing, and CI must provide it (run `make test`)");
    }
    eprintln!("SKIPPED: {what} is missing (run `make test` to set it up)");
}

/// The test venv's Python (made by scripts/python-env.sh), if present.
pub fn python() -> Option<PathBuf> {
    let p = std::env::var_os("CORRFLOW_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        home.join(".cache/corrflow/test-venv/bin/python")
    });
    if p.exists() {
        Some(p)
    } else {
        missing(&format!("the test Python venv ({})", p.display()));
        None
    }
}

/// A real dataset fetched by datasets/fetch.sh, if present.
pub fn data(name: &str) -> Option<PathBuf> {
    let p = repo().join("datasets/data").join(name);
    if p.exists() {
        Some(p)
    } else {
        missing(&format!("dataset {} (run datasets/fetch.sh)", p.display()));
        None
    }
}

pub fn bundled() -> PathBuf {
    repo().join("datasets/default/pbmc1k.h5ad")
}

/// Fixtures made by tests/python/make_fixtures.py, generated once per test binary.
pub fn fixtures() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let py = python()?;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fixtures-{}", std::process::id()));
        let out = Command::new(py)
            .arg(repo().join("tests/python/make_fixtures.py"))
            .arg(bundled())
            .arg(&dir)
            .output()
            .expect("run make_fixtures.py");
        assert!(out.status.success(), "make_fixtures.py failed: {}", stderr(&out));
        Some(dir)
    })
    .clone()
}

/// Runs a Python script of tests/python with the venv's Python.
pub fn run_python(py: &Path, script: &str, args: &[&str]) -> Output {
    Command::new(py).arg(repo().join("tests/python").join(script)).args(args).output().expect("run python")
}

/// Reads an atlas' tokens back (cell id, tokens), in order.
pub fn atlas_tokens(corpus: &Path, atlas: &str) -> Vec<(String, Vec<u32>)> {
    let cells = corrflow::corpus::read_atlas_tokens(&corrflow::corpus::atlas_dir(corpus, atlas)).expect("read atlas");
    cells.cell_ids.into_iter().zip(cells.input_ids).collect()
}

/// The bundled cells as a corpus (atlas `pbmc`) and their graph under configs/tiny.toml.
#[allow(dead_code)]
pub fn bundled_corpus_and_graph(dir: &Path) -> (PathBuf, PathBuf) {
    let (corpus, graph) = (dir.join("c"), dir.join("g"));
    let (c, g, b, tiny) = (
        corpus.display().to_string(),
        graph.display().to_string(),
        bundled().display().to_string(),
        repo().join("configs/tiny.toml").display().to_string(),
    );
    ok_json(&corrflow(&["ingest", "--json", "--atlas", "pbmc", "--gene-column", "gene_ids", "--out", &c, &b]));
    ok_json(&corrflow(&["graph", "build", "--json", "--config", &tiny, "--corpus", &c, "--out", &g]));
    (corpus, graph)
}

/// A preset of `configs/` with one line replaced, written into `dir` as `name`. The line must be
/// in the preset exactly once, so a changed preset fails here instead of silently testing the
/// unedited one.
pub fn preset_with(dir: &Path, preset: &str, from: &str, to: &str, name: &str) -> PathBuf {
    preset_with_lines(dir, preset, &[(from, to)], name)
}

/// [`preset_with`] with several lines replaced, each `(from, to)` in turn.
pub fn preset_with_lines(dir: &Path, preset: &str, lines: &[(&str, &str)], name: &str) -> PathBuf {
    let mut text = std::fs::read_to_string(repo().join("configs").join(preset)).unwrap();
    for &(from, to) in lines {
        assert_eq!(text.matches(from).count(), 1, "configs/{preset} changed: `{from}` is no longer there once");
        text = text.replacen(from, to, 1);
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The line of `configs/tiny.toml` that cuts cells to their 64 top-ranked genes (256 in the
/// preset): the same model, masking and schedule at about a third of the CPU per step.
pub const SHORT_CELLS: (&str, &str) = ("max_len = 256", "max_len = 64");

/// `configs/tiny.toml` with [`SHORT_CELLS`], written into `dir`, for tests that check how
/// training behaves (kills, resumes, locks), not what it learns.
pub fn short_cells_tiny_config(dir: &Path) -> PathBuf {
    preset_with_lines(dir, "tiny.toml", &[SHORT_CELLS], "tiny-64.toml")
}

/// A tiny model trained briefly on the bundled cells and exported, once per test binary.
pub struct TinyModel {
    _dir: tempfile::TempDir,
    pub corpus: PathBuf,
    pub run: PathBuf,
    pub model: PathBuf,
}

pub fn tiny_model() -> &'static TinyModel {
    static M: OnceLock<TinyModel> = OnceLock::new();
    M.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (corpus, run, model) = exported_tiny_model(dir.path());
        TinyModel { _dir: dir, corpus, run, model }
    })
}

/// The largest absolute difference of two equally long vectors.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// [`max_abs_diff`] of `[rows, width]` token states over the rows whose `mask` is 1 (the states
/// of padding positions are not meaningful).
pub fn max_abs_diff_at_tokens(a: &[f32], b: &[f32], mask: &[i64]) -> f32 {
    assert_eq!(a.len(), b.len());
    let width = a.len() / mask.len().max(1);
    mask.iter()
        .enumerate()
        .filter(|(_, &m)| m == 1)
        .map(|(r, _)| max_abs_diff(&a[r * width..(r + 1) * width], &b[r * width..(r + 1) * width]))
        .fold(0.0, f32::max)
}

/// (corpus, run, model.onnx) of [`tiny_model`], built in `dir`.
fn exported_tiny_model(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    exported_model(dir, &repo().join("configs/tiny.toml"))
}

/// (corpus, run, model.onnx) of a 2-layer model of `config` trained 8 steps on the bundled cells
/// and exported, built in `dir`.
pub fn exported_model(dir: &Path, config: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (corpus, graph) = bundled_corpus_and_graph(dir);
    let run = dir.join("run");
    let model = dir.join("onnx/model.onnx");
    let p = |p: &Path| p.display().to_string();
    ok_json(&corrflow(&[
        "train",
        "--json",
        "--config",
        &p(config),
        "--corpus",
        &p(&corpus),
        "--graph",
        &p(&graph),
        "--out",
        &p(&run),
        "--max-steps",
        "8",
    ]));
    let s = ok_json(&corrflow(&["export", "onnx", "--json", "--checkpoint", &p(&run), "--out", &p(&model)]));
    assert_eq!(s["layers"], 2);
    (corpus, run, model)
}

/// burn's cell embeddings (mean over gene tokens of the last layer) of a checkpoint for padded
/// inputs `[batch, seq]`: (last_hidden_state, cell_embedding), flattened. Through the non-generic
/// `BurnEncoder`, so that this test crate does not compile burn's model code again.
pub fn burn_outputs(run: &Path, ids: &[i64], mask: &[i64], batch: usize, seq: usize) -> (Vec<f32>, Vec<f32>) {
    use corrflow::encode::Encoder;
    use corrflow::runtime::PaddedBatch;
    let mut m = corrflow::model::BurnEncoder::open(run, Some(corrflow::embed::Pooling::Mean), -1).unwrap();
    let padded = PaddedBatch {
        rows: batch,
        len: seq,
        input_ids: ids.to_vec(),
        attention_mask: mask.to_vec(),
        values: Vec::new(),
    };
    (m.token_states(&padded).unwrap(), m.encode(&padded).unwrap())
}

/// Every weight of a checkpoint (or a run's latest) by its module path, in module order.
pub fn named_weights(run: &Path) -> Vec<(String, Vec<f32>)> {
    corrflow::model::BurnEncoder::open(run, None, -1).unwrap().parameters()
}

/// Every weight of a checkpoint (or a run's latest), in module order.
pub fn weights(run: &Path) -> Vec<f32> {
    named_weights(run).into_iter().flat_map(|(_, w)| w).collect()
}

/// An `embed` output's rows in order: (cell id, embedding).
pub fn embedding_rows(path: &Path) -> Vec<(String, Vec<f32>)> {
    use arrow_array::{Array, FixedSizeListArray, Float32Array, StringArray};
    let f = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap().build().unwrap();
    let mut out = Vec::new();
    for rb in reader {
        let rb = rb.unwrap();
        let ids = rb.column_by_name("cell_id").unwrap().as_any().downcast_ref::<StringArray>().unwrap().clone();
        let emb =
            rb.column_by_name("embedding").unwrap().as_any().downcast_ref::<FixedSizeListArray>().unwrap().clone();
        for i in 0..rb.num_rows() {
            let v = emb.value(i);
            out.push((ids.value(i).to_string(), v.as_any().downcast_ref::<Float32Array>().unwrap().values().to_vec()));
        }
    }
    out
}

/// A `perturb` output: cell_id → (genes present, shift; `None` where it does not apply).
pub fn perturb_rows(path: &Path) -> std::collections::HashMap<String, (u32, Option<f64>)> {
    use arrow_array::{Array, Float64Array, StringArray, UInt32Array};
    let file = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    let mut out = std::collections::HashMap::new();
    for rb in reader {
        let rb = rb.unwrap();
        let ids = rb.column(0).as_any().downcast_ref::<StringArray>().unwrap().clone();
        let present = rb.column(1).as_any().downcast_ref::<UInt32Array>().unwrap().clone();
        let shift = rb.column(3).as_any().downcast_ref::<Float64Array>().unwrap().clone();
        for i in 0..rb.num_rows() {
            out.insert(ids.value(i).to_string(), (present.value(i), shift.is_valid(i).then(|| shift.value(i))));
        }
    }
    out
}
