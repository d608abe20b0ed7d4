//! What a new user runs into (issue 44): hints that fit the file, how genes were matched, an
//! input ingested twice, why training stopped where it did, progress in a batch job's log,
//! cells without an embedding, and counts that mean the same thing in every command.

use crate::common;

use std::path::Path;

use common::*;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn tiny() -> String {
    repo().join("configs/tiny.toml").display().to_string()
}

fn ingest(corpus: &Path, atlas: &str, input: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["ingest", "--json", "--config", "configs/tiny.toml", "--atlas", atlas, "--out", s(corpus)];
    args.extend_from_slice(extra);
    args.push(s(input));
    std::process::Command::new(env!("CARGO_BIN_EXE_corrflow"))
        .args(&args)
        .current_dir(repo())
        .output()
        .expect("run corrflow")
}

fn fails_with(o: &std::process::Output, needles: &[&str], not: &[&str]) {
    let e = stderr(o);
    assert!(!o.status.success(), "should have failed");
    for n in needles {
        assert!(e.contains(n), "stderr lacks '{n}': {e}");
    }
    for n in not {
        assert!(!e.contains(n), "stderr should not say '{n}': {e}");
    }
}

#[test]
fn hints_name_the_fix_that_fits_the_file() {
    let Some(fx) = fixtures() else { return };
    let (hints, good) = (fx.join("hints"), fx.join("good"));
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    // raw.X holds log-normalised values too: --log1p, not the --counts raw already given.
    let o = ingest(&corpus, "a", &hints.join("lognorm_raw.h5ad"), &["--gene-column", "gene_ids", "--counts", "raw"]);
    fails_with(&o, &["look log-transformed: pass --log1p"], &["--counts raw"]);
    // Counts in layers/counts and no raw: the layer, not --counts raw.
    let o = ingest(&corpus, "a", &hints.join("counts_layer.h5ad"), &["--gene-column", "gene_ids"]);
    fails_with(&o, &["--counts layer:counts", "--log1p"], &["--counts raw"]);
    // Both there: both named.
    let o = ingest(&corpus, "a", &good.join("raw_layers.h5ad"), &["--gene-column", "gene_ids"]);
    fails_with(&o, &["--counts raw, --counts layer:counts"], &[]);
    // Space Ranger 2.1's features/gene_id is a gene column like id and name.
    let by_gene_id = ok_json(&ingest(&corpus, "g", &hints.join("tenx_gene_id.h5"), &["--gene-column", "gene_id"]));
    let by_id = ok_json(&ingest(&corpus, "i", &good.join("tenx_v3.h5"), &[]));
    assert_eq!(by_gene_id["tokens"], by_id["tokens"]);
    let o = ingest(&corpus, "n", &hints.join("tenx_gene_id.h5"), &["--gene-column", "nope"]);
    fails_with(&o, &["gene columns are id, name, feature_type, gene_id"], &[]);
    // A MatrixMarket folder has features, not a var index.
    let o = ingest(&corpus, "m", &hints.join("unknown_genes.mtx"), &[]);
    fails_with(&o, &["the features' 'id' column", "'name' (symbols)"], &["var index"]);
    // --h5ad-out on a 10x file or a MatrixMarket folder: what it is, not "an older layout".
    let f = tiny_model();
    for (input, what) in [(good.join("tenx_v3.h5"), "a 10x HDF5 matrix"), (good.join("mtx"), "a MatrixMarket matrix")] {
        let out = tmp.path().join("e.parquet");
        let h5 = tmp.path().join("e.h5ad");
        let o =
            corrflow(&["embed", "--model", s(&f.model), "--input", s(&input), "--out", s(&out), "--h5ad-out", s(&h5)]);
        fails_with(&o, &[what, "use the Parquet of --out"], &["older layout"]);
    }
}

#[test]
fn ingest_reports_how_genes_matched_and_warns_of_an_input_already_in_the_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    // The bundled file's var index holds symbols; its gene_ids column Ensembl ids.
    let o = ingest(&corpus, "symbols", &bundled(), &[]);
    let sym = ok_json(&o);
    let g = &sym["genes"];
    assert!(g["matched_by_symbol"].as_u64().unwrap() > g["matched_by_id"].as_u64().unwrap(), "{g}");
    let warnings = sym["warnings"].to_string();
    assert!(warnings.contains("pass --gene-column gene_ids"), "{warnings}");
    assert!(stdout(&o).contains("by symbol)") && stdout(&o).contains("warning: "), "{}", stdout(&o));
    // The same bytes under another name and another atlas: warned, naming the first atlas.
    let copy = tmp.path().join("copy.h5ad");
    std::fs::copy(bundled(), &copy).unwrap();
    let ids = ok_json(&ingest(&corpus, "ids", &copy, &["--gene-column", "gene_ids"]));
    assert!(ids["genes"]["matched_by_id"].as_u64().unwrap() > g["matched_by_id"].as_u64().unwrap());
    let warnings = ids["warnings"].as_array().cloned().unwrap_or_default();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = warnings[0].as_str().unwrap();
    assert!(w.contains("already in atlas 'symbols'") && w.contains("weigh double"), "{w}");
    // Another file: no warning.
    let Some(fx) = fixtures() else { return };
    let other = ok_json(&ingest(&corpus, "other", &fx.join("good/csr.h5ad"), &["--gene-column", "gene_ids"]));
    assert!(other.get("warnings").is_none(), "{other}");
}

#[test]
fn train_says_why_it_ends_and_takes_epochs() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let cfg = tiny();
    let train = |out: &str, extra: &[&str], env: &[(&str, &str)]| {
        let out = tmp.path().join(out);
        let mut args = vec!["train", "--config", &cfg, "--corpus", s(&corpus), "--graph", s(&graph), "--out", s(&out)];
        args.extend_from_slice(extra);
        corrflow_env(&args, env)
    };
    // tiny.toml: one epoch of ~119 batches; --max-steps 400 cannot be reached.
    let o = train("run-a", &["--json", "--max-steps", "400", "--stop-at-step", "1"], &[]);
    let j = ok_json(&o);
    let per_epoch = j["limit"]["steps_per_epoch"].as_u64().unwrap();
    assert_eq!(j["total_steps"].as_u64().unwrap(), per_epoch);
    assert_eq!(j["limit"]["ends_at"], "epochs");
    let epochs = 400u64.div_ceil(per_epoch).to_string();
    assert!(stderr(&o).contains(&format!("pass --epochs {epochs}")), "{}", stderr(&o));
    assert!(stdout(&o).contains("ends after 1 epoch of") && stdout(&o).contains("warning: train.max_steps"));
    // --epochs reaches it.
    let j =
        ok_json(&train("run-b", &["--json", "--max-steps", "400", "--epochs", &epochs, "--stop-at-step", "1"], &[]));
    assert_eq!((j["total_steps"].as_u64(), &j["limit"]["ends_at"]), (Some(400), &serde_json::json!("max_steps")));
    assert_eq!(j["limit"]["epochs"].as_u64().unwrap().to_string(), epochs);
    // Off a terminal, progress comes as rate-limited log lines with the rate and time left.
    let o = train("run-c", &["--stop-at-step", "12"], &[("CORRFLOW_PROGRESS_SECS", "0.05")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    let lines: Vec<&str> = e.lines().filter(|l| l.contains("progress: train: ")).collect();
    assert!(!lines.is_empty(), "no progress lines: {e}");
    assert!(lines.iter().all(|l| l.contains(" steps (") && l.contains("steps/s, eta ")), "{lines:?}");
    // --json turns them off (its stdout is for machines; its stderr for errors).
    let o = train("run-d", &["--json", "--stop-at-step", "12"], &[("CORRFLOW_PROGRESS_SECS", "0.05")]);
    assert!(!stderr(&o).contains("progress: "), "{}", stderr(&o));
}

#[test]
fn embed_warns_of_cells_without_an_embedding_and_where_they_are_nan() {
    let Some(fx) = fixtures() else { return };
    let f = tiny_model();
    let tmp = tempfile::tempdir().unwrap();
    let (out, h5) = (tmp.path().join("e.parquet"), tmp.path().join("e.h5ad"));
    let input = fx.join("hints/zero_cell.h5ad");
    let o = corrflow(&[
        "embed",
        "--json",
        "--model",
        s(&f.model),
        "--input",
        s(&input),
        "--gene-column",
        "gene_ids",
        "--out",
        s(&out),
        "--h5ad-out",
        s(&h5),
    ]);
    let j = ok_json(&o);
    assert_eq!((j["cells"].as_u64(), j["dropped"].as_u64()), (Some(63), Some(1)));
    let w = j["warnings"][0].as_str().unwrap();
    assert!(w.contains("1 of 64 cells express no gene of the model's vocabulary") && w.contains("are NaN"), "{w}");
    assert!(stdout(&o).contains("warning: 1 of 64 cells"), "{}", stdout(&o));
}

#[test]
fn mask_audit_counts_the_graph_genes_as_graph_build_does() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    let shown = corrflow(&["graph", "show", s(&graph)]);
    let o = corrflow(&["mask", "audit", "--json", "--config", &tiny(), "--corpus", s(&corpus), "--graph", s(&graph)]);
    let j = ok_json(&o);
    let (genes, with_edges) = (j["graph_genes"].as_u64().unwrap(), j["graph_genes_with_edges"].as_u64().unwrap());
    assert!(with_edges <= genes, "{j}");
    assert!(stdout(&shown).contains(&format!("{genes} genes,")), "{}", stdout(&shown));
    assert!(stdout(&o).contains(&format!("graph {genes} genes ({with_edges} with an edge)")), "{}", stdout(&o));
}

/// `--h5ad-out` matches embeddings to rows in order when every cell has one, so repeated obs
/// names (which anndata only warns about) are fine; otherwise by name, where a repeated name is
/// refused rather than giving one cell another's embedding, and the Parquet stays.
#[test]
fn h5ad_out_with_repeated_obs_names_is_exact_or_refused() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (dup, dup_empty) = (tmp.path().join("dup.h5ad"), tmp.path().join("dup_empty.h5ad"));
    let code = format!(
        "import warnings, anndata\n\
         warnings.simplefilter('ignore')\n\
         a = anndata.read_h5ad('{}')[:40].copy()\n\
         names = list(a.obs_names); names[2] = names[1]; a.obs_names = names\n\
         a.write_h5ad('{}')\n\
         x = a.X.tocsr().copy(); x[0] = 0; x.eliminate_zeros(); a.X = x\n\
         a.write_h5ad('{}')\n",
        s(&bundled()),
        s(&dup),
        s(&dup_empty)
    );
    let o = std::process::Command::new(&py).args(["-c", &code]).output().unwrap();
    assert!(o.status.success(), "fixture: {}", stderr(&o));
    let f = tiny_model();
    let embed = |input: &Path, name: &str| {
        let (out, h5) = (tmp.path().join(format!("{name}.parquet")), tmp.path().join(format!("{name}.h5ad")));
        let args = ["embed", "--model", s(&f.model), "--input", s(input), "--gene-column", "gene_ids"];
        (corrflow(&[&args[..], &["--out", s(&out), "--h5ad-out", s(&h5)]].concat()), out, h5)
    };
    // Every cell embedded: row for row, the repeated name included.
    let (o, out, h5) = embed(&dup, "all");
    assert!(o.status.success(), "{}", stderr(&o));
    let check = format!(
        "import anndata, numpy as np, pyarrow.parquet as pq\n\
         a = anndata.read_h5ad('{}')\n\
         t = pq.read_table('{}')\n\
         x = np.stack(t['embedding'].to_numpy(zero_copy_only=False))\n\
         assert list(t['cell_id'].to_pylist()) == list(a.obs_names)\n\
         assert a.obs_names[1] == a.obs_names[2] and not np.array_equal(x[1], x[2])\n\
         assert np.array_equal(a.obsm['X_corrflow'], x)\n",
        s(&h5),
        s(&out)
    );
    let o = std::process::Command::new(&py).args(["-c", &check]).output().unwrap();
    assert!(o.status.success(), "anndata check: {}", stderr(&o));
    // Cell 0 has no count, so no embedding: rows go by name, and the repeated one is refused.
    let (o, out, h5) = embed(&dup_empty, "some");
    fails_with(&o, &["dup_empty.h5ad", "names more than one cell", "obs_names_make_unique"], &["panicked"]);
    assert!(out.exists() && !h5.exists());
}
