//! `corrflow import hf`: a Hugging Face BERT (Geneformer's format) as a corrflow checkpoint.
//!
//! The models are randomly initialised BERTs written by this test (seeded, so the same bytes
//! every run) with Geneformer V1-10M's configuration (6 × 256, 25,426 tokens, ReLU) and a
//! V2-like one (<cls>/<eos>, 4,096 positions, 2 × 64). Their hidden states and cell embeddings on
//! real cells were computed by transformers' `BertForMaskedLM` (`tests/python/hf_reference.py`,
//! torch 2.15, transformers 5.23) and are committed in `tests/fixtures/hf/`; the imported model
//! must give the same within 1e-4, through burn and through the exported ONNX model.

use crate::common;

use std::path::Path;

use common::{corrflow, stderr};
use corrflow::encode::{Encoder, PaddedBatch};
use corrflow::model::{BurnEncoder, Pooling};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

struct Preset {
    name: &'static str,
    vocab: usize,
    hidden: usize,
    layers: usize,
    heads: usize,
    ffn: usize,
    positions: usize,
    version: &'static str,
}

const V1: Preset =
    Preset { name: "v1", vocab: 25_426, hidden: 256, layers: 6, heads: 4, ffn: 512, positions: 2048, version: "v1" };
const V2: Preset =
    Preset { name: "v2", vocab: 25_428, hidden: 64, layers: 2, heads: 4, ffn: 128, positions: 4096, version: "v2" };

/// Writes a random `BertForMaskedLM` directory as transformers' `save_pretrained` does.
fn write_random_bert(dir: &Path, p: &Preset, seed: u64) {
    std::fs::create_dir_all(dir).unwrap();
    let config = json!({
        "architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": p.vocab,
        "hidden_size": p.hidden, "num_hidden_layers": p.layers, "num_attention_heads": p.heads,
        "intermediate_size": p.ffn, "hidden_act": "relu", "max_position_embeddings": p.positions,
        "layer_norm_eps": 1e-12, "type_vocab_size": 2, "pad_token_id": 0, "hidden_dropout_prob": 0.02,
        "attention_probs_dropout_prob": 0.02, "position_embedding_type": "absolute", "initializer_range": 0.02,
        "tie_word_embeddings": true,
    });
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let mut g = Gen { rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed), tensors: Vec::new(), h: p.hidden };
    let (h, f) = (p.hidden, p.ffn);
    g.add("bert.embeddings.word_embeddings.weight", vec![p.vocab, h], 0.0, 0.02);
    g.add("bert.embeddings.position_embeddings.weight", vec![p.positions, h], 0.0, 0.02);
    g.add("bert.embeddings.token_type_embeddings.weight", vec![2, h], 0.0, 0.02);
    g.norm("bert.embeddings.LayerNorm");
    for i in 0..p.layers {
        let at = |s: &str| format!("bert.encoder.layer.{i}.{s}");
        for s in ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"] {
            g.dense(&at(s), h, h);
        }
        g.norm(&at("attention.output.LayerNorm"));
        g.dense(&at("intermediate.dense"), f, h);
        g.dense(&at("output.dense"), h, f);
        g.norm(&at("output.LayerNorm"));
    }
    g.dense("cls.predictions.transform.dense", h, h);
    g.norm("cls.predictions.transform.LayerNorm");
    g.add("cls.predictions.bias", vec![p.vocab], 0.0, 0.05);
    let tensors = g.tensors;
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> =
        tensors.into_iter().map(|(n, s, v)| (n, s, v.iter().flat_map(|x| x.to_le_bytes()).collect())).collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
        .iter()
        .map(|(n, s, b)| {
            (n.clone(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap())
        })
        .collect();
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    safetensors::serialize_to_file(views, Some(meta), &dir.join("model.safetensors")).unwrap();
}

/// Seeded normal tensors, named as transformers names them.
struct Gen {
    rng: rand_chacha::ChaCha8Rng,
    tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    h: usize,
}

impl Gen {
    fn add(&mut self, name: &str, shape: Vec<usize>, mean: f32, std: f32) {
        let n = shape.iter().product();
        let values = (0..n)
            .map(|_| {
                let (u, v): (f32, f32) = (self.rng.random_range(1e-7..1.0), self.rng.random());
                mean + std * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
            })
            .collect();
        self.tensors.push((name.to_string(), shape, values));
    }

    /// LayerNorm weights near 1 and biases near 0, not exactly: a wrong mapping shows.
    fn norm(&mut self, name: &str) {
        self.add(&format!("{name}.weight"), vec![self.h], 1.0, 0.1);
        self.add(&format!("{name}.bias"), vec![self.h], 0.0, 0.1);
    }

    fn dense(&mut self, name: &str, out: usize, inp: usize) {
        self.add(&format!("{name}.weight"), vec![out, inp], 0.0, 0.08);
        self.add(&format!("{name}.bias"), vec![out], 0.0, 0.05);
    }
}

fn fixture(p: &Preset) -> Value {
    let path = common::repo().join(format!("tests/fixtures/hf/{}-expected.json", p.name));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|x| {
            x.as_array().map_or_else(|| vec![x.as_f64().unwrap() as f32], |r| floats(&Value::Array(r.clone())))
        })
        .collect()
}

fn check(p: &Preset) {
    let tmp = tempfile::tempdir().unwrap();
    let model_dir = tmp.path().join("hf");
    write_random_bert(&model_dir, p, 7);
    let out = tmp.path().join("run");
    let o = corrflow(&[
        "import",
        "hf",
        "--model",
        model_dir.to_str().unwrap(),
        "--model-version",
        p.version,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = fixture(p);
    let cells: Vec<Vec<u32>> = expected["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .collect();
    let mut loaded = BurnEncoder::open(&out, Some(Pooling::Mean), p.layers as i64).unwrap();
    let batch = PaddedBatch::new(cells.iter().map(Vec::as_slice), loaded.vocab().pad);
    let states = loaded.token_states(&batch).unwrap();
    let pooled = loaded.encode(&batch).unwrap();
    // Hidden states of the first positions of each cell, and the cell embeddings.
    let first = expected["first_positions"].as_u64().unwrap() as usize;
    let want_states = floats(&expected["hidden_first"]);
    let mut got_states = Vec::new();
    for (r, _) in cells.iter().enumerate() {
        for i in 0..first {
            let at = (r * batch.len + i) * p.hidden;
            got_states.extend_from_slice(&states[at..at + p.hidden]);
        }
    }
    assert_close(&got_states, &want_states, "hidden states");
    assert_close(&pooled, &floats(&expected["cell_embedding"]), "cell embeddings");
    // The exported model gives the same cell embeddings under ONNX Runtime (via embed's path).
    let onnx = tmp.path().join("m.onnx");
    let o = corrflow(&["export", "onnx", "--checkpoint", out.to_str().unwrap(), "--out", onnx.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut enc = corrflow::runtime::OrtEncoder::open(&onnx, &Default::default()).unwrap();
    let via_ort = corrflow::encode::Encoder::encode(&mut enc, &batch).unwrap();
    assert_close(&via_ort, &floats(&expected["cell_embedding"]), "ONNX Runtime cell embeddings");
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let worst = got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= 1e-4, "{what}: largest difference from transformers {worst:e}");
}

#[test]
fn an_imported_geneformer_v1_10m_shaped_model_equals_transformers_on_real_cells() {
    check(&V1);
}

#[test]
fn an_imported_v2_like_model_with_cls_eos_and_4096_positions_equals_transformers() {
    check(&V2);
}

/// Writes the two model directories for `tests/python/hf_reference.py` (run once to make the
/// fixtures): `CORRFLOW_HF_FIXTURE_DIR=/tmp/hf cargo test --release --test integration import_hf:: -- --ignored`.
#[test]
#[ignore]
fn write_fixture_models() {
    let dir = std::path::PathBuf::from(std::env::var("CORRFLOW_HF_FIXTURE_DIR").expect("CORRFLOW_HF_FIXTURE_DIR"));
    for p in [&V1, &V2] {
        write_random_bert(&dir.join(p.name), p, 7);
    }
}

fn import(model: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["import", "hf", "--model", model.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    corrflow(&args)
}

#[test]
fn models_the_encoder_cannot_hold_are_refused_with_the_reason_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("hf");
    write_random_bert(&model, &V2, 3);
    let out = tmp.path().join("run");
    // The V2 model with the V1 vocabulary (two tokens short).
    let o = import(&model, &out, &[]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("the model has 25428 tokens but vocabulary 'geneformer-v1' has 25426"),
        "{}",
        stderr(&o)
    );
    // GELU feed-forward, pre-LN style variants are not this encoder.
    let config_path = model.join("config.json");
    let config = std::fs::read_to_string(&config_path).unwrap();
    std::fs::write(&config_path, config.replace("\"relu\"", "\"gelu\"")).unwrap();
    let o = import(&model, &out, &["--model-version", "v2"]);
    assert!(stderr(&o).contains("hidden_act 'gelu' is not supported"), "{}", stderr(&o));
    assert!(stderr(&o).contains("(allowed: relu)"), "{}", stderr(&o));
    // No hidden_act is transformers' default, GELU: not ReLU taken for granted.
    std::fs::write(&config_path, config.replace("\"hidden_act\": \"relu\",", "")).unwrap();
    let o = import(&model, &out, &["--model-version", "v2"]);
    assert!(stderr(&o).contains("hidden_act 'gelu' is not supported"), "{}", stderr(&o));
    std::fs::write(&config_path, config.replace("\"relu\"", "\"swishy\"")).unwrap();
    let o = import(&model, &out, &["--model-version", "v2"]);
    assert!(
        stderr(&o).contains(
            "hidden_act 'swishy' is not supported: it is not an activation transformers knows (allowed: relu)"
        ),
        "{}",
        stderr(&o)
    );
    std::fs::write(&config_path, config.replace("\"bert\"", "\"roberta\"")).unwrap();
    let o = import(&model, &out, &["--model-version", "v2"]);
    assert!(stderr(&o).contains("model_type 'roberta' is not supported"), "{}", stderr(&o));
    std::fs::write(&config_path, &config).unwrap();
    // A truncated weights file.
    let weights = model.join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    let o = import(&model, &out, &["--model-version", "v2"]);
    assert!(stderr(&o).contains("not a safetensors file"), "{}", stderr(&o));
    assert!(!out.join("checkpoints").exists(), "nothing is written for a refused model");
    // A config that disagrees with the weights.
    std::fs::write(&weights, &bytes).unwrap();
    std::fs::write(&config_path, config.replace("\"intermediate_size\": 128", "\"intermediate_size\": 256")).unwrap();
    let o = import(&model, &out, &["--model-version", "v2"]);
    assert!(stderr(&o).contains("has shape [128, 64], the config says [256, 64]"), "{}", stderr(&o));
    assert!(!out.join("checkpoints").exists());
}

/// `bytes` (a safetensors file) with `edit` applied to its JSON header.
fn edit_header(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let mut text = header.to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    out
}

#[test]
fn a_bad_tensor_is_named_with_its_file_and_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("hf");
    write_random_bert(&model, &V2, 3);
    let weights = model.join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    let out = tmp.path().join("run");
    let cases: [(&str, Box<dyn Fn(&mut Value)>, &str); 3] = [
        (
            "a shape its bytes do not fill",
            Box::new(|h| h["bert.embeddings.LayerNorm.weight"]["shape"] = json!([65])),
            "tensor 'bert.embeddings.LayerNorm.weight' (F32, shape [65]) has data_offsets",
        ),
        (
            "a dtype safetensors does not define",
            Box::new(|h| h["cls.predictions.bias"]["dtype"] = json!("F33")),
            "tensor 'cls.predictions.bias' has dtype 'F33', which safetensors does not define",
        ),
        (
            "offsets past the data",
            Box::new(|h| {
                let e = &mut h["cls.predictions.bias"]["data_offsets"];
                let (a, b) = (e[0].as_u64().unwrap() + 4, e[1].as_u64().unwrap() + 4);
                *e = json!([a, b]);
            }),
            // A gap before it, or past the end of the data when it is the last tensor.
            "tensor 'cls.predictions.bias' ",
        ),
    ];
    for (what, edit, want) in cases {
        std::fs::write(&weights, edit_header(&bytes, edit)).unwrap();
        let e = stderr(&import(&model, &out, &["--model-version", "v2"]));
        assert!(e.contains("model.safetensors: not a safetensors file: ") && e.contains(want), "{what}: {e}");
    }
    assert!(!out.join("checkpoints").exists());
}

#[test]
fn a_bad_pickled_dictionary_is_named_with_its_entry_not_a_tsv_line() {
    let Some(py) = common::python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dicts = tmp.path().join("dicts");
    std::fs::create_dir_all(&dicts).unwrap();
    let script = r#"
import pickle, sys
out, case = sys.argv[1], sys.argv[2]
tokens = {"<pad>": 0, "<mask>": 1, "ENSG00000000003": 2, "ENSG00000000005": 3}
if case == "duplicate": tokens["ENSG00000000419"] = 3
if case == "gap": tokens["ENSG00000000419"] = 5
if case == "tab": tokens["ENSG\t1"] = 4
pickle.dump(tokens, open(f"{out}/token_dictionary.pkl", "wb"))
pickle.dump({"ENSG00000000003": 1.5, "ENSG00000000005": 2.0}, open(f"{out}/gene_median_dictionary.pkl", "wb"))
"#;
    let cases = [
        ("duplicate", "token_dictionary.pkl: tokens \"ENSG00000000005\" and \"ENSG00000000419\" both have id 3"),
        ("gap", "token_dictionary.pkl: no token has id 4 (the next is \"ENSG00000000419\" with id 5)"),
        ("tab", "token_dictionary.pkl: the token \"ENSG\\t1\" is empty or holds a tab or line break"),
    ];
    let model = tmp.path().join("hf");
    write_random_bert(&model, &V2, 3);
    for (case, want) in cases {
        let o = std::process::Command::new(&py).args(["-c", script, dicts.to_str().unwrap(), case]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let e = stderr(&import(&model, &tmp.path().join("run"), &["--vocab", dicts.to_str().unwrap()]));
        assert!(e.contains(want), "{case}: {e}");
        assert!(!e.contains("token_dictionary.tsv"), "{case}: no TSV line of a table the user never wrote: {e}");
    }
}

#[test]
fn geneformers_pickled_dictionaries_give_the_same_vocabulary_as_its_tsv_tables() {
    let Some(py) = common::python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dicts = tmp.path().join("dicts");
    std::fs::create_dir_all(&dicts).unwrap();
    // The dictionaries as Geneformer pickles them (plain dicts), from the built-in tables.
    let script = r#"
import csv, pickle, sys
src, out = sys.argv[1], sys.argv[2]
def table(name): return list(csv.reader(open(f"{src}/{name}"), delimiter="\t"))[1:]
pickle.dump({t: int(i) for t, i in table("token_dictionary.tsv")}, open(f"{out}/token_dictionary_gc30M.pkl", "wb"))
pickle.dump({g: float(m) for g, m in table("gene_median_dictionary.tsv")}, open(f"{out}/gene_median_dictionary_gc30M.pkl", "wb"))
pickle.dump({s: g for s, g in table("gene_name_id.tsv")}, open(f"{out}/gene_name_id_dict_gc30M.pkl", "wb"))
pickle.dump({"ENSG00000000003.15": "ENSG00000000003"}, open(f"{out}/ensembl_mapping_dict_gc30M.pkl", "wb"))
"#;
    let o = std::process::Command::new(py)
        .args(["-c", script, common::repo().join("vocab/geneformer-v1").to_str().unwrap(), dicts.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let from_pickles = corrflow::vocab::Vocabulary::resolve(dicts.to_str().unwrap()).unwrap();
    let builtin = corrflow::vocab::Vocabulary::resolve("geneformer-v1").unwrap();
    assert_eq!(from_pickles.len(), builtin.len());
    for t in 0..builtin.len() as u32 {
        assert_eq!(from_pickles.token(t), builtin.token(t));
        assert_eq!(from_pickles.median(t), builtin.median(t));
    }
    for gene in ["CD74", "ENSG00000000003", "ENSG00000000003.15"] {
        assert_eq!(from_pickles.lookup(gene).map(|m| m.token()), builtin.lookup(gene).map(|m| m.token()), "{gene}");
    }
    // And a model imports with them.
    let model = tmp.path().join("hf");
    write_random_bert(&model, &V1, 5);
    let o = import(&model, &tmp.path().join("run"), &["--vocab", dicts.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn an_imported_model_serves_over_http_with_transformers_embeddings() {
    let tmp = tempfile::tempdir().unwrap();
    let model_dir = tmp.path().join("hf");
    write_random_bert(&model_dir, &V2, 7);
    let out = tmp.path().join("run");
    assert!(import(&model_dir, &out, &["--model-version", "v2"]).status.success());
    let onnx = tmp.path().join("m.onnx");
    let o = corrflow(&["export", "onnx", "--checkpoint", out.to_str().unwrap(), "--out", onnx.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = fixture(&V2);
    let server = common::server::Server::start(&onnx, &[], &[]);
    server.wait_ready();
    let body = json!({"input_ids": expected["input_ids"]}).to_string();
    let (status, text) = common::server::post(&format!("{}/v1/embed", server.url), &body, None);
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_close(&floats(&reply["embeddings"]), &floats(&expected["cell_embedding"]), "served cell embeddings");
}
