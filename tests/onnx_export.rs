//! `export onnx`: the exported graph computes what the burn model computes (max abs diff ≤ 1e-4
//! on both outputs, padded batches of real cells of several lengths) under ONNX Runtime from Rust
//! (the `ort` binding corrflow runs models with) and from Python's onnxruntime; the metadata and vocabulary sidecar round-trip; broken models and
//! sidecars fail with messages that name the file.

use crate::common;

use std::path::Path;

use common::*;
use corrflow::encode::Encoder;

const TOL: f32 = 1e-4;

/// A padded batch of real cells cut to different lengths: (ids, attention mask, batch, seq).
fn padded_batch(f: &TinyModel, pad: u32) -> (Vec<i64>, Vec<i64>, usize, usize) {
    let cells = atlas_tokens(&f.corpus, "pbmc");
    let lengths = [256usize, 131, 37, 5, 1, 200];
    let seq = *lengths.iter().max().unwrap();
    let (mut ids, mut mask) = (vec![i64::from(pad); lengths.len() * seq], vec![0i64; lengths.len() * seq]);
    for (r, (&len, (_, tokens))) in lengths.iter().zip(cells.iter().skip(3)).enumerate() {
        for (c, &t) in tokens.iter().take(len).enumerate() {
            ids[r * seq + c] = i64::from(t);
            mask[r * seq + c] = 1;
        }
    }
    (ids, mask, lengths.len(), seq)
}

#[test]
fn onnx_runtime_runs_the_exported_graph_with_burns_outputs_on_padded_batches() {
    let f = tiny_model();
    let exported = corrflow::model_meta::open_exported(&f.model).unwrap();
    let (ids, mask, batch, seq) = padded_batch(f, exported.meta.pad);
    let (hidden, pooled) = burn_outputs(&f.run, &ids, &mask, batch, seq);
    let mut ort = corrflow::runtime::OrtEncoder::open(&f.model, &Default::default()).unwrap();
    // Two different shapes through one session: the batch and sequence axes are dynamic.
    for (b, s) in [(batch, seq), (2, 37)] {
        let (ids, mask): (Vec<i64>, Vec<i64>) = if (b, s) == (batch, seq) {
            (ids.clone(), mask.clone())
        } else {
            let pick = |v: &[i64]| (0..b).flat_map(|r| v[(r + 2) * seq..(r + 2) * seq + s].to_vec()).collect();
            (pick(&ids), pick(&mask))
        };
        let padded = corrflow::encode::PaddedBatch {
            rows: b,
            len: s,
            input_ids: ids.clone(),
            attention_mask: mask.clone(),
            values: Vec::new(),
        };
        let h = ort.states(&padded).unwrap();
        let e = ort.embed(&padded).unwrap();
        assert_eq!((h.len(), e.len()), (b * s * 64, b * 64));
        let (want_h, want_e) = burn_outputs(&f.run, &ids, &mask, b, s);
        let (dh, de) = (max_abs_diff_at_tokens(&h, &want_h, &mask), max_abs_diff(&e, &want_e));
        eprintln!("onnxruntime {b}x{s}: max abs diff last_hidden_state {dh:e}, cell_embedding {de:e}");
        assert!(dh <= TOL && de <= TOL, "{b}x{s}: last_hidden_state diff {dh}, cell_embedding diff {de}");
        if (b, s) == (batch, seq) {
            assert_eq!((want_h, want_e), (hidden.clone(), pooled.clone()));
        }
    }
}

#[test]
fn python_onnxruntime_agrees_with_burn_and_reads_the_metadata() {
    let Some(py) = python() else { return };
    let f = tiny_model();
    let exported = corrflow::model_meta::open_exported(&f.model).unwrap();
    let (ids, mask, batch, seq) = padded_batch(f, exported.meta.pad);
    let (hidden, pooled) = burn_outputs(&f.run, &ids, &mask, batch, seq);
    let tmp = tempfile::tempdir().unwrap();
    let case = tmp.path().join("case.json");
    let json = serde_json::json!({
        "shape": [batch, seq], "input_ids": ids, "attention_mask": mask,
        "last_hidden_state": hidden, "cell_embedding": pooled,
    });
    std::fs::write(&case, json.to_string()).unwrap();
    let out = run_python(&py, "onnx_parity.py", &[f.model.to_str().unwrap(), case.to_str().unwrap()]);
    assert!(out.status.success(), "onnx_parity.py failed: {}", stderr(&out));
    let r: serde_json::Value = serde_json::from_str(stdout(&out).trim().lines().last().unwrap()).unwrap();
    let (dh, de) = (r["last_hidden_state"].as_f64().unwrap(), r["cell_embedding"].as_f64().unwrap());
    assert!(dh <= f64::from(TOL) && de <= f64::from(TOL), "onnxruntime diffs: {r}");
    assert_eq!(r["vocab_hash"], exported.meta.vocab_hash.as_str());
    assert_eq!(r["opset"], 17);
    assert_eq!(r["dynamic_axes"], true);
}

#[test]
fn metadata_and_the_vocabulary_sidecar_round_trip_and_broken_models_fail_clearly() {
    let f = tiny_model();
    let exported = corrflow::model_meta::open_exported(&f.model).unwrap();
    let ckpt = corrflow::model::BurnEncoder::open(&f.run, None, -1).unwrap();
    assert_eq!(exported.meta.vocab_hash, ckpt.vocab().hash());
    assert_eq!(Some(&exported.meta.model), ckpt.config());
    assert_eq!(exported.meta.max_len, 256);
    assert_eq!(exported.vocab.len(), ckpt.vocab().len());

    let tmp = tempfile::tempdir().unwrap();
    let copy = |name: &str| {
        let p = tmp.path().join(name).join("model.onnx");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::copy(&f.model, &p).unwrap();
        p
    };
    let sidecar = |model: &Path| corrflow::model_meta::vocab_sidecar(model);
    // Truncated model file (the sidecar copied whole): its checksum no longer matches.
    let truncated = copy("truncated");
    std::fs::create_dir_all(sidecar(&truncated)).unwrap();
    for entry in std::fs::read_dir(sidecar(&f.model)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), sidecar(&truncated).join(entry.file_name())).unwrap();
    }
    corrflow::model_meta::open_exported(&truncated).unwrap();
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let e = corrflow::model_meta::open_exported(&truncated).err().unwrap().to_string();
    assert!(e.contains("model.onnx") && e.contains("does not match the checksum"), "{e}");
    // No sidecar.
    let lonely = copy("lonely");
    let e = corrflow::model_meta::open_exported(&lonely).err().unwrap().to_string();
    assert!(e.contains("model.vocab") && e.contains("missing"), "{e}");
    // A sidecar whose medians were edited (its record of the model's checksum intact).
    let other = copy("other");
    exported.vocab.write_dir(&sidecar(&other)).unwrap();
    let record = corrflow::model_meta::integrity::MODEL_SHA256_FILE;
    std::fs::copy(sidecar(&f.model).join(record), sidecar(&other).join(record)).unwrap();
    let medians = sidecar(&other).join(corrflow::vocab::MEDIAN_FILE);
    let text = std::fs::read_to_string(&medians).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.remove(1);
    std::fs::write(&medians, lines.join("\n")).unwrap();
    let e = corrflow::model_meta::open_exported(&other).err().unwrap().to_string();
    assert!(e.contains("does not match"), "{e}");
    // Not a checkpoint.
    let out = corrflow(&["export", "onnx", "--checkpoint", tmp.path().to_str().unwrap(), "--out", "x.onnx"]);
    assert!(!out.status.success());
    assert!(!Path::new("x.onnx").exists());
}

/// cell_id → embedding of an `embed` Parquet output.
fn read_embeddings(path: &Path) -> std::collections::HashMap<String, Vec<f32>> {
    embedding_rows(path).into_iter().collect()
}

#[test]
fn embed_with_the_onnx_model_matches_embed_with_the_checkpoint() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let input = bundled();
    let mut got = Vec::new();
    for (flag, source, name) in [("--checkpoint", &f.run, "burn"), ("--model", &f.model, "onnxruntime")] {
        let out = tmp.path().join(format!("{name}.parquet"));
        let s = ok_json(&corrflow(&[
            "embed",
            "--json",
            flag,
            source.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--gene-column",
            "gene_ids",
            "--token-budget",
            "3000",
            "--out",
            out.to_str().unwrap(),
        ]));
        assert_eq!(s["encoder"], name);
        assert_eq!(s["cells"], 1000);
        got.push(read_embeddings(&out));
    }
    assert_eq!(got[0].len(), 1000);
    let mut worst = 0f32;
    for (id, a) in &got[0] {
        worst = worst.max(max_abs_diff(a, &got[1][id]));
    }
    assert!(worst <= TOL, "embed --model differs from embed --checkpoint by {worst}");
    // Options that only apply to checkpoints are refused for exported models.
    let out = corrflow(&[
        "embed",
        "--model",
        f.model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        "x.parquet",
        "--layer",
        "1",
    ]);
    assert!(!out.status.success() && stderr(&out).contains("--layer applies to checkpoints"), "{}", stderr(&out));
}

#[test]
fn embed_shards_in_order_are_the_one_process_output_row_for_row() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let input = bundled();
    let embed = |out: &Path, shard: Option<&str>| {
        let mut args =
            vec!["embed", "--json", "--model", f.model.to_str().unwrap(), "--input", input.to_str().unwrap()];
        args.extend(["--gene-column", "gene_ids", "--out", out.to_str().unwrap()]);
        if let Some(s) = shard {
            args.extend(["--shard", s]);
        }
        corrflow(&args)
    };
    let whole = tmp.path().join("whole.parquet");
    ok_json(&embed(&whole, None));
    let whole = embedding_rows(&whole);
    // Three parts of 1,000 cells (333, 333, 334), read in order, are the whole output.
    let mut parts = Vec::new();
    for i in 0..3 {
        let out = tmp.path().join(format!("part{i}.parquet"));
        let s = ok_json(&embed(&out, Some(&format!("{i}/3"))));
        assert_eq!(s["cells"], if i == 2 { 334 } else { 333 }, "{s}");
        parts.extend(embedding_rows(&out));
    }
    assert_eq!(parts.len(), whole.len());
    let ids = |v: &[(String, Vec<f32>)]| v.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&parts), ids(&whole), "cell order");
    let worst = parts.iter().zip(&whole).map(|(a, b)| max_abs_diff(&a.1, &b.1)).fold(0f32, f32::max);
    assert!(worst <= 1e-5, "a sharded embedding differs from the whole run's by {worst}");
    // Bad shards are refused naming the flag; more parts than cells names the input's size.
    for bad in ["3/3", "1/0", "x/2", "1"] {
        let o = embed(&tmp.path().join("bad.parquet"), Some(bad));
        assert!(!o.status.success() && stderr(&o).contains("--shard"), "{bad}: {}", stderr(&o));
    }
    let o = embed(&tmp.path().join("bad.parquet"), Some("1500/2000"));
    assert!(!o.status.success() && stderr(&o).contains("use at most 1000 shards"), "{}", stderr(&o));
    assert!(!tmp.path().join("bad.parquet").exists());
}

#[test]
fn a_missing_onnx_runtime_library_is_reported_with_every_place_tried() {
    let f = tiny_model();
    let empty = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_corrflow"))
        .args(["embed", "--model", f.model.to_str().unwrap(), "--input", bundled().to_str().unwrap(), "--out"])
        .arg(empty.path().join("x.parquet"))
        .env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")
        .env("CORRFLOW_CACHE", empty.path())
        .env("PATH", empty.path())
        .output()
        .unwrap();
    let e = stderr(&out);
    assert!(!out.status.success());
    assert!(e.contains("ORT_DYLIB_PATH: /nonexistent/libonnxruntime.so (no such file)"), "{e}");
    assert!(e.contains("corrflow cache") && e.contains("fetch-onnxruntime.sh"), "{e}");
    // Python users install the pinned wheel; the message says which.
    let pinned = format!("onnxruntime=={}", corrflow::runtime::library::ORT_VERSION);
    assert!(e.contains(&format!("pip install {pinned}")), "{e}");
    let requirements =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/requirements.txt")).unwrap();
    assert!(requirements.lines().any(|l| l.trim() == pinned), "tests/python/requirements.txt does not pin {pinned}");
    assert!(!empty.path().join("x.parquet").exists());
}

#[test]
fn the_cuda_provider_runs_like_the_cpu_or_fails_clearly_where_onnx_runtime_has_none() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let embed = |device: &str| {
        let out = tmp.path().join(format!("{device}.parquet"));
        let run = corrflow(&[
            "embed",
            "--model",
            f.model.to_str().unwrap(),
            "--input",
            bundled().to_str().unwrap(),
            "--gene-column",
            "gene_ids",
            "--ort-device",
            device,
            "--out",
            out.to_str().unwrap(),
        ]);
        (run, out)
    };
    let (cuda, cuda_out) = embed("cuda");
    // Without a GPU the run must fail: a silent fallback to the CPU would hide a wrong setup.
    let gpu = Path::new("/dev/nvidiactl").exists();
    if gpu && cuda.status.success() {
        // An onnxruntime-gpu library on a machine with a GPU: the same embeddings as the CPU's.
        let (cpu, cpu_out) = embed("cpu");
        assert!(cpu.status.success(), "{}", stderr(&cpu));
        let (a, b) = (read_embeddings(&cpu_out), read_embeddings(&cuda_out));
        assert_eq!(a.len(), b.len());
        let worst = a.iter().map(|(id, e)| max_abs_diff(e, &b[id])).fold(0f32, f32::max);
        assert!(worst <= 1e-3, "CUDA embeddings differ from the CPU's by {worst}");
    } else {
        // The CPU wheel (CI, this project's default) or no GPU: a clear error and no output.
        assert!(!cuda.status.success(), "--ort-device cuda succeeded on a machine without a GPU");
        let e = stderr(&cuda);
        assert!(e.contains("CUDA execution provider") && e.contains(f.model.to_str().unwrap()), "{e}");
        assert!(!cuda_out.exists(), "a failed embed left {}", cuda_out.display());
    }
}

#[test]
fn a_model_exported_at_a_layer_embeds_like_the_checkpoint_at_that_layer() {
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let (input, run) = (bundled(), f.run.to_str().unwrap());
    // Geneformer's emb_layer -1 (second to last) = corrflow's --layer -2 = layer 1 of the tiny 2.
    let cut = tmp.path().join("layer1.onnx");
    let s = ok_json(&corrflow(&[
        "export",
        "onnx",
        "--json",
        "--checkpoint",
        run,
        "--out",
        cut.to_str().unwrap(),
        "--emb-layer",
        "-1",
    ]));
    assert_eq!(s["layers"], 1, "{s}");
    let embed = |flag: &str, source: &str, extra: &[&str], name: &str| {
        let out = tmp.path().join(format!("{name}.parquet"));
        let mut args = vec!["embed", "--json", flag, source, "--input", input.to_str().unwrap()];
        args.extend_from_slice(&["--gene-column", "gene_ids", "--out", out.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let s = ok_json(&corrflow(&args));
        (s, read_embeddings(&out))
    };
    let (s_onnx, onnx) = embed("--model", cut.to_str().unwrap(), &[], "onnx");
    let (s_burn, burn) = embed("--checkpoint", run, &["--emb-layer", "-1"], "burn");
    let (_, last) = embed("--checkpoint", run, &["--layer", "-1"], "last");
    assert_eq!((s_onnx["layer"].as_u64(), s_burn["layer"].as_u64()), (Some(1), Some(1)), "{s_onnx} {s_burn}");
    let (mut worst, mut apart) = (0f32, 0f32);
    for (id, a) in &burn {
        worst = worst.max(max_abs_diff(a, &onnx[id]));
        apart = apart.max(max_abs_diff(a, &last[id]));
    }
    assert!(worst <= TOL, "the layer-1 export differs from embed --emb-layer -1 by {worst}");
    assert!(apart > 1e-3, "layer 1 and the last layer gave the same vectors");
    // Geneformer counts back from the last layer: a positive emb_layer is refused, and so is a
    // layer the model does not have.
    let o = corrflow(&["embed", "--checkpoint", run, "--input", "x.h5ad", "--out", "x.parquet", "--emb-layer", "1"]);
    assert!(!o.status.success() && stderr(&o).contains("counts back from the last layer"), "{}", stderr(&o));
    let bad = tmp.path().join("bad.onnx");
    let o = corrflow(&["export", "onnx", "--checkpoint", run, "--out", bad.to_str().unwrap(), "--layer", "3"]);
    assert!(!o.status.success() && stderr(&o).contains("this model has 2 layers"), "{}", stderr(&o));
}
