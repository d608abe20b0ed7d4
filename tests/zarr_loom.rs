//! AnnData zarr stores (formats 2 and 3, sharded, CSR/CSC/dense X, raw, layers) and loom files
//! written by anndata / loompy (tests/python/make_zarr_loom.py) give exactly the tokens of the
//! h5ad of the same cells; obs columns in every encoding pass through as from the h5ad; cells
//! whose `filter_pass` is not 1 are left out unless --ignore-filter-pass.

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn ingest(corpus: &Path, atlas: &str, extra: &[&str], file: &Path) -> serde_json::Value {
    let c = corpus.to_str().unwrap();
    let mut args = vec!["ingest", "--json", "--config", "configs/tiny.toml", "--atlas", atlas, "--out", c];
    args.extend_from_slice(extra);
    args.push(file.to_str().unwrap());
    ok_json(&corrflow(&args))
}

/// The fixtures' csr.h5ad and its zarr/loom variants, written once per test binary (the tests
/// run in parallel and would otherwise write the same files at once).
fn variants() -> Option<(PathBuf, PathBuf)> {
    static V: std::sync::OnceLock<Option<(PathBuf, PathBuf)>> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let fx = fixtures()?;
        let py = python()?;
        let out = fx.join("zarr_loom");
        let o = run_python(&py, "make_zarr_loom.py", &[fx.join("good").to_str().unwrap(), out.to_str().unwrap()]);
        assert!(o.status.success(), "make_zarr_loom.py: {}", stderr(&o));
        eprintln!("writers: {}", stdout(&o));
        Some((fx.join("good"), out))
    })
    .clone()
}

#[test]
fn zarr_and_loom_give_the_tokens_and_obs_of_the_h5ad() {
    let Some((good, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let obs = ["--obs-columns", "cell_type,score,batch,flag"];
    let ids = ["--gene-column", "gene_ids"];
    ingest(tmp.path(), "h5ad", &[&ids[..], &obs[..]].concat(), &good.join("csr.h5ad"));
    let reference = atlas_tokens(tmp.path(), "h5ad");
    assert_eq!(reference.len(), 64);
    let cases: &[(&str, &[&str], &str, &str)] = &[
        ("v2", &[], "v2.zarr", "zarr (csr)"),
        ("v3", &[], "v3.zarr", "zarr (csr)"),
        ("v3_sharded", &[], "v3_sharded.zarr", "zarr (csr)"),
        ("v3_csc", &[], "v3_csc.zarr", "zarr (csc)"),
        ("v2_dense", &[], "v2_dense.zarr", "zarr (dense)"),
        ("raw", &["--counts", "raw"], "v3_raw_layers.zarr", "zarr (csr)"),
        ("layer", &["--counts", "layer:counts"], "v3_raw_layers.zarr", "zarr (csr)"),
    ];
    for (atlas, extra, file, format) in cases {
        if !v.join(file).exists() {
            missing(&format!("{file} (this anndata cannot write it)"));
            continue;
        }
        let s = ingest(tmp.path(), atlas, &[&ids[..], &obs[..], extra].concat(), &v.join(file));
        assert_eq!(atlas_tokens(tmp.path(), atlas), reference, "{atlas} ({file}) differs from the h5ad");
        let m = corrflow::corpus::AtlasManifest::load(&corrflow::corpus::atlas_dir(tmp.path(), atlas)).unwrap();
        assert_eq!(m.inputs[0].format, *format, "{s}");
    }
    // Loom: genes by Geneformer's `ensembl_id` row attribute without any flag.
    ingest(tmp.path(), "loom", &[], &v.join("cells.loom"));
    assert_eq!(atlas_tokens(tmp.path(), "loom"), reference, "loom differs from the h5ad");
    // obs columns (categorical, float, int, bool) are the h5ad's, type for type.
    let Some(py) = python() else { return };
    let script = r#"
import sys, pyarrow.parquet as pq
d = sys.argv[1]
# Every column but `atlas`, which names the atlas.
read = lambda atlas: pq.read_table(f"{d}/atlases/{atlas}/shard-00000.parquet").drop_columns(["atlas"])
ref = read("h5ad")
for atlas in ["v2", "v3", "v3_csc", "v2_dense"]:
    t = read(atlas)
    assert t.schema == ref.schema, (atlas, t.schema, ref.schema)
    assert t.equals(ref), atlas
print("ok")
"#;
    let o = std::process::Command::new(py).args(["-c", script, tmp.path().to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn obs_columns_in_every_zarr_encoding_are_read() {
    let Some((_, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cols = ["--obs-columns", "label,n_int,n_bool,cell_type", "--gene-column", "gene_ids"];
    ingest(tmp.path(), "h5", &[&cols[..], &["--ignore-filter-pass"]].concat(), &v.join("filter_pass.h5ad"));
    ingest(tmp.path(), "z", &cols, &v.join("v3.zarr"));
    ingest(tmp.path(), "z2", &cols, &v.join("v2.zarr"));
    let Some(py) = python() else { return };
    let script = r#"
import sys, pyarrow.parquet as pq
d = sys.argv[1]
# Every column but `atlas`, which names the atlas.
read = lambda atlas: pq.read_table(f"{d}/atlases/{atlas}/shard-00000.parquet").drop_columns(["atlas"])
h5 = read("h5")
for atlas in ["z", "z2"]:
    t = read(atlas)
    assert str(t.schema.field("n_int").type) == "int64" and str(t.schema.field("n_bool").type) == "bool", t.schema
    assert t.schema == h5.schema and t.equals(h5), atlas
    n_int, n_bool = t["n_int"].to_pylist(), t["n_bool"].to_pylist()
    assert len(n_int) == 64
    for i in range(len(n_int)):
        assert n_int[i] == (None if i % 5 == 0 else i), (atlas, i, n_int[i])
        assert n_bool[i] == (None if i % 7 == 0 else i % 2 == 0), (atlas, i, n_bool[i])
    assert t["label"].to_pylist() == t["cell_type"].to_pylist()
print("ok")
"#;
    let o = std::process::Command::new(py).args(["-c", script, tmp.path().to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn cells_failing_filter_pass_are_left_out_unless_told_otherwise() {
    let Some((good, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    ingest(tmp.path(), "all", &["--gene-column", "gene_ids"], &good.join("csr.h5ad"));
    let all = atlas_tokens(tmp.path(), "all");
    // filter_pass = i % 2: the odd cells pass.
    let odd: Vec<_> = all.iter().skip(1).step_by(2).cloned().collect();
    assert_eq!(odd.len(), 32);
    for (atlas, extra, file) in [
        ("h5ad", &["--gene-column", "gene_ids"][..], "filter_pass.h5ad"),
        ("zarr", &["--gene-column", "gene_ids"][..], "v3_filter_pass.zarr"),
        ("loom", &[][..], "filter_pass.loom"),
    ] {
        let s = ingest(tmp.path(), atlas, extra, &v.join(file));
        assert_eq!(atlas_tokens(tmp.path(), atlas), odd, "{atlas}: {s}");
        let every = format!("{atlas}_every");
        ingest(tmp.path(), &every, &[extra, &["--ignore-filter-pass"]].concat(), &v.join(file));
        assert_eq!(atlas_tokens(tmp.path(), &every), all, "{atlas} --ignore-filter-pass");
    }
    // vocab build counts the same cells as ingest: the loom's vocabulary is the h5ad's, and
    // reading every cell gives other medians.
    let vocab = |name: &str, extra: &[&str], file: &Path| {
        let out = tmp.path().join(name);
        let mut args = vec!["vocab", "build", "--json", "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.push(file.to_str().unwrap());
        ok_json(&corrflow(&args));
        ["token_dictionary.tsv", "gene_median_dictionary.tsv"].map(|f| std::fs::read_to_string(out.join(f)).unwrap())
    };
    let h = vocab("vh", &["--gene-column", "gene_ids"], &v.join("filter_pass.h5ad"));
    let l = vocab("vl", &[], &v.join("filter_pass.loom"));
    let z = vocab("vz", &["--gene-column", "gene_ids"], &v.join("v3_filter_pass.zarr"));
    assert!(h == l && h == z, "vocab build of the loom or zarr differs from the h5ad's");
    let every = vocab("ve", &["--gene-column", "gene_ids", "--ignore-filter-pass"], &v.join("filter_pass.h5ad"));
    assert_ne!(h[1], every[1], "--ignore-filter-pass gave the medians of the filtered cells");
}

#[test]
fn zarr_and_loom_errors_name_what_is_wrong() {
    let Some((_, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    let run = |extra: &[&str], file: &Path| {
        let (c, f) = (corpus.display().to_string(), file.display().to_string());
        let mut args = vec!["ingest", "--atlas", "x", "--out", c.as_str()];
        args.extend_from_slice(extra);
        args.push(f.as_str());
        let o = corrflow(&args);
        assert!(!o.status.success(), "{f} was accepted");
        stderr(&o)
    };
    let e = run(&[], &v.join("plain.zarr"));
    assert!(e.contains("plain.zarr") && e.contains("not an AnnData one") && !e.contains("matrix.mtx"), "{e}");
    let e = run(&["--counts", "layer:spliced"], &v.join("v3_raw_layers.zarr"));
    assert!(e.contains("no layer 'spliced' (layers: counts)"), "{e}");
    let e = run(&["--counts", "raw"], &v.join("v3.zarr"));
    assert!(e.contains("--counts raw: the store has no raw/X"), "{e}");
    let e = run(&["--gene-column", "nope"], &v.join("cells.loom"));
    assert!(e.contains("--gene-column nope: no such row attribute") && e.contains("ensembl_id"), "{e}");
    let e = run(&["--counts", "raw"], &v.join("cells.loom"));
    assert!(e.contains("a loom file has no raw matrix"), "{e}");
    // A directory of neither kind lists what corrflow reads.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = run(&[], &empty);
    assert!(e.contains("AnnData zarr") && e.contains("MatrixMarket") && e.contains("loom"), "{e}");
}
