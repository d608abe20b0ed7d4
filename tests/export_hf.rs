//! `corrflow export hf-model`: a trained checkpoint as a Hugging Face `BertForMaskedLM`
//! directory. transformers loads it with no missing weight and gives corrflow's cell embeddings;
//! `import hf` of it gives back the checkpoint's weights bit for bit, heads included.

use crate::common;

use std::path::{Path, PathBuf};

use common::{corrflow, ok_json, stderr};
use serde_json::{json, Value};

/// [`train_wced`] once for the tests of this file: (corpus, run).
fn trained_wced() -> (PathBuf, PathBuf) {
    static RUN: std::sync::OnceLock<(tempfile::TempDir, PathBuf, PathBuf)> = std::sync::OnceLock::new();
    let (_, corpus, run) = RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (corpus, run) = train_wced(dir.path());
        (dir, corpus, run)
    });
    (corpus.clone(), run.clone())
}

/// A tiny model trained a few steps with the WCED objective (so it has a head BERT has no slot
/// for) on the bundled cells: (corpus, run).
fn train_wced(dir: &Path) -> (PathBuf, PathBuf) {
    let (corpus, graph) = common::bundled_corpus_and_graph(dir);
    let config = dir.join("wced.toml");
    let tiny = std::fs::read_to_string(common::repo().join("configs/tiny.toml")).unwrap();
    std::fs::write(&config, tiny.replace("objective = \"mlm\"", "objective = \"wced\"")).unwrap();
    let run = dir.join("run");
    let p = |p: &Path| p.display().to_string();
    ok_json(&corrflow(&[
        "train",
        "--json",
        "--config",
        &p(&config),
        "--corpus",
        &p(&corpus),
        "--graph",
        &p(&graph),
        "--out",
        &p(&run),
        "--max-steps",
        "4",
    ]));
    (corpus, run)
}

fn export(checkpoint: &Path, out: &Path) -> std::process::Output {
    corrflow(&[
        "export",
        "hf-model",
        "--json",
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
}

#[test]
fn an_exported_model_loads_in_transformers_equals_corrflow_and_imports_back_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, run) = trained_wced();
    let hf = tmp.path().join("hf");
    let s = ok_json(&export(&run, &hf));
    assert_eq!(s["architecture"], "BertForMaskedLM");
    for f in ["config.json", "model.safetensors", "vocab/token_dictionary.tsv", "token_dictionary.pkl"] {
        assert!(hf.join(f).exists(), "{f} written");
    }
    // The WCED head has no slot in BERT: listed, and written beside the model.
    let heads = s["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 1, "{s}");
    assert_eq!(heads[0]["name"], "cell_head");
    assert!(heads[0]["role"].as_str().unwrap().contains("wced"), "{s}");
    assert!(hf.join("corrflow_heads.safetensors").exists() && hf.join("corrflow_heads.json").exists());
    assert!(s["notes"].to_string().contains("GELU"), "the MLM head's activation is noted: {s}");

    // import hf (no --vocab: the exported directory's own) gives the same weights, bit for bit.
    let back = tmp.path().join("back");
    let o = corrflow(&["import", "hf", "--json", "--model", hf.to_str().unwrap(), "--out", back.to_str().unwrap()]);
    let imported = ok_json(&o);
    assert_eq!(imported["not_imported"], json!([]), "{imported}");
    assert_eq!(imported["mlm_activation"], "gelu", "from the corrflow section: {imported}");
    let listed = std::fs::read_to_string(hf.join("corrflow_sha256.txt")).unwrap().lines().count();
    assert_eq!(imported["sha256_checked"], listed, "every recorded file checked: {imported}");
    let (a, b) = (common::named_weights(&run), common::named_weights(&back));
    assert_eq!(a.len(), b.len(), "the same parameters");
    for ((na, va), (nb, vb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(va) == bits(vb), "{na} differs after export hf-model + import hf");
    }
    assert!(a.iter().any(|(n, _)| n.starts_with("cell_head")), "the head went round too");

    // transformers: no missing encoder weight, and corrflow's embeddings within 1e-4.
    let Some(py) = common::python() else { return };
    let has = std::process::Command::new(&py).args(["-c", "import torch, transformers"]).output().unwrap();
    if !has.status.success() {
        common::missing("torch and transformers in the test venv");
        return;
    }
    let cells: Vec<Vec<u32>> = common::atlas_tokens(&corpus, "pbmc")
        .into_iter()
        .take(4)
        .zip([256, 90, 173, 31])
        .map(|((_, t), n)| t[..n.min(t.len())].to_vec())
        .collect();
    let (rows, len) = (cells.len(), cells.iter().map(Vec::len).max().unwrap());
    let (mut ids, mut mask) = (vec![0i64; rows * len], vec![0i64; rows * len]);
    for (r, c) in cells.iter().enumerate() {
        for (i, &t) in c.iter().enumerate() {
            ids[r * len + i] = i64::from(t);
            mask[r * len + i] = 1;
        }
    }
    let (_, want) = common::burn_outputs(&run, &ids, &mask, rows, len);
    let vocab = corrflow::vocab::Vocabulary::load_dir(&run.join("vocab")).unwrap();
    let gene: Vec<i64> = ids.iter().map(|&t| i64::from(vocab.is_gene(t as u32))).collect();
    let shape = |v: &[i64]| v.chunks(len).map(<[i64]>::to_vec).collect::<Vec<_>>();
    let input = tmp.path().join("input.json");
    let body = json!({"input_ids": shape(&ids), "attention_mask": shape(&mask), "gene": shape(&gene)});
    std::fs::write(&input, body.to_string()).unwrap();
    let o = common::run_python(&py, "hf_export_check.py", &[hf.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got: Value = serde_json::from_str(common::stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!(got["missing_keys"], json!([]), "{got}");
    assert_eq!(got["unexpected_keys"], json!([]), "{got}");
    assert_eq!(got["hidden_act"], "relu");
    assert_eq!(got["pad_token_id"], vocab.pad);
    assert_eq!(got["tokens"], vocab.len());
    assert_eq!(got["token_pad"], vocab.pad);
    assert_eq!(got["token_mask"], vocab.mask);
    assert_eq!(got["medians"], vocab.n_genes());
    assert_eq!(got["median_types"], json!(["float"]), "plain floats, as Geneformer pickles them");
    assert!(got["names"].as_u64().unwrap() > 0);
    assert_eq!(got["heads"][0]["name"], "cell_head");
    let pooled: Vec<f32> = got["cell_embedding"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().clone())
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let worst = common::max_abs_diff(&pooled, &want);
    assert!(worst <= 1e-4, "transformers' cell embeddings differ from corrflow's by {worst:e}");
    eprintln!("transformers vs corrflow cell embeddings: largest difference {worst:e}");
}

#[test]
fn export_hf_model_never_writes_over_its_input_or_a_foreign_directory() {
    let m = common::tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    // --out is the run directory (the input), or holds it.
    for out in [m.run.clone(), m.run.parent().unwrap().to_path_buf()] {
        let o = export(&m.run, &out);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("--checkpoint"), "{}", stderr(&o));
    }
    assert!(m.run.join("checkpoints").exists(), "the run is intact");
    // A directory of other files is not replaced.
    let foreign = tmp.path().join("keep");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), b"mine").unwrap();
    let o = export(&m.run, &foreign);
    assert!(stderr(&o).contains("no config.json"), "{}", stderr(&o));
    assert_eq!(std::fs::read(foreign.join("notes.txt")).unwrap(), b"mine");
    // An existing file as --out.
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let o = export(&m.run, &file);
    assert!(stderr(&o).contains("existing file"), "{}", stderr(&o));
    // A model directory is replaced whole, and an MLM model has no heads file.
    let hf = tmp.path().join("hf");
    ok_json(&export(&m.run, &hf));
    std::fs::write(hf.join("stale.bin"), b"old").unwrap();
    let s = ok_json(&export(&m.run, &hf));
    assert_eq!(s["heads"], json!([]));
    assert!(!hf.join("stale.bin").exists() && !hf.join("corrflow_heads.safetensors").exists());
}

fn import(model: &Path, out: &Path) -> std::process::Output {
    corrflow(&["import", "hf", "--json", "--model", model.to_str().unwrap(), "--out", out.to_str().unwrap()])
}

/// The 64-hex-digit words of a message (sha256 digests).
fn digests(msg: &str) -> Vec<String> {
    msg.split(|c: char| !c.is_ascii_hexdigit()).filter(|w| w.len() == 64).map(String::from).collect()
}

#[test]
fn a_bit_flipped_in_an_exported_weight_is_refused_naming_the_file_and_both_digests() {
    let m = common::tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    let s = ok_json(&export(&m.run, &hf));
    assert!(s["files"].as_array().unwrap().contains(&json!("corrflow_sha256.txt")), "{s}");
    let weights = hf.join("model.safetensors");
    let mut bytes = std::fs::read(&weights).unwrap();
    // The lowest mantissa bit of a value in the middle of the data: still a finite float.
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let at = 8 + header + (((bytes.len() - 8 - header) / 2) & !3);
    let before = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    bytes[at] ^= 1;
    let after = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    assert!(after.is_finite() && after != before);
    std::fs::write(&weights, &bytes).unwrap();
    let out = tmp.path().join("run");
    let o = import(&hf, &out);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("model.safetensors: does not match the sha256 export hf-model recorded"), "{e}");
    let d = digests(&e);
    assert!(d.len() == 2 && d[0] != d[1], "both digests: {e}");
    assert!(!out.join("checkpoints").exists(), "nothing written");
    // A directory without the record (a Hugging Face download) is imported unchecked, and says so.
    std::fs::remove_file(hf.join("corrflow_sha256.txt")).unwrap();
    let s = ok_json(&import(&hf, &out));
    assert_eq!(s["sha256_checked"], Value::Null, "{s}");
    // Any other recorded file is checked too: an edited vocabulary table.
    let hf2 = tmp.path().join("hf2");
    ok_json(&export(&m.run, &hf2));
    let table = hf2.join("vocab/gene_median_dictionary.tsv");
    let text = std::fs::read_to_string(&table).unwrap();
    std::fs::write(&table, text.replacen('1', "2", 1)).unwrap();
    let o = import(&hf2, &tmp.path().join("run2"));
    assert!(stderr(&o).contains("gene_median_dictionary.tsv: does not match the sha256"), "{}", stderr(&o));
}

#[test]
fn heads_beside_a_config_that_does_not_name_them_are_refused_not_dropped() {
    let (_, run) = trained_wced();
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    ok_json(&export(&run, &hf));
    let config_path = hf.join("config.json");
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let write = |c: &Value| std::fs::write(&config_path, serde_json::to_string_pretty(c).unwrap()).unwrap();
    let out = tmp.path().join("run");
    // The corrflow section removed: the record catches the edit first.
    let mut stripped = config.clone();
    stripped.as_object_mut().unwrap().remove("corrflow");
    write(&stripped);
    let e = stderr(&import(&hf, &out));
    assert!(e.contains("config.json: does not match the sha256"), "{e}");
    // Without the record, the heads beside it are named, and why they cannot be taken.
    std::fs::remove_file(hf.join("corrflow_sha256.txt")).unwrap();
    let e = stderr(&import(&hf, &out));
    assert!(e.contains("config.json: corrflow_heads.safetensors and corrflow_heads.json lie beside it"), "{e}");
    assert!(e.contains("no corrflow section") && e.contains("hidden_act 'relu'"), "{e}");
    // A section whose model has no head, naming the heads file: its tensors would be dropped.
    let mut headless = config.clone();
    headless["corrflow"]["model"]["objective"] = json!("mlm");
    write(&headless);
    let e = stderr(&import(&hf, &out));
    assert!(e.contains("corrflow_heads.safetensors: holds tensors no head of the model takes (cell_head."), "{e}");
    assert!(!out.join("checkpoints").exists(), "nothing written");
    // With the heads files deleted, the BERT model alone imports, its MLM head as hidden_act says.
    write(&stripped);
    for f in ["corrflow_heads.safetensors", "corrflow_heads.json"] {
        std::fs::remove_file(hf.join(f)).unwrap();
    }
    let s = ok_json(&import(&hf, &out));
    assert_eq!(s["mlm_activation"], "relu", "{s}");
    assert_eq!(s["mlm_activation_from"], "config.json's hidden_act", "{s}");
}
